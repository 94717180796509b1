"""`SqliteLongTermMemory`: the embedded long-term memory (stdlib sqlite3, FTS5 with BM25 ranking).

Schema (one file, WAL mode)::

    memories      seq INTEGER PRIMARY KEY, id TEXT UNIQUE, user_id, text, norm (dedup key),
                  created_at REAL, last_used_at REAL, embedding BLOB (unit float32, optional)
                  UNIQUE (user_id, norm), INDEX (user_id, last_used_at), INDEX (last_used_at)
    memories_fts  FTS5(ukey, terms), rowid = memories.seq; ukey is a token naming the user, so
                  a query is ``ukey : "<user token>" AND (<terms>)`` and the index, not a
                  filter, keeps users apart; ``bm25(memories_fts, 0, 1)`` ranks on terms only.

Every statement runs in one worker thread that owns the connection, so the event loop never
blocks on disk and no connection is shared between threads.
"""

from __future__ import annotations

import builtins
import hashlib
import os
import sqlite3
import time
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import TypeVar

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
from agentrt.memory.stores._sqlite_thread import SqliteThread, open_database

__all__ = ["SqliteLongTermMemory"]

_T = TypeVar("_T")
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS memories (
        seq INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        user_id TEXT NOT NULL,
        text TEXT NOT NULL,
        norm TEXT NOT NULL,
        created_at REAL NOT NULL,
        last_used_at REAL NOT NULL,
        embedding BLOB
    )""",
    "CREATE UNIQUE INDEX IF NOT EXISTS memories_norm ON memories (user_id, norm)",
    "CREATE INDEX IF NOT EXISTS memories_lru ON memories (user_id, last_used_at)",
    "CREATE INDEX IF NOT EXISTS memories_expiry ON memories (last_used_at)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5("
    "ukey, terms, tokenize = 'porter unicode61 remove_diacritics 2')",
    "CREATE TRIGGER IF NOT EXISTS memories_fts_delete AFTER DELETE ON memories "
    "BEGIN DELETE FROM memories_fts WHERE rowid = old.seq; END",
)


def user_token(user_id: str) -> str:
    """The index token naming a user (letters and digits only, so no tokenizer splits it)."""
    return "u" + hashlib.sha1(user_id.encode("utf-8")).hexdigest()[:24]


class SqliteLongTermMemory(SqliteThread):
    """Long-term memory in one SQLite file: FTS5 full-text search ranked by BM25, optional vectors.

    Args:
        path: The database file (created with its folder), or ``":memory:"``.
        ttl: How long an item lives after its last use (a timedelta or seconds); None: forever.
        cap: Most items per user; recording more evicts the least recently used. None: no cap.
        clock: Returns the time in seconds (inject a fake one in tests).
        embed: Optional ``embed(texts) -> vectors`` (sync or async). With it, items are embedded
            when recorded and `retrieve` fuses BM25 with cosine similarity by reciprocal rank.
        vector_scan_limit: The cosine scan covers the user's most recently used items up to this
            many (a plain scan, no vector index: keep it modest).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        ttl: timedelta | float | None = DEFAULT_TTL,
        cap: int | None = DEFAULT_CAP,
        clock: Clock = time.time,
        embed: Embedder | None = None,
        vector_scan_limit: int = 2000,
    ) -> None:
        self.path = str(path)
        self.ttl = ttl_seconds(ttl)
        self.cap = check_cap(cap)
        self.clock = clock
        self.embed = embed
        if vector_scan_limit < 1:
            raise UserError(f"vector_scan_limit must be at least 1, not {vector_scan_limit!r}")
        self.vector_scan_limit = vector_scan_limit
        super().__init__()
        self._last_purge = float("-inf")

    # -- plumbing -----------------------------------------------------------------------------
    _thread_name = "agentrt-memory"

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = self._conn
        if conn is None:
            conn = open_database(sqlite3, self.path)
            try:
                with _transaction(conn):
                    for statement in _SCHEMA:
                        conn.execute(statement)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return conn

    def _cutoff(self, now: float) -> float:
        return float("-inf") if self.ttl is None else now - self.ttl

    def _purge(self, conn: sqlite3.Connection, user_id: str, now: float) -> None:
        if self.ttl is None:
            return
        cutoff = now - self.ttl
        if now - self._last_purge >= PURGE_EVERY:
            conn.execute("DELETE FROM memories WHERE last_used_at <= ?", (cutoff,))
            self._last_purge = now
        else:
            conn.execute("DELETE FROM memories WHERE user_id = ? AND last_used_at <= ?", (user_id, cutoff))

    # -- the protocol --------------------------------------------------------------------------
    async def record(self, user_id: str, texts: Sequence[str | MemoryItem]) -> builtins.list[MemoryItem]:
        """Remember `texts`; a text equal to a live item (case, spacing aside) refreshes that item."""
        entries = clean_texts(texts)
        if not entries:
            return []
        vectors: builtins.list[bytes | None] = [None] * len(entries)
        if self.embed is not None:
            raw = await embed_texts(self.embed, [text for text, _ in entries])
            vectors = [pack_vector(unit(v)) for v in raw]
        return await self._run(self._record, user_id, entries, vectors, self.clock())

    def _record(
        self,
        user_id: str,
        entries: builtins.list[tuple[str, MemoryItem | None]],
        vectors: builtins.list[bytes | None],
        now: float,
    ) -> builtins.list[MemoryItem]:
        conn = self._connection()
        ukey = user_token(user_id)
        ids: builtins.list[str] = []
        with _transaction(conn):
            self._purge(conn, user_id, now)
            for (text, source), vector in zip(entries, vectors, strict=True):
                norm = normalise(text)
                row = conn.execute(
                    "SELECT seq, id FROM memories WHERE user_id = ? AND norm = ?", (user_id, norm)
                ).fetchone()
                if row is not None:
                    conn.execute(
                        "UPDATE memories SET last_used_at = ?, embedding = coalesce(?, embedding) WHERE seq = ?",
                        (now, vector, row[0]),
                    )
                    ids.append(row[1])
                    continue
                item_id = source.id if source is not None and source.id else uuid.uuid4().hex
                created = source.created_at if source is not None else now
                try:
                    cur = conn.execute(
                        "INSERT INTO memories (id, user_id, text, norm, created_at, last_used_at, embedding) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (item_id, user_id, text, norm, created, now, vector),
                    )
                except sqlite3.IntegrityError:  # the id is taken (another user's item): give it a new one
                    item_id = uuid.uuid4().hex
                    cur = conn.execute(
                        "INSERT INTO memories (id, user_id, text, norm, created_at, last_used_at, embedding) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (item_id, user_id, text, norm, created, now, vector),
                    )
                conn.execute(
                    "INSERT INTO memories_fts (rowid, ukey, terms) VALUES (?, ?, ?)",
                    (cur.lastrowid, ukey, index_terms(text)),
                )
                ids.append(item_id)
            if self.cap is not None:
                (count,) = conn.execute("SELECT count(*) FROM memories WHERE user_id = ?", (user_id,)).fetchone()
                if count > self.cap:
                    conn.execute(
                        "DELETE FROM memories WHERE seq IN (SELECT seq FROM memories WHERE user_id = ? "
                        "ORDER BY last_used_at, seq LIMIT ?)",
                        (user_id, count - self.cap),
                    )
            marks = ",".join("?" * len(ids))
            rows = conn.execute(f"SELECT {ITEM_COLUMNS} FROM memories WHERE id IN ({marks})", ids).fetchall()
        by_id = {row[0]: item_from_row(row) for row in rows}
        seen: set[str] = set()
        out: builtins.list[MemoryItem] = []
        for item_id in ids:
            if item_id in by_id and item_id not in seen:
                seen.add(item_id)
                out.append(by_id[item_id])
        return out

    async def retrieve(self, user_id: str, query: str, k: int = 5) -> builtins.list[MemoryItem]:
        """The `k` items best matching `query` (BM25, fused with cosine similarity when embedding)."""
        inputs = await query_inputs(self.embed, query, k)
        if inputs is None:
            return []
        terms, vector = inputs
        return await self._run(self._retrieve, user_id, terms, vector, k, self.clock())

    def _retrieve(
        self, user_id: str, terms: builtins.list[str], vector: builtins.list[float] | None, k: int, now: float
    ) -> builtins.list[MemoryItem]:
        conn = self._connection()
        depth = max(4 * k, 20)
        cutoff = self._cutoff(now)
        rankings: builtins.list[builtins.list[str]] = []
        with _transaction(conn):
            self._purge(conn, user_id, now)
            if terms:
                match = f'ukey : "{user_token(user_id)}" AND (' + " OR ".join(f'"{t}"' for t in terms) + ")"
                rows = conn.execute(
                    "SELECT m.id FROM memories_fts JOIN memories m ON m.seq = memories_fts.rowid "
                    "WHERE memories_fts MATCH ? AND m.last_used_at > ? "
                    "ORDER BY bm25(memories_fts, 0.0, 1.0) LIMIT ?",
                    (match, cutoff, depth),
                ).fetchall()
                rankings.append([row[0] for row in rows])
            if vector is not None:
                rows = conn.execute(
                    "SELECT id, embedding FROM memories WHERE user_id = ? AND last_used_at > ? "
                    "AND embedding IS NOT NULL ORDER BY last_used_at DESC LIMIT ?",
                    (user_id, cutoff, self.vector_scan_limit),
                ).fetchall()
                rankings.append(nearest(vector, rows, depth))
            best = fuse(rankings, k)
            if not best:
                return []
            marks = ",".join("?" * len(best))
            conn.execute(f"UPDATE memories SET last_used_at = ? WHERE id IN ({marks})", (now, *best))
            rows = conn.execute(f"SELECT {ITEM_COLUMNS} FROM memories WHERE id IN ({marks})", best).fetchall()
        by_id = {row[0]: item_from_row(row) for row in rows}
        return [by_id[item_id] for item_id in best if item_id in by_id]

    async def forget(self, user_id: str, ids: Sequence[str]) -> int:
        """Delete the user's items with these ids; returns how many there were."""
        wanted = forget_ids(ids)
        if not wanted:
            return 0
        return await self._run(self._forget, user_id, wanted)

    def _forget(self, user_id: str, ids: builtins.list[str]) -> int:
        conn = self._connection()
        marks = ",".join("?" * len(ids))
        with _transaction(conn):
            cur = conn.execute(f"DELETE FROM memories WHERE user_id = ? AND id IN ({marks})", (user_id, *ids))
        return cur.rowcount

    async def list(self, user_id: str) -> builtins.list[MemoryItem]:
        """Every live item of the user, oldest first."""
        return await self._run(self._list, user_id, self.clock())

    def _list(self, user_id: str, now: float) -> builtins.list[MemoryItem]:
        conn = self._connection()
        with _transaction(conn):
            self._purge(conn, user_id, now)
            rows = conn.execute(
                f"SELECT {ITEM_COLUMNS} FROM memories WHERE user_id = ? ORDER BY created_at, seq",
                (user_id,),
            ).fetchall()
        return [item_from_row(row) for row in rows]

    async def clear(self, user_id: str) -> int:
        """Forget every item of the user; returns how many there were."""
        return await self._run(self._clear, user_id)

    async def delete_user(self, user_id: str) -> int:
        """Delete every item of the user, for a data-protection request (`clear`); how many there were.

        The full-text index entries go with them (a trigger); a second call returns 0.
        """
        return await self.clear(user_id)

    def _clear(self, user_id: str) -> int:
        conn = self._connection()
        with _transaction(conn):
            cur = conn.execute("DELETE FROM memories WHERE user_id = ?", (user_id,))
        return cur.rowcount

    def __repr__(self) -> str:
        return f"SqliteLongTermMemory({self.path!r}, ttl={self.ttl!r}, cap={self.cap!r})"


class _transaction:  # noqa: N801 - used like a function
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on error) on an autocommit connection."""

    __slots__ = ("conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self.conn.execute("ROLLBACK" if exc_type is not None else "COMMIT")
