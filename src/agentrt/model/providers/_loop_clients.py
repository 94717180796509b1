"""One SDK client per event loop, closed by `aclose()` or when its loop shuts down.

SDK clients hold connection pools bound to the loop that opened them, and `call_sync` (or any
second `asyncio.run`) brings a new loop: a model keeps one client per loop and never leaks them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Generic, TypeVar

__all__ = ["LoopClients"]

T = TypeVar("T")


class LoopClients(Generic[T]):
    """Lazily opens one client per running loop with `open`; `close` releases one."""

    __slots__ = ("_close", "_entries", "_open")

    def __init__(self, open: Callable[[], Awaitable[T]], close: Callable[[T], Awaitable[None]]) -> None:
        self._open = open
        self._close = close
        self._entries: dict[asyncio.AbstractEventLoop, tuple[T, AsyncGenerator[None, None]]] = {}

    async def get(self) -> T:
        """The running loop's client (opened on first use)."""
        loop = asyncio.get_running_loop()
        entry = self._entries.get(loop)
        if entry is not None:
            return entry[0]
        for stale in [lp for lp in self._entries if lp.is_closed()]:
            del self._entries[stale]
        client = await self._open()
        guard = self._guard(client)
        await guard.__anext__()
        self._entries[loop] = (client, guard)
        return client

    async def _guard(self, client: T) -> AsyncGenerator[None, None]:
        # Started once and left suspended: `aclose()` or the loop's `shutdown_asyncgens()` (run by
        # asyncio.run) resumes it, closing the client on the loop its connections belong to.
        try:
            yield
        finally:
            await self._close(client)

    async def aclose(self) -> None:
        """Close the running loop's client and forget those of closed loops (idempotent)."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        for lp in list(self._entries):
            if lp is loop or lp.is_closed():
                _client, guard = self._entries.pop(lp)
                if lp is loop:
                    await guard.aclose()

    def __len__(self) -> int:
        return len(self._entries)
