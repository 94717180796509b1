"""RedisStateStore against a real Redis: contract, key layout, TTL, Lua atomicity, distributed locks."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("redis")

import redis.asyncio as aioredis
from redis.crc import key_slot

import agentrt
from agentrt.errors import SessionBusyError, StateConflictError, StateStoreError
from agentrt.message import Msg
from agentrt.state import AgentState, codec
from agentrt.state.stores.redis import RedisStateStore, _id_token
from agentrt.testing import check_state_store

pytestmark = pytest.mark.integration

SRC = str(Path(agentrt.__file__).resolve().parents[1])


@pytest.fixture
async def prefix(redis_url: str, unique: str) -> AsyncIterator[str]:
    """A key prefix owned by one test; every key under it is deleted afterwards."""
    name = f"t-{unique}"
    yield name
    client = aioredis.from_url(redis_url)
    try:
        keys = [key async for key in client.scan_iter(match=f"{name}:*", count=1000)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


@pytest.fixture
async def raw(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """A plain client for looking at keys."""
    client = aioredis.from_url(redis_url)
    yield client
    await client.aclose()


def _lock_key(store: RedisStateStore, user: str, session: str, part: str = "lock") -> str:
    return f"{store._session_base('', user, session)}:{part}"


async def _run_python(code: str, *args: str) -> asyncio.subprocess.Process:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        textwrap.dedent(code),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )


# -- the contract and the layout ------------------------------------------------------------------


async def test_contract(redis_url: str, prefix: str) -> None:
    await check_state_store(lambda: RedisStateStore(redis_url, prefix=prefix))


async def test_contract_with_ttl_and_shared_client(redis_url: str, prefix: str, raw: aioredis.Redis) -> None:
    await check_state_store(lambda: RedisStateStore(client=raw, prefix=prefix, ttl=60))
    assert await raw.ping(), "a client the store did not create stays open"


async def test_key_layout_and_awkward_ids(redis_url: str, prefix: str, raw: aioredis.Redis) -> None:
    user, session = "u:{x}/ y", "a:b}{c d/é" + "z" * 300
    async with RedisStateStore(redis_url, prefix=prefix) as store:
        await store.append(user, session, [Msg.user("hi")], expected_revision=0)
        async with store.session_lock(user, session):
            pass
        keys = sorted([k.decode() async for k in raw.scan_iter(match=f"{prefix}:*")])
        assert len(keys) == 4, keys  # hash, list, index, fence (the lock and the want key are gone)
        assert len({key_slot(k.encode()) for k in keys}) == 1, "a user's keys must share one cluster slot"
        for key in keys:
            rest = key[len(prefix) + 1 :]
            assert rest.startswith("{") and rest.count("{") == 1 and rest.count("}") == 1, key
            assert " " not in rest and "/" not in rest and "é" not in rest, key
            assert len(key) < 200, "long ids are hashed"
        hash_key = next(k for k in keys if k.endswith(":h"))
        stored = await raw.hgetall(hash_key)
        assert stored[b"user_id"] == user.encode() and stored[b"session_id"] == session.encode()
        assert stored[b"revision"] == b"1" and stored[b"message_count"] == b"1"
        assert [s.session_id for s in await store.list_sessions(user)] == [session]
        # the empty id and an id that looks like another's encoding stay apart
        await store.append("", "", [Msg.user("empty")], expected_revision=0)
        await store.append("=", "=", [Msg.user("equals")], expected_revision=0)
        empty, equals = await store.load("", ""), await store.load("=", "=")
        assert empty is not None and equals is not None
        assert (empty.messages[0].text, equals.messages[0].text) == ("empty", "equals")


async def test_many_messages_in_one_write(redis_url: str, prefix: str) -> None:
    msgs = [Msg.user(f"m{i}") for i in range(2500)]  # more than one RPUSH batch in the script
    async with RedisStateStore(redis_url, prefix=prefix) as store:
        assert await store.append("u", "s", msgs, expected_revision=0) == 1
        state = await store.load("u", "s")
        assert state is not None and state.messages == msgs
        assert await store.save(AgentState(user_id="u", session_id="s", messages=msgs[::-1]), expected_revision=1) == 2
        state = await store.load("u", "s")
        assert state is not None and state.messages == msgs[::-1]
        assert (await store.list_sessions("u"))[0].message_count == 2500


async def test_format_versions(redis_url: str, prefix: str, raw: aioredis.Redis) -> None:
    async with RedisStateStore(redis_url, prefix=prefix) as store:
        await store.append("u", "old", [Msg.user("hi")], fields={"metadata": {"legacy": "sum"}}, expected_revision=0)
        hash_key = store._keys("", "u", "old")[0]
        await raw.hset(hash_key, "version", 0)

        def upgrade(doc: dict[str, Any]) -> dict[str, Any]:
            doc = dict(doc)
            doc["metadata"] = dict(doc["metadata"])
            doc["summary"] = doc["metadata"].pop("legacy")
            return doc

        codec.register_migration(0, upgrade)
        try:
            with pytest.raises(StateConflictError, match="older format version 0"):
                await store.append("u", "old", [], expected_revision=1)
            state = await store.load("u", "old")
            assert state is not None and state.summary == "sum" and state.metadata == {}
            assert state.revision == 1 and state.version == 1
            assert await raw.hget(hash_key, "version") == b"1", "an older document is upgraded in place on load"
            assert await raw.hget(hash_key, "revision") == b"1", "an upgrade is not a new revision"
            assert await store.append("u", "old", [Msg.user("more")], expected_revision=1) == 2
        finally:
            codec._migrations.pop(0, None)

        await raw.hset(hash_key, "version", 99)
        with pytest.raises(StateStoreError, match="version 99"):
            await store.load("u", "old")
        with pytest.raises(StateStoreError, match="newer than this agentrt"):
            await store.append("u", "old", [], expected_revision=2)


# -- expiry ----------------------------------------------------------------------------------------


async def test_ttl_applied_and_refreshed(redis_url: str, prefix: str, raw: aioredis.Redis) -> None:
    async with RedisStateStore(redis_url, prefix=prefix, ttl=2.0) as store:
        await store.append("u", "s", [Msg.user("hi")], expected_revision=0)
        keys = store._keys("", "u", "s")
        for key in keys:
            assert 1500 < await raw.pttl(key) <= 2000, key
        await asyncio.sleep(0.5)
        before = [await raw.pttl(key) for key in keys]
        assert all(0 < left < 1600 for left in before), before
        assert await store.load("u", "s") is not None
        after = [await raw.pttl(key) for key in keys]
        assert all(left > 1900 for left in after), f"load must refresh the expiry: {before} -> {after}"
        await asyncio.sleep(0.3)
        await store.append("u", "s", [], fields={"summary": "x"}, expected_revision=1)
        assert all(left > 1900 for left in [await raw.pttl(key) for key in keys]), "append must refresh the expiry"
        await store.list_sessions("u")
        assert await raw.pttl(keys[0]) > 1500

    async with RedisStateStore(redis_url, prefix=prefix) as forever:
        await forever.append("u", "kept", [Msg.user("hi")], expected_revision=0)
        assert await raw.pttl(forever._keys("", "u", "kept")[0]) == -1, "no ttl: sessions never expire"
        assert await raw.pttl(forever._keys("", "u", "kept")[2]) == -1, "the index outlives sessions without ttl"


async def test_expired_sessions_leave_the_listing(redis_url: str, prefix: str, raw: aioredis.Redis) -> None:
    async with RedisStateStore(redis_url, prefix=prefix, ttl=1.0) as store:
        await store.append("u", "old", [Msg.user("a")], expected_revision=0)
        await asyncio.sleep(0.6)
        await store.append("u", "new", [Msg.user("b")], expected_revision=0)
        assert {s.session_id for s in await store.list_sessions("u")} == {"old", "new"}
        await asyncio.sleep(0.6)  # "old" expired at 1.0 s, "new" lives until 1.6 s
        assert [s.session_id for s in await store.list_sessions("u")] == ["new"]
        index = store._keys("", "u", "new")[2]
        assert await raw.zrange(index, 0, -1) == [b"new"], "expired sessions are pruned from the index"
        assert await store.load("u", "old") is None
        assert await store.append("u", "old", [Msg.user("again")], expected_revision=0) == 1, "expired: revision 0"
        await asyncio.sleep(1.1)
        assert await store.list_sessions("u") == []
        assert await raw.exists(index) == 0, "the index expires with the last of its sessions"


# -- Lua atomicity ---------------------------------------------------------------------------------


async def test_concurrent_appends_from_two_instances(redis_url: str, prefix: str) -> None:
    a = RedisStateStore(redis_url, prefix=prefix)
    b = RedisStateStore(redis_url, prefix=prefix)
    async with a, b:
        await a.append("u", "s", [], expected_revision=0)
        conflicts = 0

        async def writer(i: int) -> int:
            nonlocal conflicts
            store = a if i % 2 else b
            for _ in range(1000):
                current = await store.load("u", "s")
                assert current is not None
                try:
                    return await store.append("u", "s", [Msg.user(f"w{i}")], expected_revision=current.revision)
                except StateConflictError:
                    conflicts += 1
            raise AssertionError(f"writer {i} never got through")

        revisions = await asyncio.gather(*(writer(i) for i in range(50)))
        assert sorted(revisions) == list(range(2, 52)), "each accepted write gets its own next revision"
        assert conflicts > 0, "the writers must actually have raced"
        state = await a.load("u", "s")
        assert state is not None and state.revision == 51
        by_revision = [f"w{i}" for _, i in sorted(zip(revisions, range(50), strict=True))]
        assert [m.text for m in state.messages] == by_revision, "messages are stored in revision order, none lost"


# -- locks -----------------------------------------------------------------------------------------


async def test_lock_two_instances_fifo_and_fencing(redis_url: str, prefix: str) -> None:
    a = RedisStateStore(redis_url, prefix=prefix, lock_ttl=2.0)
    b = RedisStateStore(redis_url, prefix=prefix, lock_ttl=2.0)
    async with a, b:
        inside = 0
        peak = 0
        order: list[tuple[str, int, int]] = []

        async def call(store: RedisStateStore, tag: str, i: int) -> None:
            nonlocal inside, peak
            async with store.session_lock("u", "s", timeout=30) as hold:
                inside += 1
                peak = max(peak, inside)
                assert hold.fencing_token is not None and not hold.lost
                order.append((tag, i, hold.fencing_token))
                await asyncio.sleep(0.005)
                inside -= 1

        tasks = []
        for i in range(15):
            tasks.append(asyncio.create_task(call(a, "a", i)))
            tasks.append(asyncio.create_task(call(b, "b", i)))
        await asyncio.gather(*tasks)
        assert peak == 1, "strictly one holder at a time across instances"
        assert [i for tag, i, _ in order if tag == "a"] == list(range(15)), "FIFO within an instance"
        assert [i for tag, i, _ in order if tag == "b"] == list(range(15)), "FIFO within an instance"
        tokens = [token for _, _, token in order]
        assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens), "fencing tokens strictly increase"
        switches = sum(1 for x, y in itertools.pairwise(order) if x[0] != y[0])
        assert switches >= 10, f"contending instances take turns rather than one starving the other: {order}"
        assert len(a._locks or ()) == 0 and len(b._locks or ()) == 0, "in-process lock entries are dropped when idle"


async def test_lock_busy_and_renewal(redis_url: str, prefix: str, raw: aioredis.Redis) -> None:
    a = RedisStateStore(redis_url, prefix=prefix, lock_ttl=0.3)
    b = RedisStateStore(redis_url, prefix=prefix, lock_ttl=0.3)
    async with a, b:
        async with a.session_lock("u", "s") as held:
            started = time.monotonic()
            with pytest.raises(SessionBusyError, match="busy"):
                async with b.session_lock("u", "s", timeout=0.8):
                    raise AssertionError("acquired a held lock")
            waited = time.monotonic() - started
            assert 0.75 < waited < 3.0, waited  # gives up at its timeout (upper bound: CI noise)
            assert 0 < await raw.pttl(_lock_key(a, "u", "s")) <= 300, "renewal keeps a long-held lock alive"
            assert not held.lost
            async with b.session_lock("u", "other", timeout=0.2):  # other sessions are free
                pass
        assert await raw.exists(_lock_key(a, "u", "s"), _lock_key(a, "u", "s", "want")) == 0
        async with b.session_lock("u", "s", timeout=0.2) as hold:
            assert hold.fencing_token == (held.fencing_token or 0) + 1


async def test_lock_lost_is_reported(redis_url: str, prefix: str, raw: aioredis.Redis) -> None:
    async with RedisStateStore(redis_url, prefix=prefix, lock_ttl=0.3) as store:
        async with store.session_lock("u", "s") as hold:
            await raw.delete(_lock_key(store, "u", "s"))  # e.g. expired during a long pause
            for _ in range(100):
                if hold.lost:
                    break
                await asyncio.sleep(0.02)
            assert hold.lost, "renewal must notice that the key no longer holds our token"
            other = RedisStateStore(redis_url, prefix=prefix)
            async with other, other.session_lock("u", "s", timeout=1.0) as thief:
                assert (thief.fencing_token or 0) > (hold.fencing_token or 0)
                thief_value = await raw.get(_lock_key(store, "u", "s"))
                assert thief_value is not None
        assert await raw.exists(_lock_key(store, "u", "s")) == 0, "nothing left behind"

    # a hold whose lock was taken over must not release the new holder's lock on exit
    a = RedisStateStore(redis_url, prefix=prefix, lock_ttl=0.3)
    b = RedisStateStore(redis_url, prefix=prefix, lock_ttl=0.3)
    async with a, b:
        stale = a.session_lock("u", "t")
        await stale.__aenter__()
        await raw.delete(_lock_key(a, "u", "t"))
        async with b.session_lock("u", "t", timeout=1.0) as fresh:
            await stale.__aexit__(None, None, None)
            value = await raw.get(_lock_key(b, "u", "t"))
            assert isinstance(value, bytes) and value.startswith(f"{fresh.fencing_token}:".encode())


async def test_lock_cancellation(redis_url: str, prefix: str, raw: aioredis.Redis) -> None:
    a = RedisStateStore(redis_url, prefix=prefix, lock_ttl=5.0)
    b = RedisStateStore(redis_url, prefix=prefix, lock_ttl=5.0)
    async with a, b:
        holding = asyncio.Event()

        async def hold_forever() -> None:
            async with a.session_lock("u", "s"):
                holding.set()
                await asyncio.sleep(3600)

        holder = asyncio.create_task(hold_forever())
        await holding.wait()
        waiter = asyncio.create_task(b.session_lock("u", "s").__aenter__())
        await asyncio.sleep(0.1)
        assert await raw.get(_lock_key(b, "u", "s", "want")), "a waiter claims the next turn"
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert await raw.exists(_lock_key(b, "u", "s", "want")) == 0, "a cancelled waiter drops its claim"

        holder.cancel()
        with pytest.raises(asyncio.CancelledError):
            await holder
        assert await raw.exists(_lock_key(a, "u", "s")) == 0, "a cancelled holder releases the Redis lock"
        # Nothing stale blocks the next callers: a leftover claim or lock would make these time out.
        async with a.session_lock("u", "s", timeout=0.5), b.session_lock("u", "t", timeout=0.5):
            pass
        async with b.session_lock("u", "s", timeout=0.5):
            pass


_DYING_HOLDER = """
import asyncio, sys
from agentrt.state.stores.redis import RedisStateStore

