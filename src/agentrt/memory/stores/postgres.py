"""`PostgresLongTermMemory`: long-term memory shared by replicas, in PostgreSQL (asyncpg via SQLAlchemy).

Schema (``<prefix>`` is ``table_prefix``, ``agentrt_`` by default; created on first use)::

    <prefix>memories
        seq           BIGINT IDENTITY    insertion order (tie-break of LRU eviction)
        id            VARCHAR(64) PRIMARY KEY
        user_id       TEXT COLLATE "C"
        text, norm    TEXT               the fact, and its dedup key (UNIQUE (user_id, md5(norm)))
        terms         TEXT               the indexed terms (CJK as characters and bigrams)
        tsv           tsvector GENERATED from terms ('english': stemming, stop words)  GIN index
        created_at, last_used_at  DOUBLE PRECISION            INDEX (user_id, last_used_at)
        embedding     BYTEA NULL         unit float32 vector (cosine scan in a worker thread)
        vec           vector NULL        only when the pgvector extension is installed

Full-text ranking is ``ts_rank_cd`` (PostgreSQL has no BM25); with an embedding function it is fused
with cosine similarity by reciprocal rank, exactly like the SQLite backend. Writes of one user are
serialised by a transaction-scoped advisory lock, so concurrent replicas keep the cap exact.
"""

from __future__ import annotations

import asyncio
import builtins
import re
import time
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, Self

import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from agentrt.errors import UserError
from agentrt.memory._text import fuse, index_terms, nearest, normalise, pack_vector, unit
from agentrt.memory.long_term import (
    DEFAULT_CAP,
    DEFAULT_TTL,
    ITEM_COLUMNS,
    PURGE_EVERY,
    Clock,
    Embedder,
    MemoryItem,
    check_cap,
    clean_texts,
    embed_texts,
    forget_ids,
    item_from_row,
    query_inputs,
    ttl_seconds,
)

__all__ = ["PostgresLongTermMemory"]

_PREFIX_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")


def _vector_literal(vector: Sequence[float]) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in vector) + "]"


