"""Every native route over the in-process ASGI transport."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from server_agents import ALICE, CITATIONS, KEYS, knowledge_agent, make_agent, parse_sse

from agentrt import Msg, ReActAgent
from agentrt.errors import UserError
from agentrt.server import ApiKeyAuth, create_app
from agentrt.state import InMemoryStateStore

S = "/v1/agents/bot/sessions"


async def send(client: httpx.AsyncClient, session: str, input: Any, **extra: Any) -> httpx.Response:
    return await client.post(f"{S}/{session}/messages", json={"input": input, **extra}, headers=ALICE)


async def test_list_agents(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/agents", headers=ALICE)
    assert r.status_code == 200
    assert r.json() == {
        "agents": [{"name": "bot", "description": "A test agent."}, {"name": "other", "description": "A test agent."}]
    }


async def test_message_returns_the_reply_json(client: httpx.AsyncClient) -> None:
    r = await send(client, "s1", "hello")
    assert r.status_code == 200
    body = r.json()
    assert body["session_id"] == "s1"
    assert r.headers["x-session-id"] == "s1"
    reply = Msg.from_dict(body["message"])
    assert reply.role == "assistant"
    assert reply.text == "echo: hello (turn 1)"


async def test_message_accepts_msg_json_and_keeps_history(client: httpx.AsyncClient) -> None:
    await send(client, "s1", "one")
    msgs = [Msg.user("two").to_dict()]
    r = await send(client, "s1", msgs)
    assert r.status_code == 200
    assert r.json()["message"]["content"] == [{"type": "text", "text": "echo: two (turn 2)"}]
    # content may be a plain string for one text block
    r = await send(client, "s1", [{"role": "user", "content": "three"}])
    assert r.json()["message"]["content"][0]["text"] == "echo: three (turn 3)"


async def test_get_session_state_and_history(client: httpx.AsyncClient) -> None:
    await send(client, "s1", "one")
    await send(client, "s1", "two")
    r = await client.get(f"{S}/s1", headers=ALICE)
    assert r.status_code == 200
    body = r.json()
    assert body["agent"] == "bot"
    assert body["session_id"] == "s1"
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user", "assistant"]
    assert body["message_count"] == 4
    assert body["pending"] is None
    assert body["revision"] >= 4
    assert body["running"] is False
    r = await client.get(f"{S}/s1", params={"limit": 1}, headers=ALICE)
    assert [m["content"][0]["text"] for m in r.json()["messages"]] == ["echo: two (turn 2)"]
    assert r.json()["message_count"] == 4
    r = await client.get(f"{S}/s1", params={"limit": "x"}, headers=ALICE)
    assert r.status_code == 422


async def test_list_and_delete_sessions(client: httpx.AsyncClient) -> None:
    for sid in ("a", "b"):
        await send(client, sid, "hi")
    r = await client.get(S, headers=ALICE)
    assert r.status_code == 200
    assert sorted(s["session_id"] for s in r.json()["sessions"]) == ["a", "b"]
    assert all(s["message_count"] == 2 for s in r.json()["sessions"])
    r = await client.delete(f"{S}/a", headers=ALICE)
    assert r.status_code == 204
    r = await client.get(f"{S}/a", headers=ALICE)
    assert r.status_code == 404
    r = await client.delete(f"{S}/a", headers=ALICE)
    assert r.status_code == 404
    assert [s["session_id"] for s in (await client.get(S, headers=ALICE)).json()["sessions"]] == ["b"]


async def test_sessions_are_namespaced_per_agent(client: httpx.AsyncClient, store: InMemoryStateStore) -> None:
    await send(client, "same", "for bot")
    r = await client.post("/v1/agents/other/sessions/same/messages", json={"input": "for other"}, headers=ALICE)
    assert r.json()["message"]["content"][0]["text"] == "echo: for other (turn 1)"  # not bot's history
    bot = (await client.get(f"{S}/same", headers=ALICE)).json()
    other = (await client.get("/v1/agents/other/sessions/same", headers=ALICE)).json()
    assert bot["messages"][0]["content"][0]["text"] == "for bot"
    assert other["messages"][0]["content"][0]["text"] == "for other"
    assert sorted((s.agent, s.session_id) for s in await store.list_sessions("alice")) == [
        ("bot", "same"),
        ("other", "same"),
    ]
    assert [s["session_id"] for s in (await client.get(S, headers=ALICE)).json()["sessions"]] == ["same"]


async def test_interrupt_route(client: httpx.AsyncClient, app: Any) -> None:
    r = await client.post(f"{S}/never/interrupt", headers=ALICE)
    assert r.status_code == 404
    await send(client, "s1", "hi")
    r = await client.post(f"{S}/s1/interrupt", headers=ALICE)
    assert r.status_code == 200
    assert r.json() == {"interrupted": False}

    slow = asyncio.create_task(send(client, "s2", "slow"))
    server = app.state.agentrt
    for _ in range(200):
        if server.runs.is_running(("bot", "alice", "s2")):
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    r = await client.post(f"{S}/s2/interrupt", json={"message": "stop that"}, headers=ALICE)
    assert r.json() == {"interrupted": True}
    reply = (await slow).json()["message"]
    assert reply["metadata"]["generate_reason"] == "interrupted"
    state = (await client.get(f"{S}/s2", headers=ALICE)).json()
    assert [m["content"][0]["text"] for m in state["messages"]] == ["slow", "(interrupted)", "stop that"]


async def test_events_route_without_a_running_stream(client: httpx.AsyncClient) -> None:
    r = await client.get(f"{S}/nope/events", headers=ALICE)
    assert r.status_code == 404
    await send(client, "s1", "hi")
    r = await client.get(f"{S}/s1/events", headers=ALICE)
    assert r.status_code == 204
    r = await client.get(f"{S}/s1/events", headers={**ALICE, "Last-Event-ID": "garbage"})
    assert r.status_code == 422


async def test_health_readiness_openapi_and_ui(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    r = await client.get("/readyz")
    assert r.status_code == 200
    assert r.json()["status"] == "ready"
    doc = (await client.get("/openapi.json")).json()
    assert doc["openapi"].startswith("3.")
    assert "/v1/agents/{agent}/sessions/{session_id}/messages" in doc["paths"]
    assert "/v1/chat/completions" in doc["paths"]
    agent_param = doc["paths"]["/v1/agents/{agent}/sessions"]["get"]["parameters"][0]
    assert agent_param["schema"]["enum"] == ["bot", "other"]
    r = await client.get("/")
    assert r.status_code in (200, 404)  # the web UI ships separately; served when present
    r = await client.get("/v1/nothing-here", headers=ALICE)
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "not_found"


async def test_store_is_given_to_agents_without_one() -> None:
    own = InMemoryStateStore()
    shared = InMemoryStateStore()
    mine, theirs = make_agent("mine", store=own), make_agent("theirs")
    create_app([mine, theirs], store=shared, api_keys=KEYS)
    assert mine.state_store is own
    assert theirs.state_store is shared


def test_create_app_needs_keys_and_valid_agents(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTRT_API_KEYS", raising=False)
    with pytest.raises(UserError, match="no API keys"):
        create_app({"bot": make_agent()})
    with pytest.raises(UserError, match="cannot be served"):
        create_app({"a:b": make_agent()}, api_keys=KEYS)
    with pytest.raises(UserError, match="at least one agent"):
        create_app({}, api_keys=KEYS)
    monkeypatch.setenv("AGENTRT_API_KEYS", "k1=u1, k2=u2")
    app = create_app(make_agent())
    assert len(app.state.agentrt.auth) == 2
    assert "k1" not in repr(app.state.agentrt.auth)
    with pytest.raises(UserError):
        ApiKeyAuth({"": "x"})


async def test_agent_errors_map_to_statuses(client: httpx.AsyncClient) -> None:
    await send(client, "s1", "danger x")
    r = await send(client, "s1", "just talking")  # an approval is pending: a plain message cannot be taken
    assert r.status_code == 409
    assert "waiting for an answer" in r.json()["error"]["message"]


async def test_error_bodies_have_one_shape(client: httpx.AsyncClient) -> None:
    r = await client.post(f"{S}/s1/messages", content=b"{not json", headers=ALICE)
    assert r.status_code == 400
    error = r.json()["error"]
    assert set(error) >= {"type", "code", "message"}
    assert error["code"] == "invalid_json"
    r = await client.put(f"{S}/s1/messages", headers=ALICE)
    assert r.status_code == 405
    assert r.json()["error"]["code"] == "method_not_allowed"
    assert json.loads(r.text)  # JSON, not plain text


async def test_native_routes_pass_the_reply_citations_on(store: InMemoryStateStore) -> None:
    app = create_app({"kb": knowledge_agent("kb")}, store=store, api_keys=KEYS, disconnect_grace=0.0)
    base = "/v1/agents/kb/sessions"
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as client:
        r = await client.post(f"{base}/k1/messages", json={"input": "vacation?"}, headers=ALICE)
        assert r.status_code == 200, r.text
        assert r.json()["message"]["metadata"]["citations"] == CITATIONS
        r = await client.post(f"{base}/k1/messages", json={"input": "again", "stream": True}, headers=ALICE)
        finished = [json.loads(f["data"]) for f in parse_sse(r.text) if f["event"] == "run_finished"]
        assert [f["msg"]["metadata"]["citations"] for f in finished] == [CITATIONS]
        r = await client.get(f"{base}/k1", headers=ALICE)
        stored = [m["metadata"]["citations"] for m in r.json()["messages"] if "citations" in m.get("metadata", {})]
        assert stored == [CITATIONS, CITATIONS]  # both replies, as stored in the session


async def test_an_agent_that_streams_its_own_way_is_streamed_through_its_stream_events(
    store: InMemoryStateStore,
) -> None:
    # The SSE route pushes a ReActAgent's events straight into the stream (`run_with_events`); an
    # agent class that overrides `stream_events` must still be served by its own implementation.
    from agentrt import events as ev

    class Announcing(ReActAgent):
        async def stream_events(
            self, input: Any = None, ctx: Any = None, *, output: Any = None, usage_limits: Any = None
        ) -> Any:
            async for event in super().stream_events(input, ctx, output=output, usage_limits=usage_limits):
                if isinstance(event, ev.RunFinished):
                    yield ev.TextDelta(reply_id=event.reply_id, source=self.name, block_id="extra", delta="(announced)")
                yield event

    template = make_agent()
    agent = Announcing(template.name, "You are a test agent.", model=template.model, toolkit=template.toolkit)
    app = create_app({"bot": agent}, store=store, api_keys=KEYS, disconnect_grace=0.0)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as client:
        r = await client.post(f"{S}/own/messages", json={"input": "hi", "stream": True}, headers=ALICE)
        assert r.status_code == 200, r.text
        deltas = [json.loads(f["data"])["delta"] for f in parse_sse(r.text) if f["event"] == "text_delta"]
        assert deltas[-1] == "(announced)"
