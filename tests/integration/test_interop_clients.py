"""Conformance: the real third-party clients against a real ``agentrt serve`` (uvicorn) process.

- the official ``openai`` Python client: models, chat completions with and without streaming, an
  approval answered with a tool message, and one answered the way generic frameworks do;
- the ``a2a-sdk`` client: agent card, streaming and unary ``SendMessage``, ``GetTask``, an approval;
- ``@ag-ui/client`` in Node (``tests/node/agui_client.mjs``): a tool call, an approval interrupt and
  its resume; every event is validated with ``@ag-ui/core``'s zod schemas (in Node) and with the
  ``ag-ui-protocol`` models (here).

The Node test skips locally without Node.js or ``tests/node/node_modules`` (``bash
scripts/install-node-deps.sh``), and fails under ``CI=true``. docs/interop.md lists the versions.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers import get_artifact_text, get_message_text, new_text_part
from a2a.types import GetTaskRequest, Message, Role, SendMessageRequest, TaskState
from ag_ui.core import Event, EventType
from pydantic import TypeAdapter

sys.path.insert(0, str(Path(__file__).parents[1] / "server"))
from server_agents import served_process

pytestmark = pytest.mark.integration

NODE_DIR = Path(__file__).parents[1] / "node"
AGUI_SCRIPT = NODE_DIR / "agui_client.mjs"
KEY = "key-alice"
AUTH = {"Authorization": f"Bearer {KEY}"}
AGUI_EVENTS: TypeAdapter[Any] = TypeAdapter(Event)
# What pydantic-ai sends back for a tool call it does not know (it has no such tool).
UNKNOWN_TOOL = '{"error": "Unknown tool name: \'danger\'. No tools available."}'


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """One real server process for the module (scripted agent ``bot``, see tests/server/server_agents.py)."""
    with served_process() as (url, _):
        yield url


async def session_state(server: str, session_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient(headers=AUTH) as http:
        r = await http.get(f"{server}/v1/agents/bot/sessions/{session_id}")
    assert r.status_code == 200, r.text
    state: dict[str, Any] = r.json()
    return state


# -- openai ---------------------------------------------------------------------------------------------------------
async def test_openai_python_client(server: str) -> None:
    async with openai.AsyncOpenAI(base_url=server + "/v1", api_key=KEY, max_retries=0) as client:
        assert [(m.id, m.object) async for m in client.models.list()] == [("bot", "model")]
        assert (await client.models.retrieve("bot")).owned_by == "agentrt"
        with pytest.raises(openai.NotFoundError):
            await client.models.retrieve("ghost")

        session = "oa-" + uuid.uuid4().hex
        headers = {"X-Session-Id": session}
        c = await client.chat.completions.create(
            model="bot", messages=[{"role": "user", "content": "hello"}], extra_headers=headers
        )
        assert (c.choices[0].message.content, c.choices[0].finish_reason) == ("echo: hello (turn 1)", "stop")
        stream = await client.chat.completions.create(
            model="bot",
            messages=[{"role": "user", "content": "again"}],
            stream=True,
            stream_options={"include_usage": True},
            extra_headers=headers,
        )
        chunks = [chunk async for chunk in stream]
        assert len(chunks) > 3  # word by word
        assert "".join(p.choices[0].delta.content or "" for p in chunks if p.choices) == "echo: again (turn 2)"
        assert chunks[-1].usage is not None

        # An approval, answered with a tool message.
        paused = await client.chat.completions.create(
            model="bot", messages=[{"role": "user", "content": "danger x"}], extra_headers=headers
        )
        assert paused.choices[0].finish_reason == "tool_calls"
        [call] = paused.choices[0].message.tool_calls or []
        done = await client.chat.completions.create(
            model="bot",
            messages=[{"role": "tool", "tool_call_id": call.id, "content": "approve"}],
            extra_headers=headers,
        )
        assert done.choices[0].message.content == "done: danger=did x [success]"

        # Another approval, answered the way a generic framework does: its own tool output denies it.
        paused = await client.chat.completions.create(
            model="bot", messages=[{"role": "user", "content": "danger y"}], extra_headers=headers
        )
        [call] = paused.choices[0].message.tool_calls or []
        assistant = paused.choices[0].message.model_dump(exclude_none=True)
        history: list[Any] = [{"role": "user", "content": "danger y"}, assistant]
        history.append({"role": "tool", "tool_call_id": call.id, "content": UNKNOWN_TOOL})
        denied = await client.chat.completions.create(model="bot", messages=history, extra_headers=headers)
        content = denied.choices[0].message.content or ""
        assert content == f"done: danger=The user denied this tool call. Reason: {UNKNOWN_TOOL} [denied]"
    state = await session_state(server, session)
    assert state["pending"] is None
    assert "did y" not in json.dumps(state["messages"])  # the tool never ran


# -- a2a ------------------------------------------------------------------------------------------------------------
def a2a_message(text: str, *, context_id: str = "", task_id: str = "") -> Message:
    return Message(
        role=Role.ROLE_USER,
        parts=[new_text_part(text)],
        message_id=uuid.uuid4().hex,
        context_id=context_id,
        task_id=task_id,
    )


async def test_a2a_sdk_client(server: str) -> None:
    async with httpx.AsyncClient(headers=AUTH, timeout=30) as http:
        card = await A2ACardResolver(http, server + "/a2a/bot").get_agent_card()
        assert card.supported_interfaces[0].url == server + "/a2a/bot"
        streaming = ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(card)
        unary = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)

        streamed = [r async for r in streaming.send_message(SendMessageRequest(message=a2a_message("hello again")))]
        chunks = [r.artifact_update for r in streamed if r.HasField("artifact_update")]
        assert len(chunks) > 3  # the streaming client gets the text incrementally
        assert "".join(get_artifact_text(c.artifact) for c in chunks) == "echo: hello again (turn 1)"
        task = streamed[0].task
        stored = await streaming.get_task(GetTaskRequest(id=task.id))
        assert stored.status.state == TaskState.TASK_STATE_COMPLETED
        assert [get_artifact_text(a) for a in stored.artifacts] == ["echo: hello again (turn 1)"]

        [response] = [
            r
            async for r in unary.send_message(
                SendMessageRequest(message=a2a_message("more", context_id=task.context_id))
            )
        ]
        assert response.task.context_id == task.context_id
        assert [get_artifact_text(a) for a in response.task.artifacts] == ["echo: more (turn 2)"]

        [paused] = [
            r
            async for r in unary.send_message(
                SendMessageRequest(message=a2a_message("danger a2a", context_id=task.context_id))
            )
        ]
        assert paused.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        answer = a2a_message("approve", context_id=task.context_id, task_id=paused.task.id)
        [done] = [r async for r in unary.send_message(SendMessageRequest(message=answer))]
        assert done.task.status.state == TaskState.TASK_STATE_COMPLETED
        assert get_message_text(done.task.status.message) == "done: danger=did a2a [success]"
    state = await session_state(server, task.context_id)
    assert state["pending"] is None and state["message_count"] == 8


# -- AG-UI (Node) ---------------------------------------------------------------------------------------------------
def require_agui_client() -> str:
    """The node binary; skip (locally) or fail (CI=true) without Node.js or the installed @ag-ui packages."""
    node = shutil.which("node")
    installed = all((NODE_DIR / "node_modules" / "@ag-ui" / p / "package.json").exists() for p in ("client", "core"))
    if node is not None and installed:
        return node
    message = "Node.js or @ag-ui/client is missing (run scripts/install-node-deps.sh)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message}; CI must run the interop tests")
    pytest.skip(message)


def of(events: list[Any], kind: EventType) -> list[Any]:
    return [e for e in events if e.type is kind]


async def test_agui_client_in_node(server: str) -> None:
    node = require_agui_client()
    thread = "agui-" + uuid.uuid4().hex
    proc = await asyncio.create_subprocess_exec(
        node,
        str(AGUI_SCRIPT),
        server + "/agui/bot",
        KEY,
        thread,
        cwd=NODE_DIR,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    report = json.loads(out)
    assert report["invalid"] == []  # every event passed @ag-ui/core's zod schemas, on the wire and in the client

    runs: dict[str, list[Any]] = {}
    for run in report["runs"]:
        assert run["error"] is None, run["error"]
        assert len(run["seen"]) == len(run["wire"])  # the client dropped nothing
        events = [AGUI_EVENTS.validate_python(e) for e in run["wire"]]  # and the Python models agree
        assert events[0].type is EventType.RUN_STARTED and events[0].thread_id == thread
        assert events[-1].type is EventType.RUN_FINISHED
        runs[run["label"]] = events
    outcomes = {run["label"]: run["outcome"] for run in report["runs"]}
    assert outcomes == {"tool": "success", "interrupt": "interrupt", "resume": "success"}

    [start] = of(runs["tool"], EventType.TOOL_CALL_START)
    assert (start.tool_call_id, start.tool_call_name) == ("call-add", "add")
    [result] = of(runs["tool"], EventType.TOOL_CALL_RESULT)
    assert result.content == "5"

    [interrupt] = report["runs"][1]["pendingInterrupts"]
    assert (interrupt["id"], interrupt["toolCallId"], interrupt["reason"]) == (
        "call-danger",
        "call-danger",
        "tool_approval",
    )
    assert of(runs["interrupt"], EventType.TOOL_CALL_RESULT) == []  # it waits

    [result] = of(runs["resume"], EventType.TOOL_CALL_RESULT)
    assert (result.tool_call_id, result.content) == ("call-danger", "did prod")
    assert report["runs"][2]["pendingInterrupts"] == []

    # What the client holds, and what the server stored, agree.
    texts = [m.get("content") for m in report["messages"] if m["role"] == "assistant" and m.get("content")]
    assert texts == ["done: add=5 [success]", "done: danger=did prod [success]"]
    state = await session_state(server, thread)
    assert state["pending"] is None
    assert state["messages"][-1]["content"][0]["text"] == "done: danger=did prod [success]"
