"""An agent takes over only its own legacy sessions on Redis, PostgreSQL and MySQL (see tests/legacy_sessions.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from agentrt.state import RedisStateStore, SqlStateStore
from agentrt.state.base import BaseStateStore
from legacy_sessions import check_legacy_adoption

pytestmark = pytest.mark.integration


@pytest.fixture(params=["redis", "postgres", "mysql"])
async def service(request: pytest.FixtureRequest, unique: str) -> AsyncIterator[tuple[str, str]]:
    """The service's URL and a namespace owned by the test (deleted afterwards)."""
    kind: str = request.param
    url: str = request.getfixturevalue(f"{kind}_url")
    if kind == "redis":
        prefix = f"t-{unique}"
        yield url, prefix
        client = aioredis.from_url(url)
        try:
            keys = [key async for key in client.scan_iter(match=f"{prefix}:*", count=1000)]
            if keys:
                await client.delete(*keys)
        finally:
            await client.aclose()
    else:
        prefix = f"t_{unique}_"
        yield url, prefix
        async with SqlStateStore(url, table_prefix=prefix) as cleaner:
            await cleaner.drop_tables()


async def test_an_agent_moves_only_its_own_legacy_sessions(
    service: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    url, prefix = service

    def open_store() -> BaseStateStore:
        if url.startswith("redis"):
            return RedisStateStore(url, prefix=prefix)
        return SqlStateStore(url, table_prefix=prefix)

    await check_legacy_adoption(open_store, caplog)
