"""`MemoryKnowledgeStore`: a complete in-process `KnowledgeStore` (tests, notebooks, small corpora).

Full text is ranked with BM25 over the terms of `agentrt.memory._text` (words, and CJK runs as
characters and bigrams, so Chinese and Japanese queries find their documents), vectors by cosine
similarity. Nothing is persisted. `document_matches` is the reference reading of
`agentrt.memory.retrieval.SearchFilters`, shared with backends that filter in Python.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from agentrt.errors import InvalidValueError
from agentrt.knowledge.base import Chunk, Document
from agentrt.knowledge.filters import check_filters, json_equal
from agentrt.memory._text import index_terms, query_terms
from agentrt.memory.retrieval import Passage, SearchFilters

__all__ = ["MemoryKnowledgeStore", "document_matches", "parse_date", "passage_for"]

BM25_K1 = 1.2
BM25_B = 0.75


def parse_date(value: Any) -> tuple[datetime, bool] | None:
    """A filter or metadata date as a naive UTC datetime, and whether it was a date without time.

    Accepts `datetime`, `date` and ISO 8601 strings; None for anything else.
    """
    if isinstance(value, datetime):
        moment = value
        date_only = False
    elif isinstance(value, date):
        moment = datetime(value.year, value.month, value.day)
        date_only = True
    elif isinstance(value, str):
        text = value.strip()
        try:
            if len(text) == 10:
                day = date.fromisoformat(text)
                return datetime(day.year, day.month, day.day), True
            moment = datetime.fromisoformat(text)
        except ValueError:
            return None
        date_only = False
    else:
        return None
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return moment, date_only


def _in_range(document: Document, since: tuple[datetime, bool] | None, until: tuple[datetime, bool] | None) -> bool:
    if since is None and until is None:
        return True
    stamp = parse_date(document.metadata.get("date"))
    if stamp is None:
        return False
    moment = stamp[0]
    if since is not None and (moment.date() < since[0].date() if since[1] else moment < since[0]):
        return False
    return until is None or (moment.date() <= until[0].date() if until[1] else moment <= until[0])


def document_matches(document: Document, filters: SearchFilters | None) -> bool:
    """Whether `document` passes `filters` (read by `agentrt.knowledge.filters.check_filters`).

    ``source``: one source or a list; ``tags``: the document carries every one; ``since`` /
    ``until``: its ``date`` is in the range, bounds included (a document without a readable date is
    out); any other key: its metadata value equals the filter's as JSON (None: the value is null).
    ``source``, ``tags``, ``since`` and ``until`` set to None filter nothing.
    """
    return _Filter(filters).matches(document)


class _Filter:
    """Checked filters, ready to test documents against (checked once per search)."""

    __slots__ = ("checked", "since", "until")

    def __init__(self, filters: SearchFilters | None) -> None:
        self.checked = check_filters(filters) or {}
        self.since = parse_date(self.checked["since"]) if "since" in self.checked else None
        self.until = parse_date(self.checked["until"]) if "until" in self.checked else None

    def matches(self, document: Document) -> bool:
        for key, wanted in self.checked.items():
            if key in ("since", "until"):
                continue
            if key == "source":
                if document.source not in wanted:
                    return False
            elif key == "tags":
                if not set(wanted) <= _tags(document.metadata.get("tags")):
                    return False
            elif key not in document.metadata or not json_equal(document.metadata[key], wanted):
                return False
        return _in_range(document, self.since, self.until)


def _tags(value: Any) -> set[str]:
    """A document's tags: a list (its strings) or a single string."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, list | tuple):
        return {tag for tag in value if isinstance(tag, str)}
    return set()


def passage_for(document: Document, chunk: Chunk, score: float) -> Passage:
    """The `Passage` a store returns for `chunk` of `document`."""
    return Passage(
        chunk_id=chunk.chunk_id,
        text=chunk.text,
        source=chunk.source,
        title=document.title,
        location=chunk.location,
        score=score,
        metadata=copy.deepcopy(document.metadata),
    )


@dataclass(frozen=True, slots=True)
class _Entry:
    document: Document
    chunks: tuple[Chunk, ...]
    terms: tuple[Counter[str], ...]
    lengths: tuple[int, ...]


