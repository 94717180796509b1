"""The OpenAI-compatible wire format without HTTP: request bodies (exact JSON, validated against
OpenAI's published request schema), response parsing, the SSE decoder and typed errors."""

from __future__ import annotations

import importlib.util
import json
import sys
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest

from agentrt import _json
from agentrt.errors import (
    AuthenticationError,
    ContextWindowExceededError,
    ModelAPIError,
    RateLimitError,
    UserError,
)
from agentrt.message import (
    AudioBlock,
    Base64Source,
    ImageBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    TokenUsage,
    ToolResultBlock,
    ToolUseBlock,
    VideoBlock,
)
from agentrt.model import GenerateOptions, ToolSchema
from agentrt.model._accumulate import META_ARGUMENTS_ERROR, META_RAW_ARGUMENTS, ReplyAccumulator
from agentrt.model.providers._openai_format import (
    ChatCompletionsFormat,
    api_error,
    parse_chunk,
    parse_completion,
    parse_retry_after,
    stream_error,
)
from agentrt.model.providers._sse import SSEDecoder
from agentrt.model.providers.openai import DeepSeekChatModel, OpenAIChatModel

_spec = importlib.util.spec_from_file_location("openai_schema", Path(__file__).parent / "data" / "openai_schema.py")
assert _spec is not None and _spec.loader is not None
openai_schema = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("openai_schema", openai_schema)
_spec.loader.exec_module(openai_schema)

