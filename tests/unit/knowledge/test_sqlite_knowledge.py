"""SqliteKnowledgeStore: rows on disk, atomic replacement, tenant isolation, CJK, both vector engines."""

from __future__ import annotations

import asyncio
import math
import random
import re
import sqlite3
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt.errors import UserError
from agentrt.knowledge.base import Chunk, Document, KnowledgeStore
from agentrt.knowledge.stores import sqlite as store_module
from agentrt.knowledge.stores.sqlite import SqliteKnowledgeStore, match_terms
from agentrt.memory._text import _CJK as CJK_RANGES
from agentrt.memory._text import index_terms
from agentrt.testing import check_knowledge_store


def doc(source: str, text_hash: str = "h1", **metadata: Any) -> Document:
    return Document(source=source, title=f"Title of {source}", content_hash=text_hash, metadata=metadata)


def chunks(source: str, texts: list[str], *, vectors: list[list[float]] | None = None) -> list[Chunk]:
    return [
        Chunk(
            chunk_id=f"{source}#{i}",
            source=source,
            ordinal=i,
            text=text,
            heading_path=("Guide", f"Part {i}"),
            page=i + 1,
            tokens=len(text.split()),
            embedding=None if vectors is None else tuple(vectors[i]),
        )
        for i, text in enumerate(texts)
    ]


