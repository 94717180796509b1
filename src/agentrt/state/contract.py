"""The conformance suite every `AgentStateStore` backend must pass (`agentrt.testing.check_state_store`)."""

from __future__ import annotations

import asyncio
import enum
import inspect
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from agentrt import _json
from agentrt.errors import (
    InvalidTypeError,
    InvalidValueError,
    SessionBusyError,
    StateConflictError,
    StateStoreError,
    UserError,
)
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
from agentrt.state.base import MAX_REVISION, AgentState, AgentStateStore
from agentrt.state.pending import Pending, PendingCall
from agentrt.state.runs import StoredRun, find_run, supports_run_records
from agentrt.state.session import CONTEXT_MIN_MESSAGES

__all__ = ["check_state_store"]

StoreFactory = Callable[[], "AgentStateStore | Awaitable[AgentStateStore]"]
IdleStoreFactory = Callable[[float], "AgentStateStore | Awaitable[AgentStateStore]"]

IDLE_TTL = 1.0
"""The `idle_ttl` (seconds) the idle-expiry check gives its store; the check sleeps 1.2 times that."""


async def _make(factory: Callable[[], Any]) -> Any:
    """A store from `factory` (sync or async); typed Any: the optional methods are checked for by name."""
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


async def _expect(error: type[Exception], action: Awaitable[Any], what: str) -> None:
    try:
        await action
    except error:
        return
    raise AssertionError(f"{what}: expected {error.__name__}")


async def check_state_store(
    factory: StoreFactory, *, persistent: bool = False, idle_ttl_factory: IdleStoreFactory | None = None
) -> None:
    """Run the store contract against stores made by `factory` (sync or async, returning a fresh store).

    With ``persistent=True`` a second store made by `factory` must see what the first one wrote
    (files, databases, Redis). Raises AssertionError naming the first broken rule. Every check
    uses its own random user ids, so the suite can run against a shared database. Stores that have
    ``migrate_legacy`` (every `BaseStateStore`) get their legacy migration checked too, and those
    that have ``prune`` and ``delete_user`` (every `BaseStateStore`) their retention: pruned and
    deleted sessions are gone whole (a session created again at their address starts empty),
    locked ones are skipped, other users' and fresher sessions stay. Prunes are always limited to
    the check's own users or agents, never the whole database. Stores with
    ``supports_run_records`` get their run records checked (`agentrt.state.runs`): saved, listed
    newest first and read back exactly, bounded in number and age per session, never visible to
    another user, agent or session, and deleted with their session (delete, prune, delete_user,
    idle expiry; moved with it by `migrate_legacy`).

    ``idle_ttl_factory(seconds)`` (sync or async), when given, makes a store with
    ``idle_ttl=seconds`` over the same data as `factory` (or a fresh one, for in-memory stores):
    sessions left unwritten for longer must read as missing everywhere, be deleted (not only
    hidden), and sessions written meanwhile must stay. That check sleeps about 1.2 s.
    """
    store = await _make(factory)
    try:
        await _run_checks(store, factory, persistent)
    finally:
        await store.close()
        await store.close()  # closing twice must be harmless
    if idle_ttl_factory is not None:
        await _check_idle_ttl(idle_ttl_factory, factory, persistent, f"idle-{uuid.uuid4().hex[:8]}")


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
    assert state.agent == "", "a session written without an agent belongs to the agent ''"
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
        "pending": Pending(reply_id="r1", calls=(PendingCall(id="x", name="search", input={}, kind="confirm"),)),
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
    assert all(s.user_id == user and s.agent == "" for s in sessions), "listed sessions must belong to the user"
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

    await _check_revision_types(store, f"typed-{run}")
    if hasattr(store, "load_view"):
        await _check_views(store, factory, persistent, f"views-{run}")
        await _check_context(store, f"context-{run}")
    agents_user = f"agents-{run}"
    await _check_agents(store, agents_user)
    if supports_run_records(store):
        await _check_runs(store, factory, persistent, f"runs-{run}")
    if hasattr(store, "migrate_legacy"):
        await _check_migration(store, f"legacy-{run}")
    if hasattr(store, "prune"):
        await _check_prune(store, run)
    if hasattr(store, "delete_user"):
        await _check_delete_user(store, factory, persistent, run)

    # a second store instance sees the same data (persistent backends) or is independent (in-memory)
    second_store = await _make(factory)
    try:
        seen = await second_store.load(user, "s1")
        seen_agent = await second_store.load(agents_user, "shared", agent="beta")
    finally:
        await second_store.close()
    if persistent:
        assert seen is not None and seen.messages == msgs[:1], "a second store must see what the first wrote"
        assert seen_agent is not None and seen_agent.agent == "beta", "a second store must see an agent's sessions"
    else:
        assert seen is None or seen.messages == msgs[:1], "a second store must see consistent data"