WEATHER = ToolSchema(
    name="get_weather",
    description="Get the current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
PNG = Base64Source(media_type="image/png", data="iVBORw0KGgo=")


def body(
    messages: list[Msg],
    tools: list[ToolSchema] | None = None,
    options: GenerateOptions | None = None,
    *,
    fmt: ChatCompletionsFormat | None = None,
    stream: bool = True,
    model: str = "gpt-4o",
) -> dict[str, Any]:
    """Format a request and check it against the official request schema."""
    fmt = fmt or ChatCompletionsFormat()
    out = fmt.body(model, messages, tools or [], options or GenerateOptions(), stream=stream, stream_usage=True)
    # What the model sends is `encode`: the same body, with each message's JSON cached.
    for _ in range(2):  # encoded fresh, then from the cache
        sent, streaming = fmt.encode(
            model, messages, tools or [], options or GenerateOptions(), stream=stream, stream_usage=True
        )
        assert sent == _json.dumps_bytes(out) and streaming is (out.get("stream") is True)
    # Round-trip through JSON: what is validated and compared is exactly what goes on the wire.
    wire: dict[str, Any] = json.loads(json.dumps(out))
    openai_schema.assert_valid(wire)
    return wire


# --------------------------------------------------------------------------------------------------
# the schema helper itself
# --------------------------------------------------------------------------------------------------
def test_schema_translation_of_openapi_30_keywords() -> None:
    translate = openai_schema.translate
    assert translate({"type": "integer", "nullable": True}) == {"type": ["integer", "null"]}
    assert translate({"type": "string", "enum": ["a"], "nullable": True}) == {
        "type": ["string", "null"],
        "enum": ["a", None],
    }
    assert translate({"$ref": "#/x", "nullable": True}) == {"anyOf": [{"$ref": "#/x"}, {"type": "null"}]}
    assert translate({"minimum": 0, "exclusiveMinimum": True}) == {"exclusiveMinimum": 0}
    assert translate({"maximum": 2, "exclusiveMaximum": False}) == {"maximum": 2}


def test_schema_rejects_bad_bodies() -> None:
    assert openai_schema.errors({"model": "m", "messages": [{"role": "user", "content": "hi"}]}) == []
    assert openai_schema.errors({"model": "m", "messages": []})  # minItems 1
    assert openai_schema.errors({"model": "m", "messages": [{"role": "tool", "content": "x"}]})  # no tool_call_id
    assert openai_schema.errors({"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 3})
    assert openai_schema.errors({"model": "m", "messages": [{"role": "user", "content": "x"}], "seed": None}) == []


# --------------------------------------------------------------------------------------------------
# request bodies
# --------------------------------------------------------------------------------------------------
def test_system_prompt_multi_turn_and_names() -> None:
    msgs = [
        Msg.system("Be brief."),
        Msg.user("Hi, I am Alice.", name="alice"),
        Msg.assistant("Hello Alice.", name="helper"),
        Msg.user("And I am Bob.", name="Bob Smith <bob>"),
        Msg.assistant("Hi Bob.", name="helper"),
        Msg.user("Who spoke first?"),
    ]
    assert body(msgs) == {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi, I am Alice.", "name": "alice"},
            {"role": "assistant", "content": "Hello Alice.", "name": "helper"},
            {"role": "user", "content": "And I am Bob.", "name": "Bob_Smith__bob_"},
            {"role": "assistant", "content": "Hi Bob.", "name": "helper"},
            {"role": "user", "content": "Who spoke first?"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_names_can_be_switched_off() -> None:
    wire = body([Msg.user("hi", name="alice")], fmt=ChatCompletionsFormat(send_names=False))
    assert wire["messages"] == [{"role": "user", "content": "hi"}]


def test_tools_and_parallel_tool_calls_and_results() -> None:
    msgs = [
        Msg.user("Weather in Paris and Rome?"),
        Msg(
            role="assistant",
            name="agent",
            content=[
                TextBlock(text="Checking both."),
                ToolUseBlock(id="call_1", name="get_weather", input={"city": "Paris"}),
                ToolUseBlock(id="call_2", name="get_weather", input={"city": "Rome", "unit": "°C"}),
            ],
        ),
        Msg(
            role="user",
            content=[
                ToolResultBlock(id="call_1", name="get_weather", output="Sunny, 22 C"),
                ToolResultBlock(id="call_2", name="get_weather", output="boom", state="error"),
            ],
        ),
    ]
    wire = body(msgs, [WEATHER], GenerateOptions(tool_choice="auto", parallel_tool_calls=True))
    assert wire == {
        "model": "gpt-4o",
        "messages": [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {
                "role": "assistant",
                "content": "Checking both.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Rome","unit":"°C"}'},
                    },
                ],
                "name": "agent",
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 22 C"},
            {"role": "tool", "tool_call_id": "call_2", "content": "boom"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Get the current weather for a city.",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
                },
            }
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_assistant_with_only_tool_calls_has_null_content() -> None:
    msgs = [Msg.user("x"), Msg(role="assistant", content=[ToolUseBlock(id="c1", name="get_weather", input={})])]
    assert body(msgs, [WEATHER])["messages"][1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}],
    }


def test_strict_tool_and_tool_without_description() -> None:
    tool = ToolSchema(name="noop", description="", parameters={"type": "object", "properties": {}}, strict=True)
    assert body([Msg.user("x")], [tool])["tools"] == [
        {
            "type": "function",
            "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}, "strict": True},
        }
    ]


def test_garbled_tool_arguments_go_back_verbatim() -> None:
    call = ToolUseBlock(
        id="c1",
        name="get_weather",
        input={},
        metadata={META_RAW_ARGUMENTS: '{"city": Par', META_ARGUMENTS_ERROR: "not JSON"},
    )
    wire = body([Msg.user("x"), Msg(role="assistant", content=[call])], [WEATHER])
    assert wire["messages"][1]["tool_calls"][0]["function"]["arguments"] == '{"city": Par'


def test_images_by_url_and_base64() -> None:
    msg = Msg(
        role="user",
        content=[
            TextBlock(text="Compare these."),
            ImageBlock(source="https://example.com/a.jpg"),
            ImageBlock(source=PNG),
            ImageBlock(source="data:image/gif;base64,R0lGOD=="),
        ],
    )
    assert body([msg])["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Compare these."},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                {"type": "image_url", "image_url": {"url": "data:image/gif;base64,R0lGOD=="}},
            ],
        }
    ]


def test_local_file_image_is_a_user_error() -> None:
    with pytest.raises(UserError, match="Base64Source"):
        body([Msg(role="user", content=[ImageBlock(source="/tmp/cat.png")])])


