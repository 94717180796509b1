"""The A2A facade: agent card and JSON-RPC message send / stream, driven by the a2a-sdk client."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.card_resolver import parse_agent_card
from a2a.helpers import get_artifact_text, get_data_parts, get_message_text, new_data_part, new_text_part
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)

from agentrt import Msg, ReActAgent, TextBlock, Toolkit, ToolUseBlock, tool
from agentrt.agent.base import AgentBase
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.server import a2a
from agentrt.server.app import create_app
from agentrt.state import InMemoryStateStore

KEY = "sk-alice"
KEYS = {KEY: "alice", "sk-bob": "bob"}
BASE = "http://testserver"
ran: list[str] = []


@tool(read_only=True)
async def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@tool(destructive=True)
async def delete_file(path: str) -> str:
    """Delete a file."""
    ran.append(f"delete {path}")
    return f"deleted {path}"


@tool(external=True)
async def open_in_browser(url: str) -> str:
    """Open a page on the caller's side."""
    raise AssertionError("external tools run on the client")


@tool(requires_confirmation=True)
async def repeat(word: str, times: int) -> str:
    """Repeat a word."""
    return word * times


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


def make_agent(model: ScriptedModel, name: str = "bot") -> ReActAgent:
    return ReActAgent(
        name,
        "You help.",
        model=model,
        toolkit=Toolkit([get_weather, delete_file, open_in_browser, repeat]),
        state_store=InMemoryStateStore(),
        description="Answers questions about the weather and tidies files.",
    )


def http_for(*agents: AgentBase, key: str | None = KEY) -> httpx.AsyncClient:
    app = create_app({a.name: a for a in agents}, api_keys=KEYS, facades=("a2a",))
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE, headers=headers)


async def card_of(http: httpx.AsyncClient, agent: str = "bot") -> AgentCard:
    return await A2ACardResolver(http, f"{BASE}/a2a/{agent}").get_agent_card()


def user_message(*parts: Part, context_id: str = "", task_id: str = "") -> Message:
    return Message(
        role=Role.ROLE_USER, parts=list(parts), message_id=uuid.uuid4().hex, context_id=context_id, task_id=task_id
    )


async def send(http: httpx.AsyncClient, message: Message, *, streaming: bool) -> list[StreamResponse]:
    card = await card_of(http)
    client = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http)).create(card)
    return [r async for r in client.send_message(SendMessageRequest(message=message))]


def final_task(responses: list[StreamResponse]) -> Task:
    last = responses[-1]
    assert last.HasField("task"), last
    return last.task


def last_status(responses: list[StreamResponse]) -> Any:
    for r in reversed(responses):
        if r.HasField("status_update"):
            return r.status_update.status
        if r.HasField("task"):
            return r.task.status
    raise AssertionError("no status")


# -- the agent card ------------------------------------------------------------------------------------------------
async def test_agent_card_describes_the_agent_its_tools_streaming_and_bearer_auth() -> None:
    async with http_for(make_agent(ScriptedModel([]))) as http:
        raw = (await http.get("/a2a/bot/.well-known/agent-card.json")).json()
        card = await card_of(http)
    assert parse_agent_card(dict(raw)) == card
    assert card.name == "bot"
    assert card.description.startswith("Answers questions")
    assert card.capabilities.streaming is True
    assert {s.id for s in card.skills} == {"get_weather", "delete_file", "repeat"}  # not the external tool
    assert "needs-approval" in next(s for s in card.skills if s.id == "delete_file").tags
    [v1, v03] = card.supported_interfaces
    assert (v1.url, v1.protocol_binding, v1.protocol_version) == (f"{BASE}/a2a/bot", "JSONRPC", "1.0")
    assert v03.protocol_version == "0.3"
    assert card.security_schemes[a2a.SECURITY_SCHEME].http_auth_security_scheme.scheme == "bearer"
    assert list(card.security_requirements[0].schemes) == [a2a.SECURITY_SCHEME]
    assert raw["url"] == f"{BASE}/a2a/bot"  # the 0.3 fields, for older clients


async def test_the_root_card_is_served_when_the_app_has_one_agent() -> None:
    async with http_for(make_agent(ScriptedModel([])), key=None) as http:
        response = await http.get("/.well-known/agent-card.json")
        assert response.status_code == 200  # public: it tells clients how to authenticate
        assert response.json()["name"] == "bot"
    async with http_for(make_agent(ScriptedModel([])), make_agent(ScriptedModel([]), "other")) as http:
        assert (await http.get("/.well-known/agent-card.json")).status_code == 404
        assert (await card_of(http, "other")).name == "other"


