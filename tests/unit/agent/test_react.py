"""Behaviour of the real ReActAgent driven by a ScriptedModel."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from dirty_equals import IsFloat, IsStr
from inline_snapshot import snapshot

from agentrt import (
    GenerateReason,
    Middleware,
    Msg,
    ReActAgent,
    RuntimeContext,
    TextBlock,
    ThinkingBlock,
    Toolkit,
    ToolResultBlock,
    ToolUseBlock,
    tool,
)
from agentrt import events as ev
from agentrt.errors import ModelBehaviorError, UnexpectedModelCallError, UserError
from agentrt.message import ContentBlock
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.state import InMemoryStateStore

#: The `make_agent` fixture (tests/unit/conftest.py): ``make_agent(model, *tools, **options)``.
MakeAgent = Callable[..., ReActAgent]


def call(name: str, **args: Any) -> ToolUseBlock:
    return ToolUseBlock(name=name, input=args)


def results_of(request: ModelRequest) -> list[ToolResultBlock]:
    last = request.messages[-1]
    return last.blocks(ToolResultBlock)


@tool(read_only=True)
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


# -- the basic loop ---------------------------------------------------------------------------------
async def test_tool_call_then_answer_builds_history_and_prompt(make_agent: MakeAgent) -> None:
    model = ScriptedModel([call("add", a=2, b=3), "The sum is 5."])
    agent = make_agent(model, add)
    ctx = RuntimeContext(user_id="u1", session_id="s1")

    reply = await agent.call("What is 2 + 3?", ctx)

    assert reply.text == "The sum is 5."
    assert reply.role == "assistant" and reply.name == "bot"
    assert reply.generate_reason is GenerateReason.STOP
    model.assert_complete()
    first, second = model.requests
    assert [m.role for m in first.messages] == ["system", "user"]
    assert first.messages[0].text == "You are a test bot."
    assert [t.name for t in first.tools] == ["add"]
    [result] = results_of(second)
    assert result.output == "5" and result.state == "success"
    state = await agent.get_state("u1", "s1")
    assert [m.role for m in state.messages] == ["user", "assistant", "user", "assistant"]
    assert state.messages[-1] == reply
    assert state.revision >= 4  # input, tool call, results, answer: one checkpoint each


async def test_second_call_continues_the_session(make_agent: MakeAgent) -> None:
    model = ScriptedModel(["first", "second"])
    agent = make_agent(model)
    ctx = RuntimeContext(user_id="u", session_id="s")
    await agent.call("one", ctx)
    await agent.call("two", ctx)
    texts = [m.text for m in model.requests[1].messages[1:]]
    assert texts == ["one", "first", "two"]


# -- tool execution policy --------------------------------------------------------------------------
async def test_parallel_safe_calls_overlap(make_agent: MakeAgent) -> None:
    barrier = asyncio.Barrier(2)
    passed: list[str] = []

    @tool(read_only=True)
    async def probe(tag: str) -> str:
        """Wait until the other call runs too."""
        async with asyncio.timeout(5):
            await barrier.wait()  # both calls must be running at once to get past this
        passed.append(tag)
        return tag

    model = ScriptedModel([[call("probe", tag="a"), call("probe", tag="b")], "done"])
    agent = make_agent(model, probe)
    reply = await agent.call("go")

    assert reply.text == "done"
    assert sorted(passed) == ["a", "b"]  # the barrier let both through: they overlapped
    assert [r.output for r in results_of(model.requests[1])] == ["a", "b"]  # results keep call order


async def test_unsafe_calls_run_in_order_without_overlap(make_agent: MakeAgent) -> None:
    log: list[str] = []

    @tool(concurrency_safe=False)
    async def write(tag: str) -> str:
        """Writes something."""
        log.append(f"{tag}>")
        for _ in range(5):
            await asyncio.sleep(0)  # yield: a call started alongside would log in between
        log.append(f"{tag}<")
        return tag

    model = ScriptedModel([[call("write", tag="a"), call("write", tag="b"), call("write", tag="c")], "ok"])
    agent = make_agent(model, write)
    await agent.call("go")
    assert log == ["a>", "a<", "b>", "b<", "c>", "c<"]


async def test_toolkit_concurrency_cap_limits_overlap() -> None:
    running = 0
    peak = 0
    two_in = asyncio.Event()

    @tool(read_only=True)
    async def slow(i: int) -> int:
        """Hold its slot until the cap is reached, then finish."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running == 2:
            two_in.set()
        async with asyncio.timeout(5):
            await two_in.wait()
        for _ in range(5):
            await asyncio.sleep(0)  # yield: a call past the cap would start now
        running -= 1
        return i

    toolkit = Toolkit(max_concurrency=2)
    toolkit.register(slow)
    model = ScriptedModel([[call("slow", i=i) for i in range(6)], "ok"])
    agent = ReActAgent("bot", model=model, toolkit=toolkit, state_store=InMemoryStateStore())
    await agent.call("go")
    assert peak == 2


