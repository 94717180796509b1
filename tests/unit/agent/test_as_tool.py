"""Agent-as-tool: isolated child sessions, forwarded events and usage, interrupts, input schemas."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import pytest
from pydantic import BaseModel

from agentrt import GenerateReason, Msg, ReActAgent, RuntimeContext, Toolkit, ToolResultBlock, ToolUseBlock, tool
from agentrt import events as ev
from agentrt.agent.as_tool import agent_as_tool
from agentrt.errors import UserError
from agentrt.message import TokenUsage
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.permission import ConfirmResult
from agentrt.pipeline import sequential
from agentrt.state import InMemoryStateStore

CTX = RuntimeContext(user_id="u", session_id="s")
CHILD_USAGE = TokenUsage(input_tokens=7, output_tokens=3)
PARENT_USAGE = TokenUsage(input_tokens=100, output_tokens=10)


def results(request: ModelRequest) -> list[ToolResultBlock]:
    return [b for m in request.messages for b in m.blocks(ToolResultBlock)]


def delegate_once(tool_name: str, args: dict[str, Any], answer: str = "done: {}") -> Any:
    """A parent planner: call `tool_name` once per turn, then answer with the tool's output."""
    ids = itertools.count(1)

    def plan(request: ModelRequest) -> Any:
        last = request.messages[-1].blocks(ToolResultBlock)
        if last and last[-1].name == tool_name:
            return answer.format(last[-1].output)
        return ToolUseBlock(id=f"call-{next(ids)}", name=tool_name, input=args)

    return plan


def child_agent(reply: Any = None, **kwargs: Any) -> ReActAgent:
    def echo(request: ModelRequest) -> str:
        return f"child got {request.last_user_text!r}"

    model = ScriptedModel.from_function(reply or echo, usage=CHILD_USAGE)
    return ReActAgent("helper", "You help.", model=model, state_store=InMemoryStateStore(), **kwargs)


def parent_agent(tools: list[Any], plan: Any) -> ReActAgent:
    model = ScriptedModel.from_function(plan, usage=PARENT_USAGE)
    return ReActAgent("boss", "You delegate.", model=model, toolkit=Toolkit(tools), state_store=InMemoryStateStore())


async def test_subagent_events_and_usage_appear_in_the_parent_stream() -> None:
    child = child_agent()
    parent = parent_agent([child.as_tool()], delegate_once("helper", {"task": "sum 2+2"}))
    events = [e async for e in parent.stream_events("go", CTX)]
    sources = {e.source for e in events}
    assert sources == {"boss", "helper"}
    child_events = [e for e in events if e.source == "helper"]
    assert isinstance(child_events[0], ev.RunStarted) and isinstance(child_events[-1], ev.RunFinished)
    assert child_events[0].session_id == "s/helper"
    assert {e.reply_id for e in child_events} != {e.reply_id for e in events if e.source == "boss"}
    child_usage = [e.usage for e in events if isinstance(e, ev.Usage) and e.source == "helper"]
    assert child_usage == [CHILD_USAGE]
    reply = events[-1].msg  # type: ignore[attr-defined]
    assert events[-1].source == "boss"
    assert reply.text == "done: child got 'sum 2+2'"
    # Two parent model calls plus the child's one.
    assert reply.usage == PARENT_USAGE + PARENT_USAGE + CHILD_USAGE
    # A plain call (nobody streams) aggregates the usage the same way.
    again = await parent.call("again", RuntimeContext(user_id="u", session_id="t"))
    assert again.usage == PARENT_USAGE + PARENT_USAGE + CHILD_USAGE


async def test_child_session_is_isolated_and_continues_across_calls() -> None:
    child = child_agent()
    parent = parent_agent([child.as_tool()], delegate_once("helper", {"task": "remember 42"}))
    await parent.call("first", CTX)
    await parent.call("second", CTX)
    child_state = await child.get_state("u", "s/helper")
    assert [m.text for m in child_state.messages] == [
        "remember 42",
        "child got 'remember 42'",
        "remember 42",
        "child got 'remember 42'",
    ]
    # The child's second request shows its first exchange; the parent's history holds none of it.
    assert len([m for m in child.model.requests[-1].messages if m.role != "system"]) == 3  # type: ignore[attr-defined]
    parent_state = await parent.get_state("u", "s")
    assert all(m.name != "helper" for m in parent_state.messages)
    # Another parent session gets another child session.
    await parent.call("third", RuntimeContext(user_id="u", session_id="other"))
    assert len((await child.get_state("u", "other/helper")).messages) == 2


async def test_per_call_and_custom_session_strategies() -> None:
    child = child_agent()
    per_call = agent_as_tool(child, name="fresh", session="per_call")
    parent = parent_agent([per_call], delegate_once("fresh", {"task": "x"}))
    await parent.call("a", CTX)
    await parent.call("b", CTX)
    # Each call started from an empty history.
    assert [len([m for m in r.messages if m.role != "system"]) for r in child.model.requests] == [1, 1]  # type: ignore[attr-defined]

    custom = agent_as_tool(child, name="shared", session=lambda ctx: f"team-{ctx.user_id}")
    parent = parent_agent([custom], delegate_once("shared", {"task": "y"}))
    await parent.call("c", CTX)
    assert len((await child.get_state("u", "team-u")).messages) == 2
    with pytest.raises(UserError, match="session must be"):
        agent_as_tool(child, session="global")  # type: ignore[arg-type]


