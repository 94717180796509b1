"""Run timelines on shared stores: replicas on one Redis, durable runs' workers, SQL schema upgrades."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

pytest.importorskip("redis")

import redis.asyncio as aioredis
import sqlalchemy as sa

from agentrt import Msg, ReActAgent, Toolkit, ToolResultBlock, ToolUseBlock, tool
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.server import DurableRuns, create_app
from agentrt.server.jobs.redis import RedisJobs
from agentrt.state import RedisStateStore, SqlStateStore
from agentrt.state.runs import StoredRun

pytestmark = pytest.mark.integration

KEYS = {"alice-key": "alice", "bob-key": "bob"}
ALICE = {"Authorization": "Bearer alice-key"}
BOB = {"Authorization": "Bearer bob-key"}
PATH = "/v1/agents/helper/sessions"


@pytest.fixture
async def prefix(redis_url: str, unique: str) -> AsyncIterator[str]:
    name = f"runs-{unique}"
    yield name
    client = aioredis.from_url(redis_url)
    try:
        keys = [key async for key in client.scan_iter(match=f"{name}*", count=1000)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


def _agent(store: Any) -> ReActAgent:
    @tool(read_only=True)
    async def lookup(word: str) -> str:
        """Look a word up.

        Args:
            word: The word.
        """
        await asyncio.sleep(0.02)
        return f"{word} means something"

    @tool(requires_confirmation=True)
    def publish(text: str) -> str:
        """Publish (asks first).

        Args:
            text: What to publish.
        """
        return f"published {text}"

    def plan(request: ModelRequest) -> Any:
        last = request.messages[-1]
        if last.blocks(ToolResultBlock):
            return "answer: " + "; ".join(r.text for r in last.blocks(ToolResultBlock))
        if last.text.startswith("publish"):
            return [
                ToolUseBlock(name="lookup", input={"word": "tea"}),
                ToolUseBlock(name="publish", input={"text": "tea"}),
            ]
        return ToolUseBlock(name="lookup", input={"word": last.text.split()[-1]})

    return ReActAgent(
        "helper", model=ScriptedModel.from_function(plan), toolkit=Toolkit([lookup, publish]), state_store=store
    )


async def _message(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = await client.post(path, json=body, headers=ALICE)
    assert r.status_code == 200, r.text
    if r.headers["content-type"].startswith("text/event-stream"):
        frames = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
        message: dict[str, Any] = [f for f in frames if f["type"] == "run_finished"][-1]["msg"]
        return message
    reply: dict[str, Any] = r.json()["message"]
    return reply


async def test_a_run_paused_on_one_replica_and_resumed_on_another(redis_url: str, prefix: str) -> None:
    stores = [RedisStateStore(redis_url, prefix=prefix) for _ in range(2)]
    apps = [create_app(_agent(store), api_keys=KEYS) for store in stores]
    clients = [httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") for app in apps]
    try:
        paused = await _message(clients[0], f"{PATH}/s1/messages", {"input": "publish tea", "stream": True})
        assert paused["metadata"]["generate_reason"] == "awaiting_confirmation"
        call_id = paused["metadata"]["pending_tool_calls"][0]["id"]
        await asyncio.sleep(0.05)
        body = {"results": [{"tool_call_id": call_id, "confirmed": True}]}
        done = await _message(clients[1], f"{PATH}/s1/confirm", body)  # another replica answers
        assert done["content"][0]["text"].startswith("answer: published tea")
        for client in clients:  # each replica reads the same record, by either reply id
            for reply_id in (paused["id"], done["id"]):
                r = await client.get(f"{PATH}/s1/runs/{reply_id}", headers=ALICE)
                assert r.status_code == 200, r.text
                timeline = r.json()
                assert timeline["reply_ids"] == [paused["id"], done["id"]]
                [wait] = [s for s in timeline["spans"] if s["kind"] == "approval"]
                assert wait["decision"] == "approved" and wait["end_ms"] - wait["start_ms"] >= 40
            theirs = await client.get(f"{PATH}/s1/runs/{paused['id']}", headers=BOB)
            assert theirs.status_code == 404
        # deleting the session on one replica deletes its records in Redis (read the keys themselves)
        assert (await clients[1].delete(f"{PATH}/s1", headers=ALICE)).status_code == 204
        raw = aioredis.from_url(redis_url)
        try:
            left = [key async for key in raw.scan_iter(match=f"{prefix}:*", count=1000)]
        finally:
            await raw.aclose()
        assert not [k for k in left if k.endswith((b":rh", b":rs", b":rz"))], left
    finally:
        for client in clients:
            await client.aclose()
        for store in stores:
            await store.close()


async def test_durable_runs_record_the_timeline_in_the_worker(redis_url: str, prefix: str) -> None:
    backend = RedisJobs(redis_url, prefix=f"{prefix}-jobs", lease_seconds=5)
    runs = DurableRuns(backend, workers=1, concurrency=2)
    worker_store = RedisStateStore(redis_url, prefix=prefix)
    reader_store = RedisStateStore(redis_url, prefix=prefix)
    app = create_app(_agent(worker_store), api_keys=KEYS, jobs=runs)  # its lifespan starts the worker
    reader = create_app(_agent(reader_store), api_keys=KEYS)  # a replica without workers
    transport = httpx.ASGITransport(app=app)
    try:
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://t") as http,
        ):
            reply = await _message(http, f"{PATH}/d1/messages", {"input": "define tea", "stream": False})
            assert reply["content"][0]["text"] == "answer: tea means something"
        async with httpx.AsyncClient(transport=httpx.ASGITransport(reader), base_url="http://t") as other:
            r = await other.get(f"{PATH}/d1/runs/{reply['id']}", headers=ALICE)
            assert r.status_code == 200, r.text
            assert [s["kind"] for s in r.json()["spans"]] == ["call", "model", "tool", "model"]
            listing = (await other.get(f"{PATH}/d1/runs", headers=ALICE)).json()
            assert [run["reply_id"] for run in listing["runs"]] == [reply["id"]]
    finally:
        await runs.close()
        await worker_store.close()
        await reader_store.close()


@pytest.mark.parametrize("service", ["postgres", "mysql"])
async def test_sql_tables_of_earlier_versions_get_the_runs_table(
    service: str, request: pytest.FixtureRequest, unique: str
) -> None:
    url = request.getfixturevalue(f"{service}_url")
    prefix = f"r{unique}_"
    store = SqlStateStore(url, table_prefix=prefix)
    try:
        await store.append("u", "s", [Msg.user("before the upgrade")], expected_revision=0, agent="a")
        async with store.engine.begin() as conn:  # a deployment from before run records
            await conn.execute(sa.text(f"DROP TABLE {prefix}runs"))
    finally:
        await store.close()
    upgraded = SqlStateStore(url, table_prefix=prefix)
    try:
        run = StoredRun("r1", time.time(), {"reply_ids": ["r1"]}, '{"schema": "agentrt.run/1"}')
        assert await upgraded.save_run("u", "s", run, agent="a") is True, "the table is created on first use"
        assert [i.reply_id for i in await upgraded.list_runs("u", "s", agent="a")] == ["r1"]
        state = await upgraded.load("u", "s", agent="a")
        assert state is not None and state.messages[0].text == "before the upgrade"
        assert await upgraded.delete_user("u") == 1
        async with upgraded.engine.connect() as conn:  # read the table itself
            count = (await conn.execute(sa.text(f"SELECT count(*) FROM {prefix}runs"))).scalar()
        assert count == 0, "delete_user deletes the user's run records"
    finally:
        await upgraded.drop_tables()
        await upgraded.close()
