"""`Knowledge`: a named knowledge base of one tenant: ingest files, URLs and texts, search them.

``kb = Knowledge("handbook")`` keeps its index in ``~/.agentrt/knowledge.db`` (SQLite, FTS5);
``store="postgresql://..."`` shares one between replicas; ``embedder=OpenAIEmbeddings()`` adds
vector search, fused with full text by reciprocal rank. ``await kb.add("docs/")`` reads a folder,
re-reading only what changed (a content hash per source); ``await kb.search("how do I install?")``
returns `Passage` objects with their citations. `Knowledge` implements
`agentrt.memory.retrieval.Retriever`, which is what ``ReActAgent(knowledge=...)`` takes.
``Knowledge("docs", per_user=True)`` reads its namespace from the caller's `RuntimeContext`
(the user id), so one agent served to many users only ever searches the caller's own kb.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentrt.context import RuntimeContext
from agentrt.errors import AgentrtError, InvalidTypeError, InvalidValueError, UserError
from agentrt.knowledge.base import AddReport, Chunk, Document, KnowledgeStore, SearchMode
from agentrt.knowledge.chunking import Chunker
from agentrt.knowledge.filters import canonical_date, check_filters, finite_unit
from agentrt.knowledge.fusion import reciprocal_rank_fusion
from agentrt.knowledge.stores.memory import MemoryKnowledgeStore
from agentrt.memory.long_term import Embedder, embed_texts
from agentrt.memory.retrieval import Passage, SearchFilters

if TYPE_CHECKING:
    from types import TracebackType

    from agentrt.knowledge.loaders import Loaded, Target
    from agentrt.tool.builtin.web import WebTools

__all__ = [
    "DEFAULT_KNOWLEDGE_URL",
    "MAX_K",
    "EmbedTimeoutError",
    "Knowledge",
    "NoCallerError",
    "check_name",
    "store_from_url",
]

logger = logging.getLogger("agentrt.knowledge")

DEFAULT_KNOWLEDGE_URL = "sqlite:///~/.agentrt/knowledge.db"
MAX_K = 100
EMBED_BATCH = 64
_NAME = re.compile(r"[A-Za-z0-9._@:-]{1,128}")
_MODES = ("text", "vector", "hybrid")
_CHUNKER_VERSION = 1

Progress = Callable[[int, int, str], None]
"""``progress(done, total, source)``, called after each source of an `add`."""


class NoCallerError(UserError):
    """A per-user `Knowledge` was used outside a call with a user (no `RuntimeContext`, or no user id)."""


class EmbedTimeoutError(AgentrtError, TimeoutError):
    """The embedder did not answer within `Knowledge.embed_timeout` (also a `TimeoutError`)."""


def check_name(value: object, what: str) -> str:
    """`value` if it is a valid knowledge base name or namespace (1 to 128 of ``A-Za-z0-9._@:-``)."""
    if not isinstance(value, str):
        raise InvalidTypeError(f"{what} must be a string, not {type(value).__name__}")
    if not _NAME.fullmatch(value):
        raise InvalidValueError(
            f"{what} must be 1 to 128 characters of letters, digits and . _ @ : -, not {value[:40]!r}"
        )
    return value


def store_from_url(url: str) -> KnowledgeStore:
    """The store a URL names: ``sqlite:///path``, ``postgresql://...`` (``+asyncpg`` too), ``memory://``."""
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep:
        raise InvalidValueError(f"not a knowledge store URL: {url!r} (use sqlite:///path or postgresql://...)")
    if scheme == "memory":
        return MemoryKnowledgeStore()
    if scheme == "sqlite":
        path = rest[1:] if rest.startswith("/") else rest  # sqlite:///rel.db, sqlite:////abs.db
        if not path:
            raise InvalidValueError(f"the SQLite URL {url!r} names no file")
        from agentrt.knowledge.stores.sqlite import SqliteKnowledgeStore

        return SqliteKnowledgeStore(Path(path).expanduser())
    if scheme in ("postgres", "postgresql", "postgresql+asyncpg"):
        from agentrt.knowledge.stores.postgres import PostgresKnowledgeStore

        return PostgresKnowledgeStore(url)
    raise InvalidValueError(f"unknown knowledge store scheme {scheme!r} in {url!r} (sqlite, postgresql, memory)")


