"""The run's question channel without MCP: a tool asks through `ToolCallScope.ask_user`, the human answers.

Covers what the agent owns: ids and events, listing per session, answers validated before the
tool sees them, parallel questions, subagents (a child's question answered through the parent's
session), plain calls that cannot ask, and a generated-forms property run end to end.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from agentrt import ReActAgent, RuntimeContext, Toolkit, ToolUseBlock, tool
from agentrt.errors import InvalidAnswerError
from agentrt.events import AgentEvent, ToolResult
from agentrt.model import ScriptedModel
from agentrt.state import InMemoryStateStore
from agentrt.tool.questions import (
    ElicitationAnswer,
    McpElicitation,
    McpElicitationClosed,
    QuestionPolicy,
    UserQuestion,
)
from agentrt.tool.scope import ToolCallScope
from question_forms import Form, forms

CTX = RuntimeContext("alice", "s1")
COLOR = {"type": "object", "properties": {"color": {"type": "string", "enum": ["red", "blue"]}}, "required": ["color"]}


class Asker:
    """A tool that asks its run's human and records what it was told (the side effect)."""

    def __init__(self, schema: dict[str, Any] | None = None, timeout: float | None = None) -> None:
        self.schema = schema or COLOR
        self.timeout = timeout
        self.got: list[ElicitationAnswer] = []
        self.scopes: list[bool] = []

        @tool(name="choose", concurrency_safe=True)
        async def choose(topic: str) -> str:
            """Ask the user to choose.

            Args:
                topic: What about.
            """
            scope = ToolCallScope.current()
            assert scope is not None
            self.scopes.append(scope.can_ask)
            question = UserQuestion(
                mode="form", message=f"Pick one for {topic}", requested_schema=self.schema, timeout=self.timeout
            )
            answer = await scope.ask_user(question)
            self.got.append(answer)
            return f"{topic}: {answer.action} {dict(answer.content or {})}"

        self.tool = choose


def agent_for(asker: Asker, steps: list[Any], name: str = "helper") -> ReActAgent:
    return ReActAgent(
        name, "Help.", model=ScriptedModel(steps), toolkit=Toolkit([asker.tool]), state_store=InMemoryStateStore()
    )


def choose(call_id: str, topic: str) -> ToolUseBlock:
    return ToolUseBlock(id=call_id, name="choose", input={"topic": topic})


async def test_a_tool_asks_and_the_answer_reaches_it() -> None:
    asker = Asker()
    agent = agent_for(asker, [choose("c1", "paint"), "Painted."])
    events: list[AgentEvent] = []
    async for event in agent.stream_events("Paint", CTX):
        events.append(event)
        if isinstance(event, McpElicitation):
            assert (event.server, event.tool, event.tool_call_id, event.source) == ("", "choose", "c1", "helper")
            assert event.expires_at is None  # the tool set no timeout
            assert agent.answer(CTX, event.question_id, {"action": "accept", "content": {"color": "blue"}})
    assert asker.scopes == [True]
    assert asker.got == [ElicitationAnswer.accept({"color": "blue"})]
    [result] = [e.result for e in events if isinstance(e, ToolResult)]
    assert result.output == "paint: accept {'color': 'blue'}"


async def test_parallel_questions_are_listed_and_answered_in_any_order() -> None:
    asker = Asker()
    agent = agent_for(asker, [[choose("c1", "walls"), choose("c2", "doors")], "Done."])
    seen: list[McpElicitation] = []
    async for event in agent.stream_events("Paint both", CTX):
        if isinstance(event, McpElicitation):
            seen.append(event)
            if len(seen) == 2:
                listed = agent.questions(CTX)
                assert sorted(q.tool_call_id for q in listed) == ["c1", "c2"]
                by_call = {q.tool_call_id: q.id for q in listed}
                assert agent.answer(CTX, by_call["c2"], ElicitationAnswer.accept({"color": "red"}))
                assert [q.tool_call_id for q in agent.questions(CTX)] == ["c1"]
                assert agent.answer(CTX, by_call["c1"], ElicitationAnswer.decline())
    assert sorted(a.action for a in asker.got) == ["accept", "decline"]


async def test_a_question_expires_with_its_timeout() -> None:
    asker = Asker(timeout=0.05)
    agent = agent_for(asker, [choose("c1", "x"), "Ok."])
    events = [e async for e in agent.stream_events("Go", CTX)]
    assert asker.got == [ElicitationAnswer.cancel()]
    [closed] = [e for e in events if isinstance(e, McpElicitationClosed)]
    assert (closed.reason, closed.action, closed.tool_call_id) == ("expired", "cancel", "c1")


