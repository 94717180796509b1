"""Durable runs across real replicas: a replica's death loses no run, no event, no tool call.

Three `agentrt serve --jobs ...` processes share one backend: Redis (state store, job queue, event
logs), or PostgreSQL (the same on `PostgresJobs` and `SqlStateStore`; the SIGKILL and SIGTERM
tests run on both). Runs are in flight on all of them when one is killed with SIGKILL; every run
must finish on the others, each client that was reading from the dead replica reconnects to
another one with ``Last-Event-ID`` and gets the rest of its events with no gap and no duplicate,
and the slow tool (not idempotent) never runs twice: a call the dead worker had started ends as
``interrupted``. The side effects asserted are the tool's own records (always in Redis), the
events the clients saw and, on PostgreSQL, the job rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
import pytest
from services import require_service

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
APPS = Path(__file__).with_name("apps")
REDIS_URL = "redis://127.0.0.1:6379/0"
POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
BACKENDS = ["redis", "postgres"]
KEY = {"Authorization": "Bearer failover-key"}
PATH = "/v1/agents/worker/sessions"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Cluster:
    prefix: str
    backend: str = "redis"
    """Where the jobs and the sessions are: "redis" or "postgres" (the tool's records stay in Redis)."""
    urls: list[str] = field(default_factory=list)
    procs: list[subprocess.Popen[str]] = field(default_factory=list)
    logs: list[IO[str]] = field(default_factory=list)

    @property
    def url(self) -> str:
        """The job backend and state store URL."""
        return POSTGRES_URL if self.backend == "postgres" else REDIS_URL

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(APPS)]),
            "AGENTRT_API_KEYS": "failover-key=alice",
            "FAILOVER_STORE_URL": self.url,
            "FAILOVER_RECORD_URL": REDIS_URL,
            "FAILOVER_PREFIX": self.prefix,
            **extra,
        }

    def start(self, args: list[str], *, http: bool = True, **extra: str) -> int:
        """Start one process (a replica, or a worker); its index."""
        cmd = [sys.executable, "-m", "agentrt.cli", *args, "--jobs", self.url, "--jobs-prefix", self.prefix]
        if http:
            port = _free_port()
            cmd += ["--port", str(port), "--log-level", "warning"]
            self.urls.append(f"http://127.0.0.1:{port}")
        else:
            self.urls.append("")
        log: IO[str] = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in stop()
        proc = subprocess.Popen(cmd, env=self.env(**extra), stdout=log, stderr=subprocess.STDOUT, text=True)
        self.procs.append(proc)
        self.logs.append(log)
        return len(self.procs) - 1

    def wait_ready(self) -> None:
        for proc, log, url in zip(self.procs, self.logs, self.urls, strict=True):
            if not url:
                continue
            deadline = time.monotonic() + 40
            while True:
                if proc.poll() is not None:
                    log.seek(0)
                    raise AssertionError(f"replica exited: {log.read()}")
                try:
                    with urllib.request.urlopen(url + "/readyz", timeout=1):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)  # noqa: TID251 - sync fixture code, no event loop

    def output(self, i: int) -> str:
        self.logs[i].seek(0)
        return self.logs[i].read()

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGCONT)
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in self.logs:
            log.close()


@pytest.fixture
async def cluster(request: pytest.FixtureRequest) -> AsyncIterator[Cluster]:
    """Replicas on Redis, or with ``parametrize("cluster", ["postgres"], indirect=True)`` on PostgreSQL."""
    backend: str = getattr(request, "param", "redis")
    require_service("redis")  # the tool's records
    if backend == "postgres":
        require_service("postgres")
    import redis

    made = Cluster(prefix=f"fo_{uuid.uuid4().hex[:8]}", backend=backend)  # an SQL identifier too
    try:
        yield made
    finally:
        made.stop()
        client = redis.Redis.from_url(REDIS_URL)
        for key in client.scan_iter(f"{made.prefix}:*", count=1000):
            client.delete(key)
        client.close()
        if backend == "postgres":
            await _drop_tables(made.prefix)


async def _drop_tables(prefix: str) -> None:
    """Drop the tables named ``<prefix>...`` (the jobs' and the sessions')."""
    import asyncpg  # type: ignore[import-untyped]  # asyncpg ships no type hints

    conn = await asyncpg.connect(POSTGRES_URL)
    try:
        rows = await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND starts_with(tablename, $1)",
            prefix,
        )
        if rows:
            await conn.execute("DROP TABLE IF EXISTS " + ", ".join(f'"{r["tablename"]}"' for r in rows) + " CASCADE")
    finally:
        await conn.close()


