"""SqliteStateStore: the embedded default store (stdlib `sqlite3`, WAL mode, one worker thread per store).

Schema (``PRAGMA user_version = 2``)::

    sessions(agent TEXT DEFAULT '', user_id TEXT, session_id TEXT, revision INTEGER, doc TEXT,
             message_count INTEGER, created_at REAL, updated_at REAL,
             PRIMARY KEY(agent, user_id, session_id))
    messages(agent TEXT DEFAULT '', user_id TEXT, session_id TEXT, seq INTEGER, body TEXT,
             PRIMARY KEY(agent, user_id, session_id, seq),
             FOREIGN KEY(agent, user_id, session_id) REFERENCES sessions ON DELETE CASCADE ON UPDATE CASCADE)
    INDEX sessions_by_user_updated ON sessions(user_id, updated_at)
    INDEX sessions_by_updated ON sessions(updated_at, agent, user_id, session_id)   (`prune`, oldest first)
    runs(agent TEXT DEFAULT '', user_id TEXT, session_id TEXT, reply_id TEXT, started_at REAL,
         summary TEXT, body TEXT, PRIMARY KEY(agent, user_id, session_id, reply_id),
         FOREIGN KEY(agent, user_id, session_id) REFERENCES sessions ON DELETE CASCADE ON UPDATE CASCADE)
    INDEX runs_by_start ON runs(agent, user_id, session_id, started_at)

``runs`` holds the run records of the sessions (`agentrt.state.runs`); it is created when a database
is opened (``CREATE TABLE IF NOT EXISTS``, no version change), so databases of earlier versions get it
on their first use and older agentrt versions can still open them.

``doc`` is `encode_state(state, include_messages=False)` (see `agentrt.state.codec`); the key columns
and ``revision``, ``message_count``, ``created_at`` and ``updated_at`` are authoritative and override
the copies in ``doc`` on load. ``messages.body`` is one `encode_message` JSON text, ``seq`` counts from 0.

Version 1 databases (sessions without an agent) are migrated in place when first opened: the tables
are rebuilt with ``agent = ''`` (the legacy namespace) in one ``BEGIN IMMEDIATE`` transaction, so a
second process opening the file meanwhile waits and then finds version 2.

Every operation is one function call and one transaction on the store's single worker thread, so
the event loop never waits for disk I/O or for another process's write lock; small ones (an append
of a few KiB, a read of a few messages) run on the caller's thread instead when nothing is queued
and the write lock is free (see `_sqlite_inline`): a thread hop costs more than such a write.
`append` inserts only the new message rows and updates the session row in one ``BEGIN IMMEDIATE``
transaction: its cost does not grow with the length of the conversation.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Self, TypeVar

from agentrt import _json
from agentrt.errors import StateConflictError, StateStoreError
from agentrt.message import Msg
from agentrt.state.base import (
    AgentState,
    BaseStateStore,
    SessionInfo,
    StateView,
    check_agent,
    check_expected_revision,
    check_idle_ttl,
    check_prune_limit,
    check_since_index,
    is_idle,
)
from agentrt.state.codec import decode_message, decode_state, encode_fields_json, encode_message, encode_state
from agentrt.state.runs import (
    DEFAULT_MAX_RUNS,
    RunInfo,
    StoredRun,
    check_max_runs,
    check_reply_id,
    check_stored_run,
    retention_cutoff,
)
from agentrt.state.session import context_start, with_placeholders
from agentrt.state.stores._sqlite_inline import InlineRunner, TooLarge

__all__ = ["DEFAULT_PATH", "SqliteStateStore"]

DEFAULT_PATH = Path("~/.agentrt/state.db")
"""Where `SqliteStateStore()` keeps its database when no path is given (``~`` is expanded)."""

SCHEMA_VERSION = 2

_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")

_TABLES = """
CREATE TABLE {sessions} (
    agent         TEXT    NOT NULL DEFAULT '',
    user_id       TEXT    NOT NULL,
    session_id    TEXT    NOT NULL,
    revision      INTEGER NOT NULL,
    doc           TEXT    NOT NULL,
    message_count INTEGER NOT NULL,
    created_at    REAL    NOT NULL,
    updated_at    REAL    NOT NULL,
    PRIMARY KEY (agent, user_id, session_id)
);
CREATE TABLE {messages} (
    agent      TEXT    NOT NULL DEFAULT '',
    user_id    TEXT    NOT NULL,
    session_id TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    body       TEXT    NOT NULL,
    PRIMARY KEY (agent, user_id, session_id, seq),
    FOREIGN KEY (agent, user_id, session_id) REFERENCES sessions (agent, user_id, session_id)
        ON DELETE CASCADE ON UPDATE CASCADE
);
"""
_INDEXES = "CREATE INDEX IF NOT EXISTS sessions_by_user_updated ON sessions (user_id, updated_at);"
_RUNS_TABLE = """
CREATE TABLE IF NOT EXISTS runs (
    agent      TEXT NOT NULL DEFAULT '',
    user_id    TEXT NOT NULL,
    session_id TEXT NOT NULL,
    reply_id   TEXT NOT NULL,
    started_at REAL NOT NULL,
    summary    TEXT NOT NULL,
    body       TEXT NOT NULL,
    PRIMARY KEY (agent, user_id, session_id, reply_id),
    FOREIGN KEY (agent, user_id, session_id) REFERENCES sessions (agent, user_id, session_id)
        ON DELETE CASCADE ON UPDATE CASCADE
)
"""
"""Run records (`agentrt.state.runs`): created when a database is opened (idempotent, no version change)."""
_RUNS_INDEX = "CREATE INDEX IF NOT EXISTS runs_by_start ON runs (agent, user_id, session_id, started_at)"
"""A session's runs in start order: listing, and eviction without a sort."""
_UPDATED_INDEX = "CREATE INDEX IF NOT EXISTS sessions_by_updated ON sessions (updated_at, agent, user_id, session_id)"
"""For `prune` across users; created when a database is opened (idempotent: no write when it exists)."""
_PRUNE_BATCH = 500
"""Sessions deleted per transaction by `prune` (other writers get their turn in between)."""
# version 1 -> 2: rebuild both tables with the agent column (SQLite cannot change a primary key)
_FROM_V1 = """
INSERT INTO sessions_v2 (agent, user_id, session_id, revision, doc, message_count, created_at, updated_at)
    SELECT '', user_id, session_id, revision, doc, message_count, created_at, updated_at FROM sessions;
INSERT INTO messages_v2 (agent, user_id, session_id, seq, body)
    SELECT '', user_id, session_id, seq, body FROM messages;
DROP TABLE messages;
DROP TABLE sessions;
ALTER TABLE sessions_v2 RENAME TO sessions;
ALTER TABLE messages_v2 RENAME TO messages;
"""

