"""`RayExecutor`: a dataset and a batch through a local Ray (started once for the module) match the local runs.

Skipped only when Ray cannot be imported and CI is not "true" (``make venv`` installs the ``ray`` extra).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import batch_agents
import pytest
from typer.testing import CliRunner

from agentrt.cli import build_app
from agentrt.cli.eval import bare_ray
from agentrt.evals import Case, Contains, Dataset, Equals, ProgressUpdate, RayExecutor, ToolTrajectory, run_batch
from agentrt.evals.ray_executor import run_chunk

try:
    import ray
except ImportError:  # pragma: no cover - Ray is a dev dependency
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("Ray is not installed (pip install 'agentrt[ray]')", allow_module_level=True)


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    # The workers import the test agents' module as any cluster's would: from its folder on their path.
    here = str(Path(__file__).parent)
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
    try:
        yield
    finally:
        ray.shutdown()


def dataset() -> Dataset:
    cases = [Case(f"c{i}", f"question {i}", expected_output=f"echo: question {i}") for i in range(18)]
    cases += [Case("boom", "explode please"), Case("wrong", "other", expected_output="nope")]
    return Dataset(cases, evaluators=[Equals(), Contains("echo")], name="ray")


def comparable(report: Any) -> list[tuple[Any, ...]]:
    return [
        (r.case, r.output, r.error_type, r.error, [(s.name, s.value, s.reason) for s in r.scores], r.usage)
        for r in report.results
    ]


async def test_a_dataset_through_ray_matches_the_local_run() -> None:
    seen: list[ProgressUpdate] = []
    executor = RayExecutor(concurrency_per_worker=4, chunk_size=3)
    remote = await dataset().evaluate("batch_agents:agent", executor=executor, progress=seen.append)
    local = await dataset().evaluate(batch_agents.agent(), progress=False)
    assert comparable(remote) == comparable(local)
    assert [r.case for r in remote.results] == [f"c{i}" for i in range(18)] + ["boom", "wrong"]
    assert remote.agent == local.agent == "echo-bot" and remote.pass_rate == local.pass_rate == 0.9
    assert len(seen) == 20 and seen[-1].done == 20 and seen[-1].errors == 1
    # The events came back from the workers as events: the trace and a tool trajectory score like local ones.
    tools = Dataset([Case("t", "k", expected_tools=["lookup"])], evaluators=[ToolTrajectory()])
    remote_tools = await tools.evaluate("batch_agents:tool_agent", executor=executor, progress=False)
    local_tools = await tools.evaluate(batch_agents.tool_agent, progress=False)
    assert comparable(remote_tools) == comparable(local_tools) and remote_tools.pass_rate == 1.0
    assert [e.to_dict()["type"] for e in remote_tools.results[0].events] == [
        e.to_dict()["type"] for e in local_tools.results[0].events
    ]
    assert not executor._started  # Ray was already up: the executor neither started nor stops it


async def test_a_batch_through_ray_resumes_and_keeps_the_input_order(tmp_path: Path) -> None:
    rows = [{"id": i, "input": f"q{i}"} for i in range(10)] + [{"id": 10, "input": "explode"}]
    out = tmp_path / "out.jsonl"
    done = {"id": 4, "output": "from before", "error": None, "usage": None, "latency_s": 0}
    (tmp_path / "out.jsonl.partial").write_text(json.dumps(done) + "\n")
    batch_agents.CALLS.clear()
    report = await run_batch(
        "batch_agents:agent", rows, out=out, executor=RayExecutor(concurrency_per_worker=2), progress=False
    )
    assert batch_agents.CALLS == []  # every row ran on the Ray workers
    local = await run_batch(batch_agents.agent(), rows)
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert written == report.rows and report.resumed == 1
    assert [r["id"] for r in written] == list(range(11)) and written[4]["output"] == "from before"
    strip = [{k: v for k, v in r.items() if k != "latency_s"} for r in local.rows]
    assert [{k: v for k, v in r.items() if k != "latency_s"} for i, r in enumerate(written) if i != 4] == [
        r for i, r in enumerate(strip) if i != 4
    ]


async def double(x: int) -> int:
    return 2 * x


async def test_any_picklable_function_maps_in_order_and_a_failing_task_is_a_user_error() -> None:
    executor = RayExecutor(chunk_size=4)
    assert await executor.map(double, list(range(10))) == [2 * x for x in range(10)]
    assert await executor.map(double, []) == []
    assert await asyncio.to_thread(run_chunk, double, 2, [1, 2]) == [2, 4]  # what a worker runs, here
    from agentrt.errors import UserError

    with pytest.raises(UserError, match="a Ray task failed: ZeroDivisionError"):
        await executor.map(divide, [1, 0])


async def divide(x: int) -> float:
    return 1 / x


def test_eval_and_batch_commands_take_ray(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cases.jsonl").write_text(
        '{"name": "a", "input": "hi", "expected_output": "echo: hi"}\n{"name": "b", "input": "yo"}\n'
    )
    (tmp_path / "in.jsonl").write_text('{"id": "a", "input": "hi"}\n')
    runner = CliRunner()
    result = runner.invoke(
        build_app(), ["eval", "cases.jsonl", "--agent", "batch_agents:agent", "--out", "run", *bare_ray(["--ray"])]
    )
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "run" / "results.json").read_text())["results"][0]["output"] == "echo: hi"
    result = runner.invoke(
        build_app(), ["batch", "in.jsonl", "--agent", "batch_agents:agent", "--out", "o.jsonl", "--ray", "auto"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "o.jsonl").read_text())["output"] == "echo: hi"
    assert ray.is_initialized()  # the commands joined the running Ray and left it running