class _StoreRef:
    """The store of a `Knowledge` and of its `for_namespace` views: made on first use, closed once."""

    def __init__(self, store: KnowledgeStore | str | None) -> None:
        if store is not None and not isinstance(store, str) and not isinstance(store, KnowledgeStore):
            raise InvalidTypeError(f"store must be a KnowledgeStore or a URL, not {type(store).__name__}")
        self.url = store if isinstance(store, str) or store is None else None
        self.store: KnowledgeStore | None = None if isinstance(store, str) or store is None else store
        self.owned = self.store is None
        self.closed = False

    def get(self) -> KnowledgeStore:
        if self.closed:
            raise UserError("this Knowledge is closed")
        if self.store is None:
            self.store = store_from_url(self.url or DEFAULT_KNOWLEDGE_URL)
        return self.store

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.store is not None and self.owned:
            await self.store.close()


def _embedder_identity(embedder: Embedder | None) -> str:
    if embedder is None:
        return "none"
    kind = embedder if callable(embedder) and hasattr(embedder, "__qualname__") else type(embedder)
    name = f"{getattr(kind, '__module__', '')}.{getattr(kind, '__qualname__', type(embedder).__name__)}"
    return f"{name}:{getattr(embedder, 'model', '')}:{getattr(embedder, 'dimensions', '')}"


