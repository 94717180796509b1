"""The session lock of `SqlStateStore`: a PostgreSQL advisory lock or MySQL/MariaDB ``GET_LOCK``.

A hold takes the in-process FIFO lock, then a database lock on a dedicated connection held for the
duration: ``pg_try_advisory_lock`` on PostgreSQL, ``GET_LOCK`` on MySQL/MariaDB, polled with
jittered backoff (2 ms doubling up to ``lock_poll``) until the timeout (`SessionBusyError`). The
server releases the lock when that connection dies, so a crashed process never keeps a session
locked. A waiting process first takes the session's second, "want" lock, and a process can only
take the session lock while nobody else holds that, so contending processes take turns instead of
one process re-acquiring ahead of the others. Lock connections come from a pool of their own
(``pool_size`` + 2 x ``pool_size`` overflow): a holder keeps one for the whole call, and must never
starve the reads and writes it is waiting on.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from agentrt import _json
from agentrt.errors import SessionBusyError, StateStoreError
from agentrt.state.locks import LocalSessionLocks, SessionLockHold, poll_pause

__all__ = ["SqlLocks", "SqlSessionLock", "discard_connection", "mysql_lock_name", "pg_lock_key"]

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


def _digest(*parts: str) -> bytes:
    return hashlib.sha256(_json.dumps_bytes(list(parts))).digest()


def pg_lock_key(*parts: str) -> int:
    """The PostgreSQL advisory-lock key (a signed 64-bit int) of a lock name made of `parts`."""
    return int.from_bytes(_digest("agentrt", *parts)[:8], "big", signed=True)


def mysql_lock_name(database: str, *parts: str) -> str:
    """The ``GET_LOCK`` name of a lock in `database` (names are server-wide and at most 64 characters)."""
    return "agentrt:" + _digest(database, *parts).hex()[:48]


class SqlLocks:
    """The session locks of one store: lock names, the lock connections, acquiring and releasing.

    Args:
        engine: Where lock connections come from.
        shared: The engine also serves reads and writes (a caller's engine): lock connections are
            switched to autocommit so no transaction stays open.
        pg: PostgreSQL (else MySQL/MariaDB).
        database: The database name (part of MySQL lock names).
        prefix: The store's table prefix (part of every lock name).
        poll: Longest pause between two tries of a busy lock, in seconds.
        check_open: Raises if the store is closed.
        error: Maps a driver error to the store's `StateStoreError`.
    """

    __slots__ = ("_check_open", "_database", "_engine", "_error", "_pg", "_poll", "_prefix", "_shared")

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        shared: bool,
        pg: bool,
        database: str,
        prefix: str,
        poll: float,
        check_open: Callable[[], None],
        error: Callable[[str, BaseException], StateStoreError],
    ) -> None:
        self._engine = engine
        self._shared = shared
        self._pg = pg
        self._database = database
        self._prefix = prefix
        self._poll = poll
        self._check_open = check_open
        self._error = error

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
        if self._shared:  # a caller's engine: no transaction may stay open
            try:
                await conn.execution_options(isolation_level="AUTOCOMMIT")
            except BaseException as exc:
                await discard_connection(conn)
                if isinstance(exc, (sa_exc.SQLAlchemyError, OSError)):
                    raise self._error("session lock", exc) from exc
                raise
        return conn

    async def acquire(
        self, params: dict[str, Any], deadline: float | None, timeout: float | None, describe: str
    ) -> AsyncConnection:
        """Poll for the lock until `deadline`; the connection now holding it."""
        conn = await self._connection(deadline, timeout, describe)
        try_first, try_in_line = (_PG_TRY, _PG_TRY_IN_LINE) if self._pg else (_MY_TRY, _MY_TRY_IN_LINE)
        in_line = False  # we hold the "want" lock: the holder's process may not take the lock back before us
        unsure = False  # a statement was interrupted: the connection may hold locks we do not know of
        delay = min(_MIN_POLL, self._poll)
        try:
            while True:
                unsure = True
                result = (await conn.execute(sa.text(try_in_line if in_line else try_first), params)).scalar()
                unsure = False
                if result == 1:
                    return conn
                if result == 2:
                    in_line = True
                delay = await poll_pause(delay, self._poll, deadline, timeout, describe)
        except BaseException as exc:
            if unsure:
                await discard_connection(conn)
            else:
                await self.release(conn, params if in_line else None, want=True)
            if isinstance(exc, (sa_exc.SQLAlchemyError, OSError)):
                raise self._error("session lock", exc) from exc
            raise

    async def release(self, conn: AsyncConnection, params: dict[str, Any] | None, *, want: bool) -> bool:
        """Release the main (or the "want") lock and pool the connection; False if the lock was not held."""
        released = True
        try:
            if params is not None:
                if want:
                    sql = _PG_UNLOCK_WANT if self._pg else _MY_UNLOCK_WANT
                else:
                    sql = _PG_UNLOCK if self._pg else _MY_UNLOCK
                released = bool((await conn.execute(sa.text(sql), params)).scalar())
        except BaseException:
            await discard_connection(conn)  # a connection that may still hold the lock must never go back to the pool
            raise
        if released:
            await conn.close()
        else:
            await discard_connection(conn)
        return released


class SqlSessionLock(SessionLockHold):
    """A session lock: the in-process FIFO lock, then a PostgreSQL advisory lock or MySQL ``GET_LOCK``.

    The database lock lives on a connection the hold keeps for its duration; if that connection dies
    the server frees the lock (the body is not interrupted: stale writes still fail on revision).
    Contending processes take turns: a waiting process first takes the session's "want" lock, and a
    process releasing the lock cannot take it back while another holds that.
    """

    __slots__ = ("_agent", "_conn", "_locks", "_params", "_session_id", "_user_id")

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

    @property
    def held(self) -> bool:
        """True between a successful enter and the exit."""
        return self._conn is not None

    def _describe(self) -> str:
        return f"session {self._session_id!r} of user {self._user_id!r}"

    async def __aenter__(self) -> None:
        if self._conn is not None:
            raise RuntimeError("this session lock is already held; create one per `async with`")
        loop = asyncio.get_running_loop()
        timeout = self._timeout
        deadline = None if timeout is None else loop.time() + max(0.0, timeout)
        self._params = self._locks.params(self._agent, self._user_id, self._session_id)
        await super().__aenter__()  # the in-process FIFO lock (SessionBusyError on timeout)
        try:
            self._conn = await self._locks.acquire(self._params, deadline, timeout, self._describe())
        except BaseException:
            await super().__aexit__(None, None, None)
            raise

    async def __aexit__(self, *exc: object) -> None:
        conn, self._conn = self._conn, None
        try:
            if conn is not None:
                try:
                    released = await self._locks.release(conn, self._params, want=False)
                except Exception as error:  # the connection died: the server has released the lock already
                    logger.warning("%s: could not release the session lock (%s)", self._describe(), error)
                else:
                    if not released:
                        logger.warning(
                            "%s: the session lock was lost while held (its connection was reset)", self._describe()
                        )
        finally:
            await super().__aexit__(*exc)


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
