"""`SqliteKnowledgeStore`: the embedded knowledge index (one SQLite file, FTS5/BM25, optional vectors).

Schema (one file, WAL mode)::

    kb_documents  id INTEGER PRIMARY KEY, namespace, kb, source, title, content_hash,
                  metadata (JSON), chunk_count, added_at; UNIQUE (namespace, kb, source)
    kb_chunks     seq INTEGER PRIMARY KEY, doc_id -> kb_documents.id, chunk_id, ordinal, text,
                  heading_path (JSON), page, tokens, dims, embedding BLOB (unit float32, optional)
    kb_fts        FTS5(scope, head, body), rowid = kb_chunks.seq. ``scope`` is a token naming the
                  (namespace, kb) pair, so a query is ``scope : "<token>" AND {head body} : (...)``
                  and the index itself keeps tenants apart; ``bm25(kb_fts, 0, 2, 1)`` ranks on the
                  heading path and the text only.

Text is indexed through `agentrt.memory._text.index_terms`, the same pre-segmentation long-term
memory uses: CJK runs become single characters plus bigrams, so ``unicode61`` (which does not
split CJK) finds Chinese and Japanese words. A query is reduced to such terms and each is quoted,
so no FTS5 operator, column filter or prefix syntax from an untrusted query ever reaches MATCH.

Vectors are stored as unit float32 blobs (the format the ``sqlite-vec`` extension reads). With the
extension loadable, `search_vector` ranks in SQL with ``vec_distance_cosine``; otherwise the rows
are scanned with a pure-Python cosine in the store's worker thread. The file is the same either
way (no extension-specific virtual table), so it opens with or without the extension.

Every statement runs in one worker thread that owns the connection, as in `SqliteLongTermMemory`.
"""

from __future__ import annotations

import hashlib
import heapq
import importlib
import math
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, TypeVar

from agentrt import _json
from agentrt.errors import UserError
from agentrt.knowledge.base import Chunk, Document
from agentrt.knowledge.filters import check_filters, finite_unit
from agentrt.memory._text import STOP_WORDS, cosine, index_terms, pack_vector, unpack_vector
from agentrt.memory.retrieval import Passage, SearchFilters
from agentrt.memory.stores._sqlite_thread import SqliteThread, open_database

__all__ = ["SqliteKnowledgeStore"]