async def _check_views(store: Any, factory: StoreFactory, persistent: bool, user: str) -> None:
    """`load_view` reads a suffix of the transcript with every field; `SessionCache` stays exact."""
    from agentrt.state.cache import SessionCache

    assert await store.load_view(user, "v") is None, "load_view of a missing session must return None"
    msgs = [Msg.user(f"m{i}") for i in range(5)]
    await store.append(user, "v", msgs[:2], expected_revision=0, agent="va")
    rev = await store.append(
        user, "v", msgs[2:], fields={"summary": "s", "summary_index": 2}, expected_revision=1, agent="va"
    )
    full = await store.load(user, "v", agent="va")
    assert full is not None and full.messages == msgs
    assert await store.load_view(user, "v") is None, "load_view must not see another agent's session"
    # every int is an int (an IntEnum too); an index past any 64-bit one is just past the end
    edges = ((_Index.THREE, 3), (MAX_REVISION, 5), (MAX_REVISION + 1, 5), (10**30, 5))
    for since, offset in ((0, 0), (3, 3), (5, 5), (99, 5), *edges):
        view = await store.load_view(user, "v", agent="va", since_index=since)
        assert view is not None, "load_view of an existing session must return it"
        assert view.offset == offset, f"load_view(since_index={since}) must start at {offset}, not {view.offset}"
        assert view.message_count == 5, "load_view must count the whole transcript"
        assert view.state.messages == msgs[offset:], f"load_view(since_index={since}) must return messages[{offset}:]"
        got = view.state
        assert (got.agent, got.user_id, got.session_id) == ("va", user, "v"), "load_view must fill the address"
        assert (got.summary, got.summary_index, got.revision) == ("s", 2, rev), "load_view must return every field"
        assert got.created_at == full.created_at, "load_view must return the stored created_at"
    await _expect(InvalidTypeError, store.load_view(user, "v", agent="va", since_index="1"), "a str since_index")
    await _expect(InvalidValueError, store.load_view(user, "v", agent="va", since_index=-1), "a negative since_index")

    # the per-process cache agents load through: exact after own appends, others' writes, deletes, saves
    cache = SessionCache()
    state = await cache.load(store, user, "v", agent="va")
    assert state is not None and state.messages == msgs and cache.misses == 1
    state.messages.append(Msg.user("unsaved"))  # a caller's list is its own
    more = [Msg.user("m5")]
    rev = await store.append(user, "v", more, expected_revision=rev, agent="va")
    cache.appended("va", user, "v", more, base=rev - 1, revision=rev)
    state = await cache.load(store, user, "v", agent="va")
    assert state is not None and state.messages == [*msgs, *more] and state.revision == rev
    assert cache.hits == 1, "a cached session must be served from the cache"
    other = await _make(factory) if persistent else store
    try:  # another replica (or a writer that bypasses the cache) appends: the cache reads only that
        theirs = [Msg.assistant("m6"), Msg.user("m7")]
        rev = await other.append(user, "v", theirs, fields={"summary_index": 4}, expected_revision=rev, agent="va")
        state = await cache.load(store, user, "v", agent="va")
        assert state is not None and state.messages == [*msgs, *more, *theirs], "the cache must see others' appends"
        assert (state.revision, state.summary_index) == (rev, 4), "the cache must return the current fields"
        await other.delete(user, "v", agent="va")
        assert await cache.load(store, user, "v", agent="va") is None, "the cache must see a delete"
        await other.append(user, "v", msgs[:1], expected_revision=0, agent="va")
        state = await cache.load(store, user, "v", agent="va")
        assert state is not None and state.messages == msgs[:1], "the cache must see a session created again"
        replaced = AgentState(agent="va", user_id=user, session_id="v", messages=[Msg.user("new")])
        await other.save(replaced)
        state = await cache.load(store, user, "v", agent="va")
        assert state is not None and state.messages == replaced.messages, "the cache must see a save"
    finally:
        if other is not store:
            await other.close()
    tiny = SessionCache(max_bytes=1)
    assert await tiny.load(store, user, "v", agent="va") is not None and len(tiny) == 0, "a too large session"
    await store.delete(user, "v", agent="va")


async def _check_context(store: Any, user: str) -> None:
    """`load_context` reads the fields and the messages from the summary's end; the rest are placeholders."""
    from agentrt.state.session import CONTEXT_MIN_MESSAGES, UNLOADED

    load_context = getattr(store, "load_context", None)
    if load_context is None:
        return
    assert await load_context(user, "c", agent="ca") is None, "load_context of a missing session must return None"
    n, cut = CONTEXT_MIN_MESSAGES + 36, CONTEXT_MIN_MESSAGES + 16
    msgs = [Msg.user(f"c{i}") if i % 2 == 0 else Msg.assistant(f"c{i}") for i in range(n)]
    rev = await store.append(user, "c", msgs, expected_revision=0, agent="ca")
    whole = await load_context(user, "c", agent="ca")
    assert whole is not None and whole.messages == msgs and whole.loaded_from == 0, "no summary: the whole transcript"
    rev = await store.append(
        user, "c", [], fields={"summary": "s", "summary_index": 8}, expected_revision=rev, agent="ca"
    )
    few = await load_context(user, "c", agent="ca")
    assert few is not None and few.messages == msgs and few.loaded_from == 0, "a short summary: the whole transcript"
    rev = await store.append(
        user, "c", [], fields={"summary": "s", "summary_index": cut}, expected_revision=rev, agent="ca"
    )
    state = await load_context(user, "c", agent="ca")
    assert state is not None and state.loaded_from in (0, cut), "load_context reads all or from the summary's end"
    assert len(state.messages) == n and state.messages[cut:] == msgs[cut:], "the messages after the summary, in place"
    assert all(m is UNLOADED for m in state.messages[: state.loaded_from]), "placeholders before the summary's end"
    assert (state.summary, state.summary_index, state.revision) == ("s", cut, rev), "every field"
    if state.loaded_from:
        await _expect(StateStoreError, store.save(state, expected_revision=rev), "a save of a context load")
        stored = await store.load(user, "c", agent="ca")
        assert stored is not None and stored.messages == msgs, "a refused save must leave the transcript as it was"
    await store.delete(user, "c", agent="ca")


