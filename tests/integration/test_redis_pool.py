"""Many concurrent sessions on one Redis store share a bounded connection pool: they wait, never fail.

redis-py's default pool raises ``MaxConnectionsError`` once its 100 connections are busy; the
benchmark saw 900 of 1,000 concurrent agent runs fail that way. The store now uses a blocking pool.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from agentrt import ReActAgent, RuntimeContext
from agentrt.errors import UserError
from agentrt.model import ScriptedModel
from agentrt.state import RedisStateStore


@pytest.fixture
async def prefix(redis_url: str) -> AsyncIterator[str]:
    name = f"pool-{uuid.uuid4().hex[:10]}"
    yield name
    client = aioredis.from_url(redis_url)
    try:
        keys = [key async for key in client.scan_iter(match=f"{name}:*", count=1000)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


async def test_more_concurrent_runs_than_connections_all_complete(redis_url: str, prefix: str) -> None:
    sessions = 300
    async with RedisStateStore(redis_url, prefix=prefix, max_connections=8) as store:
        agent = ReActAgent("pooled", model=ScriptedModel(["ok"], repeat=True), state_store=store)
        replies = await asyncio.gather(
            *(agent.call("hi", RuntimeContext(user_id="u", session_id=f"s{i}")) for i in range(sessions))
        )
        assert {reply.text for reply in replies} == {"ok"}
        listed = await store.list_sessions("u", agent="pooled")
        assert len(listed) == sessions  # every run's messages reached Redis
        assert all(info.message_count == 2 for info in listed)
        client = await store._loop_client()
        assert client.connection_pool.max_connections == 8


def test_pool_settings_are_validated() -> None:
    with pytest.raises(UserError, match="max_connections"):
        RedisStateStore(max_connections=0)
    with pytest.raises(UserError, match="pool_timeout"):
        RedisStateStore(pool_timeout=0)


async def test_a_lock_exit_is_not_held_up_by_a_renewal_that_swallowed_its_cancellation(
    redis_url: str, prefix: str
) -> None:
    """On Python 3.11 a Redis command cancelled as the pool hands it a connection can swallow the
    CancelledError; the renewal loop must still end when the hold exits (it used to renew forever
    and the exit waited for it: 8 of 10,000 concurrent runs never finished)."""
    async with RedisStateStore(redis_url, prefix=prefix, lock_ttl=0.06) as store:
        scripts = store._lock_scripts
        real_renew = scripts.renew
        in_renew = asyncio.Event()
        renewals = 0

        async def swallowing_renew(*args: Any, **kwargs: Any) -> Any:
            nonlocal renewals
            renewals += 1
            in_renew.set()
            try:
                await asyncio.Event().wait()  # until cancelled
            except asyncio.CancelledError:
                return await real_renew(*args, **kwargs)  # the cancellation is lost, as in the bug
            raise AssertionError("unreachable")

        scripts.renew = swallowing_renew  # type: ignore[assignment]  # a stand-in for the Lua script
        hold = store.session_lock("u", "s")
        await hold.__aenter__()
        await in_renew.wait()  # the renewal task is inside its (cancellation-swallowing) command
        await asyncio.wait_for(hold.__aexit__(None, None, None), timeout=5)
        count = renewals
        await asyncio.sleep(0.1)  # several renewal intervals: a loop still running would renew again
        assert renewals == count
        async with store.session_lock("u", "s", timeout=1):  # released: free for the next caller
            pass
