"""The AG-UI facade: RunAgentInput in, AG-UI events out (validated with the package's models)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from ag_ui.core import (
    AssistantMessage,
    Event,
    EventType,
    FunctionCall,
    ResumeEntry,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    Tool,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from pydantic import TypeAdapter
from server_agents import CITATIONS, knowledge_agent

from agentrt import Msg, ReActAgent, TextBlock, ThinkingBlock, Toolkit, ToolResultBlock, ToolUseBlock, tool
from agentrt import events as ev
from agentrt.agent.base import AgentBase
from agentrt.message import TokenUsage
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.server import agui
from agentrt.server.app import create_app
from agentrt.state import InMemoryStateStore

KEY = "sk-alice"
KEYS = {KEY: "alice", "sk-bob": "bob"}
EVENTS: TypeAdapter[Any] = TypeAdapter(Event)
ran: list[str] = []


@tool(read_only=True)
async def get_weather(city: str) -> str:
    """The weather in a city."""
    ran.append(f"weather {city}")
    return f"sunny in {city}"


@tool(destructive=True)
async def delete_file(path: str) -> str:
    """Delete a file."""
    ran.append(f"delete {path}")
    return f"deleted {path}"


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


def make_agent(model: ScriptedModel, store: InMemoryStateStore | None = None, **kwargs: Any) -> ReActAgent:
    toolkit = Toolkit([get_weather, delete_file])
    return ReActAgent(
        "bot", "You help.", model=model, toolkit=toolkit, state_store=store or InMemoryStateStore(), **kwargs
    )


def client_for(agent: AgentBase) -> httpx.AsyncClient:
    app = create_app({agent.name: agent}, api_keys=KEYS, facades=("agui",))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver")


def run_input(thread: str, run: str, messages: list[Any], **extra: Any) -> dict[str, Any]:
    body = RunAgentInput(thread_id=thread, run_id=run, messages=messages, **extra)
    return body.model_dump(mode="json", by_alias=True)


async def run(client: httpx.AsyncClient, body: dict[str, Any], key: str = KEY) -> list[Any]:
    response = await client.post("/agui/bot", json=body, headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    events = []
    for frame in response.text.split("\n\n"):
        if not frame.strip():
            continue
        assert frame.startswith("data: "), frame
        events.append(EVENTS.validate_python(json.loads(frame[len("data: ") :])))
    check_sequence(events)
    return events


def check_sequence(events: list[Any]) -> None:
    """The structural rules of an AG-UI stream."""
    assert events[0].type is EventType.RUN_STARTED
    assert events[-1].type in (EventType.RUN_FINISHED, EventType.RUN_ERROR)
    assert sum(e.type in (EventType.RUN_FINISHED, EventType.RUN_ERROR) for e in events) == 1
    open_text: set[str] = set()
    open_calls: set[str] = set()
    ended_calls: set[str] = set()
    for e in events:
        if e.type is EventType.TEXT_MESSAGE_START:
            assert e.message_id not in open_text
            open_text.add(e.message_id)
        elif e.type is EventType.TEXT_MESSAGE_CONTENT:
            assert e.message_id in open_text
        elif e.type is EventType.TEXT_MESSAGE_END:
            open_text.remove(e.message_id)
        elif e.type is EventType.TOOL_CALL_START:
            assert e.tool_call_id not in open_calls | ended_calls
            open_calls.add(e.tool_call_id)
        elif e.type is EventType.TOOL_CALL_ARGS:
            assert e.tool_call_id in open_calls
        elif e.type is EventType.TOOL_CALL_END:
            open_calls.remove(e.tool_call_id)
            ended_calls.add(e.tool_call_id)
    assert not open_text and not open_calls


def of(events: list[Any], kind: EventType) -> list[Any]:
    return [e for e in events if e.type is kind]


def text_of(events: list[Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for e in of(events, EventType.TEXT_MESSAGE_CONTENT):
        out[e.message_id] = out.get(e.message_id, "") + e.delta
    return out


# -- the plain path ---------------------------------------------------------------------------------------------
async def test_text_reply_streams_as_one_text_message_between_run_started_and_run_finished() -> None:
    agent = make_agent(ScriptedModel(["Hello there, how can I help?"]))
    async with client_for(agent) as client:
        events = await run(client, run_input("t1", "r1", [UserMessage(id="u1", content="hi")]))
    started = events[0]
    assert (started.thread_id, started.run_id, started.protocol_version) == ("t1", "r1", "1.0")
    [start] = of(events, EventType.TEXT_MESSAGE_START)
    assert start.role == "assistant"
    assert text_of(events) == {start.message_id: "Hello there, how can I help?"}
    finished = events[-1]
    assert isinstance(finished, RunFinishedEvent)
    assert finished.outcome is None
    reply = (await agent.get_state("alice", "t1")).messages
    assert [m.role for m in reply] == ["user", "assistant"]
    assert reply[0].id == "u1"  # AG-UI message ids are kept
    assert start.message_id.startswith(reply[1].id)  # block ids embed the reply id


async def test_tool_call_events_carry_the_argument_json_and_the_result() -> None:
    model = ScriptedModel(
        [
            Msg(
                role="assistant",
                content=[
                    TextBlock(text="Let me check."),
                    ToolUseBlock(id="c1", name="get_weather", input={"city": "Paris"}),
                ],
            ),
            "Sunny.",
        ]
    )
    agent = make_agent(model)
    async with client_for(agent) as client:
        events = await run(client, run_input("t1", "r1", [UserMessage(id="u1", content="weather in Paris?")]))
    [start] = of(events, EventType.TOOL_CALL_START)
    assert (start.tool_call_id, start.tool_call_name) == ("c1", "get_weather")
    first_text = of(events, EventType.TEXT_MESSAGE_START)[0].message_id
    assert start.parent_message_id == first_text
    args = "".join(e.delta for e in of(events, EventType.TOOL_CALL_ARGS) if e.tool_call_id == "c1")
    assert args and json.loads(args) == {"city": "Paris"}
    [result] = of(events, EventType.TOOL_CALL_RESULT)
    assert (result.tool_call_id, result.content, result.role) == ("c1", "sunny in Paris", "tool")
    assert result.metadata["agentrt"]["state"] == "success"
    types = [e.type for e in events]
    assert types.index(EventType.TOOL_CALL_END) < types.index(EventType.TOOL_CALL_RESULT)
    assert list(text_of(events).values()) == ["Let me check.", "Sunny."]
    steps = of(events, EventType.STEP_STARTED)
    assert [s.step_name for s in steps] == [s.step_name for s in of(events, EventType.STEP_FINISHED)]
    assert len(steps) == 2
    assert ran == ["weather Paris"]


async def test_thinking_streams_as_reasoning_events_and_usage_is_reported() -> None:
    model = ScriptedModel(
        [Msg(role="assistant", content=[ThinkingBlock(thinking="The user greets me."), TextBlock(text="Hi!")])],
        usage=TokenUsage(input_tokens=12, output_tokens=5),
        name="mini",
    )
    async with client_for(make_agent(model)) as client:
        events = await run(client, run_input("t1", "r1", [UserMessage(id="u1", content="hello")]))
    types = [e.type for e in events]
    order = [
        EventType.REASONING_START,
        EventType.REASONING_MESSAGE_START,
        EventType.REASONING_MESSAGE_CONTENT,
        EventType.REASONING_MESSAGE_END,
        EventType.REASONING_END,
        EventType.TEXT_MESSAGE_START,
    ]
    assert [t for t in types if t in order] == order
    assert of(events, EventType.REASONING_MESSAGE_CONTENT)[0].delta == "The user greets me."
    [usage] = [e for e in of(events, EventType.CUSTOM) if e.name == agui.CUSTOM_USAGE]
    assert usage.value["input_tokens"] == 12
    [total] = events[-1].usage
    assert (total.model, total.input_tokens, total.output_tokens, total.total_tokens) == ("mini", 12, 5, 17)


async def test_usage_carries_the_cost_when_the_price_is_known() -> None:
    usage = TokenUsage(input_tokens=1000, output_tokens=100)
    for name, cost in (("openai:gpt-4o", 0.0035), ("mini", None)):
        async with client_for(make_agent(ScriptedModel(["Hi!"], usage=usage, name=name))) as client:
            events = await run(client, run_input("t1", "r1", [UserMessage(id="u1", content="hello")]))
        [custom] = [e for e in of(events, EventType.CUSTOM) if e.name == agui.CUSTOM_USAGE]
        [total] = events[-1].usage
        if cost is None:
            assert custom.value["cost_usd"] is None
            assert "costUsd" not in total.model_dump(by_alias=True)
        else:
            assert custom.value["cost_usd"] == pytest.approx(cost)
            assert total.model_dump(by_alias=True)["costUsd"] == pytest.approx(cost)


async def test_a_failing_model_ends_the_stream_with_run_error() -> None:
    async with client_for(make_agent(ScriptedModel([RuntimeError("provider down")]))) as client:
        events = await run(client, run_input("t1", "r1", [UserMessage(id="u1", content="hi")]))
    error = events[-1]
    assert isinstance(error, RunErrorEvent)
    assert "provider down" in error.message


# -- approvals ------------------------------------------------------------------------------------------------------
async def test_approval_ends_the_run_with_an_interrupt_and_a_resume_entry_completes_it() -> None:
    model = ScriptedModel([ToolUseBlock(id="d1", name="delete_file", input={"path": "/tmp/a"}), "Deleted it."])
    agent = make_agent(model)
    async with client_for(agent) as client:
        events = await run(client, run_input("t1", "r1", [UserMessage(id="u1", content="delete /tmp/a")]))
        [custom] = [e for e in of(events, EventType.CUSTOM) if e.name == agui.CUSTOM_REQUIRE_USER_CONFIRM]
        [pending] = custom.value["tool_calls"]
        assert (pending["id"], pending["name"], pending["input"]) == ("d1", "delete_file", {"path": "/tmp/a"})
        assert pending["suggested_rules"]
        args = "".join(e.delta for e in of(events, EventType.TOOL_CALL_ARGS))
        assert json.loads(args) == {"path": "/tmp/a"}
        finished = events[-1]
        assert finished.outcome.type == "interrupt"
        [interrupt] = finished.outcome.interrupts
        assert (interrupt.id, interrupt.tool_call_id, interrupt.reason) == ("d1", "d1", agui.INTERRUPT_REASON)
        assert interrupt.response_schema["required"] == ["confirmed"]
        assert ran == []

        history = [UserMessage(id="u1", content="delete /tmp/a")]
        resume = [ResumeEntry(interrupt_id="d1", status="resolved", payload={"confirmed": True})]
        events = await run(client, run_input("t1", "r2", history, resume=resume))
    [result] = of(events, EventType.TOOL_CALL_RESULT)
    assert (result.tool_call_id, result.content) == ("d1", "deleted /tmp/a")
    assert list(text_of(events).values()) == ["Deleted it."]
    assert events[-1].outcome is None
    assert ran == ["delete /tmp/a"]


async def test_forwarded_props_confirm_results_deny_with_a_reason() -> None:
    model = ScriptedModel([ToolUseBlock(id="d1", name="delete_file", input={"path": "/etc"}), "OK, I won't."])
    agent = make_agent(model)
    async with client_for(agent) as client:
        await run(client, run_input("t1", "r1", [UserMessage(id="u1", content="delete /etc")]))
        props = {"confirm_results": [{"tool_call_id": "d1", "confirmed": False, "reason": "never /etc"}]}
        events = await run(client, run_input("t1", "r2", [], forwarded_props=props))
    [result] = of(events, EventType.TOOL_CALL_RESULT)
    assert result.metadata["agentrt"]["state"] == "denied"
    assert "never /etc" in result.content
    assert ran == []
    assert "never /etc" in model.requests[-1].messages[-1].blocks(ToolResultBlock)[0].text


async def test_a_resume_entry_can_edit_the_arguments() -> None:
    model = ScriptedModel([ToolUseBlock(id="d1", name="delete_file", input={"path": "/tmp/a"}), "Deleted b."])
    async with client_for(make_agent(model)) as client:
        await run(client, run_input("t1", "r1", [UserMessage(id="u1", content="delete a")]))
        payload = {"confirmed": True, "input": {"path": "/tmp/b"}}
        resume = [ResumeEntry(interrupt_id="d1", status="resolved", payload=payload)]
        events = await run(client, run_input("t1", "r2", [], resume=resume))
    [result] = of(events, EventType.TOOL_CALL_RESULT)
    assert result.content.endswith("deleted /tmp/b")
    assert ran == ["delete /tmp/b"]


async def test_a_cancelled_resume_entry_denies_and_rules_are_remembered() -> None:
    model = ScriptedModel(
        [
            ToolUseBlock(id="d1", name="delete_file", input={"path": "/tmp/a"}),
            "Denied.",
            ToolUseBlock(id="d2", name="delete_file", input={"path": "/tmp/b"}),
            ToolUseBlock(id="d3", name="delete_file", input={"path": "/tmp/c"}),
            "Both gone.",
        ]
    )
    agent = make_agent(model)
    async with client_for(agent) as client:
        await run(client, run_input("t1", "r1", [UserMessage(id="u1", content="delete a")]))
        events = await run(
            client, run_input("t1", "r2", [], resume=[ResumeEntry(interrupt_id="d1", status="cancelled")])
        )
        assert of(events, EventType.TOOL_CALL_RESULT)[0].metadata["agentrt"]["state"] == "denied"
        await run(client, run_input("t1", "r3", [UserMessage(id="u2", content="delete b")]))
        # A rule sent with an answer may not be wider than what the engine suggests (here: the directory).
        rule = {"tool": "delete_file", "decision": "allow", "args": {"path": "/tmp/**"}}
        payload = {"confirmed": True, "rules": [rule]}
        events = await run(
            client,
            run_input("t1", "r4", [], resume=[ResumeEntry(interrupt_id="d2", status="resolved", payload=payload)]),
        )
    # The accepted rule lets the next delete run without asking.
    assert [e.tool_call_id for e in of(events, EventType.TOOL_CALL_RESULT)] == ["d2", "d3"]
    assert events[-1].outcome is None
    assert ran == ["delete /tmp/b", "delete /tmp/c"]


async def test_a_plain_message_while_an_approval_waits_is_a_run_error_that_says_how_to_answer() -> None:
    agent = make_agent(ScriptedModel([ToolUseBlock(id="d1", name="delete_file", input={"path": "/tmp/a"})]))
    async with client_for(agent) as client:
        await run(client, run_input("t1", "r1", [UserMessage(id="u1", content="delete")]))
        events = await run(client, run_input("t1", "r2", [UserMessage(id="u2", content="what now?")]))
    error = events[-1]
    assert isinstance(error, RunErrorEvent)
    assert "d1" in error.message and "approve or deny" in error.message
    assert "Msg.confirm" not in error.message and "ConfirmResult" not in error.message, "told the AG-UI way"
    assert "resum" in error.message and "confirm_results" in error.message


async def test_bad_resume_payloads_and_resumes_with_nothing_pending_are_refused() -> None:
    agent = make_agent(ScriptedModel([ToolUseBlock(id="d1", name="delete_file", input={"path": "/tmp/a"})]))
    headers = {"Authorization": f"Bearer {KEY}"}
    async with client_for(agent) as client:
        nothing = run_input("t0", "r1", [], resume=[ResumeEntry(interrupt_id="x", status="resolved", payload=True)])
        response = await client.post("/agui/bot", json=nothing, headers=headers)
        assert response.status_code == 409
        await run(client, run_input("t1", "r1", [UserMessage(id="u1", content="delete")]))
        bad = run_input("t1", "r2", [], resume=[ResumeEntry(interrupt_id="d1", status="resolved", payload={"ok": 1})])
        response = await client.post("/agui/bot", json=bad, headers=headers)
        assert response.status_code == 422
        assert "confirmed" in response.json()["error"]["message"]


# -- client tools ------------------------------------------------------------------------------------------------
async def test_client_tools_are_offered_to_the_model_and_answered_with_a_tool_message() -> None:
    model = ScriptedModel([ToolUseBlock(id="c1", name="pick_color", input={"prompt": "favourite?"}), "Blue it is."])
    agent = make_agent(model)
    tools = [Tool(name="pick_color", description="Ask the user for a colour.", parameters={"type": "object"})]
    async with client_for(agent) as client:
        events = await run(client, run_input("t1", "r1", [UserMessage(id="u1", content="pick")], tools=tools))
        assert "pick_color" in [t.name for t in model.requests[0].tools]
        assert [e.name for e in of(events, EventType.CUSTOM)] == [agui.CUSTOM_REQUIRE_EXTERNAL_EXECUTION]
        finished = events[-1]
        assert finished.outcome.type == "success"
        assert finished.outcome.pending_tool_call_ids == ["c1"]
        assert not of(events, EventType.TOOL_CALL_RESULT)

        call = ToolCall(id="c1", function=FunctionCall(name="pick_color", arguments='{"prompt": "favourite?"}'))
        history = [
            UserMessage(id="u1", content="pick"),
            AssistantMessage(id="a1", tool_calls=[call]),
            ToolMessage(id="tm1", tool_call_id="c1", content="blue"),
        ]
        events = await run(client, run_input("t1", "r2", history, tools=tools))
    assert list(text_of(events).values()) == ["Blue it is."]
    [result] = model.requests[-1].messages[-1].blocks(ToolResultBlock)
    assert (result.id, result.name, result.output) == ("c1", "pick_color", "blue")
    assert "pick_color" not in agent.toolkit  # the shared agent is untouched


async def test_client_tools_clashing_with_server_tools_or_badly_named_are_ignored_with_a_note() -> None:
    model = ScriptedModel(["ok"])
    tools = [
        Tool(name="get_weather", description="client version"),
        Tool(name="bad name!", description="x"),
    ]
    async with client_for(make_agent(model)) as client:
        events = await run(client, run_input("t1", "r1", [UserMessage(id="u1", content="hi")], tools=tools))
    [note] = [e for e in of(events, EventType.CUSTOM) if e.name == agui.CUSTOM_IGNORED_TOOLS]
    assert [t["name"] for t in note.value["tools"]] == ["get_weather", "bad name!"]
    assert sorted(t.name for t in model.requests[0].tools) == ["delete_file", "get_weather"]


# -- threads ----------------------------------------------------------------------------------------------------
async def test_a_new_thread_is_seeded_with_the_earlier_messages_and_later_runs_send_only_the_new_one() -> None:
    model = ScriptedModel(["Second answer.", "Third answer."])
    agent = make_agent(model)
    call = ToolCall(id="old1", function=FunctionCall(name="get_weather", arguments='{"city": "Rome"}'))
    dangling = ToolCall(id="old2", function=FunctionCall(name="get_weather", arguments="{}"))
    history = [
        UserMessage(id="u1", content="weather in Rome?"),
        AssistantMessage(id="a1", content="Checking.", tool_calls=[call, dangling]),
        ToolMessage(id="tm1", tool_call_id="old1", content="rainy"),
        AssistantMessage(id="a2", content="Rainy."),
        UserMessage(id="u2", content="and tomorrow?"),
    ]
    async with client_for(agent) as client:
        await run(client, run_input("t1", "r1", history))
        seen = model.requests[0].messages
        assert [m.text for m in seen if m.role != "system"] == [
            "weather in Rome?",
            "Checking.",
            "",
            "Rainy.",
            "and tomorrow?",
        ]
        assert [c.id for m in seen for c in m.tool_calls] == ["old1"]  # the unanswered call is dropped
        more = [*history, AssistantMessage(id="a3", content="Second answer."), UserMessage(id="u3", content="thanks")]
        await run(client, run_input("t1", "r2", more))
        again = await client.post(
            "/agui/bot", json=run_input("t1", "r3", more), headers={"Authorization": f"Bearer {KEY}"}
        )
    assert again.status_code == 409  # u3 was answered already
    state = await agent.get_state("alice", "t1")
    assert [m.id for m in state.messages if m.role == "user" and m.text] == ["u1", "u2", "u3"]


async def test_threads_belong_to_their_user() -> None:
    model = ScriptedModel(["for alice", "for bob"])
    agent = make_agent(model)
    async with client_for(agent) as client:
        await run(client, run_input("same", "r1", [UserMessage(id="u1", content="hi")]))
        await run(client, run_input("same", "r1", [UserMessage(id="u1", content="hi")]), key="sk-bob")
    assert [m.text for m in (await agent.get_state("alice", "same")).messages] == ["hi", "for alice"]
    assert [m.text for m in (await agent.get_state("bob", "same")).messages] == ["hi", "for bob"]


async def test_an_agui_thread_is_the_rest_api_session_so_either_can_answer_an_approval() -> None:
    model = ScriptedModel([ToolUseBlock(id="d1", name="delete_file", input={"path": "/tmp/a"}), "Deleted."])
    headers = {"Authorization": f"Bearer {KEY}"}
    async with client_for(make_agent(model)) as client:
        await run(client, run_input("t1", "r1", [UserMessage(id="u1", content="delete /tmp/a")]))
        session = (await client.get("/v1/agents/bot/sessions/t1", headers=headers)).json()
        assert [c["id"] for c in session["pending"]["tool_calls"]] == ["d1"]
        body = {"results": [{"tool_call_id": "d1", "confirmed": True}]}
        reply = await client.post("/v1/agents/bot/sessions/t1/confirm", json=body, headers=headers)
    assert reply.status_code == 200, reply.text
    assert reply.json()["message"]["content"][0]["text"] == "Deleted."
    assert ran == ["delete /tmp/a"]


async def test_shutdown_interrupts_a_running_agui_run_which_finishes_as_cancelled() -> None:
    entered = asyncio.Event()

    async def slow(request: ModelRequest) -> str:
        entered.set()
        await asyncio.sleep(30)
        return "too late"

    agent = make_agent(ScriptedModel.from_function(slow))
    app = create_app({"bot": agent}, api_keys=KEYS, facades=("agui",))
    server = app.state.agentrt
    body = run_input("t1", "r1", [UserMessage(id="u1", content="hi")])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver") as client:
        request = asyncio.create_task(client.post("/agui/bot", json=body, headers={"Authorization": f"Bearer {KEY}"}))
        await asyncio.wait_for(entered.wait(), 5)
        assert len(server.runs) == 1
        await server.shutdown()
        response = await asyncio.wait_for(request, 5)
        refused = await client.post("/agui/bot", json=body, headers={"Authorization": f"Bearer {KEY}"})
    assert refused.status_code == 503  # no new runs while shutting down
    events = [EVENTS.validate_python(json.loads(f[6:])) for f in response.text.split("\n\n") if f.startswith("data: ")]
    check_sequence(events)
    assert events[-1].outcome.type == "cancelled"
    assert len(server.runs) == 0


async def test_closing_the_event_stream_stops_the_run_and_keeps_its_input() -> None:
    entered = asyncio.Event()

    async def slow(request: ModelRequest) -> str:
        entered.set()
        await asyncio.sleep(30)
        return "never"

    agent = make_agent(ScriptedModel.from_function(slow))
    server = create_app({"bot": agent}, api_keys=KEYS, facades=("agui",)).state.agentrt
    ctx = server.context_for("alice", "bot", "t1")
    translator = agui.EventTranslator("t1", "r1", "bot")
    stream = agui._events(server, agent, [Msg.user("hi")], ctx, translator, [])
    assert (await anext(stream)).type is EventType.RUN_STARTED
    assert (await anext(stream)).type is EventType.STEP_STARTED
    await asyncio.wait_for(entered.wait(), 5)
    assert len(server.runs) == 1
    await stream.aclose()  # what the SSE response does when the client goes away
    assert len(server.runs) == 0
    assert [m.text for m in (await agent.get_state("alice", "t1")).messages] == ["hi"]


# -- HTTP errors --------------------------------------------------------------------------------------------------
async def test_auth_unknown_agents_and_invalid_input() -> None:
    agent = make_agent(ScriptedModel([]))
    body = run_input("t1", "r1", [UserMessage(id="u1", content="hi")])
    async with client_for(agent) as client:
        assert (await client.post("/agui/bot", json=body)).status_code == 401
        assert (await client.post("/agui/bot", json=body, headers={"Authorization": "Bearer nope"})).status_code == 401
        headers = {"Authorization": f"Bearer {KEY}"}
        assert (await client.post("/agui/nobody", json=body, headers=headers)).status_code == 404
        response = await client.post("/agui/bot", json={"threadId": "t1"}, headers=headers)
        assert response.status_code == 422
        assert "runId" in response.json()["error"]["message"]
        no_user = run_input("t1", "r1", [AssistantMessage(id="a1", content="hello")])
        assert (await client.post("/agui/bot", json=no_user, headers=headers)).status_code == 422


# -- the translator on its own ----------------------------------------------------------------------------------
def test_tool_arguments_never_streamed_are_sent_whole_when_the_step_ends() -> None:
    t = agui.EventTranslator("t", "r", "bot")
    out = [*t.start()]
    out += t.feed(ev.RunStarted(reply_id="R", source="bot"))
    out += t.feed(ev.ModelCallStarted(reply_id="R", source="bot", step=1))
    msg = Msg(role="assistant", content=[ToolUseBlock(id="c9", name="get_weather", input={"city": "Oslo"})])
    out += t.feed(ev.ModelCallFinished(reply_id="R", source="bot", step=1, msg=msg))
    out += t.feed(ev.RunFinished(reply_id="R", source="bot", msg=Msg.assistant("done")))
    out += t.finish()
    events = [EVENTS.validate_python(e.model_dump(mode="json", by_alias=True)) for e in out]
    check_sequence(events)
    [args] = of(events, EventType.TOOL_CALL_ARGS)
    assert json.loads(args.delta) == {"city": "Oslo"}
    assert [e.type for e in events if e.type.name.startswith("TOOL_CALL")] == [
        EventType.TOOL_CALL_START,
        EventType.TOOL_CALL_ARGS,
        EventType.TOOL_CALL_END,
    ]


def test_subagent_events_are_attributed_to_the_subagent_run() -> None:
    t = agui.EventTranslator("t", "r", "boss")
    out = [*t.start()]
    out += t.feed(ev.RunStarted(reply_id="R", source="boss"))
    out += t.feed(ev.RunStarted(reply_id="S", source="helper"))
    out += t.feed(ev.TextDelta(reply_id="S", source="helper", block_id="S-1", delta="sub text"))
    out += t.feed(ev.RunFinished(reply_id="S", source="helper", msg=Msg.assistant("sub text")))
    out += t.feed(ev.TextDelta(reply_id="R", source="boss", block_id="R-1", delta="top text"))
    out += t.feed(ev.RunFinished(reply_id="R", source="boss", msg=Msg.assistant("top text")))
    out += t.finish()
    events = [EVENTS.validate_python(e.model_dump(mode="json", by_alias=True)) for e in out]
    check_sequence(events)
    started = of(events, EventType.SUBAGENT_STARTED)
    assert [(e.subagent_run_id, e.name) for e in started] == [("S", "helper")]
    sub_text = [e for e in of(events, EventType.TEXT_MESSAGE_CONTENT) if e.subagent_run_id == "S"]
    assert [e.delta for e in sub_text] == ["sub text"]
    assert of(events, EventType.SUBAGENT_FINISHED)[0].outcome.type == "success"


def test_a_resumed_run_that_pauses_again_sends_the_waiting_calls_it_never_streamed() -> None:
    # E.g. a subagent asks for a second approval: no model step of this run produced the call.
    t = agui.EventTranslator("t", "r", "boss")
    pending = ev.PendingToolCall(id="c2", name="delete_file", input={"path": "/b"})
    out = [*t.start()]
    out += t.feed(ev.RunStarted(reply_id="R", source="boss"))
    out += t.feed(ev.RequireUserConfirm(reply_id="R", source="boss", tool_calls=[pending]))
    out += t.feed(ev.RunFinished(reply_id="R", source="boss", msg=Msg.assistant("")))
    out += t.finish()
    events = [EVENTS.validate_python(e.model_dump(mode="json", by_alias=True)) for e in out]
    check_sequence(events)
    assert [e.type for e in events[1:]] == [
        EventType.TOOL_CALL_START,
        EventType.TOOL_CALL_ARGS,
        EventType.TOOL_CALL_END,
        EventType.CUSTOM,
        EventType.RUN_FINISHED,
    ]
    assert json.loads(events[2].delta) == {"path": "/b"}
    assert [i.tool_call_id for i in events[-1].outcome.interrupts] == ["c2"]


# -- knowledge citations -------------------------------------------------------------------------------------------
async def test_a_reply_with_citations_sends_them_as_a_custom_event_before_run_finished() -> None:
    agent = knowledge_agent("bot", store=InMemoryStateStore())
    async with client_for(agent) as client:
        events = await run(client, run_input("t1", "r1", [UserMessage(id="u1", content="vacation?")]))
    [custom] = [e for e in of(events, EventType.CUSTOM) if e.name == agui.CUSTOM_CITATIONS]
    assert custom.value["citations"] == CITATIONS
    reply = (await agent.get_state("alice", "t1")).messages[-1]
    assert custom.value["reply_id"] == reply.id and reply.metadata["citations"] == CITATIONS
    assert events.index(custom) == len(events) - 2, "right before RUN_FINISHED"
    [result] = of(events, EventType.TOOL_CALL_RESULT)
    assert result.tool_call_id == "call-kb" and result.metadata["agentrt"]["citations"] == CITATIONS


async def test_a_reply_without_citations_sends_no_citations_event() -> None:
    async with client_for(make_agent(ScriptedModel(["Hi."]))) as client:
        events = await run(client, run_input("t1", "r1", [UserMessage(id="u1", content="hi")]))
    assert not [e for e in of(events, EventType.CUSTOM) if e.name == agui.CUSTOM_CITATIONS]
    assert "citations" not in json.dumps([e.model_dump(mode="json") for e in events])