_T = TypeVar("_T")
_Job = tuple[Callable[..., Any], tuple[Any, ...], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]
_MAX_BATCH = 256
_INLINE_MAX_BYTES = 64 * 1024
"""The largest append (encoded messages) run on the caller's thread."""
_INLINE_MAX_MESSAGES = 32
"""The most messages a read on the caller's thread decodes (more: the worker reads them)."""


class _TickBatch:
    """The appends of one loop iteration waiting for its end: their arguments and their callers' futures."""

    __slots__ = ("calls", "futures")

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.futures: list[asyncio.Future[int]] = []


def _deliver(results: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    for future, ok, value in results:
        if future.done():  # the caller was cancelled; the operation may still have committed
            continue
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)


def _relay(target: asyncio.Future[Any], source: asyncio.Future[Any]) -> None:
    """Copy a worker job's outcome to the future a caller awaits (unless that caller gave up)."""
    if target.done():
        return
    if source.cancelled():
        target.cancel()
    elif (exc := source.exception()) is not None:
        target.set_exception(exc)
    else:
        target.set_result(source.result())


def _close_op() -> None:
    """Marker job: close the connection (never opens one)."""


class _ExpiredError(Exception):
    """A read found the session idle past the store's `idle_ttl` (the store then deletes it)."""


