"""`MsgHub` semantics (AgentScope's): who speaks where, who hears what, once, and when sharing stops.

Every participant has its own store, so each keeps its own state for the hub's session whether or
not the store addresses sessions by agent. Assertions read what each model received and what each
agent stored.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt import Msg, ReActAgent, RuntimeContext, Toolkit, ToolUseBlock, tool
from agentrt import events as ev
from agentrt.agent._scopes import SCOPES
from agentrt.errors import UserError
from agentrt.message import ToolResultBlock
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.pipeline import MsgHub, fanout, sequential
from agentrt.state import InMemoryStateStore

CTX = RuntimeContext(user_id="u", session_id="hub")
OTHER = RuntimeContext(user_id="u", session_id="elsewhere")
DEFAULT = RuntimeContext()
Line = tuple[str, str | None, str]  # (role, name, text)


class Boom(Exception):
    pass


def member(name: str, answer: Callable[[ModelRequest], Any] | None = None) -> ReActAgent:
    """An agent with a store of its own whose model answers ``"<name> #<n>"`` (n counts its calls)."""
    if answer is None:
        count = itertools.count(1)

        def answer(request: ModelRequest) -> str:
            return f"{name} #{next(count)}"

    model = ScriptedModel.from_function(answer)
    return ReActAgent(name, f"You are {name}.", model=model, state_store=InMemoryStateStore())


async def history(agent: ReActAgent, ctx: RuntimeContext = CTX) -> list[Line]:
    """What `agent` stored for the session of `ctx`."""
    state = await agent.get_state(*ctx.key)
    return [(m.role, m.name, m.text) for m in state.messages]


def received(agent: ReActAgent, index: int = -1) -> list[Line]:
    """The conversation `agent`'s model received in one request (system prompt left out)."""
    model = agent.model
    assert isinstance(model, ScriptedModel)
    return [(m.role, m.name, m.text) for m in model.requests[index].messages if m.role != "system"]


def heard(speaker: str, text: str) -> Line:
    """How a reply looks to the others."""
    return ("user", speaker, f"{speaker}: {text}")


# -- speaking in the hub's ctx --------------------------------------------------------------------------------
async def test_a_plain_call_inside_the_block_runs_in_the_hubs_ctx_and_is_heard_before_it_returns() -> None:
    a, b, c = member("a"), member("b"), member("c")
    async with MsgHub([a, b, c], ctx=CTX) as hub:
        assert hub.ctx_for(a) is CTX
        reply = await a.call("hi")
        assert reply.text == "a #1"
        assert await history(b) == [heard("a", "a #1")]  # already stored when the call returned
        assert await history(c) == [heard("a", "a #1")]
        await b.call("go", CTX)  # the hub's ctx, given explicitly: the same
    assert await history(a) == [("user", None, "hi"), ("assistant", "a", "a #1"), heard("b", "b #1")]
    assert received(b) == [heard("a", "a #1"), ("user", None, "go")]
    assert await history(c) == [heard("a", "a #1"), heard("b", "b #1")]
    assert await history(a, DEFAULT) == []  # nothing ran in the default session


async def test_the_announcement_is_heard_on_entry_and_broadcasts_by_current_participants() -> None:
    a, b, outsider = member("a"), member("b"), member("outsider")
    topic = Msg.user("Topic: tabs or spaces?", name="moderator")
    async with MsgHub([a, b], announcement=topic, ctx=CTX) as hub:
        assert await history(a) == await history(b) == [("user", "moderator", "Topic: tabs or spaces?")]
        await hub.broadcast(Msg.user("Two minutes each.", name="moderator"))
        await a.call()
    assert received(a) == [
        ("user", "moderator", "Topic: tabs or spaces?"),
        ("user", "moderator", "Two minutes each."),
    ]
    assert (await history(b))[-1] == heard("a", "a #1")
    assert await history(outsider) == []


async def test_add_and_remove_mid_conversation() -> None:
    a, b, c = member("a"), member("b"), member("c")
    async with MsgHub([a, b], ctx=CTX) as hub:
        await a.call("start")
        hub.add(c)
        assert await history(c) == []  # hears from now on only
        await b.call()
        assert await history(c) == [heard("b", "b #1")]
        hub.remove(a)
        await c.call()
        assert heard("c", "c #1") not in await history(a)  # a stopped hearing
        before = (await history(b), await history(c))
        await a.call("psst")  # no longer a participant: runs in its default session, heard by nobody
        await a.call("psst", CTX)  # in the hub's ctx, still private
        assert (await history(b), await history(c)) == before
        hub.remove("b")
        assert hub.participants == (c,)
    assert await history(a) == [
        ("user", None, "start"),
        ("assistant", "a", "a #1"),
        heard("b", "b #1"),
        ("user", None, "psst"),
        ("assistant", "a", "a #3"),
    ]
    assert await history(a, DEFAULT) == [("user", None, "psst"), ("assistant", "a", "a #2")]


