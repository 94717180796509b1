"""Usage limits and cost: calls stop at a limit after a checkpoint; cost from the genai-prices table or a price."""

from __future__ import annotations

import math
import sys
from typing import Any

import pytest

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
from agentrt.agent.usage import RunUsage
from agentrt.errors import AgentrtError, InvalidTypeError, InvalidValueError
from agentrt.message import TokenUsage
from agentrt.model import ModelPrice, ScriptedModel, pricing
from agentrt.state import InMemoryStateStore

USAGE = TokenUsage(input_tokens=1000, output_tokens=100, cache_read_tokens=200)
# gpt-4o in the genai-prices table: $2.5 input, $1.25 cached input, $10 output per million tokens.
GPT4O_CALL = (800 * 2.5 + 200 * 1.25 + 100 * 10) / 1_000_000


class Counter:
    def __init__(self) -> None:
        self.runs = 0


def make_toolkit(counter: Counter) -> Toolkit:
    @tool(read_only=True)
    def bump(n: int = 1) -> str:
        """Count a run.

        Args:
            n: Ignored.
        """
        counter.runs += 1
        return f"run {counter.runs}"

    return Toolkit([bump])


def call(i: int) -> ToolUseBlock:
    return ToolUseBlock(id=f"c{i}", name="bump", input={"n": i})


def agent_for(model: ScriptedModel, counter: Counter, **kwargs: Any) -> ReActAgent:
    return ReActAgent(
        "worker",
        "You work.",
        model,
        make_toolkit(counter),
        state_store=kwargs.pop("state_store", None) or InMemoryStateStore(),
        **kwargs,
    )


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


# -- the limits object ---------------------------------------------------------------------------
def test_limits_are_validated_with_typed_errors() -> None:
    assert UsageLimits().empty
    assert not UsageLimits(requests=0).empty
    with pytest.raises(InvalidValueError):
        UsageLimits(requests=-1)
    with pytest.raises(InvalidTypeError):
        UsageLimits(tool_calls=True)
    with pytest.raises(InvalidTypeError):
        UsageLimits(total_tokens=1.5)  # type: ignore[arg-type]  # wrong type on purpose
    with pytest.raises(InvalidValueError):
        UsageLimits(cost_usd=math.nan)
    with pytest.raises(InvalidTypeError):
        UsageLimits(cost_usd="1")  # type: ignore[arg-type]  # wrong type on purpose
    assert UsageLimits(cost_usd=1).cost_usd == 1
    assert issubclass(UsageLimitExceeded, AgentrtError)


async def test_usage_limits_must_be_a_usage_limits() -> None:
    agent = agent_for(ScriptedModel(["hi"]), Counter())
    with pytest.raises(InvalidTypeError):
        await agent.call("x", usage_limits={"requests": 1})  # type: ignore[arg-type]  # wrong type on purpose
    with pytest.raises(InvalidTypeError):
        agent_for(ScriptedModel(["hi"]), Counter(), usage_limits=3)


def test_run_usage_round_trips() -> None:
    usage = RunUsage(requests=2, input_tokens=10, output_tokens=5, tool_calls=1, cost_usd=0.5)
    assert usage.total_tokens == 15
    assert RunUsage.from_dict(usage.to_dict()) == usage
    assert RunUsage.from_dict({}) == RunUsage()


# -- requests ------------------------------------------------------------------------------------
async def test_a_request_limit_stops_before_the_model_call_and_the_session_continues() -> None:
    counter = Counter()
    model = ScriptedModel([call(1), call(2), "never said"])
    store = InMemoryStateStore()
    agent = agent_for(model, counter, state_store=store)
    ctx = RuntimeContext("u", "s")
    with pytest.raises(UsageLimitExceeded) as info:
        await agent.call("work", ctx, usage_limits=UsageLimits(requests=2))
    exc = info.value
    assert (exc.limit, exc.limit_value, exc.used, exc.agent) == ("requests", 2, 3, "worker")
    assert isinstance(exc.usage, RunUsage) and exc.usage.requests == 2 and exc.usage.tool_calls == 2
    assert len(model.requests) == 2  # the third model call never started
    assert counter.runs == 2
    state = await agent.get_state("u", "s")
    assert state.messages[0].text == "work"
    assert_valid_history(state.messages)
    assert [r.state for m in state.messages for r in m.blocks(ToolResultBlock)] == ["success", "success"]
    # The next call continues the session, with the history the limited call saved.
    reply = await agent.call("go on", ctx)
    assert reply.text == "never said"
    assert len(model.requests[-1].messages) == len(state.messages) + 2  # system prompt + the new input
    assert_valid_history((await agent.get_state("u", "s")).messages)


