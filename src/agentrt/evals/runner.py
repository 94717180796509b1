"""The runner: every case (and repetition) in its own session, scored, never stopping on a failure."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentrt import _json
from agentrt.context import RuntimeContext
from agentrt.errors import InvalidValueError
from agentrt.evals._agent import agent_for, load_agent_async
from agentrt.evals._progress import Tracker
from agentrt.evals.executor import Executor, LocalExecutor, RemoteWork
from agentrt.evals.report import CaseResult, EvalReport, ProgressUpdate
from agentrt.evals.score import EvalContext, Evaluator, Score
from agentrt.events import ModelCallFinished, RunFinished, ToolResult, Usage, event_from_dict
from agentrt.message import META_STRUCTURED, Msg, new_id

if TYPE_CHECKING:
    from agentrt.evals.case import Case
    from agentrt.evals.dataset import Dataset

__all__ = [
    "DEFAULT_EVALUATOR_TIMEOUT",
    "EVAL_USER",
    "RemoteAgentRun",
    "caller",
    "evaluate",
    "execute",
    "input_from_json",
    "outcome_of",
    "usage_of",
]

EVAL_USER = "eval"
"""The user id of every evaluation run (each run has its own session id)."""

DEFAULT_EVALUATOR_TIMEOUT = 60.0
"""Seconds one evaluator may take to score one run (an `LLMJudge` whose model never answers) by default."""

Caller = Callable[[Any, RuntimeContext, Callable[[Any], None]], Awaitable[Msg]]


async def evaluate(
    dataset: Dataset,
    agent: Any,
    *,
    repeat: int = 1,
    concurrency: int = 8,
    usage_limits: Any = None,
    timeout: float | None = None,
    progress: bool | Callable[[ProgressUpdate], None] | None = None,
    out: str | Path | None = None,
    executor: Executor | None = None,
    evaluator_timeout: float | None = DEFAULT_EVALUATOR_TIMEOUT,
) -> EvalReport:
    """`Dataset.evaluate` (see there)."""
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise InvalidValueError(f"repeat must be an integer >= 1, not {repeat!r}")
    if timeout is not None and (not isinstance(timeout, (int, float)) or timeout <= 0):
        raise InvalidValueError(f"timeout must be a number of seconds > 0 or None, not {timeout!r}")
    scoring_bound = evaluator_bound(evaluator_timeout, timeout)
    executor = executor if executor is not None else LocalExecutor(concurrency)
    target = agent if isinstance(agent, str) else None
    if target is not None:
        agent = await load_agent_async(target)
    work = _EvalWork(caller(agent, usage_limits), timeout, target, usage_limits, scoring_bound)
    run_id = new_id()[:12]
    jobs = [
        _Job(case, dataset.evaluators_for(case), f"eval-{run_id}-{index}-{rep}", rep)
        for index, case in enumerate(dataset.cases)
        for rep in range(repeat)
    ]

    tracker = Tracker(len(jobs), progress, f"eval {dataset.name}")
    started = time.time()
    try:
        results = await executor.map(work, jobs, tracker.update)
    finally:
        tracker.close()
    report = EvalReport(
        dataset=dataset.name,
        agent=str(getattr(agent, "name", type(agent).__name__)),
        results=list(results),
        repeat=repeat,
        started_at=started,
        finished_at=time.time(),
    )
    if out is not None:
        report.save(out)
    return report


class _Job:
    __slots__ = ("case", "evaluators", "input_json", "repetition", "session_id")

    def __init__(self, case: Case, evaluators: Sequence[Evaluator], session_id: str, repetition: int) -> None:
        self.case = case
        self.evaluators = evaluators
        self.session_id = session_id
        self.repetition = repetition
        self.input_json = case.input if isinstance(case.input, str) else case.to_dict()["input"]


def caller(agent: Any, usage_limits: Any) -> Caller:
    """How to call `agent` collecting its events: `run_with_events`, else `stream_events`, else `call`."""
    extra: dict[str, Any] = {} if usage_limits is None else {"usage_limits": usage_limits}
    if hasattr(agent, "run_with_events"):

        async def with_events(input: Any, ctx: RuntimeContext, on_event: Callable[[Any], None]) -> Msg:
            reply: Msg = await agent.run_with_events(input, ctx, on_event, **extra)
            return reply

        return with_events
    if hasattr(agent, "stream_events"):

        async def streaming(input: Any, ctx: RuntimeContext, on_event: Callable[[Any], None]) -> Msg:
            reply: Msg | None = None
            async for event in agent.stream_events(input, ctx, **extra):
                on_event(event)
                if isinstance(event, RunFinished):
                    reply = event.msg
            if reply is None:
                raise RuntimeError("the agent's event stream ended without a RunFinished event")
            return reply

        return streaming
    if hasattr(agent, "call"):

        async def plain(input: Any, ctx: RuntimeContext, on_event: Callable[[Any], None]) -> Msg:
            reply: Msg = await agent.call(input, ctx, **extra)
            return reply

        return plain
    raise InvalidValueError(f"cannot evaluate {agent!r}: it has no run_with_events, stream_events or call method")


async def execute(
    call: Caller, input: Any, ctx: RuntimeContext, timeout: float | None
) -> tuple[Msg | None, list[Any], Exception | None, float]:
    """One call of the agent in `ctx`: its reply (None on failure), events, error and latency; never raises."""
    events: list[Any] = []
    reply: Msg | None = None
    error: Exception | None = None
    started = time.perf_counter()
    try:
        if timeout is None:
            reply = await call(input, ctx, events.append)
        else:
            async with asyncio.timeout(timeout):
                reply = await call(input, ctx, events.append)
    except TimeoutError as exc:
        error = exc if str(exc) else TimeoutError(f"the run took longer than {timeout:g} s")
    except Exception as exc:  # one case's failure is its result, never the end of the evaluation
        error = exc
    return reply, events, error, time.perf_counter() - started


def evaluator_bound(evaluator_timeout: Any, timeout: float | None) -> float | None:
    """The seconds each evaluator may take: `evaluator_timeout`, or the run's `timeout` when that is shorter.

    None: unbounded (``evaluator_timeout=None`` and no run timeout).

    Raises:
        InvalidValueError: `evaluator_timeout` is not None nor a finite number of seconds > 0.
    """
    if evaluator_timeout is not None and (
        isinstance(evaluator_timeout, bool)
        or not isinstance(evaluator_timeout, (int, float))
        or not math.isfinite(evaluator_timeout)
        or evaluator_timeout <= 0
    ):
        raise InvalidValueError(
            f"evaluator_timeout must be a finite number of seconds > 0, or None (unbounded), not {evaluator_timeout!r}"
        )
    bounds = [float(b) for b in (evaluator_timeout, timeout) if b is not None]
    return min(bounds) if bounds else None


async def run_case(
    job: _Job, call: Caller, timeout: float | None, evaluator_timeout: float | None = DEFAULT_EVALUATOR_TIMEOUT
) -> CaseResult:
    """Run one case once in its own session and score it; a failure is recorded, never raised."""
    reply, events, error, latency = await execute(
        call, job.case.input, RuntimeContext(EVAL_USER, job.session_id), timeout
    )
    failure = None if error is None else (str(error), type(error).__name__)
    return await score_case(job, reply, events, failure, latency, evaluator_timeout)


async def score_case(
    job: _Job,
    reply: Msg | None,
    events: list[Any],
    failure: tuple[str, str] | None,
    latency: float,
    evaluator_timeout: float | None = DEFAULT_EVALUATOR_TIMEOUT,
) -> CaseResult:
    """The `CaseResult` of one run: its scores, or a zero for each evaluator when the run failed.

    Each evaluator gets `evaluator_timeout` seconds (`evaluator_bound`; None: unbounded): one that
    takes longer (an `LLMJudge` whose model never answers) scores 0, "the evaluator timed out after
    N s", and the other evaluators still score the run.
    """
    case = job.case
    usage = usage_of(reply, events)
    result = CaseResult(
        case=case.name,
        repetition=job.repetition,
        session_id=job.session_id,
        input=job.input_json,
        expected_output=case.expected_output,
        output=reply.text if reply is not None else "",
        structured=reply.metadata.get(META_STRUCTURED) if reply is not None else None,
        latency=latency,
        usage=usage,
        events=events,
        metadata=case.metadata,
    )
    if failure is not None:
        result.error, result.error_type = failure
        result.scores = [Score(0.0, f"the run failed: {failure[1]}", e.name, e.threshold) for e in job.evaluators]
        return result
    context = EvalContext(
        case=case, reply=reply, events=events, latency=latency, usage=usage, repetition=job.repetition
    )
    result.scores = [await _score(e, context, evaluator_timeout) for e in job.evaluators]
    return result


def input_from_json(value: Any) -> Any:
    """A case's or row's input from its JSON form: text, a message, or a list of messages."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return Msg.from_dict(value)
    return [Msg.from_dict(m) for m in value]


