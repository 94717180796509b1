"""HTTP error bodies tell HTTP clients the HTTP way (route and body), never the Python API (``Msg.confirm``)."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

from agentrt import Msg, ReActAgent, Toolkit, ToolResultBlock, ToolUseBlock, tool
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.server import create_app
from agentrt.server._errors import http_message
from agentrt.state import InMemoryStateStore

ALICE = {"Authorization": "Bearer sk-alice"}
ROUTE = "/v1/agents/ops%20bot/sessions/s%201"  # the route as a client must send it (quoted)


@tool(requires_confirmation=True)
def wipe(target: str) -> str:
    """Wipe something (asks first).

    Args:
        target: What to wipe.
    """
    return f"wiped {target}"


@tool(external=True)
def lookup(query: str) -> str:
    """Look something up on the caller's side.

    Args:
        query: What to look up.
    """
    raise AssertionError("external tools run on the caller's side")


def plan(request: ModelRequest) -> Any:
    last: Msg = request.messages[-1]
    if last.role == "user" and last.blocks(ToolResultBlock):
        return "done"
    if last.text.startswith("wipe"):
        return ToolUseBlock(id="call-wipe", name="wipe", input={"target": "db"})
    return ToolUseBlock(id="call-look", name="lookup", input={"query": "x"})


def _app() -> Any:
    agent = ReActAgent(
        "ops bot",
        "x",
        ScriptedModel.from_function(plan, record=False),
        Toolkit([wipe, lookup]),
        state_store=InMemoryStateStore(),
    )
    return create_app({"ops bot": agent}, api_keys={"sk-alice": "alice"})


async def _follow(client: httpx.AsyncClient, message: str) -> httpx.Response:
    """Do what an error message says: ``with POST <route> and the body <json>``."""
    found = re.search(r"with POST (\S+) and the body (\{.*?\}\]\})", message)
    assert found, message
    return await client.post(found[1], json={**json.loads(found[2]), "stream": False}, headers=ALICE)


async def test_a_message_to_a_paused_session_is_told_the_confirm_route() -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(_app()), base_url="http://t") as client:
        paused = await client.post(f"{ROUTE}/messages", json={"input": "wipe it"}, headers=ALICE)
        assert paused.json()["message"]["metadata"]["generate_reason"] == "awaiting_confirmation"
        refused = await client.post(f"{ROUTE}/messages", json={"input": "hello?"}, headers=ALICE)
        assert refused.status_code == 409
        message = refused.json()["error"]["message"]
        assert "Msg.confirm" not in message and "ConfirmResult" not in message
        assert (
            f"approve or deny wipe (call-wipe) with POST {ROUTE}/confirm and the body "
            '{"results": [{"tool_call_id": "call-wipe", "confirmed": true}]}'
        ) in message
        done = await _follow(client, message)  # the hint works as written
        assert done.status_code == 200 and done.json()["message"]["content"][0]["text"] == "done"


async def test_a_message_to_a_session_waiting_for_results_is_told_the_tool_results_route() -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(_app()), base_url="http://t") as client:
        await client.post(f"{ROUTE}/messages", json={"input": "look"}, headers=ALICE)
        refused = await client.post(f"{ROUTE}/messages", json={"input": "hello?"}, headers=ALICE)
        assert refused.status_code == 409
        message = refused.json()["error"]["message"]
        assert "Msg.tool_results" not in message and "ToolResultBlock" not in message
        assert f"with POST {ROUTE}/tool-results and the body" in message
        done = await _follow(client, message)
        assert done.status_code == 200 and done.json()["message"]["content"][0]["text"] == "done"


def test_http_message_without_a_known_session_names_the_route_template() -> None:
    text = "send the results of f (c1) with Msg.tool_results([ToolResultBlock(...)])"
    assert http_message(text) == (
        "send the results of f (c1) with POST /v1/agents/{agent}/sessions/{session_id}/tool-results and the body "
        '{"results": [{"tool_call_id": "c1", "output": "..."}]}'
    )
    assert http_message("nothing to translate") == "nothing to translate"
