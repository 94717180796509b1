"""In-process session locks: FIFO per key, created on demand and dropped when idle.

Also `poll_pause`, the wait between two tries of a cross-process lock (Redis, SQL).
"""

from __future__ import annotations

import asyncio
import contextvars
import random
from collections.abc import Hashable
from typing import Any

from agentrt.errors import SessionBusyError

__all__ = ["LocalSessionLocks", "SessionLockHold", "held_fence", "poll_pause"]

held_fence: contextvars.ContextVar[tuple[str, int] | None] = contextvars.ContextVar("agentrt_fence", default=None)
"""``(fence key, fencing token)`` of the distributed session lock the current task holds, if any.

Set by a lock with fencing tokens (`RedisSessionLock`, `SqlSessionLock`) for the body of its
``async with``, so the store's writes to that session carry the token and are refused once a later
holder (a worker that took the run over) has a higher one: a paused or partitioned process that
wakes up cannot write.
"""


class _Entry:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class SessionLockHold:
    """``async with`` holding one session's lock (a plain object: cheap with thousands in flight)."""

    __slots__ = ("_entry", "_full_key", "_key", "_owner", "_timeout")

    def __init__(self, owner: LocalSessionLocks, key: Hashable, timeout: float | None) -> None:
        self._owner = owner
        self._key = key
        self._timeout = timeout
        self._full_key: Any = None
        self._entry: _Entry | None = None

    async def __aenter__(self) -> None:
        entries = self._owner._entries
        full_key = self._full_key = (id(asyncio.get_running_loop()), self._key)
        entry = entries.get(full_key)
        if entry is None:
            entry = entries[full_key] = _Entry()
        entry.users += 1
        self._entry = entry
        try:
            if self._timeout is None or not entry.lock.locked():
                await entry.lock.acquire()
            else:
                async with asyncio.timeout(self._timeout):
                    await entry.lock.acquire()
        except TimeoutError:
            self._release_entry()
            raise SessionBusyError(
                f"session {self._key!r} is busy: another call held it for more than {self._timeout:g} s"
            ) from None
        except BaseException:
            self._release_entry()
            raise

    async def __aexit__(self, *exc: object) -> None:
        entry = self._entry
        if entry is not None:
            entry.lock.release()
            self._release_entry()

    def _release_entry(self) -> None:
        entry = self._entry
        if entry is None:
            return
        self._entry = None
        entry.users -= 1
        entries = self._owner._entries
        if entry.users == 0 and entries.get(self._full_key) is entry:
            del entries[self._full_key]


class LocalSessionLocks:
    """One asyncio lock per key (asyncio locks are FIFO-fair), freed when nobody holds or waits.

    Entries are per event loop, so a store used from several `asyncio.run` calls stays valid.
    """

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[tuple[int, Hashable], _Entry] = {}

    def hold(self, key: Hashable, *, timeout: float | None = None) -> SessionLockHold:
        """``async with locks.hold(key):``; `SessionBusyError` if not acquired within `timeout` seconds."""
        return SessionLockHold(self, key, timeout)

    def __len__(self) -> int:
        return len(self._entries)


async def poll_pause(
    delay: float, ceiling: float, deadline: float | None, timeout: float | None, describe: str
) -> float:
    """Sleep between two tries of a cross-process lock; returns the next `delay`.

    The pause is jittered between half of `delay` and `delay` and ends by `deadline` (loop time);
    the delay doubles up to `ceiling`. Past `deadline` (set from `timeout`), `SessionBusyError`.
    """
    now = asyncio.get_running_loop().time()
    if deadline is not None and now >= deadline:
        raise SessionBusyError(f"{describe} is busy: another process held its lock for more than {timeout:g} s")
    pause = random.uniform(delay / 2, delay)
    if deadline is not None:
        pause = min(pause, deadline - now)
    await asyncio.sleep(pause)
    return min(delay * 2, ceiling)