async def test_the_agent_default_applies_and_a_call_value_replaces_it() -> None:
    counter = Counter()
    model = ScriptedModel([call(1), "done", call(2), "done again"])
    agent = agent_for(model, counter, usage_limits=UsageLimits(requests=1))
    with pytest.raises(UsageLimitExceeded):
        await agent.call("a", RuntimeContext("u", "s1"))
    assert len(model.requests) == 1
    reply = await agent.call("b", RuntimeContext("u", "s1"), usage_limits=UsageLimits(requests=5))
    assert reply.text == "done"
    # An empty UsageLimits lifts the default for one call.
    reply = await agent.call("c", RuntimeContext("u", "s2"), usage_limits=UsageLimits())
    assert reply.text == "done again"
    assert reply.metadata["usage"]["requests"] == 2


# -- tool calls ----------------------------------------------------------------------------------
async def test_a_tool_call_limit_stops_before_the_batch_and_closes_its_calls() -> None:
    counter = Counter()
    model = ScriptedModel([call(1), [call(2), call(3)], "final"])
    agent = agent_for(model, counter)
    ctx = RuntimeContext("u", "s")
    with pytest.raises(UsageLimitExceeded) as info:
        await agent.call("work", ctx, usage_limits=UsageLimits(tool_calls=2))
    assert (info.value.limit, info.value.used) == ("tool_calls", 3)
    assert counter.runs == 1  # the batch of two would go past the limit: neither ran
    assert len(model.requests) == 2
    messages = (await agent.get_state("u", "s")).messages
    assert_valid_history(messages)
    closed = messages[-1].blocks(ToolResultBlock)
    assert [(r.id, r.state) for r in closed] == [("c2", "interrupted"), ("c3", "interrupted")]
    assert "usage limit (tool_calls=2)" in closed[0].text
    assert (await agent.call("next", ctx)).text == "final"
    assert counter.runs == 1


# -- tokens and cost -----------------------------------------------------------------------------
async def test_a_token_limit_stops_after_the_model_call_that_went_past_it() -> None:
    counter = Counter()
    model = ScriptedModel([call(1), call(2), "final"], usage=TokenUsage(input_tokens=100, output_tokens=20))
    agent = agent_for(model, counter)
    events: list[ev.AgentEvent] = []
    with pytest.raises(UsageLimitExceeded) as info:
        async for event in agent.stream_events(
            "work", RuntimeContext("u", "s"), usage_limits=UsageLimits(total_tokens=150)
        ):
            events.append(event)
    assert (info.value.limit, info.value.limit_value, info.value.used) == ("total_tokens", 150, 240)
    assert len(model.requests) == 2 and counter.runs == 1  # the second reply's tool call never ran
    errors = [e for e in events if isinstance(e, ev.RunError)]
    assert [e.error_type for e in errors] == ["UsageLimitExceeded"]
    assert not any(isinstance(e, ev.RunFinished) for e in events)
    messages = (await agent.get_state("u", "s")).messages
    assert_valid_history(messages)
    # The reply that went past the limit is kept (it was paid for); its call is closed as not run.
    assert messages[-2].tool_calls[0].id == "c2"
    assert messages[-1].blocks(ToolResultBlock)[0].state == "interrupted"


async def test_input_and_output_token_limits() -> None:
    usage = TokenUsage(input_tokens=100, output_tokens=20)
    for limits, name in (
        (UsageLimits(input_tokens=150), "input_tokens"),
        (UsageLimits(output_tokens=30), "output_tokens"),
    ):
        agent = agent_for(ScriptedModel([call(1), "final"], usage=usage), Counter())
        with pytest.raises(UsageLimitExceeded) as info:
            await agent.call("x", RuntimeContext("u", name), usage_limits=limits)
        assert info.value.limit == name