class _Index(enum.IntEnum):
    ZERO = 0
    ONE = 1
    THREE = 3


async def _check_revision_types(store: AgentStateStore, user: str) -> None:
    """expected_revision is an int >= 0 (None too for save), refused with a typed error before any write.

    Values no write can start from (`MAX_REVISION`, the 64-bit limit of SQL's BIGINT, and above) are
    refused the same way by every store, never passed to a database driver to overflow in; the
    largest valid one is a conflict like any other wrong revision; an IntEnum counts as its int.
    """
    for bad in (None, "0", 0.0, True, False, b"0"):
        await _expect(
            InvalidTypeError,
            store.append(user, "typed", [Msg.user("x")], expected_revision=bad),  # type: ignore[arg-type]
            f"append with expected_revision={bad!r}",
        )
    for bad_value in (-1, MAX_REVISION, MAX_REVISION + 1, 10**30):
        await _expect(
            InvalidValueError,
            store.append(user, "typed", [Msg.user("x")], expected_revision=bad_value),
            f"append with expected_revision={bad_value}",
        )
        await _expect(
            InvalidValueError,
            store.save(AgentState(user_id=user, session_id="typed"), expected_revision=bad_value),
            f"save with expected_revision={bad_value}",
        )
    largest = MAX_REVISION - 1
    await _expect_conflict(
        store.append(user, "typed", [Msg.user("x")], expected_revision=largest), "append at the largest revision"
    )
    await _expect_conflict(
        store.save(AgentState(user_id=user, session_id="typed"), expected_revision=largest),
        "save at the largest revision",
    )
    for bad in ("1", 1.0, True):
        await _expect(
            InvalidTypeError,
            store.save(AgentState(user_id=user, session_id="typed"), expected_revision=bad),  # type: ignore[arg-type]
            f"save with expected_revision={bad!r}",
        )
    await _expect(
        InvalidTypeError,
        store.append(user, "typed", [Msg.user("x")], expected_revision=0, agent=None),  # type: ignore[arg-type]
        "append with agent=None",
    )
    assert await store.load(user, "typed") is None, "a refused write must write nothing"
    assert await store.list_sessions(user) == [], "a refused write must leave no session behind"
    rev = await store.append(user, "enum", [Msg.user("x")], expected_revision=_Index.ZERO)
    assert rev == 1, "expected_revision=IntEnum(0) must create the session like 0"
    assert await store.append(user, "enum", [Msg.user("y")], expected_revision=_Index.ONE) == 2
    assert await store.save(AgentState(user_id=user, session_id="enum2"), expected_revision=_Index.ZERO) == 1
    await store.delete(user, "enum")
    await store.delete(user, "enum2")


