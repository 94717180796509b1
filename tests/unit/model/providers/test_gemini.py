"""GeminiChatModel against a local server speaking the Gemini REST wire format.

Streaming goes to ``:streamGenerateContent?alt=sse`` (``data: <json>`` frames), `generate()` to
``:generateContent``. Request bodies are compared whole after `camel_keys` (protobuf JSON takes
``snake_case`` and ``lowerCamelCase`` field names alike, and the SDK mixes them).
"""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from google import genai
from google.genai import types
from wire_servers import (
    Reply,
    WireServer,
    camel_keys,
    closed_port_url,
    gemini_chunk,
    gemini_error,
    gemini_sse,
    gemini_unary,
    threaded,
)

from agentrt import (
    AudioBlock,
    Base64Source,
    ImageBlock,
    Msg,
    ReActAgent,
    RuntimeContext,
    TextBlock,
    ThinkingBlock,
    Toolkit,
    ToolResultBlock,
    ToolUseBlock,
    tool,
)
from agentrt import events as ev
from agentrt.errors import (
    AuthenticationError,
    ContextWindowExceededError,
    ModelAPIError,
    ModelConnectionError,
    ModelTimeoutError,
    RateLimitError,
    UserError,
)
from agentrt.message import TokenUsage
from agentrt.model import ChatResponse, GenerateOptions, ToolSchema
from agentrt.model._accumulate import ReplyAccumulator
from agentrt.model.providers.gemini import GeminiChatModel, format_contents
from agentrt.state import InMemoryStateStore

