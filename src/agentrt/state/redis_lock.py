"""A distributed session lock on Redis: ``SET NX PX`` with a fencing token, renewal and safe release.

The hold first takes the in-process FIFO lock of its store (so calls in one process queue in arrival
order and only one of them polls Redis), then the Redis lock:

* **acquire** (Lua, atomic): if the lock key is free, ``INCR`` the session's fence counter and
  ``SET lock "<token>:<nonce>" PX lock_ttl``; the token is strictly greater than every token handed
  out before for that session (the counter outlives the lock and is kept for `fence_retention`).
  A waiter that finds the lock busy registers itself in a short-lived *want* key (first waiter
  wins, refreshed on every poll); when the lock frees, only that waiter may take it. This keeps a
  process that releases and immediately re-acquires from starving the others: contending
  processes take turns. A waiter that dies stops refreshing, and its claim lapses within 0.5 s.
* **wait**: poll with jittered exponential backoff (2 ms doubling to 50 ms) until the timeout,
  then `SessionBusyError`.
* **renew**: a background task extends the expiry every ``lock_ttl / 3`` while the key still holds
  our nonce; if it does not (expired, stolen, flushed), or Redis stays unreachable for a whole
  ``lock_ttl``, the hold is marked `lost` and a warning is logged.
* **release** (Lua): compare-and-delete on our nonce, shielded from cancellation. A holder that
  dies without releasing loses the lock when ``lock_ttl`` runs out.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import secrets
from collections.abc import Awaitable, Callable, Hashable

from redis.asyncio import Redis
from redis.exceptions import RedisError

from agentrt.errors import StateStoreError
from agentrt.state.locks import LocalSessionLocks, SessionLockHold, held_fence, poll_pause

__all__ = ["RedisLockScripts", "RedisSessionLock"]

logger = logging.getLogger("agentrt.state")

_MIN_POLL = 0.002
_MAX_POLL = 0.05
_WANT_TTL_MS = 500

# KEYS: lock, fence, want.  ARGV: nonce, lock ttl ms, fence retention ms, want ttl ms.
# Returns the fencing token (> 0) when acquired, 0 when busy.
_ACQUIRE = """
local holder = redis.call('GET', KEYS[1])
local want = redis.call('GET', KEYS[3])
if not holder and (not want or want == ARGV[1]) then
  local token = redis.call('INCR', KEYS[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  redis.call('SET', KEYS[1], token .. ':' .. ARGV[1], 'PX', ARGV[2])
  if want then redis.call('DEL', KEYS[3]) end
  return token
end
if not want or want == ARGV[1] then
  redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[4])
end
return 0
"""

# KEYS: lock, fence.  ARGV: nonce, lock ttl ms, fence retention ms.  1 if still ours and extended.
_RENEW = """
local v = redis.call('GET', KEYS[1])
local suffix = ':' .. ARGV[1]
if v and string.sub(v, -#suffix) == suffix then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return 1
end
return 0
"""

# KEYS: lock, want.  ARGV: nonce.  Deletes the lock and our claim if they are ours; 1 if the lock was.
_RELEASE = """
local suffix = ':' .. ARGV[1]
local released = 0
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, -#suffix) == suffix then
  redis.call('DEL', KEYS[1])
  released = 1
end
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
return released
"""


class RedisLockScripts:
    """The lock's Lua scripts registered on one client (registered once per store)."""

    __slots__ = ("acquire", "release", "renew")

    def __init__(self, client: Redis) -> None:
        self.acquire = client.register_script(_ACQUIRE)
        self.renew = client.register_script(_RENEW)
        self.release = client.register_script(_RELEASE)


class RedisSessionLock(SessionLockHold):
    """``async with store.session_lock(user, session) as hold:`` - one session, across processes.

    `fencing_token` is the token of the current (or last) acquisition: it strictly increases with
    every acquisition of the session's lock, so a resource that remembers the highest token it saw
    can refuse writes from a holder that lost the lock. `lost` turns True if the lock expired or was
    taken while held (the body is not interrupted; stores still reject stale revisions).
    """

    __slots__ = (
        "_client",
        "_connect",
        "_describe",
        "_error",
        "_fence_key",
        "_fence_retention_ms",
        "_fence_var",
        "_lock_key",
        "_lock_ttl",
        "_lost",
        "_nonce",
        "_renewal",
        "_scripts",
        "_stopping",
        "_want_key",
        "fencing_token",
    )

    def __init__(
        self,
        owner: LocalSessionLocks,
        key: Hashable,
        timeout: float | None,
        *,
        scripts: RedisLockScripts,
        connect: Callable[[], Awaitable[Redis]],
        lock_key: str,
        fence_key: str,
        want_key: str,
        lock_ttl: float,
        fence_retention: float,
        describe: str,
        error: Callable[[RedisError], StateStoreError],
    ) -> None:
        super().__init__(owner, key, timeout)
        self._scripts = scripts
        self._connect = connect
        self._client: Redis | None = None
        self._lock_key = lock_key
        self._fence_key = fence_key
        self._want_key = want_key
        self._lock_ttl = lock_ttl
        self._fence_retention_ms = max(1, round(fence_retention * 1000))
        self._describe = describe
        self._error = error
        self._nonce = ""
        self._renewal: asyncio.Task[None] | None = None
        self._stopping = False
        self._lost = False
        self.fencing_token: int | None = None
        self._fence_var: contextvars.Token[tuple[str, int] | None] | None = None

    @property
    def lost(self) -> bool:
        """True if the Redis lock expired or passed to someone else while this hold had it."""
        return self._lost

    @property
    def held(self) -> bool:
        """True between a successful enter and the exit (even if the lock was `lost` meanwhile)."""
        return self._renewal is not None

    async def __aenter__(self) -> RedisSessionLock:  # type: ignore[override]  # base returns None
        if self._renewal is not None:
            raise RuntimeError("this session lock hold is already held; create one per `async with`")
        loop = asyncio.get_running_loop()
        deadline = None if self._timeout is None else loop.time() + self._timeout
        client = await self._connect()  # the store's client for this event loop
        await super().__aenter__()  # the in-process FIFO lock (SessionBusyError on timeout)
        try:
            await self._acquire(client, deadline)
        except BaseException:
            await super().__aexit__(None, None, None)
            raise
        self._stopping = False
        self._renewal = asyncio.create_task(self._renew(), name=f"agentrt-lock-renewal {self._describe}")
        assert self.fencing_token is not None
        self._fence_var = held_fence.set((self._fence_key, self.fencing_token))
        return self

    async def __aexit__(self, *exc: object) -> None:
        fence_var, self._fence_var = self._fence_var, None
        if fence_var is not None:
            with contextlib.suppress(ValueError):  # set in another context (an exit from elsewhere)
                held_fence.reset(fence_var)
        renewal, self._renewal = self._renewal, None
        try:
            # shielded: a (further) cancellation must not leave the lock held until it expires
            await asyncio.shield(asyncio.ensure_future(self._finish(renewal)))
        finally:
            await super().__aexit__(*exc)

    async def _finish(self, renewal: asyncio.Task[None] | None) -> None:
        if renewal is not None:
            # The flag, not only the cancellation, ends the renewal loop: on Python 3.11 a Redis
            # command cancelled just as redis-py's pool hands it a connection can swallow the
            # CancelledError (asyncio.wait_for), and the loop would sleep and renew forever while
            # this exit waited for it (seen with 10,000 concurrent sessions on 100 connections).
            self._stopping = True
            renewal.cancel()
            await asyncio.wait([renewal])
        await self._release()

    # -- acquisition ---------------------------------------------------------------------------

    async def _acquire(self, client: Redis, deadline: float | None) -> None:
        self._client = client
        self._nonce = secrets.token_hex(12)
        self._lost = False
        lock_ms = max(1, round(self._lock_ttl * 1000))
        keys = [self._lock_key, self._fence_key, self._want_key]
        args: list[str | int] = [self._nonce, lock_ms, self._fence_retention_ms, _WANT_TTL_MS]
        delay = _MIN_POLL
        try:
            while True:
                try:
                    token = int(await self._scripts.acquire(keys=keys, args=args, client=client))
                except RedisError as exc:
                    raise self._error(exc) from exc
                if token > 0:
                    self.fencing_token = token
                    return
                delay = await poll_pause(delay, _MAX_POLL, deadline, self._timeout, self._describe)
        except BaseException:
            # timed out, cancelled or failed: drop our claim, and the lock itself in case the
            # acquiring call went through but its reply never reached us
            await asyncio.shield(asyncio.ensure_future(self._release()))
            raise

    # -- holding -------------------------------------------------------------------------------

    async def _renew(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self._lock_ttl / 3
        lock_ms = max(1, round(self._lock_ttl * 1000))
        keys = [self._lock_key, self._fence_key]
        args: list[str | int] = [self._nonce, lock_ms, self._fence_retention_ms]
        confirmed = loop.time()  # the lock is ours at least until confirmed + lock_ttl
        while not self._stopping:
            await asyncio.sleep(interval)
            sent = loop.time()
            try:
                still_ours = bool(await self._scripts.renew(keys=keys, args=args, client=self._client))
                if self._stopping:  # released meanwhile (a swallowed cancellation): renew no more
                    return
            except Exception as exc:  # Redis down or slow: keep trying while the lock may still be ours
                if loop.time() - confirmed >= self._lock_ttl:
                    self._lost = True
                    logger.warning(
                        "%s: could not renew the session lock for %.3g s (%s); it has expired",
                        self._describe,
                        self._lock_ttl,
                        exc,
                    )
                    return
                continue
            if not still_ours:
                self._lost = True
                logger.warning(
                    "%s: the session lock (fencing token %s) expired or was taken over while held",
                    self._describe,
                    self.fencing_token,
                )
                return
            confirmed = sent

    async def _release(self) -> None:
        try:
            await self._scripts.release(keys=[self._lock_key, self._want_key], args=[self._nonce], client=self._client)
        except Exception as exc:  # best effort: the lock expires by itself
            logger.warning(
                "%s: could not release the session lock (%s); it expires within %.3g s",
                self._describe,
                exc,
                self._lock_ttl,
            )

    def __repr__(self) -> str:
        state = "lost" if self._lost else "held" if self.held else "idle"
        return f"<RedisSessionLock {self._describe} {state} token={self.fencing_token}>"