async def test_a_plain_call_cannot_ask() -> None:
    asker = Asker()
    agent = agent_for(asker, [choose("c1", "x"), "Ok."])
    await agent.call("Go", CTX)
    assert asker.scopes == [False]
    assert asker.got == [ElicitationAnswer.decline()]


async def test_a_stream_whose_consumer_cannot_answer_declines_at_once() -> None:
    asker = Asker(timeout=600)
    agent = agent_for(asker, [choose("c1", "x"), "Ok."])
    ctx = RuntimeContext("alice", "s9").put(QuestionPolicy, QuestionPolicy(ask=False))
    events = [e async for e in agent.stream_events("Go", ctx)]
    assert asker.scopes == [False]
    assert asker.got == [ElicitationAnswer.decline()]
    assert not [e for e in events if isinstance(e, McpElicitation)]


async def test_a_subagents_question_is_answered_through_the_parents_session() -> None:
    asker = Asker()
    child = agent_for(asker, [choose("c1", "tiles"), "Chosen."], name="decorator")
    parent = ReActAgent(
        "boss",
        "Delegate.",
        model=ScriptedModel([ToolUseBlock(id="p1", name="decorator", input={"task": "tiles"}), "All done."]),
        toolkit=Toolkit([child.as_tool()]),
        state_store=InMemoryStateStore(),
    )
    child_ctx = RuntimeContext("alice", "s1/decorator")
    async for event in parent.stream_events("Decorate", CTX):
        if isinstance(event, McpElicitation):
            assert (event.source, event.session_id) == ("decorator", "s1/decorator")
            # Listed on the parent's session (the human talks to the parent) and on the child's own.
            assert [q.id for q in parent.questions(CTX)] == [event.question_id]
            assert [q.id for q in child.questions(child_ctx)] == [event.question_id]
            assert parent.questions(RuntimeContext("bob", "s1")) == []
            assert not parent.answer(RuntimeContext("bob", "s1"), event.question_id, ElicitationAnswer.decline())
            assert parent.answer(CTX, event.question_id, {"action": "accept", "content": {"color": "red"}})
    assert asker.got == [ElicitationAnswer.accept({"color": "red"})]
    assert parent.questions(CTX) == [] and child.questions(child_ctx) == []


async def test_interrupting_a_subagents_parent_cancels_its_question() -> None:
    asker = Asker()
    child = agent_for(asker, [choose("c1", "tiles"), "unused"], name="decorator")
    parent = ReActAgent(
        "boss",
        "Delegate.",
        model=ScriptedModel([ToolUseBlock(id="p1", name="decorator", input={"task": "tiles"}), "unused"]),
        toolkit=Toolkit([child.as_tool()]),
        state_store=InMemoryStateStore(),
    )
    closed: list[McpElicitationClosed] = []
    async for event in parent.stream_events("Decorate", CTX):
        if isinstance(event, McpElicitation):
            assert parent.interrupt(CTX)
        elif isinstance(event, McpElicitationClosed):
            closed.append(event)
    assert [(c.reason, c.source) for c in closed] == [("interrupted", "decorator")]
    assert asker.got == [ElicitationAnswer.cancel()]


# -- the property, end to end: nothing reaches the tool until an answer fits -----------------------------------
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(forms())
def test_generated_forms_end_to_end(generated: Form) -> None:
    asyncio.run(_round_trip(generated))


async def _round_trip(generated: Form) -> None:
    asker = Asker(schema=generated.schema)
    agent = agent_for(asker, [choose("c1", "form"), "Thanks."])
    async for event in agent.stream_events("Fill it", CTX):
        if isinstance(event, McpElicitation):
            assert event.requested_schema == generated.schema
            with pytest.raises(InvalidAnswerError) as info:
                agent.answer(CTX, event.question_id, ElicitationAnswer.accept(generated.bad))
            assert generated.bad_field in {p["field"] for p in info.value.problems}
            assert asker.got == []  # refused: nothing was sent
            assert [q.id for q in agent.questions(CTX)] == [event.question_id]  # still open
            assert agent.answer(CTX, event.question_id, {"action": "accept", "content": generated.good})
    assert asker.got == [ElicitationAnswer.accept(generated.good)]
