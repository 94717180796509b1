"""The session lock of `SqlStateStore`: a lease on a PostgreSQL advisory lock or MySQL/MariaDB ``GET_LOCK``.

A hold takes the in-process FIFO lock, then a database lock on a dedicated connection held for the
duration: ``pg_try_advisory_lock`` on PostgreSQL, ``GET_LOCK`` on MySQL/MariaDB, polled with
jittered backoff (2 ms doubling up to ``lock_poll``) until the timeout (`SessionBusyError`). The
server releases the lock when that connection dies, so a crashed process never keeps a session
locked. A waiting process first takes the session's second, "want" lock, and a process can only
take the session lock while nobody else holds that, so contending processes take turns instead of
one process re-acquiring ahead of the others. Lock connections come from a pool of their own
(``pool_size`` + 2 x ``pool_size`` overflow): a holder keeps one for the whole call, and must never
starve the reads and writes it is waiting on.

**Lease.** With a ``lock_ttl``, the lock connection (of a holder, and of a waiter holding the
"want" lock) asks the server to end it once it has been idle for the ttl: ``idle_session_timeout``
on PostgreSQL (14 and later), the session ``wait_timeout`` (whole seconds, rounded up) on
MySQL/MariaDB. A holder pings it (``SELECT 1``) every ttl / 3 and a waiter polls at least that
often, so a live process keeps its lock; a paused one (SIGSTOP, a frozen VM, a stalled event loop,
a partition that keeps the TCP connection up) stops pinging, the server closes the connection
after the ttl and frees the lock for the next process. The setting is reset before the connection
goes back to the pool, so pooled connections are never ended by it.

**Fence.** Every acquisition bumps the session's fencing token (a row of ``<prefix>session_fences``,
see `SqlStateStore`) on the lock connection and sets `agentrt.state.locks.held_fence` for the
holder's context; the store's writes check it, so a paused holder that wakes up after another
process took the lock gets `FencedError` instead of writing.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from agentrt import _json
from agentrt.errors import SessionBusyError, StateStoreError
from agentrt.state.locks import LocalSessionLocks, SessionLockHold, held_fence, poll_pause

__all__ = ["FenceBump", "SqlLocks", "SqlSessionLock", "discard_connection", "mysql_lock_name", "pg_lock_key"]

logger = logging.getLogger("agentrt.state")

_MIN_POLL = 0.002
_CHECKOUT_GRACE = 1.0

# lock poll results: 1 = acquired, 2 = first in line (holding the "want" lock), 0 = someone else is first in line
_PG_TRY = (
    "SELECT CASE WHEN pg_try_advisory_lock(:want) THEN"
    " CASE WHEN pg_try_advisory_lock(:main) THEN CASE WHEN pg_advisory_unlock(:want) THEN 1 ELSE 1 END ELSE 2 END"
    " ELSE 0 END"
)
_PG_TRY_IN_LINE = (
    "SELECT CASE WHEN pg_try_advisory_lock(:main) THEN CASE WHEN pg_advisory_unlock(:want) THEN 1 ELSE 1 END ELSE 2 END"
)
_PG_UNLOCK = "SELECT pg_advisory_unlock(:main)"
_PG_UNLOCK_WANT = "SELECT pg_advisory_unlock(:want)"
_MY_TRY = (
    "SELECT CASE WHEN GET_LOCK(:want, 0) = 1 THEN"
    " CASE WHEN GET_LOCK(:main, 0) = 1 THEN CASE WHEN RELEASE_LOCK(:want) = 1 THEN 1 ELSE 1 END ELSE 2 END"
    " ELSE 0 END"
)
_MY_TRY_IN_LINE = (
    "SELECT CASE WHEN GET_LOCK(:main, 0) = 1 THEN CASE WHEN RELEASE_LOCK(:want) = 1 THEN 1 ELSE 1 END ELSE 2 END"
)
_MY_UNLOCK = "SELECT RELEASE_LOCK(:main)"
_MY_UNLOCK_WANT = "SELECT RELEASE_LOCK(:want)"

# the lease: the server ends the lock connection once it is idle for the ttl; reset before pooling.
# PostgreSQL sets it in the first try, and restores the server's default (read once) in the unlock.
_PG_LEASE = ", set_config('idle_session_timeout', :lease, false)"
_PG_UNLEASE = "set_config('idle_session_timeout', :idle_default, false)"
_PG_IDLE_DEFAULT = "SELECT current_setting('idle_session_timeout')"
_MY_LEASE = "SET SESSION wait_timeout = :s"
_MY_UNLEASE = "SET SESSION wait_timeout = DEFAULT"
_PING = "SELECT 1"
_PG_LEASE_VERSION = (14,)  # idle_session_timeout

FenceBump = Callable[[AsyncConnection, str, str, str], Awaitable[tuple[str, int]]]
"""Bumps a session's fencing token on the lock connection: ``(conn, agent, user, session)`` -> (fence key, token)."""


