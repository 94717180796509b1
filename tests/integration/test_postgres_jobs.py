"""PostgresJobs against a real PostgreSQL: the job backend contract, plus its rows, notifications and expiry.

Side effects checked: the rows of ``{prefix}_jobs`` and ``{prefix}_job_events`` read back with a
separate connection, what another backend object (another replica) reads, the server's view of
the backend's connections (``pg_stat_activity``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

import jobs_contract

pytest.importorskip("asyncpg")

import asyncpg  # type: ignore[import-untyped]  # asyncpg ships no type hints

from agentrt import _json
from agentrt.errors import InvalidValueError
from agentrt.server.jobs.factory import jobs_from_url
from agentrt.server.jobs.postgres import PostgresJobs
from agentrt.server.jobs.redis import RedisJobs

pytestmark = pytest.mark.integration

OpenJobs = Callable[..., PostgresJobs]


def _plain(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


@pytest.fixture
async def db(postgres_url: str) -> AsyncIterator[Any]:
    """A raw connection to the test database, to look at the rows."""
    conn = await asyncpg.connect(_plain(postgres_url))
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def open_jobs(postgres_url: str, unique: str, db: Any) -> AsyncIterator[OpenJobs]:
    """``open_jobs(space="", **options)``: a PostgresJobs on this test's tables; all closed and dropped after."""
    prefix = f"jobs_{unique}"
    made: list[PostgresJobs] = []

    def open_(space: str = "", url: str = postgres_url, **options: Any) -> PostgresJobs:
        jobs = PostgresJobs(url, prefix=f"{prefix}_{space}" if space else prefix, **options)
        made.append(jobs)
        return jobs

    yield open_
    for jobs in made:
        await jobs.close()
    tables = await db.fetch(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND starts_with(tablename, $1)", prefix
    )
    if tables:
        await db.execute("DROP TABLE IF EXISTS " + ", ".join(f'"{t["tablename"]}"' for t in tables) + " CASCADE")


@pytest.fixture
def make(open_jobs: OpenJobs) -> jobs_contract.MakeBackend:
    def make_(*, lease_seconds: float = 10.0, log_ttl: float = 3600.0, space: str = "") -> jobs_contract.Backend:
        return open_jobs(space, lease_seconds=lease_seconds, log_ttl=log_ttl)

    return make_


@pytest.mark.parametrize("check", jobs_contract.CHECKS, ids=jobs_contract.check_id)
async def test_contract(make: jobs_contract.MakeBackend, check: jobs_contract.Check) -> None:
    await check(make)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=jobs_contract.STEPS)
async def test_only_the_current_holder_ever_appends(
    make: jobs_contract.MakeBackend, steps: list[tuple[str, int]]
) -> None:
    await jobs_contract.check_interleaving(make, steps)


# -- PostgreSQL specifics -------------------------------------------------------------------------
async def _job_row(db: Any, jobs: PostgresJobs, job_id: str) -> dict[str, Any]:
    row = await db.fetchrow(
        f"SELECT *, extract(epoch FROM lease_until - now())::float8 AS lease_left,"
        f" extract(epoch FROM expires_at - now())::float8 AS ttl_left FROM {jobs.jobs_table} WHERE id = $1",
        job_id,
    )
    assert row is not None
    return dict(row)