def rows(path: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Read the file through a separate connection (the store's own is not consulted)."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteKnowledgeStore]:
    s = SqliteKnowledgeStore(tmp_path / "kb" / "knowledge.db", vectors=False)
    yield s
    await s.close()


def vec_or_skip(path: Path | str) -> SqliteKnowledgeStore:
    """A store on the sqlite-vec engine, or a skip naming why this machine cannot load it."""
    try:
        store_module._sqlite_module(True)
    except UserError as exc:
        pytest.skip(str(exc))
    return SqliteKnowledgeStore(path, vectors=True)


async def test_implements_the_protocol_and_writes_rows(store: SqliteKnowledgeStore, tmp_path: Path) -> None:
    assert isinstance(store, KnowledgeStore)
    await store.upsert("alice", "docs", doc("a.md", tags=["x"]), chunks("a.md", ["alpha one", "alpha two"]))
    db = tmp_path / "kb" / "knowledge.db"
    assert (db.parent.stat().st_mode & 0o777) == 0o700
    assert rows(db, "PRAGMA journal_mode") == [("wal",)]
    assert rows(db, "SELECT namespace, kb, source, chunk_count FROM kb_documents") == [("alice", "docs", "a.md", 2)]
    assert rows(db, "SELECT chunk_id, ordinal FROM kb_chunks ORDER BY ordinal") == [("a.md#0", 0), ("a.md#1", 1)]
    assert rows(db, "SELECT count(*) FROM kb_fts") == [(2,)]
    assert await store.content_hash("alice", "docs", "a.md") == "h1"
    assert await store.content_hash("alice", "docs", "b.md") is None
    assert await store.content_hash("bob", "docs", "a.md") is None
    [document] = await store.documents("alice", "docs")
    assert (document.source, document.title, document.chunk_count) == ("a.md", "Title of a.md", 2)
    assert document.metadata == {"tags": ["x"]} and document.added_at > 0
    assert await store.kbs("alice") == ["docs"] and await store.kbs("bob") == []
    [hit, _] = await store.search_text("alice", "docs", "alpha", 5)
    assert hit.source == "a.md" and hit.title == "Title of a.md" and hit.score > 0
    assert hit.location == "page 1, Guide > Part 0" and hit.metadata == {"tags": ["x"]}
    assert store.vector_engine == "python"


async def test_replace_leaves_no_old_chunk(store: SqliteKnowledgeStore, tmp_path: Path) -> None:
    db = tmp_path / "kb" / "knowledge.db"
    await store.upsert("ns", "kb", doc("a.md"), chunks("a.md", ["old banana", "old cherry", "old damson"]))
    await store.upsert("ns", "kb", doc("a.md", "h2"), chunks("a.md", ["new elderberry"]))
    assert rows(db, "SELECT text FROM kb_chunks") == [("new elderberry",)]
    assert rows(db, "SELECT count(*) FROM kb_fts") == [(1,)]
    assert rows(db, "SELECT content_hash, chunk_count FROM kb_documents") == [("h2", 1)]
    assert await store.search_text("ns", "kb", "banana cherry", 5) == []
    assert [p.text for p in await store.search_text("ns", "kb", "elderberry", 5)] == ["new elderberry"]


async def test_a_failed_upsert_keeps_every_old_chunk(
    store: SqliteKnowledgeStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "kb" / "knowledge.db"
    await store.upsert("ns", "kb", doc("a.md"), chunks("a.md", ["old banana", "old cherry", "old damson"]))
    before = rows(db, "SELECT seq, chunk_id, text FROM kb_chunks ORDER BY seq")
    calls = 0
    real = index_terms

    def failing(text: str) -> str:
        nonlocal calls
        calls += 1
        if calls == 3:  # the second new chunk's body: one chunk already written in the transaction
            raise RuntimeError("disk on fire")
        return real(text)

    monkeypatch.setattr("agentrt.knowledge.stores.sqlite.index_terms", failing)
    with pytest.raises(RuntimeError, match="disk on fire"):
        await store.upsert("ns", "kb", doc("a.md", "h2"), chunks("a.md", ["new one", "new two", "new three"]))
    monkeypatch.undo()
    assert rows(db, "SELECT seq, chunk_id, text FROM kb_chunks ORDER BY seq") == before
    assert rows(db, "SELECT content_hash, chunk_count FROM kb_documents") == [("h1", 3)]
    assert rows(db, "SELECT count(*) FROM kb_fts") == [(3,)]
    assert len(await store.search_text("ns", "kb", "banana cherry damson", 5)) == 3


async def test_delete_drop_and_kbs(store: SqliteKnowledgeStore, tmp_path: Path) -> None:
    db = tmp_path / "kb" / "knowledge.db"
    await store.upsert("ns", "one", doc("a.md"), chunks("a.md", ["apple"]))
    await store.upsert("ns", "one", doc("b.md"), chunks("b.md", ["banana", "blueberry"]))
    await store.upsert("ns", "two", doc("a.md"), chunks("a.md", ["apple"]))
    await store.upsert("other", "one", doc("a.md"), chunks("a.md", ["apple"]))
    assert await store.kbs("ns") == ["one", "two"]
    assert await store.delete("ns", "one", "b.md") is True
    assert await store.delete("ns", "one", "b.md") is False
    assert rows(db, "SELECT count(*) FROM kb_chunks WHERE text IN ('banana', 'blueberry')") == [(0,)]
    assert await store.drop("ns", "one") == 1
    assert await store.drop("ns", "one") == 0
    assert await store.kbs("ns") == ["two"]
    assert await store.kbs("other") == ["one"]
    assert rows(db, "SELECT count(*) FROM kb_chunks") == [(2,)] and rows(db, "SELECT count(*) FROM kb_fts") == [(2,)]
    assert [p.source for p in await store.search_text("other", "one", "apple", 5)] == ["a.md"]


async def test_filters(store: SqliteKnowledgeStore) -> None:
    await store.upsert("ns", "kb", doc("a.md", tags=["linux", "install"], date="2024-03-01", lang="en", n=3), [])
    await store.upsert("ns", "kb", doc("a.md", tags=["linux", "install"], date="2024-03-01", lang="en", n=3),
                       chunks("a.md", ["install guide"]))  # fmt: skip
    await store.upsert("ns", "kb", doc("b.md", tags=["linux"], date="2024-06-15T10:00:00", lang="fr"),
                       chunks("b.md", ["install notes"]))  # fmt: skip
    await store.upsert("ns", "kb", doc("c.md"), chunks("c.md", ["install faq"]))

    async def sources(filters: dict[str, Any]) -> list[str]:
        return sorted(p.source for p in await store.search_text("ns", "kb", "install", 10, filters))

    assert await sources({}) == ["a.md", "b.md", "c.md"]
    assert await sources({"source": "b.md"}) == ["b.md"]
    assert await sources({"source": ["a.md", "c.md"]}) == ["a.md", "c.md"]
    assert await sources({"source": []}) == []
    assert await sources({"tags": ["linux"]}) == ["a.md", "b.md"]
    assert await sources({"tags": ["linux", "install"]}) == ["a.md"]
    assert await sources({"tags": "install"}) == ["a.md"]
    assert await sources({"since": "2024-04-01"}) == ["b.md"]
    assert await sources({"until": "2024-06-15"}) == ["a.md", "b.md"]  # a date bound takes the whole day
    from datetime import date, datetime

    assert await sources({"since": date(2024, 3, 1), "until": datetime(2024, 6, 15, 9, 0)}) == ["a.md"]
    assert await sources({"lang": "fr"}) == ["b.md"]
    assert await sources({"n": 3}) == ["a.md"]
    assert await sources({"n": "3"}) == []
    assert await sources({"lang": None}) == []
    assert await sources({"missing'); DROP TABLE kb_chunks; --": "x"}) == []
    assert await sources({}) == ["a.md", "b.md", "c.md"]
    with pytest.raises(UserError):
        await sources({"since": "last week"})
    with pytest.raises(UserError):
        await sources({"source": [1]})


def test_match_terms_are_plain_words() -> None:
    assert match_terms('NEAR(a b) "x" chunks: foo* AND ^bar') == ["near", "chunks", "foo", "bar"]
    assert match_terms("我每天早上喝咖啡") == ["我每", "每天", "天早", "早上", "上喝", "喝咖", "咖啡"]
    assert match_terms("猫") == ["猫"]
    assert match_terms("how do users log in") == ["users", "log"]
    assert match_terms("what is it") == ["what", "is", "it"]  # only stop words: keep them
    assert match_terms("!!! ???") == []


async def test_cjk_query_finds_cjk_text(store: SqliteKnowledgeStore) -> None:
    await store.upsert("ns", "kb", doc("zh.md"), chunks("zh.md", ["我每天早上喝咖啡", "北京是中国的首都"]))
    await store.upsert("ns", "kb", doc("ja.md"), chunks("ja.md", ["東京タワーは高いです"]))
    assert [p.text for p in await store.search_text("ns", "kb", "咖啡", 1)] == ["我每天早上喝咖啡"]
    assert [p.text for p in await store.search_text("ns", "kb", "中国的首都在哪里", 1)] == ["北京是中国的首都"]
    assert [p.text for p in await store.search_text("ns", "kb", "東京タワー", 1)] == ["東京タワーは高いです"]


_INJECTIONS = [
    'NEAR("a" "b")',
    '"',
    "*",
    "a*",
    "AND",
    "OR NOT",
    "^secret",
    "chunks: secret",
    "scope: x",
    "{head body}: secret",
    "body : secret",
    "secret' OR 1=1 --",
    "); DROP TABLE kb_chunks; --",
    "(",
    ")",
    "+",
    "-secret",
    "\x00",
]


def test_untrusted_queries_never_raise_nor_cross_tenants(tmp_path: Path) -> None:
    store = SqliteKnowledgeStore(tmp_path / "k.db", vectors=False)
    loop = asyncio.new_event_loop()
    run: Callable[[Any], Any] = loop.run_until_complete
    try:
        run(store.upsert("mine", "kb", doc("m.md"), chunks("m.md", ["public text about secret plans"])))
        run(store.upsert("theirs", "kb", doc("t.md"), chunks("t.md", ["secret text near and or not"])))
        run(store.upsert("mine", "other", doc("o.md"), chunks("o.md", ["secret in another kb"])))
        their_scope = store_module.scope_token("theirs", "kb")

        @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
        @given(
            query=st.one_of(
                st.text(max_size=60),
                st.lists(st.sampled_from([*_INJECTIONS, "secret", their_scope, "text", "咖啡"]), max_size=6).map(
                    " ".join
                ),
            )
        )
        def check(query: str) -> None:
            for term in match_terms(query):
                # Letters, digits or code points of the CJK blocks (unassigned ones included): never a
                # quote, space or operator character, so the quoted term is one FTS5 string.
                assert re.fullmatch(rf"(?:\w|[{CJK_RANGES}])+", term), term
            found = run(store.search_text("mine", "kb", query, 10))
            assert all(p.source == "m.md" for p in found), (query, found)

        check()
        assert [p.source for p in run(store.search_text("mine", "kb", "secret", 10))] == ["m.md"]
    finally:
        run(store.close())
        loop.close()


VECTORS = [
    [1.0, 0.0, 0.0, 0.0],
    [0.9, 0.1, 0.0, 0.0],
    [0.5, 0.5, 0.1, 0.0],
    [0.0, 1.0, 0.0, 0.2],
    [0.0, 0.0, 1.0, 0.0],
    [-1.0, 0.2, 0.0, 0.3],
]


async def fill_vectors(store: SqliteKnowledgeStore) -> None:
    texts = [f"text {i}" for i in range(len(VECTORS))]
    await store.upsert("ns", "kb", doc("v.md", tags=["t"]), chunks("v.md", texts, vectors=VECTORS))
    await store.upsert("ns", "kb", doc("plain.md"), chunks("plain.md", ["no vector here"]))
    await store.upsert("ns", "kb", doc("zero.md"), chunks("zero.md", ["zero"], vectors=[[0.0, 0.0, 0.0, 0.0]]))
    await store.upsert("ns", "kb", doc("short.md"), chunks("short.md", ["3 dims"], vectors=[[1.0, 0.0, 0.0]]))
    await store.upsert("other", "kb", doc("x.md"), chunks("x.md", ["theirs"], vectors=[[1.0, 0.0, 0.0, 0.0]]))


async def ranking(store: SqliteKnowledgeStore, query: list[float], k: int = 10) -> list[tuple[str, float]]:
    return [(p.chunk_id, round(p.score, 4)) for p in await store.search_vector("ns", "kb", query, k)]


async def test_python_vector_search(store: SqliteKnowledgeStore, tmp_path: Path) -> None:
    await fill_vectors(store)
    found = await ranking(store, [1.0, 0.05, 0.0, 0.0])
    assert [cid for cid, _ in found] == ["v.md#0", "v.md#1", "v.md#2", "v.md#3", "v.md#4", "v.md#5"]
    assert found[0][1] == pytest.approx(1.0 / math.sqrt(1.0025), abs=1e-3)
    assert await store.search_vector("ns", "kb", [0.0, 0.0, 0.0, 0.0], 3) == []
    assert [p.chunk_id for p in await store.search_vector("ns", "kb", [1.0, 0.0, 0.0], 3)] == ["short.md#0"]
    only_tagged = await store.search_vector("ns", "kb", [0.0, 0.0, 1.0, 0.0], 2, {"tags": ["t"]})
    assert [p.chunk_id for p in only_tagged] == ["v.md#4", "v.md#2"]
    blobs = rows(tmp_path / "kb" / "knowledge.db", "SELECT dims, length(embedding) FROM kb_chunks ORDER BY seq")
    assert blobs[:6] == [(4, 16)] * 6 and (None, None) in blobs


async def test_sqlite_vec_and_python_rank_alike(tmp_path: Path) -> None:
    fast = vec_or_skip(tmp_path / "vec.db")
    slow = SqliteKnowledgeStore(tmp_path / "py.db", vectors=False)
    try:
        for s in (fast, slow):
            await fill_vectors(s)
        assert fast.vector_engine == "sqlite-vec" and slow.vector_engine == "python"
        rng = random.Random(7)
        for _ in range(20):
            query = [rng.uniform(-1, 1) for _ in range(4)]
            a, b = await ranking(fast, query, 4), await ranking(slow, query, 4)
            assert [cid for cid, _ in a] == [cid for cid, _ in b]
            assert [s for _, s in a] == pytest.approx([s for _, s in b], abs=1e-4)
        filtered = await fast.search_vector("ns", "kb", [0.0, 0.0, 1.0, 0.0], 2, {"tags": ["t"]})
        assert [p.chunk_id for p in filtered] == ["v.md#4", "v.md#2"]
        assert await fast.search_vector("other", "kb", [1.0, 0.0, 0.0, 0.0], 5) != []
        assert {p.source for p in await fast.search_vector("ns", "kb", [1.0, 0.0, 0.0, 0.0], 50)} == {"v.md"}
    finally:
        await fast.close()
        await slow.close()
    # the file the extension wrote opens without it
    reopened = SqliteKnowledgeStore(tmp_path / "vec.db", vectors=False)
    assert [p.chunk_id for p in await reopened.search_vector("ns", "kb", [1.0, 0.0, 0.0, 0.0], 1)] == ["v.md#0"]
    await reopened.close()


async def test_vectors_true_without_the_extension_is_a_user_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "sqlite_vec", None)  # makes `import sqlite_vec` raise ImportError
    store = SqliteKnowledgeStore(tmp_path / "k.db", vectors=True)
    with pytest.raises(UserError, match="sqlite-vec"):
        await store.kbs("ns")
    await store.close()
    auto = SqliteKnowledgeStore(tmp_path / "k.db")
    assert await auto.kbs("ns") == [] and auto.vector_engine == "python"
    await auto.close()


async def test_memory_database_and_closed_store() -> None:
    store = SqliteKnowledgeStore(":memory:", vectors=False)
    await store.upsert("ns", "kb", doc("a"), chunks("a", ["hello world"]))
    assert [p.text for p in await store.search_text("ns", "kb", "hello", 3)] == ["hello world"]
    assert await store.search_text("ns", "kb", "hello", 0) == []
    with pytest.raises(UserError):
        await store.upsert("ns", "kb", doc("a"), chunks("b", ["wrong source"]))
    await store.close()
    await store.close()
    with pytest.raises(UserError, match="closed"):
        await store.kbs("ns")


async def test_ten_thousand_chunks(tmp_path: Path) -> None:
    store = SqliteKnowledgeStore(tmp_path / "big.db", vectors=False)
    rng = random.Random(1)
    words = [f"w{i}" for i in range(2000)]
    try:
        for d in range(100):
            texts = [" ".join(rng.choice(words) for _ in range(40)) + f" doc{d} part{i}" for i in range(100)]
            vectors = [[rng.uniform(-1, 1) for _ in range(16)] for _ in range(100)]
            await store.upsert("ns", "kb", doc(f"d{d}.md"), chunks(f"d{d}.md", texts, vectors=vectors))
        assert rows(tmp_path / "big.db", "SELECT count(*) FROM kb_chunks") == [(10_000,)]
        found = await store.search_text("ns", "kb", "doc42 part7", 3)
        assert found[0].chunk_id == "d42.md#7"
        near = await store.search_vector("ns", "kb", [1.0] * 16, 5)
        assert len(near) == 5 and near[0].score >= near[-1].score
    finally:
        await store.close()


@pytest.mark.parametrize("vectors", [False, True], ids=["python-cosine", "sqlite-vec"])
async def test_both_engines_pass_the_contract(tmp_path: Path, vectors: bool) -> None:
    path = tmp_path / "contract.db"
    if vectors:
        vec_or_skip(path)
    await check_knowledge_store(lambda: SqliteKnowledgeStore(path, vectors=vectors), persistent=True)
