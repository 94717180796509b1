"""The cost of recording run timelines (`agentrt.middleware.timeline.RunRecorder`) per run.

Measures CPU microseconds per run (`time.process_time`: other processes on the machine do not
count), sequential and in process, for the run "one tool call, then answer" (two model calls,
one tool) with a zero-latency scripted model, with and without the recorder, for a plain `call`
and a streamed one, on the in-memory and the SQLite store, under Python's default collector
thresholds and under those `agentrt serve` sets. Each configuration is measured in several
alternating rounds (with / without); the median of the rounds is kept. The difference is what
recording costs: the bookkeeping while the run goes (timestamps, bars), building and bounding the
record, and the one store write when the call ends.

Prints a table and writes benchmarks/results/timeline.json. Run:
`.venv/bin/python benchmarks/timeline.py [--quick]` (`--quick`: fewer runs, writes
timeline-quick.json).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentrt import ReActAgent, RuntimeContext, Toolkit, ToolUseBlock, tool
from agentrt.middleware.timeline import RunRecorder
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.server._serve import SERVER_GC_THRESHOLD
from agentrt.state import InMemoryStateStore, SqliteStateStore

RESULTS = Path(__file__).parent / "results"
SESSIONS = 100
"""Runs cycle over this many sessions, so that histories grow as in a real service (and stay bounded)."""


@tool(read_only=True)
async def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return f"Sunny, 22 C in {city}."


_CALL = ToolUseBlock(id="call_1", name="get_weather", input={"city": "Paris"})


def _reply(request: ModelRequest) -> Any:
    if request.messages[-1].role == "user" and request.messages[-1].text:
        return _CALL
    return "It is sunny in Paris."


def _agent(store: Any, record: bool) -> ReActAgent:
    return ReActAgent(
        "bench",
        "You report the weather.",
        model=ScriptedModel.from_function(_reply, record=False),
        toolkit=Toolkit([get_weather]),
        state_store=store,
        middlewares=[RunRecorder()] if record else [],
    )


async def _per_run(agent: ReActAgent, runs: int, stream: bool, offset: int) -> float:
    """CPU microseconds per run over `runs` sequential runs (this process's CPU: the SQLite thread's included)."""
    start = time.process_time()
    for i in range(runs):
        ctx = RuntimeContext(user_id="u", session_id=f"s{(offset + i) % SESSIONS}")
        if stream:
            async for _ in agent.stream_events("What is the weather in Paris?", ctx):
                pass
        else:
            await agent.call("What is the weather in Paris?", ctx)
    return (time.process_time() - start) / runs * 1e6


async def _measure(make_store: Callable[[], Any], stream: bool, runs: int, rounds: int) -> dict[str, float]:
    stores = {record: make_store() for record in (False, True)}
    agents = {record: _agent(stores[record], record) for record in (False, True)}
    for record in (False, True):  # warm up: imports, caches, the first sessions
        await _per_run(agents[record], min(runs, 200), stream, 0)
    samples: dict[bool, list[float]] = {False: [], True: []}
    for r in range(rounds):
        for record in (False, True) if r % 2 == 0 else (True, False):
            samples[record].append(await _per_run(agents[record], runs, stream, r * runs))
    for store in stores.values():
        await store.close()
    without, with_ = statistics.median(samples[False]), statistics.median(samples[True])
    return {"without_us": round(without, 1), "with_us": round(with_, 1), "cost_us": round(with_ - without, 1)}


GC_SETTINGS = {"default": gc.get_threshold(), "server": SERVER_GC_THRESHOLD}
"""Python's collector thresholds, and those `agentrt serve` sets (the recorder allocates a record per call)."""


async def main(quick: bool) -> None:
    runs, rounds = (300, 3) if quick else (1000, 7)
    folder = Path(tempfile.mkdtemp(prefix="agentrt-timeline-bench-"))
    counter = iter(range(1_000_000))
    stores: dict[str, Callable[[], Any]] = {
        "memory": InMemoryStateStore,
        "sqlite": lambda: SqliteStateStore(folder / f"state-{next(counter)}.db"),
    }
    rows = []
    for gc_name, threshold in GC_SETTINGS.items():
        gc.set_threshold(*threshold)
        for name, make in stores.items():
            for stream in (False, True):
                found = await _measure(make, stream, runs, rounds)
                rows.append({"gc": gc_name, "store": name, "mode": "stream" if stream else "call", **found})
    gc.set_threshold(*GC_SETTINGS["default"])
    print(f"{'gc':<8} {'store':<8} {'mode':<7} {'without':>10} {'with':>10} {'recording':>10}   (CPU us per run)")
    for row in rows:
        print(
            f"{row['gc']:<8} {row['store']:<8} {row['mode']:<7} {row['without_us']:>10.1f} {row['with_us']:>10.1f} "
            f"{row['cost_us']:>10.1f}"
        )
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / ("timeline-quick.json" if quick else "timeline.json")
    meta = {"python": platform.python_version(), "machine": platform.machine(), "runs": runs, "rounds": rounds}
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs; writes timeline-quick.json")
    asyncio.run(main(parser.parse_args().quick))
