"""`compare(a, b)`: regressions and improvements between two eval reports, per case and per evaluator."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.table import Table

    from agentrt.evals.report import CaseResult, EvalReport

__all__ = ["Change", "Comparison", "compare"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    """One number that moved: a case's pass rate (``evaluator=None``) or its mean score from one evaluator."""

    case: str
    evaluator: str | None
    before: float | None
    after: float | None

    @property
    def delta(self) -> float:
        return (self.after or 0.0) - (self.before or 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"case": self.case, "evaluator": self.evaluator, "before": self.before, "after": self.after}


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """What changed from report `a` (before) to report `b` (after)."""

    regressions: list[Change] = field(default_factory=list)
    improvements: list[Change] = field(default_factory=list)
    added_cases: list[str] = field(default_factory=list)
    removed_cases: list[str] = field(default_factory=list)
    pass_rate: tuple[float, float] = (0.0, 0.0)
    mean_scores: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)

    @property
    def has_regressions(self) -> bool:
        return bool(self.regressions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pass_rate": {"before": self.pass_rate[0], "after": self.pass_rate[1]},
            "mean_scores": {k: {"before": a, "after": b} for k, (a, b) in self.mean_scores.items()},
            "regressions": [c.to_dict() for c in self.regressions],
            "improvements": [c.to_dict() for c in self.improvements],
            "added_cases": self.added_cases,
            "removed_cases": self.removed_cases,
        }

    def table(self) -> Table:
        """A rich table of every change, regressions first."""
        from rich.markup import escape
        from rich.table import Table

        table = Table(title="eval compare", title_justify="left")
        for column in ("", "case", "evaluator", "before", "after"):
            table.add_column(column)
        for label, style, changes in (
            ("regression", "red", self.regressions),
            ("improvement", "green", self.improvements),
        ):
            for c in changes:
                table.add_row(
                    f"[{style}]{label}[/]",
                    escape(c.case),
                    escape(c.evaluator or "(pass rate)"),
                    _fmt(c.before),
                    _fmt(c.after),
                )
        return table

    def summary_line(self) -> str:
        before, after = self.pass_rate
        return (
            f"pass rate {before:.1%} -> {after:.1%} · {len(self.regressions)} regression(s) · "
            f"{len(self.improvements)} improvement(s) · {len(self.added_cases)} added · "
            f"{len(self.removed_cases)} removed case(s)"
        )


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _means(runs: list[CaseResult]) -> dict[str | None, float | None]:
    out: dict[str | None, float | None] = {None: sum(r.passed for r in runs) / len(runs)}
    values: dict[str, list[float]] = {}
    for run in runs:
        for score in run.scores:
            bucket = values.setdefault(score.name, [])
            if score.value is not None:
                bucket.append(score.value)
    for name, vs in values.items():
        out[name] = statistics.fmean(vs) if vs else None
    return out


def compare(a: EvalReport, b: EvalReport, *, tolerance: float = 1e-9) -> Comparison:
    """Regressions and improvements from `a` to `b`.

    For each case in both: its pass rate over its repetitions (``evaluator=None``) and its mean score
    from each evaluator both reports have; a drop of more than `tolerance` is a regression, a rise an
    improvement. A score skipped in one report and not the other is not compared.
    """
    before, after = a.by_case(), b.by_case()
    regressions: list[Change] = []
    improvements: list[Change] = []
    for case, runs in before.items():
        if case not in after:
            continue
        old, new = _means(runs), _means(after[case])
        for name, old_value in old.items():
            if name not in new:
                continue
            new_value = new[name]
            if old_value is None or new_value is None:
                continue
            change = Change(case=case, evaluator=name, before=old_value, after=new_value)
            if new_value < old_value - tolerance:
                regressions.append(change)
            elif new_value > old_value + tolerance:
                improvements.append(change)
    old_means, new_means = a.mean_scores(), b.mean_scores()
    return Comparison(
        regressions=regressions,
        improvements=improvements,
        added_cases=[c for c in after if c not in before],
        removed_cases=[c for c in before if c not in after],
        pass_rate=(a.pass_rate, b.pass_rate),
        mean_scores={k: (old_means.get(k), new_means.get(k)) for k in {**old_means, **new_means}},
    )
