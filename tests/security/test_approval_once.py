"""An approval is spent exactly once: interrupts, closed streams, crashes and repeats never run a call twice.

Every test counts the real side effect (the tool's own run counter) and checks the stored history
against the rules providers enforce (each tool_use has exactly one tool_result, in order).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest
from history_rules import assert_valid_history, crash_during
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt import (
    ConfirmResult,
    GenerateReason,
    Msg,
    ReActAgent,
    RuntimeContext,
    TextBlock,
    Toolkit,
    ToolResultBlock,
    ToolUseBlock,
    tool,
)
from agentrt.errors import NotPendingError, UserError
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.state import InMemoryStateStore
from agentrt.state.pending import PendingCall

CTX = RuntimeContext(user_id="u", session_id="s")
INTEGRATION = Path(__file__).resolve().parents[1] / "integration"
PROVIDERS = Path(__file__).resolve().parents[1] / "unit" / "model" / "providers"


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
    started = {str(c) for c in in_flight.get("calls") or ()} | {r["id"] for r in in_flight.get("results") or ()}
    assert_valid_history(state.messages, pending | started)
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


def two_calls(request: ModelRequest) -> Any:
    """A model asking for two dangerous calls ("a", "b"), then answering once it has results."""
    if request.messages[-1].blocks(ToolResultBlock):
        return "done"
    return [
        ToolUseBlock(id="a", name="danger", input={"target": "A"}),
        ToolUseBlock(id="b", name="danger", input={"target": "B"}),
    ]


async def test_two_pending_calls_interrupt_during_the_first_ends_both() -> None:
    d = Danger()

    agent = ReActAgent("bot", model=ScriptedModel.from_function(two_calls), toolkit=Toolkit([d.tool]))
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
def planner_mixed(request: ModelRequest) -> Any:
    """One call on odd turns, two on even turns; answer after results.

    The model reuses its call ids in every turn (as servers that number calls afresh per reply do):
    a repeated approval of an earlier "c" must never approve the new one. Targets are unique per call.
    """
    if request.messages[-1].blocks(ToolResultBlock):
        return "done"
    turn = sum(1 for m in request.messages if m.role == "user" and m.text)
    n = len(request.messages)
    if turn % 2:
        return ToolUseBlock(id="c", name="danger", input={"target": f"t{n}"})
    return [ToolUseBlock(id=f"c{k}", name="danger", input={"target": f"t{n}{k}"}) for k in "ab"]


OPS = st.lists(
    st.sampled_from(
        [
            "approve",
            "approve_all",
            "approve_edited",
            "approve_with_text",
            "approve_twice_at_once",
            "approve_again",
            "deny",
            "interrupt_tool",
            "cancel_tool",
            "crash_tool",
            "new_message",
            "observe",
            "restart",
        ]
    ),
    min_size=1,
    max_size=10,
)


class _Player:
    """Plays one interleaving against a real agent, tracking what may run and what did."""

    def __init__(self) -> None:
        self.d = Danger()
        self.store = InMemoryStateStore()
        self.agent = self._agent()
        self.allowed: set[str] = set()  # targets some approval allowed to run
        self.spent: list[str] = []  # ids whose approval was sent and accepted

    def _agent(self) -> ReActAgent:
        return ReActAgent(
            "bot",
            model=ScriptedModel.from_function(planner_mixed),
            toolkit=Toolkit([self.d.tool]),
            state_store=self.store,
        )

    async def waiting(self) -> list[PendingCall]:
        state = await self.agent.get_state("u", "s")
        return list(state.pending.calls) if state.pending is not None else []

    async def approve(self, entries: list[PendingCall], *, edited: bool = False, text: str = "") -> None:
        answers = []
        for e in entries:
            if edited:
                target = f"{e.input['target']}-edited"
                answers.append(
                    ConfirmResult(
                        confirmed=True, tool_call=ToolUseBlock(id=e.id, name=e.name, input={"target": target})
                    )
                )
            else:
                target = str(e.input["target"])
                answers.append(ConfirmResult(confirmed=True, tool_call=e.id))
            self.allowed.add(target)
        await self.agent.call(Msg.confirm(answers, text=text), CTX)
        self.spent.extend(e.id for e in entries)

    async def stop_in_tool(self, entry: PendingCall, how: str) -> None:
        """Approve `entry`, then stop the run while its tool runs: interrupt, cancel, or crash (SIGKILL)."""
        self.allowed.add(str(entry.input["target"]))
        task = await start_held(self.agent, self.d, approve(entry.id))
        self.spent.append(entry.id)
        if how == "interrupt_tool":
            self.agent.interrupt(CTX)
            await task
        else:
            if how == "crash_tool":  # what a SIGKILL leaves: the store as it is now, in a new process
                snapshot = await self.store.load("u", "s", agent="bot")
                assert snapshot is not None
                self.store = InMemoryStateStore()
                await self.store.save(snapshot)
            task.cancel()  # "cancel_tool": a closed stream, a client hanging up
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self.agent = self._agent()
        assert self.d.release is not None
        self.d.release.set()
        self.d.release = None

    async def play(self, op: str) -> None:
        waiting = await self.waiting()
        if op in ("approve", "approve_all", "approve_edited", "approve_with_text") and waiting:
            chosen = waiting if op == "approve_all" else waiting[:1]
            text = "and then something else" if op == "approve_with_text" else ""
            await self.approve(chosen, edited=op == "approve_edited", text=text)
        elif op == "approve_twice_at_once" and waiting:
            self.allowed.add(str(waiting[0].input["target"]))
            twice = [self.agent.call(approve(waiting[0].id), CTX) for _ in range(2)]
            outcomes = await asyncio.gather(*twice, return_exceptions=True)
            assert sum(isinstance(o, NotPendingError) for o in outcomes) == 1, outcomes
            self.spent.append(waiting[0].id)
        elif op == "deny" and waiting:
            await self.agent.call(Msg.confirm([ConfirmResult(confirmed=False, tool_call=waiting[0].id)]), CTX)
        elif op in ("interrupt_tool", "cancel_tool", "crash_tool") and waiting:
            await self.stop_in_tool(waiting[0], op)
        elif op == "approve_again" and self.spent:
            with pytest.raises(NotPendingError) as info:
                await self.agent.call(approve(self.spent[-1]), CTX)
            assert info.value.tool_call_ids == (self.spent[-1],)
        elif op == "new_message":
            if waiting:
                with pytest.raises(UserError):
                    await self.agent.call("something else", CTX)
            else:
                await self.agent.call("something else", CTX)
        elif op == "observe":
            await self.agent.observe(Msg(role="assistant", content=[TextBlock(text="a note")], name="other"), CTX)
        elif op == "restart":
            self.agent = self._agent()

    async def check(self) -> None:
        await check(self.agent)
        runs = self.d.runs
        assert len(runs) == len(set(runs)), f"a confirmed call ran twice: {runs}"
        assert set(runs) <= self.allowed, f"ran without an approval: {set(runs) - self.allowed}"


async def _play(ops: list[str]) -> None:
    player = _Player()
    await player.agent.call("start", CTX)
    for op in ops:
        await player.play(op)
        await player.check()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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


# -- the same approval from several writers at once ------------------------------------------------------------
def _edited(call_id: str, target: str) -> Msg:
    return Msg.confirm(
        [ConfirmResult(confirmed=True, tool_call=ToolUseBlock(id=call_id, name="danger", input={"target": target}))]
    )


@pytest.mark.parametrize("edited", [False, True], ids=["as-asked", "edited"])
async def test_one_approval_sent_at_once_through_one_agent_runs_once(edited: bool) -> None:
    d = Danger()
    agent = make_agent(d, InMemoryStateStore())
    await agent.call("go", CTX)
    answers = [_edited("c1", f"e{i}") if edited else approve("c1") for i in range(5)]
    outcomes = await asyncio.gather(*(agent.call(a, CTX) for a in answers), return_exceptions=True)
    refused = [o for o in outcomes if isinstance(o, NotPendingError)]
    assert len(refused) == 4 and all(o.tool_call_ids == ("c1",) for o in refused), outcomes
    assert len(d.runs) == 1
    await check(agent)


async def _several_writers(url: str, edited: bool, **options: Any) -> None:
    """Four agents on four store objects over one database (as four processes): one approval, sent to each."""
    from agentrt.state import store_from_url

    d = Danger()
    stores = [store_from_url(url, **options) for _ in range(4)]
    try:
        agents = [make_agent(d, s) for s in stores]
        await agents[0].call("go", CTX)
        answers = [_edited("c1", f"e{i}") if edited else approve("c1") for i in range(4)]
        outcomes = await asyncio.gather(
            *(a.call(m, CTX) for a, m in zip(agents, answers, strict=True)), return_exceptions=True
        )
        assert sum(isinstance(o, NotPendingError) for o in outcomes) == 3, outcomes
        assert len(d.runs) == 1, d.runs
        for agent in agents:
            with pytest.raises(NotPendingError):
                await agent.call(approve("c1"), CTX)
        assert len(d.runs) == 1
        await check(agents[0])
    finally:
        for s in stores:
            await s.close()


@pytest.mark.parametrize("edited", [False, True], ids=["as-asked", "edited"])
async def test_one_approval_sent_through_several_sqlite_writers_runs_once(tmp_path: Any, edited: bool) -> None:
    # SQLite's session lock is per process: only the revision check stands between two spends.
    await _several_writers(f"sqlite:///{tmp_path / 'state.db'}", edited)


@pytest.mark.parametrize("edited", [False, True], ids=["as-asked", "edited"])
async def test_one_approval_sent_through_several_redis_writers_runs_once(edited: bool) -> None:
    import sys
    import uuid

    sys.path.insert(0, str(INTEGRATION))
    from services import require_service

    require_service("redis")
    prefix = f"t-approval-once-{uuid.uuid4().hex[:8]}"
    try:
        await _several_writers("redis://127.0.0.1:6379/0", edited, prefix=prefix)
    finally:
        import redis.asyncio as aioredis

        client = aioredis.from_url("redis://127.0.0.1:6379/0")
        async for key in client.scan_iter(match=f"{prefix}*"):
            await client.delete(key)
        await client.aclose()


async def test_two_writers_answering_two_calls_of_one_turn_never_run_a_call_twice(tmp_path: Any) -> None:
    """Writer 1 runs "a"; meanwhile writer 2 answers "b" (and, seeing "a" in flight, ends it as interrupted).

    Writer 1 must not then store its stale view ("b" still waiting, a second result for "a").
    """
    from agentrt.errors import StateConflictError
    from agentrt.state import store_from_url

    d = Danger()
    url = f"sqlite:///{tmp_path / 'state.db'}"
    stores = [store_from_url(url), store_from_url(url)]
    try:
        one, other = (make_agent(d, s) for s in stores)
        for agent in (one, other):
            agent.model = ScriptedModel.from_function(two_calls)
        await one.call("go", CTX)
        task = await start_held(one, d, approve("a"))
        release, d.release = d.release, None
        await other.call(approve("b"), CTX)
        assert release is not None
        release.set()
        with pytest.raises(StateConflictError):
            await task
        for agent in (one, other):
            for call_id in ("a", "b"):
                with pytest.raises(NotPendingError):
                    await agent.call(approve(call_id), CTX)
        assert sorted(d.runs) == ["A", "B"]
        state = await one.get_state("u", "s")
        assert state.pending is None
        assert_valid_history(state.messages)
    finally:
        for s in stores:
            await s.close()


async def test_the_same_approval_from_two_http_requests_at_once_runs_once() -> None:
    """Against a real uvicorn server: several POST /confirm of one call at once; one runs it, the rest get 409."""
    import socket

    import httpx

    from agentrt.server import create_app
    from agentrt.server._serve import graceful_server

    d = Danger()
    agent = make_agent(d, InMemoryStateStore())
    app = create_app({"bot": agent}, api_keys={"key-u": "u"})
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = graceful_server(app, host="127.0.0.1", port=port, log_level="warning")
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not serving.done()
            await asyncio.sleep(0.01)
        headers = {"Authorization": "Bearer key-u"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=30) as http:
            paused = await http.post("/v1/agents/bot/sessions/s1/messages", json={"input": "go"})
            [call] = paused.json()["message"]["metadata"]["pending_tool_calls"]
            body = {"results": [{"tool_call_id": call["id"], "confirmed": True}]}
            answers = await asyncio.gather(
                *(http.post("/v1/agents/bot/sessions/s1/confirm", json=body) for _ in range(4))
            )
            codes = sorted(r.status_code for r in answers)
            assert codes == [200, 409, 409, 409], [r.text for r in answers]
            assert {r.json()["error"]["code"] for r in answers if r.status_code == 409} == {"not_pending"}
            assert d.runs == ["t1"]
            bad = {"results": [{"tool_call_id": call["id"], "confirmed": True, "input": {"target": 1}}]}
            again = await http.post("/v1/agents/bot/sessions/s1/messages", json={"input": "again"})
            [call2] = again.json()["message"]["metadata"]["pending_tool_calls"]
            bad["results"][0]["tool_call_id"] = call2["id"]
            refused = await http.post("/v1/agents/bot/sessions/s1/confirm", json=bad)
            assert refused.status_code == 422 and refused.json()["error"]["code"] == "invalid_answer", refused.text
            assert d.runs == ["t1"]
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 30)


# -- stopping a run at every point -----------------------------------------------------------------------------
async def test_closing_the_stream_after_any_event_spends_the_approval_once() -> None:
    for hold in (False, True):
        for n in range(8):
            d = Danger()
            agent = make_agent(d, InMemoryStateStore())
            await agent.call("go", CTX)
            if hold:
                d.release = asyncio.Event()
            stream = agent.stream_events(approve("c1"), CTX)
            assert isinstance(stream, AsyncGenerator)
            seen = 0
            async for _event in stream:
                # Held: no event comes while the tool runs, so stop there at the latest.
                if seen == n or d.started.is_set():
                    break
                seen += 1
            await stream.aclose()
            if d.release is not None:
                d.release.set()
            await spend_what_is_left(agent, d)
            await agent.call("next", CTX)
            assert d.runs == ["t1"], (hold, n, d.runs)
            await check(agent)


async def spend_what_is_left(agent: ReActAgent, d: Danger) -> None:
    """After a stopped approval: approve once more if it was not spent yet; a repeat is then refused."""
    await check(agent)
    state = await agent.get_state("u", "s")
    if state.pending is not None and state.pending.calls:  # stopped before the approval was spent
        assert d.runs == []
        await agent.call(approve("c1"), CTX)
    with pytest.raises(NotPendingError):
        await agent.call(approve("c1"), CTX)


async def test_cancelling_the_call_at_any_await_spends_the_approval_at_most_once() -> None:
    for steps in range(0, 40, 2):
        d = Danger()
        agent = make_agent(d, InMemoryStateStore())
        await agent.call("go", CTX)
        task = asyncio.create_task(agent.call(approve("c1"), CTX))
        for _ in range(steps):
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await spend_what_is_left(agent, d)
        assert d.runs == ["t1"], (steps, d.runs)
        await check(agent)


# -- edited arguments --------------------------------------------------------------------------------------------
class Deploy:
    """A destructive tool with nested and typed arguments; its runs are counted."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, Any, int]] = []

        @tool(destructive=True)
        async def deploy(target: str, opts: dict[str, Any] | None = None, count: int = 1) -> str:
            """Deploy to a target."""
            self.runs.append((target, opts, count))
            return "deployed"

        self.tool = deploy