def test_audio_inline_wav_and_mp3() -> None:
    msg = Msg(
        role="user",
        content=[
            AudioBlock(source=Base64Source(media_type="audio/wav", data="UklGRg==")),
            AudioBlock(source=Base64Source(media_type="audio/mpeg", data="SUQz")),
        ],
    )
    assert body([msg])["messages"][0]["content"] == [
        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
        {"type": "input_audio", "input_audio": {"data": "SUQz", "format": "mp3"}},
    ]


@pytest.mark.parametrize(
    ("block", "match"),
    [
        (AudioBlock(source="https://example.com/a.wav"), "only inline"),
        (AudioBlock(source=Base64Source(media_type="audio/ogg", data="T2dn")), "wav or mp3"),
        (VideoBlock(source="https://example.com/v.mp4"), "no video input"),
    ],
)
def test_media_the_wire_cannot_carry(block: Any, match: str) -> None:
    with pytest.raises(UserError, match=match):
        body([Msg(role="user", content=[block])])


def test_system_message_with_an_image_is_a_user_error() -> None:
    with pytest.raises(UserError, match="system message"):
        body([Msg(role="system", content=[TextBlock(text="x"), ImageBlock(source=PNG)])])


def test_tool_result_with_text_and_image_output() -> None:
    msgs = [
        Msg.user("Screenshot please"),
        Msg(role="assistant", content=[ToolUseBlock(id="c1", name="screenshot", input={})]),
        Msg(
            role="user",
            content=[
                ToolResultBlock(
                    id="c1",
                    name="screenshot",
                    output=[TextBlock(text="Captured 800x600."), ImageBlock(source=PNG)],
                )
            ],
        ),
    ]
    wire = body(msgs)
    assert wire["messages"][2:] == [
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": "Captured 800x600.\n[1 attachment(s) from this result follow in the next message]",
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Attachments returned by tool 'screenshot' (call c1):"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ],
        },
    ]


def test_tool_results_come_before_user_text_in_the_same_msg() -> None:
    msgs = [
        Msg.user("go"),
        Msg(role="assistant", content=[ToolUseBlock(id="c1", name="get_weather", input={"city": "Oslo"})]),
        Msg(
            role="user",
            content=[TextBlock(text="Also: hurry."), ToolResultBlock(id="c1", name="get_weather", output="Snow")],
        ),
    ]
    assert body(msgs, [WEATHER])["messages"][2:] == [
        {"role": "tool", "tool_call_id": "c1", "content": "Snow"},
        {"role": "user", "content": "Also: hurry."},
    ]


def test_thinking_dropped_unless_the_endpoint_takes_it() -> None:
    reply = Msg(
        role="assistant",
        content=[ThinkingBlock(thinking="The user wants a greeting."), TextBlock(text="Hello!")],
    )
    msgs = [Msg.user("hi"), reply]
    assert body(msgs)["messages"][1] == {"role": "assistant", "content": "Hello!"}
    fmt = ChatCompletionsFormat(send_reasoning=True)
    wire = body(msgs, fmt=fmt)
    assert wire["messages"][1] == {
        "role": "assistant",
        "content": "Hello!",
        "reasoning_content": "The user wants a greeting.",
    }
    # Once the user speaks again, that turn's reasoning is no longer sent.
    assert body([*msgs, Msg.user("again")], fmt=fmt)["messages"][1] == {"role": "assistant", "content": "Hello!"}


def test_reasoning_goes_back_between_tool_calls_of_the_current_turn() -> None:
    fmt = ChatCompletionsFormat(send_reasoning=True)
    old = Msg(role="assistant", content=[ThinkingBlock(thinking="old"), TextBlock(text="Earlier answer.")])
    step1 = Msg(
        role="assistant",
        content=[ThinkingBlock(thinking="Need the weather."), ToolUseBlock(id="c1", name="get_weather", input={})],
    )
    result = Msg(role="user", content=[ToolResultBlock(id="c1", name="get_weather", output="Rain")])
    wire = body([Msg.user("q1"), old, Msg.user("q2"), step1, result], [WEATHER], fmt=fmt)["messages"]
    assert "reasoning_content" not in wire[1]
    assert wire[3]["reasoning_content"] == "Need the weather."


