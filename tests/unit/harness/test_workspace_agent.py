"""`WorkspaceAgent`: every workspace piece on for one folder, run end to end with a scripted model."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from agentrt import (
    ConfirmResult,
    GenerateReason,
    LoopOptions,
    Msg,
    PermissionContext,
    PermissionMode,
    ReActAgent,
    RuntimeContext,
    ToolResultBlock,
    ToolUseBlock,
)
from agentrt.errors import UserError
from agentrt.harness.instructions import WorkspaceInstructions
from agentrt.harness.mentions import FileMentions
from agentrt.harness.workspace import WorkspaceAgent
from agentrt.model import ScriptedModel
from agentrt.state import InMemoryStateStore

SKILL = """\
---
name: release-notes
description: Write release notes from merged changes.
---
# Release notes
List the changes, newest first.
"""
SUBAGENT = """\
---
name: reviewer
description: Reviews a change for bugs.
tools: read_file, grep_files
---
You review code changes and report bugs.
"""


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no user-level AGENTS.md from the real home
    root = tmp_path / "project"
    (root / "skills" / "release-notes").mkdir(parents=True)
    (root / "skills" / "release-notes" / "SKILL.md").write_text(SKILL)
    (root / "subagents").mkdir()
    (root / "subagents" / "reviewer.md").write_text(SUBAGENT)
    (root / "AGENTS.md").write_text("Use four spaces for indentation.\n")
    (root / "app.py").write_text("def greet():\n    return 'hello'\n")
    return root


def results(msg: Msg) -> list[ToolResultBlock]:
    return msg.blocks(ToolResultBlock)


async def test_a_file_edit_end_to_end(folder: Path) -> None:
    edit = ToolUseBlock(id="e1", name="edit_file", input={"path": "app.py", "old": "'hello'", "new": "'hello, world'"})
    model = ScriptedModel(
        [
            ToolUseBlock(id="r1", name="read_file", input={"path": "app.py"}),
            edit,
            "I changed the greeting in app.py.",
        ]
    )
    agent = WorkspaceAgent(folder, model, sandbox=None)
    ctx = RuntimeContext("dev", "s1")
    try:
        paused = await agent.call("Make @app.py greet the world", ctx)
        assert paused.generate_reason is GenerateReason.AWAITING_CONFIRMATION  # an edit asks first
        assert (folder / "app.py").read_text() == "def greet():\n    return 'hello'\n"
        reply = await agent.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call="e1")]), ctx)
        assert reply.text == "I changed the greeting in app.py."
        assert (folder / "app.py").read_text() == "def greet():\n    return 'hello, world'\n"
        first = model.requests[0]
        system = first.messages[0].text
        assert "working in the folder " + str(folder) in system
        assert "Use four spaces for indentation." in system  # AGENTS.md
        assert "release-notes" in system  # the skills listing
        assert "def greet():" in first.messages[-1].text  # @app.py attached
        names = {schema.name for schema in first.tools}
        assert {"read_file", "write_file", "edit_file", "run_command", "plan_write", "plan_exit"} <= names
        assert {"agent_spawn", "load_skill"} <= names
        assert "reviewer" in next(s for s in first.tools if s.name == "agent_spawn").description
        # The session is in SQLite under .agentrt/ (read back by another connection).
        db = folder / ".agentrt" / "state.db"
        with sqlite3.connect(db) as conn:
            tables = {row[0] for row in conn.execute("select name from sqlite_master where type='table'")}
        assert tables
        state = await agent.get_state("dev", "s1")
        assert state.messages[-1].text == "I changed the greeting in app.py."
    finally:
        await agent.aclose()


async def test_the_state_store_is_out_of_the_file_tools_reach(folder: Path) -> None:
    overwrite = ToolUseBlock(id="w", name="write_file", input={"path": ".agentrt/state.db", "content": "x"})
    model = ScriptedModel([overwrite, "ok"])
    agent = WorkspaceAgent(folder, model, permission=PermissionMode.BYPASS, shell=False, subagents=False)
    try:
        await agent.call("clobber the store")
        [result] = results(model.requests[1].messages[-1])
        assert result.state == "denied"
        db = folder / ".agentrt" / "state.db"
        assert db.read_bytes().startswith(b"SQLite format 3")
    finally:
        await agent.aclose()


async def test_plan_mode_writes_the_plan_under_plans_and_blocks_edits(folder: Path) -> None:
    model = ScriptedModel(
        [
            ToolUseBlock(id="w", name="write_file", input={"path": "app.py", "content": "gone"}),
            ToolUseBlock(id="p", name="plan_write", input={"content": "1. change greet\n"}),
            "Here is my plan.",
        ]
    )
    agent = WorkspaceAgent(folder, model, sandbox=None, state_store=InMemoryStateStore())
    ctx = RuntimeContext("dev", "plan")
    assert await agent.enter_plan_mode(ctx)
    reply = await agent.call("plan the change", ctx)
    assert reply.text == "Here is my plan."
    assert results(model.requests[1].messages[-1])[0].state == "denied"
    assert (folder / "app.py").read_text().startswith("def greet")
    assert (folder / "plans" / "plan.md").read_text() == "1. change greet\n"
    assert not (folder / ".agentrt" / "state.db").exists()  # a store was given: none opened in the folder


async def test_pieces_can_be_switched_off(folder: Path) -> None:
    agent = WorkspaceAgent(
        folder,
        ScriptedModel(["ok"]),
        shell=False,
        skills=False,
        plan=False,
        subagents=False,
        instructions=False,
        mentions=False,
        state_store=InMemoryStateStore(),
    )
    assert sorted(agent.toolkit.names()) == sorted(
        ["read_file", "list_dir", "glob_files", "grep_files", "write_file", "edit_file"]
    )
    assert agent.middlewares == () and dict(agent.skills) == {}
    assert agent.shell is None and agent.plan_tools is None and agent.subagents is None
    await agent.call("hi")
    assert "Use four spaces" not in agent.model.requests[0].messages[0].text  # type: ignore[attr-defined]


async def test_options_permissions_and_extra_tools(folder: Path) -> None:
    def shout(text: str) -> str:
        """Upper-case a text."""
        return text.upper()

    agent = WorkspaceAgent(
        folder,
        ScriptedModel([]),
        name="coder",
        sys_prompt="Custom prompt.",
        tools=[shout],
        permission=PermissionContext(mode=PermissionMode.ACCEPT_EDITS),
        skills=[folder / "skills"],
        state_store=InMemoryStateStore(),
        sandbox=None,
        enable_task_list=True,
    )
    assert isinstance(agent, ReActAgent) and agent.name == "coder" and agent.sys_prompt == "Custom prompt."
    assert "shout" in agent.toolkit.names()
    context = PermissionContext.coerce(agent.permission)
    assert context.mode is PermissionMode.ACCEPT_EDITS and context.workspace == str(folder)
    assert context.rules == ()  # a given store is not guarded
    assert list(agent.skills) == ["release-notes"]
    assert isinstance(agent.middlewares[0], WorkspaceInstructions) and isinstance(agent.middlewares[1], FileMentions)
    assert repr(agent) == f"WorkspaceAgent({str(folder)!r})"
    assert agent.max_iters == 50
    await agent.aclose()
    looped = WorkspaceAgent(folder, ScriptedModel([]), loop=LoopOptions(max_iters=7), state_store=InMemoryStateStore())
    assert looped.max_iters == 7


def test_the_folder_must_exist_and_not_be_protected(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not an existing directory"):
        WorkspaceAgent(tmp_path / "missing", ScriptedModel([]))
    (tmp_path / ".ssh").mkdir()
    with pytest.raises(UserError, match="protected"):
        WorkspaceAgent(tmp_path / ".ssh", ScriptedModel([]))


async def test_the_shell_falls_back_when_no_sandbox_can_run(
    folder: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(folder))  # no bwrap on PATH
    with caplog.at_level(logging.WARNING):
        agent = WorkspaceAgent(folder, ScriptedModel([]), state_store=InMemoryStateStore())
    assert agent.shell is not None and agent.shell.sandbox is None


async def test_subagents_follow_the_folders_agents_md(folder: Path) -> None:
    spawn = ToolUseBlock(id="s1", name="agent_spawn", input={"task": "Review app.py.", "name": "reviewer"})
    model = ScriptedModel([spawn, "No bugs found.", "The reviewer found no bugs."])
    agent = WorkspaceAgent(folder, model, sandbox=None, state_store=InMemoryStateStore())
    reply = await agent.call("Have app.py reviewed.")
    assert reply.text == "The reviewer found no bugs."
    _, child, last = model.requests
    assert child.messages[0].text.startswith("You review code changes and report bugs.")
    assert "Use four spaces for indentation." in child.messages[0].text
    assert sorted(s.name for s in child.tools) == ["grep_files", "read_file"]
    assert results(last.messages[-1])[0].output == "No bugs found."
