"""Usage limits of a pipeline call: one budget for every member (and nested pipeline) it runs.

Each test checks the side effects: how many requests each scripted model received, what each
member's session holds after the stop, and that a later call goes on.
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
    TextBlock,
    Toolkit,
    ToolResultBlock,
    ToolUseBlock,
    UsageLimitExceeded,
    UsageLimits,
    tool,
)
from agentrt import events as ev
from agentrt.agent._run import Run
from agentrt.errors import InvalidTypeError
from agentrt.message import TokenUsage
from agentrt.middleware import Middleware
from agentrt.model import ModelPrice, ScriptedModel
from agentrt.model.base import ModelRequest
from agentrt.pipeline import Composite, fanout, loop, route, sequential
from agentrt.state import InMemoryStateStore

CTX = RuntimeContext("u", "s")
PRICE = ModelPrice(input=1_000_000, output=0)  # $1 per input token
RACE = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@tool(read_only=True)
def noop(n: int = 0) -> str:
    """Do nothing.

    Args:
        n: Ignored.
    """
    return "ok"


def step(i: int) -> ToolUseBlock:
    return ToolUseBlock(id=f"t{i}", name="noop", input={"n": i})


def member(name: str, store: InMemoryStateStore, requests: int = 1, **kwargs: Any) -> ReActAgent:
    """An agent answering after ``requests - 1`` tool steps in each turn (a stopped turn is not resumed)."""

    def reply(request: ModelRequest) -> Any:
        done = 0  # tool steps since the turn's input
        for msg in reversed(request.messages):
            results = msg.blocks(ToolResultBlock)
            if not results:
                if msg.role == "user":
                    break
                continue
            done += len(results)
        return step(done) if done < requests - 1 else f"{name} done"

    model = kwargs.pop("model", None) or ScriptedModel.from_function(reply, **kwargs.pop("m", {}))
    return ReActAgent(name, f"You are {name}.", model, Toolkit([noop]), state_store=store, **kwargs)


def sent(*agents: ReActAgent) -> list[int]:
    counts = []
    for a in agents:
        assert isinstance(a.model, ScriptedModel)
        counts.append(len(a.model.requests))
    return counts


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


# -- sequential ----------------------------------------------------------------------------------------------
async def test_sequential_budget_counts_every_member_and_stops_the_one_that_reaches_it() -> None:
    store = InMemoryStateStore()
    a, b, c = member("a", store, 2), member("b", store, 2), member("c", store)
    pipe = sequential([a, b, c], name="pipe")
    with pytest.raises(UsageLimitExceeded) as info:
        await pipe.call("go", CTX, usage_limits=UsageLimits(requests=3))
    exc = info.value
    assert (exc.agent, exc.limit, exc.used) == ("pipe", "requests", 4)
    assert exc.usage.requests == 3 and exc.usage.tool_calls == 2
    assert "of pipeline 'pipe'" in str(exc)
    assert sent(a, b, c) == [2, 1, 0]  # b's second model call was never sent; c never started
    b_state = await b.get_state("u", "s/b")  # b checkpointed its step before stopping
    assert [m.role for m in b_state.messages] == ["user", "assistant", "user"]
    assert b_state.messages[0].text == "a done"
    assert_valid_history(b_state.messages)
    assert (await c.get_state("u", "s/c")).messages == []
    # The budget was the call's: the next call has a fresh one, and the sessions go on.
    reply = await pipe.call("again", CTX, usage_limits=UsageLimits(requests=5))
    assert reply.text == "c done"
    assert sent(a, b, c) == [4, 3, 1]
    assert_valid_history((await b.get_state("u", "s/b")).messages)


async def test_tokens_cost_and_tool_calls_of_all_members_count_against_the_budget() -> None:
    store = InMemoryStateStore()
    usage = TokenUsage(input_tokens=10, output_tokens=0)
    a = member("a", store, 2, m={"usage": usage, "price": PRICE})
    b = member("b", store, 2, m={"usage": usage, "price": PRICE})
    pipe = sequential([a, b], name="pipe")
    with pytest.raises(UsageLimitExceeded) as info:
        await pipe.call("go", CTX, usage_limits=UsageLimits(total_tokens=25))
    assert (info.value.limit, info.value.used) == ("total_tokens", 30)  # checked after b's first reply
    assert sent(a, b) == [2, 1]
    with pytest.raises(UsageLimitExceeded) as info:
        await pipe.call("go", CTX, usage_limits=UsageLimits(cost_usd=35.0))
    assert (info.value.limit, info.value.used) == ("cost_usd", 40.0)
    assert sent(a, b) == [4, 3]
    with pytest.raises(UsageLimitExceeded) as info:
        await pipe.call("go", CTX, usage_limits=UsageLimits(tool_calls=1))
    assert (info.value.limit, info.value.agent) == ("tool_calls", "pipe")
    assert sent(a, b) == [6, 4]  # b's tool batch was refused before it ran
    assert_valid_history((await b.get_state("u", "s/b")).messages)


async def test_an_unpriced_member_is_not_called_under_a_cost_budget() -> None:
    store = InMemoryStateStore()
    a = member("a", store, m={"usage": TokenUsage(input_tokens=1, output_tokens=0), "price": PRICE})
    b = member("b", store, m={"name": "private-model"})
    with pytest.raises(UsageLimitExceeded) as info:
        await sequential([a, b], name="pipe").call("go", CTX, usage_limits=UsageLimits(cost_usd=10.0))
    assert info.value.limit == "cost_usd" and "private-model" in str(info.value)
    assert sent(a, b) == [1, 0]


async def test_members_own_limits_still_apply_inside_a_budget() -> None:
    store = InMemoryStateStore()
    a = member("a", store, 3, usage_limits=UsageLimits(requests=2))
    b = member("b", store)
    with pytest.raises(UsageLimitExceeded) as info:
        await sequential([a, b]).call("go", CTX, usage_limits=UsageLimits(requests=100))
    assert (info.value.agent, info.value.limit) == ("a", "requests")
    assert sent(a, b) == [2, 0]


async def test_a_budget_with_room_changes_nothing_and_ends_with_the_call() -> None:
    store = InMemoryStateStore()
    a, b = member("a", store, 2), member("b", store)
    pipe = sequential([a, b], name="pipe")
    reply = await pipe.call("go", CTX, usage_limits=UsageLimits(requests=3))
    assert reply.text == "b done" and sent(a, b) == [2, 1]
    # No limit passed: the last call's budget is gone, nothing stops this one.
    for _ in range(3):
        await pipe.call("go", CTX)
    assert sent(a, b) == [8, 4]
    # An empty UsageLimits opens no budget either.
    assert (await pipe.call("go", CTX, usage_limits=UsageLimits())).text == "b done"


# -- fan-out -------------------------------------------------------------------------------------------------
class Pause(Middleware):
    """Waits before each model call, after the loop's own check: parallel members race for the last requests."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    async def on_model_call(
        self, run: Run, request: ModelRequest, next: Callable[[ModelRequest], Awaitable[Msg]]
    ) -> Msg:
        await asyncio.sleep(self.delay)
        return await next(request)


