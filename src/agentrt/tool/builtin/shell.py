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
- **Sandbox** (``sandbox="bwrap"``): each command runs under bubblewrap in new namespaces, the system
  read-only, the workspace read-write, no network unless ``network=True``, only its own processes
  visible (`agentrt.tool.builtin.sandbox`). Where bwrap is missing or cannot work, building the tool
  raises `SandboxUnavailableError`, unless ``sandbox_fallback=True`` (a warning, then unsandboxed).
- **Limits**: ``cpu_seconds`` and ``memory_bytes`` per process (``ulimit``), with or without the sandbox.

Permissions: the tool is destructive, so every call asks for approval by default (allow rules the
user accepts, e.g. ``run_command`` with ``{"command": "pytest*"}``, then apply). Its
``check_permission`` denies commands that name protected paths (``cat ~/.ssh/id_rsa``,
``cat .env``, ``cp .git/config x``, ``python -c "open('.env')"``), in every mode including
``BYPASS``: shell words are scanned (quotes removed), ``~`` and ``$HOME`` expanded, globs expanded in the
workspace (bounded, since the check runs on the event loop: a glob too big to expand is refused),
and each path-like word checked with `agentrt.permission.refuse_dangerous_path`. This is a
best-effort guard, not a sandbox: a program may still read protected files it is not told about
(``grep -r KEY .`` reads ``.env``), and obfuscated commands get through. Approval is the gate;
run untrusted agents in a container, or at least with ``sandbox="bwrap"``.

