"""InlineRunner: small SQLite operations on the caller's thread, when no queued operation is unfinished.

A hop to the store's worker thread and back costs more than a small write itself (here ~120 µs of
wake-ups against ~80 µs of SQL), and on one core it is pure overhead. So an operation that is
known to be small (an append of a few KiB, a read of a few messages) runs right away on the
calling thread, on a second connection, when:

- nothing queued for the worker is unfinished: operations stay in the order they were issued,
  and under load, when operations queue up anyway, the worker's group commit (one transaction
  for many appends, each page written to the WAL once) is cheaper than a commit per append, so
  this is an idle-path shortcut, not a second writer competing with the first;
- the write lock is free: the connection never waits for it (``busy_timeout = 0``), so the event
  loop never blocks on another writer; a busy database sends the operation to the worker, which
  waits as configured;
- commits do not fsync (``synchronous`` NORMAL or OFF in WAL mode: a commit is a write to the OS
  page cache; FULL and EXTRA always use the worker).

Under load the first append of an event-loop iteration runs inline and the others issued in the
same iteration wait for its end, then share one transaction (`run_many`): a burst of concurrent
runs pays one commit per loop iteration rather than one per append.

The connection never checkpoints the WAL itself (an fsync); every `CHECKPOINT_EVERY` inline
commits the store asks its worker to run a passive checkpoint, so the WAL stays bounded.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["CHECKPOINT_EVERY", "InlineRunner", "TooLarge"]

CHECKPOINT_EVERY = 256
"""Inline commits between two passive checkpoints run by the worker."""


class TooLarge(Exception):  # noqa: N818 - a signal, not an error the caller sees
    """Raised by an inline operation that found more data than it may handle on the caller's thread."""


class InlineRunner:
    """The inline connection of one store, and the count of its operations queued for the worker."""

    __slots__ = ("_commits", "_conn", "_count_lock", "_lock", "_outstanding", "_path", "_synchronous", "closed")

    def __init__(self, path: str, synchronous: str) -> None:
        self._path = path
        self._synchronous = synchronous
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._outstanding = 0
        """Queued operations the worker has not finished."""
        self._commits = 0
        self.closed = False

    # -- the worker's queue ------------------------------------------------------------------------
    def queued(self) -> None:
        """An operation was queued for the worker."""
        with self._count_lock:
            self._outstanding += 1

    def finished(self, count: int) -> None:
        """The worker finished `count` queued operations (called on the worker thread)."""
        with self._count_lock:
            self._outstanding -= count

    # -- inline operations -------------------------------------------------------------------------
    def run(self, fn: Callable[..., Any], args: tuple[Any, ...], *, write: bool) -> tuple[bool, Any, bool]:
        """Try ``fn(conn, *args)`` here: ``(done, value, checkpoint_due)``; not done means "queue it".

        Exceptions of the operation other than SQLite's own (a revision conflict, a corrupt row)
        are its outcome and propagate; a SQLite error (busy, locked, I/O) leaves the operation
        to the worker, which reports it as the store always has.
        """
        if self._outstanding or not self._lock.acquire(blocking=False):
            return False, None, False
        try:
            if self.closed or self._outstanding:
                return False, None, False
            try:
                conn = self._conn if self._conn is not None else self._open()
            except sqlite3.Error:
                return False, None, False
            if conn is None:  # not in WAL mode: a commit there may fsync
                return False, None, False
            try:
                value = fn(conn, *args)
            except (sqlite3.Error, TooLarge, UnicodeEncodeError):
                if conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                return False, None, False
            due = False
            if write:
                self._commits += 1
                if self._commits >= CHECKPOINT_EVERY:
                    self._commits = 0
                    due = True
            return True, value, due
        finally:
            self._lock.release()

    def run_many(
        self, fn: Callable[..., Any], calls: list[tuple[Any, ...]]
    ) -> tuple[list[tuple[bool, Any]] | None, bool]:
        """``fn(conn, *args)`` for each of `calls` in one transaction: ``(outcomes, checkpoint_due)``.

        An outcome that is an exception (a revision conflict) must have changed nothing: `fn` raises
        its own errors before it writes (or opens a savepoint for itself). A SQLite error rolls the
        whole transaction back. None: nothing was committed, queue them all.
        """
        if self._outstanding or not self._lock.acquire(blocking=False):
            return None, False
        try:
            if self.closed or self._outstanding:
                return None, False
            try:
                conn = self._conn if self._conn is not None else self._open()
                if conn is None:
                    return None, False
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error:
                return None, False
            outcomes: list[tuple[bool, Any]] = []
            try:
                for args in calls:
                    try:
                        outcomes.append((True, fn(conn, *args)))
                    except (sqlite3.Error, TooLarge, UnicodeEncodeError):
                        raise
                    except Exception as exc:
                        outcomes.append((False, exc))
                conn.execute("COMMIT")
            except (sqlite3.Error, TooLarge, UnicodeEncodeError):
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                return None, False
            self._commits += 1
            due = self._commits >= CHECKPOINT_EVERY
            if due:
                self._commits = 0
            return outcomes, due
        finally:
            self._lock.release()

    def _open(self) -> sqlite3.Connection | None:
        """The inline connection; None (and inline operations off) when the database is not in WAL mode."""
        conn = sqlite3.connect(self._path, timeout=0, isolation_level=None, check_same_thread=False)
        try:
            mode = conn.execute("PRAGMA journal_mode").fetchone()
            if mode is None or str(mode[0]).lower() != "wal":  # e.g. a file system without shared memory
                conn.close()
                self.closed = True
                return None
            conn.execute("PRAGMA busy_timeout = 0")
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            conn.execute("PRAGMA wal_autocheckpoint = 0")
            conn.execute("PRAGMA foreign_keys = ON")
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def close(self) -> None:
        """Close the connection; later operations all go to the worker (until it is closed too)."""
        with self._lock:
            self.closed = True
            conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
