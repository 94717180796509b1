"""Jobs and run event logs on Redis: a Stream with a consumer group, and a Stream per run.

Keys (``prefix`` defaults to ``agentrt``)::

    {prefix}:jobs          STREAM  one entry per submitted job (field ``job``: its id); group ``workers``
    {prefix}:job:{id}      HASH    payload (the job's JSON), token (fencing), seq (last event), entry
    {prefix}:run:{id}      STREAM  the run's events, entry ids ``<seq>-0`` (fields ``t``: type, ``d``: JSON)
    {prefix}:user:{h}:active  ZSET  a user's jobs not yet completed (h: a hash of the user id),
                           scored by when their record expires: the per-user limit counts these

A worker claims with ``XREADGROUP`` (new jobs) or ``XAUTOCLAIM`` (jobs whose holder has not
heartbeated for ``lease_seconds``); each claim increments the job's token in the same script that
checks it, and every later write (an event append, a heartbeat, the completion) runs as a script
that first compares the caller's token with the job's: a worker whose job was taken over cannot
write (`FencedError`). Heartbeats are ``XCLAIM ... JUSTID`` by the holder, which resets the entry's
idle time. Completion acknowledges and deletes the entry; the job hash and the event log expire
after ``log_ttl`` seconds, so a client can still read a finished run's events for that long.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from agentrt import _json
from agentrt.server.jobs.base import (
    DEFAULT_LEASE_SECONDS,
    DEFAULT_LOG_TTL,
    FencedError,
    Job,
    Lease,
    LoggedFrame,
    RunLimitError,
)

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["RedisJobs"]

logger = logging.getLogger("agentrt.server")

# KEYS: jobs stream, job hash, the user's active set.  ARGV: job id, payload, log ttl ms, user
# limit (0: none).  The entry id, or "" when the user is at the limit (nothing is written).  The
# active set scores each job with the time its record expires (the server's clock), so a job
# that is never completed stops counting when its record is gone.
_SUBMIT = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now_ms)
local limit = tonumber(ARGV[4])
if limit > 0 and redis.call('ZCARD', KEYS[3]) >= limit then return '' end
local entry = redis.call('XADD', KEYS[1], '*', 'job', ARGV[1])
redis.call('HSET', KEYS[2], 'payload', ARGV[2], 'token', 0, 'seq', 0, 'entry', entry)
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('ZADD', KEYS[3], now_ms + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[3], ARGV[3])
return entry
"""

# KEYS: the user's active set.  The user's jobs submitted and not completed (nor expired).
_ACTIVE = """
local now = redis.call('TIME')
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000))
return redis.call('ZCARD', KEYS[1])
"""

