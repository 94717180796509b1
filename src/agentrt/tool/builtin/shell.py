"""Shell commands in the workspace: ``toolkit.register(ShellTool("/path/to/workspace"))``.

The tool ``run_command(command, timeout=None)`` runs ``bash -c command`` (``sh`` when bash is
missing) in the workspace root, in a new session (its own process group), with stdin closed and
stderr merged into stdout:

- **Timeout**: the call's `timeout` (default the tool's, capped at ``max_timeout``). When it runs out,
  or the call is cancelled (an agent interrupt), the whole process group gets SIGTERM, then SIGKILL
  after ``kill_grace`` seconds, so ``sleep 30 & sleep 30`` leaves nothing behind. Processes the
  command leaves running in the background when it exits are killed too.
- **Output cap**: at most ``max_output`` bytes are returned: the head and the tail, with a marker
  saying how much was cut in between. The exit code (or the signal) is reported.
- **Streaming**: inside an agent whose events are streamed, output is sent as it comes as
  `agentrt.tool.emit.ToolOutputDelta` events (also capped at ``max_output``).
- **Environment**: a minimal one by default (``PATH``, ``HOME``, ``LANG``, ``LC_*``, ``TERM`` ... and
  ``PAGER=cat``), so API keys in the agent's environment do not leak into commands; pass
  ``env={...}`` to add variables, ``inherit_env=True`` to pass the whole environment.

Permissions: the tool is destructive, so every call asks for approval by default (allow rules the
user accepts, e.g. ``run_command`` with ``{"command": "pytest*"}``, then apply). Its
``check_permission`` denies commands that name protected paths (``cat ~/.ssh/id_rsa``,
``cat .env``, ``cp .git/config x``, ``python -c "open('.env')"``), in every mode including
``BYPASS``: tokens are scanned with `shlex`, ``~`` and ``$HOME`` expanded, globs expanded in the
workspace, and each path-like word checked with `agentrt.permission.refuse_dangerous_path`. This
is a best-effort guard, not a sandbox: a program may still read protected files it is not told
about (``grep -r KEY .`` reads ``.env``), and obfuscated commands get through. Approval is the gate;
run untrusted agents in a container.

With ``auto_allow_read_only=True`` the check also *allows* (without asking) simple read-only
commands: one program from `READ_ONLY_COMMANDS` (``ls``, ``pwd``, ``cat``, ``head``, ``tail``, ``wc``,
``grep`` without recursion ...) or ``git status|diff|log|show``, no shell operators, globs or
variables, every argument inside the workspace and not protected. Off by default: git runs hooks
from the repository configuration (``core.fsmonitor``, diff drivers), so enable it only for
repositories you trust.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import functools
import glob as _glob
import os
import re
import shlex
import shutil
import signal
from collections import deque
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import Field

from agentrt.context import RuntimeContext
from agentrt.errors import ToolRetry, UserError
from agentrt.permission import PermissionDecision, is_dangerous_path, refuse_dangerous_path
from agentrt.tool.base import tool
from agentrt.tool.emit import ToolEmitter

__all__ = [
    "DEFAULT_MAX_OUTPUT",
    "DEFAULT_TIMEOUT",
    "READ_ONLY_COMMANDS",
    "READ_ONLY_GIT_COMMANDS",
    "ShellTool",
    "dangerous_references",
    "is_read_only_command",
]

DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_OUTPUT = 64_000
DEFAULT_MAX_TIMEOUT = 600.0
MAX_COMMAND_CHARS = 100_000
READ_ONLY_COMMANDS = frozenset({"ls", "pwd", "cat", "head", "tail", "wc", "stat", "file", "du", "grep", "tree"})
"""Programs ``auto_allow_read_only`` lets run without approval (with arguments inside the workspace)."""
READ_ONLY_GIT_COMMANDS = frozenset({"status", "diff", "log", "show"})
"""Git subcommands ``auto_allow_read_only`` lets run without approval."""

_SAFE_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR")
_FIXED_ENV = {"PAGER": "cat", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0"}
_READ_CHUNK = 65_536
_EXIT_POLL = 0.05
_REAP_SECONDS = 5.0
_GLOB_CHARS = re.compile(r"[*?\[]")
_SPLIT_WORDS = re.compile(r"[\s'\"`=:,;()<>|&{}\[\]]+")
_SHELL_SYNTAX = re.compile(r"[;&|<>`$(){}\n\r*?\[\]~!#\\]")
_MAX_CANDIDATES = 5000
_MAX_GLOB_MATCHES = 200
_RECURSIVE_GREP = re.compile(r"^-[A-Za-z]*[rR]|^--recursive$|^--dereference-recursive$|^--directories")
_GIT_WRITE_OPTIONS = ("--output", "--ext-diff", "--textconv", "--exec", "-o")


class ShellTool:
    """The ``run_command`` tool for workspace `root` (see the module docstring).

    Args:
        root: The working directory of every command; it must exist.
        timeout: Default seconds per command.
        max_output: Most bytes of output returned (and streamed).
        env: Extra environment variables for commands.
        inherit_env: Start from the agent's whole environment instead of a minimal one.
        max_timeout: Largest `timeout` the model may ask for.
        kill_grace: Seconds between SIGTERM and SIGKILL when a command is stopped.
        shell: The shell to run commands with (default bash, else sh).
        auto_allow_read_only: Let simple read-only commands run without approval (see above).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        max_output: int = DEFAULT_MAX_OUTPUT,
        env: Mapping[str, str] | None = None,
        inherit_env: bool = False,
        max_timeout: float = DEFAULT_MAX_TIMEOUT,
        kill_grace: float = 1.0,
        shell: str | None = None,
        auto_allow_read_only: bool = False,
    ) -> None:
        raw = os.fspath(root)
        real = os.path.realpath(raw)
        if not os.path.isdir(real):
            raise UserError(f"ShellTool root {raw!r} is not an existing directory")
        if is_dangerous_path(real):
            raise UserError(f"ShellTool root {raw!r} is a protected directory (secrets or repository internals)")
        if timeout <= 0 or max_timeout <= 0 or max_output < 100 or kill_grace < 0:
            raise UserError("ShellTool needs timeout > 0, max_timeout > 0, max_output >= 100 and kill_grace >= 0")
        self.root = real
        self.timeout = min(timeout, max_timeout)
        self.max_timeout = max_timeout
        self.max_output = max_output
        self.kill_grace = kill_grace
        self.auto_allow_read_only = auto_allow_read_only
        self.shell = shell or shutil.which("bash") or "/bin/sh"
        base = dict(os.environ) if inherit_env else _minimal_env()
        self.env: dict[str, str] = {**base, **_FIXED_ENV, **(dict(env) if env else {}), "PWD": real}
        # The check needs this instance; the executor's own timeout is only a safety net behind ours.
        bound = self.run_command
        self.run_command = bound.copy(
            check_permission=self.check_permission, timeout=max_timeout + kill_grace + 10, workspace=real
        )

    def __repr__(self) -> str:
        return f"ShellTool({self.root!r})"

    @tool(destructive=True, timeout=None)
    async def run_command(self, command: str, timeout: Annotated[float, Field(gt=0)] | None = None) -> str:
        """Run a shell command (bash) in the workspace directory and return its output and exit code.

        stdout and stderr are merged; long output is cut in the middle. Commands cannot read input:
        use non-interactive flags (e.g. `-y`). Background processes are killed when the command ends.

        Args:
            command: The command line, e.g. "pytest -q tests/unit" or "ls -la src".
            timeout: Seconds before the command and its child processes are killed; omit for the default.
        """
        return await self.run(command, timeout)

    async def run(self, command: str, timeout: float | None = None, *, emitter: ToolEmitter | None = None) -> str:
        """Run `command` as the tool does (refusals and timeouts raise `ToolRetry`) and return the result text.

        Args:
            command: The command line.
            timeout: Seconds before the process group is killed (default `self.timeout`, capped at `max_timeout`).
            emitter: Where to stream output; default the running agent's stream (if any).
        """
        if not command.strip():
            raise ToolRetry("The command is empty.")
        if len(command) > MAX_COMMAND_CHARS or "\x00" in command:
            raise ToolRetry(f"The command must be at most {MAX_COMMAND_CHARS} characters, without NUL bytes.")
        refusal = self._refusal(command)
        if refusal is not None:  # defense in depth: the permission engine already denies these
            raise ToolRetry(f"Permission denied: {refusal}.")
        limit = min(timeout or self.timeout, self.max_timeout)
        return await self._run(command, limit, emitter if emitter is not None else ToolEmitter.current("run_command"))

    # -- permissions ------------------------------------------------------------------------------------
    def check_permission(self, args: Mapping[str, Any], ctx: RuntimeContext) -> PermissionDecision | None:
        """Deny commands naming protected paths; allow simple read-only ones if enabled; else no opinion.

        No opinion means the engine applies rules and the mode: a destructive tool asks by default,
        and allow rules the user accepted do apply (returning ASK here would shadow them).
        """
        command = args.get("command")
        if not isinstance(command, str):
            return None
        refusal = self._refusal(command)
        if refusal is not None:
            return PermissionDecision.deny(refusal)
        if self.auto_allow_read_only and is_read_only_command(command, self.root):
            return PermissionDecision.allow("read-only command inside the workspace")
        return None

    def _refusal(self, command: str) -> str | None:
        if "\x00" in command:
            return "the command contains a NUL byte"
        hits = dangerous_references(command, self.root)
        if hits:
            shown = ", ".join(repr(h) for h in hits[:5])
            return f"the command touches protected paths (secrets or repository internals): {shown}"
        return None

    # -- running ----------------------------------------------------------------------------------------
    async def _run(self, command: str, limit: float, emitter: ToolEmitter) -> str:
        proc = await asyncio.create_subprocess_exec(
            self.shell,
            "-c",
            command,
            cwd=self.root,
            env=self.env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        assert proc.stdout is not None
        capture = _Capture(self.max_output)
        streamer = _Streamer(emitter, self.max_output) if emitter.active else None
        stdout = proc.stdout

        async def pump() -> None:
            while True:
                chunk = await stdout.read(_READ_CHUNK)
                if not chunk:
                    break
                capture.add(chunk)
                if streamer is not None:
                    await streamer.feed(chunk)

        reader = asyncio.ensure_future(pump())
        timed_out = False
        try:
            async with asyncio.timeout(limit):
                # `proc.wait()` also waits for the pipe to close, which a background child may hold open:
                # watch for the shell's own exit instead.
                while not reader.done() and proc.returncode is None:
                    await asyncio.wait({reader}, timeout=_EXIT_POLL)
                if proc.returncode is not None:
                    # The shell is done; what it left in the background goes too (and releases the pipe).
                    _signal_group(proc.pid, signal.SIGKILL)
                await asyncio.shield(reader)
                await proc.wait()
                _signal_group(proc.pid, signal.SIGKILL)
        except TimeoutError:
            timed_out = True
            await self._stop(proc, reader)
        except BaseException:  # cancelled (an interrupt, the executor's timeout): nothing may outlive the call
            # Shielded: a second cancellation must not leave the group running half-stopped.
            await asyncio.shield(self._stop(proc, reader))
            raise
        finally:
            if not reader.done():
                reader.cancel()
        if streamer is not None:
            await streamer.close()
        output = capture.text()
        if timed_out:
            raise ToolRetry(
                f"{output}\n[timed out after {limit:g} s: the command and its child processes were killed]".lstrip()
            )
        return f"{output}\n{_status(proc.returncode)}" if output else f"(no output)\n{_status(proc.returncode)}"

    async def _stop(self, proc: asyncio.subprocess.Process, reader: asyncio.Future[None]) -> None:
        """SIGTERM the process group, wait `kill_grace`, SIGKILL whatever is left, then reap and drain."""
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            await _wait_exit(proc, self.kill_grace)
        finally:
            _signal_group(proc.pid, signal.SIGKILL)
        await _wait_exit(proc, _REAP_SECONDS)
        # Read to the end so the pipe closes and the transport finishes (the output is kept, capped).
        done, _ = await asyncio.wait({reader}, timeout=_REAP_SECONDS)
        if done and proc.returncode is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), _REAP_SECONDS)


