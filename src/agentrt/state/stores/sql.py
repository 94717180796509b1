"""SqlStateStore: PostgreSQL and MySQL/MariaDB through SQLAlchemy's async Core (asyncpg / asyncmy).

Schema (``<prefix>`` is ``table_prefix``, ``agentrt_`` by default; created on first use)::

    <prefix>sessions
        agent            VARCHAR(100)  the agent's state_key ('' = the legacy namespace), hashed like the
                                       ids past 100 characters (MySQL/MariaDB: VARBINARY(400))
        user_id          VARCHAR(255)  the id, or "sha256:<hex of the id>" when it has more than 255
        session_id       VARCHAR(255)  characters or starts with "sha256:" (MySQL/MariaDB: VARBINARY(1020)
                                       holding UTF-8, so keys compare exactly: no case folding, no padding)
        agent_full       TEXT NULL     the original agent / id when the key column holds its hash
        user_id_full     TEXT NULL
        session_id_full  TEXT NULL
        revision         BIGINT
        doc              TEXT (MySQL: LONGTEXT)  encode_state(include_messages=False) as JSON
        message_count    BIGINT
        created_at       DOUBLE PRECISION        seconds since the epoch
        updated_at       DOUBLE PRECISION
        PRIMARY KEY (agent, user_id, session_id), INDEX <prefix>sessions_by_user (user_id, updated_at),
        INDEX <prefix>sessions_by_updated (updated_at)   (for `prune`; added to older tables on first use)
    <prefix>messages
        agent, user_id, session_id     as above
        seq              BIGINT        0, 1, 2, ... in conversation order
        body             TEXT (MySQL: LONGTEXT)  one encode_message JSON text
        PRIMARY KEY (agent, user_id, session_id, seq)
    <prefix>session_fences
        user_id, agent, session_id, and their *_full originals   as in sessions
        token            BIGINT        the fencing token of the session's latest lock acquisition
        PRIMARY KEY (user_id, agent, session_id)
    <prefix>runs                       the run records of the sessions (`agentrt.state.runs`)
        agent, user_id, session_id     as in sessions
        reply_id         VARCHAR(100)  the run's first reply id (hashed past 100 characters; MySQL/MariaDB:
                                       VARBINARY(400))
        reply_id_full    TEXT NULL     the original id when the key column holds its hash
        started_at       DOUBLE PRECISION
        summary          TEXT          the run's summary (JSON)
        body             TEXT (MySQL: LONGTEXT)  the record (JSON)
        PRIMARY KEY (agent, user_id, session_id, reply_id)

Tables of earlier versions (without ``agent``) are migrated in place on first use, under the same
database-wide lock as the table creation: ``agent`` is added with the default ``''`` (so their
sessions become the legacy namespace) and joins the primary keys. The presence of the column is
the schema version; the migration is idempotent and each table's ``ALTER`` is one statement.
Deployments whose tables predate ``session_fences`` or ``runs`` get them the same way, created on
first use. A session's run records go with it (``delete``, ``prune``, ``delete_user``; moved by
``migrate_legacy``).

The columns ``revision``, ``message_count``, ``created_at`` and ``updated_at`` are authoritative and
override the copies in ``doc`` on load (``doc`` is rewritten only when fields change).

`append` is one transaction costing O(new messages): a compare-and-set ``UPDATE ... SET revision =
revision + 1 WHERE ... AND revision = :expected`` (no matching row: `StateConflictError`), the
insert of the new message rows only, and the rewrite of ``doc`` only if fields changed. A first
append (expected revision 0) inserts the session row; losing that race is a conflict too.

`session_lock` holds a database lock per session across processes (`agentrt.state.sql_lock`): a
lease (with ``lock_ttl``, the server ends the lock connection of a holder that stops pinging it)
with a fencing token. Each acquisition bumps the session's ``token`` to ``max(token + 1, the
database clock in microseconds)`` on the lock connection (so a token is never handed out twice,
even after its row was deleted) and sets `agentrt.state.locks.held_fence`. A write made while a
fence is held first reads the fence row ``FOR SHARE`` (MySQL/MariaDB: ``LOCK IN SHARE MODE``) in
its transaction and raises `FencedError`, writing nothing, unless the row still holds the held
token: the share lock orders the check against a takeover's bump. Writes without a held fence cost
nothing more. Fence rows go with their session (``delete``, ``prune``, ``delete_user``; ``prune``
also sweeps fence rows left without a session, by the time in their token), except while the
session's lock is held: a row is only deleted in a transaction that finds the lock free
(PostgreSQL: ``pg_try_advisory_xact_lock``, held to the commit; MySQL/MariaDB: ``IS_FREE_LOCK``
with the row locked), so a holder's fence never disappears under it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Self, TypeVar

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import mysql as sa_mysql
from sqlalchemy.dialects import postgresql as sa_pg
from sqlalchemy.engine import URL, Dialect, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from agentrt import _json
from agentrt.errors import AgentrtError, FencedError, StateConflictError, StateStoreError, UserError
from agentrt.message import Msg
from agentrt.state.base import (
    STATE_FIELDS,
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
from agentrt.state.codec import decode_message, decode_state, encode_fields, encode_message, encode_state
from agentrt.state.locks import LocalSessionLocks, held_fence
from agentrt.state.runs import (
    DEFAULT_MAX_RUNS,
    RunInfo,
    StoredRun,
    check_max_runs,
    check_reply_id,
    check_stored_run,
    retention_cutoff,
)
from agentrt.state.sql_lock import SqlLocks, SqlSessionLock, discard_connection, mysql_lock_name, pg_lock_key

__all__ = ["SqlSessionLock", "SqlStateStore"]

logger = logging.getLogger("agentrt.state")

_T = TypeVar("_T")

_KEY_CHARS = 255
_AGENT_CHARS = 100  # InnoDB keys hold at most 3072 bytes: 400 + 1020 + 1020 + 8 fit
_REPLY_CHARS = 100  # the runs key: 400 + 1020 + 1020 + 400 fit too
_HASH_MARK = "sha256:"
_PREFIX_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")
_ASYNC_DRIVERS = {"postgresql": ("asyncpg", "psycopg"), "mysql": ("asyncmy", "aiomysql")}
_CONNECT_TIMEOUT = 10
_ATTEMPTS = 4  # a transaction the database rolled back as a deadlock victim is retried this often
_DDL_LOCK_WAIT = 60
_PRUNE_BATCH = 200
"""Sessions `prune` looks at (and deletes, in one transaction) per round trip."""
_DEFAULT_LOCK_TTL = 30.0
_MIN_LOCK_TTL = 0.1


class _Key(sa.types.TypeDecorator[str]):
    """A session-key column: exact, binary comparison on every dialect."""

    impl = sa.String(_KEY_CHARS)
    cache_ok = True

    def __init__(self, chars: int = _KEY_CHARS) -> None:
        super().__init__(chars)
        self.chars = chars

    def load_dialect_impl(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name in ("mysql", "mariadb"):
            # utf8mb4 collations fold case and accents and ignore trailing spaces: compare bytes instead
            return dialect.type_descriptor(sa_mysql.VARBINARY(self.chars * 4))
        if dialect.name == "postgresql":
            return dialect.type_descriptor(sa.String(self.chars, collation="C"))
        return dialect.type_descriptor(sa.String(self.chars))

    def process_bind_param(self, value: str | None, dialect: Dialect) -> Any:
        if value is not None and dialect.name in ("mysql", "mariadb"):
            return value.encode()
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> str | None:
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value).decode()
        return None if value is None else str(value)


def _define_tables(prefix: str) -> tuple[sa.MetaData, sa.Table, sa.Table, sa.Table, sa.Table]:
    metadata = sa.MetaData()
    long_text = sa.Text().with_variant(sa_mysql.LONGTEXT(), "mysql", "mariadb")
    sessions = sa.Table(
        f"{prefix}sessions",
        metadata,
        sa.Column("agent", _Key(_AGENT_CHARS), primary_key=True, server_default=""),
        sa.Column("user_id", _Key(), primary_key=True),
        sa.Column("session_id", _Key(), primary_key=True),
        sa.Column("agent_full", long_text, nullable=True),
        sa.Column("user_id_full", long_text, nullable=True),
        sa.Column("session_id_full", long_text, nullable=True),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.Column("doc", long_text, nullable=False),
        sa.Column("message_count", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.Index(f"{prefix}sessions_by_user", "user_id", "updated_at"),
        sa.Index(f"{prefix}sessions_by_updated", "updated_at"),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
    )
    messages = sa.Table(
        f"{prefix}messages",
        metadata,
        sa.Column("agent", _Key(_AGENT_CHARS), primary_key=True, server_default=""),
        sa.Column("user_id", _Key(), primary_key=True),
        sa.Column("session_id", _Key(), primary_key=True),
        sa.Column("seq", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("body", long_text, nullable=False),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
    )
    # the user comes first in the key: delete_user finds a user's fences without another index
    fences = sa.Table(
        f"{prefix}session_fences",
        metadata,
        sa.Column("user_id", _Key(), primary_key=True),
        sa.Column("agent", _Key(_AGENT_CHARS), primary_key=True),
        sa.Column("session_id", _Key(), primary_key=True),
        sa.Column("agent_full", long_text, nullable=True),  # the originals name the session's lock
        sa.Column("user_id_full", long_text, nullable=True),
        sa.Column("session_id_full", long_text, nullable=True),
        sa.Column("token", sa.BigInteger(), nullable=False, autoincrement=False),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
    )
    runs = sa.Table(
        f"{prefix}runs",
        metadata,
        sa.Column("agent", _Key(_AGENT_CHARS), primary_key=True),
        sa.Column("user_id", _Key(), primary_key=True),
        sa.Column("session_id", _Key(), primary_key=True),
        sa.Column("reply_id", _Key(_REPLY_CHARS), primary_key=True),
        sa.Column("reply_id_full", long_text, nullable=True),
        sa.Column("started_at", sa.Double(), nullable=False),
        sa.Column("summary", long_text, nullable=False),
        sa.Column("body", long_text, nullable=False),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
    )
    return metadata, sessions, messages, fences, runs


def _key(value: str, what: str, chars: int = _KEY_CHARS) -> tuple[str, str | None]:
    """The key column value for an id, and the id itself when the key is its hash."""
    if not isinstance(value, str):
        raise UserError(f"{what} must be a string, not {type(value).__name__}")
    if "\x00" in value:
        raise UserError(f"{what} must not contain NUL characters")
    if len(value) <= chars and not value.startswith(_HASH_MARK):
        return value, None
    return _HASH_MARK + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest(), value


def _agent_key(agent: str) -> tuple[str, str | None]:
    return _key(check_agent(agent), "agent", _AGENT_CHARS)


class _Keys:
    """The key column values of one session, and the originals of hashed ones."""

    __slots__ = ("agent", "agent_full", "session", "session_full", "user", "user_full")

    def __init__(
        self,
        agent: str,
        user: str,
        session: str,
        agent_full: str | None,
        user_full: str | None,
        session_full: str | None,
    ) -> None:
        self.agent, self.user, self.session = agent, user, session
        self.agent_full, self.user_full, self.session_full = agent_full, user_full, session_full

    def key(self) -> dict[str, str]:
        return {"agent": self.agent, "user_id": self.user, "session_id": self.session}

    def columns(self) -> dict[str, str | None]:
        return {
            **self.key(),
            "agent_full": self.agent_full,
            "user_id_full": self.user_full,
            "session_id_full": self.session_full,
        }


class _CasFailedError(Exception):
    """The compare-and-set failed (raised inside the transaction, reported after it)."""


class _CreateRaceError(Exception):
    """An unconditional save lost a create race: run it again."""


class SqlStateStore(BaseStateStore):
    """Sessions in PostgreSQL or MySQL/MariaDB, through SQLAlchemy's async Core.

    Args:
        url: A SQLAlchemy URL: ``postgresql+asyncpg://user:pw@host:5432/db`` or
            ``mysql+asyncmy://user:pw@host:3306/db`` (``postgresql://`` and ``mysql://`` /
            ``mariadb://`` get those drivers). Leave it out when you pass `engine`.
        engine: Use this engine instead of creating one; the store never disposes it, and takes its
            session-lock connections from it too (one per held lock: size its pool accordingly).
        table_prefix: Prefix of the table names (letters, digits, underscores; ≤ 40 characters).
        pool_size: Connections kept by each of the store's two pools (data, and session locks);
            each may grow by as many again under load.
        lock_poll: Longest pause between two tries of a busy session lock, in seconds (tries start
            2 ms apart and back off, with jitter, up to this).
        idle_ttl: Seconds a session may go unwritten before it reads as missing and is deleted
            (see `BaseStateStore.idle_ttl`); None keeps sessions until deleted.
        lock_ttl: The session lock's lease, in seconds (at least 0.1; whole seconds on
            MySQL/MariaDB, rounded up): a holder pings its lock connection every third of it, and
            the server ends the connection, freeing the lock, once a holder (or waiter) has been
            paused that long (PostgreSQL 14 and later; MariaDB also ends a transaction of the
            store's own engine left idle that long). Writes stay fenced either way. None: no
            lease (a paused process keeps its lock until its connection dies).

    Raises:
        StateStoreError: The URL is invalid or names no supported async driver (the message never
            contains the password).
    """

    def __init__(
        self,
        url: str | URL | None = None,
        *,
        engine: AsyncEngine | None = None,
        table_prefix: str = "agentrt_",
        pool_size: int = 10,
        lock_poll: float = 0.05,
        idle_ttl: float | None = None,
        lock_ttl: float | None = _DEFAULT_LOCK_TTL,
    ) -> None:
        self._idle_ttl = check_idle_ttl(idle_ttl)
        if not isinstance(table_prefix, str) or not _PREFIX_RE.fullmatch(table_prefix):
            raise UserError(
                f"table_prefix {table_prefix!r} must be 1-40 letters, digits or underscores, not starting with a digit"
            )
        if pool_size < 1:
            raise UserError(f"pool_size must be at least 1, not {pool_size}")
        if not lock_poll > 0:
            raise UserError(f"lock_poll must be positive, not {lock_poll}")
        if lock_ttl is not None and (
            isinstance(lock_ttl, bool)
            or not isinstance(lock_ttl, (int, float))
            or not _MIN_LOCK_TTL <= lock_ttl < float("inf")
        ):
            raise UserError(f"lock_ttl must be None or a number of seconds, at least {_MIN_LOCK_TTL}, not {lock_ttl!r}")
        self._lock_ttl = None if lock_ttl is None else float(lock_ttl)
        self._prefix = table_prefix
        self._lock_poll = float(lock_poll)
        self._closed = False
        self._ready = False
        self._has_legacy = False
        self._ddl_lock = asyncio.Lock()
        self._local = LocalSessionLocks()
        if engine is not None and url is not None:
            raise UserError("give SqlStateStore a URL or an engine, not both")
        if engine is not None:
            self._url = engine.url
            self._engine = engine
            self._lock_engine = engine
            self._owns_engine = False
        else:
            if url is None:
                raise UserError(
                    "SqlStateStore needs a URL (postgresql+asyncpg://... or mysql+asyncmy://...) or an engine"
                )
            self._url = _parse_url(url)
            self._engine, self._lock_engine = _create_engines(self._url, pool_size)
            self._owns_engine = True
        backend = self._url.get_backend_name()
        self._pg = backend == "postgresql"
        self._mysql = backend in ("mysql", "mariadb")
        if not (self._pg or self._mysql):
            raise StateStoreError(
                f"SqlStateStore supports PostgreSQL and MySQL/MariaDB, not {backend!r} ({self._where})"
            )
        self._metadata, self._sessions, self._messages, self._fences, self._runs = _define_tables(table_prefix)
        url = self._url
        # names this store's sessions in `held_fence` (ids never hold NUL: it separates the parts)
        self._fence_scope = f"agentrt-sql\x00{backend}\x00{url.host}\x00{url.port}\x00{url.database}\x00{table_prefix}"
        self._db_locks = SqlLocks(
            self._lock_engine,
            shared=self._lock_engine is self._engine,
            pg=self._pg,
            database=self._url.database or "",
            prefix=table_prefix,
            poll=self._lock_poll,
            ttl=self._lock_ttl,
            check_open=self._check_open,
            prepare=self._ensure_tables,
            bump=self._bump_fence,
            error=self._error,
        )
        if self._mysql and self._owns_engine and self._lock_ttl is not None:
            _end_idle_transactions(self._engine, math.ceil(self._lock_ttl))
        self._fence_check, self._fence_bump = self._fence_statements()

    # -- public API ----------------------------------------------------------------------------

    @property
    def engine(self) -> AsyncEngine:
        """The engine the store reads and writes through."""
        return self._engine

    @property
    def table_prefix(self) -> str:
        """The prefix of the store's table names."""
        return self._prefix

    @property
    def lock_ttl(self) -> float | None:
        """The session lock's lease in seconds (None: no lease)."""
        return self._lock_ttl

    def __repr__(self) -> str:
        return f"SqlStateStore({self._url.render_as_string(hide_password=True)!r}, table_prefix={self._prefix!r})"

    async def __aenter__(self) -> Self:
        return self

    async def create_tables(self) -> None:
        """Create the tables if they do not exist (done automatically on first use)."""
        await self._ensure_tables()

    async def drop_tables(self) -> None:
        """Drop the store's tables and everything in them (for tests and uninstalls)."""
        self._check_open()

        async def run() -> None:
            async with self._engine.begin() as conn:
                await conn.run_sync(self._metadata.drop_all, checkfirst=True)

        await self._run("drop tables", run)
        self._ready = False

    async def load(self, user_id: str, session_id: str, *, agent: str = "") -> AgentState | None:
        """The stored state, or None if the session does not exist."""
        view = await self.load_view(user_id, session_id, agent=agent)
        return None if view is None else view.state

    async def load_view(
        self, user_id: str, session_id: str, *, agent: str = "", since_index: int = 0
    ) -> StateView | None:
        """The session with the messages from `since_index` on (``WHERE seq >= ?``), or None."""
        since_index = check_since_index(since_index)
        ak, _ = _agent_key(agent)
        uk, _ = _key(user_id, "user_id")
        sk, _ = _key(session_id, "session_id")
        await self._ensure_tables()
        cutoff = self._idle_cutoff()
        found = await self._run("load", lambda: self._load_tx(ak, uk, sk, since_index))
        if found is None:
            return None
        revision, raw_doc, count, created_at, updated_at, bodies = found
        if cutoff is not None and is_idle(updated_at, cutoff):
            lock = self._lock_params(agent, user_id, session_id)["main"]
            fence = self._held_token(ak, uk, sk)
            await self._run("delete an idle session", lambda: self._delete_tx(ak, uk, sk, lock, cutoff, fence))
            return None
        where = f"session {session_id!r} of user {user_id!r}"
        offset = min(since_index, count)
        if len(bodies) != count - offset:
            raise StateStoreError(
                f"stored {where} is corrupt: expected {count - offset} messages from {offset}, found {len(bodies)}"
            )
        doc = _parse_doc(raw_doc, where)
        try:
            state = decode_state(doc, [decode_message(body) for body in bodies])
        except (TypeError, ValueError) as exc:
            raise StateStoreError(f"stored {where} is corrupt: {exc}") from exc
        state.agent = agent
        state.user_id = user_id
        state.session_id = session_id
        state.revision = int(revision)
        state.created_at = float(created_at)
        state.updated_at = float(updated_at)
        return StateView(state, offset)

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
        """Append messages and set changed fields if `expected_revision` is current; returns the new revision."""
        expected_revision = check_expected_revision(expected_revision)
        ak, afull = _agent_key(agent)
        uk, ufull = _key(user_id, "user_id")
        sk, sfull = _key(session_id, "session_id")
        patch = _encode_patch(fields)
        bodies = [encode_message(m) for m in messages]
        await self._ensure_tables()
        keys = _Keys(ak, uk, sk, afull, ufull, sfull)
        fence = self._held_token(ak, uk, sk)

        async def run() -> int:
            return await self._append_tx(keys, agent, user_id, session_id, bodies, patch, expected_revision, fence)

        try:
            return await self._run("append", run)
        except _CasFailedError:
            raise await self._conflict(user_id, session_id, keys, expected_revision) from None

    async def save(self, state: AgentState, *, expected_revision: int | None = None) -> int:
        """Replace the whole state (messages too); returns the new revision."""
        expected_revision = check_expected_revision(expected_revision, optional=True)
        ak, afull = _agent_key(state.agent)
        uk, ufull = _key(state.user_id, "user_id")
        sk, sfull = _key(state.session_id, "session_id")
        doc = encode_state(state, include_messages=False)
        bodies = [encode_message(m) for m in state.messages]
        await self._ensure_tables()
        keys = _Keys(ak, uk, sk, afull, ufull, sfull)
        fence = self._held_token(ak, uk, sk)

        async def run() -> int:
            return await self._save_tx(keys, doc, bodies, float(state.created_at), expected_revision, fence)

        for _ in range(_ATTEMPTS):
            try:
                return await self._run("save", run)
            except _CasFailedError:
                assert expected_revision is not None
                raise await self._conflict(state.user_id, state.session_id, keys, expected_revision) from None
            except _CreateRaceError:
                continue
        raise StateStoreError(f"save of session {state.session_id!r} kept racing other writers; try again")

    async def delete(self, user_id: str, session_id: str, *, agent: str = "") -> bool:
        """Remove a session, its messages and (unless its lock is held) its fence row; True if it existed."""
        ak, _ = _agent_key(agent)
        uk, _ = _key(user_id, "user_id")
        sk, _ = _key(session_id, "session_id")
        await self._ensure_tables()
        lock = self._lock_params(agent, user_id, session_id)["main"]
        fence = self._held_token(ak, uk, sk)
        return await self._run("delete", lambda: self._delete_tx(ak, uk, sk, lock, None, fence))

    # -- run records ----------------------------------------------------------------------------

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
        """One transaction: the session row read ``FOR SHARE``, the record upserted, old and surplus ones deleted."""
        check_stored_run(run)
        max_runs = check_max_runs(max_runs)
        cutoff = retention_cutoff(older_than)
        ak, _ = _agent_key(agent)
        uk, _ = _key(user_id, "user_id")
        sk, _ = _key(session_id, "session_id")
        rk, rfull = _key(run.reply_id, "reply_id", _REPLY_CHARS)
        await self._ensure_tables()
        values = {
            "reply_id_full": rfull,
            "started_at": float(run.started_at),
            "summary": _json.dumps(run.summary),
            "body": run.body,
        }
        return await self._run("save a run record", lambda: self._save_run_tx(ak, uk, sk, rk, values, max_runs, cutoff))

    async def _save_run_tx(
        self, ak: str, uk: str, sk: str, rk: str, values: dict[str, Any], max_runs: int | None, cutoff: float | None
    ) -> bool:
        s, r = self._sessions, self._runs
        async with self._engine.begin() as conn:
            # shared row lock: a concurrent delete of the session waits for this record (or goes first)
            session = sa.select(s.c.revision).where(self._where_key(s, ak, uk, sk)).with_for_update(read=True)
            if (await conn.execute(session)).first() is None:
                return False
            row = {"agent": ak, "user_id": uk, "session_id": sk, "reply_id": rk, **values}
            if self._pg:
                insert = sa_pg.insert(r).values(**row)
                upsert: sa.Executable = insert.on_conflict_do_update(
                    index_elements=[r.c.agent, r.c.user_id, r.c.session_id, r.c.reply_id],
                    set_={name: insert.excluded[name] for name in values},
                )
            else:
                my_insert = sa_mysql.insert(r).values(**row)
                upsert = my_insert.on_duplicate_key_update(**{name: my_insert.inserted[name] for name in values})
            await conn.execute(upsert)
            where = sa.and_(self._where_key(r, ak, uk, sk), r.c.reply_id != rk)
            if cutoff is not None:
                await conn.execute(sa.delete(r).where(where, r.c.started_at < cutoff))
            if max_runs is not None:
                surplus = (
                    await conn.execute(
                        sa.select(r.c.reply_id)
                        .where(where)
                        .order_by(r.c.started_at.desc(), r.c.reply_id.desc())
                        .offset(max_runs - 1)
                    )
                ).scalars()
                doomed = list(surplus)
                if doomed:
                    await conn.execute(sa.delete(r).where(where, r.c.reply_id.in_(doomed)))
        return True

    async def get_run(self, user_id: str, session_id: str, reply_id: str, *, agent: str = "") -> StoredRun | None:
        """The record stored under `reply_id`, or None."""
        check_reply_id(reply_id)
        ak, _ = _agent_key(agent)
        uk, _ = _key(user_id, "user_id")
        sk, _ = _key(session_id, "session_id")
        rk, _ = _key(reply_id, "reply_id", _REPLY_CHARS)
        await self._ensure_tables()
        r = self._runs
        stmt = sa.select(r.c.started_at, r.c.summary, r.c.body).where(
            self._where_key(r, ak, uk, sk), r.c.reply_id == rk
        )

        async def run() -> tuple[Any, ...] | None:
            async with self._engine.connect() as conn:
                row = (await conn.execute(stmt)).first()
                return None if row is None else tuple(row)

        found = await self._run("read a run record", run)
        if found is None:
            return None
        started, summary, body = found
        return StoredRun(reply_id, float(started), _summary(summary), str(body))

    async def list_runs(
        self, user_id: str, session_id: str, *, agent: str = "", limit: int | None = None
    ) -> list[RunInfo]:
        """The session's runs, newest first (their summaries)."""
        limit = check_prune_limit(limit)
        ak, _ = _agent_key(agent)
        uk, _ = _key(user_id, "user_id")
        sk, _ = _key(session_id, "session_id")
        await self._ensure_tables()
        r = self._runs
        stmt = (
            sa.select(r.c.reply_id, r.c.reply_id_full, r.c.started_at, r.c.summary)
            .where(self._where_key(r, ak, uk, sk))
            .order_by(r.c.started_at.desc(), r.c.reply_id.desc())
        )
        if limit is not None:
            stmt = stmt.limit(limit)

        async def run() -> list[tuple[Any, ...]]:
            async with self._engine.connect() as conn:
                return [tuple(row) for row in (await conn.execute(stmt)).all()]

        rows = await self._run("list run records", run)
        return [
            RunInfo(full if full is not None else key, float(started), _summary(summary))
            for key, full, started, summary in rows
        ]

    async def list_sessions(self, user_id: str, *, agent: str | None = None) -> list[SessionInfo]:
        """The user's sessions (of every agent, or of `agent`), most recently updated first."""
        uk, _ = _key(user_id, "user_id")
        ak = None if agent is None else _agent_key(agent)[0]
        await self._ensure_tables()
        s = self._sessions
        stmt = sa.select(
            s.c.agent,
            s.c.agent_full,
            s.c.session_id,
            s.c.session_id_full,
            s.c.message_count,
            s.c.revision,
            s.c.updated_at,
        ).where(s.c.user_id == uk)
        if ak is not None:
            stmt = stmt.where(s.c.agent == ak)
        stmt = stmt.order_by(s.c.updated_at.desc(), s.c.agent, s.c.session_id)

        async def run() -> list[tuple[Any, ...]]:
            async with self._engine.connect() as conn:
                return [tuple(row) for row in (await conn.execute(stmt)).all()]

        cutoff = self._idle_cutoff()
        rows = await self._run("list sessions", run)
        infos = [
            SessionInfo(
                agent=afull if afull is not None else akey,
                user_id=user_id,
                session_id=full if full is not None else key,
                message_count=int(count),
                revision=int(revision),
                updated_at=float(updated_at),
            )
            for akey, afull, key, full, count, revision, updated_at in rows
        ]
        if cutoff is not None and any(is_idle(info.updated_at, cutoff) for info in infos):
            await self._prune(cutoff, user_id=user_id, agent=agent, limit=None, dry_run=False, skip_locked=True)
            infos = [info for info in infos if not is_idle(info.updated_at, cutoff)]
        return infos

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
        """Oldest first, `_PRUNE_BATCH` sessions per round: find them, drop the locked, delete the rest.

        The candidates come from the index on ``updated_at`` (or ``(user_id, updated_at)``); a
        session is locked when its database lock is held by any process (PostgreSQL: one look at
        ``pg_locks`` per round; MySQL/MariaDB: ``IS_USED_LOCK`` of each candidate, in one
        statement). Each round's deletions are one transaction that checks ``updated_at`` again,
        so a session written meanwhile stays.
        """
        await self._ensure_tables()
        s = self._sessions
        conditions: list[sa.ColumnElement[bool]] = []
        if cutoff is not None:
            conditions.append(s.c.updated_at < cutoff)
        if user_id is not None:
            conditions.append(s.c.user_id == _key(user_id, "user_id")[0])
        if agent is not None:
            conditions.append(s.c.agent == _agent_key(agent)[0])
        count = skipped = 0
        while limit is None or count < limit:
            batch = _PRUNE_BATCH if limit is None else min(_PRUNE_BATCH, limit - count)
            stmt = (
                sa.select(s.c.agent, s.c.agent_full, s.c.user_id, s.c.user_id_full, s.c.session_id, s.c.session_id_full)
                .where(*conditions)
                .order_by(s.c.updated_at, s.c.agent, s.c.user_id, s.c.session_id)
                .limit(batch)
                .offset(skipped)
            )

            async def find(stmt: sa.Select[Any] = stmt) -> list[tuple[Any, ...]]:
                async with self._engine.connect() as conn:
                    return [tuple(row) for row in (await conn.execute(stmt)).all()]

            rows = await self._run("find sessions to prune", find)
            if not rows:
                break
            locks = self._row_locks(rows)
            locked = await self._locked(locks) if skip_locked else set()
            free = [(row[0], row[2], row[4], locks[i]) for i, row in enumerate(rows) if i not in locked]
            skipped += len(locked)
            if dry_run:
                skipped += len(free)  # nothing goes: page on past them
                count += len(free)
            elif free:

                async def delete(keys: list[tuple[str, str, str, Any]] = free) -> int:
                    return await self._prune_tx(keys, cutoff)

                # a session written since it was found is not deleted, and no longer matches
                count += await self._run("prune sessions", delete)
        if not dry_run:
            await self._prune_fences(cutoff, user_id=user_id, agent=agent)
        return count

    def _row_locks(self, rows: Sequence[tuple[Any, ...]]) -> list[Any]:
        """The main lock name of each row (agent, agent_full, user_id, user_id_full, session_id, session_id_full)."""
        return [
            self._lock_params(
                afull if afull is not None else akey,
                ufull if ufull is not None else ukey,
                sfull if sfull is not None else skey,
            )["main"]
            for akey, afull, ukey, ufull, skey, sfull in rows
        ]

    async def _prune_fences(self, cutoff: float | None, *, user_id: str | None, agent: str | None) -> None:
        """Delete the fence rows left without a session (last locked before `cutoff`) whose lock is free.

        Such rows come from sessions locked but never written, or deleted while locked. A token
        holds the database clock (microseconds) of its latest acquisition, so it dates the row.
        """
        f, s = self._fences, self._sessions
        conditions: list[sa.ColumnElement[bool]] = [
            ~sa.exists().where(s.c.agent == f.c.agent, s.c.user_id == f.c.user_id, s.c.session_id == f.c.session_id)
        ]
        if cutoff is not None:
            conditions.append(f.c.token < int(cutoff * 1_000_000))
        if user_id is not None:
            conditions.append(f.c.user_id == _key(user_id, "user_id")[0])
        if agent is not None:
            conditions.append(f.c.agent == _agent_key(agent)[0])
        skipped = 0
        while True:
            stmt = (
                sa.select(f.c.agent, f.c.agent_full, f.c.user_id, f.c.user_id_full, f.c.session_id, f.c.session_id_full)
                .where(*conditions)
                .order_by(f.c.user_id, f.c.agent, f.c.session_id)
                .limit(_PRUNE_BATCH)
                .offset(skipped)
            )

            async def find(stmt: sa.Select[Any] = stmt) -> list[tuple[Any, ...]]:
                async with self._engine.connect() as conn:
                    return [tuple(row) for row in (await conn.execute(stmt)).all()]

            rows = await self._run("find fences to prune", find)
            if not rows:
                return
            entries = [(row[0], row[2], row[4], lock) for row, lock in zip(rows, self._row_locks(rows), strict=True)]

            async def drop(entries: list[tuple[str, str, str, Any]] = entries) -> int:
                async with self._engine.begin() as conn:
                    return await self._drop_fences(conn, entries)

            skipped += len(rows) - await self._run("prune fences", drop)  # the locked ones stay

    async def _locked(self, params: list[Any]) -> set[int]:
        """The indexes of the lock names (`_row_locks`) that are held."""
        if self._pg:
            # a bigint advisory lock shows in pg_locks as classid (high 32 bits), objid (low), objsubid 1
            query = sa.text(
                "SELECT classid::bigint, objid::bigint FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1"
                " AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            )

            async def held_keys() -> set[int]:
                async with self._engine.connect() as conn:
                    found = set()
                    for high, low in (await conn.execute(query)).all():
                        value = (int(high) << 32) | int(low)
                        found.add(value - (1 << 64) if value >= 1 << 63 else value)
                    return found

            held = await self._run("look at session locks", held_keys)
            return {i for i, key in enumerate(params) if key in held}
        names = {f"l{i}": name for i, name in enumerate(params)}
        used = sa.text("SELECT " + ", ".join(f"IS_USED_LOCK(:{bind})" for bind in names))

        async def holders() -> tuple[Any, ...]:
            async with self._engine.connect() as conn:
                return tuple((await conn.execute(used, names)).one())

        return {i for i, holder in enumerate(await self._run("look at session locks", holders)) if holder is not None}

    def session_lock(
        self, user_id: str, session_id: str, *, timeout: float | None = None, agent: str = ""
    ) -> SqlSessionLock:
        """``async with store.session_lock(user, session) as hold:`` - one caller at a time, across processes.

        Raises `SessionBusyError` if the lock is not acquired within `timeout` seconds (None: wait).
        ``hold.fencing_token`` strictly increases with each acquisition of the session; the store's
        writes to the session within the body are refused (`FencedError`) once another process has
        taken the lock over (after this one was paused past `lock_ttl`).
        """
        _agent_key(agent)
        _key(user_id, "user_id")
        _key(session_id, "session_id")
        return SqlSessionLock(self._local, user_id, session_id, timeout, locks=self._db_locks, agent=agent)

    # -- the legacy namespace ------------------------------------------------------------------

    @property
    def has_legacy_sessions(self) -> bool:
        """Whether the tables held agent-``""`` sessions (e.g. from before the agent column) when opened.

        Known once the store has run its first operation; refreshed by `migrate_legacy`.
        """
        return self._has_legacy

    async def _any_legacy(self) -> bool:
        s = self._sessions

        async def run() -> bool:
            async with self._engine.connect() as conn:
                return (
                    await conn.execute(sa.select(sa.literal(1)).where(s.c.agent == "").limit(1))
                ).first() is not None

        return await self._run("look for legacy sessions", run)

    async def _recheck_legacy(self) -> None:
        await self._ensure_tables()
        self._has_legacy = await self._any_legacy()

    async def _legacy_sessions(self, user_id: str | None) -> list[tuple[str, str]]:
        await self._ensure_tables()
        s = self._sessions
        stmt = sa.select(s.c.user_id, s.c.user_id_full, s.c.session_id, s.c.session_id_full).where(s.c.agent == "")
        if user_id is not None:
            stmt = stmt.where(s.c.user_id == _key(user_id, "user_id")[0])

        async def run() -> list[tuple[Any, ...]]:
            async with self._engine.connect() as conn:
                return [tuple(row) for row in (await conn.execute(stmt)).all()]

        rows = await self._run("list legacy sessions", run)
        return [
            (ufull if ufull is not None else u, sfull if sfull is not None else sid) for u, ufull, sid, sfull in rows
        ]

    async def _move_legacy(self, user_id: str, session_id: str, agent: str, target: str) -> bool | None:
        # the key columns change in place, in one transaction: revision and timestamps are kept
        ak, afull = _agent_key(agent)
        uk, _ = _key(user_id, "user_id")
        sk, _ = _key(session_id, "session_id")
        tk, tfull = _key(target, "session_id")
        s, m = self._sessions, self._messages
        legacy_lock = self._lock_params("", user_id, session_id)["main"]
        await self._ensure_tables()

        async def run() -> bool | None:
            async with self._engine.begin() as conn:
                taken = (await conn.execute(sa.select(s.c.revision).where(self._where_key(s, ak, uk, tk)))).first()
                if taken is not None:
                    return False
                try:
                    result = await conn.execute(
                        sa.update(s)
                        .where(self._where_key(s, "", uk, sk))
                        .values(agent=ak, agent_full=afull, session_id=tk, session_id_full=tfull)
                    )
                except sa_exc.IntegrityError:
                    return False  # created meanwhile
                if result.rowcount != 1:
                    return None  # moved or deleted meanwhile
                await conn.execute(sa.update(m).where(self._where_key(m, "", uk, sk)).values(agent=ak, session_id=tk))
                runs = self._runs
                await conn.execute(
                    sa.update(runs).where(self._where_key(runs, "", uk, sk)).values(agent=ak, session_id=tk)
                )
                await self._drop_fences(conn, [("", uk, sk, legacy_lock)])  # the old address is gone
            return True

        return await self._run("move a legacy session", run)

    async def close(self) -> None:
        """Dispose of the engines the store created (never one passed in). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._owns_engine:
            await self._engine.dispose()
            if self._lock_engine is not self._engine:
                await self._lock_engine.dispose()

    # -- transactions --------------------------------------------------------------------------

    def _where_key(self, table: sa.Table, ak: str, uk: str, sk: str) -> sa.ColumnElement[bool]:
        return sa.and_(table.c.agent == ak, table.c.user_id == uk, table.c.session_id == sk)

    async def _load_tx(
        self, ak: str, uk: str, sk: str, since: int = 0
    ) -> tuple[int, str, int, float, float, list[str]] | None:
        s, m = self._sessions, self._messages
        async with self._engine.connect() as conn:
            if self._pg:  # one snapshot for both reads (MySQL engines we create default to it)
                await conn.execution_options(isolation_level="REPEATABLE READ")
            async with conn.begin():
                row = (
                    await conn.execute(
                        sa.select(s.c.revision, s.c.doc, s.c.message_count, s.c.created_at, s.c.updated_at).where(
                            self._where_key(s, ak, uk, sk)
                        )
                    )
                ).first()
                if row is None:
                    return None
                revision, doc, count, created_at, updated_at = row
                # `seq < count` keeps reads consistent even under READ COMMITTED (a user's engine)
                bodies = (
                    await conn.execute(
                        sa.select(m.c.body)
                        .where(self._where_key(m, ak, uk, sk), m.c.seq >= since, m.c.seq < count)
                        .order_by(m.c.seq)
                    )
                ).scalars()
                return int(revision), str(doc), int(count), float(created_at), float(updated_at), list(bodies)

    async def _append_tx(
        self,
        keys: _Keys,
        agent: str,
        user_id: str,
        session_id: str,
        bodies: list[str],
        patch: dict[str, Any] | None,
        expected: int,
        fence: int | None,
    ) -> int:
        s, m = self._sessions, self._messages
        n = len(bodies)
        now = time.time()
        revision = expected + 1
        async with self._engine.begin() as conn:
            if fence is not None:
                await self._check_fence(conn, keys.agent, keys.user, keys.session, fence)
            if expected == 0:
                doc = encode_state(
                    AgentState(agent=agent, user_id=user_id, session_id=session_id, created_at=now),
                    include_messages=False,
                )
                doc.update(patch or {}, revision=revision, updated_at=now)
                try:
                    await conn.execute(
                        sa.insert(s).values(
                            **keys.columns(),
                            revision=revision,
                            doc=_json.dumps(doc),
                            message_count=n,
                            created_at=now,
                            updated_at=now,
                        )
                    )
                except sa_exc.IntegrityError:
                    raise _CasFailedError from None
                base = 0
            else:
                where = self._where_key(s, keys.agent, keys.user, keys.session)
                cas = (
                    sa.update(s)
                    .where(where, s.c.revision == expected)
                    .values(revision=s.c.revision + 1, message_count=s.c.message_count + n, updated_at=now)
                )
                wanted = [s.c.message_count, s.c.doc] if patch else [s.c.message_count]
                if self._pg:
                    row = (await conn.execute(cas.returning(*wanted))).first()
                    if row is None:
                        raise _CasFailedError
                else:
                    if (await conn.execute(cas)).rowcount != 1:
                        raise _CasFailedError
                    row = (await conn.execute(sa.select(*wanted).where(where))).one()
                base = int(row[0]) - n
                if patch:
                    doc = _parse_doc(row[1], f"session {session_id!r} of user {user_id!r}")
                    doc.update(patch, revision=revision, updated_at=now)
                    await conn.execute(sa.update(s).where(where).values(doc=_json.dumps(doc)))
            if bodies:
                await conn.execute(
                    sa.insert(m), [{**keys.key(), "seq": base + i, "body": b} for i, b in enumerate(bodies)]
                )
        return revision

    async def _save_tx(
        self,
        keys: _Keys,
        doc: dict[str, Any],
        bodies: list[str],
        created_at: float,
        expected: int | None,
        fence: int | None,
    ) -> int:
        s, m = self._sessions, self._messages
        now = time.time()
        where = self._where_key(s, keys.agent, keys.user, keys.session)
        async with self._engine.begin() as conn:
            if fence is not None:
                await self._check_fence(conn, keys.agent, keys.user, keys.session, fence)
            if expected is None:
                row = (await conn.execute(sa.select(s.c.revision).where(where).with_for_update())).first()
                current = 0 if row is None else int(row[0])
            else:
                current = expected
            revision = current + 1
            values = {
                "revision": revision,
                "doc": _json.dumps({**doc, "revision": revision, "created_at": created_at, "updated_at": now}),
                "message_count": len(bodies),
                "created_at": created_at,
                "updated_at": now,
            }
            if current == 0:
                try:
                    await conn.execute(sa.insert(s).values(**keys.columns(), **values))
                except sa_exc.IntegrityError:
                    raise (_CreateRaceError if expected is None else _CasFailedError) from None
            else:
                result = await conn.execute(sa.update(s).where(where, s.c.revision == current).values(**values))
                if result.rowcount != 1:
                    raise _CreateRaceError if expected is None else _CasFailedError
                await conn.execute(sa.delete(m).where(self._where_key(m, keys.agent, keys.user, keys.session)))
            if bodies:
                await conn.execute(sa.insert(m), [{**keys.key(), "seq": i, "body": b} for i, b in enumerate(bodies)])
        return revision

    async def _delete_tx(
        self, ak: str, uk: str, sk: str, lock: Any, cutoff: float | None = None, fence: int | None = None
    ) -> bool:
        """Delete a session (with `cutoff`: only if it was last written before it); True if it went.

        Its fence row goes too unless the session's lock (named `lock`) is held; with a held
        `fence` token, nothing is deleted if a later holder has taken the lock.
        """
        s, m = self._sessions, self._messages
        where = self._where_key(s, ak, uk, sk)
        if cutoff is not None:
            where = sa.and_(where, s.c.updated_at < cutoff)
        async with self._engine.begin() as conn:
            # the fence row, then the session row: the lock order of append and save (no deadlock)
            if fence is not None:
                await self._check_fence(conn, ak, uk, sk, fence)
            await self._drop_fences(conn, [(ak, uk, sk, lock)])
            result = await conn.execute(sa.delete(s).where(where))
            if cutoff is not None and result.rowcount == 0:
                return False
            await conn.execute(sa.delete(m).where(self._where_key(m, ak, uk, sk)))
            await conn.execute(sa.delete(self._runs).where(self._where_key(self._runs, ak, uk, sk)))
            return result.rowcount > 0

    async def _prune_tx(self, keys: list[tuple[str, str, str, Any]], cutoff: float | None) -> int:
        """Delete the sessions of `keys` (key columns, lock name) still last written before `cutoff`; how many went.

        Their fence rows go too (those of sessions whose lock is free).
        """
        s, m = self._sessions, self._messages
        async with self._engine.begin() as conn:
            # fence rows, session rows, then their messages: the lock order of append, save and delete
            await self._drop_fences(conn, keys)
            where = sa.or_(*(self._where_key(s, *key[:3]) for key in keys))
            if cutoff is not None:
                where = sa.and_(where, s.c.updated_at < cutoff)
            columns = (s.c.agent, s.c.user_id, s.c.session_id)
            if self._pg:
                gone = [tuple(row) for row in (await conn.execute(sa.delete(s).where(where).returning(*columns))).all()]
            else:
                found = await conn.execute(sa.select(*columns).where(where).with_for_update())
                gone = [tuple(row) for row in found.all()]
                if gone:
                    await conn.execute(sa.delete(s).where(sa.or_(*(self._where_key(s, *key) for key in gone))))
            if gone:
                await conn.execute(sa.delete(m).where(sa.or_(*(self._where_key(m, *key) for key in gone))))
                runs = self._runs
                await conn.execute(sa.delete(runs).where(sa.or_(*(self._where_key(runs, *key) for key in gone))))
        return len(gone)

    async def _conflict(self, user_id: str, session_id: str, keys: _Keys, expected: int) -> StateConflictError:
        s = self._sessions
        where = self._where_key(s, keys.agent, keys.user, keys.session)

        async def run() -> int:
            async with self._engine.connect() as conn:
                value = (await conn.execute(sa.select(s.c.revision).where(where))).scalar()
                return 0 if value is None else int(value)

        current = await self._run("read revision", run)
        return StateConflictError(
            f"session {session_id!r} of user {user_id!r} is at revision {current}, not {expected}"
        )

    # -- fencing -------------------------------------------------------------------------------

    def _fence_key(self, ak: str, uk: str, sk: str) -> str:
        """The `held_fence` key of a session of this store (its key columns)."""
        return f"{self._fence_scope}\x00{ak}\x00{uk}\x00{sk}"

    def _held_token(self, ak: str, uk: str, sk: str) -> int | None:
        """The fencing token this task holds for the session, if it holds the session's lock."""
        held = held_fence.get()
        if held is None or held[0] != self._fence_key(ak, uk, sk):
            return None
        return held[1]

    def _fence_statements(self) -> tuple[sa.Select[Any], sa.Executable]:
        """The fence check and the fence bump, built once (bound per session: ``f_agent``, ``f_user``, ...).

        The bump sets the token to ``max(previous + 1, the database clock in microseconds)``: it
        increases with every acquisition, and a row deleted and created again starts above every
        earlier token. The check reads the row ``FOR SHARE``; on PostgreSQL, with a lease, the
        same statement bounds the transaction's idle time by the ttl.
        """
        f = self._fences
        key = {
            "agent": sa.bindparam("f_agent", type_=f.c.agent.type),
            "user_id": sa.bindparam("f_user", type_=f.c.user_id.type),
            "session_id": sa.bindparam("f_session", type_=f.c.session_id.type),
        }
        columns: list[sa.ColumnElement[Any]] = [f.c.token]
        if self._pg and self._lock_ttl is not None:
            ms = str(max(1, math.ceil(self._lock_ttl * 1000)))
            columns.append(sa.func.set_config("idle_in_transaction_session_timeout", ms, sa.true()))
        where = sa.and_(*(f.c[name] == value for name, value in key.items()))
        check = sa.select(*columns).where(where).with_for_update(read=True)
        values: dict[str, Any] = {
            **key,
            "agent_full": sa.bindparam("f_agent_full", type_=f.c.agent_full.type),
            "user_id_full": sa.bindparam("f_user_full", type_=f.c.user_id_full.type),
            "session_id_full": sa.bindparam("f_session_full", type_=f.c.session_id_full.type),
        }
        bump: sa.Executable
        if self._pg:
            now_us = sa.cast(sa.extract("epoch", sa.func.clock_timestamp()) * 1_000_000, sa.BigInteger)
            insert = sa_pg.insert(f).values(**values, token=now_us)
            # committed without waiting for the WAL flush (set for this statement's transaction only):
            # a bump lost in a crash is harmless, the next one is above it by the clock, and a write
            # made under it is refused (its token is no longer the row's); a durable write made under
            # it flushes the bump first (WAL order)
            bump = insert.on_conflict_do_update(
                index_elements=[f.c.user_id, f.c.agent, f.c.session_id],
                set_={"token": sa.func.greatest(f.c.token + 1, insert.excluded.token)},
            ).returning(f.c.token, sa.func.set_config("synchronous_commit", "off", sa.true()))
        else:
            my_now = sa.func.timestampdiff(
                sa.literal_column("MICROSECOND"), sa.literal_column("'1970-01-01 00:00:00'"), sa.func.utc_timestamp(6)
            )
            # LAST_INSERT_ID(x) hands x back to this connection (as lastrowid): no read after the write
            bump = (
                sa_mysql.insert(f)
                .values(**values, token=sa.func.last_insert_id(my_now))
                .on_duplicate_key_update(token=sa.func.last_insert_id(sa.func.greatest(f.c.token + 1, my_now)))
            )
        return check, bump

    async def _bump_fence(self, conn: AsyncConnection, agent: str, user_id: str, session_id: str) -> tuple[str, int]:
        """Hand out the session's next fencing token, on the lock connection (autocommit) that holds its lock."""
        ak, afull = _agent_key(agent)
        uk, ufull = _key(user_id, "user_id")
        sk, sfull = _key(session_id, "session_id")
        params = {
            "f_agent": ak,
            "f_user": uk,
            "f_session": sk,
            "f_agent_full": afull,
            "f_user_full": ufull,
            "f_session_full": sfull,
        }
        result = await conn.execute(self._fence_bump, params)
        token = int(result.one()[0]) if self._pg else int(result.lastrowid)
        return self._fence_key(ak, uk, sk), token

    async def _check_fence(self, conn: AsyncConnection, ak: str, uk: str, sk: str, token: int) -> None:
        """In a write transaction: `FencedError` unless the session's fence row still holds `token`.

        The share lock keeps a takeover's bump waiting until this transaction ends (or makes this
        read wait for the bump and see its token). On PostgreSQL, with a lease, the statement also
        bounds the transaction's idle time by the ttl, so a holder paused inside it cannot keep its
        row locks (and the next holder waiting on them) for longer.
        """
        row = (await conn.execute(self._fence_check, {"f_agent": ak, "f_user": uk, "f_session": sk})).first()
        current = None if row is None else int(row[0])
        if current != token:
            now = "its fence is gone" if current is None else f"its fencing token is {current}, this holder's {token}"
            raise FencedError(
                f"session {sk!r} of user {uk!r}: the session lock was taken over ({now}); "
                "this process may no longer write to it"
            )

    async def _drop_fences(self, conn: AsyncConnection, entries: Sequence[tuple[str, str, str, Any]]) -> int:
        """Delete the fence rows of `entries` (key columns, main lock name) whose lock is free; how many went.

        The lock is checked with the row locked (MySQL/MariaDB: ``IS_FREE_LOCK``) or taken until the
        commit (PostgreSQL: ``pg_try_advisory_xact_lock``), so a holder's row never goes: a later
        acquisition creates the row again with a higher token.
        """
        if not entries:
            return 0
        f = self._fences
        terms = []
        for ak, uk, sk, lock in entries:
            free: sa.ColumnElement[bool]
            if self._pg:
                free = sa.func.pg_try_advisory_xact_lock(sa.literal(lock, sa.BigInteger()), type_=sa.Boolean())
            else:
                free = sa.func.is_free_lock(sa.literal(lock, sa.String())) == 1
            terms.append(sa.and_(self._where_key(f, ak, uk, sk), free))
        return int((await conn.execute(sa.delete(f).where(sa.or_(*terms)))).rowcount)

    # -- plumbing ------------------------------------------------------------------------------

    @property
    def _where(self) -> str:
        url = self._url
        host = url.host or "localhost"
        port = f":{url.port}" if url.port else ""
        return f"{url.get_backend_name()} database {url.database or ''!r} on {host}{port}"

    def _check_open(self) -> None:
        if self._closed:
            raise UserError(f"{self!r} is closed")

    async def _ensure_tables(self) -> None:
        self._check_open()
        if self._ready:
            return
        async with self._ddl_lock:
            if self._ready:
                return
            await self._run("create tables", self._create_tables)
            self._has_legacy = await self._any_legacy()
            self._ready = True

    async def _create_tables(self) -> None:
        # a database-wide lock keeps processes starting together from racing on CREATE TABLE
        name = mysql_lock_name(self._url.database or "", "ddl", self._prefix)
        async with self._engine.connect() as conn:
            if self._pg:
                await conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": pg_lock_key("ddl", self._prefix)})
                await conn.run_sync(self._metadata.create_all, checkfirst=True)
                await self._add_updated_index(conn)
                await self._add_agent_column(conn)
                await conn.commit()
                return
            got = (await conn.execute(sa.text("SELECT GET_LOCK(:n, :t)"), {"n": name, "t": _DDL_LOCK_WAIT})).scalar()
            if got != 1:
                raise StateStoreError(f"could not get the table-creation lock on {self._where} in {_DDL_LOCK_WAIT} s")
            try:
                await conn.run_sync(self._metadata.create_all, checkfirst=True)
                await conn.commit()
                await self._add_updated_index(conn)
                await self._add_agent_column(conn)
            finally:
                try:
                    await conn.execute(sa.text("SELECT RELEASE_LOCK(:n)"), {"n": name})
                except BaseException:
                    await discard_connection(conn)  # closing the connection frees the lock
                    raise

    async def _add_updated_index(self, conn: AsyncConnection) -> None:
        """Give tables of earlier versions the index `prune` reads (under the DDL lock; idempotent)."""
        index = next(ix for ix in self._sessions.indexes if ix.name == f"{self._prefix}sessions_by_updated")

        def add(sync_conn: sa.Connection) -> None:
            names = {ix["name"] for ix in sa.inspect(sync_conn).get_indexes(self._sessions.name)}
            if index.name not in names:
                logger.info("adding index %s (for pruning idle sessions)", index.name)
                index.create(sync_conn)

        await conn.run_sync(add)

    async def _add_agent_column(self, conn: AsyncConnection) -> None:
        """Migrate tables of earlier versions: add ``agent`` (default '') and put it in the primary keys.

        Runs under the DDL lock. Each table's change is a single ``ALTER TABLE`` (atomic on every
        supported server), checked per table, so an interrupted migration resumes where it stopped.
        """

        def missing(sync_conn: sa.Connection) -> list[tuple[sa.Table, str | None]]:
            inspector = sa.inspect(sync_conn)
            todo: list[tuple[sa.Table, str | None]] = []
            for table in (self._sessions, self._messages):
                if "agent" not in {column["name"] for column in inspector.get_columns(table.name)}:
                    todo.append((table, inspector.get_pk_constraint(table.name).get("name")))
            return todo

        quote = conn.dialect.identifier_preparer.quote
        agent_type = f'VARCHAR({_AGENT_CHARS}) COLLATE "C"' if self._pg else f"VARBINARY({_AGENT_CHARS * 4})"
        for table, pk_name in await conn.run_sync(missing):
            columns = ["agent", "user_id", "session_id"] + (["seq"] if table is self._messages else [])
            changes = [f"ADD COLUMN agent {agent_type} NOT NULL DEFAULT ''"]
            if table is self._sessions:
                changes.append(f"ADD COLUMN agent_full {'TEXT' if self._pg else 'LONGTEXT'} NULL")
            if self._pg:
                changes.append(f"DROP CONSTRAINT {quote(pk_name or table.name + '_pkey')}")
            else:
                changes.append("DROP PRIMARY KEY")
            changes.append(f"ADD PRIMARY KEY ({', '.join(columns)})")
            logger.info("migrating table %s: sessions now belong to an agent", table.name)
            await conn.execute(sa.text(f"ALTER TABLE {quote(table.name)} {', '.join(changes)}"))
        await conn.commit()

    async def _run(self, what: str, op: Callable[[], Awaitable[_T]]) -> _T:
        """Run one transaction, retrying deadlock victims (rolled back: safe), mapping driver errors."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return await op()
            except (AgentrtError, _CasFailedError, _CreateRaceError):
                raise
            except sa_exc.DBAPIError as exc:
                if attempt < _ATTEMPTS and _is_deadlock(exc):
                    await asyncio.sleep(random.uniform(0.002, 0.01) * attempt)
                    continue
                raise self._error(what, exc) from exc
            except (sa_exc.SQLAlchemyError, OSError) as exc:
                raise self._error(what, exc) from exc

    def _error(self, what: str, exc: BaseException) -> StateStoreError:
        cause: BaseException = exc
        if isinstance(exc, sa_exc.DBAPIError) and exc.orig is not None:
            cause = exc.orig
        reason = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
        reason = f"{type(cause).__name__}: {reason[:300]}" if reason else type(cause).__name__
        password = self._url.password
        if password:
            reason = reason.replace(str(password), "***")
        return StateStoreError(f"SQL state store: {what} failed on {self._where}: {reason}")

    def _lock_params(self, agent: str, user_id: str, session_id: str) -> dict[str, Any]:
        return self._db_locks.params(agent, user_id, session_id)


def _end_idle_transactions(engine: AsyncEngine, seconds: int) -> None:
    """MariaDB: have the server end a data connection left idle inside a transaction for `seconds`.

    A holder paused in the middle of a write transaction would otherwise keep its row locks, and
    the next holder waiting on them, until the connection's ``wait_timeout`` (hours). Set on the
    store's own engine only (never on a caller's); MySQL has no such setting.
    """

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        # known: the engine sets its dialect up on the first connection, before this runs
        if not getattr(engine.dialect, "is_mariadb", False):
            return
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"SET SESSION idle_transaction_timeout = {int(seconds)}")
        finally:
            cursor.close()

    sa.event.listen(engine.sync_engine, "connect", on_connect)


def _is_deadlock(exc: sa_exc.DBAPIError) -> bool:
    orig = exc.orig
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if code in ("40001", "40P01"):  # serialization failure, deadlock detected
        return True
    args: Any = getattr(orig, "args", ())
    return bool(args) and args[0] == 1213  # ER_LOCK_DEADLOCK


def _encode_patch(fields: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not fields:
        return None
    unknown = [name for name in fields if name not in STATE_FIELDS]
    if unknown:
        raise UserError(f"unknown AgentState field {unknown[0]!r}; known: {', '.join(STATE_FIELDS)}")
    return encode_fields(fields)


def _summary(raw: Any) -> dict[str, Any]:
    try:
        value = _json.loads(raw)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _parse_doc(raw: Any, where: str) -> dict[str, Any]:
    try:
        doc = _json.loads(raw)
    except (TypeError, ValueError) as exc:
        raise StateStoreError(f"stored state of {where} is corrupt: {exc}") from exc
    if not isinstance(doc, dict):
        raise StateStoreError(f"stored state of {where} is not a JSON object")
    return doc


def _parse_url(url: str | URL) -> URL:
    try:
        parsed = make_url(url)
    except Exception:  # the text may hold a password: do not echo it
        raise StateStoreError(
            "invalid SQL state store URL; expected e.g. postgresql+asyncpg://user@host:5432/db "
            "or mysql+asyncmy://user@host:3306/db"
        ) from None
    backend = parsed.get_backend_name()
    if backend == "postgres":
        backend = "postgresql"
    family = "mysql" if backend in ("mysql", "mariadb") else backend
    drivers = _ASYNC_DRIVERS.get(family)
    shown = parsed.render_as_string(hide_password=True)
    if drivers is None:
        raise StateStoreError(f"SqlStateStore supports postgresql+asyncpg:// and mysql+asyncmy:// URLs, not {shown!r}")
    driver = parsed.get_driver_name() if "+" in parsed.drivername else ""
    if not driver:
        driver = drivers[0]
    elif driver not in drivers:
        raise StateStoreError(
            f"{shown!r} names the driver {driver!r}; SqlStateStore needs an async one: {backend}+{drivers[0]}://..."
        )
    parsed = parsed.set(drivername=f"{backend}+{driver}")
    if family == "mysql" and "charset" not in parsed.query:
        parsed = parsed.update_query_dict({"charset": "utf8mb4"})
    return parsed


def _create_engines(url: URL, pool_size: int) -> tuple[AsyncEngine, AsyncEngine]:
    driver = url.get_driver_name()
    connect_args: dict[str, Any] = {}
    if driver == "asyncpg" and "timeout" not in url.query:
        connect_args["timeout"] = _CONNECT_TIMEOUT
    elif driver in ("asyncmy", "aiomysql", "psycopg") and "connect_timeout" not in url.query:
        connect_args["connect_timeout"] = _CONNECT_TIMEOUT
    common: dict[str, Any] = {
        "connect_args": connect_args,
        "hide_parameters": True,  # errors and logs never show message bodies
        "pool_pre_ping": True,
        "pool_recycle": 1800,
    }
    data_options: dict[str, Any] = {}
    if url.get_backend_name() != "postgresql":
        data_options["isolation_level"] = "REPEATABLE READ"  # one snapshot per load
    try:
        data = create_async_engine(url, pool_size=pool_size, max_overflow=pool_size, **common, **data_options)
        # locks get their own pool: holders keep a connection for a whole call, and must never
        # starve the reads and writes they are waiting on
        locks = create_async_engine(
            url,
            pool_size=pool_size,
            max_overflow=2 * pool_size,
            pool_timeout=86400,
            isolation_level="AUTOCOMMIT",
            **common,
        )
    except (ImportError, sa_exc.SQLAlchemyError) as exc:
        shown = url.render_as_string(hide_password=True)
        raise StateStoreError(
            f"cannot use {shown!r}: {type(exc).__name__}: {exc}; install the drivers with pip install 'agentrt[sql]'"
        ) from None
    return data, locks