# -- send and stream ------------------------------------------------------------------------------------------------
async def test_message_send_returns_the_completed_task_with_the_answer() -> None:
    agent = make_agent(ScriptedModel(["It is sunny in Paris."]))
    async with http_for(agent) as http:
        responses = await send(http, user_message(new_text_part("Weather in Paris?")), streaming=False)
    task = final_task(responses)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert get_message_text(task.status.message) == "It is sunny in Paris."
    assert [get_artifact_text(a) for a in task.artifacts] == ["It is sunny in Paris."]
    state = await agent.get_state("alice", task.context_id)
    assert [m.text for m in state.messages] == ["Weather in Paris?", "It is sunny in Paris."]


async def test_message_stream_streams_text_artifacts_tool_activity_and_completes() -> None:
    model = ScriptedModel(
        [
            Msg(
                role="assistant",
                content=[
                    TextBlock(text="Checking."),
                    ToolUseBlock(id="c1", name="get_weather", input={"city": "Rome"}),
                ],
            ),
            "Sunny in Rome.",
        ]
    )
    async with http_for(make_agent(model)) as http:
        responses = await send(http, user_message(new_text_part("Rome?")), streaming=True)
    kinds = [r.WhichOneof("payload") for r in responses]
    assert kinds[0] == "task"
    artifacts: dict[str, str] = {}
    for r in responses:
        if r.HasField("artifact_update"):
            update = r.artifact_update
            assert update.append == (update.artifact.artifact_id in artifacts)
            artifacts[update.artifact.artifact_id] = artifacts.get(update.artifact.artifact_id, "") + get_artifact_text(
                update.artifact, ""
            )
    assert list(artifacts.values()) == ["Checking.", "Sunny in Rome."]
    last_chunks = [r.artifact_update.artifact.artifact_id for r in responses if r.artifact_update.last_chunk]
    assert last_chunks == list(artifacts)
    activity = [
        get_data_parts(r.status_update.status.message.parts)[0][a2a.DATA_KEY]
        for r in responses
        if r.HasField("status_update") and r.status_update.status.message.parts
        if r.status_update.status.state == TaskState.TASK_STATE_WORKING
    ]
    assert [a["type"] for a in activity] == ["tool_calls", "tool_result"]
    assert activity[0]["tool_calls"][0]["input"] == {"city": "Rome"}
    assert activity[1]["output"] == "sunny in Rome"
    status = last_status(responses)
    assert status.state == TaskState.TASK_STATE_COMPLETED
    assert get_message_text(status.message) == "Sunny in Rome."


async def test_stored_tasks_hold_each_text_block_whole_while_streams_keep_their_chunks() -> None:
    steps: list[Msg | str] = [
        Msg(
            role="assistant",
            content=[
                TextBlock(text="Let me check."),
                ToolUseBlock(id="c1", name="get_weather", input={"city": "Oslo"}),
            ],
        ),
        "You said: hello again",
        "A second answer, also streamed word by word.",
    ]
    async with http_for(make_agent(ScriptedModel(steps))) as http:
        streamed = await send(http, user_message(new_text_part("hello again")), streaming=True)
        chunks = [r.artifact_update for r in streamed if r.HasField("artifact_update")]
        assert len(chunks) > 4  # incremental: the streaming client keeps one update per chunk
        assert [c.append for c in chunks].count(False) == 2  # each block starts one artifact
        task = streamed[0].task
        client = ClientFactory(ClientConfig(httpx_client=http)).create(await card_of(http))
        stored = await client.get_task(GetTaskRequest(id=task.id))
        assert [get_artifact_text(a) for a in stored.artifacts] == ["Let me check.", "You said: hello again"]
        assert [len(a.parts) for a in stored.artifacts] == [1, 1]
        again = user_message(new_text_part("more"), context_id=task.context_id)
        unary = final_task(await send(http, again, streaming=False))
    assert [get_artifact_text(a) for a in unary.artifacts] == ["A second answer, also streamed word by word."]
    assert len(unary.artifacts[0].parts) == 1


async def test_the_context_id_is_the_session_so_a_conversation_continues() -> None:
    model = ScriptedModel(["First.", "Second."])
    agent = make_agent(model)
    async with http_for(agent) as http:
        first = final_task(await send(http, user_message(new_text_part("one")), streaming=False))
        again = user_message(new_text_part("two"), context_id=first.context_id)
        second = final_task(await send(http, again, streaming=False))
    assert second.context_id == first.context_id and second.id != first.id
    assert [m.text for m in model.requests[-1].messages if m.role != "system"] == ["one", "First.", "two"]
    # The same session through the REST API.
    async with http_for(agent) as http:
        session = (await http.get(f"/v1/agents/bot/sessions/{first.context_id}")).json()
    assert [m["content"][0]["text"] for m in session["messages"]] == ["one", "First.", "two", "Second."]


