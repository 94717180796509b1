"""The session cache agents load through: O(new messages) per call, exact across store instances."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentrt import ReActAgent
from agentrt.context import RuntimeContext
from agentrt.message import Msg, ToolResultBlock, ToolUseBlock
from agentrt.model import ScriptedModel
from agentrt.state.base import StateView
from agentrt.state.cache import SessionCache
from agentrt.state.session import CallIds
from agentrt.state.stores.sqlite import SqliteStateStore


def _agent(store: SqliteStateStore) -> ReActAgent:
    return ReActAgent("bot", model=ScriptedModel(["ok"], repeat=True), state_store=store)


async def test_calls_on_two_store_instances_stay_exact(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    one, two = SqliteStateStore(path), SqliteStateStore(path)
    try:
        first, second = _agent(one), _agent(two)
        ctx = RuntimeContext("u", "s")
        for i in range(4):  # two "replicas" take turns on one session
            await first.call(f"a{i}", ctx)
            await second.call(f"b{i}", ctx)
        state = await first.get_state("u", "s")
        assert [m.text for m in state.messages if m.role == "user"] == [t for i in range(4) for t in (f"a{i}", f"b{i}")]
        full = await SqliteStateStore(path).load("u", "s", agent="bot")
        assert full is not None and full.messages == state.messages
        assert one.session_cache.hits >= 3 and two.session_cache.hits >= 3
    finally:
        await one.close()
        await two.close()


async def test_a_warm_call_reads_only_new_messages(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = SqliteStateStore(path)
    try:
        rev = await store.append("u", "s", [Msg.user(f"m{i}") for i in range(300)], expected_revision=0, agent="bot")
        agent = _agent(store)
        await agent.call("first", RuntimeContext("u", "s"))  # cold: loads everything once
        read: list[int] = []
        original = store.load_view

        async def counting(*args: Any, **kwargs: Any) -> StateView | None:
            view = await original(*args, **kwargs)
            if view is not None:
                read.append(len(view.state.messages))
            return view

        store.load_view = counting  # type: ignore[method-assign]
        await agent.call("second", RuntimeContext("u", "s"))
        assert read == [1], "a warm load reads the last cached message only"
        state = await agent.get_state("u", "s")
        assert len(state.messages) == 300 + 4 and state.revision > rev
    finally:
        await store.close()


def test_cache_is_bounded_by_bytes() -> None:
    from agentrt.state.base import AgentState

    cache = SessionCache(max_bytes=2_000)
    for i in range(10):
        cache.put(AgentState(agent="a", user_id="u", session_id=f"s{i}", messages=[Msg.user("x" * 300)]))
    assert 0 < cache.nbytes <= 2_000 and len(cache) < 10
    assert ("a", "u", "s9") in cache and ("a", "u", "s0") not in cache  # least recently used go first
    with pytest.raises(ValueError):
        SessionCache(max_bytes=-1)


def test_sqlite_synchronous_option(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        SqliteStateStore(tmp_path / "x.db", synchronous="SOMETIMES")  # type: ignore[arg-type]


async def test_sqlite_synchronous_is_applied(tmp_path: Path) -> None:
    store = SqliteStateStore(tmp_path / "x.db", synchronous="FULL")
    try:
        await store.append("u", "s", [Msg.user("hi")], expected_revision=0)
        level = await store._call(lambda conn: conn.execute("PRAGMA synchronous").fetchone()[0])
        assert level == 2  # FULL
    finally:
        await store.close()


def _turn(call_id: str, n: int) -> list[Msg]:
    return [
        Msg(role="assistant", content=[ToolUseBlock(id=call_id, name="t", input={})], id=f"a{n}"),
        Msg(role="user", content=[ToolResultBlock(id=call_id, name="t", output="ok")], id=f"r{n}"),
    ]


def test_call_ids_are_indexed_once_and_afresh_for_another_transcript() -> None:
    index = CallIds()
    history = [m for n in range(3) for m in _turn(f"c{n}", n)]
    assert index.of(history) == {"c0", "c1", "c2"}
    scanned: list[str] = []

    class Spy(Msg):
        @property
        def tool_calls(self) -> list[ToolUseBlock]:
            scanned.append(self.id)
            return super().tool_calls

    grown = [*history, Spy(role="assistant", content=[ToolUseBlock(id="c3", name="t", input={})], id="a3")]
    assert index.of(grown) == {"c0", "c1", "c2", "c3"} and scanned == ["a3"], "only the new message is read"
    other = [m for n in range(4) for m in _turn(f"x{n}", n + 10)]  # same length and more, other messages
    assert index.of(other) == {"x0", "x1", "x2", "x3"}
    assert index.of(other[:2]) == {"x0"}  # a shorter transcript is indexed afresh


async def test_a_warm_call_shares_the_call_id_index_of_the_cached_transcript(tmp_path: Path) -> None:
    store = SqliteStateStore(tmp_path / "state.db")
    try:
        agent = _agent(store)
        await agent.call("first", RuntimeContext("u", "s"))
        await agent.call("second", RuntimeContext("u", "s"))  # the first load of a stored session caches it
        entry_ids = store.session_cache._entries[("bot", "u", "s")].call_ids
        state = await store.session_cache.load(store, "u", "s", agent="bot")
        assert state is not None and state.call_ids is entry_ids
    finally:
        await store.close()
