"""Tests for `agentrt.message`: Msg, content blocks, token usage and the JSON codec."""

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.errors import InvalidTypeError, InvalidValueError
from agentrt.message import (
    AudioBlock,
    Base64Source,
    GenerateReason,
    ImageBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    TokenUsage,
    ToolResultBlock,
    ToolUseBlock,
    VideoBlock,
    block_from_dict,
)

# -- strategies -----------------------------------------------------------------------------------

# Text that stresses the codec: the full (non-surrogate) unicode range plus hand-picked awkward strings.
texts = st.one_of(
    st.text(),
    st.sampled_from(
        ["", "\x00", "a\x00b", "😀🎉👨‍👩‍👧", "中文字符 日本語 한국어", '"quoted" \\ back\nslash\t', "\u2028\u2029"]
    ),
    st.text(alphabet=st.sampled_from(["\x00", "😀", "中", "\n", '"', "\\", "é", "\u200b"]), max_size=20),
)
short_ids = st.text(min_size=1, max_size=30)
int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
finite_floats = st.floats(allow_nan=False, allow_infinity=False)

json_scalars = st.one_of(st.none(), st.booleans(), int64, finite_floats, texts)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(texts, children, max_size=4),
    ),
    max_leaves=12,
)
json_objects = st.dictionaries(texts, json_values, max_size=5)

sources = st.one_of(
    st.text(min_size=0, max_size=40),
    st.builds(Base64Source, media_type=st.sampled_from(["image/png", "audio/wav", "video/mp4", "x/y"]), data=texts),
)

text_blocks = st.builds(TextBlock, text=texts)
thinking_blocks = st.builds(
    ThinkingBlock,
    thinking=texts,
    signature=st.none() | texts,
    metadata=st.none() | json_objects,
)
media_blocks = st.one_of(
    st.builds(ImageBlock, source=sources),
    st.builds(AudioBlock, source=sources),
    st.builds(VideoBlock, source=sources),
)
tool_use_blocks = st.builds(
    ToolUseBlock,
    id=short_ids,
    name=short_ids,
    input=json_objects,
    metadata=st.none() | json_objects,
)
result_output_blocks = st.lists(st.one_of(text_blocks, media_blocks, thinking_blocks), max_size=4)
tool_result_blocks = st.builds(
    ToolResultBlock,
    id=short_ids,
    name=short_ids,
    output=st.one_of(texts, result_output_blocks),
    state=st.sampled_from(["success", "error", "denied", "interrupted"]),
    metadata=st.none() | json_objects,
)
any_block = st.one_of(text_blocks, thinking_blocks, media_blocks, tool_use_blocks, tool_result_blocks)
usages = st.builds(
    TokenUsage,
    input_tokens=st.integers(0, 2**40),
    output_tokens=st.integers(0, 2**40),
    cache_read_tokens=st.integers(0, 2**40),
    cache_write_tokens=st.integers(0, 2**40),
    reasoning_tokens=st.integers(0, 2**40),
)
messages = st.builds(
    Msg,
    role=st.sampled_from(["user", "assistant", "system"]),
    content=st.lists(any_block, max_size=6),
    name=st.none() | texts,
    metadata=json_objects,
    id=short_ids,
    timestamp=finite_floats,
    usage=st.none() | usages,
)


# -- round trips ----------------------------------------------------------------------------------


@settings(max_examples=300)
@given(messages)
def test_json_round_trip_is_exact(msg: Msg) -> None:
    text = msg.to_json()
    assert isinstance(text, str)
    back = Msg.from_json(text)
    assert back == msg
    assert back.content == msg.content
    assert back.usage == msg.usage
    assert back.timestamp == msg.timestamp


@settings(max_examples=200)
@given(messages)
def test_dict_round_trip_is_exact(msg: Msg) -> None:
    d = msg.to_dict()
    assert Msg.from_dict(d) == msg
    # The dict form is plain JSON: the standard library can encode and decode it unchanged.
    assert Msg.from_dict(json.loads(json.dumps(d))) == msg


