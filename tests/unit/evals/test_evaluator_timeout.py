"""Each evaluator's scoring is bounded (`evaluator_timeout`, 60 s by default) even without a run timeout.

A timed-out evaluator scores 0 with the reason "the evaluator timed out after N s"; the run's other
evaluators and the other cases go on.
"""

from __future__ import annotations

import asyncio
import math
import types
from typing import Any

import pytest

from agentrt.context import RuntimeContext
from agentrt.errors import InvalidValueError
from agentrt.evals import Callable as CallableEvaluator
from agentrt.evals import Case, Dataset, EvalContext, EvalReport
from agentrt.evals import runner as runner_module
from agentrt.message import Msg


class EchoAgent:
    """The smallest evaluable agent: answers every input at once (no model, no timers of its own)."""

    name = "echo"

    async def call(self, input: Any, ctx: RuntimeContext, **_: Any) -> Msg:
        return Msg.assistant(f"echo: {input}")


async def hang(ctx: EvalContext) -> bool:
    await asyncio.sleep(3600)
    return True


def contains_echo(ctx: EvalContext) -> bool:
    return "echo" in ctx.output


def dataset(*evaluators: Any, cases: int = 2) -> Dataset:
    return Dataset([Case(f"c{i}", f"input {i}") for i in range(cases)], evaluators=list(evaluators))


def scores(report: EvalReport) -> dict[str, list[tuple[str, float | None, str]]]:
    return {r.case: [(s.name, s.value, s.reason) for s in r.scores] for r in report.results}


async def test_a_hanging_evaluator_scores_zero_and_the_rest_goes_on() -> None:
    data = dataset(CallableEvaluator(hang), CallableEvaluator(contains_echo), cases=3)
    report = await asyncio.wait_for(
        data.evaluate(EchoAgent(), concurrency=1, progress=False, evaluator_timeout=0.05), 5
    )
    assert scores(report) == {
        f"c{i}": [
            ("hang", 0.0, "the evaluator timed out after 0.05 s"),
            ("contains_echo", 1.0, "true"),
        ]
        for i in range(3)
    }
    assert all(r.error is None for r in report.results)  # the run itself succeeded
    assert not any(r.passed for r in report.results)


@pytest.fixture
def timeouts(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The bounds the runner sets; each really lasts a thousandth of what it says (60 s: 0.06 s)."""
    asked: list[float] = []
    real = asyncio.timeout

    def shrunk(delay: float | None) -> asyncio.Timeout:
        assert delay is not None
        asked.append(delay)
        return real(delay / 1000)

    monkeypatch.setattr(runner_module, "asyncio", types.SimpleNamespace(**{**vars(asyncio), "timeout": shrunk}))
    return asked


async def test_the_default_bound_applies_without_a_run_timeout(timeouts: list[float]) -> None:
    report = await asyncio.wait_for(dataset(CallableEvaluator(hang)).evaluate(EchoAgent(), progress=False), 5)
    assert timeouts == [60.0, 60.0]  # one bound per evaluator and run; no run timeout was set
    assert [s.reason for r in report.results for s in r.scores] == ["the evaluator timed out after 60 s"] * 2
    assert all(r.error is None for r in report.results)


async def test_none_means_unbounded(timeouts: list[float]) -> None:
    async def slow(ctx: EvalContext) -> bool:
        await asyncio.sleep(0.1)  # longer than any shrunk bound would allow
        return True

    report = await dataset(CallableEvaluator(slow)).evaluate(EchoAgent(), progress=False, evaluator_timeout=None)
    assert timeouts == []
    assert all(r.passed for r in report.results)


async def test_a_shorter_run_timeout_bounds_the_evaluators_too() -> None:
    report = await asyncio.wait_for(
        dataset(CallableEvaluator(hang), cases=1).evaluate(EchoAgent(), progress=False, timeout=0.05), 5
    )
    assert scores(report) == {"c0": [("hang", 0.0, "the evaluator timed out after 0.05 s")]}
    report = await asyncio.wait_for(
        dataset(CallableEvaluator(hang), cases=1).evaluate(
            EchoAgent(), progress=False, timeout=30, evaluator_timeout=0.05
        ),
        5,
    )
    assert scores(report) == {"c0": [("hang", 0.0, "the evaluator timed out after 0.05 s")]}


async def test_an_evaluators_own_timeout_error_is_not_reported_as_the_bound() -> None:
    async def upstream(ctx: EvalContext) -> bool:
        raise TimeoutError("judge API read timeout")

    report = await dataset(CallableEvaluator(upstream), cases=1).evaluate(EchoAgent(), progress=False)
    assert scores(report) == {"c0": [("upstream", 0.0, "the evaluator raised TimeoutError: judge API read timeout")]}


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, True, "5"])
async def test_invalid_evaluator_timeouts_are_refused_before_any_run(bad: Any) -> None:
    ran: list[Any] = []

    class Recording(EchoAgent):
        async def call(self, input: Any, ctx: RuntimeContext, **kw: Any) -> Msg:
            ran.append(input)
            return await super().call(input, ctx, **kw)

    with pytest.raises(InvalidValueError, match="evaluator_timeout"):
        await dataset(CallableEvaluator(contains_echo)).evaluate(Recording(), progress=False, evaluator_timeout=bad)
    assert ran == []
