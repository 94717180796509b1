"""Usage limits where they used to leak: parallel subagents racing for the last requests, and summary calls.

Each test checks a side effect: how many requests the scripted models actually received, what the
store holds after the stop, whether the session goes on with a fresh budget.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt import (
    Msg,
    ReActAgent,
    RuntimeContext,
    Toolkit,
    ToolResultBlock,
    ToolUseBlock,
    UsageLimitExceeded,
    UsageLimits,
    tool,
)
from agentrt import events as ev
from agentrt.agent._run import Run
from agentrt.agent.usage import RunUsage, check_before_request, reserve_request
from agentrt.memory.compression import META_KEY, ContextConfig
from agentrt.message import TextBlock, TokenUsage
from agentrt.middleware import Middleware
from agentrt.model import ModelPrice, ScriptedModel
from agentrt.model.base import ModelRequest
from agentrt.state import InMemoryStateStore

RACE = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PRICE = ModelPrice(input=1_000_000, output=0)  # $1 per input token: easy sums


def assert_valid_history(messages: list[Msg]) -> None:
    """Every tool call has exactly one result, in the user messages right after it."""
    open_calls: set[str] = set()
    for msg in messages:
        if msg.role == "assistant":
            assert not open_calls, f"calls left without results: {open_calls}"
            open_calls = {c.id for c in msg.tool_calls}
            continue
        for block in msg.content:
            if isinstance(block, ToolResultBlock):
                assert block.id in open_calls, f"result {block.id} answers no open call"
                open_calls.discard(block.id)
    assert not open_calls, f"calls left without results: {open_calls}"


@tool(read_only=True)
def noop(n: int = 0) -> str:
    """Do nothing.

    Args:
        n: Ignored.
    """
    return "ok"


class Pause(Middleware):
    """Waits before every model call (after the loop's own limit check): a scheduling gap to race in."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    async def on_model_call(
        self, run: Run, request: ModelRequest, next: Callable[[ModelRequest], Awaitable[Msg]]
    ) -> Msg:
        await asyncio.sleep(self.delay)
        return await next(request)


def child_model(requests: int, latency: float) -> ScriptedModel:
    """`requests` model calls: tool calls, then the answer."""
    steps: list[Any] = [ToolUseBlock(id=f"n{i}", name="noop", input={"n": i}) for i in range(requests - 1)]
    return ScriptedModel([*steps, "child done"], latency=latency)


def parent_model(children: int) -> ScriptedModel:
    """Calls every child at once, then answers; a later call ("next") is answered at once."""

    def reply(request: ModelRequest) -> Any:
        last = request.messages[-1]
        if last.role == "user" and last.text == "work":
            return [ToolUseBlock(id=f"p{i}", name=f"child{i}", input={"task": "help"}) for i in range(children)]
        return "again" if last.text == "next" else "done"

    return ScriptedModel.from_function(reply)


# -- 3. parallel subagents never send past `requests` ---------------------------------------------------------
@RACE
@given(
    plan=st.lists(
        st.tuples(
            st.integers(min_value=1, max_value=3),  # the child's model calls
            st.sampled_from([0.0, 0.001, 0.003]),  # the wait before each of them (after the loop's check)
            st.sampled_from([0.0, 0.001, 0.002]),  # the model's latency
        ),
        min_size=1,
        max_size=6,
    ),
    limit=st.integers(min_value=1, max_value=12),
)
def test_parallel_subagents_never_send_more_requests_than_the_limit(
    plan: list[tuple[int, float, float]], limit: int
) -> None:
    store = InMemoryStateStore()
    models = [child_model(n, latency) for n, _, latency in plan]
    children = [
        ReActAgent(f"child{i}", "Help.", m, Toolkit([noop]), state_store=store, middlewares=[Pause(delay)])
        for i, (m, (_, delay, _)) in enumerate(zip(models, plan, strict=True))
    ]
    top = parent_model(len(plan))
    parent = ReActAgent("boss", "", top, Toolkit([c.as_tool() for c in children]), state_store=store)
    ctx = RuntimeContext("u", "s")
    demand = 2 + sum(n for n, _, _ in plan)  # the parent's two model calls and every child's

    async def go() -> None:
        stopped: UsageLimitExceeded | None = None
        try:
            reply = await parent.call("work", ctx, usage_limits=UsageLimits(requests=limit))
        except UsageLimitExceeded as exc:
            stopped = exc
        sent = len(top.requests) + sum(len(m.requests) for m in models)
        assert sent <= limit
        if demand > limit:
            assert stopped is not None and stopped.limit == "requests"
            assert stopped.usage.requests == sent  # counted = sent: nothing reserved and left unsent
        else:
            assert stopped is None and reply.text == "done" and sent == demand
        state = await parent.get_state("u", "s")
        assert state.messages[0].text == "work"
        assert_valid_history(state.messages)
        for child in children:
            assert_valid_history((await child.get_state("u", f"s/{child.name}")).messages)
        # The session goes on, with a fresh budget.
        again = await parent.call("next", ctx, usage_limits=UsageLimits(requests=1))
        assert again.text == "again"

    asyncio.run(go())


