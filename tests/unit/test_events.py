"""Tests for `agentrt.events`: event types, their JSON form, and the `EventReducer`."""

import dataclasses
import json
from typing import Any

import pytest

from agentrt import events as events_module
from agentrt.events import (
    AgentEvent,
    ContextCompressed,
    EventReducer,
    ExternalExecutionResult,
    Interrupted,
    ModelCallFinished,
    ModelCallStarted,
    PendingToolCall,
    RequireExternalExecution,
    RequireUserConfirm,
    RunError,
    RunFinished,
    RunStarted,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallStarted,
    ToolResult,
    Usage,
    event_from_dict,
    reduce_events,
    register_event_type,
)
from agentrt.message import (
    GenerateReason,
    ImageBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    TokenUsage,
    ToolResultBlock,
    ToolUseBlock,
)

R = "reply-1"
S = "sess-1"
A = "agent"


def _kw(**extra: Any) -> dict[str, Any]:
    return {"reply_id": R, "session_id": S, "source": A, **extra}


_MSG = Msg(
    role="assistant",
    content=[TextBlock(text="done 😀"), ToolUseBlock(id="c1", name="f", input={"a": [1, {"b": None}]})],
    name=A,
    metadata={"generate_reason": "max_iters"},
    id=R,
    timestamp=123.25,
    usage=TokenUsage(input_tokens=5, output_tokens=6),
)
_RESULT = ToolResultBlock(id="c1", name="f", output=[TextBlock(text="ok"), ImageBlock(source="u")], state="error")
_PENDING = PendingToolCall(id="c1", name="rm", input={"path": "/tmp/x"}, suggested_rules=[{"tool": "rm"}], reason="why")

SAMPLES: list[tuple[str, AgentEvent]] = [
    ("run_started", RunStarted(**_kw(input=[Msg.user("hi", name="u")], user_id="u1"))),
    ("model_call_started", ModelCallStarted(**_kw(step=2, model="scripted:x"))),
    ("text_delta", TextDelta(**_kw(block_id="b1", delta="hel"))),
    ("thinking_delta", ThinkingDelta(**_kw(block_id="b0", delta="hmm", signature="sig"))),
    ("tool_call_started", ToolCallStarted(**_kw(block_id="b2", tool_call_id="c1", name="f"))),
    ("tool_call_delta", ToolCallDelta(**_kw(block_id="b2", tool_call_id="c1", delta='{"a":'))),
    ("model_call_finished", ModelCallFinished(**_kw(step=1, msg=_MSG, finish_reason="tool_calls"))),
    ("tool_result", ToolResult(**_kw(result=_RESULT, elapsed=0.5))),
    ("require_user_confirm", RequireUserConfirm(**_kw(tool_calls=[_PENDING]))),
    ("require_external_execution", RequireExternalExecution(**_kw(tool_calls=[_PENDING]))),
    ("external_execution_result", ExternalExecutionResult(**_kw(results=[_RESULT]))),
    ("usage", Usage(**_kw(usage=TokenUsage(input_tokens=1, output_tokens=2, reasoning_tokens=3), model="m"))),
    ("context_compressed", ContextCompressed(**_kw(before_tokens=1000, after_tokens=300, tier=2))),
    ("interrupted", Interrupted(**_kw(message="stop"))),
    ("run_error", RunError(**_kw(error="boom", error_type="ModelAPIError"))),
    ("run_finished", RunFinished(**_kw(msg=_MSG))),
]
_IDS = [name for name, _ in SAMPLES]


@pytest.mark.parametrize(("expected", "event"), SAMPLES, ids=_IDS)
def test_type_is_snake_case_class_name(expected: str, event: AgentEvent) -> None:
    assert event.type == expected
    assert type(event).type == expected


@pytest.mark.parametrize(("expected", "event"), SAMPLES, ids=_IDS)
def test_to_dict_has_type_and_round_trips(expected: str, event: AgentEvent) -> None:
    d = event.to_dict()
    assert next(iter(d)) == "type"
    assert d["type"] == expected
    assert d["reply_id"] == R
    assert d["session_id"] == S
    assert d["source"] == A
    back = event_from_dict(d)
    assert type(back) is type(event)
    assert back == event