async def test_interrupting_a_streaming_parent_stops_the_child() -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    @tool(read_only=True)
    async def slow() -> str:
        """Slow work."""
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    child = ReActAgent(
        "worker",
        model=ScriptedModel([ToolUseBlock(id="w", name="slow")]),
        toolkit=Toolkit([slow]),
        state_store=InMemoryStateStore(),
    )
    parent = parent_agent([child.as_tool()], delegate_once("worker", {"task": "work"}))
    events: list[ev.AgentEvent] = []

    async def consume() -> None:
        async for event in parent.stream_events("go", CTX):
            events.append(event)

    task = asyncio.create_task(consume())
    await started.wait()
    assert parent.interrupt(CTX)
    await task
    assert cancelled.is_set()  # the child's tool was cancelled at once
    assert events[-1].msg.generate_reason is GenerateReason.INTERRUPTED  # type: ignore[attr-defined]
    assert any(isinstance(e, ev.ToolCallStarted) and e.source == "worker" for e in events)
    child_state = await child.get_state("u", "s/worker")
    [result] = child_state.messages[-1].blocks(ToolResultBlock)
    assert result.state == "interrupted"


async def test_a_child_interrupted_on_its_own_session_reports_it_to_the_parent_model() -> None:
    started = asyncio.Event()

    async def slow(request: ModelRequest) -> str:
        started.set()
        await asyncio.sleep(30)
        return "never"

    child = ReActAgent("helper", model=ScriptedModel.from_function(slow), state_store=InMemoryStateStore())
    parent = parent_agent([child.as_tool()], delegate_once("helper", {"task": "t"}))
    task = asyncio.create_task(parent.call("go", CTX))
    await started.wait()
    assert child.interrupt(RuntimeContext(user_id="u", session_id="s/helper"))
    reply = await task
    [result] = results(parent.model.requests[-1])  # type: ignore[attr-defined]
    assert result.state == "error" and "was interrupted" in result.text
    assert reply.generate_reason is GenerateReason.STOP


async def test_input_schema_dict_validates_and_sends_json() -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
        "required": ["city", "days"],
        "additionalProperties": False,
    }
    child = child_agent()
    forecast = child.as_tool(name="forecast", description="Weather forecast.", input_schema=schema)
    assert forecast.parameters == schema
    parent = parent_agent([forecast], delegate_once("forecast", {"city": "Oslo", "days": 3}))
    await parent.call("weather?", CTX)
    assert json.loads(child.model.requests[-1].last_user_text) == {"city": "Oslo", "days": 3}  # type: ignore[attr-defined]

    bad = parent_agent([forecast], delegate_once("forecast", {"city": "Oslo", "days": 0}))
    await bad.call("weather?", RuntimeContext(user_id="u", session_id="bad"))
    [result] = results(bad.model.requests[-1])  # type: ignore[attr-defined]
    assert result.state == "error" and "'days'" in result.text
    assert len(child.model.requests) == 1  # type: ignore[attr-defined]  # the child never saw the bad call

    with pytest.raises(UserError, match="not a valid JSON Schema"):
        child.as_tool(input_schema={"type": "no-such-type"})


async def test_input_schema_pydantic_model() -> None:
    class Query(BaseModel):
        topic: str
        depth: int = 1

    child = child_agent()
    research = agent_as_tool(child, name="research", input_schema=Query)
    assert set(research.parameters["properties"]) == {"topic", "depth"}
    parent = parent_agent([research], delegate_once("research", {"topic": "bees"}))
    await parent.call("go", CTX)
    assert json.loads(child.model.requests[-1].last_user_text) == {"topic": "bees", "depth": 1}  # type: ignore[attr-defined]


async def test_missing_task_goes_back_to_the_model_as_an_error() -> None:
    child = child_agent()
    parent = parent_agent([child.as_tool()], delegate_once("helper", {"job": "x"}))
    reply = await parent.call("go", CTX)
    [result] = results(parent.model.requests[-1])  # type: ignore[attr-defined]
    assert result.state == "error" and "'task'" in result.text
    assert reply.generate_reason is GenerateReason.STOP


async def test_a_pipeline_tool_pauses_the_parent_and_the_answer_resumes_it() -> None:
    @tool(destructive=True)
    async def wipe(path: str) -> str:
        """Delete a path."""
        return f"wiped {path}"

    def cleaner_plan(request: ModelRequest) -> Any:
        if results(request):
            return "cleaned"
        return ToolUseBlock(id="w1", name="wipe", input={"path": "/tmp/x"})

    cleaner = ReActAgent(
        "cleaner",
        model=ScriptedModel.from_function(cleaner_plan),
        toolkit=Toolkit([wipe]),
        state_store=InMemoryStateStore(),
    )
    reporter = ReActAgent(
        "reporter",
        model=ScriptedModel.from_function(lambda r: f"report: {r.last_user_text}"),
        state_store=InMemoryStateStore(),
    )
    crew = sequential([cleaner, reporter], name="crew")
    parent = parent_agent([crew.as_tool()], delegate_once("crew", {"task": "tidy"}))
    paused = await parent.call("go", CTX)
    assert paused.generate_reason is GenerateReason.AWAITING_CONFIRMATION
    # The grandchild's call surfaces in the parent's pause, ready to be answered.
    assert [p["id"] for p in paused.metadata["pending_tool_calls"]] == ["w1"]
    reply = await parent.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call="w1")]), CTX)
    assert reply.text == "done: report: cleaned"
