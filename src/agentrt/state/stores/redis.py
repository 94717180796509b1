"""RedisStateStore: sessions in Redis, shared by every process that points at the same server.

Key layout (``P`` = prefix, ``U`` / ``A`` / ``S`` = encoded user / agent / session id, see
`_id_token`; ``B`` = ``P:{U}:a:A`` for a session of agent ``A``, ``P:{U}`` for the legacy agent ``""``)::

    P:{U}:agents         ZSET  agent -> last write                    (the user's agents but "")
    B:index              ZSET  session id -> updated_at               (the user's sessions of the agent)
    B:s:S:h              HASH  format, version, agent, user_id, session_id, revision,
                               created_at, updated_at, message_count,
                               f:<field> = JSON of each `STATE_FIELDS` entry
    B:s:S:m              LIST  one JSON message per entry (`encode_message`), in order
    B:s:S:lock           STRING "<fencing token>:<nonce>" while a process holds the session lock
    B:s:S:fence          STRING the session's fencing-token counter
    B:s:S:want           STRING the nonce of the waiter whose turn is next
    B:s:S:rh             HASH  reply id -> run record JSON (`agentrt.state.runs`)
    B:s:S:rs             HASH  reply id -> the run's summary JSON
    B:s:S:rz             ZSET  reply id -> the run's start time (the order, for listing and eviction)

A session's run-record keys go with it (`delete`, `prune`, `delete_user`, `migrate_legacy` moves
them); they are saved with the expiry the session's hash has then, so a ttl store's records
expire no later than the session would without further use.

Sessions written before sessions had an agent use the ``P:{U}`` keys: they are the agent ``""``
(`has_legacy_sessions` scans for their indexes once, with ``SCAN``, on the store's first use).

``{U}`` is a Redis Cluster hash tag: a user's sessions, their indexes and their locks share one
slot, so every Lua script below touches keys of a single slot. Ids are encoded as unpadded
url-safe base64 of their UTF-8 bytes (``=`` for the empty id, ``~`` + SHA-256 hex when the
encoding would exceed 100 characters), so ``:``, braces, slashes, spaces, unicode and very long
ids can neither collide nor break the layout; the original ids are kept in the hash.

Every write is one Lua script: it checks the revision, pushes the new messages (O(new
messages)), sets the changed fields (each field is its own hash entry, so nothing is re-encoded
server-side and an append costs O(changed fields)), bumps the revision, updates the index and
refreshes the expiry, all atomically. Loads are one script too (a consistent snapshot plus the
sliding-expiry refresh).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
import time
import weakref
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Self
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from agentrt import _json
from agentrt.errors import FencedError, InvalidTypeError, StateConflictError, StateStoreError, UserError
from agentrt.message import Msg
from agentrt.state.base import (
    STATE_FIELDS,
    AgentState,
    BaseStateStore,
    LegacyFlag,
    SessionInfo,
    StateView,
    check_agent,
    check_expected_revision,
    check_prune_limit,
    check_since_index,
)
from agentrt.state.codec import FORMAT, decode_message, decode_state, encode_fields, encode_message
from agentrt.state.locks import LocalSessionLocks, held_fence
from agentrt.state.redis_lock import RedisLockScripts, RedisSessionLock
from agentrt.state.runs import (
    DEFAULT_MAX_RUNS,
    RunInfo,
    StoredRun,
    check_max_runs,
    check_reply_id,
    check_stored_run,
    retention_cutoff,
)
from agentrt.state.session import SCHEMA_VERSION

__all__ = ["RedisStateStore"]

_MAX_TOKEN = 100
_FENCE_RETENTION = 7 * 24 * 3600.0
"""How long a session's fencing counter survives its last lock acquisition (at least the ttl)."""

# Sliding expiry, shared by the scripts (loads call it only with a ttl). KEYS: 1 hash, 2 list,
# 3 index, 4 the user's agents (absent for the legacy agent ""). With a ttl: hash and list get it;
# the index and the agents get it unless they already live longer (or forever: a store without
# ttl wrote to them). Without a ttl: existing session expiries are left alone (the list follows
# the hash) and the index and agents are made persistent, since they must outlive their sessions.
_TOUCH_LUA = """
local function touch_index(key, ttl, is_new)
  if ttl > 0 then
    if is_new then
      redis.call('PEXPIRE', key, ttl)
    else
      local left = redis.call('PTTL', key)
      if left >= 0 and left < ttl then redis.call('PEXPIRE', key, ttl) end
    end
  else
    redis.call('PERSIST', key)
  end
end
local function touch(ttl, index_is_new, agents_is_new, agents)
  if ttl > 0 then
    redis.call('PEXPIRE', KEYS[1], ttl)
    redis.call('PEXPIRE', KEYS[2], ttl)
  else
    local left = redis.call('PTTL', KEYS[1])
    if left > 0 then redis.call('PEXPIRE', KEYS[2], left) end
  end
  touch_index(KEYS[3], ttl, index_is_new)
  if agents then touch_index(agents, ttl, agents_is_new) end
end
"""

