"""Context compression and long-term memory latency.

Compression (no model call involved) for histories of 100 / 1,000 / 10,000 messages (tool rounds
whose results hold ~2,000 characters, mixed English and Chinese, a user input every ten rounds):
  * check: the per-step cost when the prompt is under the trigger (build the view, count it);
  * tier 1: a compression that cuts old tool results and stops there;
  * tier 3: a compression that cuts old results, then keeps only the last rounds (summaries off);
each with a cold compressor (nothing memoised, not even per-text token counts: a process seeing the
session for the first time) and a warm one (the same compressor again: within a process, where each
message is counted once when it arrives), median of several runs.

Long-term memory: `retrieve(k=5)` and `record` (one fact) with 50 and 10,000 items per user, on
SQLite (FTS5 + BM25), SQLite with 256-dimension vectors (cosine scan of up to 2,000 items fused by
RRF), and PostgreSQL when reachable on 127.0.0.1:5432. Median and p95 over 200 queries.

Prints a table and writes benchmarks/results/context.json.
Run: `.venv/bin/python benchmarks/context.py [--quick]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import socket
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from agentrt.memory import ContextConfig, SqliteLongTermMemory
from agentrt.memory.compression import ContextCompressor
from agentrt.message import Msg, TokenUsage, ToolResultBlock, ToolUseBlock
from agentrt.model import ScriptedModel, tokens
from agentrt.state.base import AgentState

RESULTS = Path(__file__).parent / "results"
MODEL = "openai:gpt-4o"
SYSTEM = [Msg.system("You are a research assistant. Use the tools to answer precisely.")]
WORDS = [
    "revenue",
    "quarter",
    "growth",
    "margin",
    "customer",
    "invoice",
    "region",
    "forecast",
    "budget",
    "supplier",
    "contract",
    "shipment",
    "营收",
    "季度",
    "增长",
    "客户",
    "发票",
    "地区",
    "预测",
    "预算",
    "供应商",
    "合同",
]


class Run:
    """The slice of `agentrt.agent.Run` the compressor uses."""

    def __init__(self, messages: list[Msg]) -> None:
        self.state = AgentState(user_id="bench", session_id="s", messages=messages)

    def set_field(self, name: str, value: Any) -> None:
        setattr(self.state, name, value)

    async def checkpoint(self) -> None:
        return None

    def add_usage(self, usage: TokenUsage) -> None:
        return None

    def event(self, kind: Any, **fields: Any) -> None:
        return None


def history(n: int, seed: int = 7) -> list[Msg]:
    rnd = random.Random(seed)
    out = [Msg.user("Compile the 2023 revenue of every region from the ledger pages.")]
    i = 0
    while len(out) < n:
        if i % 10 == 9:
            out.append(Msg.user(f"Also check region {i} and note any invoice over 10,000 EUR."))
        call = ToolUseBlock(id=f"c{i}", name="read_ledger", input={"page": i, "region": f"R{i % 12}"})
        text = " ".join(rnd.choice(WORDS) + str(rnd.randint(0, 999)) for _ in range(330))
        out.append(Msg(role="assistant", content=[call]))
        out.append(Msg(role="user", content=[ToolResultBlock(id=call.id, name=call.name, output=text)]))
        i += 1
    return out[:n] if out[n - 1].role == "user" and out[n - 1].content else out


def _summary() -> ScriptedModel:
    return ScriptedModel.from_function(lambda request: "unused")


async def bench_compression(n: int, reps: int) -> dict[str, Any]:
    messages = history(n)
    probe = ContextCompressor(ContextConfig())
    state = AgentState(messages=messages)
    full = probe.count_prompt(state, SYSTEM, [], [], MODEL)
    state.metadata = {"agentrt.context": {"truncate_before": len(messages)}}
    cut = probe.count_prompt(state, SYSTEM, [], [], MODEL)
    # tier 1 alone: the trigger sits between the cut and the full size
    t1_config = ContextConfig(
        max_tokens=int((full + cut) / 2 / 0.7) + 5000, reserve_output_tokens=5000, keep_recent_rounds=3
    )
    t3_config = ContextConfig(max_tokens=32_000, keep_recent_rounds=3, max_summary_calls=0)
    check_config = ContextConfig(max_tokens=int(full / 0.5) + 5000, reserve_output_tokens=5000)
    result: dict[str, Any] = {"messages": n, "prompt_tokens": full}
    summary = _summary()

    async def compress(config: ContextConfig, compressor: ContextCompressor | None) -> tuple[float, list[int]]:
        run = Run(list(messages))
        if compressor is None:  # cold: nothing memoised, not even the per-text token counts
            tokens._estimate_cached.cache_clear()
            tokens._tiktoken_count.cache_clear()
        c = compressor or ContextCompressor(config)
        t0 = time.perf_counter()
        steps = await c.compress(run, SYSTEM, [], [], MODEL, None, lambda: summary)  # type: ignore[arg-type]
        return time.perf_counter() - t0, [s.tier for s in steps]

    for name, config in (("tier1", t1_config), ("tier3", t3_config)):
        cold, warm, tiers = [], [], []
        warm_compressor = ContextCompressor(config)
        await compress(config, warm_compressor)
        for _ in range(reps):
            elapsed, tiers = await compress(config, None)
            cold.append(elapsed)
            elapsed, _ = await compress(config, warm_compressor)
            warm.append(elapsed)
        result[name] = {
            "cold_ms": statistics.median(cold) * 1e3,
            "warm_ms": statistics.median(warm) * 1e3,
            "tiers": tiers,
        }

    compressor = ContextCompressor(check_config)
    run = Run(list(messages))
    await compressor.prepare(run, SYSTEM, [], [], ScriptedModel(name="gpt-4o"), None, lambda: summary)
    checks = []
    for _ in range(max(reps, 20)):
        t0 = time.perf_counter()
        await compressor.prepare(run, SYSTEM, [], [], ScriptedModel(name="gpt-4o"), None, lambda: summary)
        checks.append(time.perf_counter() - t0)
    result["check_ms"] = statistics.median(checks) * 1e3
    return result


# -- long-term memory ----------------------------------------------------------------------------------
FACT_SUBJECTS = ["prefers", "lives in", "works at", "is allergic to", "speaks", "owns", "plays", "studies", "visited"]
FACT_OBJECTS = [
    "coffee",
    "tea",
    "Lyon",
    "Paris",
    "Berlin",
    "ACME",
    "Globex",
    "peanuts",
    "shellfish",
    "French",
    "German",
    "Rust",
    "Python",
    "cello",
    "piano",
    "chess",
    "tennis",
    "physics",
    "history",
    "Tokyo",
    "Kyoto",
    "咖啡",
    "绿茶",
    "上海",
    "北京",
    "围棋",
    "钢琴",
]


def fact(rnd: random.Random, i: int) -> str:
    return f"The user {rnd.choice(FACT_SUBJECTS)} {rnd.choice(FACT_OBJECTS)} and {rnd.choice(FACT_OBJECTS)} (note {i})"


def vector_embed(texts: list[str]) -> list[list[float]]:
    out = []
    for text in texts:
        rnd = random.Random(text)
        out.append([rnd.uniform(-1, 1) for _ in range(256)])
    return out


async def bench_memory(name: str, make: Any, sizes: tuple[int, ...], queries: int) -> dict[str, Any]:
    row: dict[str, Any] = {"backend": name, "sizes": {}}
    for size in sizes:
        memory = await make()
        try:
            user = f"bench-{uuid.uuid4().hex[:8]}"
            rnd = random.Random(size)
            texts = [fact(rnd, i) for i in range(size)]
            for start in range(0, size, 500):
                await memory.record(user, texts[start : start + 500])
            retrieve, record = [], []
            for q in range(queries):
                query = f"what does the user {rnd.choice(FACT_SUBJECTS)} {rnd.choice(FACT_OBJECTS)}"
                t0 = time.perf_counter()
                found = await memory.retrieve(user, query, k=5)
                retrieve.append(time.perf_counter() - t0)
                assert found
                t0 = time.perf_counter()
                await memory.record(user, [fact(rnd, size + q)])
                record.append(time.perf_counter() - t0)
            row["sizes"][size] = {
                "retrieve_ms": statistics.median(retrieve) * 1e3,
                "retrieve_p95_ms": sorted(retrieve)[int(len(retrieve) * 0.95) - 1] * 1e3,
                "record_ms": statistics.median(record) * 1e3,
            }
        finally:
            if hasattr(memory, "drop_tables"):
                await memory.drop_tables()
            await memory.close()
    return row


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


async def main_async(quick: bool) -> dict[str, Any]:
    lengths = (100, 1000) if quick else (100, 1000, 10000)
    reps = 3 if quick else 7
    compression = []
    for n in lengths:
        compression.append(await bench_compression(n, reps if n < 10000 else 3))
    with tempfile.TemporaryDirectory(prefix="agentrt-bench-memory-") as folder:
        memory_rows = await bench_memories(Path(folder), quick)
    return {"compression": compression, "memory": memory_rows}


async def bench_memories(tmp: Path, quick: bool) -> list[dict[str, Any]]:
    queries = 50 if quick else 200
    sizes = (50, 10_000) if not quick else (50, 2_000)

    async def sqlite() -> Any:
        return SqliteLongTermMemory(tmp / f"{uuid.uuid4().hex}.db", cap=None)

    async def sqlite_vectors() -> Any:
        return SqliteLongTermMemory(tmp / f"{uuid.uuid4().hex}.db", cap=None, embed=vector_embed)

    memory_rows = [
        await bench_memory("sqlite (FTS5/BM25)", sqlite, sizes, queries),
        await bench_memory("sqlite + 256-d vectors", sqlite_vectors, sizes, queries),
    ]
    if _reachable("127.0.0.1", 5432):
        from agentrt.memory import PostgresLongTermMemory

        async def postgres() -> Any:
            return PostgresLongTermMemory(
                "postgresql+asyncpg://postgres@127.0.0.1:5432/test",
                table_prefix=f"bench_{uuid.uuid4().hex[:8]}_",
                cap=None,
            )

        memory_rows.append(await bench_memory("postgres (tsvector)", postgres, sizes, queries))
    else:
        print("skip postgres: not reachable on 127.0.0.1:5432")
    return memory_rows


def tables(data: dict[str, Any]) -> str:
    lines = [
        "messages | prompt tokens | check (under trigger) | tier 1 cold | tier 1 warm | tier 3 cold | tier 3 warm",
        "---|---|---|---|---|---|---",
    ]
    for r in data["compression"]:
        lines.append(
            f"{r['messages']:,} | {r['prompt_tokens']:,} | {r['check_ms']:.3f} ms | {r['tier1']['cold_ms']:.2f} ms | "
            f"{r['tier1']['warm_ms']:.2f} ms | {r['tier3']['cold_ms']:.2f} ms | {r['tier3']['warm_ms']:.2f} ms"
        )
    lines += [
        "",
        "memory backend | items/user | retrieve k=5 (median) | retrieve p95 | record 1 fact",
        "---|---|---|---|---",
    ]
    for row in data["memory"]:
        for size, s in row["sizes"].items():
            lines.append(
                f"{row['backend']} | {size:,} | {s['retrieve_ms']:.2f} ms | {s['retrieve_p95_ms']:.2f} ms | "
                f"{s['record_ms']:.2f} ms"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    data = asyncio.run(main_async(args.quick))
    print(tables(data))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "context.json"
    out.write_text(
        json.dumps({"python": platform.python_version(), "cpus": os.cpu_count(), "quick": args.quick, **data}, indent=2)
    )
    print(f"\nwritten {out}")


if __name__ == "__main__":
    main()
