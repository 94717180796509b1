"""SqliteStateStore: the embedded default store (stdlib `sqlite3`, WAL mode, one worker thread per store).

Schema (``PRAGMA user_version = 1``)::

    sessions(user_id TEXT, session_id TEXT, revision INTEGER, doc TEXT, message_count INTEGER,
             created_at REAL, updated_at REAL, PRIMARY KEY(user_id, session_id))
    messages(user_id TEXT, session_id TEXT, seq INTEGER, body TEXT, PRIMARY KEY(user_id, session_id, seq),
             FOREIGN KEY(user_id, session_id) REFERENCES sessions ON DELETE CASCADE)
    INDEX sessions_by_user_updated ON sessions(user_id, updated_at)

``doc`` is `encode_state(state, include_messages=False)` (see `agentrt.state.codec`); the columns
``revision``, ``message_count``, ``created_at`` and ``updated_at`` are authoritative and override the
copies in ``doc`` on load. ``messages.body`` is one `encode_message` JSON text, ``seq`` counts from 0.

Every operation is one function call on the store's single worker thread (one thread hop, one
transaction), so the event loop never blocks on disk I/O. `append` inserts only the new message rows
and updates the session row in one ``BEGIN IMMEDIATE`` transaction: its cost does not grow with the
length of the conversation.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Self, TypeVar

from agentrt import _json
from agentrt.errors import StateConflictError, StateStoreError
from agentrt.message import Msg
from agentrt.state.base import AgentState, BaseStateStore, SessionInfo
from agentrt.state.codec import decode_message, decode_state, encode_fields, encode_message, encode_state

__all__ = ["DEFAULT_PATH", "SqliteStateStore"]

DEFAULT_PATH = Path("~/.agentrt/state.db")
"""Where `SqliteStateStore()` keeps its database when no path is given (``~`` is expanded)."""

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    user_id       TEXT    NOT NULL,
    session_id    TEXT    NOT NULL,
    revision      INTEGER NOT NULL,
    doc           TEXT    NOT NULL,
    message_count INTEGER NOT NULL,
    created_at    REAL    NOT NULL,
    updated_at    REAL    NOT NULL,
    PRIMARY KEY (user_id, session_id)
);
CREATE INDEX IF NOT EXISTS sessions_by_user_updated ON sessions (user_id, updated_at);
CREATE TABLE IF NOT EXISTS messages (
    user_id    TEXT    NOT NULL,
    session_id TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    body       TEXT    NOT NULL,
    PRIMARY KEY (user_id, session_id, seq),
    FOREIGN KEY (user_id, session_id) REFERENCES sessions (user_id, session_id) ON DELETE CASCADE
);
"""

_T = TypeVar("_T")
_Job = tuple[Callable[..., Any], tuple[Any, ...], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]
_MAX_BATCH = 256


def _deliver(results: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    for future, ok, value in results:
        if future.done():  # the caller was cancelled; the operation may still have committed
            continue
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)


def _close_op() -> None:
    """Marker job: close the connection (never opens one)."""