async def main(url, prefix):
    store = RedisStateStore(url, prefix=prefix, lock_ttl=1.0)
    hold = store.session_lock("u", "s")
    await hold.__aenter__()
    print(hold.fencing_token, flush=True)
    await asyncio.sleep(3600)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def test_dead_holder_releases_by_expiry(redis_url: str, prefix: str, raw: aioredis.Redis) -> None:
    proc = await _run_python(_DYING_HOLDER, redis_url, prefix)
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line.strip(), (await proc.stderr.read()).decode() if proc.stderr else ""
        dead_token = int(line)
        async with RedisStateStore(redis_url, prefix=prefix, lock_ttl=1.0) as store:
            with pytest.raises(SessionBusyError):
                async with store.session_lock("u", "s", timeout=1.5):  # renewed while the holder lives
                    pass
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
            killed = time.monotonic()
            async with store.session_lock("u", "s", timeout=5.0) as hold:
                waited = time.monotonic() - killed
                assert hold.fencing_token is not None and hold.fencing_token > dead_token
            assert 0.4 < waited < 3.5, f"the lock of a dead holder frees after lock_ttl, not {waited:.2f} s"
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


_CALLER = """
import asyncio, json, sys
import redis.asyncio as aioredis
from agentrt.errors import StateConflictError
from agentrt.message import Msg
from agentrt.state.stores.redis import RedisStateStore

async def main(url, prefix, tag, n):
    raw = aioredis.from_url(url)
    await raw.incr(prefix + ":barrier")
    while int(await raw.get(prefix + ":barrier")) < 2:
        await asyncio.sleep(0.005)
    await raw.aclose()
    conflicts, tokens, revisions = 0, [], []
    async with RedisStateStore(url, prefix=prefix, lock_ttl=5.0) as store:
        for i in range(n):
            async with store.session_lock("u", "s", timeout=60) as hold:
                tokens.append(hold.fencing_token)
                state = await store.load("u", "s")
                try:
                    revisions.append(
                        await store.append("u", "s", [Msg.user(f"{tag}-{i}")], expected_revision=state.revision)
                    )
                except StateConflictError:
                    conflicts += 1
    print(json.dumps({"conflicts": conflicts, "tokens": tokens, "revisions": revisions}))

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
"""