def _digest(*parts: str) -> bytes:
    return hashlib.sha256(_json.dumps_bytes(list(parts))).digest()


def pg_lock_key(*parts: str) -> int:
    """The PostgreSQL advisory-lock key (a signed 64-bit int) of a lock name made of `parts`."""
    return int.from_bytes(_digest("agentrt", *parts)[:8], "big", signed=True)


def mysql_lock_name(database: str, *parts: str) -> str:
    """The ``GET_LOCK`` name of a lock in `database` (names are server-wide and at most 64 characters)."""
    return "agentrt:" + _digest(database, *parts).hex()[:48]


class SqlLocks:
    """The session locks of one store: lock names, the lock connections, the lease, acquiring and releasing.

    Args:
        engine: Where lock connections come from.
        shared: The engine also serves reads and writes (a caller's engine): lock connections are
            switched to autocommit so no transaction stays open.
        pg: PostgreSQL (else MySQL/MariaDB).
        database: The database name (part of MySQL lock names).
        prefix: The store's table prefix (part of every lock name).
        poll: Longest pause between two tries of a busy lock, in seconds.
        ttl: The lease: seconds a lock connection may stay idle before the server ends it (None:
            no lease, a paused holder keeps its lock).
        check_open: Raises if the store is closed.
        prepare: Creates the store's tables (the fence table) if needed; awaited before locking.
        bump: Bumps a session's fencing token on the lock connection (`FenceBump`).
        error: Maps a driver error to the store's `StateStoreError`.
    """

    __slots__ = (
        "_bump",
        "_check_open",
        "_database",
        "_engine",
        "_error",
        "_idle_default",
        "_lease",
        "_pg",
        "_poll",
        "_prefix",
        "_prepare",
        "_shared",
        "_ttl",
    )

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        shared: bool,
        pg: bool,
        database: str,
        prefix: str,
        poll: float,
        ttl: float | None = None,
        check_open: Callable[[], None],
        prepare: Callable[[], Awaitable[None]] | None = None,
        bump: FenceBump | None = None,
        error: Callable[[str, BaseException], StateStoreError],
    ) -> None:
        self._engine = engine
        self._shared = shared
        self._pg = pg
        self._database = database
        self._prefix = prefix
        self._ttl = ttl
        # a waiter's polls are its heartbeat: never idle for a third of the ttl
        self._poll = poll if ttl is None else min(poll, ttl / 3)
        self._check_open = check_open
        self._prepare = prepare
        self._bump = bump
        self._error = error
        self._lease: bool | None = None if ttl is not None else False  # None: not known before a connection
        self._idle_default = "0"  # PostgreSQL: the idle_session_timeout to restore before pooling a connection

    @property
    def ttl(self) -> float | None:
        """The lease in seconds, or None."""
        return self._ttl

    @property
    def leased(self) -> bool:
        """True once lock connections are known to be leases (a ttl, and a server that supports it)."""
        return bool(self._lease)

    def params(self, agent: str, user_id: str, session_id: str) -> dict[str, Any]:
        """The bind parameters naming a session's lock (``main``) and its "want" lock (``want``)."""
        # the legacy agent "" keeps the lock names of earlier versions
        ids = (agent, user_id, session_id) if agent else (user_id, session_id)
        if self._pg:
            return {"main": pg_lock_key("lock", self._prefix, *ids), "want": pg_lock_key("want", self._prefix, *ids)}
        return {
            "main": mysql_lock_name(self._database, "lock", self._prefix, *ids),
            "want": mysql_lock_name(self._database, "want", self._prefix, *ids),
        }

    async def prepare(self) -> None:
        """Create the store's tables if needed (before any lock is held: DDL takes its own lock)."""
        self._check_open()
        if self._prepare is not None:
            await self._prepare()

    async def _connection(self, deadline: float | None, timeout: float | None, describe: str) -> AsyncConnection:
        self._check_open()
        try:
            if deadline is None:
                conn = await self._engine.connect()
            else:
                # getting a connection is not waiting for the lock, but waiting for a pool exhausted
                # by other holders is: bounded by the timeout, plus a grace for connecting
                scope = asyncio.timeout_at(deadline + _CHECKOUT_GRACE)
                try:
                    async with scope:
                        conn = await self._engine.connect()
                except TimeoutError:
                    if not scope.expired():
                        raise  # the driver's own connect timeout: the database is unreachable
                    raise SessionBusyError(
                        f"{describe} is busy: no session-lock connection came free within {timeout:g} s "
                        "(more sessions are locked at once than the lock pool holds; raise pool_size)"
                    ) from None
        except (sa_exc.SQLAlchemyError, OSError) as exc:
            raise self._error("session lock", exc) from exc
        try:
            if self._shared:  # a caller's engine: no transaction may stay open
                await conn.execution_options(isolation_level="AUTOCOMMIT")
            await self._start_lease(conn)
        except BaseException as exc:
            await discard_connection(conn)
            if isinstance(exc, (sa_exc.SQLAlchemyError, OSError)):
                raise self._error("session lock", exc) from exc
            raise
        return conn

    async def _start_lease(self, conn: AsyncConnection) -> None:
        """Have the server end `conn` once it is idle for the ttl (if there is one and the server can).

        MySQL/MariaDB: set here. PostgreSQL: by the first try of `acquire` (one round trip less);
        the first connection also tells whether the server can, and the default to restore.
        """
        if self._lease is False or self._ttl is None:
            return
        if self._lease is None:
            version = conn.dialect.server_version_info
            if self._pg and version is not None and tuple(version[:1]) < _PG_LEASE_VERSION:
                self._lease = False
                logger.warning(
                    "PostgreSQL %s has no idle_session_timeout (14 and later do): session locks are not "
                    "leases there, a paused process keeps its lock (lock_ttl=%g is ignored)",
                    ".".join(str(v) for v in version),
                    self._ttl,
                )
                return
            if self._pg:  # the role's / database's default: the same for every connection of the store
                self._idle_default = str((await conn.execute(sa.text(_PG_IDLE_DEFAULT))).scalar())
            self._lease = True
        if not self._pg:
            await conn.execute(sa.text(_MY_LEASE), {"s": max(1, math.ceil(self._ttl))})

    async def acquire(
        self, params: dict[str, Any], deadline: float | None, timeout: float | None, describe: str
    ) -> AsyncConnection:
        """Poll for the lock until `deadline`; the connection now holding it."""
        conn = await self._connection(deadline, timeout, describe)
        try_first, try_in_line = (_PG_TRY, _PG_TRY_IN_LINE) if self._pg else (_MY_TRY, _MY_TRY_IN_LINE)
        in_line = False  # we hold the "want" lock: the holder's process may not take the lock back before us
        unsure = False  # a statement was interrupted: the connection may hold locks we do not know of
        delay = min(_MIN_POLL, self._poll)
        sql, values = try_first, params
        if self._pg and self._lease and self._ttl is not None:  # the first try starts the lease too
            sql, values = try_first + _PG_LEASE, {**params, "lease": str(max(1, math.ceil(self._ttl * 1000)))}
        try:
            while True:
                unsure = True
                result = (await conn.execute(sa.text(sql), values)).scalar()
                unsure = False
                if result == 1:
                    return conn
                if result == 2:
                    in_line = True
                sql, values = try_in_line if in_line else try_first, params
                delay = await poll_pause(delay, self._poll, deadline, timeout, describe)
        except BaseException as exc:
            if unsure:
                await discard_connection(conn)
            else:
                await self.release(conn, params if in_line else None, want=True)
            if isinstance(exc, (sa_exc.SQLAlchemyError, OSError)):
                raise self._error("session lock", exc) from exc
            raise

    async def bump(self, conn: AsyncConnection, agent: str, user_id: str, session_id: str) -> tuple[str, int] | None:
        """Bump the session's fencing token on the lock connection `conn`; (fence key, token), or None without fences.

        On failure the connection is discarded (the server frees its lock): it may be mid-statement.
        """
        if self._bump is None:
            return None
        try:
            return await self._bump(conn, agent, user_id, session_id)
        except BaseException as exc:
            await discard_connection(conn)
            if isinstance(exc, (sa_exc.SQLAlchemyError, OSError)):
                raise self._error("session lock (fencing token)", exc) from exc
            raise

    async def ping(self, conn: AsyncConnection) -> None:
        """One heartbeat on a held lock's connection: the server counts idle time from it."""
        await conn.execute(sa.text(_PING))

    async def release(self, conn: AsyncConnection, params: dict[str, Any] | None, *, want: bool) -> bool:
        """Release the main (or the "want") lock, end the lease, pool the connection; False if the lock was not held."""
        released = True
        lease = self._lease is True
        try:
            if params is not None:
                if want:
                    sql = _PG_UNLOCK_WANT if self._pg else _MY_UNLOCK_WANT
                else:
                    sql = _PG_UNLOCK if self._pg else _MY_UNLOCK
                values = params
                if lease and self._pg:  # one round trip: unlock and reset the idle timeout
                    sql += ", " + _PG_UNLEASE
                    values = {**params, "idle_default": self._idle_default}
                    lease = False
                released = bool((await conn.execute(sa.text(sql), values)).scalar())
            if lease:
                if self._pg:
                    await conn.execute(sa.text("SELECT " + _PG_UNLEASE), {"idle_default": self._idle_default})
                else:
                    await conn.execute(sa.text(_MY_UNLEASE))
        except BaseException:
            await discard_connection(conn)  # a connection that may still hold the lock must never go back to the pool
            raise
        if released:
            await conn.close()
        else:
            await discard_connection(conn)
        return released