# KEYS: 1 hash, 2 list, 3 index, 4 the user's agents (absent for the legacy agent "").
# ARGV: 1 mode ("append" | "replace"), 2 expected revision ("" = any, replace only), 3 now,
#       4 ttl ms (0 = none), 5 index member (the session id), 6 schema version of the writer,
#       7 number of "init" entries, 8 number of "set" entries, 9 the agent, 10 the writer's fencing
#       token ("" = none; then the session's fence counter is the last key), then the init entries
#       (field/value pairs written only when the session is created or replaced), the set entries
#       (always written), and the messages to push.
# Returns {1, new revision}, {-1, current revision} on a stale revision, {-2, stored version}
# when the stored format version differs from the writer's (load first: that upgrades it), or
# {-3, fence} when a later holder of the session lock has a higher fencing token.
_WRITE_LUA = (
    _TOUCH_LUA
    + """
local mode = ARGV[1]
local fence_key = nil
if ARGV[10] ~= '' then
  fence_key = KEYS[#KEYS]
  local fence = redis.call('GET', fence_key)
  if fence and tonumber(fence) > tonumber(ARGV[10]) then return {-3, tonumber(fence)} end
end
local stored = redis.call('HMGET', KEYS[1], 'revision', 'version')
local current = tonumber(stored[1]) or 0
if (mode == 'append' or ARGV[2] ~= '') and current ~= tonumber(ARGV[2]) then
  return {-1, current}
end
if mode == 'append' and stored[2] and stored[2] ~= ARGV[6] then
  return {-2, tonumber(stored[2])}
end
local ninit, nset = tonumber(ARGV[7]), tonumber(ARGV[8])
local pos = 11
if mode == 'replace' or current == 0 then
  redis.call('DEL', KEYS[1], KEYS[2])
  if ninit > 0 then redis.call('HSET', KEYS[1], unpack(ARGV, pos, pos + ninit - 1)) end
end
pos = pos + ninit
if nset > 0 then redis.call('HSET', KEYS[1], unpack(ARGV, pos, pos + nset - 1)) end
pos = pos + nset
local count = nil
for i = pos, #ARGV, 1000 do
  count = redis.call('RPUSH', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
if not count then count = redis.call('LLEN', KEYS[2]) end
local revision = current + 1
redis.call('HSET', KEYS[1], 'revision', revision, 'updated_at', ARGV[3], 'message_count', count)
local index_is_new = redis.call('EXISTS', KEYS[3]) == 0
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[5])
local agents_is_new = false
local agents_key = KEYS[4]
if agents_key == fence_key then agents_key = nil end
if agents_key then
  agents_is_new = redis.call('EXISTS', agents_key) == 0
  redis.call('ZADD', agents_key, ARGV[3], ARGV[9])
end
touch(tonumber(ARGV[4]), index_is_new, agents_is_new, agents_key)
return {1, revision}
"""
)

# KEYS: 1 hash, 2 list, 3 index, 4 agents (optional).  ARGV: 1 ttl ms, 2 first message index.
# Returns {hash as a flat list, messages from ARGV[2] on, message count} or nil.
_LOAD_LUA = (
    _TOUCH_LUA
    + """
local fields = redis.call('HGETALL', KEYS[1])
if #fields == 0 then return false end
local count = redis.call('LLEN', KEYS[2])
local first = tonumber(ARGV[2])
local messages = {}
if first < count then messages = redis.call('LRANGE', KEYS[2], first, -1) end
if tonumber(ARGV[1]) > 0 then touch(tonumber(ARGV[1]), false, false, KEYS[4]) end
return {fields, messages, count}
"""
)

# KEYS: 1 hash, 2 list, 3 index, 4-6 the run-record keys (rh, rs, rz), 7 agents (optional).
# ARGV: 1 index member, 2 agent.
# 1 if the session existed. An agent whose last session of the user goes leaves the agents set.
_DELETE_LUA = """
local existed = redis.call('DEL', KEYS[1])
redis.call('DEL', KEYS[2], KEYS[4], KEYS[5], KEYS[6])
redis.call('ZREM', KEYS[3], ARGV[1])
if KEYS[7] and redis.call('EXISTS', KEYS[3]) == 0 then redis.call('ZREM', KEYS[7], ARGV[2]) end
return existed
"""

# Saves a run record of an existing session, then drops the session's other records started
# before the cutoff and those past the newest `max_runs - 1` (never the one saved). The keys get
# the expiry the session's hash has. KEYS: 1 hash, 2 rh, 3 rs, 4 rz.  ARGV: 1 reply id,
# 2 started_at, 3 summary JSON, 4 record JSON, 5 max_runs ("" = no limit), 6 cutoff ("" = none).
# 1 if saved, 0 if the session does not exist.
_SAVE_RUN_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local id = ARGV[1]
redis.call('HSET', KEYS[2], id, ARGV[4])
redis.call('HSET', KEYS[3], id, ARGV[3])
redis.call('ZADD', KEYS[4], ARGV[2], id)
local limit, cutoff = tonumber(ARGV[5]), tonumber(ARGV[6])
local newest = redis.call('ZREVRANGE', KEYS[4], 0, -1, 'WITHSCORES')
local kept = 1
for i = 1, #newest, 2 do
  local member = newest[i]
  if member ~= id then
    if (cutoff and tonumber(newest[i + 1]) < cutoff) or (limit and kept >= limit) then
      redis.call('ZREM', KEYS[4], member)
      redis.call('HDEL', KEYS[2], member)
      redis.call('HDEL', KEYS[3], member)
    else
      kept = kept + 1
    end
  end
end
local left = redis.call('PTTL', KEYS[1])
for i = 2, 4 do
  if left > 0 then redis.call('PEXPIRE', KEYS[i], left) else redis.call('PERSIST', KEYS[i]) end
end
return 1
"""

# KEYS: 1 hash, 2 rh, 3 rs, 4 rz.  ARGV: 1 reply id.  {record, summary, started_at}, or nil when
# the session or the record does not exist.
_GET_RUN_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local body = redis.call('HGET', KEYS[2], ARGV[1])
if not body then return false end
return {body, redis.call('HGET', KEYS[3], ARGV[1]) or '{}', redis.call('ZSCORE', KEYS[4], ARGV[1]) or '0'}
"""