async def test_tool_timeout_cancels_the_tool_and_the_run_continues(make_agent: MakeAgent) -> None:
    cancelled = asyncio.Event()

    @tool(timeout=0.05)
    async def hang() -> str:
        """Never returns."""
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "unreachable"

    model = ScriptedModel([call("hang"), "gave up"])
    agent = make_agent(model, hang)
    reply = await agent.call("go")
    assert reply.text == "gave up"
    [result] = results_of(model.requests[1])
    assert result.state == "error" and "timed out after 0.05 s" in result.output
    assert cancelled.is_set()


async def test_tool_exception_becomes_error_result(make_agent: MakeAgent) -> None:
    @tool
    def explode(x: int) -> int:
        """Fails."""
        raise ValueError(f"bad value {x}")

    model = ScriptedModel([call("explode", x=7), "sorry"])
    agent = make_agent(model, explode)
    assert (await agent.call("go")).text == "sorry"
    [result] = results_of(model.requests[1])
    assert result.state == "error"
    assert result.output == "Tool 'explode' failed: ValueError: bad value 7"


async def test_bad_arguments_reach_the_model_naming_the_field(make_agent: MakeAgent) -> None:
    model = ScriptedModel([call("add", a="x"), "fixed"])
    agent = make_agent(model, add)
    await agent.call("go")
    [result] = results_of(model.requests[1])
    assert result.state == "error"
    assert "'a'" in result.output and "'b'" in result.output


async def test_unparseable_json_arguments_reach_the_model(make_agent: MakeAgent) -> None:
    from agentrt.model import ChatResponse, ToolCallChunk

    raw = [ChatResponse(tool_calls=[ToolCallChunk(index=0, id="c1", name="add", arguments="{not json at all")])]
    model = ScriptedModel([raw, "ok"])
    agent = make_agent(model, add)
    await agent.call("go")
    [result] = results_of(model.requests[1])
    assert result.state == "error" and result.id == "c1"
    assert "Invalid arguments for tool 'add'" in result.output


async def test_unknown_tool_lists_available_tools(make_agent: MakeAgent) -> None:
    model = ScriptedModel([call("subtract", a=1, b=2), "ok"])
    agent = make_agent(model, add)
    await agent.call("go")
    [result] = results_of(model.requests[1])
    assert result.state == "error"
    assert result.output == "Unknown tool 'subtract'. Available tools: add."


async def test_max_calls_guard_refuses_with_a_reason(make_agent: MakeAgent) -> None:
    count = 0

    @tool(max_calls=2, read_only=True)
    async def search(q: str) -> str:
        """Search."""
        nonlocal count
        count += 1
        return f"nothing for {q}"

    model = ScriptedModel([call("search", q="1"), call("search", q="2"), call("search", q="3"), "done"])
    agent = make_agent(model, search)
    await agent.call("go")
    assert count == 2
    [refused] = results_of(model.requests[3])
    assert refused.state == "error" and "limit" in refused.output


async def test_sync_tools_run_off_the_event_loop_thread(make_agent: MakeAgent) -> None:
    seen: list[int] = []

    @tool
    def where() -> str:
        """Which thread."""
        seen.append(threading.get_ident())
        return "ok"

    model = ScriptedModel([call("where"), "ok"])
    await make_agent(model, where).call("go")
    assert seen and seen[0] != threading.get_ident()


class Db:
    def __init__(self, name: str) -> None:
        self.name = name