With ``auto_allow_read_only=True`` the check also *allows* (without asking) simple read-only
commands, judged by an allow-list: one program from `READ_ONLY_COMMANDS` (``ls``, ``pwd``, ``cat``,
``head``, ``tail``, ``wc``, ``stat``, ``file``, ``du``, ``grep``, ``tree``) or ``git status|diff|log|show``,
with no shell syntax at all (operators, redirections, globs, variables, ``~``), only options known to
be safe for that program (spelled in full: ``--recur`` is unknown), and operands that are inside the
workspace, not protected, and regular files or directories (a FIFO would block). So ``grep -r``,
``grep -d recurse``, ``tail -f``/``-F``/``--follow``, ``file -f``/``-z``, ``wc --files0-from``,
``ls -L``, ``du -L``, ``tree -o`` and git's ``--output``, ``--ext-diff``, ``--textconv`` and global
options (``-c``, ``--git-dir``, ``--work-tree``, ``--exec-path``) all ask. Recursion (``ls -R``,
``du``, ``tree``) is allowed only when the tree below each operand holds no protected path (checked
in bounded time; a tree too big to check asks). ``git diff``, ``git show`` and ``git log -p``
print file contents, also of protected files the repository tracks, so they are read-only only
with a names-only format (``--stat``, ``--name-only`` ...) or when limited to named regular files
(``git diff -- src/app.py``); ``git show`` only of ``HEAD``, ``HEAD~2``, ``@^`` ... (a tag or an
object id may name a file's content, which it prints whatever the options). Off by default: git runs
programs named by the repository configuration (``core.fsmonitor``, diff drivers), so enable it only
for repositories you trust.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import dataclasses
import fnmatch
import functools
import os
import re
import shlex
import shutil
import signal
import stat
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any

from pydantic import Field

from agentrt.context import RuntimeContext
from agentrt.errors import ToolRetry, UserError
from agentrt.permission import PermissionDecision, is_dangerous_path, refuse_dangerous_path, workspace_root
from agentrt.tool.base import tool
from agentrt.tool.builtin.sandbox import (
    BwrapSandbox,
    ResourceLimits,
    SandboxKind,
    SandboxUnavailableError,
    open_sandbox,
)
from agentrt.tool.emit import ToolEmitter

__all__ = [
    "DEFAULT_MAX_OUTPUT",
    "DEFAULT_TIMEOUT",
    "READ_ONLY_COMMANDS",
    "READ_ONLY_GIT_COMMANDS",
    "SandboxUnavailableError",
    "ShellTool",
    "dangerous_references",
    "is_read_only_command",
]

DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_OUTPUT = 64_000
DEFAULT_MAX_TIMEOUT = 600.0
MAX_COMMAND_CHARS = 100_000

_SAFE_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR")
_FIXED_ENV = {"PAGER": "cat", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0"}
_READ_CHUNK = 65_536
_EXIT_POLL = 0.05
_REAP_SECONDS = 5.0
_GLOB_CHARS = re.compile(r"[*?\[]")
_SPLIT_WORDS = re.compile(r"[\s'\"`=:,;()<>|&{}\[\]]+")
_SHELL_SYNTAX = re.compile(r"[;&|<>`$(){}\n\r*?\[\]~!#\\]")
_CHECK_BUDGET = 60_000
"""What checking one command may cost (on the event loop): 1 a word or a directory entry globbed,
`_LOOKUP_COST` a lookup, `_CHECK_COST` a path check (about 1 microsecond a unit); and `_CHECK_SECONDS`."""
_LOOKUP_COST = 10
_CHECK_SECONDS = 0.08
_CHECK_COST = 40


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
        sandbox: ``"bwrap"`` to run every command in a bubblewrap sandbox (see
            `agentrt.tool.builtin.sandbox`); None (default) runs them as the agent's own processes.
        sandbox_fallback: When the sandbox cannot work here, log a warning once and run unsandboxed
            instead of raising `SandboxUnavailableError`.
        network: Let sandboxed commands use the network (without a sandbox they always can).
        cpu_seconds: CPU seconds each process of a command may use before it is killed.
        memory_bytes: Address space each process of a command may map; bigger allocations fail.
        read_only_paths: More paths to mount read-only in the sandbox (a toolchain outside ``/usr``).
        bwrap: The bwrap program (default: ``bwrap`` on PATH).
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
        sandbox: SandboxKind | None = None,
        sandbox_fallback: bool = False,
        network: bool = False,
        cpu_seconds: int | None = None,
        memory_bytes: int | None = None,
        read_only_paths: Iterable[str | os.PathLike[str]] = (),
        bwrap: str | os.PathLike[str] | None = None,
    ) -> None:
        real = workspace_root(root, "ShellTool")
        if timeout <= 0 or max_timeout <= 0 or max_output < 100 or kill_grace < 0:
            raise UserError("ShellTool needs timeout > 0, max_timeout > 0, max_output >= 100 and kill_grace >= 0")
        self.root = real
        self.timeout = min(timeout, max_timeout)
        self.max_timeout = max_timeout
        self.max_output = max_output
        self.kill_grace = kill_grace
        self.auto_allow_read_only = auto_allow_read_only
        self.shell = shell or shutil.which("bash") or "/bin/sh"
        self.limits = ResourceLimits(cpu_seconds, memory_bytes)
        self.sandbox: BwrapSandbox | None = open_sandbox(
            sandbox,
            workspace=real,
            shell=self.shell,
            bwrap=bwrap,
            network=network,
            read_only_paths=read_only_paths,
            fallback=sandbox_fallback,
        )
        base = dict(os.environ) if inherit_env else _minimal_env()
        if self.sandbox is not None:
            base = self.sandbox.environment(base)
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
    def _argv(self, command: str) -> list[str]:
        """The program and arguments that run `command`: the shell, under bwrap when sandboxed."""
        argv = self.limits.argv(self.shell, command)
        return self.sandbox.command(argv) if self.sandbox is not None else argv

    async def _run(self, command: str, limit: float, emitter: ToolEmitter) -> str:
        # Sandboxed, the process is bwrap: stopping its group tears down the PID namespace, command and all.
        proc = await asyncio.create_subprocess_exec(
            *self._argv(command),
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
        status = _status(proc.returncode, sandboxed=self.sandbox is not None)
        return f"{output}\n{status}" if output else f"(no output)\n{status}"

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


def _status(code: int | None, *, sandboxed: bool = False) -> str:
    if code is None:
        return "[exit code unknown]"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"[killed by signal {name}]"
    if sandboxed and code > 128:  # bwrap reports a command killed by signal N as exit code 128 + N
        with contextlib.suppress(ValueError):
            return f"[exit code {code}: killed by signal {signal.Signals(code - 128).name}]"
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
_SHELL_WORD = re.compile(r"""(?:[^\s'"\\;&|<>()]+|'[^']*'|"(?:[^"\\]|\\.)*"|\\.)+|[;&|<>()]+""", re.DOTALL)
_WORD_PART = re.compile(r"""'([^']*)'|"((?:[^"\\]|\\.)*)"|\\(.)|([^'"\\]+)""", re.DOTALL)
_QUOTED_ESCAPE = re.compile(r"""\\([\\"$`\n])""")


def _tokens(command: str) -> list[str]:
    """The shell words of `command` with quotes and escapes removed (``'.e'nv`` is ``.env``), operators apart.

    Regular expressions rather than `shlex`, which is some 50 times slower: this runs on the event
    loop, and a command may carry a long here-document. After an unterminated quote the rest of
    the command is read as plain words too.
    """
    words: list[str] = []
    for match in _SHELL_WORD.finditer(command):
        word = match.group()
        if "'" in word or '"' in word or "\\" in word:
            word = "".join(_unquote(part) for part in _WORD_PART.finditer(word))
        words.append(word)
    if command.count("'") % 2 or command.count('"') % 2:
        words.extend(command.split())
    return words


def _unquote(part: re.Match[str]) -> str:
    single, double, escaped, plain = part.groups()
    if single is not None:
        return single
    if double is not None:
        return _QUOTED_ESCAPE.sub(r"\1", double)
    return escaped if escaped is not None else plain


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

    Words are the shell tokens of the command (quotes removed) and the pieces of each token split
    at quotes, ``=``, ``:``, commas and shell punctuation. A piece is checked when it looks like a
    path (contains ``/`` or starts with ``.``, ``~`` or ``$``) or names an existing entry of `root`;
    relative pieces are taken from `root`, ``~`` and ``$HOME`` are expanded, and glob pieces are
    expanded in `root` (``cat .e*``). This runs on the event loop (in the permission check), so the
    work is bounded: a command with more paths or a bigger glob expansion than can be checked
    quickly counts as touching a protected path (it is refused, not guessed at).
    """
    hits: list[str] = []
    candidates: dict[str, None] = {}
    for token in dict.fromkeys(_tokens(command)):
        candidates[token] = None
        if _SPLIT_WORDS.search(token):
            candidates.update(dict.fromkeys(p for p in _SPLIT_WORDS.split(token) if p))
    try:
        names = frozenset(os.listdir(root))
    except OSError:
        names = frozenset()
    budget = _CheckBudget()
    for word in candidates:  # every word: one left unchecked could be the one naming a secret
        budget.spend(1)
        if _word_is_dangerous(word, root, names, budget):
            hits.append(word)
        if budget.spent:
            hits.append("(the rest of the command: too many paths to check)")
            break
    return hits


def _word_is_dangerous(word: str, root: str, names: frozenset[str], budget: _CheckBudget) -> bool:
    if word.startswith("-") and "=" not in word:
        return False
    expanded = _expand(word)
    if not ("/" in expanded or expanded.startswith((".", "~", "$")) or expanded in names):
        return False
    budget.spend(_CHECK_COST)
    try:
        full = os.path.normpath(os.path.join(root, expanded))
        if refuse_dangerous_path(full) is not None:
            return True
    except (OSError, ValueError):
        return False
    if _GLOB_CHARS.search(expanded):
        return _glob_is_dangerous(full, budget)
    return False


class _CheckBudget:
    """What checking one command may still cost: work units and time (it runs on the event loop).

    Time is this thread's CPU time: on a busy machine the wall clock also counts the time the thread
    was not running, which would refuse a command that is safe only because the machine is loaded.
    """

    __slots__ = ("deadline", "spent", "units")

    def __init__(self) -> None:
        self.units = _CHECK_BUDGET
        self.deadline = time.thread_time() + _CHECK_SECONDS
        self.spent = False

    def spend(self, units: int) -> bool:
        """Take `units`; True once the budget is spent (the caller then fails closed)."""
        self.units -= units
        if self.units < 0 or time.thread_time() > self.deadline:
            self.spent = True
        return self.spent


def _glob_is_dangerous(pattern: str, budget: _CheckBudget) -> bool:
    """Whether glob `pattern` (absolute) matches a protected path, hidden files included, like `glob.glob`.

    Expanded segment by segment with `os.scandir`; `budget` (shared by the whole command) keeps it
    short on a huge tree, and running out of it counts as a match (fail closed).
    """
    parts = pattern.split(os.sep)
    first = next(i for i, part in enumerate(parts) if _GLOB_CHARS.search(part))
    current = [os.sep.join(parts[:first]) or os.sep]
    for segment in parts[first:]:
        found: list[str] = []
        matches = re.compile(fnmatch.translate(segment)).match if _GLOB_CHARS.search(segment) else None
        for directory in current:
            if budget.spend(_LOOKUP_COST):
                return True
            if matches is None:
                candidate = os.path.join(directory, segment)
                if os.path.lexists(candidate):
                    found.append(candidate)
                continue
            try:
                with os.scandir(directory) as it:
                    for entry in it:
                        if budget.spend(1):
                            return True
                        if matches(entry.name) is not None:
                            found.append(entry.path)
            except OSError:
                continue
        current = found
        if not current:
            return False
    return any(budget.spend(_CHECK_COST) or refuse_dangerous_path(match) is not None for match in current)


def is_read_only_command(command: str, root: str) -> bool:
    """Whether `command` is a simple read-only command confined to `root` (see the module docstring).

    An allow-list: the program must be one of `READ_ONLY_COMMANDS` (or ``git`` with a subcommand of
    `READ_ONLY_GIT_COMMANDS`) and every option must be one known to be safe for it; anything else
    (an unknown or abbreviated option, recursion into a tree holding a protected path, following a
    file, running a program, writing a file) is not read-only, so the call asks.
    """
    if len(command) > _MAX_READ_ONLY_CHARS or _SHELL_SYNTAX.search(command) or "\x00" in command:
        return False
    try:
        words = shlex.split(command)  # short: checked above
    except ValueError:
        return False
    if not words:
        return False
    program, args = words[0], words[1:]
    if program == "git":
        return _git_is_read_only(args, root)
    spec = _SPECS.get(program)
    if spec is None:
        return False
    parsed = _parse_options(spec, args)
    if parsed is None:
        return False
    options, operands = parsed
    if operands and not spec.operands:
        return False
    if program == "grep" and not any(name in ("e", "regexp") for name, _ in options):
        operands = operands[1:]  # the first operand is the pattern, not a file
    recursive = spec.recursive or any(name in spec.recursive_options for name, _ in options)
    if recursive and not operands:
        operands = ["."]
    return _operands_are_safe(operands, root, recursive=recursive)


# -- the allow-lists ------------------------------------------------------------------------------------------
_Check = Callable[[str], bool]
_Option = tuple[str, str | None]
"""An option's name (or ``NUM`` for ``-5``) and its value, if it takes one."""
_NUMBER = re.compile(r"[+-]?[0-9]+[A-Za-z]{0,3}")
_SIZE = re.compile(r"[0-9]*[A-Za-z]{0,3}")
_DIGITS = re.compile(r"[0-9]+")


def _number(value: str) -> bool:
    return _NUMBER.fullmatch(value) is not None


def _size(value: str) -> bool:
    return bool(value) and _SIZE.fullmatch(value) is not None


def _text(value: str) -> bool:
    """Free text (a pattern, a format): never opened, never run."""
    return True


def _one_of(*choices: str) -> _Check:
    return frozenset(choices).__contains__


_WHEN = _one_of("always", "never", "auto", "yes", "no", "force", "tty", "if-tty", "none")


@dataclasses.dataclass(frozen=True, slots=True)
class _Spec:
    """The options of one program that are safe: they neither recurse, follow, run nor write anything.

    Short options without a value are the letters of `flags`; short options with a value, and long
    options, map to a check of the value. Long options must be spelled in full (GNU abbreviations
    such as ``--recur`` are unknown, so not read-only).
    """

    flags: str = ""
    short_values: Mapping[str, _Check] = dataclasses.field(default_factory=dict)
    long_flags: frozenset[str] = frozenset()
    long_values: Mapping[str, _Check] = dataclasses.field(default_factory=dict)
    """Long options with a value: ``--name=value`` or ``--name value``."""
    long_optional: Mapping[str, _Check] = dataclasses.field(default_factory=dict)
    """Long options with an optional value, given only as ``--name=value``."""
    numbers: bool = False
    """``-NUM`` (``head -5``, ``grep -3``) is allowed: digits only, so ``tail -5f`` is not."""
    operands: bool = True
    recursive: bool = False
    """Recurses into directory operands by itself (``du``, ``tree``)."""
    recursive_options: frozenset[str] = frozenset()
    """Options that make it recurse (``ls -R``)."""


def _longs(text: str) -> frozenset[str]:
    return frozenset(text.split())


_HEAD_TAIL = _Spec(
    flags="qvz",
    short_values={"c": _number, "n": _number},
    long_flags=_longs("quiet silent verbose zero-terminated"),
    long_values={"bytes": _number, "lines": _number},
    numbers=True,
)  # tail: no -f/-F/--follow/--retry/--pid (they wait for more data)

_SPECS: dict[str, _Spec] = {
    "pwd": _Spec(flags="LP", operands=False),
    "cat": _Spec(
        flags="AbeEnstTuv",
        long_flags=_longs("show-all number-nonblank show-ends number squeeze-blank show-tabs show-nonprinting"),
    ),
    "head": _HEAD_TAIL,
    "tail": _HEAD_TAIL,
    "wc": _Spec(flags="clmwL", long_flags=_longs("bytes chars lines words max-line-length")),  # no --files0-from
    "stat": _Spec(
        flags="Lft",
        short_values={"c": _text},
        long_flags=_longs("dereference file-system terse"),
        long_values={"format": _text, "printf": _text},
    ),
    # No -z/-Z (decompressors), -f (names from a file), -m/-C (magic files: read or written), -s (devices).
    "file": _Spec(
        flags="bikLhNE0",
        long_flags=_longs(
            "brief mime mime-type mime-encoding keep-going no-pad dereference no-dereference print0 extension"
        ),
    ),
    # du recurses by default; no -L/--dereference (follows links out of the tree), no --files0-from/-X.
    "du": _Spec(
        flags="0abcDhHklmPsSx",
        short_values={"d": _number, "t": _number, "B": _size},
        long_flags=_longs(
            "all apparent-size bytes total human-readable si summarize separate-dirs one-file-system "
            "count-links null no-dereference dereference-args inodes"
        ),
        long_values={"max-depth": _number, "threshold": _number, "block-size": _size, "exclude": _text},
        recursive=True,
    ),
    # tree recurses by default; no -l (follows links), -R/-o (write files), --fromfile/--gitfile/--infofile.
    "tree": _Spec(
        flags="adfFiqNQpugshDvtcrUCnASxJX",
        short_values={"L": _number, "P": _text, "I": _text},
        long_flags=_longs("noreport dirsfirst filesfirst du prune inodes device ignore-case matchdirs si"),
        long_values={"filelimit": _number, "charset": _text, "sort": _text, "timefmt": _text},
        recursive=True,
    ),
    # ls: no -L/--dereference (with -R it would walk through links out of the tree).
    "ls": _Spec(
        flags="aAbBcCdDfFgGhHiklmnNopqQrRsStuUvxXZ1",
        short_values={"I": _text, "w": _number, "T": _number},
        long_flags=_longs(
            "all almost-all author escape ignore-backups directory dired file-type full-time "
            "group-directories-first no-group human-readable si dereference-command-line "
            "dereference-command-line-symlink-to-dir hide-control-chars show-control-chars inode kibibytes "
            "literal numeric-uid-gid quote-name recursive reverse size context"
        ),
        long_values={
            "hide": _text,
            "ignore": _text,
            "sort": _one_of("none", "size", "time", "version", "extension", "width", "name"),
            "time": _text,
            "time-style": _text,
            "format": _text,
            "width": _number,
            "tabsize": _number,
            "block-size": _size,
            "quoting-style": _text,
            "indicator-style": _text,
        },
        long_optional={"color": _WHEN, "colour": _WHEN, "classify": _WHEN, "hyperlink": _WHEN},
        recursive_options=frozenset({"R", "recursive"}),
    ),
    # grep reads only the files it is given: no -r/-R/--recursive/-d recurse, no -f/--file, no --include.
    "grep": _Spec(
        flags="EFGPiyvwxcLloqsbHhnTZzaIU",
        short_values={
            "e": _text,
            "m": _number,
            "A": _number,
            "B": _number,
            "C": _number,
            "d": _one_of("read", "skip"),
            "D": _one_of("read", "skip"),
        },
        long_flags=_longs(
            "extended-regexp fixed-strings basic-regexp perl-regexp ignore-case no-ignore-case invert-match "
            "word-regexp line-regexp count files-with-matches files-without-match only-matching quiet silent "
            "no-messages byte-offset with-filename no-filename line-number initial-tab null null-data text "
            "line-buffered"
        ),
        long_values={
            "regexp": _text,
            "max-count": _number,
            "after-context": _number,
            "before-context": _number,
            "context": _number,
            "directories": _one_of("read", "skip"),
            "devices": _one_of("read", "skip"),
            "binary-files": _one_of("binary", "text", "without-match"),
            "label": _text,
        },
        long_optional={"color": _WHEN, "colour": _WHEN},
        numbers=True,
    ),
}
READ_ONLY_COMMANDS = frozenset(_SPECS)
"""Programs ``auto_allow_read_only`` lets run without approval (with safe options and operands in the workspace)."""

# git: no global options at all (-c, -C, --git-dir, --work-tree, --exec-path, --paginate ... before the subcommand).
# Never --output, --ext-diff, --textconv, -O (an order file), --word-diff-regex or pickaxe options: unknown, so asking.
_GIT_DIFF_FLAGS = (
    "stat numstat shortstat name-only name-status summary patch no-patch no-ext-diff no-textconv no-color "
    "minimal patience histogram ignore-all-space ignore-space-change ignore-space-at-eol ignore-blank-lines "
    "ignore-cr-at-eol no-renames full-index binary abbrev find-renames find-copies irreversible-delete "
    "text exit-code quiet"
)
_GIT_DIFF_VALUES: dict[str, _Check] = {
    "unified": _number,
    "diff-algorithm": _one_of("default", "myers", "minimal", "patience", "histogram"),
}
_GIT_OPTIONAL: dict[str, _Check] = {"color": _WHEN, "word-diff": _one_of("color", "plain", "porcelain", "none")}
_GIT_SPECS: dict[str, _Spec] = {
    # status prints names only; no -v (it prints the staged diff).
    "status": _Spec(
        flags="sbz",
        short_values={"u": _one_of("no", "normal", "all")},
        long_flags=_longs(
            "short branch long show-stash null ahead-behind no-ahead-behind renames no-renames column no-column "
            "porcelain"
        ),
        long_values={"untracked-files": _one_of("no", "normal", "all"), "porcelain": _one_of("v1", "v2")},
        long_optional={"ignored": _one_of("traditional", "matching", "no")},
    ),
    "diff": _Spec(
        flags="pusRaw",
        short_values={"U": _number},
        long_flags=_longs(_GIT_DIFF_FLAGS + " cached staged no-index merge-base"),
        long_values=_GIT_DIFF_VALUES,
        long_optional=_GIT_OPTIONAL,
    ),
    "log": _Spec(
        flags="pusi",
        short_values={"n": _number, "U": _number},
        long_flags=_longs(
            _GIT_DIFF_FLAGS + " oneline graph decorate no-decorate reverse merges no-merges first-parent all "
            "abbrev-commit no-abbrev-commit follow regexp-ignore-case extended-regexp fixed-strings date-order "
            "topo-order author-date-order"
        ),
        long_values={
            **_GIT_DIFF_VALUES,
            "max-count": _number,
            "skip": _number,
            "since": _text,
            "until": _text,
            "after": _text,
            "before": _text,
            "author": _text,
            "committer": _text,
            "grep": _text,
            "format": _text,
            "pretty": _text,
            "date": _text,
        },
        long_optional=_GIT_OPTIONAL,
        numbers=True,
    ),
    "show": _Spec(
        flags="pus",
        short_values={"U": _number},
        long_flags=_longs(_GIT_DIFF_FLAGS + " oneline abbrev-commit no-abbrev-commit"),
        long_values={**_GIT_DIFF_VALUES, "format": _text, "pretty": _text, "date": _text},
        long_optional=_GIT_OPTIONAL,
    ),
}
READ_ONLY_GIT_COMMANDS = frozenset(_GIT_SPECS)
"""Git subcommands ``auto_allow_read_only`` lets run without approval."""
_GIT_NAMES_ONLY = frozenset({"stat", "numstat", "shortstat", "name-only", "name-status", "summary", "s", "no-patch"})
_GIT_CONTENT = frozenset({"p", "u", "U", "patch", "unified", "word-diff"})
_REVISION = re.compile(r"[A-Za-z0-9_@][A-Za-z0-9_./@^+-]*")
_OBJECT_ID = re.compile(r"[0-9a-fA-F]{4,64}")
_HEAD_REVISION = re.compile(r"(?:HEAD|@)(?:[~^][0-9]*)*")
"""Revisions ``git show`` may name: commits relative to HEAD (any other name may be a tag of a blob)."""
_TREE_ENTRIES = 5000
_TREE_SECONDS = 0.05
"""Time the operand checks of one command may take (they run on the event loop); past it, the command asks."""
_MAX_OPERANDS = 1000
_MAX_READ_ONLY_CHARS = 10_000


def _parse_options(spec: _Spec, args: list[str]) -> tuple[list[_Option], list[str]] | None:
    """``(options, operands)`` as GNU getopt reads `args` (options may follow operands), or None if any is unknown."""
    options: list[_Option] = []
    operands: list[str] = []
    i = 0
    only_operands = False
    while i < len(args):
        word = args[i]
        i += 1
        if only_operands or word == "-" or not word.startswith("-"):
            operands.append(word)
            continue
        if word == "--":
            only_operands = True
            continue
        read = (
            _long_option(spec, word[2:], args, i) if word.startswith("--") else _short_options(spec, word[1:], args, i)
        )
        if read is None:
            return None
        found, i = read
        options.extend(found)
    return options, operands


def _long_option(spec: _Spec, text: str, args: list[str], i: int) -> tuple[list[_Option], int] | None:
    """The option ``--text`` (its value after ``=`` or in ``args[i]``), the next index; or None if unknown."""
    name, has_value, value = text.partition("=")
    optional = spec.long_optional.get(name)
    if not has_value and (name in spec.long_flags or optional is not None):
        return [(name, None)], i
    check = optional if optional is not None else spec.long_values.get(name)
    if check is None:
        return None
    read = _option_value(check, value if has_value else None, args, i)
    return None if read is None else ([(name, read[0])], read[1])


def _short_options(spec: _Spec, body: str, args: list[str], i: int) -> tuple[list[_Option], int] | None:
    """The options of ``-body`` (flags, then one whose value is the rest or ``args[i]``), the next index; or None."""
    if spec.numbers and _DIGITS.fullmatch(body):
        return [("NUM", body)], i
    found: list[_Option] = []
    for j, letter in enumerate(body):
        if letter in spec.flags:
            found.append((letter, None))
            continue
        check = spec.short_values.get(letter)
        if check is None:
            return None
        read = _option_value(check, body[j + 1 :] or None, args, i)
        if read is None:
            return None
        value, i = read
        found.append((letter, value))
        break
    return found, i


def _option_value(check: _Check, attached: str | None, args: list[str], i: int) -> tuple[str, int] | None:
    """An option's value (`attached`, else ``args[i]``) and the next index, or None if missing or refused."""
    if attached is None:
        if i >= len(args):
            return None
        attached = args[i]
        i += 1
    return (attached, i) if check(attached) else None


def _git_is_read_only(args: list[str], root: str) -> bool:
    """``git status|diff|log|show`` with known options; the ones that print file contents only for named files."""
    if not args or args[0] not in _GIT_SPECS:
        return False  # also every global option: -c, -C, --git-dir, --work-tree, --exec-path, -p ...
    subcommand = args[0]
    rest = args[1:]
    spec = _GIT_SPECS[subcommand]
    split = rest.index("--") if "--" in rest else len(rest)
    parsed = _parse_options(spec, rest[:split])
    if parsed is None:
        return False
    options, words = parsed
    names = {name for name, _ in options}
    paths = rest[split + 1 :]
    revisions: list[str] = []
    for word in words:  # git's own rule: a word that names a file is a path, else a revision
        if os.path.lexists(os.path.join(root, word)):
            paths.append(word)
        else:
            revisions.append(word)
    if any(_REVISION.fullmatch(r) is None or ":" in r for r in revisions):
        return False  # "rev:path" names a file's content in history; odd spellings are not judged
    if any(p.startswith(":") for p in paths):
        return False  # pathspec magic (":(top)", ":!x")
    if not _operands_are_safe(paths, root, recursive=False):
        return False
    if subcommand == "status":
        return True
    if subcommand == "show" and not all(_HEAD_REVISION.fullmatch(r) for r in revisions):
        return False  # an object id or a tag may name a blob: show prints its content whatever the options
    # diff, show and log -p print file contents (also of protected files the repository tracks, in any
    # commit): read-only only when limited to named regular files, or names only (--stat, --name-only ...).
    shows_content = bool(names & _GIT_CONTENT) or (subcommand != "log" and not names & _GIT_NAMES_ONLY)
    if not shows_content:
        return True
    if any(_OBJECT_ID.fullmatch(r) for r in revisions):
        return False  # an object id may name a blob (its content), whatever the paths say
    return bool(paths) and all(os.path.isfile(os.path.realpath(os.path.join(root, p))) for p in paths)


def _operands_are_safe(words: list[str], root: str, *, recursive: bool) -> bool:
    """Every word is a safe operand (`_operand_is_safe`); bounded work, since this runs on the event loop."""
    if len(words) > _MAX_OPERANDS:
        return False
    deadline = time.thread_time() + _TREE_SECONDS  # CPU time: a loaded machine must not change the verdict
    return all(_operand_is_safe(word, root, recursive=recursive, deadline=deadline) for word in words)


def _operand_is_safe(word: str, root: str, *, recursive: bool, deadline: float) -> bool:
    """A path operand inside `root`, not protected, not something that blocks when read (FIFO, device).

    With `recursive`, a directory's whole tree must hold no protected path, checked before `deadline`.
    """
    if word == "-":
        return True  # standard input: closed
    full = os.path.realpath(os.path.join(root, word))
    if os.path.commonpath([root, full]) != root or is_dangerous_path(os.path.join(root, word)):
        return False
    if is_dangerous_path(full):
        return False
    try:
        mode = os.stat(full).st_mode
    except FileNotFoundError:
        return True  # the program reports it
    except OSError:
        return False
    if stat.S_ISDIR(mode):
        return not recursive or _tree_is_safe(full, deadline)
    return stat.S_ISREG(mode)


def _tree_is_safe(top: str, deadline: float) -> bool:
    """Whether no protected path lies below `top` (symlinks not followed); a tree too big to check is not safe."""
    seen = 0
    pending = [top]
    while pending:
        directory = pending.pop()
        try:
            with os.scandir(directory) as it:
                for entry in it:
                    seen += 1
                    if seen > _TREE_ENTRIES or time.thread_time() > deadline:
                        return False
                    if is_dangerous_path(entry.path):
                        return False
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
        except OSError:
            return False
    return True
