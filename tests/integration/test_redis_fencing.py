"""Fenced session writes on Redis: a holder whose lock was taken over cannot write when it wakes up.

The side effect checked is the stored session (its messages and revision), read by a fresh store,
never only the exception.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("redis")

import redis.asyncio as aioredis

from agentrt.errors import FencedError
from agentrt.message import Msg
from agentrt.state.stores.redis import RedisStateStore

pytestmark = pytest.mark.integration


@pytest.fixture
async def prefix(redis_url: str, unique: str) -> AsyncIterator[str]:
    name = f"fence-{unique}"
    yield name
    client = aioredis.from_url(redis_url)
    try:
        keys = [key async for key in client.scan_iter(match=f"{name}:*", count=1000)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


async def _pause(hold: object) -> None:
    """Simulate a paused process: its lock renewal stops (as under SIGSTOP), the body goes on later."""
    renewal = hold._renewal  # type: ignore[attr-defined]
    hold._stopping = True  # type: ignore[attr-defined]
    renewal.cancel()
    await asyncio.wait([renewal])


async def test_a_holder_whose_lock_expired_and_was_taken_cannot_write(redis_url: str, prefix: str) -> None:
    zombie_store = RedisStateStore(redis_url, prefix=prefix, lock_ttl=0.3)
    other_store = RedisStateStore(redis_url, prefix=prefix, lock_ttl=0.3)
    try:
        zombie_in = asyncio.Event()
        taken = asyncio.Event()
        outcome: list[BaseException | int] = []

        async def zombie() -> None:
            async with zombie_store.session_lock("u", "s", agent="a") as hold:
                rev = await zombie_store.append("u", "s", [Msg.user("before")], expected_revision=0, agent="a")
                await _pause(hold)
                zombie_in.set()
                await taken.wait()  # woken up after the lock expired and another holder wrote
                try:
                    outcome.append(
                        await zombie_store.append("u", "s", [Msg.user("stale")], expected_revision=rev, agent="a")
                    )
                except FencedError as exc:
                    outcome.append(exc)

        async def successor() -> None:
            await zombie_in.wait()
            async with other_store.session_lock("u", "s", agent="a", timeout=5):  # waits for the expiry
                state = await other_store.load("u", "s", agent="a")
                assert state is not None
                await other_store.append(
                    "u", "s", [Msg.assistant("after")], expected_revision=state.revision, agent="a"
                )
                taken.set()
                await asyncio.sleep(0.05)

        await asyncio.wait_for(asyncio.gather(zombie(), successor()), 10)
        assert len(outcome) == 1 and isinstance(outcome[0], FencedError), outcome
        fresh = RedisStateStore(redis_url, prefix=prefix)
        try:
            stored = await fresh.load("u", "s", agent="a")
        finally:
            await fresh.close()
        assert stored is not None and [m.text for m in stored.messages] == ["before", "after"]
        # Writes outside any lock (and by the current holder) still go through.
        assert await fresh_append(redis_url, prefix, stored.revision) == stored.revision + 1
    finally:
        await zombie_store.close()
        await other_store.close()


async def fresh_append(redis_url: str, prefix: str, revision: int) -> int:
    store = RedisStateStore(redis_url, prefix=prefix)
    try:
        return await store.append("u", "s", [Msg.user("unlocked")], expected_revision=revision, agent="a")
    finally:
        await store.close()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(holders=st.integers(min_value=2, max_value=4), writes=st.lists(st.integers(0, 3), min_size=1, max_size=8))
async def test_only_the_latest_holder_of_a_session_writes(
    redis_url: str, prefix: str, holders: int, writes: list[int]
) -> None:
    """Holders take the lock in turn (each pausing after its turn); any later write by an earlier one is refused."""
    session = f"p-{holders}-{len(writes)}-{abs(hash(tuple(writes)))}"
    stores = [RedisStateStore(redis_url, prefix=prefix, lock_ttl=0.2) for _ in range(holders)]
    turns = [asyncio.Event() for _ in range(holders)]
    done = asyncio.Event()
    accepted: list[int] = []
    refused: list[int] = []

    async def holder(i: int) -> None:
        if i:
            await turns[i - 1].wait()
        async with stores[i].session_lock("u", session, agent="a", timeout=5) as hold:
            await _pause(hold)
            turns[i].set()
            await done.wait()
            for who in writes:
                if who % holders != i:
                    continue
                state = await stores[i].load("u", session, agent="a")
                revision = state.revision if state is not None else 0
                try:
                    await stores[i].append("u", session, [Msg.user(f"by {i}")], expected_revision=revision, agent="a")
                    accepted.append(i)
                except FencedError:
                    refused.append(i)

    async def last_holder_is_in() -> None:
        await turns[-1].wait()
        done.set()

    try:
        await asyncio.wait_for(asyncio.gather(*(holder(i) for i in range(holders)), last_holder_is_in()), 20)
        latest = holders - 1
        assert set(accepted) <= {latest}, (accepted, refused)
        assert sorted(refused) == sorted(w % holders for w in writes if w % holders != latest)
        state = await stores[0].load("u", session, agent="a")
        stored = [m.text for m in state.messages] if state is not None else []
        assert stored == [f"by {latest}"] * len(accepted)
    finally:
        for store in stores:
            await store.close()