@RACE
@given(
    plan=st.lists(
        st.tuples(st.integers(min_value=1, max_value=3), st.sampled_from([0.0, 0.001, 0.002])),
        min_size=1,
        max_size=6,
    ),
    limit=st.integers(min_value=0, max_value=10),
    return_exceptions=st.booleans(),
)
def test_fanout_members_never_send_past_the_budget(
    plan: list[tuple[int, float]], limit: int, return_exceptions: bool
) -> None:
    store = InMemoryStateStore()
    members = [
        member(f"m{i}", store, n, middlewares=[Pause(delay)], m={"latency": delay}) for i, (n, delay) in enumerate(plan)
    ]
    fan = fanout(members, name="fan", return_exceptions=return_exceptions)
    demand = sum(n for n, _ in plan)

    async def go() -> None:
        stopped: UsageLimitExceeded | None = None
        try:
            replies = await fan.call("go", CTX, usage_limits=UsageLimits(requests=limit))
        except UsageLimitExceeded as exc:
            stopped = exc
        total = sum(sent(*members))
        assert total <= limit
        if demand > limit:
            assert stopped is not None and (stopped.agent, stopped.limit) == ("fan", "requests")
        else:
            assert stopped is None and [r.text for r in replies] == [f"m{i} done" for i in range(len(plan))]
        for m in members:
            assert_valid_history((await m.get_state("u", f"s/{m.name}")).messages)
        # A new call with a fresh budget works.
        again = await fan.call("again", CTX, usage_limits=UsageLimits(requests=demand))
        assert len(again) == len(plan)

    asyncio.run(go())


