"""PostgresKnowledgeStore against a real PostgreSQL: atomic replace, tenants, hostile queries, CJK, vectors.

Each test owns a table prefix and drops its tables at the end. The pgvector test runs only where
``CREATE EXTENSION vector`` succeeds; elsewhere (this project's CI image: Debian carries no
pgvector package) it skips with the reason "pgvector is not installed on this PostgreSQL server",
under CI too, while every other test runs on the plain-array path.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import date, datetime

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.ext.asyncio import create_async_engine

from agentrt.errors import InvalidValueError, UserError
from agentrt.knowledge.base import Chunk, Document
from agentrt.knowledge.stores.postgres import PostgresKnowledgeStore

pytestmark = pytest.mark.integration

PGVECTOR_MISSING = "pgvector is not installed on this PostgreSQL server"

MakeStore = Callable[..., PostgresKnowledgeStore]


@pytest.fixture
async def make_store(postgres_url: str, unique: str) -> AsyncIterator[MakeStore]:
    """Stores on a table prefix owned by the test; its tables are dropped at the end."""
    prefix = f"kb_{unique}"
    made: list[PostgresKnowledgeStore] = []

    def make(*, pgvector: bool | None = None) -> PostgresKnowledgeStore:
        store = PostgresKnowledgeStore(postgres_url, table_prefix=prefix, pgvector=pgvector)
        made.append(store)
        return store

    yield make
    for store in made:
        await store.close()
    async with PostgresKnowledgeStore(postgres_url, table_prefix=prefix) as cleaner:
        await cleaner.drop_tables()


def doc(source: str, content_hash: str = "h", title: str | None = None, **metadata: object) -> Document:
    return Document(source, title or source, content_hash, dict(metadata))


def chunks(source: str, texts: Sequence[str], vectors: Sequence[Sequence[float] | None] | None = None) -> list[Chunk]:
    vecs = vectors or [None] * len(texts)
    return [
        Chunk(f"{source}#{i}", source, i, text, ("Guide", f"Part {i}"), None, len(text.split()), _tuple(vec))
        for i, (text, vec) in enumerate(zip(texts, vecs, strict=True))
    ]


def _tuple(vec: Sequence[float] | None) -> tuple[float, ...] | None:
    return None if vec is None else tuple(vec)


async def count_rows(store: PostgresKnowledgeStore, namespace: str) -> tuple[int, int]:
    """(documents, chunks) rows of `namespace`, read from the tables directly."""
    async with store.engine.connect() as conn:
        docs = await conn.execute(
            sa.text(f"SELECT count(*) FROM {store.documents_table} WHERE namespace = :ns"), {"ns": namespace}
        )
        rows = await conn.execute(
            sa.text(f"SELECT count(*) FROM {store.chunks_table} WHERE namespace = :ns"), {"ns": namespace}
        )
        return int(docs.scalar_one()), int(rows.scalar_one())


# -- replace -----------------------------------------------------------------------------------------
async def test_a_reader_during_replaces_sees_all_old_or_all_new_chunks(make_store: MakeStore) -> None:
    writer, reader = make_store(), make_store()  # two pools: a second replica reads
    size = 25

    def version(v: int) -> list[Chunk]:
        vector = [1.0, float(v)]
        return chunks("guide.md", [f"common words of version{v} part {i}" for i in range(size)], [vector] * size)

    await writer.upsert("ns", "kb", doc("guide.md", "v0"), version(0))
    done = asyncio.Event()
    seen: set[str] = set()

    async def write() -> None:
        try:
            for v in range(1, 31):
                await writer.upsert("ns", "kb", doc("guide.md", f"v{v}"), version(v % 3))
        finally:
            done.set()

    async def read() -> int:
        reads = 0
        while not done.is_set() or reads < 3:
            found = await reader.search_text("ns", "kb", "common", 100)
            near = await reader.search_vector("ns", "kb", [1.0, 0.5], 100)
            for passages in (found, near):
                versions = {p.text.split()[3] for p in passages}
                assert len(passages) == size and len(versions) == 1, (len(passages), versions)
                seen.update(versions)
            reads += 1
        return reads

    _, reads = await asyncio.gather(write(), read())
    assert reads >= 3
    assert await reader.content_hash("ns", "kb", "guide.md") == "v30", "the last write won"
    assert await count_rows(reader, "ns") == (1, size), "replacing left no stale chunk behind"
    (document,) = await reader.documents("ns", "kb")
    assert document.chunk_count == size


async def test_replacing_with_fewer_chunks_and_deleting(make_store: MakeStore) -> None:
    store = make_store()
    await store.upsert("ns", "kb", doc("a.md", "1"), chunks("a.md", ["alpha one", "alpha two", "alpha three"]))
    await store.upsert("ns", "kb", doc("a.md", "2", tags=["x"]), chunks("a.md", ["alpha again"]))
    assert [p.text for p in await store.search_text("ns", "kb", "alpha", 10)] == ["alpha again"]
    (document,) = await store.documents("ns", "kb")
    assert (document.content_hash, document.chunk_count, document.metadata) == ("2", 1, {"tags": ["x"]})
    assert await store.delete("ns", "kb", "a.md") is True
    assert await store.delete("ns", "kb", "a.md") is False
    assert await count_rows(store, "ns") == (0, 0), "the chunks went with their document"
    assert await store.content_hash("ns", "kb", "a.md") is None


async def test_a_chunk_of_another_source_is_refused(make_store: MakeStore) -> None:
    store = make_store()
    with pytest.raises(InvalidValueError):
        await store.upsert("ns", "kb", doc("a.md"), chunks("b.md", ["text"]))
    assert await store.documents("ns", "kb") == []


# -- tenants -----------------------------------------------------------------------------------------
async def test_namespaces_and_kbs_are_isolated(make_store: MakeStore) -> None:
    store = make_store()
    # Same kb, source and even chunk ids in both namespaces.
    await store.upsert("alice", "docs", doc("a.md"), chunks("a.md", ["secret plans of alice"], [[1.0, 0.0]]))
    await store.upsert("bob", "docs", doc("a.md"), chunks("a.md", ["secret plans of bob"], [[1.0, 0.0]]))
    await store.upsert("bob", "notes", doc("n.md"), chunks("n.md", ["secret notes of bob"]))

    assert [p.text for p in await store.search_text("alice", "docs", "secret", 10)] == ["secret plans of alice"]
    assert [p.text for p in await store.search_vector("alice", "docs", [1.0, 0.0], 10)] == ["secret plans of alice"]
    assert await store.search_text("alice", "notes", "secret", 10) == []
    assert await store.search_text("alice' OR '1'='1", "docs", "secret", 10) == []
    assert await store.kbs("alice") == ["docs"] and await store.kbs("bob") == ["docs", "notes"]

    assert await store.drop("alice", "docs") == 1
    assert await count_rows(store, "alice") == (0, 0)
    assert await count_rows(store, "bob") == (2, 2), "dropping alice's kb left bob's rows alone"
    assert await store.delete("alice", "notes", "n.md") is False
    assert await store.delete("bob", "notes", "n.md") is True
    assert await count_rows(store, "bob") == (1, 1)
    assert [p.text for p in await store.search_text("bob", "docs", "secret", 10)] == ["secret plans of bob"]
    assert await store.kbs("alice") == []


# -- hostile input -----------------------------------------------------------------------------------
OPERATORS = [":*", "&", "|", "!", "<->", "<2>", "'", '"', "\\", "\x00", "(", ")", "*", ":", "--", ";", "%", "_", "$1"]
hostile = st.lists(
    st.one_of(st.sampled_from(OPERATORS), st.sampled_from(["alpha", "beta", "secret", "咖啡", "or", "and"]), st.text()),
    max_size=8,
).map(" ".join)


def test_hostile_queries_never_fail_nor_cross_tenants(postgres_url: str, unique: str) -> None:
    """Every query string: no error, and only the searched namespace's rows (hypothesis)."""
    prefix = f"kb_{unique}"
    with asyncio.Runner() as runner:
        store = PostgresKnowledgeStore(postgres_url, table_prefix=prefix)
        texts = ["alpha beta gamma", "secret alpha", "我每天早上喝咖啡", "quote ' and \\ backslash & pipe |"]
        runner.run(store.upsert("alice", "kb", doc("a.md"), chunks("a.md", texts)))
        runner.run(store.upsert("bob", "kb", doc("b.md"), chunks("b.md", texts)))
        alice_ids = {f"a.md#{i}" for i in range(len(texts))}

        @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(query=hostile, extra=st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=2))
        def check(query: str, extra: dict[str, str]) -> None:
            found = runner.run(store.search_text("alice", "kb", query, 10))
            assert {p.chunk_id for p in found} <= alice_ids
            assert all(p.source == "a.md" for p in found)
            filters = {k: v for k, v in extra.items() if k not in ("source", "tags", "since", "until")}
            filtered = runner.run(store.search_text("alice", "kb", query, 10, filters))
            assert {p.chunk_id for p in filtered} <= alice_ids

        try:
            check()
            assert runner.run(count_rows(store, "bob")) == (1, len(texts)), "no query wrote anything"
        finally:
            runner.run(store.drop_tables())
            runner.run(store.close())


