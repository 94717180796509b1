"""Path rules judge the resolved path: no spelling of a denied path gets past a deny rule, and an allow
rule never covers a path that resolves outside what it names.

The side effect checked: with a real `FileTools` workspace and a real agent, the content of a denied
file never reaches a tool result or the stored transcript, whatever spelling the model uses.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt import (
    GenerateReason,
    PermissionContext,
    PermissionMode,
    PermissionRule,
    ReActAgent,
    RuntimeContext,
    Toolkit,
    ToolResultBlock,
    ToolUseBlock,
)
from agentrt.model import ScriptedModel
from agentrt.permission import Decision, PermissionEngine
from agentrt.state import InMemoryStateStore
from agentrt.tool.builtin import FileTools, ShellTool

SECRET = f"TOPSECRET-{uuid.uuid4().hex}"


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A workspace under a fake HOME: secret/x.txt (denied), pub/ok.txt, links into secret and out."""
    home = tmp_path / "home"
    root = home / "ws"
    (root / "secret" / "deep").mkdir(parents=True)
    (root / "pub").mkdir()
    (root / "secret" / "x.txt").write_text(SECRET + "\n")
    (root / "secret" / "deep" / "y.txt").write_text(SECRET + "\n")
    (root / "pub" / "ok.txt").write_text("public\n")
    (root / "pub" / "dirlink").symlink_to(root / "secret", target_is_directory=True)
    (root / "pub" / "filelink.txt").symlink_to(root / "secret" / "x.txt")
    (tmp_path / "outside.txt").write_text("outside\n")
    (root / "pub" / "out").symlink_to(tmp_path / "outside.txt")
    monkeypatch.setenv("HOME", str(home))
    return root


def deny_secret(root: Path) -> PermissionRule:
    return PermissionRule(tool="read_file", decision=Decision.DENY, args={"path": f"{root}/secret/**"})


def spellings(root: Path) -> list[str]:
    r = str(root)
    return [
        "secret/x.txt",
        "./secret/x.txt",
        "secret//x.txt",
        "secret/./x.txt",
        f"{r}/secret/x.txt",
        f"{r}/./secret/x.txt",
        f"{r}//secret/x.txt",
        f"/{r}/secret/x.txt",
        "pub/../secret/x.txt",
        "pub/missing/../../secret/x.txt",
        f"{r}/pub/../secret/x.txt",
        "../ws/secret/x.txt",
        "pub/dirlink/x.txt",
        "pub/filelink.txt",
        "secret/deep/y.txt",
        "secret/",
        "secret",
        "~/ws/secret/x.txt",
        "SECRET/X.TXT",  # a case-insensitive file system reads the same file: deny rules fold case
    ]


def test_deny_rule_catches_every_spelling(ws: Path) -> None:
    rule = deny_secret(ws)
    files = FileTools(ws)
    engine = PermissionEngine(PermissionContext(rules=[rule]))
    for path in spellings(ws):
        call = ToolUseBlock(id="c", name="read_file", input={"path": path})
        verdict = engine.check(files.read_file, call, RuntimeContext())
        assert verdict.decision is Decision.DENY, (path, verdict.reason)
    for path in ("pub/ok.txt", "pub/../pub/ok.txt", "secretary.txt"):
        call = ToolUseBlock(id="c", name="read_file", input={"path": path})
        assert engine.check(files.read_file, call, RuntimeContext()).decision is Decision.ALLOW, path