async def _job_rows(prefix: str) -> dict[str, tuple[int, bool, int]]:
    """The PostgreSQL job rows: job id -> (token, done, seq)."""
    import asyncpg

    conn = await asyncpg.connect(POSTGRES_URL)
    try:
        rows = await conn.fetch(f'SELECT id, token, done, seq FROM "{prefix}_jobs"')
    finally:
        await conn.close()
    return {r["id"]: (r["token"], r["done"], r["seq"]) for r in rows}


@dataclass
class Seen:
    """What one client saw of one run."""

    run_id: str = ""
    ids: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    data: list[str] = field(default_factory=list)
    connections: int = 0

    @property
    def finished(self) -> bool:
        return "run_finished" in self.types


async def _frames(response: httpx.Response) -> AsyncIterator[tuple[str, str, str]]:
    event_id = event_type = ""
    data: list[str] = []
    async for line in response.aiter_lines():
        if line.startswith("id: "):
            event_id = line[4:]
        elif line.startswith("event: "):
            event_type = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])
        elif not line and event_type:
            yield event_id, event_type, "\n".join(data)
            event_id, event_type, data = "", "", []


async def _read(response: httpx.Response, seen: Seen) -> None:
    seen.connections += 1
    async for event_id, event_type, data in _frames(response):
        seen.ids.append(event_id)
        seen.types.append(event_type)
        seen.data.append(data)
        if event_type == "run_finished" and '"source":"worker"' in data.replace(" ", ""):
            return


async def _client(cluster: Cluster, http: httpx.AsyncClient, task: int, first: int, dead: set[int]) -> Seen:
    """Post task `task` to replica `first`, read its stream, and reconnect elsewhere whenever it breaks."""
    seen = Seen()
    url = cluster.urls[first]
    body = {"input": f"task {task}", "stream": True}
    with contextlib.suppress(httpx.TransportError):
        async with http.stream("POST", f"{url}{PATH}/s{task}/messages", json=body, headers=KEY) as response:
            assert response.status_code == 200, await response.aread()
            seen.run_id = response.headers["x-run-id"]
            await _read(response, seen)
    attempt = 0
    while not seen.finished:
        attempt += 1
        assert attempt < 40, f"task {task}: never finished ({seen.types}, last: {seen.data[-1:]})"
        live = [i for i, u in enumerate(cluster.urls) if u and i not in dead]
        url = cluster.urls[live[(first + attempt) % len(live)]]
        last = seen.ids[-1] if seen.ids else f"{seen.run_id}:0"
        with contextlib.suppress(httpx.TransportError):
            headers = {**KEY, "Last-Event-ID": last}
            async with http.stream("GET", f"{url}{PATH}/s{task}/events", headers=headers) as response:
                if response.status_code == 200:
                    await _read(response, seen)
                    continue
        await asyncio.sleep(0.2)
    return seen


def _metric(text: str, name: str) -> float:
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")]
    return values[0] if values else -1.0


async def _logged_data(cluster: Cluster, run_id: str) -> list[str]:
    """The data of every entry of a run's event log, read straight from the backend."""
    if cluster.backend == "postgres":
        import asyncpg

        conn = await asyncpg.connect(POSTGRES_URL)
        try:
            rows = await conn.fetch(
                f'SELECT data FROM "{cluster.prefix}_job_events" WHERE job_id = $1 ORDER BY seq', run_id
            )
        finally:
            await conn.close()
        return [bytes(row["data"]).decode() for row in rows]
    import redis

    raw = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        entries: list[Any] = raw.xrange(f"{cluster.prefix}:run:{run_id}") or []
    finally:
        raw.close()
    return [fields["d"] for _, fields in entries]


def _reply_text(data: str) -> str:
    """The text of a ``run_finished`` event's reply."""
    msg = json.loads(data)["msg"]
    return "".join(str(block.get("text", "")) for block in msg["content"])


def _check_stream(task: int, seen: Seen) -> None:
    seqs = [int(i.rsplit(":", 1)[1]) for i in seen.ids]
    assert all(i.startswith(seen.run_id + ":") for i in seen.ids), f"task {task}: ids of another run"
    assert seqs == list(range(1, len(seqs) + 1)), f"task {task}: a gap or a duplicate in {seqs}"
    assert seen.types[0] == "run_started" and seen.finished