async def test_nul_characters_are_stripped_from_text_and_refused_in_keys(make_store: MakeStore) -> None:
    store = make_store()
    document = Document("a.md", "Ti\x00tle", "h", {"note": "x\x00y", "tags": ["t\x00ag"]})
    await store.upsert("ns", "kb", document, [Chunk("a.md#0", "a.md", 0, "nul\x00 byte text", ("H\x00ead",))])
    (found,) = await store.search_text("ns", "kb", "byte\x00", 5, {"note": "xy", "tags": ["tag"]})
    assert (found.text, found.title, found.location) == ("nul byte text", "Title", "Head")
    for call in (
        store.search_text("ns\x00", "kb", "byte", 5),
        store.search_vector("ns", "kb\x00", [1.0], 5),
        store.upsert("ns", "kb", Document("b\x00.md", None, "h"), []),
        store.delete("ns", "kb", "a.md\x00"),
        store.documents("ns\x00", "kb"),
    ):
        with pytest.raises(InvalidValueError):
            await call
    assert await count_rows(store, "ns") == (1, 1)


def test_table_prefix_and_url_are_validated(postgres_url: str) -> None:
    for bad in ("x; DROP TABLE users", "1abc", "a" * 41, "", "kb-docs"):
        with pytest.raises(UserError):
            PostgresKnowledgeStore(postgres_url, table_prefix=bad)
    with pytest.raises(UserError):
        PostgresKnowledgeStore("sqlite:///kb.db")