async def _check_agents(store: AgentStateStore, user: str) -> None:
    """Sessions belong to an agent: two agents on one (user, session) share nothing."""
    rev = await store.append(user, "shared", [Msg.user("to alpha")], expected_revision=0, agent="alpha")
    assert rev == 1
    assert await store.load(user, "shared", agent="beta") is None, "another agent must not see the session"
    assert await store.load(user, "shared") is None, "the agent '' must not see an agent's session"
    rev = await store.append(user, "shared", [Msg.user("to beta")], expected_revision=0, agent="beta")
    assert rev == 1, "each agent's session has its own revisions"
    await _expect_conflict(
        store.append(user, "shared", [], expected_revision=0, agent="alpha"), "append to an agent's session at rev 0"
    )
    rev = await store.append(user, "shared", [Msg.assistant("alpha again")], expected_revision=1, agent="alpha")
    assert rev == 2
    alpha = await store.load(user, "shared", agent="alpha")
    beta = await store.load(user, "shared", agent="beta")
    assert alpha is not None and beta is not None
    assert (alpha.agent, alpha.revision, [m.text for m in alpha.messages]) == ("alpha", 2, ["to alpha", "alpha again"])
    assert (beta.agent, beta.revision, [m.text for m in beta.messages]) == ("beta", 1, ["to beta"])
    rev = await store.save(AgentState(agent="beta", user_id=user, session_id="saved", messages=[Msg.user("saved")]))
    assert rev == 1, "save writes the session of state.agent"
    assert await store.load(user, "saved", agent="alpha") is None, "save must write only state.agent's session"
    saved = await store.load(user, "saved", agent="beta")
    assert saved is not None and saved.agent == "beta" and saved.messages[0].text == "saved"
    await store.append(user, "shared", [Msg.user("legacy")], expected_revision=0)

    # awkward agent names never collide or escape, and are listed as given
    awkward = ["../x", "a/b", "A", "a", "ünï-会话", "x" * 200, "a:b", "@a", ".", "~", "sha256:abc"]
    for i, agent in enumerate(awkward):
        await store.append(user, "aw", [Msg.user(f"agent {i}")], expected_revision=0, agent=agent)
    for i, agent in enumerate(awkward):
        state = await store.load(user, "aw", agent=agent)
        assert state is not None and state.messages[0].text == f"agent {i}", f"agent {agent!r} must round-trip"

    listed = {(s.agent, s.session_id) for s in await store.list_sessions(user)}
    expected = {("alpha", "shared"), ("beta", "shared"), ("beta", "saved"), ("", "shared")}
    expected |= {(agent, "aw") for agent in awkward}
    assert listed == expected, f"list_sessions(agent=None) must list every agent's sessions: {listed ^ expected}"
    only = await store.list_sessions(user, agent="beta")
    assert {(s.agent, s.session_id) for s in only} == {("beta", "shared"), ("beta", "saved")}, "list of one agent"
    legacy = await store.list_sessions(user, agent="")
    assert [(s.agent, s.session_id) for s in legacy] == [("", "shared")], "list of the agent ''"
    assert await store.list_sessions(user, agent="nobody") == [], "an agent without sessions lists nothing"

    # locks are per (agent, user, session)
    held, release = asyncio.Event(), asyncio.Event()

    async def holder() -> None:
        async with store.session_lock(user, "shared", agent="alpha"):
            held.set()
            await release.wait()

    task = asyncio.ensure_future(holder())
    try:
        await held.wait()
        async with store.session_lock(user, "shared", agent="beta", timeout=10):
            pass  # another agent's session: free while alpha's is held
        async with store.session_lock(user, "shared", timeout=10):
            pass
        try:
            async with store.session_lock(user, "shared", agent="alpha", timeout=0.05):
                raise AssertionError("a held session lock of an agent must not be acquired")
        except SessionBusyError:
            pass
    finally:
        release.set()
        await task

    # delete is per agent
    assert await store.delete(user, "shared", agent="alpha") is True
    assert await store.load(user, "shared", agent="alpha") is None, "a deleted session must be gone"
    assert await store.delete(user, "shared", agent="alpha") is False
    beta = await store.load(user, "shared", agent="beta")
    legacy_state = await store.load(user, "shared")
    assert beta is not None and legacy_state is not None, "delete must not touch another agent's session"
    listed = {(s.agent, s.session_id) for s in await store.list_sessions(user)}
    assert ("alpha", "shared") not in listed and ("beta", "shared") in listed, "a deleted session leaves the list"
    for agent in awkward:
        assert await store.delete(user, "aw", agent=agent) is True
    assert {(s.agent, s.session_id) for s in await store.list_sessions(user)} == {
        ("beta", "shared"),
        ("beta", "saved"),
        ("", "shared"),
    }


async def _check_migration(store: Any, user: str) -> None:
    """`migrate_legacy` moves the agent's legacy sessions ("<agent>:<sid>", and unprefixed ones on request)."""
    assert isinstance(store.has_legacy_sessions, bool), "has_legacy_sessions must be a bool"
    await store.append(user, "alpha:one", [Msg.user("server one")], expected_revision=0)
    await _add_run(store, user, "alpha:one")
    await store.append(user, "alpha:two", [Msg.user("two")], fields={"summary": "sum"}, expected_revision=0)
    await store.append(user, "alpha:two", [Msg.assistant("two again")], expected_revision=1)
    for sid in ("beta:one", "plain", "x:y", "alpha:taken"):
        await store.append(user, sid, [Msg.user(f"legacy {sid}")], expected_revision=0)
    await store.append(user, "taken", [Msg.user("alpha's own")], expected_revision=0, agent="alpha")
    await _expect(InvalidValueError, store.migrate_legacy(""), "migrate_legacy to the agent ''")

    moved = await store.migrate_legacy("alpha", user_id=user)
    assert moved == 2, f"two sessions named 'alpha:...' must move, not {moved}"
    one = await store.load(user, "one", agent="alpha")
    two = await store.load(user, "two", agent="alpha")
    assert one is not None and [m.text for m in one.messages] == ["server one"], "a moved session keeps its messages"
    assert two is not None and [m.text for m in two.messages] == ["two", "two again"] and two.summary == "sum"
    assert (one.agent, one.session_id) == ("alpha", "one"), "a moved session has its new address"
    if supports_run_records(store):
        moved_run = await store.get_run(user, "one", _RUN_ID, agent="alpha")
        assert moved_run is not None and moved_run.reply_id == _RUN_ID, "a moved session keeps its run records"
    assert await store.load(user, "alpha:one") is None, "a moved session leaves the legacy namespace"
    taken = await store.load(user, "taken", agent="alpha")
    assert taken is not None and taken.messages[0].text == "alpha's own", "migration must not overwrite a session"
    assert await store.load(user, "alpha:taken") is not None, "a session that could not move stays"
    rev = await store.append(user, "two", [Msg.user("after")], expected_revision=two.revision, agent="alpha")
    assert rev == two.revision + 1, "a moved session takes appends at its revision"

    moved = await store.migrate_legacy("alpha", user_id=user, all_unprefixed=True)
    assert moved == 1, f"with all_unprefixed only the session without ':' moves, not {moved}"
    plain = await store.load(user, "plain", agent="alpha")
    assert plain is not None and plain.messages[0].text == "legacy plain"
    assert await store.load(user, "plain") is None
    left = {s.session_id for s in await store.list_sessions(user, agent="")}
    assert left == {"beta:one", "x:y", "alpha:taken"}, f"other sessions stay in the legacy namespace: {left}"
    assert await store.migrate_legacy("alpha", user_id=user) == 0, "a second migration moves nothing"
    await store.append(user, "served-as:z", [Msg.user("served")], expected_revision=0)
    moved = await store.migrate_legacy("alpha", user_id=user, prefix="served-as")
    assert moved == 1, f"prefix names the agent part of the legacy ids, {moved} moved"
    served = await store.load(user, "z", agent="alpha")
    assert served is not None and served.messages[0].text == "served"
    listed = {(s.agent, s.session_id) for s in await store.list_sessions(user, agent="alpha")}
    assert listed == {("alpha", "one"), ("alpha", "two"), ("alpha", "plain"), ("alpha", "taken"), ("alpha", "z")}
    assert isinstance(store.has_legacy_sessions, bool)