def deploy_agent(dep: Deploy) -> ReActAgent:
    from agentrt.permission import Decision, PermissionContext, PermissionMode, PermissionRule

    def plan(request: ModelRequest) -> Any:
        if request.messages[-1].blocks(ToolResultBlock):
            return "done"
        return ToolUseBlock(id=f"d{len(request.messages)}", name="deploy", input={"target": "staging"})

    rules = [
        PermissionRule(tool="deploy", decision=Decision.DENY, args={"target": "prod*"}),
        PermissionRule(tool="deploy", decision=Decision.DENY, args={"opts": "*prod*"}),
    ]
    return ReActAgent(
        "bot",
        model=ScriptedModel.from_function(plan),
        toolkit=Toolkit([dep.tool]),
        state_store=InMemoryStateStore(),
        permission=PermissionContext(mode=PermissionMode.DEFAULT, rules=rules),
    )


EDIT_SPELLINGS = [
    {"target": "prod-db"},
    {"target": "PROD-db"},
    {"target": "Prod"},
    {"target": "\uff50\uff52\uff4f\uff44-db"},  # fullwidth "prod-db"
    {"target": "prod-db "},
    {"target": "prod\n"},
    {"target": " prod-db"},
    {"target": "pro\u200bd-db"},  # zero-width space
    {"target": "staging", "opts": {"env": "prod"}},
    {"target": "staging", "opts": {"region": "eu", "env": "PROD"}},
    {"target": "staging", "opts": {"nested": {"env": "prod"}}},
    {"target": "staging", "count": 3.0},
    {"target": "elsewhere"},
]


