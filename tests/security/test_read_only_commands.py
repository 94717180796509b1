"""``auto_allow_read_only``: recursing, following or program-running commands never run unasked.

Side effects, not return values: a real agent (scripted model, the permission engine, `ShellTool`)
gets each spelling, and the secret in ``.env`` must not show up anywhere in the session's
transcript; ``tail -f`` must not leave a process behind. A generated property then runs, for real,
every command `is_read_only_command` accepts, in a git repository whose ``.env`` is tracked and
whose ``.git/config`` holds a second secret: none may print a secret, hang, or write a file.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt import GenerateReason, Msg, ReActAgent, RuntimeContext, Toolkit, ToolResultBlock, ToolUseBlock
from agentrt.model import ScriptedModel
from agentrt.permission import PermissionContext, PermissionMode
from agentrt.tool.builtin import ShellTool
from agentrt.tool.builtin.shell import is_read_only_command

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "killpg"), reason="POSIX process groups"),
    pytest.mark.skipif(shutil.which("git") is None, reason="needs git"),
]

SECRET = "sk-live-7f3a9c1e0d"
GIT_SECRET = "ghp-config-5b8e2d"
_sessions = itertools.count()


def git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=root,
        check=True,
        capture_output=True,
        env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1"},
    )


def make_workspace(root: Path) -> Path:
    """A git repository that tracks a secret (the worst case) and has one in its config."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "hello.txt").write_text("hello API\n")
    (root / "follow-me.txt").write_text("line\n")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("API = 'public'\n")
    (root / "deep" / "er").mkdir(parents=True)
    (root / "deep" / "er" / ".env.local").write_text(f"API_TOKEN={SECRET}\n")  # reached only by recursion
    (root / ".env").write_text(f"API_KEY={SECRET}\n")
    (root / "list0").write_bytes(b".env\x00")  # for wc --files0-from
    (root / "names.txt").write_text(".env\n")  # for file -f
    os.symlink(".env", root / "innocent.txt")
    os.mkfifo(root / "pipe")  # reading it blocks
    git(root, "init", "-q")
    git(root, "config", "--local", "agentrt.token", GIT_SECRET)
    git(root, "add", "-f", "hello.txt", "src/app.py", ".env", "deep/er/.env.local")
    git(root, "commit", "-q", "-m", "initial import")
    git(root, "tag", "env-blob", "HEAD:.env")  # a tag naming the blob: `git show <tag>` prints it whatever the format
    (root / ".env").write_text(f"API_KEY={SECRET}\nOTHER={SECRET}-2\n")  # `git diff` would show it
    return root


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return make_workspace(tmp_path / "ws")


async def run_agent(
    root: Path, command: str, mode: PermissionMode = PermissionMode.DEFAULT
) -> tuple[Msg, str, list[ToolResultBlock]]:
    """One run_command call through a real agent: the reply, the whole transcript as text, the tool results."""
    toolkit = Toolkit()
    toolkit.register(ShellTool(root, timeout=5, auto_allow_read_only=True))
    model = ScriptedModel([ToolUseBlock(id="c1", name="run_command", input={"command": command}), "done"])
    agent = ReActAgent(
        "coder", model=model, toolkit=toolkit, permission=PermissionContext(mode=mode, workspace=str(root))
    )
    session = f"ro-{next(_sessions)}"
    reply = await agent.call("look around", RuntimeContext(user_id="u", session_id=session))
    state = await agent.get_state("u", session)
    results = [b for msg in state.messages for b in msg.blocks(ToolResultBlock)]
    transcript = repr(state) + repr(reply) + "".join(repr(r) for r in model.requests)
    return reply, transcript, results


SPELLINGS = [
    # grep recursion, every spelling: short, combined, attached value, long, abbreviated, after operands.
    "grep -r API .",
    "grep -R API .",
    "grep -rn API .",
    "grep -nR API .",
    "grep -inr API .",
    "grep -d recurse API .",
    "grep -drecurse API .",
    "grep --directories=recurse API .",
    "grep --directories recurse API .",
    "grep --recursive API .",
    "grep --recursiv API .",
    "grep --recur API .",
    "grep --dereference-recursive API .",
    "grep API . -r",
    "grep -e API . -R",
    "grep -f names.txt -r .",
    "grep -f .env hello.txt",
    "grep API innocent.txt",
    # other recursion reaching protected paths
    "ls -R",
    "ls -laR .",
    "ls -R deep",
    "ls --recursive deep",
    "du -a",
    "du -a deep",
    "tree -a deep",
    # follow / wait
    "tail -f follow-me.txt",
    "tail -F follow-me.txt",
    "tail --follow follow-me.txt",
    "tail --follow=name follow-me.txt",
    "tail -5f follow-me.txt",
    "tail -n 1 -f follow-me.txt",
    "tail --retry -F follow-me.txt",
    "cat pipe",
    # files named by files, programs run
    "wc --files0-from=list0",
    "wc --files0-from list0",
    "file -f names.txt",
    "file -z hello.txt",
    "file -m .env hello.txt",
    "ls -L",
    "du -L deep",
    # git: global options, writers, external programs, content of tracked secrets
    "git -c core.pager=cat log -p",
    "git -c diff.external=cat diff",
    "git --git-dir=.git log -p",
    "git --work-tree=. diff",
    "git --exec-path=. log",
    "git --no-pager log -p",
    "git log -p",
    "git log --patch",
    "git log -u",
    "git log --output=out.txt",
    "git log --outp=out.txt",
    "git diff",
    "git diff HEAD",
    "git diff --ext-diff",
    "git diff -- .",
    "git show",
    "git show HEAD",
    "git show --textconv HEAD",
    "git show HEAD:.env",
    "git show --stat {blob}",
    "git show -s {blob}",
    "git show --stat env-blob",
    "git show -s --oneline env-blob",
    "git show --name-only env-blob",
    "git show --stat HEAD env-blob",
    "git status -v",
    "git status --verbose",
]