async def test_two_processes_share_a_session(redis_url: str, prefix: str) -> None:
    async with RedisStateStore(redis_url, prefix=prefix) as store:
        await store.append("u", "s", [], expected_revision=0)
        procs = [await _run_python(_CALLER, redis_url, prefix, tag, "100") for tag in ("p", "q")]
        outputs = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in procs)), 100)
        results = []
        for proc, (out, err) in zip(procs, outputs, strict=True):
            assert proc.returncode == 0, err.decode()
            results.append(json.loads(out))
        assert [r["conflicts"] for r in results] == [0, 0], "the lock serialises the calls: zero conflicts"
        state = await store.load("u", "s")
        assert state is not None and state.revision == 201 and len(state.messages) == 200
        texts = [m.text for m in state.messages]
        for tag in ("p", "q"):
            assert [t for t in texts if t.startswith(f"{tag}-")] == [f"{tag}-{i}" for i in range(100)]
        tokens = sorted(t for r in results for t in r["tokens"])
        assert len(set(tokens)) == 200, "every acquisition has its own fencing token"
        for r in results:
            assert r["tokens"] == sorted(r["tokens"]) and r["revisions"] == sorted(r["revisions"])
        # the turns interleave: both processes were served throughout, neither starved
        switches = sum(1 for x, y in itertools.pairwise(texts) if x[0] != y[0])
        assert switches >= 10, f"only {switches} hand-overs between the processes"


