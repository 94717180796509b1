"""The modes table, through a real agent: what runs, what asks, what is denied, per tool kind.

An agent created without a ``permission`` argument keeps the lightweight behaviour (only destructive
tools and tools that require confirmation ask). An application that passes ``DEFAULT`` (or a context in
DEFAULT mode) gets AgentScope's "ask unless a rule decides" for every tool that is not read-only.
Each cell is checked by its side effect: the tool's run counter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

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
    tool,
)
from agentrt.model import ScriptedModel
from agentrt.permission import Decision, PermissionEngine
from agentrt.state import InMemoryStateStore
from agentrt.tool.builtin import FileTools, ShellTool

RAN, ASKED, DENIED, EXTERNAL = "ran", "asked", "denied", "external"
M = PermissionMode
_NOT_GIVEN: Any = object()


class Kinds:
    """One tool of each kind, each counting its runs."""

    def __init__(self) -> None:
        self.runs: list[str] = []

        @tool(read_only=True)
        async def look(x: int) -> str:
            """Read something."""
            self.runs.append("look")
            return "seen"

        @tool
        async def plain(x: int) -> str:
            """Change something small."""
            self.runs.append("plain")
            return "changed"

        @tool(destructive=True)
        async def wipe(x: int) -> str:
            """Destroy something."""
            self.runs.append("wipe")
            return "wiped"

        @tool(requires_confirmation=True)
        async def notify(x: int) -> str:
            """Tell someone."""
            self.runs.append("notify")
            return "told"

        @tool(external=True)
        async def browse(x: int) -> str:
            """Runs on the client."""
            raise AssertionError("external tools never run in the agent")

        self.tools = [look, plain, wipe, notify, browse]


KINDS = ("look", "plain", "wipe", "notify", "browse")

#            permission argument                 look    plain   wipe    notify  browse
TABLE: list[tuple[str, Any, tuple[str, str, str, str, str]]] = [
    ("implicit", _NOT_GIVEN, (RAN, RAN, ASKED, ASKED, EXTERNAL)),
    ("none", None, (RAN, RAN, ASKED, ASKED, EXTERNAL)),
    ("DEFAULT", M.DEFAULT, (RAN, ASKED, ASKED, ASKED, ASKED)),
    ("'default'", "default", (RAN, ASKED, ASKED, ASKED, ASKED)),
    ("context", PermissionContext(), (RAN, ASKED, ASKED, ASKED, ASKED)),
    ("ACCEPT_EDITS", M.ACCEPT_EDITS, (RAN, ASKED, ASKED, ASKED, ASKED)),
    ("EXPLORE", M.EXPLORE, (RAN, DENIED, DENIED, DENIED, DENIED)),
    ("BYPASS", M.BYPASS, (RAN, RAN, RAN, RAN, EXTERNAL)),
    ("DONT_ASK", M.DONT_ASK, (RAN, DENIED, DENIED, DENIED, DENIED)),
    (
        "DEFAULT+allow",
        PermissionContext(rules=[PermissionRule(tool=k) for k in KINDS]),
        (RAN, RAN, RAN, RAN, EXTERNAL),
    ),
    (
        "DEFAULT+deny",
        PermissionContext(rules=[PermissionRule(tool="*", decision=Decision.DENY)]),
        (DENIED, DENIED, DENIED, DENIED, DENIED),
    ),
    (
        "BYPASS+ask",
        PermissionContext(mode=M.BYPASS, rules=[PermissionRule(tool="*", decision=Decision.ASK)]),
        (ASKED, ASKED, ASKED, ASKED, ASKED),
    ),
]
CASES = [
    pytest.param(permission, kind, row[i], id=f"{label}-{kind}")
    for label, permission, row in TABLE
    for i, kind in enumerate(KINDS)
]


async def _outcome(permission: Any, kind: str) -> tuple[str, list[str]]:
    kinds = Kinds()
    model = ScriptedModel([ToolUseBlock(id="c1", name=kind, input={"x": 1}), "done"])
    options: dict[str, Any] = {} if permission is _NOT_GIVEN else {"permission": permission}
    agent = ReActAgent("a", "s", model=model, toolkit=Toolkit(kinds.tools), state_store=InMemoryStateStore(), **options)
    reply = await agent.call("go", RuntimeContext(user_id="u", session_id="s"))
    if reply.generate_reason is GenerateReason.AWAITING_CONFIRMATION:
        return ASKED, kinds.runs
    if reply.generate_reason is GenerateReason.AWAITING_EXTERNAL_EXECUTION:
        return EXTERNAL, kinds.runs
    [result] = [b for m in model.requests[-1].messages for b in m.blocks(ToolResultBlock)]
    return (DENIED if result.state == "denied" else RAN), kinds.runs


@pytest.mark.parametrize(("permission", "kind", "expected"), CASES)
async def test_modes_table(permission: Any, kind: str, expected: str) -> None:
    outcome, runs = await _outcome(permission, kind)
    assert outcome == expected
    assert runs == ([kind] if expected == RAN else [])


def test_only_the_implicit_context_is_trivial() -> None:
    assert PermissionEngine(PermissionContext.coerce(None)).trivial
    assert PermissionContext.coerce(None).implicit
    for explicit in (M.DEFAULT, "default", PermissionContext(), PermissionContext(mode=M.DEFAULT)):
        context = PermissionContext.coerce(explicit)
        assert not context.implicit and not PermissionEngine(context).trivial
    assert not PermissionEngine(PermissionContext.coerce(None), [{"tool": "x"}]).trivial
    # a context built with implicit=True but carrying a configuration is explicit
    assert not PermissionContext(implicit=True, mode=M.BYPASS).implicit
    assert not PermissionContext(implicit=True, rules=[PermissionRule(tool="x")]).implicit


# -- real tools ------------------------------------------------------------------------------------------------
async def _real(ws: Path, permission: Any, name: str, args: dict[str, Any]) -> str:
    toolkit = Toolkit()
    toolkit.register(FileTools(ws))
    toolkit.register(ShellTool(ws, timeout=20))
    model = ScriptedModel([ToolUseBlock(id="c1", name=name, input=args), "done"])
    options: dict[str, Any] = {} if permission is _NOT_GIVEN else {"permission": permission}
    agent = ReActAgent("a", "s", model=model, toolkit=toolkit, state_store=InMemoryStateStore(), **options)
    reply = await agent.call("go", RuntimeContext(user_id="u", session_id="s"))
    if reply.generate_reason is GenerateReason.AWAITING_CONFIRMATION:
        return ASKED
    [result] = [b for m in model.requests[-1].messages for b in m.blocks(ToolResultBlock)]
    return DENIED if result.state == "denied" else RAN


@pytest.mark.parametrize(
    ("permission", "name", "expected"),
    [
        (_NOT_GIVEN, "read_file", RAN),
        (_NOT_GIVEN, "write_file", ASKED),
        (_NOT_GIVEN, "run_command", ASKED),
        (M.DEFAULT, "read_file", RAN),
        (M.DEFAULT, "write_file", ASKED),
        (M.DEFAULT, "run_command", ASKED),
        (M.EXPLORE, "write_file", DENIED),
        (M.EXPLORE, "run_command", DENIED),
        (M.DONT_ASK, "write_file", DENIED),
        (M.BYPASS, "write_file", RAN),
    ],
)
async def test_real_tools(tmp_path: Path, permission: Any, name: str, expected: str) -> None:
    (tmp_path / "a.txt").write_text("old\n")
    args = {
        "read_file": {"path": "a.txt"},
        "write_file": {"path": "a.txt", "content": "new\n"},
        "run_command": {"command": "echo new > a.txt"},
    }[name]
    assert await _real(tmp_path, permission, name, args) == expected
    changed = (tmp_path / "a.txt").read_text() == "new\n"
    assert changed is (expected == RAN and name != "read_file")


async def test_accept_edits_runs_edits_inside_the_workspace_only(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    context = PermissionContext(mode=M.ACCEPT_EDITS, workspace=str(ws))
    assert await _real(ws, context, "write_file", {"path": "a.txt", "content": "new\n"}) == RAN
    assert (ws / "a.txt").read_text() == "new\n"
    assert await _real(ws, context, "run_command", {"command": "echo x > b.txt"}) == ASKED
    assert not (ws / "b.txt").exists()


async def test_a_rule_allowing_a_plain_tool_in_default_mode(tmp_path: Path) -> None:
    context = PermissionContext(rules=[PermissionRule(tool="plain", args={"x": "1"})])
    assert await _outcome(context, "plain") == (RAN, ["plain"])
    kinds = Kinds()
    model = ScriptedModel([ToolUseBlock(id="c1", name="plain", input={"x": 2}), "done"])
    agent = ReActAgent(
        "a", "s", model=model, toolkit=Toolkit(kinds.tools), state_store=InMemoryStateStore(), permission=context
    )
    reply = await agent.call("go", RuntimeContext(user_id="u", session_id="s"))
    assert reply.generate_reason is GenerateReason.AWAITING_CONFIRMATION and kinds.runs == []