_T = TypeVar("_T")
_MAX_QUERY_TERMS = 32
#: Long-term memory's stop words less those that only make sense for facts about "the user".
_STOP_WORDS = STOP_WORDS - {"user", "users", "tell", "know", "remember", "recall"}
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS kb_documents (
        id INTEGER PRIMARY KEY,
        namespace TEXT NOT NULL,
        kb TEXT NOT NULL,
        source TEXT NOT NULL,
        title TEXT,
        content_hash TEXT NOT NULL,
        metadata TEXT NOT NULL,
        chunk_count INTEGER NOT NULL,
        added_at REAL NOT NULL,
        UNIQUE (namespace, kb, source)
    )""",
    """CREATE TABLE IF NOT EXISTS kb_chunks (
        seq INTEGER PRIMARY KEY,
        doc_id INTEGER NOT NULL REFERENCES kb_documents (id),
        chunk_id TEXT NOT NULL,
        ordinal INTEGER NOT NULL,
        text TEXT NOT NULL,
        heading_path TEXT NOT NULL,
        page INTEGER,
        tokens INTEGER NOT NULL,
        dims INTEGER,
        embedding BLOB
    )""",
    "CREATE INDEX IF NOT EXISTS kb_chunks_doc ON kb_chunks (doc_id, ordinal)",
    "CREATE INDEX IF NOT EXISTS kb_chunks_id ON kb_chunks (chunk_id)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS kb_fts USING fts5("
    "scope, head, body, tokenize = 'porter unicode61 remove_diacritics 2')",
    "CREATE TRIGGER IF NOT EXISTS kb_fts_delete AFTER DELETE ON kb_chunks "
    "BEGIN DELETE FROM kb_fts WHERE rowid = old.seq; END",
)
_DATE_GLOB = "[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]"
_DOC_COLUMNS = "source, title, content_hash, metadata, chunk_count, added_at"
_PASSAGE_SQL = (
    "SELECT c.seq, c.chunk_id, c.text, c.heading_path, c.page, d.source, d.title, d.metadata "
    "FROM kb_chunks c JOIN kb_documents d ON d.id = c.doc_id WHERE c.seq IN ({marks})"
)


def scope_token(namespace: str, kb: str) -> str:
    """The index token naming a (namespace, kb) pair (letters and digits only: no tokenizer splits it)."""
    digest = hashlib.sha256(f"{len(namespace)}:{namespace}\x00{kb}".encode("utf-8", "surrogatepass"))
    return "k" + digest.hexdigest()[:32]


def match_terms(query: str) -> list[str]:
    """The distinct search terms of an untrusted query, in order: words, CJK bigrams, lone CJK characters.

    Stop words are dropped unless nothing else is left. Each term is made of letters and digits only,
    so quoting it yields an FTS5 string that cannot carry an operator.
    """
    tokens = list(dict.fromkeys(index_terms(query).split()))
    pairs = {t for t in tokens if len(t) == 2 and not t.isascii()}
    out: list[str] = []
    for term in tokens:
        if len(term) == 1:
            if term.isascii() and not term.isdigit():
                continue  # a lone Latin letter matches too much to help
            if not term.isascii() and any(term in pair for pair in pairs):
                continue  # a character of a longer CJK run: its bigrams say more
        out.append(term)
    kept = [t for t in out if t not in _STOP_WORDS]
    return (kept or out)[:_MAX_QUERY_TERMS]


def _sqlite_module(vectors: bool | None) -> tuple[ModuleType, ModuleType | None]:
    """The DB-API module to open the file with, and ``sqlite_vec`` when its extension can be loaded.

    Python builds without loadable-extension support (pyenv's default) cannot load ``sqlite-vec``
    through the standard `sqlite3`; ``pysqlite3`` (``pysqlite3-binary``) is used instead when present.
    """
    if vectors is False:
        return sqlite3, None
    try:
        vec = importlib.import_module("sqlite_vec")
    except ImportError:
        return _no_vectors(vectors, "the sqlite-vec package is not installed (pip install 'agentrt[knowledge]')")
    if hasattr(sqlite3.Connection, "enable_load_extension"):
        return sqlite3, vec
    try:
        return importlib.import_module("pysqlite3.dbapi2"), vec
    except ImportError:
        return _no_vectors(
            vectors, "this Python's sqlite3 cannot load extensions and pysqlite3-binary is not installed"
        )


def _no_vectors(vectors: bool | None, reason: str) -> tuple[ModuleType, None]:
    if vectors:
        raise UserError(f"SqliteKnowledgeStore(vectors=True): {reason}")
    return sqlite3, None


def _load_vec(conn: Any, vec: ModuleType, vectors: bool | None) -> bool:
    """Load the sqlite-vec extension into `conn`; whether it worked (raises when `vectors` is True)."""
    try:
        conn.enable_load_extension(True)
        try:
            vec.load(conn)
        finally:
            conn.enable_load_extension(False)
        conn.execute("SELECT vec_version()").fetchone()
    except Exception as exc:
        if vectors:
            raise UserError(f"SqliteKnowledgeStore(vectors=True): cannot load sqlite-vec: {exc}") from exc
        return False
    return True


def _filter_sql(filters: SearchFilters | None) -> tuple[str, list[Any]]:
    """SQL conditions on ``d`` (kb_documents) for `filters`, with their parameters; never formats a value in.

    `filters` are checked first (`check_filters`: typed errors, canonical dates, bounded lists).
    """
    checked = check_filters(filters)
    if not checked:
        return "", []
    clauses: list[str] = []
    params: list[Any] = []
    for key, value in checked.items():
        if key == "source":
            if not value:
                clauses.append("0")
                continue
            clauses.append(f"d.source IN ({','.join('?' * len(value))})")
            params.extend(value)
        elif key == "tags":
            for tag in dict.fromkeys(value):
                clauses.append(
                    "EXISTS (SELECT 1 FROM json_each(d.metadata, '$.tags') t WHERE t.value = ? AND t.type = 'text')"
                )
                params.append(tag)
        elif key in ("since", "until"):
            op = ">=" if key == "since" else "<="
            column = "json_extract(d.metadata, '$.date')"
            # Only a text that starts as an ISO date is a date (the memory store parses the same ones).
            guard = f"json_type(d.metadata, '$.date') = 'text' AND {column} GLOB '{_DATE_GLOB}*' AND "
            if len(value) == 10:  # a date: compare the date part of the document's date
                clauses.append(f"({guard}substr({column}, 1, 10) {op} ?)")
            else:  # a date and time: a document's date without time is its midnight
                clauses.append(
                    f"({guard}(CASE WHEN length({column}) = 10 THEN {column} || 'T00:00:00' ELSE {column} END) {op} ?)"
                )
            params.append(value)
        else:
            clause, extra = _equality(key, value)
            clauses.append(clause)
            params.extend(extra)
    return "".join(f" AND {clause}" for clause in clauses), params


def _equality(key: str, value: Any) -> tuple[str, list[Any]]:
    """A condition: the document's top-level metadata `key` equals `value` (key matched as a value, not a path)."""
    head = "EXISTS (SELECT 1 FROM json_each(d.metadata) m WHERE m.key = ? AND "
    if value is None:
        return head + "m.type = 'null')", [key]
    if isinstance(value, bool):
        return head + "m.type = ?)", [key, "true" if value else "false"]
    if isinstance(value, int | float):
        return head + "m.type IN ('integer', 'real') AND m.value = ?)", [key, value]
    if isinstance(value, str):
        return head + "m.type = 'text' AND m.value = ?)", [key, value]
    return head + "m.type IN ('array', 'object') AND m.value = json(?))", [key, _json.dumps(value)]


class SqliteKnowledgeStore(SqliteThread):
    """Knowledge bases in one SQLite file: FTS5 full-text search ranked by BM25, optional vectors.

    Args:
        path: The database file (its folder is created, mode 0700), or ``":memory:"``.
        vectors: Whether `search_vector` ranks with the ``sqlite-vec`` extension: None (default)
            when it loads, else a pure-Python scan; True requires it (`UserError` when it cannot
            load); False never loads it. Embeddings are stored and searchable in every case.
    """

    def __init__(self, path: str | Path = "~/.agentrt/knowledge.db", *, vectors: bool | None = None) -> None:
        self.path = str(path)
        self.vectors = vectors
        super().__init__()
        self._vec = False

    @property
    def vector_engine(self) -> Literal["sqlite-vec", "python"] | None:
        """How `search_vector` ranks: ``"sqlite-vec"`` or ``"python"``; None before the file is opened."""
        if self._conn is None:
            return None
        return "sqlite-vec" if self._vec else "python"

    # -- plumbing -----------------------------------------------------------------------------
    _thread_name = "agentrt-knowledge"

    def _connection(self) -> Any:
        conn = self._conn
        if conn is not None:
            return conn
        module, vec = _sqlite_module(self.vectors)
        conn = open_database(module, self.path)
        try:
            self._vec = vec is not None and _load_vec(conn, vec, self.vectors)
            with _transaction(conn):
                for statement in _SCHEMA:
                    conn.execute(statement)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    # -- writing ------------------------------------------------------------------------------
    async def upsert(self, namespace: str, kb: str, document: Document, chunks: Sequence[Chunk]) -> None:
        """Insert `document` or replace it and all its chunks, in one transaction."""
        rows = [_chunk_row(chunk) for chunk in chunks]
        for chunk in chunks:
            if chunk.source != document.source:
                raise UserError(f"chunk {chunk.chunk_id!r} is of {chunk.source!r}, not of {document.source!r}")
        await self._run(self._upsert, namespace, kb, document, rows)

    def _upsert(self, namespace: str, kb: str, document: Document, rows: list[tuple[Any, ...]]) -> None:
        conn = self._connection()
        scope = scope_token(namespace, kb)
        added_at = document.added_at or time.time()
        with _transaction(conn):
            found = conn.execute(
                "SELECT id FROM kb_documents WHERE namespace = ? AND kb = ? AND source = ?",
                (namespace, kb, document.source),
            ).fetchone()
            values = (
                document.title,
                document.content_hash,
                _json.dumps(document.metadata),
                len(rows),
                added_at,
            )
            if found is None:
                cur = conn.execute(
                    "INSERT INTO kb_documents (namespace, kb, source, title, content_hash, metadata, chunk_count, "
                    "added_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (namespace, kb, document.source, *values),
                )
                doc_id = cur.lastrowid
            else:
                doc_id = found[0]
                conn.execute("DELETE FROM kb_chunks WHERE doc_id = ?", (doc_id,))
                conn.execute(
                    "UPDATE kb_documents SET title = ?, content_hash = ?, metadata = ?, chunk_count = ?, added_at = ? "
                    "WHERE id = ?",
                    (*values, doc_id),
                )
            for row, head, body in rows:
                cur = conn.execute(
                    "INSERT INTO kb_chunks (doc_id, chunk_id, ordinal, text, heading_path, page, tokens, dims, "
                    "embedding) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (doc_id, *row),
                )
                conn.execute(
                    "INSERT INTO kb_fts (rowid, scope, head, body) VALUES (?, ?, ?, ?)",
                    (cur.lastrowid, scope, index_terms(head), index_terms(body)),
                )

    async def delete(self, namespace: str, kb: str, source: str) -> bool:
        """Remove a document and its chunks; returns whether it existed."""
        return await self._run(self._delete, namespace, kb, source)

    def _delete(self, namespace: str, kb: str, source: str) -> bool:
        conn = self._connection()
        with _transaction(conn):
            conn.execute(
                "DELETE FROM kb_chunks WHERE doc_id IN "
                "(SELECT id FROM kb_documents WHERE namespace = ? AND kb = ? AND source = ?)",
                (namespace, kb, source),
            )
            cur = conn.execute(
                "DELETE FROM kb_documents WHERE namespace = ? AND kb = ? AND source = ?", (namespace, kb, source)
            )
        return bool(cur.rowcount)

    async def drop(self, namespace: str, kb: str) -> int:
        """Delete a whole kb; returns how many documents it held."""
        return await self._run(self._drop, namespace, kb)

    def _drop(self, namespace: str, kb: str) -> int:
        conn = self._connection()
        with _transaction(conn):
            conn.execute(
                "DELETE FROM kb_chunks WHERE doc_id IN (SELECT id FROM kb_documents WHERE namespace = ? AND kb = ?)",
                (namespace, kb),
            )
            cur = conn.execute("DELETE FROM kb_documents WHERE namespace = ? AND kb = ?", (namespace, kb))
        return int(cur.rowcount)

    async def delete_namespace(self, namespace: str) -> int:
        """Delete every kb of the namespace (documents, chunks, index entries); how many documents went."""
        return await self._run(self._delete_namespace, namespace)

    def _delete_namespace(self, namespace: str) -> int:
        conn = self._connection()
        with _transaction(conn):
            conn.execute(
                "DELETE FROM kb_chunks WHERE doc_id IN (SELECT id FROM kb_documents WHERE namespace = ?)", (namespace,)
            )
            cur = conn.execute("DELETE FROM kb_documents WHERE namespace = ?", (namespace,))
        return int(cur.rowcount)

    async def delete_user(self, user_id: str) -> int:
        """`delete_namespace` of the user's namespace (the user id, as the server and per-user kbs use)."""
        return await self.delete_namespace(user_id)

    # -- reading ------------------------------------------------------------------------------
    async def content_hash(self, namespace: str, kb: str, source: str) -> str | None:
        """The stored document's hash, or None when the source is not in the kb."""
        return await self._run(self._content_hash, namespace, kb, source)

    def _content_hash(self, namespace: str, kb: str, source: str) -> str | None:
        row = (
            self._connection()
            .execute(
                "SELECT content_hash FROM kb_documents WHERE namespace = ? AND kb = ? AND source = ?",
                (namespace, kb, source),
            )
            .fetchone()
        )
        return None if row is None else str(row[0])

    async def documents(self, namespace: str, kb: str) -> list[Document]:
        """Every document of the kb, by source."""
        return await self._run(self._documents, namespace, kb)

    def _documents(self, namespace: str, kb: str) -> list[Document]:
        rows = (
            self._connection()
            .execute(
                f"SELECT {_DOC_COLUMNS} FROM kb_documents WHERE namespace = ? AND kb = ? ORDER BY source",
                (namespace, kb),
            )
            .fetchall()
        )
        return [
            Document(source, title, content_hash, _json.loads(metadata), chunk_count, added_at)
            for source, title, content_hash, metadata, chunk_count, added_at in rows
        ]

    async def kbs(self, namespace: str) -> list[str]:
        """The namespace's knowledge bases that hold at least one document, sorted."""
        return await self._run(self._kbs, namespace)

    def _kbs(self, namespace: str) -> list[str]:
        rows = (
            self._connection()
            .execute("SELECT DISTINCT kb FROM kb_documents WHERE namespace = ? ORDER BY kb", (namespace,))
            .fetchall()
        )
        return [row[0] for row in rows]

    async def chunk(self, namespace: str, kb: str, chunk_id: str) -> Passage | None:
        """One chunk of the kb by id (score 0), or None."""
        return await self._run(self._chunk, namespace, kb, chunk_id)

    def _chunk(self, namespace: str, kb: str, chunk_id: str) -> Passage | None:
        conn = self._connection()
        with _read(conn):
            row = conn.execute(
                "SELECT c.seq FROM kb_chunks c JOIN kb_documents d ON d.id = c.doc_id "
                "WHERE c.chunk_id = ? AND d.namespace = ? AND d.kb = ? ORDER BY c.seq LIMIT 1",
                (chunk_id, namespace, kb),
            ).fetchone()
            found = _passages(conn, [(row[0], 0.0)]) if row is not None else []
        return found[0] if found else None

    async def search_text(
        self, namespace: str, kb: str, query: str, k: int, filters: SearchFilters | None = None
    ) -> list[Passage]:
        """BM25 ranking over the chunks' text and heading paths, best first; [] without a searchable term."""
        terms = match_terms(query)
        where, params = _filter_sql(filters)
        if not terms or k < 1:
            return []
        match = f'scope : "{scope_token(namespace, kb)}" AND {{head body}} : (' + " OR ".join(
            f'"{term}"' for term in terms
        )
        match += ")"
        return await self._run(self._search_text, namespace, kb, match, k, where, params)

    def _search_text(self, namespace: str, kb: str, match: str, k: int, where: str, params: list[Any]) -> list[Passage]:
        conn = self._connection()
        # CROSS JOIN keeps the full-text index the outer loop: newer planners otherwise walk the kb's
        # chunks and run the MATCH once per chunk (a thousand times slower at 10k chunks).
        with _read(conn):
            hits = conn.execute(
                "SELECT c.seq, -bm25(kb_fts, 0.0, 2.0, 1.0) AS score FROM kb_fts "
                "CROSS JOIN kb_chunks c ON c.seq = kb_fts.rowid CROSS JOIN kb_documents d ON d.id = c.doc_id "
                "WHERE kb_fts MATCH ? AND d.namespace = ? AND d.kb = ?" + where + " ORDER BY score DESC, c.seq LIMIT ?",
                (match, namespace, kb, *params, k),
            ).fetchall()
            return _passages(conn, hits)

    async def search_vector(
        self, namespace: str, kb: str, vector: Sequence[float], k: int, filters: SearchFilters | None = None
    ) -> list[Passage]:
        """Nearest chunks by cosine similarity, best first; chunks without an embedding are not ranked."""
        where, params = _filter_sql(filters)
        query = finite_unit(vector)
        if k < 1 or query is None:
            return []
        return await self._run(self._search_vector, namespace, kb, query, k, where, params)

    def _search_vector(
        self, namespace: str, kb: str, query: list[float], k: int, where: str, params: list[Any]
    ) -> list[Passage]:
        conn = self._connection()
        scope = (
            "FROM kb_chunks c JOIN kb_documents d ON d.id = c.doc_id "
            "WHERE d.namespace = ? AND d.kb = ? AND c.dims = ? AND c.embedding IS NOT NULL" + where
        )
        args = (namespace, kb, len(query), *params)
        with _read(conn):
            if self._vec:
                hits = conn.execute(
                    "SELECT c.seq, 1.0 - vec_distance_cosine(c.embedding, ?) AS score "
                    + scope
                    + " ORDER BY score DESC, c.seq LIMIT ?",
                    (pack_vector(query), *args, k),
                ).fetchall()
                hits = [(seq, score) for seq, score in hits if score is not None and math.isfinite(score)]
            else:
                rows = conn.execute("SELECT c.seq, c.embedding " + scope, args)
                hits = _nearest(query, rows, k)
            return _passages(conn, hits)

    def __repr__(self) -> str:
        return f"SqliteKnowledgeStore({self.path!r}, vectors={self.vectors!r})"


def _chunk_row(chunk: Chunk) -> tuple[tuple[Any, ...], str, str]:
    """The kb_chunks values of `chunk` (after doc_id), and the heading and body text to index."""
    dims: int | None = None
    blob: bytes | None = None
    if chunk.embedding is not None:
        vector = finite_unit(chunk.embedding)
        if vector is not None:  # a zero or non-finite vector has no direction: nothing to rank it by
            dims, blob = len(vector), pack_vector(vector)
    row = (
        chunk.chunk_id,
        chunk.ordinal,
        chunk.text,
        _json.dumps(list(chunk.heading_path)),
        chunk.page,
        chunk.tokens,
        dims,
        blob,
    )
    return row, " ".join(chunk.heading_path), chunk.text


def _nearest(query: list[float], rows: Iterator[tuple[int, bytes]], k: int) -> list[tuple[int, float]]:
    """The `k` (seq, cosine) pairs most similar to the unit `query`, best first (ties: lower seq first)."""
    scored = ((cosine(query, unpack_vector(blob)), -seq) for seq, blob in rows)
    # A NaN cosine (a vector stored before non-finite ones were refused) would break the ordering.
    finite = (pair for pair in scored if math.isfinite(pair[0]))
    return [(-neg_seq, score) for score, neg_seq in heapq.nlargest(k, finite)]


def _passages(conn: Any, hits: Sequence[tuple[int, float]]) -> list[Passage]:
    """The passages of ranked ``(seq, score)`` hits, in the same order."""
    if not hits:
        return []
    rows = conn.execute(_PASSAGE_SQL.format(marks=",".join("?" * len(hits))), [seq for seq, _ in hits]).fetchall()
    by_seq = {row[0]: row for row in rows}
    out: list[Passage] = []
    for seq, score in hits:
        row = by_seq.get(seq)
        if row is None:  # pragma: no cover - read in the same transaction as the ranking
            continue
        _, chunk_id, text, heading_path, page, source, title, metadata = row
        location = Chunk(chunk_id, source, 0, "", tuple(_json.loads(heading_path)), page).location
        out.append(Passage(chunk_id, text, source, title, location, float(score), _json.loads(metadata)))
    return out


@contextmanager
def _read(conn: Any) -> Iterator[None]:
    """One read transaction (a consistent snapshot across the ranking and the passage fetch)."""
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


class _transaction:  # noqa: N801 - used like a function
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on error) on an autocommit connection."""

    __slots__ = ("conn",)

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def __enter__(self) -> Any:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self.conn.execute("ROLLBACK" if exc_type is not None else "COMMIT")
