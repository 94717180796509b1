"""The conformance suite every `AgentStateStore` backend must pass (`agentrt.testing.check_state_store`)."""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from agentrt.errors import SessionBusyError, StateConflictError
from agentrt.message import (
    Base64Source,
    ImageBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    TokenUsage,
    ToolResultBlock,
    ToolUseBlock,
)
from agentrt.state.base import AgentState, AgentStateStore

__all__ = ["check_state_store"]

StoreFactory = Callable[[], "AgentStateStore | Awaitable[AgentStateStore]"]


async def _make(factory: StoreFactory) -> AgentStateStore:
    store = factory()
    if inspect.isawaitable(store):
        store = await store
    return store


def _sample_messages(tag: str) -> list[Msg]:
    call = ToolUseBlock(id=f"call-{tag}", name="search", input={"q": "naïve café ☕", "n": [1, 2, {"deep": None}]})
    return [
        Msg.user(f"hello {tag} — 你好", name="alice"),
        Msg(
            role="assistant",
            content=[ThinkingBlock(thinking="let me look", signature="sig=="), TextBlock(text="searching"), call],
            name="bot",
            metadata={"finish_reason": "tool_calls", "nested": {"a": [1, 2.5, True]}},
            usage=TokenUsage(input_tokens=12, output_tokens=3, cache_read_tokens=4),
        ),
        Msg(
            role="user",
            content=[
                ToolResultBlock(
                    id=call.id,
                    name="search",
                    output=[
                        TextBlock(text="result"),
                        ImageBlock(source=Base64Source(media_type="image/png", data="iVBO")),
                    ],
                    state="success",
                )
            ],
        ),
        Msg.assistant(f"done {tag}", name="bot"),
    ]


async def _expect_conflict(action: Awaitable[Any], what: str) -> None:
    try:
        await action
    except StateConflictError:
        return
    raise AssertionError(f"{what}: expected StateConflictError")


async def check_state_store(factory: StoreFactory, *, persistent: bool = False) -> None:
    """Run the store contract against stores made by `factory` (sync or async, returning a fresh store).

    With ``persistent=True`` a second store made by `factory` must see what the first one wrote
    (files, databases, Redis). Raises AssertionError naming the first broken rule. Every check
    uses its own random user ids, so the suite can run against a shared database.
    """
    store = await _make(factory)
    try:
        await _run_checks(store, factory, persistent)
    finally:
        await store.close()
        await store.close()  # closing twice must be harmless