SRC = Path(__file__).resolve().parents[4] / "src"
PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
SIG_CALL = base64.b64encode(b"\x12\x34signature-of-the-call").decode()
SIG_TEXT = base64.b64encode(b"\x56\x78signature-of-the-text").decode()
SIG_THOUGHT = base64.b64encode(b"\x9a\xbcsignature-of-a-thought").decode()
USAGE = {
    "promptTokenCount": 120,
    "candidatesTokenCount": 30,
    "thoughtsTokenCount": 12,
    "cachedContentTokenCount": 100,
    "totalTokenCount": 162,
}
ADD = ToolSchema(
    name="add",
    description="Add two integers.",
    parameters={
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
)


@pytest.fixture
async def server() -> AsyncIterator[WireServer]:
    async with WireServer() as srv:
        yield srv


@pytest.fixture
async def model(server: WireServer) -> AsyncIterator[GeminiChatModel]:
    m = GeminiChatModel("gemini-test", api_key="test-key", base_url=server.url)
    yield m
    await m.aclose()


def sse(*chunks: dict[str, Any], **kwargs: Any) -> Reply:
    """A streamed reply (and its unary twin, served to ``:generateContent``)."""
    return Reply(sse=gemini_sse(chunks), json=gemini_unary(chunks), **kwargs)


def text_reply(text: str = "OK") -> Reply:
    return sse(
        gemini_chunk([{"text": text}], finish_reason="STOP", usage={"promptTokenCount": 5, "candidatesTokenCount": 1})
    )


def body(server: WireServer, i: int = -1) -> Any:
    """A request body, field names normalised; an empty ``generationConfig`` (SDK noise) dropped."""
    data = camel_keys(server.requests[i].body)
    if data.get("generationConfig") == {}:
        del data["generationConfig"]
    return data


async def collect(
    model: GeminiChatModel, messages: list[Msg], tools: list[ToolSchema] | None = None
) -> tuple[list[ChatResponse], Msg]:
    """The streamed chunks and the message they add up to."""
    acc = ReplyAccumulator()
    chunks = []
    async for chunk in model.stream(messages, tools or []):
        chunks.append(chunk)
        acc.add(chunk)
    return chunks, acc.message(name=None)


# -- the basics ----------------------------------------------------------------------------------
async def test_streamed_text_reply_request_and_message(server: WireServer, model: GeminiChatModel) -> None:
    server.add(
        sse(
            gemini_chunk([{"text": "Hello, "}], usage={"promptTokenCount": 120, "candidatesTokenCount": 2}),
            gemini_chunk([{"text": "world!"}], finish_reason="STOP", usage=USAGE),
        )
    )

    chunks = [c async for c in model.stream([Msg.system("Be brief."), Msg.user("Hi")])]

    assert all(isinstance(c, ChatResponse) for c in chunks)
    assert [c.text for c in chunks if c.text] == ["Hello, ", "world!"]
    assert chunks[-1].finish_reason == "stop"
    # Thinking is billed as output; input counts the whole prompt (cached part included).
    assert chunks[-1].usage == TokenUsage(
        input_tokens=120, output_tokens=42, cache_read_tokens=100, reasoning_tokens=12
    )
    request = server.last
    assert request.method == "POST"
    assert request.path.endswith("/models/gemini-test:streamGenerateContent")
    assert request.query == {"alt": "sse"}
    assert request.headers["x-goog-api-key"] == "test-key"
    assert body(server) == {
        "contents": [{"role": "user", "parts": [{"text": "Hi"}]}],
        "systemInstruction": {"role": "user", "parts": [{"text": "Be brief."}]},
    }


async def test_generate_uses_generate_content(server: WireServer, model: GeminiChatModel) -> None:
    server.add(Reply(json=gemini_chunk([{"text": "Unary answer."}], finish_reason="STOP", usage=USAGE)))

    reply = await model.generate([Msg.user("Hi")])

    assert server.last.path.endswith("/models/gemini-test:generateContent")
    assert server.last.query == {}
    assert reply.content == [TextBlock(text="Unary answer.")]
    assert reply.metadata == {"finish_reason": "stop"}
    assert reply.usage == TokenUsage(input_tokens=120, output_tokens=42, cache_read_tokens=100, reasoning_tokens=12)


def test_identity_and_capabilities() -> None:
    m = GeminiChatModel("gemini-2.5-flash", api_key="k")
    assert m.provider == "gemini"
    assert m.id == "gemini:gemini-2.5-flash"
    assert m.supports_native_tools and m.supports_vision and m.supports_thinking
    assert not m.supports_structured_output
    assert repr(m) == "GeminiChatModel('gemini-2.5-flash')"


@pytest.mark.parametrize("kwargs", [{"thinking_budget": -5}, {"thinking_budget": "lots"}])
def test_constructor_rejects_bad_settings(kwargs: dict[str, Any]) -> None:
    with pytest.raises(UserError):
        GeminiChatModel("gemini-test", api_key="k", **kwargs)


# -- function calls and thought signatures -------------------------------------------------------
async def test_function_calls_thoughts_and_signatures_round_trip(server: WireServer, model: GeminiChatModel) -> None:
    server.add(
        sse(
            gemini_chunk([{"text": "Planning the lookups.", "thought": True}]),
            gemini_chunk([{"text": "Checking both."}]),
            gemini_chunk(
                [
                    {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": SIG_CALL},
                    {"functionCall": {"name": "get_time", "args": {"tz": "CET"}}},
                ]
            ),
            gemini_chunk([{"text": "", "thoughtSignature": SIG_TEXT}], finish_reason="STOP", usage=USAGE),
        ),
        text_reply("Sunny, and it is noon."),
    )
    history: list[Msg] = [Msg.user("Weather and time in Paris?")]

    chunks, assistant = await collect(model, history)
    calls = [tc for c in chunks for tc in c.tool_calls]
    assert [(tc.index, tc.name, dict(tc.input or {})) for tc in calls] == [
        (0, "get_weather", {"city": "Paris"}),
        (1, "get_time", {"tz": "CET"}),
    ]
    assert all(tc.id for tc in calls) and calls[0].id != calls[1].id  # made up: Gemini sent none
    assert calls[0].metadata == {"thought_signature": SIG_CALL, "gemini_generated_id": True}
    assert calls[1].metadata == {"gemini_generated_id": True}
    assert chunks[-1].finish_reason == "tool_calls"
    weather, clock = assistant.tool_calls
    assert assistant.content == [
        ThinkingBlock(thinking="Planning the lookups."),
        TextBlock(text="Checking both."),
        weather,
        clock,
        ThinkingBlock(thinking="", signature=SIG_TEXT, metadata={"gemini_part": "text"}),
    ]
    assert assistant.text == "Checking both."
    results = Msg(
        role="user",
        content=[
            ToolResultBlock(id=weather.id, name="get_weather", output="sunny"),
            ToolResultBlock(id=clock.id, name="get_time", output="tz database offline", state="error"),
        ],
    )
    # The history survives a JSON round trip (as a state store would keep it).
    stored = [Msg.from_json(m.to_json()) for m in [*history, assistant, results]]

    await model.generate(stored)

    assert body(server)["contents"] == [
        {"role": "user", "parts": [{"text": "Weather and time in Paris?"}]},
        {
            "role": "model",
            "parts": [
                {"text": "Planning the lookups.", "thought": True},
                {"text": "Checking both."},
                {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": SIG_CALL},
                {"functionCall": {"name": "get_time", "args": {"tz": "CET"}}},
                {"text": "", "thoughtSignature": SIG_TEXT},
            ],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "get_weather", "response": {"result": "sunny"}}},
                {"functionResponse": {"name": "get_time", "response": {"error": "tz database offline"}}},
            ],
        },
    ]


