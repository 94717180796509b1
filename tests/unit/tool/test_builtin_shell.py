"""The shell tool: real subprocesses, process-group kills, output caps and the permission check."""

from __future__ import annotations

import asyncio
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from agentrt.context import RuntimeContext
from agentrt.errors import ToolRetry, UserError
from agentrt.message import ToolUseBlock
from agentrt.permission import Decision, PermissionContext, PermissionEngine, PermissionMode, PermissionRule
from agentrt.tool import Toolkit
from agentrt.tool.builtin import ShellTool
from agentrt.tool.builtin.shell import dangerous_references, is_read_only_command
from agentrt.tool.emit import ToolEmitter

pytestmark = pytest.mark.skipif(not hasattr(os, "killpg"), reason="POSIX process groups")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "hello.txt").write_text("hello\n")
    (root / ".env").write_text("API_KEY=secret\n")
    (root / "src").mkdir()
    return root


@pytest.fixture
def shell(ws: Path) -> ShellTool:
    return ShellTool(ws, timeout=10)


def decide(
    shell: ShellTool,
    command: str,
    mode: PermissionMode = PermissionMode.DEFAULT,
    rules: tuple[PermissionRule, ...] = (),
) -> Decision:
    engine = PermissionEngine(PermissionContext(mode=mode, rules=rules))
    call = ToolUseBlock(id="call_1", name="run_command", input={"command": command})
    return engine.check(shell.run_command, call, RuntimeContext()).decision


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group `pgid`."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state != "Z":
            members.append(int(entry))
    return members


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def wait_until(predicate: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.02)


needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")


# -- running ------------------------------------------------------------------------------------------------
async def test_output_and_exit_codes(shell: ShellTool, ws: Path) -> None:
    assert await shell.run("cat hello.txt") == "hello\n[exit code 0]"
    assert await shell.run("echo out; echo err >&2; exit 3") == "out\nerr\n[exit code 3]"
    assert await shell.run("true") == "(no output)\n[exit code 0]"
    real = await asyncio.to_thread(os.path.realpath, ws)
    assert await shell.run("pwd") == f"{real}\n[exit code 0]"
    assert (await shell.run("kill -9 $$")).endswith("[killed by signal SIGKILL]")


async def test_runs_through_the_tool_interface(shell: ShellTool) -> None:
    toolkit = Toolkit()
    toolkit.register(shell)
    t = toolkit.get("run_command")
    assert t is not None and t.destructive and not t.read_only and t.check_permission is not None
    assert set(t.parameters["properties"]) == {"command", "timeout"}
    assert await t.invoke({"command": "echo $((6 * 7))"}, RuntimeContext()) == "42\n[exit code 0]"


async def test_stdin_is_closed(shell: ShellTool) -> None:
    assert await shell.run("cat") == "(no output)\n[exit code 0]"


@needs_proc
async def test_timeout_kills_the_whole_process_group(shell: ShellTool) -> None:
    started = time.monotonic()
    with pytest.raises(ToolRetry) as info:
        await shell.run("echo leader:$$; sleep 30 & echo child:$!; sleep 30", timeout=1)
    assert time.monotonic() - started < 5
    message = info.value.message
    assert "timed out after 1 s" in message and "killed" in message
    leader = int(re.search(r"leader:(\d+)", message).group(1))  # type: ignore[union-attr]
    child = int(re.search(r"child:(\d+)", message).group(1))  # type: ignore[union-attr]
    await wait_until(lambda: not group_members(leader) and not alive(child))


@needs_proc
async def test_background_processes_are_killed_when_the_command_exits(shell: ShellTool) -> None:
    started = time.monotonic()
    out = await shell.run("sleep 30 & echo child:$!")
    assert time.monotonic() - started < 5  # the open pipe does not keep the call waiting
    child = int(re.search(r"child:(\d+)", out).group(1))  # type: ignore[union-attr]
    await wait_until(lambda: not alive(child))


