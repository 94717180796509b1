"""Server sessions live at (agent.state_key, user, session); sessions of earlier versions move at startup."""

from __future__ import annotations

from pathlib import Path

import httpx
from server_agents import ALICE, KEYS, make_agent

from agentrt import Msg
from agentrt.server import create_app
from agentrt.state import SqliteStateStore


async def _seed_legacy(path: Path) -> None:
    """Sessions as earlier servers stored them: agent-less, with ids "<served name>:<session id>"."""
    async with SqliteStateStore(path) as store:
        await store.append(
            "alice", "bot:s1", [Msg.user("old question"), Msg.assistant("old answer")], expected_revision=0
        )
        await store.append("alice", "helper:h1", [Msg.user("helper's")], expected_revision=0)
        await store.append("alice", "elsewhere:x", [Msg.user("not served here")], expected_revision=0)


async def test_startup_moves_sessions_of_earlier_versions_under_their_agent(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    await _seed_legacy(path)
    store = SqliteStateStore(path)
    helper = make_agent("assistant")
    helper.state_key = "assistant-v1"  # served as "helper", its sessions belong to its state_key
    app = create_app({"bot": make_agent("bot"), "helper": helper}, store=store, api_keys=KEYS)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                r = await client.get("/v1/agents/bot/sessions/s1", headers=ALICE)
                assert r.status_code == 200, r.text
                assert [m["content"][0]["text"] for m in r.json()["messages"]] == ["old question", "old answer"]
                r = await client.get("/v1/agents/helper/sessions", headers=ALICE)
                assert [s["session_id"] for s in r.json()["sessions"]] == ["h1"]
                r = await client.post("/v1/agents/bot/sessions/s1/messages", json={"input": "hi"}, headers=ALICE)
                assert r.status_code == 200, r.text
    finally:
        await store.close()
    async with SqliteStateStore(path) as check:
        listed = {(i.agent, i.session_id) for i in await check.list_sessions("alice")}
        assert listed == {("bot", "s1"), ("assistant-v1", "h1"), ("", "elsewhere:x")}
        state = await check.load("alice", "s1", agent="bot")
        assert state is not None and [m.text for m in state.messages][:3] == ["old question", "old answer", "hi"]


async def test_two_agents_with_one_session_id_never_share_it(tmp_path: Path) -> None:
    store = SqliteStateStore(tmp_path / "state.db")
    app = create_app({"bot": make_agent("bot"), "other": make_agent("other")}, store=store, api_keys=KEYS)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                for name in ("bot", "other"):
                    r = await client.post(
                        f"/v1/agents/{name}/sessions/same/messages", json={"input": f"for {name}"}, headers=ALICE
                    )
                    assert r.status_code == 200, r.text
                assert (await client.delete("/v1/agents/bot/sessions/same", headers=ALICE)).status_code == 204
                r = await client.get("/v1/agents/other/sessions/same", headers=ALICE)
                assert r.json()["messages"][0]["content"][0]["text"] == "for other"
    finally:
        await store.close()
    async with SqliteStateStore(tmp_path / "state.db") as check:
        assert {(i.agent, i.session_id) for i in await check.list_sessions("alice")} == {("other", "same")}
