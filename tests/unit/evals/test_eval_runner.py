"""The runner: isolated sessions, failures recorded not raised, the concurrency bound, progress, usage."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentrt import ReActAgent, tool
from agentrt.errors import UserError
from agentrt.evals import Callable as CallableEvaluator
from agentrt.evals import (
    Case,
    Contains,
    Dataset,
    EvalContext,
    EvalReport,
    LocalExecutor,
    MaxCost,
    ProgressUpdate,
    Score,
)
from agentrt.evals.runner import EVAL_USER, usage_of
from agentrt.events import RunFinished
from agentrt.message import Msg, TextBlock, TokenUsage, ToolUseBlock
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.state import InMemoryStateStore

MakeAgent = Callable[..., ReActAgent]


def echo(request: ModelRequest) -> str:
    text = request.last_user_text
    if "explode" in text:
        raise RuntimeError(f"model failure on {text!r}")
    return f"echo: {text}"


async def test_each_run_has_its_own_session_and_sees_no_other_history(make_agent: MakeAgent) -> None:
    store = InMemoryStateStore()
    model = ScriptedModel.from_function(echo)
    agent = make_agent(model, state_store=store)
    dataset = Dataset([Case(f"c{i}", f"question {i}", expected_output=f"echo: question {i}") for i in range(5)])
    report = await dataset.evaluate(agent, repeat=2, concurrency=4, progress=False)
    assert report.pass_rate == 1.0 and len(report.results) == 10
    sessions = {r.session_id for r in report.results}
    assert len(sessions) == 10
    for result in report.results:
        state = await store.load(EVAL_USER, result.session_id, agent="bot")
        assert state is not None
        assert [m.text for m in state.messages if m.role == "user"] == [f"question {result.case[1:]}"]
    # The model saw exactly one user message per call: no case's history leaked into another's prompt.
    assert all(sum(m.role == "user" for m in r.messages) == 1 for r in model.requests)


async def test_a_failing_case_never_stops_the_others(make_agent: MakeAgent) -> None:
    agent = make_agent(ScriptedModel.from_function(echo))
    dataset = Dataset(
        [Case("ok1", "one"), Case("bad", "explode now"), Case("ok2", "two")],
        evaluators=[Contains("echo")],
    )
    report = await dataset.evaluate(agent, concurrency=1, progress=False)
    by_case = {r.case: r for r in report.results}
    assert by_case["ok1"].passed and by_case["ok2"].passed
    bad = by_case["bad"]
    assert not bad.passed and bad.error_type == "RuntimeError" and "explode now" in (bad.error or "")
    assert [(s.name, s.value) for s in bad.scores] == [("contains", 0.0)]
    assert "the run failed: RuntimeError" in bad.scores[0].reason
    assert any(type(e).__name__ == "RunError" for e in bad.events)
    assert report.summary()["errors"] == 1 and report.pass_rate == pytest.approx(2 / 3)


async def test_a_timeout_is_the_runs_error(make_agent: MakeAgent) -> None:
    release = asyncio.Event()

    async def slow(request: ModelRequest) -> str:
        if "slow" in request.last_user_text:
            await release.wait()  # never set: only the timeout ends it
        return "done"

    agent = make_agent(ScriptedModel.from_function(slow))
    report = await Dataset([Case("slow", "slow one"), Case("fast", "fast one")]).evaluate(
        agent, timeout=0.2, progress=False
    )
    by_case = {r.case: r for r in report.results}
    assert by_case["slow"].error_type == "TimeoutError" and "0.2 s" in (by_case["slow"].error or "")
    assert by_case["fast"].error is None and by_case["fast"].output == "done"


async def test_concurrency_bound_is_honoured(make_agent: MakeAgent) -> None:
    limit = 3
    in_flight = 0
    peak = 0
    full = asyncio.Event()

    async def counting(request: ModelRequest) -> str:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        if in_flight >= limit:
            full.set()
        try:
            await asyncio.wait_for(full.wait(), timeout=5)  # the first `limit` runs wait for each other
        finally:
            in_flight -= 1
        return "ok"

    agent = make_agent(ScriptedModel.from_function(counting))
    report = await Dataset([Case(f"c{i}", f"q{i}") for i in range(12)]).evaluate(
        agent, concurrency=limit, progress=False
    )
    assert all(r.error is None for r in report.results)
    assert peak == limit


async def test_local_executor_keeps_order_and_validates() -> None:
    async def double(x: int) -> int:
        return 2 * x

    seen: list[int] = []
    assert await LocalExecutor(2).map(double, list(range(7)), seen.append) == [0, 2, 4, 6, 8, 10, 12]
    assert sorted(seen) == [0, 2, 4, 6, 8, 10, 12]
    assert await LocalExecutor(4).map(double, []) == []
    for bad in (0, -1, 1.5, True):
        with pytest.raises(UserError):
            LocalExecutor(bad)  # type: ignore[arg-type]  # wrong values on purpose


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def test_trace_usage_tool_trajectory_and_progress_callback(make_agent: MakeAgent, tmp_path: Path) -> None:
    model = ScriptedModel(
        [ToolUseBlock(name="add", input={"a": 2, "b": 3}), "It is 5."],
        usage=TokenUsage(input_tokens=10, output_tokens=4),
    )
    agent = make_agent(model, add)
    dataset = Dataset(
        [Case("sum", "2+3?", expected_output="It is 5.", expected_tools=[{"name": "add", "args": {"a": 2}}])],
        evaluators=[MaxCost(0.01)],
    )
    updates: list[ProgressUpdate] = []
    report = await dataset.evaluate(agent, progress=updates.append, out=tmp_path / "out")
    (result,) = report.results
    assert result.passed and result.output == "It is 5."
    assert [s.name for s in result.scores] == ["max_cost", "equals", "tool_trajectory"]
    assert result.score("max_cost") == Score(None, "cost (USD) unknown", "max_cost", 1.0)
    assert result.usage is not None
    assert result.usage["requests"] == 2 and result.usage["tool_calls"] == 1
    assert result.usage["input_tokens"] == 20 and result.usage["total_tokens"] == 28
    assert isinstance(result.events[-1], RunFinished)
    assert len(updates) == 1 and updates[0].done == updates[0].total == 1 and updates[0].pass_rate == 1.0
    loaded = EvalReport.load(tmp_path / "out" / "results.json")
    assert loaded.results[0].to_dict() == result.to_dict()
    assert (tmp_path / "out" / "report.html").read_text().startswith("<!DOCTYPE html>")


def test_usage_prefers_the_agents_own_report_and_never_guesses_cost() -> None:
    reply = Msg(role="assistant", content=[TextBlock(text="x")], usage=TokenUsage(input_tokens=3, output_tokens=2))
    assert usage_of(reply, []) == {
        "requests": 0,
        "tool_calls": 0,
        "input_tokens": 3,
        "output_tokens": 2,
        "total_tokens": 5,
    }
    reported = reply.with_metadata(usage={"input_tokens": 3, "output_tokens": 2, "total_tokens": 5, "cost_usd": 0.001})
    assert usage_of(reported, [])["cost_usd"] == 0.001  # type: ignore[index]
    assert usage_of(Msg.assistant("x"), []) is None


async def test_evaluators_that_raise_or_misbehave_fail_their_score_only(make_agent: MakeAgent) -> None:
    def broken(ctx: EvalContext) -> bool:
        raise ValueError("oops")

    async def wrong_type(ctx: EvalContext) -> Any:
        return Score(1.0)

    agent = make_agent(ScriptedModel(["fine"], repeat=True))
    report = await Dataset(
        [Case("a", "q")], evaluators=[CallableEvaluator(broken), CallableEvaluator(wrong_type), Contains("fine")]
    ).evaluate(agent, progress=False)
    scores = {s.name: s for s in report.results[0].scores}
    assert scores["broken"].value == 0.0 and "ValueError: oops" in scores["broken"].reason
    assert scores["wrong_type"].value == 1.0 and scores["contains"].value == 1.0


async def test_agents_without_run_with_events_are_evaluated_through_what_they_have(make_agent: MakeAgent) -> None:
    inner = make_agent(ScriptedModel(["streamed"], repeat=True))

    class StreamOnly:
        name = "stream-only"

        def stream_events(self, input: Any, ctx: Any) -> Any:
            return inner.stream_events(input, ctx)

    class CallOnly:
        name = "call-only"

        async def call(self, input: Any, ctx: Any) -> Msg:
            return Msg.assistant(f"called with {input}")

    dataset = Dataset([Case("a", "hi")])
    streamed = await dataset.evaluate(StreamOnly(), progress=False)
    assert streamed.results[0].output == "streamed" and streamed.agent == "stream-only"
    assert isinstance(streamed.results[0].events[-1], RunFinished)
    called = await dataset.evaluate(CallOnly(), progress=False)
    assert called.results[0].output == "called with hi" and called.results[0].events == []
    with pytest.raises(UserError, match="cannot evaluate"):
        await dataset.evaluate(object())
    with pytest.raises(UserError, match="repeat"):
        await dataset.evaluate(inner, repeat=0)
    with pytest.raises(UserError, match="timeout"):
        await dataset.evaluate(inner, timeout=-1)


async def test_usage_limits_are_passed_to_each_call() -> None:
    seen: list[Any] = []

    class Recorder:
        name = "recorder"

        async def run_with_events(self, input: Any, ctx: Any, on_event: Any, **options: Any) -> Msg:
            seen.append(options)
            return Msg.assistant("ok")

    limits = object()
    await Dataset([Case("a", "x"), Case("b", "y")]).evaluate(Recorder(), usage_limits=limits, progress=False)
    assert seen == [{"usage_limits": limits}] * 2
    seen.clear()
    await Dataset([Case("a", "x")]).evaluate(Recorder(), progress=False)
    assert seen == [{}]


async def test_the_progress_bar_renders_on_stderr_when_asked(
    make_agent: MakeAgent, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = make_agent(ScriptedModel(["ok"], repeat=True))
    await Dataset([Case("a", "x"), Case("b", "y")], name="bar").evaluate(agent, progress=True)
    err = capsys.readouterr().err
    assert "eval bar" in err and "2/2" in err and "pass 100%" in err