class SqliteStateStore(BaseStateStore):
    """Sessions in one SQLite database file, in WAL mode, driven from one dedicated worker thread.

    Args:
        path: The database file (its directory is created if missing), ``":memory:"`` for a
            private in-memory database, or None for ``~/.agentrt/state.db``.
        busy_timeout: Seconds a write waits for another process's write transaction to finish
            before failing with `StateStoreError`.

        synchronous: SQLite's ``PRAGMA synchronous`` for this store's connection: ``"NORMAL"`` (the
            default), ``"FULL"``, ``"EXTRA"`` or ``"OFF"``.
        inline: Run small operations (an append of at most 64 KiB, a read of at most 32 messages)
            on the caller's thread when the worker has nothing queued and no other process holds
            the write lock (never waiting for it), instead of hopping to the worker thread and
            back, which costs more than such a write. Only with ``NORMAL`` or ``OFF`` (a commit
            is then a write to the OS page cache, no fsync). False: every operation on the worker.
        idle_ttl: Seconds a session may go unwritten before it reads as missing and is deleted
            (see `BaseStateStore.idle_ttl`); None keeps sessions until deleted.

    Durability (WAL mode): with ``synchronous="NORMAL"`` a commit is written to the WAL file but not
    fsynced (the WAL is synced only at checkpoints), so a committed write survives a crash of the
    process (SIGKILL included: the OS still holds the written pages), while the last commits before
    a power loss or OS crash may be lost (the database stays consistent: it rolls back to an earlier
    commit). ``"FULL"`` (or ``"EXTRA"``) fsyncs the WAL at every commit, so committed writes survive
    power loss too, at the price of one fsync per checkpoint; ``"OFF"`` never syncs (a process crash
    is still safe, an OS crash or power loss may corrupt the database).

    Several processes may share one database file (SQLite serialises their writes; the revision
    check rejects lost updates), but `session_lock` is in-process only: processes that must run
    calls on one session one after the other need a store with distributed locks.

    A write whose caller is cancelled while the write runs may still commit: reload to find out.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        busy_timeout: float = 5.0,
        synchronous: Literal["OFF", "NORMAL", "FULL", "EXTRA"] = "NORMAL",
        inline: bool = True,
        idle_ttl: float | None = None,
    ) -> None:
        self._idle_ttl = check_idle_ttl(idle_ttl)
        mode = str(synchronous).upper()
        if mode not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {', '.join(_SYNCHRONOUS)}, not {synchronous!r}")
        self._synchronous = mode
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
        self._has_legacy = False
        # Commits that fsync (FULL, EXTRA) never run on the caller's thread; ":memory:" is per connection.
        if not isinstance(inline, bool):
            raise ValueError(f"inline must be True or False, not {inline!r}")
        inline = inline and self._path != ":memory:" and mode in ("NORMAL", "OFF")
        self._inline = InlineRunner(self._path, mode) if inline else None
        self._tick_batches: dict[asyncio.AbstractEventLoop, _TickBatch] = {}
        """Per event loop: the appends waiting for the end of the current iteration (see `_append_small`)."""

    @property
    def path(self) -> str:
        """The database file (or ``":memory:"``)."""
        return self._path

    def __repr__(self) -> str:
        return f"SqliteStateStore({self._path!r})"

    async def __aenter__(self) -> Self:
        return self

    # -- store protocol -------------------------------------------------------------------
    async def load(self, user_id: str, session_id: str, *, agent: str = "") -> AgentState | None:
        """The stored state, or None if the session does not exist."""
        args = (check_agent(agent), user_id, session_id, self._idle_cutoff())
        return await self._read(_load_small, _load, args)

    async def load_context(self, user_id: str, session_id: str, *, agent: str = "") -> AgentState | None:
        """`BaseStateStore.load_context` in one read: the document says where the summary ends."""
        args = (check_agent(agent), user_id, session_id, self._idle_cutoff())
        return await self._read(_load_context_small, _load_context, args)

    async def load_view(
        self, user_id: str, session_id: str, *, agent: str = "", since_index: int = 0
    ) -> StateView | None:
        """The session with the messages from `since_index` on (``WHERE seq >= ?``), or None."""
        since = check_since_index(since_index)
        args = (check_agent(agent), user_id, session_id, since, self._idle_cutoff())
        return await self._read(_load_view_small, _load_view_whole, args)

    async def _read(self, small: Callable[..., _T], fn: Callable[..., _T], args: tuple[Any, ...]) -> _T | None:
        """A read of one session (its last argument the idle cutoff); None, and deleted, if it is idle-expired."""
        try:
            return await self._call_small(small, fn, *args, write=False)
        except _ExpiredError:
            agent, user_id, session_id, *_, cutoff = args
            await self._call(_delete, agent, user_id, session_id, cutoff)  # unless written meanwhile
            return None

    async def append(
        self,
        user_id: str,
        session_id: str,
        messages: Sequence[Msg],
        *,
        fields: Mapping[str, Any] | None = None,
        expected_revision: int,
        agent: str = "",
    ) -> int:
        """Insert the new messages and merge changed fields if `expected_revision` is current."""
        expected_revision = check_expected_revision(expected_revision)
        check_agent(agent)
        # Encoded here, on the caller's thread: the write stores the values as they are now.
        bodies = _encode_messages(messages)
        changed = _encode_fields(fields) if fields else None  # field name -> JSON text
        args = (agent, user_id, session_id, bodies, changed, expected_revision)
        if sum(map(len, bodies)) <= _INLINE_MAX_BYTES:
            # Inline, or with this loop iteration's other appends (see `_append_small`). Awaited here,
            # not in a coroutine of its own: a burst of concurrent runs holds one frame less each.
            small = self._append_small(args)
            return small if isinstance(small, int) else await small
        return await self._call(_append, *args)

    async def save(self, state: AgentState, *, expected_revision: int | None = None) -> int:
        """Replace the session's state and messages."""
        expected_revision = check_expected_revision(expected_revision, optional=True)
        check_agent(state.agent)
        doc = encode_state(state, include_messages=False)
        bodies = _encode_messages(state.messages)
        return await self._call(_save, state.agent, state.user_id, state.session_id, doc, bodies, expected_revision)

    async def delete(self, user_id: str, session_id: str, *, agent: str = "") -> bool:
        """Remove the session and its messages; True if it existed."""
        return await self._call(_delete, check_agent(agent), user_id, session_id)

    async def list_sessions(self, user_id: str, *, agent: str | None = None) -> list[SessionInfo]:
        """The user's sessions (of every agent, or of `agent`), most recently updated first."""
        infos = await self._call(_list_sessions, user_id, None if agent is None else check_agent(agent))
        cutoff = self._idle_cutoff()
        if cutoff is not None and any(is_idle(info.updated_at, cutoff) for info in infos):
            await self._prune(cutoff, user_id=user_id, agent=agent, limit=None, dry_run=False, skip_locked=True)
            infos = [info for info in infos if not is_idle(info.updated_at, cutoff)]
        return infos

    # -- run records ----------------------------------------------------------------------

    supports_run_records = True

    async def save_run(
        self,
        user_id: str,
        session_id: str,
        run: StoredRun,
        *,
        agent: str = "",
        max_runs: int | None = DEFAULT_MAX_RUNS,
        older_than: float | None = None,
    ) -> bool:
        """One transaction: upsert the record (if the session exists), then drop the old and the surplus ones."""
        check_stored_run(run)
        max_runs = check_max_runs(max_runs)
        cutoff = retention_cutoff(older_than)
        args = (
            check_agent(agent),
            user_id,
            session_id,
            run.reply_id,
            float(run.started_at),
            _json.dumps(run.summary),
            run.body,
            max_runs,
            cutoff,
        )
        if len(run.body) <= _INLINE_MAX_BYTES:
            return await self._call_small(_save_run, _save_run, *args, write=True)
        return await self._call(_save_run, *args)

    async def get_run(self, user_id: str, session_id: str, reply_id: str, *, agent: str = "") -> StoredRun | None:
        """The record stored under `reply_id`, or None."""
        args = (check_agent(agent), user_id, session_id, check_reply_id(reply_id))
        return await self._call_small(_get_run, _get_run, *args, write=False)

    async def list_runs(
        self, user_id: str, session_id: str, *, agent: str = "", limit: int | None = None
    ) -> list[RunInfo]:
        """The session's runs, newest first (their summaries, not their records)."""
        args = (check_agent(agent), user_id, session_id, check_prune_limit(limit))
        return await self._call_small(_list_runs, _list_runs, *args, write=False)

    async def _prune(
        self,
        cutoff: float | None,
        *,
        user_id: str | None,
        agent: str | None,
        limit: int | None,
        dry_run: bool,
        skip_locked: bool,
    ) -> int:
        """On the worker, in transactions of `_PRUNE_BATCH` sessions, oldest first (indexed on updated_at).

        Locks are in-process for this store: the sessions locked in this process are skipped.
        """
        held = self._locally_held() if skip_locked else frozenset()
        return await self._call(_prune_sessions, cutoff, user_id, agent, limit, dry_run, held)

    # -- the legacy namespace -------------------------------------------------------------
    @property
    def has_legacy_sessions(self) -> bool:
        """Whether the database held agent-``""`` sessions (e.g. from schema version 1) when opened.

        Known once the store has run its first operation; refreshed by `migrate_legacy`.
        """
        return self._has_legacy

    async def _legacy_sessions(self, user_id: str | None) -> list[tuple[str, str]]:
        return await self._call(_legacy_sessions, user_id)

    async def _move_legacy(self, user_id: str, session_id: str, agent: str, target: str) -> bool | None:
        # one transaction: the key columns change in place (messages follow by ON UPDATE CASCADE)
        return await self._call(_move, user_id, session_id, agent, target)

    async def _recheck_legacy(self) -> None:
        self._has_legacy = await self._call(_any_legacy)

    async def close(self) -> None:
        """Close the database connection and stop the worker thread (idempotent)."""
        if self._closed:
            return
        if self._inline is not None:
            self._inline.close()
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
    async def _call_small(self, small: Callable[..., _T], fn: Callable[..., _T], *args: Any, write: bool) -> _T:
        """`small` on this thread when it may run inline (see `_sqlite_inline`), else `fn` on the worker."""
        runner = self._inline
        if runner is not None and self._conn is not None and not self._closed:
            done, value, checkpoint_due = runner.run(small, args, write=write)
            if done:
                self._used = True
                if checkpoint_due:
                    self._enqueue(_checkpoint, ())
                result: _T = value
                return result
        return await self._call(fn, *args)

    def _append_small(self, args: tuple[Any, ...]) -> int | Awaitable[int]:
        """A small append: inline when it is the first of this loop iteration, else with the iteration's others.

        The appends issued after it in the same iteration (a burst of concurrent runs) wait until
        the iteration ends and then share one transaction (`InlineRunner.run_many`). Returns the
        revision when the append ran inline, else what to await for it.
        """
        loop = asyncio.get_running_loop()
        batch = self._tick_batches.get(loop)
        if batch is not None:
            future: asyncio.Future[int] = loop.create_future()
            batch.calls.append(args)
            batch.futures.append(future)
            return future
        runner = self._inline
        if runner is not None and self._conn is not None and not self._closed:
            done, value, checkpoint_due = runner.run(_append, args, write=True)
            if done:
                self._used = True
                if checkpoint_due:
                    self._enqueue(_checkpoint, ())
                self._tick_batches[loop] = _TickBatch()
                loop.call_soon(self._end_tick, loop)
                revision: int = value
                return revision
        return self._call(_append, *args)

    def _end_tick(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run the appends that waited for the end of the loop iteration, in one transaction if possible."""
        batch = self._tick_batches.pop(loop, None)
        if batch is None or not batch.futures:
            return
        if any(future.done() for future in batch.futures):  # callers cancelled: their appends do not run
            kept = [i for i, future in enumerate(batch.futures) if not future.done()]
            batch.calls = [batch.calls[i] for i in kept]
            batch.futures = [batch.futures[i] for i in kept]
            if not kept:
                return
        outcomes = None
        runner = self._inline
        if runner is not None and not self._closed:
            # No savepoint per append: a conflict changes nothing, a SQLite error rolls back the batch.
            outcomes, checkpoint_due = runner.run_many(_append_in, batch.calls)
            if checkpoint_due:
                self._enqueue(_checkpoint, ())
        if outcomes is None:  # busy or closed: the worker runs them (as one group commit when it can)
            for args, future in zip(batch.calls, batch.futures, strict=True):
                if self._closed:
                    future.set_exception(StateStoreError(f"{self!r} is closed"))
                    continue
                queued = self._enqueue(_append, args)
                queued.add_done_callback(functools.partial(_relay, future))
            return
        for future, (ok, value) in zip(batch.futures, outcomes, strict=True):
            if future.done():
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

    async def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        if self._closed:
            raise StateStoreError(f"{self!r} is closed")
        self._used = True
        return await self._enqueue(fn, args)

    def _enqueue(self, fn: Callable[..., _T], args: tuple[Any, ...]) -> asyncio.Future[_T]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_T] = loop.create_future()
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="agentrt-sqlite", daemon=True)
            self._thread.start()
        if self._inline is not None:
            self._inline.queued()
        self._queue.put((fn, args, loop, future))
        return future

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
            if self._inline is not None:
                self._inline.finished(len(batch))
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
            fn, args = batch[i][:2]
            outcomes.append(self._attempt(fn, args))
            i += 1
        return outcomes

    def _run_appends(self, jobs: list[_Job]) -> list[tuple[bool, Any]]:
        try:
            conn = self._conn if self._conn is not None else self._connect()
            conn.execute("BEGIN IMMEDIATE")
        except (sqlite3.Error, StateStoreError):
            return [self._attempt(job[0], job[1]) for job in jobs]  # one by one
        outcomes = [self._attempt(job[0], job[1]) for job in jobs]
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
            _set_wal(conn, self._busy_timeout)
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            _migrate(conn)  # before foreign keys are on: the migration rebuilds referenced tables
            conn.execute(_UPDATED_INDEX)
            conn.execute(_RUNS_TABLE)
            conn.execute(_RUNS_INDEX)
            conn.execute("PRAGMA foreign_keys = ON")
            self._has_legacy = _any_legacy(conn)
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


def _set_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """``PRAGMA journal_mode = WAL``, retried while another process holds the database.

    Switching the journal mode needs an exclusive lock, and SQLite may answer "database is locked"
    at once rather than through the busy handler (two processes opening a new database together,
    one of them creating the schema): retry with backoff for up to `timeout` seconds.
    """
    deadline = time.monotonic() + max(timeout, 0.1)
    delay = 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)  # noqa: TID251 - the store's worker thread (or its first, inline open)
        delay = min(delay * 2, 0.1)


# -- operations (run on the worker thread; each is one transaction) --------------------------


def _encode_fields(fields: Mapping[str, Any]) -> dict[str, str]:
    try:
        return encode_fields_json(fields)
    except UnicodeEncodeError as exc:  # lone surrogates
        raise StateStoreError(f"cannot store text that is not valid Unicode: {exc.reason}") from None


def _encode_messages(messages: Sequence[Msg]) -> list[str]:
    try:
        return [encode_message(m) for m in messages]
    except UnicodeEncodeError as exc:  # lone surrogates
        raise StateStoreError(f"cannot store a message that is not valid Unicode text: {exc.reason}") from None


class _transaction:  # noqa: N801 - a context manager used like a function
    """``with _transaction(conn, write=...)``: one transaction, or a savepoint inside one already open.

    A class rather than a generator-based context manager: one object per operation instead of three.
    """

    __slots__ = ("_conn", "_nested", "_write")

    def __init__(self, conn: sqlite3.Connection, *, write: bool) -> None:
        self._conn = conn
        self._write = write
        self._nested = False

    def __enter__(self) -> None:
        conn = self._conn
        if conn.in_transaction:
            # Inside a batch of appends: a savepoint, so this operation commits or rolls back alone.
            self._nested = True
            conn.execute("SAVEPOINT op")
        else:
            # Writers take the write lock up front (no deadlock-prone lock upgrade); readers get a snapshot.
            conn.execute("BEGIN IMMEDIATE" if self._write else "BEGIN")

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        conn = self._conn
        if exc_type is None:
            conn.execute("RELEASE op" if self._nested else "COMMIT")
            return
        with contextlib.suppress(sqlite3.Error):
            if self._nested:
                conn.execute("ROLLBACK TO op")
                conn.execute("RELEASE op")
            else:
                conn.execute("ROLLBACK")


def _migrate(conn: sqlite3.Connection) -> None:
    with _transaction(conn, write=True):
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise StateStoreError(
                f"the state database has schema version {version}, newer than this agentrt understands "
                f"({SCHEMA_VERSION}); upgrade agentrt"
            )
        if version == SCHEMA_VERSION:
            return
        if version == 1:
            _script(conn, _TABLES.format(sessions="sessions_v2", messages="messages_v2"))
            _script(conn, _FROM_V1)
        else:
            _script(conn, _TABLES.format(sessions="sessions", messages="messages"))
        _script(conn, _INDEXES)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _script(conn: sqlite3.Connection, sql: str) -> None:
    # statement by statement: `executescript` would commit the open transaction first
    for statement in sql.split(";"):
        if statement.strip():
            conn.execute(statement)


def _any_legacy(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sessions WHERE agent = '' LIMIT 1").fetchone() is not None


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


_KEY = "agent = ? AND user_id = ? AND session_id = ?"


# The reads below take the idle cutoff last (None: no idle_ttl) and raise _ExpiredError past it.


def _load(
    conn: sqlite3.Connection, agent: str, user_id: str, session_id: str, cutoff: float | None = None
) -> AgentState | None:
    view = _load_view(conn, agent, user_id, session_id, 0, cutoff=cutoff)
    return None if view is None else view.state


def _load_small(
    conn: sqlite3.Connection, agent: str, user_id: str, session_id: str, cutoff: float | None = None
) -> AgentState | None:
    view = _load_view(conn, agent, user_id, session_id, 0, limit=_INLINE_MAX_MESSAGES, cutoff=cutoff)
    return None if view is None else view.state


def _load_view_small(
    conn: sqlite3.Connection, agent: str, user_id: str, session_id: str, since: int, cutoff: float | None = None
) -> StateView | None:
    return _load_view(conn, agent, user_id, session_id, since, limit=_INLINE_MAX_MESSAGES, cutoff=cutoff)


def _load_view_whole(
    conn: sqlite3.Connection, agent: str, user_id: str, session_id: str, since: int, cutoff: float | None = None
) -> StateView | None:
    return _load_view(conn, agent, user_id, session_id, since, cutoff=cutoff)


def _checkpoint(conn: sqlite3.Connection) -> None:
    """A passive WAL checkpoint (the inline connection never checkpoints itself)."""
    with contextlib.suppress(sqlite3.Error):
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")


def _load_context(
    conn: sqlite3.Connection, agent: str, user_id: str, session_id: str, cutoff: float | None = None
) -> AgentState | None:
    view = _load_view(conn, agent, user_id, session_id, 0, context=True, cutoff=cutoff)
    return None if view is None else with_placeholders(view)


def _load_context_small(
    conn: sqlite3.Connection, agent: str, user_id: str, session_id: str, cutoff: float | None = None
) -> AgentState | None:
    view = _load_view(conn, agent, user_id, session_id, 0, limit=_INLINE_MAX_MESSAGES, context=True, cutoff=cutoff)
    return None if view is None else with_placeholders(view)


def _load_view(
    conn: sqlite3.Connection,
    agent: str,
    user_id: str,
    session_id: str,
    since: int,
    limit: int | None = None,
    *,
    context: bool = False,
    cutoff: float | None = None,
) -> StateView | None:
    """The session from message `since` on; with `context`, from where its summary ends (see `load_context`).

    `_ExpiredError` when `cutoff` is given and the session was last written before it.
    """
    key = (agent, user_id, session_id)
    doc: dict[str, Any] | None = None
    with _transaction(conn, write=False):
        row = conn.execute(
            f"SELECT revision, doc, message_count, created_at, updated_at FROM sessions WHERE {_KEY}", key
        ).fetchone()
        if row is None:
            return None
        if cutoff is not None and float(row[4]) < cutoff:
            raise _ExpiredError
        if context:
            doc = _parse_doc(row[1], user_id, session_id)
            summary = doc.get("summary")
            index = doc.get("summary_index")
            if isinstance(summary, str) and summary and isinstance(index, int) and not isinstance(index, bool):
                since = context_start(AgentState(summary=summary, summary_index=index), int(row[2]))
        if limit is not None and int(row[2]) - min(since, int(row[2])) > limit:
            raise TooLarge
        if since:
            rows = conn.execute(
                f"SELECT seq, body FROM messages WHERE {_KEY} AND seq >= ? ORDER BY seq", (*key, since)
            ).fetchall()
        else:
            rows = conn.execute(f"SELECT seq, body FROM messages WHERE {_KEY} ORDER BY seq", key).fetchall()
    revision, raw_doc, count, created_at, updated_at = row
    where = f"session {session_id!r} of user {user_id!r}"
    first = min(since, count)
    if len(rows) != count - first or (rows and (rows[0][0] != first or rows[-1][0] != count - 1)):
        raise StateStoreError(
            f"stored {where} is corrupt: expected messages {first}..{count - 1}, found {len(rows)} rows"
        )
    if doc is None:
        doc = _parse_doc(raw_doc, user_id, session_id)
    try:
        messages = [decode_message(body) for _, body in rows]
        state = decode_state(doc, messages)
        state.revision = int(revision)
        state.created_at = float(created_at)
        state.updated_at = float(updated_at)
    except (TypeError, ValueError) as exc:
        raise StateStoreError(f"stored {where} is corrupt: {exc}") from exc
    state.agent = agent
    state.user_id = user_id
    state.session_id = session_id
    return StateView(state, first)


def _append(
    conn: sqlite3.Connection,
    agent: str,
    user_id: str,
    session_id: str,
    bodies: list[str],
    changed: dict[str, str] | None,
    expected: int,
) -> int:
    with _transaction(conn, write=True):
        return _append_in(conn, agent, user_id, session_id, bodies, changed, expected)


def _append_in(
    conn: sqlite3.Connection,
    agent: str,
    user_id: str,
    session_id: str,
    bodies: list[str],
    changed: dict[str, str] | None,
    expected: int,
) -> int:
    """`_append` in the transaction the caller holds, without a savepoint of its own.

    Its own errors (a revision conflict, a corrupt row) are raised before it writes anything, so such
    an append leaves the transaction as it found it; a SQLite error may come after a write, so the
    caller must then roll back the whole transaction (`InlineRunner.run_many` does).
    """
    key = (agent, user_id, session_id)
    now = time.time()
    if expected > 0 and _RETURNING and (not changed or _JSON_SET):
        count = _bump(conn, key, len(bodies), now, changed, expected)
        if count is None:  # not at `expected` (or gone, or its document is not an object): say which
            row = conn.execute(_SELECT_FOR_APPEND_WITH_DOC, key).fetchone()
            current = 0 if row is None else int(row[0])
            if row is not None and current == expected:
                _parse_doc(row[2], user_id, session_id)  # raises for what json_set could not merge into
                raise StateStoreError(f"stored state of session {session_id!r} of user {user_id!r} is corrupt")
            raise _conflict(user_id, session_id, current, expected)
        revision = expected + 1
    else:
        revision, count = _append_slow(conn, key, len(bodies), now, changed, expected)
    if len(bodies) == 1:
        conn.execute(_INSERT_MESSAGE, (*key, count, bodies[0]))
    elif bodies:
        conn.executemany(_INSERT_MESSAGE, [(*key, count + i, body) for i, body in enumerate(bodies)])
    return revision


def _bump(
    conn: sqlite3.Connection,
    key: tuple[str, str, str],
    added: int,
    now: float,
    changed: dict[str, str] | None,
    expected: int,
) -> int | None:
    """Move the session from revision `expected` to the next, in one statement; the first new seq, or None.

    Changed fields are merged into the stored document by SQLite (``json_set``), not parsed and
    rewritten in Python: the cost does not grow with the size of the document.
    """
    params: list[Any] = [added, now]
    doc = only_objects = ""
    if changed:
        doc = ", doc = json_set(doc" + ", ?, json(?)" * len(changed) + ")"
        only_objects = " AND json_type(doc) = 'object'"  # json_set on anything else would ignore the fields
        for name, text in changed.items():
            params += (f"$.{name}", text)
    row = conn.execute(
        f"UPDATE sessions SET revision = revision + 1, message_count = message_count + ?, updated_at = ?{doc}"
        f" WHERE {_KEY} AND revision = ?{only_objects} RETURNING message_count",
        (*params, *key, expected),
    ).fetchone()
    return None if row is None else int(row[0]) - added


def _append_slow(
    conn: sqlite3.Connection,
    key: tuple[str, str, str],
    added: int,
    now: float,
    changed: dict[str, str] | None,
    expected: int,
) -> tuple[int, int]:
    """A new session's first append (or an append on an SQLite without RETURNING/json_set): (revision, seq).

    A new session is one ``INSERT ... ON CONFLICT DO NOTHING`` (no read first); the row is read only
    when it turns out to exist.
    """
    agent, user_id, session_id = key
    if expected == 0:
        doc = {**_new_doc(), "agent": agent, "user_id": user_id, "session_id": session_id, "created_at": now}
        doc.update(_parsed(changed), revision=1, updated_at=now)
        inserted = conn.execute(
            "INSERT INTO sessions (agent, user_id, session_id, revision, doc, message_count, created_at,"
            " updated_at) VALUES (?, ?, ?, 1, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (*key, _json.dumps(doc), added, now, now),
        )
        if inserted.rowcount == 1:
            return 1, 0
    row = conn.execute(_SELECT_FOR_APPEND_WITH_DOC if changed else _SELECT_FOR_APPEND, key).fetchone()
    current = 0 if row is None else int(row[0])
    if current != expected or row is None:
        raise _conflict(user_id, session_id, current, expected)
    revision = current + 1
    count = int(row[1])
    if changed:
        doc = _parse_doc(row[2], user_id, session_id)
        doc.update(_parsed(changed), revision=revision, updated_at=now)
        conn.execute(
            f"UPDATE sessions SET revision = ?, message_count = ?, updated_at = ?, doc = ? WHERE {_KEY}",
            (revision, count + added, now, _json.dumps(doc), *key),
        )
    else:  # the columns are authoritative for revision and timestamps: doc stays as it is
        conn.execute(
            f"UPDATE sessions SET revision = ?, message_count = ?, updated_at = ? WHERE {_KEY}",
            (revision, count + added, now, *key),
        )
    return revision, count


@functools.cache
def _new_doc() -> dict[str, Any]:
    """The document of a session with nothing but defaults (identity and times are filled in per session)."""
    return encode_state(AgentState(), include_messages=False)


def _parsed(changed: dict[str, str] | None) -> dict[str, Any]:
    """Changed fields (JSON text, see `encode_fields_json`) as values, for a document written whole."""
    return {name: _json.loads(text) for name, text in changed.items()} if changed else {}


_RETURNING = sqlite3.sqlite_version_info >= (3, 35, 0)
_JSON_SET = sqlite3.sqlite_version_info >= (3, 38, 0)  # JSON functions built in (earlier: an option)
_INSERT_MESSAGE = "INSERT INTO messages (agent, user_id, session_id, seq, body) VALUES (?, ?, ?, ?, ?)"
_SELECT_FOR_APPEND = f"SELECT revision, message_count FROM sessions WHERE {_KEY}"
_SELECT_FOR_APPEND_WITH_DOC = f"SELECT revision, message_count, doc FROM sessions WHERE {_KEY}"


def _save(
    conn: sqlite3.Connection,
    agent: str,
    user_id: str,
    session_id: str,
    doc: dict[str, Any],
    bodies: list[str],
    expected: int | None,
) -> int:
    key = (agent, user_id, session_id)
    with _transaction(conn, write=True):
        row = conn.execute(f"SELECT revision FROM sessions WHERE {_KEY}", key).fetchone()
        current = 0 if row is None else int(row[0])
        if expected is not None and current != expected:
            raise _conflict(user_id, session_id, current, expected)
        now = time.time()
        revision = current + 1
        created_at = float(doc.get("created_at") or now)
        doc = {**doc, "revision": revision, "updated_at": now, "created_at": created_at}
        conn.execute(f"DELETE FROM messages WHERE {_KEY}", key)
        conn.execute(
            "INSERT INTO sessions (agent, user_id, session_id, revision, doc, message_count, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (agent, user_id, session_id) DO UPDATE SET revision = excluded.revision,"
            " doc = excluded.doc, message_count = excluded.message_count, created_at = excluded.created_at,"
            " updated_at = excluded.updated_at",
            (*key, revision, _json.dumps(doc), len(bodies), created_at, now),
        )
        if bodies:
            conn.executemany(
                "INSERT INTO messages (agent, user_id, session_id, seq, body) VALUES (?, ?, ?, ?, ?)",
                [(*key, i, body) for i, body in enumerate(bodies)],
            )
    return revision


def _delete(conn: sqlite3.Connection, agent: str, user_id: str, session_id: str, cutoff: float | None = None) -> bool:
    """Delete the session (with `cutoff`: only if it was last written before it); True if it went."""
    key = (agent, user_id, session_id)
    with _transaction(conn, write=True):
        if cutoff is not None and (
            conn.execute(f"SELECT 1 FROM sessions WHERE {_KEY} AND updated_at < ?", (*key, cutoff)).fetchone() is None
        ):
            return False
        conn.execute(f"DELETE FROM messages WHERE {_KEY}", key)
        conn.execute(f"DELETE FROM runs WHERE {_KEY}", key)
        cursor = conn.execute(f"DELETE FROM sessions WHERE {_KEY}", key)
        return cursor.rowcount > 0


def _prune_sessions(
    conn: sqlite3.Connection,
    cutoff: float | None,
    user_id: str | None,
    agent: str | None,
    limit: int | None,
    dry_run: bool,
    held: frozenset[Any],
) -> int:
    """Delete (or count) the matching sessions written before `cutoff`, oldest first, skipping `held` keys.

    One write transaction per batch: the batch is selected and deleted under the write lock, so a
    session written meanwhile is either not selected or already committed as idle.
    """
    where: list[str] = ["1 = 1"]
    params: list[Any] = []
    if cutoff is not None:
        where.append("updated_at < ?")
        params.append(cutoff)
    if user_id is not None:
        where.append("user_id = ?")
        params.append(user_id)
    if agent is not None:
        where.append("agent = ?")
        params.append(agent)
    select = (
        f"SELECT agent, user_id, session_id FROM sessions WHERE {' AND '.join(where)}"
        " ORDER BY updated_at, agent, user_id, session_id LIMIT ? OFFSET ?"
    )
    count = skipped = 0
    while limit is None or count < limit:
        batch = _PRUNE_BATCH if limit is None else min(_PRUNE_BATCH, limit - count)
        with _transaction(conn, write=not dry_run):
            rows = conn.execute(select, (*params, batch, skipped)).fetchall()
            if not rows:
                break
            keys = [(str(a), str(u), str(s)) for a, u, s in rows]
            doomed = [key for key in keys if key not in held]
            skipped += len(keys) - len(doomed)
            if dry_run:
                skipped += len(doomed)  # nothing goes: page on past them
            else:
                conn.executemany(f"DELETE FROM messages WHERE {_KEY}", doomed)
                conn.executemany(f"DELETE FROM runs WHERE {_KEY}", doomed)
                conn.executemany(f"DELETE FROM sessions WHERE {_KEY}", doomed)
            count += len(doomed)
    return count


def _save_run(
    conn: sqlite3.Connection,
    agent: str,
    user_id: str,
    session_id: str,
    reply_id: str,
    started_at: float,
    summary: str,
    body: str,
    max_runs: int | None,
    cutoff: float | None,
) -> bool:
    """Upsert a run record of an existing session; drop the session's records past the cutoff and the limit."""
    key = (agent, user_id, session_id)
    with _transaction(conn, write=True):
        if conn.execute(f"SELECT 1 FROM sessions WHERE {_KEY}", key).fetchone() is None:
            return False
        conn.execute(
            "INSERT INTO runs (agent, user_id, session_id, reply_id, started_at, summary, body)"
            " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (agent, user_id, session_id, reply_id) DO UPDATE SET"
            " started_at = excluded.started_at, summary = excluded.summary, body = excluded.body",
            (*key, reply_id, started_at, summary, body),
        )
        if cutoff is not None:
            conn.execute(
                f"DELETE FROM runs WHERE {_KEY} AND reply_id != ? AND started_at < ?", (*key, reply_id, cutoff)
            )
        if (
            max_runs is not None
            and conn.execute(f"SELECT count(*) FROM runs WHERE {_KEY}", key).fetchone()[0] > max_runs
        ):
            conn.execute(
                f"DELETE FROM runs WHERE {_KEY} AND reply_id IN (SELECT reply_id FROM runs WHERE {_KEY}"
                " AND reply_id != ? ORDER BY started_at DESC, reply_id DESC LIMIT -1 OFFSET ?)",
                (*key, *key, reply_id, max_runs - 1),
            )
    return True


def _get_run(conn: sqlite3.Connection, agent: str, user_id: str, session_id: str, reply_id: str) -> StoredRun | None:
    row = conn.execute(
        f"SELECT started_at, summary, body FROM runs WHERE {_KEY} AND reply_id = ?",
        (agent, user_id, session_id, reply_id),
    ).fetchone()
    if row is None:
        return None
    return StoredRun(reply_id, float(row[0]), _summary(row[1]), str(row[2]))


def _list_runs(conn: sqlite3.Connection, agent: str, user_id: str, session_id: str, limit: int | None) -> list[RunInfo]:
    rows = conn.execute(
        f"SELECT reply_id, started_at, summary FROM runs WHERE {_KEY} ORDER BY started_at DESC, reply_id DESC LIMIT ?",
        (agent, user_id, session_id, -1 if limit is None else limit),
    ).fetchall()
    return [RunInfo(str(reply_id), float(started), _summary(summary)) for reply_id, started, summary in rows]


def _summary(raw: Any) -> dict[str, Any]:
    try:
        value = _json.loads(raw)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _list_sessions(conn: sqlite3.Connection, user_id: str, agent: str | None) -> list[SessionInfo]:
    if agent is None:
        rows = conn.execute(
            "SELECT agent, session_id, message_count, revision, updated_at FROM sessions WHERE user_id = ?"
            " ORDER BY updated_at DESC, agent, session_id",
            (user_id,),
        ).fetchall()
    else:
        rows = conn.execute(
            "SELECT agent, session_id, message_count, revision, updated_at FROM sessions"
            " WHERE agent = ? AND user_id = ? ORDER BY updated_at DESC, session_id",
            (agent, user_id),
        ).fetchall()
    return [
        SessionInfo(
            agent=str(a),
            user_id=user_id,
            session_id=str(sid),
            message_count=int(count),
            revision=int(revision),
            updated_at=float(updated_at),
        )
        for a, sid, count, revision, updated_at in rows
    ]


def _legacy_sessions(conn: sqlite3.Connection, user_id: str | None) -> list[tuple[str, str]]:
    if user_id is None:
        rows = conn.execute("SELECT user_id, session_id FROM sessions WHERE agent = ''").fetchall()
    else:
        rows = conn.execute(
            "SELECT user_id, session_id FROM sessions WHERE agent = '' AND user_id = ?", (user_id,)
        ).fetchall()
    return [(str(u), str(s)) for u, s in rows]


def _move(conn: sqlite3.Connection, user_id: str, session_id: str, agent: str, target: str) -> bool | None:
    """Move a legacy session to (agent, user_id, target), revision and timestamps kept; False if taken."""
    with _transaction(conn, write=True):
        if conn.execute(f"SELECT 1 FROM sessions WHERE {_KEY}", (agent, user_id, target)).fetchone() is not None:
            return False
        row = conn.execute(f"SELECT doc FROM sessions WHERE {_KEY}", ("", user_id, session_id)).fetchone()
        if row is None:
            return None  # moved or deleted meanwhile
        doc = _parse_doc(row[0], user_id, session_id)
        doc.update(agent=agent, session_id=target)
        conn.execute(
            f"UPDATE sessions SET agent = ?, session_id = ?, doc = ? WHERE {_KEY}",
            (agent, target, _json.dumps(doc), "", user_id, session_id),
        )
    return True
