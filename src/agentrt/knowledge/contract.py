"""The conformance suite every `KnowledgeStore` backend passes (`agentrt.testing.check_knowledge_store`).

It checks what `Knowledge`, the agent and the server rely on: replacing a document is atomic and
leaves nothing of the old version findable; namespaces and knowledge bases are sealed from each
other (checked on side effects: the other tenant's documents are still there after a delete or a
drop); BM25 puts the document with a rare term first; CJK queries find CJK text; every filter of
`SearchFilters` (dates in every ISO spelling, None as JSON null, typed equality) and a typed
error for a bad filter; cosine order for vectors, where a non-finite vector is never ranked; a
chunk looked up by id only within its own namespace and kb; and a query made of full-text
operators or quotes never raises. Every check works in fresh random namespaces and drops what it wrote.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agentrt.errors import InvalidTypeError, InvalidValueError
from agentrt.knowledge.base import Chunk, Document, KnowledgeStore
from agentrt.memory.retrieval import Passage

__all__ = ["BAD_FILTERS", "MALICIOUS_QUERIES", "check_knowledge_store"]

StoreFactory = Callable[[], "KnowledgeStore | Awaitable[KnowledgeStore]"]

MALICIOUS_QUERIES = (
    '"NEAR(',
    "AND OR *",
    "'",
    '"',
    "''; DROP TABLE chunks; --",
    "NOT",
    "a:b OR c:*",
    "(((",
    ")",
    "^*",
    "-",
    "!@#$%^&*()_+{}|:<>?",
    'NEAR("alpha" "beta", 2)',
    "title:alpha",
    "\\",
    "%_%",
    "& | ! <-> :*",
    "\x00",
    "   ",
    "",
)
"""Queries a backend must survive: full-text operators (FTS5, tsquery), quotes, SQL, LIKE wildcards."""

BAD_FILTERS: tuple[dict[Any, Any], ...] = (
    {"source": 5},
    {"source": [1, 2]},
    {"source": ["s"] * 101},
    {"tags": 5},
    {"tags": ["t"] * 51},
    {"year": 2**63},
    {"year": math.nan},
    {"year": "\ud800"},
    {"source": "\ud800"},
    {"year": object()},
    {"since": "not a date"},
    {"until": 12},
    {"since": "2024-13-45"},
    {5: "x"},
    {f"k{i}": i for i in range(33)},
)
"""Filters a backend must refuse with `InvalidTypeError` / `InvalidValueError` (see `check_filters`)."""


async def check_knowledge_store(make_store: StoreFactory, *, persistent: bool = False) -> None:
    """Run the knowledge store contract against stores made by ``make_store()`` (sync or async).

    With ``persistent=True`` a second store made by `make_store` must see what the first wrote.
    Raises AssertionError naming the first broken rule.
    """
    store = await _make(make_store)
    run = _Run(store)
    try:
        assert isinstance(store, KnowledgeStore), "the backend must implement the KnowledgeStore protocol"
        await _empty(run)
        await _round_trip(run)
        await _chunk_lookup(run)
        await _replace(run)
        await _concurrent_replace(run)
        await _delete(run)
        await _kbs_and_drop(run)
        await _namespace_isolation(run)
        await _kb_isolation(run)
        await _bm25(run)
        await _cjk_and_unicode(run)
        await _filters(run)
        await _vectors(run)
        await _hostile_queries(run)
        await _large_k(run)
        await _delete_namespace(run)
        if persistent:
            await _persistence(run, make_store)
    finally:
        try:
            await run.cleanup()
        finally:
            await store.close()


async def _make(factory: StoreFactory) -> KnowledgeStore:
    store = factory()
    if inspect.isawaitable(store):
        store = await store
    return store


class _Run:
    """The store under test and the namespaces it wrote to (dropped at the end)."""

    def __init__(self, store: KnowledgeStore) -> None:
        self.store = store
        self.namespaces: list[str] = []

    def namespace(self, tag: str) -> str:
        name = f"contract-{tag}-{uuid.uuid4().hex[:10]}"
        self.namespaces.append(name)
        return name

    async def cleanup(self) -> None:
        for namespace in self.namespaces:
            for kb in await self.store.kbs(namespace):
                await self.store.drop(namespace, kb)


def _doc(source: str, texts: Sequence[str], *, kb: str = "kb", version: str = "v1", **options: Any) -> _Doc:
    title = options.pop("title", f"Title of {source}")
    metadata = options.pop("metadata", {})
    embeddings: Sequence[Sequence[float] | None] = options.pop("embeddings", [None] * len(texts))
    pages: Sequence[int | None] = options.pop("pages", [None] * len(texts))
    headings: Sequence[tuple[str, ...]] = options.pop("headings", [()] * len(texts))
    chunks = [
        Chunk(
            chunk_id=uuid.uuid5(uuid.NAMESPACE_URL, f"{kb}|{source}|{i}|{text}").hex,
            source=source,
            ordinal=i,
            text=text,
            heading_path=headings[i],
            page=pages[i],
            tokens=len(text.split()),
            embedding=None if embeddings[i] is None else tuple(embeddings[i] or ()),
        )
        for i, text in enumerate(texts)
    ]
    document = Document(
        source=source,
        title=title,
        content_hash=f"hash-{source}-{version}",
        metadata=metadata,
        chunk_count=len(chunks),
        added_at=1_700_000_000.0,
    )
    return _Doc(document, chunks)


class _Doc:
    def __init__(self, document: Document, chunks: list[Chunk]) -> None:
        self.document = document
        self.chunks = chunks

    @property
    def ids(self) -> set[str]:
        return {chunk.chunk_id for chunk in self.chunks}

    async def put(self, store: KnowledgeStore, namespace: str, kb: str = "kb") -> None:
        await store.upsert(namespace, kb, self.document, self.chunks)


def _ids(passages: list[Passage]) -> list[str]:
    return [p.chunk_id for p in passages]


def _sources(passages: list[Passage]) -> set[str]:
    return {p.source for p in passages}


async def _empty(run: _Run) -> None:
    store, ns = run.store, run.namespace("empty")
    assert await store.documents(ns, "kb") == [], "a new kb has no documents"
    assert await store.kbs(ns) == [], "a new namespace has no kbs"
    assert await store.content_hash(ns, "kb", "nothing.md") is None, "content_hash of an unknown source is None"
    assert await store.search_text(ns, "kb", "anything at all", 5) == [], "an empty kb finds nothing"
    assert await store.search_vector(ns, "kb", [1.0, 0.0], 5) == [], "an empty kb has no vectors"
    assert await store.delete(ns, "kb", "nothing.md") is False, "deleting an unknown source returns False"
    assert await store.drop(ns, "kb") == 0, "dropping an empty kb returns 0"
    assert await store.chunk(ns, "kb", "no-such-chunk") is None, "chunk of an unknown id is None"


async def _round_trip(run: _Run) -> None:
    store, ns = run.store, run.namespace("roundtrip")
    doc = _doc(
        "guide.md",
        ["Installing the frobnicator takes one command.", "Configure the frobnicator with a TOML file."],
        metadata={"tags": ["ops", "setup"], "date": "2024-05-01", "team": "infra"},
        pages=[1, 2],
        headings=[("Guide", "Install"), ("Guide", "Configure")],
    )
    await doc.put(store, ns)
    assert await store.content_hash(ns, "kb", "guide.md") == doc.document.content_hash, "content_hash round-trips"
    docs = await store.documents(ns, "kb")
    assert len(docs) == 1, f"one document after one upsert: {docs}"
    got = docs[0]
    assert (got.source, got.title, got.content_hash) == ("guide.md", doc.document.title, doc.document.content_hash), (
        f"documents returns the source, title and hash upserted: {got}"
    )
    assert dict(got.metadata) == doc.document.metadata, f"metadata round-trips: {got.metadata}"
    assert got.chunk_count == 2, f"chunk_count is the number of chunks: {got.chunk_count}"
    found = await store.search_text(ns, "kb", "frobnicator TOML", 5)
    assert found, "search_text finds an upserted chunk"
    best = found[0]
    chunk = doc.chunks[1]
    assert best.chunk_id == chunk.chunk_id, f"the chunk with both terms ranks first: {_ids(found)}"
    assert (best.text, best.source, best.title) == (chunk.text, "guide.md", doc.document.title), (
        f"a passage carries its chunk's text, source and document title: {best}"
    )
    assert best.location == chunk.location == "page 2, Guide > Configure", (
        f"a passage's location is its chunk's (page and heading path): {best.location!r}"
    )
    scores = [p.score for p in found]
    assert scores == sorted(scores, reverse=True), f"results come best first: {scores}"


async def _chunk_lookup(run: _Run) -> None:
    store, a, b = run.store, run.namespace("chunk-a"), run.namespace("chunk-b")
    doc = _doc("cite.md", ["the passage a citation names", "another passage"], pages=[4, None])
    secret = _doc("secret.md", ["the other tenant's confidential passage"], headings=[("Private",)])
    await doc.put(store, a)
    await secret.put(store, b)
    got = await store.chunk(a, "kb", doc.chunks[0].chunk_id)
    assert got is not None, "chunk finds a chunk of the namespace's kb by id"
    assert (got.chunk_id, got.text, got.source, got.title, got.location) == (
        doc.chunks[0].chunk_id,
        "the passage a citation names",
        "cite.md",
        doc.document.title,
        "page 4",
    ), f"chunk returns the chunk's text, source, title and location: {got}"
    hidden = secret.chunks[0].chunk_id
    assert await store.chunk(a, "kb", hidden) is None, "chunk never returns another namespace's chunk"
    assert await store.chunk(b, "other-kb", hidden) is None, "chunk never returns another kb's chunk"
    mine = await store.chunk(b, "kb", hidden)
    assert mine is not None and mine.location == "Private", "the owner still reads its chunk"
    await store.delete(a, "kb", "cite.md")
    assert await store.chunk(a, "kb", doc.chunks[0].chunk_id) is None, "a deleted document's chunks are gone"


async def _replace(run: _Run) -> None:
    store, ns = run.store, run.namespace("replace")
    old = _doc(
        "notes.md",
        ["zebra stripes are unique", "the zebra herd migrates", "zebra foals stand quickly"],
        embeddings=[[1.0, 0.0, 0.0], [0.9, 0.1, 0.0], [0.8, 0.2, 0.0]],
    )
    await old.put(store, ns)
    assert len(await store.search_text(ns, "kb", "zebra", 10)) == 3, "all three old chunks are found"
    new = _doc("notes.md", ["giraffe necks are long"], version="v2", embeddings=[[0.0, 1.0, 0.0]])
    await new.put(store, ns)
    assert await store.content_hash(ns, "kb", "notes.md") == new.document.content_hash, "the hash is replaced"
    assert not await store.search_text(ns, "kb", "zebra", 10), "no chunk of the replaced version is found by text"
    by_vector = await store.search_vector(ns, "kb", [1.0, 0.0, 0.0], 10)
    assert set(_ids(by_vector)) <= new.ids, f"no chunk of the replaced version is found by vector: {by_vector}"
    assert _ids(await store.search_text(ns, "kb", "giraffe", 10)) == [new.chunks[0].chunk_id], "the new chunk is"
    docs = await store.documents(ns, "kb")
    assert [(d.source, d.chunk_count) for d in docs] == [("notes.md", 1)], f"one document, new chunk count: {docs}"


async def _concurrent_replace(run: _Run) -> None:
    store, ns = run.store, run.namespace("race")
    versions = [_doc("race.md", [f"version{i} alpha text", f"version{i} beta text"], version=f"v{i}") for i in range(5)]
    await asyncio.gather(*(v.put(store, ns) for v in versions))
    stored = await store.content_hash(ns, "kb", "race.md")
    winner = next((v for v in versions if v.document.content_hash == stored), None)
    assert winner is not None, f"after concurrent upserts the hash is one of the versions: {stored}"
    found = await store.search_text(ns, "kb", "text", 20)
    assert set(_ids(found)) == winner.ids, "after concurrent upserts exactly the chunks of the stored version remain"
    assert len(await store.documents(ns, "kb")) == 1, "concurrent upserts of one source leave one document"


async def _delete(run: _Run) -> None:
    store, ns = run.store, run.namespace("delete")
    keep, gone = _doc("keep.md", ["lighthouse keepers log storms"]), _doc("gone.md", ["lighthouse lenses rotate"])
    await keep.put(store, ns)
    await gone.put(store, ns)
    assert await store.delete(ns, "kb", "gone.md") is True, "deleting a stored source returns True"
    assert await store.delete(ns, "kb", "gone.md") is False, "deleting it again returns False"
    assert await store.content_hash(ns, "kb", "gone.md") is None, "a deleted source has no hash"
    assert _ids(await store.search_text(ns, "kb", "lighthouse", 10)) == [keep.chunks[0].chunk_id], (
        "a deleted source's chunks are gone, the other source's stay"
    )
    assert [d.source for d in await store.documents(ns, "kb")] == ["keep.md"], "documents lists what is left"


async def _kbs_and_drop(run: _Run) -> None:
    store, ns = run.store, run.namespace("kbs")
    for kb in ("beta", "alpha", "gamma"):
        await _doc(f"{kb}.md", [f"{kb} content"], kb=kb).put(store, ns, kb)
    await _doc("second.md", ["more alpha content"], kb="alpha").put(store, ns, "alpha")
    assert await store.kbs(ns) == ["alpha", "beta", "gamma"], "kbs lists the namespace's kbs, sorted"
    assert await store.drop(ns, "alpha") == 2, "drop returns how many documents the kb held"
    assert await store.kbs(ns) == ["beta", "gamma"], "a dropped kb is no longer listed"
    assert await store.documents(ns, "alpha") == [], "a dropped kb has no documents"
    assert not await store.search_text(ns, "alpha", "content", 10), "a dropped kb finds nothing"
    assert [d.source for d in await store.documents(ns, "beta")] == ["beta.md"], "dropping a kb leaves the others"
    await store.delete(ns, "beta", "beta.md")
    assert await store.kbs(ns) == ["gamma"], "a kb whose last document was deleted is not listed"


async def _namespace_isolation(run: _Run) -> None:
    store = run.store
    a, b = run.namespace("tenant-a"), run.namespace("tenant-b")
    # The same kb, source and chunk ids in both namespaces: a backend must key by namespace too.
    shared_a = _doc("shared.md", ["quarterly revenue figures"], embeddings=[[1.0, 0.0]])
    shared_b = _doc("shared.md", ["quarterly revenue figures"], version="b", embeddings=[[1.0, 0.0]])
    assert shared_a.ids == shared_b.ids
    await shared_a.put(store, a)
    await shared_b.put(store, b)
    await _doc("secret.md", ["tenant b confidential merger plan"], embeddings=[[0.0, 1.0]]).put(store, b)
    assert await store.content_hash(a, "kb", "shared.md") == shared_a.document.content_hash, "hashes are per namespace"
    assert await store.content_hash(b, "kb", "shared.md") == shared_b.document.content_hash, "hashes are per namespace"
    assert not await store.search_text(a, "kb", "confidential merger", 10), "search_text never crosses namespaces"
    assert _sources(await store.search_vector(a, "kb", [0.0, 1.0], 10)) <= {"shared.md"}, (
        "search_vector never crosses namespaces"
    )
    assert [d.source for d in await store.documents(a, "kb")] == ["shared.md"], "documents never crosses namespaces"
    assert await store.delete(a, "kb", "secret.md") is False, "delete cannot reach another namespace"
    assert await store.content_hash(b, "kb", "secret.md") is not None, "the other namespace's document is still there"
    assert await store.delete(a, "kb", "shared.md") is True
    assert len(await store.search_text(b, "kb", "quarterly revenue", 10)) == 1, (
        "deleting a source in one namespace leaves the same source (same chunk ids) in another"
    )
    await shared_a.put(store, a)
    assert await store.drop(a, "kb") == 1, "drop counts only the namespace's documents"
    assert {d.source for d in await store.documents(b, "kb")} == {"shared.md", "secret.md"}, (
        "dropping a kb in one namespace leaves the other namespace's kb"
    )
    assert await store.kbs(a) == [] and await store.kbs(b) == ["kb"], "kbs never crosses namespaces"


async def _kb_isolation(run: _Run) -> None:
    store, ns = run.store, run.namespace("kb-isolation")
    one = _doc("same.md", ["orchid watering schedule"], kb="one", embeddings=[[1.0, 0.0]])
    two = _doc("same.md", ["orchid repotting guide"], kb="two", version="two", embeddings=[[1.0, 0.0]])
    await one.put(store, ns, "one")
    await two.put(store, ns, "two")
    assert _ids(await store.search_text(ns, "one", "orchid", 10)) == [one.chunks[0].chunk_id], (
        "search_text never crosses kbs"
    )
    assert _ids(await store.search_vector(ns, "two", [1.0, 0.0], 10)) == [two.chunks[0].chunk_id], (
        "search_vector never crosses kbs"
    )
    assert await store.delete(ns, "one", "same.md") is True
    assert await store.content_hash(ns, "two", "same.md") == two.document.content_hash, (
        "deleting a source in one kb leaves the same source in another"
    )
    await one.put(store, ns, "one")
    await store.drop(ns, "one")
    assert [d.source for d in await store.documents(ns, "two")] == ["same.md"], "dropping a kb leaves its siblings"


async def _bm25(run: _Run) -> None:
    store, ns = run.store, run.namespace("bm25")
    common = "the service handles requests and returns responses to clients over the network"
    docs = [
        _doc("a.md", [common, f"{common} quickly"]),
        _doc("b.md", [f"{common} with a quasar telemetry exporter"]),
        _doc("c.md", [f"{common} again", "an unrelated paragraph about gardening"]),
    ]
    for doc in docs:
        await doc.put(store, ns)
    found = await store.search_text(ns, "kb", "quasar", 5)
    assert _ids(found) == [docs[1].chunks[0].chunk_id], f"only the chunk with a rare term matches it: {found}"
    found = await store.search_text(ns, "kb", "service quasar", 5)
    assert found and found[0].chunk_id == docs[1].chunks[0].chunk_id, (
        f"the chunk with the rare term ranks first: {_ids(found)}"
    )
    found = await store.search_text(ns, "kb", "gardening", 1)
    assert _ids(found) == [docs[2].chunks[1].chunk_id], "k limits the results"
    assert await store.search_text(ns, "kb", "xylophonist", 5) == [], "a term found nowhere finds nothing"


async def _cjk_and_unicode(run: _Run) -> None:
    store, ns = run.store, run.namespace("cjk")
    zh = _doc("zh.md", ["我每天早上喝咖啡\uff0c然后去上班。", "周末我们去公园散步。"])
    ja = _doc("ja.md", ["東京の天気は晴れです。"])
    ko = _doc("ko.md", ["서울의 지하철은 편리합니다."])
    latin = _doc("fr.md", ["Un café naïve à Zürich — déjà vu 🚀"])
    for doc in (zh, ja, ko, latin):
        await doc.put(store, ns)
    found = await store.search_text(ns, "kb", "咖啡", 5)
    assert found and found[0].chunk_id == zh.chunks[0].chunk_id, f"a Chinese query finds the Chinese chunk: {found}"
    assert "ja.md" not in _sources(found), "a Chinese query does not match unrelated Japanese text"
    found = await store.search_text(ns, "kb", "公园", 5)
    assert _ids(found)[:1] == [zh.chunks[1].chunk_id], f"a second Chinese query: {found}"
    found = await store.search_text(ns, "kb", "天気", 5)
    assert _ids(found)[:1] == [ja.chunks[0].chunk_id], f"a Japanese query finds the Japanese chunk: {found}"
    found = await store.search_text(ns, "kb", "지하철은", 5)
    assert _ids(found)[:1] == [ko.chunks[0].chunk_id], f"a Korean query finds the Korean chunk: {found}"
    found = await store.search_text(ns, "kb", "Zürich café", 5)
    assert _ids(found)[:1] == [latin.chunks[0].chunk_id], f"accented words are found: {found}"
    assert found[0].text == latin.chunks[0].text, "text with accents and emoji round-trips exactly"


async def _filters(run: _Run) -> None:
    store, ns = run.store, run.namespace("filters")
    specs = {
        "jan.md": {"tags": ["finance", "2024"], "date": "2024-01-15", "team": "blue", "rank": 1},
        "mar.md": {"tags": ["finance"], "date": "2024-03-10T09:30:00", "team": "red", "rank": True},
        "jun.md": {"tags": ["ops", "2024"], "date": "2024-06-30", "team": "blue"},
        "nodate.md": {"tags": ["finance", "2024"], "team": "blue"},
        "null.md": {"tags": ["misc"], "date": "not a date", "team": None},
    }
    for source, metadata in specs.items():
        await _doc(source, [f"budget report for {source}"], metadata=metadata, embeddings=[[1.0, 0.0]]).put(store, ns)

    async def both(filters: dict[str, Any]) -> tuple[set[str], set[str]]:
        text = _sources(await store.search_text(ns, "kb", "budget report", 10, filters))
        vector = _sources(await store.search_vector(ns, "kb", [1.0, 0.0], 10, filters))
        return text, vector

    cases: list[tuple[dict[str, Any], set[str], str]] = [
        ({}, set(specs), "no filter"),
        ({"source": "mar.md"}, {"mar.md"}, "source as a string"),
        ({"source": ["jan.md", "jun.md"]}, {"jan.md", "jun.md"}, "source as a list"),
        ({"tags": ["finance"]}, {"jan.md", "mar.md", "nodate.md"}, "one tag"),
        ({"tags": ["finance", "2024"]}, {"jan.md", "nodate.md"}, "tags: all of them"),
        ({"tags": ["absent"]}, set(), "a tag nobody has"),
        ({"since": "2024-03-01"}, {"mar.md", "jun.md"}, "since (documents without a date are out)"),
        ({"until": "2024-03-10"}, {"jan.md", "mar.md"}, "until, a date: the whole day included"),
        ({"since": "2024-01-15", "until": "2024-06-30"}, {"jan.md", "mar.md", "jun.md"}, "bounds included"),
        ({"team": "blue"}, {"jan.md", "jun.md", "nodate.md"}, "equality on another key"),
        ({"team": "blue", "tags": ["ops"]}, {"jun.md"}, "filters combine"),
        ({"team": "green"}, set(), "equality with no match"),
        ({"missing_key": "x"}, set(), "a key no document has"),
        ({"team": None}, {"null.md"}, "None equals a JSON null (a document without the key is out)"),
        ({"missing_key": None}, set(), "None never matches a missing key"),
        ({"rank": 1}, {"jan.md"}, "equality is typed: true is not 1"),
        ({"rank": 1.0}, {"jan.md"}, "1.0 equals 1"),
        ({"rank": True}, {"mar.md"}, "true is not 1"),
        ({"source": None, "tags": None, "since": None, "until": None}, set(specs), "None reserved keys: no filter"),
        ({"since": "20240301"}, {"mar.md", "jun.md"}, "since in ISO basic spelling"),
        ({"since": "2024-W09-5"}, {"mar.md", "jun.md"}, "since as an ISO week date (2024-03-01)"),
        ({"until": "2024-03-10T09:29:59"}, {"jan.md"}, "a date and time bound compares the time"),
        ({"until": "2024-03-10T11:30:00+02:00"}, {"jan.md", "mar.md"}, "an aware bound compares in UTC"),
        ({"since": "2024-06-30T00:00:00"}, {"jun.md"}, "a document's date without time is its midnight"),
        ({"since": "2024-01-01"}, {"jan.md", "mar.md", "jun.md"}, "a date that is not ISO is never in range"),
    ]
    for filters, expected, what in cases:
        text, vector = await both(filters)
        assert text == expected, f"filter {what} {filters}: search_text found {sorted(text)}, not {sorted(expected)}"
        assert vector == expected, f"filter {what} {filters}: search_vector found {sorted(vector)}"
    for bad in BAD_FILTERS:
        for kind in ("text", "vector"):
            try:
                if kind == "text":
                    await store.search_text(ns, "kb", "budget report", 10, bad)
                else:
                    await store.search_vector(ns, "kb", [1.0, 0.0], 10, bad)
            except (InvalidTypeError, InvalidValueError):
                continue
            except Exception as exc:
                raise AssertionError(f"search_{kind} with filter {bad!r:.60} raised {type(exc).__name__}") from exc
            raise AssertionError(f"search_{kind} accepted the filter {bad!r:.60}: a bad one raises a typed error")


async def _vectors(run: _Run) -> None:
    store, ns = run.store, run.namespace("vectors")
    doc = _doc(
        "vec.md",
        ["east", "north-east", "north", "no embedding here", "south-west"],
        embeddings=[[1.0, 0.0, 0.0], [0.7, 0.7, 0.0], [0.0, 1.0, 0.0], None, [-0.6, -0.8, 0.0]],
    )
    await doc.put(store, ns)
    ids = [c.chunk_id for c in doc.chunks]
    found = await store.search_vector(ns, "kb", [1.0, 0.1, 0.0], 10)
    assert _ids(found) == [ids[0], ids[1], ids[2], ids[4]], (
        f"chunks come by cosine similarity; a chunk without an embedding is not ranked: {[p.text for p in found]}"
    )
    assert found[0].score > found[1].score > found[2].score > found[3].score, "scores fall with similarity"
    found = await store.search_vector(ns, "kb", [0.0, 5.0, 0.0], 2)
    assert _ids(found) == [ids[2], ids[1]], "the query vector's length does not matter (cosine); k limits"
    assert found[0].text == "north" and found[0].source == "vec.md", "vector passages carry text and source"
    assert await store.search_vector(ns, "kb", [math.nan, 1.0, 0.0], 10) == [], "a NaN query vector ranks nothing"
    assert await store.search_vector(ns, "kb", [math.inf, 0.0, 0.0], 10) == [], "an infinite one neither"
    poisoned = _doc("poison.md", ["nan", "inf"], embeddings=[[math.nan, 1.0, 0.0], [math.inf, 0.0, 0.0]])
    await poisoned.put(store, ns)
    found = await store.search_vector(ns, "kb", [1.0, 0.1, 0.0], 10)
    assert _ids(found) == [ids[0], ids[1], ids[2], ids[4]], (
        f"a chunk with a NaN or infinite embedding is never ranked: {[(p.text, p.score) for p in found]}"
    )


async def _hostile_queries(run: _Run) -> None:
    store, ns = run.store, run.namespace("hostile")
    await _doc("ops.md", ['alpha AND beta OR gamma NEAR "delta" it\'s 100% * done']).put(store, ns)
    for query in MALICIOUS_QUERIES:
        try:
            found = await store.search_text(ns, "kb", query, 5)
        except Exception as exc:  # the contract's point: report which query broke it
            raise AssertionError(f"search_text({query!r}) raised {type(exc).__name__}: {exc}") from exc
        assert isinstance(found, list), f"search_text({query!r}) returns a list"
    found = await store.search_text(ns, "kb", 'alpha" OR "zzz', 5)
    assert _sources(found) <= {"ops.md"}, "quotes in a query are searched as text"
    assert await store.documents(ns, "kb"), "hostile queries changed nothing"


async def _large_k(run: _Run) -> None:
    store, ns = run.store, run.namespace("large-k")
    doc = _doc("many.md", [f"widget number {i}" for i in range(30)], embeddings=[[1.0, i / 30] for i in range(30)])
    await doc.put(store, ns)
    found = await store.search_text(ns, "kb", "widget", 100_000)
    assert set(_ids(found)) == doc.ids, f"a k larger than the kb returns every match: {len(found)}"
    found = await store.search_vector(ns, "kb", [1.0, 0.0], 100_000)
    assert len(found) == 30 and len(set(_ids(found))) == 30, "a large k returns each chunk once"


async def _persistence(run: _Run, factory: StoreFactory) -> None:
    ns = run.namespace("persist")
    doc = _doc("kept.md", ["persistent pineapple"])
    await doc.put(run.store, ns)
    other = await _make(factory)
    try:
        assert await other.content_hash(ns, "kb", "kept.md") == doc.document.content_hash, (
            "a second store on the same database sees the first one's documents"
        )
        assert _ids(await other.search_text(ns, "kb", "pineapple", 5)) == [doc.chunks[0].chunk_id]
    finally:
        await other.close()


async def _delete_namespace(run: _Run) -> None:
    """`delete_namespace` / `delete_user` (optional: data-protection requests) empty one namespace, whole."""
    store: Any = run.store
    if not hasattr(store, "delete_namespace"):
        return
    gone, kept = run.namespace("erase"), run.namespace("erase-kept")
    longer = gone + "x"
    run.namespaces.append(longer)
    docs = [_doc("a.md", ["passport numbers are secret"], kb="kb1"), _doc("b.md", ["elm street address"], kb="kb1")]
    for doc in docs:
        await doc.put(store, gone, "kb1")
    other_kb = _doc("c.md", ["passport photo booth"], kb="kb2")
    await other_kb.put(store, gone, "kb2")
    await _doc("a.md", ["passport numbers are secret"], kb="kb1").put(store, kept, "kb1")
    await _doc("a.md", ["passport numbers are secret"], kb="kb1").put(store, longer, "kb1")
    assert await store.delete_namespace(gone) == 3, "delete_namespace returns how many documents it held"
    assert await store.kbs(gone) == [], "a deleted namespace has no kbs"
    for kb in ("kb1", "kb2"):
        assert await store.documents(gone, kb) == [], "a deleted namespace has no documents"
        assert not await store.search_text(gone, kb, "passport street", 10), "a deleted namespace finds nothing"
    assert await store.chunk(gone, "kb2", next(iter(other_kb.ids))) is None, "its chunks are gone"
    for namespace in (kept, longer):
        assert [d.source for d in await store.documents(namespace, "kb1")] == ["a.md"], "other namespaces stay"
        assert len(await store.search_text(namespace, "kb1", "passport", 10)) == 1, "other namespaces stay searchable"
    assert await store.delete_namespace(gone) == 0, "deleting a namespace again deletes nothing"
    if hasattr(store, "delete_user"):
        assert await store.delete_user(kept) == 1, "delete_user deletes the namespace named by the user id"
        assert await store.kbs(kept) == []