async def test_a_members_own_limit_is_a_reply_with_return_exceptions_but_the_budget_is_not() -> None:
    store = InMemoryStateStore()
    a = member("a", store, 2, usage_limits=UsageLimits(requests=1))
    b = member("b", store)
    fan = fanout([a, b], name="fan", return_exceptions=True)
    replies = await fan.call("go", CTX, usage_limits=UsageLimits(requests=10))
    assert "of agent 'a'" in replies[0].text and replies[1].text == "b done"
    with pytest.raises(UsageLimitExceeded) as info:
        await fan.call("go", CTX, usage_limits=UsageLimits(requests=1))
    assert info.value.agent == "fan"
    assert sum(sent(a, b)) == 2 + 1  # 1 + 1 before; only 1 request in the budgeted call


# -- router and loop -------------------------------------------------------------------------------------------
async def test_the_router_counts_its_classifier_and_its_target() -> None:
    store = InMemoryStateStore()
    classifier = member("classifier", store, model=ScriptedModel(["math"], repeat=True))
    target = member("math", store)
    router = route(classifier, {"math": target}, name="router")
    with pytest.raises(UsageLimitExceeded) as info:
        await router.call("2+2?", CTX, usage_limits=UsageLimits(requests=1))
    assert info.value.agent == "router"
    assert sent(classifier, target) == [1, 0]
    assert (await target.get_state("u", "s/math")).messages[0].text == "2+2?"  # the input is kept
    assert (await router.call("2+2?", CTX, usage_limits=UsageLimits(requests=2))).text == "math done"


async def test_a_loop_stops_at_the_budget_between_rounds() -> None:
    store = InMemoryStateStore()
    worker = member("worker", store)
    looped = loop(worker, until=lambda reply: False, max_rounds=10, name="looped")
    with pytest.raises(UsageLimitExceeded) as info:
        await looped.call("go", CTX, usage_limits=UsageLimits(requests=3))
    assert (info.value.agent, info.value.used) == ("looped", 4)
    assert sent(worker) == [3]
    state = await worker.get_state("u", "s/worker")
    assert [m.role for m in state.messages] == ["user", "assistant"] * 3 + ["user"]


# -- nesting, subagents, streaming, sync ---------------------------------------------------------------------------
async def test_nested_pipelines_share_the_outer_budget_and_keep_their_own() -> None:
    store = InMemoryStateStore()
    a, b, c = member("a", store), member("b", store), member("c", store, 3)
    inner = fanout([a, b], gather=lambda replies: "gathered", name="inner")
    outer = sequential([inner, loop(c, until=lambda r: False, max_rounds=3, name="again")], name="outer")
    with pytest.raises(UsageLimitExceeded) as info:
        await outer.call("go", CTX, usage_limits=UsageLimits(requests=4))
    assert info.value.agent == "outer"
    assert sent(a, b, c) == [1, 1, 2]
    # The inner pipeline's own budget applies with the outer one: here it is the smaller.
    a2, b2 = member("a2", store, 2), member("b2", store, 2)
    inner2 = fanout([a2, b2], name="inner2")

    class Limited(Composite[Msg]):
        """A composite whose member is a pipeline called with its own limits."""

        @property
        def members(self) -> tuple[Any, ...]:
            return (inner2,)

        async def _run(self, messages: list[Msg], ctx: RuntimeContext, state: Any, output: Any) -> Msg:
            replies = await inner2.call(messages, self.member_ctx(inner2, ctx), usage_limits=UsageLimits(requests=3))
            return replies[0]

    with pytest.raises(UsageLimitExceeded) as info:
        await Limited("limited").call("go", CTX, usage_limits=UsageLimits(requests=100))
    assert info.value.agent == "inner2"
    assert sum(sent(a2, b2)) == 3