def test_relative_deny_rule_resolves_against_the_tool_workspace(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir("/")
    rule = PermissionRule(tool="read_file", decision=Decision.DENY, args={"path": "secret/**"})
    engine = PermissionEngine(PermissionContext(rules=[rule]))
    files = FileTools(ws)
    for path in spellings(ws):
        call = ToolUseBlock(id="c", name="read_file", input={"path": path})
        assert engine.check(files.read_file, call, RuntimeContext()).decision is Decision.DENY, path


def test_a_bare_name_deny_rule_matches_at_any_depth(ws: Path) -> None:
    rule = PermissionRule(tool="*", decision=Decision.DENY, args={"path": "*.txt"})
    assert rule.matches("read_file", {"path": "pub/ok.txt"}, workspace=str(ws))
    assert rule.matches("read_file", {"file_path": "/etc/x.txt"}, workspace=str(ws))  # any path argument


def test_directory_that_holds_denied_paths_asks(ws: Path) -> None:
    # A listing or search of a parent directory would reach the denied files: the engine asks.
    rule = PermissionRule(tool="*", decision=Decision.DENY, args={"path": f"{ws}/secret/**"})
    engine = PermissionEngine(PermissionContext(rules=[rule]))
    files = FileTools(ws)
    call = ToolUseBlock(id="c", name="grep_files", input={"pattern": "TOP", "path": "."})
    verdict = engine.check(files.grep_files, call, RuntimeContext())
    assert verdict.decision is Decision.ASK and "may contain" in verdict.reason
    (ws / "clean").mkdir()
    (ws / "clean" / "a.txt").write_text("TOP\n")
    call = ToolUseBlock(id="c", name="grep_files", input={"pattern": "TOP", "path": "clean"})
    assert engine.check(files.grep_files, call, RuntimeContext()).decision is Decision.ALLOW
    # pub holds a symlink into secret: a search that follows links would reach it
    call = ToolUseBlock(id="c", name="grep_files", input={"pattern": "TOP", "path": "pub"})
    assert engine.check(files.grep_files, call, RuntimeContext()).decision is Decision.ASK
    # a left-out path argument is judged by its default ("." here)
    for name, args in (("grep_files", {"pattern": "TOP"}), ("list_dir", {}), ("glob_files", {"pattern": "**/*"})):
        call = ToolUseBlock(id="c", name=name, input=args)
        assert engine.check(getattr(files, name), call, RuntimeContext()).decision is Decision.ASK, name


def test_allow_rule_never_matches_a_path_outside_it(ws: Path) -> None:
    rule = PermissionRule(tool="read_file", args={"path": f"{ws}/pub/*"})
    inside = ["pub/ok.txt", f"{ws}/pub/ok.txt", "pub/./ok.txt"]
    outside = [
        f"{ws}/pub/../secret/x.txt",
        f"{ws}/pub/../../outside.txt",
        "pub/../../../etc/passwd",
        "pub/dirlink/x.txt",
        "pub/filelink.txt",  # a symlink whose target is outside pub/
        "pub/out",  # a symlink pointing out of the workspace
        "pub/dirlink",
    ]
    for path in inside:
        assert rule.matches("read_file", {"path": path}, workspace=str(ws)), path
    for path in outside:
        assert not rule.matches("read_file", {"path": path}, workspace=str(ws)), path
    slash = PermissionRule(tool="read_file", args={"path": "/ws/*"})
    assert not slash.matches("read_file", {"path": "/ws/../etc/passwd"})
    assert not slash.matches("read_file", {"path": "/ws/a/b"})  # "*" stays in one directory


# -- the side effect: a real agent with FileTools ----------------------------------------------------------------
async def _agent_reads(
    ws: Path, calls: list[dict[str, Any]], mode: PermissionMode
) -> tuple[Any, list[ToolResultBlock], str]:
    toolkit = Toolkit()
    toolkit.register(FileTools(ws))
    store = InMemoryStateStore()
    blocks = [ToolUseBlock(id=f"c{i}", name=c["name"], input=c["input"]) for i, c in enumerate(calls)]
    model = ScriptedModel([blocks, "done"])
    agent = ReActAgent(
        "reader",
        "You read files.",
        model=model,
        toolkit=toolkit,
        state_store=store,
        permission=PermissionContext(mode=mode, rules=[deny_secret(ws)]),
    )
    ctx = RuntimeContext(user_id="u", session_id="s")
    reply = await agent.call("read them", ctx)
    state = await agent.get_state("u", "s")
    transcript = "\n".join(m.to_json() for m in state.messages) + reply.to_json()
    results = (
        [b for m in model.requests[-1].messages for b in m.blocks(ToolResultBlock)] if len(model.requests) > 1 else []
    )
    return reply, results, transcript


class OneCall:
    """A real agent whose model makes one tool call, then answers: what the run left behind."""

    def __init__(self, reply: Any, results: list[ToolResultBlock], transcript: str) -> None:
        self.reply = reply
        self.results = results
        self.transcript = transcript

    @property
    def stopped_safely(self) -> bool:
        """It paused for approval, or every result was denied."""
        paused = self.reply.generate_reason is GenerateReason.AWAITING_CONFIRMATION
        return paused or all(r.state == "denied" for r in self.results)


async def _one_call(
    tool: Any, name: str, args: dict[str, Any], rules: list[PermissionRule], mode: PermissionMode
) -> OneCall:
    toolkit = Toolkit()
    toolkit.register(tool)
    model = ScriptedModel([ToolUseBlock(id="c", name=name, input=args), "done"])
    agent = ReActAgent(
        "r",
        "s",
        model=model,
        toolkit=toolkit,
        state_store=InMemoryStateStore(),
        permission=PermissionContext(mode=mode, rules=rules),
    )
    reply = await agent.call("go", RuntimeContext(user_id="u", session_id="c"))
    state = await agent.get_state("u", "c")
    results = [b for m in model.requests[-1].messages for b in m.blocks(ToolResultBlock)] if model.requests else []
    return OneCall(reply, results, reply.to_json() + "".join(m.to_json() for m in state.messages))


@pytest.mark.parametrize("mode", [PermissionMode.DEFAULT, PermissionMode.BYPASS, PermissionMode.EXPLORE])
async def test_secret_content_never_reaches_the_transcript(ws: Path, mode: PermissionMode) -> None:
    calls = [{"name": "read_file", "input": {"path": p}} for p in spellings(ws)]
    calls.append({"name": "read_file", "input": {"path": "pub/ok.txt"}})
    reply, results, transcript = await _agent_reads(ws, calls, mode)
    assert reply.generate_reason is GenerateReason.STOP
    assert SECRET not in transcript
    by_id = {r.id: r for r in results}
    assert all(by_id[f"c{i}"].state == "denied" for i in range(len(calls) - 1))
    assert "public" in str(by_id[f"c{len(calls) - 1}"].output)  # the control: other files are read


@pytest.mark.parametrize("args", [{"pattern": "TOPSECRET", "path": "."}, {"pattern": "TOPSECRET"}])
async def test_a_search_over_the_parent_directory_pauses(ws: Path, args: dict[str, Any]) -> None:
    rule_all = PermissionRule(tool="*", decision=Decision.DENY, args={"path": f"{ws}/secret/**"})
    run = await _one_call(FileTools(ws), "grep_files", args, [rule_all], PermissionMode.BYPASS)
    assert run.reply.generate_reason is GenerateReason.AWAITING_CONFIRMATION
    assert SECRET not in run.transcript


@pytest.mark.parametrize(
    "args",
    [
        {"pattern": "TOPSECRET", "path": "."},
        {"pattern": "TOPSECRET", "path": "pub"},  # pub/dirlink leads into secret
        {"pattern": "TOPSECRET", "path": "secret"},
    ],
)
async def test_a_regex_deny_rule_also_stops_a_search_that_would_reach_it(ws: Path, args: dict[str, Any]) -> None:
    rule = PermissionRule(tool="*", decision=Decision.DENY, args={"path": "re:.*/secret/.*"})
    run = await _one_call(FileTools(ws), "grep_files", args, [rule], PermissionMode.BYPASS)
    assert SECRET not in run.transcript
    assert run.stopped_safely


# -- shell commands: the paths their words name ------------------------------------------------------------------
SHELL_SPELLINGS = [
    "cat secre?/x.txt",
    "cat s*/x.txt",
    "cat */x.txt",
    "cat [s]ecret/x.txt",
    "cat {pub,secret}/x.txt",
    "cat sec{r,}et/x.txt",
    "cat secret/{x,y}.txt",
    "cat $PWD/secret/x.txt",
    "cat ${PWD}/secret/x.txt",
    'cat "$PWD"/secret/x.txt',
    "cat ~+/secret/x.txt",
    "cat ~/ws/secret/x.txt",
    "cat ~/ws/s*/x.txt",
    "cat $(pwd)/secret/x.txt",
    "cd pub && cat ../secret/x.txt",
    "cd pub; cd ..; cat secret/x.txt",
    "pushd pub >/dev/null; cat ../secret/x.txt",
    "cd .. && cat ws/secret/x.txt",
    "grep -r TOPSECRET .",
    "grep -R TOPSECRET pub",
    "find . -name x.txt -exec cat {} +",
    "tar cf - . | tar xOf -",
    "cat pub/dirl*/x.txt",
    "cat secret/deep/{y,z}.txt",
    "cat {,./}secret/x.txt",
]


@pytest.mark.parametrize("mode", [PermissionMode.BYPASS, PermissionMode.DEFAULT])
@pytest.mark.parametrize("command", SHELL_SPELLINGS)
async def test_a_shell_command_never_reaches_a_denied_path(ws: Path, command: str, mode: PermissionMode) -> None:
    rule = PermissionRule(tool="*", decision=Decision.DENY, args={"path": f"{ws}/secret/**"})
    allow_all = PermissionRule(tool="run_command")  # even a rule allowing the whole tool
    run = await _one_call(ShellTool(ws, timeout=10), "run_command", {"command": command}, [rule, allow_all], mode)
    assert SECRET not in run.transcript, command
    assert run.stopped_safely


async def test_the_shell_control_reads_a_public_file(ws: Path) -> None:
    """Without this the test above could pass for the wrong reason (a rule that stops everything)."""
    rule = PermissionRule(tool="*", decision=Decision.DENY, args={"path": f"{ws}/secret/**"})
    run = await _one_call(
        ShellTool(ws, timeout=10), "run_command", {"command": "cat p?b/ok.txt"}, [rule], PermissionMode.BYPASS
    )
    assert run.reply.generate_reason is GenerateReason.STOP
    [result] = run.results
    assert "public" in str(result.output)


# -- properties -----------------------------------------------------------------------------------------------
_LEADING = st.sampled_from(["", "./", "pub/../", "nowhere/../", "pub/./../", "pub/dirlink/../../ws/", "../ws/"])
_INNER = st.sampled_from(["./", "/", "pub/../", "nowhere/../", "deep/../"])


@st.composite
def _spelling(draw: st.DrawFn, root: str) -> str:
    """A spelling of secret/x.txt: detours and noise between the parts, relative or absolute, ~ or not."""
    base = draw(st.sampled_from([root + "/", root + "//", root + "/./", "", "./", "~/ws/"]))
    lead = "".join(draw(st.lists(_LEADING, max_size=2)))
    inner = "".join(draw(st.lists(_INNER, max_size=3)))
    return f"{base}{lead}secret/{inner}x.txt"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_generated_spellings_are_denied(ws: Path, data: st.DataObject) -> None:
    path = data.draw(_spelling(str(ws)))
    assert os.path.realpath(os.path.join(ws, os.path.expanduser(path))) == str(ws / "secret" / "x.txt"), path
    assert deny_secret(ws).matches("read_file", {"path": path}, workspace=str(ws)), path


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    junk=st.lists(st.sampled_from(["a", "b", ".", "pub", "x y"]), max_size=3),
    ups=st.integers(1, 4),
    target=st.sampled_from(["etc/passwd", "outside.txt", "home/other"]),
)
def test_allow_never_matches_an_escape(ws: Path, junk: list[str], ups: int, target: str) -> None:
    rule = PermissionRule(tool="read_file", args={"path": f"{ws}/pub/**"})
    path = "/".join([str(ws), "pub", *junk, *([".."] * (len(junk) + ups + 1)), target])
    resolved = os.path.realpath(path)
    inside = resolved.startswith(str(ws / "pub") + "/")
    assert rule.matches("read_file", {"path": path}, workspace=str(ws)) is inside, (path, resolved)