async def test_cost_comes_from_the_price_table_with_cached_tokens() -> None:
    model = ScriptedModel([call(1), "final"], name="openai:gpt-4o", usage=USAGE)
    agent = agent_for(model, Counter())
    events: list[ev.AgentEvent] = []
    reply = await agent.run_with_events("x", RuntimeContext("u", "s"), events.append)
    costs = [e.cost_usd for e in events if isinstance(e, ev.Usage)]
    assert costs == [pytest.approx(GPT4O_CALL)] * 2
    usage = reply.metadata["usage"]
    assert usage["cost_usd"] == pytest.approx(2 * GPT4O_CALL)
    assert (usage["requests"], usage["tool_calls"], usage["input_tokens"], usage["output_tokens"]) == (2, 1, 2000, 200)
    assert usage["total_tokens"] == 2200 and usage["cache_read_tokens"] == 400
    # The event JSON carries the cost, and reads back.
    event = next(e for e in events if isinstance(e, ev.Usage))
    assert event.to_dict()["cost_usd"] == pytest.approx(GPT4O_CALL)
    assert ev.event_from_dict(event.to_dict()) == event
    # The stored reply holds the same account.
    stored = (await agent.get_state("u", "s")).messages[-1]
    assert stored.metadata["usage"] == usage


async def test_an_unknown_model_has_no_cost_never_a_guess() -> None:
    for name in ("gpt-4o", "openai:no-such-model-xyz", "nowhere:gpt-4o"):
        agent = agent_for(ScriptedModel(["hi"], name=name, usage=USAGE), Counter())
        events: list[ev.AgentEvent] = []
        reply = await agent.run_with_events("x", RuntimeContext("u", name), events.append)
        assert reply.metadata["usage"]["cost_usd"] is None, name
        assert [e.cost_usd for e in events if isinstance(e, ev.Usage)] == [None]
    # No usage reported: no cost either.
    reply = await agent_for(ScriptedModel(["hi"], name="openai:gpt-4o"), Counter()).call("x")
    assert reply.metadata["usage"]["cost_usd"] is None


def test_without_genai_prices_the_cost_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "genai_prices", None)  # import fails
    monkeypatch.setattr(pricing, "_table", {})
    model = ScriptedModel(name="openai:gpt-4o")
    assert pricing.cost_of(model, USAGE) is None
    assert not pricing.price_known(model)
    # The model's own price needs no table.
    model.price = ModelPrice(input=1.0, output=2.0)
    assert pricing.cost_of(model, USAGE) == pytest.approx((1000 * 1.0 + 100 * 2.0) / 1e6)


def test_a_missing_genai_prices_is_looked_for_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # A failed import walks sys.path (~35 us): once per process, not once per model call.
    attempts: list[str] = []

    class Absent:
        @staticmethod
        def find_spec(name: str, path: object = None, target: object = None) -> None:
            if name == "genai_prices":
                attempts.append(name)
                raise ImportError("no genai_prices here")

    monkeypatch.delitem(sys.modules, "genai_prices", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Absent(), *sys.meta_path])
    monkeypatch.setattr(pricing, "_table", {})
    model = ScriptedModel(name="openai:gpt-4o")
    for _ in range(5):
        assert pricing.cost_of(model, USAGE) is None
    assert not pricing.price_known(model)
    assert attempts == ["genai_prices"]


def test_a_model_price_overrides_the_table_and_bills_cache_rates() -> None:
    price = ModelPrice(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)
    usage = TokenUsage(input_tokens=1000, output_tokens=100, cache_read_tokens=500, cache_write_tokens=100)
    assert price.cost(usage) == pytest.approx((400 * 3.0 + 500 * 0.3 + 100 * 3.75 + 100 * 15.0) / 1e6)
    model = ScriptedModel(name="openai:gpt-4o", price=price)
    assert pricing.cost_of(model, usage) == pytest.approx(price.cost(usage))
    assert pricing.cost_of(model, None) is None
    with pytest.raises(InvalidValueError):
        ModelPrice(input=-1, output=1)
    with pytest.raises(InvalidTypeError):
        ModelPrice(input="1", output=1)  # type: ignore[arg-type]  # wrong type on purpose


def test_tiered_table_prices_are_computed_by_the_table() -> None:
    model = ScriptedModel(name="anthropic:claude-sonnet-4-5")
    cost = pricing.cost_of(model, TokenUsage(input_tokens=1000, output_tokens=100))
    assert cost is not None and cost > 0