# KEYS: 1 hash, 2 rs, 3 rz.  ARGV: 1 index of the last run listed (-1: all).  A flat list of
# (reply id, started_at, summary) newest first, or nil when the session does not exist.
_LIST_RUNS_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local members = redis.call('ZREVRANGE', KEYS[3], 0, tonumber(ARGV[1]), 'WITHSCORES')
local out = {}
for i = 1, #members, 2 do
  out[#out + 1] = members[i]
  out[#out + 1] = members[i + 1]
  out[#out + 1] = redis.call('HGET', KEYS[2], members[i]) or '{}'
end
return out
"""

# KEYS: 1 agents, 2 the agent's index.  ARGV: 1 agent.  Drops the agent if it has no index (any more).
_FORGET_AGENT_LUA = """
if redis.call('EXISTS', KEYS[2]) == 0 then return redis.call('ZREM', KEYS[1], ARGV[1]) end
return 0
"""

# Moves a legacy session to an agent, keeping revision, timestamps and expiry.
# KEYS: 1 source hash, 2 source list, 3 source index, 4 target hash, 5 target list, 6 target index,
#       7 agents, 8-10 source run-record keys, 11-13 target run-record keys.
# ARGV: 1 source session id, 2 target session id, 3 agent.
# 1 when moved, 0 if the target exists (nothing moved), -1 if the source is gone.
_MOVE_LUA = """
if redis.call('EXISTS', KEYS[4]) == 1 then return 0 end
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
for i = 0, 2 do
  if redis.call('EXISTS', KEYS[8 + i]) == 1 then
    redis.call('RENAME', KEYS[8 + i], KEYS[11 + i])
  else
    redis.call('DEL', KEYS[11 + i])
  end
end
local score = redis.call('ZSCORE', KEYS[3], ARGV[1]) or redis.call('HGET', KEYS[1], 'updated_at') or '0'
local ttl = redis.call('PTTL', KEYS[1])
redis.call('RENAME', KEYS[1], KEYS[4])
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('RENAME', KEYS[2], KEYS[5])
else
  redis.call('DEL', KEYS[5])
end
redis.call('HSET', KEYS[4], 'agent', ARGV[3], 'session_id', ARGV[2])
redis.call('ZREM', KEYS[3], ARGV[1])
local pairs_ = {{KEYS[6], ARGV[2]}, {KEYS[7], ARGV[3]}}
for _, entry in ipairs(pairs_) do
  local key = entry[1]
  local is_new = redis.call('EXISTS', key) == 0
  redis.call('ZADD', key, score, entry[2])
  if ttl > 0 then
    local left = redis.call('PTTL', key)
    if is_new or (left >= 0 and left < ttl) then redis.call('PEXPIRE', key, ttl) end
  else
    redis.call('PERSIST', key)
  end
end
return 1
"""

# KEYS: 1 index, 2.. the hashes of the listed members.  ARGV: the members.  Drops members whose
# hash is gone (expired or deleted behind our back), checked here so a session re-created
# meanwhile is kept.
_PRUNE_LUA = """
local dropped = 0
for i, member in ipairs(ARGV) do
  if redis.call('EXISTS', KEYS[i + 1]) == 0 then
    dropped = dropped + redis.call('ZREM', KEYS[1], member)
  end
end
return dropped
"""

# Deletes (or counts) a batch of one index's sessions for `prune` and `delete_user`.
# KEYS: 1 index, 2 the user's agents (the index again for the legacy agent ""), then per member its
#       hash, list, lock, fence and run-record keys (rh, rs, rz).  ARGV: 1 mode ("count" | "delete" |
#       "erase": delete, and the fence counters of sessions whose lock is free), 2 cutoff ("" = none),
#       3 "1" to skip locked sessions, then the members.  Returns {sessions counted or deleted,
#       members left in the index}.
# A session written since the index said it was idle (its hash's updated_at) stays; index entries
# of sessions already gone (expired) are dropped, with any run records left. An agent whose last
# session goes leaves the agents.
_PRUNE_SESSIONS_LUA = """
local mode, cutoff, skip = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local n, kept, owner = 0, 0, nil
for i = 4, #ARGV do
  local k = 3 + (i - 4) * 7
  local member = ARGV[i]
  local got = redis.call('HMGET', KEYS[k], 'updated_at', 'session_id', 'agent')
  if not got[1] or got[2] ~= member then
    if mode ~= 'count' then
      redis.call('ZREM', KEYS[1], member)
      if not got[1] then redis.call('DEL', KEYS[k + 4], KEYS[k + 5], KEYS[k + 6]) end
    else
      kept = kept + 1
    end
  elseif (cutoff and tonumber(got[1]) >= cutoff) or (skip and redis.call('EXISTS', KEYS[k + 2]) == 1) then
    kept = kept + 1
  else
    n = n + 1
    if mode == 'count' then
      kept = kept + 1
    else
      redis.call('DEL', KEYS[k], KEYS[k + 1], KEYS[k + 4], KEYS[k + 5], KEYS[k + 6])
      redis.call('ZREM', KEYS[1], member)
      owner = got[3]
      if mode == 'erase' and redis.call('EXISTS', KEYS[k + 2]) == 0 then redis.call('DEL', KEYS[k + 3]) end
    end
  end
end
if owner and KEYS[2] ~= KEYS[1] and redis.call('EXISTS', KEYS[1]) == 0 then redis.call('ZREM', KEYS[2], owner) end
return {n, kept}
"""

_PRUNE_BATCH = 200
"""Index entries `prune` looks at (and deletes, in one script) per round trip."""

# KEYS: pairs of (fence, lock).  Deletes each fencing counter whose session lock is not held.
_DELETE_FENCES_LUA = """
for i = 1, #KEYS, 2 do
  if redis.call('EXISTS', KEYS[i + 1]) == 0 then redis.call('DEL', KEYS[i]) end
end
return 0
"""

# KEYS: 1 hash.  ARGV: 1 revision the upgrade was computed from, then field/value pairs.
# Rewrites an older-format document in place (same revision) unless someone wrote meanwhile.
_UPGRADE_LUA = """
if redis.call('HGET', KEYS[1], 'revision') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
return 1
"""


def _id_token(value: str) -> str:
    """A key-safe, collision-free token for an id (no ``:``, braces, slashes or spaces)."""
    if not value:
        return "="
    raw = value.encode("utf-8", "surrogatepass")
    token = base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")
    if len(token) > _MAX_TOKEN:
        return "~" + hashlib.sha256(raw).hexdigest()
    return token


def _summary(raw: bytes | str) -> dict[str, Any]:
    try:
        value = _json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else value


def _redact(url: str) -> str:
    """The URL without its password."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.rsplit("@", 1)[-1]
        user = f"{parts.username}:" if parts.username else ":"
        return parts._replace(netloc=f"{user}***@{netloc}").geturl()
    except ValueError:
        return "<unparsable URL>"


class RedisStateStore(BaseStateStore):
    """Agent state in Redis (redis-py asyncio): a list per session for messages, a hash for the rest.

    Args:
        url: ``redis://[[user]:password@]host[:port][/db]``, ``rediss://`` or ``unix://``; ignored
            when `client` is given.
        client: an existing ``redis.asyncio.Redis`` to use; the store never closes it.
        prefix: the first component of every key (no braces), so stores can share a database.
        ttl: seconds a session lives after its last load or write (sliding expiry, Redis's own);
            None: forever.
        idle_ttl: the same as `ttl`, under the name every store takes (`BaseStateStore.idle_ttl`);
            give one of the two.
        lock_ttl: seconds a session lock outlives a holder that stopped renewing it (e.g. died).
        max_connections: size of the connection pool of a store-created client (per event loop).
            When every connection is busy, a command waits for one (up to `pool_timeout` seconds)
            instead of failing, so thousands of concurrent sessions share a bounded pool.
        pool_timeout: seconds a command waits for a free connection before `StateStoreError`.

    A store that creates its client keeps one per event loop (closed when that loop shuts down,
    or by `close`), so it can serve several ``asyncio.run`` calls. A store without `ttl` leaves
    the expiry of sessions written by a store with one alone. `session_lock` is a distributed
    lock (see `agentrt.state.redis_lock`); ``async with`` yields the hold, whose
    ``fencing_token`` increases with every acquisition.
    """

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        client: aioredis.Redis | None = None,
        prefix: str = "agentrt",
        ttl: float | None = None,
        lock_ttl: float = 30.0,
        max_connections: int = 100,
        pool_timeout: float = 30.0,
        idle_ttl: float | None = None,
    ) -> None:
        if idle_ttl is not None:
            if ttl is not None and ttl != idle_ttl:
                raise UserError(f"give ttl or idle_ttl (the same setting), not both: {ttl!r} and {idle_ttl!r}")
            if not idle_ttl > 0:
                raise UserError(f"idle_ttl must be a positive number of seconds or None, got {idle_ttl!r}")
            ttl = idle_ttl
        if not isinstance(max_connections, int) or max_connections < 1:
            raise UserError(f"max_connections must be a positive integer, got {max_connections!r}")
        if not pool_timeout > 0:
            raise UserError(f"pool_timeout must be a positive number of seconds, got {pool_timeout!r}")
        self._max_connections = max_connections
        self._pool_timeout = pool_timeout
        if not prefix or "{" in prefix or "}" in prefix:
            raise UserError(f"Redis key prefix must be non-empty and free of braces, got {prefix!r}")
        if ttl is not None and not ttl > 0:
            raise UserError(f"ttl must be a positive number of seconds or None, got {ttl!r}")
        if not lock_ttl >= 0.01:
            raise UserError(f"lock_ttl must be at least 0.01 s, got {lock_ttl!r}")
        self._owns_client = client is None
        self._url = url
        if client is None:
            client = self._new_client()
        self._client = client
        self._client_used = False
        # store-created clients, one per event loop: a redis.asyncio connection belongs to the loop
        # that opened it, and `asyncio.run` (e.g. `agent.call_sync`) makes a new loop every time
        self._loop_clients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[aioredis.Redis, AsyncGenerator[None, None]]
        ] = weakref.WeakKeyDictionary()
        kwargs = client.connection_pool.connection_kwargs
        password = kwargs.get("password")
        self._secrets = [str(password)] if password else []
        if kwargs.get("path"):
            self._where = f"Redis at unix:{kwargs['path']} (db {kwargs.get('db', 0)})"
        else:
            self._where = f"Redis at {kwargs.get('host', '?')}:{kwargs.get('port', 6379)} (db {kwargs.get('db', 0)})"
        self._prefix = prefix
        self._ttl = ttl
        self._idle_ttl = ttl
        self._ttl_ms = 0 if ttl is None else max(1, round(ttl * 1000))
        self._lock_ttl = lock_ttl
        self._closed = False
        self._legacy = LegacyFlag()
        self._legacy_index = re.compile(re.escape(prefix) + r":\{[^{}]*\}:index")
        self._write = client.register_script(_WRITE_LUA)
        self._load = client.register_script(_LOAD_LUA)
        self._delete = client.register_script(_DELETE_LUA)
        self._save_run = client.register_script(_SAVE_RUN_LUA)
        self._get_run = client.register_script(_GET_RUN_LUA)
        self._list_runs = client.register_script(_LIST_RUNS_LUA)
        self._forget_agent = client.register_script(_FORGET_AGENT_LUA)
        self._move = client.register_script(_MOVE_LUA)
        self._prune_index = client.register_script(_PRUNE_LUA)
        self._prune_sessions = client.register_script(_PRUNE_SESSIONS_LUA)
        self._delete_fences = client.register_script(_DELETE_FENCES_LUA)
        self._upgrade = client.register_script(_UPGRADE_LUA)
        self._lock_scripts = RedisLockScripts(client)

    def _new_client(self) -> aioredis.Redis:
        try:
            # A blocking pool: redis-py's default pool raises MaxConnectionsError when its 100
            # connections are busy, which failed 900 of 1,000 concurrent agent runs.
            pool = aioredis.BlockingConnectionPool.from_url(
                self._url,
                max_connections=self._max_connections,
                timeout=self._pool_timeout,
                socket_connect_timeout=5.0,
            )
            return aioredis.Redis.from_pool(pool)
        except ValueError as exc:
            raise StateStoreError(f"invalid Redis URL {_redact(self._url)!r}: {exc}") from None

    async def _conn(self) -> aioredis.Redis:
        """The client to use on the running event loop (the first use also looks for legacy sessions)."""
        client = await self._loop_client()
        if self._legacy.value is None:
            await self._legacy.get(lambda: self._any_legacy(client))
        return client

    async def _loop_client(self) -> aioredis.Redis:
        if self._closed:
            raise StateStoreError(f"this RedisStateStore ({self._where}) is closed")
        if not self._owns_client:
            return self._client
        loop = asyncio.get_running_loop()
        entry = self._loop_clients.get(loop)
        if entry is not None:
            return entry[0]
        client = self._new_client() if self._client_used else self._client
        self._client_used = True
        guard = self._close_with_loop(client)
        await guard.__anext__()  # runs to its `yield` at once; registers it with the loop
        self._loop_clients[loop] = (client, guard)
        return client

    async def _close_with_loop(self, client: aioredis.Redis) -> AsyncGenerator[None, None]:
        # Left suspended; the loop's shutdown_asyncgens() (asyncio.run does it) or `close` ends it.
        # It must not reference the loop: the weak-keyed map holds it.
        try:
            yield
        finally:
            for loop, (owned, _) in list(self._loop_clients.items()):
                if owned is client:
                    del self._loop_clients[loop]
            await client.aclose()

    @property
    def prefix(self) -> str:
        """The first component of every key this store writes."""
        return self._prefix

    @property
    def ttl(self) -> float | None:
        """Seconds a session lives after its last use, or None."""
        return self._ttl

    def __repr__(self) -> str:
        return f"RedisStateStore({self._where}, prefix={self._prefix!r}, ttl={self._ttl!r})"

    # -- keys ----------------------------------------------------------------------------------

    def _user_base(self, user_id: str) -> str:
        return f"{self._prefix}:{{{_id_token(user_id)}}}"

    def _agent_base(self, agent: str, user_id: str) -> str:
        base = self._user_base(user_id)
        return f"{base}:a:{_id_token(agent)}" if check_agent(agent) else base

    def _agents_key(self, user_id: str) -> str:
        return f"{self._user_base(user_id)}:agents"

    def _index_key(self, agent: str, user_id: str) -> str:
        return f"{self._agent_base(agent, user_id)}:index"

    def _session_base(self, agent: str, user_id: str, session_id: str) -> str:
        return f"{self._agent_base(agent, user_id)}:s:{_id_token(session_id)}"

    def _run_keys(self, agent: str, user_id: str, session_id: str) -> list[str]:
        """The run-record keys of a session: records, summaries, order."""
        base = self._session_base(agent, user_id, session_id)
        return [f"{base}:rh", f"{base}:rs", f"{base}:rz"]

    def _keys(self, agent: str, user_id: str, session_id: str) -> list[str]:
        """Hash, list, index (and agents) keys of a session, in the order the scripts expect."""
        base = self._session_base(agent, user_id, session_id)
        keys = [f"{base}:h", f"{base}:m", self._index_key(agent, user_id)]
        if agent:
            keys.append(self._agents_key(user_id))
        return keys

    # -- errors --------------------------------------------------------------------------------

    def _error(self, exc: RedisError) -> StateStoreError:
        detail = str(exc) or type(exc).__name__
        for secret in self._secrets:
            detail = detail.replace(secret, "***")
        if isinstance(exc, (RedisConnectionError, RedisTimeoutError)):
            return StateStoreError(f"cannot reach {self._where}: {detail}")
        return StateStoreError(f"{self._where} failed: {detail}")

    @contextmanager
    def _redis_errors(self) -> Iterator[None]:
        try:
            yield
        except RedisError as exc:
            raise self._error(exc) from exc

    @staticmethod
    def _describe(user_id: str, session_id: str) -> str:
        return f"session {session_id!r} of user {user_id!r}"

    # -- the store protocol --------------------------------------------------------------------

    async def load(self, user_id: str, session_id: str, *, agent: str = "") -> AgentState | None:
        """The stored state, or None; refreshes the session's expiry when the store has a ttl."""
        view = await self.load_view(user_id, session_id, agent=agent)
        return None if view is None else view.state

    async def load_view(
        self, user_id: str, session_id: str, *, agent: str = "", since_index: int = 0
    ) -> StateView | None:
        """The session with the messages from `since_index` on (``LRANGE`` from it), or None."""
        since_index = check_since_index(since_index)
        keys = self._keys(agent, user_id, session_id)
        client = await self._conn()
        with self._redis_errors():
            reply = await self._load(keys=keys, args=[self._ttl_ms, since_index], client=client)
        if reply is None:
            return None
        flat, items, count = reply
        offset = min(since_index, int(count))
        stored: dict[str, bytes | str] = {_text(k): v for k, v in zip(flat[::2], flat[1::2], strict=True)}
        if (
            _text(stored.get("agent", b"")) != agent
            or _text(stored.get("user_id", b"")) != user_id
            or _text(stored.get("session_id", b"")) != session_id
        ):
            raise StateStoreError(f"{self._describe(user_id, session_id)}: stored ids do not match its key")
        try:
            version = int(stored.get("version", 1))
            doc: dict[str, Any] = {
                "format": _text(stored.get("format", FORMAT)),
                "version": version,
                "agent": agent,
                "user_id": user_id,
                "session_id": session_id,
                "revision": int(stored["revision"]),
                "created_at": float(stored.get("created_at", 0.0)),
                "updated_at": float(stored.get("updated_at", 0.0)),
            }
            for name in STATE_FIELDS:
                raw = stored.get(f"f:{name}")
                if raw is not None:
                    doc[name] = _json.loads(raw)
        except (KeyError, ValueError, TypeError) as exc:
            raise StateStoreError(f"{self._describe(user_id, session_id)} is corrupt: {exc}") from exc
        state = decode_state(doc, [decode_message(item) for item in items])
        if version < SCHEMA_VERSION:
            await self._upgrade_in_place(keys[0], state)
        return StateView(state, offset)

    async def _upgrade_in_place(self, hash_key: str, state: AgentState) -> None:
        """Rewrite an older-format document in the current format (same revision)."""
        args: list[Any] = [state.revision, "format", FORMAT, "version", SCHEMA_VERSION]
        for name, value in encode_fields(state.fields_dict()).items():
            args += [f"f:{name}", _json.dumps(value)]
        client = await self._conn()
        with self._redis_errors():
            await self._upgrade(keys=[hash_key], args=args, client=client)

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
        """Append messages and set changed fields if `expected_revision` is current (one round trip)."""
        expected_revision = check_expected_revision(expected_revision)
        check_agent(agent)
        now = repr(time.time())
        init = self._header(agent, user_id, session_id, created_at=now)
        changed: list[Any] = []
        for name, value in encode_fields(fields or {}).items():
            changed += [f"f:{name}", _json.dumps(value)]
        return await self._run_write(
            agent,
            user_id,
            session_id,
            "append",
            expected_revision,
            now,
            init,
            changed,
            [encode_message(m) for m in messages],
        )

    async def save(self, state: AgentState, *, expected_revision: int | None = None) -> int:
        """Replace the whole session (messages and fields) atomically."""
        expected_revision = check_expected_revision(expected_revision, optional=True)
        check_agent(state.agent)
        now = repr(time.time())
        created = repr(float(state.created_at)) if state.created_at else now
        init = self._header(state.agent, state.user_id, state.session_id, created_at=created)
        for name, value in encode_fields(state.fields_dict()).items():
            init += [f"f:{name}", _json.dumps(value)]
        return await self._run_write(
            state.agent,
            state.user_id,
            state.session_id,
            "replace",
            expected_revision,
            now,
            init,
            [],
            [encode_message(m) for m in state.messages],
        )

    @staticmethod
    def _header(agent: str, user_id: str, session_id: str, *, created_at: str) -> list[Any]:
        return [
            "format",
            FORMAT,
            "version",
            SCHEMA_VERSION,
            "agent",
            agent,
            "user_id",
            user_id,
            "session_id",
            session_id,
            "created_at",
            created_at,
        ]

    async def _run_write(
        self,
        agent: str,
        user_id: str,
        session_id: str,
        mode: str,
        expected_revision: int | None,
        now: str,
        init: list[Any],
        changed: list[Any],
        encoded_messages: list[str],
    ) -> int:
        args: list[Any] = [
            mode,
            "" if expected_revision is None else expected_revision,
            now,
            self._ttl_ms,
            session_id,
            SCHEMA_VERSION,
            len(init),
            len(changed),
            agent,
            "",
            *init,
            *changed,
            *encoded_messages,
        ]
        keys = self._keys(agent, user_id, session_id)
        held = held_fence.get()
        if held is not None and held[0] == f"{self._session_base(agent, user_id, session_id)}:fence":
            # this task holds the session's lock: the write is refused once a later holder has a higher token
            args[9] = held[1]
            keys.append(held[0])
        client = await self._conn()
        with self._redis_errors():
            status, value = await self._write(keys=keys, args=args, client=client)
        status, value = int(status), int(value)
        if status == 1:
            return value
        what = self._describe(user_id, session_id)
        if status == -3:
            raise FencedError(
                f"{what}: the session lock was taken over (fencing token {value} > {held[1] if held else '?'}); "
                "this process may no longer write to it"
            )
        if status == -1:
            raise StateConflictError(f"{what} is at revision {value}, not {expected_revision}")
        if value > SCHEMA_VERSION:
            raise StateStoreError(
                f"{what} is stored in format version {value}, newer than this agentrt writes ({SCHEMA_VERSION}); "
                "upgrade agentrt"
            )
        raise StateConflictError(f"{what} is stored in the older format version {value}; load it (which upgrades it)")

    async def delete(self, user_id: str, session_id: str, *, agent: str = "") -> bool:
        """Remove the session's messages, fields, run records and index entry (its fencing counter stays)."""
        keys = self._keys(agent, user_id, session_id)
        keys[3:3] = self._run_keys(agent, user_id, session_id)
        client = await self._conn()
        with self._redis_errors():
            existed = await self._delete(keys=keys, args=[session_id, agent], client=client)
        return bool(existed)

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
        """One script: save the record if the session exists, evict the old and the surplus ones."""
        check_stored_run(run)
        max_runs = check_max_runs(max_runs)
        cutoff = retention_cutoff(older_than)
        keys = [self._keys(agent, user_id, session_id)[0], *self._run_keys(agent, user_id, session_id)]
        args = [
            run.reply_id,
            repr(float(run.started_at)),
            _json.dumps(run.summary),
            run.body,
            "" if max_runs is None else max_runs,
            "" if cutoff is None else repr(cutoff),
        ]
        client = await self._conn()
        with self._redis_errors():
            saved = await self._save_run(keys=keys, args=args, client=client)
        return bool(saved)

    async def get_run(self, user_id: str, session_id: str, reply_id: str, *, agent: str = "") -> StoredRun | None:
        """The record stored under `reply_id`, or None."""
        check_reply_id(reply_id)
        keys = [self._keys(agent, user_id, session_id)[0], *self._run_keys(agent, user_id, session_id)]
        client = await self._conn()
        with self._redis_errors():
            found = await self._get_run(keys=keys, args=[reply_id], client=client)
        if not found:
            return None
        body, summary, started = found
        return StoredRun(reply_id, float(_text(started)), _summary(summary), _text(body))

    async def list_runs(
        self, user_id: str, session_id: str, *, agent: str = "", limit: int | None = None
    ) -> list[RunInfo]:
        """The session's runs, newest first (their summaries)."""
        limit = check_prune_limit(limit)
        if limit == 0:
            return []
        run_keys = self._run_keys(agent, user_id, session_id)
        keys = [self._keys(agent, user_id, session_id)[0], run_keys[1], run_keys[2]]
        client = await self._conn()
        with self._redis_errors():
            flat = await self._list_runs(keys=keys, args=[-1 if limit is None else limit - 1], client=client)
        if not flat:
            return []
        return [
            RunInfo(_text(flat[i]), float(_text(flat[i + 1])), _summary(flat[i + 2])) for i in range(0, len(flat), 3)
        ]

    async def list_sessions(self, user_id: str, *, agent: str | None = None) -> list[SessionInfo]:
        """The user's sessions (of every agent, or of `agent`), newest first; drops expired entries."""
        client = await self._conn()
        if agent is not None:
            infos = await self._list_agent(client, check_agent(agent), user_id)
        else:
            agents_key = self._agents_key(user_id)
            with self._redis_errors():
                raw_names: list[Any] = await client.zrange(agents_key, 0, -1)
                names = [_text(m) for m in raw_names]
            infos = await self._list_agent(client, "", user_id)
            for name in names:
                found = await self._list_agent(client, name, user_id)
                if not found:
                    with self._redis_errors():
                        await self._forget_agent(
                            keys=[agents_key, self._index_key(name, user_id)], args=[name], client=client
                        )
                infos += found
        infos.sort(key=lambda info: info.updated_at, reverse=True)
        return infos

    async def _list_agent(self, client: aioredis.Redis, agent: str, user_id: str) -> list[SessionInfo]:
        index = self._index_key(agent, user_id)
        with self._redis_errors():
            raw_members: list[Any] = await client.zrange(index, 0, -1, desc=True)
            members = [_text(m) for m in raw_members]
            if not members:
                return []
            pipe = client.pipeline(transaction=False)
            hash_keys = [self._keys(agent, user_id, sid)[0] for sid in members]
            for key in hash_keys:
                pipe.hmget(key, ["revision", "message_count", "updated_at", "session_id"])
            rows = await pipe.execute()
            infos: list[SessionInfo] = []
            gone: list[int] = []
            for i, (sid, row) in enumerate(zip(members, rows, strict=True)):
                revision, count, updated, stored_sid = row
                if revision is None or stored_sid is None or _text(stored_sid) != sid:
                    gone.append(i)
                    continue
                infos.append(
                    SessionInfo(
                        agent=agent,
                        user_id=user_id,
                        session_id=sid,
                        message_count=int(count or 0),
                        revision=int(revision),
                        updated_at=float(updated or 0.0),
                    )
                )
            if gone:
                await self._prune_index(
                    keys=[index, *(hash_keys[i] for i in gone)], args=[members[i] for i in gone], client=client
                )
        return infos

    # -- retention -----------------------------------------------------------------------------

    async def delete_user(self, user_id: str) -> int:
        """`BaseStateStore.delete_user`, then every other key of the user (found with ``SCAN``).

        The sessions go through the user's indexes; then a ``SCAN`` of the user's keys (it reads
        every key name of the database, never blocking the server long) deletes what is left: the
        fencing counters (of sessions deleted earlier too), and sessions no index lists (counted).
        Only the lock of a session held right now stays (it expires by itself), with its counter.
        """
        if not isinstance(user_id, str):
            raise InvalidTypeError(f"user_id must be a str, not {type(user_id).__name__}")
        count = await self._prune_indexes(
            None, user_id=user_id, agent=None, limit=None, mode="erase", skip_locked=False
        )
        client = await self._conn()
        match = _glob_escape(self._user_base(user_id)) + ":*"
        found: list[str] = []
        with self._redis_errors():
            async for key in client.scan_iter(match=match, count=1000):
                found.append(_text(key))
            doomed = [key for key in found if key.endswith((":h", ":m", ":rh", ":rs", ":rz"))]
            if doomed:
                count += sum(1 for key in doomed if key.endswith(":h"))
                await client.delete(*doomed)
            fences: list[str] = []
            for key in found:
                if key.endswith(":fence"):
                    fences += [key, key[: -len("fence")] + "lock"]
            for start in range(0, len(fences), 2 * _PRUNE_BATCH):
                await self._delete_fences(keys=fences[start : start + 2 * _PRUNE_BATCH], args=[], client=client)
        return count

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
        """Reads the indexes (sorted by updated_at): the user's, or all of them found by ``SCAN``.

        Each index is pruned oldest first, `_PRUNE_BATCH` entries per Lua script, which checks
        every session's ``updated_at`` and lock key again (a locked session is skipped, whichever
        process holds it). A prune across users ``SCAN`` s the key space for the indexes (it never
        blocks the server for long, but reads every key name): with a ttl, Redis expires idle
        sessions by itself.
        """
        mode = "count" if dry_run else "delete"
        return await self._prune_indexes(
            cutoff, user_id=user_id, agent=agent, limit=limit, mode=mode, skip_locked=skip_locked
        )

    async def _prune_indexes(
        self,
        cutoff: float | None,
        *,
        user_id: str | None,
        agent: str | None,
        limit: int | None,
        mode: str,
        skip_locked: bool,
    ) -> int:
        client = await self._conn()
        count = 0
        for index, agents in await self._indexes(client, user_id, agent):
            if limit is not None and count >= limit:
                break
            remaining = None if limit is None else limit - count
            count += await self._prune_one_index(client, index, agents, cutoff, remaining, mode, skip_locked)
        return count

    async def _indexes(self, client: aioredis.Redis, user_id: str | None, agent: str | None) -> list[tuple[str, str]]:
        """(index key, the user's agents key or the index key for the legacy agent) of the indexes to prune."""
        if user_id is not None:
            if agent is not None:
                agents = [agent]
            else:
                with self._redis_errors():
                    raw: list[Any] = await client.zrange(self._agents_key(user_id), 0, -1)
                agents = ["", *(_text(name) for name in raw)]
            found = []
            for name in agents:
                index = self._index_key(name, user_id)
                found.append((index, self._agents_key(user_id) if name else index))
            return found
        match = _glob_escape(self._prefix) + ":{*}*:index"  # the legacy ``P:{U}:index`` and ``P:{U}:a:A:index``
        if agent:
            match = _glob_escape(self._prefix) + ":{*}:a:" + _glob_escape(_id_token(agent)) + ":index"
        indexes: list[tuple[str, str]] = []
        cursor: int = 0
        with self._redis_errors():
            while True:
                cursor, keys = await client.scan(cursor, match=match, count=1000)
                for key in map(_text, keys):
                    legacy = self._legacy_index.fullmatch(key) is not None
                    if agent == "" and not legacy:
                        continue
                    user_base = key[: key.index("}") + 1]
                    indexes.append((key, key if legacy else f"{user_base}:agents"))
                if not cursor:
                    return sorted(set(indexes))

    async def _prune_one_index(
        self,
        client: aioredis.Redis,
        index: str,
        agents: str,
        cutoff: float | None,
        limit: int | None,
        mode: str,
        skip_locked: bool,
    ) -> int:
        base = index[: -len(":index")]
        top = "+inf" if cutoff is None else f"({cutoff!r}"
        count = offset = 0
        while limit is None or count < limit:
            batch = _PRUNE_BATCH if limit is None else min(_PRUNE_BATCH, limit - count)
            with self._redis_errors():
                raw: list[Any] = await client.zrangebyscore(index, "-inf", top, start=offset, num=batch)
                members = [_text(m) for m in raw]
                if not members:
                    return count
                keys = [index, agents]
                for member in members:
                    session = f"{base}:s:{_id_token(member)}"
                    keys += [f"{session}:h", f"{session}:m", f"{session}:lock", f"{session}:fence"]
                    keys += [f"{session}:rh", f"{session}:rs", f"{session}:rz"]
                args = [mode, "" if cutoff is None else repr(cutoff), "1" if skip_locked else "0", *members]
                done, kept = await self._prune_sessions(keys=keys, args=args, client=client)
            count += int(done)
            offset += int(kept)  # what stays in the index (locked, written meanwhile, or only counted)
        return count

    def session_lock(
        self, user_id: str, session_id: str, *, timeout: float | None = None, agent: str = ""
    ) -> RedisSessionLock:
        """A lock on the session shared by every process using this Redis and prefix.

        ``async with store.session_lock(u, s, timeout=5) as hold:`` waits in arrival order behind
        calls of this process, then for the Redis lock; `SessionBusyError` after `timeout` seconds
        in total. ``hold.fencing_token`` strictly increases with each acquisition of the session.
        """
        if self._closed:
            raise StateStoreError(f"this RedisStateStore ({self._where}) is closed")
        locks = self._locks
        if locks is None:
            locks = self._locks = LocalSessionLocks()
        base = self._session_base(agent, user_id, session_id)
        return RedisSessionLock(
            locks,
            (agent, user_id, session_id),
            timeout,
            scripts=self._lock_scripts,
            connect=self._conn,
            lock_key=f"{base}:lock",
            fence_key=f"{base}:fence",
            want_key=f"{base}:want",
            lock_ttl=self._lock_ttl,
            fence_retention=max(_FENCE_RETENTION, self._ttl or 0.0),
            describe=self._describe(user_id, session_id),
            error=self._error,
        )

    # -- the legacy layout ---------------------------------------------------------------------

    @property
    def has_legacy_sessions(self) -> bool:
        """Whether Redis held sessions in the legacy layout (agent ``""``) at the store's first use.

        Known once the store has run its first operation (a ``SCAN`` of the key space for legacy
        indexes, stopping at the first); refreshed by `migrate_legacy`.
        """
        return bool(self._legacy.value)

    async def _legacy_indexes(self, client: aioredis.Redis, *, first_only: bool = False) -> list[str]:
        """The index keys of the legacy layout (``SCAN``: never blocks the server for long)."""
        match = _glob_escape(self._prefix) + ":{*}:index"
        found: list[str] = []
        cursor: int = 0
        with self._redis_errors():
            while True:
                cursor, keys = await client.scan(cursor, match=match, count=1000)
                # agents' indexes (``...:a:A:index``) match the pattern too: keep the legacy ones
                found += [key for key in map(_text, keys) if self._legacy_index.fullmatch(key)]
                if not cursor or (first_only and found):
                    return found

    async def _any_legacy(self, client: aioredis.Redis) -> bool:
        return bool(await self._legacy_indexes(client, first_only=True))

    async def _recheck_legacy(self) -> None:
        self._legacy.value = await self._any_legacy(await self._loop_client())

    async def _legacy_sessions(self, user_id: str | None) -> list[tuple[str, str]]:
        client = await self._conn()
        if user_id is not None:
            return [(user_id, info.session_id) for info in await self._list_agent(client, "", user_id)]
        found: list[tuple[str, str]] = []
        for index in await self._legacy_indexes(client):
            base = index[: -len(":index")]
            with self._redis_errors():
                raw_members: list[Any] = await client.zrange(index, 0, -1)
                members = [_text(m) for m in raw_members]
                if not members:
                    continue
                pipe = client.pipeline(transaction=False)
                for sid in members:
                    pipe.hmget(f"{base}:s:{_id_token(sid)}:h", ["user_id", "session_id"])
                rows = await pipe.execute()
            for sid, (user, stored_sid) in zip(members, rows, strict=True):
                if user is not None and stored_sid is not None and _text(stored_sid) == sid:
                    found.append((_text(user), sid))
        return found

    async def _move_legacy(self, user_id: str, session_id: str, agent: str, target: str) -> bool | None:
        # one script: the keys are renamed (revision, timestamps and expiry kept), the indexes updated
        source = self._keys("", user_id, session_id)
        keys = [*source, *self._keys(agent, user_id, target)]
        keys += [*self._run_keys("", user_id, session_id), *self._run_keys(agent, user_id, target)]
        client = await self._conn()
        with self._redis_errors():
            moved = int(await self._move(keys=keys, args=[session_id, target, agent], client=client))
        return None if moved < 0 else moved == 1

    async def close(self) -> None:
        """Close the client if this store created it (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if not self._owns_client:
            return
        if not self._client_used:
            await self._client.aclose()
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # pragma: no cover - close() is a coroutine, so a loop is running
            loop = None
        entries = list(self._loop_clients.items())
        self._loop_clients.clear()
        for owner, (_, guard) in entries:
            if owner is loop:
                await guard.aclose()
            # clients of other loops close when those loops shut down (their guards run then)

    async def __aenter__(self) -> Self:
        return self