@dataclass(frozen=True, slots=True)
class RemoteAgentRun:
    """Runs one input against the agent ``target`` names, built once in the process it runs in (a Ray worker).

    Picklable: it holds the ``MODULE:ATTR`` string and plain data, never the agent. Its payload is
    ``{"input": <JSON input>, "session_id": ...}``; it returns JSON: the reply and the events, or
    (``full=False``, for batch rows) the reply's text and structured output only, with the error,
    the usage and the latency.
    """

    target: str
    usage_limits: Any = None
    timeout: float | None = None
    user: str = EVAL_USER
    full: bool = True

    async def prepare(self) -> None:
        await agent_for(self.target)

    async def __call__(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        call = caller(await agent_for(self.target), self.usage_limits)
        ctx = RuntimeContext(self.user, str(payload["session_id"]))
        reply, events, error, latency = await execute(call, input_from_json(payload["input"]), ctx, self.timeout)
        return outcome_of(reply, events, error, latency, full=self.full)


def outcome_of(
    reply: Msg | None, events: Sequence[Any], error: Exception | None, latency: float, *, full: bool
) -> dict[str, Any]:
    """One run as JSON (`RemoteAgentRun`): the reply and events (`full`), else the text, structured output and usage."""
    outcome: dict[str, Any] = {
        "error": None if error is None else str(error),
        "error_type": None if error is None else type(error).__name__,
        "latency": latency,
    }
    if full:
        outcome["reply"] = reply.to_dict() if reply is not None else None
        outcome["events"] = [e.to_dict() for e in events]
    else:
        outcome["output"] = reply.text if reply is not None else ""
        outcome["structured"] = _json.jsonable(reply.metadata.get(META_STRUCTURED)) if reply is not None else None
        outcome["usage"] = _json.jsonable(usage_of(reply, events))
    return outcome


class _EvalWork:
    """The runner's job function: run and score a case here, or split (`remote`) for another process."""

    __slots__ = ("call", "evaluator_timeout", "remote", "timeout")

    def __init__(
        self,
        call: Caller,
        timeout: float | None,
        target: str | None,
        usage_limits: Any,
        evaluator_timeout: float | None = DEFAULT_EVALUATOR_TIMEOUT,
    ) -> None:
        self.call = call
        self.timeout = timeout
        self.evaluator_timeout = evaluator_timeout
        self.remote = (
            None
            if target is None
            else RemoteWork(RemoteAgentRun(target, usage_limits, timeout), self._payload, self._finish)
        )

    async def __call__(self, job: _Job) -> CaseResult:
        return await run_case(job, self.call, self.timeout, self.evaluator_timeout)

    @staticmethod
    def _payload(job: _Job) -> dict[str, Any]:
        return {"input": job.input_json, "session_id": job.session_id}

    async def _finish(self, job: _Job, outcome: Mapping[str, Any]) -> CaseResult:
        reply = Msg.from_dict(outcome["reply"]) if outcome.get("reply") is not None else None
        events = [event_from_dict(e) for e in outcome.get("events") or ()]
        error = outcome.get("error")
        failure = None if error is None else (str(error), str(outcome.get("error_type") or "Exception"))
        latency = float(outcome.get("latency") or 0.0)
        return await score_case(job, reply, events, failure, latency, self.evaluator_timeout)


async def _score(evaluator: Evaluator, ctx: EvalContext, timeout: float | None = None) -> Score:
    """`evaluator`'s score of one run, stopped after `timeout` seconds (None: unbounded); never raises.

    Only an evaluator that awaits can be stopped (an `LLMJudge`, an async function): a synchronous
    function that blocks holds the event loop until it returns.
    """
    bound: asyncio.Timeout | None = None
    try:
        if timeout is None:
            score = await evaluator.evaluate(ctx)
        else:
            async with asyncio.timeout(timeout) as bound:
                score = await evaluator.evaluate(ctx)
    except TimeoutError as exc:
        if bound is not None and bound.expired():
            reason = f"the evaluator timed out after {timeout:g} s"
        else:  # a TimeoutError of the evaluator's own (its HTTP client's, say), not our bound
            reason = f"the evaluator raised TimeoutError: {exc}"
        return Score(0.0, reason, evaluator.name, evaluator.threshold)
    except Exception as exc:  # a broken evaluator fails its score, not the evaluation
        return Score(0.0, f"the evaluator raised {type(exc).__name__}: {exc}", evaluator.name, evaluator.threshold)
    if not isinstance(score, Score):
        return Score(
            0.0, f"the evaluator returned {type(score).__name__}, not a Score", evaluator.name, evaluator.threshold
        )
    return Score(score.value, score.reason, evaluator.name, evaluator.threshold)


def usage_of(reply: Msg | None, events: Sequence[Any]) -> dict[str, Any] | None:
    """The run's usage: ``reply.metadata["usage"]`` when the agent reports it, else counted from the reply and trace.

    Keys: ``input_tokens``, ``output_tokens``, ``total_tokens``, ``requests``, ``tool_calls`` and
    ``cost_usd`` (only from the agent's own report: never guessed). None when nothing is known.
    """
    reported = reply.metadata.get("usage") if reply is not None else None
    requests = tool_calls = 0
    summed = None
    for event in events:
        kind = type(event)
        if kind is ModelCallFinished:
            requests += 1
        elif kind is ToolResult:
            tool_calls += 1
        elif kind is Usage and reply is None:
            summed = event.usage if summed is None else summed + event.usage
    tokens = reply.usage if reply is not None and reply.usage is not None else summed
    usage: dict[str, Any] = {"requests": requests, "tool_calls": tool_calls}
    if tokens is not None:
        usage.update(
            input_tokens=tokens.input_tokens, output_tokens=tokens.output_tokens, total_tokens=tokens.total_tokens
        )
    if isinstance(reported, Mapping):
        usage.update({str(k): v for k, v in reported.items()})
    if tokens is None and not isinstance(reported, Mapping) and not requests:
        return None
    return usage
