"""RedisJobs against a real Redis: the job backend contract (tests/jobs_contract.py), and Redis specifics.

Side effects checked: the log's entries (read back raw), the queue's length, which worker holds a
job after each step.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jobs_contract

pytest.importorskip("redis")

import redis.asyncio as aioredis

from agentrt.errors import FencedError
from agentrt.server.jobs import END_EVENT, Job, JobEventSource
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


def _job(n: int = 0) -> Job:
    return Job(id=uuid.uuid4().hex, agent="a", user_id="u", session_id=f"s{n}", input=({"role": "user"},))


async def test_claim_heartbeat_takeover_and_fencing(redis_url: str, prefix: str) -> None:
    jobs = RedisJobs(redis_url, prefix=prefix, lease_seconds=0.3)
    try:
        job = _job()
        await jobs.submit(job)
        assert await jobs.depth() == 1
        first = await jobs.claim("A", block=0.1)
        assert first is not None and (first.job, first.token, first.taken_over) == (job, 1, False)
        assert await jobs.claim("B", block=0.1) is None, "a held job is not handed out twice"
        assert await jobs.append(job.id, first.token, [("e", b"1"), ("e", b"2")]) == 2
        for _ in range(3):  # heartbeats keep it past several lease times
            await asyncio.sleep(0.15)
            assert await jobs.renew(first)
        assert await jobs.claim("B", block=0.05) is None
        await asyncio.sleep(0.4)  # A stops heartbeating: its lease runs out
        second = await jobs.claim("B", block=0.1)
        assert second is not None and second.job == job and second.token == 2 and second.taken_over
        with pytest.raises(FencedError):
            await jobs.append(job.id, first.token, [("e", b"stale")])
        assert not await jobs.renew(first) and not await jobs.complete(first)
        assert await jobs.append(job.id, second.token, [("e", b"3"), (END_EVENT, b"{}")]) == 4
        frames = await jobs.read(job.id, 0, block=0.1)
        assert frames is not None and [(f.seq, f.data) for f in frames] == [
            (1, b"1"),
            (2, b"2"),
            (3, b"3"),
            (4, b"{}"),
        ], "the stale append left nothing"
        assert await jobs.complete(second) and await jobs.depth() == 0
        assert await jobs.claim("C", block=0.05) is None
    finally:
        await jobs.close()


async def test_a_handed_back_job_is_claimed_at_once_and_its_holder_is_fenced(redis_url: str, prefix: str) -> None:
    jobs = RedisJobs(redis_url, prefix=prefix, lease_seconds=30)
    try:
        job = _job()
        await jobs.submit(job)
        held = await jobs.claim("A", block=0.1)
        assert held is not None
        await jobs.release(held)
        again = await jobs.claim("B", block=0.1)  # long before the 30 s lease
        assert again is not None and again.job == job and again.token > held.token
        with pytest.raises(FencedError):
            await jobs.append(job.id, held.token, [("e", b"x")])
    finally:
        await jobs.close()


async def test_the_event_source_numbers_frames_and_stops_at_the_end(redis_url: str, prefix: str) -> None:
    jobs = RedisJobs(redis_url, prefix=prefix)
    try:
        job = _job()
        await jobs.submit(job)
        lease = await jobs.claim("A", block=0.1)
        assert lease is not None
        source = JobEventSource(jobs, job.id)
        assert await source.next_frames(0.05) == []  # nothing yet: a heartbeat's worth of waiting
        await jobs.append(job.id, lease.token, [("run_started", b'{"a":1}'), ("run_finished", b"{}")])
        frames = await source.next_frames(1.0)
        assert frames == [
            f'id: {job.id}:1\nevent: run_started\ndata: {{"a":1}}\n\n'.encode(),
            f"id: {job.id}:2\nevent: run_finished\ndata: {{}}\n\n".encode(),
        ]
        await jobs.append(job.id, lease.token, [(END_EVENT, b"{}")])
        assert await source.next_frames(1.0) is None
        resumed = JobEventSource(jobs, job.id, after=1)  # a reconnect with Last-Event-ID <job>:1
        assert await resumed.next_frames(1.0) == [frames[1]]
        assert await JobEventSource(jobs, "no-such-job").next_frames(0.05) is None
    finally:
        await jobs.close()


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["claim", "append", "renew", "lapse"]), st.integers(0, 2)), min_size=1, max_size=12
    )
)
async def test_only_the_current_holder_ever_appends(redis_url: str, prefix: str, steps: list[tuple[str, int]]) -> None:
    jobs = RedisJobs(redis_url, prefix=f"{prefix}-{uuid.uuid4().hex[:6]}", lease_seconds=0.15)
    try:
        job = _job()
        await jobs.submit(job)
        leases: dict[int, object] = {}
        current = 0  # the highest token handed out
        written: list[bytes] = []
        for action, worker in steps:
            lease = leases.get(worker)
            if action == "claim":
                got = await jobs.claim(f"w{worker}", block=0.01)
                if got is not None:
                    assert got.token == current + 1
                    current = got.token
                    leases[worker] = got
            elif action == "lapse":
                await asyncio.sleep(0.2)
            elif lease is not None:
                token = lease.token  # type: ignore[attr-defined]
                if action == "renew":
                    assert await jobs.renew(lease) is (token == current)  # type: ignore[arg-type]
                else:
                    data = f"{worker}:{token}:{len(written)}".encode()
                    try:
                        await jobs.append(job.id, token, [("e", data)])
                    except FencedError:
                        assert token != current
                    else:
                        assert token == current
                        written.append(data)
        frames = await jobs.read(job.id, 0, block=0.01) if written else []
        assert [f.data for f in frames or []] == written
        assert [f.seq for f in frames or []] == list(range(1, len(written) + 1))
    finally:
        await jobs.close()


async def test_blocking_reads_fit_in_the_socket_timeout(redis_url: str, prefix: str) -> None:
    # redis-py 8 times a read out after 5 s by default; an SSE heartbeat waits 15 s for events.
    from agentrt.server.jobs import redis as backend

    jobs = RedisJobs(redis_url, prefix=prefix)
    try:
        timeout = jobs._client.connection_pool.connection_kwargs["socket_timeout"]
        assert timeout > backend._MAX_BLOCK + 5
    finally:
        await jobs.close()


async def test_a_job_that_keeps_killing_its_workers_ends_with_an_error(redis_url: str, prefix: str) -> None:
    from agentrt.server.jobs import DurableRuns, JobWorker

    jobs = RedisJobs(redis_url, prefix=prefix, lease_seconds=30)
    runs = DurableRuns(jobs, workers=0)
    try:
        job = await runs.submit("helper", "alice", "s", "hi")
        for _ in range(2):  # two workers died on it
            lease = await jobs.claim("dead", block=0.1)
            assert lease is not None
            await jobs.release(lease)
        called: list[object] = []
        worker = JobWorker({"helper": called}, jobs, jobs, lambda e: b"{}", max_attempts=2)  # type: ignore[dict-item]
        task = asyncio.get_running_loop().create_task(worker.run(poll=0.1))
        with pytest.raises(RuntimeError, match="gave up"):
            await asyncio.wait_for(runs.result(job), 10)
        await worker.drain(1.0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert called == [] and await jobs.depth() == 0, "the agent never ran again and the job is gone"
    finally:
        await jobs.close()