# -- text search -------------------------------------------------------------------------------------
async def test_cjk_queries_find_cjk_text(make_store: MakeStore) -> None:
    store = make_store()
    texts = [
        "我每天早上喝咖啡，然后去上班。",  # noqa: RUF001 - a Chinese comma, on purpose
        "東京の天気は晴れです。明日は雨が降るでしょう。",
        "서울에서 맛있는 김치찌개를 먹었습니다.",
        "Coffee every morning, then to work.",
    ]
    await store.upsert("ns", "kb", doc("cjk.md"), chunks("cjk.md", texts))

    async def first(query: str) -> str | None:
        found = await store.search_text("ns", "kb", query, 5)
        return found[0].text if found else None

    assert await first("咖啡") == texts[0]
    assert await first("早上喝咖啡") == texts[0]
    assert await first("東京の天気") == texts[1]
    assert await first("김치찌개") == texts[2]
    assert await first("coffee") == texts[3]
    assert await first("茶道") is None


async def test_ranking_prefers_more_matches_and_headings(make_store: MakeStore) -> None:
    store = make_store()
    texts = ["postgres tuning notes", "postgres tuning and postgres vacuum tuning", "unrelated text here"]
    await store.upsert("ns", "kb", doc("a.md"), chunks("a.md", texts))
    found = await store.search_text("ns", "kb", "postgres tuning", 5)
    assert [p.text for p in found] == [texts[1], texts[0]]
    assert found[0].score >= found[1].score > 0
    assert found[0].location == "Guide > Part 1" and found[0].title == "a.md"
    # A heading term finds the chunk under it.
    assert {p.chunk_id for p in await store.search_text("ns", "kb", "guide", 5)} == {f"a.md#{i}" for i in range(3)}
    assert await store.search_text("ns", "kb", "", 5) == []
    assert await store.search_text("ns", "kb", "!!! ::: ***", 5) == []
    assert await store.search_text("ns", "kb", "postgres", 0) == []


async def test_filters(make_store: MakeStore) -> None:
    store = make_store()
    specs: dict[str, dict[str, object]] = {
        "a.md": {"tags": ["ops", "db"], "date": "2024-01-15", "team": "core", "level": 2, "public": True},
        "b.md": {"tags": ["ops"], "date": "2024-03-01T12:30:00", "team": "web", "level": 3, "public": False},
        "c.md": {"tags": "ops", "team": "core"},  # tags not a list, no date
    }
    for source, meta in specs.items():
        await store.upsert(
            "ns", "kb", Document(source, source, "h", dict(meta)), chunks(source, [f"shared text of {source}"])
        )

    async def sources(**filters: object) -> list[str]:
        found = await store.search_text("ns", "kb", "shared", 10, filters)
        vector = await store.search_vector("ns", "kb", [1.0], 10, filters)
        assert vector == [], "no chunk has an embedding"
        return sorted(p.source for p in found)

    assert await sources() == ["a.md", "b.md", "c.md"]
    assert await sources(source="b.md") == ["b.md"]
    assert await sources(source=["a.md", "c.md", "zzz"]) == ["a.md", "c.md"]
    assert await sources(source=[]) == []
    assert await sources(tags=["ops"]) == ["a.md", "b.md"]
    assert await sources(tags=["ops", "db"]) == ["a.md"]
    assert await sources(tags="db") == ["a.md"]
    assert await sources(tags=[]) == ["a.md", "b.md", "c.md"]
    assert await sources(since="2024-02-01") == ["b.md"]
    assert await sources(until=date(2024, 3, 1)) == ["a.md", "b.md"], "a date bound includes its whole day"
    assert await sources(since=datetime(2024, 3, 1, 13, 0)) == []
    assert await sources(since="2024-01-15", until="2024-01-15") == ["a.md"]
    assert await sources(team="core") == ["a.md", "c.md"]
    assert await sources(team="core", tags=["db"]) == ["a.md"]
    assert await sources(level=3) == ["b.md"]
    assert await sources(level=3.0) == ["b.md"]
    assert await sources(public=True) == ["a.md"]
    assert await sources(public=1) == [], "JSON true is not the number 1"
    assert await sources(missing="x") == []
    assert await sources(**{"team' OR 1=1 --": "core"}) == []
    with pytest.raises(InvalidValueError):
        await sources(since="last tuesday")
    with pytest.raises(InvalidValueError):
        await sources(source=[1, 2])
    assert (await store.search_text("ns", "kb", "shared", 1, {"source": "a.md"}))[0].metadata == specs["a.md"]


