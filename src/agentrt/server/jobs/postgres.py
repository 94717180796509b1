"""Jobs and run event logs on PostgreSQL: a jobs table claimed with SKIP LOCKED, an events table, LISTEN/NOTIFY.

Tables (``prefix`` defaults to ``agentrt``; created on first use, under an advisory lock)::

    {prefix}_jobs        one row per submitted job: id, agent, user_id, session_id, payload (the
                         job's JSON), token (fencing), worker, lease_until, seq (last event), done,
                         submitted_at, expires_at
    {prefix}_job_events  the runs' events: (job_id, seq) primary key, type, data (bytea); a row
                         goes with its job (ON DELETE CASCADE)

A worker claims with one ``UPDATE`` over a ``SELECT ... FOR UPDATE SKIP LOCKED LIMIT 1``: first a
job whose lease ran out (its holder stopped heartbeating, or handed it back), oldest lease first,
else the oldest new job; the claim increments the job's token and sets ``lease_until`` from the
database clock (never the client's). Heartbeats, completion, hand-back and event appends compare
the caller's token with the row's, so a worker whose job was taken over cannot write
(`FencedError`). An append locks the job row, checks the token and inserts the events with the
next sequence numbers in one transaction, then notifies ``{prefix}_events`` with the job id;
submissions and hand-backs notify ``{prefix}_jobs``. Each process keeps one connection that
LISTENs to both channels and wakes the readers of that run, and idle claimers: nothing polls
(besides a claimer re-checking for expired leases at most every half lease).

A job and its events stay readable until ``expires_at``: ``log_ttl`` after the last submission,
claim, heartbeat, append or completion. Expired rows are invisible at once and deleted in
bounded batches by claims (at most every ``purge_interval`` seconds) or `PostgresJobs.purge_expired`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from agentrt import _json
from agentrt.errors import InvalidValueError, RunLimitError, StateStoreError, UserError
from agentrt.server.jobs.base import DEFAULT_LEASE_SECONDS, DEFAULT_LOG_TTL, FencedError, Job, Lease, LoggedFrame

__all__ = ["PostgresJobs"]

logger = logging.getLogger("agentrt.server")

_PREFIX_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")
_SCHEMES = ("postgresql", "postgres", "postgresql+asyncpg")
_READ_LIMIT = 500
"""Most frames one read returns (a reader reads again for the rest)."""
_KEEPALIVE = 20.0
"""Seconds between two checks that the LISTEN connection still answers (a half-open TCP connection is silent)."""
_MIN_PAUSE = 0.02
"""Shortest wait between two claim attempts (a claimable row locked by someone else is skipped)."""


_MAX_CONTROL = 7000
"""Bytes of one control message (PostgreSQL's NOTIFY payload holds under 8,000)."""


def _lock_key(*parts: str) -> int:
    """A signed 64-bit advisory-lock key for a lock name made of `parts`."""
    digest = hashlib.sha256("\x00".join(("agentrt-jobs", *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _dsn(url: str) -> tuple[str, str]:
    """The asyncpg DSN for `url`, and the URL as shown in messages (without the password)."""
    if not isinstance(url, str) or "://" not in url:
        raise InvalidValueError("PostgresJobs needs a postgresql:// URL")
    scheme, rest = url.split("://", 1)
    if scheme.lower() not in _SCHEMES:
        raise InvalidValueError(
            f"PostgresJobs accepts postgresql://, postgres:// and postgresql+asyncpg:// URLs, not {scheme}://"
        )
    try:
        parts = urlsplit("postgresql://" + rest)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:  # the text may hold a password: do not echo it
        raise InvalidValueError("the PostgreSQL URL of the job backend is malformed") from None
    query = parts.query
    pairs = parse_qsl(query, keep_blank_values=True)
    names = {name for name, _ in pairs}
    if "ssl" in names and "sslmode" not in names:  # SQLAlchemy's asyncpg spelling (?ssl=require)
        query = urlencode([("sslmode" if name == "ssl" else name, value) for name, value in pairs])
    dsn = f"postgresql://{parts.netloc}{parts.path}" + (f"?{query}" if query else "")
    user = f"{parts.username}@" if parts.username else ""
    host = f"[{host}]" if ":" in host else host
    shown = f"postgresql://{user}{host}{f':{port}' if port else ''}{parts.path}"
    return dsn, shown


class PostgresJobs:
    """`JobQueue` and `EventLog` on one PostgreSQL database (see the module docstring).

    Args:
        url: ``postgresql://``, ``postgres://`` or ``postgresql+asyncpg://`` URL (``?ssl=require``
            is read as ``sslmode=require``).
        prefix: Prefix of the two table names (letters, digits, underscores; at most 40
            characters), shared by every replica of one deployment.
        lease_seconds: A worker that stops heartbeating loses its job after this long.
        log_ttl: Seconds a job and its event log are kept after their last write.
        max_size: Most pooled connections (one more is kept for LISTEN).
        purge_interval: Seconds between two deletions of expired rows by `claim`.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "agentrt",
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        log_ttl: float = DEFAULT_LOG_TTL,
        max_size: int = 5,
        purge_interval: float = 60.0,
    ) -> None:
        try:
            import asyncpg  # type: ignore[import-untyped]  # asyncpg ships no type hints
        except ImportError:
            raise UserError("the PostgreSQL job backend needs asyncpg: pip install 'agentrt[sql]'") from None
        if not isinstance(prefix, str) or not _PREFIX_RE.fullmatch(prefix):
            raise InvalidValueError(
                f"prefix {prefix!r} must be 1-40 letters, digits or underscores, not starting with a digit"
            )
        if not lease_seconds > 0 or not log_ttl > 0 or not purge_interval > 0:
            raise InvalidValueError("lease_seconds, log_ttl and purge_interval must be > 0")
        if max_size < 1:
            raise InvalidValueError(f"max_size must be at least 1, not {max_size}")
        self._asyncpg: Any = asyncpg
        self._dsn, self._shown = _dsn(url)
        self.prefix = prefix
        self.lease_seconds = float(lease_seconds)
        self.log_ttl = float(log_ttl)
        self.max_size = max_size
        self.purge_interval = float(purge_interval)
        self.jobs_table = f'"{prefix}_jobs"'
        self.events_table = f'"{prefix}_job_events"'
        self._jobs_channel = f"{prefix}_jobs"
        self._events_channel = f"{prefix}_events"
        self._control_channel = f"{prefix}_control"
        self._app_name = f"agentrt-jobs {prefix}"[:63]
        self._pool: Any = None
        self._init_lock = asyncio.Lock()
        self._closed = False
        self._next_purge = 0.0
        self._notes = _Notifications(
            self._listen_connection, self._events_channel, self._jobs_channel, self._control_channel
        )
        self._sql = _Statements(self.jobs_table, self.events_table)

    def __repr__(self) -> str:
        return f"PostgresJobs({self._shown!r}, prefix={self.prefix!r})"

    # -- connections ------------------------------------------------------------------------------
    async def _ready(self) -> Any:
        """The pool, created (and the tables with it) on first use."""
        if self._closed:
            raise StateStoreError("this PostgresJobs is closed")
        if self._pool is not None:
            return self._pool
        async with self._init_lock:
            if self._pool is None:
                pool = await self._asyncpg.create_pool(
                    self._dsn,
                    min_size=1,
                    max_size=self.max_size,
                    command_timeout=60,
                    timeout=10,
                    server_settings={"application_name": self._app_name},
                )
                try:
                    async with pool.acquire() as conn, conn.transaction():
                        await conn.execute(f"SELECT pg_advisory_xact_lock({_lock_key(self.prefix, 'ddl')})")
                        await conn.execute(self._sql.ddl(self.prefix))
                except BaseException:
                    await pool.close()
                    raise
                self._pool = pool
        return self._pool

    async def _listen_connection(self) -> Any:
        return await self._asyncpg.connect(self._dsn, timeout=10, server_settings={"application_name": self._app_name})

    # -- JobQueue ---------------------------------------------------------------------------------
    async def submit(self, job: Job, *, user_limit: int = 0) -> None:
        """Record `job` (with ``user_limit > 0``: only if its user has fewer unfinished jobs, atomically)."""
        if user_limit < 0:
            raise InvalidValueError(f"user_limit must be >= 0, not {user_limit}")
        pool = await self._ready()
        args = (
            job.id,
            job.agent,
            job.user_id,
            job.session_id,
            _json.dumps(job.to_dict()),
            self.log_ttl,
            self._jobs_channel,
        )
        try:
            async with pool.acquire() as conn:
                if user_limit == 0:
                    await conn.execute(self._sql.submit, *args)
                    return
                async with conn.transaction():
                    # Submissions of one user queue on this lock; the count runs after it is granted
                    # (a statement of its own: its snapshot must see what the previous holder committed).
                    await conn.execute("SELECT pg_advisory_xact_lock($1)", _lock_key(self.prefix, "user", job.user_id))
                    active = int(await conn.fetchval(self._sql.active, job.user_id))
                    if active >= user_limit:
                        raise RunLimitError(
                            f"user {job.user_id!r} already has {active} runs waiting or running (limit {user_limit})",
                            user_id=job.user_id,
                            limit=user_limit,
                        )
                    await conn.execute(self._sql.submit, *args)
        except self._asyncpg.UniqueViolationError:
            raise InvalidValueError(f"job {job.id!r} was already submitted") from None

    async def active(self, user_id: str) -> int:
        """The user's jobs submitted and not yet completed (nor expired)."""
        pool = await self._ready()
        return int(await pool.fetchval(self._sql.active, user_id))

    async def active_jobs(self, user_id: str) -> list[Job]:
        """The user's jobs submitted and not yet completed (nor expired), oldest first."""
        pool = await self._ready()
        return [Job.from_dict(_json.loads(row["payload"])) for row in await pool.fetch(self._sql.active_jobs, user_id)]

    async def publish_control(self, payload: bytes) -> None:
        """Send `payload` (at most 7,000 bytes) to the control callbacks of every process (NOTIFY)."""
        if len(payload) > _MAX_CONTROL:
            raise InvalidValueError(f"a control message holds at most {_MAX_CONTROL} bytes, not {len(payload)}")
        pool = await self._ready()
        await pool.execute("SELECT pg_notify($1, $2)", self._control_channel, payload.decode())

    def on_control(self, callback: Callable[[bytes], None]) -> None:
        """Call `callback` with each control payload any process publishes (from now on; starts listening)."""
        self._notes.on_control(callback)

    async def claim(self, worker: str, *, block: float) -> Lease | None:
        """Take over an expired lease, else the oldest new job; waits up to `block` s for one (NOTIFY)."""
        pool = await self._ready()
        await self._maybe_purge()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, block)
        while True:
            # Registered before the attempt: a job submitted after it wakes this claimer.
            wake = self._notes.want_job() if block > 0 else None
            try:
                row = await pool.fetchrow(self._sql.claim, worker, self.lease_seconds, self.log_ttl)
                if row is not None:
                    job = Job.from_dict(_json.loads(row["payload"]))
                    return Lease(job, worker, int(row["token"]), job.id)
                remaining = deadline - loop.time()
                if wake is None or remaining <= 0:
                    return None
                expiry = await pool.fetchval(self._sql.next_expiry)
                pause = min(remaining, self.lease_seconds / 2)
                if expiry is not None:
                    pause = min(pause, max(_MIN_PAUSE, float(expiry) + 0.005))
                await _sleep_on(wake, pause)
            finally:
                if wake is not None:
                    self._notes.forget_job(wake)

    async def renew(self, lease: Lease) -> bool:
        pool = await self._ready()
        row = await pool.fetchval(self._sql.renew, lease.job.id, lease.token, self.lease_seconds, self.log_ttl)
        return row is not None

    async def complete(self, lease: Lease) -> bool:
        pool = await self._ready()
        return await pool.fetchval(self._sql.complete, lease.job.id, lease.token, self.log_ttl) is not None

    async def release(self, lease: Lease) -> None:
        pool = await self._ready()
        await pool.execute(self._sql.release, lease.job.id, lease.token, self._jobs_channel)

    async def depth(self) -> int:
        pool = await self._ready()
        return int(await pool.fetchval(self._sql.depth))

    async def job(self, job_id: str) -> Job | None:
        """The job's record (None: unknown or expired)."""
        pool = await self._ready()
        raw = await pool.fetchval(self._sql.payload, job_id)
        return None if raw is None else Job.from_dict(_json.loads(raw))

    async def token(self, job_id: str) -> int:
        """The job's current fencing token (0: never claimed, -1: unknown or expired)."""
        pool = await self._ready()
        token = await pool.fetchval(self._sql.token, job_id)
        return -1 if token is None else int(token)

    async def purge_expired(self, limit: int = 200) -> int:
        """Delete up to `limit` expired jobs with their events (already invisible); how many."""
        pool = await self._ready()
        status = await pool.execute(self._sql.purge, limit)
        return int(str(status).rsplit(" ", 1)[-1] or 0)

    async def _maybe_purge(self) -> None:
        now = time.monotonic()
        if now < self._next_purge:
            return
        self._next_purge = now + self.purge_interval
        try:
            await self.purge_expired()
        except Exception as exc:
            logger.warning("deleting expired jobs failed: %s: %s", type(exc).__name__, exc)

    # -- EventLog ---------------------------------------------------------------------------------
    async def append(self, job_id: str, token: int, frames: Sequence[tuple[str, bytes]]) -> int:
        pool = await self._ready()
        async with pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(self._sql.lock_job, job_id)
            if row is None or int(row["token"]) != token:
                raise FencedError(f"job {job_id!r} was taken over: token {token} is no longer current")
            seq = int(row["seq"])
            if not frames:
                return seq
            types = [event_type for event_type, _ in frames]
            data = [bytes(payload) for _, payload in frames]
            last = seq + len(frames)
            await conn.execute(self._sql.append, job_id, seq, types, data, last, self.log_ttl, self._events_channel)
            return last

    async def read(self, job_id: str, after: int, *, block: float) -> list[LoggedFrame] | None:
        """The frames after `after`; waits (through the shared LISTEN connection) up to `block` s."""
        pool = await self._ready()

        async def fetch() -> list[LoggedFrame] | None:
            rows = await pool.fetch(self._sql.read, job_id, after, _READ_LIMIT)
            if not rows:
                return None
            return [LoggedFrame(int(r["seq"]), r["type"], bytes(r["data"])) for r in rows if r["seq"] is not None]

        frames = await fetch()
        if frames is None or frames or block <= 0:
            return frames
        return await self._notes.wait_events(job_id, block, fetch)

    # -- lifecycle --------------------------------------------------------------------------------
    @property
    def listening(self) -> bool:
        """Whether the LISTEN connection is up (it starts with the first waiting read or claim)."""
        return self._notes.connected

    async def close(self) -> None:
        """Close the LISTEN connection and the pool."""
        self._closed = True
        await self._notes.stop()
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), 5)
            except TimeoutError:
                pool.terminate()


class _Statements:
    """The SQL of one table prefix (identifiers are validated and quoted by `PostgresJobs`)."""

    def __init__(self, jobs: str, events: str) -> None:
        live = "expires_at > now()"
        secs = "* interval '1 second'"
        self.submit = (
            f"WITH added AS (INSERT INTO {jobs} (id, agent, user_id, session_id, payload, expires_at)"
            f" VALUES ($1, $2, $3, $4, $5, clock_timestamp() + $6::float8 {secs}) RETURNING id)"
            " SELECT pg_notify($7, '') FROM added"
        )
        self.active = f"SELECT count(*) FROM {jobs} WHERE user_id = $1 AND NOT done AND {live}"
        self.active_jobs = (
            f"SELECT payload FROM {jobs} WHERE user_id = $1 AND NOT done AND {live} ORDER BY submitted_at LIMIT 1000"
        )
        self.depth = f"SELECT count(*) FROM {jobs} WHERE NOT done AND {live}"
        # Expired leases first (oldest first: a hand-back looks expired since 1970), then new jobs
        # in submission order. `fresh` is only looked at when `stale` found nothing.
        self.claim = (
            f"WITH stale AS (SELECT id FROM {jobs} WHERE NOT done AND lease_until < now() AND {live}"
            "  ORDER BY lease_until LIMIT 1 FOR UPDATE SKIP LOCKED),"
            f" fresh AS (SELECT id FROM {jobs} WHERE NOT done AND lease_until IS NULL AND {live}"
            "  AND NOT EXISTS (SELECT 1 FROM stale) ORDER BY submitted_at, id LIMIT 1 FOR UPDATE SKIP LOCKED),"
            " pick AS (SELECT id FROM stale UNION ALL SELECT id FROM fresh)"
            f" UPDATE {jobs} AS j SET token = j.token + 1, worker = $1,"
            f"  lease_until = clock_timestamp() + $2::float8 {secs}, expires_at = clock_timestamp() + $3::float8 {secs}"
            " FROM pick WHERE j.id = pick.id RETURNING j.payload, j.token"
        )
        self.next_expiry = (
            "SELECT extract(epoch FROM min(lease_until) - clock_timestamp())::float8"
            f" FROM {jobs} WHERE NOT done AND lease_until IS NOT NULL AND {live}"
        )
        self.renew = (
            f"UPDATE {jobs} SET lease_until = clock_timestamp() + $3::float8 {secs},"
            f" expires_at = clock_timestamp() + $4::float8 {secs}"
            f" WHERE id = $1 AND token = $2 AND NOT done AND {live} RETURNING 1"
        )
        self.complete = (
            f"UPDATE {jobs} SET done = true, lease_until = NULL, expires_at = clock_timestamp() + $3::float8 {secs}"
            f" WHERE id = $1 AND token = $2 AND {live} RETURNING 1"
        )
        # The token moves on (the holder can no longer write) and the lease looks long expired.
        self.release = (
            f"WITH handed AS (UPDATE {jobs} SET token = token + 1, worker = NULL, lease_until = to_timestamp(0)"
            f" WHERE id = $1 AND token = $2 AND NOT done AND {live} RETURNING id)"
            " SELECT pg_notify($3, '') FROM handed"
        )
        self.payload = f"SELECT payload FROM {jobs} WHERE id = $1 AND {live}"
        self.token = f"SELECT token FROM {jobs} WHERE id = $1 AND {live}"
        self.lock_job = f"SELECT token, seq FROM {jobs} WHERE id = $1 AND {live} FOR UPDATE"
        self.append = (
            f"WITH added AS (INSERT INTO {events} (job_id, seq, type, data)"
            "  SELECT $1, $2 + f.n, f.type, f.data"
            "  FROM unnest($3::text[], $4::bytea[]) WITH ORDINALITY AS f(type, data, n)),"
            f" moved AS (UPDATE {jobs} SET seq = $5, expires_at = clock_timestamp() + $6::float8 {secs} WHERE id = $1)"
            " SELECT pg_notify($7, $1)"
        )
        # No row: no such job (or expired); one row with a NULL seq: nothing after `after` yet.
        self.read = (
            "SELECT e.seq, e.type, e.data FROM"
            f" {jobs} AS j LEFT JOIN LATERAL (SELECT seq, type, data FROM {events}"
            "  WHERE job_id = j.id AND seq > $2 ORDER BY seq LIMIT $3) AS e ON true"
            f" WHERE j.id = $1 AND j.{live} ORDER BY e.seq"
        )
        self.purge = (
            f"WITH gone AS (SELECT id FROM {jobs} WHERE expires_at <= now() ORDER BY expires_at"
            "  LIMIT $1 FOR UPDATE SKIP LOCKED)"
            f" DELETE FROM {jobs} AS j USING gone WHERE j.id = gone.id"
        )
        self._jobs = jobs
        self._events = events

    def ddl(self, prefix: str) -> str:
        jobs, events = self._jobs, self._events
        return f"""
CREATE TABLE IF NOT EXISTS {jobs} (
    id text PRIMARY KEY,
    agent text NOT NULL,
    user_id text NOT NULL,
    session_id text NOT NULL,
    payload text NOT NULL,
    token bigint NOT NULL DEFAULT 0,
    worker text,
    lease_until timestamptz,
    seq bigint NOT NULL DEFAULT 0,
    done boolean NOT NULL DEFAULT false,
    submitted_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS "{prefix}_jobs_queue" ON {jobs} (submitted_at, id) WHERE NOT done AND lease_until IS NULL;
CREATE INDEX IF NOT EXISTS "{prefix}_jobs_lease" ON {jobs} (lease_until) WHERE NOT done;
CREATE INDEX IF NOT EXISTS "{prefix}_jobs_user" ON {jobs} (user_id) WHERE NOT done;
CREATE INDEX IF NOT EXISTS "{prefix}_jobs_expiry" ON {jobs} (expires_at);
CREATE TABLE IF NOT EXISTS {events} (
    job_id text NOT NULL REFERENCES {jobs} (id) ON DELETE CASCADE,
    seq bigint NOT NULL,
    type text NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (job_id, seq)
);
"""


class _Notifications:
    """One LISTEN connection per backend (per process), shared by every waiting reader and claimer.

    Appends notify ``{prefix}_events`` with the job id, submissions and hand-backs ``{prefix}_jobs``.
    A waiter registers first, then reads once more (a write between its first read and its
    registration is seen there), then waits; thousands of open SSE streams share this one
    connection. When the connection drops, every waiter wakes and reads again, and it reconnects.
    """

    def __init__(
        self, connect: Callable[[], Awaitable[Any]], events_channel: str, jobs_channel: str, control_channel: str
    ) -> None:
        self._connect = connect
        self._events_channel = events_channel
        self._jobs_channel = jobs_channel
        self._control_channel = control_channel
        self._control: list[Callable[[bytes], None]] = []
        self._events: dict[str, list[asyncio.Future[bool]]] = {}
        self._jobs: list[asyncio.Future[bool]] = []
        self._task: asyncio.Task[None] | None = None
        self.connected = False

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._listen(), name="agentrt-job-notifications")

    def want_job(self) -> asyncio.Future[bool]:
        """A future settled when a job may have become claimable (or the connection was re-made)."""
        self._start()
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._jobs.append(future)
        return future

    def on_control(self, callback: Callable[[bytes], None]) -> None:
        self._control.append(callback)
        self._start()

    def forget_job(self, future: asyncio.Future[bool]) -> None:
        with contextlib.suppress(ValueError):
            self._jobs.remove(future)

    async def wait_events(
        self, job_id: str, timeout: float, read: Callable[[], Awaitable[list[LoggedFrame] | None]]
    ) -> list[LoggedFrame] | None:
        """`read()` once registered for `job_id`, then after each notification, until it finds frames (or None)."""
        self._start()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            future: asyncio.Future[bool] = loop.create_future()
            waiting = self._events.setdefault(job_id, [])
            waiting.append(future)
            try:
                frames = await read()  # after registering: nothing appended from here on is missed
                if frames is None or frames:
                    return frames
                if not await _sleep_on(future, deadline - loop.time()):
                    return frames
            finally:
                with contextlib.suppress(ValueError):
                    waiting.remove(future)
                if not waiting and self._events.get(job_id) is waiting:
                    del self._events[job_id]

    def _on_notify(self, _conn: Any, _pid: int, channel: str, payload: str) -> None:
        if channel == self._control_channel:
            for callback in list(self._control):
                try:
                    callback(payload.encode())
                except Exception:
                    logger.exception("a job control callback failed")
        elif channel == self._jobs_channel:
            for future in self._jobs:
                _settle(future, True)
        else:
            for future in self._events.get(payload, ()):
                _settle(future, True)

    def _wake_all(self) -> None:
        for waiting in list(self._events.values()):
            for future in waiting:
                _settle(future, True)
        for future in self._jobs:
            _settle(future, True)

    async def _listen(self) -> None:
        pause = 0.5
        while True:
            conn: Any = None
            lost = asyncio.Event()
            try:
                conn = await self._connect()
                conn.add_termination_listener(functools.partial(_lost, lost))
                await conn.add_listener(self._events_channel, self._on_notify)
                await conn.add_listener(self._jobs_channel, self._on_notify)
                await conn.add_listener(self._control_channel, self._on_notify)
                self.connected = True
                pause = 0.5
                self._wake_all()  # (re)connected: anything may have been missed meanwhile
                while not lost.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(lost.wait(), _KEEPALIVE)
                    if not lost.is_set():
                        await conn.fetchval("SELECT 1", timeout=5)
                logger.warning("the job notification connection to PostgreSQL was lost; reconnecting")
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # PostgreSQL unreachable: waiters time out and read again
                logger.warning("the job notification connection failed: %s: %s", type(exc).__name__, exc)
            finally:
                self.connected = False
                if conn is not None and not conn.is_closed():
                    try:
                        await asyncio.wait_for(conn.close(), 2)
                    except asyncio.CancelledError:
                        conn.terminate()
                        raise
                    except Exception:
                        conn.terminate()
                self._wake_all()
            await asyncio.sleep(pause)
            pause = min(pause * 2, 5.0)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._wake_all()


async def _sleep_on(future: asyncio.Future[bool], timeout: float) -> bool:
    """Wait for `future` up to `timeout` s: its value, or False on timeout."""
    if timeout <= 0:
        return future.done() and future.result()
    timer = asyncio.get_running_loop().call_later(timeout, _settle, future, False)
    try:
        return await future
    finally:
        timer.cancel()


def _lost(event: asyncio.Event, _conn: Any) -> None:
    event.set()


def _settle(future: asyncio.Future[bool], value: bool) -> None:
    if not future.done():
        future.set_result(value)