@pytest.mark.parametrize("command", SPELLINGS)
async def test_dangerous_spellings_never_run_unasked(ws: Path, command: str) -> None:
    if "{blob}" in command:  # the id of the committed .env: `git show` prints a blob whatever the format
        git = ["git", "rev-parse", "HEAD:.env"]
        blob = await asyncio.to_thread(subprocess.run, git, cwd=ws, capture_output=True, text=True, check=True)
        command = command.format(blob=blob.stdout.strip()[:10])
    assert not is_read_only_command(command, str(ws)), command
    reply, transcript, results = await run_agent(ws, command)
    denied = bool(results) and all(r.state in ("error", "denied") and "denied" in str(r.output) for r in results)
    assert reply.generate_reason is GenerateReason.AWAITING_CONFIRMATION or denied, (command, reply, results)
    assert SECRET not in transcript and GIT_SECRET not in transcript, command


def follow_processes(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
@pytest.mark.parametrize("command", ["tail -f {}", "tail -F {}", "tail --follow=name {}", "tail -5f {}"])
async def test_tail_follow_does_not_run(ws: Path, command: str) -> None:
    marker = f"follow-{next(_sessions)}-marker.txt"
    (ws / marker).write_text("x\n")
    reply, _, results = await run_agent(ws, command.format(marker))
    assert reply.generate_reason is GenerateReason.AWAITING_CONFIRMATION
    assert results == []  # nothing ran
    assert follow_processes(marker) == []


async def test_controls_safe_commands_run_and_the_probe_sees_leaks(ws: Path) -> None:
    """Without these controls the tests above could pass for the wrong reason."""
    reply, transcript, results = await run_agent(ws, "grep -n API hello.txt src/app.py")
    assert reply.generate_reason is not GenerateReason.AWAITING_CONFIRMATION
    assert "hello.txt:1:hello API" in transcript and results[0].state == "success"
    _, transcript, _ = await run_agent(ws, "git log --stat -- hello.txt")  # names-only git runs unasked
    assert "initial import" in transcript and SECRET not in transcript
    # The same recursive grep, once approved (bypass mode), does print the secret: the probe works.
    _, transcript, _ = await run_agent(ws, "grep -r API .", PermissionMode.BYPASS)
    assert SECRET in transcript


# -- property: whatever is judged read-only is harmless when really run ----------------------------------------
FLAGS: dict[str, list[str]] = {
    "grep": [
        "API",
        "-n",
        "-i",
        "-H",
        "-c",
        "-l",
        "-o",
        "-E",
        "-P",
        "-z",
        "-5",
        "-A",
        "2",
        "-e",
        "-f",
        "-d",
        "recurse",
        "read",
        "skip",
        "--directories=recurse",
        "--directories=read",
        "--color=always",
        "--null-data",
        "--include=x",
        "--exclude-dir=y",
        "-D",
        "--binary-files=text",
        "--label=x",
    ],
    "ls": [
        "-l",
        "-a",
        "-R",
        "-L",
        "-la",
        "-lR",
        "-Ra",
        "--recursive",
        "--dereference",
        "--color=always",
        "-d",
        "-1",
        "--hide=x",
        "-I",
        "x",
        "--sort=size",
        "--time-style=+%s",
    ],
    "tail": [
        "-f",
        "-F",
        "-n",
        "5",
        "-c",
        "3",
        "--follow",
        "--follow=name",
        "--retry",
        "-5",
        "-5f",
        "-q",
        "--pid=1",
        "-s",
        "1",
        "--lines=2",
        "-n+2",
        "+2",
    ],
    "head": ["-n", "5", "-c", "3", "-5", "--lines=2", "-q", "-v", "-z", "--bytes=-2"],
    "cat": ["-n", "-A", "-v", "--show-all", "-e", "-T"],
    "wc": ["-l", "-c", "-w", "--files0-from=list0", "--files0-from", "list0", "-L"],
    "du": ["-a", "-s", "-h", "-L", "--max-depth=1", "-d", "1", "-x", "--exclude=x", "-0"],
    "stat": ["-L", "-c", "%n %s", "--format=%n", "-t", "--printf=%s"],
    "file": ["-b", "-L", "-z", "-f", "names.txt", "-m", ".env", "-i", "-k"],
    "tree": ["-a", "-L", "2", "-f", "-l", "-o", "out.txt", "-R", "--du"],
    "pwd": ["-L", "-P"],
    "git status": ["-s", "-v", "--porcelain", "-u", "--short", "--ignored", "-b", "-z"],
    "git diff": [
        "--stat",
        "-p",
        "--cached",
        "--ext-diff",
        "--textconv",
        "--no-textconv",
        "--output=o.txt",
        "--name-only",
        "HEAD",
        "-U1",
        "--word-diff",
        "--no-index",
        "--numstat",
        "-R",
    ],
    "git log": [
        "-p",
        "--stat",
        "-1",
        "--oneline",
        "--format=%H%n%B",
        "--output=o.txt",
        "-n",
        "2",
        "--all",
        "-u",
        "--patch",
        "--follow",
        "--name-status",
        "-3",
        "--grep=API",
        "HEAD",
        "--no-decorate",
    ],
    "git show": [
        "--stat",
        "-s",
        "HEAD",
        "--textconv",
        "--format=%s",
        "-p",
        "--name-only",
        "--no-patch",
        "--oneline",
        "env-blob",
        "HEAD~0",
    ],
    "git": ["-c", "core.pager=cat", "--git-dir=.git", "--work-tree=.", "--no-pager", "-C", ".", "--exec-path=."],
}
DANGEROUS_LONGS = ["--recursive", "--dereference-recursive", "--directories=recurse", "--follow", "--files0-from=list0"]
DANGEROUS_LONGS += ["--output=o.txt", "--ext-diff", "--textconv", "--patch", "--dereference", "--retry"]
ABBREVIATIONS = sorted({long[:k] for long in DANGEROUS_LONGS for k in range(4, len(long) + 1)})
OPERANDS = [".", "src", "hello.txt", "src/app.py", "innocent.txt", ".env", "deep", "deep/er", ".git/config"]
OPERANDS += ["..", "API", "--", "-", "list0", "names.txt", "pipe", "/etc/hostname", "follow-me.txt", "src/../.env"]


@st.composite
def candidate_commands(draw: st.DrawFn) -> str:
    program = draw(st.sampled_from(sorted(FLAGS)))
    pool = st.one_of(
        st.sampled_from(FLAGS[program]),
        st.sampled_from(OPERANDS),
        st.sampled_from(ABBREVIATIONS),
        st.text(alphabet="rRnidfFhHclsLaz5up", min_size=1, max_size=4).map(lambda t: "-" + t),
    )
    words = draw(st.lists(pool, max_size=6))
    return " ".join([program, *(shlex.quote(w) for w in words)])


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_workspace(tmp_path_factory.mktemp("ro_repo") / "ws")


def snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if ".git" not in p.parts} | {
        str(p.relative_to(root)) for p in (root / ".git").iterdir()
    }


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command=candidate_commands())
def test_whatever_is_judged_read_only_never_prints_a_secret(repo: Path, command: str) -> None:
    if not is_read_only_command(command, str(repo)):
        return
    before = snapshot(repo)
    try:
        done = subprocess.run(
            [shutil.which("bash") or "/bin/sh", "-c", command],
            cwd=repo,
            env=ShellTool(repo).env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=5,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{command!r} was judged read-only but hung (follows or blocks)")
    output = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
    assert SECRET not in output and GIT_SECRET not in output, (command, output[:500])
    assert snapshot(repo) == before, f"{command!r} was judged read-only but wrote a file"


@pytest.mark.parametrize(
    "command",
    [
        "ls -la",
        "ls -R src",
        "cat hello.txt",
        "head -n 1 hello.txt src/app.py",
        "tail -n +1 hello.txt",
        "grep -n API hello.txt",
        "wc -l hello.txt",
        "du -sh src",
        "git status --short",
        "git log --oneline -n 1",
        "git diff --stat",
        "git show --stat HEAD",
        "git log -p -- hello.txt",
        "git diff -- hello.txt",
    ],
)
def test_the_property_has_teeth_ordinary_commands_are_read_only(repo: Path, command: str) -> None:
    """The generated property only means something if useful commands do pass (and get run)."""
    assert is_read_only_command(command, str(repo)), command
    test_whatever_is_judged_read_only_never_prints_a_secret.hypothesis.inner_test(repo, command)  # type: ignore[attr-defined]
