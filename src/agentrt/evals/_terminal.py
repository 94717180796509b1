"""The terminal summary of a report (rich)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from agentrt.evals.report import EvalReport


def needed_width(report: EvalReport) -> int:
    """About how many columns the one-column-per-evaluator table needs."""
    case = min(20, max((len(c) for c in report.by_case()), default=4))
    evaluators = sum(max(len(n), 4) + 3 for n in report.evaluator_names())
    return case + 4 + 9 + evaluators + 10 + 10 + (30 if any(r.error for r in report.results) else 0)


def summary_table(report: EvalReport, *, compact: bool = False) -> Table:
    """One row per case; `compact` puts every evaluator's mean into one "scores" cell (narrow terminals)."""
    from rich.markup import escape
    from rich.table import Table

    names = report.evaluator_names()
    groups = report.by_case()
    show_tokens = any(r.total_tokens for r in report.results)
    show_errors = any(r.error for r in report.results)
    table = Table(title=f"eval {escape(report.dataset)} · {escape(report.agent)}", title_justify="left")
    table.add_column("case", overflow="fold", min_width=min(20, max((len(c) for c in groups), default=4)))
    table.add_column("passed", justify="right", no_wrap=True)
    if compact:
        table.add_column("scores", overflow="fold")
    else:
        for name in names:
            table.add_column(escape(name), justify="right", no_wrap=True, min_width=4)
    table.add_column("latency", justify="right", no_wrap=True)
    if show_tokens:
        table.add_column("tokens", justify="right", no_wrap=True)
    if show_errors:
        table.add_column("error", overflow="fold", min_width=10)
    for case, runs in groups.items():
        passed = sum(r.passed for r in runs)
        style = "green" if passed == len(runs) else "red"
        means = []
        for name in names:
            values = [s.value for r in runs if (s := r.score(name)) is not None and s.value is not None]
            means.append(f"{sum(values) / len(values):.2f}" if values else "-")
        if compact:
            cells = [" ".join(f"{escape(n)}={m}" for n, m in zip(names, means, strict=True) if m != "-")]
        else:
            cells = means
        cells.append(f"{max(r.latency for r in runs):.2f}s")
        if show_tokens:
            cells.append(f"{sum(r.total_tokens for r in runs):,}")
        if show_errors:
            errors = sorted({f"{r.error_type}: {r.error}" for r in runs if r.error})
            cells.append(escape("; ".join(errors)[:200]))
        table.add_row(escape(case), f"[{style}]{passed}/{len(runs)}[/]", *cells)
    return table


def totals_line(report: EvalReport) -> str:
    s = report.summary()
    cost = "unknown" if s["cost_usd"] is None else f"${s['cost_usd']:.4f}"
    p50 = "-" if s["latency_p50"] is None else f"{s['latency_p50']:.2f}s"
    p95 = "-" if s["latency_p95"] is None else f"{s['latency_p95']:.2f}s"
    line = f"pass rate {s['pass_rate']:.1%} ({s['passed']}/{s['runs']} runs, {s['errors']} errors)"
    if report.repeat > 1:
        line += f" · pass@{report.repeat} {s['pass_at_k']:.1%} · pass^{report.repeat} {s['pass_all_k']:.1%}"
    return f"{line} · tokens {s['usage']['total_tokens']:,} · cost {cost} · latency p50 {p50} p95 {p95}"


def print_summary(report: EvalReport, console: Console | None = None) -> None:
    from rich.console import Console

    console = console or Console()
    console.print(summary_table(report, compact=console.width < needed_width(report)))
    console.print(totals_line(report), highlight=False, markup=False)
