"""In-process session locks: FIFO per key, created on demand and dropped when idle."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager

from agentrt.errors import SessionBusyError

__all__ = ["LocalSessionLocks"]


class _Entry:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class LocalSessionLocks:
    """One asyncio lock per key (asyncio locks are FIFO-fair), freed when nobody holds or waits.

    Entries are per event loop, so a store used from several `asyncio.run` calls stays valid.
    """

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[tuple[int, Hashable], _Entry] = {}

    @asynccontextmanager
    async def hold(self, key: Hashable, *, timeout: float | None = None) -> AsyncIterator[None]:
        """Hold the lock for `key`; `SessionBusyError` if not acquired within `timeout` seconds."""
        full_key = (id(asyncio.get_running_loop()), key)
        entry = self._entries.get(full_key)
        if entry is None:
            entry = self._entries[full_key] = _Entry()
        entry.users += 1
        try:
            if timeout is None:
                await entry.lock.acquire()
            else:
                try:
                    async with asyncio.timeout(timeout):
                        await entry.lock.acquire()
                except TimeoutError:
                    raise SessionBusyError(
                        f"session {key!r} is busy: another call held it for more than {timeout:g} s"
                    ) from None
            try:
                yield
            finally:
                entry.lock.release()
        finally:
            entry.users -= 1
            if entry.users == 0 and self._entries.get(full_key) is entry:
                del self._entries[full_key]

    def __len__(self) -> int:
        return len(self._entries)