class SqlSessionLock(SessionLockHold):
    """``async with store.session_lock(user, session) as hold:`` - a lease on a database lock, with a fencing token.

    The in-process FIFO lock, then a PostgreSQL advisory lock or MySQL ``GET_LOCK`` on a connection
    the hold keeps for its duration. If that connection dies (the holder crashed, or stopped
    pinging it for the store's ``lock_ttl``), the server frees the lock; the body is not
    interrupted, but its writes are fenced: `fencing_token` strictly increases with every
    acquisition of the session's lock, and the store refuses (`FencedError`) a write made under
    an older token than the session's current one. `lost` turns True when the heartbeat finds the
    connection gone. Contending processes take turns: a waiting process first takes the session's
    "want" lock, and a process releasing the lock cannot take it back while another holds that.
    """

    __slots__ = (
        "_agent",
        "_conn",
        "_fence_var",
        "_heartbeat",
        "_locks",
        "_lost",
        "_params",
        "_session_id",
        "_stop",
        "_user_id",
        "fencing_token",
    )

    def __init__(
        self,
        owner: LocalSessionLocks,
        user_id: str,
        session_id: str,
        timeout: float | None,
        *,
        locks: SqlLocks,
        agent: str = "",
    ) -> None:
        super().__init__(owner, (agent, user_id, session_id), timeout)
        self._agent = agent
        self._user_id = user_id
        self._session_id = session_id
        self._locks = locks
        self._conn: AsyncConnection | None = None
        self._params: dict[str, Any] = {}
        self._heartbeat: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._lost = False
        self._fence_var: contextvars.Token[tuple[str, int] | None] | None = None
        self.fencing_token: int | None = None

    @property
    def held(self) -> bool:
        """True between a successful enter and the exit (even if the lock was `lost` meanwhile)."""
        return self._conn is not None

    @property
    def lost(self) -> bool:
        """True if the heartbeat found the lock's connection gone while held (the server freed the lock)."""
        return self._lost

    def _describe(self) -> str:
        return f"session {self._session_id!r} of user {self._user_id!r}"

    async def __aenter__(self) -> SqlSessionLock:  # type: ignore[override]  # the base returns None
        if self._conn is not None:
            raise RuntimeError("this session lock is already held; create one per `async with`")
        loop = asyncio.get_running_loop()
        timeout = self._timeout
        deadline = None if timeout is None else loop.time() + max(0.0, timeout)
        self._params = self._locks.params(self._agent, self._user_id, self._session_id)
        await self._locks.prepare()
        await super().__aenter__()  # the in-process FIFO lock (SessionBusyError on timeout)
        try:
            conn = await self._locks.acquire(self._params, deadline, timeout, self._describe())
            fence = await self._locks.bump(conn, self._agent, self._user_id, self._session_id)
        except BaseException:
            await super().__aexit__(None, None, None)
            raise
        self._conn = conn
        self._lost = False
        if self._locks.leased and self._locks.ttl is not None:
            self._stop = asyncio.Event()
            self._heartbeat = asyncio.create_task(
                self._beat(conn, self._locks.ttl / 3), name=f"agentrt-lock-heartbeat {self._describe()}"
            )
        if fence is not None:
            self.fencing_token = fence[1]
            self._fence_var = held_fence.set(fence)
        return self

    async def _beat(self, conn: AsyncConnection, interval: float) -> None:
        """Ping the lock connection every `interval` until stopped; a failed ping means the lock is gone."""
        while True:
            try:
                async with asyncio.timeout(interval):
                    await self._stop.wait()
                return
            except TimeoutError:
                pass
            try:
                await self._locks.ping(conn)
            except Exception as exc:  # ended by the server (we were paused past the ttl) or broken
                self._lost = True
                logger.warning(
                    "%s: the session lock (fencing token %s) was lost while held: its connection failed (%s)",
                    self._describe(),
                    self.fencing_token,
                    type(exc).__name__,
                )
                return

    async def __aexit__(self, *exc: object) -> None:
        fence_var, self._fence_var = self._fence_var, None
        if fence_var is not None:
            with contextlib.suppress(ValueError):  # set in another context (an exit from elsewhere)
                held_fence.reset(fence_var)
        conn, self._conn = self._conn, None
        heartbeat, self._heartbeat = self._heartbeat, None
        try:
            if conn is not None:
                # shielded: a (further) cancellation must not leave the lock held on a pooled connection
                finish = asyncio.ensure_future(self._finish(conn, heartbeat))
                _closing.add(finish)
                finish.add_done_callback(_closing.discard)
                await asyncio.shield(finish)
        finally:
            await super().__aexit__(*exc)

    async def _finish(self, conn: AsyncConnection, heartbeat: asyncio.Task[None] | None) -> None:
        if heartbeat is not None:
            self._stop.set()  # wakes the heartbeat between pings; a ping in flight is let finish
            done, _ = await asyncio.wait([heartbeat], timeout=self._locks.ttl)
            if not done:  # a ping hangs (the database is unreachable): the connection is no longer usable
                heartbeat.cancel()
                await asyncio.wait([heartbeat])
                await discard_connection(conn)
                logger.warning("%s: the session lock's connection hung; it was discarded", self._describe())
                return
        if self._lost:
            await discard_connection(conn)  # already reported by the heartbeat
            return
        try:
            released = await self._locks.release(conn, self._params, want=False)
        except Exception as error:  # the connection died: the server has released the lock already
            logger.warning("%s: could not release the session lock (%s)", self._describe(), error)
        else:
            if not released:
                logger.warning("%s: the session lock was lost while held (its connection was reset)", self._describe())

    def __repr__(self) -> str:
        state = "lost" if self._lost else "held" if self.held else "idle"
        return f"<SqlSessionLock {self._describe()} {state} token={self.fencing_token}>"


async def discard_connection(conn: AsyncConnection) -> None:
    """Close the connection for good (never back to the pool): the server frees the locks it held.

    Shielded: a second cancellation must not leave a lock-holding connection half closed.
    """
    task = asyncio.ensure_future(_discard_now(conn))
    _closing.add(task)
    task.add_done_callback(_closing.discard)
    await asyncio.shield(task)


async def _discard_now(conn: AsyncConnection) -> None:
    try:
        await conn.invalidate()
    except Exception as exc:  # already broken: nothing more to free
        logger.debug("discarding a lock connection failed: %s", exc)
    try:
        await conn.close()
    except Exception as exc:
        logger.debug("closing a discarded lock connection failed: %s", exc)


_closing: set[asyncio.Future[None]] = set()
