"""SqliteThread: the plumbing the embedded SQLite stores (long-term memory, knowledge) share.

One connection, opened on first use and only ever used from one worker thread, so the event loop
never waits for disk I/O or for another process's write lock.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any, Self, TypeVar

from agentrt.errors import UserError

__all__ = ["SqliteThread", "open_database"]

_T = TypeVar("_T")


def open_database(module: ModuleType, path: str) -> Any:
    """A connection to `path` in WAL mode with ``synchronous = NORMAL``; a file's folder is created (mode 0700)."""
    if path != ":memory:" and not path.startswith("file:"):
        file = Path(path).expanduser()
        file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = str(file)
    conn = module.connect(path, isolation_level=None, check_same_thread=False, uri=path.startswith("file:"))
    try:
        conn.execute("PRAGMA busy_timeout = 10000")
        if path != ":memory:":
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
    except BaseException:
        conn.close()
        raise
    return conn


class SqliteThread:
    """Base of a store whose SQLite work runs on one worker thread (`_run`), with `close` and ``async with``."""

    _thread_name = "agentrt-sqlite"

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._conn: Any = None
        self._closed = False

    async def _run(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)`` on the store's worker thread (started on first use)."""
        if self._closed:
            raise UserError(f"this {type(self).__name__} is closed")
        pool = self._pool
        if pool is None:
            with self._pool_lock:
                pool = self._pool
                if pool is None:
                    pool = self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self._thread_name)
        return await asyncio.get_running_loop().run_in_executor(pool, functools.partial(fn, *args))

    async def close(self) -> None:
        """Close the database and stop the worker thread (idempotent)."""
        if self._closed:
            return
        pool = self._pool
        if pool is not None:
            await asyncio.get_running_loop().run_in_executor(pool, self._close_conn)
            pool.shutdown(wait=False)
        self._closed = True

    def _close_conn(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
