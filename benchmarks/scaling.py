"""CPU per run as concurrency grows, for each state store.

N concurrent sessions, N in (10, 100, 1,000, 10,000), on one `ReActAgent` running "one tool call,
then answer" with a scripted model of 100 ms latency (the run of benchmarks/overhead.py), on the
memory, SQLite (the default store: a file in a temporary directory), Redis and PostgreSQL stores.
For every (store, N), on a fresh store (its own SQLite file, Redis key prefix or PostgreSQL table
prefix, removed afterwards):
  * warm-up: a gather of min(N, 100) runs (opens connections, creates tables);
  * CPU per run: process user + sys time (every thread: SQLite's worker included; not the Redis or
    PostgreSQL server's) over the gathers, divided by the runs; a small N repeats the gather so a
    measurement covers at least 400 runs (100 with --quick); median of 3 measurements (1 with
    --quick, and at N >= 10,000, where one gather of PostgreSQL runs takes minutes: the 30
    connections of its lock pool let 30 runs in at a time);
  * wall time of one gather (median), against the ideal of 2 x latency (two model turns).
A store whose service is not reachable, or whose driver is not installed, is skipped (said so).
A (store, N) that fails is recorded with its error and the others still run.

Prints a table and writes benchmarks/results/scaling.json (charted by benchmarks/charts.py).
Run: `make bench` or `.venv/bin/python benchmarks/scaling.py [--quick] [--stores memory,sqlite,...]
[--sizes 10,100,...]`. `--quick` (N up to 1,000, one measurement) writes scaling-quick.json
instead, so a quick run never replaces the committed results.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import platform
import statistics
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

# Sibling scripts (benchmarks/ is on sys.path when this file runs): the same run as overhead.py,
# the same service URLs, isolation and clean-up as state.py.
from overhead import _cpu, make_agent, make_model
from state import BACKENDS, TMP, _drop, _options, _reachable

from agentrt import RuntimeContext
from agentrt.state import store_from_url

RESULTS = Path(__file__).parent / "results"
STORES = ("memory", "sqlite", "redis", "postgres")
SIZES = (10, 100, 1000, 10_000)
SIZES_QUICK = (10, 100, 1000)
LATENCY = 0.1
QUESTION = "What is the weather in Paris?"
ANSWER = "It is sunny in Paris."


class _FewOfEach(logging.Filter):
    """Lets the first 3 log records of each message through (1,000 failing runs log 1,000 warnings)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: Counter[str] = Counter()

    def filter(self, record: logging.LogRecord) -> bool:
        self.seen[str(record.msg)] += 1
        return self.seen[str(record.msg)] <= 3

    def dropped(self) -> int:
        return sum(max(0, count - 3) for count in self.seen.values())


@asynccontextmanager
async def open_store(name: str) -> AsyncIterator[Any]:
    """A fresh store of backend `name`; whatever it wrote is removed when the block ends."""
    tag = uuid.uuid4().hex[:8]
    url = f"sqlite:///{TMP / f'scaling-{tag}.db'}" if name == "sqlite" else BACKENDS[name][0]
    store = store_from_url(url, **_options(name))
    try:
        yield store
    finally:
        try:
            await _drop(store, name)
        finally:
            await store.close()


async def _gather(agent: Any, sessions: list[str]) -> float:
    t0 = time.perf_counter()
    # return_exceptions: when a run fails, the others still finish before the store is cleaned up
    replies = await asyncio.gather(
        *(agent.call(QUESTION, RuntimeContext(user_id="u", session_id=s)) for s in sessions), return_exceptions=True
    )
    wall = time.perf_counter() - t0
    errors = [reply for reply in replies if isinstance(reply, BaseException)]
    if errors:
        raise RuntimeError(f"{len(errors)} of {len(replies)} runs failed, first: {errors[0]!r}") from errors[0]
    wrong = [reply.text for reply in replies if reply.text != ANSWER]
    if wrong:
        raise AssertionError(f"{len(wrong)} of {len(replies)} runs answered {wrong[0]!r}")
    return wall


