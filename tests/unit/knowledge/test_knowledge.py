"""`Knowledge`: idempotent ingestion, replacement, hybrid search, tenants, validation, store URLs."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.errors import InvalidTypeError, InvalidValueError, UserError
from agentrt.knowledge import Chunk, Document, Knowledge, KnowledgeStore, MemoryKnowledgeStore, Passage
from agentrt.knowledge.fusion import reciprocal_rank_fusion
from agentrt.knowledge.knowledge import store_from_url
from agentrt.knowledge.loaders import file_source, text_source
from agentrt.memory.retrieval import Retriever

CONCEPTS = {
    "car": 0,
    "cars": 0,
    "automobile": 0,
    "vehicle": 0,
    "banana": 1,
    "fruit": 1,
    "apple": 1,
    "rain": 2,
    "weather": 2,
    "storm": 2,
}


def fake_embed(texts: list[str]) -> list[list[float]]:
    """A deterministic embedder: one dimension per concept, so synonyms are close and words are not."""
    out = []
    for text in texts:
        vector = [0.0] * 4
        for word in text.lower().replace(".", " ").split():
            vector[CONCEPTS.get(word, 3)] += 1.0 if word in CONCEPTS else 0.05
        out.append(vector)
    return out


class CountingStore(MemoryKnowledgeStore):
    """A memory store that counts its writes."""

    def __init__(self) -> None:
        super().__init__()
        self.upserts: list[str] = []
        self.closed = 0

    async def upsert(self, namespace: str, kb: str, document: Document, chunks: Sequence[Chunk]) -> None:
        self.upserts.append(document.source)
        await super().upsert(namespace, kb, document, chunks)

    async def close(self) -> None:
        self.closed += 1


def test_knowledge_is_a_retriever() -> None:
    assert isinstance(Knowledge(store=MemoryKnowledgeStore()), Retriever)


async def test_re_adding_an_unchanged_file_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "faq.md"
    path.write_text("# FAQ\n\nThe office opens at nine.\n", encoding="utf-8")
    store = CountingStore()
    kb = Knowledge("faq", store=store)
    first = await kb.add(path)
    assert first.added == (file_source(path),) and first.chunks == 1
    second = await kb.add(path)
    assert second.added == () and second.skipped == (file_source(path),) and second.chunks == 0
    monkeypatch.chdir(tmp_path)
    third = await kb.add("faq.md")  # the same file spelled relatively: the same source
    assert third.skipped == (file_source(path),)
    assert store.upserts == [file_source(path)], "the unchanged file was written once"


async def test_a_changed_file_replaces_its_chunks(tmp_path: Path) -> None:
    path = tmp_path / "policy.md"
    path.write_text("# Policy\n\nRemote work is allowed on Fridays.\n", encoding="utf-8")
    store = CountingStore()
    kb = Knowledge("hr", store=store)
    await kb.add(path)
    path.write_text("# Policy\n\nRemote work is allowed on Mondays.\n", encoding="utf-8")
    report = await kb.add(path)
    assert report.added == (file_source(path),)
    assert store.upserts == [file_source(path)] * 2
    assert await kb.search("Fridays") == [], "the old chunk is gone"
    (hit,) = await kb.search("Mondays")
    assert hit.source == file_source(path) and hit.location == "Policy"
    (doc,) = await kb.documents()
    assert doc.chunk_count == 1 and doc.title == "Policy"


async def test_new_metadata_or_chunk_settings_reindex_an_unchanged_file(tmp_path: Path) -> None:
    path = tmp_path / "a.md"
    path.write_text("Alpha text.", encoding="utf-8")
    store = CountingStore()
    await Knowledge("k", store=store).add(path, metadata={"tags": ["x"]})
    await Knowledge("k", store=store).add(path, metadata={"tags": ["x"]})
    assert len(store.upserts) == 1
    await Knowledge("k", store=store).add(path, metadata={"tags": ["y"]})
    assert len(store.upserts) == 2, "changed metadata re-indexes"
    await Knowledge("k", store=store, chunk_tokens=200).add(path, metadata={"tags": ["y"]})
    assert len(store.upserts) == 3, "changed chunk settings re-index"
    await Knowledge("k", store=store, chunk_tokens=200, embedder=fake_embed).add(path, metadata={"tags": ["y"]})
    assert len(store.upserts) == 4, "an embedder added re-indexes (the chunks need vectors)"
    (doc,) = await Knowledge("k", store=store).documents()
    assert doc.metadata["tags"] == ["y"]


async def test_raw_texts_and_caller_sources() -> None:
    kb = Knowledge(store=MemoryKnowledgeStore())
    note = "Deployments happen every Tuesday after the standup."
    report = await kb.add([note, "Another note about lunch menus."])
    assert report.added == (text_source(note), text_source("Another note about lunch menus."))
    report = await kb.add("The wifi password changes monthly.", source="it/wifi")
    assert report.added == ("it/wifi",)
    (hit,) = await kb.search("wifi password")
    assert hit.source == "it/wifi" and hit.title == "The wifi password changes monthly."
    with pytest.raises(InvalidValueError, match="source="):
        await kb.add(["a", "b"], source="both")
    with pytest.raises(InvalidTypeError):
        await kb.add([42])  # type: ignore[list-item]  # a wrong item type on purpose


async def test_a_missing_path_is_reported_not_indexed_as_text(tmp_path: Path) -> None:
    kb = Knowledge(store=MemoryKnowledgeStore())
    report = await kb.add([str(tmp_path / "typo.md"), tmp_path / "absent.txt"])
    assert [reason for _, reason in report.failed] == [
        f"no such file: {tmp_path / 'typo.md'}",
        f"no such file: {tmp_path / 'absent.txt'}",
    ]
    assert await kb.documents() == []


async def test_hybrid_search_fuses_text_and_vectors() -> None:
    calls: list[int] = []

    async def embed(texts: list[str]) -> list[list[float]]:
        calls.append(len(texts))
        return fake_embed(texts)

    kb = Knowledge(store=MemoryKnowledgeStore(), embedder=embed)
    await kb.add("The automobile needs new tyres.", source="lexical")
    await kb.add("My car is parked outside.", source="semantic")
    await kb.add("A banana is a yellow fruit.", source="other")
    text_only = await kb.search("automobile", mode="text")
    assert [p.source for p in text_only] == ["lexical"]
    vector_only = await kb.search("automobile", k=2, mode="vector")
    assert {p.source for p in vector_only} == {"lexical", "semantic"}
    hybrid = await kb.search("automobile", k=3)
    assert [p.source for p in hybrid][:2] == ["lexical", "semantic"], "found by both first, then by vectors"
    assert hybrid[0].score == pytest.approx(2 / 61), "the fused score is the RRF score"
    banana = await kb.search("fruit", k=1)
    assert [p.source for p in banana] == ["other"]
    assert calls[:3] == [1, 1, 1], "one embedding call per added text"


async def test_embeddings_are_computed_in_batches(tmp_path: Path) -> None:
    calls: list[int] = []

    def embed(texts: list[str]) -> list[list[float]]:
        calls.append(len(texts))
        return fake_embed(texts)

    body = "\n\n".join(f"# Section {i}\n\nParagraph {i} about the weather." for i in range(150))
    kb = Knowledge(store=MemoryKnowledgeStore(), embedder=embed, chunk_tokens=16, chunk_overlap=0)
    report = await kb.add(body, source="long")
    assert report.chunks == 150
    assert calls == [64, 64, 22]


async def test_an_embedder_failure_fails_that_source_only() -> None:
    def embed(texts: list[str]) -> list[list[float]]:
        if any("poison" in t for t in texts):
            raise RuntimeError("embedding service down")
        return fake_embed(texts)

    kb = Knowledge(store=MemoryKnowledgeStore(), embedder=embed)
    report = await kb.add(["a poison pill", "a healthy apple"])
    assert report.failed == ((text_source("a poison pill"), "embedding service down"),)
    assert report.added == (text_source("a healthy apple"),)


async def test_namespaces_are_isolated_on_one_store() -> None:
    store = MemoryKnowledgeStore()
    alice = Knowledge("notes", store=store, namespace="alice@example.com")
    bob = alice.for_namespace("bob")
    assert bob.store is alice.store and bob.namespace == "bob" and alice.namespace == "alice@example.com"
    await alice.add("Alice's secret launch date is June.", source="secret")
    await bob.add("Bob likes launch parties.", source="party")
    assert [p.source for p in await bob.search("launch")] == ["party"]
    assert [p.source for p in await alice.search("launch")] == ["secret"]
    assert await bob.delete("secret") is False
    assert await bob.drop() == 1
    assert [d.source for d in await alice.documents()] == ["secret"], "bob's drop left alice's kb"


async def test_filters_pass_through() -> None:
    kb = Knowledge(store=MemoryKnowledgeStore())
    await kb.add("Budget for spring.", source="q1", metadata={"tags": ["finance"], "date": "2024-03-01"})
    await kb.add("Budget for autumn.", source="q3", metadata={"tags": ["finance", "late"], "date": "2024-09-01"})
    assert [p.source for p in await kb.search("budget", filters={"tags": ["late"]})] == ["q3"]
    assert [p.source for p in await kb.search("budget", filters={"until": "2024-06-30"})] == ["q1"]
    with pytest.raises(InvalidValueError, match="tags"):
        await kb.add("x y z", metadata={"tags": "finance"})


async def test_delete_accepts_the_path_as_spelled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "doc.md").write_text("Deletable content.", encoding="utf-8")
    kb = Knowledge(store=MemoryKnowledgeStore())
    await kb.add("doc.md")
    assert [d.source for d in await kb.documents()] == [file_source(tmp_path / "doc.md")]
    assert await kb.delete("doc.md") is True
    assert await kb.documents() == []
    assert await kb.delete("doc.md") is False
    assert await kb.delete("text:0123456789abcdef") is False


@pytest.mark.parametrize("name", ["", "a b", "../etc", "x" * 129, "semi;colon", "tab\t", "ünï"])
def test_names_and_namespaces_are_validated(name: str) -> None:
    with pytest.raises(InvalidValueError):
        Knowledge(name, store=MemoryKnowledgeStore())
    with pytest.raises(InvalidValueError):
        Knowledge("ok", store=MemoryKnowledgeStore(), namespace=name)
    with pytest.raises(InvalidValueError):
        Knowledge("ok", store=MemoryKnowledgeStore()).for_namespace(name)


def test_valid_names() -> None:
    kb = Knowledge("team.docs_v2-x", store=MemoryKnowledgeStore(), namespace="user:42@corp.example")
    assert kb.name == "team.docs_v2-x" and kb.namespace == "user:42@corp.example"
    with pytest.raises(InvalidTypeError):
        Knowledge(42, store=MemoryKnowledgeStore())  # type: ignore[arg-type]  # wrong type on purpose


async def test_search_arguments_are_validated() -> None:
    kb = Knowledge(store=MemoryKnowledgeStore())
    for k in (0, 101, -1):
        with pytest.raises(InvalidValueError):
            await kb.search("x", k=k)
    with pytest.raises(InvalidTypeError):
        await kb.search("x", k=True)
    with pytest.raises(InvalidValueError, match="embedder"):
        await kb.search("x", mode="vector")
    with pytest.raises(InvalidValueError, match="mode"):
        await kb.search("x", mode="fuzzy")  # type: ignore[arg-type]  # a wrong mode on purpose
    with pytest.raises(InvalidTypeError):
        await kb.search("x", filters=["source"])  # type: ignore[arg-type]  # wrong type on purpose
    assert await kb.search("   ") == []
    assert len(await kb.search("anything", k=100)) == 0
    with pytest.raises(InvalidValueError):
        Knowledge(store=MemoryKnowledgeStore(), search_mode="hybrid")
    with pytest.raises(InvalidValueError):
        Knowledge(store=MemoryKnowledgeStore(), chunk_tokens=100, chunk_overlap=80)
    with pytest.raises(InvalidValueError):
        Knowledge(store=MemoryKnowledgeStore(), max_file_bytes=0)


async def test_a_search_mode_default() -> None:
    kb = Knowledge(store=MemoryKnowledgeStore(), embedder=fake_embed, search_mode="text")
    await kb.add("My car is red.", source="car")
    assert await kb.search("automobile") == [], "text mode does not use vectors"
    assert [p.source for p in await kb.search("automobile", mode="vector")] == ["car"]


async def test_store_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(store_from_url("memory://"), MemoryKnowledgeStore)
    for bad in ("nope", "ftp://x", "sqlite://"):
        with pytest.raises(InvalidValueError):
            store_from_url(bad)
    with pytest.raises(InvalidTypeError):
        Knowledge(store=42)  # type: ignore[arg-type]  # wrong type on purpose
    sqlite = pytest.importorskip("agentrt.knowledge.stores.sqlite")
    store = store_from_url(f"sqlite:///{tmp_path / 'kb.db'}")
    assert isinstance(store, sqlite.SqliteKnowledgeStore)
    await store.close()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    kb = Knowledge()
    await kb.add("A note in the default database.", source="n")
    assert (tmp_path / "home" / ".agentrt" / "knowledge.db").exists()
    await kb.close()
    with pytest.raises(UserError, match="closed"):
        await kb.search("note")
    async with Knowledge(store=f"sqlite:///{tmp_path / 'kb.db'}") as again:
        assert await again.documents() == []


def test_postgres_urls_make_a_postgres_store() -> None:
    postgres = pytest.importorskip("agentrt.knowledge.stores.postgres")
    for url in ("postgresql://u@127.0.0.1/db", "postgresql+asyncpg://u@127.0.0.1/db"):
        assert isinstance(store_from_url(url), postgres.PostgresKnowledgeStore)


async def test_close_closes_only_a_store_it_made() -> None:
    store = CountingStore()
    async with Knowledge(store=store) as kb:
        await kb.add("text here", source="t")
    assert store.closed == 0, "a store passed in is the caller's to close"
    assert isinstance(store, KnowledgeStore)


def test_reciprocal_rank_fusion() -> None:
    def p(chunk_id: str, score: float = 0.0) -> Passage:
        return Passage(chunk_id=chunk_id, text=chunk_id, source="s", score=score)

    fused = reciprocal_rank_fusion([[p("a", 9), p("b", 8), p("c", 7)], [p("c", 0.9), p("d", 0.8), p("c", 0.1)]])
    assert [x.chunk_id for x in fused] == ["c", "a", "b", "d"]
    assert fused[0].score == pytest.approx(1 / 63 + 1 / 61)
    assert fused[1].score == pytest.approx(1 / 61)
    assert [x.chunk_id for x in reciprocal_rank_fusion([[p("x"), p("y")]], limit=1)] == ["x"]
    assert reciprocal_rank_fusion([]) == []


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_no_query_makes_search_raise(query: str) -> None:
    async def run() -> None:
        kb = Knowledge(store=MemoryKnowledgeStore(), embedder=fake_embed)
        await kb.add('The "alpha" AND beta* NEAR(gamma) text; 咖啡 café.', source="doc")
        for mode in ("text", "vector", "hybrid"):
            found = await kb.search(query, k=3, mode=mode)
            assert all(p.source == "doc" for p in found)

    asyncio.run(run())


def test_lazy_exports() -> None:
    import agentrt.knowledge as knowledge
    from agentrt.memory.embeddings import OpenAIEmbeddings

    assert knowledge.OpenAIEmbeddings is OpenAIEmbeddings
    with pytest.raises(AttributeError):
        _ = knowledge.NoSuchThing


def test_filter_semantics() -> None:
    from datetime import UTC, date, datetime

    from agentrt.knowledge.stores.memory import document_matches

    doc = Document("s.md", "T", "h", {"tags": "solo", "date": "2024-05-01T10:00:00+02:00", "n": 3})
    assert document_matches(doc, None) and document_matches(doc, {})
    assert document_matches(doc, {"tags": ["solo"], "n": 3, "source": ("s.md", "t.md")})
    assert not document_matches(doc, {"n": "3"}), "equality is typed"
    assert document_matches(doc, {"since": date(2024, 5, 1), "until": datetime(2024, 5, 1, 8, 0, tzinfo=UTC)})
    assert not document_matches(doc, {"until": datetime(2024, 5, 1, 7, 59)}), "aware dates compare in UTC"
    assert document_matches(doc, {"since": None, "tags": None}), "a None filter is no filter"
    assert not document_matches(Document("x", None, "h", {"date": "not a date"}), {"since": "2020-01-01"})
    with pytest.raises(InvalidValueError, match="since"):
        document_matches(doc, {"since": "yesterday"})
    with pytest.raises(InvalidTypeError):
        document_matches(doc, {"source": 42})
    with pytest.raises(InvalidTypeError):
        document_matches(doc, ["source"])  # type: ignore[arg-type]  # wrong type on purpose