async def test_a_members_subagents_spend_the_pipeline_budget() -> None:
    store = InMemoryStateStore()
    helper = member("helper", store, 3)
    boss_model = ScriptedModel([ToolUseBlock(id="h", name="helper", input={"task": "x"}), "boss done"])
    boss = ReActAgent("boss", "", boss_model, Toolkit([helper.as_tool()]), state_store=store)
    with pytest.raises(UsageLimitExceeded) as info:
        await sequential([boss], name="pipe").call("go", CTX, usage_limits=UsageLimits(requests=3))
    assert info.value.agent == "pipe"
    # boss 1, helper 2 (its third refused, reported to boss as a failed tool), boss's second refused
    assert sent(boss, helper) == [1, 2]
    assert_valid_history((await boss.get_state("u", "s/boss")).messages)


async def test_a_streamed_pipeline_reports_the_stop_then_raises() -> None:
    store = InMemoryStateStore()
    a, b = member("a", store), member("b", store)
    events: list[ev.AgentEvent] = []
    with pytest.raises(UsageLimitExceeded):
        async for event in sequential([a, b], name="pipe").stream_events(
            "go", CTX, usage_limits=UsageLimits(requests=1)
        ):
            events.append(event)
    errors = [(e.source, e.error_type) for e in events if isinstance(e, ev.RunError)]
    assert errors == [("b", "UsageLimitExceeded"), ("pipe", "UsageLimitExceeded")]
    assert sent(a, b) == [1, 0]


def test_call_sync_takes_the_budget() -> None:
    store = InMemoryStateStore()
    a, b = member("a", store), member("b", store)
    with pytest.raises(UsageLimitExceeded):
        sequential([a, b]).call_sync("go", CTX, usage_limits=UsageLimits(requests=1))
    assert sent(a, b) == [1, 0]


async def test_a_wrong_usage_limits_is_a_typed_error_before_anything_runs() -> None:
    store = InMemoryStateStore()
    a = member("a", store)
    pipe = sequential([a])
    with pytest.raises(InvalidTypeError):
        await pipe.call("go", CTX, usage_limits={"requests": 1})  # type: ignore[arg-type]  # wrong on purpose
    with pytest.raises(InvalidTypeError):
        async for _ in pipe.stream_events("go", CTX, usage_limits=3):  # type: ignore[arg-type]  # wrong on purpose
            pass
    assert sent(a) == [0]
    assert (await a.get_state("u", "s/a")).messages == []


def test_call_sync_checks_the_type_too() -> None:
    a = member("a", InMemoryStateStore())
    with pytest.raises(InvalidTypeError):
        sequential([a]).call_sync("go", CTX, usage_limits="requests=1")  # type: ignore[arg-type]  # wrong on purpose
    assert sent(a) == [0]


class _Oracle:
    """A delegate that is not an agent run: it reports its tokens only on its reply."""

    name = "oracle"

    def __init__(self) -> None:
        self.calls = 0

    async def call(self, input: Any = None, ctx: RuntimeContext | None = None) -> Msg:
        self.calls += 1
        return Msg(
            role="assistant", content=[TextBlock(text="42")], usage=TokenUsage(input_tokens=500, output_tokens=0)
        )

    async def stream_events(self, input: Any = None, ctx: RuntimeContext | None = None) -> Any:
        msg = await self.call(input, ctx)
        yield ev.RunFinished(msg=msg, source=self.name, reply_id=msg.id)


async def test_a_non_agent_delegates_tokens_count_against_the_pipeline_budget() -> None:
    from agentrt.agent.as_tool import agent_as_tool

    oracle = _Oracle()
    ask = ToolUseBlock(id="a1", name="oracle", input={"task": "the answer?"})
    asker = ReActAgent(
        "asker",
        model=ScriptedModel([Msg(role="assistant", content=[ask]), "it is 42"], repeat=False),
        toolkit=Toolkit([agent_as_tool(oracle)]),
        state_store=InMemoryStateStore(),
    )
    after = ReActAgent("after", model=ScriptedModel(["never"]), state_store=InMemoryStateStore())
    with pytest.raises(UsageLimitExceeded) as info:
        await sequential([asker, after]).call("go", CTX, usage_limits=UsageLimits(input_tokens=400))
    assert oracle.calls == 1 and info.value.limit == "input_tokens"
    assert after.model.requests == []  # type: ignore[attr-defined]