async def test_a_call_in_another_ctx_is_private() -> None:
    a, b = member("a"), member("b")
    async with MsgHub([a, b], ctx=CTX):
        await a.call("secret", OTHER)
    assert await history(a, OTHER) == [("user", None, "secret"), ("assistant", "a", "a #1")]
    assert await history(b) == await history(b, OTHER) == []


async def test_an_outsider_speaking_through_the_hub_is_heard_but_does_not_join() -> None:
    a, b, moderator = member("a"), member("b"), member("moderator")
    async with MsgHub([a, b], ctx=CTX) as hub:
        await hub.call(moderator, "Open the floor.")
        await moderator.call("aside")  # not a participant: its default session, private
    assert await history(a) == await history(b) == [heard("moderator", "moderator #1")]
    assert await history(moderator, DEFAULT) == [("user", None, "aside"), ("assistant", "moderator", "moderator #2")]


# -- when sharing stops -----------------------------------------------------------------------------------------
async def test_leaving_the_block_stops_all_sharing() -> None:
    a, b = member("a"), member("b")
    hub = MsgHub([a, b], ctx=CTX)
    async with hub:
        await a.call("inside")
    assert SCOPES.get() == ()
    before = await history(b)
    await a.call("after")  # plain: the default session
    await a.call("after", CTX)  # the hub's session: a's own, heard by nobody
    assert await history(b) == before == [heard("a", "a #1")]
    assert await history(a, DEFAULT) == [("user", None, "after"), ("assistant", "a", "a #2")]
    assert (await history(a))[-2:] == [("user", None, "after"), ("assistant", "a", "a #3")]
    for use in (hub.broadcast("late"), hub.call(a, "late"), hub.round()):
        with pytest.raises(UserError, match="outside its block"):
            await use


async def test_leaving_on_an_exception_stops_sharing() -> None:
    a, b = member("a"), member("b")
    with pytest.raises(Boom):
        async with MsgHub([a, b], ctx=CTX):
            await a.call("x")
            raise Boom
    assert SCOPES.get() == ()
    await a.call("y", CTX)
    assert await history(b) == [heard("a", "a #1")]


async def test_entering_twice_raises_and_a_hub_left_in_another_task_shares_nothing() -> None:
    a, b = member("a"), member("b")
    hub = MsgHub([a, b], ctx=CTX)
    async with hub:
        with pytest.raises(UserError, match="already entered"):
            await hub.__aenter__()
        await a.call("x")
    await hub.__aenter__()  # entered here, left in another task
    await asyncio.create_task(hub.__aexit__(None, None, None))
    assert any(s is hub for s in SCOPES.get())  # that task could not touch this context ...
    await a.call("y")  # ... but the hub is closed: a runs in its default session, b hears nothing
    assert SCOPES.get() == ()  # and dropped from this context on first use
    await a.call("z", CTX)
    assert await history(b) == [heard("a", "a #1")]
    assert await history(a, DEFAULT) == [("user", None, "y"), ("assistant", "a", "a #2")]


# -- nesting ---------------------------------------------------------------------------------------------------
async def test_nested_hubs_deliver_a_reply_once_to_each_enclosing_participant() -> None:
    a, b, c = member("a"), member("b"), member("c")
    async with MsgHub([a, b, c], ctx=CTX, name="outer"):
        async with MsgHub([a, b], ctx=CTX, name="inner"):
            await a.call("x")
            assert await history(b) == [heard("a", "a #1")]
            assert await history(c) == [heard("a", "a #1")]
            await c.call()  # c speaks in the outer hub only
        await b.call()  # the inner hub is closed; the outer one still shares
    assert await history(a) == [
        ("user", None, "x"),
        ("assistant", "a", "a #1"),
        heard("c", "c #1"),
        heard("b", "b #1"),
    ]
    assert received(b) == [heard("a", "a #1"), heard("c", "c #1")]
    assert await history(c) == [heard("a", "a #1"), ("assistant", "c", "c #1"), heard("b", "b #1")]


async def test_nested_hubs_in_different_ctxs_share_only_in_the_ctx_of_the_call() -> None:
    a, b, c = member("a"), member("b"), member("c")
    async with MsgHub([a, b, c], ctx=CTX), MsgHub([a, b], ctx=OTHER):
        await a.call("x")  # the innermost hub holding a: OTHER
        await a.call("y", CTX)  # the outer hub's ctx: heard there
    assert await history(b, OTHER) == [heard("a", "a #1")]
    assert await history(b) == await history(c) == [heard("a", "a #2")]
    assert await history(c, OTHER) == []