@pytest.mark.parametrize(("expected", "event"), SAMPLES, ids=_IDS)
def test_json_round_trips(expected: str, event: AgentEvent) -> None:
    text = event.to_json()
    data = json.loads(text)
    assert data["type"] == expected
    assert event_from_dict(data) == event


@pytest.mark.parametrize(("expected", "event"), SAMPLES, ids=_IDS)
def test_events_are_frozen(expected: str, event: AgentEvent) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.reply_id = "other"  # type: ignore[misc]
    assert event.reply_id == R


def test_every_documented_type_is_covered() -> None:
    assert len({t for t, _ in SAMPLES}) == 16


def test_event_constructors_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        TextDelta(R, S, A, "b", "d")  # type: ignore[call-arg]


def test_event_dict_shapes() -> None:
    d = ToolResult(**_kw(result=_RESULT)).to_dict()
    assert d["result"]["type"] == "tool_result"
    assert d["result"]["state"] == "error"
    d = RequireUserConfirm(**_kw(tool_calls=[_PENDING])).to_dict()
    assert d["tool_calls"] == [
        {"id": "c1", "name": "rm", "input": {"path": "/tmp/x"}, "suggested_rules": [{"tool": "rm"}], "reason": "why"}
    ]
    d = RunFinished(**_kw(msg=_MSG)).to_dict()
    assert d["msg"]["id"] == R
    assert d["msg"]["content"][0] == {"type": "text", "text": "done 😀"}


def test_event_defaults() -> None:
    e = TextDelta(reply_id=R, block_id="b", delta="x")
    assert e.session_id == ""
    assert e.source == ""
    assert event_from_dict({"type": "text_delta", "reply_id": R, "block_id": "b", "delta": "x"}) == e


def test_event_from_dict_unknown_type() -> None:
    with pytest.raises(ValueError, match="unknown event type 'bogus'"):
        event_from_dict({"type": "bogus", "reply_id": R})
    with pytest.raises(ValueError, match="unknown event type"):
        event_from_dict({"reply_id": R})


def test_register_custom_event_type(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events_module, "_EVENT_TYPES", dict(events_module._EVENT_TYPES))

    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class PlanUpdated(AgentEvent):
        plan: str = ""

    register_event_type(PlanUpdated)
    event = PlanUpdated(reply_id=R, plan="step 1")
    assert event.type == "plan_updated"
    assert event.to_dict()["type"] == "plan_updated"
    assert event_from_dict(event.to_dict()) == event
    assert event_from_dict(json.loads(event.to_json())) == event


# -- reducer --------------------------------------------------------------------------------------


def _stream_with_two_steps() -> tuple[list[AgentEvent], Msg]:
    usage1 = TokenUsage(input_tokens=10, output_tokens=5)
    usage2 = TokenUsage(input_tokens=20, output_tokens=7, cache_read_tokens=4)
    final = Msg(
        role="assistant",
        content=[
            ThinkingBlock(thinking="let me think", signature="sig-2"),
            TextBlock(text="The answer is 42."),
            TextBlock(text="Anything else?"),
        ],
        name=A,
        metadata={"custom": 1},
        id=R,
        timestamp=999.5,
        usage=usage1 + usage2,
    )
    events: list[AgentEvent] = [
        RunStarted(**_kw(input=[Msg.user("q")])),
        ModelCallStarted(**_kw(step=1)),
        TextDelta(**_kw(block_id="s1t", delta="Let me ")),
        TextDelta(**_kw(block_id="s1t", delta="check.")),
        ToolCallStarted(**_kw(block_id="s1c", tool_call_id="c1", name="search")),
        ToolCallDelta(**_kw(block_id="s1c", tool_call_id="c1", delta='{"q": "li')),
        ToolCallDelta(**_kw(block_id="s1c", tool_call_id="c1", delta='fe"}')),
        Usage(**_kw(usage=usage1)),
        ToolResult(**_kw(result=ToolResultBlock(id="c1", name="search", output="42"))),
        ModelCallStarted(**_kw(step=2)),
        ThinkingDelta(**_kw(block_id="s2k", delta="let me ")),
        ThinkingDelta(**_kw(block_id="s2k", delta="think", signature="sig-2")),
        TextDelta(**_kw(block_id="s2t1", delta="The answer ")),
        TextDelta(**_kw(block_id="s2t1", delta="is 42.")),
        TextDelta(**_kw(block_id="s2t2", delta="Anything else?")),
        Usage(**_kw(usage=usage2)),
        RunFinished(**_kw(msg=final)),
    ]
    return events, final