async def test_the_reservation_is_one_step_and_counts_every_enclosing_call() -> None:
    store = InMemoryStateStore()
    agent = ReActAgent("a", "", ScriptedModel(["x"]), state_store=store)
    outer = Run(agent, RuntimeContext("u", "s"), [], store, "r1", None)
    outer.limits = UsageLimits(requests=2)
    from agentrt.agent._run import current_run

    token = current_run.set(outer)
    try:
        inner = Run(agent, RuntimeContext("u", "t"), [], store, "r2", None)
    finally:
        current_run.reset(token)
    reserve_request(inner)
    reserve_request(inner)
    assert (inner.requests, outer.requests) == (2, 2)
    with pytest.raises(UsageLimitExceeded) as info:
        reserve_request(inner)
    assert (info.value.agent, info.value.used) == ("a", 3)
    assert (inner.requests, outer.requests) == (2, 2)  # a refused reservation counts nothing
    with pytest.raises(UsageLimitExceeded):
        check_before_request(inner)


# -- 2. context-compression summary calls count ---------------------------------------------------------------
def chatty_agent(main: ScriptedModel, summary: ScriptedModel, store: InMemoryStateStore, **kwargs: Any) -> ReActAgent:
    """An agent whose context must be compressed (with a summary call) before each request after the first."""
    return ReActAgent(
        "talker",
        "Talk.",
        main,
        Toolkit([noop]),
        state_store=store,
        context=ContextConfig(max_tokens=1200, reserve_output_tokens=200, keep_recent_rounds=1),
        summary_model=summary,
        **kwargs,
    )


BIG = "lorem ipsum dolor sit amet " * 60  # ~ 400 tokens per message


def big_step(i: int) -> ToolUseBlock:
    return ToolUseBlock(id=f"b{i}", name="noop", input={"n": i, "pad": BIG})


async def seed_history(agent: ReActAgent, ctx: RuntimeContext) -> None:
    """Two earlier turns of big messages, so the next call starts over the compression trigger."""
    await agent.observe(
        [Msg.user("first?"), Msg(role="assistant", content=[TextBlock(text=BIG)], name=agent.name)], ctx
    )
    await agent.observe(
        [Msg.user("second?"), Msg(role="assistant", content=[TextBlock(text=BIG + "2")], name=agent.name)], ctx
    )


async def test_summary_calls_count_as_requests_tokens_and_cost() -> None:
    store = InMemoryStateStore()
    usage = TokenUsage(input_tokens=10, output_tokens=5)
    main = ScriptedModel(["answer"], usage=usage, price=PRICE)
    summary = ScriptedModel(
        ["the summary"], repeat=True, usage=TokenUsage(input_tokens=7, output_tokens=3), price=PRICE
    )
    agent = chatty_agent(main, summary, store)
    ctx = RuntimeContext("u", "s")
    await seed_history(agent, ctx)
    reply = await agent.call("and now?", ctx)
    assert reply.text == "answer"
    summaries = len(summary.requests)
    assert summaries >= 1, "the test needs a summary call"
    spent = RunUsage.from_dict(reply.metadata["usage"])
    assert spent.requests == 1 + summaries
    assert (spent.input_tokens, spent.output_tokens) == (10 + 7 * summaries, 5 + 3 * summaries)
    assert spent.cost_usd == pytest.approx(10 + 7 * summaries)


