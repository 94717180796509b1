"""The eval runner at scale: 10,000 cases against a scripted model with 50 ms latency.

Locally, for each concurrency K in (100, 1,000) it runs the same 10,000 one-turn cases three ways,
each on a fresh `ReActAgent` (in-memory store) whose `ScriptedModel` answers after 50 ms:
  * eval: ``await dataset.evaluate(agent, concurrency=K)`` with two evaluators (`Contains`,
    `MaxLatency`), building the full report (scores, usage, traces kept in memory);
  * direct: the same agent calls made by hand, ``asyncio.gather`` over a K-slot semaphore, each
    with ``run_with_events`` collecting its events in a list, as the runner does;
  * direct call: the same with plain ``agent.call`` (no events), for reference.
It reports wall time, process CPU per case, and the runner's own overhead per case: eval CPU per
case minus direct CPU per case (the acceptance bound is < 1 ms).

Then, unless ``--no-ray``, it starts a local Ray in this process with 2 worker CPUs
(``RayExecutor(num_cpus=2)``, timed on its own: "Ray startup") and runs the same evaluation through
the real executor, the agent given as ``"benchmarks.evals:round_<tag>"`` (the repository root is put
on the workers' PYTHONPATH with a ``runtime_env``, so each worker imports this module and builds the
agent from it; each round names a fresh `make_agent`, see `round_agent`), at K = 100 and 1,000 runs
in flight in all (K/2 per worker, the executor's default chunk size). A warm-up evaluation (timed
too, not counted) lets both workers import agentrt and build an agent first. Each Ray row
reports wall time and CPU per case: the driver's (``time.process_time()`` of this process, Ray's
driver threads included), the workers' (utime + stime from ``/proc/PID/stat`` of the raylet's worker
processes, before and after the run) and Ray's own daemons' (GCS, raylet, agents, monitors: every
other process of the Ray started here). Local rows run first, before Ray is up, so its daemons do
not load them.

Each figure is the median of `--rounds` rounds (default 3). Prints the tables and writes
benchmarks/results/evals.json. Run: `.venv/bin/python benchmarks/evals.py [--quick] [--no-ray]`;
`--quick` (1,000 cases, one round) writes evals-quick.json instead. Linux only for the Ray rows
(``/proc``).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import math
import os
import platform
import statistics
import sys
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
ROOT = Path(__file__).resolve().parent.parent
MODULE = "benchmarks.evals"
"""This module as the Ray workers import it (the repository root is on their PYTHONPATH)."""
RAY_CPUS = 2


def make_agent() -> ReActAgent:
    model = ScriptedModel(["The answer is 42."], latency=LATENCY, repeat=True, record=False)
    return ReActAgent("bench", model=model, state_store=InMemoryStateStore())


_ROUND_AGENTS: list[str] = []
"""The ``MODULE:ATTR`` of the last agent `round_agent` built in this process."""


def round_agent(name: str) -> ReActAgent:
    """A fresh `make_agent` for one Ray round; the previous round's agent is dropped from the worker's cache.

    A Ray worker builds the agent of a ``MODULE:ATTR`` once and keeps it (and its in-memory sessions)
    for the process's life. Each round names a new attribute (``round_<tag>``, see `__getattr__`), so
    each worker builds a fresh agent, as each local round does; the previous one is released, or the
    sessions of every earlier round (10,000 each) would pile up in the workers and slow later rounds.
    """
    from agentrt.evals import _agent  # the worker's cache of agents, by MODULE:ATTR

    for target in _ROUND_AGENTS:
        _agent._AGENTS.pop(target, None)
    _ROUND_AGENTS[:] = [f"{MODULE}:{name}"]
    return make_agent()


def __getattr__(name: str) -> Any:
    """``round_<tag>``: a factory of a fresh agent (`round_agent`), so ``benchmarks.evals:round_<tag>`` is a target."""
    if name.startswith("round_"):
        return functools.partial(round_agent, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


# --- Ray -------------------------------------------------------------------------------------------


def _processes() -> dict[int, tuple[int, str, float]]:
    """Every process: pid -> (parent pid, command line, CPU seconds so far: utime + stime)."""
    tick = os.sysconf("SC_CLK_TCK")
    table: dict[int, tuple[int, str, float]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            cmdline = Path(entry.path, "cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, ..., utime (12th), stime
        command = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
        table[int(entry.name)] = (int(fields[1]), command, (int(fields[11]) + int(fields[12])) / tick)
    return table


def ray_cpu() -> tuple[dict[int, float], dict[int, float]]:
    """CPU seconds so far of the Ray this process started: its worker processes', and its daemons', by pid.

    The workers are the raylet's children running tasks (``ray::IDLE``, ``ray::run_chunk``, or
    ``default_worker.py`` before they rename themselves); every other descendant of this process
    (GCS, raylet, dashboard and runtime-env agents, monitors) is a daemon.
    """
    table = _processes()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    workers: dict[int, float] = {}
    daemons: dict[int, float] = {}
    stack = list(children.get(os.getpid(), []))
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        ppid, command, cpu = table[pid]
        parent = table.get(ppid, (0, "", 0.0))[1].split(" ", 1)[0]
        task_worker = command.startswith("ray::") or "default_worker.py" in command
        if parent.endswith("/raylet") and task_worker and not command.split(" ", 1)[0].endswith("Agent"):
            workers[pid] = cpu
        else:
            daemons[pid] = cpu
    return workers, daemons


def _spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two `ray_cpu` snapshots (a process started meanwhile counts from 0)."""
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