async def test_the_rows_follow_the_job(open_jobs: OpenJobs, db: Any) -> None:
    jobs = open_jobs(lease_seconds=5, log_ttl=600)
    job = jobs_contract.new_job(user="gina", n=3)
    await jobs.submit(job)
    row = await _job_row(db, jobs, job.id)
    assert (row["agent"], row["user_id"], row["session_id"]) == ("a", "gina", "s3")
    assert _json.loads(row["payload"]) == job.to_dict()
    assert (row["token"], row["worker"], row["lease_until"], row["seq"], row["done"]) == (0, None, None, 0, False)
    assert 595 < row["ttl_left"] <= 600
    with pytest.raises(InvalidValueError, match="already submitted"):
        await jobs.submit(job)

    lease = await jobs.claim("A", block=0.1)
    assert lease is not None and lease.handle == job.id
    row = await _job_row(db, jobs, job.id)
    assert (row["token"], row["worker"]) == (1, "A") and 4.5 < row["lease_left"] <= 5, "the lease is on the DB clock"

    assert await jobs.append(job.id, 1, [("a", b'{"x":1}'), ("b", b"\x00\xff")]) == 2
    assert await jobs.append(job.id, 1, []) == 2
    assert await jobs.append(job.id, 1, [("c", b"{}")]) == 3
    events = await db.fetch(f"SELECT job_id, seq, type, data FROM {jobs.events_table} ORDER BY seq")
    assert [tuple(e) for e in events] == [
        (job.id, 1, "a", b'{"x":1}'),
        (job.id, 2, "b", b"\x00\xff"),
        (job.id, 3, "c", b"{}"),
    ]
    assert (await _job_row(db, jobs, job.id))["seq"] == 3

    assert await jobs.complete(lease)
    row = await _job_row(db, jobs, job.id)
    assert (row["done"], row["lease_until"], row["token"]) == (True, None, 1)
    assert 595 < row["ttl_left"] <= 600, "a finished run stays readable for log_ttl"


async def test_a_released_job_looks_long_expired(open_jobs: OpenJobs, db: Any) -> None:
    jobs = open_jobs(lease_seconds=30)
    job = jobs_contract.new_job()
    await jobs.submit(job)
    lease = await jobs.claim("A", block=0.1)
    assert lease is not None
    await jobs.release(lease)
    row = await _job_row(db, jobs, job.id)
    assert (row["token"], row["worker"], row["done"]) == (2, None, False) and row["lease_left"] < -1e6


async def test_a_claim_wakes_when_a_lease_runs_out(open_jobs: OpenJobs) -> None:
    holder, waiter = open_jobs(lease_seconds=0.6), open_jobs(lease_seconds=0.6)
    job = jobs_contract.new_job()
    await holder.submit(job)
    assert await holder.claim("A", block=0.1) is not None
    started = time.monotonic()
    lease = await waiter.claim("B", block=5.0)  # no notification comes: it wakes at the lease's end
    elapsed = time.monotonic() - started
    assert lease is not None and lease.token == 2
    assert 0.4 < elapsed < 1.2, elapsed


async def test_concurrent_replicas_create_the_tables_once(open_jobs: OpenJobs, db: Any, unique: str) -> None:
    replicas = [open_jobs("fresh") for _ in range(5)]
    assert await asyncio.gather(*(r.depth() for r in replicas)) == [0] * 5
    prefix = f"jobs_{unique}_fresh"
    tables = await db.fetch("SELECT tablename FROM pg_tables WHERE starts_with(tablename, $1) ORDER BY 1", prefix)
    assert [t["tablename"] for t in tables] == [f"{prefix}_job_events", f"{prefix}_jobs"]
    indexes = await db.fetch("SELECT indexname FROM pg_indexes WHERE tablename = $1 ORDER BY 1", f"{prefix}_jobs")
    assert [i["indexname"] for i in indexes] == [
        f"{prefix}_jobs_expiry",
        f"{prefix}_jobs_lease",
        f"{prefix}_jobs_pkey",
        f"{prefix}_jobs_queue",
        f"{prefix}_jobs_user",
    ]


async def test_expired_rows_are_deleted_in_batches(open_jobs: OpenJobs, db: Any) -> None:
    jobs = open_jobs(lease_seconds=5, log_ttl=0.3, purge_interval=0.2)
    kept = open_jobs(lease_seconds=5, log_ttl=600)
    old = [jobs_contract.new_job(n=i) for i in range(3)]
    for job in old:
        await jobs.submit(job)
    lease = await jobs.claim("A", block=0.1)
    assert lease is not None
    await jobs.append(lease.job.id, lease.token, [("e", b"1"), ("e", b"2")])
    young = jobs_contract.new_job(n=9)
    await kept.submit(young)
    await asyncio.sleep(0.5)
    count = f"SELECT (SELECT count(*) FROM {jobs.jobs_table}), (SELECT count(*) FROM {jobs.events_table})"
    assert tuple(await db.fetchrow(count)) == (4, 2), "expired rows are invisible but not deleted yet"
    assert await jobs.purge_expired(limit=2) == 2
    assert await db.fetchval(f"SELECT count(*) FROM {jobs.jobs_table}") == 2
    await asyncio.sleep(0.25)
    lease = await jobs.claim("B", block=0)  # a claim deletes what expired (every purge_interval)
    assert lease is not None and lease.job == young
    assert tuple(await db.fetchrow(count)) == (1, 0), "the expired jobs went, their events with them"


