"""The SSE stream: frame format, heartbeats, client disconnects, Last-Event-ID reconnects."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
from server_agents import ALICE, live_server, parse_sse

from agentrt.events import event_from_dict, reduce_events
from agentrt.message import Msg, ToolResultBlock
from agentrt.state import InMemoryStateStore

S = "/v1/agents/bot/sessions"


def check_frames(frames: list[dict[str, Any]], session_id: str) -> list[dict[str, Any]]:
    """Every frame is well formed; returns the event dicts."""
    events = []
    token = None
    last_seq = 0
    for frame in frames:
        assert frame["event"] and frame["data"] is not None
        data = json.loads(frame["data"])
        assert data["type"] == frame["event"]
        assert data["session_id"] == session_id
        run, _, seq = frame["id"].rpartition(":")
        token = token or run
        assert run == token, "one run token per stream"
        assert int(seq) == last_seq + 1, "ids count up by one"
        last_seq = int(seq)
        events.append(data)
    return events


async def read_frames(lines: AsyncIterator[str], until: str | None = None) -> list[dict[str, Any]]:
    """Read SSE lines into frames, stopping after an event of type `until` (or at the end)."""
    frames: list[dict[str, Any]] = []
    buffer: list[str] = []
    async for line in lines:
        if line:
            buffer.append(line)
            continue
        if buffer:
            frames.extend(parse_sse("\n".join(buffer) + "\n\n"))
            buffer = []
            if until is not None and frames and frames[-1]["event"] == until:
                break
    return frames


async def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached in time")


async def test_stream_format(client: httpx.AsyncClient) -> None:
    r = await client.post(f"{S}/s1/messages", json={"input": "add please", "stream": True}, headers=ALICE)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["cache-control"] == "no-store"
    assert r.headers["x-session-id"] == "s1"
    frames = parse_sse(r.text)
    events = check_frames(frames, "s1")
    types = [e["type"] for e in events]
    assert types[0] == "run_started"
    assert types[-1] == "run_finished"
    assert {"model_call_started", "tool_call_started", "tool_result", "text_delta"} <= set(types)
    assert frames[0]["id"].split(":")[0] == r.headers["x-run-id"]
    # the events rebuild into the reply, which is the stored reply
    reply = reduce_events([event_from_dict(e) for e in events])
    assert reply.text == "done: add=5 [success]"
    state = (await client.get(f"{S}/s1", headers=ALICE)).json()
    assert Msg.from_dict(state["messages"][-1]).text == reply.text


async def test_stream_of_a_failing_call_ends_with_run_error(client: httpx.AsyncClient) -> None:
    await client.post(f"{S}/s1/messages", json={"input": "danger x"}, headers=ALICE)
    r = await client.post(f"{S}/s1/messages", json={"input": "hello", "stream": True}, headers=ALICE)
    assert r.status_code == 200
    events = check_frames(parse_sse(r.text), "s1")
    assert events[-1]["type"] == "run_error"
    assert "waiting for an answer" in events[-1]["error"]


async def test_heartbeat_comments_on_a_quiet_stream(make_app: Any) -> None:
    app = make_app(heartbeat=0.05)
    async with live_server(app) as (url, _), httpx.AsyncClient(base_url=url, timeout=30) as c:
        body = {"input": "nap", "stream": True}
        async with c.stream("POST", f"{S}/s1/messages", json=body, headers=ALICE) as r:
            pings = 0
            async for line in r.aiter_lines():
                if line == ": ping":
                    pings += 1
                    if pings == 2:
                        break
        assert pings == 2
        await wait_for(lambda: len(app.state.agentrt.runs) == 0)


async def test_client_disconnect_cancels_and_checkpoints_the_run(make_app: Any, store: InMemoryStateStore) -> None:
    app = make_app()  # disconnect_grace=0: the run stops as soon as its client is gone
    agent = app.state.agentrt.agents["bot"]
    async with live_server(app) as (url, _), httpx.AsyncClient(base_url=url, timeout=30) as c:
        body = {"input": "nap now", "stream": True}
        async with c.stream("POST", f"{S}/s1/messages", json=body, headers=ALICE) as r:
            frames = await read_frames(r.aiter_lines(), until="tool_call_started")
        assert frames[-1]["event"] == "tool_call_started"
        # the tool sleeps 60 s: the run must stop long before that
        await wait_for(lambda: len(app.state.agentrt.runs) == 0 and not agent._running)
        state = await store.load("alice", "s1", agent="bot")
        assert state is not None
        assert state.messages[0].text == "nap now"
        assert state.messages[1].tool_calls[0].name == "nap"
        [result] = state.messages[2].blocks(ToolResultBlock)
        assert result.state == "interrupted"
        # the session is free and consistent: the next call goes through at once
        r2 = await c.post(f"{S}/s1/messages", json={"input": "hello"}, headers=ALICE)
        assert r2.json()["message"]["content"][0]["text"] == "echo: hello (turn 2)"


async def test_reconnect_with_last_event_id_resumes_the_run(make_app: Any) -> None:
    app = make_app(disconnect_grace=10.0)
    async with live_server(app) as (url, _), httpx.AsyncClient(base_url=url, timeout=30) as c:
        body = {"input": "nap", "stream": True}
        async with c.stream("POST", f"{S}/s1/messages", json=body, headers=ALICE) as r:
            first = await read_frames(r.aiter_lines(), until="model_call_started")
        last_id = first[-1]["id"]
        assert app.state.agentrt.runs.is_running(("bot", "alice", "s1")), "the run outlives its client for the grace"

        async def interrupt_soon() -> None:
            await asyncio.sleep(0.3)
            await c.post(f"{S}/s1/interrupt", headers=ALICE)

        stopper = asyncio.create_task(interrupt_soon())
        async with c.stream("GET", f"{S}/s1/events", headers={**ALICE, "Last-Event-ID": last_id}) as r:
            assert r.status_code == 200
            rest = await read_frames(r.aiter_lines())
        await stopper
        events = check_frames(first + rest, "s1")  # one run, ids continuous across the reconnect
        assert int(rest[0]["id"].rpartition(":")[2]) == int(last_id.rpartition(":")[2]) + 1
        assert events[-1]["type"] == "run_finished"
        assert events[-1]["msg"]["metadata"]["generate_reason"] == "interrupted"
        # no run any more: an EventSource is told to stop reconnecting
        r2 = await c.get(f"{S}/s1/events", headers={**ALICE, "Last-Event-ID": last_id})
        assert r2.status_code == 204


async def test_reconnect_too_late_for_the_buffer_is_409(make_app: Any) -> None:
    app = make_app(disconnect_grace=10.0, event_buffer=2)
    async with live_server(app) as (url, _), httpx.AsyncClient(base_url=url, timeout=30) as c:
        body = {"input": "nap", "stream": True}
        async with c.stream("POST", f"{S}/s1/messages", json=body, headers=ALICE) as r:
            first = await read_frames(r.aiter_lines(), until="run_started")
        assert first[0]["event"] == "run_started", "an attached reader gets every frame, whatever the buffer size"
        live = app.state.agentrt.runs.find_live(("bot", "alice", "s1"))
        await wait_for(lambda: live.last_seq >= 5)
        r2 = await c.get(f"{S}/s1/events", headers={**ALICE, "Last-Event-ID": first[0]["id"]})
        assert r2.status_code == 409
        assert r2.json()["error"]["code"] == "events_expired"
        async with c.stream("GET", f"{S}/s1/events", headers=ALICE) as r3:  # no id: the buffered tail
            assert r3.status_code == 200
            await c.post(f"{S}/s1/interrupt", headers=ALICE)
            tail = await read_frames(r3.aiter_lines())
        assert len(tail) >= 2
        assert tail[-1]["event"] == "run_finished"


async def test_watcher_can_attach_to_a_running_stream(make_app: Any) -> None:
    app = make_app()
    async with live_server(app) as (url, _), httpx.AsyncClient(base_url=url, timeout=30) as c:
        body = {"input": "nap", "stream": True}
        async with c.stream("POST", f"{S}/s1/messages", json=body, headers=ALICE) as main:
            await read_frames(main.aiter_lines(), until="tool_call_started")
            async with c.stream("GET", f"{S}/s1/events", headers=ALICE) as watch:
                assert watch.status_code == 200
                await c.post(f"{S}/s1/interrupt", headers=ALICE)
                seen = await read_frames(watch.aiter_lines())
        assert seen[0]["event"] == "run_started"  # replayed from the start of the buffer
        assert seen[-1]["event"] == "run_finished"


async def test_an_iterator_stream_ends_its_body_with_its_last_frames() -> None:
    from agentrt.server._sse import EventStreamResponse, IteratorSource

    async def items() -> AsyncIterator[bytes]:
        for n in range(3):
            yield f"data: {n}\n\n".encode()

    messages: list[dict[str, Any]] = []
    never: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    async def receive() -> dict[str, Any]:
        return await never

    response = EventStreamResponse(IteratorSource(items(), lambda item: item))
    await response({"type": "http"}, receive, send)  # type: ignore[arg-type]
    bodies = [m for m in messages if m["type"] == "http.response.body"]
    assert b"".join(m["body"] for m in bodies) == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
    assert bodies[-1]["more_body"] is False and bodies[-1]["body"], "the last frames end the body"
