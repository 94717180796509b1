"""`agentrt worker` and `agentrt serve --jobs` in process, on a real Redis."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("redis")

import redis.asyncio as aioredis
from typer.testing import CliRunner

from agentrt.cli import build_app
from agentrt.server.jobs import DurableRuns
from agentrt.server.jobs.redis import RedisJobs

pytestmark = pytest.mark.integration

AGENT_MODULE = """
from agentrt import ReActAgent
from agentrt.model import ScriptedModel
from agentrt.state import InMemoryStateStore

agent = ReActAgent("echo", model=ScriptedModel(["echoed"], repeat=True), state_store=InMemoryStateStore())
"""


@pytest.fixture
async def prefix(redis_url: str, unique: str) -> AsyncIterator[str]:
    name = f"wk-{unique}"
    yield name
    client = aioredis.from_url(redis_url)
    try:
        keys = [key async for key in client.scan_iter(match=f"{name}:*", count=1000)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


@pytest.fixture
def agents_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"echo_agents_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(AGENT_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


async def test_the_worker_command_runs_jobs_and_drains_on_sigterm(
    redis_url: str, prefix: str, agents_module: str
) -> None:
    from agentrt.cli.worker import _work

    task = asyncio.get_running_loop().create_task(
        _work(f"{agents_module}:agent", redis_url, prefix, None, 1, 2, 5.0, 2.0, 3600.0)
    )
    runs = DurableRuns(RedisJobs(redis_url, prefix=prefix), workers=0)
    try:
        job = await runs.submit("echo", "alice", "s", "hi")
        reply = await asyncio.wait_for(runs.result(job), 20)
        assert reply.text == "echoed"
        assert await runs.depth() == 0
        store = sys.modules[agents_module].agent.state_store  # the worker's agent, imported in this process
        recorded = await store.list_runs("alice", "s", agent="echo")
        assert [r.reply_id for r in recorded] == [reply.id], "the worker records the run's timeline, as a server does"
        os.kill(os.getpid(), signal.SIGTERM)  # the command's own handler: stop claiming, drain, close
        await asyncio.wait_for(task, 20)
    finally:
        if not task.done():
            task.cancel()
        await runs.close()


def test_serve_with_jobs_builds_durable_runs(
    redis_url: str, prefix: str, agents_module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    def fake_run_server(app: Any, **options: Any) -> None:
        seen["app"], seen["options"] = app, options

    monkeypatch.setattr("agentrt.server._serve.run_server", fake_run_server)
    monkeypatch.setenv("AGENTRT_API_KEYS", "k=alice")
    args = ["serve", f"{agents_module}:agent", "--jobs", redis_url, "--jobs-prefix", prefix]
    args += ["--workers", "2", "--concurrency", "3", "--lease", "4", "--max-runs-per-user", "5", "--log-ttl", "60"]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    jobs = seen["app"].state.agentrt.jobs
    assert isinstance(jobs, DurableRuns)
    assert (jobs.workers_wanted, jobs.concurrency, jobs.max_runs_per_user) == (2, 3, 5)
    assert isinstance(jobs.backend, RedisJobs)
    assert jobs.backend.prefix == prefix and jobs.backend.lease_seconds == 4 and jobs.backend.log_ttl == 60
    assert jobs in seen["options"]["close"], "the backend is closed with the server"