# -- approvals ------------------------------------------------------------------------------------------------------
async def test_an_approval_makes_the_task_input_required_and_a_confirm_data_part_completes_it() -> None:
    model = ScriptedModel([ToolUseBlock(id="d1", name="delete_file", input={"path": "/tmp/a"}), "Deleted."])
    async with http_for(make_agent(model)) as http:
        responses = await send(http, user_message(new_text_part("delete /tmp/a")), streaming=True)
        status = last_status(responses)
        assert status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert "delete_file" in get_message_text(status.message)
        [payload] = get_data_parts(status.message.parts)
        pending = payload[a2a.DATA_KEY]
        assert pending["type"] == "require_user_confirm"
        [call] = pending["tool_calls"]
        assert (call["id"], call["name"], call["input"]) == ("d1", "delete_file", {"path": "/tmp/a"})
        assert call["suggested_rules"]
        assert ran == []

        task = final_task(responses) if responses[-1].HasField("task") else responses[0].task
        answer = new_data_part({"confirm_results": [{"tool_call_id": "d1", "confirmed": True}]})
        follow = user_message(answer, context_id=task.context_id, task_id=task.id)
        done = final_task(await send(http, follow, streaming=False))
    assert done.id == task.id
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert get_message_text(done.status.message) == "Deleted."
    assert ran == ["delete /tmp/a"]


async def test_an_approval_can_edit_the_arguments_and_whole_numbers_stay_integers() -> None:
    model = ScriptedModel([ToolUseBlock(id="r1", name="repeat", input={"word": "ab", "times": 2}), "Done."])
    async with http_for(make_agent(model)) as http:
        task = final_task(await send(http, user_message(new_text_part("repeat ab")), streaming=False))
        edited = {"tool_call_id": "r1", "confirmed": True, "input": {"word": "ab", "times": 3}}
        answer = user_message(new_data_part({"confirm_results": [edited]}), context_id=task.context_id, task_id=task.id)
        done = final_task(await send(http, answer, streaming=False))
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    [result] = model.requests[-1].messages[-1].content
    assert result.output.endswith("ababab")  # type: ignore[union-attr]


async def test_a_bare_deny_answers_the_pending_approval() -> None:
    model = ScriptedModel([ToolUseBlock(id="d1", name="delete_file", input={"path": "/tmp/a"}), "I left it."])
    async with http_for(make_agent(model)) as http:
        task = final_task(await send(http, user_message(new_text_part("delete /tmp/a")), streaming=False))
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        follow = user_message(new_text_part("Deny"), context_id=task.context_id, task_id=task.id)
        done = final_task(await send(http, follow, streaming=False))
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert ran == []
    assert "denied" in model.requests[-1].messages[-1].content[0].text  # type: ignore[union-attr]


async def test_an_unclear_answer_keeps_the_task_waiting_with_an_explanation() -> None:
    model = ScriptedModel([ToolUseBlock(id="d1", name="delete_file", input={"path": "/tmp/a"})])
    async with http_for(make_agent(model)) as http:
        task = final_task(await send(http, user_message(new_text_part("delete /tmp/a")), streaming=False))
        follow = user_message(new_text_part("hmm, what?"), context_id=task.context_id, task_id=task.id)
        again = final_task(await send(http, follow, streaming=False))
    assert again.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    text = get_message_text(again.status.message)
    assert "plain message cannot be accepted" in text and "d1" in text
    assert "Msg.confirm" not in text and "ConfirmResult" not in text, "told the A2A way"


async def test_an_answer_in_a_new_task_of_the_same_context_resumes_the_session() -> None:
    # A replica that does not hold the task still has the session: answering in the context is enough.
    model = ScriptedModel([ToolUseBlock(id="d1", name="delete_file", input={"path": "/tmp/a"}), "Deleted."])
    async with http_for(make_agent(model)) as http:
        task = final_task(await send(http, user_message(new_text_part("delete /tmp/a")), streaming=False))
        follow = user_message(new_text_part("approve"), context_id=task.context_id)
        done = final_task(await send(http, follow, streaming=False))
    assert done.id != task.id
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert ran == ["delete /tmp/a"]


async def test_an_external_tool_call_waits_for_its_result_in_a_data_part() -> None:
    model = ScriptedModel([ToolUseBlock(id="b1", name="open_in_browser", input={"url": "https://x.org"}), "Opened."])
    async with http_for(make_agent(model)) as http:
        task = final_task(await send(http, user_message(new_text_part("open x.org")), streaming=False))
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        [payload] = get_data_parts(task.status.message.parts)
        assert payload[a2a.DATA_KEY]["type"] == "require_external_execution"
        assert payload[a2a.DATA_KEY]["tool_calls"][0]["kind"] == "external"
        result = new_data_part({"tool_results": [{"tool_call_id": "b1", "output": "page shown"}]})
        done = final_task(
            await send(http, user_message(result, context_id=task.context_id, task_id=task.id), streaming=False)
        )
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    [block] = model.requests[-1].messages[-1].content
    assert (block.id, block.output) == ("b1", "page shown")  # type: ignore[union-attr]