async def test_ids_from_gemini_are_kept_and_sent_back(server: WireServer, model: GeminiChatModel) -> None:
    server.add(
        sse(
            gemini_chunk(
                [{"functionCall": {"id": "fc-7", "name": "add", "args": {"a": 1, "b": 2}}}], finish_reason="STOP"
            )
        ),
        text_reply("3"),
    )
    chunks, _ = await collect(model, [Msg.user("1+2")], [ADD])
    (call,) = [tc for c in chunks for tc in c.tool_calls]
    assert (call.id, call.metadata) == ("fc-7", None)
    assistant = Msg(role="assistant", content=[ToolUseBlock(id="fc-7", name="add", input={"a": 1, "b": 2})])
    result = Msg(role="user", content=[ToolResultBlock(id="fc-7", name="add", output="3")])

    await model.generate([Msg.user("1+2"), assistant, result], [ADD])

    assert body(server)["contents"][1:] == [
        {"role": "model", "parts": [{"functionCall": {"id": "fc-7", "name": "add", "args": {"a": 1, "b": 2}}}]},
        {"role": "user", "parts": [{"functionResponse": {"id": "fc-7", "name": "add", "response": {"result": "3"}}}]},
    ]


async def test_text_signature_goes_back_on_the_text_part(server: WireServer, model: GeminiChatModel) -> None:
    server.add(
        sse(
            gemini_chunk([{"text": "Hel"}]),
            gemini_chunk([{"text": "lo", "thoughtSignature": SIG_TEXT}], finish_reason="STOP"),
        ),
        text_reply(),
    )
    _, assistant = await collect(model, [Msg.user("hi")])
    assert assistant.text == "Hello"
    assert assistant.content[-1] == ThinkingBlock(thinking="", signature=SIG_TEXT, metadata={"gemini_part": "text"})

    await model.generate([Msg.user("hi"), assistant, Msg.user("again")])

    assert body(server)["contents"][1] == {"role": "model", "parts": [{"text": "Hello", "thoughtSignature": SIG_TEXT}]}


async def test_thought_with_its_own_signature(server: WireServer) -> None:
    model = GeminiChatModel(
        "gemini-test", api_key="k", base_url=server.url, include_thoughts=True, thinking_budget=1024
    )
    server.add(
        sse(
            gemini_chunk([{"text": "Deep ", "thought": True}]),
            gemini_chunk([{"text": "thought.", "thought": True, "thoughtSignature": SIG_THOUGHT}]),
            gemini_chunk([{"text": "Answer."}], finish_reason="STOP"),
        ),
        text_reply(),
    )
    try:
        _, assistant = await collect(model, [Msg.user("think")])
        assert assistant.content == [
            ThinkingBlock(thinking="Deep thought.", signature=SIG_THOUGHT),
            TextBlock(text="Answer."),
        ]
        await model.generate([Msg.user("think"), assistant, Msg.user("more")])
    finally:
        await model.aclose()
    first, second = body(server, 0), body(server, 1)
    assert first["generationConfig"] == {"thinkingConfig": {"includeThoughts": True, "thinkingBudget": 1024}}
    assert second["contents"][1] == {
        "role": "model",
        "parts": [{"text": "Deep thought.", "thought": True, "thoughtSignature": SIG_THOUGHT}, {"text": "Answer."}],
    }