@needs_proc
async def test_cancellation_kills_the_process_group(shell: ShellTool) -> None:
    seen: list[str] = []
    task = asyncio.create_task(
        shell.run("echo leader:$$; sleep 30 & sleep 30", timeout=60, emitter=ToolEmitter(sink=seen.append))
    )
    await wait_until(lambda: any("leader:" in s for s in seen))
    leader = int(re.search(r"leader:(\d+)", "".join(seen)).group(1))  # type: ignore[union-attr]
    assert group_members(leader)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_until(lambda: not group_members(leader))


async def test_sigterm_grace_then_sigkill(ws: Path) -> None:
    shell = ShellTool(ws, kill_grace=0.2)
    started = time.monotonic()
    with pytest.raises(ToolRetry, match="timed out"):
        await shell.run("trap '' TERM; sleep 30", timeout=0.5)
    assert time.monotonic() - started < 5


async def test_output_is_capped_head_and_tail(ws: Path) -> None:
    shell = ShellTool(ws, max_output=1000)
    out = await shell.run("echo START; head -c 300000 /dev/zero | tr '\\0' x; echo; echo END")
    assert out.startswith("START\n")
    assert out.endswith("END\n[exit code 0]")
    assert len(out) < 1300
    match = re.search(r"\[\.\.\. (\d+) bytes of output cut", out)
    assert match is not None and int(match.group(1)) > 298_000


async def test_streams_lines_through_an_emitter(shell: ShellTool) -> None:
    seen: list[str] = []
    out = await shell.run("for i in 1 2 3; do echo line$i; sleep 0.05; done", emitter=ToolEmitter(sink=seen.append))
    assert "".join(seen) == "line1\nline2\nline3\n"
    assert len(seen) >= 2  # streamed as the lines came, not all at the end
    assert out == "line1\nline2\nline3\n[exit code 0]"


async def test_streamed_output_is_capped_too(ws: Path) -> None:
    shell = ShellTool(ws, max_output=500)
    seen: list[str] = []
    await shell.run("head -c 100000 /dev/zero | tr '\\0' 'y' | fold -w 50", emitter=ToolEmitter(sink=seen.append))
    streamed = "".join(seen)
    assert len(streamed) < 700 and "streamed output stopped" in streamed