async def _run_checks(store: AgentStateStore, factory: StoreFactory, persistent: bool) -> None:
    run = uuid.uuid4().hex[:8]
    user = f"user-{run}"
    other = f"other-{run}"

    # a missing session
    assert await store.load(user, "nope") is None, "load of a missing session must return None"

    # create by appending at revision 0, read back exactly
    msgs = _sample_messages("a")
    rev = await store.append(user, "s1", msgs[:2], expected_revision=0)
    assert rev == 1, f"first append must give revision 1, got {rev}"
    state = await store.load(user, "s1")
    assert state is not None, "appended session must load"
    assert (state.user_id, state.session_id, state.revision) == (user, "s1", 1), "ids and revision must round-trip"
    assert state.messages == msgs[:2], "messages must round-trip exactly (ids, blocks, metadata, usage, timestamps)"

    # stale revision
    await _expect_conflict(store.append(user, "s1", msgs[2:], expected_revision=0), "append with a stale revision")
    await _expect_conflict(store.append(user, "new", msgs, expected_revision=3), "append to a missing session at rev 3")
    state = await store.load(user, "s1")
    assert state is not None and len(state.messages) == 2, "a rejected append must not change the session"

    # incremental append with fields
    fields: dict[str, Any] = {
        "summary": "the user said hello",
        "summary_index": 1,
        "rules": [{"tool": "search", "decision": "allow", "source": "session"}],
        "pending": {"reply_id": "r1", "calls": [{"id": "x", "name": "search", "input": {}, "kind": "confirm"}]},
        "active_groups": ["web"],
        "tool_state": {"counters": {"search": 2}},
        "tasks": [{"content": "write report", "status": "in_progress"}],
        "metadata": {"title": "Greeting"},
    }
    rev = await store.append(user, "s1", msgs[2:], fields=fields, expected_revision=1)
    assert rev == 2, f"second append must give revision 2, got {rev}"
    state = await store.load(user, "s1")
    assert state is not None
    assert state.messages == msgs, "appended messages must follow the earlier ones in order"
    for name, value in fields.items():
        got = getattr(state, name)
        got = list(got) if isinstance(got, tuple) else got
        assert got == value, f"field {name!r} must round-trip: {got!r} != {value!r}"
    rev = await store.append(user, "s1", [], fields={"pending": None}, expected_revision=2)
    state = await store.load(user, "s1")
    assert state is not None and state.pending is None and rev == 3, "a field set to None must clear it"
    assert state.summary == "the user said hello", "fields not mentioned must keep their values"
    assert state.updated_at >= state.created_at > 0, "timestamps must be set"

    # full replace
    replacement = AgentState(user_id=user, session_id="s1", messages=msgs[:1], summary=None, metadata={"v": 2})
    await _expect_conflict(store.save(replacement, expected_revision=1), "save with a stale revision")
    rev = await store.save(replacement, expected_revision=3)
    assert rev == 4, f"save must give the next revision, got {rev}"
    state = await store.load(user, "s1")
    assert state is not None and state.messages == msgs[:1] and state.metadata == {"v": 2}, "save must replace all"
    assert state.summary is None, "save must replace fields too"
    rev = await store.save(AgentState(user_id=user, session_id="s2", messages=msgs))
    assert rev == 1, "an unconditional save of a new session starts at revision 1"

    # listing and isolation
    await store.append(other, "s1", _sample_messages("b"), expected_revision=0)
    sessions = await store.list_sessions(user)
    assert {s.session_id for s in sessions} == {"s1", "s2"}, f"list_sessions must list only the user's: {sessions}"
    assert all(s.user_id == user for s in sessions), "listed sessions must belong to the user"
    by_id = {s.session_id: s for s in sessions}
    assert by_id["s2"].message_count == 4 and by_id["s1"].message_count == 1, "message counts must be right"
    assert sessions[0].updated_at >= sessions[-1].updated_at, "sessions must be listed newest first"
    state = await store.load(other, "s1")
    assert state is not None and state.messages[0].text.startswith("hello b"), "users must not share sessions"
    assert await store.list_sessions(f"nobody-{run}") == [], "an unknown user has no sessions"

    # awkward ids never collide or escape
    awkward = [
        "../../etc/passwd",
        "a/b",
        "a\\b",
        "spaced id",
        "ünïcødé-会话",
        "x" * 200,
        ".",
        "..",
        "a:b",
        # ids that case- or accent-insensitive collations would merge must stay distinct
        "Case",
        "case",
        "case ",
        "cäse",
        "emoji-😀",
    ]
    for i, sid in enumerate(awkward):
        await store.append(user, sid, [Msg.user(f"awkward {i}")], expected_revision=0)
    for i, sid in enumerate(awkward):
        state = await store.load(user, sid)
        assert state is not None and state.messages[0].text == f"awkward {i}", f"session id {sid!r} must round-trip"
    await store.append(f"{user}/x", "y", [Msg.user("slash user")], expected_revision=0)
    await store.append(user, "x/y", [Msg.user("slash session")], expected_revision=0)
    a = await store.load(f"{user}/x", "y")
    b = await store.load(user, "x/y")
    assert a is not None and b is not None and a.messages[0].text != b.messages[0].text, "ids must not collide"
    listed = {s.session_id for s in await store.list_sessions(user)}
    assert set(awkward) <= listed, "awkward session ids must be listed as given"

    # large content
    big = Msg.user("x" * 1_000_000)
    await store.append(user, "big", [big], expected_revision=0)
    state = await store.load(user, "big")
    assert state is not None and state.messages == [big], "a 1 MB message must round-trip"

    # concurrent writers: exactly one wins each revision, nothing accepted is lost
    await store.append(user, "race", [], expected_revision=0)

    async def writer(i: int) -> bool:
        try:
            current = await store.load(user, "race")
            assert current is not None
            await store.append(user, "race", [Msg.user(f"w{i}")], expected_revision=current.revision)
        except StateConflictError:
            return False
        return True

    wins = sum(await asyncio.gather(*(writer(i) for i in range(20))))
    state = await store.load(user, "race")
    assert state is not None
    assert len(state.messages) == wins >= 1, f"{wins} writers won but {len(state.messages)} messages were stored"
    assert state.revision == wins + 1, "each accepted write must bump the revision once"

    # session locks: exclusive per session, independent across sessions, with a timeout
    order: list[str] = []

    async def hold(tag: str, session: str, delay: float) -> None:
        async with store.session_lock(user, session):
            order.append(f"{tag}+")
            await asyncio.sleep(delay)
            order.append(f"{tag}-")

    first = asyncio.ensure_future(hold("a", "locked", 0.2))
    await asyncio.sleep(0.05)
    second = asyncio.ensure_future(hold("b", "locked", 0.0))
    third = asyncio.ensure_future(hold("c", "elsewhere", 0.0))
    await asyncio.gather(first, second, third)
    assert order.index("c+") < order.index("a-"), "another session must not wait for this one"
    assert order.index("a-") < order.index("b+"), "the same session must be held by one caller at a time"
    busy = asyncio.ensure_future(hold("d", "busy", 0.5))
    await asyncio.sleep(0.05)
    try:
        async with store.session_lock(user, "busy", timeout=0.1):
            raise AssertionError("a held session lock must not be acquired")
    except SessionBusyError:
        pass
    await busy
    async with store.session_lock(user, "busy", timeout=1.0):
        pass

    # delete
    assert await store.delete(user, "s2") is True, "delete of an existing session must return True"
    assert await store.load(user, "s2") is None, "a deleted session must be gone"
    assert await store.delete(user, "s2") is False, "delete of a missing session must return False"
    rev = await store.append(user, "s2", [Msg.user("again")], expected_revision=0)
    assert rev == 1, "a deleted session starts again at revision 1"

    # a second store instance sees the same data (persistent backends) or is independent (in-memory)
    second_store = await _make(factory)
    try:
        seen = await second_store.load(user, "s1")
    finally:
        await second_store.close()
    if persistent:
        assert seen is not None and seen.messages == msgs[:1], "a second store must see what the first wrote"
    else:
        assert seen is None or seen.messages == msgs[:1], "a second store must see consistent data"