async def measure(name: str, n: int, reps: int, min_runs: int) -> dict[str, Any]:
    """CPU per run and wall time of N concurrent sessions on a fresh store of backend `name`."""
    async with open_store(name) as store:
        agent = make_agent(make_model(LATENCY), store)
        await _gather(agent, [f"warm-{i}" for i in range(min(n, 100))])
        rounds = max(1, min_runs // n)
        reps = 1 if n >= 10_000 else reps
        walls: list[float] = []
        cpu_us: list[float] = []
        for rep in range(reps):
            gc.collect()
            cpu0 = _cpu()
            for r in range(rounds):
                walls.append(await _gather(agent, [f"s{rep}-{r}-{i}" for i in range(n)]))
            cpu_us.append((_cpu() - cpu0) / (n * rounds) * 1e6)
    return {
        "n": n,
        "runs": n * rounds * reps,
        "cpu_us_per_run": statistics.median(cpu_us),
        "cpu_us_per_run_samples": cpu_us,
        "wall_s": statistics.median(walls),
        "wall_max_s": max(walls),
        "ideal_s": 2 * LATENCY,
    }


async def main_async(names: list[str], sizes: tuple[int, ...], quick: bool) -> dict[str, Any]:
    reps, min_runs = (1, 100) if quick else (3, 400)
    stores: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    for name in names:
        addr = BACKENDS[name][1]
        if not _reachable(addr):
            skipped[name] = f"service not reachable at {addr[0]}:{addr[1]}" if addr else "not reachable"
            print(f"skip {name}: {skipped[name]}")
            continue
        points: list[dict[str, Any]] = []
        for n in sizes:
            print(f"{name}: {n:,} concurrent sessions ...", flush=True)
            try:
                point = await measure(name, n, reps, min_runs)
            except ImportError as exc:
                skipped[name] = str(exc)
                print(f"skip {name}: {exc}")
                break
            except Exception as exc:  # one failing size must not lose the rest of a long run
                point = {"n": n, "error": f"{type(exc.__cause__ or exc).__name__}: {exc}"}
                print(f"  failed: {point['error']}")
            else:
                print(f"  CPU {point['cpu_us_per_run']:.0f} µs/run, wall {point['wall_s']:.2f} s")
            points.append(point)
        if points and name not in skipped:
            stores.append({"store": name, "points": points})
    return {"latency_s": LATENCY, "sizes": list(sizes), "stores": stores, "skipped": skipped}


def table(result: dict[str, Any]) -> str:
    sizes = result["sizes"]
    head = ["store", "measure"] + [f"N={n:,}" for n in sizes]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for row in result["stores"]:
        by_n = {p["n"]: p for p in row["points"]}
        cpu, wall = [row["store"], "CPU per run"], ["", f"wall (ideal {2 * result['latency_s']:.1f} s)"]
        for n in sizes:
            p = by_n.get(n, {"error": "not run"})
            cpu.append("error" if "error" in p else f"{p['cpu_us_per_run']:.0f} µs")
            wall.append("error" if "error" in p else f"{p['wall_s']:.2f} s")
        lines += [" | ".join(cpu), " | ".join(wall)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="N up to 1,000, one measurement; writes scaling-quick.json"
    )
    parser.add_argument("--stores", default=",".join(STORES), help=f"comma-separated, of: {', '.join(BACKENDS)}")
    parser.add_argument("--sizes", default=None, help="comma-separated numbers of concurrent sessions")
    args = parser.parse_args()
    names = [n.strip() for n in args.stores.split(",") if n.strip()]
    unknown = [n for n in names if n not in BACKENDS]
    if unknown:
        parser.error(f"unknown store {unknown[0]!r}; known: {', '.join(BACKENDS)}")
    sizes = tuple(int(s) for s in args.sizes.split(",")) if args.sizes else (SIZES_QUICK if args.quick else SIZES)
    handler = logging.StreamHandler()
    few = _FewOfEach()
    handler.addFilter(few)
    logging.basicConfig(level=logging.WARNING, handlers=[handler], format="%(levelname)s %(name)s: %(message)s")
    result: dict[str, Any] = {"python": platform.python_version(), "cpus": os.cpu_count(), "quick": args.quick}
    result.update(asyncio.run(main_async(names, sizes, args.quick)))
    print()
    print(table(result))
    for name, why in result["skipped"].items():
        print(f"skipped {name}: {why}")
    if few.dropped():
        print(f"({few.dropped():,} repeated log records not shown)")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / ("scaling-quick.json" if args.quick else "scaling.json")
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwritten {out}")


if __name__ == "__main__":
    main()