class SqliteStateStore(BaseStateStore):
    """Sessions in one SQLite database file, in WAL mode, driven from one dedicated worker thread.

    Args:
        path: The database file (its directory is created if missing), ``":memory:"`` for a
            private in-memory database, or None for ``~/.agentrt/state.db``.
        busy_timeout: Seconds a write waits for another process's write transaction to finish
            before failing with `StateStoreError`.

    Durability: ``synchronous=NORMAL`` in WAL mode, so a committed write survives a crash of the
    process (SIGKILL included); the last commits before a power loss or OS crash may be lost.

    Several processes may share one database file (SQLite serialises their writes; the revision
    check rejects lost updates), but `session_lock` is in-process only: processes that must run
    calls on one session one after the other need a store with distributed locks.

    A write whose caller is cancelled while the write runs may still commit: reload to find out.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, busy_timeout: float = 5.0) -> None:
        if path is None:
            self._path = str(DEFAULT_PATH.expanduser())
        elif os.fspath(path) == ":memory:":
            self._path = ":memory:"
        else:
            self._path = str(Path(path).expanduser())
        if busy_timeout < 0:
            raise ValueError("busy_timeout must not be negative")
        self._busy_timeout = float(busy_timeout)
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._conn: sqlite3.Connection | None = None  # created and used on the worker thread only
        self._used = False
        self._closed = False

    @property
    def path(self) -> str:
        """The database file (or ``":memory:"``)."""
        return self._path

    def __repr__(self) -> str:
        return f"SqliteStateStore({self._path!r})"

    async def __aenter__(self) -> Self:
        return self

    # -- store protocol -------------------------------------------------------------------
    async def load(self, user_id: str, session_id: str) -> AgentState | None:
        """The stored state, or None if the session does not exist."""
        return await self._call(_load, user_id, session_id)

    async def append(
        self,
        user_id: str,
        session_id: str,
        messages: Sequence[Msg],
        *,
        fields: Mapping[str, Any] | None = None,
        expected_revision: int,
    ) -> int:
        """Insert the new messages and merge changed fields if `expected_revision` is current."""
        # Encoded here, on the caller's thread: the write stores the values as they are now.
        bodies = _encode_messages(messages)
        changed = encode_fields(fields) if fields else None
        return await self._call(_append, user_id, session_id, bodies, changed, expected_revision)

    async def save(self, state: AgentState, *, expected_revision: int | None = None) -> int:
        """Replace the session's state and messages."""
        doc = encode_state(state, include_messages=False)
        bodies = _encode_messages(state.messages)
        return await self._call(_save, state.user_id, state.session_id, doc, bodies, expected_revision)

    async def delete(self, user_id: str, session_id: str) -> bool:
        """Remove the session and its messages; True if it existed."""
        return await self._call(_delete, user_id, session_id)

    async def list_sessions(self, user_id: str) -> list[SessionInfo]:
        """The user's sessions, most recently updated first."""
        return await self._call(_list_sessions, user_id)

    async def close(self) -> None:
        """Close the database connection and stop the worker thread (idempotent)."""
        if self._closed:
            return
        if self._thread is None:
            self._closed = True
            return
        try:
            await self._call(_close_op)
        finally:
            self._closed = True
            self._queue.put(None)  # the worker stops after the close (and anything queued before it)
            thread, self._thread = self._thread, None
            if thread is not None:
                await asyncio.to_thread(thread.join)

    # -- worker thread --------------------------------------------------------------------
    async def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        if self._closed:
            raise StateStoreError(f"{self!r} is closed")
        self._used = True
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_T] = loop.create_future()
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="agentrt-sqlite", daemon=True)
            self._thread.start()
        self._queue.put((fn, args, loop, future))
        return await future

    def _work(self) -> None:
        # Runs queued jobs in order. Appends that queued up while the previous batch ran share one
        # transaction (each in its own savepoint, so a conflict rejects only that append): under
        # load, one commit and one wake-up of each event loop serve many checkpoints.
        while True:
            job = self._queue.get()
            if job is None:
                return
            batch = [job]
            stop = False
            while len(batch) < _MAX_BATCH:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                batch.append(nxt)
            outcomes = self._run_batch(batch)
            by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]] = {}
            for (_fn, _args, loop, future), outcome in zip(batch, outcomes, strict=True):
                by_loop.setdefault(loop, []).append((future, *outcome))
            for loop, results in by_loop.items():
                with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                    loop.call_soon_threadsafe(_deliver, results)
            if stop:
                return

    def _run_batch(self, batch: list[_Job]) -> list[tuple[bool, Any]]:
        outcomes: list[tuple[bool, Any]] = []
        i = 0
        while i < len(batch):
            j = i
            while j < len(batch) and batch[j][0] is _append:
                j += 1
            if j - i > 1:
                outcomes.extend(self._run_appends(batch[i:j]))
                i = j
                continue
            fn, args, _loop, _future = batch[i]
            outcomes.append(self._attempt(fn, args))
            i += 1
        return outcomes

    def _run_appends(self, jobs: list[_Job]) -> list[tuple[bool, Any]]:
        try:
            conn = self._conn if self._conn is not None else self._connect()
            conn.execute("BEGIN IMMEDIATE")
        except (sqlite3.Error, StateStoreError):
            return [self._attempt(fn, args) for fn, args, _loop, _future in jobs]  # one by one
        outcomes = [self._attempt(fn, args) for fn, args, _loop, _future in jobs]
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            error = StateStoreError(f"SQLite state store {self._path!r}: {exc}")
            return [(False, error) if ok else (ok, value) for ok, value in outcomes]
        return outcomes

    def _attempt(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[bool, Any]:
        try:
            if fn is _close_op:
                self._close_connection()
                return True, None
            return True, self._run(fn, *args)
        except Exception as exc:
            return False, exc

    def _run(self, fn: Callable[..., _T], *args: Any) -> _T:
        conn = self._conn if self._conn is not None else self._connect()
        try:
            return fn(conn, *args)
        except sqlite3.Error as exc:
            raise StateStoreError(f"SQLite state store {self._path!r}: {exc}") from exc
        except UnicodeEncodeError as exc:  # lone surrogates in an id or a message
            raise StateStoreError(f"cannot store text that is not valid Unicode: {exc.reason}") from None

    def _connect(self) -> sqlite3.Connection:
        try:
            if self._path != ":memory:":
                Path(self._path).parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self._path, timeout=self._busy_timeout, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise StateStoreError(f"cannot open SQLite state store {self._path!r}: {exc}") from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            _migrate(conn)
        except BaseException as exc:
            conn.close()
            if isinstance(exc, sqlite3.Error):
                raise StateStoreError(f"cannot open SQLite state store {self._path!r}: {exc}") from exc
            raise
        self._conn = conn
        return conn

    def _close_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("PRAGMA optimize")
            conn.close()


# -- operations (run on the worker thread; each is one transaction) --------------------------


def _encode_messages(messages: Sequence[Msg]) -> list[str]:
    try:
        return [encode_message(m) for m in messages]
    except UnicodeEncodeError as exc:  # lone surrogates
        raise StateStoreError(f"cannot store a message that is not valid Unicode text: {exc.reason}") from None


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection, *, write: bool) -> Iterator[None]:
    if conn.in_transaction:
        # Inside a batch of appends: a savepoint, so this operation commits or rolls back alone.
        conn.execute("SAVEPOINT op")
        try:
            yield
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK TO op")
                conn.execute("RELEASE op")
            raise
        conn.execute("RELEASE op")
        return
    # Writers take the write lock up front (no deadlock-prone lock upgrade); readers get a snapshot.
    conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
    try:
        yield
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _migrate(conn: sqlite3.Connection) -> None:
    with _transaction(conn, write=True):
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise StateStoreError(
                f"the state database has schema version {version}, newer than this agentrt understands "
                f"({SCHEMA_VERSION}); upgrade agentrt"
            )
        if version < SCHEMA_VERSION:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _conflict(user_id: str, session_id: str, current: int, expected: int) -> StateConflictError:
    return StateConflictError(f"session {session_id!r} of user {user_id!r} is at revision {current}, not {expected}")