async def _is_empty_again(store: Any, user: str, session: str, agent: str, what: str) -> None:
    """The session is gone whole: it loads as missing and starts again at revision 1 with only the new message.

    A message left behind (a row, a list entry, a line) would show up in the new transcript, or
    collide with the new message's position.
    """
    assert await store.load(user, session, agent=agent) is None, f"{what}: the session must be gone"
    rev = await store.append(user, session, [Msg.user("anew")], expected_revision=0, agent=agent)
    state = await store.load(user, session, agent=agent)
    assert rev == 1 and state is not None, f"{what}: the session must start again at revision 1"
    assert [m.text for m in state.messages] == ["anew"], f"{what}: nothing of the old session may be left"
    assert state.pending is None and state.summary is None, f"{what}: no field of the old session may be left"
    if supports_run_records(store):
        assert await store.list_runs(user, session, agent=agent) == [], f"{what}: no run record may be left"
        assert await store.get_run(user, session, _RUN_ID, agent=agent) is None, f"{what}: no run record may be left"
    await store.delete(user, session, agent=agent)


_RUN_ID = "run-of-the-session"
"""The reply id of the run record the retention checks give each session (when the store keeps them)."""


async def _add_run(store: Any, user: str, session: str, agent: str = "") -> None:
    """Give a session a run record (stores that keep them), so that its deletion can be checked."""
    if supports_run_records(store):
        saved = await store.save_run(user, session, _stored_run(_RUN_ID, time.time()), agent=agent)
        assert saved is True, "save_run on an existing session must return True"


def _stored_run(reply_id: str, started_at: float, note: str = "", **summary: Any) -> StoredRun:
    body = _json.dumps({"schema": "agentrt.run/1", "reply_id": reply_id, "note": f"naïve café ☕ {note}"})
    return StoredRun(reply_id, started_at, {"status": "completed", "reply_ids": [reply_id], **summary}, body)


