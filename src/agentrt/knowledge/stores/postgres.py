"""`PostgresKnowledgeStore`: knowledge bases in PostgreSQL (asyncpg via SQLAlchemy), shared by replicas.

Schema (``<p>`` is ``table_prefix``, ``agentrt_kb`` by default; created on first use)::

    <p>_documents
        id            BIGINT IDENTITY PRIMARY KEY
        namespace, kb, source   TEXT COLLATE "C"      UNIQUE (namespace, kb, source)
        title, content_hash     TEXT
        metadata      JSONB              caller metadata (filters read it with jsonb operators)
        chunk_count   INTEGER, added_at DOUBLE PRECISION
    <p>_chunks
        id            BIGINT IDENTITY PRIMARY KEY
        doc_id        BIGINT REFERENCES <p>_documents ON DELETE CASCADE      INDEX
        namespace, kb TEXT COLLATE "C"   (copied from the document)          INDEX (namespace, kb)
        chunk_id, ordinal, text, heading_path TEXT[], page, tokens
        terms, head_terms  TEXT          the indexed terms of the text and of the heading path
                                         (CJK as characters and bigrams, see agentrt.memory._text)
        tsv           tsvector GENERATED ('simple': headings weighted C, text D: 2 to 1)   GIN index
        embedding     BYTEA NULL         unit float32 vector; dims INTEGER NULL its length
        vec           vector NULL        only with pgvector, with an HNSW index per dimension

Full-text ranking is ``ts_rank_cd`` over the OR of the query's terms, each term bound as a parameter
to ``plainto_tsquery('simple', ...)``: query text never reaches ``to_tsquery``'s operator syntax.
PostgreSQL's parsers do not split Chinese or Japanese, so chunks are indexed through the same
pre-segmented terms as long-term memory (characters and bigrams). Measured at 10k chunks: a
2-character CJK query ranks in ~1 ms this way, while pg_trgm (an extension, not always installable)
cannot use its index below 3 characters and took 100-130 ms (most Chinese words have 2).
Query terms are those of the SQLite backend (`match_terms`), so both backends match alike.

Without pgvector, vectors are ranked exactly in a worker thread over the float32 vectors of the kb's
(filtered) chunks: at 10k chunks that measured 2.2-2.5x faster than a SQL cosine over ``unnest`` of a
``real[]`` column (384 dims: 150 ms vs 330 ms; 1536 dims: 470 ms vs 1170 ms, raw queries; through
this store, with the document join: 156 ms and 800 ms). pgvector, where installed, ranks in the database.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any, Self

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from agentrt.errors import InvalidValueError, UserError
from agentrt.knowledge.base import Chunk, Document
from agentrt.knowledge.filters import check_filters, finite_unit
from agentrt.knowledge.stores.sqlite import match_terms
from agentrt.memory._text import cosine, index_terms, pack_vector, unpack_vector
from agentrt.memory.retrieval import Passage, SearchFilters
from agentrt.memory.stores.postgres import _PREFIX_RE, _vector_literal

__all__ = ["PostgresKnowledgeStore"]

_PASSAGE_COLUMNS = "c.chunk_id, c.text, d.source, d.title, c.heading_path, c.page, c.ordinal, d.metadata"


def _key(name: str, value: str) -> str:
    """A namespace, kb or source as a key: NUL cannot be stored, and stripping it could merge tenants."""
    if not isinstance(value, str):
        raise InvalidValueError(f"{name} must be a string, not {type(value).__name__}")
    if "\x00" in value:
        raise InvalidValueError(f"{name} {value!r} contains a NUL character")
    return value


def _scrub(value: Any) -> Any:
    """`value` with NUL characters removed from every string in it (PostgreSQL text cannot hold NUL)."""
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, Mapping):
        return {_scrub(str(k)): _scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub(v) for v in value]
    return value


def _json(value: Any) -> str:
    try:
        return orjson.dumps(_scrub(value), default=str).decode()
    except TypeError as exc:
        raise InvalidValueError(f"metadata must be JSON-serialisable: {exc}") from exc


def _filter_sql(filters: SearchFilters | None) -> tuple[str, dict[str, Any]]:
    """``AND ...`` conditions on the document row ``d`` for `filters`, and their bound parameters.

    `filters` are checked first (`check_filters`: typed errors, canonical dates, bounded lists).
    """
    checked = check_filters(filters)
    if not checked:
        return "", {}
    clauses: list[str] = []
    params: dict[str, Any] = {}
    for i, (key, value) in enumerate(checked.items()):
        if key == "source":
            params["f_source"] = [_scrub(s) for s in value]
            clauses.append("d.source = ANY(CAST(:f_source AS text[]))")
        elif key == "tags":
            if value:
                params["f_tags"] = _json(value)
                clauses.append(
                    "jsonb_typeof(d.metadata -> 'tags') = 'array' AND d.metadata -> 'tags' @> CAST(:f_tags AS jsonb)"
                )
        elif key in ("since", "until"):
            params[f"f_{key}"] = value
            op = ">=" if key == "since" else "<="
            text = "(d.metadata ->> 'date')"
            # Only a string that starts as an ISO date is a date (the memory store parses the same ones).
            guard = f"jsonb_typeof(d.metadata -> 'date') = 'string' AND {text} ~ '^[0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}}'"
            if len(value) == 10:  # a date: compare the date part of the document's date
                column = f"left({text}, 10)"
            else:  # a date and time: a document's date without time is its midnight
                column = f"(CASE WHEN length({text}) = 10 THEN {text} || 'T00:00:00' ELSE {text} END)"
            clauses.append(f'({guard} AND {column} COLLATE "C" {op} CAST(:f_{key} AS text))')
        else:
            params[f"f_k{i}"] = _scrub(key)
            params[f"f_v{i}"] = _json(value)
            clauses.append(f"d.metadata -> CAST(:f_k{i} AS text) = CAST(:f_v{i} AS jsonb)")
    return "".join(f" AND {c}" for c in clauses), params


def _metadata(value: Any) -> dict[str, Any]:
    """A jsonb value as a dict, whether the driver decoded it or not."""
    decoded = orjson.loads(value) if isinstance(value, str | bytes) else value
    return dict(decoded) if isinstance(decoded, Mapping) else {}


def _passage(row: Sequence[Any], score: float) -> Passage:
    chunk_id, text, source, title, heading_path, page, ordinal, metadata = row
    location = Chunk(chunk_id, source, ordinal, "", tuple(heading_path or ()), page).location
    return Passage(str(chunk_id), text, source, title, location, float(score), _metadata(metadata))


def _top(vector: Sequence[float], rows: Sequence[tuple[int, bytes]], k: int) -> list[tuple[float, int]]:
    """The `k` best ``(cosine, row id)`` of packed unit vectors (ties: the earlier row first)."""
    scored = ((cosine(vector, unpack_vector(data)), -rid) for rid, data in rows)
    # A NaN cosine (a vector stored before non-finite ones were refused) would break the ordering.
    best = heapq.nlargest(k, (pair for pair in scored if math.isfinite(pair[0])))
    return [(score, -neg) for score, neg in best]


class PostgresKnowledgeStore:
    """Knowledge bases in PostgreSQL: full-text search (tsvector), vectors with or without pgvector.

    Args:
        url: ``postgresql://user:pw@host:5432/db`` (asyncpg is used; ``postgresql+asyncpg://`` too).
        table_prefix: Prefix of the two tables' names (letters, digits, underscores; ≤ 40 characters).
        pool_size: Connections kept open (as many again may overflow under load).
        pgvector: None tries ``CREATE EXTENSION IF NOT EXISTS vector`` once and uses it when that
            succeeds; True requires it (a `UserError` when it cannot be created); False never uses it.
    """

    def __init__(
        self, url: str | URL, *, table_prefix: str = "agentrt_kb", pool_size: int = 5, pgvector: bool | None = None
    ) -> None:
        if not isinstance(table_prefix, str) or not _PREFIX_RE.fullmatch(table_prefix):
            raise UserError(
                f"table_prefix {table_prefix!r} must be 1-40 letters, digits or underscores, not starting with a digit"
            )
        parsed = make_url(url) if isinstance(url, str) else url
        if parsed.get_backend_name() != "postgresql":
            raise UserError(f"PostgresKnowledgeStore needs a postgresql:// URL, not {parsed.drivername!r}")
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+asyncpg")
        self.engine: AsyncEngine = create_async_engine(
            parsed, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True
        )
        self.documents_table = f"{table_prefix}_documents"
        self.chunks_table = f"{table_prefix}_chunks"
        self._want_pgvector = pgvector
        self.pgvector = False
        """Whether vectors are stored and ranked by pgvector (decided at setup)."""
        self._hnsw_dims: set[int] = set()
        self._ready = False
        self._setup_lock = asyncio.Lock()
        self._closed = False

    # -- setup ------------------------------------------------------------------------------------
    async def create_tables(self) -> None:
        """Create the tables and indexes if needed (done automatically on first use)."""
        await self._ensure()

    async def _ensure(self) -> None:
        if self._closed:
            raise UserError("this PostgresKnowledgeStore is closed")
        if self._ready:
            return
        async with self._setup_lock:
            if self._ready:
                return
            d, c = self.documents_table, self.chunks_table
            async with self.engine.begin() as conn:
                # Concurrent CREATE ... IF NOT EXISTS can still collide in the catalog: serialise them.
                await conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"), {"k": c})
                await conn.execute(
                    sa.text(
                        f"""CREATE TABLE IF NOT EXISTS {d} (
                            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                            namespace TEXT COLLATE "C" NOT NULL,
                            kb TEXT COLLATE "C" NOT NULL,
                            source TEXT COLLATE "C" NOT NULL,
                            title TEXT,
                            content_hash TEXT NOT NULL,
                            metadata JSONB NOT NULL DEFAULT '{{}}',
                            chunk_count INTEGER NOT NULL,
                            added_at DOUBLE PRECISION NOT NULL,
                            UNIQUE (namespace, kb, source)
                        )"""
                    )
                )
                await conn.execute(
                    sa.text(
                        f"""CREATE TABLE IF NOT EXISTS {c} (
                            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                            doc_id BIGINT NOT NULL REFERENCES {d} (id) ON DELETE CASCADE,
                            namespace TEXT COLLATE "C" NOT NULL,
                            kb TEXT COLLATE "C" NOT NULL,
                            chunk_id TEXT NOT NULL,
                            ordinal INTEGER NOT NULL,
                            text TEXT NOT NULL,
                            heading_path TEXT[] NOT NULL,
                            page INTEGER,
                            tokens INTEGER NOT NULL,
                            terms TEXT NOT NULL,
                            head_terms TEXT NOT NULL,
                            tsv tsvector GENERATED ALWAYS AS (
                                setweight(to_tsvector('simple', head_terms), 'C') || to_tsvector('simple', terms)
                            ) STORED,
                            embedding BYTEA,
                            dims INTEGER
                        )"""
                    )
                )
                await conn.execute(sa.text(f"CREATE INDEX IF NOT EXISTS {c}_doc ON {c} (doc_id, ordinal)"))
                await conn.execute(sa.text(f"CREATE INDEX IF NOT EXISTS {c}_kb ON {c} (namespace, kb)"))
                await conn.execute(sa.text(f"CREATE INDEX IF NOT EXISTS {c}_cid ON {c} (chunk_id)"))
                await conn.execute(sa.text(f"CREATE INDEX IF NOT EXISTS {c}_tsv ON {c} USING gin (tsv)"))
                if self._want_pgvector is not False and await self._create_vector_extension(conn):
                    await conn.execute(sa.text(f"ALTER TABLE {c} ADD COLUMN IF NOT EXISTS vec vector"))
                    self.pgvector = True
            self._ready = True

    async def _create_vector_extension(self, conn: AsyncConnection) -> bool:
        try:
            async with conn.begin_nested():
                await conn.execute(sa.text("CREATE EXTENSION IF NOT EXISTS vector"))
        except sa.exc.DBAPIError as exc:
            if self._want_pgvector:
                raise UserError(f"pgvector=True but CREATE EXTENSION vector failed: {exc.orig}") from exc
            return False
        return True

    async def _ensure_hnsw(self, conn: AsyncConnection, dims: set[int]) -> None:
        """An HNSW index per vector length (pgvector indexes only fixed-length vectors)."""
        c = self.chunks_table
        for n in sorted(dims - self._hnsw_dims):
            if 0 < n <= 2000:  # HNSW's limit for `vector`; longer vectors are ranked exactly
                await conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"), {"k": c})
                await conn.execute(
                    sa.text(
                        f"CREATE INDEX IF NOT EXISTS {c}_hnsw_{n} ON {c} "
                        f"USING hnsw ((CAST(vec AS vector({n}))) vector_cosine_ops) WHERE dims = {n}"
                    )
                )
        self._hnsw_dims |= dims

    async def drop_tables(self) -> None:
        """Drop both tables and everything in them (tests, uninstalls)."""
        async with self.engine.begin() as conn:
            await conn.execute(sa.text(f"DROP TABLE IF EXISTS {self.chunks_table}, {self.documents_table}"))
        self._ready = False
        self._hnsw_dims.clear()

    # -- writes -----------------------------------------------------------------------------------
    def _chunk_params(self, doc_id: int, namespace: str, kb: str, chunk: Chunk) -> dict[str, Any]:
        text = _scrub(chunk.text)
        heading = [_scrub(h) for h in chunk.heading_path]
        # A zero or non-finite vector has no direction: nothing to rank it by.
        vector = finite_unit(chunk.embedding) if chunk.embedding else None
        params: dict[str, Any] = {
            "doc": doc_id,
            "ns": namespace,
            "kb": kb,
            "cid": _scrub(str(chunk.chunk_id)),
            "ord": chunk.ordinal,
            "text": text,
            "head": heading,
            "page": chunk.page,
            "tokens": chunk.tokens,
            "terms": index_terms(text),
            "hterms": index_terms(" ".join(heading)),
            "emb": pack_vector(vector) if vector is not None else None,
            "dims": len(vector) if vector is not None else None,
        }
        if self.pgvector:
            params["vec"] = _vector_literal(vector) if vector is not None else None
        return params

    async def upsert(self, namespace: str, kb: str, document: Document, chunks: Sequence[Chunk]) -> None:
        """Insert `document` or replace it and all its chunks in one transaction."""
        namespace, kb, source = _key("namespace", namespace), _key("kb", kb), _key("source", document.source)
        for chunk in chunks:
            if chunk.source != document.source:
                raise InvalidValueError(f"chunk {chunk.chunk_id!r} is of {chunk.source!r}, not of {source!r}")
        await self._ensure()
        d, c = self.documents_table, self.chunks_table
        vec_col, vec_val = (", vec", ", CAST(:vec AS vector)") if self.pgvector else ("", "")
        async with self.engine.begin() as conn:
            doc_id = (
                await conn.execute(
                    sa.text(
                        f"INSERT INTO {d} (namespace, kb, source, title, content_hash, metadata, chunk_count, "
                        f"added_at) VALUES (:ns, :kb, :src, :title, :hash, CAST(:meta AS jsonb), :n, :at) "
                        f"ON CONFLICT (namespace, kb, source) DO UPDATE SET title = EXCLUDED.title, "
                        f"content_hash = EXCLUDED.content_hash, metadata = EXCLUDED.metadata, "
                        f"chunk_count = EXCLUDED.chunk_count, added_at = EXCLUDED.added_at RETURNING id"
                    ),
                    {
                        "ns": namespace,
                        "kb": kb,
                        "src": source,
                        "title": _scrub(document.title),
                        "hash": _scrub(document.content_hash),
                        "meta": _json(document.metadata or {}),
                        "n": len(chunks),
                        "at": document.added_at or time.time(),
                    },
                )
            ).scalar_one()
            await conn.execute(sa.text(f"DELETE FROM {c} WHERE doc_id = :doc"), {"doc": doc_id})
            if not chunks:
                return
            rows = [self._chunk_params(doc_id, namespace, kb, chunk) for chunk in chunks]
            if self.pgvector:
                await self._ensure_hnsw(conn, {r["dims"] for r in rows if r["dims"]})
            await conn.execute(
                sa.text(
                    f"INSERT INTO {c} (doc_id, namespace, kb, chunk_id, ordinal, text, heading_path, page, tokens, "
                    f"terms, head_terms, embedding, dims{vec_col}) VALUES (:doc, :ns, :kb, :cid, :ord, :text, :head, "
                    f":page, :tokens, :terms, :hterms, :emb, :dims{vec_val})"
                ),
                rows,
            )

    async def delete(self, namespace: str, kb: str, source: str) -> bool:
        """Remove a document and its chunks; returns whether it existed."""
        namespace, kb, source = _key("namespace", namespace), _key("kb", kb), _key("source", source)
        await self._ensure()
        async with self.engine.begin() as conn:
            result = await conn.execute(
                sa.text(f"DELETE FROM {self.documents_table} WHERE namespace = :ns AND kb = :kb AND source = :src"),
                {"ns": namespace, "kb": kb, "src": source},
            )
        return bool(result.rowcount)

    async def drop(self, namespace: str, kb: str) -> int:
        """Delete a whole kb; returns how many documents it held."""
        namespace, kb = _key("namespace", namespace), _key("kb", kb)
        await self._ensure()
        async with self.engine.begin() as conn:
            result = await conn.execute(
                sa.text(f"DELETE FROM {self.documents_table} WHERE namespace = :ns AND kb = :kb"),
                {"ns": namespace, "kb": kb},
            )
        return int(result.rowcount)

    async def delete_namespace(self, namespace: str) -> int:
        """Delete every kb of the namespace (documents, and their chunks by cascade); how many documents went."""
        namespace = _key("namespace", namespace)
        await self._ensure()
        async with self.engine.begin() as conn:
            result = await conn.execute(
                sa.text(f"DELETE FROM {self.documents_table} WHERE namespace = :ns"), {"ns": namespace}
            )
        return int(result.rowcount)

    async def delete_user(self, user_id: str) -> int:
        """`delete_namespace` of the user's namespace (the user id, as the server and per-user kbs use)."""
        return await self.delete_namespace(user_id)

    # -- reads ------------------------------------------------------------------------------------
    async def content_hash(self, namespace: str, kb: str, source: str) -> str | None:
        """The stored document's hash, or None when the source is not in the kb."""
        namespace, kb, source = _key("namespace", namespace), _key("kb", kb), _key("source", source)
        await self._ensure()
        async with self.engine.connect() as conn:
            value = (
                await conn.execute(
                    sa.text(
                        f"SELECT content_hash FROM {self.documents_table} "
                        f"WHERE namespace = :ns AND kb = :kb AND source = :src"
                    ),
                    {"ns": namespace, "kb": kb, "src": source},
                )
            ).scalar_one_or_none()
        return None if value is None else str(value)

    async def documents(self, namespace: str, kb: str) -> list[Document]:
        """Every document of the kb, by source."""
        namespace, kb = _key("namespace", namespace), _key("kb", kb)
        await self._ensure()
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    sa.text(
                        f"SELECT source, title, content_hash, metadata, chunk_count, added_at "
                        f"FROM {self.documents_table} WHERE namespace = :ns AND kb = :kb ORDER BY source"
                    ),
                    {"ns": namespace, "kb": kb},
                )
            ).all()
        return [Document(r[0], r[1], r[2], _metadata(r[3]), int(r[4]), float(r[5])) for r in rows]

    async def kbs(self, namespace: str) -> list[str]:
        """The namespace's knowledge bases that hold at least one document, sorted."""
        namespace = _key("namespace", namespace)
        await self._ensure()
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    sa.text(f"SELECT DISTINCT kb FROM {self.documents_table} WHERE namespace = :ns ORDER BY kb"),
                    {"ns": namespace},
                )
            ).all()
        return [str(r[0]) for r in rows]

    async def chunk(self, namespace: str, kb: str, chunk_id: str) -> Passage | None:
        """One chunk of the kb by id (score 0), or None."""
        namespace, kb, chunk_id = _key("namespace", namespace), _key("kb", kb), _key("chunk_id", chunk_id)
        await self._ensure()
        sql = (
            f"SELECT {_PASSAGE_COLUMNS} FROM {self.chunks_table} c JOIN {self.documents_table} d ON d.id = c.doc_id "
            f"WHERE c.chunk_id = :cid AND c.namespace = :ns AND c.kb = :kb ORDER BY c.id LIMIT 1"
        )
        async with self.engine.connect() as conn:
            row = (await conn.execute(sa.text(sql), {"cid": chunk_id, "ns": namespace, "kb": kb})).first()
        return None if row is None else _passage(row, 0.0)

    async def search_text(
        self, namespace: str, kb: str, query: str, k: int, filters: SearchFilters | None = None
    ) -> list[Passage]:
        """Full-text ranking (``ts_rank_cd``) of chunks holding any of the query's terms, best first.

        Query text is untrusted: it is cut into plain terms (NUL and tsquery operators are not terms)
        and each term is a bound parameter of ``plainto_tsquery``; a query with no term returns [].
        """
        namespace, kb = _key("namespace", namespace), _key("kb", kb)
        terms = match_terms(query) if isinstance(query, str) else []
        where, params = _filter_sql(filters)
        if not terms or k <= 0:
            return []
        await self._ensure()
        tsquery = " || ".join(f"plainto_tsquery('simple', :t{i})" for i in range(len(terms)))
        params.update({f"t{i}": term for i, term in enumerate(terms)})
        params.update({"ns": namespace, "kb": kb, "k": k})
        sql = (
            f"SELECT {_PASSAGE_COLUMNS}, ts_rank_cd(c.tsv, q.q, 1) AS score "
            f"FROM (SELECT {tsquery} AS q) q, {self.chunks_table} c JOIN {self.documents_table} d ON d.id = c.doc_id "
            f"WHERE c.namespace = :ns AND c.kb = :kb AND c.tsv @@ q.q{where} "
            f"ORDER BY score DESC, c.doc_id, c.ordinal LIMIT :k"
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(sa.text(sql), params)).all()
        return [_passage(r[:-1], r[-1]) for r in rows]

    async def search_vector(
        self, namespace: str, kb: str, vector: Sequence[float], k: int, filters: SearchFilters | None = None
    ) -> list[Passage]:
        """Nearest chunks by cosine similarity (exact), best first; only chunks of the vector's length."""
        namespace, kb = _key("namespace", namespace), _key("kb", kb)
        where, params = _filter_sql(filters)
        query = finite_unit(vector)
        if k <= 0 or query is None:
            return []
        await self._ensure()
        params.update({"ns": namespace, "kb": kb, "dims": len(query), "k": k})
        base = (
            f"FROM {self.chunks_table} c JOIN {self.documents_table} d ON d.id = c.doc_id "
            f"WHERE c.namespace = :ns AND c.kb = :kb AND c.dims = :dims{where}"
        )
        async with self.engine.connect() as raw:
            conn = await raw.execution_options(isolation_level="REPEATABLE READ")
            async with conn.begin():
                if self.pgvector:
                    return await self._pgvector_search(conn, base, params, query)
                rows = (await conn.execute(sa.text(f"SELECT c.id, c.embedding {base}"), params)).all()
                best = await asyncio.to_thread(_top, query, [(int(r[0]), bytes(r[1])) for r in rows], k)
                if not best:
                    return []
                found = (
                    await conn.execute(
                        sa.text(
                            f"SELECT c.id, {_PASSAGE_COLUMNS} FROM {self.chunks_table} c "
                            f"JOIN {self.documents_table} d ON d.id = c.doc_id WHERE c.id = ANY(:ids)"
                        ),
                        {"ids": [rid for _, rid in best]},
                    )
                ).all()
        by_id = {int(r[0]): r[1:] for r in found}
        return [_passage(by_id[rid], score) for score, rid in best if rid in by_id]

    async def _pgvector_search(
        self, conn: AsyncConnection, base: str, params: dict[str, Any], query: list[float]
    ) -> list[Passage]:
        n = int(params["dims"])
        distance = f"CAST(c.vec AS vector({n})) <=> CAST(:vec AS vector({n}))"
        params["vec"] = _vector_literal(query)
        # The literal length (an int) lets the planner match the partial HNSW index of that length.
        sql = (
            f"SELECT {_PASSAGE_COLUMNS}, 1 - ({distance}) AS score {base} AND c.dims = {n} "
            f"AND c.vec IS NOT NULL ORDER BY {distance} LIMIT :k"
        )
        rows = (await conn.execute(sa.text(sql), params)).all()
        return [_passage(r[:-1], r[-1]) for r in rows if r[-1] is not None and math.isfinite(r[-1])]

    # -- lifecycle --------------------------------------------------------------------------------
    async def close(self) -> None:
        """Dispose of the connection pool (idempotent)."""
        if self._closed:
            return
        self._closed = True
        await self.engine.dispose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        url = self.engine.url.render_as_string(hide_password=True)
        return f"PostgresKnowledgeStore({url!r}, table_prefix={self.documents_table[: -len('_documents')]!r})"