def test_reduce_events_rebuilds_final_message() -> None:
    events, final = _stream_with_two_steps()
    msg = reduce_events(events)
    assert msg == final
    assert msg.usage == TokenUsage(input_tokens=30, output_tokens=12, cache_read_tokens=4)


def test_reducer_partial_message_mid_stream_and_reset_at_model_call_started() -> None:
    events, _ = _stream_with_two_steps()
    r = EventReducer()
    for e in events[:3]:
        r.feed(e)
    assert not r.finished
    assert r.reply_id == R
    assert r.msg.id == R
    assert r.msg.role == "assistant"
    assert r.msg.name == A
    assert r.msg.content == [TextBlock(text="Let me ")]
    # Arguments split mid-JSON: not parseable yet, the call shows with empty input.
    for e in events[3:6]:
        r.feed(e)
    assert r.msg.content == [TextBlock(text="Let me check."), ToolUseBlock(id="c1", name="search", input={})]
    r.feed(events[6])
    assert r.msg.content == [TextBlock(text="Let me check."), ToolUseBlock(id="c1", name="search", input={"q": "life"})]
    assert r.msg.tool_calls[0].input == {"q": "life"}
    r.feed(events[7])
    assert r.msg.usage == TokenUsage(input_tokens=10, output_tokens=5)
    r.feed(events[8])
    r.feed(events[9])  # second ModelCallStarted: content resets, usage stays
    assert r.msg.content == []
    assert r.msg.usage == TokenUsage(input_tokens=10, output_tokens=5)
    r.feed(events[10])
    assert r.msg.content == [ThinkingBlock(thinking="let me ")]
    r.feed(events[11])
    assert r.msg.content == [ThinkingBlock(thinking="let me think", signature="sig-2")]
    assert r.msg.generate_reason is GenerateReason.STOP
    assert not r.finished
    for e in events[12:]:
        r.feed(e)
    assert r.finished


def test_reducer_interleaves_text_thinking_and_several_tool_calls() -> None:
    events: list[AgentEvent] = [
        ModelCallStarted(**_kw(step=1)),
        ThinkingDelta(**_kw(block_id="k1", delta="plan")),
        TextDelta(**_kw(block_id="t1", delta="I will ")),
        ToolCallStarted(**_kw(block_id="c1", tool_call_id="call_a", name="read")),
        ToolCallStarted(**_kw(block_id="c2", tool_call_id="call_b", name="write")),
        ToolCallDelta(**_kw(block_id="c2", tool_call_id="call_b", delta='{"path": "b.txt", ')),
        ToolCallDelta(**_kw(block_id="c1", tool_call_id="call_a", delta='{"pa')),
        TextDelta(**_kw(block_id="t1", delta="do both.")),
        ToolCallDelta(**_kw(block_id="c1", tool_call_id="call_a", delta='th": "a.txt"}')),
        ToolCallDelta(**_kw(block_id="c2", tool_call_id="call_b", delta='"data": [1, 2, {"x": "é"}]}')),
        TextDelta(**_kw(block_id="t2", delta="Second text")),
        ToolCallStarted(**_kw(block_id="c3", tool_call_id="call_c", name="noargs")),
    ]
    msg = reduce_events(events)
    assert msg.content == [
        ThinkingBlock(thinking="plan"),
        TextBlock(text="I will do both."),
        ToolUseBlock(id="call_a", name="read", input={"path": "a.txt"}),
        ToolUseBlock(id="call_b", name="write", input={"path": "b.txt", "data": [1, 2, {"x": "é"}]}),
        TextBlock(text="Second text"),
        ToolUseBlock(id="call_c", name="noargs", input={}),
    ]
    assert msg.text == "I will do both.\nSecond text"
    assert [c.id for c in msg.tool_calls] == ["call_a", "call_b", "call_c"]
    assert msg.usage is None


def test_reducer_non_object_arguments_give_empty_input() -> None:
    events: list[AgentEvent] = [
        ToolCallStarted(**_kw(block_id="c1", tool_call_id="x", name="f")),
        ToolCallDelta(**_kw(block_id="c1", tool_call_id="x", delta="[1, 2]")),
    ]
    assert reduce_events(events).content == [ToolUseBlock(id="x", name="f", input={})]


