"""The bubblewrap sandbox of `ShellTool`: ``ShellTool(root, sandbox="bwrap")``.

Each command runs under ``bwrap`` (Debian's ``bubblewrap``) in new user, mount, PID, network, IPC,
UTS and cgroup namespaces:

- **Files**: the system (`SYSTEM_PATHS`: ``/usr``, ``/bin``, ``/lib*``, ``/sbin``, ``/etc``) read-only,
  with `HIDDEN_PATHS` (``/etc/shadow``, ``/etc/ssh`` host keys ...) masked; the workspace
  read-write; a fresh ``/proc``, a minimal ``/dev`` and an empty ``/tmp`` that disappear with the
  command; nothing else (no ``/home``, ``/root``, ``/run``, ``/var``, ``/srv``, ``/mnt``, ``/sys``)
  unless the application adds read-only paths (a toolchain outside ``/usr``).
- **Processes**: the command sees only its own processes; all capabilities are dropped, it cannot
  gain new privileges (``no_new_privs``) nor create further user namespaces, and it gets SIGKILL
  when bwrap (or the agent) dies.
- **Network**: none (a private loopback only) unless ``network=True``.
- **Environment**: the tool's (minimal) environment with ``HOME`` set to the workspace and ``TMPDIR``
  to ``/tmp``.

`ResourceLimits` (``cpu_seconds``, ``memory_bytes``) are set with the shell's ``ulimit`` before the
command starts, inside the sandbox (and without one too): each process of the command gets at most
that much CPU time (then SIGKILL) and address space (allocations beyond it fail).

`open_sandbox` checks once, when the tool is built, that bwrap exists and can create its
namespaces here (containers may forbid them): it runs ``true`` in the very sandbox the commands will
get. When it cannot, it raises `SandboxUnavailableError` saying why and how to install bubblewrap,
or, when the application opted in with ``fallback=True``, logs a warning once and returns None:
commands then run unsandboxed.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from agentrt.errors import UserError
from agentrt.permission import is_dangerous_path

__all__ = [
    "HIDDEN_PATHS",
    "INSTALL_HINT",
    "SYSTEM_PATHS",
    "BwrapSandbox",
    "ResourceLimits",
    "SandboxKind",
    "SandboxUnavailableError",
    "open_sandbox",
]

logger = logging.getLogger("agentrt.tool")

SandboxKind = Literal["bwrap"]
"""The sandboxes `ShellTool` knows: bubblewrap."""

SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
"""Mounted read-only in the sandbox when they exist (symlinks such as ``/bin -> usr/bin`` kept as links)."""

HIDDEN_PATHS = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/security/opasswd",
    "/etc/ssh",
    "/etc/ssl/private",
)
"""Secrets under the system paths, masked in the sandbox (files by an unreadable node, folders by an empty one)."""

INSTALL_HINT = (
    "install Debian's bubblewrap (`apt-get install bubblewrap`; agentrt's repository has "
    "scripts/install-sandbox.sh), make sure user namespaces are allowed (containers: --privileged or a "
    "seccomp profile that allows them), or pass sandbox_fallback=True to run commands unsandboxed"
)

HOSTNAME = "agentrt-sandbox"
_PROBE_SECONDS = 10.0
_MAX_REASON = 500
_warned: set[str] = set()


class SandboxUnavailableError(UserError):
    """``ShellTool(sandbox="bwrap")`` cannot sandbox here: bwrap is missing, too old, or cannot create namespaces.

    `reason` says what failed (bwrap's own message when it ran); the message adds how to fix it.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(f"ShellTool(sandbox='bwrap') cannot sandbox commands here: {reason}. To fix: {INSTALL_HINT}.")
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class ResourceLimits:
    """Per-process limits set with ``ulimit`` (soft and hard) before the command starts.

    Attributes:
        cpu_seconds: CPU seconds each process may use; past them the kernel kills it (SIGKILL).
        memory_bytes: Address space each process may map (rounded down to KiB); allocations past it fail.
    """

    cpu_seconds: int | None = None
    memory_bytes: int | None = None

    def __post_init__(self) -> None:
        for name, value, least in (("cpu_seconds", self.cpu_seconds, 1), ("memory_bytes", self.memory_bytes, 1 << 20)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
                raise UserError(f"ShellTool {name} must be an integer >= {least} or None, not {value!r}")

    def argv(self, shell: str, command: str) -> list[str]:
        """``shell -c command`` with the limits set first (the command itself is passed untouched as ``$1``)."""
        steps = []
        if self.cpu_seconds is not None:
            steps.append(f"ulimit -t {self.cpu_seconds}")
        if self.memory_bytes is not None:
            steps.append(f"ulimit -v {self.memory_bytes // 1024}")
        if not steps:
            return [shell, "-c", command]
        return [shell, "-c", " && ".join(steps) + ' && exec "$0" -c "$1"', shell, command]


@dataclasses.dataclass(frozen=True)
class BwrapSandbox:
    """How to run a command under bwrap for one workspace (see the module docstring).

    Attributes:
        workspace: The resolved workspace, mounted read-write and the working directory.
        bwrap: The bwrap program.
        network: Keep the host's network (``--share-net``); otherwise only a private loopback.
        read_only_paths: Resolved extra paths mounted read-only (a toolchain outside ``/usr``).
    """

    workspace: str
    bwrap: str
    network: bool = False
    read_only_paths: tuple[str, ...] = ()
    mounts: tuple[str, ...] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "mounts", tuple(_mounts(self.workspace, self.network, self.read_only_paths)))

    def command(self, argv: Sequence[str]) -> list[str]:
        """The bwrap command line that runs `argv` in the sandbox, in the workspace."""
        flags = [
            self.bwrap,
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--cap-drop",
            "ALL",
            "--die-with-parent",
            "--new-session",
            "--hostname",
            HOSTNAME,
        ]
        if self.network:
            flags.append("--share-net")
        return [*flags, *self.mounts, "--chdir", self.workspace, "--", *argv]

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """`env` as seen inside: ``HOME`` the workspace (the host's home is not mounted), ``TMPDIR`` ``/tmp``."""
        return {**env, "HOME": self.workspace, "TMPDIR": "/tmp", "PWD": self.workspace}

    def problem(self, shell: str) -> str | None:
        """Why this sandbox cannot run `shell` here (bwrap's message), or None when it can."""
        return _probe(tuple(self.command([shell, "-c", "true"])))


def open_sandbox(
    kind: SandboxKind | None,
    *,
    workspace: str,
    shell: str,
    bwrap: str | os.PathLike[str] | None = None,
    network: bool = False,
    read_only_paths: Iterable[str | os.PathLike[str]] = (),
    fallback: bool = False,
) -> BwrapSandbox | None:
    """The sandbox `ShellTool` runs commands in, checked to work here; None for no sandbox.

    Raises:
        SandboxUnavailableError: `kind` is ``"bwrap"`` but bwrap is missing or cannot sandbox here,
            and `fallback` is false (with `fallback`, a warning is logged once and None returned).
        UserError: a bad `kind`, a workspace holding a system folder, a missing or protected read-only path.
    """
    if kind is None:
        return None
    if kind != "bwrap":
        raise UserError(f"ShellTool sandbox must be 'bwrap' or None, not {kind!r}")
    _check_workspace(workspace)
    paths = tuple(_read_only_path(p, workspace) for p in read_only_paths)
    try:
        sandbox = BwrapSandbox(workspace, _find_bwrap(bwrap), network=network, read_only_paths=paths)
        problem = sandbox.problem(shell)
        if problem is not None:
            raise SandboxUnavailableError(problem)
    except SandboxUnavailableError as error:
        if not fallback:
            raise
        if error.reason not in _warned:
            _warned.add(error.reason)
            logger.warning(
                "ShellTool: %s; commands run UNSANDBOXED (sandbox_fallback=True): they can write outside the "
                "workspace, reach the network and see the host's processes",
                error.reason,
            )
        return None
    return sandbox


def _find_bwrap(bwrap: str | os.PathLike[str] | None) -> str:
    if bwrap is None:
        found = shutil.which("bwrap")
        if found is None:
            raise SandboxUnavailableError("bwrap (Debian's bubblewrap) is not on PATH")
        return found
    path = os.fspath(bwrap)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise SandboxUnavailableError(f"bwrap {path!r} does not exist or is not executable")
    return os.path.abspath(path)


def _check_workspace(workspace: str) -> None:
    for path in ("/", *SYSTEM_PATHS):
        if os.path.lexists(path) and os.path.commonpath([workspace, path]) == workspace:
            raise UserError(
                f"ShellTool workspace {workspace!r} holds the system folder {path!r}: "
                "the sandbox would make it writable; use a project folder"
            )


def _read_only_path(path: str | os.PathLike[str], workspace: str) -> str:
    """A read-only path, resolved: it must exist, and outside the workspace it must not be protected.

    Inside the workspace a protected path (say ``.git``) may be listed: it is there read-write anyway,
    and mounting it read-only keeps commands from planting hooks or configuration in it.
    """
    raw = os.fspath(path)
    real = os.path.realpath(raw)
    if not os.path.exists(real):
        raise UserError(f"ShellTool read-only path {raw!r} does not exist")
    inside = os.path.commonpath([real, workspace]) == workspace
    if not inside and (is_dangerous_path(raw) or is_dangerous_path(real)):
        raise UserError(f"ShellTool read-only path {raw!r} is protected (secrets or repository internals)")
    return real


def _mounts(workspace: str, network: bool, read_only_paths: tuple[str, ...]) -> list[str]:
    """The mount options of bwrap, in order: later mounts go on top of earlier ones."""
    args: list[str] = []
    for path in SYSTEM_PATHS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    resolv = "/etc/resolv.conf"
    if network and os.path.islink(resolv):  # e.g. systemd-resolved's stub under /run, not mounted otherwise
        real = os.path.realpath(resolv)
        args += ["--ro-bind-try", real, real]
    for path in HIDDEN_PATHS:
        if not os.path.lexists(path):
            continue
        real = os.path.realpath(path)
        if os.path.isdir(real):
            args += ["--tmpfs", real, "--remount-ro", real]
        else:
            args += ["--ro-bind", os.devnull, real]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    # A read-only path holding the workspace goes below it; one inside it (say `.git`) on top of it.
    holders = [p for p in read_only_paths if os.path.commonpath([p, workspace]) == p]
    for path in holders:
        args += ["--ro-bind", path, path]
    args += ["--bind", workspace, workspace]
    for path in read_only_paths:
        if path not in holders:
            args += ["--ro-bind", path, path]
    return args


@functools.lru_cache(maxsize=64)
def _probe(argv: tuple[str, ...]) -> str | None:
    """Run `argv` (a sandboxed ``true``) once per distinct command line; why it failed, or None."""
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_PROBE_SECONDS,
            env={"PATH": os.defpath, "LANG": "C.UTF-8"},
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"bwrap did not finish a test command within {_PROBE_SECONDS:g} s"
    except OSError as error:
        return f"bwrap could not be started: {error}"
    if done.returncode == 0:
        return None
    said = (done.stderr or done.stdout).decode("utf-8", errors="replace").strip()
    said = said[-_MAX_REASON:] if said else f"exit code {done.returncode}, no message"
    return f"bwrap failed to start a sandbox: {said}"
