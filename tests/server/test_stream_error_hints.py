"""A streamed run's ``run_error`` tells an HTTP client what to do the HTTP way, not in Python."""

from __future__ import annotations

import json

import httpx
from server_agents import ALICE

S = "/v1/agents/bot/sessions"


async def test_a_message_while_an_approval_waits_names_the_confirm_route(client: httpx.AsyncClient) -> None:
    first = await client.post(f"{S}/s1/messages", headers=ALICE, json={"input": "danger x", "stream": True})
    assert "require_user_confirm" in first.text
    second = await client.post(f"{S}/s1/messages", headers=ALICE, json={"input": "hello", "stream": True})
    errors = [
        json.loads(line[len("data: ") :])
        for line in second.text.splitlines()
        if line.startswith("data: ") and '"run_error"' in line
    ]
    assert errors, second.text
    text = errors[-1]["error"]
    assert "Msg.confirm" not in text and "ConfirmResult" not in text
    assert f"POST {S}/s1/confirm" in text
    assert "call-danger" in text, "the example body names the waiting call"