@settings(max_examples=100)
@given(messages)
def test_from_json_accepts_str_bytes_and_dict(msg: Msg) -> None:
    text = msg.to_json()
    assert Msg.from_json(text) == msg
    assert Msg.from_json(text.encode("utf-8")) == msg
    assert Msg.from_json(msg.to_dict()) == msg


@given(any_block)
def test_block_round_trip(block: Any) -> None:
    assert block_from_dict(block.to_dict()) == block
    assert block.to_dict()["type"] == block.type


def test_new_ids_are_random_version_4_uuids_in_hex() -> None:
    import uuid

    from agentrt.message import _new_call_id, new_id

    ids = {new_id() for _ in range(1000)}
    assert len(ids) == 1000
    for value in list(ids)[:50]:
        assert len(value) == 32 and uuid.UUID(value).hex == value
        assert uuid.UUID(value).version == 4 and uuid.UUID(value).variant == uuid.RFC_4122
    call_id = _new_call_id()
    assert call_id.startswith("call_") and len(call_id) == 29


def test_to_json_is_valid_json_with_expected_shape() -> None:
    msg = Msg(
        role="assistant",
        content=[TextBlock(text="hé 😀 中\x00"), ToolUseBlock(id="c1", name="f", input={"a": [1, {"b": None}]})],
        name="bot",
        metadata={"k": [1, 2.5, "x"]},
        id="m1",
        timestamp=12.5,
        usage=TokenUsage(input_tokens=3, output_tokens=4),
    )
    data = json.loads(msg.to_json())
    assert data["id"] == "m1"
    assert data["role"] == "assistant"
    assert data["name"] == "bot"
    assert data["timestamp"] == 12.5
    assert data["metadata"] == {"k": [1, 2.5, "x"]}
    assert data["content"] == [
        {"type": "text", "text": "hé 😀 中\x00"},
        {"type": "tool_use", "id": "c1", "name": "f", "input": {"a": [1, {"b": None}]}},
    ]
    assert data["usage"]["input_tokens"] == 3
    assert data["usage"]["output_tokens"] == 4


def test_usage_absent_is_not_serialised() -> None:
    msg = Msg.user("hi")
    assert "usage" not in msg.to_dict()
    assert Msg.from_json(msg.to_json()).usage is None


def test_base64_source_round_trip() -> None:
    block = ImageBlock(source=Base64Source(media_type="image/png", data="iVBORw0KGgo="))
    assert block.to_dict() == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
    }
    assert block_from_dict(block.to_dict()) == block
    url = VideoBlock(source="https://example.com/v.mp4")
    assert url.to_dict() == {"type": "video", "source": "https://example.com/v.mp4"}


def test_bad_media_source_raises() -> None:
    with pytest.raises(ValueError, match="media source"):
        block_from_dict({"type": "image", "source": 42})


def test_unknown_block_type_raises() -> None:
    with pytest.raises(ValueError, match="unknown content block type 'hologram'"):
        block_from_dict({"type": "hologram", "text": "x"})
    with pytest.raises(ValueError, match="unknown content block type"):
        Msg.from_dict({"role": "user", "content": [{"type": "nope"}]})


def test_from_dict_with_string_content_and_missing_fields() -> None:
    msg = Msg.from_dict({"role": "user", "content": "hello"})
    assert msg.content == [TextBlock(text="hello")]
    assert msg.metadata == {}
    assert len(msg.id) == 32
    assert msg.usage is None


def test_json_round_trip_of_integers_wider_than_64_bits() -> None:
    msg = Msg(
        role="user", content=[TextBlock(text="x")], metadata={"big": 2**70, "neg": -(2**63) - 1}, id="m", timestamp=1.0
    )
    back = Msg.from_json(msg.to_json())
    assert back.metadata == {"big": 2**70, "neg": -(2**63) - 1}
    assert type(back.metadata["big"]) is int


# -- constructors and accessors -----------------------------------------------------------------