async def _check_runs(store: Any, factory: StoreFactory, persistent: bool, user: str) -> None:
    """Run records: kept with their session, listed newest first, bounded, private, deleted with the session."""
    other = f"{user}-other"
    await _expect(InvalidTypeError, store.save_run(user, "r", {"reply_id": "x"}), "save_run of a dict")
    await _expect(InvalidValueError, store.save_run(user, "r", StoredRun("", 1.0)), "save_run with an empty reply id")
    await _expect(InvalidValueError, store.save_run(user, "r", _stored_run("x", 1.0), max_runs=0), "max_runs=0")
    assert await store.save_run(user, "r", _stored_run("r0", 1.0), agent="ra") is False, "no session: not saved"
    assert await store.list_runs(user, "r", agent="ra") == [], "a run of a missing session must not be stored"
    await store.append(user, "r", [Msg.user("hi")], expected_revision=0, agent="ra")
    assert await store.save_run(user, "r", _stored_run("r0", 1.0)) is False, "another agent's session: not saved"
    now = time.time()
    runs = [_stored_run(f"r{i}", now - 30 + 10 * i, str(i), tokens=i) for i in (1, 2, 3)]
    for stored in runs:
        assert await store.save_run(user, "r", stored, agent="ra") is True, "save_run on an existing session"
    listed = await store.list_runs(user, "r", agent="ra")
    assert [i.reply_id for i in listed] == ["r3", "r2", "r1"], f"runs are listed newest first: {listed}"
    assert [i.summary for i in listed] == [r.summary for r in reversed(runs)], "summaries must round-trip"
    assert [i.started_at for i in listed] == [r.started_at for r in reversed(runs)], "start times must round-trip"
    assert [i.reply_id for i in await store.list_runs(user, "r", agent="ra", limit=2)] == ["r3", "r2"], "limit"
    got = await store.get_run(user, "r", "r2", agent="ra")
    assert got is not None and (got.reply_id, got.body, got.summary) == ("r2", runs[1].body, runs[1].summary)
    assert got.record()["note"].endswith("2"), "a record's JSON must round-trip"
    assert await store.get_run(user, "r", "nope", agent="ra") is None, "an unknown run is None"

    # replaced in place (a run resumed after an approval), found by the reply id of any of its calls
    resumed = _stored_run("r2", runs[1].started_at, "resumed", reply_ids=["r2", "r2-resumed"])
    assert await store.save_run(user, "r", resumed, agent="ra") is True
    got = await store.get_run(user, "r", "r2", agent="ra")
    assert got is not None and got.body == resumed.body and got.summary == resumed.summary, "save_run replaces"
    assert len(await store.list_runs(user, "r", agent="ra")) == 3, "a replaced run is listed once"
    found = await find_run(store, user, "r", "r2-resumed", agent="ra")
    assert found is not None and found.reply_id == "r2", "a run is found by the reply id of a later call"

    # private: another user, another agent, another session see nothing
    await store.append(other, "r", [Msg.user("theirs")], expected_revision=0, agent="ra")
    await store.append(user, "r", [Msg.user("legacy")], expected_revision=0)
    await store.append(user, "r2", [Msg.user("another session")], expected_revision=0, agent="ra")
    for who, sid, agent in ((other, "r", "ra"), (user, "r", ""), (user, "r", "rb"), (user, "r2", "ra")):
        assert await store.list_runs(who, sid, agent=agent) == [], f"{(who, sid, agent)} must not see the runs"
        assert await store.get_run(who, sid, "r2", agent=agent) is None, f"{(who, sid, agent)} must not read a run"
        assert await find_run(store, who, sid, "r2-resumed", agent=agent) is None

    # awkward reply ids and a large record
    awkward = ["a/b", "../x", "ünï ☕", "Case", "case", "x" * 255, "a:b", "sha256:abc"]
    for i, reply_id in enumerate(awkward):
        await store.save_run(user, "aw", _stored_run(reply_id, now + i, str(i)), agent="ra", max_runs=None)
    assert await store.save_run(user, "aw", _stored_run("x", now), agent="ra") is False, "no such session yet"
    await store.append(user, "aw", [Msg.user("aw")], expected_revision=0, agent="ra")
    for i, reply_id in enumerate(awkward):
        await store.save_run(user, "aw", _stored_run(reply_id, now + i, str(i)), agent="ra", max_runs=None)
    for i, reply_id in enumerate(awkward):
        got = await store.get_run(user, "aw", reply_id, agent="ra")
        assert got is not None and got.reply_id == reply_id and got.record()["note"].endswith(str(i)), reply_id
    listed_ids = [i.reply_id for i in await store.list_runs(user, "aw", agent="ra")]
    assert listed_ids == list(reversed(awkward)), f"awkward reply ids must be listed as given: {listed_ids}"
    big = StoredRun("big", now, {"reply_ids": ["big"]}, _json.dumps({"blob": "é" * 300_000}))
    assert await store.save_run(user, "aw", big, agent="ra", max_runs=None) is True
    got = await store.get_run(user, "aw", "big", agent="ra")
    assert got is not None and got.body == big.body, "a large record must round-trip"

    # bounds: at most max_runs per session (the newest), none older than older_than (but the one saved)
    await store.append(user, "cap", [Msg.user("cap")], expected_revision=0, agent="ra")
    for i in range(5):
        await store.save_run(user, "cap", _stored_run(f"c{i}", now + i), agent="ra", max_runs=3)
    assert [i.reply_id for i in await store.list_runs(user, "cap", agent="ra")] == ["c4", "c3", "c2"], "max_runs"
    assert await store.get_run(user, "cap", "c0", agent="ra") is None, "an evicted run is gone"
    await store.save_run(user, "cap", _stored_run("c-old", now - 5000), agent="ra", max_runs=3)
    listed_ids = [i.reply_id for i in await store.list_runs(user, "cap", agent="ra")]
    assert listed_ids == ["c4", "c3", "c-old"], f"the run saved is kept, the oldest others go: {listed_ids}"
    await store.save_run(user, "cap", _stored_run("c5", now + 5), agent="ra", max_runs=None, older_than=1000)
    listed_ids = [i.reply_id for i in await store.list_runs(user, "cap", agent="ra")]
    assert listed_ids == ["c5", "c4", "c3"], f"runs older than older_than go: {listed_ids}"
    await store.save_run(user, "cap", _stored_run("c-ancient", now - 9000), agent="ra", older_than=1000)
    assert await store.get_run(user, "cap", "c-ancient", agent="ra") is not None, "the run saved is never dropped"

    # a full save keeps the runs; another store instance sees them (persistent backends)
    await store.save(AgentState(agent="ra", user_id=user, session_id="r", messages=[Msg.user("replaced")]))
    assert len(await store.list_runs(user, "r", agent="ra")) == 3, "save (a full replace) keeps the run records"
    if persistent:
        second = await _make(factory)
        try:
            got = await second.get_run(user, "r", "r3", agent="ra")
            assert got is not None and got.body == runs[2].body, "a second store must see the run records"
        finally:
            await second.close()

    # deleted with the session
    assert await store.delete(user, "r", agent="ra") is True
    assert await store.get_run(user, "r", "r3", agent="ra") is None, "a deleted session's runs are gone"
    await _is_empty_again(store, user, "r", "ra", "a deleted session")
    for u, sid, agent in (
        (other, "r", "ra"),
        (user, "r", ""),
        (user, "r2", "ra"),
        (user, "aw", "ra"),
        (user, "cap", "ra"),
    ):
        await store.delete(u, sid, agent=agent)