async def test_the_listen_connection_comes_back(
    open_jobs: OpenJobs, db: Any, postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    secret_url = postgres_url.replace("postgres@", "postgres:s3cret-pw@", 1)  # trust: the password is unused
    reader, writer = open_jobs(url=secret_url), open_jobs()
    job = jobs_contract.new_job()
    await writer.submit(job)
    lease = await writer.claim("W", block=0)  # (without waiting: only the reader listens)
    assert lease is not None
    caplog.set_level(logging.WARNING, logger="agentrt.server")
    waiting = asyncio.ensure_future(reader.read(job.id, 0, block=8.0))
    await _until(lambda: reader.listening)
    killed = await db.fetchval(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE application_name = $1 AND query ILIKE 'LISTEN%'",
        f"agentrt-jobs {reader.prefix}",
    )
    assert killed == 1
    await _until(lambda: not reader.listening)
    await _until(lambda: reader.listening)  # reconnected; the waiting reader read again and waits on
    assert not waiting.done()
    started = time.monotonic()
    await writer.append(job.id, lease.token, [("e", b"after")])
    frames = await asyncio.wait_for(waiting, 5.0)
    assert frames is not None and [f.data for f in frames] == [b"after"]
    assert time.monotonic() - started < 1.0, "woken by a notification on the new connection"
    assert any("notification connection" in r.getMessage() for r in caplog.records), caplog.text
    assert "s3cret" not in caplog.text and "s3cret" not in repr(reader)


async def test_close_closes_every_connection(open_jobs: OpenJobs, db: Any) -> None:
    jobs = open_jobs(max_size=3)
    job = jobs_contract.new_job()
    await jobs.submit(job)
    await asyncio.gather(jobs.read(job.id, 0, block=0.3), jobs.claim("A", block=0.1), jobs.depth())
    await _until(lambda: jobs.listening)
    query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1"
    name = f"agentrt-jobs {jobs.prefix}"
    assert 2 <= await db.fetchval(query, name) <= 4, "the pool (up to max_size) and one LISTEN connection"
    await jobs.close()
    deadline = time.monotonic() + 5
    while await db.fetchval(query, name):
        assert time.monotonic() < deadline, "connections left open"
        await asyncio.sleep(0.05)


async def test_urls_and_prefixes(open_jobs: OpenJobs, postgres_url: str) -> None:
    plain = _plain(postgres_url)
    for url in (plain, plain.replace("postgresql://", "postgres://", 1), postgres_url + "?ssl=disable"):
        assert await open_jobs(url=url).depth() == 0
    for prefix in ("bad-prefix", "1st", 'x"; DROP TABLE y; --', "p" * 41, ""):
        with pytest.raises(InvalidValueError, match="prefix"):
            PostgresJobs(postgres_url, prefix=prefix)
    with pytest.raises(InvalidValueError, match="postgresql://"):
        PostgresJobs("mysql://root:pw@localhost/db")


def test_the_factory_picks_the_backend_by_scheme() -> None:
    pg = jobs_from_url("postgresql+asyncpg://u:secret@db.internal/app", prefix="p1", lease_seconds=3)
    assert isinstance(pg, PostgresJobs) and (pg.prefix, pg.lease_seconds) == ("p1", 3)
    assert "secret" not in repr(pg)
    assert isinstance(jobs_from_url("postgres://db/app"), PostgresJobs)
    redis = jobs_from_url("rediss://:secret@cache:6380/1", prefix="p2", lease_seconds=4)
    assert isinstance(redis, RedisJobs) and (redis.prefix, redis.lease_seconds) == ("p2", 4)
    for url in ("mysql://root:secret@db/app", "localhost:6379", "http://x"):
        with pytest.raises(InvalidValueError, match=r"redis://, rediss://, unix://, postgresql://") as caught:
            jobs_from_url(url)
        assert "secret" not in str(caught.value)


async def _until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)
