"""`Pending` / `PendingCall`: the typed `AgentState.pending`, stored in the JSON form earlier versions wrote."""

from __future__ import annotations

import json

from agentrt.message import Msg
from agentrt.state import AgentState, InMemoryStateStore, Pending, PendingCall, flatten_pending
from agentrt.state.codec import decode_state, encode_fields, encode_state

# What the agent loop stored before `pending` was typed: a paused turn with an approval, an
# external call and a subagent waiting for its own approval, plus a note held back.
OLD = {
    "reply_id": "r1",
    "assistant_id": "a1",
    "calls": [
        {
            "id": "c1",
            "name": "delete_file",
            "input": {"path": "/tmp/a"},
            "kind": "confirm",
            "reason": "destructive",
            "suggested_rules": [{"tool": "delete_file", "decision": "allow", "args": {"path": "/tmp/a"}}],
        },
        {
            "id": "c2",
            "name": "pay",
            "input": {},
            "kind": "external",
            "reason": "runs outside the agent",
            "suggested_rules": [],
        },
        {
            "id": "c3",
            "name": "helper",
            "input": {"task": "clean"},
            "kind": "subagent",
            "reason": "",
            "suggested_rules": [],
            "children": [
                {"id": "d1", "name": "rm", "input": {}, "kind": "confirm", "reason": "", "suggested_rules": []}
            ],
            "state": {"session_id": "s-child"},
        },
    ],
    "notes": [Msg.user("and hurry").to_dict()],
}


def test_the_old_json_loads_typed_and_is_written_back_unchanged() -> None:
    pending = Pending.from_dict(OLD)
    assert pending.reply_id == "r1" and pending.assistant_id == "a1"
    assert [(c.id, c.kind) for c in pending.calls] == [("c1", "confirm"), ("c2", "external"), ("c3", "subagent")]
    assert pending.calls[2].children[0].id == "d1" and pending.calls[2].state == {"session_id": "s-child"}
    assert pending.notes[0].text == "and hurry"
    assert json.dumps(pending.to_dict()) == json.dumps(OLD)


def test_the_codec_converts_both_ways() -> None:
    doc = encode_state(AgentState(user_id="u", session_id="s", pending=Pending.from_dict(OLD)))
    assert doc["pending"] == OLD
    state = decode_state({**doc, "pending": OLD})
    assert isinstance(state.pending, Pending) and state.pending == Pending.from_dict(OLD)
    assert encode_fields({"pending": OLD})["pending"] == OLD  # the JSON form is accepted too
    assert decode_state({**doc, "pending": None}).pending is None


def test_flatten_pending_replaces_subagents_by_their_children() -> None:
    pending = Pending.from_dict(OLD)
    assert [c.id for c in flatten_pending(pending)] == ["c1", "c2", "d1"]
    assert flatten_pending(None) == []
    assert [c.id for c in flatten_pending([PendingCall(id="x", name="t")])] == ["x"]


async def test_the_memory_store_types_a_pending_written_as_json() -> None:
    store = InMemoryStateStore()
    await store.append("u", "s", [], fields={"pending": OLD}, expected_revision=0)
    state = await store.load("u", "s")
    assert state is not None and state.pending == Pending.from_dict(OLD)
