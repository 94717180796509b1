"""Pipelines (sequential, fanout, route, loop) and MsgHub, driven by scripted models."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from inline_snapshot import snapshot

from agentrt import GenerateReason, Msg, ReActAgent, RuntimeContext, Toolkit, ToolUseBlock, tool
from agentrt import events as ev
from agentrt.errors import UserError
from agentrt.message import TextBlock, TokenUsage, ToolResultBlock
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.permission import ConfirmResult
from agentrt.pipeline import Composite, MsgHub, RouteSelected, fanout, handoff, loop, route, sequential
from agentrt.state import InMemoryStateStore

CTX = RuntimeContext(user_id="u", session_id="s")


class Boom(Exception):
    pass


@tool(destructive=True)
async def wipe(path: str) -> str:
    """Delete a path."""
    return f"wiped {path}"


def agent(
    name: str,
    reply: Callable[[ModelRequest], Any] | str | None = None,
    *,
    store: InMemoryStateStore | None = None,
    **kwargs: Any,
) -> ReActAgent:
    """An agent whose model answers ``reply(request)`` (default: ``"<name>(<last user text>)"``)."""
    if reply is None:

        def reply(request: ModelRequest) -> str:
            return f"{name}({request.last_user_text})"

    model = ScriptedModel([reply], repeat=True) if isinstance(reply, str) else ScriptedModel.from_function(reply)
    return ReActAgent(name, f"You are {name}.", model=model, state_store=store or InMemoryStateStore(), **kwargs)


def model_of(a: ReActAgent) -> ScriptedModel:
    model = a.model
    assert isinstance(model, ScriptedModel)
    return model


def last_input(a: ReActAgent) -> Msg:
    return model_of(a).requests[-1].messages[-1]


# -- sequential ---------------------------------------------------------------------------------------------
async def test_sequential_feeds_each_reply_to_the_next_and_returns_the_last() -> None:
    a, b, c = agent("a"), agent("b"), agent("c")
    reply = await sequential([a, b, c]).call("x", CTX)
    assert reply.text == "c(b(a(x)))"
    assert reply.name == "c"
    handed = last_input(b)
    # The previous reply arrives as a user message named after its speaker, text unchanged.
    assert (handed.role, handed.name, handed.text) == ("user", "a", "a(x)")
    assert last_input(c).text == "b(a(x))"


async def test_sequential_members_keep_isolated_sessions_that_continue() -> None:
    store = InMemoryStateStore()
    a, b = agent("a", store=store), agent("b", store=store)
    pipe = sequential([a, b], name="pipe")
    await pipe.call("one", CTX)
    await pipe.call("two", CTX)
    a_state = await a.get_state("u", "s/a")
    b_state = await b.get_state("u", "s/b")
    assert [m.text for m in a_state.messages] == ["one", "a(one)", "two", "a(two)"]
    assert [m.text for m in b_state.messages] == ["a(one)", "b(a(one))", "a(two)", "b(a(two))"]
    assert (await a.get_state("u", "s")).messages == []  # nothing lands in the caller's session
    # The second call's request shows the member's own earlier turn.
    assert [m.text for m in model_of(b).requests[-1].messages if m.role != "system"][:2] == ["a(one)", "b(a(one))"]


async def test_sequential_shared_session_puts_every_member_in_the_callers_session() -> None:
    store = InMemoryStateStore()
    a, b = agent("a", store=store), agent("b", store=store)
    await sequential([a, b], shared_session=True).call("x", CTX)
    # The caller's session id for every member; each agent keeps its own state there.
    assert [m.text for m in (await a.get_state("u", "s")).messages] == ["x", "a(x)"]
    assert [m.text for m in (await b.get_state("u", "s")).messages] == ["a(x)", "b(a(x))"]


async def test_sequential_stops_at_a_paused_member_and_the_answer_resumes_the_rest() -> None:
    def plan(request: ModelRequest) -> Any:
        if any(m.role == "user" and m.blocks(ToolResultBlock) for m in request.messages[-1:]):
            return "cleaned"
        return ToolUseBlock(id="w1", name="wipe", input={"path": "/tmp/x"})

    a = agent("a")
    b = agent("b", plan)
    b.toolkit = Toolkit([wipe])
    c = agent("c")
    pipe = sequential([a, b, c])
    paused = await pipe.call("tidy", CTX)
    assert paused.generate_reason is GenerateReason.AWAITING_CONFIRMATION
    assert paused.name == "b"
    assert model_of(c).requests == []  # c never ran
    reply = await pipe.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call="w1")]), CTX)
    assert reply.text == "c(cleaned)"
    assert len(model_of(a).requests) == 1  # the answer went to b, not back to the start


async def test_interrupting_a_sequential_stops_the_running_member_and_the_rest() -> None:
    started = asyncio.Event()

    async def slow(request: ModelRequest) -> str:
        started.set()
        await asyncio.sleep(30)
        return "never"

    a, b, c = agent("a"), agent("b", slow), agent("c")
    pipe = sequential([a, b, c])
    task = asyncio.create_task(pipe.call("go", CTX))
    await started.wait()
    assert pipe.interrupt(CTX)
    reply = await task
    assert reply.generate_reason is GenerateReason.INTERRUPTED
    assert reply.name == "b"
    assert model_of(c).requests == []
    assert not pipe.interrupt(CTX)  # nothing runs any more


async def test_sequential_reply_carries_the_usage_of_every_member() -> None:
    usage = TokenUsage(input_tokens=10, output_tokens=2)
    a = ReActAgent("a", model=ScriptedModel(["A"], usage=usage), state_store=InMemoryStateStore())
    b = ReActAgent("b", model=ScriptedModel(["B"], usage=usage), state_store=InMemoryStateStore())
    reply = await sequential([a, b]).call("x", CTX)
    assert reply.usage == TokenUsage(input_tokens=20, output_tokens=4)


# -- fanout -------------------------------------------------------------------------------------------------
def gated(name: str, started: asyncio.Barrier, release: asyncio.Event, answered: asyncio.Event) -> ReActAgent:
    """An agent whose model call waits at ``started`` with the others, then until ``release`` is set."""

    async def reply(request: ModelRequest) -> str:
        async with asyncio.timeout(5):
            await started.wait()
            await release.wait()
        answered.set()
        return f"{name}({request.last_user_text})"

    return agent(name, reply)


async def test_fanout_runs_members_in_parallel_and_returns_replies_in_member_order() -> None:
    names = ("slow", "fast", "mid")
    started = asyncio.Barrier(len(names) + 1)  # the members and this test
    release = {name: asyncio.Event() for name in names}
    answered = {name: asyncio.Event() for name in names}
    call = asyncio.create_task(fanout([gated(n, started, release[n], answered[n]) for n in names]).call("q", CTX))
    async with asyncio.timeout(5):
        await started.wait()  # all three were running at the same time
        for name in ("fast", "mid", "slow"):  # they finish in another order than the members'
            release[name].set()
            await answered[name].wait()
            assert not call.done()
    replies = await call
    assert [r.text for r in replies] == ["slow(q)", "fast(q)", "mid(q)"]


async def test_fanout_respects_max_concurrency() -> None:
    active = peak = 0
    two_in = asyncio.Event()

    async def reply(request: ModelRequest) -> str:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        if active == 2:
            two_in.set()
        async with asyncio.timeout(5):
            await two_in.wait()  # hold the slot until the cap is reached
        for _ in range(5):
            await asyncio.sleep(0)  # yield: a member past the cap would start now
        active -= 1
        return "ok"

    members = [agent(f"m{i}", reply) for i in range(5)]
    replies = await fanout(members, max_concurrency=2).call("q", CTX)
    assert len(replies) == 5
    assert peak == 2


async def test_fanout_members_run_in_their_own_sessions() -> None:
    store = InMemoryStateStore()
    a, b = agent("a", store=store), agent("b", store=store)
    await fanout([a, b], name="panel").call("q", CTX)
    assert [m.text for m in (await a.get_state("u", "s/a")).messages] == ["q", "a(q)"]
    assert [m.text for m in (await b.get_state("u", "s/b")).messages] == ["q", "b(q)"]


async def test_fanout_gather_function_sync_and_async() -> None:
    a, b = agent("a"), agent("b")
    joined = await fanout([a, b], gather=lambda rs: " + ".join(r.text for r in rs)).call("q", CTX)
    assert joined.text == "a(q) + b(q)"

    async def vote(replies: list[Msg]) -> Msg:
        return Msg.assistant(max(r.text for r in replies), name="judge")

    best = await fanout([a, b], gather=vote).call("q", CTX)
    assert (best.text, best.name) == ("b(q)", "judge")


async def test_fanout_gather_agent_receives_the_replies_labelled_with_their_speakers() -> None:
    store = InMemoryStateStore()
    a, b = agent("a", store=store), agent("b", store=store)

    def summarise(request: ModelRequest) -> str:
        return " & ".join(m.text for m in request.messages if m.role == "user")

    summariser = agent("summariser", summarise, store=store)
    reply = await fanout([a, b], gather=summariser).call("q", CTX)
    assert reply.text == "a: a(q) & b: b(q)"
    inputs = [m for m in model_of(summariser).requests[-1].messages if m.role == "user"]
    assert [(m.name, m.role) for m in inputs] == [("a", "user"), ("b", "user")]
    assert (await summariser.get_state("u", "s/summariser")).messages[-1].text == reply.text


async def test_fanout_error_cancels_the_others_and_propagates() -> None:
    finished: list[str] = []
    slow_started = asyncio.Event()
    slow_cancelled = asyncio.Event()

    async def slow(request: ModelRequest) -> str:
        slow_started.set()
        try:
            await asyncio.sleep(30)  # stands for a long model call; only ever ends by cancellation
        except asyncio.CancelledError:
            slow_cancelled.set()
            raise
        finished.append("slow")
        return "late"

    async def broken(request: ModelRequest) -> str:
        async with asyncio.timeout(5):
            await slow_started.wait()
        raise Boom("model exploded")

    slow_agent = agent("slow", slow)
    with pytest.raises(Exception, match="model exploded"):
        await fanout([slow_agent, agent("broken", broken)]).call("q", CTX)
    assert slow_cancelled.is_set()  # the slow member was cancelled, not awaited
    assert finished == []
    # The cancelled member checkpointed its input before stopping.
    assert [m.text for m in (await slow_agent.get_state("u", "s/slow")).messages] == ["q"]


async def test_fanout_return_exceptions_turns_errors_into_replies() -> None:
    def broken(request: ModelRequest) -> str:
        raise Boom("no luck")

    replies = await fanout([agent("ok"), agent("bad", broken)], return_exceptions=True).call("q", CTX)
    assert replies[0].text == "ok(q)"
    assert replies[1].name == "bad"
    assert "no luck" in replies[1].text
    assert replies[1].metadata["error"]["message"].endswith("no luck")


async def test_fanout_stream_ends_with_a_combined_reply(collect: Any) -> None:
    a, b = agent("a"), agent("b")
    events = await collect(fanout([a, b], name="panel").stream_events("q", CTX))
    assert {e.source for e in events if isinstance(e, ev.TextDelta)} == {"a", "b"}
    end = events[-1]
    assert isinstance(end, ev.RunFinished) and end.source == "panel"
    assert end.msg.text == "a: a(q)\nb: b(q)"
    assert [m.text for m in end.msg.metadata["replies"]] == ["a(q)", "b(q)"]


# -- route --------------------------------------------------------------------------------------------------
async def test_route_by_function_with_and_without_ctx() -> None:
    billing, tech = agent("billing"), agent("tech")
    by_words = route(
        lambda msgs: "billing" if "invoice" in msgs[-1].text else "tech", {"billing": billing, "tech": tech}
    )
    assert (await by_words.call("my invoice is wrong", CTX)).text == "billing(my invoice is wrong)"
    assert (await by_words.call("the app crashes", CTX)).text == "tech(the app crashes)"

    async def by_user(msgs: list[Msg], ctx: RuntimeContext) -> str:
        return "tech" if ctx.user_id == "u" else "billing"

    reply = await route(by_user, {"billing": billing, "tech": tech}).call("hello", CTX)
    assert reply.text == "tech(hello)"
    assert reply.metadata["route"] == "tech"


async def test_route_by_agent_reply_and_structured_output(collect: Any) -> None:
    store = InMemoryStateStore()
    classifier = agent("classifier", lambda r: "Category: **Billing**.", store=store)
    billing, tech = agent("billing", store=store), agent("tech", store=store)
    router = route(classifier, {"billing": billing, "tech": tech})
    events = await collect(router.stream_events("refund please", CTX))
    [chosen] = [e for e in events if isinstance(e, RouteSelected)]
    assert (chosen.label, chosen.target, chosen.source) == ("billing", "billing", "route")
    assert events[-1].msg.text == "billing(refund please)"
    # The target got the caller's input, not the classifier's answer.
    assert last_input(billing).text == "refund please"
    assert model_of(tech).requests == []
    assert (await classifier.get_state("u", "s/classifier")).messages[-1].text == "Category: **Billing**."


async def test_route_unknown_label_uses_default_or_names_the_labels() -> None:
    billing, fallback = agent("billing"), agent("fallback")
    with_default = route(lambda m: "sales", {"billing": billing}, default=fallback)
    assert (await with_default.call("hi", CTX)).text == "fallback(hi)"
    strict = route(lambda m: "sales", {"billing": billing, "tech": agent("tech")})
    with pytest.raises(UserError, match=r"'sales'.*'billing', 'tech'"):
        await strict.call("hi", CTX)


# -- loop ---------------------------------------------------------------------------------------------------
async def test_loop_refeeds_the_reply_until_the_predicate_holds() -> None:
    counter = agent("counter", lambda r: str(int(r.last_user_text) + 1))
    reply = await loop(counter, until=lambda m: int(m.text) >= 4).call("1", CTX)
    assert reply.text == "4"
    assert reply.metadata["loop"] == {"rounds": 3, "done": True}
    assert [r.messages[-1].text for r in model_of(counter).requests] == ["1", "2", "3"]


async def test_loop_stops_at_max_rounds_and_uses_feedback() -> None:
    writer = agent("writer")
    reply = await loop(writer, until=lambda m: False, max_rounds=2, feedback=lambda m: f"improve: {m.text}").call(
        "draft", CTX
    )
    assert reply.text == "writer(improve: writer(draft))"
    assert reply.metadata["loop"] == {"rounds": 2, "done": False}


async def test_loop_of_writer_and_critic_until_approved() -> None:
    def critic_says(request: ModelRequest) -> str:
        return "APPROVED" if "v3" in request.last_user_text else "needs work"

    drafts = iter(["v1", "v2", "v3"])
    writer = agent("writer", lambda r: next(drafts))
    critic = agent("critic", critic_says)
    reply = await loop(sequential([writer, critic]), until=lambda m: m.text == "APPROVED").call("write", CTX)
    assert reply.text == "APPROVED"
    assert reply.metadata["loop"]["rounds"] == 3
    assert [r.messages[-1].text for r in model_of(writer).requests] == ["write", "needs work", "needs work"]


# -- MsgHub (more in test_msghub_semantics.py) ------------------------------------------------------------------
def speaker(name: str, store: InMemoryStateStore | None = None) -> ReActAgent:
    """Replies with the names of the others it has heard so far (its own store unless one is given)."""

    def reply(request: ModelRequest) -> str:
        heard = [m.name or "?" for m in request.messages if m.role == "user"]
        return f"{name} heard {','.join(heard)}"

    return agent(name, reply, store=store)


async def test_msghub_participants_observe_each_others_replies_with_names() -> None:
    alice, bob, carol = speaker("alice"), speaker("bob"), speaker("carol")
    announcement = Msg.user("Topic: tabs or spaces?", name="moderator")
    async with MsgHub([alice, bob, carol], announcement=announcement, ctx=CTX) as hub:
        replies = await hub.round()
    assert [r.text for r in replies] == [
        "alice heard moderator",
        "bob heard moderator,alice",
        "carol heard moderator,alice,bob",
    ]
    carol_prompt = [m for m in model_of(carol).requests[-1].messages if m.role == "user"]
    assert [(m.name, m.text) for m in carol_prompt] == [
        ("moderator", "Topic: tabs or spaces?"),
        ("alice", "alice: alice heard moderator"),
        ("bob", "bob: bob heard moderator,alice"),
    ]
    # Each participant has its own state for the hub's session; its own reply stays an assistant message.
    alice_state = await alice.get_state("u", "s")
    assert [(m.role, m.name) for m in alice_state.messages] == [
        ("user", "moderator"),
        ("assistant", "alice"),
        ("user", "bob"),
        ("user", "carol"),
    ]


async def test_msghub_add_remove_broadcast_and_call() -> None:
    alice, bob, dave = speaker("alice"), speaker("bob"), speaker("dave")
    async with MsgHub([alice, bob], ctx=CTX) as hub:
        await hub.call(alice, "start")
        hub.remove(bob)
        hub.add(dave)
        assert [p.name for p in hub.participants] == ["alice", "dave"]
        await hub.broadcast(Msg.user("news", name="host"))
        reply = await hub.call("dave")
        assert reply.text == "dave heard host"  # dave joined after alice spoke
    bob_state = await bob.get_state("u", "s")
    assert [m.text for m in bob_state.messages] == ["alice: alice heard ?"]  # removed before the news
    alice_state = await alice.get_state("u", "s")
    assert [m.text for m in alice_state.messages][-2:] == ["news", "dave: dave heard host"]


async def test_msghub_rejects_duplicate_names_and_non_agents() -> None:
    with pytest.raises(UserError, match="named 'alice'"):
        MsgHub([speaker("alice"), speaker("alice")])
    with pytest.raises(UserError, match="participant"):
        MsgHub(["alice"])  # type: ignore[list-item]


async def test_msghub_shares_replies_of_participants_run_by_a_pipeline_without_duplicates() -> None:
    alice, bob, carol = speaker("alice"), speaker("bob"), speaker("carol")
    async with MsgHub([alice, bob, carol], ctx=CTX) as hub:
        reply = await sequential([alice, bob], shared_session=True).call("go", hub.ctx)
    assert reply.text == "bob heard alice"  # alice's reply reached bob once (observed, not re-sent as input)
    carol_state = await carol.get_state("u", "s")
    assert [m.name for m in carol_state.messages] == ["alice", "bob"]


async def test_msghub_stream_events_shares_the_reply_at_the_end(collect: Any) -> None:
    alice, bob = speaker("alice"), speaker("bob")
    async with MsgHub([alice, bob], ctx=CTX) as hub:
        events = await collect(hub.stream_events(alice, "hi"))
    assert events[-1].source == "alice"
    assert [m.text for m in (await bob.get_state("u", "s")).messages] == ["alice: alice heard ?"]


def test_handoff_drops_tool_calls_and_thinking() -> None:
    reply = Msg(role="assistant", content=[ToolUseBlock(id="t", name="x"), TextBlock(text="done")], name="a")
    passed = handoff(reply, label=True)
    assert (passed.role, passed.name, passed.text) == ("user", "a", "a: done")
    assert passed.tool_calls == []
    assert passed.metadata["reply_id"] == reply.id


# -- composition and the agent surface ----------------------------------------------------------------------
async def test_nested_fanout_inside_sequential() -> None:
    store = InMemoryStateStore()
    a, b = agent("a", store=store), agent("b", store=store)

    def summarise(request: ModelRequest) -> str:
        return "summary of " + " | ".join(m.text for m in request.messages if m.role == "user")

    summariser = agent("summariser", summarise, store=store)
    pipe = sequential([fanout([a, b], name="research"), summariser], name="report")
    reply = await pipe.call("topic", CTX)
    assert reply.text == "summary of a: a(topic) | b: b(topic)"
    assert (await a.get_state("u", "s/research/a")).messages[0].text == "topic"
    assert (await summariser.get_state("u", "s/summariser")).messages[-1].text == reply.text


async def test_stream_events_interleave_sources_and_end_with_the_composites_run_finished(collect: Any) -> None:
    a, b = agent("a"), agent("b")
    pipe = sequential([a, b], name="pipe")
    events = await collect(pipe.stream_events("x", CTX))
    assert isinstance(events[0], ev.RunStarted) and events[0].source == "pipe"
    finished = [e for e in events if isinstance(e, ev.RunFinished)]
    assert [e.source for e in finished] == ["a", "b", "pipe"]
    assert finished[-1].msg.text == "b(a(x))" == finished[1].msg.text
    assert len({e.reply_id for e in finished}) == 3
    # the whole stream: a runs and streams, then b, inside the composite's own run
    assert [(e.type, e.source, getattr(e, "delta", "")) for e in events] == snapshot(
        [
            ("run_started", "pipe", ""),
            ("run_started", "a", ""),
            ("model_call_started", "a", ""),
            ("text_delta", "a", "a(x)"),
            ("model_call_finished", "a", ""),
            ("run_finished", "a", ""),
            ("run_started", "b", ""),
            ("model_call_started", "b", ""),
            ("text_delta", "b", "b(a(x))"),
            ("model_call_finished", "b", ""),
            ("run_finished", "b", ""),
            ("run_finished", "pipe", ""),
        ]
    )


async def test_composite_stream_reports_member_errors() -> None:
    def broken(request: ModelRequest) -> str:
        raise Boom("bad")

    events: list[ev.AgentEvent] = []
    with pytest.raises(Exception, match="bad"):
        async for event in sequential([agent("ok"), agent("bad", broken)], name="pipe").stream_events("x", CTX):
            events.append(event)
    assert [e.source for e in events if isinstance(e, ev.RunError)] == ["bad", "pipe"]


def test_call_sync_of_a_composite() -> None:
    reply = sequential([agent("a"), agent("b")]).call_sync("x", CTX)
    assert reply.text == "b(a(x))"
    replies = fanout([agent("a"), agent("b")]).call_sync("x")
    assert [r.text for r in replies] == ["a(x)", "b(x)"]


async def test_call_sync_inside_an_event_loop_is_refused() -> None:
    with pytest.raises(UserError, match="running event loop"):
        sequential([agent("a")]).call_sync("x")


async def test_composite_as_a_tool_of_a_parent_agent(collect: Any) -> None:
    store = InMemoryStateStore()
    a, b = agent("a", store=store), agent("b", store=store)
    pipe = sequential([a, b], name="team", description="A two-step team.")

    def boss_plan(request: ModelRequest) -> Any:
        results = [blk for m in request.messages for blk in m.blocks(ToolResultBlock)]
        if results:
            return f"team said {results[-1].output}"
        return ToolUseBlock(id="t1", name="team", input={"task": "work"})

    boss = agent("boss", boss_plan, store=store)
    boss.toolkit = Toolkit([pipe.as_tool()])
    assert boss.toolkit.tools["team"].description == "A two-step team."
    events = await collect(boss.stream_events("go", CTX))
    assert events[-1].msg.text == "team said b(a(work))"
    assert {"a", "b", "team", "boss"} <= {e.source for e in events}
    assert (await a.get_state("u", "s/team/a")).messages[0].text == "work"


async def test_composite_observe_reaches_every_member() -> None:
    store = InMemoryStateStore()
    a, b = agent("a", store=store), agent("b", store=store)
    await fanout([a, b]).observe(Msg.user("fyi"), CTX)
    assert [m.text for m in (await a.get_state("u", "s/a")).messages] == ["fyi"]
    assert [m.text for m in (await b.get_state("u", "s/b")).messages] == ["fyi"]


def test_bad_arguments_are_user_errors() -> None:
    with pytest.raises(UserError, match="at least one"):
        sequential([])
    with pytest.raises(UserError, match="must be an agent"):
        sequential([lambda x: x])  # type: ignore[list-item]
    with pytest.raises(UserError, match="max_concurrency"):
        fanout([agent("a")], max_concurrency=0)
    with pytest.raises(UserError, match="max_rounds"):
        loop(agent("a"), until=lambda m: True, max_rounds=0)
    assert isinstance(route(lambda m: "a", {"a": agent("a")}), Composite)


# -- pauses in route, loop and fanout -----------------------------------------------------------------------
def wiper(name: str) -> ReActAgent:
    def plan(request: ModelRequest) -> Any:
        if request.messages[-1].blocks(ToolResultBlock):
            return f"{name} wiped"
        return ToolUseBlock(id=f"{name}-w", name="wipe", input={"path": "/tmp/x"})

    a = agent(name, plan)
    a.toolkit = Toolkit([wipe])
    return a


async def test_route_sends_the_answer_to_the_paused_target_without_classifying() -> None:
    calls: list[str] = []

    def classify(msgs: list[Msg]) -> str:
        calls.append(msgs[-1].text)
        return "ops"

    router = route(classify, {"ops": wiper("ops"), "chat": agent("chat")})
    paused = await router.call("clean", CTX)
    assert paused.generate_reason is GenerateReason.AWAITING_CONFIRMATION
    reply = await router.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call="ops-w")]), CTX)
    assert reply.text == "ops wiped"
    assert calls == ["clean"]


async def test_loop_ends_on_a_paused_reply_and_resumes_with_the_answer() -> None:
    worker = wiper("worker")
    looped = loop(worker, until=lambda m: "wiped" in m.text)
    paused = await looped.call("clean", CTX)
    assert paused.generate_reason is GenerateReason.AWAITING_CONFIRMATION
    assert paused.metadata["loop"] == {"rounds": 1, "done": False}
    reply = await looped.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call="worker-w")]), CTX)
    assert reply.text == "worker wiped"
    assert reply.metadata["loop"]["done"] is True


async def test_fanout_returns_a_paused_reply_skips_gather_and_points_at_the_member() -> None:
    ops = wiper("ops")
    fan = fanout([ops, agent("chat")], gather=lambda rs: "gathered")
    combined = await fan.call("clean", CTX)
    assert combined.generate_reason is GenerateReason.AWAITING_CONFIRMATION
    assert [p["id"] for p in combined.metadata["pending_tool_calls"]] == ["ops-w"]
    answer = Msg.confirm([ConfirmResult(confirmed=True, tool_call="ops-w")])
    with pytest.raises(UserError, match="answer it directly"):
        await fan.call(answer, CTX)
    assert (await ops.call(answer, fan.member_ctx(ops, CTX))).text == "ops wiped"


# -- hubs and delegation ------------------------------------------------------------------------------------
async def test_a_participant_delegating_to_a_pipeline_of_participants_does_not_deadlock() -> None:
    alice, carol = speaker("alice"), speaker("carol")
    team = sequential([alice], name="team", shared_session=True)

    def boss_plan(request: ModelRequest) -> Any:
        done = request.messages[-1].blocks(ToolResultBlock)
        if done:
            return f"boss: {done[0].text}"
        return ToolUseBlock(id="t", name="team", input={"task": "report"})

    boss = agent("boss", boss_plan)
    # alice works in the hub's own session: her reply is shared while boss's call (and lock) is running.
    boss.toolkit = Toolkit([team.as_tool(session=lambda ctx: ctx.key[1])])
    async with MsgHub([boss, alice, carol], ctx=CTX) as hub:
        reply = await asyncio.wait_for(hub.call(boss, "go"), 5)
    assert reply.text == "boss: alice heard ?"
    carol_heard = [m.name for m in (await carol.get_state("u", "s")).messages]
    assert carol_heard == ["alice", "boss"]
    boss_state = await boss.get_state("u", "s")  # boss has alice's reply as its tool result only
    assert [m.name for m in boss_state.messages if m.role == "user" and m.name] == []
    assert [m.text for m in (await alice.get_state("u", "s")).messages][-1] == "boss: boss: alice heard ?"


async def test_nested_stream_brackets_each_composite(collect: Any) -> None:
    pipe = sequential([fanout([agent("a"), agent("b")], name="panel"), agent("c")], name="pipe")
    events = await collect(pipe.stream_events("x", CTX))
    bracket = [(e.type, e.source) for e in events if isinstance(e, (ev.RunStarted, ev.RunFinished))]
    assert bracket[:2] == [("run_started", "pipe"), ("run_started", "panel")]
    assert bracket[-4:] == [
        ("run_finished", "panel"),
        ("run_started", "c"),
        ("run_finished", "c"),
        ("run_finished", "pipe"),
    ]
    assert {("run_started", "a"), ("run_started", "b")} <= set(bracket)


class Echo:
    """A minimal agent-like member (no AgentBase): `name`, `call`, `stream_events`."""

    def __init__(self, name: str, gate: asyncio.Event | None = None) -> None:
        self.name = name
        self.gate = gate
        self.started = asyncio.Event()

    async def call(self, input: Any = None, ctx: RuntimeContext | None = None) -> Msg:
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        text = input[-1].text if input else ""
        return Msg.assistant(f"{self.name}<{text}>", name=self.name)

    async def stream_events(self, input: Any = None, ctx: RuntimeContext | None = None) -> Any:
        reply = await self.call(input, ctx)
        yield ev.RunFinished(reply_id=reply.id, source=self.name, msg=reply)


async def test_custom_agent_like_members_and_an_interrupt_between_members(collect: Any) -> None:
    assert (await sequential([Echo("e1"), Echo("e2")]).call("x", CTX)).text == "e2<e1<x>>"
    events = await collect(sequential([Echo("e1"), Echo("e2")], name="p").stream_events("x", CTX))
    assert [e.source for e in events] == ["p", "e1", "e2", "p"]

    gate = asyncio.Event()
    first, second = Echo("first", gate), Echo("second")
    pipe = sequential([first, second], name="pipe")
    task = asyncio.create_task(pipe.call("x", CTX))
    await first.started.wait()
    assert pipe.interrupt(CTX, msg="stop now")  # first cannot be interrupted; the pipeline stops after it
    gate.set()
    reply = await task
    assert reply.generate_reason is GenerateReason.INTERRUPTED
    assert (reply.name, reply.text) == ("pipe", "")
    assert not second.started.is_set()
