"""Tests for `agentrt.model._accumulate.ReplyAccumulator`: folding streamed chunks into one reply."""

import json
from typing import Any

import pytest

from agentrt.errors import ModelBehaviorError
from agentrt.message import ImageBlock, Msg, TextBlock, ThinkingBlock, TokenUsage, ToolUseBlock
from agentrt.model._accumulate import ReplyAccumulator, parse_tool_arguments
from agentrt.model.base import ChatResponse, ToolCallChunk


class RecordingListener:
    """Records every callback as a tuple, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def on_text(self, index: int, delta: str) -> None:
        self.events.append(("text", index, delta))

    def on_thinking(self, index: int, delta: str, signature: str | None) -> None:
        self.events.append(("thinking", index, delta, signature))

    def on_tool_call(self, index: int, call_id: str, name: str) -> None:
        self.events.append(("call", index, call_id, name))

    def on_tool_delta(self, index: int, call_id: str, delta: str) -> None:
        self.events.append(("delta", index, call_id, delta))

    def on_restart(self, reason: str) -> None:
        self.events.append(("restart", reason))


def feed(*chunks: ChatResponse, listener: RecordingListener | None = None) -> ReplyAccumulator:
    acc = ReplyAccumulator(listener)
    for chunk in chunks:
        acc.add(chunk)
    return acc


def call(index: int = 0, **kw: Any) -> ChatResponse:
    return ChatResponse(tool_calls=(ToolCallChunk(index=index, **kw),))


# -- text and thinking ----------------------------------------------------------------------------


def test_text_chunks_join_into_one_block() -> None:
    acc = feed(ChatResponse(text="Hel"), ChatResponse(text="lo, "), ChatResponse(text="wörld 😀"))
    assert acc.content() == [TextBlock(text="Hello, wörld 😀")]
    assert acc.chunks == 3
    assert not acc.empty


def test_thinking_then_text_then_thinking_makes_three_blocks() -> None:
    acc = feed(
        ChatResponse(thinking="first "),
        ChatResponse(thinking="thought"),
        ChatResponse(thinking_signature="sig-1"),
        ChatResponse(text="answer"),
        ChatResponse(text=" part"),
        ChatResponse(thinking="second"),
        ChatResponse(text="more"),
    )
    assert acc.content() == [
        ThinkingBlock(thinking="first thought", signature="sig-1"),
        TextBlock(text="answer part"),
        ThinkingBlock(thinking="second"),
        TextBlock(text="more"),
    ]


def test_text_and_thinking_in_one_chunk() -> None:
    acc = feed(ChatResponse(thinking="why", text="because"))
    assert acc.content() == [ThinkingBlock(thinking="why"), TextBlock(text="because")]


# -- tool calls -----------------------------------------------------------------------------------


def test_tool_call_arguments_split_across_chunks() -> None:
    acc = feed(
        ChatResponse(text="Checking."),
        call(0, id="call_1", name="get_weather"),
        call(0, arguments='{"ci'),
        call(0, arguments='ty": "Par'),
        call(0, arguments='is", "days": [1, 2'),
        call(0, arguments="]}"),
        ChatResponse(finish_reason="tool_calls"),
    )
    assert acc.content() == [
        TextBlock(text="Checking."),
        ToolUseBlock(id="call_1", name="get_weather", input={"city": "Paris", "days": [1, 2]}),
    ]
    assert acc.finish_reason == "tool_calls"


def test_interleaved_tool_call_indices() -> None:
    acc = feed(
        call(0, id="a", name="read", arguments='{"pa'),
        call(1, id="b", name="write", arguments='{"path": "b"'),
        call(0, arguments='th": "a"}'),
        ChatResponse(
            tool_calls=(ToolCallChunk(index=1, arguments=', "x": 1}'), ToolCallChunk(index=2, id="c", name="ls"))
        ),
    )
    assert acc.content() == [
        ToolUseBlock(id="a", name="read", input={"path": "a"}),
        ToolUseBlock(id="b", name="write", input={"path": "b", "x": 1}),
        ToolUseBlock(id="c", name="ls", input={}),
    ]


def test_text_after_tool_call_starts_a_new_block() -> None:
    acc = feed(ChatResponse(text="a"), call(0, id="c", name="f", arguments="{}"), ChatResponse(text="b"))
    assert acc.content() == [TextBlock(text="a"), ToolUseBlock(id="c", name="f", input={}), TextBlock(text="b")]


def test_missing_id_is_generated() -> None:
    acc = feed(call(0, name="f", arguments="{}"), call(1, name="g"))
    blocks = acc.content()
    ids = [b.id for b in blocks if isinstance(b, ToolUseBlock)]
    assert len(ids) == 2
    assert all(i.startswith("call_") and len(i) > len("call_") for i in ids)
    assert ids[0] != ids[1]
    # Stable: the same id every time content is read.
    assert [b.id for b in acc.content() if isinstance(b, ToolUseBlock)] == ids


def test_name_may_arrive_after_the_first_chunk() -> None:
    acc = feed(call(0, id="c1", arguments='{"a": '), call(0, name="late", arguments="1}"))
    assert acc.content() == [ToolUseBlock(id="c1", name="late", input={"a": 1})]


def test_parsed_input_chunks() -> None:
    listener = RecordingListener()
    acc = feed(call(0, id="c1", name="f", input={"x": [1, {"y": "z"}]}), listener=listener)
    assert acc.content() == [ToolUseBlock(id="c1", name="f", input={"x": [1, {"y": "z"}]})]
    assert listener.events[0] == ("call", 0, "c1", "f")
    kind, index, call_id, delta = listener.events[1]
    assert (kind, index, call_id) == ("delta", 0, "c1")
    assert json.loads(delta) == {"x": [1, {"y": "z"}]}


def test_tool_call_metadata_is_merged() -> None:
    acc = feed(call(0, id="c", name="f", metadata={"a": 1}), call(0, arguments="{}", metadata={"b": 2}))
    (block,) = acc.content()
    assert isinstance(block, ToolUseBlock)
    assert block.metadata == {"a": 1, "b": 2}


def test_tool_call_without_name_raises() -> None:
    acc = feed(call(0, id="nameless", arguments="{}"))
    with pytest.raises(ModelBehaviorError, match=r"'nameless'.*without a name"):
        acc.content()
    with pytest.raises(ModelBehaviorError):
        acc.message(name=None)


# -- broken arguments -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"a": 1', {"a": 1}),
        ('{"a": "unterminated', {"a": "unterminated"}),
        ("{'a': 1}", {"a": 1}),
        ('{"a": 1, }', {"a": 1}),
    ],
)
def test_broken_json_arguments_are_repaired(raw: str, expected: dict[str, Any]) -> None:
    acc = feed(call(0, id="c", name="f", arguments=raw))
    (block,) = acc.content()
    assert isinstance(block, ToolUseBlock)
    assert block.input == expected
    assert block.metadata is None


@pytest.mark.parametrize("raw", ["not json at all", "{{{", "@@@"])
def test_unrepairable_arguments_are_marked(raw: str) -> None:
    acc = feed(call(0, id="c", name="f", metadata={"keep": True}), call(0, arguments=raw))
    (block,) = acc.content()
    assert isinstance(block, ToolUseBlock)
    assert block.input == {}
    assert block.metadata is not None
    assert block.metadata["keep"] is True
    assert block.metadata["raw_arguments"] == raw
    assert "not valid JSON" in block.metadata["arguments_error"]


@pytest.mark.parametrize(("raw", "kind"), [("[1, 2]", "list"), ("42", "int"), ('"s"', "str"), ("null", "NoneType")])
def test_non_object_arguments_are_marked(raw: str, kind: str) -> None:
    acc = feed(call(0, id="c", name="f", arguments=raw))
    (block,) = acc.content()
    assert isinstance(block, ToolUseBlock)
    assert block.input == {}
    assert block.metadata is not None
    assert block.metadata["arguments_error"].startswith(f"arguments must be a JSON object, got {kind}")
    assert block.metadata["raw_arguments"] == raw


def test_parse_tool_arguments_direct() -> None:
    assert parse_tool_arguments("") == ({}, None)
    assert parse_tool_arguments("   ") == ({}, None)
    assert parse_tool_arguments('{"a": {"b": [true, null]}}') == ({"a": {"b": [True, None]}}, None)
    assert parse_tool_arguments("{}") == ({}, None)
    args, error = parse_tool_arguments("[]")
    assert args == {}
    assert error is not None
    assert "list" in error


# -- usage, finish reason, message ---------------------------------------------------------------


def test_usage_merge_keeps_larger_counts() -> None:
    acc = feed(
        ChatResponse(usage=TokenUsage(input_tokens=10, output_tokens=1)),
        ChatResponse(text="x"),
        ChatResponse(usage=TokenUsage(input_tokens=10, output_tokens=7, reasoning_tokens=3)),
        ChatResponse(usage=TokenUsage(cache_read_tokens=4)),
    )
    assert acc.usage == TokenUsage(input_tokens=10, output_tokens=7, reasoning_tokens=3, cache_read_tokens=4)
    assert acc.message(name=None).usage == acc.usage


def test_no_usage() -> None:
    acc = feed(ChatResponse(text="x"))
    assert acc.usage is None
    assert acc.message(name=None).usage is None


def test_finish_reason_last_one_wins_and_goes_to_metadata() -> None:
    acc = feed(ChatResponse(text="x", finish_reason="length"), ChatResponse(finish_reason="stop"))
    assert acc.finish_reason == "stop"
    msg = acc.message(name="bot", msg_id="m-1")
    assert isinstance(msg, Msg)
    assert msg.role == "assistant"
    assert msg.name == "bot"
    assert msg.id == "m-1"
    assert msg.metadata == {"finish_reason": "stop"}
    assert msg.content == [TextBlock(text="x")]


def test_message_without_finish_reason_has_empty_metadata() -> None:
    msg = feed(ChatResponse(text="x")).message(name=None)
    assert msg.metadata == {}
    assert len(msg.id) == 32


def test_extra_blocks_are_kept() -> None:
    img = ImageBlock(source="http://x/y.png")
    acc = feed(ChatResponse(blocks=(img,)), ChatResponse(text="caption"))
    assert acc.content() == [img, TextBlock(text="caption")]
    assert not acc.empty


def test_extra_block_between_texts_keeps_its_position() -> None:
    img = ImageBlock(source="http://x/y.png")
    acc = feed(ChatResponse(text="before"), ChatResponse(blocks=(img,)), ChatResponse(text="after"))
    assert acc.content() == [TextBlock(text="before"), img, TextBlock(text="after")]


# -- errors and emptiness ------------------------------------------------------------------------


@pytest.mark.parametrize("garbage", ["text", {"text": "x"}, None, TextBlock(text="x")])
def test_non_chat_response_chunk_raises(garbage: Any) -> None:
    acc = ReplyAccumulator()
    with pytest.raises(ModelBehaviorError, match="expected ChatResponse"):
        acc.add(garbage)


def test_non_tool_call_chunk_raises() -> None:
    acc = ReplyAccumulator()
    with pytest.raises(ModelBehaviorError, match="expected ToolCallChunk"):
        acc.add(ChatResponse(tool_calls=({"index": 0, "name": "f"},)))  # type: ignore[arg-type]


@pytest.mark.parametrize("garbage", ["text", {"type": "text", "text": "x"}, 42])
def test_non_block_in_blocks_raises(garbage: Any) -> None:
    acc = ReplyAccumulator()
    with pytest.raises(ModelBehaviorError, match="not a content block"):
        acc.add(ChatResponse(blocks=(garbage,)))


def test_empty_property() -> None:
    assert ReplyAccumulator().empty
    assert feed(ChatResponse(finish_reason="stop")).empty
    assert feed(ChatResponse(text="   \n ")).empty  # whitespace is no answer
    assert feed(ChatResponse(thinking="only thinking")).empty  # thinking alone is no answer
    assert feed(ChatResponse(usage=TokenUsage(input_tokens=3))).empty
    assert not feed(ChatResponse(text=" x ")).empty
    assert not feed(call(0, id="c", name="f")).empty
    assert not feed(ChatResponse(blocks=(ImageBlock(source="u"),))).empty


# -- listener -------------------------------------------------------------------------------------


def test_listener_receives_block_indices_in_order() -> None:
    listener = RecordingListener()
    acc = feed(
        ChatResponse(thinking="hm"),
        ChatResponse(thinking="m", thinking_signature="sig"),
        ChatResponse(text="I'll "),
        ChatResponse(text="call."),
        call(0, id="a", name="f", arguments='{"x"'),
        call(1, id="b", name="g"),
        call(0, arguments=": 1}"),
        call(1, arguments="{}"),
        ChatResponse(text="done"),
        listener=listener,
    )
    assert listener.events == [
        ("thinking", 0, "hm", None),
        ("thinking", 0, "m", "sig"),
        ("text", 1, "I'll "),
        ("text", 1, "call."),
        ("call", 2, "a", "f"),
        ("delta", 2, "a", '{"x"'),
        ("call", 3, "b", "g"),
        ("delta", 2, "a", ": 1}"),
        ("delta", 3, "b", "{}"),
        ("text", 4, "done"),
    ]
    # The listener's indices are the positions of the blocks in the final content.
    content = acc.content()
    assert isinstance(content[0], ThinkingBlock)
    assert isinstance(content[1], TextBlock)
    assert content[2] == ToolUseBlock(id="a", name="f", input={"x": 1})
    assert content[3] == ToolUseBlock(id="b", name="g", input={})
    assert content[4] == TextBlock(text="done")


def test_listener_sees_generated_id() -> None:
    listener = RecordingListener()
    acc = feed(call(0, name="f"), call(0, arguments="{}"), listener=listener)
    (block,) = acc.content()
    assert isinstance(block, ToolUseBlock)
    assert listener.events == [("call", 0, block.id, "f"), ("delta", 0, block.id, "{}")]


def test_restart_chunk_discards_the_partial_reply() -> None:
    restarts: list[str] = []

    class Listener(RecordingListener):
        def on_restart(self, reason: str) -> None:
            restarts.append(reason)

    acc = ReplyAccumulator(Listener())
    acc.add(ChatResponse(text="half an ans"))
    acc.add(ChatResponse(tool_calls=[ToolCallChunk(index=0, id="c1", name="t", arguments='{"a"')]))
    acc.add(ChatResponse(restart="stream died; retrying on fallback"))
    acc.add(ChatResponse(text="full answer", finish_reason="stop"))
    assert acc.content() == [TextBlock(text="full answer")]
    assert restarts == ["stream died; retrying on fallback"]
