"""MCP elicitation through the run: an in-process MCP server (the SDK's MCPServer) asks the run's human.

The real ReActAgent calls the server's tools (ScriptedModel), the run is streamed with
`stream_events`, and the answer is given by `agent.answer` from the consumer of the stream; what
the server received (`Received`) is the side effect asserted. Sequencing uses the events
themselves and asyncio.Event, never sleeps.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from agentrt import RuntimeContext, ToolResultBlock
from agentrt.errors import InvalidAnswerError, UserError
from agentrt.events import AgentEvent, ToolResult, event_from_dict
from agentrt.mcp import (
    ElicitationAnswer,
    ElicitationRequest,
    McpClient,
    McpElicitation,
    McpElicitationClosed,
    UserQuestion,
)
from agentrt.model import ScriptedModel
from mcp_questions import AUTH_URL, Booking, Received, agent_with_questions, call, question_server, questions_in
from question_forms import Form, forms

ALICE = RuntimeContext("alice", "s1")
GOOD = {"name": "Ann", "seats": 2, "window": True, "meal": "fish"}


def result_of(events: list[AgentEvent], call_id: str = "call-1") -> ToolResultBlock:
    [result] = [e.result for e in events if isinstance(e, ToolResult) and e.result.id == call_id]
    return result


async def test_a_form_question_is_answered_by_the_runs_human() -> None:
    received = Received()
    agent, toolkit, _ = await agent_with_questions(received, [call("book", table="T7"), "Booked."])
    events: list[AgentEvent] = []
    try:
        async for event in agent.stream_events("Book T7 for Ann", ALICE):
            events.append(event)
            if isinstance(event, McpElicitation):
                # The question is listed on the running call, with everything a UI needs.
                [question] = agent.questions(ALICE)
                assert isinstance(question, UserQuestion)
                assert question.id == event.question_id and question.id.startswith("q-")
                assert (question.mode, question.server, question.tool, question.tool_call_id) == (
                    "form",
                    "questions",
                    "book",
                    "call-1",
                )
                assert question.requested_schema is not None
                assert question.requested_schema["required"] == ["name", "seats"]
                assert question.expires_at is not None and question.expires_at - question.asked_at == 600.0
                assert agent.answer(ALICE, event.question_id, ElicitationAnswer.accept(GOOD)) is True
                assert agent.questions(ALICE) == []
                assert agent.answer(ALICE, event.question_id, ElicitationAnswer.accept(GOOD)) is False  # spent
    finally:
        await toolkit.aclose()
    assert received.answers == [("book", "accept", GOOD)]
    output = result_of(events).output
    assert isinstance(output, str) and output.startswith("booked table T7: ")
    [asked] = questions_in(events)
    assert (asked.tool_call_id, asked.server, asked.tool, asked.mode) == ("call-1", "questions", "book", "form")
    assert asked.message == "Book table T7: who and how many?"
    assert asked.requested_schema is not None
    assert asked.requested_schema == Booking.model_json_schema() | {"properties": asked.requested_schema["properties"]}
    assert event_from_dict(asked.to_dict()) == asked
    [closed] = [e for e in events if isinstance(e, McpElicitationClosed)]
    assert (closed.question_id, closed.action, closed.reason, closed.tool_call_id) == (
        asked.question_id,
        "accept",
        "answered",
        "call-1",
    )
    types = [e.type for e in events]
    assert types.index("mcp_elicitation") < types.index("mcp_elicitation_closed") < types.index("tool_result")
    assert agent.questions(ALICE) == []  # the finished run leaves none behind


async def test_the_json_form_of_an_answer_and_decline() -> None:
    received = Received()
    steps = [call("book", "c1", table="A"), call("book", "c2", table="B"), "Done."]
    agent, toolkit, _ = await agent_with_questions(received, steps)
    answers: list[dict[str, Any]] = [{"action": "decline"}, {"action": "cancel", "content": {"ignored": 1}}]
    try:
        async for event in agent.stream_events("Book two", ALICE):
            if isinstance(event, McpElicitation):
                assert agent.answer(ALICE, event.question_id, answers.pop(0))
    finally:
        await toolkit.aclose()
    assert received.answers == [("book", "decline", None), ("book", "cancel", None)]


async def test_an_invalid_form_answer_is_refused_and_the_question_stays_open() -> None:
    received = Received()
    agent, toolkit, _ = await agent_with_questions(received, [call("book", table="T1"), "Booked."])
    problems: list[InvalidAnswerError] = []
    try:
        async for event in agent.stream_events("Book", ALICE):
            if not isinstance(event, McpElicitation):
                continue
            bad_answers: list[Any] = [
                ElicitationAnswer.accept({"name": "Ann", "seats": 20}),  # over the maximum
                ElicitationAnswer.accept({"seats": 2}),  # a required field missing
                ElicitationAnswer.accept({"name": "Ann", "seats": "two"}),  # wrong type
                ElicitationAnswer.accept({"name": "Ann", "seats": 2, "meal": "pizza"}),  # not a choice
                ElicitationAnswer.accept({"name": "Ann", "seats": 2, "dessert": "cake"}),  # not a field
                ElicitationAnswer.accept({"name": "Ann", "seats": 2, "window": None}),  # not a flat value
                {"action": "maybe"},
                {"action": "accept", "content": ["not", "an", "object"]},
            ]
            for bad in bad_answers:
                with pytest.raises(InvalidAnswerError) as info:
                    agent.answer(ALICE, event.question_id, bad)
                problems.append(info.value)
                assert [q.id for q in agent.questions(ALICE)] == [event.question_id]  # still open
                assert received.answers == []  # nothing reached the server
            assert agent.answer(ALICE, event.question_id, {"action": "accept", "content": GOOD})
    finally:
        await toolkit.aclose()
    assert [p.problems[0]["field"] for p in problems[:6]] == ["seats", "name", "seats", "meal", "dessert", "window"]
    assert problems[0].problems[0]["message"] == "must be at most 8"
    assert problems[1].problems[0]["message"] == "this field is required"
    assert all(p.question_id for p in problems[:6])
    assert isinstance(problems[0], UserError) and isinstance(problems[0], ValueError)
    assert received.answers == [("book", "accept", GOOD)]


async def test_another_user_or_session_can_neither_see_nor_answer_the_question() -> None:
    received = Received()
    agent, toolkit, _ = await agent_with_questions(received, [call("book", table="T2"), "Booked."])
    bob, other_session = RuntimeContext("bob", "s1"), RuntimeContext("alice", "s2")
    try:
        async for event in agent.stream_events("Book", ALICE):
            if isinstance(event, McpElicitation):
                for ctx in (bob, other_session):
                    assert agent.questions(ctx) == []
                    assert agent.answer(ctx, event.question_id, ElicitationAnswer.accept(GOOD)) is False
                assert agent.answer("bob", event.question_id, {"action": "decline"}, session_id="s1") is False
                assert [q.id for q in agent.questions(ALICE)] == [event.question_id]  # untouched, still open
                assert agent.answer("alice", event.question_id, {"action": "decline"}, session_id="s1") is True
    finally:
        await toolkit.aclose()
    assert received.answers == [("book", "decline", None)]


async def test_a_url_question_is_shown_never_answered_with_content() -> None:
    received = Received()
    agent, toolkit, _ = await agent_with_questions(received, [call("authorize"), "Connected."])
    try:
        async for event in agent.stream_events("Connect", ALICE):
            if isinstance(event, McpElicitation):
                assert (event.mode, event.url, event.requested_schema) == ("url", AUTH_URL, None)
                with pytest.raises(InvalidAnswerError):
                    agent.answer(ALICE, event.question_id, ElicitationAnswer.accept({"token": "x"}))
                assert agent.answer(ALICE, event.question_id, ElicitationAnswer.accept())
    finally:
        await toolkit.aclose()
    assert received.answers == [("authorize", "accept", None)]


@pytest.mark.parametrize(
    "url",
    ["javascript:alert(1)", "file:///etc/passwd", "https://user:pw@evil.example/", "http:///no-host", "/relative"],
)
async def test_unsafe_urls_are_declined_without_asking(url: str) -> None:
    received = Received()
    agent, toolkit, _ = await agent_with_questions(received, [call("authorize", url=url), "Done."])
    try:
        events = [e async for e in agent.stream_events("Connect", ALICE)]
    finally:
        await toolkit.aclose()
    assert questions_in(events) == []
    assert received.answers == [("authorize", "decline", None)]


async def test_a_form_outside_the_specs_flat_schema_is_declined_without_asking() -> None:
    received = Received()
    nested = '{"type": "object", "properties": {"address": {"type": "object", "properties": {}}}}'
    agent, toolkit, _ = await agent_with_questions(received, [call("ask", schema=nested), "Done."])
    try:
        events = [e async for e in agent.stream_events("Ask", ALICE)]
    finally:
        await toolkit.aclose()
    assert questions_in(events) == []
    assert received.answers == [("ask", "decline", None)]


async def test_an_unanswered_question_expires_and_the_server_is_told_cancel() -> None:
    received = Received()
    agent, toolkit, _ = await agent_with_questions(
        received, [call("book", table="T3"), "No answer."], elicitation_timeout=0.2
    )
    try:
        events = [e async for e in agent.stream_events("Book", ALICE)]  # nobody answers
    finally:
        await toolkit.aclose()
    assert received.answers == [("book", "cancel", None)]
    [closed] = [e for e in events if isinstance(e, McpElicitationClosed)]
    assert (closed.action, closed.reason) == ("cancel", "expired")
    assert result_of(events).output == "not booked (cancel)"
    assert agent.questions(ALICE) == []


async def test_interrupting_the_run_cancels_its_open_questions() -> None:
    received = Received()
    agent, toolkit, _ = await agent_with_questions(received, [call("book", table="T4"), "unused"])
    events: list[AgentEvent] = []
    try:
        async for event in agent.stream_events("Book", ALICE):
            events.append(event)
            if isinstance(event, McpElicitation):
                assert agent.interrupt(ALICE) is True
                assert agent.questions(ALICE) == []
                assert agent.answer(ALICE, event.question_id, ElicitationAnswer.accept(GOOD)) is False
        await asyncio.wait_for(received.changed.wait(), 10)
    finally:
        await toolkit.aclose()
    [closed] = [e for e in events if isinstance(e, McpElicitationClosed)]
    assert (closed.action, closed.reason) == ("cancel", "interrupted")
    assert events[-1].type == "run_finished"
    assert events[-1].msg.generate_reason.value == "interrupted"  # type: ignore[attr-defined]
    # The server learnt "cancel" (its tool call was cancelled right after, if it got that far).
    assert received.answers == [("book", "cancel", None)] or received.cancelled == ["book"]


async def test_a_plain_call_nobody_streams_cannot_ask_and_is_declined() -> None:
    received = Received()
    agent, toolkit, _ = await agent_with_questions(received, [call("book", table="T5"), "Declined."])
    try:
        reply = await agent.call("Book", ALICE)
    finally:
        await toolkit.aclose()
    assert reply.text == "Declined."
    assert received.answers == [("book", "decline", None)]


async def test_outside_any_agent_a_question_is_declined() -> None:
    received = Received()
    async with McpClient.memory(question_server(received), name="questions") as client:
        result = await client.call_tool("book", {"table": "T6"})
    assert result.content[0].text == "not booked (decline)"  # type: ignore[union-attr]
    assert received.answers == [("book", "decline", None)]


async def test_an_explicit_handler_keeps_precedence_over_the_run() -> None:
    received = Received()
    asked: list[ElicitationRequest] = []

    async def handler(request: ElicitationRequest) -> dict[str, Any]:
        asked.append(request)
        return GOOD

    agent, toolkit, _ = await agent_with_questions(
        received, [call("book", table="T8"), "Booked."], elicitation_handler=handler
    )
    try:
        events = [e async for e in agent.stream_events("Book", ALICE)]
    finally:
        await toolkit.aclose()
    assert [r.tool_call_id for r in asked] == ["call-1"]
    assert received.answers == [("book", "accept", GOOD)]
    [informed] = questions_in(events)
    assert informed.question_id == ""  # informational: the handler answered, nothing to answer in the UI
    assert agent.questions(ALICE) == []


async def test_the_tool_timeout_stands_still_while_the_human_thinks() -> None:
    received = Received()
    agent, toolkit, _ = await agent_with_questions(received, [call("book", table="T9"), "Booked."], timeout=0.3)
    gate = asyncio.Event()
    try:
        stream = agent.stream_events("Book", ALICE)
        async for event in stream:
            if isinstance(event, McpElicitation):
                # Think for longer than the tool's 0.3 s timeout, measured by the loop, not by sleeping
                # in the test: wait until a 3x-longer timer fires.
                asyncio.get_running_loop().call_later(0.9, gate.set)
                await gate.wait()
                assert agent.answer(ALICE, event.question_id, ElicitationAnswer.accept(GOOD))
            if isinstance(event, ToolResult):
                assert event.result.state == "success", event.result.output
    finally:
        await toolkit.aclose()
    assert received.answers == [("book", "accept", GOOD)]


async def test_sampling_approval_asks_the_runs_human() -> None:
    received = Received()
    steps = [call("summarize", "s1", text="a long text"), "A summary.", call("summarize", "s2", text="x"), "Done."]
    # The server samples the agent's own model, behind the human's approval (no handler needed).
    agent, toolkit, model = await agent_with_questions(received, steps, sampling=True)
    answers: list[ElicitationAnswer | dict[str, Any]] = [
        ElicitationAnswer.accept(),
        {"action": "accept", "content": {"approve": False}},
    ]
    decisions = iter(answers)
    asked: list[McpElicitation] = []
    try:
        async for event in agent.stream_events("Summarise", ALICE):
            if isinstance(event, McpElicitation):
                asked.append(event)
                assert agent.answer(ALICE, event.question_id, next(decisions))
    finally:
        await toolkit.aclose()
    assert [(a.mode, a.tool_call_id) for a in asked] == [("sampling", "s1"), ("sampling", "s2")]
    assert "Summarise: a long text" in asked[0].message and asked[0].requested_schema is not None
    assert received.answers[0] == ("summarize", "accept", "A summary.")
    assert received.answers[1][:2] == ("summarize", "refused")  # approve: false refuses
    assert len(model.requests) == 4  # the refused request never reached the model


async def test_sampling_approval_without_a_way_to_ask_refuses() -> None:
    received = Received()
    model = ScriptedModel([])
    client = McpClient.memory(question_server(received), name="questions", sampling_approval=True, sampling_model=model)
    async with client:  # no agent run: nobody to ask
        result = await client.call_tool("summarize", {"text": "t"})
    assert "refused" in result.content[0].text  # type: ignore[union-attr]
    assert model.requests == []


def test_options_are_checked() -> None:
    server = question_server(Received())
    with pytest.raises(UserError, match="elicitation_timeout"):
        McpClient.memory(server, elicitation_timeout=0)
    with pytest.raises(UserError, match="MCPServer"):
        McpClient.memory(object())
    McpClient.memory(server, sampling_approval=True)  # no handler needed any more: the run's human is asked


# -- the property, through the real MCP server: a refused answer sends nothing -------------------------------
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(forms())
def test_generated_forms_through_the_mcp_server(generated: Form) -> None:
    asyncio.run(_mcp_round_trip(generated))


async def _mcp_round_trip(generated: Form) -> None:
    received = Received()
    steps = [call("ask", schema=json.dumps(generated.schema)), "Thanks."]
    agent, toolkit, _ = await agent_with_questions(received, steps)
    try:
        async for event in agent.stream_events("Fill it", ALICE):
            if isinstance(event, McpElicitation):
                assert event.requested_schema == generated.schema
                with pytest.raises(InvalidAnswerError) as info:
                    agent.answer(ALICE, event.question_id, ElicitationAnswer.accept(generated.bad))
                assert generated.bad_field in {p["field"] for p in info.value.problems}
                assert received.answers == []  # refused: nothing reached the server
                assert [q.id for q in agent.questions(ALICE)] == [event.question_id]
                assert agent.answer(ALICE, event.question_id, {"action": "accept", "content": generated.good})
    finally:
        await toolkit.aclose()
    assert received.answers == [("ask", "accept", generated.good)]
