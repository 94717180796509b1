"""Durable runs in process: the app, its worker and the job log on a real Redis.

The multi-process failover is test_failover.py; here the same code runs inside the test process
(the app's lifespan starts its worker), so its paths are exercised in detail: replies, streams and
reconnects, another user's run id, failing agents, resumption decisions, drain, the gauges.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx
import pytest

pytest.importorskip("redis")

import redis.asyncio as aioredis

from agentrt import Msg, ReActAgent, RuntimeContext, Toolkit, tool
from agentrt.message import ToolUseBlock
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.server import DurableRuns, create_app
from agentrt.server.context import encode_event
from agentrt.server.jobs import END_EVENT, Job
from agentrt.server.jobs.redis import RedisJobs
from agentrt.server.jobs.worker import _resumption
from agentrt.state import InMemoryStateStore

pytestmark = pytest.mark.integration

KEYS = {"alice-key": "alice", "bob-key": "bob"}
ALICE = {"Authorization": "Bearer alice-key"}
BOB = {"Authorization": "Bearer bob-key"}
PATH = "/v1/agents/helper/sessions"


@pytest.fixture
async def prefix(redis_url: str, unique: str) -> AsyncIterator[str]:
    name = f"dur-{unique}"
    yield name
    client = aioredis.from_url(redis_url)
    try:
        keys = [key async for key in client.scan_iter(match=f"{name}:*", count=1000)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


def _agent(store: InMemoryStateStore, *, slow: float = 0.0) -> ReActAgent:
    @tool(read_only=True)
    async def lookup(word: str) -> str:
        """Look a word up.

        Args:
            word: The word.
        """
        await asyncio.sleep(slow)
        return f"{word} means something"

    def plan(request: ModelRequest) -> str | ToolUseBlock:
        last = request.messages[-1]
        if last.role == "user" and last.text.startswith("explode"):
            raise RuntimeError("the model broke")
        if last.role == "user" and last.text.startswith("define "):
            return ToolUseBlock(id="c1", name="lookup", input={"word": last.text.split()[1]})
        return f"answer to: {last.text or 'the tool result'}"

    return ReActAgent("helper", model=ScriptedModel.from_function(plan), toolkit=Toolkit([lookup]), state_store=store)


def _frames(body: str) -> list[tuple[str, str]]:
    out = []
    for block in body.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in lines:
            out.append((lines.get("id", ""), lines["event"]))
    return out


async def test_replies_streams_reconnects_and_privacy(redis_url: str, prefix: str) -> None:
    backend = RedisJobs(redis_url, prefix=prefix, lease_seconds=5)
    runs = DurableRuns(backend, workers=1, concurrency=4)
    app = create_app(_agent(InMemoryStateStore()), api_keys=KEYS, jobs=runs)
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        reply = await http.post(f"{PATH}/s1/messages", json={"input": "hello", "stream": False}, headers=ALICE)
        assert reply.status_code == 200 and reply.json()["message"]["content"][0]["text"] == "answer to: hello"

        streamed = await http.post(f"{PATH}/s1/messages", json={"input": "define tea", "stream": True}, headers=ALICE)
        run_id = streamed.headers["x-run-id"]
        frames = _frames(streamed.text)
        ids = [i for i, _ in frames]
        assert ids == [f"{run_id}:{n}" for n in range(1, len(ids) + 1)]
        assert frames[0][1] == "run_started" and frames[-1][1] == "run_finished"
        assert "tool_result" in [t for _, t in frames]

        middle = ids[len(ids) // 2]
        again = await http.get(f"{PATH}/s1/events", headers={**ALICE, "Last-Event-ID": middle})
        assert [i for i, _ in _frames(again.text)] == ids[len(ids) // 2 + 1 :], "the rest, exactly once"
        # Bob names Alice's run under her session id or his own: the answer of an unknown session.
        unknown = await http.get(f"{PATH}/nope/events", headers={**BOB, "Last-Event-ID": "0123abc:1"})
        for session in ("s1", "bob-s"):
            theirs = await http.get(f"{PATH}/{session}/events", headers={**BOB, "Last-Event-ID": middle})
            assert theirs.status_code == unknown.status_code == 404
            assert "tea" not in theirs.text and run_id not in theirs.text

        failed = await http.post(f"{PATH}/s2/messages", json={"input": "explode", "stream": False}, headers=ALICE)
        assert failed.status_code == 500 and failed.json()["error"]["code"] == "run_failed"
        assert "the model broke" in failed.json()["error"]["message"]
        worker = runs.workers[0]
        for _ in range(200):  # the reply is read before the worker drops the job
            if worker.completed == 3 and not worker.running:
                break
            await asyncio.sleep(0.01)
        assert worker.completed == 3 and worker.running == 0
        assert await runs.depth() == 0
    await runs.close()


async def test_a_job_for_an_unknown_agent_ends_with_an_error(redis_url: str, prefix: str) -> None:
    backend = RedisJobs(redis_url, prefix=prefix)
    runs = DurableRuns(backend, workers=1)
    runs.start({}, lambda event: b"{}")
    try:
        job = await runs.submit("nobody", "alice", "s", "hi")
        with pytest.raises(RuntimeError, match="no agent named 'nobody'"):
            await asyncio.wait_for(runs.result(job), 10)
    finally:
        await runs.drain(1.0)
        await runs.close()


async def test_drain_hands_a_running_job_back_at_once(redis_url: str, prefix: str) -> None:
    backend = RedisJobs(redis_url, prefix=prefix, lease_seconds=60)
    runs = DurableRuns(backend, workers=1)
    agent = _agent(InMemoryStateStore(), slow=30.0)
    from agentrt.server.context import encode_event

    runs.start({"helper": agent}, encode_event)
    other = RedisJobs(redis_url, prefix=prefix, lease_seconds=60)
    try:
        job = await runs.submit("helper", "alice", "s", "define slowness")
        for _ in range(200):
            if runs.workers[0].running:
                break
            await asyncio.sleep(0.02)
        assert runs.workers[0].running == 1
        await runs.drain(0.2)  # shorter than the tool: the job goes back
        lease = await other.claim("successor", block=1.0)  # long before the 60 s lease ends
        assert lease is not None and lease.job.id == job.id and lease.taken_over
        frames = await other.read(job.id, 0, block=0.1) or []
        assert END_EVENT not in [f.event_type for f in frames], "a handed-back run has not ended"
    finally:
        await runs.close()
        await other.close()


async def test_resumption_decisions() -> None:
    store = InMemoryStateStore()
    agent = _agent(store)
    given = [Msg.user("define kite")]
    job = Job(id="j", agent="helper", user_id="u", session_id="s", input=(given[0].to_dict(),))
    # Nothing saved yet: the run starts with its input.
    assert await _resumption(agent, job, given) == (given, None)
    # The input saved and answered: nothing runs again, the reply ends the stream.
    await agent.call(given, RuntimeContext("u", "s"))
    run_input, finished = await _resumption(agent, job, given)
    assert run_input is None and finished is not None and finished.msg.text.startswith("answer to")
    # The input saved, cut short before the answer: the session continues without new input.
    cut = Msg.user("define wind")
    await agent.observe([cut], RuntimeContext("u", "t"))
    job2 = Job(id="k", agent="helper", user_id="u", session_id="t", input=(cut.to_dict(),))
    assert await _resumption(agent, job2, [cut]) == (None, None)


async def test_the_gauges_follow_the_queue(redis_url: str, prefix: str) -> None:
    from prometheus_client import CollectorRegistry

    from agentrt.telemetry.metrics import AgentMetrics

    metrics = AgentMetrics.get(CollectorRegistry())
    backend = RedisJobs(redis_url, prefix=prefix)
    runs = DurableRuns(backend, workers=0)
    runs.metrics_interval = 0.05
    task = asyncio.get_running_loop().create_task(runs._publish(metrics))
    try:
        await runs.submit("helper", "alice", "s", "queued")
        await runs.submit("helper", "alice", "s", "queued too")
        for _ in range(100):
            if metrics.jobs_queued._value.get() == 2:
                break
            await asyncio.sleep(0.02)
        assert metrics.jobs_queued._value.get() == 2 and metrics.jobs_running._value.get() == 0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await runs.close()


async def test_an_agent_served_under_another_name_replies(redis_url: str, prefix: str) -> None:
    runs = DurableRuns(RedisJobs(redis_url, prefix=prefix), workers=1)
    app = create_app({"alias": _agent(InMemoryStateStore())}, api_keys=KEYS, jobs=runs)  # the agent is "helper"
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        body = {"input": "define tea", "stream": False}
        reply = await http.post("/v1/agents/alias/sessions/s/messages", json=body, headers=ALICE)
        assert reply.status_code == 200, reply.text
        assert reply.json()["message"]["content"][0]["text"] == "answer to: the tool result"
    await runs.close()


async def test_a_user_over_the_run_limit_gets_429_and_nothing_is_recorded(redis_url: str, prefix: str) -> None:
    store = InMemoryStateStore()
    agent = _agent(store)
    runs = DurableRuns(RedisJobs(redis_url, prefix=prefix), workers=0, max_runs_per_user=2)
    app = create_app(agent, api_keys=KEYS, jobs=runs)
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        held = [await runs.submit("helper", "alice", f"q{n}", f"queued {n}") for n in range(2)]
        refused = await http.post(f"{PATH}/s9/messages", json={"input": "one too many", "stream": True}, headers=ALICE)
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "too_many_runs" and refused.headers["retry-after"] == "2"
        assert await runs.depth() == 2 and await runs.backend.active("alice") == 2, "the refused run left no job"
        assert await store.load("alice", "s9", agent="helper") is None, "nor a message"
        await runs.submit("helper", "bob", "b1", "bob is not limited by alice")
        assert await runs.backend.active("bob") == 1
        # A worker elsewhere finishes Alice's runs: her slots are free again.
        elsewhere = DurableRuns(RedisJobs(redis_url, prefix=prefix), workers=1)
        elsewhere.start({"helper": agent}, encode_event)
        try:
            for job in held:
                await asyncio.wait_for(elsewhere.result(job), 10)
            for _ in range(200):
                if await runs.backend.active("alice") == 0:
                    break
                await asyncio.sleep(0.01)
            assert await runs.backend.active("alice") == 0
            reply = await http.post(f"{PATH}/s9/messages", json={"input": "now", "stream": False}, headers=ALICE)
            assert reply.status_code == 200, reply.text
        finally:
            await elsewhere.drain(1.0)
            await elsewhere.close()
    await runs.close()


async def test_openai_chat_completions_run_as_jobs(redis_url: str, prefix: str) -> None:
    store = InMemoryStateStore()
    runs = DurableRuns(RedisJobs(redis_url, prefix=prefix), workers=1)
    app = create_app(_agent(store), api_keys=KEYS, jobs=runs)
    transport = httpx.ASGITransport(app=app)
    url = "/v1/chat/completions"
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        body = {"model": "helper", "messages": [{"role": "user", "content": "define tea"}]}
        reply = await http.post(url, json=body, headers={**ALICE, "X-Session-Id": "oa"})
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["content"] == "answer to: the tool result"
        streamed = await http.post(
            url,
            json={**body, "messages": [{"role": "user", "content": "hi"}], "stream": True},
            headers={**ALICE, "X-Session-Id": "oa"},
        )
        chunks = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
        assert streamed.status_code == 200 and text == "answer to: hi" and streamed.text.endswith("data: [DONE]\n\n")
        failed = await http.post(
            url,
            json={**body, "messages": [{"role": "user", "content": "explode"}]},
            headers={**ALICE, "X-Session-Id": "ob"},
        )
        assert failed.status_code == 500 and "the model broke" in failed.json()["error"]["message"]
        worker = runs.workers[0]
        for _ in range(200):
            if worker.completed == 3:
                break
            await asyncio.sleep(0.01)
        assert worker.completed == 3, "each completion ran as a job on the worker"
    state = await store.load("alice", "oa", agent="helper")
    assert state is not None and [m.text for m in state.messages if m.role == "user" and m.text] == ["define tea", "hi"]
    await runs.close()


async def test_the_interrupt_route_stops_a_durable_run(redis_url: str, prefix: str) -> None:
    store = InMemoryStateStore()
    runs = DurableRuns(RedisJobs(redis_url, prefix=prefix), workers=1)
    app = create_app(_agent(store, slow=30), api_keys=KEYS, jobs=runs)
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        nothing = await http.post(f"{PATH}/nope/interrupt", json={}, headers=ALICE)
        assert nothing.status_code == 404, "an unknown session, as without durable runs"
        body = {"input": "define tea", "stream": True}
        streaming = asyncio.create_task(http.post(f"{PATH}/s1/messages", json=body, headers=ALICE))
        for _ in range(500):
            if runs.workers[0].running:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # the model answered at once: the tool is running
        theirs = await http.post(f"{PATH}/s1/interrupt", json={}, headers=BOB)
        assert theirs.status_code == 404, "Bob cannot stop Alice's run"
        stop = await http.post(f"{PATH}/s1/interrupt", json={"message": "enough"}, headers=ALICE)
        assert stop.status_code == 200 and stop.json() == {"interrupted": True}
        streamed = await asyncio.wait_for(streaming, 10)
        assert _frames(streamed.text)[-1][1] == "run_finished"
    state = await store.load("alice", "s1", agent="helper")
    assert state is not None
    assert "enough" in [m.text for m in state.messages if m.role == "user"], state.messages
    await runs.close()