# -- errors and lifecycle --------------------------------------------------------------------------


async def test_unreachable_or_invalid_url() -> None:
    store = RedisStateStore("redis://:s3cret-pw@127.0.0.1:1/0")
    assert "s3cret" not in repr(store)
    with pytest.raises(StateStoreError, match=r"127\.0\.0\.1:1") as caught:
        await store.load("u", "s")
    assert "s3cret" not in str(caught.value) and "s3cret" not in str(caught.value.__cause__)
    with pytest.raises(StateStoreError, match=r"127\.0\.0\.1:1"):
        async with store.session_lock("u", "s", timeout=1):
            pass
    await store.close()

    async with RedisStateStore("redis://no-such-host.invalid:6379/0") as nowhere:
        with pytest.raises(StateStoreError, match=r"no-such-host\.invalid"):
            await nowhere.list_sessions("u")

    with pytest.raises(StateStoreError, match="invalid Redis URL") as caught:
        RedisStateStore("http://user:s3cret-pw@example.com/")
    assert "s3cret" not in str(caught.value)


async def test_close(redis_url: str, prefix: str, raw: aioredis.Redis) -> None:
    shared = RedisStateStore(client=raw, prefix=prefix)
    await shared.append("u", "s", [Msg.user("hi")], expected_revision=0)
    await shared.close()
    await shared.close()
    assert await raw.ping(), "a client passed in is not closed"
    with pytest.raises(StateStoreError, match="closed"):
        await shared.load("u", "s")

    own = RedisStateStore(redis_url, prefix=prefix)
    async with own as entered:
        assert entered is own
        assert (await own.load("u", "s")) is not None
    await own.close()  # again, after the context manager closed it


