"""The state codec's field encodings: `encode_fields_json` writes what `encode_fields` + JSON writes."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from agentrt import _json
from agentrt.errors import UserError
from agentrt.state.codec import encode_fields, encode_fields_json
from agentrt.state.pending import Pending, PendingCall


class Color(enum.Enum):
    RED = "red"


@dataclass
class Point:
    x: int
    y: tuple[int, ...]


FIELDS: list[dict[str, Any]] = [
    {"summary": "s", "summary_index": 3, "active_groups": ["a", "b"]},
    {"tool_state": {"in_flight": {"assistant_id": "a1", "calls": ["c1"], "results": []}}},
    {"tool_state": {"color": Color.RED, "point": Point(1, (2, 3)), "when": datetime(2026, 1, 2, tzinfo=UTC)}},
    {"tool_state": {"id": uuid.UUID(int=7), "raw": b"bytes", "tuple": (1, (2,)), "big": 2**70}},
    {"metadata": {1: "int key", None: "none key", Color.RED: "enum key", 2.5: "float key"}},
    {"metadata": {True: "bool key", "nested": {False: [1, {3: "x"}]}}},
    {
        "pending": Pending(
            reply_id="r", assistant_id="a", calls=(PendingCall(id="c", name="t", input={}, kind="confirm"),)
        )
    },
    {"pending": None, "rules": [], "tasks": [{"content": "t", "status": "pending"}]},
]


@pytest.mark.parametrize("fields", FIELDS)
def test_json_text_of_fields_is_the_json_of_their_encoding(fields: dict[str, Any]) -> None:
    texts = encode_fields_json(fields)
    assert texts == {name: _json.dumps(value) for name, value in encode_fields(fields).items()}
    assert {name: _json.loads(text) for name, text in texts.items()} == encode_fields(fields)


def test_an_unknown_field_is_refused_by_both() -> None:
    for encode in (encode_fields, encode_fields_json):
        with pytest.raises(UserError, match="unknown AgentState field"):
            encode({"nope": 1})
