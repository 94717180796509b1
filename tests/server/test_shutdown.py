"""Graceful shutdown: new runs are refused, running ones are interrupted and checkpointed."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import httpx
from server_agents import ALICE, live_server, parse_sse, served_process

from agentrt.message import ToolResultBlock
from agentrt.state import InMemoryStateStore, store_from_url

S = "/v1/agents/bot/sessions"


async def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached in time")


def check_interrupted(messages: list[Any]) -> None:
    assert messages[0].text == "nap please"
    [result] = messages[2].blocks(ToolResultBlock)
    assert result.state == "interrupted"
    assert messages[-1].text == "(interrupted)"


async def test_shutdown_interrupts_a_streamed_run_and_checkpoints_it(make_app: Any, store: InMemoryStateStore) -> None:
    app = make_app()
    async with live_server(app) as (url, server), httpx.AsyncClient(base_url=url, timeout=30) as c:
        body = {"input": "nap please", "stream": True}
        async with c.stream("POST", f"{S}/s1/messages", json=body, headers=ALICE) as r:
            lines: list[str] = []
            async for line in r.aiter_lines():
                lines.append(line)
                if line == "event: tool_call_started":
                    server.should_exit = True  # what SIGTERM does
            frames = parse_sse("\n".join(lines) + "\n\n")
        types = [f["event"] for f in frames]
        assert "interrupted" in types
        assert types[-1] == "run_finished"
        assert json.loads(frames[-1]["data"])["msg"]["metadata"]["generate_reason"] == "interrupted"
    state = await store.load("alice", "s1", agent="bot")
    assert state is not None
    check_interrupted(state.messages)


async def test_new_runs_get_503_while_shutting_down(client: httpx.AsyncClient, app: Any) -> None:
    await client.post(f"{S}/s1/messages", json={"input": "hi"}, headers=ALICE)
    await app.state.agentrt.shutdown()
    for path, body in (
        (f"{S}/s1/messages", {"input": "more"}),
        (f"{S}/s2/messages", {"input": "more", "stream": True}),
        ("/v1/chat/completions", {"model": "bot", "messages": [{"role": "user", "content": "x"}]}),
    ):
        r = await client.post(path, json=body, headers=ALICE)
        assert r.status_code == 503, path
        assert r.json()["error"]["code"] == "shutting_down"
        assert r.headers["retry-after"]
    assert (await client.get(f"{S}/s1", headers=ALICE)).status_code == 200  # reads still work
    r = await client.get("/readyz")
    assert r.status_code == 503
    assert r.json()["status"] == "shutting_down"


async def test_lifespan_shutdown_interrupts_a_plain_call(make_app: Any, store: InMemoryStateStore) -> None:
    app = make_app()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as c:
        async with app.router.lifespan_context(app):
            call = asyncio.create_task(c.post(f"{S}/s1/messages", json={"input": "nap please"}, headers=ALICE))
            await wait_for(lambda: len(app.state.agentrt.runs) == 1)
            await asyncio.sleep(0.1)  # let the run reach the tool
        r = await call
    assert r.status_code == 200
    assert r.json()["message"]["metadata"]["generate_reason"] == "interrupted"
    state = await store.load("alice", "s1", agent="bot")
    assert state is not None
    check_interrupted(state.messages)


def test_sigterm_to_agentrt_serve(tmp_path: Path) -> None:
    url_db = f"sqlite:///{tmp_path / 'state.db'}"
    with served_process(url_db) as (url, proc):

        async def go() -> list[dict[str, Any]]:
            async with httpx.AsyncClient(base_url=url, timeout=30) as c:
                body = {"input": "nap please", "stream": True}
                async with c.stream("POST", f"{S}/s1/messages", json=body, headers=ALICE) as r:
                    lines: list[str] = []
                    async for line in r.aiter_lines():
                        lines.append(line)
                        if line == "event: tool_call_started":
                            proc.send_signal(signal.SIGTERM)
                    return parse_sse("\n".join(lines) + "\n\n")

        frames = asyncio.run(go())
        assert frames[-1]["event"] == "run_finished"
        # uvicorn re-raises the signal once it has shut down cleanly, as a shell expects
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM)

    async def load() -> Any:
        store = store_from_url(url_db)
        try:
            return await store.load("alice", "s1", agent="bot")
        finally:
            await store.close()

    state = asyncio.run(load())
    check_interrupted(state.messages)