@pytest.mark.parametrize("clock", [5.0, 3599.0, 1e7])
def test_a_flat_table_price_is_computed_without_the_table_calculator(
    monkeypatch: pytest.MonkeyPatch, clock: float
) -> None:
    # The table's calculator costs ~0.25 ms a call; a flat price must skip it whatever the monotonic
    # clock reads (it starts near zero after boot: an hour of uptime once hid the fast path).
    monkeypatch.setattr(pricing, "_table", {})
    monkeypatch.setattr("agentrt.model.pricing.time.monotonic", lambda: clock)
    model = ScriptedModel(name="openai:gpt-4o")
    entry = pricing._entry(("openai", "gpt-4o"))
    assert entry is not None
    calls: list[object] = []
    real = entry.info.calc_price

    def spy(*args: object, **kwargs: object) -> object:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(entry.info, "calc_price", spy)
    for _ in range(3):
        assert pricing.cost_of(model, USAGE) == pytest.approx(GPT4O_CALL)
    assert calls == []


def test_wrappers_price_as_the_model_they_wrap() -> None:
    from agentrt.model import FallbackModel, RetryModel
    from agentrt.model.text_protocol import ensure_tool_calling

    inner = ScriptedModel(name="openai:gpt-4o")
    for wrapped in (RetryModel(inner), FallbackModel(inner, ScriptedModel()), ensure_tool_calling(inner, "text")):
        assert pricing.cost_of(wrapped, USAGE) == pytest.approx(GPT4O_CALL)
    inner.price = ModelPrice(input=1, output=1)
    retry = RetryModel(inner)
    assert pricing.cost_of(retry, USAGE) == pytest.approx(1100 / 1e6)
    retry.price = ModelPrice(input=2, output=2)
    assert pricing.cost_of(retry, USAGE) == pytest.approx(2200 / 1e6)
    text = ensure_tool_calling(inner, "text")
    assert pricing.cost_of(text, USAGE) == pytest.approx(1100 / 1e6)


def test_model_from_id_takes_a_price() -> None:
    from agentrt.errors import UserError
    from agentrt.model import model_from_id

    model = model_from_id("scripted:private", price=ModelPrice(input=1, output=1))
    assert pricing.cost_of(model, USAGE) == pytest.approx(1100 / 1e6)
    with pytest.raises(UserError):
        model_from_id("scripted:private", price={"input": 1})


def test_a_cost_limit_stops_the_call_once_spent() -> None:
    counter = Counter()
    model = ScriptedModel([call(1), call(2), "final"], name="openai:gpt-4o", usage=USAGE)
    agent = agent_for(model, counter)
    with pytest.raises(UsageLimitExceeded) as info:
        agent.call_sync("x", RuntimeContext("u", "s"), usage_limits=UsageLimits(cost_usd=0.005))
    exc = info.value
    assert exc.limit == "cost_usd" and exc.used == pytest.approx(2 * GPT4O_CALL)
    assert exc.usage.cost_usd == pytest.approx(2 * GPT4O_CALL)
    assert len(model.requests) == 2 and counter.runs == 1


async def test_a_cost_limit_on_a_model_without_a_price_is_refused_before_anything_is_saved() -> None:
    store = InMemoryStateStore()
    model = ScriptedModel(["hi"], name="private-model", usage=USAGE)
    agent = agent_for(model, Counter(), state_store=store)
    with pytest.raises(InvalidValueError, match="no known price"):
        await agent.call("x", RuntimeContext("u", "s"), usage_limits=UsageLimits(cost_usd=1.0))
    assert model.requests == []
    assert (await agent.get_state("u", "s")).messages == []