def test_store_survives_several_event_loops(redis_url: str, unique: str) -> None:
    """`asyncio.run` per call (e.g. `agent.call_sync`) must not trip over a client of a closed loop."""
    prefix = f"t-{unique}"
    store = RedisStateStore(redis_url, prefix=prefix, lock_ttl=1.0)

    async def one_call(i: int) -> int:
        async with store.session_lock("u", "s", timeout=5):
            state = await store.load("u", "s")
            return await store.append("u", "s", [Msg.user(f"{i}")], expected_revision=state.revision if state else 0)

    assert [asyncio.run(one_call(i)) for i in range(3)] == [1, 2, 3]

    async def finish() -> None:
        state = await store.load("u", "s")
        assert state is not None and [m.text for m in state.messages] == ["0", "1", "2"]
        raw = await store._conn()
        keys = [key async for key in raw.scan_iter(match=f"{prefix}:*")]
        await raw.delete(*keys)
        await store.close()

    asyncio.run(finish())
    assert not store._loop_clients, "each loop's client is closed with its loop or by close()"


# -- agents and the legacy layout --------------------------------------------------------------------


async def test_agent_key_layout(redis_url: str, prefix: str, raw: aioredis.Redis) -> None:
    async with RedisStateStore(redis_url, prefix=prefix, ttl=60) as store:
        await store.append("u", "s", [Msg.user("a")], expected_revision=0, agent="alpha")
        await store.append("u", "s", [Msg.user("b")], expected_revision=0, agent="beta:{x}")
        async with store.session_lock("u", "s", agent="alpha"):
            pass
        keys = sorted([k.decode() async for k in raw.scan_iter(match=f"{prefix}:*")])
        assert len({key_slot(k.encode()) for k in keys}) == 1, "a user's keys of every agent share one slot"
        alpha = f"{prefix}:{{dQ}}:a:YWxwaGE"  # base64url of "u" and "alpha"
        assert {f"{alpha}:s:cw:h", f"{alpha}:s:cw:m", f"{alpha}:index", f"{alpha}:s:cw:fence"} <= set(keys)
        agents_key = f"{prefix}:{{dQ}}:agents"
        assert await raw.zrange(agents_key, 0, -1) == [b"alpha", b"beta:{x}"]
        for key in (agents_key, f"{alpha}:index", f"{alpha}:s:cw:h"):
            assert 0 < await raw.pttl(key) <= 60_000, f"{key} expires with the sessions"
        assert (await raw.hgetall(f"{alpha}:s:cw:h"))[b"agent"] == b"alpha"
        assert store.has_legacy_sessions is False
        assert await store.delete("u", "s", agent="alpha") is True
        assert await raw.zrange(agents_key, 0, -1) == [b"beta:{x}"], "an agent without sessions leaves the set"
        await raw.delete(store._keys("beta:{x}", "u", "s")[0])  # gone behind the store's back (e.g. expired)
        assert await store.list_sessions("u") == []
        assert await raw.exists(agents_key) == 0, "listing drops agents whose sessions are all gone"