async def test_context_and_typed_dependencies_are_injected(make_agent: MakeAgent) -> None:
    @tool
    async def lookup(key: str, ctx: RuntimeContext, db: Db) -> str:
        """Look up a key."""
        return f"{ctx.user_id}:{db.name}:{key}"

    model = ScriptedModel([call("lookup", key="k"), "ok"])
    agent = make_agent(model, lookup)
    schema = agent.toolkit.schemas()[0]
    assert list(schema.parameters["properties"]) == ["key"]
    ctx = RuntimeContext(user_id="alice", session_id="s").put(Db, Db("main"))
    await agent.call("go", ctx)
    [result] = results_of(model.requests[1])
    assert result.output == "alice:main:k"


async def test_tools_see_the_bound_context(make_agent: MakeAgent) -> None:
    @tool
    async def who() -> str:
        """Who calls."""
        ctx = RuntimeContext.current()
        assert ctx is not None
        tenant: str = ctx["tenant"]
        return tenant

    model = ScriptedModel([call("who"), "ok"])
    await make_agent(model, who).call("go", RuntimeContext(user_id="u", tenant="acme"))
    assert results_of(model.requests[1])[0].output == "acme"


async def test_registering_tools_while_a_run_is_in_flight(make_agent: MakeAgent) -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    @tool(read_only=True)
    async def wait() -> str:
        """Waits."""
        started.set()
        await release.wait()
        return "ok"

    @tool(read_only=True)
    async def later() -> str:
        """Added later."""
        return "later"

    model = ScriptedModel([call("wait"), call("later"), "done"])
    agent = make_agent(model, wait)
    task = asyncio.create_task(agent.call("go"))
    await started.wait()
    agent.toolkit.register(later)
    release.set()
    assert (await task).text == "done"
    # the run's executor kept its snapshot; the next step's schemas include the new tool
    assert "later" in [t.name for t in model.requests[1].tools]


# -- limits and odd model behaviour ------------------------------------------------------------------
async def test_max_iters_ends_with_a_tool_free_summary(make_agent: MakeAgent) -> None:
    model = ScriptedModel([call("add", a=1, b=1)] * 3 + ["Here is what I found."])
    agent = make_agent(model, add, max_iters=3)
    reply = await agent.call("loop forever")
    assert reply.generate_reason is GenerateReason.MAX_ITERS
    assert reply.text == "Here is what I found."
    assert len(model.requests) == 4
    last = model.requests[-1]
    assert last.options.tool_choice == "none"
    assert "maximum" in last.messages[-1].text or "all 3 reasoning steps" in last.messages[-1].text


async def test_empty_reply_gets_one_nudge(make_agent: MakeAgent) -> None:
    model = ScriptedModel(["", "now an answer"])
    agent = make_agent(model)
    reply = await agent.call("hello")
    assert reply.text == "now an answer"
    assert "empty" in model.requests[1].messages[-1].text
    state = await agent.get_state()
    assert [m.text for m in state.messages] == ["hello", "now an answer"]  # the nudge is not persisted


async def test_empty_reply_twice_is_a_typed_error_and_keeps_the_input(make_agent: MakeAgent) -> None:
    model = ScriptedModel([[ThinkingBlock(thinking="hmm")], "  "])
    agent = make_agent(model)
    ctx = RuntimeContext(user_id="u", session_id="s")
    with pytest.raises(ModelBehaviorError, match="empty reply twice"):
        await agent.call("hello", ctx)
    state = await agent.get_state("u", "s")
    assert [m.text for m in state.messages] == ["hello"]


async def test_garbage_chunks_raise_a_model_error_and_lose_nothing(make_agent: MakeAgent) -> None:
    model = ScriptedModel(["fine", [object()]])  # type: ignore[list-item]
    agent = make_agent(model)
    ctx = RuntimeContext(user_id="u", session_id="s")
    await agent.call("one", ctx)
    with pytest.raises(ModelBehaviorError):
        await agent.call("two", ctx)
    state = await agent.get_state("u", "s")
    assert [m.text for m in state.messages] == ["one", "fine", "two"]


async def test_provider_error_propagates_after_input_is_saved(make_agent: MakeAgent) -> None:
    from agentrt.errors import RateLimitError

    model = ScriptedModel([RateLimitError("slow down", status=429)])
    agent = make_agent(model)
    with pytest.raises(RateLimitError):
        await agent.call("hello", RuntimeContext(user_id="u", session_id="s"))
    assert [m.text for m in (await agent.get_state("u", "s")).messages] == ["hello"]