# -- streaming ---------------------------------------------------------------------------------------------------
async def test_stream_events_inside_the_block_is_heard_once() -> None:
    a, b = member("a"), member("b")
    async with MsgHub([a, b], ctx=CTX) as hub:
        events = [e async for e in a.stream_events("x")]
        assert isinstance(events[-1], ev.RunFinished)
        assert events[-1].session_id == "hub"
        assert await history(b) == [heard("a", "a #1")]
        events = [e async for e in hub.stream_events(b, "y")]
        assert events[-1].source == "b"
    assert await history(a) == [("user", None, "x"), ("assistant", "a", "a #1"), heard("b", "b #1")]
    assert received(b) == [heard("a", "a #1"), ("user", None, "y")]


# -- composites as participants ------------------------------------------------------------------------------------
async def test_a_pipeline_participant_speaks_as_one_and_its_members_listen_in_their_sessions() -> None:
    writer, editor, reader = member("writer"), member("editor"), member("reader")
    team = sequential([writer, editor], name="team")
    async with MsgHub([team, reader], ctx=CTX):
        reply = await team.call("draft")  # plain: the hub's ctx; the members work in hub/writer, hub/editor
        await reader.call()
    assert reply.text == "editor #1"
    assert await history(reader) == [heard("editor", "editor #1"), ("assistant", "reader", "reader #1")]
    writer_ctx, editor_ctx = team.member_ctx(writer, CTX), team.member_ctx(editor, CTX)
    assert await history(writer, writer_ctx) == [
        ("user", None, "draft"),
        ("assistant", "writer", "writer #1"),
        heard("reader", "reader #1"),
    ]
    assert await history(editor, editor_ctx) == [
        ("user", "writer", "writer #1"),
        ("assistant", "editor", "editor #1"),  # its reply is not echoed back into its session
        heard("reader", "reader #1"),
    ]
    assert await history(writer) == await history(editor) == []


async def test_members_running_in_the_hubs_ctx_take_part_without_duplicates() -> None:
    writer, editor, reader = member("writer"), member("editor"), member("reader")
    team = sequential([writer, editor], name="team", shared_session=True)
    async with MsgHub([team, reader], ctx=CTX) as hub:
        reply = await hub.call(team, "draft")
    assert reply.text == "editor #1"
    # The editor heard the writer through the hub, so the pipeline did not hand it over again.
    assert received(editor) == [heard("writer", "writer #1")]
    assert await history(editor) == [heard("writer", "writer #1"), ("assistant", "editor", "editor #1")]
    assert await history(writer) == [
        ("user", None, "draft"),
        ("assistant", "writer", "writer #1"),
        heard("editor", "editor #1"),
    ]
    # The team's reply is the editor's: shared once.
    assert await history(reader) == [heard("writer", "writer #1"), heard("editor", "editor #1")]


async def test_a_fanout_participant_is_heard_as_the_replies_it_combines() -> None:
    x, y, reader = member("x"), member("y"), member("reader")
    async with MsgHub([fanout([x, y], name="panel"), reader], ctx=CTX) as hub:
        await hub.call("panel", "q")
    assert await history(reader) == [heard("x", "x #1"), heard("y", "y #1")]


# -- delegation --------------------------------------------------------------------------------------------------
async def test_a_participant_whose_tool_calls_another_does_not_observe_while_its_call_runs() -> None:
    alice, carol = member("alice"), member("carol")

    @tool
    async def ask_alice(question: str) -> str:
        """Ask alice."""
        return (await alice.call(question)).text  # plain: inside the hub, alice speaks in its ctx

    def boss_plan(request: ModelRequest) -> Any:
        results = request.messages[-1].blocks(ToolResultBlock)
        if results:
            return f"alice says {results[0].text}"
        return ToolUseBlock(id="t1", name="ask_alice", input={"question": "status?"})

    boss = member("boss", boss_plan)
    boss.toolkit = Toolkit([ask_alice])
    async with MsgHub([boss, alice, carol], ctx=CTX):
        reply = await asyncio.wait_for(boss.call("go"), 5)
    assert reply.text == "alice says alice #1"
    assert await history(carol) == [heard("alice", "alice #1"), heard("boss", "alice says alice #1")]
    assert [line for line in await history(boss) if line[1] == "alice"] == []  # only as its tool result
    assert await history(alice) == [
        ("user", None, "status?"),
        ("assistant", "alice", "alice #1"),
        heard("boss", "alice says alice #1"),
    ]


