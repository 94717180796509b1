"""An MCP server's sampling requests are model calls of the run: reserved under its limits, priced, reported.

Side effects asserted: the sampling model's recorded requests (none when refused), what the
server received, the run's usage and its `Usage` events.
"""

from __future__ import annotations

import pytest

from agentrt import RuntimeContext, UsageLimits
from agentrt import events as ev
from agentrt.agent.usage import RunUsage
from agentrt.errors import UsageLimitExceeded
from agentrt.message import TokenUsage
from agentrt.model import ModelPrice, ScriptedModel
from mcp_questions import Received, agent_with_questions, call

ALICE = RuntimeContext("alice", "s1")
MAIN_PRICE = ModelPrice(input=1_000_000.0, output=0.0)  # $1 per input token
SAMPLER_PRICE = ModelPrice(input=0.0, output=1_000_000.0)  # $1 per output token


def sampler() -> ScriptedModel:
    return ScriptedModel(
        ["A summary."], name="test:sampler", usage=TokenUsage(input_tokens=4, output_tokens=3), price=SAMPLER_PRICE
    )


async def test_sampling_is_counted_priced_and_reported() -> None:
    received, sampling = Received(), sampler()
    agent, toolkit, model = await agent_with_questions(
        received,
        [call("summarize", "s1", text="a long text"), "Done."],
        sampling_model=sampling,
        sampling_approval=False,
    )
    model.usage = TokenUsage(input_tokens=10, output_tokens=1)
    model.price = MAIN_PRICE
    try:
        events = [e async for e in agent.stream_events("Summarise", ALICE)]
    finally:
        await toolkit.aclose()
    assert received.answers == [("summarize", "accept", "A summary.")]
    assert len(sampling.requests) == 1
    finished = next(e for e in events if isinstance(e, ev.RunFinished))
    spent = RunUsage.from_dict(finished.msg.metadata["usage"])
    assert spent.requests == 3  # two of the agent's model, one sampled by the server
    assert (spent.input_tokens, spent.output_tokens) == (10 + 10 + 4, 1 + 1 + 3)
    assert spent.cost_usd == pytest.approx(20 + 3)  # each model at its own price
    usages = [e for e in events if isinstance(e, ev.Usage)]
    assert [e.model for e in usages] == [model.model_name, sampling.model_name, model.model_name]
    assert [e.cost_usd for e in usages] == pytest.approx([10.0, 3.0, 10.0])
    assert sampling.model_name != model.model_name


async def test_sampling_past_the_request_limit_is_refused_before_it_is_sent() -> None:
    received, sampling = Received(), sampler()
    agent, toolkit, model = await agent_with_questions(
        received,
        [call("summarize", "s1", text="a long text"), "Done."],
        sampling_model=sampling,
        sampling_approval=False,
    )
    try:
        with pytest.raises(UsageLimitExceeded) as info:
            await agent.call("Summarise", ALICE, usage_limits=UsageLimits(requests=1))
    finally:
        await toolkit.aclose()
    assert sampling.requests == []  # never sent
    assert received.answers[0][:2] == ("summarize", "refused")
    assert "usage limit requests=1" in str(received.answers[0][2])
    assert info.value.limit == "requests" and len(model.requests) == 1
    state = await agent.get_state("alice", "s1")
    assert any(m.role == "assistant" and m.tool_calls for m in state.messages), "the call's work is saved"
