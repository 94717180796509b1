"""Checkpoint cost of each state store as the conversation grows.

For every backend and every conversation length L in (10, 100, 1,000, 10,000 messages) it
prefills a session with L messages, then measures:
  * step: one checkpoint as the agent makes it (append of 2 messages + one changed field,
    with the expected revision), median over 200 steps;
  * load: loading the whole session (L messages);
and the steps per second of one session appended in a tight loop.
Backends that need a service (Redis, PostgreSQL, MariaDB) are skipped when it is not reachable.

Prints a table and writes benchmarks/results/state.json.
Run: `.venv/bin/python benchmarks/state.py [--quick] [--backends sqlite,redis,...]`.

`--per-call` measures instead what a whole agent call costs besides the model: a `ReActAgent` with
a scripted model (one text reply) on a session prefilled with L messages, L in (10, 20, 100, 200,
1,000, 2,000, 4,000, 8,000, 10,000), median of the calls' wall time (``*_ms``) and of their
process CPU time (``*_cpu_ms``: user + sys of every thread, SQLite's worker included; not the
Redis or PostgreSQL server's), in two modes:
  * cached: the store as configured by default, with its session cache (the in-memory store has
    none: its sessions already are objects);
  * uncached: ``store.session_cache.max_bytes = 0``, so every call loads the whole transcript, as
    the first call of a session in a process does (and every call did before the cache);
  * summarised: uncached too, on a session whose summary covers all but its last 20 messages (as
    context compression leaves it): a first load reads only those (`load_context`), so this line
    stays flat where the uncached one grows. Below 84 messages the summary covers fewer than
    `CONTEXT_MIN_MESSAGES` and the whole session is read.
Prints a table and writes benchmarks/results/state-per-call.json (``make bench`` runs this mode).

`--quick` (fewer lengths and iterations) writes state-quick.json / state-per-call-quick.json
instead, so the committed results are never replaced by a quick run.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import os
import platform
import shutil
import socket
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from agentrt.context import RuntimeContext
from agentrt.message import Msg, TokenUsage, ToolResultBlock, ToolUseBlock
from agentrt.state import store_from_url

RESULTS = Path(__file__).parent / "results"
TMP = Path(tempfile.mkdtemp(prefix="agentrt-bench-"))
atexit.register(shutil.rmtree, TMP, ignore_errors=True)
BACKENDS: dict[str, tuple[str, tuple[str, int] | None]] = {
    "memory": ("memory://", None),
    "sqlite": (f"sqlite:///{TMP / 'state.db'}", None),
    "jsonfile": (f"file://{TMP / 'json'}", None),
    "redis": ("redis://127.0.0.1:6379/0", ("127.0.0.1", 6379)),
    "postgres": ("postgresql+asyncpg://postgres@127.0.0.1:5432/test", ("127.0.0.1", 5432)),
    "mariadb": ("mysql+asyncmy://root@127.0.0.1:3306/test", ("127.0.0.1", 3306)),
}


def _reachable(addr: tuple[str, int] | None) -> bool:
    if addr is None:
        return True
    try:
        with socket.create_connection(addr, timeout=1.0):
            return True
    except OSError:
        return False


def _step_messages(i: int) -> list[Msg]:
    call = ToolUseBlock(id=f"c{i}", name="get_weather", input={"city": "Paris"})
    return [
        Msg(role="assistant", content=[call], name="bench", usage=TokenUsage(input_tokens=120, output_tokens=12)),
        Msg(role="user", content=[ToolResultBlock(id=call.id, name=call.name, output="Sunny, 22 C in Paris.")]),
    ]


def _options(name: str) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    if name == "redis":
        return {"prefix": f"bench-{tag}"}
    if name in ("postgres", "mariadb"):
        return {"table_prefix": f"bench_{tag}_"}
    return {}


async def _drop(store: Any, name: str) -> None:
    # Leave nothing behind in shared services.
    if name == "redis":
        client = getattr(store, "_client", None) or getattr(store, "client", None)
        prefix = getattr(store, "prefix", None)
        if client is not None and prefix:
            async for key in client.scan_iter(match=f"{prefix}*"):
                await client.delete(key)
    if name in ("postgres", "mariadb") and hasattr(store, "drop_tables"):
        await store.drop_tables()


async def bench_backend(name: str, url: str, lengths: tuple[int, ...], steps: int) -> dict[str, Any]:
    store = store_from_url(url, **_options(name))
    out: dict[str, Any] = {"backend": name, "lengths": {}}
    try:
        for length in lengths:
            session = f"len-{length}-{uuid.uuid4().hex[:6]}"
            revision = 0
            batch = [m for i in range(length // 2) for m in _step_messages(i)][:length]
            for start in range(0, len(batch), 500):
                revision = await store.append("bench", session, batch[start : start + 500], expected_revision=revision)
            samples = []
            for i in range(steps):
                msgs = _step_messages(length + i)
                t0 = time.perf_counter()
                revision = await store.append(
                    "bench", session, msgs, fields={"tool_state": {"step": i}}, expected_revision=revision
                )
                samples.append(time.perf_counter() - t0)
            loads = []
            for _ in range(5 if length >= 10_000 else 20):
                t0 = time.perf_counter()
                state = await store.load("bench", session)
                loads.append(time.perf_counter() - t0)
                assert state is not None and len(state.messages) == length + 2 * steps
            out["lengths"][length] = {
                "step_ms": statistics.median(samples) * 1e3,
                "step_p99_ms": sorted(samples)[int(len(samples) * 0.99) - 1] * 1e3,
                "load_ms": statistics.median(loads) * 1e3,
            }
        session = f"rate-{uuid.uuid4().hex[:6]}"
        revision = 0
        n = steps * 2
        t0 = time.perf_counter()
        for i in range(n):
            revision = await store.append("bench", session, _step_messages(i), expected_revision=revision)
        out["steps_per_s"] = n / (time.perf_counter() - t0)
    finally:
        await _drop(store, name)
        await store.close()
    return out


# 10 .. 10,000 for the conversation-length chart (benchmarks/charts.py); 20 .. 8,000 for docs/state.md.
PER_CALL_LENGTHS = (10, 20, 100, 200, 1000, 2000, 4000, 8000, 10000)
PER_CALL_LENGTHS_QUICK = (10, 100, 1000)


def _result_path(name: str, quick: bool) -> Path:
    """Where a run writes its JSON: quick runs never replace the committed results."""
    return RESULTS / (f"{name}-quick.json" if quick else f"{name}.json")


async def bench_per_call(name: str, url: str, lengths: tuple[int, ...], calls: int) -> dict[str, Any]:
    from agentrt import ReActAgent
    from agentrt.model import ScriptedModel

    store = store_from_url(url, **_options(name))
    default_budget = store.session_cache.max_bytes  # 0 for the in-memory store: it has no cache
    out: dict[str, Any] = {"backend": name, "session_cache_bytes": default_budget, "lengths": {}}
    try:
        agent = ReActAgent("bench", model=ScriptedModel(["ok"], repeat=True), state_store=store)
        for length in lengths:
            row: dict[str, float] = {}
            for mode in ("cached", "uncached", "summarised"):
                store.session_cache.max_bytes = default_budget if mode == "cached" else 0
                store.session_cache.clear()
                session = f"call-{length}-{mode}-{uuid.uuid4().hex[:6]}"
                revision = 0
                batch = [m for i in range(length // 2) for m in _step_messages(i)][:length]
                for start in range(0, len(batch), 500):
                    revision = await store.append(
                        "bench", session, batch[start : start + 500], expected_revision=revision, agent="bench"
                    )
                if mode == "summarised":
                    fields = {"summary": "what was said before", "summary_index": max(len(batch) - 20, 0)}
                    revision = await store.append(
                        "bench", session, [], fields=fields, expected_revision=revision, agent="bench"
                    )
                await agent.call("warm up", RuntimeContext("bench", session))  # the first load fills the cache
                samples, cpu = [], []
                for i in range(calls):
                    c0 = time.process_time()
                    t0 = time.perf_counter()
                    await agent.call(f"question {i}", RuntimeContext("bench", session))
                    samples.append(time.perf_counter() - t0)
                    cpu.append(time.process_time() - c0)
                row[f"{mode}_ms"] = statistics.median(samples) * 1e3
                row[f"{mode}_cpu_ms"] = statistics.median(cpu) * 1e3
            out["lengths"][length] = row
    finally:
        await _drop(store, name)
        await store.close()
    return out


def per_call_table(rows: list[dict[str, Any]], lengths: tuple[int, ...]) -> str:
    head = ["backend", "cache", "measure"] + [f"{n:,}" for n in lengths] + [f"{lengths[-1]:,} / {lengths[0]:,}"]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in rows:
        labels = {
            "uncached": "off (first load)",
            "summarised": "off, summarised",
            "cached": "on" if r.get("session_cache_bytes") else "(none)",
        }
        for mode in ("uncached", "summarised", "cached"):
            if f"{mode}_ms" not in r["lengths"][lengths[0]]:
                continue
            for suffix, what in (("ms", "wall"), ("cpu_ms", "CPU")):
                ms = [r["lengths"][n][f"{mode}_{suffix}"] for n in lengths]
                cells = [r["backend"], labels[mode], what]
                cells += [f"{v:.2f} ms" for v in ms]
                cells.append(f"{ms[-1] / ms[0]:.1f}x" if ms[0] > 0 else "-")
                lines.append(" | ".join(cells))
    return "\n".join(lines)


async def per_call_async(names: list[str], quick: bool) -> list[dict[str, Any]]:
    lengths = PER_CALL_LENGTHS_QUICK if quick else PER_CALL_LENGTHS
    calls = 10 if quick else 40
    rows = []
    for name in names:
        url, addr = BACKENDS[name]
        if not _reachable(addr):
            print(f"skip {name}: service not reachable")
            continue
        try:
            rows.append(await bench_per_call(name, url, lengths, calls))
        except ImportError as exc:
            print(f"skip {name}: {exc}")
    return rows


def table(rows: list[dict[str, Any]], lengths: tuple[int, ...]) -> str:
    head = ["backend"] + [f"step@{n:,}" for n in lengths] + [f"load@{n:,}" for n in lengths] + ["steps/s"]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in rows:
        cells = [r["backend"]]
        cells += [f"{r['lengths'][n]['step_ms']:.3f} ms" for n in lengths]
        cells += [f"{r['lengths'][n]['load_ms']:.2f} ms" for n in lengths]
        cells.append(f"{r['steps_per_s']:,.0f}")
        lines.append(" | ".join(cells))
    return "\n".join(lines)


async def main_async(names: list[str], quick: bool) -> list[dict[str, Any]]:
    lengths = (10, 100, 1000) if quick else (10, 100, 1000, 10000)
    steps = 50 if quick else 200
    rows = []
    for name in names:
        url, addr = BACKENDS[name]
        if not _reachable(addr):
            print(f"skip {name}: service not reachable")
            continue
        try:
            rows.append(await bench_backend(name, url, lengths, steps))
        except ImportError as exc:
            print(f"skip {name}: {exc}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--backends", default=None)
    parser.add_argument("--per-call", action="store_true", help="agent calls on long sessions (see above)")
    args = parser.parse_args()
    default = "memory,sqlite,redis,postgres" if args.per_call else ",".join(BACKENDS)
    names = [n.strip() for n in (args.backends or default).split(",") if n.strip()]
    meta: dict[str, Any] = {"python": platform.python_version(), "cpus": os.cpu_count()}
    if args.quick:
        meta["quick"] = True
    RESULTS.mkdir(exist_ok=True)
    if args.per_call:
        found = asyncio.run(per_call_async(names, args.quick))
        lengths = PER_CALL_LENGTHS_QUICK if args.quick else PER_CALL_LENGTHS
        print(per_call_table(found, lengths))
        dest = _result_path("state-per-call", args.quick)
        dest.write_text(json.dumps({**meta, "lengths": list(lengths), "rows": found}, indent=2) + "\n")
        print(f"\nwritten {dest}")
        return
    rows = asyncio.run(main_async(names, args.quick))
    lengths = (10, 100, 1000) if args.quick else (10, 100, 1000, 10000)
    print(table(rows, lengths))
    out = _result_path("state", args.quick)
    out.write_text(json.dumps({**meta, "rows": rows}, indent=2) + "\n")
    print(f"\nwritten {out}")


if __name__ == "__main__":
    main()