def test_deepseek_sends_reasoning_content_by_default() -> None:
    model = DeepSeekChatModel("deepseek-reasoner", api_key="k")
    assert model.format.send_reasoning is True
    assert OpenAIChatModel("gpt-4o", api_key="k").format.send_reasoning is False
    assert OpenAIChatModel("gpt-4o", api_key="k", send_reasoning_content=True).format.send_reasoning is True


def test_empty_messages_are_skipped() -> None:
    msgs = [
        Msg.user("hi"),
        Msg(role="assistant", content=[ThinkingBlock(thinking="hmm")]),
        Msg(role="user", content=[]),
        Msg.user("still there?"),
    ]
    assert body(msgs)["messages"] == [
        {"role": "user", "content": "hi"},
        {"role": "user", "content": "still there?"},
    ]
    assert body(msgs, fmt=ChatCompletionsFormat(send_reasoning=True))["messages"] == [
        {"role": "user", "content": "hi"},
        {"role": "user", "content": "still there?"},
    ]


def test_generation_options() -> None:
    options = GenerateOptions(
        temperature=0.2,
        top_p=0.9,
        max_tokens=256,
        stop=["END", "STOP"],
        seed=7,
        tool_choice={"name": "get_weather"},
        parallel_tool_calls=False,
        response_format={"name": "weather report", "schema": {"type": "object"}, "strict": True},
    )
    wire = body([Msg.user("x")], [WEATHER], options)
    assert {k: v for k, v in wire.items() if k not in ("messages", "tools")} == {
        "model": "gpt-4o",
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "parallel_tool_calls": False,
        "temperature": 0.2,
        "top_p": 0.9,
        "max_tokens": 256,
        "stop": ["END", "STOP"],
        "seed": 7,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "weather_report", "schema": {"type": "object"}, "strict": True},
        },
        "stream": True,
        "stream_options": {"include_usage": True},
    }


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        ("any", "required"),
        ("get_weather", {"type": "function", "function": {"name": "get_weather"}}),
        ({"name": "get_weather"}, {"type": "function", "function": {"name": "get_weather"}}),
        (
            {"type": "function", "function": {"name": "get_weather"}},
            {"type": "function", "function": {"name": "get_weather"}},
        ),
    ],
)
def test_tool_choice_forms(choice: Any, wire: Any) -> None:
    assert body([Msg.user("x")], [WEATHER], GenerateOptions(tool_choice=choice))["tool_choice"] == wire


def test_tool_options_are_only_sent_with_tools() -> None:
    wire = body([Msg.user("x")], [], GenerateOptions(tool_choice="none", parallel_tool_calls=True))
    assert "tool_choice" not in wire
    assert "parallel_tool_calls" not in wire
    assert "tools" not in wire


def test_bad_tool_choice() -> None:
    with pytest.raises(UserError, match="tool_choice"):
        body([Msg.user("x")], [WEATHER], GenerateOptions(tool_choice={"nope": 1}))


def test_response_format_forms() -> None:
    def rf(value: Any) -> Any:
        return body([Msg.user("x")], options=GenerateOptions(response_format=value))["response_format"]

    assert rf({"type": "json_object"}) == {"type": "json_object"}
    assert rf({"name": "r", "schema": {"type": "object"}}) == {
        "type": "json_schema",
        "json_schema": {"name": "r", "schema": {"type": "object"}, "strict": False},
    }
    # A bare JSON Schema: its title names it.
    assert rf({"title": "Person", "type": "object", "properties": {"n": {"type": "string"}}}) == {
        "type": "json_schema",
        "json_schema": {
            "name": "Person",
            "schema": {"title": "Person", "type": "object", "properties": {"n": {"type": "string"}}},
            "strict": False,
        },
    }


