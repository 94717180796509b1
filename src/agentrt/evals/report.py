"""`EvalReport`: the results of one evaluation, its summary, JSON and HTML forms, terminal table."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentrt import _json
from agentrt.errors import InvalidValueError
from agentrt.evals.score import Score

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from agentrt.evals.compare import Comparison

__all__ = ["FORMAT", "CaseResult", "EvalReport", "ProgressUpdate"]

FORMAT = "agentrt.eval/1"
"""The ``format`` field of results.json."""


@dataclass(slots=True, kw_only=True)
class CaseResult:
    """One run of one case (one repetition): what went in, what came out, its scores and costs."""

    case: str
    repetition: int = 0
    session_id: str = ""
    input: Any = None
    expected_output: Any = None
    output: str = ""
    structured: Any = None
    scores: list[Score] = field(default_factory=list)
    error: str | None = None
    error_type: str | None = None
    latency: float = 0.0
    usage: Mapping[str, Any] | None = None
    events: list[Any] = field(default_factory=list)
    """The run's `AgentEvent`s (their dict forms in a report loaded from JSON)."""
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """No error, and every score that was not skipped reached its threshold."""
        return self.error is None and all(s.passed for s in self.scores)

    @property
    def cost_usd(self) -> float | None:
        value = (self.usage or {}).get("cost_usd")
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    @property
    def total_tokens(self) -> int:
        usage = self.usage or {}
        total = usage.get("total_tokens")
        if isinstance(total, int):
            return total
        return int(usage.get("input_tokens", 0) or 0) + int(usage.get("output_tokens", 0) or 0)

    def score(self, name: str) -> Score | None:
        """This run's score from the evaluator called `name`, if any."""
        return next((s for s in self.scores if s.name == name), None)

    def trace(self) -> list[dict[str, Any]]:
        """The event trace as JSON-ready dicts."""
        return [e if isinstance(e, dict) else e.to_dict() for e in self.events]

    def to_dict(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "repetition": self.repetition,
            "session_id": self.session_id,
            "passed": self.passed,
            "input": _json.jsonable(self.input),
            "expected_output": _json.jsonable(self.expected_output),
            "output": self.output,
            "structured": _json.jsonable(self.structured),
            "scores": [s.to_dict() for s in self.scores],
            "error": self.error,
            "error_type": self.error_type,
            "latency": self.latency,
            "usage": _json.jsonable(self.usage) if self.usage is not None else None,
            "metadata": _json.jsonable(self.metadata),
            "events": self.trace(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CaseResult:
        """A result from its `to_dict` form; KeyError, TypeError or ValueError when it is malformed."""
        if not isinstance(d, Mapping):
            raise TypeError(f"a result is a JSON object, not {type(d).__name__}")
        for key, kind in (("scores", list), ("events", list), ("usage", Mapping), ("metadata", Mapping)):
            if d.get(key) is not None and not isinstance(d[key], kind):
                raise TypeError(
                    f"{key!r} must be {'a list' if kind is list else 'an object'}, not {type(d[key]).__name__}"
                )
        if not all(isinstance(e, Mapping) for e in d.get("events") or ()):
            raise TypeError("'events' must be a list of objects")
        return cls(
            case=str(d["case"]),
            repetition=int(d.get("repetition", 0)),
            session_id=str(d.get("session_id", "")),
            input=d.get("input"),
            expected_output=d.get("expected_output"),
            output=str(d.get("output") or ""),
            structured=d.get("structured"),
            scores=[_score(s) for s in d.get("scores") or []],
            error=d.get("error"),
            error_type=d.get("error_type"),
            latency=float(d.get("latency") or 0.0),
            usage=d.get("usage"),
            metadata=d.get("metadata") or {},
            events=list(d.get("events") or []),
        )


def _score(d: Any) -> Score:
    if not isinstance(d, Mapping):
        raise TypeError(f"a score is a JSON object, not {type(d).__name__}")
    return Score.from_dict(d)


def _problem(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"missing field {exc.args[0]!r}" if exc.args else "a field is missing"
    return str(exc) or type(exc).__name__


@dataclass(frozen=True, slots=True, kw_only=True)
class ProgressUpdate:
    """What a progress callback gets after each finished run."""

    done: int
    total: int
    passed: int
    errors: int
    cost_usd: float | None
    """The known cost so far (None while no run reported one)."""
    result: CaseResult

    @property
    def pass_rate(self) -> float:
        return self.passed / self.done if self.done else 0.0


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank percentile `q` (0..100) of `values`, None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass(slots=True, kw_only=True)
class EvalReport:
    """The results of `Dataset.evaluate`: one `CaseResult` per case and repetition, in dataset order."""

    dataset: str
    agent: str
    results: list[CaseResult]
    repeat: int = 1
    started_at: float = 0.0
    finished_at: float = 0.0

    # -- grouping and rates ------------------------------------------------------------------
    def by_case(self) -> dict[str, list[CaseResult]]:
        """The runs of each case, cases in dataset order."""
        out: dict[str, list[CaseResult]] = {}
        for result in self.results:
            out.setdefault(result.case, []).append(result)
        return out

    @property
    def pass_rate(self) -> float:
        """The fraction of runs that passed (pass@1 when cases are repeated); 0.0 with no runs."""
        return sum(r.passed for r in self.results) / len(self.results) if self.results else 0.0

    def pass_at_k(self, k: int | None = None) -> float:
        """The fraction of cases with at least one passing run among `k` (default: all) repetitions.

        With n runs of which c passed, the unbiased estimate ``1 - C(n-c, k) / C(n, k)`` per case.
        """
        groups = self.by_case()
        if not groups:
            return 0.0
        total = 0.0
        for runs in groups.values():
            n = len(runs)
            kk = n if k is None else k
            if not 1 <= kk <= n:
                raise InvalidValueError(f"pass_at_k: k must be in [1, {n}], not {k!r}")
            c = sum(r.passed for r in runs)
            total += 1.0 if n - c < kk else 1.0 - math.comb(n - c, kk) / math.comb(n, kk)
        return total / len(groups)

    def pass_all_k(self) -> float:
        """The fraction of cases whose every repetition passed (pass^k)."""
        groups = self.by_case()
        return sum(all(r.passed for r in runs) for runs in groups.values()) / len(groups) if groups else 0.0

    def evaluator_names(self) -> list[str]:
        names: dict[str, None] = {}
        for result in self.results:
            for score in result.scores:
                names.setdefault(score.name, None)
        return list(names)

    def mean_scores(self) -> dict[str, float | None]:
        """The mean value of each evaluator over the runs it did not skip (None if it skipped them all)."""
        sums: dict[str, list[float]] = {name: [] for name in self.evaluator_names()}
        for result in self.results:
            for score in result.scores:
                if score.value is not None:
                    sums[score.name].append(score.value)
        return {name: (statistics.fmean(v) if v else None) for name, v in sums.items()}

    def summary(self) -> dict[str, Any]:
        """Cases, runs, pass rates, mean scores per evaluator, tokens, cost and latency percentiles."""
        latencies = [r.latency for r in self.results]
        costs = [c for r in self.results if (c := r.cost_usd) is not None]
        usage_keys = ("input_tokens", "output_tokens", "total_tokens", "requests", "tool_calls")
        tokens = {key: sum(int((r.usage or {}).get(key, 0) or 0) for r in self.results) for key in usage_keys}
        tokens["total_tokens"] = sum(r.total_tokens for r in self.results)
        return {
            "cases": len(self.by_case()),
            "runs": len(self.results),
            "repeat": self.repeat,
            "passed": sum(r.passed for r in self.results),
            "errors": sum(r.error is not None for r in self.results),
            "pass_rate": self.pass_rate,
            "pass_at_k": self.pass_at_k() if self.results else 0.0,
            "pass_all_k": self.pass_all_k(),
            "mean_scores": self.mean_scores(),
            "usage": tokens,
            "cost_usd": sum(costs) if costs else None,
            "cost_known_runs": len(costs),
            "latency_p50": percentile(latencies, 50),
            "latency_p95": percentile(latencies, 95),
            "wall_time": max(0.0, self.finished_at - self.started_at),
        }

    # -- JSON --------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "dataset": self.dataset,
            "agent": self.agent,
            "repeat": self.repeat,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "summary": self.summary(),
            "results": [r.to_dict() for r in self.results],
        }

    def to_json(self, path: str | Path | None = None) -> str:
        """The report as JSON text, also written to `path` when given."""
        text = _json.dumps(self.to_dict())
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EvalReport:
        """A report from its `to_dict` form; InvalidValueError (naming the result) when it is malformed."""
        if d.get("format") != FORMAT:
            raise InvalidValueError(f"not an agentrt eval report (format {d.get('format')!r}, expected {FORMAT!r})")
        raw = d.get("results") or []
        if not isinstance(raw, list):
            raise InvalidValueError(f"malformed eval report: 'results' must be a list, not {type(raw).__name__}")
        try:
            repeat = int(d.get("repeat", 1))
            started_at, finished_at = float(d.get("started_at", 0.0)), float(d.get("finished_at", 0.0))
        except (TypeError, ValueError) as exc:
            raise InvalidValueError(f"malformed eval report: {_problem(exc)}") from None
        results = []
        for index, item in enumerate(raw):
            try:
                results.append(CaseResult.from_dict(item))
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise InvalidValueError(f"malformed eval report: result {index}: {_problem(exc)}") from None
        return cls(
            dataset=str(d.get("dataset", "")),
            agent=str(d.get("agent", "")),
            results=results,
            repeat=repeat,
            started_at=started_at,
            finished_at=finished_at,
        )

    @classmethod
    def load(cls, path: str | Path) -> EvalReport:
        """Read a results.json written by `to_json` (InvalidValueError when it is not one)."""
        try:
            data = _json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InvalidValueError(f"cannot read the eval report {str(path)!r}: {exc}") from None
        if not isinstance(data, Mapping):
            raise InvalidValueError(f"{str(path)!r} is not an agentrt eval report")
        try:
            return cls.from_dict(data)
        except InvalidValueError as exc:
            raise InvalidValueError(f"{str(path)!r}: {exc}") from None

    # -- HTML, terminal, files --------------------------------------------------------------------
    def to_html(self, path: str | Path | None = None) -> str:
        """A self-contained HTML page (inline CSS, no scripts or external resources), also written to `path`."""
        from agentrt.evals._html import render

        text = render(self)
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    def save(self, directory: str | Path) -> Path:
        """Write ``results.json`` and ``report.html`` into `directory` (created); returns it."""
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        self.to_json(folder / "results.json")
        self.to_html(folder / "report.html")
        return folder

    def summary_table(self, *, compact: bool = False) -> Table:
        """A rich table, one row per case (`compact`: all scores in one cell, for narrow terminals)."""
        from agentrt.evals._terminal import summary_table

        return summary_table(self, compact=compact)

    def print_summary(self, console: Console | None = None) -> None:
        """Print the summary table and the totals line."""
        from agentrt.evals._terminal import print_summary

        print_summary(self, console)

    def compare(self, other: EvalReport) -> Comparison:
        """What changed from this report (before) to `other` (after)."""
        from agentrt.evals.compare import compare

        return compare(self, other)
