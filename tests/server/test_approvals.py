"""Approvals and external tool results over HTTP."""

from __future__ import annotations

import json
from typing import Any

import httpx
from server_agents import ALICE, parse_sse

S = "/v1/agents/bot/sessions"
STRAY = {"results": [{"tool_call_id": "x", "confirmed": True}]}


async def pause(client: httpx.AsyncClient, text: str = "danger the-db") -> dict[str, Any]:
    r = await client.post(f"{S}/s1/messages", json={"input": text}, headers=ALICE)
    assert r.status_code == 200
    message: dict[str, Any] = r.json()["message"]
    return message


async def test_approval_round_trip(client: httpx.AsyncClient) -> None:
    reply = await pause(client)
    assert reply["metadata"]["generate_reason"] == "awaiting_confirmation"
    [waiting] = reply["metadata"]["pending_tool_calls"]
    assert waiting["id"] == "call-danger"
    state = (await client.get(f"{S}/s1", headers=ALICE)).json()
    assert state["pending"]["tool_calls"][0]["id"] == "call-danger"
    assert state["pending"]["tool_calls"][0]["kind"] == "confirm"
    assert state["pending"]["tool_calls"][0]["suggested_rules"]

    r = await client.post(
        f"{S}/s1/confirm", json={"results": [{"tool_call_id": "call-danger", "confirmed": True}]}, headers=ALICE
    )
    assert r.status_code == 200
    assert r.json()["message"]["content"][0]["text"] == "done: danger=did the-db [success]"
    assert (await client.get(f"{S}/s1", headers=ALICE)).json()["pending"] is None


async def test_deny_with_reason_and_edit_arguments(client: httpx.AsyncClient) -> None:
    await pause(client)
    r = await client.post(
        f"{S}/s1/confirm",
        json={"results": [{"tool_call_id": "call-danger", "confirmed": False, "reason": "not today"}]},
        headers=ALICE,
    )
    assert "[denied]" in r.json()["message"]["content"][0]["text"]
    # The scripted model reuses its call id: the new call gets one of its own, so a stale answer can't approve it.
    [again] = (await pause(client))["metadata"]["pending_tool_calls"]
    assert again["id"] != "call-danger"
    r = await client.post(
        f"{S}/s1/confirm",
        json={"results": [{"tool_call_id": again["id"], "confirmed": True, "input": {"target": "a-copy"}}]},
        headers=ALICE,
    )
    assert "did a-copy" in r.json()["message"]["content"][0]["text"]


async def test_accepted_rules_are_remembered(client: httpx.AsyncClient) -> None:
    reply = await pause(client)
    broad = reply["metadata"]["pending_tool_calls"][0]["suggested_rules"][-1]
    r = await client.post(
        f"{S}/s1/confirm",
        json={"results": [{"tool_call_id": "call-danger", "confirmed": True, "rules": [broad]}]},
        headers=ALICE,
    )
    assert r.status_code == 200
    state = (await client.get(f"{S}/s1", headers=ALICE)).json()
    assert state["rules"][0]["tool"] == "danger"
    reply = await pause(client, "danger again")  # the rule allows it now: no pause
    assert reply["content"][0]["text"] == "done: danger=did again [success]"


async def test_confirm_streams_the_resumed_run(client: httpx.AsyncClient) -> None:
    r = await client.post(f"{S}/s1/messages", json={"input": "danger x", "stream": True}, headers=ALICE)
    events = [json.loads(f["data"]) for f in parse_sse(r.text)]
    assert "require_user_confirm" in [e["type"] for e in events]
    assert events[-1]["msg"]["metadata"]["generate_reason"] == "awaiting_confirmation"
    r = await client.post(
        f"{S}/s1/confirm",
        json={"results": [{"tool_call_id": "call-danger", "confirmed": True}], "stream": True},
        headers=ALICE,
    )
    events = [json.loads(f["data"]) for f in parse_sse(r.text)]
    assert events[0]["type"] == "run_started"
    assert events[-1]["type"] == "run_finished"
    assert events[-1]["msg"]["content"][0]["text"] == "done: danger=did x [success]"


async def test_confirm_validation(client: httpx.AsyncClient) -> None:
    r = await client.post(f"{S}/s1/confirm", json=STRAY, headers=ALICE)
    assert r.status_code == 404  # no such session
    await client.post(f"{S}/s1/messages", json={"input": "hi"}, headers=ALICE)
    r = await client.post(f"{S}/s1/confirm", json=STRAY, headers=ALICE)
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "not_pending"
    await pause(client)
    r = await client.post(f"{S}/s1/confirm", json=STRAY, headers=ALICE)
    assert r.status_code == 409
    assert "call-danger" in r.json()["error"]["message"]
    bad: dict[str, Any]
    for bad in (
        {"results": []},
        {"results": [{"tool_call_id": "call-danger"}]},
        {"results": [{"tool_call_id": "call-danger", "confirmed": "yes"}]},
        {"results": [{"tool_call_id": "call-danger", "confirmed": True, "rules": [{"tool": ""}]}]},
    ):
        r = await client.post(f"{S}/s1/confirm", json=bad, headers=ALICE)
        assert r.status_code == 422, bad
    bad_regex = {"tool": "danger", "args": {"target": "re:("}}
    r = await client.post(
        f"{S}/s1/confirm",
        json={"results": [{"tool_call_id": "call-danger", "confirmed": True, "rules": [bad_regex]}]},
        headers=ALICE,
    )
    assert r.status_code == 422
    assert "regular expression" in r.json()["error"]["message"]


async def test_external_tool_results(client: httpx.AsyncClient) -> None:
    reply = await pause(client, "external weather")
    assert reply["metadata"]["generate_reason"] == "awaiting_external_execution"
    r = await client.post(
        f"{S}/s1/confirm", json={"results": [{"tool_call_id": "call-lookup", "confirmed": True}]}, headers=ALICE
    )
    assert r.status_code == 409  # it waits for a result, not an approval
    stray = {"results": [{"tool_call_id": "nope", "output": "x"}]}
    r = await client.post(f"{S}/s1/tool-results", json=stray, headers=ALICE)
    assert r.status_code == 409
    r = await client.post(
        f"{S}/s1/tool-results",
        json={"results": [{"tool_call_id": "call-lookup", "output": [{"type": "text", "text": "sunny"}]}]},
        headers=ALICE,
    )
    assert r.status_code == 200
    assert r.json()["message"]["content"][0]["text"] == "done: lookup=sunny [success]"
    r = await client.post(
        f"{S}/s1/tool-results", json={"results": [{"tool_call_id": "call-lookup", "output": "late"}]}, headers=ALICE
    )
    assert r.status_code == 409