def test_extra_passthrough_prefix_stripping_and_removal() -> None:
    options = GenerateOptions(
        extra={
            "openai_logprobs": True,
            "openai_top_logprobs": 2,
            "openai_user": "u-1",
            "anthropic_thinking": {"budget": 1},  # another provider's key: ignored
            "openai_stream_options": None,  # None removes a key the adapter would send
        }
    )
    wire = body([Msg.user("x")], options=options)
    assert wire["logprobs"] is True
    assert wire["top_logprobs"] == 2
    assert wire["user"] == "u-1"
    assert "thinking" not in wire
    assert "stream_options" not in wire


def test_provider_prefix_passthrough() -> None:
    fmt = ChatCompletionsFormat(provider="dashscope")
    wire = body([Msg.user("x")], options=GenerateOptions(extra={"dashscope_enable_search": True}), fmt=fmt)
    assert wire["enable_search"] is True


def test_extra_can_turn_streaming_off() -> None:
    wire = body([Msg.user("x")], options=GenerateOptions(extra={"openai_stream": False}))
    assert wire["stream"] is False
    assert "stream_options" not in wire


def test_non_streaming_body() -> None:
    assert body([Msg.user("x")], stream=False) == {"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]}


@pytest.mark.parametrize(
    ("model", "param"),
    [("gpt-4o", "max_tokens"), ("o3-mini", "max_completion_tokens"), ("gpt-5", "max_completion_tokens")],
)
def test_max_tokens_parameter_by_model(model: str, param: str) -> None:
    m = OpenAIChatModel(model, api_key="k")
    wire = body([Msg.user("x")], options=GenerateOptions(max_tokens=10), fmt=m.format, model=model)
    assert wire[param] == 10
    other = "max_tokens" if param == "max_completion_tokens" else "max_completion_tokens"
    assert other not in wire


def test_formatted_messages_are_cached_by_identity() -> None:
    fmt = ChatCompletionsFormat()
    history = [Msg.user("one"), Msg.assistant("two")]
    first = fmt.messages(history)
    again = fmt.messages(history)
    assert first == again
    assert first[0] is again[0]  # not re-formatted
    changed = history[0].replace(content=[TextBlock(text="uno")])  # same id, new object
    assert fmt.messages([changed])[0]["content"] == "uno"


def test_encoded_messages_are_cached_as_json_by_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    fmt = ChatCompletionsFormat()
    history = [Msg.user("one"), Msg(role="assistant", content=[ToolUseBlock(id="c1", name="get_weather", input={})])]
    formatted: list[str] = []
    message = ChatCompletionsFormat.message

    def counting(self: ChatCompletionsFormat, msg: Msg) -> list[dict[str, Any]]:
        formatted.append(msg.id)
        return message(self, msg)

    monkeypatch.setattr(ChatCompletionsFormat, "message", counting)
    first, _ = fmt.encode("gpt-4o", history, [], GenerateOptions(), stream=False, stream_usage=False)
    history.append(Msg(role="user", content=[ToolResultBlock(id="c1", name="get_weather", output="sunny")]))
    second, _ = fmt.encode("gpt-4o", history, [], GenerateOptions(), stream=False, stream_usage=False)
    assert formatted == [m.id for m in history], "each message is formatted and encoded once"
    assert json.loads(second)["messages"][:2] == json.loads(first)["messages"]
    assert all(isinstance(v, bytes) for v in fmt._json_cache.values()), "cached as bytes, not as dicts"


def test_unknown_option_keyword_is_a_user_error() -> None:
    with pytest.raises(UserError, match="unknown option"):
        OpenAIChatModel("gpt-4o", api_key="k", temprature=0.1)
    model = OpenAIChatModel("gpt-4o", api_key="k", temperature=0.1, seed=3)
    assert model.options == GenerateOptions(temperature=0.1, seed=3)


# --------------------------------------------------------------------------------------------------
# responses
# --------------------------------------------------------------------------------------------------
def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        **extra,
    }