async def test_extra_model_call_is_reported_clearly(make_agent: MakeAgent) -> None:
    agent = make_agent(ScriptedModel([]))
    with pytest.raises(UnexpectedModelCallError, match="0 step"):
        await agent.call("hi")


@pytest.mark.parametrize("bad", [123, object(), [Msg.user("ok"), "not a msg"], b"bytes"])
async def test_bad_input_is_a_user_error_and_touches_nothing(bad: Any, make_agent: MakeAgent) -> None:
    model = ScriptedModel(["never"])
    agent = make_agent(model)
    ctx = RuntimeContext(user_id="u", session_id="s")
    with pytest.raises(UserError, match="input"):
        await agent.call(bad, ctx)
    assert model.requests == []
    assert (await agent.get_state("u", "s")).messages == []


def test_construction_errors_are_user_errors() -> None:
    with pytest.raises(UserError, match="needs a model"):
        ReActAgent("x")
    with pytest.raises(UserError, match="max_iters"):
        ReActAgent("x", model=ScriptedModel([]), max_iters=0)
    with pytest.raises(UserError, match="Middleware"):
        ReActAgent("x", model=ScriptedModel([]), middlewares=[object()])  # type: ignore[list-item]


async def test_dangling_tool_calls_from_a_dead_run_are_closed(make_agent: MakeAgent) -> None:
    store = InMemoryStateStore()
    dangling = Msg(role="assistant", content=[call("add", a=1, b=2)])
    await store.append("u", "s", [Msg.user("hi"), dangling], expected_revision=0, agent="bot")
    model = ScriptedModel(["recovered"])
    agent = make_agent(model, add, state_store=store)
    await agent.call("again", RuntimeContext(user_id="u", session_id="s"))
    roles = [m.role for m in model.requests[0].messages]
    assert roles == ["system", "user", "assistant", "user", "user"]
    [closed] = model.requests[0].messages[3].blocks(ToolResultBlock)
    assert closed.id == dangling.tool_calls[0].id and closed.state == "interrupted"


# -- sessions and concurrency ---------------------------------------------------------------------------
async def test_500_concurrent_sessions_do_not_cross(make_agent: MakeAgent) -> None:
    def reply(request: ModelRequest) -> Any:
        last = request.messages[-1]
        if last.role == "user" and last.has(ToolResultBlock):
            return f"answer for {last.blocks(ToolResultBlock)[0].output}"
        return call("echo", text=last.text)

    @tool(read_only=True)
    async def echo(text: str) -> str:
        """Echo."""
        await asyncio.sleep(0)
        return text

    model = ScriptedModel.from_function(reply)
    agent = make_agent(model, echo)

    async def one(i: int) -> Msg:
        return await agent.call(f"session-{i}", RuntimeContext(user_id=f"user-{i % 7}", session_id=f"s-{i}"))

    replies = await asyncio.gather(*(one(i) for i in range(500)))
    assert [r.text for r in replies] == [f"answer for session-{i}" for i in range(500)]
    for i in (0, 123, 499):
        state = await agent.get_state(f"user-{i % 7}", f"s-{i}")
        texts = " ".join(m.text + " ".join(b.text for b in m.blocks(ToolResultBlock)) for m in state.messages)
        assert f"session-{i}" in texts
        assert all(f"session-{j}" not in texts.split() for j in (i - 1, i + 1))
        assert len(state.messages) == 4


async def test_same_session_calls_are_serialised_in_order(make_agent: MakeAgent) -> None:
    seen: list[list[str]] = []

    def reply(request: ModelRequest) -> str:
        seen.append([m.text for m in request.messages if m.role != "system"])
        return f"re: {request.messages[-1].text}"

    model = ScriptedModel.from_function(reply, latency=0.01)
    agent = make_agent(model)
    ctx = RuntimeContext(user_id="u", session_id="same")
    replies = await asyncio.gather(*(agent.call(f"m{i}", ctx) for i in range(5)))
    assert [r.text for r in replies] == [f"re: m{i}" for i in range(5)]
    # each call saw the complete previous exchange: strictly one after the other, in arrival order
    assert seen[-1] == ["m0", "re: m0", "m1", "re: m1", "m2", "re: m2", "m3", "re: m3", "m4"]


