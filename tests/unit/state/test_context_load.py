"""A call's first load of a compressed session reads only what the prompt shows (`load_context`).

The guarantees, checked by their side effects: the messages a summary covers are never decoded
(a counting decoder), the model sees exactly the prompt a whole load gives (the scripted model's
recorded requests), and nothing a context load left unread is ever written back (the stored
transcript afterwards).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt import ReActAgent
from agentrt.context import RuntimeContext
from agentrt.errors import StateStoreError
from agentrt.message import Msg
from agentrt.model import ScriptedModel
from agentrt.state import InMemoryStateStore
from agentrt.state.base import BaseStateStore
from agentrt.state.session import CONTEXT_MIN_MESSAGES, UNLOADED, AgentState
from agentrt.state.stores import sqlite as sqlite_store
from agentrt.state.stores.jsonfile import JsonFileStateStore
from agentrt.state.stores.sqlite import SqliteStateStore


def _transcript(rounds: int) -> list[Msg]:
    return [m for i in range(rounds) for m in (Msg.user(f"question {i}"), Msg.assistant(f"answer {i}"))]


async def _seed(store: Any, msgs: list[Msg], summary_index: int | None) -> None:
    rev = await store.append("u", "s", msgs, expected_revision=0, agent="bot")
    if summary_index is not None:
        fields = {"summary": "they talked about numbers", "summary_index": summary_index}
        await store.append("u", "s", [], fields=fields, expected_revision=rev, agent="bot")


def _prompt(model: ScriptedModel) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in model.requests[-1].messages]


async def _call(store: Any, text: str = "and now?") -> ScriptedModel:
    model = ScriptedModel(["noted"])
    agent = ReActAgent("bot", model=model, state_store=store)
    await agent.call(text, RuntimeContext("u", "s"))
    return model


async def test_a_first_call_decodes_only_the_messages_after_the_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    msgs = _transcript(500)  # 1,000 messages, the first 900 summarised
    seeded = SqliteStateStore(tmp_path / "a.db")
    await _seed(seeded, msgs, 900)
    await seeded.close()
    shutil.copy(tmp_path / "a.db", tmp_path / "b.db")

    decoded: list[int] = []
    real = sqlite_store.decode_message  # type: ignore[attr-defined]

    def counting(body: Any) -> Msg:
        decoded.append(1)
        return real(body)

    monkeypatch.setattr(sqlite_store, "decode_message", counting)
    store = SqliteStateStore(tmp_path / "a.db")  # a new process: nothing cached
    try:
        model = await _call(store)
    finally:
        await store.close()
    assert len(decoded) == 100, "only the 100 messages after the summary are decoded"

    # The same call on a whole load of the same database sees the same prompt.
    whole_store = SqliteStateStore(tmp_path / "b.db")
    monkeypatch.setattr(whole_store, "load_context", whole_store.load)
    try:
        whole = await _call(whole_store)
    finally:
        await whole_store.close()
    assert _prompt(model) == _prompt(whole)
    assert _prompt(model)[0] == ("user", "<summary>\nthey talked about numbers\n</summary>")

    after = SqliteStateStore(tmp_path / "a.db")
    try:
        stored = await after.load("u", "s", agent="bot")
    finally:
        await after.close()
    assert stored is not None
    assert stored.messages[:1000] == msgs, "the unread messages are still stored as they were"
    assert [m.text for m in stored.messages[1000:]] == ["and now?", "noted"]


async def test_get_state_after_a_context_load_returns_the_whole_transcript(tmp_path: Path) -> None:
    store = SqliteStateStore(tmp_path / "s.db")
    try:
        msgs = _transcript(60)
        await _seed(store, msgs, 100)
        agent = ReActAgent("bot", model=ScriptedModel(["noted"]), state_store=store)
        await agent.call("more", RuntimeContext("u", "s"))
        assert store.session_cache.misses == 1
        state = await agent.get_state("u", "s")
        assert state.loaded_from == 0 and UNLOADED not in state.messages
        assert state.messages[:120] == msgs and len(state.messages) == 122
    finally:
        await store.close()


async def test_a_context_state_cannot_be_saved(tmp_path: Path) -> None:
    store = SqliteStateStore(tmp_path / "s.db")
    try:
        msgs = _transcript(50)
        await _seed(store, msgs, 80)
        state = await store.load_context("u", "s", agent="bot")
        assert state is not None and state.loaded_from == 80
        with pytest.raises(StateStoreError):
            await store.save(state)
        stored = await store.load("u", "s", agent="bot")
        assert stored is not None and stored.messages == msgs
    finally:
        await store.close()


def _stores(tmp_path: Path, tag: str) -> dict[str, BaseStateStore]:
    return {
        "sqlite": SqliteStateStore(tmp_path / f"{tag}.db"),
        "jsonfile": JsonFileStateStore(tmp_path / f"{tag}-json"),
        "memory": InMemoryStateStore(),
    }


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rounds=st.integers(min_value=0, max_value=120),
    cut=st.one_of(st.none(), st.integers(min_value=0, max_value=120)),
    backend=st.sampled_from(["sqlite", "jsonfile", "memory"]),
    warm=st.booleans(),
)
async def test_a_context_load_changes_nothing_a_whole_load_would_show(
    tmp_path: Path, rounds: int, cut: int | None, backend: str, warm: bool
) -> None:
    msgs = _transcript(rounds)
    index = None if cut is None else min(cut, rounds) * 2
    tag = f"{backend}-{rounds}-{cut}-{warm}"
    context_store, whole_store = _stores(tmp_path, tag + "-c")[backend], _stores(tmp_path, tag + "-w")[backend]
    whole_store.load_context = whole_store.load  # type: ignore[method-assign]
    try:
        for store in (context_store, whole_store):
            await _seed(store, msgs, index)
        if warm:  # a second call serves the cached context entry plus what was appended
            await _call(context_store, "first")
            await _call(whole_store, "first")
        got, want = await _call(context_store), await _call(whole_store)
        assert _prompt(got) == _prompt(want)
        stored = await context_store.load("u", "s", agent="bot")
        expected = await whole_store.load("u", "s", agent="bot")
        assert stored is not None and expected is not None
        assert [(m.role, m.text) for m in stored.messages] == [(m.role, m.text) for m in expected.messages]
        assert stored.messages[: len(msgs)] == msgs
        assert UNLOADED not in stored.messages
    finally:
        await context_store.close()
        await whole_store.close()


def test_context_start_skips_only_long_summaries() -> None:
    from agentrt.state.session import context_start

    assert context_start(AgentState(), 500) == 0
    assert context_start(AgentState(summary="s", summary_index=CONTEXT_MIN_MESSAGES - 1), 500) == 0
    assert context_start(AgentState(summary="s", summary_index=CONTEXT_MIN_MESSAGES), 500) == CONTEXT_MIN_MESSAGES
    assert context_start(AgentState(summary="s", summary_index=900), 500) == 500
    assert context_start(AgentState(summary="", summary_index=300), 500) == 0
    assert context_start(AgentState(summary="s", summary_index=-5), 500) == 0