# -- vectors -----------------------------------------------------------------------------------------
def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (math.hypot(*a) * math.hypot(*b))


async def _check_vector_order(store: PostgresKnowledgeStore) -> None:
    rng = random.Random(17)
    dims = 24
    expected: dict[str, list[float]] = {}
    for d in range(6):
        source = f"d{d}.md"
        vectors: list[Sequence[float] | None] = [[rng.gauss(0, 1) for _ in range(dims)] for _ in range(30)]
        vectors[0] = None  # no embedding: never ranked
        vectors[1] = [rng.gauss(0, 1) for _ in range(dims + 1)]  # another length: never ranked
        texts = [f"text {d} {i}" for i in range(30)]
        await store.upsert(
            "ns", "kb", doc(source, team="even" if d % 2 == 0 else "odd"), chunks(source, texts, vectors)
        )
        await store.upsert("other", "kb", doc(source), chunks(source, texts, vectors))
        expected.update({f"{source}#{i}": list(v) for i, v in enumerate(vectors) if v is not None and i != 1})
    for _ in range(3):
        query = [rng.gauss(0, 1) for _ in range(dims)]
        brute = sorted(expected, key=lambda cid: -_cosine(query, expected[cid]))
        found = await store.search_vector("ns", "kb", query, 20)
        assert [p.chunk_id for p in found] == brute[:20]
        for passage in found:
            assert passage.score == pytest.approx(_cosine(query, expected[passage.chunk_id]), abs=1e-5)
        even = [cid for cid in brute if int(cid[1]) % 2 == 0]
        filtered = await store.search_vector("ns", "kb", query, 10, {"team": "even"})
        assert [p.chunk_id for p in filtered] == even[:10]
    assert await store.search_vector("ns", "kb", [0.0] * dims, 5) == []
    assert await store.search_vector("ns", "kb", [1.0] * (dims + 7), 5) == []


async def test_vector_ranking_equals_brute_force_cosine(make_store: MakeStore) -> None:
    store = make_store(pgvector=False)
    await _check_vector_order(store)
    assert store.pgvector is False


async def _pgvector_available(url: str) -> bool:
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text("CREATE EXTENSION IF NOT EXISTS vector"))
        return True
    except sa.exc.DBAPIError:
        return False
    finally:
        await engine.dispose()


async def test_pgvector_is_chosen_only_when_the_extension_can_be_created(
    make_store: MakeStore, postgres_url: str
) -> None:
    available = await _pgvector_available(postgres_url)
    auto = make_store()
    await auto.create_tables()
    assert auto.pgvector is available
    required = make_store(pgvector=True)
    if available:
        await required.create_tables()
        assert required.pgvector
    else:
        with pytest.raises(UserError, match="CREATE EXTENSION vector"):
            await required.create_tables()
        await auto.upsert("ns", "kb", doc("a.md"), chunks("a.md", ["vectors without pgvector"], [[0.6, 0.8]]))
        (found,) = await auto.search_vector("ns", "kb", [0.6, 0.8], 3)
        assert found.score == pytest.approx(1.0)


async def test_pgvector_ranking_equals_brute_force_cosine(make_store: MakeStore, postgres_url: str) -> None:
    """The pgvector path; skipped, under CI too, where the server has no pgvector (Debian's packages)."""
    if not await _pgvector_available(postgres_url):
        pytest.skip(PGVECTOR_MISSING)
    store = make_store(pgvector=True)
    await _check_vector_order(store)
    assert store.pgvector is True
    async with store.engine.connect() as conn:
        indexes = await conn.execute(
            sa.text("SELECT indexdef FROM pg_indexes WHERE tablename = :t"), {"t": store.chunks_table}
        )
        assert any("hnsw" in str(row[0]) for row in indexes)
