"""GET .../sessions/{id}/runs and .../runs/{reply_id}: the timeline of every reply, kept with the session."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_agents import ALICE, BOB, KEYS, make_agent

from agentrt.retention import forget_user
from agentrt.server import create_app
from agentrt.state import InMemoryStateStore, SqliteStateStore
from agentrt.state.runs import StoredRun

PATH = "/v1/agents/bot/sessions"


async def post(client: httpx.AsyncClient, path: str, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
    r = await client.post(path, json=body, headers=headers)
    assert r.status_code == 200, r.text
    if r.headers["content-type"].startswith("text/event-stream"):
        frames = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
        finished = [f for f in frames if f["type"] == "run_finished"]
        assert finished, r.text
        message: dict[str, Any] = finished[-1]["msg"]
        return message
    reply: dict[str, Any] = r.json()["message"]
    return reply


async def test_the_runs_of_a_session_and_the_timeline_of_a_reply(client: httpx.AsyncClient) -> None:
    reply = await post(client, f"{PATH}/s1/messages", {"input": "add please"}, ALICE)
    assert reply["content"][0]["text"] == "done: add=5 [success]"

    r = await client.get(f"{PATH}/s1/runs", headers=ALICE)
    assert r.status_code == 200, r.text
    listing = r.json()
    assert listing["recording"] is True and listing["agent"] == "bot" and listing["session_id"] == "s1"
    [run] = listing["runs"]
    assert run["reply_id"] == reply["id"] and run["reply_ids"] == [reply["id"]]
    assert run["status"] == "completed" and run["title"] == "add please"
    assert run["totals"]["model_calls"] == 2 and run["totals"]["tool_calls"] == 1
    assert run["duration_ms"] > 0 and run["ended_at"] >= run["started_at"]
    assert listing["totals"]["runs"] == 1 and listing["totals"]["duration_ms"] == pytest.approx(run["duration_ms"])

    r = await client.get(f"{PATH}/s1/runs/{reply['id']}", headers=ALICE)
    assert r.status_code == 200, r.text
    timeline = r.json()
    assert timeline["schema"] == "agentrt.run/1" and timeline["reply_id"] == reply["id"]
    assert [s["kind"] for s in timeline["spans"]] == ["call", "model", "tool", "model"]
    assert "messages" not in timeline, "references are resolved: the record's own copies are not shown apart"
    model = timeline["spans"][1]
    seen = [(m["role"], m["content"][0].get("text")) for m in model["request"]["messages"]]
    assert seen[-1] == ("user", "add please") and seen[0][0] == "system"
    tool = timeline["spans"][2]
    assert tool["name"] == "add" and tool["arguments"] == {"a": 2, "b": 3} and tool["result"] == "5"
    assert tool["start_ms"] >= model["end_ms"] and tool["end_ms"] <= timeline["duration_ms"]

    # the reply's message id (its reply id) and the id of an earlier message of the run both lead to it
    step = run["message_ids"][0]
    assert (await client.get(f"{PATH}/s1/runs/{step}", headers=ALICE)).json()["reply_id"] == reply["id"]


async def test_another_users_session_and_unknown_or_bad_ids_are_404(client: httpx.AsyncClient) -> None:
    reply = await post(client, f"{PATH}/s1/messages", {"input": "hi"}, ALICE)
    missing = await client.get(f"{PATH}/never/runs", headers=ALICE)
    assert missing.status_code == 404
    for path in (f"{PATH}/s1/runs", f"{PATH}/s1/runs/{reply['id']}"):
        theirs = await client.get(path, headers=BOB)
        assert theirs.status_code == 404 and theirs.json()["error"]["code"] == "session_not_found"
        assert reply["id"] not in theirs.text
    await post(client, f"{PATH}/s1/messages", {"input": "bob's own"}, BOB)  # Bob's own session named s1
    theirs = await client.get(f"{PATH}/s1/runs/{reply['id']}", headers=BOB)
    assert theirs.status_code == 404 and theirs.json()["error"]["code"] == "run_not_found"
    assert [r["title"] for r in (await client.get(f"{PATH}/s1/runs", headers=BOB)).json()["runs"]] == ["bob's own"]
    for bad in ("unknown-reply", "x" * 300, "a%01b", "%20"):
        r = await client.get(f"{PATH}/s1/runs/{bad}", headers=ALICE)
        assert r.status_code == 404 and r.json()["error"]["code"] == "run_not_found", (bad, r.text)
    assert (await client.get(f"{PATH}/s1/runs", headers={})).status_code == 401
    assert (await client.get("/v1/agents/nobody/sessions/s1/runs", headers=ALICE)).status_code == 404


async def test_an_approval_round_trip_is_one_run_with_its_wait(client: httpx.AsyncClient) -> None:
    paused = await post(client, f"{PATH}/s2/messages", {"input": "danger zone", "stream": True}, ALICE)
    assert paused["metadata"]["generate_reason"] == "awaiting_confirmation"
    first = (await client.get(f"{PATH}/s2/runs/{paused['id']}", headers=ALICE)).json()
    [wait] = [s for s in first["spans"] if s["kind"] == "approval"]
    assert wait["end_ms"] is None and first["status"] == "awaiting_confirmation"

    body = {"results": [{"tool_call_id": "call-danger", "confirmed": True}], "stream": True}
    done = await post(client, f"{PATH}/s2/confirm", body, ALICE)
    assert done["content"][0]["text"].startswith("done: danger=did zone")
    by_first = (await client.get(f"{PATH}/s2/runs/{paused['id']}", headers=ALICE)).json()
    by_last = (await client.get(f"{PATH}/s2/runs/{done['id']}", headers=ALICE)).json()
    assert by_first == by_last and by_last["reply_ids"] == [paused["id"], done["id"]]
    [wait] = [s for s in by_last["spans"] if s["kind"] == "approval"]
    call_spans = [s for s in by_last["spans"] if s["kind"] == "call"]
    assert wait["decision"] == "approved" and wait["end_ms"] == call_spans[1]["start_ms"]
    assert [s["name"] for s in by_last["spans"] if s["kind"] == "tool"] == ["danger"]
    assert len((await client.get(f"{PATH}/s2/runs", headers=ALICE)).json()["runs"]) == 1


async def test_an_external_result_closes_its_wait(client: httpx.AsyncClient) -> None:
    paused = await post(client, f"{PATH}/s3/messages", {"input": "external tea"}, ALICE)
    body = {"results": [{"tool_call_id": "call-lookup", "output": "tea is a drink", "state": "success"}]}
    done = await post(client, f"{PATH}/s3/tool-results", body, ALICE)
    timeline = (await client.get(f"{PATH}/s3/runs/{done['id']}", headers=ALICE)).json()
    assert timeline["reply_id"] == paused["id"]
    [wait] = [s for s in timeline["spans"] if s["kind"] == "external"]
    assert wait["decision"] == "result: success" and wait["name"] == "lookup"


async def test_a_record_survives_a_restart_and_goes_with_its_session(tmp_path: Path) -> None:
    path = tmp_path / "state.db"

    async def app_on(store: SqliteStateStore) -> tuple[Any, httpx.AsyncClient]:
        app = create_app({"bot": make_agent("bot", store=store)}, api_keys=KEYS)
        return app, httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test")

    store = SqliteStateStore(path)
    app, client = await app_on(store)
    async with app.router.lifespan_context(app), client:
        reply = await post(client, f"{PATH}/s1/messages", {"input": "add"}, ALICE)
        await post(client, f"{PATH}/gone/messages", {"input": "hi"}, ALICE)
    await store.close()

    store = SqliteStateStore(path)  # a new process on the same file
    app, client = await app_on(store)
    async with app.router.lifespan_context(app), client:
        r = await client.get(f"{PATH}/s1/runs/{reply['id']}", headers=ALICE)
        assert r.status_code == 200 and [s["kind"] for s in r.json()["spans"]] == ["call", "model", "tool", "model"]
        assert (await client.delete(f"{PATH}/gone", headers=ALICE)).status_code == 204
        assert (await client.get(f"{PATH}/gone/runs", headers=ALICE)).status_code == 404
    await store.close()
    with sqlite3.connect(path) as conn:  # read the file itself: the deleted session's records are gone
        rows = conn.execute("SELECT session_id, user_id FROM runs").fetchall()
    conn.close()
    assert rows == [("s1", "alice")]

    async with SqliteStateStore(path) as store:
        report = await forget_user("alice", state=store)
        assert report.sessions == 1
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (0,), "forget_user deletes the records"
    conn.close()


async def test_recording_is_switched_off_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTRT_RUN_RECORDS", "off")
    store = InMemoryStateStore()
    app = create_app({"bot": make_agent("bot")}, store=store, api_keys=KEYS)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as client:
        reply = await post(client, f"{PATH}/s1/messages", {"input": "hi"}, ALICE)
        listing = (await client.get(f"{PATH}/s1/runs", headers=ALICE)).json()
        assert listing["recording"] is False and listing["runs"] == []
        assert (await client.get(f"{PATH}/s1/runs/{reply['id']}", headers=ALICE)).status_code == 404
    assert await store.list_runs("alice", "s1", agent="bot") == []


async def test_records_older_than_the_retention_are_not_shown(
    monkeypatch: pytest.MonkeyPatch, make_app: Callable[..., Any], store: InMemoryStateStore
) -> None:
    monkeypatch.setenv("AGENTRT_RUN_RECORDS_MAX_AGE", "3600")
    app = make_app()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as client:
        reply = await post(client, f"{PATH}/s1/messages", {"input": "hi"}, ALICE)
        old = StoredRun("ancient", time.time() - 7200, {"reply_ids": ["ancient"]}, '{"schema": "agentrt.run/1"}')
        assert await store.save_run("alice", "s1", old, agent="bot", max_runs=None)
        runs = (await client.get(f"{PATH}/s1/runs", headers=ALICE)).json()["runs"]
        assert [r["reply_id"] for r in runs] == [reply["id"]]
        assert (await client.get(f"{PATH}/s1/runs/ancient", headers=ALICE)).status_code == 404
        await post(client, f"{PATH}/s1/messages", {"input": "again"}, ALICE)
    assert await store.get_run("alice", "s1", "ancient", agent="bot") is None, "the next record's write dropped it"


async def test_the_openapi_document_describes_the_routes(client: httpx.AsyncClient) -> None:
    doc = (await client.get("/openapi.json")).json()
    base = "/v1/agents/{agent}/sessions/{session_id}/runs"
    assert doc["paths"][base]["get"]["operationId"] == "listRuns"
    get_run = doc["paths"][base + "/{reply_id}"]["get"]
    assert get_run["operationId"] == "getRun"
    assert get_run["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/RunTimeline"
    }
    assert {"RunTimeline", "RunSpan", "RunList", "RunTotals"} <= set(doc["components"]["schemas"])


async def test_create_app_sets_what_is_recorded() -> None:
    from agentrt.errors import UserError
    from agentrt.state.runs import RunRetention

    off_store, one_store = InMemoryStateStore(), InMemoryStateStore()
    off = create_app({"bot": make_agent("bot")}, store=off_store, api_keys=KEYS, run_records=False, facades=())
    one = create_app(
        {"bot": make_agent("bot")}, store=one_store, api_keys=KEYS, run_records=RunRetention(max_runs=1), facades=()
    )
    for app in (off, one):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as c:
            for text in ("first", "second"):
                await post(c, f"{PATH}/s1/messages", {"input": text}, ALICE)
    assert await off_store.list_runs("alice", "s1", agent="bot") == [], "nothing recorded with run_records=False"
    kept = await one_store.list_runs("alice", "s1", agent="bot")
    assert [r.summary["title"] for r in kept] == ["second"], "max_runs=1 keeps the latest only"
    with pytest.raises(UserError, match="run_records"):
        create_app({"bot": make_agent("bot")}, store=InMemoryStateStore(), api_keys=KEYS, run_records="yes")  # type: ignore[arg-type]