async def test_delegation_two_levels_deep_does_not_deadlock() -> None:
    alice, carol = member("alice"), member("carol")

    def delegate(to: ReActAgent) -> Any:
        @tool(name=f"ask_{to.name}")
        async def ask(question: str) -> str:
            """Ask a colleague."""
            return (await to.call(question)).text

        def plan(request: ModelRequest) -> Any:
            results = request.messages[-1].blocks(ToolResultBlock)
            if results:
                return f"{to.name} says {results[0].text}"
            return ToolUseBlock(id="t1", name=f"ask_{to.name}", input={"question": "status?"})

        return plan, Toolkit([ask])

    bob_plan, bob_tools = delegate(alice)
    bob = member("bob", bob_plan)
    bob.toolkit = bob_tools
    boss_plan, boss_tools = delegate(bob)
    boss = member("boss", boss_plan)
    boss.toolkit = boss_tools
    async with MsgHub([boss, bob, alice, carol], ctx=CTX):
        reply = await asyncio.wait_for(boss.call("go"), 5)
    assert reply.text == "bob says alice says alice #1"
    assert await history(carol) == [
        heard("alice", "alice #1"),
        heard("bob", "alice says alice #1"),
        heard("boss", "bob says alice says alice #1"),
    ]
    # boss was busy with the call that produced both replies: it has them as tool results only.
    assert [line for line in await history(boss) if line[1] in ("alice", "bob")] == []


# -- a reference model -------------------------------------------------------------------------------------------
NAMES = ("a", "b", "c", "d")
steps = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["add", "remove"]), st.integers(0, len(NAMES) - 1)),
        st.tuples(st.just("broadcast"), st.integers(0, 99)),
        st.tuples(
            st.just("call"),
            st.integers(0, len(NAMES) - 1),
            st.sampled_from(["plain", "hub_ctx", "hub.call", "stream", "other_ctx"]),
        ),
    ),
    max_size=14,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(initial=st.sets(st.integers(0, len(NAMES) - 1)), script=steps)
def test_stored_histories_follow_a_reference_model(initial: set[int], script: list[tuple[Any, ...]]) -> None:
    """Each agent's history in the hub's session equals what a simple model of the rules predicts."""

    async def scenario() -> None:
        agents = [member(n) for n in NAMES]
        calls = [0] * len(NAMES)
        expected: dict[str, list[Line]] = {n: [] for n in NAMES}
        inside: list[int] = sorted(initial)

        def say(i: int, text: str, shared: bool) -> None:
            calls[i] += 1
            reply = f"{NAMES[i]} #{calls[i]}"
            expected[NAMES[i]] += [("user", None, text), ("assistant", NAMES[i], reply)]
            if shared:
                for j in inside:
                    if j != i:
                        expected[NAMES[j]].append(heard(NAMES[i], reply))

        async with MsgHub([agents[i] for i in inside], ctx=CTX) as hub:
            for n, step in enumerate(script):
                kind, i = step[0], step[1]
                if kind == "add":
                    hub.add(agents[i])
                    inside += [] if i in inside else [i]
                elif kind == "remove":
                    hub.remove(agents[i])
                    inside = [j for j in inside if j != i]
                elif kind == "broadcast":
                    await hub.broadcast(Msg.user(f"news {i}", name="host"))
                    for j in inside:
                        expected[NAMES[j]].append(("user", "host", f"news {i}"))
                else:
                    agent, mode, text = agents[i], step[2], f"turn {n}"
                    before = list(expected[NAMES[i]])
                    if mode == "plain":
                        await agent.call(text)
                    elif mode == "hub_ctx":
                        await agent.call(text, CTX)
                    elif mode == "hub.call":
                        await hub.call(agent, text)
                    elif mode == "stream":
                        _ = [e async for e in agent.stream_events(text, CTX)]
                    else:
                        await agent.call(text, OTHER)
                    in_hub = mode in ("hub_ctx", "hub.call", "stream") or (mode == "plain" and i in inside)
                    if in_hub:
                        assert received(agent) == [*before, ("user", None, text)]
                        say(i, text, shared=i in inside or mode == "hub.call")
                    else:
                        calls[i] += 1  # a private call elsewhere
        for i, agent in enumerate(agents):  # after the block nothing is shared
            await agent.call("after", CTX)
            expected[NAMES[i]] += [("user", None, "after"), ("assistant", NAMES[i], f"{NAMES[i]} #{calls[i] + 1}")]
        for name, agent in zip(NAMES, agents, strict=True):
            assert await history(agent) == expected[name], name

    asyncio.run(scenario())