async def test_environment_is_minimal_by_default(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUPER_SECRET_TOKEN", "leaked")
    assert "leaked" not in await ShellTool(ws).run("echo x${SUPER_SECRET_TOKEN}x")
    assert "xleakedx" in await ShellTool(ws, inherit_env=True).run("echo x${SUPER_SECRET_TOKEN}x")
    assert "xmine" in await ShellTool(ws, env={"MY_VAR": "mine"}).run("echo x$MY_VAR")


def test_configuration_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not an existing directory"):
        ShellTool(tmp_path / "missing")
    with pytest.raises(UserError):
        ShellTool(tmp_path, timeout=0)


# -- permissions ---------------------------------------------------------------------------------------------
DANGEROUS = [
    "cat ~/.ssh/id_rsa",
    "cat .env",
    "cat ./.env && echo done",
    "cp .git/config /tmp/x",
    "cat $HOME/.aws/credentials",
    "x=$(cat .env); echo $x",
    "python3 -c \"print(open('.env').read())\"",
    "tar czf /tmp/keys.tgz ~/.ssh",
    "cat < .env",
    "grep KEY .e*",
    "ls ~/.kube",
    "git --git-dir=.git log",
]


@pytest.mark.parametrize("command", DANGEROUS)
@pytest.mark.parametrize("mode", [PermissionMode.DEFAULT, PermissionMode.BYPASS, PermissionMode.ACCEPT_EDITS])
def test_commands_touching_protected_paths_are_denied(shell: ShellTool, command: str, mode: PermissionMode) -> None:
    assert dangerous_references(command, shell.root)
    allow_all = (PermissionRule(tool="run_command", decision=Decision.ALLOW),)
    assert decide(shell, command, mode, rules=allow_all) is Decision.DENY


@pytest.mark.parametrize("command", DANGEROUS[:4])
async def test_protected_path_commands_are_refused_at_execution(shell: ShellTool, command: str) -> None:
    with pytest.raises(ToolRetry, match="protected paths"):
        await shell.run(command)


@pytest.mark.parametrize(
    "command", ["ls -la", "git status", "pytest -q tests", "cat hello.txt", "grep -n hello src", "echo .gitignore"]
)
def test_ordinary_commands_ask_and_allow_rules_apply(shell: ShellTool, command: str) -> None:
    assert dangerous_references(command, shell.root) == []
    assert decide(shell, command) is Decision.ASK
    assert decide(shell, command, PermissionMode.DONT_ASK) is Decision.DENY
    assert decide(shell, command, PermissionMode.EXPLORE) is Decision.DENY
    assert decide(shell, command, PermissionMode.BYPASS) is Decision.ALLOW
    # The check has no opinion on ordinary commands, so rules the user accepted take effect.
    rule = PermissionRule(tool="run_command", args={"command": command}, decision=Decision.ALLOW)
    assert decide(shell, command, rules=(rule,)) is Decision.ALLOW


def test_auto_allow_read_only_commands(ws: Path) -> None:
    shell = ShellTool(ws, auto_allow_read_only=True)
    for command in ("ls -la", "ls src", "cat hello.txt", "pwd", "git status", "git log -n 3", "wc -l hello.txt"):
        assert is_read_only_command(command, shell.root), command
        assert decide(shell, command) is Decision.ALLOW, command
    for command in (
        "ls ..",
        "cat /etc/passwd",
        "ls; rm -rf src",
        "cat hello.txt > copy.txt",
        "grep -r hello .",
        "git push",
        "git diff --output=x",
        "rm hello.txt",
        "ls $HOME",
        "cat *.txt",
    ):
        assert not is_read_only_command(command, shell.root), command
        assert decide(shell, command) is Decision.ASK, command
    assert decide(shell, "cat .env") is Decision.DENY
    assert decide(ShellTool(ws), "ls -la") is Decision.ASK  # off by default


READ_ONLY = [
    "ls -la --color=auto src",
    "ls -1 -- src",
    "ls -R src",
    "cat -n hello.txt",
    "head -n 5 hello.txt",
    "head -5 hello.txt",
    "head --lines=-2 hello.txt",
    "tail -n +2 hello.txt",
    "tail -c 10 -q hello.txt",
    "grep -in -e hello -e world hello.txt",
    "grep -c -A 2 hello hello.txt",
    "grep -d skip hello src",
    "grep --directories=read hello hello.txt",
    "grep -- -r hello.txt",  # after "--", -r is the pattern
    "wc -lw hello.txt",
    "stat -c %s hello.txt",
    "file -b hello.txt",
    "du -sh src",
    "git status --short --branch",
    "git log --oneline -5",
    "git log --stat --format=%s",
    "git diff --stat",
    "git diff --name-only HEAD",
    "git show --stat HEAD",
    "git show -s HEAD",
    "git diff -- hello.txt",
    "git log -p -- hello.txt",
]
NOT_READ_ONLY = [
    # recursion and following, in every spelling
    "grep -R hello .",
    "grep -rn hello .",
    "grep -nR hello .",
    "grep -d recurse hello .",
    "grep -drecurse hello .",
    "grep --directories=recurse hello .",
    "grep --directories recurse hello .",
    "grep --recursive hello .",
    "grep --recur hello .",
    "grep hello . -r",
    "grep --include=x hello hello.txt",
    "grep -f hello.txt src",
    "ls -R",
    "ls -lR .",
    "ls --recursive",
    "ls -L src",
    "du",
    "du -a .",
    "du -L src",
    "tree",
    "tree -o out.txt src",
    "tree -R src",
    "tail -f hello.txt",
    "tail -F hello.txt",
    "tail --follow hello.txt",
    "tail --follow=name hello.txt",
    "tail -5f hello.txt",
    "tail -n 5 -f hello.txt",
    "tail --retry hello.txt",
    "file -f hello.txt",
    "file -z hello.txt",
    "wc --files0-from=hello.txt",
    "cat -- .env",
    "head -c 5 src/../.env",
    "pwd src",
    "find .",
    "/bin/cat hello.txt",
    # git: global options, writers, programs, contents
    "git -c core.pager=cat log",
    "git --git-dir=.git log",
    "git --work-tree=. status",
    "git --exec-path=. status",
    "git -C src log",
    "git log --output=x",
    "git log --outp=x",
    "git diff --ext-diff",
    "git show --textconv HEAD",
    "git diff",
    "git diff HEAD",
    "git show",
    "git show HEAD",
    "git log -p",
    "git log --patch",
    "git show HEAD:hello.txt",
    "git show 1a2b3c4 -- hello.txt",
    "git show --stat 1a2b3c4",  # a blob id: show prints the blob whatever the format
    "git show -s 1a2b3c4d5e6f",
    "git diff -- src",
    "git status -v",
    "git log -- :!x",
]


@pytest.mark.parametrize("command", READ_ONLY)
def test_read_only_allow_list_accepts_safe_options(ws: Path, command: str) -> None:
    assert is_read_only_command(command, str(ws)), command


@pytest.mark.parametrize("command", NOT_READ_ONLY)
def test_read_only_allow_list_refuses_anything_else(ws: Path, command: str) -> None:
    assert not is_read_only_command(command, str(ws)), command


def test_recursion_is_read_only_only_for_trees_without_protected_paths(ws: Path) -> None:
    (ws / "src" / "pkg").mkdir()
    (ws / "src" / "pkg" / "mod.py").write_text("x = 1\n")
    assert is_read_only_command("ls -R src", str(ws))
    assert is_read_only_command("du -a src", str(ws))
    (ws / "src" / "pkg" / ".env.test").write_text("TOKEN=x\n")
    assert not is_read_only_command("ls -R src", str(ws))
    assert not is_read_only_command("du -a src", str(ws))
    (ws / "src" / "pkg" / ".env.test").unlink()
    os.symlink(ws / ".env", ws / "src" / "pkg" / "harmless")  # a link to a secret is found too
    assert not is_read_only_command("ls -R src", str(ws))


def test_operands_that_would_block_are_not_read_only(ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    assert not is_read_only_command("cat pipe", str(ws))
    assert not is_read_only_command("grep x pipe", str(ws))


def test_dangerous_references_see_through_quotes_and_escapes(ws: Path) -> None:
    for command in ("cat '.e'nv", 'cat ".env"', "cat \\.env", "cat .e\\nv", "cat '.env", 'x="$(cat .env)"'):
        assert dangerous_references(command, str(ws)), command
    assert dangerous_references("echo 'a b' \"c d\" e\\ f", str(ws)) == []


def test_dangerous_references_are_bounded_and_fail_closed(ws: Path) -> None:
    wide = ws / "wide"
    wide.mkdir()
    for i in range(3000):
        (wide / f"f{i}").touch()
    assert dangerous_references("ls wide/f12*", str(ws)) == []  # small enough to check
    huge = "cat " + " ".join(f"wide/f{i}" for i in range(3000))
    assert dangerous_references(huge, str(ws)) == ["(the rest of the command: too many paths to check)"]
    long_heredoc = "cat > gen.py <<'EOF'\n" + "def f(x):\n    return x + 1\n" * 3000 + "EOF\ncat .env"
    assert dangerous_references(long_heredoc, str(ws)) == [".env"]  # every word is checked, up to the end


def test_a_loaded_machine_does_not_change_the_verdict(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check's time budget is the thread's CPU time: wall-clock jumps (a descheduled thread) are ignored."""
    (ws / "pub").mkdir()
    command = "; ".join(f"echo x > pub/f{i}" for i in range(10)) + "; ls pub/f*"
    real = time.monotonic
    jumps = iter(range(1, 10**6))
    monkeypatch.setattr(time, "monotonic", lambda: real() + 10.0 * next(jumps))  # 10 s lost at every look
    assert dangerous_references(command, str(ws)) == []
    ticks = iter(range(1, 10**6))
    monkeypatch.setattr(time, "thread_time", lambda: float(next(ticks)))  # a second of CPU at every look
    assert dangerous_references(command, str(ws)) == ["(the rest of the command: too many paths to check)"]