@pytest.mark.parametrize("edit", EDIT_SPELLINGS, ids=repr)
async def test_an_edit_is_decided_exactly_like_the_same_call_from_the_model(edit: dict[str, Any]) -> None:
    """Whatever the spelling, the edited call gets the engine's verdict on those very arguments; deny wins."""
    from agentrt.permission import Decision, PermissionEngine

    dep = Deploy()
    agent = deploy_agent(dep)
    paused = await agent.call("deploy it", CTX)
    [call] = paused.tool_calls
    engine = PermissionEngine(PermissionContext_of(agent))
    verdict = engine.check(dep.tool, ToolUseBlock(id="x", name="deploy", input=edit), CTX).decision
    edited = ToolUseBlock(id=call.id, name="deploy", input=edit)
    await agent.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call=edited)]), CTX)
    state = await agent.get_state("u", "s")
    results = {b.id: b for m in state.messages for b in m.blocks(ToolResultBlock)}
    if verdict is Decision.DENY:
        assert dep.runs == [] and results[call.id].state == "denied"
    else:
        assert len(dep.runs) == 1 and dep.runs[0][0] == edit["target"]
    await check(agent)


def PermissionContext_of(agent: ReActAgent) -> Any:
    from agentrt.permission import PermissionContext

    return PermissionContext.coerce(agent.permission)


