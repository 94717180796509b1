"""The knowledge layer's types and the `KnowledgeStore` protocol every index backend implements.

A knowledge base (``kb``) lives in a ``namespace`` (a tenant: the server uses the user id): a store
never returns, counts or deletes anything of another namespace or another kb. A document is keyed by
its ``source`` (a path, a URL or a caller-given id) within its kb; re-adding a source replaces all
its chunks in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from agentrt.memory.retrieval import Passage, SearchFilters

__all__ = ["AddReport", "Chunk", "Document", "KnowledgeStore", "SearchMode"]

SearchMode: TypeAlias = Literal["text", "vector", "hybrid"]
"""``text``: BM25 / full-text only; ``vector``: embeddings only; ``hybrid``: both, fused by
reciprocal rank (the default when an embedder is configured, else ``text``)."""


@dataclass(frozen=True, slots=True)
class Document:
    """One ingested source."""

    source: str
    title: str | None
    content_hash: str
    """sha256 of the extracted text and the chunking settings: equal hash, nothing to re-index."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Caller metadata; ``tags`` (list of str) and ``date`` (ISO date) are what filters read."""
    chunk_count: int = 0
    added_at: float = 0.0


@dataclass(frozen=True, slots=True)
class Chunk:
    """A piece of a document, the unit that is indexed and returned as a `Passage`."""

    chunk_id: str
    """Stable: derived from the kb, the source and the chunk's ordinal and text."""
    source: str
    ordinal: int
    text: str
    heading_path: tuple[str, ...] = ()
    page: int | None = None
    tokens: int = 0
    embedding: tuple[float, ...] | None = None

    @property
    def location(self) -> str | None:
        """``"page 3"``, ``"Install > Linux"``, both joined with ``", "``, or None."""
        parts = []
        if self.page is not None:
            parts.append(f"page {self.page}")
        if self.heading_path:
            parts.append(" > ".join(self.heading_path))
        return ", ".join(parts) or None


@dataclass(frozen=True, slots=True)
class AddReport:
    """What one `Knowledge.add` did, per source."""

    added: tuple[str, ...] = ()
    """New or changed sources, indexed."""
    skipped: tuple[str, ...] = ()
    """Unchanged sources (same content hash): nothing written."""
    failed: tuple[tuple[str, str], ...] = ()
    """(source, reason) for each source that could not be read or parsed; the others still went in."""
    chunks: int = 0


@runtime_checkable
class KnowledgeStore(Protocol):
    """An index of documents and chunks: full-text search always, vectors when chunks carry them."""

    async def upsert(self, namespace: str, kb: str, document: Document, chunks: Sequence[Chunk]) -> None:
        """Insert `document` or replace it and all its chunks, atomically (readers see old or new)."""
        ...

    async def content_hash(self, namespace: str, kb: str, source: str) -> str | None:
        """The stored document's hash, or None when the source is not in the kb."""
        ...

    async def delete(self, namespace: str, kb: str, source: str) -> bool:
        """Remove a document and its chunks; returns whether it existed."""
        ...

    async def documents(self, namespace: str, kb: str) -> list[Document]:
        """Every document of the kb, by source."""
        ...

    async def kbs(self, namespace: str) -> list[str]:
        """The namespace's knowledge bases that hold at least one document, sorted."""
        ...

    async def drop(self, namespace: str, kb: str) -> int:
        """Delete a whole kb; returns how many documents it held."""
        ...

    async def chunk(self, namespace: str, kb: str, chunk_id: str) -> Passage | None:
        """One chunk of the kb by id, as a `Passage` (score 0), or None: never another namespace's or kb's."""
        ...

    async def search_text(
        self, namespace: str, kb: str, query: str, k: int, filters: SearchFilters | None = None
    ) -> list[Passage]:
        """Full-text (BM25-style) ranking, best first; a query with no searchable term returns []."""
        ...

    async def search_vector(
        self, namespace: str, kb: str, vector: Sequence[float], k: int, filters: SearchFilters | None = None
    ) -> list[Passage]:
        """Nearest chunks by cosine similarity, best first; chunks without an embedding are not ranked."""
        ...

    async def close(self) -> None:
        """Release connections and threads."""
        ...