async def _check_prune(store: Any, run: str) -> None:
    """`prune` deletes the matching sessions idle past `older_than`, whole; skips locked ones; keeps the rest."""
    user, other, agent = f"prune-{run}", f"prune-other-{run}", f"prune-agent-{run}"
    pending = Pending(reply_id="r", calls=(PendingCall(id="c", name="search", input={}, kind="confirm"),))
    old = [(user, "old", ""), (user, "old", agent), (user, "locked", ""), (other, "old", agent)]
    for u, sid, a in old:
        await store.append(
            u, sid, _sample_messages(sid), fields={"summary": "s", "pending": pending}, expected_revision=0, agent=a
        )
        await _add_run(store, u, sid, a)
    await asyncio.sleep(0.2)
    middle = time.time()
    await asyncio.sleep(0.2)
    for u, sid, a in [(user, "new", ""), (user, "new", agent), (other, "new", agent)]:
        await store.append(u, sid, [Msg.user("new")], expected_revision=0, agent=a)
    await _add_run(store, user, "new", agent)

    def older_than() -> float:
        return time.time() - middle  # the sessions written before `middle` are older than this

    for bad, error in ((-1, InvalidValueError), (float("nan"), InvalidValueError), ("1d", InvalidTypeError)):
        await _expect(error, store.prune(bad, user_id=user), f"prune(older_than={bad!r})")
    await _expect(InvalidValueError, store.prune(1, user_id=user, limit=-1), "prune(limit=-1)")
    await _expect(InvalidTypeError, store.prune(1, user_id=user, limit=1.5), "prune(limit=1.5)")
    assert await store.prune(older_than(), user_id=user, limit=0) == 0, "prune(limit=0) deletes nothing"

    async with store.session_lock(user, "locked"):
        assert await store.prune(older_than(), user_id=user, dry_run=True) == 2, (
            "a dry run counts the user's idle sessions (of every agent), not the locked one"
        )
        assert await store.load(user, "old") is not None, "a dry run deletes nothing"
        assert await store.prune(older_than(), user_id=user, agent="", limit=5) == 1, "prune of one user and agent"
        assert await store.load(user, "old", agent=agent) is not None, "another agent's session stays"
        try:
            first = await store.prune(older_than(), agent=agent, limit=1)
            second = await store.prune(older_than(), agent=agent)
        except UserError:  # a store that prunes one user at a time says so, and deletes nothing
            first = await store.prune(older_than(), user_id=user, agent=agent, limit=1)
            second = await store.prune(older_than(), user_id=other, agent=agent)
        assert (first, second) == (1, 1), f"prune of one agent across users, limit capping it: {first}, {second}"
        assert await store.prune(older_than(), user_id=user) == 0, "a locked session is never pruned"
        assert await store.prune(older_than(), user_id=other, dry_run=True) == 0, "nothing idle is left to prune"
    assert await store.load(user, "locked") is not None, "the locked session stays"
    for u, sid, a in [(user, "new", ""), (user, "new", agent), (other, "new", agent)]:
        kept = await store.load(u, sid, agent=a)
        assert kept is not None and [m.text for m in kept.messages] == ["new"], "fresher sessions stay as they were"
    if supports_run_records(store):
        assert await store.get_run(user, "new", _RUN_ID, agent=agent) is not None, "a fresher session keeps its runs"
    listed = {(s.agent, s.session_id) for s in await store.list_sessions(user)}
    assert listed == {("", "locked"), ("", "new"), (agent, "new")}, f"pruned sessions leave the listing: {listed}"
    for u, sid, a in old[:2] + old[3:]:
        await _is_empty_again(store, u, sid, a, f"a pruned session ({sid!r} of agent {a!r})")
    assert await store.prune(older_than(), user_id=user) == 1, "the session goes once its lock is free"
    assert await store.load(user, "locked") is None
    for u, sid, a in [(user, "new", ""), (user, "new", agent), (other, "new", agent)]:
        await store.delete(u, sid, agent=a)