# -- the request: system, images, tools, options ---------------------------------------------------
async def test_history_with_images_and_tool_results(server: WireServer, model: GeminiChatModel) -> None:
    server.add(text_reply())
    history = [
        Msg.system("You describe images."),
        Msg.system("Answer in English."),
        Msg(
            role="user",
            content=[
                TextBlock(text="Compare these."),
                ImageBlock(source=Base64Source(media_type="image/png", data=PNG_B64)),
                ImageBlock(source="https://example.com/photos/cat.webp?size=large"),
                ImageBlock(source="data:image/jpeg;base64,/9j/4AAQSkZJRg=="),
                AudioBlock(source=Base64Source(media_type="audio/wav", data="UklGRg==")),
            ],
        ),
        Msg(role="assistant", content=[ToolUseBlock(id="call_1", name="snap", input={})]),
        Msg(
            role="user",
            content=[
                ToolResultBlock(
                    id="call_1",
                    name="snap",
                    output=[
                        TextBlock(text="the screen"),
                        ImageBlock(source=Base64Source(media_type="image/png", data=PNG_B64)),
                    ],
                )
            ],
        ),
        Msg.user("What changed?"),
        Msg.system("Late instruction."),
    ]

    await model.generate(history)

    assert body(server) == {
        "systemInstruction": {"role": "user", "parts": [{"text": "You describe images.\n\nAnswer in English."}]},
        "contents": [
            {
                "role": "user",
                "parts": [
                    {"text": "Compare these."},
                    {"inlineData": {"mimeType": "image/png", "data": PNG_B64}},
                    {
                        "fileData": {
                            "fileUri": "https://example.com/photos/cat.webp?size=large",
                            "mimeType": "image/webp",
                        }
                    },
                    {"inlineData": {"mimeType": "image/jpeg", "data": "/9j/4AAQSkZJRg=="}},
                    {"inlineData": {"mimeType": "audio/wav", "data": "UklGRg=="}},
                ],
            },
            {"role": "model", "parts": [{"functionCall": {"id": "call_1", "name": "snap", "args": {}}}]},
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"id": "call_1", "name": "snap", "response": {"result": "the screen"}}},
                    {"inlineData": {"mimeType": "image/png", "data": PNG_B64}},
                    {"text": "What changed?"},
                    {"text": "Late instruction."},
                ],
            },
        ],
    }


def test_formatter_skips_what_gemini_cannot_take() -> None:
    system, contents = format_contents(
        [
            Msg.user(""),
            Msg(role="user", content=[ThinkingBlock(thinking="user-side thinking"), TextBlock(text="Hi")]),
            Msg(
                role="assistant",
                content=[TextBlock(text=""), ThinkingBlock(thinking="", metadata={"redacted_thinking": "x"})],
            ),
            Msg.user("Still there?"),
        ]
    )
    assert system is None
    assert [c.model_dump(exclude_none=True) for c in contents] == [
        {"role": "user", "parts": [{"text": "Hi"}, {"text": "Still there?"}]}
    ]