@pytest.mark.parametrize(
    "edit",
    [
        {"target": "staging", "extra": 1},  # an unknown key
        {"target": 5},
        {"target": ["prod-db"]},
        {"target": {"name": "prod"}},
        {"target": None},
        {},
        {"target": "staging", "count": "3"},  # coerced by a lax validator: refused
        {"target": "staging", "count": True},
        {"target": "staging", "opts": "env=prod"},
    ],
    ids=repr,
)
async def test_an_edit_that_does_not_fit_the_schema_is_refused_typed_and_spends_nothing(edit: dict[str, Any]) -> None:
    from agentrt.errors import InvalidAnswerError

    dep = Deploy()
    agent = deploy_agent(dep)
    paused = await agent.call("deploy it", CTX)
    [call] = paused.tool_calls
    before = await agent.get_state("u", "s")
    with pytest.raises(InvalidAnswerError) as info:
        await agent.call(
            Msg.confirm([ConfirmResult(confirmed=True, tool_call=ToolUseBlock(id=call.id, name="deploy", input=edit))]),
            CTX,
        )
    assert call.id in str(info.value) and info.value.question_id == call.id
    after = await agent.get_state("u", "s")
    assert dep.runs == [] and after.revision == before.revision
    await agent.call(approve(call.id), CTX)  # the call still waits, and runs once as asked
    assert dep.runs == [("staging", None, 1)]