async def _check_delete_user(store: Any, factory: StoreFactory, persistent: bool, run: str) -> None:
    """`delete_user` deletes every session of the user, of every agent (locked too), and nothing else."""
    user, other = f"forget-{run}", f"forget-other-{run}"
    pending = Pending(reply_id="r", calls=(PendingCall(id="c", name="search", input={}, kind="confirm"),))
    mine = [("", "one"), ("", "two"), ("alpha", "one"), ("beta", "x" * 200), ("alpha", "a:b")]
    for agent, sid in mine:
        await store.append(
            user, sid, _sample_messages(sid), fields={"pending": pending}, expected_revision=0, agent=agent
        )
        await _add_run(store, user, sid, agent)
    for agent, sid in [("", "one"), ("alpha", "one")]:
        await store.append(other, sid, [Msg.user(f"theirs {agent}")], expected_revision=0, agent=agent)
        await _add_run(store, other, sid, agent)
    await store.append(f"{user}x", "one", [Msg.user("a longer id")], expected_revision=0)
    async with store.session_lock(user, "two"):
        deleted = await store.delete_user(user)
    assert deleted == len(mine), f"delete_user counts the user's sessions ({len(mine)}), not {deleted}"
    assert await store.list_sessions(user) == [], "no session of a deleted user is listed"
    for agent, sid in mine:
        assert await store.load(user, sid, agent=agent) is None, f"session {sid!r} of agent {agent!r} must be gone"
    for agent, sid in [("", "one"), ("alpha", "one")]:
        theirs = await store.load(other, sid, agent=agent)
        assert theirs is not None and theirs.messages[0].text == f"theirs {agent}", "another user's sessions stay"
        if supports_run_records(store):
            assert await store.get_run(other, sid, _RUN_ID, agent=agent) is not None, "another user's runs stay"
    kept = await store.load(f"{user}x", "one")
    assert kept is not None, "a user whose id starts with the deleted one's keeps their sessions"
    assert await store.delete_user(user) == 0, "deleting a user again deletes nothing"
    if persistent:
        fresh = await _make(factory)
        try:
            assert await fresh.list_sessions(user) == [], "another store instance sees no session of the user"
            assert await fresh.load(user, "one", agent="alpha") is None
            assert await fresh.load(other, "one", agent="alpha") is not None
        finally:
            await fresh.close()
    for agent, sid in mine:
        await _is_empty_again(store, user, sid, agent, f"session {sid!r} of agent {agent!r} of a deleted user")
    for u in (other, f"{user}x"):
        assert await store.delete_user(u) >= 1


async def _check_idle_ttl(idle_factory: IdleStoreFactory, factory: StoreFactory, persistent: bool, user: str) -> None:
    """With `idle_ttl`, a session unwritten for longer reads as missing everywhere and is deleted."""
    store = await _make(lambda: idle_factory(IDLE_TTL))
    try:
        got = getattr(store, "idle_ttl", IDLE_TTL)
        assert got == IDLE_TTL, f"idle_ttl must be what the store was given ({IDLE_TTL}), not {got!r}"
        n = CONTEXT_MIN_MESSAGES + 8
        long = [Msg.user(f"m{i}") for i in range(n)]
        await store.append(user, "old", _sample_messages("old"), expected_revision=0)
        await _add_run(store, user, "old")
        await store.append(user, "view", _sample_messages("view"), expected_revision=0, agent="ia")
        rev = await store.append(user, "context", long, expected_revision=0, agent="ia")
        await store.append(
            user, "context", [], fields={"summary": "s", "summary_index": n - 4}, expected_revision=rev, agent="ia"
        )
        await store.append(user, "listed", [Msg.user("listed")], expected_revision=0)
        rev = await store.append(user, "kept", [Msg.user("kept")], expected_revision=0)
        await asyncio.sleep(IDLE_TTL * 0.6)
        await store.append(user, "kept", [Msg.user("again")], expected_revision=rev)  # written: idle time restarts
        await asyncio.sleep(IDLE_TTL * 0.6)
        await store.append(user, "fresh", [Msg.user("fresh")], expected_revision=0)
        listed = {(s.agent, s.session_id) for s in await store.list_sessions(user)}
        assert listed == {("", "kept"), ("", "fresh")}, f"idle sessions must not be listed: {listed}"
        kept = await store.load(user, "kept")
        assert kept is not None and [m.text for m in kept.messages] == ["kept", "again"], "a written session stays"
        assert await store.load(user, "old") is None, "load of an idle session must return None"
        assert await store.load_view(user, "view", agent="ia") is None, "load_view of an idle session must be None"
        load_context = getattr(store, "load_context", None)
        if load_context is not None:
            assert await load_context(user, "context", agent="ia") is None, "load_context of an idle session: None"
        for sid, agent in (("old", ""), ("view", "ia"), ("context", "ia")):
            # deleted, not only hidden: the address starts afresh at revision 0
            await _is_empty_again(store, user, sid, agent, f"an idle session ({sid!r}) once read")
    finally:
        await store.close()
    if persistent:
        plain = await _make(factory)
        try:
            assert await plain.load(user, "listed") is None, "an idle session a listing came across is deleted"
            assert await plain.load(user, "fresh") is not None, "a store without idle_ttl sees the live sessions"
            if hasattr(plain, "delete_user"):
                await plain.delete_user(user)
        finally:
            await plain.close()