def test_role_constructors() -> None:
    u = Msg.user("hello", name="alice", tag="x")
    assert u.role == "user"
    assert u.content == [TextBlock(text="hello")]
    assert u.name == "alice"
    assert u.metadata == {"tag": "x"}
    a = Msg.assistant("hi there")
    assert a.role == "assistant"
    assert a.text == "hi there"
    assert a.name is None
    s = Msg.system("be nice")
    assert s.role == "system"
    assert s.content == [TextBlock(text="be nice")]
    assert s.metadata == {}


def test_ids_and_timestamps_are_generated() -> None:
    a, b = Msg.user("x"), Msg.user("x")
    assert a.id != b.id
    assert len(a.id) == 32
    assert int(a.id, 16) >= 0
    assert a.timestamp > 1_600_000_000


def test_string_content_shorthand() -> None:
    msg = Msg(role="user", content="hi")  # type: ignore[arg-type]  # the runtime shorthand under test
    assert msg.content == [TextBlock(text="hi")]
    assert msg.text == "hi"


def test_tuple_content_becomes_list() -> None:
    msg = Msg(role="user", content=(TextBlock(text="a"), TextBlock(text="b")))  # type: ignore[arg-type]
    assert isinstance(msg.content, list)
    assert msg.content == [TextBlock(text="a"), TextBlock(text="b")]


def test_text_joins_text_blocks_only() -> None:
    msg = Msg(
        role="assistant",
        content=[
            ThinkingBlock(thinking="hmm"),
            TextBlock(text="one"),
            ToolUseBlock(id="c", name="f"),
            TextBlock(text="two"),
            ImageBlock(source="http://x/i.png"),
            TextBlock(text="three"),
        ],
    )
    assert msg.text == "one\ntwo\nthree"
    assert Msg(role="assistant", content=[]).text == ""
    assert Msg(role="assistant", content=[ThinkingBlock(thinking="only")]).text == ""


def test_blocks_and_tool_calls() -> None:
    c1 = ToolUseBlock(id="c1", name="a", input={"x": 1})
    c2 = ToolUseBlock(id="c2", name="b")
    t = TextBlock(text="t")
    img = ImageBlock(source="u")
    msg = Msg(role="assistant", content=[t, c1, img, c2])
    assert msg.blocks(ToolUseBlock) == [c1, c2]
    assert msg.blocks(TextBlock) == [t]
    assert msg.blocks(ImageBlock) == [img]
    assert msg.blocks(AudioBlock) == []
    assert msg.tool_calls == [c1, c2]
    assert msg.has(ImageBlock)
    assert not msg.has(VideoBlock)
    assert Msg.user("x").tool_calls == []


def test_generate_reason_default_and_from_metadata() -> None:
    assert Msg.assistant("x").generate_reason is GenerateReason.STOP
    for reason in GenerateReason:
        msg = Msg(role="assistant", content=[TextBlock(text="x")], metadata={"generate_reason": reason.value})
        assert msg.generate_reason is reason
        assert Msg.from_json(msg.to_json()).generate_reason is reason
    assert Msg.assistant("x").with_metadata(generate_reason="max_iters").generate_reason is GenerateReason.MAX_ITERS


def test_generate_reason_values() -> None:
    assert {r.name: r.value for r in GenerateReason} == {
        "STOP": "stop",
        "MAX_ITERS": "max_iters",
        "AWAITING_CONFIRMATION": "awaiting_confirmation",
        "AWAITING_EXTERNAL_EXECUTION": "awaiting_external_execution",
        "INTERRUPTED": "interrupted",
        "STRUCTURED_OUTPUT": "structured_output",
    }


def test_replace_and_with_metadata_return_new_messages() -> None:
    msg = Msg.user("x", a=1)
    other = msg.with_metadata(b=2)
    assert other.metadata == {"a": 1, "b": 2}
    assert msg.metadata == {"a": 1}
    assert other.id == msg.id
    renamed = msg.replace(name="bob")
    assert renamed.name == "bob"
    assert msg.name is None


# -- validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["tool", "USER", "", "bot"])
def test_invalid_role_raises_value_error(role: str) -> None:
    with pytest.raises(ValueError, match="role"):
        Msg(role=role, content="x")  # type: ignore[arg-type]