async def test_the_usage_events_of_a_compressing_call_add_up_to_its_usage() -> None:
    store = InMemoryStateStore()
    main = ScriptedModel(["answer"], usage=TokenUsage(input_tokens=10, output_tokens=5), price=PRICE)
    summary = ScriptedModel(
        ["the summary"], repeat=True, usage=TokenUsage(input_tokens=7, output_tokens=3), price=PRICE
    )
    agent = chatty_agent(main, summary, store)
    ctx = RuntimeContext("u", "s")
    await seed_history(agent, ctx)
    events = [e async for e in agent.stream_events("and now?", ctx)]
    usages = [e for e in events if isinstance(e, ev.Usage)]
    finished = next(e for e in events if isinstance(e, ev.RunFinished))
    spent = RunUsage.from_dict(finished.msg.metadata["usage"])
    assert len(summary.requests) >= 1 and len(usages) == spent.requests == 1 + len(summary.requests)
    assert sum(e.usage.input_tokens for e in usages) == spent.input_tokens
    assert sum(e.usage.output_tokens for e in usages) == spent.output_tokens
    assert sum(e.cost_usd or 0.0 for e in usages) == pytest.approx(spent.cost_usd)


async def test_an_exhausted_budget_makes_no_summary_call_and_stops_after_a_checkpoint() -> None:
    store = InMemoryStateStore()
    main = ScriptedModel(["never"])
    summary = ScriptedModel(["the summary"], repeat=True)
    agent = chatty_agent(main, summary, store)
    ctx = RuntimeContext("u", "s")
    await seed_history(agent, ctx)
    before = len((await agent.get_state("u", "s")).messages)
    with pytest.raises(UsageLimitExceeded) as info:
        await agent.call("and now?", ctx, usage_limits=UsageLimits(requests=0))
    assert info.value.limit == "requests"
    assert summary.requests == [] and main.requests == []  # neither model was called
    state = await agent.get_state("u", "s")
    assert len(state.messages) == before + 1 and state.messages[-1].text == "and now?"  # the input is kept


async def test_a_summary_call_takes_a_request_and_the_request_after_it_is_refused() -> None:
    store = InMemoryStateStore()
    main = ScriptedModel([])
    summary = ScriptedModel(["the summary"], repeat=True)
    agent = chatty_agent(main, summary, store)
    ctx = RuntimeContext("u", "s")
    await seed_history(agent, ctx)
    with pytest.raises(UsageLimitExceeded) as info:
        await agent.call("and now?", ctx, usage_limits=UsageLimits(requests=1))
    exc = info.value
    # The summary call took the only request: the model call it was made for was never sent.
    assert (exc.limit, exc.used, exc.usage.requests) == ("requests", 2, 1)
    assert len(summary.requests) == 1 and main.requests == []
    state = await agent.get_state("u", "s")
    assert state.metadata[META_KEY]["body"] == "the summary" and state.summary_index > 0  # the compression is saved
    assert state.messages[-1].text == "and now?"
    # The session continues with a fresh budget, on the compressed view (no new summary needed).
    main.add("done now")
    assert (await agent.call("go on", ctx, usage_limits=UsageLimits(requests=1))).text == "done now"
    assert len(summary.requests) == 1 and len(main.requests) == 1
    assert "the summary" in main.requests[0].messages[1].text


async def test_a_summary_call_on_an_unpriced_model_is_not_made_under_a_cost_limit() -> None:
    store = InMemoryStateStore()
    main = ScriptedModel([], price=PRICE, usage=TokenUsage(input_tokens=1, output_tokens=1))
    summary = ScriptedModel(["the summary"], repeat=True, name="private-summariser")
    agent = chatty_agent(main, summary, store)
    ctx = RuntimeContext("u", "s")
    await seed_history(agent, ctx)
    with pytest.raises(UsageLimitExceeded) as info:
        await agent.call("and now?", ctx, usage_limits=UsageLimits(cost_usd=100.0))
    assert info.value.limit == "cost_usd" and "private-summariser" in str(info.value)
    assert summary.requests == [] and main.requests == []
    state = await agent.get_state("u", "s")
    assert state.messages[-1].text == "and now?" and not state.summary


async def test_summary_tokens_past_a_token_limit_stop_the_call_before_its_request() -> None:
    store = InMemoryStateStore()
    main = ScriptedModel([], usage=TokenUsage(input_tokens=10, output_tokens=1))
    summary = ScriptedModel(["the summary"], repeat=True, usage=TokenUsage(input_tokens=500, output_tokens=50))
    agent = chatty_agent(main, summary, store)
    ctx = RuntimeContext("u", "s")
    await seed_history(agent, ctx)
    with pytest.raises(UsageLimitExceeded) as info:
        await agent.call("and now?", ctx, usage_limits=UsageLimits(total_tokens=100))
    assert (info.value.limit, info.value.used) == ("total_tokens", 550)
    assert len(summary.requests) == 1 and main.requests == []  # the summary was made, the request was not
    assert (await agent.get_state("u", "s")).metadata[META_KEY]["body"] == "the summary"  # and kept