async def test_an_edit_naming_another_tool_is_refused() -> None:
    from agentrt.errors import InvalidAnswerError

    dep = Deploy()
    agent = deploy_agent(dep)
    [call] = (await agent.call("deploy it", CTX)).tool_calls
    other = ConfirmResult.coerce(
        {"tool_call": {"id": call.id, "name": "wipe", "input": {"target": "x"}}, "confirmed": True}
    )
    with pytest.raises(InvalidAnswerError, match="wipe"):
        await agent.call(Msg.confirm([other]), CTX)
    assert dep.runs == []


# -- call ids ------------------------------------------------------------------------------------------------------
async def test_an_id_the_model_reuses_in_a_later_turn_is_renamed_so_a_repeated_approval_is_refused() -> None:
    d = Danger()

    def same_id(request: ModelRequest) -> Any:
        if request.messages[-1].blocks(ToolResultBlock):
            return "done"
        return ToolUseBlock(id="call_0", name="danger", input={"target": f"t{len(request.messages)}"})

    agent = ReActAgent("bot", model=ScriptedModel.from_function(same_id), toolkit=Toolkit([d.tool]))
    agent.state_store = InMemoryStateStore()
    await agent.call("go", CTX)
    await agent.call(approve("call_0"), CTX)
    second = await agent.call("again", CTX)
    [call] = second.tool_calls
    assert call.id != "call_0" and call.metadata and call.metadata["provider_id"] == "call_0"
    with pytest.raises(NotPendingError):  # the first approval, sent again (a client retrying)
        await agent.call(approve("call_0"), CTX)
    assert d.runs == ["t1"]
    await agent.call(approve(call.id), CTX)
    assert len(d.runs) == 2
    await check(agent)


