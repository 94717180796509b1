"""An approval is spent exactly once: interrupts, closed streams, crashes and repeats never run a call twice.

Every test counts the real side effect (the tool's own run counter) and checks the stored history
against the rules providers enforce (each tool_use has exactly one tool_result, in order).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from history_rules import assert_valid_history
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt import (
    ConfirmResult,
    GenerateReason,
    Msg,
    ReActAgent,
    RuntimeContext,
    Toolkit,
    ToolResultBlock,
    ToolUseBlock,
    tool,
)
from agentrt.errors import NotPendingError, UserError
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.state import InMemoryStateStore

CTX = RuntimeContext(user_id="u", session_id="s")


class Danger:
    """A destructive tool whose runs are counted; it can be held mid-run to stop the run there."""

    def __init__(self) -> None:
        self.runs: list[str] = []
        self.started = asyncio.Event()
        self.release: asyncio.Event | None = None

        @tool(destructive=True)
        async def danger(target: str) -> str:
            """Do something irreversible to a target."""
            self.runs.append(target)
            self.started.set()
            if self.release is not None:
                await self.release.wait()
            return f"did {target}"

        self.tool = danger


def planner(request: ModelRequest) -> Any:
    """Ask for `danger` after each user text; answer after tool results."""
    last = request.messages[-1]
    if last.blocks(ToolResultBlock):
        return "done"
    turn = sum(1 for m in request.messages if m.role == "user" and m.text)
    return ToolUseBlock(id=f"c{turn}", name="danger", input={"target": f"t{turn}"})


def make_agent(d: Danger, store: Any) -> ReActAgent:
    return ReActAgent("bot", model=ScriptedModel.from_function(planner), toolkit=Toolkit([d.tool]), state_store=store)


def approve(call_id: str) -> Msg:
    return Msg.confirm([ConfirmResult(confirmed=True, tool_call=call_id)])


async def check(agent: ReActAgent) -> None:
    """The stored history is valid (only waiting or crashed-in-flight calls may be open) and so is every prompt."""
    state = await agent.get_state("u", "s")
    pending = {e.id for e in state.pending.calls} if state.pending is not None else set()
    in_flight = state.tool_state.get("in_flight") or {}
    assert_valid_history(state.messages, pending | {str(c) for c in in_flight.get("calls") or ()})
    model = agent.model
    assert isinstance(model, ScriptedModel)
    for request in model.requests:
        assert_valid_history([m for m in request.messages if m.role != "system"])


async def start_held(agent: ReActAgent, d: Danger, msg: Msg) -> asyncio.Task[Msg]:
    d.started.clear()
    d.release = asyncio.Event()
    task = asyncio.create_task(agent.call(msg, CTX))
    await d.started.wait()
    return task


# -- one spelling per way of stopping a run -------------------------------------------------------------
async def test_interrupt_while_the_approved_tool_runs_spends_the_approval() -> None:
    d = Danger()
    agent = make_agent(d, InMemoryStateStore())
    paused = await agent.call("go", CTX)
    assert paused.generate_reason is GenerateReason.AWAITING_CONFIRMATION
    task = await start_held(agent, d, approve("c1"))
    assert agent.interrupt(CTX)
    reply = await task
    assert reply.generate_reason is GenerateReason.INTERRUPTED
    state = await agent.get_state("u", "s")
    assert state.pending is None
    await check(agent)
    with pytest.raises(NotPendingError) as info:
        await agent.call(approve("c1"), CTX)
    assert info.value.tool_call_ids == ("c1",)
    assert d.runs == ["t1"]
    await check(agent)


async def test_closing_the_event_stream_while_the_tool_runs_spends_the_approval() -> None:
    d = Danger()
    agent = make_agent(d, InMemoryStateStore())
    await agent.call("go", CTX)
    d.release = asyncio.Event()
    stream = agent.stream_events(approve("c1"), CTX)
    assert isinstance(stream, AsyncGenerator)  # typed AsyncIterator; closed early below
    async for event in stream:
        if event.type == "tool_call_started" or d.started.is_set():
            break
    await d.started.wait()
    await stream.aclose()
    await check(agent)
    assert (await agent.get_state("u", "s")).pending is None
    with pytest.raises(NotPendingError):
        await agent.call(approve("c1"), CTX)
    # the session goes on normally
    d.release.set()
    again = await agent.call("next", CTX)
    assert again.generate_reason is GenerateReason.AWAITING_CONFIRMATION
    await agent.call(approve(again.tool_calls[0].id), CTX)
    assert d.runs == ["t1", "t2"]
    await check(agent)


async def test_a_crash_while_the_tool_runs_leaves_the_call_interrupted_never_rerun() -> None:
    d = Danger()
    store = InMemoryStateStore()
    agent = make_agent(d, store)
    await agent.call("go", CTX)
    task = await start_held(agent, d, approve("c1"))
    # What a SIGKILL leaves: the store exactly as it is now (the running process is gone).
    snapshot = await store.load("u", "s", agent="bot")
    assert snapshot is not None
    crashed = InMemoryStateStore()
    await crashed.save(snapshot)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    restarted = make_agent(d, crashed)
    with pytest.raises(NotPendingError):
        await restarted.call(approve("c1"), CTX)
    reply = await restarted.call("what happened?", CTX)
    assert reply.generate_reason is GenerateReason.AWAITING_CONFIRMATION  # the model asks for t2
    state = await restarted.get_state("u", "s")
    results = {b.id: b for m in state.messages for b in m.blocks(ToolResultBlock)}
    assert results["c1"].state == "interrupted"
    assert d.runs == ["t1"]
    await check(restarted)


async def test_two_pending_calls_interrupt_during_the_first_ends_both() -> None:
    d = Danger()

    def two(request: ModelRequest) -> Any:
        if request.messages[-1].blocks(ToolResultBlock):
            return "done"
        return [
            ToolUseBlock(id="a", name="danger", input={"target": "A"}),
            ToolUseBlock(id="b", name="danger", input={"target": "B"}),
        ]

    agent = ReActAgent("bot", model=ScriptedModel.from_function(two), toolkit=Toolkit([d.tool]))
    agent.state_store = InMemoryStateStore()
    await agent.call("go", CTX)
    task = await start_held(agent, d, approve("a"))
    agent.interrupt(CTX)
    await task
    await check(agent)
    for call_id in ("a", "b"):
        with pytest.raises(NotPendingError):
            await agent.call(approve(call_id), CTX)
    assert d.runs == ["A"]


async def test_edited_input_is_decided_again_deny_wins() -> None:
    from agentrt.permission import Decision, PermissionContext, PermissionMode, PermissionRule

    d = Danger()
    deny = PermissionRule(tool="danger", decision=Decision.DENY, args={"target": "prod*"})
    agent = ReActAgent(
        "bot",
        model=ScriptedModel.from_function(planner),
        toolkit=Toolkit([d.tool]),
        state_store=InMemoryStateStore(),
        permission=PermissionContext(mode=PermissionMode.DEFAULT, rules=[deny]),
    )
    for target in ("prod-db", "prod", "production", "prod\n"):
        paused = await agent.call(f"work on staging ({target})", CTX)
        assert paused.generate_reason is GenerateReason.AWAITING_CONFIRMATION
        state = await agent.get_state("u", "s")
        assert state.pending is not None
        call_id = state.pending.calls[0].id
        edited = ToolUseBlock(id=call_id, name="danger", input={"target": target})
        await agent.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call=edited)]), CTX)
    assert d.runs == []
    await check(agent)


async def test_edited_input_that_raises_a_new_question_asks_again() -> None:
    from agentrt.permission import Decision, PermissionContext, PermissionMode, PermissionRule

    d = Danger()
    ask = PermissionRule(tool="danger", decision=Decision.ASK, args={"target": "db-*"})
    agent = ReActAgent(
        "bot",
        model=ScriptedModel.from_function(planner),
        toolkit=Toolkit([d.tool]),
        state_store=InMemoryStateStore(),
        permission=PermissionContext(mode=PermissionMode.DEFAULT, rules=[ask]),
    )
    await agent.call("go", CTX)
    edited = ToolUseBlock(id="c1", name="danger", input={"target": "db-main"})
    again = await agent.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call=edited)]), CTX)
    assert again.generate_reason is GenerateReason.AWAITING_CONFIRMATION
    assert d.runs == []
    pending = (await agent.get_state("u", "s")).pending
    assert pending is not None and pending.calls[0].input == {"target": "db-main"}
    await agent.call(approve("c1"), CTX)
    assert d.runs == ["db-main"]
    await check(agent)


async def test_a_bad_edit_spends_nothing() -> None:
    d = Danger()
    agent = make_agent(d, InMemoryStateStore())
    await agent.call("go", CTX)
    bad = ToolUseBlock(id="c1", name="danger", input={"target": 5, "extra": True})
    with pytest.raises(UserError):
        await agent.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call=bad)]), CTX)
    assert d.runs == []
    await agent.call(approve("c1"), CTX)
    assert d.runs == ["t1"]


async def test_duplicate_call_ids_from_the_model_get_distinct_results() -> None:
    seen: list[str] = []

    @tool(read_only=True)
    async def lookup(q: str) -> str:
        """Look something up."""
        seen.append(q)
        return f"answer {q}"

    model = ScriptedModel(
        [
            [
                ToolUseBlock(id="dup", name="lookup", input={"q": "one"}),
                ToolUseBlock(id="dup", name="lookup", input={"q": "two"}),
            ],
            "ok",
        ]
    )
    agent = ReActAgent("bot", model=model, toolkit=Toolkit([lookup]), state_store=InMemoryStateStore())
    await agent.call("go", CTX)
    assert sorted(seen) == ["one", "two"]
    results = [b for m in model.requests[-1].messages for b in m.blocks(ToolResultBlock)]
    assert sorted(r.output for r in results) == ["answer one", "answer two"]
    assert len({r.id for r in results}) == 2
    await check(agent)


# -- every interleaving ------------------------------------------------------------------------------------
OPS = st.lists(
    st.sampled_from(["approve", "approve_again", "deny", "interrupt_tool", "crash_tool", "new_message", "restart"]),
    min_size=1,
    max_size=8,
)


async def _play(ops: list[str]) -> None:
    d = Danger()
    store = InMemoryStateStore()
    agent = make_agent(d, store)
    await agent.call("start", CTX)
    approved: list[str] = []
    for op in ops:
        state = await agent.get_state("u", "s")
        waiting = [e.id for e in state.pending.calls] if state.pending is not None else []
        if op in ("approve", "interrupt_tool", "crash_tool", "deny") and waiting:
            call_id = waiting[0]
            if op == "deny":
                await agent.call(Msg.confirm([ConfirmResult(confirmed=False, tool_call=call_id)]), CTX)
            elif op == "approve":
                await agent.call(approve(call_id), CTX)
                approved.append(call_id)
            else:
                task = await start_held(agent, d, approve(call_id))
                approved.append(call_id)
                if op == "interrupt_tool":
                    agent.interrupt(CTX)
                    await task
                else:
                    snapshot = await store.load("u", "s", agent="bot")
                    assert snapshot is not None
                    store = InMemoryStateStore()
                    await store.save(snapshot)
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                    agent = make_agent(d, store)
                assert d.release is not None
                d.release.set()
            d.release = None
        elif op == "approve_again" and approved:
            with pytest.raises(NotPendingError):
                await agent.call(approve(approved[-1]), CTX)
        elif op == "new_message":
            if waiting:
                with pytest.raises(UserError):
                    await agent.call("something else", CTX)
            else:
                await agent.call("something else", CTX)
        elif op == "restart":
            agent = make_agent(d, store)
        await check(agent)
        # a confirmed call runs at most once, and only calls that were approved run
        assert len(d.runs) == len(set(d.runs))
        assert len(d.runs) <= len(approved)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_any_interleaving_keeps_history_valid_and_runs_each_approval_at_most_once(ops: list[str]) -> None:
    asyncio.run(_play(ops))


@pytest.mark.parametrize(
    "rule",
    [
        {"tool": "*", "decision": "allow"},
        {"tool": "dang*", "decision": "allow"},
        {"tool": "d?nger", "decision": "allow", "args": {"target": "t1"}},
        {"tool": "other_tool", "decision": "allow"},
    ],
)
async def test_rules_naming_other_or_many_tools_are_refused_with_the_answer(rule: dict[str, Any]) -> None:
    d = Danger()
    agent = make_agent(d, InMemoryStateStore())
    await agent.call("go", CTX)
    with pytest.raises(UserError, match="refused"):
        await agent.call(
            Msg.confirm([ConfirmResult.coerce({"tool_call_id": "c1", "confirmed": True, "rules": [rule]})]), CTX
        )
    state = await agent.get_state("u", "s")
    assert d.runs == [] and state.pending is not None and list(state.rules) == []


async def test_an_interrupt_while_loading_a_paused_session_keeps_the_history_valid() -> None:
    entered = asyncio.Event()
    release = asyncio.Event()

    class SlowStore(InMemoryStateStore):
        slow = False

        async def load(self, user_id: str, session_id: str, *, agent: str = "") -> Any:
            if self.slow:
                self.slow = False
                entered.set()
                await release.wait()
            return await super().load(user_id, session_id, agent=agent)

    d = Danger()
    store = SlowStore()
    store.session_cache.max_bytes = 0  # every call really loads
    agent = make_agent(d, store)
    await agent.call("go", CTX)
    store.slow = True
    task = asyncio.create_task(agent.call(approve("c1"), CTX))
    await entered.wait()
    assert agent.interrupt(CTX)
    release.set()
    reply = await task
    assert reply.generate_reason is GenerateReason.INTERRUPTED
    await check(agent)
    # The interrupted call never got to spend the approval: the call still waits, and runs once.
    assert (await agent.get_state("u", "s")).pending is not None
    assert d.runs == []
    await agent.call(approve("c1"), CTX)
    with pytest.raises(NotPendingError):
        await agent.call(approve("c1"), CTX)
    assert d.runs == ["t1"]
    await check(agent)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.dictionaries(
                st.sampled_from(["tool_call_id", "tool_call", "confirmed"]),
                st.recursive(
                    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
                    max_leaves=4,
                ),
            ),
            st.text(max_size=5),
            st.integers(),
        ),
        max_size=3,
    )
)
def test_malformed_answers_to_a_session_with_nothing_pending_are_user_errors(raw: list[Any]) -> None:
    async def go() -> None:
        d = Danger()
        agent = make_agent(d, InMemoryStateStore())
        await agent.call("go", CTX)
        await agent.call(Msg.confirm([ConfirmResult(confirmed=False, tool_call="c1")]), CTX)  # nothing waits now
        before = await agent.get_state("u", "s")
        with pytest.raises(UserError):
            await agent.call(Msg(role="user", content=[], metadata={"confirm_results": raw}), CTX)
        after = await agent.get_state("u", "s")
        assert after.revision == before.revision and d.runs == []

    asyncio.run(go())