@pytest.mark.parametrize("cluster", BACKENDS, indirect=True)
async def test_a_killed_replica_loses_no_run_no_event_and_no_tool_call(cluster: Cluster) -> None:
    import redis

    # 50 runs in flight: a model of 1 s latency, then a 3 s tool, on 3 replicas. On Redis all 50
    # run at once; on PostgreSQL each running run holds a session-lock connection and the server
    # allows 100 connections, so 30 run and 20 wait in the queue for the survivors.
    tasks = 50
    concurrency = 20 if cluster.backend == "redis" else 10
    for _ in range(3):
        cluster.start(
            ["serve", "failover_app:agent", "--lease", "2", "--concurrency", str(concurrency)],
            FAILOVER_MODEL_S="1.0",
            FAILOVER_TOOL_S="3.0",
        )
    cluster.wait_ready()
    store = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    dead: set[int] = set()
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, connect=5.0)) as http:
        clients = [asyncio.create_task(_client(cluster, http, t, t % 3, dead)) for t in range(tasks)]
        deadline = time.monotonic() + 30
        while len(store.hgetall(f"{cluster.prefix}:started")) < min(tasks, 3 * concurrency):  # all slots busy
            assert time.monotonic() < deadline, store.hgetall(f"{cluster.prefix}:started")
            await asyncio.sleep(0.05)
        victim = cluster.procs[0]
        victim.send_signal(signal.SIGSTOP)  # frozen: what it finished and what it was running stay put
        finished_before = store.hgetall(f"{cluster.prefix}:done")
        running_there = [
            t
            for t in range(tasks)
            if store.lrange(f"{cluster.prefix}:started-by:{t}", 0, -1) == [str(victim.pid)]
            and str(t) not in finished_before
        ]
        dead.add(0)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        seen = await asyncio.wait_for(asyncio.gather(*clients), 60)
    started = {int(k): int(v) for k, v in store.hgetall(f"{cluster.prefix}:started").items()}
    started_by = {t: (store.lrange(f"{cluster.prefix}:started-by:{t}", 0, 0) or [""])[0] for t in range(tasks)}
    done = {int(k): int(v) for k, v in store.hgetall(f"{cluster.prefix}:done").items()}
    assert running_there, "the killed replica ran some of the tool calls"
    for task, run in enumerate(seen):
        _check_stream(task, run)
        assert started[task] == 1, f"task {task}: the non-idempotent tool started {started[task]} times"
        assert done.get(task, 0) <= 1
        final = run.data[run.types.index("run_finished")]
        if task in running_there:
            assert done.get(task, 0) == 0 and "[interrupted]" in final, (task, done.get(task), _reply_text(final))
        elif str(task) in finished_before and started_by[task] == str(victim.pid):
            # finished on the dead replica: its result was saved (success), unless the kill came
            # between the tool's end and that checkpoint (interrupted); either way it ran once
            assert done[task] == 1 and ("[success]" in final or "[interrupted]" in final), (task, final)
        else:
            assert done[task] == 1 and "[success]" in final, (task, done.get(task), _reply_text(final))
    reconnected = [t for t in range(tasks) if seen[t].connections > 1]
    assert any(t % 3 == 0 for t in reconnected), "the clients of the killed replica reconnected elsewhere"
    # The survivors' metrics count the takeovers, and the queue drains to empty.
    deadline = time.monotonic() + 10
    while True:
        async with httpx.AsyncClient(timeout=5.0) as http:
            texts = [(await http.get(url + "/metrics")).text for url in cluster.urls[1:]]
        takeovers = sum(_metric(t, "agentrt_job_takeovers_total") for t in texts)
        if takeovers >= len(running_there) and all(_metric(t, "agentrt_jobs_queued") == 0 for t in texts):
            break
        assert time.monotonic() < deadline, (takeovers, [_metric(t, "agentrt_jobs_queued") for t in texts])
        await asyncio.sleep(0.5)
    store.close()
    if cluster.backend == "postgres":  # the rows: every job done, taken over once if it ran on the dead replica
        rows = await _job_rows(cluster.prefix)
        assert len(rows) == tasks
        for task, run in enumerate(seen):
            token, finished, seq = rows[run.run_id]
            assert finished and seq == len(run.ids) + 1, (task, rows[run.run_id])  # +1: the end marker
            assert (token > 1) is (task in running_there), (task, token)


