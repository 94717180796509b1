"""The server's event encoding is byte-for-byte what ``dumps_bytes(event.to_dict())`` gives, only faster."""

from __future__ import annotations

import datetime
import enum
import json
import uuid
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt import _json
from agentrt import events as ev
from agentrt.message import Msg, TextBlock, ThinkingBlock, TokenUsage, ToolResultBlock, ToolUseBlock
from agentrt.server.context import ServerContext


class Colour(enum.Enum):
    RED = "red"


@dataclass
class Point:
    x: int
    when: datetime.datetime


@dataclass
class WithToDict:
    secret: str

    def to_dict(self) -> dict[str, Any]:
        return {"shown": True}


_ODD = st.sampled_from(
    [
        datetime.datetime(2026, 1, 2, 3, 4, 5),
        datetime.date(2026, 1, 2),
        uuid.UUID(int=7),
        Colour.RED,
        (1, 2),
        frozenset({"a"}),
        b"bytes",
        Point(1, datetime.datetime(2026, 1, 1)),
        WithToDict("no"),
        10**30,
    ]
)
_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**62), 2**62), st.text(max_size=8), _ODD),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=8,
)


def _msg(meta: dict[str, Any], tool_input: dict[str, Any]) -> Msg:
    return Msg(
        role="assistant",
        content=[
            TextBlock(text="hi"),
            ThinkingBlock(thinking="t", metadata=meta),
            ToolUseBlock(name="f", input=tool_input, metadata=meta),
        ],
        metadata=meta,
        usage=TokenUsage(input_tokens=3, output_tokens=4),
    )


@st.composite
def _events(draw: st.DrawFn) -> ev.AgentEvent:
    meta = draw(st.dictionaries(st.text(max_size=5), _VALUES, max_size=3))
    tool_input = draw(st.dictionaries(st.text(max_size=5), _VALUES, max_size=3))
    msg = _msg(meta, tool_input)
    ids: dict[str, Any] = {"reply_id": "r", "session_id": "s", "source": "bot"}
    kind = draw(st.sampled_from(["started", "call_finished", "finished", "tool_result", "confirm", "usage"]))
    if kind == "started":
        return ev.RunStarted(**ids, input=[msg, Msg.user("q")], user_id="u")
    if kind == "call_finished":
        return ev.ModelCallFinished(**ids, step=1, msg=msg, finish_reason="stop")
    if kind == "finished":
        return ev.RunFinished(**ids, msg=msg)
    if kind == "tool_result":
        return ev.ToolResult(**ids, result=ToolResultBlock(id="c", name="f", output="out", metadata=meta), elapsed=0.5)
    if kind == "confirm":
        return ev.RequireUserConfirm(**ids, tool_calls=[ev.PendingToolCall(id="c", name="f", input=tool_input)])
    return ev.Usage(**ids, usage=TokenUsage(input_tokens=1, output_tokens=2), model="m")


@settings(max_examples=300, deadline=None)
@given(event=_events())
def test_event_json_is_the_json_of_to_dict(event: ev.AgentEvent) -> None:
    fast = ServerContext.event_json(None, "bot", event)  # type: ignore[arg-type]
    assert fast == _json.dumps_bytes(event.to_dict())
    assert json.loads(fast)["type"] == event.type