def _parse_doc(raw: Any, user_id: str, session_id: str) -> dict[str, Any]:
    try:
        doc = _json.loads(raw)
    except (TypeError, ValueError) as exc:
        raise StateStoreError(f"stored state of session {session_id!r} of user {user_id!r} is corrupt: {exc}") from exc
    if not isinstance(doc, dict):
        raise StateStoreError(f"stored state of session {session_id!r} of user {user_id!r} is not a JSON object")
    return doc


def _load(conn: sqlite3.Connection, user_id: str, session_id: str) -> AgentState | None:
    with _transaction(conn, write=False):
        row = conn.execute(
            "SELECT revision, doc, message_count, created_at, updated_at FROM sessions"
            " WHERE user_id = ? AND session_id = ?",
            (user_id, session_id),
        ).fetchone()
        if row is None:
            return None
        rows = conn.execute(
            "SELECT seq, body FROM messages WHERE user_id = ? AND session_id = ? ORDER BY seq",
            (user_id, session_id),
        ).fetchall()
    revision, raw_doc, count, created_at, updated_at = row
    where = f"session {session_id!r} of user {user_id!r}"
    if len(rows) != count or (rows and (rows[0][0] != 0 or rows[-1][0] != count - 1)):
        raise StateStoreError(f"stored {where} is corrupt: expected messages 0..{count - 1}, found {len(rows)} rows")
    doc = _parse_doc(raw_doc, user_id, session_id)
    try:
        messages = [decode_message(body) for _, body in rows]
        state = decode_state(doc, messages)
        state.revision = int(revision)
        state.created_at = float(created_at)
        state.updated_at = float(updated_at)
    except (TypeError, ValueError) as exc:
        raise StateStoreError(f"stored {where} is corrupt: {exc}") from exc
    state.user_id = user_id
    state.session_id = session_id
    return state