async def test_tools_options_and_generation_config(server: WireServer) -> None:
    server.add(text_reply())
    schema_with_refs = {
        "type": "object",
        "properties": {"item": {"$ref": "#/$defs/Item"}},
        "required": ["item"],
        "$defs": {"Item": {"type": "object", "properties": {"sku": {"type": "string"}}}},
    }
    tools = [
        ADD,
        ToolSchema(name="order", description="Place an order.", parameters=schema_with_refs),
        ToolSchema(name="ping", description="", parameters={"type": "object", "properties": {}}),
    ]
    model = GeminiChatModel(
        "gemini-test",
        api_key="k",
        base_url=server.url,
        thinking_budget=0,
        options=GenerateOptions(temperature=0.3, max_tokens=500),
    )
    try:
        await model.generate(
            [Msg.user("go")],
            tools,
            GenerateOptions(
                top_p=0.8,
                max_tokens=256,
                stop=["END"],
                seed=42,
                tool_choice={"name": "add"},
                parallel_tool_calls=False,  # no Gemini equivalent: ignored
                response_format={"name": "Out", "schema": {"type": "object", "properties": {"x": {"type": "integer"}}}},
                timeout=20,
                extra={"gemini_top_k": 5, "gemini_presence_penalty": 0.5, "anthropic_top_k": 1},
            ),
        )
    finally:
        await model.aclose()
    assert body(server) == {
        "contents": [{"role": "user", "parts": [{"text": "go"}]}],
        "tools": [
            {
                "functionDeclarations": [
                    {"name": "add", "description": "Add two integers.", "parametersJsonSchema": dict(ADD.parameters)},
                    {"name": "order", "description": "Place an order.", "parametersJsonSchema": schema_with_refs},
                    {"name": "ping"},
                ]
            }
        ],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["add"]}},
        "generationConfig": {
            "temperature": 0.3,
            "topP": 0.8,
            "topK": 5,
            "maxOutputTokens": 256,
            "stopSequences": ["END"],
            "seed": 42,
            "presencePenalty": 0.5,
            "responseMimeType": "application/json",
            "responseJsonSchema": {"type": "object", "properties": {"x": {"type": "integer"}}},
            "thinkingConfig": {"thinkingBudget": 0},
        },
    }
    assert server.last.headers.get("x-server-timeout") == "20"


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        (None, None),
        ("auto", {"functionCallingConfig": {"mode": "AUTO"}}),
        ("none", {"functionCallingConfig": {"mode": "NONE"}}),
        ("required", {"functionCallingConfig": {"mode": "ANY"}}),
    ],
)
async def test_tool_choice_modes(server: WireServer, model: GeminiChatModel, choice: Any, expected: Any) -> None:
    server.add(text_reply())
    await model.generate([Msg.user("go")], [ADD], GenerateOptions(tool_choice=choice))
    assert body(server).get("toolConfig") == expected


async def test_bad_options_are_user_errors(model: GeminiChatModel) -> None:
    with pytest.raises(UserError, match="tool_choice"):
        await model.generate([Msg.user("go")], [ADD], GenerateOptions(tool_choice="sometimes"))
    with pytest.raises(UserError, match="gemini_colour"):
        await model.generate([Msg.user("go")], options=GenerateOptions(extra={"gemini_colour": "blue"}))
    with pytest.raises(UserError, match="invalid Gemini generation options"):
        await model.generate([Msg.user("go")], options=GenerateOptions(extra={"gemini_top_k": "many"}))


# -- reply details ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("STOP", "stop"),
        ("MAX_TOKENS", "length"),
        ("SAFETY", "content_filter"),
        ("RECITATION", "content_filter"),
        ("MALFORMED_FUNCTION_CALL", "error"),
        ("IMAGE_SAFETY", "content_filter"),
        ("LANGUAGE", "error"),
    ],
)
async def test_finish_reasons(server: WireServer, model: GeminiChatModel, reason: str, finish: str) -> None:
    server.add(sse(gemini_chunk([{"text": "x"}], finish_reason=reason)))
    chunks, reply = await collect(model, [Msg.user("go")])
    assert chunks[-1].finish_reason == finish
    assert reply.metadata["finish_reason"] == finish


