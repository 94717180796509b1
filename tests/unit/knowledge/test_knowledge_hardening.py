"""Filters checked once (`check_filters`), non-finite vectors refused, and the embedder's timeout."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt.errors import InvalidTypeError, InvalidValueError
from agentrt.knowledge import Knowledge, MemoryKnowledgeStore
from agentrt.knowledge.base import Chunk, Document
from agentrt.knowledge.filters import canonical_date, check_filters, finite_unit, json_equal
from agentrt.knowledge.knowledge import EmbedTimeoutError
from agentrt.knowledge.stores.sqlite import SqliteKnowledgeStore


# -- check_filters ------------------------------------------------------------------------------------
def test_filters_are_normalised() -> None:
    assert check_filters(None) is None and check_filters({}) is None
    assert check_filters({"source": None, "tags": None, "since": None, "until": None}) is None
    checked = check_filters(
        {"source": "a.md", "tags": ("x", "y"), "since": "20240131", "until": "2024-W05-3", "team": None, "n": (1, 2)}
    )
    assert checked == {
        "source": ["a.md"],
        "tags": ["x", "y"],
        "since": "2024-01-31",
        "until": "2024-01-31",
        "team": None,
        "n": [1, 2],
    }
    assert check_filters(checked) == checked, "idempotent"
    assert check_filters({"tags": "solo"}) == {"tags": ["solo"]}


@pytest.mark.parametrize(
    ("value", "canonical"),
    [
        ("2024-05-01", "2024-05-01"),
        (" 2024-05-01 ", "2024-05-01"),
        ("20240501", "2024-05-01"),
        ("2024-W18-3", "2024-05-01"),
        (date(2024, 5, 1), "2024-05-01"),
        ("2024-05-01T10:00:00+02:00", "2024-05-01T08:00:00"),
        ("2024-05-01T10:00Z", "2024-05-01T10:00:00"),
        ("20240501T100000", "2024-05-01T10:00:00"),
        ("2024-05-01 10:00:00.25", "2024-05-01T10:00:00.250000"),
        (datetime(2024, 5, 1, 1, 0, tzinfo=timezone(timedelta(hours=3))), "2024-04-30T22:00:00"),
        (datetime(2024, 5, 1), "2024-05-01T00:00:00"),
    ],
)
def test_dates_have_one_canonical_spelling(value: Any, canonical: str) -> None:
    assert canonical_date(value, "since") == canonical
    assert check_filters({"until": value}) == {"until": canonical}


@pytest.mark.parametrize(
    ("filters", "error"),
    [
        ("source", InvalidTypeError),
        ({"source": 5}, InvalidTypeError),
        ({"source": [1]}, InvalidValueError),
        ({"source": ["s"] * 101}, InvalidValueError),
        ({"tags": 5}, InvalidTypeError),
        ({"tags": {"a": 1}}, InvalidTypeError),
        ({"tags": ["t"] * 51}, InvalidValueError),
        ({"tags": ["\ud800"]}, InvalidValueError),
        ({"since": "yesterday"}, InvalidValueError),
        ({"since": "2024-13-45"}, InvalidValueError),
        ({"until": 20240101}, InvalidValueError),
        ({"until": "2" * 100}, InvalidValueError),
        ({"year": 2**63}, InvalidValueError),
        ({"year": -(2**63) - 1}, InvalidValueError),
        ({"year": math.inf}, InvalidValueError),
        ({"year": math.nan}, InvalidValueError),
        ({"year": "\udfff"}, InvalidValueError),
        ({"year": b"2024"}, InvalidTypeError),
        ({"year": {1: "x"}}, InvalidTypeError),
        ({"year": [[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]}, InvalidValueError),
        ({"year": list(range(2000))}, InvalidValueError),
        ({5: "x"}, InvalidTypeError),
        ({"\ud800": "x"}, InvalidValueError),
        ({"k" * 300: "x"}, InvalidValueError),
        ({f"k{i}": i for i in range(33)}, InvalidValueError),
    ],
)
def test_bad_filters_are_typed_errors(filters: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        check_filters(filters)


def test_extreme_but_valid_values_pass() -> None:
    assert check_filters({"year": 2**63 - 1, "low": -(2**63), "f": 1e308, "nul": "a\x00b"}) is not None


def test_json_equality_is_typed() -> None:
    assert json_equal(3, 3.0) and json_equal(True, True) and json_equal(None, None)
    assert not json_equal(True, 1) and not json_equal(1, True) and not json_equal(0, False)
    assert not json_equal("3", 3) and not json_equal(None, "") and not json_equal([1], (1, 2))
    assert json_equal({"a": [1, True]}, {"a": [1.0, True]}) and not json_equal({"a": 1}, {"a": True})


def test_finite_unit() -> None:
    assert finite_unit([3.0, 4.0]) == [0.6, 0.8]
    assert finite_unit([1e200, 1e200]) == pytest.approx([math.sqrt(0.5)] * 2), "no overflow of the norm"
    for bad in ([], [0.0, 0.0], [math.nan, 1.0], [math.inf, 0.0], [-math.inf, 1.0]):
        assert finite_unit(bad) is None, bad


# -- the same documents on every backend --------------------------------------------------------------
async def test_none_and_typed_equality_agree_on_memory_and_sqlite(tmp_path: Path) -> None:
    specs: dict[str, dict[str, Any]] = {"null.md": {"team": None, "n": 1}, "one.md": {"team": "a", "n": True}}
    specs["none.md"] = {}
    async with SqliteKnowledgeStore(tmp_path / "kb.db", vectors=False) as sqlite_store:
        for store in (MemoryKnowledgeStore(), sqlite_store):
            kb = Knowledge("kb", store=store)
            for source, meta in specs.items():
                await kb.add_text("zebra notes", source=source, metadata=meta)

            async def found(filters: dict[str, Any], kb: Knowledge = kb) -> list[str]:
                return sorted(p.source for p in await kb.search("zebra", 10, filters))

            assert await found({"team": None}) == ["null.md"], store
            assert await found({"n": 1}) == ["null.md"], store
            assert await found({"n": True}) == ["one.md"], store
            assert await found({"n": 1.0}) == ["null.md"], store


async def test_document_dates_are_stored_canonical(tmp_path: Path) -> None:
    async with SqliteKnowledgeStore(tmp_path / "kb.db", vectors=False) as sqlite_store:
        for store in (MemoryKnowledgeStore(), sqlite_store):
            kb = Knowledge("kb", store=store)
            await kb.add_text("zebra aware", source="aware", metadata={"date": "2024-05-01T10:00:00+02:00"})
            await kb.add_text("zebra basic", source="basic", metadata={"date": "20240502"})
            await kb.add_text("zebra odd", source="odd", metadata={"date": "next tuesday"})
            dates = {d.source: d.metadata["date"] for d in await kb.documents()}
            assert dates == {"aware": "2024-05-01T08:00:00", "basic": "2024-05-02", "odd": "next tuesday"}

            async def found(filters: dict[str, Any], kb: Knowledge = kb) -> list[str]:
                return sorted(p.source for p in await kb.search("zebra", 10, filters))

            assert await found({"until": "2024-05-01T08:30:00"}) == ["aware"], store
            assert await found({"until": datetime(2024, 5, 1, 7, 59, tzinfo=UTC)}) == [], store
            assert await found({"since": "2024-05-01T08:00:00Z"}) == ["aware", "basic"], store
            assert await found({"since": "2024-05-02T00:00:00"}) == ["basic"], "a date alone is its midnight"
            assert await found({"since": "1900-01-01"}) == ["aware", "basic"], "a date that is not ISO is out"


_BOUNDS = st.one_of(
    st.dates(date(2023, 12, 1), date(2024, 8, 1)).flatmap(
        lambda d: st.sampled_from([d, d.isoformat(), d.strftime("%Y%m%d"), "{}-W{:02d}-{}".format(*d.isocalendar())])
    ),
    st.datetimes(datetime(2023, 12, 1), datetime(2024, 8, 1)).flatmap(
        lambda t: st.sampled_from([t, t.isoformat(), t.replace(tzinfo=UTC).isoformat(), t.strftime("%Y%m%dT%H%M%S")])
    ),
)


def test_date_filters_agree_on_memory_and_sqlite(tmp_path: Path) -> None:
    """Any spelling of a bound selects the same documents in the memory store and in SQLite."""
    dates = ["2024-01-01", "2024-03-10T09:30:00", "2024-03-10", "2024-05-01T23:59:59.5", "2024-07-31", "nope"]
    with asyncio.Runner() as runner:
        memory = MemoryKnowledgeStore()
        sqlite_store = SqliteKnowledgeStore(tmp_path / "kb.db", vectors=False)
        kbs = [Knowledge("kb", store=memory), Knowledge("kb", store=sqlite_store)]
        for kb in kbs:
            for i, when in enumerate(dates):
                runner.run(kb.add_text(f"zebra {i}", source=f"d{i}", metadata={"date": when}))

        @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
        @given(since=st.none() | _BOUNDS, until=st.none() | _BOUNDS)
        def check(since: Any, until: Any) -> None:
            filters = {"since": since, "until": until}
            found = [sorted(p.source for p in runner.run(kb.search("zebra", 20, filters))) for kb in kbs]
            assert found[0] == found[1], (filters, found)

        try:
            check()
        finally:
            runner.run(sqlite_store.close())


# -- non-finite vectors -------------------------------------------------------------------------------
def _embedder(query: list[float], poison: list[float]) -> Any:
    def embed(texts: list[str]) -> list[list[float]]:
        return [poison if "poison" in t else query if t == "the query" else [1.0, 0.0] for t in texts]

    return embed


@pytest.mark.parametrize("bad", [[math.nan, 1.0], [math.inf, 0.0], [0.0, 0.0], []])
async def test_a_vector_without_direction_fails_its_source(bad: list[float]) -> None:
    store = MemoryKnowledgeStore()
    kb = Knowledge("kb", store=store, embedder=_embedder([1.0, 0.0], bad))
    report = await kb.add(["poison here", "plain text"])
    assert len(report.added) == 1 and [s for s, _ in report.failed] == [report.failed[0][0]]
    assert "no direction" in report.failed[0][1]
    assert [d.source for d in await kb.documents()] == list(report.added), "nothing of the poisoned source is stored"


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
@pytest.mark.parametrize("bad", [[math.nan, 1.0], [math.inf, 0.0]])
async def test_a_non_finite_query_vector_is_a_typed_error(bad: list[float], mode: Any) -> None:
    kb = Knowledge("kb", store=MemoryKnowledgeStore(), embedder=_embedder(bad, [1.0, 0.0]))
    await kb.add("plain text")
    with pytest.raises(InvalidValueError, match="not finite"):
        await kb.search("the query", 3, mode=mode)


async def test_huge_finite_components_are_scaled_not_overflowed() -> None:
    kb = Knowledge("kb", store=MemoryKnowledgeStore(), embedder=_embedder([1e300, 1e300], [1e300, 1e300]))
    await kb.add(["poison huge", "plain text"])
    hits = await kb.search("the query", 2, mode="vector")
    assert [h.text for h in hits] == ["poison huge", "plain text"]
    assert all(math.isfinite(h.score) for h in hits)


@pytest.mark.parametrize("backend", ["memory", "sqlite-python", "sqlite-vec"])
async def test_stores_never_rank_a_non_finite_embedding(tmp_path: Path, backend: str) -> None:
    if backend == "memory":
        store: Any = MemoryKnowledgeStore()
    else:
        if backend == "sqlite-vec":
            pytest.importorskip("sqlite_vec")
        store = SqliteKnowledgeStore(tmp_path / "kb.db", vectors=backend == "sqlite-vec")
    vectors = [(math.nan, 1.0), (math.inf, 0.0), (1.0, 0.0), (0.0, 1.0)]
    chunks = [Chunk(f"c{i}", "a.md", i, f"text {i}", embedding=v) for i, v in enumerate(vectors)]
    await store.upsert("ns", "kb", Document("a.md", None, "h"), chunks)
    hits = await store.search_vector("ns", "kb", [1.0, 0.0], 10)
    assert [h.chunk_id for h in hits] == ["c2", "c3"]
    assert all(math.isfinite(h.score) for h in hits)
    assert await store.search_vector("ns", "kb", [math.nan, 0.0], 10) == []
    await store.close()


# -- the embedder's timeout ---------------------------------------------------------------------------
class _Hanging:
    """An async embedder that never answers for texts containing `hang` (the others get [1, 0])."""

    def __init__(self, hang: str) -> None:
        self.hang = hang
        self.calls = 0

    async def __call__(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        if any(self.hang in t for t in texts):
            await asyncio.Event().wait()
        return [[1.0, 0.0] for _ in texts]


@pytest.mark.parametrize("value", [0, -1, math.nan, math.inf, True, "5"])
def test_embed_timeout_is_checked(value: Any) -> None:
    with pytest.raises(InvalidValueError, match="embed_timeout"):
        Knowledge("kb", store=MemoryKnowledgeStore(), embed_timeout=value)


def test_embed_timeout_default_and_none() -> None:
    assert Knowledge("kb", store=MemoryKnowledgeStore()).embed_timeout == 60.0
    assert Knowledge("kb", store=MemoryKnowledgeStore(), embed_timeout=None).embed_timeout is None


async def test_a_hanging_embedder_fails_the_source_of_an_add() -> None:
    kb = Knowledge("kb", store=MemoryKnowledgeStore(), embedder=_Hanging("stuck"), embed_timeout=0.05)
    report = await asyncio.wait_for(kb.add(["stuck text", "fine text"]), 5)
    assert len(report.added) == 1 and len(report.failed) == 1
    assert "did not answer within 0.05 s" in report.failed[0][1]
    assert [d.source for d in await kb.documents()] == list(report.added)


async def test_a_hanging_sync_embedder_fails_the_source_too() -> None:
    release = threading.Event()

    def stuck(texts: list[str]) -> list[list[float]]:
        release.wait(10)
        return [[1.0, 0.0] for _ in texts]

    kb = Knowledge("kb", store=MemoryKnowledgeStore(), embedder=stuck, embed_timeout=0.05)
    try:
        report = await asyncio.wait_for(kb.add("some text"), 5)
        assert report.added == () and "did not answer" in report.failed[0][1]
    finally:
        release.set()


async def test_a_hanging_embedder_makes_hybrid_search_full_text(caplog: pytest.LogCaptureFixture) -> None:
    embedder = _Hanging("secret-query")
    kb = Knowledge("kb", store=MemoryKnowledgeStore(), embedder=embedder, embed_timeout=0.05)
    await kb.add("zebra facts")
    with caplog.at_level(logging.WARNING, logger="agentrt.knowledge"):
        hits = await asyncio.wait_for(kb.search("zebra secret-query"), 5)
    assert [h.text for h in hits] == ["zebra facts"]
    warnings = [r for r in caplog.records if r.name == "agentrt.knowledge" and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "full text" in warnings[0].getMessage()
    assert warnings[0].exc_info is None and "secret-query" not in warnings[0].getMessage()


async def test_a_hanging_embedder_fails_a_vector_search_with_a_typed_error() -> None:
    kb = Knowledge("kb", store=MemoryKnowledgeStore(), embedder=_Hanging("hang"), embed_timeout=0.05)
    await kb.add("zebra facts")
    with pytest.raises(EmbedTimeoutError) as raised:
        await asyncio.wait_for(kb.search("hang", mode="vector"), 5)
    assert isinstance(raised.value, TimeoutError)


async def test_no_timeout_waits_for_a_slow_embedder() -> None:
    async def slow(texts: list[str]) -> list[list[float]]:
        await asyncio.sleep(0.1)
        return [[1.0, 0.0] for _ in texts]

    kb = Knowledge("kb", store=MemoryKnowledgeStore(), embedder=slow, embed_timeout=None)
    report = await kb.add("zebra facts")
    assert report.failed == () and [h.text for h in await kb.search("zebra", mode="vector")] == ["zebra facts"]


async def test_knowledge_search_checks_filters_before_the_store() -> None:
    class Exploding(MemoryKnowledgeStore):
        async def search_text(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("the store was called")

    kb = Knowledge("kb", store=Exploding())
    for bad in ({"source": 5}, {"year": 10**30}, {"tags": ["t"] * 5000}, {"since": "20241301"}):
        with pytest.raises((InvalidTypeError, InvalidValueError)):
            await kb.search("zebra", 5, bad)


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
async def test_an_all_zero_query_vector_finds_nothing_similar_but_text_still_ranks(mode: Any) -> None:
    kb = Knowledge("kb", store=MemoryKnowledgeStore(), embedder=_embedder([0.0, 0.0], [1.0, 0.0]))
    await kb.add("plain text about the query")
    hits = await kb.search("the query", 3, mode=mode)
    assert [h.text for h in hits] == ([] if mode == "vector" else ["plain text about the query"])