def _append(
    conn: sqlite3.Connection,
    user_id: str,
    session_id: str,
    bodies: list[str],
    changed: dict[str, Any] | None,
    expected: int,
) -> int:
    with _transaction(conn, write=True):
        row = conn.execute(
            _SELECT_FOR_APPEND_WITH_DOC if changed else _SELECT_FOR_APPEND, (user_id, session_id)
        ).fetchone()
        current = 0 if row is None else int(row[0])
        if current != expected:
            raise _conflict(user_id, session_id, current, expected)
        now = time.time()
        revision = current + 1
        if row is None:
            count = 0
            doc = encode_state(
                AgentState(user_id=user_id, session_id=session_id, created_at=now), include_messages=False
            )
            doc.update(changed or {}, revision=revision, updated_at=now)
            conn.execute(
                "INSERT INTO sessions (user_id, session_id, revision, doc, message_count, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (user_id, session_id, revision, _json.dumps(doc), len(bodies), now, now),
            )
        else:
            count = int(row[1])
            if changed:
                doc = _parse_doc(row[2], user_id, session_id)
                doc.update(changed, revision=revision, updated_at=now)
                conn.execute(
                    "UPDATE sessions SET revision = ?, message_count = ?, updated_at = ?, doc = ?"
                    " WHERE user_id = ? AND session_id = ?",
                    (revision, count + len(bodies), now, _json.dumps(doc), user_id, session_id),
                )
            else:  # the columns are authoritative for revision and timestamps: doc stays as it is
                conn.execute(
                    "UPDATE sessions SET revision = ?, message_count = ?, updated_at = ?"
                    " WHERE user_id = ? AND session_id = ?",
                    (revision, count + len(bodies), now, user_id, session_id),
                )
        if bodies:
            conn.executemany(
                "INSERT INTO messages (user_id, session_id, seq, body) VALUES (?, ?, ?, ?)",
                [(user_id, session_id, count + i, body) for i, body in enumerate(bodies)],
            )
    return revision


_SELECT_FOR_APPEND = "SELECT revision, message_count FROM sessions WHERE user_id = ? AND session_id = ?"
_SELECT_FOR_APPEND_WITH_DOC = "SELECT revision, message_count, doc FROM sessions WHERE user_id = ? AND session_id = ?"


def _save(
    conn: sqlite3.Connection,
    user_id: str,
    session_id: str,
    doc: dict[str, Any],
    bodies: list[str],
    expected: int | None,
) -> int:
    with _transaction(conn, write=True):
        row = conn.execute(
            "SELECT revision FROM sessions WHERE user_id = ? AND session_id = ?", (user_id, session_id)
        ).fetchone()
        current = 0 if row is None else int(row[0])
        if expected is not None and current != expected:
            raise _conflict(user_id, session_id, current, expected)
        now = time.time()
        revision = current + 1
        created_at = float(doc.get("created_at") or now)
        doc = {**doc, "revision": revision, "updated_at": now, "created_at": created_at}
        conn.execute("DELETE FROM messages WHERE user_id = ? AND session_id = ?", (user_id, session_id))
        conn.execute(
            "INSERT INTO sessions (user_id, session_id, revision, doc, message_count, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (user_id, session_id) DO UPDATE SET revision = excluded.revision, doc = excluded.doc,"
            " message_count = excluded.message_count, created_at = excluded.created_at,"
            " updated_at = excluded.updated_at",
            (user_id, session_id, revision, _json.dumps(doc), len(bodies), created_at, now),
        )
        if bodies:
            conn.executemany(
                "INSERT INTO messages (user_id, session_id, seq, body) VALUES (?, ?, ?, ?)",
                [(user_id, session_id, i, body) for i, body in enumerate(bodies)],
            )
    return revision


def _delete(conn: sqlite3.Connection, user_id: str, session_id: str) -> bool:
    with _transaction(conn, write=True):
        conn.execute("DELETE FROM messages WHERE user_id = ? AND session_id = ?", (user_id, session_id))
        cursor = conn.execute("DELETE FROM sessions WHERE user_id = ? AND session_id = ?", (user_id, session_id))
        return cursor.rowcount > 0


def _list_sessions(conn: sqlite3.Connection, user_id: str) -> list[SessionInfo]:
    rows = conn.execute(
        "SELECT session_id, message_count, revision, updated_at FROM sessions WHERE user_id = ?"
        " ORDER BY updated_at DESC, session_id",
        (user_id,),
    ).fetchall()
    return [
        SessionInfo(
            user_id=user_id,
            session_id=str(sid),
            message_count=int(count),
            revision=int(revision),
            updated_at=float(updated_at),
        )
        for sid, count, revision, updated_at in rows
    ]