async def _legacy_session(raw: aioredis.Redis, prefix: str, user: str, session: str, texts: list[str]) -> str:
    """Keys as agentrt wrote them before sessions had an agent: P:{U}:index and P:{U}:s:S:h / :m."""
    base = f"{prefix}:{{{_id_token(user)}}}"
    hash_key = f"{base}:s:{_id_token(session)}:h"
    await raw.hset(
        hash_key,
        mapping={
            "format": "agentrt.state",
            "version": 1,
            "user_id": user,
            "session_id": session,
            "revision": 2,
            "created_at": 1000.0,
            "updated_at": 2000.0,
            "message_count": len(texts),
            "f:summary": json.dumps("old"),
        },
    )
    await raw.rpush(f"{base}:s:{_id_token(session)}:m", *(Msg.user(t).to_json() for t in texts))
    await raw.zadd(f"{base}:index", {session: 2000.0})
    return hash_key


async def test_legacy_keys_are_read_as_agent_empty_and_migrated(
    redis_url: str, prefix: str, raw: aioredis.Redis
) -> None:
    old = await _legacy_session(raw, prefix, "alice", "bot:s1", ["hello", "again"])
    await raw.pexpire(old, 50_000)
    await _legacy_session(raw, prefix, "alice", "plain", ["p"])
    await _legacy_session(raw, prefix, "b" * 300, "other:x", ["b"])  # a hashed user token
    async with RedisStateStore(redis_url, prefix=prefix) as store:
        state = await store.load("alice", "bot:s1")
        assert state is not None and state.agent == "" and [m.text for m in state.messages] == ["hello", "again"]
        assert (state.revision, state.summary) == (2, "old")
        assert store.has_legacy_sessions is True
        assert await store.load("alice", "s1", agent="bot") is None
        assert await store.migrate_legacy("bot") == 1
        moved = store._keys("bot", "alice", "s1")[0]
        assert await raw.exists(old) == 0 and await raw.exists(moved) == 1, "the keys were renamed"
        assert 0 < await raw.pttl(moved) <= 50_000, "a moved session keeps its expiry"
        stored = await raw.hgetall(moved)
        assert (stored[b"agent"], stored[b"session_id"], stored[b"revision"]) == (b"bot", b"s1", b"2")
        assert await raw.zrange(store._keys("bot", "alice", "s1")[2], 0, -1, withscores=True) == [(b"s1", 2000.0)]
        state = await store.load("alice", "s1", agent="bot")
        assert state is not None and [m.text for m in state.messages] == ["hello", "again"] and state.revision == 2
        assert await store.append("alice", "s1", [Msg.user("new")], expected_revision=2, agent="bot") == 3
        assert [(i.agent, i.session_id) for i in await store.list_sessions("alice")] == [("bot", "s1"), ("", "plain")]
        assert await store.migrate_legacy("other") == 1
        assert [(i.agent, i.session_id) for i in await store.list_sessions("b" * 300)] == [("other", "x")]
        assert store.has_legacy_sessions is True
        assert await store.migrate_legacy("bot", all_unprefixed=True) == 1
        assert store.has_legacy_sessions is False
    async with RedisStateStore(redis_url, prefix=prefix) as store:
        await store.load("alice", "plain", agent="bot")
        assert store.has_legacy_sessions is False, "a new store looks again"