async def _wait_exit(proc: asyncio.subprocess.Process, seconds: float) -> None:
    """Wait up to `seconds` for the shell process itself to exit (not for its pipes to close)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    # Polling: asyncio offers no wait on the exit alone (`Process.wait()` also waits for the pipes).
    while proc.returncode is None and loop.time() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(min(_EXIT_POLL, max(0.0, deadline - loop.time())))


def _minimal_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in _SAFE_ENV or k.startswith("LC_")}
    env.setdefault("PATH", os.defpath)
    env.setdefault("LANG", "C.UTF-8")
    return env


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _status(code: int | None) -> str:
    if code is None:
        return "[exit code unknown]"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"[killed by signal {name}]"
    return f"[exit code {code}]"


class _Capture:
    """Keeps the first and last `limit / 2` bytes of the output and counts what falls in between."""

    def __init__(self, limit: int) -> None:
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        self.tail.append(chunk)
        self.tail_size += len(chunk)
        while self.tail_size > self.tail_limit:
            first = self.tail[0]
            excess = self.tail_size - self.tail_limit
            if len(first) <= excess:
                self.tail.popleft()
                self.tail_size -= len(first)
                self.dropped += len(first)
            else:
                self.tail[0] = first[excess:]
                self.tail_size -= excess
                self.dropped += excess

    def text(self) -> str:
        head = bytes(self.head).decode("utf-8", errors="replace")
        tail = b"".join(self.tail).decode("utf-8", errors="replace")
        if self.dropped:
            return (
                f"{head}\n[... {self.dropped} bytes of output cut; showing the first {len(self.head)} and "
                f"the last {self.tail_size} bytes ...]\n{tail}"
            ).rstrip("\n")
        return (head + tail).rstrip("\n")


class _Streamer:
    """Sends complete lines of output to the emitter, up to `limit` characters in all."""

    def __init__(self, emitter: ToolEmitter, limit: int) -> None:
        self.emitter = emitter
        self.limit = limit
        self.sent = 0
        self.pending = ""
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.capped = False

    async def feed(self, chunk: bytes) -> None:
        if self.capped:
            return
        self.pending += self.decoder.decode(chunk)
        cut = self.pending.rfind("\n")
        if cut >= 0:
            lines, self.pending = self.pending[: cut + 1], self.pending[cut + 1 :]
            await self._send(lines)
        elif len(self.pending) > _READ_CHUNK:  # a very long line: send what we have
            lines, self.pending = self.pending, ""
            await self._send(lines)

    async def close(self) -> None:
        if self.capped:
            return
        self.pending += self.decoder.decode(b"", final=True)
        if self.pending:
            await self._send(self.pending)
            self.pending = ""

    async def _send(self, text: str) -> None:
        room = self.limit - self.sent
        if len(text) > room:
            text = text[:room] + "\n[... streamed output stopped at the size limit; the result has the tail]\n"
            self.capped = True
        self.sent += len(text)
        await self.emitter.emit(text)


# -- command analysis ---------------------------------------------------------------------------------
def _tokens(command: str) -> list[str]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:  # unbalanced quotes: fall back to plain words
        return command.split()


@functools.lru_cache(maxsize=1)
def _home() -> str:
    return os.path.expanduser("~")


def _expand(word: str) -> str:
    if word.startswith("~"):
        word = os.path.expanduser(word)
    for var in ("${HOME}", "$HOME"):
        if var in word:
            word = word.replace(var, _home())
    return word


def dangerous_references(command: str, root: str) -> list[str]:
    """The words of `command` that name protected paths (see `agentrt.permission.is_dangerous_path`).

    Words are the `shlex` tokens of the command and the pieces of each token split at quotes,
    ``=``, ``:``, commas and shell punctuation. A piece is checked when it looks like a path
    (contains ``/`` or starts with ``.``, ``~`` or ``$``) or names an existing entry of `root`;
    relative pieces are taken from `root`, ``~`` and ``$HOME`` are expanded, and glob pieces are
    expanded in `root` (``cat .e*``).
    """
    hits: list[str] = []
    seen: set[str] = set()
    candidates: list[str] = []
    for token in _tokens(command):
        candidates.append(token)
        candidates.extend(p for p in _SPLIT_WORDS.split(token) if p and p != token)
    for word in candidates[:_MAX_CANDIDATES]:
        if word in seen:
            continue
        seen.add(word)
        if _word_is_dangerous(word, root):
            hits.append(word)
    return hits


def _word_is_dangerous(word: str, root: str) -> bool:
    if word.startswith("-") and "=" not in word:
        return False
    expanded = _expand(word)
    path_like = "/" in expanded or expanded.startswith((".", "~", "$"))
    full = os.path.normpath(os.path.join(root, expanded))
    if not path_like:
        try:
            path_like = os.path.lexists(full)
        except (OSError, ValueError):
            return False
    if not path_like:
        return False
    if refuse_dangerous_path(full) is not None:
        return True
    if _GLOB_CHARS.search(expanded):
        try:
            matches = _glob.glob(full, include_hidden=True)[:_MAX_GLOB_MATCHES]
        except (OSError, ValueError, re.error):
            return False
        return any(refuse_dangerous_path(m) is not None for m in matches)
    return False


def is_read_only_command(command: str, root: str) -> bool:
    """Whether `command` is a simple read-only command confined to `root` (see the module docstring)."""
    if _SHELL_SYNTAX.search(command):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    if not words:
        return False
    program, args = words[0], words[1:]
    if program == "git":
        if not args or args[0] not in READ_ONLY_GIT_COMMANDS:
            return False
        args = args[1:]
        if any(a.startswith(_GIT_WRITE_OPTIONS) for a in args):
            return False
    elif program not in READ_ONLY_COMMANDS or (program == "grep" and any(_RECURSIVE_GREP.match(a) for a in args)):
        return False
    for arg in args:
        if arg.startswith("-"):
            if "=" in arg:
                return False
            continue
        full = os.path.realpath(os.path.join(root, arg))
        if os.path.commonpath([root, full]) != root or is_dangerous_path(full):
            return False
    return True
