"""One shared `aiohttp.ClientSession` per event loop for the HTTP provider adapters.

Why shared: a session owns the connection pool, and opening one per model (or worse, per request)
throws away keep-alive connections and costs CPU on every call. Why per loop: a session is bound
to the loop it was created on, and `asyncio.run` (e.g. `agent.call_sync`) makes a new loop per call.

Lifetime: models take a `SessionLease`; the session closes when the last model using it on that
loop calls `aclose()`, and otherwise when the loop shuts down (`asyncio.run` finalises async
generators, and a tiny guard generator closes the session then), so scripts that never call
`aclose()` do not leak sockets or print "Unclosed client session".
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator

import aiohttp

__all__ = ["DEFAULT_MAX_CONNECTIONS", "SessionLease"]

DEFAULT_MAX_CONNECTIONS = 1000
"""aiohttp's default pool limit is 100, which queues requests under load; agents run far more at once."""
KEEPALIVE_TIMEOUT = 30.0

_PoolKey = tuple[asyncio.AbstractEventLoop, int, bool]


class _Pool:
    __slots__ = ("guard", "key", "session", "users")

    def __init__(self, key: _PoolKey, session: aiohttp.ClientSession) -> None:
        self.key = key
        self.session = session
        self.users: weakref.WeakSet[SessionLease] = weakref.WeakSet()
        self.guard: AsyncGenerator[None, None] | None = None

    async def close(self) -> None:
        if _pools.get(self.key) is self:
            del _pools[self.key]
        guard, self.guard = self.guard, None
        if guard is not None:
            await guard.aclose()
        await self.session.close()


_pools: dict[_PoolKey, _Pool] = {}


async def _close_at_loop_shutdown(pool: _Pool) -> AsyncGenerator[None, None]:
    # Started once and left suspended: the loop's `shutdown_asyncgens()` (run by asyncio.run and
    # asyncio.Runner) closes it, which closes the session on the loop it belongs to.
    try:
        yield
    finally:
        if _pools.get(pool.key) is pool:
            del _pools[pool.key]
        if not pool.session.closed:
            await pool.session.close()


class SessionLease:
    """A model's handle on the shared session of the running loop (or on a session it was given)."""

    __slots__ = ("__weakref__", "_loop", "_pools", "_session", "given", "max_connections", "trust_env")

    def __init__(
        self,
        *,
        session: aiohttp.ClientSession | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        trust_env: bool = False,
    ) -> None:
        self.given = session
        self.max_connections = max_connections
        self.trust_env = trust_env
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: aiohttp.ClientSession | None = session
        self._pools: list[_Pool] = []

    def get(self) -> aiohttp.ClientSession | None:
        """The session for the running loop when it is already known (the fast path), else None."""
        session = self._session
        if (
            session is not None
            and (self.given is not None or self._loop is asyncio.get_running_loop())
            and not session.closed
        ):
            return session
        return None

    async def acquire(self) -> aiohttp.ClientSession:
        """The session for the running loop, opening the shared one if needed."""
        session = self.get()
        if session is not None:
            return session
        if self.given is not None:
            return self.given  # closed by its owner: let aiohttp report that on use
        loop = asyncio.get_running_loop()
        key = (loop, self.max_connections, self.trust_env)
        pool = _pools.get(key)
        if pool is None or pool.session.closed:
            for stale in [k for k in _pools if k[0].is_closed()]:
                del _pools[stale]
            connector = aiohttp.TCPConnector(
                limit=self.max_connections,
                limit_per_host=0,
                keepalive_timeout=KEEPALIVE_TIMEOUT,
                ttl_dns_cache=300,
            )
            session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=None),
                trust_env=self.trust_env,
                raise_for_status=False,
            )
            pool = _pools[key] = _Pool(key, session)
            guard = _close_at_loop_shutdown(pool)
            await guard.__anext__()
            pool.guard = guard
        pool.users.add(self)
        if pool not in self._pools:
            self._pools.append(pool)
        self._loop = loop
        self._session = pool.session
        return pool.session

    async def release(self) -> None:
        """Stop using shared sessions; close those on the running loop that nobody else uses.

        A session handed in by the caller is never closed here.
        """
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        pools, self._pools = self._pools, []
        self._loop = None
        self._session = self.given
        for pool in pools:
            pool.users.discard(self)
            if not pool.users and pool.key[0] is loop and not pool.session.closed:
                await pool.close()