# -- subagents -----------------------------------------------------------------------------------
async def test_subagents_spend_against_the_parents_limits() -> None:
    counter = Counter()
    child_model = ScriptedModel([call(1), call(2), call(3), "child done"], name="openai:gpt-4o", usage=USAGE)
    child = agent_for(child_model, counter)
    child.name = "helper"
    parent_model = ScriptedModel(
        [ToolUseBlock(id="p1", name="helper", input={"task": "help"}), "parent done"], name="openai:gpt-4o", usage=USAGE
    )
    store = InMemoryStateStore()
    parent = ReActAgent("boss", "", parent_model, Toolkit([child.as_tool()]), state_store=store)
    child.state_store = store
    ctx = RuntimeContext("u", "s")
    with pytest.raises(UsageLimitExceeded) as info:
        await parent.call("go", ctx, usage_limits=UsageLimits(requests=3))
    exc = info.value
    assert (exc.agent, exc.limit, exc.used) == ("boss", "requests", 4)
    assert exc.usage.requests == 3  # one of the parent's, two of the child's
    assert len(parent_model.requests) == 1 and len(child_model.requests) == 2
    assert counter.runs == 2
    assert exc.usage.cost_usd == pytest.approx(3 * GPT4O_CALL)
    messages = (await parent.get_state("u", "s")).messages
    assert_valid_history(messages)
    result = messages[-1].blocks(ToolResultBlock)[0]
    assert result.state == "error" and "usage limit requests=3 of agent 'boss'" in result.text
    assert_valid_history((await child.get_state("u", "s/helper")).messages)
    # The parent's session continues.
    assert (await parent.call("and now?", ctx)).text == "parent done"


async def test_without_limits_the_parent_account_includes_its_subagents() -> None:
    child = agent_for(ScriptedModel([call(1), "child done"], name="openai:gpt-4o", usage=USAGE), Counter())
    child.name = "helper"
    parent_model = ScriptedModel(
        [ToolUseBlock(id="p1", name="helper", input={"task": "help"}), "parent done"], name="openai:gpt-4o", usage=USAGE
    )
    parent = ReActAgent("boss", "", parent_model, Toolkit([child.as_tool()]), state_store=InMemoryStateStore())
    child.state_store = parent.state_store
    reply = await parent.call("go")
    usage = reply.metadata["usage"]
    assert (usage["requests"], usage["tool_calls"]) == (4, 2)  # 2 + 2 model calls; the subagent tool and its tool
    assert usage["cost_usd"] == pytest.approx(4 * GPT4O_CALL)
    assert reply.usage == TokenUsage(input_tokens=4000, output_tokens=400, cache_read_tokens=800)


async def test_a_subagents_own_limit_stops_only_the_subagent() -> None:
    child = agent_for(ScriptedModel([call(1), call(2), "child done"]), Counter(), usage_limits=UsageLimits(requests=1))
    child.name = "helper"
    parent_model = ScriptedModel([ToolUseBlock(id="p1", name="helper", input={"task": "help"}), "parent done"])
    parent = ReActAgent("boss", "", parent_model, Toolkit([child.as_tool()]), state_store=InMemoryStateStore())
    child.state_store = parent.state_store
    reply = await parent.call("go")
    assert reply.text == "parent done"
    result = parent_model.requests[-1].messages[-1].blocks(ToolResultBlock)[0]
    assert result.state == "error" and "of agent 'helper' reached" in result.text


async def test_a_streamed_parent_stops_its_streamed_subagent_at_the_parents_limit() -> None:
    child_model = ScriptedModel([call(1), call(2), "child done"], name="openai:gpt-4o", usage=USAGE)
    child = agent_for(child_model, Counter())
    child.name = "helper"
    parent_model = ScriptedModel(
        [ToolUseBlock(id="p1", name="helper", input={"task": "help"}), "parent done"], name="openai:gpt-4o", usage=USAGE
    )
    parent = ReActAgent("boss", "", parent_model, Toolkit([child.as_tool()]), state_store=InMemoryStateStore())
    child.state_store = parent.state_store
    events: list[ev.AgentEvent] = []
    with pytest.raises(UsageLimitExceeded) as info:
        async for event in parent.stream_events("go", usage_limits=UsageLimits(cost_usd=2.5 * GPT4O_CALL)):
            events.append(event)
    assert (info.value.agent, info.value.limit) == ("boss", "cost_usd")
    assert len(child_model.requests) == 2 and len(parent_model.requests) == 1
    errors = [(e.source, e.error_type) for e in events if isinstance(e, ev.RunError)]
    assert errors == [("helper", "UsageLimitExceeded"), ("boss", "UsageLimitExceeded")]
    assert [e.cost_usd for e in events if isinstance(e, ev.Usage)] == [pytest.approx(GPT4O_CALL)] * 3