async def test_blocked_prompt(server: WireServer, model: GeminiChatModel) -> None:
    server.add(sse({"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 7}}))
    chunks = [c async for c in model.stream([Msg.user("something bad")])]
    assert [(c.text, c.tool_calls, c.finish_reason) for c in chunks] == [("", (), "content_filter")]
    assert chunks[-1].usage == TokenUsage(input_tokens=7)


async def test_generated_image_becomes_a_block(server: WireServer, model: GeminiChatModel) -> None:
    server.add(
        sse(
            gemini_chunk([{"text": "Here it is."}]),
            gemini_chunk([{"inlineData": {"mimeType": "image/png", "data": PNG_B64}}], finish_reason="STOP"),
        )
    )
    _, reply = await collect(model, [Msg.user("draw a dot")])
    assert reply.content == [
        TextBlock(text="Here it is."),
        ImageBlock(source=Base64Source(media_type="image/png", data=PNG_B64)),
    ]


# -- errors ----------------------------------------------------------------------------------------
RETRY_INFO = {
    "error": {
        "code": 429,
        "message": "You exceeded your current quota.",
        "status": "RESOURCE_EXHAUSTED",
        "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"}],
    }
}


@pytest.mark.parametrize(
    ("reply", "error", "status", "retry_after"),
    [
        (Reply(status=429, json=RETRY_INFO), RateLimitError, 429, 37.0),
        (Reply(status=429, json=RETRY_INFO, headers={"retry-after": "3"}), RateLimitError, 429, 3.0),
        (
            gemini_error(401, "UNAUTHENTICATED", "Request had invalid authentication credentials."),
            AuthenticationError,
            401,
            None,
        ),
        (gemini_error(403, "PERMISSION_DENIED", "The caller does not have permission"), AuthenticationError, 403, None),
        (
            gemini_error(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key."),
            AuthenticationError,
            400,
            None,
        ),
        (
            gemini_error(
                400,
                "INVALID_ARGUMENT",
                "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
            ),
            ContextWindowExceededError,
            400,
            None,
        ),
        (gemini_error(400, "INVALID_ARGUMENT", "Request contains an invalid argument."), ModelAPIError, 400, None),
        (gemini_error(500, "INTERNAL", "An internal error has occurred."), ModelAPIError, 500, None),
        (gemini_error(503, "UNAVAILABLE", "The model is overloaded."), ModelAPIError, 503, None),
    ],
)
@pytest.mark.parametrize("streaming", [True, False])
async def test_http_errors_map_to_typed_errors_without_sdk_retries(
    server: WireServer,
    model: GeminiChatModel,
    reply: Reply,
    error: type[ModelAPIError],
    status: int,
    retry_after: float | None,
    streaming: bool,
) -> None:
    server.add(reply, text_reply("should never be fetched"))
    with pytest.raises(ModelAPIError) as info:
        if streaming:
            async for _ in model.stream([Msg.user("hi")]):
                pass
        else:
            await model.generate([Msg.user("hi")])
    assert type(info.value) is error
    assert info.value.status == status
    assert info.value.retry_after == retry_after
    assert info.value.model == "gemini-test"
    assert reply.json["error"]["message"] in str(info.value)
    assert info.value.body == reply.json
    assert len(server.requests) == 1  # the SDK's own retries are off


async def test_error_chunk_inside_the_stream(server: WireServer, model: GeminiChatModel) -> None:
    server.add(
        Reply(
            sse=[
                *gemini_sse([gemini_chunk([{"text": "partial"}])]),
                "data: "
                + json.dumps({"error": {"code": 500, "message": "Internal error", "status": "INTERNAL"}})
                + "\r\n\r\n",
            ]
        )
    )
    with pytest.raises(ModelAPIError) as info:
        async for _ in model.stream([Msg.user("hi")]):
            pass
    assert info.value.status == 500


async def test_connection_refused() -> None:
    model = GeminiChatModel("gemini-test", api_key="k", base_url=closed_port_url())
    try:
        with pytest.raises(ModelConnectionError, match="Gemini"):
            await model.generate([Msg.user("hi")])
        with pytest.raises(ModelConnectionError):
            async for _ in model.stream([Msg.user("hi")]):
                pass
    finally:
        await model.aclose()


async def test_stream_cut_midway_is_a_connection_error(server: WireServer, model: GeminiChatModel) -> None:
    server.add(
        sse(
            gemini_chunk([{"text": "one "}]),
            gemini_chunk([{"text": "two "}]),
            gemini_chunk([{"text": "three"}], finish_reason="STOP"),
            cut_after=2,
        )
    )
    received: list[str] = []
    with pytest.raises(ModelConnectionError):
        async for chunk in model.stream([Msg.user("count")]):
            received.append(chunk.text)
    assert "".join(received) == "one two "


async def test_timeout(server: WireServer, model: GeminiChatModel) -> None:
    server.add(sse(gemini_chunk([{"text": "late"}]), delay=5))
    with pytest.raises(ModelTimeoutError):
        async for _ in model.stream([Msg.user("hi")], options=GenerateOptions(timeout=0.2)):
            pass


async def test_missing_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION"):
        monkeypatch.delenv(name, raising=False)
    model = GeminiChatModel("gemini-test")
    with pytest.raises(AuthenticationError, match="GEMINI_API_KEY"):
        await model.generate([Msg.user("hi")])
    await model.aclose()


# -- client lifecycle ------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning")
async def test_given_client_is_used_and_left_open(server: WireServer) -> None:
    client = genai.Client(
        api_key="given-key",
        http_options=types.HttpOptions(base_url=server.url, retry_options=types.HttpRetryOptions(attempts=1)),
    )
    model = GeminiChatModel("gemini-test", client=client)
    server.add(text_reply("from given client"), text_reply("still open"))
    assert (await model.generate([Msg.user("hi")])).text == "from given client"
    await model.aclose()
    assert server.last.headers["x-goog-api-key"] == "given-key"
    response = await client.aio.models.generate_content(model="gemini-test", contents="hi")
    assert response.text == "still open"
    await client.aio.aclose()
    client.close()


async def test_aclose_is_idempotent_and_the_model_reopens(server: WireServer) -> None:
    model = GeminiChatModel("gemini-test", api_key="k", base_url=server.url)
    server.add(text_reply("one"), text_reply("two"))
    assert (await model.generate([Msg.user("hi")])).text == "one"
    await model.aclose()
    await model.aclose()
    assert (await model.generate([Msg.user("hi")])).text == "two"
    await model.aclose()


async def test_httpx_transport_when_asked(server: WireServer) -> None:
    # google-genai 3.x runs on httpx2, earlier versions on httpx.
    httpx_module = pytest.importorskip("httpx2" if _sdk_uses_httpx2() else "httpx")
    async with httpx_module.AsyncClient() as http:
        model = GeminiChatModel(
            "gemini-test", api_key="k", base_url=server.url, http_options={"httpx_async_client": http}
        )
        server.add(text_reply("over httpx"))
        assert (await model.generate([Msg.user("hi")])).text == "over httpx"
        await model.aclose()


def _sdk_uses_httpx2() -> bool:
    from importlib.metadata import requires

    return any(r.startswith("httpx2") for r in requires("google-genai") or [])


def test_one_model_across_event_loops_closes_its_clients() -> None:
    with threaded(WireServer(repeat=text_reply("again"))) as srv:
        model = GeminiChatModel("gemini-test", api_key="k", base_url=srv.url)
        for _ in range(2):
            assert asyncio.run(model.generate([Msg.user("hi")])).text == "again"
        gc.collect()
        assert len(srv.requests) == 2


# -- end to end with a real agent ------------------------------------------------------------------
@tool(read_only=True)
async def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first addend.
        b: The second addend.
    """
    return a + b


async def test_react_agent_tool_call_then_answer(server: WireServer, model: GeminiChatModel) -> None:
    server.add(
        sse(
            gemini_chunk([{"functionCall": {"name": "add", "args": {"a": 2, "b": 3}}, "thoughtSignature": SIG_CALL}]),
            gemini_chunk(None, finish_reason="STOP", usage=USAGE),
        ),
        text_reply("2 + 3 = 5."),
    )
    toolkit = Toolkit()
    toolkit.register(add)
    agent = ReActAgent("calc", "You add numbers.", model=model, toolkit=toolkit, state_store=InMemoryStateStore())

    reply = await agent.call("What is 2 + 3?", RuntimeContext(user_id="u1", session_id="s1"))

    assert reply.text == "2 + 3 = 5."
    first, second = body(server, 0), body(server, 1)
    assert first["systemInstruction"] == {"role": "user", "parts": [{"text": "You add numbers."}]}
    (declaration,) = first["tools"][0]["functionDeclarations"]
    assert declaration["name"] == "add"
    assert declaration["parametersJsonSchema"]["properties"]["a"] == {
        "type": "integer",
        "description": "The first addend.",
    }
    assert second["contents"] == [
        {"role": "user", "parts": [{"text": "What is 2 + 3?"}]},
        {
            "role": "model",
            "parts": [{"functionCall": {"name": "add", "args": {"a": 2, "b": 3}}, "thoughtSignature": SIG_CALL}],
        },
        {"role": "user", "parts": [{"functionResponse": {"name": "add", "response": {"result": "5"}}}]},
    ]


async def test_react_agent_streams_events(server: WireServer) -> None:
    model = GeminiChatModel("gemini-test", api_key="k", base_url=server.url, include_thoughts=True)
    server.add(
        sse(
            gemini_chunk([{"text": "Use add.", "thought": True}]),
            gemini_chunk(
                [{"functionCall": {"id": "fc-1", "name": "add", "args": {"a": 1, "b": 1}}}], finish_reason="STOP"
            ),
        ),
        text_reply("Two."),
    )
    toolkit = Toolkit()
    toolkit.register(add)
    agent = ReActAgent("calc", "", model=model, toolkit=toolkit, state_store=InMemoryStateStore())
    try:
        events = [e async for e in agent.stream_events("1+1?", RuntimeContext(user_id="u", session_id="s"))]
    finally:
        await model.aclose()
    assert "".join(e.delta for e in events if isinstance(e, ev.ThinkingDelta)) == "Use add."
    assert [(e.tool_call_id, e.name) for e in events if isinstance(e, ev.ToolCallStarted)] == [("fc-1", "add")]
    assert [(e.result.id, e.result.text) for e in events if isinstance(e, ev.ToolResult)] == [("fc-1", "2")]
    assert isinstance(events[-1], ev.RunFinished) and events[-1].msg.text == "Two."


# -- packaging -------------------------------------------------------------------------------------
def _run_python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)


def test_import_agentrt_does_not_import_the_sdk() -> None:
    done = _run_python(
        "import sys, agentrt, agentrt.model\n"
        "print([m for m in ('google.genai', 'agentrt.model.providers.gemini') if m in sys.modules])"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_missing_sdk_names_the_extra() -> None:
    done = _run_python("import sys\nsys.modules['google.genai'] = None\nimport agentrt.model.providers.gemini")
    assert done.returncode != 0
    assert "pip install 'agentrt[gemini]'" in done.stderr


@pytest.mark.parametrize("prefix", ["gemini", "google"])
async def test_model_from_id_reaches_the_server(server: WireServer, prefix: str) -> None:
    from agentrt.model import model_from_id

    server.add(text_reply("via the registry"))
    model = model_from_id(f"{prefix}:gemini-test", api_key="registry-key", base_url=server.url)
    try:
        assert (await model.generate([Msg.user("hi")])).text == "via the registry"
    finally:
        await model.aclose()
    assert "/models/gemini-test:" in server.last.path  # a resilience wrapper may stream
    assert server.last.headers["x-goog-api-key"] == "registry-key"


async def test_abandoned_stream_releases_the_connection(server: WireServer, model: GeminiChatModel) -> None:
    server.add(sse(*[gemini_chunk([{"text": f"part {i} "}]) for i in range(10)]), text_reply("next"))
    stream = model.stream([Msg.user("hi")])
    first = await stream.__anext__()
    assert first.text == "part 0 "
    await stream.aclose()  # type: ignore[attr-defined]  # e.g. the run was interrupted
    assert (await model.generate([Msg.user("again")])).text == "next"
