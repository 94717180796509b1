"""Batch runs: ordered output, per-row errors, usage limits, input errors, crash-safe resume, the command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import batch_agents
import pytest
from typer.testing import CliRunner

from agentrt import UsageLimits
from agentrt.cli import build_app
from agentrt.evals import BatchInputError, BatchProgress, read_rows, run_batch

ECHO = "batch_agents:agent"


def write_rows(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def read_out(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_rows_run_in_their_own_sessions_and_come_back_in_input_order(tmp_path: Path) -> None:
    rows = [{"id": f"r{i}", "input": f"q{i}"} for i in range(12)] + [{"id": "bad", "input": "explode"}]
    seen: list[BatchProgress] = []
    out = tmp_path / "out.jsonl"
    report = await run_batch(batch_agents.agent(), rows, out=out, concurrency=5, progress=seen.append)
    written = read_out(out)
    assert written == report.rows and [r["id"] for r in written] == [r["id"] for r in rows]
    assert written[3]["output"] == "echo: q3" and written[3]["error"] is None
    assert written[3]["usage"]["requests"] == 1 and written[3]["latency_s"] >= 0
    assert set(written[0]) == {"id", "output", "error", "usage", "latency_s"}
    assert written[-1]["output"] == "" and written[-1]["error"]["type"] == "RuntimeError"
    assert "explode" in written[-1]["error"]["message"]
    assert report.errors == 1 and report.resumed == 0
    assert [p.done for p in seen] == list(range(1, 14)) and seen[-1].errors == 1 and seen[-1].total == 13
    assert not (tmp_path / "out.jsonl.partial").exists()


async def test_ids_default_to_the_line_and_bad_input_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text('{"input": "a"}\n\n{"id": 7, "input": "b"}\n{"input": "c"}\n')
    assert [(r.id, r.line) for r in read_rows(path)] == [(1, 1), (7, 3), (4, 4)]
    problems = {
        '{"id": "a", "input": "x"}\n{"id": "a", "input": "y"}\n': "in.jsonl:2: duplicate id 'a' (first on line 1)",
        '{"id": "a", "input": "x"}\n{"id": \n': "in.jsonl:2: not a JSON object",
        "[1, 2]\n": "in.jsonl:1: a row must be a JSON object, not list",
        '{"id": "a"}\n': "in.jsonl:1: the row has no 'input' field",
        '{"id": true, "input": "x"}\n': "in.jsonl:1: the id ('id') must be a non-empty string or an integer",
        '{"id": 1, "input": 5}\n': "in.jsonl:1: the input must be text, a message or a non-empty list of messages",
    }
    for text, words in problems.items():
        path.write_text(text)
        with pytest.raises(BatchInputError) as caught:
            read_rows(path)
        assert words in str(caught.value), (text, str(caught.value))
    with pytest.raises(BatchInputError, match="rows:2: duplicate id 1"):
        await run_batch(batch_agents.agent(), [{"id": 1, "input": "x"}, {"id": 1, "input": "y"}])
    path.write_text('{"key": "k1", "prompt": "hello", "input": "ignored"}\n')
    report = await run_batch(batch_agents.agent(), path, id_field="key", input_field="prompt")
    assert report.rows[0]["id"] == "k1" and report.rows[0]["output"] == "echo: hello"


async def test_usage_limits_apply_per_row_and_a_breach_is_that_rows_error() -> None:
    rows = [{"id": 1, "input": "a"}, {"id": 2, "input": "b"}]
    report = await run_batch(batch_agents.tool_agent, rows, usage_limits=UsageLimits(requests=1))
    assert [r["error"]["type"] for r in report.rows] == ["UsageLimitExceeded"] * 2
    report = await run_batch(batch_agents.tool_agent, rows, usage_limits=UsageLimits(requests=2))
    assert [r["output"] for r in report.rows] == ["looked up"] * 2 and report.errors == 0
    assert report.rows[0]["usage"]["tool_calls"] == 1


async def test_a_rerun_resumes_from_the_partial_and_final_files(tmp_path: Path) -> None:
    rows = [{"id": i, "input": f"q{i}"} for i in range(6)] + [{"id": 6, "input": "explode"}]
    out = tmp_path / "out.jsonl"
    # A crash left: a final file from an older run, a partial file with a torn last line.
    out.write_text(json.dumps({"id": 0, "output": "old 0", "error": None, "usage": None, "latency_s": 0}) + "\n")
    partial = tmp_path / "out.jsonl.partial"
    partial.write_text(
        json.dumps({"id": 2, "output": "old 2", "error": None, "usage": None, "latency_s": 0})
        + "\n"
        + json.dumps({"id": 3, "output": "", "error": {"type": "X", "message": "m"}, "usage": None, "latency_s": 0})
        + '\n{"id": 4, "outp'
    )
    batch_agents.CALLS.clear()
    report = await run_batch(ECHO, rows, out=out, concurrency=3, progress=False)
    assert sorted(batch_agents.CALLS) == ["explode", "q1", "q3", "q4", "q5"]  # 0 and 2 finished; 3 failed: retried
    assert report.resumed == 2 and not partial.exists()
    written = read_out(out)
    assert [r["id"] for r in written] == list(range(7))
    assert [r["output"] for r in written[:4]] == ["old 0", "echo: q1", "old 2", "echo: q3"]
    # Everything finished: a re-run runs nothing but the failed row, or nothing at all with retry_errors=False.
    batch_agents.CALLS.clear()
    again = await run_batch(ECHO, rows, out=out, retry_errors=False)
    assert batch_agents.CALLS == [] and again.resumed == 7 and read_out(out) == written
    await run_batch(ECHO, rows, out=out)
    assert batch_agents.CALLS == ["explode"]


def test_the_batch_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_rows(tmp_path / "in.jsonl", [{"id": "a", "input": "hi"}, {"id": "b", "input": "explode"}])
    runner = CliRunner()
    args = ["batch", "in.jsonl", "--agent", ECHO, "--out", "out.jsonl", "--no-progress"]
    result = runner.invoke(build_app(), args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "2 rows (2 run now, 0 resumed), 1 with errors: out.jsonl" in result.output
    assert [r["output"] for r in read_out(tmp_path / "out.jsonl")] == ["echo: hi", ""]
    result = runner.invoke(build_app(), [*args, "--keep-errors"], env={"COLUMNS": "200"})
    assert "2 rows (0 run now, 2 resumed)" in result.output
    result = runner.invoke(
        build_app(), [*args, "--max-requests", "0", "--max-total-tokens", "100"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0 and "(1 run now, 1 resumed)" in result.output
    assert read_out(tmp_path / "out.jsonl")[1]["error"]["type"] == "UsageLimitExceeded", read_out(
        tmp_path / "out.jsonl"
    )
    (tmp_path / "bad.jsonl").write_text('{"id": 1, "input": "x"}\n{"id": 1, "input": "y"}\n')
    result = runner.invoke(build_app(), ["batch", "bad.jsonl", "--agent", ECHO, "--out", "o.jsonl"])
    assert result.exit_code == 2 and "bad.jsonl:2: duplicate id 1 (first on line 1)" in result.output


def test_a_bare_ray_option_means_a_local_ray() -> None:
    from agentrt.cli.eval import bare_ray

    assert bare_ray(["batch", "x", "--ray"]) == ["batch", "x", "--ray", "local"]
    assert bare_ray(["--ray", "--out", "o"]) == ["--ray", "local", "--out", "o"]
    assert bare_ray(["--ray", "auto"]) == ["--ray", "auto"]