async def test_duplicate_ids_in_a_structured_output_turn_get_one_result_each() -> None:
    from pydantic import BaseModel

    class Out(BaseModel):
        x: int

    seen: list[str] = []

    @tool(read_only=True)
    async def lookup(q: str) -> str:
        """Look something up."""
        seen.append(q)
        return q

    model = ScriptedModel(
        [
            [
                ToolUseBlock(id="d", name="generate_response", input={"x": "not a number"}),
                ToolUseBlock(id="d", name="lookup", input={"q": "a"}),
            ],
            [ToolUseBlock(id="d", name="generate_response", input={"x": 1})],
        ]
    )
    agent = ReActAgent(
        "bot", model=model, toolkit=Toolkit([lookup]), state_store=InMemoryStateStore(), output_mode="tool"
    )
    await agent.call("go", CTX, output=Out)
    await check(agent)


@pytest.mark.parametrize("ids", [["dup", "dup"], ["", ""], ["call_1", "call_1", "call_1"]], ids=repr)
@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_duplicate_ids_on_the_openai_wire_both_run_and_the_next_request_is_valid(
    ids: list[str], streamed: bool
) -> None:
    """A local OpenAI-format server replies with calls sharing an id: each runs, each result is distinct,
    and the next request passes the vendored OpenAI request schema with one tool message per call."""
    import importlib.util
    import json
    import sys

    from agentrt.model.providers.openai import OpenAIChatModel

    providers = PROVIDERS
    sys.path.insert(0, str(providers))
    from wire_servers import Reply, WireServer

    spec = importlib.util.spec_from_file_location("openai_schema", providers / "data" / "openai_schema.py")
    assert spec is not None and spec.loader is not None
    schema = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(schema)

    seen: list[str] = []

    @tool(read_only=True)
    async def lookup(q: str) -> str:
        """Look something up."""
        seen.append(q)
        return f"answer {q}"

    calls = [
        {"id": i, "type": "function", "function": {"name": "lookup", "arguments": json.dumps({"q": f"q{n}"})}}
        for n, i in enumerate(ids)
    ]
    head = {"id": "x", "created": 0, "model": "gpt-4o"}
    if streamed:
        frames = [
            {
                **head,
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {"tool_calls": [{**c, "index": n}]}}],
            }
            for n, c in enumerate(calls)
        ]
        frames.append(
            {
                **head,
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
            }
        )
        first = Reply(sse=[f"data: {json.dumps(f)}\n\n" for f in frames] + ["data: [DONE]\n\n"])
        text = {
            **head,
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}],
        }
        second = Reply(sse=[f"data: {json.dumps(text)}\n\n", "data: [DONE]\n\n"])
    else:
        message = {"role": "assistant", "content": None, "tool_calls": calls}
        first = Reply(
            json={
                **head,
                "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
            }
        )
        message = {"role": "assistant", "content": "ok"}
        second = Reply(
            json={
                **head,
                "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            }
        )
    async with WireServer(first, second) as server:
        model = OpenAIChatModel("gpt-4o", api_key="k", base_url=server.url + "/v1")
        agent = ReActAgent("bot", model=model, toolkit=Toolkit([lookup]), state_store=InMemoryStateStore())
        if streamed:
            async for _event in agent.stream_events("go", CTX):
                pass
        else:
            await agent.call("go", CTX)
        body = server.bodies[-1]
    assert sorted(seen) == sorted(f"q{n}" for n in range(len(ids)))
    schema.assert_valid(body)
    sent = [c["id"] for m in body["messages"] if m["role"] == "assistant" for c in m.get("tool_calls") or ()]
    answered = {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}
    assert all(sent) and len(set(sent)) == len(sent) == len(ids)
    assert sorted(answered) == sorted(sent)
    assert sorted(answered.values()) == sorted(f"answer q{n}" for n in range(len(ids)))
    await check_stored(agent)


async def check_stored(agent: ReActAgent) -> None:
    state = await agent.get_state("u", "s")
    assert_valid_history(state.messages)


@pytest.mark.parametrize("edited", [False, True], ids=["as-asked", "edited"])
async def test_a_crash_in_an_approved_idempotent_call_ends_it_interrupted_even_when_a_rule_now_allows_it(
    edited: bool,
) -> None:
    """The crash repair re-runs idempotent calls the engine allows, but never one started on an approval:
    the approval is spent, and an edited call must not run again with the model's original arguments."""
    runs: list[str] = []
    started = asyncio.Event()
    hold = [True]

    @tool(destructive=True, idempotent=True)
    async def put(target: str) -> str:
        """Write a value (idempotent, but it changes things)."""
        runs.append(target)
        started.set()
        if hold[0]:
            await asyncio.Event().wait()
        return "put"

    def plan(request: ModelRequest) -> Any:
        if request.messages[-1].blocks(ToolResultBlock) or request.messages[-1].text == "next":
            return "done"
        return ToolUseBlock(id="p1", name="put", input={"target": "t1"})

    store = InMemoryStateStore()

    def agent_on(s: InMemoryStateStore) -> ReActAgent:
        return ReActAgent("bot", model=ScriptedModel.from_function(plan), toolkit=Toolkit([put]), state_store=s)

    agent = agent_on(store)
    await agent.call("go", CTX)
    answer: dict[str, Any] = {
        "tool_call_id": "p1",
        "confirmed": True,
        "rules": [{"tool": "put", "decision": "allow", "args": {"target": "t1"}}],  # "always allow this"
    }
    if edited:
        answer["input"] = {"target": "t2"}
    task = asyncio.create_task(agent.call(Msg.confirm([ConfirmResult.coerce(answer)]), CTX))
    crashed = await crash_during(task, started, store, "bot", ("u", "s"))
    hold[0] = False
    restarted = agent_on(crashed)
    await restarted.call("next", CTX)
    state = await restarted.get_state("u", "s")
    results = {b.id: b for m in state.messages for b in m.blocks(ToolResultBlock)}
    assert results["p1"].state == "interrupted"
    assert runs == (["t2"] if edited else ["t1"])
    await check(restarted)


async def test_sending_the_call_back_unchanged_is_an_approval_not_an_edit() -> None:
    """Clients often answer with the pending call itself: that approves it as the model asked, even when
    the model's arguments are wrong (the tool's validation reports them to the model)."""
    d = Danger()
    model = ScriptedModel([ToolUseBlock(id="w", name="danger", input={"target": 5}), "ok"])
    agent = ReActAgent("bot", model=model, toolkit=Toolkit([d.tool]), state_store=InMemoryStateStore())
    [call] = (await agent.call("go", CTX)).tool_calls
    await agent.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call=call)]), CTX)
    state = await agent.get_state("u", "s")
    [result] = [b for m in state.messages for b in m.blocks(ToolResultBlock)]
    assert result.state == "error" and "target" in str(result.output)
    assert d.runs == []
    with pytest.raises(NotPendingError):
        await agent.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call=call)]), CTX)


