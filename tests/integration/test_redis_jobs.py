"""RedisJobs against a real Redis: the job backend contract (tests/jobs_contract.py), and Redis specifics.

Side effects checked: the log's entries (read back raw), the queue's length, which worker holds a
job after each step.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, given, settings

import jobs_contract

pytest.importorskip("redis")

import redis.asyncio as aioredis

from agentrt.server.jobs.redis import RedisJobs

pytestmark = pytest.mark.integration


@pytest.fixture
async def prefix(redis_url: str, unique: str) -> AsyncIterator[str]:
    name = f"jobs-{unique}"
    yield name
    client = aioredis.from_url(redis_url)
    try:  # the test's keys, and those of the prefixes derived from it (``{name}-...``)
        keys = [key async for key in client.scan_iter(match=f"{name}*", count=1000)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


@pytest.fixture
async def make(redis_url: str, prefix: str) -> AsyncIterator[jobs_contract.MakeBackend]:
    made: list[RedisJobs] = []

    def make_(*, lease_seconds: float = 10.0, log_ttl: float = 3600.0, space: str = "") -> jobs_contract.Backend:
        jobs = RedisJobs(
            redis_url, prefix=f"{prefix}-{space}" if space else prefix, lease_seconds=lease_seconds, log_ttl=log_ttl
        )
        made.append(jobs)
        return jobs

    yield make_
    for jobs in made:
        await jobs.close()


@pytest.mark.parametrize("check", jobs_contract.CHECKS, ids=jobs_contract.check_id)
async def test_contract(make: jobs_contract.MakeBackend, check: jobs_contract.Check) -> None:
    await check(make)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=jobs_contract.STEPS)
async def test_contract_interleavings(make: jobs_contract.MakeBackend, steps: list[tuple[str, int]]) -> None:
    await jobs_contract.check_interleaving(make, steps)


async def test_blocking_reads_fit_in_the_socket_timeout(redis_url: str, prefix: str) -> None:
    # redis-py 8 times a read out after 5 s by default; an SSE heartbeat waits 15 s for events.
    from agentrt.server.jobs import redis as backend

    jobs = RedisJobs(redis_url, prefix=prefix)
    try:
        timeout = jobs._client.connection_pool.connection_kwargs["socket_timeout"]
        assert timeout > backend._MAX_BLOCK + 5
    finally:
        await jobs.close()