async def test_different_sessions_run_in_parallel(make_agent: MakeAgent) -> None:
    barrier = asyncio.Barrier(5)

    async def reply(request: ModelRequest) -> str:
        async with asyncio.timeout(5):
            await barrier.wait()  # passes only once all five model calls are in flight together
        return "ok"

    agent = make_agent(ScriptedModel.from_function(reply))
    replies = await asyncio.gather(*(agent.call("x", RuntimeContext(session_id=f"s{i}")) for i in range(5)))
    assert [r.text for r in replies] == ["ok"] * 5


async def test_observe_adds_history_without_a_model_call(make_agent: MakeAgent) -> None:
    model = ScriptedModel(["seen it"])
    agent = make_agent(model)
    ctx = RuntimeContext(user_id="u", session_id="s")
    await agent.observe([Msg.user("background", name="alice")], ctx)
    assert model.requests == []
    await agent.call("what did alice say?", ctx)
    assert [m.text for m in model.requests[0].messages[1:]] == ["background", "what did alice say?"]


# -- events -----------------------------------------------------------------------------------------------
async def test_events_in_order_with_stable_ids_and_the_reducer_rebuilds_the_reply(make_agent: MakeAgent) -> None:
    first_turn: list[ContentBlock] = [
        ThinkingBlock(thinking="need a tool"),
        TextBlock(text="Let me add."),
        call("add", a=20, b=22),
    ]
    model = ScriptedModel([first_turn, "The answer is 42."])
    agent = make_agent(model, add)
    events = [e async for e in agent.stream_events("add them", RuntimeContext(user_id="u", session_id="s"))]
    types = [e.type for e in events]
    assert types == snapshot(
        [
            "run_started",
            "model_call_started",
            "thinking_delta",
            "text_delta",
            "text_delta",
            "text_delta",
            "tool_call_started",
            "tool_call_delta",
            "model_call_finished",
            "tool_result",
            "model_call_started",
            "text_delta",
            "text_delta",
            "text_delta",
            "text_delta",
            "model_call_finished",
            "run_finished",
        ]
    )
    reply_ids = {e.reply_id for e in events}
    assert len(reply_ids) == 1
    final = events[-1]
    assert isinstance(final, ev.RunFinished)
    assert final.msg.id == events[0].reply_id
    assert {e.session_id for e in events} == {"s"} and {e.source for e in events} == {"bot"}
    # block ids: one per block, never reused across the call
    text_blocks = {e.block_id for e in events if isinstance(e, ev.TextDelta)}
    thinking_blocks = {e.block_id for e in events if isinstance(e, ev.ThinkingDelta)}
    call_blocks = {e.block_id for e in events if isinstance(e, ev.ToolCallStarted)}
    assert len(text_blocks) == 2 and len(thinking_blocks) == 1 and len(call_blocks) == 1
    assert not (text_blocks & thinking_blocks) and not (text_blocks & call_blocks)
    assert ev.reduce_events(events) == final.msg
    # the wire form of the tool result event: ids are generated, the rest is fixed
    [result] = [e for e in events if isinstance(e, ev.ToolResult)]
    assert result.to_dict() == snapshot(
        {
            "type": "tool_result",
            "reply_id": final.msg.id,
            "session_id": "s",
            "source": "bot",
            "result": {
                "type": "tool_result",
                "id": IsStr(regex=r"call_[0-9a-f]+"),
                "name": "add",
                "output": "42",
                "state": "success",
            },
            "elapsed": IsFloat(ge=0),
        }
    )
    assert "".join(e.delta for e in events if isinstance(e, ev.TextDelta)).endswith("The answer is 42.")


async def test_reducer_mid_stream_shows_partial_reply(make_agent: MakeAgent) -> None:
    model = ScriptedModel(["one two three four"])
    agent = make_agent(model)
    reducer = ev.EventReducer()
    partial: list[str] = []
    async for event in agent.stream_events("go"):
        reducer.feed(event)
        if isinstance(event, ev.TextDelta):
            partial.append(reducer.msg.text)
    assert partial == ["one ", "one two ", "one two three ", "one two three four"]
    assert reducer.finished


async def test_stream_reports_run_error_then_raises(make_agent: MakeAgent) -> None:
    model = ScriptedModel([RuntimeError("provider down")])
    agent = make_agent(model)
    seen: list[str] = []
    with pytest.raises(RuntimeError, match="provider down"):
        async for event in agent.stream_events("go"):
            seen.append(event.type)
    assert seen[-1] == "run_error"


