"""The eval runner at scale: 10,000 cases against a scripted model with 50 ms latency.

For each concurrency K in (100, 1,000) it runs the same 10,000 one-turn cases three ways, each on a
fresh `ReActAgent` (in-memory store) whose `ScriptedModel` answers after 50 ms:
  * eval: ``await dataset.evaluate(agent, concurrency=K)`` with two evaluators (`Contains`,
    `MaxLatency`), building the full report (scores, usage, traces kept in memory);
  * direct: the same agent calls made by hand, ``asyncio.gather`` over a K-slot semaphore, each
    with ``run_with_events`` collecting its events in a list, as the runner does;
  * direct call: the same with plain ``agent.call`` (no events), for reference.
It reports wall time, process CPU per case, and the runner's own overhead per case: eval CPU per
case minus direct CPU per case (the acceptance bound is < 1 ms). Each figure is the median of
`--rounds` rounds (default 3).

Prints a table and writes benchmarks/results/evals.json. Run: `.venv/bin/python benchmarks/evals.py
[--quick]`; `--quick` (1,000 cases, one round) writes evals-quick.json instead. A run on a Ray
cluster is not measured yet (the Ray executor is not there yet).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agentrt import ReActAgent, RuntimeContext
from agentrt.evals import Case, Contains, Dataset, MaxLatency
from agentrt.model import ScriptedModel
from agentrt.state import InMemoryStateStore

RESULTS = Path(__file__).parent / "results"
LATENCY = 0.05


def make_agent() -> ReActAgent:
    model = ScriptedModel(["The answer is 42."], latency=LATENCY, repeat=True, record=False)
    return ReActAgent("bench", model=model, state_store=InMemoryStateStore())


def make_dataset(n: int) -> Dataset:
    cases = [Case(f"case-{i}", f"question number {i}") for i in range(n)]
    return Dataset(cases, name="bench", evaluators=[Contains("42"), MaxLatency(5.0)])


async def measure(work: Callable[[], Awaitable[Any]]) -> tuple[float, float, Any]:
    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    result = await work()
    return time.perf_counter() - t0, time.process_time() - c0, result


async def run_eval(n: int, k: int) -> tuple[float, float]:
    agent, dataset = make_agent(), make_dataset(n)
    wall, cpu, report = await measure(lambda: dataset.evaluate(agent, concurrency=k, progress=False))
    assert report.pass_rate == 1.0 and len(report.results) == n, report.summary()
    return wall, cpu


async def run_direct(n: int, k: int, *, events: bool) -> tuple[float, float]:
    agent = make_agent()
    gate = asyncio.Semaphore(k)

    async def one(i: int) -> Any:
        async with gate:
            ctx = RuntimeContext("eval", f"direct-{i}")
            if events:
                trace: list[Any] = []
                return await agent.run_with_events(f"question number {i}", ctx, trace.append)
            return await agent.call(f"question number {i}", ctx)

    async def work() -> list[Any]:
        return await asyncio.gather(*(one(i) for i in range(n)))

    wall, cpu, replies = await measure(work)
    assert len(replies) == n
    return wall, cpu


async def bench(n: int, k: int, rounds: int) -> dict[str, Any]:
    samples: dict[str, list[tuple[float, float]]] = {"eval": [], "direct": [], "direct_call": []}
    for _ in range(rounds):  # interleaved, so drifting machine load hits every mode alike
        samples["eval"].append(await run_eval(n, k))
        samples["direct"].append(await run_direct(n, k, events=True))
        samples["direct_call"].append(await run_direct(n, k, events=False))
    row: dict[str, Any] = {"cases": n, "concurrency": k, "ideal_wall_s": n / k * LATENCY}
    for mode, values in samples.items():
        row[f"{mode}_wall_s"] = statistics.median(w for w, _ in values)
        row[f"{mode}_cpu_ms_per_case"] = statistics.median(c for _, c in values) / n * 1e3
    row["overhead_ms_per_case"] = row["eval_cpu_ms_per_case"] - row["direct_cpu_ms_per_case"]
    row["overhead_vs_call_ms_per_case"] = row["eval_cpu_ms_per_case"] - row["direct_call_cpu_ms_per_case"]
    return row


def table(rows: list[dict[str, Any]]) -> str:
    head = [
        "cases",
        "K",
        "ideal wall",
        "eval wall",
        "direct wall",
        "eval CPU/case",
        "direct CPU/case",
        "call CPU/case",
        "runner overhead/case",
    ]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in rows:
        lines.append(
            " | ".join(
                [
                    f"{r['cases']:,}",
                    f"{r['concurrency']:,}",
                    f"{r['ideal_wall_s']:.2f} s",
                    f"{r['eval_wall_s']:.2f} s",
                    f"{r['direct_wall_s']:.2f} s",
                    f"{r['eval_cpu_ms_per_case']:.3f} ms",
                    f"{r['direct_cpu_ms_per_case']:.3f} ms",
                    f"{r['direct_call_cpu_ms_per_case']:.3f} ms",
                    f"{r['overhead_ms_per_case']:.3f} ms",
                ]
            )
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 cases, one round; writes evals-quick.json")
    parser.add_argument("--cases", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    n = args.cases or (1_000 if args.quick else 10_000)
    rounds = args.rounds or (1 if args.quick else 3)
    rows = [asyncio.run(bench(n, k, rounds)) for k in (100, 1_000)]
    print(table(rows))
    worst = max(r["overhead_ms_per_case"] for r in rows)
    print(f"\nrunner overhead per case (eval CPU - direct run_with_events CPU): at most {worst:.3f} ms (bound: < 1 ms)")
    meta: dict[str, Any] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "model_latency_s": LATENCY,
        "rounds": rounds,
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / ("evals-quick.json" if args.quick else "evals.json")
    out.write_text(json.dumps({**meta, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