@pytest.mark.parametrize("item", ["hi", {"type": "text", "text": "x"}, 42, None])
def test_non_block_content_raises_type_error(item: Any) -> None:
    with pytest.raises(TypeError, match="not a content block"):
        Msg(role="user", content=[TextBlock(text="ok"), item])


def test_non_iterable_content_raises_type_error() -> None:
    with pytest.raises(TypeError):
        Msg(role="user", content=42)  # type: ignore[arg-type]


def test_tool_result_invalid_state() -> None:
    with pytest.raises(ValueError, match="state must be one of"):
        ToolResultBlock(id="c", name="f", output="x", state="failed")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="state"):
        block_from_dict({"type": "tool_result", "id": "c", "name": "f", "output": "x", "state": "boom"})


@pytest.mark.parametrize("state", ["success", "error", "denied", "interrupted"])
def test_tool_result_states(state: str) -> None:
    block = ToolResultBlock(id="c", name="f", output="x", state=state)  # type: ignore[arg-type]
    assert block.state == state
    assert block.is_error is (state != "success")


def test_tool_result_defaults_and_text() -> None:
    block = ToolResultBlock(id="c", name="f", output="plain")
    assert block.state == "success"
    assert block.text == "plain"
    rich = ToolResultBlock(
        id="c", name="f", output=[TextBlock(text="a"), ImageBlock(source="u"), TextBlock(text="b")], state="error"
    )
    assert rich.text == "a\nb"


def test_tool_use_without_id_gets_generated_id() -> None:
    a = ToolUseBlock(name="f")
    b = ToolUseBlock(name="f")
    assert a.id.startswith("call_")
    assert len(a.id) == len("call_") + 24
    assert a.id != b.id
    assert a.input == {}
    assert a.metadata is None


@pytest.mark.parametrize(
    ("factory", "args"),
    [
        (Msg, ("user", [])),
        (TextBlock, ("x",)),
        (ThinkingBlock, ("x",)),
        (ImageBlock, ("u",)),
        (AudioBlock, ("u",)),
        (VideoBlock, ("u",)),
        (Base64Source, ("image/png", "AA==")),
        (ToolUseBlock, ("id", "name", {})),
        (ToolResultBlock, ("id", "name", "out", "success")),
        (TokenUsage, (1, 2)),
    ],
)
def test_constructors_are_keyword_only(factory: Any, args: tuple[Any, ...]) -> None:
    with pytest.raises(TypeError):
        factory(*args)


def test_documented_keyword_constructors() -> None:
    use = ToolUseBlock(id="c1", name="search", input={"q": "x"})
    assert (use.id, use.name, dict(use.input)) == ("c1", "search", {"q": "x"})
    res = ToolResultBlock(id="c1", name="search", output="ok", state="denied")
    assert (res.id, res.name, res.output, res.state) == ("c1", "search", "ok", "denied")
    img = ImageBlock(source=Base64Source(media_type="image/jpeg", data="AA=="))
    assert img.source == Base64Source(media_type="image/jpeg", data="AA==")
    msg = Msg(role="user", content=[res], name=None, metadata={})
    assert msg.blocks(ToolResultBlock) == [res]


# -- immutability ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        (Msg.user("x"), "role"),
        (Msg.user("x"), "content"),
        (Msg.user("x"), "metadata"),
        (Msg.user("x"), "id"),
        (TextBlock(text="x"), "text"),
        (ThinkingBlock(thinking="x"), "signature"),
        (ToolUseBlock(id="c", name="f"), "input"),
        (ToolResultBlock(id="c", name="f", output="o"), "state"),
        (ImageBlock(source="u"), "source"),
        (Base64Source(media_type="a/b", data=""), "data"),
        (TokenUsage(), "input_tokens"),
    ],
)
def test_fields_cannot_be_assigned(obj: Any, field: str) -> None:
    before = getattr(obj, field)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(obj, field, "changed")
    assert getattr(obj, field) == before