async def test_closing_the_stream_early_checkpoints_the_session(make_agent: MakeAgent) -> None:
    started = asyncio.Event()

    @tool(read_only=True)
    async def slow() -> str:
        """Slow."""
        started.set()
        await asyncio.sleep(30)
        return "late"

    model = ScriptedModel([call("slow"), "never"])
    agent = make_agent(model, slow)
    ctx = RuntimeContext(user_id="u", session_id="s")
    stream = agent.stream_events("go", ctx)
    async for event in stream:
        if isinstance(event, ev.ToolCallStarted):
            break
    await stream.aclose()  # type: ignore[attr-defined]
    state = await agent.get_state("u", "s")
    roles = [m.role for m in state.messages]
    assert roles == ["user", "assistant", "user"]
    [closed] = state.messages[-1].blocks(ToolResultBlock)
    assert closed.state == "interrupted"


# -- interrupts -------------------------------------------------------------------------------------------
async def test_interrupt_cancels_a_running_tool_and_returns_interrupted(make_agent: MakeAgent) -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    @tool(read_only=True)
    async def long_job() -> str:
        """Runs long."""
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "done"

    model = ScriptedModel([call("long_job"), "after"])
    agent = make_agent(model, long_job)
    ctx = RuntimeContext(user_id="u", session_id="s")
    task = asyncio.create_task(agent.call("start", ctx))
    await started.wait()
    assert agent.interrupt(ctx, msg="stop please") is True
    reply = await task
    assert reply.generate_reason is GenerateReason.INTERRUPTED
    assert cancelled.is_set()
    assert agent.interrupt(ctx) is False  # nothing running any more
    state = await agent.get_state("u", "s")
    [closed] = state.messages[2].blocks(ToolResultBlock)
    assert closed.state == "interrupted"
    assert state.messages[-1].text == "stop please"
    # the session continues cleanly
    assert (await agent.call("go on", ctx)).text == "after"


async def test_interrupt_only_touches_its_own_session(make_agent: MakeAgent) -> None:
    gate = asyncio.Event()
    both_in = asyncio.Barrier(3)

    async def reply(request: ModelRequest) -> str:
        await both_in.wait()
        await gate.wait()
        return "ok"

    agent = make_agent(ScriptedModel.from_function(reply))
    a = asyncio.create_task(agent.call("x", RuntimeContext(user_id="u", session_id="a")))
    b = asyncio.create_task(agent.call("x", RuntimeContext(user_id="u", session_id="b")))
    async with asyncio.timeout(5):
        await both_in.wait()  # both runs are inside the model
    assert agent.interrupt("u", "a")
    gate.set()
    ra, rb = await asyncio.gather(a, b)
    assert ra.generate_reason is GenerateReason.INTERRUPTED
    assert rb.generate_reason is GenerateReason.STOP and rb.text == "ok"


# -- middleware ---------------------------------------------------------------------------------------------
async def test_middleware_hooks_run_in_documented_order(make_agent: MakeAgent) -> None:
    log: list[str] = []

    class Recorder(Middleware):
        def __init__(self, tag: str) -> None:
            self.tag = tag

        async def on_call(self, run: Any, next: Callable[[], Awaitable[Msg]]) -> Msg:
            log.append(f"{self.tag}:call>")
            msg = await next()
            log.append(f"{self.tag}:call<")
            return msg

        async def on_reasoning(self, run: Any, next: Callable[[], Awaitable[Msg]]) -> Msg:
            log.append(f"{self.tag}:reason")
            return await next()

        async def on_model_call(
            self, run: Any, request: ModelRequest, next: Callable[[ModelRequest], Awaitable[Msg]]
        ) -> Msg:
            log.append(f"{self.tag}:model")
            return await next(request)

        async def on_acting(
            self, run: Any, call: ToolUseBlock, next: Callable[[ToolUseBlock], Awaitable[ToolResultBlock]]
        ) -> ToolResultBlock:
            log.append(f"{self.tag}:act:{call.name}")
            return await next(call)

        async def on_system_prompt(self, run: Any, prompt: str) -> str:
            log.append(f"{self.tag}:prompt")
            return prompt + f" [{self.tag}]"

    model = ScriptedModel([call("add", a=1, b=2), "3"])
    agent = make_agent(model, add, middlewares=[Recorder("a"), Recorder("b")])
    await agent.call("go")
    assert log == [
        "a:call>",
        "b:call>",
        "a:prompt",
        "b:prompt",
        "a:reason",
        "b:reason",
        "a:model",
        "b:model",
        "a:act:add",
        "b:act:add",
        "a:reason",
        "b:reason",
        "a:model",
        "b:model",
        "b:call<",
        "a:call<",
    ]
    assert model.requests[0].messages[0].text == "You are a test bot. [a] [b]"


