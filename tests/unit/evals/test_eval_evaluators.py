"""Each built-in evaluator: its score, its reason, and when it skips."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from pydantic import BaseModel

from agentrt.errors import UserError
from agentrt.evals import (
    Callable,
    Case,
    Contains,
    Equals,
    EvalContext,
    Evaluator,
    JsonSchema,
    MaxCost,
    MaxLatency,
    MaxTokens,
    PydanticModel,
    Regex,
    Score,
    ToolTrajectory,
)
from agentrt.evals.evaluators import evaluator_from_spec
from agentrt.events import ModelCallFinished, RunStarted
from agentrt.message import META_STRUCTURED, Msg, TextBlock, ToolUseBlock


def ctx(
    output: str = "",
    *,
    case: Case | None = None,
    structured: Any = None,
    usage: Mapping[str, Any] | None = None,
    latency: float = 0.1,
    events: Sequence[Any] = (),
) -> EvalContext:
    metadata = {META_STRUCTURED: structured} if structured is not None else {}
    reply = Msg(role="assistant", content=[TextBlock(text=output)], metadata=metadata)
    return EvalContext(case=case or Case("c", "q"), reply=reply, events=events, latency=latency, usage=usage)


async def test_equals_text_and_structured() -> None:
    case = Case("c", "q", expected_output="Paris")
    assert (await Equals().evaluate(ctx(" Paris\n", case=case))).value == 1.0
    wrong = await Equals().evaluate(ctx("paris", case=case))
    assert wrong.value == 0.0 and "expected 'Paris', got 'paris'" in wrong.reason
    assert (await Equals(case_sensitive=False).evaluate(ctx("paris", case=case))).value == 1.0
    assert (await Equals("x").evaluate(ctx("x"))).value == 1.0
    assert (await Equals().evaluate(ctx("x"))).skipped
    structured = Case("s", "q", expected_output={"city": "Paris", "n": 2})
    assert (await Equals().evaluate(ctx("", case=structured, structured={"n": 2, "city": "Paris"}))).value == 1.0
    assert (await Equals().evaluate(ctx('{"city": "Paris", "n": 2}', case=structured))).value == 1.0
    not_json = await Equals().evaluate(ctx("Paris", case=structured))
    assert not_json.value == 0.0 and "not JSON" in not_json.reason
    assert (await Equals().evaluate(ctx("", case=structured, structured={"city": "Rome"}))).value == 0.0


async def test_contains_partial_credit_and_case() -> None:
    score = await Contains(["Paris", "France", "Seine"]).evaluate(ctx("Paris is in France"))
    assert score.value == pytest.approx(2 / 3) and "'Seine'" in score.reason
    assert (await Contains("PARIS", case_sensitive=False).evaluate(ctx("paris"))).value == 1.0
    assert (await Contains("PARIS").evaluate(ctx("paris"))).value == 0.0
    assert (await Contains().evaluate(ctx("in Paris", case=Case("c", "q", expected_output="Paris")))).value == 1.0
    assert (await Contains().evaluate(ctx("x"))).skipped
    assert (await Contains().evaluate(ctx("x", case=Case("c", "q", expected_output={"a": 1})))).skipped
    with pytest.raises(UserError):
        Contains([])


async def test_regex() -> None:
    assert (await Regex(r"\d+ km").evaluate(ctx("about 42 km away"))).value == 1.0
    assert (await Regex(r"\d+", full_match=True).evaluate(ctx("42 km"))).value == 0.0
    with pytest.raises(UserError, match="invalid pattern"):
        Regex("(")


class City(BaseModel):
    name: str
    population: int


async def test_json_schema_and_pydantic_model() -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    assert (await JsonSchema(schema).evaluate(ctx(structured={"name": "Paris"}))).value == 1.0
    bad = await JsonSchema(schema).evaluate(ctx('{"name": 3}'))
    assert bad.value == 0.0 and "name: 3 is not of type 'string'" in bad.reason
    assert (await JsonSchema(schema).evaluate(ctx("not json"))).value == 0.0
    with pytest.raises(UserError, match="invalid schema"):
        JsonSchema({"type": "nope"})

    ok = await PydanticModel(City).evaluate(ctx(structured={"name": "Paris", "population": 2}))
    assert ok.value == 1.0 and PydanticModel(City).name == "pydantic:City"
    invalid = await PydanticModel(City).evaluate(ctx('{"name": "Paris"}'))
    assert invalid.value == 0.0 and "population" in invalid.reason
    case = Case("c", "q", expected_output={"name": "Paris", "population": 2})
    same = PydanticModel(City, compare_expected=True)
    assert (await same.evaluate(ctx('{"name": "Paris", "population": "2"}', case=case))).value == 1.0
    assert (await same.evaluate(ctx('{"name": "Rome", "population": 2}', case=case))).value == 0.0
    assert (await same.evaluate(ctx('{"name": "Rome", "population": 2}'))).skipped


def calls_trace(*calls: ToolUseBlock, source: str = "bot") -> list[Any]:
    return [
        RunStarted(reply_id="r", source=source),
        *(
            ModelCallFinished(reply_id="r", step=i, msg=Msg(role="assistant", content=[c]), source=source)
            for i, c in enumerate(calls)
        ),
    ]


async def test_tool_trajectory_from_the_trace() -> None:
    trace = calls_trace(
        ToolUseBlock(name="search", input={"q": "weather Paris"}),
        ToolUseBlock(name="get_weather", input={"city": "Paris"}),
    )
    # A subagent's calls (another source) are not the agent's trajectory.
    trace.append(
        ModelCallFinished(
            reply_id="x", step=9, msg=Msg(role="assistant", content=[ToolUseBlock(name="other")]), source="sub"
        )
    )
    case = Case(
        "c",
        "q",
        expected_tools=[
            {"name": "search", "args": {"q": {"regex": "Paris"}}},
            {"name": "get_weather", "args": {"city": "Paris"}},
        ],
    )
    assert (await ToolTrajectory().evaluate(ctx(case=case, events=trace))).value == 1.0
    reversed_case = Case("c", "q", expected_tools=list(reversed(case.expected_tools or ())))
    exact = await ToolTrajectory().evaluate(ctx(case=reversed_case, events=trace))
    assert exact.value == 0.5 and 'missing: get_weather(city="Paris")' in exact.reason
    assert "unexpected: get_weather(" in exact.reason
    as_set = await ToolTrajectory(order="any").evaluate(ctx(case=reversed_case, events=trace))
    assert as_set.value == 1.0
    partial = await ToolTrajectory([{"name": "search"}], allow_extra=True).evaluate(ctx(events=trace))
    assert partial.value == 1.0
    assert (await ToolTrajectory().evaluate(ctx(events=trace))).skipped
    dict_trace = [e.to_dict() for e in trace]  # a report loaded from JSON
    assert (await ToolTrajectory().evaluate(ctx(case=case, events=dict_trace))).value == 1.0


async def test_budgets_skip_when_unknown() -> None:
    assert (await MaxLatency(1.0).evaluate(ctx(latency=0.5))).value == 1.0
    slow = await MaxLatency(1.0).evaluate(ctx(latency=2.5))
    assert slow.value == 0.0 and "2.5 > 1" in slow.reason
    unknown_cost = await MaxCost(0.01).evaluate(ctx(usage={"input_tokens": 10, "output_tokens": 5}))
    assert unknown_cost.skipped and unknown_cost.passed and unknown_cost.reason == "cost (USD) unknown"
    assert (await MaxCost(0.01).evaluate(ctx(usage={"cost_usd": 0.002}))).value == 1.0
    assert (await MaxCost(0.01).evaluate(ctx(usage={"cost_usd": 0.02}))).value == 0.0
    assert (await MaxTokens(100).evaluate(ctx(usage=None))).skipped
    assert (await MaxTokens(100).evaluate(ctx(usage={"input_tokens": 90, "output_tokens": 20}))).value == 0.0
    assert (await MaxTokens(100).evaluate(ctx(usage={"total_tokens": 99}))).value == 1.0
    with pytest.raises(UserError):
        MaxTokens(-1)


async def test_callable_sync_async_and_its_return_types() -> None:
    def short(c: EvalContext) -> bool:
        return len(c.output) < 5

    async def half(c: EvalContext) -> float:
        return 0.5

    assert (await Callable(short).evaluate(ctx("abc"))).value == 1.0 and Callable(short).name == "short"
    assert (await Callable(half, threshold=0.5).evaluate(ctx())).value == 0.5
    assert (await Callable(lambda c: Score(0.25, "quarter")).evaluate(ctx())).reason == "quarter"
    assert (await Callable(lambda c: None).evaluate(ctx())).skipped
    with pytest.raises(UserError, match="returned str"):
        await Callable(lambda c: "yes").evaluate(ctx())
    with pytest.raises(UserError):
        Score(1.5)


def test_every_builtin_follows_the_protocol_and_specs_build_them() -> None:
    built = [
        evaluator_from_spec(s)
        for s in (
            "equals",
            {"equals": "x"},
            "contains",
            {"contains": ["a", "b"]},
            {"regex": "x+"},
            {"json_schema": {"type": "object"}},
            "tool_trajectory",
            {"tool_trajectory": {"order": "any"}},
            {"max_latency": 2},
            {"max_cost": {"usd": 0.1}},
            {"max_tokens": 500},
        )
    ]
    assert all(isinstance(e, Evaluator) for e in built)
    assert [e.name for e in built][:3] == ["equals", "equals", "contains"]
    for bad, words in (
        ({"regex": None}, "needs a value"),
        ({"max_cost": {"dollars": 1}}, "unexpected keyword"),
        ({"a": 1, "b": 2}, "mapping of one name"),
        ({"llm_judge": {"rubric": "x"}}, "llm_judge takes"),
    ):
        with pytest.raises(UserError, match=words):
            evaluator_from_spec(bad)