class PostgresLongTermMemory:
    """Long-term memory in PostgreSQL: full-text search (tsvector), optional vectors, per-user TTL and cap.

    Args:
        url: ``postgresql+asyncpg://user:pw@host:5432/db`` (``postgresql://`` gets asyncpg). Leave it
            out when you pass `engine`.
        engine: Use this async engine (never disposed by the memory).
        table_prefix: Prefix of the table name (letters, digits, underscores; ≤ 40 characters).
        ttl: As for `SqliteLongTermMemory`.
        cap: As for `SqliteLongTermMemory`.
        clock: As for `SqliteLongTermMemory`.
        embed: As for `SqliteLongTermMemory`.
        vector_scan_limit: As for `SqliteLongTermMemory`.
        use_pgvector: ``"auto"`` uses the pgvector extension for vector search when it is installed
            in the database (and an `embed` function is given); False never does.
    """

    def __init__(
        self,
        url: str | URL | None = None,
        *,
        engine: AsyncEngine | None = None,
        table_prefix: str = "agentrt_",
        ttl: timedelta | float | None = DEFAULT_TTL,
        cap: int | None = DEFAULT_CAP,
        clock: Clock = time.time,
        embed: Embedder | None = None,
        vector_scan_limit: int = 2000,
        use_pgvector: bool | str = "auto",
        pool_size: int = 5,
    ) -> None:
        if not isinstance(table_prefix, str) or not _PREFIX_RE.fullmatch(table_prefix):
            raise UserError(
                f"table_prefix {table_prefix!r} must be 1-40 letters, digits or underscores, not starting with a digit"
            )
        if (engine is None) == (url is None):
            raise UserError("give PostgresLongTermMemory a URL (postgresql+asyncpg://...) or an engine, not both")
        if engine is None:
            parsed = make_url(url) if isinstance(url, str) else url
            assert parsed is not None
            if parsed.get_backend_name() != "postgresql":
                raise UserError(f"PostgresLongTermMemory needs a postgresql:// URL, not {parsed.drivername!r}")
            if parsed.drivername == "postgresql":
                parsed = parsed.set(drivername="postgresql+asyncpg")
            engine = create_async_engine(parsed, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True)
            self._owns_engine = True
        else:
            self._owns_engine = False
        self.engine = engine
        self.table = f"{table_prefix}memories"
        self.ttl = ttl_seconds(ttl)
        self.cap = check_cap(cap)
        self.clock = clock
        self.embed = embed
        self.vector_scan_limit = vector_scan_limit
        self._want_pgvector = use_pgvector not in (False, "off", "never")
        self.pgvector = False
        """Whether vector search runs in the database (pgvector found at setup)."""
        self._ready = False
        self._setup_lock = asyncio.Lock()
        self._last_purge = float("-inf")
        self._closed = False

    # -- setup ------------------------------------------------------------------------------------
    async def create_tables(self) -> None:
        """Create the table and its indexes if needed (done automatically on first use)."""
        await self._ensure()

    async def _ensure(self) -> None:
        if self._closed:
            raise UserError("this PostgresLongTermMemory is closed")
        if self._ready:
            return
        async with self._setup_lock:
            if self._ready:
                return
            t = self.table
            async with self.engine.begin() as conn:
                # Concurrent CREATE ... IF NOT EXISTS can still collide in the catalog: serialise them.
                await conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"), {"k": t})
                await conn.execute(
                    sa.text(
                        f"""CREATE TABLE IF NOT EXISTS {t} (
                            seq BIGINT GENERATED ALWAYS AS IDENTITY,
                            id VARCHAR(64) PRIMARY KEY,
                            user_id TEXT COLLATE "C" NOT NULL,
                            text TEXT NOT NULL,
                            norm TEXT NOT NULL,
                            terms TEXT NOT NULL,
                            tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', terms)) STORED,
                            created_at DOUBLE PRECISION NOT NULL,
                            last_used_at DOUBLE PRECISION NOT NULL,
                            embedding BYTEA
                        )"""
                    )
                )
                await conn.execute(sa.text(f"CREATE UNIQUE INDEX IF NOT EXISTS {t}_norm ON {t} (user_id, md5(norm))"))
                await conn.execute(sa.text(f"CREATE INDEX IF NOT EXISTS {t}_lru ON {t} (user_id, last_used_at)"))
                await conn.execute(sa.text(f"CREATE INDEX IF NOT EXISTS {t}_expiry ON {t} (last_used_at)"))
                await conn.execute(sa.text(f"CREATE INDEX IF NOT EXISTS {t}_tsv ON {t} USING gin (tsv)"))
                if self._want_pgvector and self.embed is not None:
                    found = await conn.execute(sa.text("SELECT 1 FROM pg_extension WHERE extname = 'vector'"))
                    if found.first() is not None:
                        await conn.execute(sa.text(f"ALTER TABLE {t} ADD COLUMN IF NOT EXISTS vec vector"))
                        self.pgvector = True
            self._ready = True

    async def drop_tables(self) -> None:
        """Drop the table and everything in it (tests, uninstalls)."""
        async with self.engine.begin() as conn:
            await conn.execute(sa.text(f"DROP TABLE IF EXISTS {self.table}"))
        self._ready = False

    async def _lock_user(self, conn: AsyncConnection, user_id: str) -> None:
        await conn.execute(
            sa.text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"), {"k": f"{self.table}:{user_id}"}
        )

    async def _purge(self, conn: AsyncConnection, user_id: str, now: float) -> None:
        if self.ttl is None:
            return
        cutoff = now - self.ttl
        if now - self._last_purge >= PURGE_EVERY:
            self._last_purge = now
            await conn.execute(sa.text(f"DELETE FROM {self.table} WHERE last_used_at <= :c"), {"c": cutoff})
        else:
            await conn.execute(
                sa.text(f"DELETE FROM {self.table} WHERE user_id = :u AND last_used_at <= :c"),
                {"u": user_id, "c": cutoff},
            )

    def _cutoff(self, now: float) -> float:
        return float("-inf") if self.ttl is None else now - self.ttl

    # -- the protocol -------------------------------------------------------------------------------
    async def record(self, user_id: str, texts: Sequence[str | MemoryItem]) -> builtins.list[MemoryItem]:
        """Remember `texts`; a text equal to a live item (case, spacing aside) refreshes that item."""
        entries = clean_texts(texts)
        if not entries:
            return []
        await self._ensure()
        vectors: builtins.list[builtins.list[float] | None] = [None] * len(entries)
        if self.embed is not None:
            vectors = [unit(v) for v in await embed_texts(self.embed, [text for text, _ in entries])]
        now = self.clock()
        t = self.table
        ids: builtins.list[str] = []
        async with self.engine.begin() as conn:
            await self._lock_user(conn, user_id)
            await self._purge(conn, user_id, now)
            for (text, source), vector in zip(entries, vectors, strict=True):
                item_id = source.id if source is not None and source.id else uuid.uuid4().hex
                if source is not None:
                    taken = await conn.execute(sa.text(f"SELECT 1 FROM {t} WHERE id = :i"), {"i": item_id})
                    if taken.first() is not None:
                        item_id = uuid.uuid4().hex
                params: dict[str, Any] = {
                    "i": item_id,
                    "u": user_id,
                    "x": text,
                    "n": normalise(text),
                    "t": index_terms(text),
                    "c": source.created_at if source is not None else now,
                    "now": now,
                    "e": pack_vector(vector) if vector is not None else None,
                }
                vec_cols = vec_vals = vec_set = ""
                if self.pgvector and vector is not None:
                    params["v"] = _vector_literal(vector)
                    vec_cols, vec_vals, vec_set = ", vec", ", CAST(:v AS vector)", ", vec = EXCLUDED.vec"
                row = (
                    await conn.execute(
                        sa.text(
                            f"INSERT INTO {t} (id, user_id, text, norm, terms, created_at, last_used_at, embedding"
                            f"{vec_cols}) VALUES (:i, :u, :x, :n, :t, :c, :now, :e{vec_vals}) "
                            f"ON CONFLICT (user_id, md5(norm)) DO UPDATE SET last_used_at = EXCLUDED.last_used_at, "
                            f"embedding = coalesce(EXCLUDED.embedding, {t}.embedding){vec_set} RETURNING id"
                        ),
                        params,
                    )
                ).one()
                ids.append(str(row[0]))
            if self.cap is not None:
                await conn.execute(
                    sa.text(
                        f"DELETE FROM {t} WHERE id IN (SELECT id FROM {t} WHERE user_id = :u "
                        f"ORDER BY last_used_at DESC, seq DESC OFFSET :cap)"
                    ),
                    {"u": user_id, "cap": self.cap},
                )
            rows = (
                await conn.execute(
                    sa.text(f"SELECT {ITEM_COLUMNS} FROM {t} WHERE id = ANY(:ids)"), {"ids": list(dict.fromkeys(ids))}
                )
            ).all()
        by_id = {str(row[0]): item_from_row(row) for row in rows}
        return [by_id[i] for i in dict.fromkeys(ids) if i in by_id]

    async def retrieve(self, user_id: str, query: str, k: int = 5) -> builtins.list[MemoryItem]:
        """The `k` items best matching `query` (full text, fused with cosine similarity when embedding)."""
        inputs = await query_inputs(self.embed, query, k)
        if inputs is None:
            return []
        terms, vector = inputs
        await self._ensure()
        now = self.clock()
        cutoff = self._cutoff(now)
        depth = max(4 * k, 20)
        t = self.table
        rankings: builtins.list[builtins.list[str]] = []
        async with self.engine.begin() as conn:
            await self._purge(conn, user_id, now)
            if terms:
                rows = (
                    await conn.execute(
                        sa.text(
                            f"SELECT id FROM {t}, to_tsquery('english', :q) q WHERE user_id = :u "
                            f"AND last_used_at > :c AND tsv @@ q ORDER BY ts_rank_cd(tsv, q, 1) DESC, seq DESC "
                            f"LIMIT :n"
                        ),
                        {"q": " | ".join(terms), "u": user_id, "c": cutoff, "n": depth},
                    )
                ).all()
                rankings.append([str(r[0]) for r in rows])
            if vector is not None:
                rankings.append(await self._vector_ranking(conn, user_id, vector, cutoff, depth))
            best = fuse(rankings, k)
            if not best:
                return []
            rows = (
                await conn.execute(
                    sa.text(f"UPDATE {t} SET last_used_at = :now WHERE id = ANY(:ids) RETURNING {ITEM_COLUMNS}"),
                    {"now": now, "ids": best},
                )
            ).all()
        by_id = {str(row[0]): item_from_row(row) for row in rows}
        return [by_id[i] for i in best if i in by_id]

    async def _vector_ranking(
        self, conn: AsyncConnection, user_id: str, vector: builtins.list[float], cutoff: float, depth: int
    ) -> builtins.list[str]:
        t = self.table
        if self.pgvector:
            rows = (
                await conn.execute(
                    sa.text(
                        f"SELECT id FROM {t} WHERE user_id = :u AND last_used_at > :c AND vec IS NOT NULL "
                        f"ORDER BY vec <=> CAST(:v AS vector) LIMIT :n"
                    ),
                    {"u": user_id, "c": cutoff, "v": _vector_literal(vector), "n": depth},
                )
            ).all()
            return [str(r[0]) for r in rows]
        rows = (
            await conn.execute(
                sa.text(
                    f"SELECT id, embedding FROM {t} WHERE user_id = :u AND last_used_at > :c "
                    f"AND embedding IS NOT NULL ORDER BY last_used_at DESC LIMIT :n"
                ),
                {"u": user_id, "c": cutoff, "n": self.vector_scan_limit},
            )
        ).all()

        return await asyncio.to_thread(nearest, vector, ((str(r[0]), bytes(r[1])) for r in rows), depth)

    async def forget(self, user_id: str, ids: Sequence[str]) -> int:
        """Delete the user's items with these ids; returns how many there were."""
        wanted = forget_ids(ids)
        if not wanted:
            return 0
        await self._ensure()
        async with self.engine.begin() as conn:
            result = await conn.execute(
                sa.text(f"DELETE FROM {self.table} WHERE user_id = :u AND id = ANY(:ids)"),
                {"u": user_id, "ids": wanted},
            )
        return int(result.rowcount)

    async def list(self, user_id: str) -> builtins.list[MemoryItem]:
        """Every live item of the user, oldest first."""
        await self._ensure()
        now = self.clock()
        async with self.engine.begin() as conn:
            await self._purge(conn, user_id, now)
            rows = (
                await conn.execute(
                    sa.text(f"SELECT {ITEM_COLUMNS} FROM {self.table} WHERE user_id = :u ORDER BY created_at, seq"),
                    {"u": user_id},
                )
            ).all()
        return [item_from_row(row) for row in rows]

    async def clear(self, user_id: str) -> int:
        """Forget every item of the user; returns how many there were."""
        await self._ensure()
        async with self.engine.begin() as conn:
            result = await conn.execute(sa.text(f"DELETE FROM {self.table} WHERE user_id = :u"), {"u": user_id})
        return int(result.rowcount)

    async def delete_user(self, user_id: str) -> int:
        """Delete every item of the user, for a data-protection request; how many there were.

        Waits for a `record` of the user in flight (the user's lock), so what it writes goes too;
        a second call returns 0.
        """
        await self._ensure()
        async with self.engine.begin() as conn:
            await self._lock_user(conn, user_id)
            result = await conn.execute(sa.text(f"DELETE FROM {self.table} WHERE user_id = :u"), {"u": user_id})
        return int(result.rowcount)

    async def close(self) -> None:
        """Dispose of the engine if the memory created it (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._owns_engine:
            await self.engine.dispose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        url = self.engine.url.render_as_string(hide_password=True)
        return f"PostgresLongTermMemory({url!r}, table={self.table!r})"
