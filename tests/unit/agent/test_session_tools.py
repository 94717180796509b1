"""Tool groups per session, the meta tool, and the task list."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentrt import ReActAgent, RuntimeContext, Toolkit, ToolResultBlock, ToolUseBlock, tool
from agentrt.errors import UserError
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.state import InMemoryStateStore


@tool(read_only=True)
async def deploy(service: str) -> str:
    """Deploy a service."""
    return f"deployed {service}"


@tool(read_only=True)
async def status() -> str:
    """Service status."""
    return "all green"


def toolkit() -> Toolkit:
    tk = Toolkit([status])
    tk.create_group("ops", "Deployment tools")
    tk.register(deploy, group="ops")
    return tk


def names(request: ModelRequest) -> list[str]:
    return [t.name for t in request.tools]


def last_result(model: ScriptedModel) -> ToolResultBlock:
    return [b for m in model.requests[-1].messages for b in m.blocks(ToolResultBlock)][-1]


async def test_group_activation_is_per_session_even_when_concurrent() -> None:
    gate = asyncio.Event()
    both_in = asyncio.Barrier(3)  # the two calls and this test
    seen: dict[str, list[str]] = {}

    async def reply(request: ModelRequest) -> Any:
        session = request.messages[-1].text
        seen[session] = names(request)
        await both_in.wait()
        await gate.wait()
        return "ok"

    agent = ReActAgent(
        "ops", model=ScriptedModel.from_function(reply), toolkit=toolkit(), state_store=InMemoryStateStore()
    )
    a, b = RuntimeContext(user_id="u", session_id="a"), RuntimeContext(user_id="u", session_id="b")
    assert await agent.activate_group(a, "ops") == ["ops"]
    tasks = [asyncio.create_task(agent.call("a", a)), asyncio.create_task(agent.call("b", b))]
    async with asyncio.timeout(5):
        await both_in.wait()  # both sessions are inside a model call at the same time
    gate.set()
    await asyncio.gather(*tasks)
    assert seen["a"] == ["status", "deploy"] and seen["b"] == ["status"]
    assert agent.toolkit.default_active_groups() == frozenset()  # the shared toolkit is untouched
    assert await agent.deactivate_group(a, "ops") == []
    with pytest.raises(UserError, match="unknown tool group"):
        await agent.activate_group(a, "nope")


async def test_inactive_group_tool_is_unknown_to_the_executor() -> None:
    model = ScriptedModel([ToolUseBlock(name="deploy", input={"service": "api"}), "ok"])
    agent = ReActAgent("ops", model=model, toolkit=toolkit(), state_store=InMemoryStateStore())
    await agent.call("deploy api")
    result = last_result(model)
    assert result.state == "error" and "Unknown tool 'deploy'" in result.output


async def test_meta_tool_lists_and_activates_groups_for_the_session() -> None:
    model = ScriptedModel(
        [
            ToolUseBlock(name="manage_tool_groups", input={"action": "list"}),
            ToolUseBlock(name="manage_tool_groups", input={"action": "activate", "group": "ops"}),
            ToolUseBlock(name="deploy", input={"service": "api"}),
            "deployed",
        ]
    )
    agent = ReActAgent("ops", model=model, toolkit=toolkit(), state_store=InMemoryStateStore(), enable_meta_tool=True)
    ctx = RuntimeContext(user_id="u", session_id="s")
    await agent.call("ship it", ctx)
    assert (
        "ops (inactive): Deployment tools; tools: deploy"
        in model.requests[1].messages[-1].blocks(ToolResultBlock)[0].output
    )
    assert "deploy" not in names(model.requests[1]) and "deploy" in names(model.requests[2])
    assert last_result(model).output == "deployed api"
    assert (await agent.get_state("u", "s")).active_groups == ["ops"]
    assert (await agent.get_state("u", "other")).active_groups is None


async def test_task_list_is_stored_and_reminded() -> None:
    todos = [
        {"content": "collect data", "status": "completed"},
        {"content": "write report", "status": "in_progress"},
        {"content": "send it", "status": "pending"},
    ]
    model = ScriptedModel(
        [
            ToolUseBlock(name="todo_write", input={"todos": todos}),
            ToolUseBlock(name="todo_write", input={"todos": [{"content": "a", "status": "in_progress"}] * 2}),
            "working on it",
        ]
    )
    agent = ReActAgent("planner", model=model, state_store=InMemoryStateStore(), enable_task_list=True)
    ctx = RuntimeContext(user_id="u", session_id="s")
    await agent.call("plan", ctx)
    reminder = model.requests[1].messages[-1].text  # appended after the history, never stored
    assert "Open tasks" in reminder and "write report" in reminder and "collect data" not in reminder
    refused = last_result(model)
    assert refused.state == "error" and "at most one task" in refused.output
    state = await agent.get_state("u", "s")
    assert list(state.tasks) == todos
    assert all("Open tasks" not in m.text for m in state.messages)  # the reminder is never persisted