class MemoryKnowledgeStore:
    """A `KnowledgeStore` in a dict: BM25 full text, cosine vectors, every filter; not persisted.

    Every method runs without awaiting in between, so each is atomic on the event loop.
    """

    def __init__(self) -> None:
        self._kbs: dict[tuple[str, str], dict[str, _Entry]] = {}

    def __repr__(self) -> str:
        return f"MemoryKnowledgeStore({sum(len(docs) for docs in self._kbs.values())} documents)"

    async def upsert(self, namespace: str, kb: str, document: Document, chunks: Sequence[Chunk]) -> None:
        for chunk in chunks:
            if chunk.source != document.source:
                raise InvalidValueError(f"chunk {chunk.chunk_id} is of {chunk.source!r}, not {document.source!r}")
        stored = dataclasses.replace(
            document,
            metadata=copy.deepcopy(document.metadata),
            chunk_count=len(chunks),
            added_at=document.added_at or time.time(),
        )
        terms = tuple(Counter(index_terms(_indexed_text(stored, chunk)).split()) for chunk in chunks)
        entry = _Entry(stored, tuple(chunks), terms, tuple(sum(counter.values()) for counter in terms))
        self._kbs.setdefault((namespace, kb), {})[document.source] = entry

    async def content_hash(self, namespace: str, kb: str, source: str) -> str | None:
        entry = self._kbs.get((namespace, kb), {}).get(source)
        return None if entry is None else entry.document.content_hash

    async def delete(self, namespace: str, kb: str, source: str) -> bool:
        docs = self._kbs.get((namespace, kb))
        if docs is None or source not in docs:
            return False
        del docs[source]
        if not docs:
            del self._kbs[(namespace, kb)]
        return True

    async def documents(self, namespace: str, kb: str) -> list[Document]:
        docs = self._kbs.get((namespace, kb), {})
        return [copy.deepcopy(docs[source].document) for source in sorted(docs)]

    async def kbs(self, namespace: str) -> list[str]:
        return sorted(kb for (ns, kb), docs in self._kbs.items() if ns == namespace and docs)

    async def drop(self, namespace: str, kb: str) -> int:
        return len(self._kbs.pop((namespace, kb), {}))

    async def delete_namespace(self, namespace: str) -> int:
        """Delete every kb of the namespace; returns how many documents they held."""
        keys = [key for key in self._kbs if key[0] == namespace]
        return sum(len(self._kbs.pop(key)) for key in keys)

    async def delete_user(self, user_id: str) -> int:
        """`delete_namespace` of the user's namespace (the user id, as the server and per-user kbs use)."""
        return await self.delete_namespace(user_id)

    async def chunk(self, namespace: str, kb: str, chunk_id: str) -> Passage | None:
        for entry in self._kbs.get((namespace, kb), {}).values():
            for chunk in entry.chunks:
                if chunk.chunk_id == chunk_id:
                    return passage_for(entry.document, chunk, 0.0)
        return None

    async def search_text(
        self, namespace: str, kb: str, query: str, k: int, filters: SearchFilters | None = None
    ) -> list[Passage]:
        matcher = _Filter(filters)
        docs = self._kbs.get((namespace, kb), {})
        terms = query_terms(query)
        if k <= 0 or not terms or not docs:
            return []
        total = sum(len(entry.chunks) for entry in docs.values())
        average = sum(sum(entry.lengths) for entry in docs.values()) / max(total, 1)
        frequency = Counter(term for entry in docs.values() for counter in entry.terms for term in set(counter))
        idf = {term: math.log(1 + (total - frequency[term] + 0.5) / (frequency[term] + 0.5)) for term in terms}
        scored: list[tuple[float, str, int, Passage]] = []
        for source, entry in docs.items():
            if not matcher.matches(entry.document):
                continue
            for chunk, counter, length in zip(entry.chunks, entry.terms, entry.lengths, strict=True):
                score = 0.0
                for term in terms:
                    tf = counter.get(term, 0)
                    if tf:
                        norm = BM25_K1 * (1 - BM25_B + BM25_B * length / (average or 1))
                        score += idf[term] * tf * (BM25_K1 + 1) / (tf + norm)
                if score > 0:
                    scored.append((-score, source, chunk.ordinal, passage_for(entry.document, chunk, score)))
        scored.sort(key=lambda row: row[:3])
        return [row[3] for row in scored[:k]]

    async def search_vector(
        self, namespace: str, kb: str, vector: Sequence[float], k: int, filters: SearchFilters | None = None
    ) -> list[Passage]:
        matcher = _Filter(filters)
        docs = self._kbs.get((namespace, kb), {})
        query = [float(x) for x in vector]
        query_norm = math.sqrt(sum(x * x for x in query))
        if k <= 0 or not docs or query_norm == 0 or not math.isfinite(query_norm):
            return []
        scored: list[tuple[float, str, int, Passage]] = []
        for source, entry in docs.items():
            if not matcher.matches(entry.document):
                continue
            for chunk in entry.chunks:
                if chunk.embedding is None or len(chunk.embedding) != len(query):
                    continue
                norm = math.sqrt(sum(x * x for x in chunk.embedding))
                if norm == 0 or not math.isfinite(norm):
                    continue  # no direction (zero) or none at all (NaN, inf): nothing to rank it by
                score = sum(a * b for a, b in zip(query, chunk.embedding, strict=True)) / (norm * query_norm)
                if not math.isfinite(score):
                    continue
                scored.append((-score, source, chunk.ordinal, passage_for(entry.document, chunk, score)))
        scored.sort(key=lambda row: row[:3])
        return [row[3] for row in scored[:k]]

    async def close(self) -> None:
        """Nothing to release."""


def _indexed_text(document: Document, chunk: Chunk) -> str:
    """What full text search matches a chunk by: its text, its heading path and its document's title."""
    return "\n".join((chunk.text, *chunk.heading_path, document.title or ""))
