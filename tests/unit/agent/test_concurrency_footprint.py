"""What a call in flight holds while it waits for its model: few GC-tracked objects, no generators.

With hundreds of calls waiting at once, every object a call keeps alive is rescanned by the cyclic
garbage collector, whose passes then cost more than the runtime itself (see docs/performance.md,
"The garbage collector under concurrency"). These tests count, with `gc`, what the agent adds per
call (the model here is a stand-in that holds each reply until released), not how long anything takes.
"""

from __future__ import annotations

import asyncio
import gc
import types
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from agentrt import ReActAgent, RuntimeContext, Toolkit, tool
from agentrt.agent._loop import _quiet_options
from agentrt.agent._run import current_run
from agentrt.message import Msg, ToolResultBlock
from agentrt.model.base import ChatModel, ChatResponse, GenerateOptions, ToolCallChunk, ToolSchema
from agentrt.state import InMemoryStateStore
from agentrt.state.session import AgentState, CallIds
from agentrt.state.stores.sqlite import SqliteStateStore

CALLS = 200
OBJECTS_PER_CALL = 30
"""The agent's own GC-tracked objects per call waiting for its model, the stand-in model's frame and
wait included: 25 measured with the SQLite store, 27 with the in-memory one (which holds the stored
messages too); 49 and 53 before the await chain was flattened and replies were read whole."""


@tool(read_only=True)
async def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return f"Sunny in {city}."


class HeldModel(ChatModel):
    """Answers whole (a tool call, then text), each reply held until `release` is set."""

    model_name = "held"

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.waiting = 0
        self.expected = 1
        self.all_waiting = asyncio.Event()
        self.streamed = 0

    async def whole_reply(
        self, messages: Sequence[Msg], tools: Sequence[ToolSchema] = (), options: GenerateOptions | None = None
    ) -> list[ChatResponse]:
        self.waiting += 1
        if self.waiting >= self.expected:
            self.all_waiting.set()
        try:
            await self.release.wait()
        finally:
            self.waiting -= 1
        if any(isinstance(b, ToolResultBlock) for b in messages[-1].content):
            return [ChatResponse(text="It is sunny.", finish_reason="stop")]
        call = ToolCallChunk(index=0, id="call_1", name="get_weather", arguments='{"city": "Paris"}')
        return [ChatResponse(tool_calls=(call,), finish_reason="tool_calls")]

    async def stream(
        self, messages: Sequence[Msg], tools: Sequence[ToolSchema] = (), options: GenerateOptions | None = None
    ) -> AsyncIterator[ChatResponse]:
        self.streamed += 1
        for chunk in await self.whole_reply(messages, tools, options):
            yield chunk


def _agent(model: ChatModel, store: Any) -> ReActAgent:
    toolkit = Toolkit()
    toolkit.register(get_weather)
    return ReActAgent("bench", "You are a helpful assistant.", model, toolkit, state_store=store)


async def _waiting(model: HeldModel, count: int) -> None:
    model.expected = count
    model.all_waiting.clear()
    if model.waiting < count:
        async with asyncio.timeout(30):
            await model.all_waiting.wait()


async def _footprint(store: Any) -> tuple[float, list[Any], HeldModel]:
    """GC-tracked objects per call while `CALLS` calls wait for their first reply, and the new generators."""
    model = HeldModel()
    agent = _agent(model, store)
    model.release.set()
    await agent.call("warm up", RuntimeContext("u", "warm"))  # opens the store, lazy imports
    model.release.clear()
    gc.collect()
    before = {id(o) for o in gc.get_objects()}
    calls = [asyncio.ensure_future(agent.call("Weather in Paris?", RuntimeContext("u", f"s{i}"))) for i in range(CALLS)]
    await _waiting(model, CALLS)
    gc.collect()
    new = [o for o in gc.get_objects() if id(o) not in before]
    generators = [o for o in new if isinstance(o, types.AsyncGeneratorType)]
    per_call = (len(new) - CALLS * 2) / CALLS  # minus the test's own task and its weak reference per call
    model.release.set()
    replies = await asyncio.gather(*calls)
    assert all(reply.text == "It is sunny." for reply in replies)
    return per_call, generators, model


async def test_a_call_waiting_for_its_model_holds_few_objects_and_no_generator(tmp_path: Path) -> None:
    store = SqliteStateStore(tmp_path / "state.db")
    try:
        per_call, generators, model = await _footprint(store)
    finally:
        await store.close()
    assert per_call <= OBJECTS_PER_CALL, f"{per_call:.1f} GC-tracked objects per call in flight"
    assert generators == [], "a call nobody streams is answered whole, through no async generator"
    assert model.streamed == 0


async def test_the_in_memory_store_holds_no_more() -> None:
    per_call, generators, _ = await _footprint(InMemoryStateStore())
    assert per_call <= OBJECTS_PER_CALL, f"{per_call:.1f} GC-tracked objects per call in flight"
    assert generators == []


async def test_a_streamed_call_still_streams() -> None:
    model = HeldModel()
    model.release.set()
    agent = _agent(model, InMemoryStateStore())
    kinds = [event.type async for event in agent.stream_events("Weather?", RuntimeContext("u", "s"))]
    assert model.streamed == 2 and "run_finished" in kinds


def test_the_quiet_options_of_an_agent_are_made_once() -> None:
    options = GenerateOptions(temperature=0.1)
    quiet = _quiet_options(options)
    assert quiet.incremental is False and quiet.temperature == 0.1
    assert _quiet_options(options) is quiet, "no new options object per call"
    chosen = GenerateOptions(incremental=True)
    assert _quiet_options(chosen) is chosen


def test_a_call_on_a_toolkit_without_groups_makes_no_set_of_groups() -> None:
    assert Toolkit().default_active_groups() is Toolkit().default_active_groups() == frozenset()


async def test_sessions_whose_ids_run_together_are_told_apart() -> None:
    # `AgentBase._running` keys a session by one string: ("a", "bc") and ("ab", "c") must not meet.
    model = HeldModel()
    agent = _agent(model, InMemoryStateStore())
    call = asyncio.ensure_future(agent.call("x", RuntimeContext("a", "bc")))
    await _waiting(model, 1)
    assert agent.running_call("ab", "c") is None and not agent.interrupt("ab", "c")
    running = agent.running_call("a", "bc")
    assert running is not None and running.user_id == "a"
    model.release.set()
    await call
    assert agent.running_call("a", "bc") is None


async def test_a_call_restores_the_current_run_and_context_it_found() -> None:
    model = HeldModel()
    model.release.set()
    agent = _agent(model, InMemoryStateStore())
    outer = RuntimeContext("u", "outer")
    token = outer._set()
    try:
        await agent.call("x", RuntimeContext("u", "s"))
        assert current_run.get() is None and RuntimeContext.current() is outer
    finally:
        RuntimeContext._reset(token)


def test_an_index_of_call_ids_is_made_only_for_a_transcript_with_calls() -> None:
    state = AgentState(messages=[Msg.user("hi"), Msg.assistant("hello")])
    assert state.tool_call_ids() == set()
    assert state.call_ids is not None and state.call_ids._ids is None, "no set for a transcript without calls"
    index = CallIds()
    assert index.of([]) == set() and index._ids is None