class Knowledge:
    """A knowledge base: documents in, passages with citations out (implements `Retriever`).

    Args:
        name: The knowledge base's name (the ``kb`` of the store): 1 to 128 of ``A-Za-z0-9._@:-``.
        store: A `KnowledgeStore`, or a URL: ``sqlite:///path`` (default
            ``sqlite:///~/.agentrt/knowledge.db``), ``postgresql://...``, ``memory://``. A store
            made from a URL is opened on first use and closed by `close`; one passed in is the caller's.
        embedder: ``embed(texts) -> vectors`` (sync or async, e.g. `OpenAIEmbeddings`); with it,
            chunks carry vectors and search is hybrid. Without, full text (BM25) only.
        namespace: The tenant (the server passes the user id); same charset as `name`.
        per_user: Use the caller's user id (``RuntimeContext.current().user_id``, same charset as
            `namespace`) as the namespace of each `search`, `add`, `delete`, `documents` and
            `drop`, instead of `namespace`; outside a call with a user they raise `NoCallerError`.
        chunk_tokens: Most tokens per chunk, overlap included.
        chunk_overlap: Tokens of the previous chunk a chunk repeats.
        max_file_bytes: Largest file or download read (bigger ones are reported as failed).
        search_mode: ``text``, ``vector`` or ``hybrid``; default hybrid with an embedder, else text.
        web: The ``fetch_url`` policy URLs are fetched under (default: public addresses only).
        embed_timeout: Seconds one embedder call may take (None: no limit). An `add` whose embedder
            times out reports that source in ``failed``; a hybrid `search` falls back to full-text
            ranking (a warning is logged); a vector `search` raises `EmbedTimeoutError`.
    """

    def __init__(
        self,
        name: str = "default",
        *,
        store: KnowledgeStore | str | None = None,
        embedder: Embedder | None = None,
        namespace: str = "default",
        per_user: bool = False,
        chunk_tokens: int = 400,
        chunk_overlap: int = 60,
        max_file_bytes: int = 50 * 1024 * 1024,
        search_mode: SearchMode | None = None,
        web: WebTools | None = None,
        embed_timeout: float | None = 60.0,
    ) -> None:
        self.name = check_name(name, "the knowledge base name")
        self.namespace = check_name(namespace, "the namespace")
        if not isinstance(per_user, bool):
            raise InvalidTypeError(f"per_user must be a bool, not {type(per_user).__name__}")
        self.per_user = per_user
        if embedder is not None and not callable(embedder):
            raise InvalidTypeError(f"embedder must be callable, not {type(embedder).__name__}")
        if isinstance(max_file_bytes, bool) or not isinstance(max_file_bytes, int) or max_file_bytes < 1:
            raise InvalidValueError(f"max_file_bytes must be a positive int, not {max_file_bytes!r}")
        if embed_timeout is not None and (
            isinstance(embed_timeout, bool)
            or not isinstance(embed_timeout, int | float)
            or not math.isfinite(embed_timeout)
            or embed_timeout <= 0
        ):
            raise InvalidValueError(
                f"embed_timeout must be a positive number of seconds or None, not {embed_timeout!r}"
            )
        self._ref = _StoreRef(store)
        self.embed_timeout: float | None = None if embed_timeout is None else float(embed_timeout)
        self.embedder = embedder
        self.chunker = Chunker(chunk_tokens, chunk_overlap)
        self.max_file_bytes = max_file_bytes
        self.search_mode = self._check_mode(search_mode) if search_mode is not None else None
        self.web = web

    def __repr__(self) -> str:
        if self.per_user:
            return f"Knowledge({self.name!r}, per_user=True)"
        return f"Knowledge({self.name!r}, namespace={self.namespace!r})"

    def current_namespace(self) -> str:
        """The namespace an operation uses now: `namespace`, or with `per_user` the caller's user id."""
        if not self.per_user:
            return self.namespace
        ctx = RuntimeContext.current()
        if ctx is None or ctx.user_id is None:
            raise NoCallerError(
                f"{self!r} is per user: use it within an agent call made with RuntimeContext(user_id=...) "
                "(or inside `with ctx.bind():`), or call kb.for_namespace(user_id)"
            )
        return check_name(ctx.user_id, "the user id of a per-user knowledge base")

    @property
    def store(self) -> KnowledgeStore:
        """The store (made from the URL on first use)."""
        return self._ref.get()

    def for_namespace(self, namespace: str) -> Knowledge:
        """The same knowledge base name for one fixed tenant (never per user), on the same store object."""
        other = object.__new__(Knowledge)
        other.__dict__.update(self.__dict__)
        other.namespace = check_name(namespace, "the namespace")
        other.per_user = False
        return other

    def for_kb(self, name: str) -> Knowledge:
        """Another knowledge base of the same namespace (or caller), with the same settings and store."""
        other = object.__new__(Knowledge)
        other.__dict__.update(self.__dict__)
        other.name = check_name(name, "the knowledge base name")
        return other

    # -- ingestion ----------------------------------------------------------------------------------------
    async def add(
        self,
        items: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        metadata: Mapping[str, Any] | None = None,
        source: str | None = None,
        progress: Progress | None = None,
    ) -> AddReport:
        """Index files, folders, URLs or raw texts; unchanged sources are skipped, changed ones replaced.

        A string that is neither a URL nor an existing path is a text (stored under `source`, by
        default ``text:<sha256 prefix>``). `metadata` (``tags``, ``date``, anything filters compare)
        goes with every source of the call. A source that cannot be read is reported in
        ``failed`` and the others still go in.
        """
        from agentrt.knowledge.loaders import expand

        namespace = self.current_namespace()
        listed = [items] if isinstance(items, str | os.PathLike) else list(items)
        if source is not None and len(listed) != 1:
            raise InvalidValueError("source= names one item; pass a single path, URL or text with it")
        meta = _check_metadata(metadata)
        targets: list[Target] = []
        skipped: list[str] = []
        for item in listed:
            if not isinstance(item, str | os.PathLike):
                raise InvalidTypeError(f"add takes paths, URLs and texts, not {type(item).__name__}")
            found, unsupported = await asyncio.to_thread(expand, item, source)
            targets.extend(found)
            skipped.extend(unsupported)
        return await self._ingest(namespace, targets, skipped, meta, progress)

    async def add_text(
        self, text: str, *, source: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> AddReport:
        """Index `text` itself, never read as a path or fetched as a URL, under `source` (default ``text:<hash>``)."""
        from agentrt.knowledge.loaders import Target, text_source

        if not isinstance(text, str):
            raise InvalidTypeError(f"text must be a string, not {type(text).__name__}")
        if source is not None and (not isinstance(source, str) or not source):
            raise InvalidValueError("source must be a non-empty string")
        namespace = self.current_namespace()
        meta = _check_metadata(metadata)
        target = Target("text", text, source or text_source(text))
        return await self._ingest(namespace, [target], [], meta, None)

    async def _ingest(
        self,
        namespace: str,
        targets: list[Target],
        skipped: list[str],
        meta: dict[str, Any],
        progress: Progress | None,
    ) -> AddReport:
        """Index `targets` one by one; a failure is reported and the others go on."""
        failed: list[tuple[str, str]] = []
        added: list[str] = []
        chunks = 0
        for done, target in enumerate(targets, 1):
            try:
                written = await self._add_one(namespace, target, meta)
            except Exception as exc:  # one bad source never aborts the batch
                failed.append((target.source, _reason(exc)))
            else:
                if written is None:
                    skipped.append(target.source)
                else:
                    added.append(target.source)
                    chunks += written
            if progress is not None:
                progress(done, len(targets), target.source)
        return AddReport(added=tuple(added), skipped=tuple(skipped), failed=tuple(failed), chunks=chunks)

    async def _add_one(self, namespace: str, target: Target, metadata: dict[str, Any]) -> int | None:
        """Index one source; the number of chunks written, or None when it was unchanged."""
        from agentrt.knowledge.loaders import load

        loaded = await load(target, max_bytes=self.max_file_bytes, web=self.web)
        meta = _canonical_date({**loaded.metadata, **metadata})
        digest = await asyncio.to_thread(self._content_hash, loaded, meta)
        store = self.store
        if await store.content_hash(namespace, self.name, loaded.source) == digest:
            return None
        chunks = await asyncio.to_thread(self.chunker.chunks, self.name, loaded.source, loaded.text, pages=loaded.pages)
        if self.embedder is not None:
            chunks = await self._embed(chunks)
        document = Document(
            source=loaded.source,
            title=loaded.title,
            content_hash=digest,
            metadata={"kind": loaded.kind, **meta},
            chunk_count=len(chunks),
            added_at=time.time(),
        )
        await store.upsert(namespace, self.name, document, chunks)
        return len(chunks)

    def _content_hash(self, loaded: Loaded, metadata: Mapping[str, Any]) -> str:
        """sha256 of what the chunks are made of: text, pages, title, metadata, chunking and embedder."""
        settings = {
            "chunker": [_CHUNKER_VERSION, self.chunker.chunk_tokens, self.chunker.overlap],
            "embedder": _embedder_identity(self.embedder),
            "title": loaded.title,
            "kind": loaded.kind,
            "metadata": metadata,
        }
        digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
        digest.update(b"\x00")
        for part in loaded.pages if loaded.pages is not None else (loaded.text,):
            digest.update(part.encode("utf-8", "surrogatepass"))
            digest.update(b"\x00")
        return digest.hexdigest()

    async def _embed(self, chunks: list[Chunk]) -> list[Chunk]:
        assert self.embedder is not None
        out: list[Chunk] = []
        for start in range(0, len(chunks), EMBED_BATCH):
            batch = chunks[start : start + EMBED_BATCH]
            vectors = await self._embed_texts([chunk.text for chunk in batch])
            out.extend(_with_embedding(chunk, vector) for chunk, vector in zip(batch, vectors, strict=True))
        return out

    # -- search -------------------------------------------------------------------------------------------
    async def search(
        self, query: str, k: int = 5, filters: SearchFilters | None = None, *, mode: SearchMode | None = None
    ) -> list[Passage]:
        """The `k` (1 to 100) passages most relevant to `query`, best first, within `filters`."""
        if not isinstance(query, str):
            raise InvalidTypeError(f"query must be a string, not {type(query).__name__}")
        if isinstance(k, bool) or not isinstance(k, int):
            raise InvalidTypeError(f"k must be an int, not {type(k).__name__}")
        if not 1 <= k <= MAX_K:
            raise InvalidValueError(f"k must be between 1 and {MAX_K}, not {k}")
        filters = check_filters(filters)
        chosen = self._mode(mode)
        namespace = self.current_namespace()
        if not query.strip():
            return []
        store = self.store
        if chosen == "text":
            return await store.search_text(namespace, self.name, query, k, filters)
        try:
            vector = await self._query_vector(query)
        except EmbedTimeoutError:
            if chosen == "vector":
                raise
            logger.warning(
                "knowledge base %r: the embedder did not answer within %ss; searching full text only",
                self.name,
                self.embed_timeout,
            )
            return await store.search_text(namespace, self.name, query, k, filters)
        if vector is None:  # a query with no direction (all zeros) is similar to nothing
            return [] if chosen == "vector" else await store.search_text(namespace, self.name, query, k, filters)
        if chosen == "vector":
            return await store.search_vector(namespace, self.name, vector, k, filters)
        depth = min(max(4 * k, 20), 4 * MAX_K)
        text_hits, vector_hits = await asyncio.gather(
            store.search_text(namespace, self.name, query, depth, filters),
            store.search_vector(namespace, self.name, vector, depth, filters),
        )
        return reciprocal_rank_fusion([text_hits, vector_hits], limit=k)

    def _check_mode(self, mode: object) -> SearchMode:
        if mode not in _MODES:
            raise InvalidValueError(f"search mode must be one of {', '.join(_MODES)}, not {mode!r}")
        if mode != "text" and self.embedder is None:
            raise InvalidValueError(f"search mode {mode!r} needs an embedder; without one, search is 'text'")
        return mode  # type: ignore[return-value]

    def _mode(self, mode: SearchMode | None) -> SearchMode:
        if mode is not None:
            return self._check_mode(mode)
        if self.search_mode is not None:
            return self.search_mode
        return "hybrid" if self.embedder is not None else "text"

    async def _query_vector(self, query: str) -> list[float] | None:
        """The query's unit vector; None for an all-zero one (e.g. a query of no known word)."""
        (vector,) = await self._embed_texts([query])
        checked = finite_unit(vector)
        if checked is not None:
            return checked
        if vector and all(isinstance(x, (int, float)) and x == 0 for x in vector):
            return None
        raise InvalidValueError("the embedder returned a query vector that is empty or not finite (NaN or infinity)")

    async def _embed_texts(self, texts: list[str]) -> list[list[float]]:
        """The embedder's vectors of `texts`, within `embed_timeout` (else `EmbedTimeoutError`)."""
        assert self.embedder is not None
        try:
            async with asyncio.timeout(self.embed_timeout):
                return await embed_texts(self.embedder, texts)
        except TimeoutError:
            raise EmbedTimeoutError(f"the embedder did not answer within {self.embed_timeout:g} s") from None

    # -- management ---------------------------------------------------------------------------------------
    async def delete(self, source: str) -> bool:
        """Remove a source and its chunks (a path may be given as it was added or as now spelled)."""
        if not isinstance(source, str) or not source:
            raise InvalidValueError("delete needs the source to remove")
        namespace = self.current_namespace()
        if await self.store.delete(namespace, self.name, source):
            return True
        from agentrt.knowledge.loaders import file_source, is_url

        if is_url(source) or source.startswith("text:") or "\x00" in source:
            return False
        try:
            resolved = await asyncio.to_thread(file_source, Path(source))
        except (OSError, ValueError):
            return False
        return resolved != source and await self.store.delete(namespace, self.name, resolved)

    async def documents(self) -> list[Document]:
        """Every document of this knowledge base, by source."""
        return await self.store.documents(self.current_namespace(), self.name)

    async def chunk(self, chunk_id: str) -> Passage | None:
        """One passage of this knowledge base by chunk id (what a citation names), or None."""
        if not isinstance(chunk_id, str):
            raise InvalidTypeError(f"chunk_id must be a string, not {type(chunk_id).__name__}")
        namespace = self.current_namespace()
        if not chunk_id or len(chunk_id) > 200:
            return None
        return await self.store.chunk(namespace, self.name, chunk_id)

    async def drop(self) -> int:
        """Delete this knowledge base (of this namespace); returns how many documents it held."""
        return await self.store.drop(self.current_namespace(), self.name)

    async def close(self) -> None:
        """Close the store when it was made from a URL (shared with the `for_namespace` views)."""
        await self._ref.close()

    async def __aenter__(self) -> Knowledge:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


def _with_embedding(chunk: Chunk, vector: list[float]) -> Chunk:
    """`chunk` with the unit form of `vector`; an `InvalidValueError` for a vector with no direction.

    A NaN or infinite component would make every cosine with it NaN, which sorts unpredictably:
    the source fails (reported in ``AddReport.failed``) instead of poisoning the vector ranking.
    """
    embedding = finite_unit(vector)
    if embedding is None:
        raise InvalidValueError(
            f"the embedder returned a vector with no direction (empty, zero, NaN or infinite values) "
            f"for chunk {chunk.ordinal}"
        )
    return Chunk(
        chunk_id=chunk.chunk_id,
        source=chunk.source,
        ordinal=chunk.ordinal,
        text=chunk.text,
        heading_path=chunk.heading_path,
        page=chunk.page,
        tokens=chunk.tokens,
        embedding=tuple(embedding),
    )


def _check_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """The caller's metadata in its stored (JSON) form: dates as ISO strings, tuples as lists."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise InvalidTypeError(f"metadata must be a mapping, not {type(metadata).__name__}")
    tags = metadata.get("tags")
    if tags is not None and (
        isinstance(tags, str) or not isinstance(tags, Sequence) or not all(isinstance(tag, str) for tag in tags)
    ):
        raise InvalidValueError("metadata['tags'] must be a list of strings")
    try:
        normal: dict[str, Any] = json.loads(json.dumps(dict(metadata), default=_json_default))
    except (TypeError, ValueError) as exc:
        raise InvalidValueError(f"metadata must be JSON-serialisable: {exc}") from None
    return normal


def _canonical_date(metadata: dict[str, Any]) -> dict[str, Any]:
    """`metadata` with a readable ``date`` in the canonical form ``since`` / ``until`` compare with.

    ``YYYY-MM-DD`` for a date, ``YYYY-MM-DDTHH:MM:SS[.ffffff]`` in UTC for a date and time: the SQL
    stores compare dates as text, so every backend then selects the same documents. A ``date`` that
    is not an ISO date is kept as it is (no date filter selects it).
    """
    value = metadata.get("date")
    if not isinstance(value, str | date):
        return metadata
    try:
        canonical = canonical_date(value)
    except InvalidValueError:
        return metadata
    return metadata if canonical == value else {**metadata, "date": canonical}


def _json_default(value: object) -> str:
    if isinstance(value, date | datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return text if text else type(exc).__name__
