"""Reports: summary, pass@k, JSON round trip, the escaped self-contained HTML, the terminal table, compare."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from agentrt.errors import UserError
from agentrt.evals import CaseResult, EvalReport, Score, compare


def run(case: str, *values: float | None, rep: int = 0, error: str | None = None, **extra: object) -> CaseResult:
    scores = [Score(v, f"reason {i}", f"e{i}") for i, v in enumerate(values)]
    return CaseResult(case=case, repetition=rep, scores=scores, error=error, error_type="E" if error else None, **extra)  # type: ignore[arg-type]


def report(*results: CaseResult, repeat: int = 1) -> EvalReport:
    return EvalReport(
        dataset="ds", agent="bot", results=list(results), repeat=repeat, started_at=100.0, finished_at=103.0
    )


def test_summary_means_skip_skipped_scores_and_percentiles() -> None:
    r = report(
        run("a", 1.0, None, latency=0.1, usage={"input_tokens": 5, "output_tokens": 1, "cost_usd": 0.01}),
        run("b", 0.5, 1.0, latency=0.3, usage={"total_tokens": 10}),
        run("c", 0.0, error="boom", latency=0.2),
    )
    s = r.summary()
    assert s["cases"] == 3 and s["runs"] == 3 and s["passed"] == 1 and s["errors"] == 1
    assert s["pass_rate"] == pytest.approx(1 / 3)
    assert s["mean_scores"] == {"e0": pytest.approx(0.5), "e1": 1.0}
    assert s["usage"]["total_tokens"] == 16 and s["cost_usd"] == 0.01 and s["cost_known_runs"] == 1
    assert s["latency_p50"] == 0.2 and s["latency_p95"] == 0.3 and s["wall_time"] == 3.0
    empty = report().summary()
    assert empty["pass_rate"] == 0.0 and empty["latency_p50"] is None and empty["cost_usd"] is None


def test_pass_at_k_for_repeated_cases() -> None:
    r = report(
        run("a", 1.0, rep=0),
        run("a", 0.0, rep=1),
        run("a", 0.0, rep=2),
        run("b", 0.0, rep=0),
        run("b", 0.0, rep=1),
        run("b", 0.0, rep=2),
        run("c", 1.0, rep=0),
        run("c", 1.0, rep=1),
        run("c", 1.0, rep=2),
        repeat=3,
    )
    assert r.pass_rate == pytest.approx(4 / 9)
    assert r.pass_at_k() == pytest.approx(2 / 3)  # a and c passed at least once in 3
    assert r.pass_at_k(1) == pytest.approx((1 / 3 + 0 + 1) / 3)
    assert r.pass_at_k(2) == pytest.approx((1 - 1 / 3 + 0 + 1) / 3)  # a: 1 - C(2,2)/C(3,2)
    assert r.pass_all_k() == pytest.approx(1 / 3)
    with pytest.raises(UserError):
        r.pass_at_k(4)


def test_a_threshold_below_one_passes_partial_scores() -> None:
    assert CaseResult(case="a", scores=[Score(0.6, "", "judge", 0.5)]).passed
    assert not CaseResult(case="a", scores=[Score(0.4, "", "judge", 0.5)]).passed
    assert CaseResult(case="a", scores=[Score(None, "unknown", "cost")]).passed


def test_json_round_trip_and_rejects_other_files(tmp_path: Path) -> None:
    r = report(run("a", 1.0, output="hi", usage={"total_tokens": 3}, events=[{"type": "run_started", "source": "bot"}]))
    path = tmp_path / "results.json"
    r.to_json(path)
    data = json.loads(path.read_text())
    assert data["format"] == "agentrt.eval/1" and data["summary"]["pass_rate"] == 1.0
    back = EvalReport.load(path)
    assert back.to_dict() == r.to_dict()
    (tmp_path / "other.json").write_text('{"format": "something"}')
    with pytest.raises(UserError, match="not an agentrt eval report"):
        EvalReport.load(tmp_path / "other.json")
    with pytest.raises(UserError, match="cannot read"):
        EvalReport.load(tmp_path / "missing.json")


HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def test_html_escapes_every_untrusted_string_and_loads_nothing_external(tmp_path: Path) -> None:
    events = [
        {"type": "run_started", "source": "bot", "input": [HOSTILE]},
        {"type": "text_delta", "source": "bot", "delta": "<script>"},
        {"type": "text_delta", "source": "bot", "delta": "alert(2)</script>"},
    ]
    r = EvalReport(
        dataset=HOSTILE,
        agent=HOSTILE,
        results=[
            CaseResult(
                case=HOSTILE,
                input=HOSTILE,
                expected_output=HOSTILE,
                output=HOSTILE,
                scores=[Score(0.0, HOSTILE, HOSTILE)],
                error=HOSTILE,
                error_type="E",
                events=events,
                session_id=HOSTILE,
            )
        ],
    )
    html = r.to_html(tmp_path / "report.html")
    assert (tmp_path / "report.html").read_text() == html
    assert "<script" not in html.lower() and "<img" not in html.lower()
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in html  # the joined text deltas, escaped
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:|//)", html)
    assert "<link" not in html and "@import" not in html and "default-src 'none'" in html


def test_terminal_summary_lists_cases_and_totals() -> None:
    r = report(run("alpha", 1.0, latency=0.5), run("beta", 0.0, error="boom [bold]", latency=0.1), repeat=1)
    out = io.StringIO()
    r.print_summary(Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    assert "alpha" in text and "beta" in text and "1/1" in text and "0/1" in text
    assert "E: boom [bold]" in text  # markup in an error is shown, not interpreted
    assert "pass rate 50.0% (1/2 runs, 1 errors)" in text and "cost unknown" in text


def test_compare_lists_regressions_and_improvements_per_case_and_evaluator() -> None:
    before = report(run("a", 1.0, 1.0), run("b", 0.0, 1.0), run("gone", 1.0), run("same", 1.0, None))
    after = report(run("a", 0.0, 1.0), run("b", 1.0, 1.0), run("new", 1.0), run("same", 1.0, 1.0))
    c = compare(before, after)
    regressions = {(x.case, x.evaluator, x.before, x.after) for x in c.regressions}
    improvements = {(x.case, x.evaluator, x.before, x.after) for x in c.improvements}
    assert regressions == {("a", None, 1.0, 0.0), ("a", "e0", 1.0, 0.0)}
    assert improvements == {("b", None, 0.0, 1.0), ("b", "e0", 0.0, 1.0)}
    assert c.added_cases == ["new"] and c.removed_cases == ["gone"] and c.has_regressions
    assert c.pass_rate == (0.75, 0.75) and c.regressions[0].delta == -1.0
    assert before.compare(after).to_dict() == c.to_dict()
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(c.table())
    assert "regression" in out.getvalue() and "(pass rate)" in out.getvalue()
    assert "2 regression(s)" in c.summary_line()
    assert not compare(before, before).has_regressions