def test_reducer_ignores_other_reply_ids_and_sources() -> None:
    sub: dict[str, Any] = {"session_id": S, "source": "researcher"}
    events: list[AgentEvent] = [
        ModelCallStarted(**_kw(step=1)),
        TextDelta(**_kw(block_id="t", delta="mine ")),
        # A subagent's forwarded stream: own reply id and source.
        ModelCallStarted(reply_id="sub-reply", step=1, **sub),
        TextDelta(reply_id="sub-reply", block_id="t", delta="THEIRS", **sub),
        Usage(reply_id="sub-reply", usage=TokenUsage(input_tokens=1000), **sub),
        Interrupted(reply_id="sub-reply", **sub),
        RunFinished(reply_id="sub-reply", msg=Msg.assistant("sub answer"), **sub),
        # Same reply id but another source (a forwarded event keeps its own source).
        TextDelta(reply_id=R, session_id=S, source="other", block_id="t", delta="NOPE"),
        ModelCallStarted(reply_id=R, session_id=S, source="other", step=9),
        # Another call entirely.
        TextDelta(reply_id="reply-2", session_id=S, source=A, block_id="t", delta="NOPE"),
        TextDelta(**_kw(block_id="t", delta="only")),
        Usage(**_kw(usage=TokenUsage(input_tokens=3))),
    ]
    r = EventReducer()
    msg = r.feed_all(events)
    assert msg.content == [TextBlock(text="mine only")]
    assert msg.usage == TokenUsage(input_tokens=3)
    assert msg.generate_reason is GenerateReason.STOP
    assert not r.finished
    assert r.reply_id == R


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        (RequireUserConfirm(**_kw(tool_calls=[_PENDING])), GenerateReason.AWAITING_CONFIRMATION),
        (RequireExternalExecution(**_kw(tool_calls=[_PENDING])), GenerateReason.AWAITING_EXTERNAL_EXECUTION),
        (Interrupted(**_kw()), GenerateReason.INTERRUPTED),
    ],
    ids=["confirm", "external", "interrupted"],
)
def test_reducer_generate_reason_from_pause_events(event: AgentEvent, reason: GenerateReason) -> None:
    r = EventReducer()
    r.feed(ModelCallStarted(**_kw(step=1)))
    r.feed(TextDelta(**_kw(block_id="t", delta="x")))
    assert r.msg.generate_reason is GenerateReason.STOP
    assert "generate_reason" not in r.msg.metadata
    r.feed(event)
    assert r.msg.generate_reason is reason
    assert r.msg.metadata["generate_reason"] == reason.value
    assert not r.finished


def test_reducer_generate_reason_from_run_finished() -> None:
    final = Msg(
        role="assistant", content=[TextBlock(text="x")], metadata={"generate_reason": "max_iters"}, id=R, name=A
    )
    r = EventReducer()
    r.feed(TextDelta(**_kw(block_id="t", delta="x")))
    r.feed(RunFinished(**_kw(msg=final)))
    assert r.finished
    assert r.msg.generate_reason is GenerateReason.MAX_ITERS
    assert r.msg.timestamp == final.timestamp
    assert r.msg.metadata == final.metadata


def test_reducer_run_finished_overrides_pause_reason() -> None:
    final = Msg(
        role="assistant", content=[TextBlock(text="x")], metadata={"generate_reason": "interrupted"}, id=R, name=A
    )
    events: list[AgentEvent] = [
        RequireUserConfirm(**_kw(tool_calls=[_PENDING])),
        RunFinished(**_kw(msg=final)),
    ]
    assert reduce_events(events).generate_reason is GenerateReason.INTERRUPTED


def test_reducer_empty() -> None:
    r = EventReducer()
    assert r.reply_id is None
    assert not r.finished
    msg = r.msg
    assert msg.content == []
    assert msg.role == "assistant"
    assert msg.usage is None


def test_reducer_sources_without_name() -> None:
    events: list[AgentEvent] = [TextDelta(reply_id=R, block_id="t", delta="anon")]
    msg = reduce_events(events)
    assert msg.name is None
    assert msg.id == R
    assert msg.text == "anon"