@pytest.mark.parametrize(
    ("schema", "edit", "refused"),
    [
        ({"type": "object", "properties": {"target": {"type": "string"}}}, {"target": "x", "force": True}, True),
        ({"type": "object", "properties": {"target": {"type": "string"}}}, {"target": 1}, True),
        ({"type": "object", "properties": {"target": {"type": "string"}}}, {"target": "x"}, False),
        ({"type": "object", "additionalProperties": True, "properties": {}}, {"anything": 1}, False),
    ],
    ids=["undeclared-key", "wrong-type", "valid", "open-schema"],
)
async def test_edits_of_a_tool_with_a_plain_json_schema_are_checked_too(
    schema: dict[str, Any], edit: dict[str, Any], refused: bool
) -> None:
    """Tools defined by a JSON Schema (MCP servers' tools) rarely say additionalProperties: false."""
    from agentrt.errors import InvalidAnswerError
    from agentrt.tool import Tool

    runs: list[dict[str, Any]] = []

    async def handler(args: Any, ctx: Any) -> str:
        runs.append(dict(args))
        return "ok"

    remote = Tool.from_handler("remote", "A server's tool.", schema, handler, destructive=True)
    model = ScriptedModel([ToolUseBlock(id="r", name="remote", input={"target": "asked"}), "ok"])
    agent = ReActAgent("bot", model=model, toolkit=Toolkit([remote]), state_store=InMemoryStateStore())
    await agent.call("go", CTX)
    answer = Msg.confirm([ConfirmResult(confirmed=True, tool_call=ToolUseBlock(id="r", name="remote", input=edit))])
    if refused:
        with pytest.raises(InvalidAnswerError):
            await agent.call(answer, CTX)
        assert runs == []
    else:
        await agent.call(answer, CTX)
        assert runs == [edit]