def test_parse_chunks_into_a_reply() -> None:
    chunks = [
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"reasoning_content": "Think"}),
        _chunk({"reasoning_content": "ing."}),
        _chunk({"content": "Hello"}),
        _chunk({"content": " there"}),
        _chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "call_a", "type": "function", "function": {"name": "f", "arguments": ""}},
                ]
            }
        ),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"x":'}}]}),
        _chunk(
            {
                "tool_calls": [
                    {"index": 1, "id": "call_b", "type": "function", "function": {"name": "g", "arguments": "{}"}},
                ]
            }
        ),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": " 1}"}}]}),
        _chunk({}, "tool_calls"),
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "choices": [],
            "usage": {
                "prompt_tokens": 100,
                "completion_tokens": 20,
                "total_tokens": 120,
                "prompt_tokens_details": {"cached_tokens": 64},
                "completion_tokens_details": {"reasoning_tokens": 12},
            },
        },
    ]
    parsed = [parse_chunk(c) for c in chunks]
    assert parsed[0] is None  # role-only chunk
    acc = ReplyAccumulator()
    for p in parsed:
        if p is not None:
            acc.add(p)
    msg = acc.message(name="a")
    assert msg.content == [
        ThinkingBlock(thinking="Thinking."),
        TextBlock(text="Hello there"),
        ToolUseBlock(id="call_a", name="f", input={"x": 1}),
        ToolUseBlock(id="call_b", name="g", input={}),
    ]
    assert msg.usage == TokenUsage(input_tokens=100, output_tokens=20, cache_read_tokens=64, reasoning_tokens=12)
    assert msg.metadata == {"finish_reason": "tool_calls"}


def test_parse_chunk_variants() -> None:
    # OpenRouter / Ollama spell reasoning "reasoning"; refusals are shown as text.
    assert parse_chunk(_chunk({"reasoning": "hmm"})).thinking == "hmm"  # type: ignore[union-attr]
    assert parse_chunk(_chunk({"refusal": "I can't"})).text == "I can't"  # type: ignore[union-attr]
    assert parse_chunk(_chunk({}, "function_call")).finish_reason == "tool_calls"  # type: ignore[union-attr]
    assert parse_chunk(_chunk({}, "length")).finish_reason == "length"  # type: ignore[union-attr]
    # DeepSeek's cache counter
    usage = {"prompt_tokens": 10, "completion_tokens": 1, "prompt_cache_hit_tokens": 8}
    assert parse_chunk({"choices": [], "usage": usage}).usage.cache_read_tokens == 8  # type: ignore[union-attr]
    # Chunks of a second choice (n > 1) are ignored.
    other = {"choices": [{"index": 1, "delta": {"content": "other"}, "finish_reason": None}]}
    assert parse_chunk(other) is None
    # "usage": null on every chunk (OpenAI with include_usage) is nothing.
    assert parse_chunk(_chunk({"content": ""}, usage=None)) is None
    # Parsed (object) arguments from lenient servers.
    call = parse_chunk(_chunk({"tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"a": 1}}}]}))
    assert call is not None
    assert call.tool_calls[0].input == {"a": 1}


def test_parse_completion() -> None:
    completion = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Let me look.",
                    "reasoning_content": "Need weather.",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
    }
    acc = ReplyAccumulator()
    acc.add(parse_completion(completion))
    msg = acc.message(name=None)
    assert msg.content == [
        ThinkingBlock(thinking="Need weather."),
        TextBlock(text="Let me look."),
        ToolUseBlock(id="call_1", name="get_weather", input={"city": "Paris"}),
    ]
    assert msg.usage == TokenUsage(input_tokens=5, output_tokens=7)
    assert msg.metadata == {"finish_reason": "tool_calls"}


# --------------------------------------------------------------------------------------------------
# SSE decoding
# --------------------------------------------------------------------------------------------------
STREAM = (
    b": keep-alive\n\n"
    b'data: {"a": 1}\n\n'
    b"event: error\r\ndata: line one\r\ndata: line two\r\n\r\n"
    b"data:no-space\r\r"
    b"id: 7\nretry: 100\ndata\n\n"
    b"data: [DONE]\n\n"
)
EVENTS = [
    ("message", b'{"a": 1}'),
    ("error", b"line one\nline two"),
    ("message", b"no-space"),
    ("message", b""),
    ("message", b"[DONE]"),
]


def test_sse_decoder_whole_stream() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(STREAM) + decoder.flush() == EVENTS


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 64])
def test_sse_decoder_any_split(size: int) -> None:
    decoder = SSEDecoder()
    events = []
    for i in range(0, len(STREAM), size):
        events.extend(decoder.feed(STREAM[i : i + size]))
    events.extend(decoder.flush())
    assert events == EVENTS