@pytest.mark.parametrize("cluster", BACKENDS, indirect=True)
async def test_a_sigterm_drain_finishes_its_runs_and_loses_nothing(cluster: Cluster) -> None:
    import redis

    tasks = 6
    for _ in range(2):
        cluster.start(["serve", "failover_app:agent", "--lease", "2"], FAILOVER_TOOL_S="1.0")
    cluster.wait_ready()
    store = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    dead: set[int] = set()
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, connect=5.0)) as http:
        clients = [asyncio.create_task(_client(cluster, http, t, t % 2, dead)) for t in range(tasks)]
        deadline = time.monotonic() + 30
        while len(store.hgetall(f"{cluster.prefix}:started")) < tasks:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        draining = cluster.procs[0]
        there = [
            t for t in range(tasks) if store.lrange(f"{cluster.prefix}:started-by:{t}", 0, -1) == [str(draining.pid)]
        ]
        draining.send_signal(signal.SIGTERM)
        dead.add(0)
        seen = await asyncio.wait_for(asyncio.gather(*clients), 60)
        # uvicorn re-raises the SIGTERM it caught once its graceful shutdown is over
        assert draining.wait(timeout=30) in (0, -signal.SIGTERM), cluster.output(0)
    assert there, "the draining replica was running some of the tool calls"
    started = store.hgetall(f"{cluster.prefix}:started")
    done = store.hgetall(f"{cluster.prefix}:done")
    for task, run in enumerate(seen):
        _check_stream(task, run)
        # the drain let every running call finish: nothing interrupted, nothing run twice
        assert started[str(task)] == done[str(task)] == "1", (task, started, done)
        assert "[success]" in run.data[run.types.index("run_finished")]
    store.close()
    if cluster.backend == "postgres":
        rows = await _job_rows(cluster.prefix)
        assert sorted(rows) == sorted(run.run_id for run in seen) and all(done for _, done, _ in rows.values())


@pytest.mark.parametrize("cluster", BACKENDS, indirect=True)
async def test_a_paused_worker_cannot_write_after_its_job_was_taken_over(cluster: Cluster) -> None:
    import redis

    from agentrt.message import ToolResultBlock
    from agentrt.state import store_from_url

    server = cluster.start(["serve", "failover_app:agent", "--workers", "0"])
    cluster.wait_ready()
    first = cluster.start(["worker", "failover_app:agent", "--lease", "1"], http=False, FAILOVER_TOOL_S="3")
    raw = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    dead: set[int] = set()
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, connect=5.0)) as http:
        client = asyncio.create_task(_client(cluster, http, 7, server, dead))
        deadline = time.monotonic() + 30
        while raw.lrange(f"{cluster.prefix}:started-by:7", 0, -1) != [str(cluster.procs[first].pid)]:
            assert time.monotonic() < deadline, cluster.output(first)
            await asyncio.sleep(0.05)
        cluster.procs[first].send_signal(signal.SIGSTOP)  # partitioned: no heartbeat, no lock renewal
        second = cluster.start(["worker", "failover_app:agent", "--lease", "1"], http=False, FAILOVER_TOOL_S="3")
        seen = await asyncio.wait_for(client, 40)
        cluster.procs[first].send_signal(signal.SIGCONT)  # wakes up with its tool call "finishing"
        await asyncio.sleep(4.0)
    _check_stream(7, seen)
    final = seen.data[seen.types.index("run_finished")]
    assert "[interrupted]" in final, final
    assert raw.hget(f"{cluster.prefix}:started", "7") == "1", "the takeover did not run the tool again"
    texts = await _logged_data(cluster, seen.run_id)
    assert not any(f"done by {cluster.procs[first].pid}" in t for t in texts), "the woken worker wrote an event"
    assert len(texts) == len(seen.ids) + 1, "events after the end (the +1 is the end marker)"
    if cluster.backend == "postgres":
        store = store_from_url(POSTGRES_URL, table_prefix=f"{cluster.prefix}_")
    else:
        store = store_from_url(REDIS_URL, prefix=cluster.prefix)
    try:
        state = await store.load("alice", "s7", agent="worker")
    finally:
        await store.close()
    assert state is not None
    results = [b for m in state.messages for b in m.content if isinstance(b, ToolResultBlock)]
    assert [r.state for r in results] == ["interrupted"], results
    assert state.messages[-1].role == "assistant" and "[interrupted]" in state.messages[-1].text
    assert "FencedError" in cluster.output(first) or "taken over" in cluster.output(first), cluster.output(first)
    assert second > first
    raw.close()
