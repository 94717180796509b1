"""The HTML report: one self-contained page, every string from a run escaped."""

from __future__ import annotations

import datetime as dt
from html import escape
from typing import TYPE_CHECKING, Any

from agentrt import _json

if TYPE_CHECKING:
    from agentrt.evals.report import CaseResult, EvalReport

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem;color:#1d2330;background:#fafbfc}
h1{font-size:1.4rem;margin:0 0 .3rem}h2{font-size:1.1rem;margin:1.6rem 0 .5rem}
.meta{color:#5b6475;margin-bottom:1rem}
table{border-collapse:collapse;background:#fff;margin:.3rem 0 1rem}
th,td{border:1px solid #dde1e8;padding:.3rem .55rem;text-align:left;vertical-align:top}
th{background:#f0f2f6;font-weight:600}
.pass{color:#116329;font-weight:600}.fail{color:#b3261e;font-weight:600}.skip{color:#8a6d00}
details.case{background:#fff;border:1px solid #dde1e8;border-radius:6px;margin:.5rem 0;padding:.4rem .8rem}
details.case>summary{cursor:pointer;font-weight:600}
pre{white-space:pre-wrap;word-break:break-word;background:#f5f6f8;padding:.5rem;border-radius:4px;margin:.2rem 0;
max-height:24rem;overflow:auto}
.trace td{font-family:ui-monospace,monospace;font-size:12px}
.kv td:first-child{color:#5b6475;white-space:nowrap}
"""


def _e(value: Any) -> str:
    text = value if isinstance(value, str) else _json.dumps(_json.jsonable(value))
    return escape(text, quote=True)


def _num(value: float | None, fmt: str = "{:.3f}") -> str:
    return "-" if value is None else fmt.format(value)


def _status(passed: bool) -> str:
    return '<span class="pass">pass</span>' if passed else '<span class="fail">fail</span>'


def render(report: EvalReport) -> str:
    summary = report.summary()
    started = dt.datetime.fromtimestamp(report.started_at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">",
        f"<title>eval {_e(report.dataset)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(report.dataset)} · {_e(report.agent)}</h1>",
        f'<div class="meta">started {started} · {summary["runs"]} run(s) of {summary["cases"]} case(s)'
        f" · repeat {report.repeat}</div>",
        _summary_table(summary),
        _cases_table(report),
        "<h2>Runs</h2>",
    ]
    parts.extend(_run(result) for result in report.results)
    parts.append("</body></html>")
    return "\n".join(parts)


def _summary_table(summary: dict[str, Any]) -> str:
    usage = summary["usage"]
    rows = [
        ("pass rate", f"{summary['pass_rate']:.1%} ({summary['passed']}/{summary['runs']})"),
        ("pass@k / pass^k", f"{summary['pass_at_k']:.1%} / {summary['pass_all_k']:.1%}"),
        ("errors", str(summary["errors"])),
        ("tokens", f"{usage['total_tokens']:,} (in {usage['input_tokens']:,}, out {usage['output_tokens']:,})"),
        ("cost", "unknown" if summary["cost_usd"] is None else f"${summary['cost_usd']:.4f}"),
        ("latency p50 / p95", f"{_num(summary['latency_p50'])} s / {_num(summary['latency_p95'])} s"),
    ]
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    scores = "".join(
        f"<tr><th>{_e(name)}</th><td>{_num(mean)}</td></tr>" for name, mean in summary["mean_scores"].items()
    )
    return f'<h2>Summary</h2><table class="kv">{body}</table><h2>Mean scores</h2><table class="kv">{scores}</table>'


def _cases_table(report: EvalReport) -> str:
    names = report.evaluator_names()
    head = "".join(f"<th>{_e(n)}</th>" for n in names)
    rows = []
    for case, runs in report.by_case().items():
        passed = sum(r.passed for r in runs)
        cells = []
        for name in names:
            values = [s.value for r in runs if (s := r.score(name)) is not None and s.value is not None]
            cells.append(f"<td>{_num(sum(values) / len(values) if values else None, '{:.2f}')}</td>")
        rows.append(
            f"<tr><td>{_e(case)}</td><td>{_status(passed == len(runs))} {passed}/{len(runs)}</td>{''.join(cells)}</tr>"
        )
    return f"<h2>Cases</h2><table><tr><th>case</th><th>passed</th>{head}</tr>{''.join(rows)}</table>"


def _run(result: CaseResult) -> str:
    usage = result.usage or {}
    cost = result.cost_usd
    facts = (
        f"latency {result.latency:.3f} s · tokens {result.total_tokens:,} · "
        f"cost {'unknown' if cost is None else f'${cost:.5f}'} · requests {usage.get('requests', '-')} · "
        f"tool calls {usage.get('tool_calls', '-')} · session {result.session_id}"
    )
    scores = "".join(
        f"<tr><td>{_e(s.name)}</td><td>{'<span class=skip>skipped</span>' if s.value is None else f'{s.value:.3f}'}"
        f"</td><td>{s.threshold:g}</td><td>{_status(s.passed)}</td><td>{_e(s.reason)}</td></tr>"
        for s in result.scores
    )
    error = f"<p class=fail>error: {_e(result.error_type or '')}: {_e(result.error or '')}</p>" if result.error else ""
    expected = (
        f"<div>expected</div><pre>{_e(result.expected_output)}</pre>" if result.expected_output is not None else ""
    )
    return (
        f'<details class="case"><summary>{_status(result.passed)} {_e(result.case)}'
        f" <small>#{result.repetition}</small></summary>"
        f'<div class="meta">{escape(facts)}</div>{error}'
        f"<div>input</div><pre>{_e(result.input)}</pre>{expected}<div>output</div><pre>{_e(result.output)}</pre>"
        f"<table><tr><th>evaluator</th><th>score</th><th>threshold</th><th></th><th>reason</th></tr>{scores}</table>"
        f"<details><summary>event trace ({len(result.events)} events)</summary>{_trace(result)}</details>"
        "</details>"
    )


def _trace(result: CaseResult) -> str:
    """One row per event; consecutive text deltas of one block are joined into one row."""
    rows: list[tuple[str, str, str]] = []
    for event in result.trace():
        kind = str(event.get("type", ""))
        source = str(event.get("source", ""))
        if kind in ("text_delta", "thinking_delta") and rows and rows[-1][0] == kind and rows[-1][1] == source:
            rows[-1] = (kind, source, rows[-1][2] + str(event.get("delta", "")))
            continue
        if kind in ("text_delta", "thinking_delta"):
            rows.append((kind, source, str(event.get("delta", ""))))
            continue
        detail = {k: v for k, v in event.items() if k not in ("type", "source", "reply_id", "session_id")}
        rows.append((kind, source, _json.dumps(detail)))
    body = "".join(
        f"<tr><td>{escape(kind)}</td><td>{escape(source)}</td><td><pre>{escape(detail[:4000])}</pre></td></tr>"
        for kind, source, detail in rows
    )
    return f'<table class="trace"><tr><th>event</th><th>source</th><th>detail</th></tr>{body}</table>'