def test_sse_decoder_flushes_an_unterminated_event() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"x": 1}') == []
    assert decoder.flush() == [("message", b'{"x": 1}')]
    assert decoder.flush() == []


def test_sse_decoder_crlf_split_across_reads() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\n\r") == [("message", b"a")]
    assert decoder.feed(b"\ndata: b\r\n\r\n") == [("message", b"b")]


# --------------------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------------------
def _error(status: int, payload: Any, headers: dict[str, str] | None = None, key: str | None = None) -> ModelAPIError:
    raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return api_error(
        provider="openai",
        model="gpt-4o",
        status=status,
        headers=headers or {},
        raw=raw,
        api_key=key,
        key_env="OPENAI_API_KEY",
    )


def test_401_is_an_authentication_error_without_the_key() -> None:
    key = "sk-proj-SECRET1234567890"
    err = _error(
        401,
        {
            "error": {
                "message": f"Incorrect API key provided: {key}.",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            }
        },
        key=key,
    )
    assert type(err) is AuthenticationError
    assert err.status == 401
    assert key not in str(err)
    assert key not in json.dumps(err.body)
    assert "openai model 'gpt-4o': HTTP 401 (invalid_api_key): Incorrect API key provided: ***." in str(err)
    assert "OPENAI_API_KEY" in str(err)
    assert type(_error(403, {"error": {"message": "forbidden"}})) is AuthenticationError


def test_429_with_retry_after_variants() -> None:
    payload = {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}
    err = _error(429, payload, {"retry-after": "7"})
    assert type(err) is RateLimitError
    assert err.retry_after == 7.0
    assert _error(429, payload, {"retry-after-ms": "250", "retry-after": "7"}).retry_after == 0.25
    assert _error(429, payload).retry_after is None
    now = datetime.now(UTC)
    when = format_datetime(now + timedelta(seconds=30), usegmt=True)
    assert parse_retry_after({"retry-after": when}, now=now.timestamp()) == pytest.approx(30, abs=1)
    assert parse_retry_after({"retry-after": "garbage"}) is None
    assert parse_retry_after({"retry-after": "-5"}) == 0.0


@pytest.mark.parametrize(
    "payload",
    [
        {
            "error": {
                "message": "This model's maximum context length is 128000 tokens.",
                "code": "context_length_exceeded",
            }
        },
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens. However, you requested 5000",
        },
        {"error": {"message": "Input is too long for requested model."}},
    ],
)
def test_context_window_errors(payload: Any) -> None:
    err = _error(400, payload)
    assert type(err) is ContextWindowExceededError
    assert err.status == 400


def test_other_statuses_are_api_errors_with_body() -> None:
    err = _error(500, {"error": {"message": "The server had an error", "type": "server_error"}})
    assert type(err) is ModelAPIError
    assert err.status == 500
    assert err.body == {"error": {"message": "The server had an error", "type": "server_error"}}
    assert str(err) == "openai model 'gpt-4o': HTTP 500 (server_error): The server had an error"
    plain = _error(502, b"<html>Bad gateway</html>")
    assert plain.status == 502
    assert "Bad gateway" in str(plain)
    fastapi = _error(422, {"detail": "field required"})
    assert type(fastapi) is ModelAPIError
    assert "field required" in str(fastapi)


def test_stream_error_objects() -> None:
    err = stream_error(provider="openrouter", model="m", obj={"error": {"code": 502, "message": "Upstream died"}})
    assert err.status == 502
    assert "Upstream died" in str(err)
    err = stream_error(provider="openrouter", model="m", obj={"error": {"message": "Something odd"}})
    assert err.status is None
    assert "error in the response stream: Something odd" in str(err)
