"""SqliteLongTermMemory: the shared contract, its thread, vectors fused with BM25, validation."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from memtest_helpers import trigram_embed

from agentrt.errors import UserError
from agentrt.memory import LongTermMemory, MemoryItem, SqliteLongTermMemory
from agentrt.memory._text import index_terms, query_terms, rrf
from agentrt.testing import FakeClock, check_long_term_memory


def test_sqlite_has_fts5() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(x)")


async def test_contract_on_a_file(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "memory.db"
    await check_long_term_memory(lambda **kw: SqliteLongTermMemory(path, **kw), persistent=True)
    assert path.exists()


async def test_contract_in_memory() -> None:
    await check_long_term_memory(lambda **kw: SqliteLongTermMemory(":memory:", **kw))


async def test_contract_with_embeddings(tmp_path: Path) -> None:
    await check_long_term_memory(
        lambda **kw: SqliteLongTermMemory(tmp_path / "v.db", embed=trigram_embed, **kw), persistent=True
    )


async def test_all_io_runs_in_one_worker_thread(tmp_path: Path) -> None:
    memory = SqliteLongTermMemory(tmp_path / "m.db")
    await memory.record("u", ["warm up"])
    threads: set[int] = set()

    def trace() -> None:
        assert memory._conn is not None
        memory._conn.set_trace_callback(lambda sql: threads.add(threading.get_ident()))

    await memory._run(trace)
    await asyncio.gather(
        memory.record("u", ["one fact"]),
        memory.retrieve("u", "fact"),
        memory.list("u"),
        memory.forget("u", ["nope"]),
    )
    assert len(threads) == 1 and threading.get_ident() not in threads
    await memory.close()
    await memory.close()
    with pytest.raises(UserError, match="closed"):
        await memory.list("u")


# -- vectors ----------------------------------------------------------------------------------------
TOPICS = {
    "drink": ("coffee", "espresso", "tea", "beverage", "drinks", "latte"),
    "place": ("lyon", "paris", "city", "lives", "moved", "home"),
    "code": ("rust", "python", "programming", "language", "compiler"),
}


def keyword_embed(texts: list[str]) -> list[list[float]]:
    """A toy embedding: one dimension per topic, so synonyms with no shared word are close."""
    out = []
    for text in texts:
        lowered = text.lower()
        out.append([float(sum(word in lowered for word in words)) + 0.01 for words in TOPICS.values()])
    return out


async def async_keyword_embed(texts: list[str]) -> list[list[float]]:
    await asyncio.sleep(0)
    return keyword_embed(texts)


@pytest.mark.parametrize("embed", [keyword_embed, async_keyword_embed], ids=["sync", "async"])
async def test_vectors_find_what_words_miss_and_fuse_with_bm25(tmp_path: Path, embed: Any) -> None:
    memory = SqliteLongTermMemory(tmp_path / "v.db", embed=embed)
    await memory.record(
        "u", ["The user loves espresso in the morning", "The user lives in Lyon", "The user writes Rust at work"]
    )
    # No word in common with the espresso fact: only the vector can find it.
    found = await memory.retrieve("u", "hot beverage suggestions", k=1)
    assert [i.text for i in found] == ["The user loves espresso in the morning"]
    # Words and vectors agree: the fused ranking puts it first.
    found = await memory.retrieve("u", "which programming language", k=3)
    assert found[0].text == "The user writes Rust at work"
    assert await memory.retrieve("v", "espresso") == [], "vectors are per user too"
    await memory.close()


async def test_vector_scan_covers_the_most_recently_used_items_only(tmp_path: Path) -> None:
    clock = FakeClock()
    memory = SqliteLongTermMemory(tmp_path / "v.db", embed=keyword_embed, vector_scan_limit=1, clock=clock)
    await memory.record("u", ["The user loves espresso"])
    clock.advance(1)
    await memory.record("u", ["The user lives in Lyon"])
    found = await memory.retrieve("u", "beverage", k=2)
    assert [i.text for i in found] == ["The user lives in Lyon"], "only the newest item was scanned"
    await memory.close()


async def test_a_failing_embedder_fails_the_call(tmp_path: Path) -> None:
    def broken(texts: list[str]) -> list[list[float]]:
        return []

    memory = SqliteLongTermMemory(tmp_path / "v.db", embed=broken)
    with pytest.raises(UserError, match="0 vectors for 1 texts"):
        await memory.record("u", ["x"])
    await memory.close()


# -- details ----------------------------------------------------------------------------------------
async def test_recording_memory_items_keeps_their_id_and_creation_time(tmp_path: Path) -> None:
    clock = FakeClock()
    memory = SqliteLongTermMemory(tmp_path / "m.db", clock=clock)
    old = MemoryItem("imported-1", "The user speaks Finnish", 1_000.0, 2_000.0)
    [item] = await memory.record("u", [old])
    assert item == MemoryItem("imported-1", "The user speaks Finnish", 1_000.0, clock.now)
    [other] = await memory.record("v", [old])
    assert other.id != "imported-1", "an id taken by another user's item is replaced"
    await memory.close()


async def test_single_cjk_characters_and_mixed_scripts(tmp_path: Path) -> None:
    memory = SqliteLongTermMemory(tmp_path / "m.db")
    await memory.record("u", ["用户喜欢茶", "사용자는 서울에 산다", "The user's Wi-Fi password hint is 'naïve café'"])
    assert [i.text for i in await memory.retrieve("u", "茶", k=1)] == ["用户喜欢茶"]
    assert [i.text for i in await memory.retrieve("u", "서울", k=1)] == ["사용자는 서울에 산다"]
    [cafe] = await memory.retrieve("u", "NAIVE CAFE", k=1)
    assert cafe.text.startswith("The user's Wi-Fi")
    await memory.close()


def test_terms() -> None:
    assert index_terms("用户喜欢茶") == "用 户 喜 欢 茶 用户 户喜 喜欢 欢茶"
    assert query_terms("用户喜欢茶") == ["用户", "户喜", "喜欢", "欢茶"]
    assert query_terms("What does the user like? 茶 x 42") == ["like", "茶", "42"]
    assert query_terms("a " * 10) == []
    assert rrf([["a", "b", "c"], ["c", "a"]]) == ["a", "c", "b"]


def test_validation(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="ttl"):
        SqliteLongTermMemory(tmp_path / "m.db", ttl=timedelta(0))
    with pytest.raises(UserError, match="cap"):
        SqliteLongTermMemory(tmp_path / "m.db", cap=0)
    with pytest.raises(UserError, match="vector_scan_limit"):
        SqliteLongTermMemory(tmp_path / "m.db", vector_scan_limit=0)
    assert isinstance(SqliteLongTermMemory(tmp_path / "m.db"), LongTermMemory)


async def test_record_rejects_non_texts(tmp_path: Path) -> None:
    memory = SqliteLongTermMemory(tmp_path / "m.db")
    with pytest.raises(UserError, match="texts or MemoryItems"):
        await memory.record("u", [42])  # type: ignore[list-item]
    assert [i.text for i in await memory.record("u", "a single string")] == ["a single string"]
    await memory.close()


async def test_clear_and_ttl_none(tmp_path: Path) -> None:
    clock = FakeClock()
    memory = SqliteLongTermMemory(tmp_path / "m.db", ttl=None, cap=None, clock=clock)
    await memory.record("u", [f"fact {i}" for i in range(60)])
    clock.advance(10 * 365 * 86_400)
    assert len(await memory.list("u")) == 60, "no TTL, no cap"
    assert await memory.clear("u") == 60
    assert await memory.list("u") == []
    await memory.close()