async def test_middleware_can_answer_for_a_tool_and_rewrite_the_request(make_agent: MakeAgent) -> None:
    class Guard(Middleware):
        async def on_acting(
            self, run: Any, call: ToolUseBlock, next: Callable[[ToolUseBlock], Awaitable[ToolResultBlock]]
        ) -> ToolResultBlock:
            return ToolResultBlock(id=call.id, name=call.name, output="blocked by policy", state="denied")

        async def on_model_call(
            self, run: Any, request: ModelRequest, next: Callable[[ModelRequest], Awaitable[Msg]]
        ) -> Msg:
            from agentrt.model import GenerateOptions

            return await next(ModelRequest(request.messages, request.tools, GenerateOptions(temperature=0.1)))

    ran = False

    @tool
    async def risky() -> str:
        """Risky."""
        nonlocal ran
        ran = True
        return "did it"

    model = ScriptedModel([call("risky"), "ok"])
    await make_agent(model, risky, middlewares=[Guard()]).call("go")
    assert not ran
    assert results_of(model.requests[1])[0].state == "denied"
    assert model.requests[0].options.temperature == 0.1


# -- the sync edge --------------------------------------------------------------------------------------------
async def test_call_sync_inside_a_loop_says_to_await(make_agent: MakeAgent) -> None:
    agent = make_agent(ScriptedModel(["x"]))
    with pytest.raises(UserError, match=r"await agent\.call"):
        agent.call_sync("hi")


def test_call_sync_outside_a_loop_works_twice(make_agent: MakeAgent) -> None:
    agent = make_agent(ScriptedModel([call("add", a=1, b=2), "three", "again"]), add)
    ctx = RuntimeContext(user_id="u", session_id="s")
    assert agent.call_sync("go", ctx).text == "three"
    assert agent.call_sync("more", ctx).text == "again"  # a second event loop works too


async def test_usage_is_summed_over_the_call(make_agent: MakeAgent) -> None:
    from agentrt.message import TokenUsage

    model = ScriptedModel([call("add", a=1, b=2), "3"], usage=TokenUsage(input_tokens=10, output_tokens=2))
    reply = await make_agent(model, add).call("go")
    assert reply.usage == TokenUsage(input_tokens=20, output_tokens=4)


async def test_text_tool_calling_drives_a_text_only_model(make_agent: MakeAgent) -> None:
    from typing import ClassVar

    class TextOnly(ScriptedModel):
        supports_native_tools: ClassVar[bool] = False

    model = TextOnly(
        [
            'Thought: I need to add.\nAction: add\nAction Input: {"a": 2, "b": 40}',
            "Thought: done\nFinal Answer: 42",
        ]
    )
    agent = make_agent(model, add)  # tool_calling="auto" wraps it in the text protocol
    reply = await agent.call("add 2 and 40")
    assert reply.text == "42"
    assert model.requests[0].tools == []  # the inner model never sees native tool schemas
    assert "add" in model.requests[0].messages[0].text  # the tool list is in the system prompt
    assert "Observation" in model.requests[1].messages[-1].text


async def test_interrupt_while_the_state_is_loading_still_returns_interrupted(make_agent: MakeAgent) -> None:
    entered = asyncio.Event()
    release = asyncio.Event()

    class SlowStore(InMemoryStateStore):
        async def load(self, user_id: str, session_id: str, *, agent: str = "") -> Any:
            entered.set()
            await release.wait()
            return await super().load(user_id, session_id, agent=agent)

    agent = make_agent(ScriptedModel(["never"]), state_store=SlowStore())
    ctx = RuntimeContext(user_id="u", session_id="s")
    task = asyncio.create_task(agent.call("hi", ctx))
    await entered.wait()
    assert agent.interrupt(ctx)
    reply = await task
    assert reply.generate_reason is GenerateReason.INTERRUPTED
