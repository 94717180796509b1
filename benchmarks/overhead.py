"""Framework overhead of agentrt with a zero-latency scripted model.

Measures, for the run "one tool call, then answer":
  * microseconds per run (sequential), with and without event streaming, and the share of the
    scripted model itself;
  * agent construction time (Toolkit() + register + ReActAgent) and tracemalloc bytes per agent;
  * bytes per stored session state;
  * N concurrent sessions on one agent with a 100 ms scripted latency: wall time vs the ideal
    (2 x latency) and CPU per run, at N = 10, 1,000 and 10,000;
  * `import agentrt` time in a fresh interpreter.

Prints a table and writes benchmarks/results/overhead.json. Run: `make bench` or
`.venv/bin/python benchmarks/overhead.py [--quick]`; `--quick` (fewer iterations, no 10,000 run)
writes overhead-quick.json instead, so a quick run never replaces the committed results.
CPU per run against concurrency for every state store: benchmarks/scaling.py.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

from agentrt import ReActAgent, RuntimeContext, Toolkit, ToolUseBlock, tool
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.state import InMemoryStateStore

RESULTS = Path(__file__).parent / "results"


@tool(read_only=True)
async def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return f"Sunny, 22 C in {city}."


_CALL = ToolUseBlock(id="call_1", name="get_weather", input={"city": "Paris"})


def _reply(request: ModelRequest) -> Any:
    # First request of a run: ask for the tool; second (last message holds the result): answer.
    if request.messages[-1].role == "user" and request.messages[-1].text:
        return _CALL
    return "It is sunny in Paris."


def make_model(latency: float = 0.0) -> ScriptedModel:
    # record=False: the test double must not keep every request of a 10,000-run benchmark alive.
    return ScriptedModel.from_function(_reply, latency=latency, record=False)


def make_agent(model: ScriptedModel, store: Any) -> ReActAgent:
    toolkit = Toolkit()
    toolkit.register(get_weather)
    return ReActAgent(
        name="bench", sys_prompt="You are a helpful assistant.", model=model, toolkit=toolkit, state_store=store
    )


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def sequential(n: int, stream: bool) -> float:
    agent = make_agent(make_model(), InMemoryStateStore())
    for i in range(50):  # warm-up
        await agent.call("What is the weather in Paris?", RuntimeContext(user_id="u", session_id=f"w{i}"))
    samples = []
    for block in range(4):
        t0 = time.perf_counter()
        for i in range(n // 4):
            ctx = RuntimeContext(user_id="u", session_id=f"{stream}-{block}-{i}")
            if stream:
                async for _ in agent.stream_events("What is the weather in Paris?", ctx):
                    pass
            else:
                reply = await agent.call("What is the weather in Paris?", ctx)
                assert reply.text == "It is sunny in Paris."
        samples.append((time.perf_counter() - t0) / (n // 4) * 1e6)
    return statistics.median(samples)


async def model_only(n: int) -> float:
    from agentrt.message import Msg

    model = make_model()
    msgs1 = [Msg.user("What is the weather in Paris?")]
    msgs2 = [Msg.assistant("x")]
    t0 = time.perf_counter()
    for _ in range(n):
        async for _chunk in model.stream(msgs1):
            pass
        async for _chunk in model.stream(msgs2):
            pass
    return (time.perf_counter() - t0) / n * 1e6


def construction(n: int) -> tuple[float, float]:
    model = make_model()
    store = InMemoryStateStore()
    make_agent(model, store)
    samples = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            make_agent(model, store)
        samples.append((time.perf_counter() - t0) / n * 1e6)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    agents = [make_agent(model, store) for _ in range(1000)]
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    size = sum(s.size_diff for s in after.compare_to(before, "filename"))
    del agents
    return statistics.median(samples), size / 1000


async def state_bytes(n: int) -> float:
    store = InMemoryStateStore()
    agent = make_agent(make_model(), store)
    await agent.call("warm", RuntimeContext(user_id="u", session_id="warm"))
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for i in range(n):
        await agent.call("What is the weather in Paris?", RuntimeContext(user_id="u", session_id=f"m{i}"))
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    return sum(s.size_diff for s in after.compare_to(before, "filename")) / n


async def concurrent(n: int, latency: float) -> dict[str, float]:
    agent = make_agent(make_model(latency), InMemoryStateStore())
    await agent.call("warm", RuntimeContext(user_id="u", session_id="warm"))
    gc.collect()
    # Small N: repeat the gather so the CPU per run is measured over at least ~200 runs.
    rounds = max(1, 200 // n)
    walls = []
    cpu0 = _cpu()
    for r in range(rounds):
        t0 = time.perf_counter()
        replies = await asyncio.gather(
            *(
                agent.call("What is the weather in Paris?", RuntimeContext(user_id="u", session_id=f"c{r}-{i}"))
                for i in range(n)
            )
        )
        walls.append(time.perf_counter() - t0)
        assert all(reply.text == "It is sunny in Paris." for reply in replies)
    cpu = _cpu() - cpu0
    per_run = cpu / (n * rounds) * 1e6
    return {"n": n, "wall_s": statistics.median(walls), "ideal_s": 2 * latency, "cpu_us_per_run": per_run}


def import_ms(repeat: int = 7) -> float:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}

    def timed(code: str) -> float:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=env)
        return time.perf_counter() - t0

    timed("import agentrt")
    base = statistics.median(timed("pass") for _ in range(repeat))
    full = statistics.median(timed("import agentrt") for _ in range(repeat))
    return (full - base) * 1000


async def main_async(quick: bool) -> dict[str, Any]:
    n = 1000 if quick else 4000
    result: dict[str, Any] = {}
    result["run_us"] = await sequential(n, stream=False)
    result["run_stream_us"] = await sequential(n, stream=True)
    result["model_only_us"] = await model_only(n)
    result["construct_us"], result["bytes_per_agent"] = construction(2000 if quick else 20000)
    result["bytes_per_session"] = await state_bytes(200 if quick else 1000)
    sizes = (10, 1000) if quick else (10, 1000, 10000)
    result["concurrent"] = [await concurrent(size, 0.1) for size in sizes]
    result["import_ms"] = import_ms(3 if quick else 7)
    return result


def table(r: dict[str, Any]) -> str:
    rows = [
        ("run: one tool call then answer (call)", f"{r['run_us']:.0f} µs", "≤ 300 µs"),
        ("  same, consuming stream_events", f"{r['run_stream_us']:.0f} µs", ""),
        ("  of which the scripted model itself", f"{r['model_only_us']:.0f} µs", ""),
        ("agent construction (Toolkit + register + ReActAgent)", f"{r['construct_us']:.2f} µs", "≤ 10 µs"),
        ("memory per agent", f"{r['bytes_per_agent'] / 1024:.2f} KiB", "≤ 4 KiB"),
        ("memory per stored session (4 messages)", f"{r['bytes_per_session'] / 1024:.2f} KiB", ""),
    ]
    for c in r["concurrent"]:
        rows.append(
            (
                f"{c['n']:,} concurrent sessions @100 ms: wall (ideal {c['ideal_s']:.1f} s)",
                f"{c['wall_s']:.2f} s",
                "",
            )
        )
        rows.append((f"  CPU per run at {c['n']:,}", f"{c['cpu_us_per_run']:.0f} µs", "flat in N"))
    rows.append(("import agentrt", f"{r['import_ms']:.0f} ms", "≤ 150 ms"))
    width = max(len(a) for a, _, _ in rows)
    lines = [f"{'measure':<{width}}  {'value':>12}  target", "-" * (width + 24)]
    lines += [f"{a:<{width}}  {b:>12}  {c}" for a, b, c in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations, no 10k run")
    args = parser.parse_args()
    result = asyncio.run(main_async(args.quick))
    result["python"] = platform.python_version()
    result["machine"] = f"{platform.machine()} {os.cpu_count()} cpus"
    if args.quick:
        result["quick"] = True
    print(table(result))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / ("overhead-quick.json" if args.quick else "overhead.json")
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwritten {out}")


if __name__ == "__main__":
    main()