# KEYS: job hash.  ARGV: entry id, log ttl ms.  The new token, or 0 when the job is gone (expired).
_TAKE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local token = redis.call('HINCRBY', KEYS[1], 'token', 1)
redis.call('HSET', KEYS[1], 'entry', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return token
"""

# KEYS: job hash, jobs stream.  ARGV: token, group, worker, entry, log ttl ms.  1 if still ours.
_RENEW = """
if tonumber(redis.call('HGET', KEYS[1], 'token') or '-1') ~= tonumber(ARGV[1]) then return 0 end
redis.call('XCLAIM', KEYS[2], ARGV[2], ARGV[3], 0, ARGV[4], 'JUSTID')
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"""

# KEYS: job hash, jobs stream, the user's active set.  ARGV: token, group, entry, job id.  1 if
# it was ours and is now done (and no longer counts against its user's limit).
_COMPLETE = """
if tonumber(redis.call('HGET', KEYS[1], 'token') or '-1') ~= tonumber(ARGV[1]) then return 0 end
redis.call('XACK', KEYS[2], ARGV[2], ARGV[3])
redis.call('XDEL', KEYS[2], ARGV[3])
redis.call('HSET', KEYS[1], 'done', 1)
redis.call('ZREM', KEYS[3], ARGV[4])
return 1
"""

# KEYS: job hash, jobs stream.  ARGV: token, group, worker, entry, idle ms.  Hands the job back:
# the token moves on (this holder can no longer write) and the entry looks long idle.
_RELEASE = """
if tonumber(redis.call('HGET', KEYS[1], 'token') or '-1') ~= tonumber(ARGV[1]) then return 0 end
redis.call('HINCRBY', KEYS[1], 'token', 1)
redis.call('XCLAIM', KEYS[2], ARGV[2], ARGV[3], 0, ARGV[4], 'IDLE', ARGV[5], 'JUSTID')
return 1
"""

# KEYS: job hash, run stream.  ARGV: token, log ttl ms, notification channel, job id, then (type,
# data) pairs.  The last seq, or -1.  Readers anywhere learn of the new events from the channel.
_APPEND = """
if tonumber(redis.call('HGET', KEYS[1], 'token') or '-1') ~= tonumber(ARGV[1]) then return -1 end
local seq = tonumber(redis.call('HGET', KEYS[1], 'seq') or '0')
for i = 5, #ARGV, 2 do
  seq = seq + 1
  redis.call('XADD', KEYS[2], seq .. '-0', 't', ARGV[i], 'd', ARGV[i + 1])
end
redis.call('HSET', KEYS[1], 'seq', seq)
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PUBLISH', ARGV[3], ARGV[4])
return seq
"""


_MAX_BLOCK = 20.0
"""Longest blocking read (XREAD/XREADGROUP BLOCK), well under the connections' socket timeout."""
_SOCKET_TIMEOUT = 60.0
"""redis-py 8 times reads out after 5 s by default: shorter than a blocking read may wait."""


class RedisJobs:
    """`JobQueue` and `EventLog` on one Redis (see the module docstring).

    Args:
        url: ``redis://`` URL (or pass `client`).
        prefix: Key prefix, shared by every replica of one deployment.
        lease_seconds: A worker that stops heartbeating loses its job after this long.
        log_ttl: Seconds a job and its event log are kept after their last write.
        client: An existing ``redis.asyncio.Redis`` (its connections are not closed by `close`);
            give it a ``socket_timeout`` above 20 s: reads block for up to that long.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        prefix: str = "agentrt",
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        log_ttl: float = DEFAULT_LOG_TTL,
        client: Redis | None = None,
        max_connections: int = 200,
    ) -> None:
        import redis.asyncio as aioredis

        if client is None and url is None:
            raise ValueError("RedisJobs needs a url or a client")
        if not lease_seconds > 0 or not log_ttl > 0:
            raise ValueError("lease_seconds and log_ttl must be > 0")
        self._own = client is None
        # Blocking reads (XREAD/XREADGROUP BLOCK) hold a connection while they wait: a blocking
        # pool makes a burst of readers queue for one instead of failing.
        self._client: Redis = client or aioredis.Redis(
            connection_pool=aioredis.BlockingConnectionPool.from_url(
                str(url), max_connections=max_connections, timeout=30, socket_timeout=_SOCKET_TIMEOUT
            )
        )
        self.prefix = prefix
        self.lease_seconds = lease_seconds
        self.log_ttl = log_ttl
        self._stream = f"{prefix}:jobs"
        self._group = "workers"
        self._group_ready = False
        client_ = self._client
        self._submit = client_.register_script(_SUBMIT)
        self._active = client_.register_script(_ACTIVE)
        self._take = client_.register_script(_TAKE)
        self._renew = client_.register_script(_RENEW)
        self._complete = client_.register_script(_COMPLETE)
        self._release = client_.register_script(_RELEASE)
        self._append = client_.register_script(_APPEND)
        self._channel = f"{prefix}:events"
        self._control_channel = f"{prefix}:control"
        self._tail = _Tail(client_, self._channel, self._control_channel)

    def _job_key(self, job_id: str) -> str:
        return f"{self.prefix}:job:{job_id}"

    def _run_key(self, job_id: str) -> str:
        return f"{self.prefix}:run:{job_id}"

    def _user_key(self, user_id: str) -> str:
        # hashed: a user id is caller data, and may hold ':' or be long
        return f"{self.prefix}:user:{hashlib.sha256(user_id.encode()).hexdigest()[:32]}:active"

    @property
    def _ttl_ms(self) -> int:
        return max(1, round(self.log_ttl * 1000))

    async def _ensure_group(self) -> None:
        if self._group_ready:
            return
        from redis.exceptions import ResponseError

        try:
            await self._client.xgroup_create(self._stream, self._group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_ready = True

    # -- JobQueue ---------------------------------------------------------------------------------
    async def submit(self, job: Job, *, user_limit: int = 0) -> None:
        if user_limit < 0:
            raise ValueError("user_limit must be >= 0")
        await self._ensure_group()
        payload = _json.dumps(job.to_dict())
        keys = [self._stream, self._job_key(job.id), self._user_key(job.user_id)]
        entry = await self._submit(keys=keys, args=[job.id, payload, self._ttl_ms, user_limit])
        if not entry:
            raise RunLimitError(
                f"user {job.user_id!r} already has {user_limit} runs in progress; try again when one ends",
                user_id=job.user_id,
                limit=user_limit,
            )

    async def active(self, user_id: str) -> int:
        return int(await self._active(keys=[self._user_key(user_id)], args=[]))

    async def claim(self, worker: str, *, block: float) -> Lease | None:
        from redis.exceptions import ResponseError

        await self._ensure_group()
        try:
            return await self._claim(worker, block)
        except ResponseError as exc:
            if "NOGROUP" in str(exc) or "no longer exists" in str(exc):
                self._group_ready = False  # the stream was deleted (a flush): create it again next time
            raise

    async def _claim(self, worker: str, block: float) -> Lease | None:
        client = self._client
        idle_ms = max(1, round(self.lease_seconds * 1000))
        while True:
            reply: Any = await client.xautoclaim(self._stream, self._group, worker, idle_ms, start_id="0-0", count=1)
            claimed = reply[1] if reply and len(reply) > 1 else []
            entries = [e for e in claimed if e and e[1]]
            if not entries:
                read: Any = await client.xreadgroup(
                    self._group,
                    worker,
                    {self._stream: ">"},
                    count=1,
                    block=max(1, round(min(block, _MAX_BLOCK) * 1000)),
                )
                entries = [e for _, items in read or () for e in items]
                if not entries:
                    return None
            entry_id, fields = entries[0]
            lease = await self._lease(worker, _text(entry_id), fields)
            if lease is not None:
                return lease
            # a job whose record expired: drop its entry and look again
            await client.xack(self._stream, self._group, entry_id)
            await client.xdel(self._stream, entry_id)

    async def _lease(self, worker: str, entry: str, fields: Any) -> Lease | None:
        job_id = _text(fields.get(b"job") or fields.get("job") or b"")
        if not job_id:
            return None
        key = self._job_key(job_id)
        token = int(await self._take(keys=[key], args=[entry, self._ttl_ms]))
        if token <= 0:
            return None
        raw = await self._client.hget(key, "payload")
        if raw is None:
            return None
        return Lease(Job.from_dict(_json.loads(raw)), worker, token, entry)

    async def renew(self, lease: Lease) -> bool:
        args: list[str | int] = [lease.token, self._group, lease.worker, lease.handle, self._ttl_ms]
        return bool(await self._renew(keys=[self._job_key(lease.job.id), self._stream], args=args))

    async def complete(self, lease: Lease) -> bool:
        args: list[str | int] = [lease.token, self._group, lease.handle, lease.job.id]
        keys = [self._job_key(lease.job.id), self._stream, self._user_key(lease.job.user_id)]
        return bool(await self._complete(keys=keys, args=args))

    async def release(self, lease: Lease) -> None:
        idle = max(1, round(self.lease_seconds * 1000)) * 100
        args: list[str | int] = [lease.token, self._group, lease.worker, lease.handle, idle]
        await self._release(keys=[self._job_key(lease.job.id), self._stream], args=args)

    async def depth(self) -> int:
        await self._ensure_group()
        return int(await self._client.xlen(self._stream))

    async def active_jobs(self, user_id: str) -> list[Job]:
        """The user's jobs submitted and not yet completed (nor expired), oldest first."""
        ids: Any = await self._client.zrange(self._user_key(user_id), 0, 999)  # an expired job's record is gone
        if not ids:
            return []
        async with self._client.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hget(self._job_key(_text(job_id)), "payload")
            payloads: list[Any] = await pipe.execute()
        jobs = [Job.from_dict(_json.loads(raw)) for raw in payloads if raw is not None]
        return sorted(jobs, key=lambda job: job.submitted_at)

    async def publish_control(self, payload: bytes) -> None:
        """Send `payload` to the control callbacks of every process (PUBLISH; at most once, best effort)."""
        await self._client.publish(self._control_channel, payload)

    def on_control(self, callback: Callable[[bytes], None]) -> None:
        """Call `callback` with each control payload any process publishes (from now on; starts listening)."""
        self._tail.on_control(callback)

    async def job(self, job_id: str) -> Job | None:
        """The job's record (None: unknown or expired)."""
        raw = await self._client.hget(self._job_key(job_id), "payload")
        return None if raw is None else Job.from_dict(_json.loads(raw))

    async def token(self, job_id: str) -> int:
        """The job's current fencing token (0: never claimed, -1: unknown)."""
        raw = await self._client.hget(self._job_key(job_id), "token")
        return -1 if raw is None else int(raw)

    # -- EventLog ---------------------------------------------------------------------------------
    async def append(self, job_id: str, token: int, frames: Sequence[tuple[str, bytes]]) -> int:
        args: list[Any] = [token, self._ttl_ms, self._channel, job_id]
        for event_type, data in frames:
            args += (event_type, data)
        seq = int(await self._append(keys=[self._job_key(job_id), self._run_key(job_id)], args=args))
        if seq < 0:
            raise FencedError(f"job {job_id!r} was taken over: token {token} is no longer current")
        return seq

    async def read(self, job_id: str, after: int, *, block: float) -> list[LoggedFrame] | None:
        """The frames after `after`; waits (through the shared tail, not a connection per reader) up to `block` s."""
        key = self._run_key(job_id)
        frames = await self._range(key, after)
        if frames:
            return frames
        if not await self._client.exists(self._job_key(job_id), key):
            return None
        if block > 0:
            return await self._tail.wait(job_id, min(block, _MAX_BLOCK), lambda: self._range(key, after))
        return []

    async def _range(self, key: str, after: int) -> list[LoggedFrame]:
        entries: Any = await self._client.xrange(key, min=f"({after}-0", max="+", count=500)
        return [
            LoggedFrame(int(_text(entry_id).split("-", 1)[0]), _text(fields[b"t"]), bytes(fields[b"d"]))
            for entry_id, fields in entries or ()
        ]

    async def close(self) -> None:
        """Close the connections this object opened."""
        await self._tail.stop()
        if self._own:
            await self._client.aclose(close_connection_pool=True)


class _Tail:
    """One subscription per process to the deployment's event notifications, shared by every reader.

    Each append publishes its job id on ``{prefix}:events``. A reader that found nothing new
    registers for its job, reads once more (an append between its first read and its
    registration is seen there), then waits for a notification, so thousands of open SSE streams
    hold one Redis connection between them (the subscription), and nothing polls.
    """

    __slots__ = ("_channel", "_client", "_control", "_control_channel", "_task", "_waiters")

    def __init__(self, client: Redis, channel: str, control_channel: str) -> None:
        self._client = client
        self._channel = channel
        self._control_channel = control_channel
        self._waiters: dict[str, list[asyncio.Future[bool]]] = {}
        self._control: list[Callable[[bytes], None]] = []
        self._task: asyncio.Task[None] | None = None

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._listen(), name="agentrt-run-events")

    def on_control(self, callback: Callable[[bytes], None]) -> None:
        self._control.append(callback)
        self._start()

    async def wait(
        self, job_id: str, timeout: float, read: Callable[[], Awaitable[list[LoggedFrame]]]
    ) -> list[LoggedFrame]:
        """`read()` once registered, and again after each notification for `job_id`, until it finds frames."""
        loop = asyncio.get_running_loop()
        self._start()
        deadline = loop.time() + timeout
        while True:
            future: asyncio.Future[bool] = loop.create_future()
            waiting = self._waiters.setdefault(job_id, [])
            waiting.append(future)
            timer = loop.call_at(deadline, _settle, future, False)
            try:
                frames = await read()  # after registering: nothing appended from here on is missed
                if frames or not await future:
                    return frames
            finally:
                timer.cancel()
                with contextlib.suppress(ValueError):
                    waiting.remove(future)
                if not waiting and self._waiters.get(job_id) is waiting:
                    del self._waiters[job_id]
            frames = await read()
            if frames or loop.time() >= deadline:
                return frames

    async def _listen(self) -> None:
        while True:
            pubsub = self._client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self._channel, self._control_channel)
                for waiting in list(self._waiters.values()):  # (re)subscribed: anything may be new
                    for future in waiting:
                        _settle(future, True)
                while True:
                    message: Any = await pubsub.get_message(timeout=_MAX_BLOCK)
                    if message is None or message.get("type") != "message":
                        continue
                    if _text(message["channel"]) == self._control_channel:
                        self._dispatch(bytes(message["data"]))
                        continue
                    for future in self._waiters.get(_text(message["data"]), ()):
                        _settle(future, True)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis unreachable: the readers time out and read again
                logger.warning("the run event subscription failed: %s: %s", type(exc).__name__, exc)
                await asyncio.sleep(0.5)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]  # untyped in redis-py

    def _dispatch(self, payload: bytes) -> None:
        for callback in list(self._control):
            try:
                callback(payload)
            except Exception:
                logger.exception("a job control callback failed")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _settle(future: asyncio.Future[bool], value: bool) -> None:
    if not future.done():
        future.set_result(value)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, (bytes, bytearray)) else str(value)
