"""Questions of a running call over HTTP: the real app and uvicorn, an in-process MCP server that asks.

The run streams over SSE; while its MCP tool call waits, the test reads the question from the
stream, lists it, tries wrong users, unknown ids and invalid answers, and answers through
``POST .../answers``; the MCP server's record shows what it received.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
from server_agents import ALICE, BOB, KEYS, live_server, parse_sse

from agentrt.server import create_app
from agentrt.state import InMemoryStateStore
from mcp_questions import Received, agent_with_questions, call

S = "/v1/agents/bot/sessions"
GOOD = {"name": "Ann", "seats": 2, "window": False, "meal": "veg"}


async def events_until(lines: AsyncIterator[str], until: str) -> list[dict[str, Any]]:
    """The events (JSON) of an SSE stream up to and including the first of type `until`."""
    events: list[dict[str, Any]] = []
    buffer: list[str] = []
    async for line in lines:
        if line:
            buffer.append(line)
            continue
        for frame in parse_sse("\n".join(buffer) + "\n\n"):
            if frame["data"] is not None:
                events.append(json.loads(frame["data"]))
        buffer = []
        if events and events[-1]["type"] == until:
            break
    return events


async def make_app(received: Received, steps: list[Any]) -> tuple[Any, Any]:
    agent, toolkit, _ = await agent_with_questions(received, steps, name="bot")
    return create_app({"bot": agent}, store=InMemoryStateStore(), api_keys=KEYS, disconnect_grace=0.0), toolkit


async def test_answer_a_question_over_http_while_the_run_streams() -> None:
    received = Received()
    app, toolkit = await make_app(received, [call("book", table="T1"), "Booked it."])
    try:
        async with live_server(app) as (url, _), httpx.AsyncClient(base_url=url, timeout=30) as c:
            body = {"input": "Book T1", "stream": True}
            async with c.stream("POST", f"{S}/s1/messages", json=body, headers=ALICE) as stream:
                lines = stream.aiter_lines()
                first = await events_until(lines, "mcp_elicitation")
                asked = first[-1]
                qid = asked["question_id"]
                assert qid.startswith("q-")
                assert (asked["mode"], asked["server"], asked["tool"], asked["tool_call_id"]) == (
                    "form",
                    "questions",
                    "book",
                    "call-1",
                )
                assert asked["message"] == "Book table T1: who and how many?"
                assert asked["requested_schema"]["required"] == ["name", "seats"]
                assert asked["expires_at"] > 0 and asked["session_id"] == "s1" and asked["source"] == "bot"

                # Listed: on its own route and in the session, only for its user.
                listed = (await c.get(f"{S}/s1/questions", headers=ALICE)).json()["questions"]
                assert [(q["id"], q["tool_call_id"], q["mode"]) for q in listed] == [(qid, "call-1", "form")]
                session = (await c.get(f"{S}/s1", headers=ALICE)).json()
                assert session["running"] is True and [q["id"] for q in session["questions"]] == [qid]
                assert (await c.get(f"{S}/s1/questions", headers=BOB)).status_code == 404
                assert (await c.get(f"{S}/s1/questions")).status_code == 401

                answer = {"question_id": qid, "action": "accept", "content": GOOD}
                # Another user cannot answer it: for them the session does not exist.
                r = await c.post(f"{S}/s1/answers", json=answer, headers=BOB)
                assert (r.status_code, r.json()["error"]["code"]) == (404, "session_not_found")
                # An unknown question: 409, naming what is open.
                r = await c.post(f"{S}/s1/answers", json={**answer, "question_id": "q-nope"}, headers=ALICE)
                assert (r.status_code, r.json()["error"]["code"]) == (409, "question_not_open")
                assert qid in r.json()["error"]["message"]
                # An invalid answer: 422 naming the field, and the question stays open.
                bad = {**answer, "content": {**GOOD, "seats": 99}}
                r = await c.post(f"{S}/s1/answers", json=bad, headers=ALICE)
                error = r.json()["error"]
                assert (r.status_code, error["code"], error["param"]) == (422, "invalid_answer", "content")
                assert error["details"] == [
                    {"loc": ["content", "seats"], "msg": "must be at most 8", "type": "invalid_answer"}
                ]
                r = await c.post(f"{S}/s1/answers", json={"question_id": qid, "action": "maybe"}, headers=ALICE)
                assert (r.status_code, r.json()["error"]["code"]) == (422, "validation_error")
                r = await c.post(f"{S}/s1/answers", json={**answer, "extra": 1}, headers=ALICE)
                assert r.status_code == 422
                r = await c.post(f"{S}/s1/answers", content=b"not json", headers=ALICE)
                assert r.status_code == 400
                assert [q["id"] for q in (await c.get(f"{S}/s1/questions", headers=ALICE)).json()["questions"]] == [qid]
                assert received.answers == []  # nothing reached the MCP server yet

                r = await c.post(f"{S}/s1/answers", json=answer, headers=ALICE)
                assert r.status_code == 200
                assert r.json() == {"answered": True, "question_id": qid, "action": "accept"}
                r = await c.post(f"{S}/s1/answers", json=answer, headers=ALICE)
                assert (r.status_code, r.json()["error"]["code"]) == (409, "question_not_open")  # spent

                rest = await events_until(lines, "run_finished")
            types = [e["type"] for e in rest]
            closed = rest[types.index("mcp_elicitation_closed")]
            assert (closed["question_id"], closed["action"], closed["reason"]) == (qid, "accept", "answered")
            [result] = [e["result"] for e in rest if e["type"] == "tool_result"]
            assert result["output"].startswith("booked table T1: ")
            assert rest[-1]["msg"]["content"][0]["text"] == "Booked it."
            assert received.answers == [("book", "accept", GOOD)]
            # After the run: nothing open, and answering says so.
            assert (await c.get(f"{S}/s1/questions", headers=ALICE)).json() == {"questions": []}
            assert (await c.get(f"{S}/s1", headers=ALICE)).json()["questions"] == []
            r = await c.post(f"{S}/s1/answers", json=answer, headers=ALICE)
            assert r.status_code == 409
    finally:
        await toolkit.aclose()


async def test_events_subscribers_see_the_question_and_decline_works() -> None:
    received = Received()
    app, toolkit = await make_app(received, [call("authorize"), "Not connected."])
    try:
        async with live_server(app) as (url, _), httpx.AsyncClient(base_url=url, timeout=30) as c:
            body = {"input": "Connect", "stream": True}
            async with c.stream("POST", f"{S}/s2/messages", json=body, headers=ALICE) as stream:
                asked = (await events_until(stream.aiter_lines(), "mcp_elicitation"))[-1]
                # A second client following the run through /events gets the same question.
                async with c.stream("GET", f"{S}/s2/events", headers=ALICE) as follower:
                    assert follower.status_code == 200
                    lines = follower.aiter_lines()
                    seen = (await events_until(lines, "mcp_elicitation"))[-1]
                    assert seen == asked
                    assert (seen["mode"], seen["url"], seen["requested_schema"]) == (
                        "url",
                        "https://auth.example.com/authorize?client=agentrt",
                        None,
                    )
                    r = await c.post(
                        f"{S}/s2/answers", json={"question_id": seen["question_id"], "action": "decline"}, headers=ALICE
                    )
                    assert r.json()["action"] == "decline"
                    rest = await events_until(lines, "run_finished")
                assert [e["reason"] for e in rest if e["type"] == "mcp_elicitation_closed"] == ["answered"]
        assert received.answers == [("authorize", "decline", None)]
    finally:
        await toolkit.aclose()


async def test_facade_clients_cannot_see_questions_so_theirs_are_declined_at_once() -> None:
    received = Received()
    app, toolkit = await make_app(received, [call("book", table="T4"), "Not booked."])
    try:
        transport = httpx.ASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=30) as c:
            body = {"model": "bot", "messages": [{"role": "user", "content": "Book"}], "stream": True}
            r = await c.post("/v1/chat/completions", json=body, headers={**ALICE, "X-Session-Id": "oa"})
            assert r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]")
        assert received.answers == [("book", "decline", None)]  # declined, not left waiting 10 minutes
    finally:
        await toolkit.aclose()


async def test_a_session_without_a_running_call_has_no_questions() -> None:
    received = Received()
    app, toolkit = await make_app(received, ["Hello."])
    try:
        transport = httpx.ASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            assert (await c.get(f"{S}/none/questions", headers=ALICE)).status_code == 404
            r = await c.post(f"{S}/none/answers", json={"question_id": "q-1", "action": "cancel"}, headers=ALICE)
            assert (r.status_code, r.json()["error"]["code"]) == (404, "session_not_found")
            await c.post(f"{S}/s3/messages", json={"input": "hi"}, headers=ALICE)
            assert (await c.get(f"{S}/s3/questions", headers=ALICE)).json() == {"questions": []}
            r = await c.post(f"{S}/s3/answers", json={"question_id": "q-1", "action": "cancel"}, headers=ALICE)
            error = r.json()["error"]
            assert (r.status_code, error["code"], error["param"]) == (409, "question_not_open", "question_id")
            assert "server running the call" in error["message"]
            spec = (await c.get("/openapi.json")).json()
            answers = spec["paths"]["/v1/agents/{agent}/sessions/{session_id}/answers"]["post"]
            assert answers["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/AnswerRequest")
            assert {"200", "404", "409", "422"} <= set(answers["responses"])
            assert "/v1/agents/{agent}/sessions/{session_id}/questions" in spec["paths"]
            assert "questions" in spec["components"]["schemas"]["SessionState"]["properties"]
    finally:
        await toolkit.aclose()