async def _slow_agent() -> tuple[ReActAgent, asyncio.Event]:
    entered = asyncio.Event()

    async def slow(request: ModelRequest) -> str:
        entered.set()
        await asyncio.sleep(30)
        return "too late"

    return make_agent(ScriptedModel.from_function(slow)), entered


async def test_canceling_a_running_task_stops_the_run_and_keeps_the_session() -> None:
    agent, entered = await _slow_agent()
    async with http_for(agent) as http:
        card = await card_of(http)
        client = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
        request = SendMessageRequest(message=user_message(new_text_part("take your time")))
        request.configuration.return_immediately = True
        [first] = [r async for r in client.send_message(request)]
        await asyncio.wait_for(entered.wait(), 5)
        canceled = await client.cancel_task(CancelTaskRequest(id=first.task.id))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    state = await agent.get_state("alice", first.task.context_id)
    assert [m.text for m in state.messages] == ["take your time"]


async def test_shutdown_interrupts_a_running_task_which_ends_canceled() -> None:
    agent, entered = await _slow_agent()
    app = create_app({"bot": agent}, api_keys=KEYS, facades=("a2a",))
    server = app.state.agentrt
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url=BASE, headers={"Authorization": f"Bearer {KEY}"}
    ) as http:
        responses = asyncio.create_task(send(http, user_message(new_text_part("hi")), streaming=False))
        await asyncio.wait_for(entered.wait(), 5)
        assert len(server.runs) == 1
        await server.shutdown()
        task = final_task(await asyncio.wait_for(responses, 5))
    assert task.status.state == TaskState.TASK_STATE_CANCELED
    assert len(server.runs) == 0


async def test_a_failing_model_fails_the_task() -> None:
    async with http_for(make_agent(ScriptedModel([RuntimeError("provider down")]))) as http:
        task = final_task(await send(http, user_message(new_text_part("hi")), streaming=False))
    assert task.status.state == TaskState.TASK_STATE_FAILED
    assert "provider down" in get_message_text(task.status.message)


# -- the wire -------------------------------------------------------------------------------------------------------
async def _rpc(http: httpx.AsyncClient, method: str, params: dict[str, Any], **headers: str) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": "1", "method": method, "params": params}
    return await http.post("/a2a/bot", json=body, headers=headers)


async def test_json_rpc_needs_the_api_key() -> None:
    async with http_for(make_agent(ScriptedModel(["hi"])), key=None) as http:
        params = {"message": {"role": "ROLE_USER", "messageId": "m1", "parts": [{"text": "hi"}]}}
        response = await _rpc(http, "SendMessage", params, **{"A2A-Version": "1.0"})
        assert response.status_code == 401
        response = await _rpc(http, "SendMessage", params, Authorization="Bearer wrong")
        assert response.status_code == 401


async def test_the_a2a_0_3_methods_message_send_and_message_stream_work_too() -> None:
    async with http_for(make_agent(ScriptedModel(["Hello from 0.3.", "Streamed."]))) as http:
        message = {"role": "user", "messageId": "m1", "kind": "message", "parts": [{"kind": "text", "text": "hi"}]}
        response = await _rpc(http, "message/send", {"message": message})
        result = response.json()["result"]
        assert result["status"]["state"] == "completed"
        assert result["status"]["message"]["parts"][0]["text"] == "Hello from 0.3."
        message = {**message, "messageId": "m2", "contextId": result["contextId"]}
        response = await _rpc(http, "message/stream", {"message": message})
        assert response.headers["content-type"].startswith("text/event-stream")
        assert '"state":"completed"' in response.text.replace(" ", "")
        assert "Streamed." in response.text


async def test_tasks_belong_to_the_user_who_created_them() -> None:
    async with http_for(make_agent(ScriptedModel(["mine"]))) as http:
        task = final_task(await send(http, user_message(new_text_part("hi")), streaming=False))
        card = await card_of(http)
        alice = ClientFactory(ClientConfig(httpx_client=http)).create(card)
        assert (await alice.get_task(GetTaskRequest(id=task.id))).id == task.id
        as_bob = {"Authorization": "Bearer sk-bob", "A2A-Version": "1.0"}
        response = await _rpc(http, "GetTask", {"id": task.id}, **as_bob)
    assert response.json()["error"]["code"] == -32001  # task not found
