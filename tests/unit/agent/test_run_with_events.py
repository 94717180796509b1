"""`AgentBase.run_with_events`: the push form of `stream_events` gives the same events and the same guarantees."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt import ReActAgent, RuntimeContext, ToolResultBlock, ToolUseBlock, tool
from agentrt import events as ev
from agentrt.message import ContentBlock, TextBlock
from agentrt.model import ScriptedModel

MakeAgent = Callable[..., ReActAgent]


@tool(read_only=True)
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


_VARYING = {
    "reply_id",
    "block_id",
    "call_id",
    "tool_call_id",
    "tool_use_id",
    "id",
    "timestamp",
    "created_at",
    "duration_ms",
    "elapsed",
}


def _scrub(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items() if k not in _VARYING}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def _comparable(event: ev.AgentEvent) -> Any:
    """An event without the ids and times that differ from run to run."""
    return _scrub(event.to_dict())


def _turns(words: list[str], calls: int) -> list[Any]:
    first: list[ContentBlock] = [TextBlock(text=" ".join(words) or "ok")]
    first += [ToolUseBlock(name="add", input={"a": i, "b": 1}) for i in range(calls)]
    return [first, " ".join(reversed(words)) or "done"] if calls else [first]


@settings(max_examples=25, deadline=None)
@given(
    words=st.lists(st.sampled_from(["alpha", "beta", "gamma", "δέλτα", "数据"]), max_size=6), calls=st.integers(0, 3)
)
def test_run_with_events_emits_what_stream_events_yields(words: list[str], calls: int) -> None:
    async def both() -> tuple[list[ev.AgentEvent], list[ev.AgentEvent], str, str]:
        streamed_agent = ReActAgent("bot", "You are a test bot.", model=ScriptedModel(_turns(words, calls)))
        streamed_agent.toolkit.register(add)
        streamed = [e async for e in streamed_agent.stream_events("go", RuntimeContext("u", "s"))]
        pushed_agent = ReActAgent("bot", "You are a test bot.", model=ScriptedModel(_turns(words, calls)))
        pushed_agent.toolkit.register(add)
        pushed: list[ev.AgentEvent] = []
        reply = await pushed_agent.run_with_events("go", RuntimeContext("u", "s"), pushed.append)
        final = streamed[-1]
        assert isinstance(final, ev.RunFinished)
        return streamed, pushed, final.msg.text, reply.text

    streamed, pushed, streamed_text, pushed_text = asyncio.run(both())
    assert [_comparable(e) for e in pushed] == [_comparable(e) for e in streamed]
    assert pushed_text == streamed_text
    assert isinstance(pushed[-1], ev.RunFinished) and pushed[-1].msg.text == pushed_text


async def test_an_error_raised_by_the_callback_ends_the_run_and_the_session_keeps_what_was_done(
    make_agent: MakeAgent,
) -> None:
    ran: list[int] = []

    @tool(read_only=True)
    async def count() -> str:
        """Count."""
        ran.append(1)
        return "counted"

    agent = make_agent(ScriptedModel([ToolUseBlock(name="count", input={}), "never"]), count)

    def on_event(event: ev.AgentEvent) -> None:
        if isinstance(event, ev.ToolResult):
            raise RuntimeError("the consumer broke")

    with pytest.raises(RuntimeError, match="the consumer broke"):
        await agent.run_with_events("go", RuntimeContext("u", "s"), on_event)
    assert ran == [1]  # the tool ran once, and its result is stored: a next call does not run it again
    state = await agent.get_state("u", "s")
    [result] = [b for m in state.messages for b in m.blocks(ToolResultBlock)]
    assert result.state == "success"


async def test_cancelling_the_awaiting_task_stops_the_run_checkpointed(make_agent: MakeAgent) -> None:
    started = asyncio.Event()

    @tool(read_only=True)
    async def slow() -> str:
        """Slow."""
        started.set()
        await asyncio.sleep(30)
        return "late"

    agent = make_agent(ScriptedModel([ToolUseBlock(name="slow", input={}), "never"]), slow)
    seen: list[str] = []
    task = asyncio.ensure_future(agent.run_with_events("go", RuntimeContext("u", "s"), lambda e: seen.append(e.type)))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    state = await agent.get_state("u", "s")
    assert [m.role for m in state.messages] == ["user", "assistant", "user"]
    [closed] = state.messages[-1].blocks(ToolResultBlock)
    assert closed.state == "interrupted"
    assert "run_finished" not in seen


def test_events_are_frozen_dataclasses() -> None:
    # run_with_events hands the run's own event objects to the callback: they must not be mutable.
    assert dataclasses.fields(ev.TextDelta) and ev.TextDelta.__dataclass_params__.frozen  # type: ignore[attr-defined]


async def test_a_callback_failure_stops_a_run_that_is_waiting(make_agent: MakeAgent) -> None:
    finished: list[str] = []

    @tool(read_only=True)
    async def slow() -> str:
        """Slow."""
        await asyncio.sleep(30)
        finished.append("slow")
        return "late"

    agent = make_agent(ScriptedModel([ToolUseBlock(name="slow", input={}), "never"]), slow)
    seen: list[str] = []

    def on_event(event: ev.AgentEvent) -> None:
        seen.append(event.type)
        if isinstance(event, ev.ToolCallStarted):
            raise KeyError("consumer bug")

    with pytest.raises(KeyError, match="consumer bug"):
        await agent.run_with_events("go", RuntimeContext("u", "s"), on_event)
    assert finished == []  # the tool was stopped, not waited for
    assert seen[-1] == "tool_call_started"  # nothing more reached the broken consumer
    state = await agent.get_state("u", "s")
    [closed] = state.messages[-1].blocks(ToolResultBlock)
    assert closed.state == "interrupted"
    assert not asyncio.current_task().cancelling()  # type: ignore[union-attr]


async def test_a_callback_failure_on_the_last_event_is_raised_and_the_reply_is_stored(make_agent: MakeAgent) -> None:
    agent = make_agent(ScriptedModel(["all done"]))

    def on_event(event: ev.AgentEvent) -> None:
        if isinstance(event, ev.RunFinished):
            raise ValueError("could not send it")

    with pytest.raises(ValueError, match="could not send it"):
        await agent.run_with_events("go", RuntimeContext("u", "s"), on_event)
    state = await agent.get_state("u", "s")
    assert [m.text for m in state.messages] == ["go", "all done"]
    assert not asyncio.current_task().cancelling()  # type: ignore[union-attr]


def test_agents_built_without_a_toolkit_do_not_share_one() -> None:
    # A tool registered through one agent's default toolkit must not reach another agent.
    first = ReActAgent("one", "You are a test bot.", model=ScriptedModel(["hi"]))
    second = ReActAgent("two", "You are a test bot.", model=ScriptedModel(["hi"]))
    first.toolkit.register(add)
    assert first.toolkit.names() == ["add"]
    assert second.toolkit.names() == []
    assert ReActAgent("three", "You are a test bot.", model=ScriptedModel(["hi"])).toolkit.names() == []