def test_invalid_state_check_cannot_be_bypassed_by_assignment() -> None:
    block = ToolResultBlock(id="c", name="f", output="o")
    with pytest.raises(dataclasses.FrozenInstanceError):
        block.state = "bogus"  # type: ignore[misc, assignment]
    assert block.state == "success"


def test_blocks_compare_and_hash_by_value() -> None:
    # Frozen blocks with hashable fields are hashable and equal by value.
    assert hash(TextBlock(text="a")) == hash(TextBlock(text="a"))
    assert TextBlock(text="a") == TextBlock(text="a")
    assert TextBlock(text="a") != TextBlock(text="b")


# -- token usage ----------------------------------------------------------------------------------


def test_token_usage_addition_and_total() -> None:
    a = TokenUsage(input_tokens=1, output_tokens=2, cache_read_tokens=3, cache_write_tokens=4, reasoning_tokens=5)
    b = TokenUsage(input_tokens=10, output_tokens=20, cache_read_tokens=30, cache_write_tokens=40, reasoning_tokens=50)
    total = a + b
    assert total == TokenUsage(
        input_tokens=11, output_tokens=22, cache_read_tokens=33, cache_write_tokens=44, reasoning_tokens=55
    )
    assert total.total_tokens == 33
    assert a == TokenUsage(
        input_tokens=1, output_tokens=2, cache_read_tokens=3, cache_write_tokens=4, reasoning_tokens=5
    )
    assert TokenUsage() + TokenUsage() == TokenUsage()


@given(usages, usages)
def test_token_usage_addition_is_fieldwise(a: TokenUsage, b: TokenUsage) -> None:
    s = a + b
    for name in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens"):
        assert getattr(s, name) == getattr(a, name) + getattr(b, name)
    assert s == b + a
    assert TokenUsage.from_dict(s.to_dict()) == s


def test_token_usage_from_partial_dict() -> None:
    assert TokenUsage.from_dict({"input_tokens": 7}) == TokenUsage(input_tokens=7)


# -- Msg.user and Msg.tool_results ------------------------------------------------------------------------


def test_msg_user_takes_text_and_media_in_any_spelling() -> None:
    image = ImageBlock(source="https://example.test/a.png")
    assert Msg.user("hi").content == [TextBlock(text="hi")]
    assert Msg.user(["look", image]).content == [TextBlock(text="look"), image]
    assert Msg.user((TextBlock(text="a"), AudioBlock(source="https://x.test/a.mp3"))).role == "user"
    assert Msg.user(image).content == [image], "one media block on its own"
    assert Msg.user(["a", "b"]).text == "a\nb"


@pytest.mark.parametrize(
    ("content", "hint"),
    [
        ([ToolResultBlock(id="c1", name="t", output="x")], r"Msg\.tool_results"),
        (ToolResultBlock(id="c1", name="t", output="x"), r"Msg\.tool_results"),
        ([TextBlock(text="a"), ToolUseBlock(id="c1", name="t")], "assistant content"),
        ([ThinkingBlock(thinking="hmm")], "assistant content"),
        ({"type": "text", "text": "x"}, "not 'dict'"),
        (["a", 3], "not 'int'"),
        (None, "not 'NoneType'"),
        (b"bytes", "not 'bytes'"),
        (Msg.user("x"), "not 'Msg'"),
    ],
)
def test_msg_user_refuses_what_a_user_does_not_say_with_the_fix(content: Any, hint: str) -> None:
    with pytest.raises(InvalidTypeError, match=hint):
        Msg.user(content)


def test_msg_user_refuses_an_empty_list_and_tool_results_take_one_block_or_several() -> None:
    with pytest.raises(InvalidValueError, match="empty list"):
        Msg.user([])
    block = ToolResultBlock(id="c1", name="t", output="x")
    assert Msg.tool_results(block).content == [block]
    assert Msg.tool_results([block], text="see above").content == [block, TextBlock(text="see above")]
    for bad in ("text", {"id": "c1"}, 3):
        with pytest.raises(InvalidTypeError, match=r"Msg\.tool_results"):
            Msg.tool_results(bad)  # type: ignore[arg-type]