async def run_ray(n: int, executor: Any, tag: str) -> dict[str, float]:
    dataset, target = make_dataset(n), f"{MODULE}:round_{tag}"
    workers0, daemons0 = ray_cpu()
    wall, cpu, report = await measure(lambda: dataset.evaluate(target, executor=executor, progress=False))
    workers1, daemons1 = ray_cpu()
    assert report.pass_rate == 1.0 and len(report.results) == n, report.summary()
    return {
        "wall": wall,
        "driver": cpu,
        "workers": _spent(workers0, workers1),
        "daemons": _spent(daemons0, daemons1),
        "worker_processes": len(workers1),
    }


async def bench_ray(n: int, k: int, rounds: int) -> dict[str, Any]:
    import ray

    from agentrt.evals import RayExecutor

    per_worker = k // RAY_CPUS
    executor = RayExecutor(concurrency_per_worker=per_worker)  # joins the Ray started in `ray_rows`
    samples = [await run_ray(n, executor, f"k{k}_{i}") for i in range(rounds)]
    size = executor._chunk_size(ray, n)  # the executor's own choice (the default chunk size)
    tasks = math.ceil(n / size)
    row: dict[str, Any] = {
        "cases": n,
        "concurrency": k,
        "workers": RAY_CPUS,
        "concurrency_per_worker": per_worker,
        "chunk_size": size,
        "tasks": tasks,
        # Each worker runs its tasks one after another, each task in waves of `per_worker` 50 ms calls.
        "ideal_wall_s": math.ceil(tasks / RAY_CPUS) * math.ceil(size / per_worker) * LATENCY,
        "wall_s": statistics.median(s["wall"] for s in samples),
        "wall_s_rounds": [s["wall"] for s in samples],
        "worker_processes": max(int(s["worker_processes"]) for s in samples),
    }
    for part in ("driver", "workers", "daemons"):
        row[f"{part}_cpu_ms_per_case"] = statistics.median(s[part] for s in samples) / n * 1e3
    total = (s["driver"] + s["workers"] + s["daemons"] for s in samples)
    row["total_cpu_ms_per_case"] = statistics.median(total) / n * 1e3
    return row


def ray_rows(n: int, rounds: int) -> dict[str, Any]:
    """Start a local Ray with `RAY_CPUS` worker CPUs, warm it up, measure K = 100 and 1,000, stop it."""
    import ray

    from agentrt.evals import RayExecutor

    # The workers import this module as `benchmarks.evals` from the repository root; so does the driver.
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    cluster = RayExecutor(num_cpus=RAY_CPUS, runtime_env={"env_vars": {"PYTHONPATH": path}})
    t0 = time.perf_counter()
    cluster.start()
    startup = time.perf_counter() - t0
    try:
        # Warm-up: one case per task, two tasks per CPU, so each worker imports agentrt and builds the agent.
        warmup = RayExecutor(concurrency_per_worker=1, chunk_size=1)
        wall, _, report = asyncio.run(
            measure(
                lambda: make_dataset(2 * RAY_CPUS).evaluate(f"{MODULE}:round_warmup", executor=warmup, progress=False)
            )
        )
        assert report.pass_rate == 1.0, report.summary()
        rows = [asyncio.run(bench_ray(n, k, rounds)) for k in (100, 1_000)]
    finally:
        cluster.shutdown()
    return {
        "ray_version": ray.__version__,
        "num_cpus": RAY_CPUS,
        "startup_s": startup,
        "warmup_s": wall,
        "worker_cpu_source": "utime+stime from /proc/PID/stat of the raylet's worker processes, before/after",
        "driver_cpu_source": "time.process_time() of the driver process (Ray's driver threads included)",
        "rows": rows,
    }


# --- Output ----------------------------------------------------------------------------------------


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


def ray_table(rows: list[dict[str, Any]]) -> str:
    head = [
        "cases",
        "K (workers x per worker)",
        "tasks",
        "ideal wall",
        "wall",
        "driver CPU/case",
        "workers CPU/case",
        "Ray daemons CPU/case",
        "total CPU/case",
    ]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in rows:
        lines.append(
            " | ".join(
                [
                    f"{r['cases']:,}",
                    f"{r['concurrency']:,} ({r['workers']} x {r['concurrency_per_worker']:,})",
                    f"{r['tasks']:,} x {r['chunk_size']:,}",
                    f"{r['ideal_wall_s']:.2f} s",
                    f"{r['wall_s']:.2f} s",
                    f"{r['driver_cpu_ms_per_case']:.3f} ms",
                    f"{r['workers_cpu_ms_per_case']:.3f} ms",
                    f"{r['daemons_cpu_ms_per_case']:.3f} ms",
                    f"{r['total_cpu_ms_per_case']:.3f} ms",
                ]
            )
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 cases, one round; writes evals-quick.json")
    parser.add_argument("--no-ray", action="store_true", help="local rows only (no Ray started)")
    parser.add_argument("--cases", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    n = args.cases or (1_000 if args.quick else 10_000)
    rounds = args.rounds or (1 if args.quick else 3)
    rows = [asyncio.run(bench(n, k, rounds)) for k in (100, 1_000)]  # before Ray is up: no daemons around
    print(table(rows))
    worst = max(r["overhead_ms_per_case"] for r in rows)
    print(f"\nrunner overhead per case (eval CPU - direct run_with_events CPU): at most {worst:.3f} ms (bound: < 1 ms)")
    ray_result: dict[str, Any] | None = None
    if not args.no_ray:
        try:
            import ray  # noqa: F401
        except ImportError:
            print("\nRay is not installed (pip install 'agentrt[ray]'): no Ray rows")
        else:
            ray_result = ray_rows(n, rounds)
            print(
                f"\nlocal Ray, {RAY_CPUS} worker CPUs (Ray {ray_result['ray_version']}): startup "
                f"{ray_result['startup_s']:.2f} s, warm-up {ray_result['warmup_s']:.2f} s (neither in the rows)"
            )
            print(ray_table(ray_result["rows"]))
            print("(driver: process_time of this process; workers and daemons: /proc utime+stime)")
    meta: dict[str, Any] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "model_latency_s": LATENCY,
        "rounds": rounds,
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / ("evals-quick.json" if args.quick else "evals.json")
    out.write_text(json.dumps({**meta, "rows": rows, "ray": ray_result}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
