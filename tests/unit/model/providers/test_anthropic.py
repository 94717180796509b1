"""AnthropicChatModel against a local server speaking the Messages API wire format (SSE)."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anthropic
import pytest
from wire_servers import (
    Reply,
    WireServer,
    anthropic_error,
    anthropic_message,
    anthropic_sse,
    closed_port_url,
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
from agentrt.model import ChatResponse, GenerateOptions, ToolCallChunk, ToolSchema
from agentrt.model.providers.anthropic import AnthropicChatModel, format_messages
from agentrt.state import InMemoryStateStore

SRC = Path(__file__).resolve().parents[4] / "src"
PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
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
async def model(server: WireServer) -> AsyncIterator[AnthropicChatModel]:
    m = AnthropicChatModel("claude-test", api_key="test-key", base_url=server.url)
    yield m
    await m.aclose()


def text_reply(text: str = "OK", **kwargs: Any) -> Reply:
    return Reply(sse=anthropic_message([{"type": "text", "text": text}], **kwargs))


# -- the basics ----------------------------------------------------------------------------------
async def test_text_reply_request_and_message(server: WireServer, model: AnthropicChatModel) -> None:
    server.add(text_reply("Hello, world!", input_tokens=12, output_tokens=4))

    reply = await model.generate([Msg.system("Be brief."), Msg.user("Hi")])

    assert reply.role == "assistant"
    assert reply.content == [TextBlock(text="Hello, world!")]
    assert reply.metadata == {"finish_reason": "stop"}
    assert reply.usage == TokenUsage(input_tokens=12, output_tokens=4)
    request = server.last
    assert (request.method, request.path) == ("POST", "/v1/messages")
    assert request.body == {
        "model": "claude-test",
        "max_tokens": 4096,
        "stream": True,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
    }
    assert "test-key" in request.headers.get("x-api-key", "") + request.headers.get("authorization", "")
    assert "anthropic-version" in request.headers


def test_identity_and_capabilities() -> None:
    m = AnthropicChatModel("claude-sonnet-4-5", api_key="k")
    assert m.provider == "anthropic"
    assert m.model_name == "claude-sonnet-4-5"
    assert m.id == "anthropic:claude-sonnet-4-5"
    assert m.supports_native_tools and m.supports_vision and m.supports_thinking
    assert not m.supports_structured_output
    assert repr(m) == "AnthropicChatModel('claude-sonnet-4-5')"


@pytest.mark.parametrize(
    "kwargs",
    [{"max_tokens": 0}, {"thinking_budget": 100}, {"thinking_budget": "lots"}, {"transport": "curl"}],
)
def test_constructor_rejects_bad_settings(kwargs: dict[str, Any]) -> None:
    with pytest.raises(UserError):
        AnthropicChatModel("claude-test", api_key="k", **kwargs)


async def test_stream_chunks_thinking_signature_text_and_split_tool_json(
    server: WireServer, model: AnthropicChatModel
) -> None:
    server.add(
        Reply(
            sse=anthropic_message(
                [
                    {"type": "thinking", "thinking": "The user wants a sum.", "signature": "EqQBCkYIBxgCKkA="},
                    {"type": "text", "text": "Let me add those."},
                    {"type": "tool_use", "id": "toolu_01", "name": "add", "input": {"a": 2, "b": 3}},
                ],
                stop_reason="tool_use",
                input_tokens=20,
                output_tokens=30,
                cache_read=1000,
                cache_write=50,
            )
        )
    )

    chunks = [c async for c in model.stream([Msg.user("2+3?")], [ADD])]

    assert all(isinstance(c, ChatResponse) for c in chunks)
    assert "".join(c.thinking for c in chunks) == "The user wants a sum."
    assert [c.thinking_signature for c in chunks if c.thinking_signature] == ["EqQBCkYIBxgCKkA="]
    assert "".join(c.text for c in chunks) == "Let me add those."
    calls = [tc for c in chunks for tc in c.tool_calls]
    assert calls[0] == ToolCallChunk(index=2, id="toolu_01", name="add")
    pieces = [tc.arguments for tc in calls[1:]]
    assert all(tc.index == 2 and tc.id is None for tc in calls[1:])
    assert len(pieces) >= 2 and "".join(pieces) == '{"a": 2, "b": 3}'
    for piece in pieces:  # really split mid-JSON
        with pytest.raises(ValueError):
            json.loads(piece)
    predicates: list[tuple[str, Callable[[ChatResponse], object]]] = [
        ("thinking", lambda c: c.thinking),
        ("text", lambda c: c.text),
        ("call", lambda c: c.tool_calls),
    ]
    first = {kind: next(i for i, c in enumerate(chunks) if pred(c)) for kind, pred in predicates}
    assert first["thinking"] < first["text"] < first["call"]
    final = chunks[-1]
    assert final.finish_reason == "tool_calls"
    # input_tokens is the whole prompt: uncached + cache reads + cache writes.
    assert final.usage == TokenUsage(input_tokens=1070, output_tokens=30, cache_read_tokens=1000, cache_write_tokens=50)


async def test_generate_rebuilds_thinking_text_and_tool_call(server: WireServer, model: AnthropicChatModel) -> None:
    server.add(
        Reply(
            sse=anthropic_message(
                [
                    {"type": "thinking", "thinking": "Sum needed.", "signature": "sig-A"},
                    {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT"},
                    {"type": "text", "text": "Adding."},
                    {"type": "tool_use", "id": "toolu_01", "name": "add", "input": {"a": 2, "b": 3}},
                    {"type": "tool_use", "id": "toolu_02", "name": "add", "input": {"a": 4, "b": 5}},
                ],
                stop_reason="tool_use",
            )
        )
    )

    reply = await model.generate([Msg.user("2+3 and 4+5?")], [ADD])

    assert reply.content == [
        ThinkingBlock(thinking="Sum needed.", signature="sig-A"),
        ThinkingBlock(thinking="", metadata={"redacted_thinking": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT"}),
        TextBlock(text="Adding."),
        ToolUseBlock(id="toolu_01", name="add", input={"a": 2, "b": 3}),
        ToolUseBlock(id="toolu_02", name="add", input={"a": 4, "b": 5}),
    ]
    assert reply.metadata["finish_reason"] == "tool_calls"


@pytest.mark.parametrize(
    ("stop_reason", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("tool_use", "tool_calls"),
        ("max_tokens", "length"),
        ("refusal", "content_filter"),
        ("model_context_window_exceeded", "length"),
    ],
)
async def test_stop_reasons(server: WireServer, model: AnthropicChatModel, stop_reason: str, finish: str) -> None:
    server.add(text_reply("x", stop_reason=stop_reason))
    reply = await model.generate([Msg.user("go")])
    assert reply.metadata["finish_reason"] == finish


async def test_unusable_tool_json_reaches_the_model_as_is(server: WireServer, model: AnthropicChatModel) -> None:
    server.add(
        Reply(
            sse=anthropic_message(
                [{"type": "tool_use", "id": "toolu_x", "name": "add", "raw_json": "[2, 3"}],
                stop_reason="tool_use",
            )
        )
    )
    reply = await model.generate([Msg.user("go")], [ADD])
    (call,) = reply.tool_calls
    assert call.id == "toolu_x"
    assert call.metadata is not None and call.metadata["raw_arguments"] == "[2, 3"


# -- the request: history, images, thinking, caching ---------------------------------------------
async def test_history_with_images_thinking_tool_calls_and_results(
    server: WireServer, model: AnthropicChatModel
) -> None:
    server.add(text_reply())
    history = [
        Msg.system("You are a calculator."),
        Msg(
            role="user",
            content=[
                TextBlock(text="What is in these images?"),
                ImageBlock(source="https://example.com/cat.png"),
                ImageBlock(source=Base64Source(media_type="image/png", data=PNG_B64)),
                ImageBlock(source="data:image/jpeg;base64,/9j/4AAQSkZJRg=="),
            ],
        ),
        Msg(
            role="assistant",
            content=[
                ThinkingBlock(thinking="Two tools.", signature="sig-1"),
                ThinkingBlock(thinking="", metadata={"redacted_thinking": "opaque=="}),
                TextBlock(text="Checking."),
                ToolUseBlock(id="toolu_a", name="add", input={"a": 1, "b": 2}),
                ToolUseBlock(id="toolu_b", name="snap", input={}),
            ],
        ),
        Msg(
            role="user",
            content=[
                ToolResultBlock(id="toolu_a", name="add", output="3"),
                ToolResultBlock(
                    id="toolu_b",
                    name="snap",
                    output=[
                        TextBlock(text="here"),
                        ImageBlock(source=Base64Source(media_type="image/png", data=PNG_B64)),
                    ],
                ),
            ],
        ),
        Msg.user("Also, be quick."),
        Msg(role="assistant", content=[TextBlock(text="Sure.")]),
    ]

    await model.generate(history, [ADD])

    png = {"type": "base64", "media_type": "image/png", "data": PNG_B64}
    assert server.last.body["system"] == "You are a calculator."
    assert server.last.body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in these images?"},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
                {"type": "image", "source": png},
                {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQSkZJRg=="}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Two tools.", "signature": "sig-1"},
                {"type": "redacted_thinking", "data": "opaque=="},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_a", "name": "add", "input": {"a": 1, "b": 2}},
                {"type": "tool_use", "id": "toolu_b", "name": "snap", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "3"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_b",
                    "content": [{"type": "text", "text": "here"}, {"type": "image", "source": png}],
                },
                {"type": "text", "text": "Also, be quick."},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Sure."}]},
    ]


def test_formatter_merges_turns_orders_results_first_and_drops_what_the_api_rejects() -> None:
    system, messages = format_messages(
        [
            Msg.system("Rules."),
            Msg.system("More rules."),
            Msg.user("Start."),
            Msg(role="assistant", content=[ToolUseBlock(id="toolu_c", name="slow", input={"n": 1})]),
            Msg.user("(while it runs) hurry up"),
            Msg(
                role="user",
                content=[ToolResultBlock(id="toolu_c", name="slow", output="timed out", state="error")],
            ),
            # Unsigned thinking (another provider's reasoning) and empty text are left out; a
            # message left with nothing disappears and the turns around it merge.
            Msg(role="assistant", content=[ThinkingBlock(thinking="hmm"), TextBlock(text="")]),
            Msg.system("Mid-conversation note."),
            Msg(role="user", content=[AudioBlock(source="https://example.com/a.mp3"), ThinkingBlock(thinking="x")]),
        ]
    )
    assert system == [{"type": "text", "text": "Rules."}, {"type": "text", "text": "More rules."}]
    assert messages == [
        {"role": "user", "content": [{"type": "text", "text": "Start."}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_c", "name": "slow", "input": {"n": 1}}]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_c", "content": "timed out", "is_error": True},
                {"type": "text", "text": "(while it runs) hurry up"},
                {"type": "text", "text": "Mid-conversation note."},
                {"type": "text", "text": "[audio omitted: Anthropic models do not accept audio]"},
            ],
        },
    ]


async def test_prompt_caching_markers(server: WireServer) -> None:
    server.add(text_reply(cache_read=900, cache_write=0, input_tokens=5))
    model = AnthropicChatModel("claude-test", api_key="k", base_url=server.url, cache_system_prompt=True)
    try:
        reply = await model.generate(
            [
                Msg.system("Long shared instructions."),
                Msg.user("A long document.", cache_control=True),
                Msg.assistant("Read it."),
                Msg(
                    role="user",
                    content=[TextBlock(text="one"), TextBlock(text="two")],
                    metadata={"cache_control": {"type": "ephemeral", "ttl": "1h"}},
                ),
            ]
        )
    finally:
        await model.aclose()
    body = server.last.body
    assert body["system"] == [
        {"type": "text", "text": "Long shared instructions.", "cache_control": {"type": "ephemeral"}}
    ]
    assert body["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "A long document.", "cache_control": {"type": "ephemeral"}}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Read it."}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "one"},
                {"type": "text", "text": "two", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
            ],
        },
    ]
    assert reply.usage == TokenUsage(input_tokens=905, output_tokens=5, cache_read_tokens=900)


async def test_system_cache_control_from_message_metadata(server: WireServer, model: AnthropicChatModel) -> None:
    server.add(text_reply())
    system = Msg(role="system", content=[TextBlock(text="Cached.")], metadata={"cache_control": True})
    await model.generate([system, Msg.user("hi")])
    assert server.last.body["system"] == [{"type": "text", "text": "Cached.", "cache_control": {"type": "ephemeral"}}]


async def test_thinking_budget_and_adaptive(server: WireServer) -> None:
    server.add(text_reply(), text_reply())
    budget = AnthropicChatModel("claude-test", api_key="k", base_url=server.url, thinking_budget=2048)
    adaptive = AnthropicChatModel("claude-test", api_key="k", base_url=server.url, thinking_budget="adaptive")
    try:
        await budget.generate([Msg.user("think")])
        await adaptive.generate([Msg.user("think")])
        with pytest.raises(UserError, match="less than max_tokens"):
            await budget.generate([Msg.user("think")], options=GenerateOptions(max_tokens=2048))
    finally:
        await budget.aclose()
        await adaptive.aclose()
    assert server.bodies[0]["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert server.bodies[1]["thinking"] == {"type": "adaptive"}
    assert len(server.requests) == 2  # the bad call never left the process


# -- tools and options -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("choice", "parallel", "expected"),
    [
        (None, None, None),
        ("auto", None, {"type": "auto"}),
        ("none", None, {"type": "none"}),
        ("required", None, {"type": "any"}),
        ({"name": "add"}, None, {"type": "tool", "name": "add"}),
        ("required", False, {"type": "any", "disable_parallel_tool_use": True}),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
    ],
)
async def test_tools_and_tool_choice(
    server: WireServer, model: AnthropicChatModel, choice: Any, parallel: bool | None, expected: Any
) -> None:
    server.add(text_reply())
    strict = ToolSchema(name="lookup", description="", parameters={"type": "object", "properties": {}}, strict=True)
    await model.generate(
        [Msg.user("go")], [ADD, strict], GenerateOptions(tool_choice=choice, parallel_tool_calls=parallel)
    )
    body = server.last.body
    assert body["tools"] == [
        {"name": "add", "description": "Add two integers.", "input_schema": dict(ADD.parameters)},
        {"name": "lookup", "input_schema": {"type": "object", "properties": {}}, "strict": True},
    ]
    if expected is None:
        assert "tool_choice" not in body
    else:
        assert body["tool_choice"] == expected


async def test_no_tools_means_no_tool_choice(server: WireServer, model: AnthropicChatModel) -> None:
    server.add(text_reply())
    await model.generate([Msg.user("go")], [], GenerateOptions(tool_choice="none"))
    assert "tools" not in server.last.body and "tool_choice" not in server.last.body


async def test_bad_tool_choice_is_a_user_error(model: AnthropicChatModel) -> None:
    with pytest.raises(UserError, match="tool_choice"):
        await model.generate([Msg.user("go")], [ADD], GenerateOptions(tool_choice="sometimes"))


async def test_options_defaults_and_provider_extras(server: WireServer) -> None:
    server.add(text_reply())
    model = AnthropicChatModel(
        "claude-test",
        api_key="k",
        base_url=server.url,
        max_tokens=1000,
        options=GenerateOptions(temperature=0.5, max_tokens=300, extra={"anthropic_top_k": 10}),
    )
    try:
        await model.generate(
            [Msg.user("go")],
            options=GenerateOptions(
                top_p=0.9,
                max_tokens=256,
                stop=["END"],
                seed=7,  # Anthropic has no seed: not sent
                timeout=30,
                extra={
                    "anthropic_top_k": 40,
                    "anthropic_metadata": {"user_id": "u-1"},
                    "anthropic_betas": ["beta-a", "beta-b"],
                    "openai_logprobs": True,  # another provider's extra: ignored
                },
            ),
        )
    finally:
        await model.aclose()
    request = server.last
    assert request.body == {
        "model": "claude-test",
        "max_tokens": 256,
        "stream": True,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "go"}]}],
        "temperature": 0.5,
        "top_p": 0.9,
        "stop_sequences": ["END"],
        "top_k": 40,
        "metadata": {"user_id": "u-1"},
    }
    assert request.headers["anthropic-beta"] == "beta-a,beta-b"


async def test_response_format_becomes_output_config(server: WireServer, model: AnthropicChatModel) -> None:
    server.add(text_reply('{"answer": 5}'))
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    reply = await model.generate(
        [Msg.user("2+3")], options=GenerateOptions(response_format={"name": "Answer", "schema": schema})
    )
    assert server.last.body["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
    assert json.loads(reply.text) == {"answer": 5}


# -- errors ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("reply", "error", "status", "retry_after"),
    [
        (
            anthropic_error(
                429, "rate_limit_error", "Number of request tokens has exceeded your rate limit", {"retry-after": "17"}
            ),
            RateLimitError,
            429,
            17.0,
        ),
        (anthropic_error(429, "rate_limit_error", "slow down", {"retry-after-ms": "1500"}), RateLimitError, 429, 1.5),
        (anthropic_error(401, "authentication_error", "invalid x-api-key"), AuthenticationError, 401, None),
        (anthropic_error(403, "permission_error", "no access to this model"), AuthenticationError, 403, None),
        (
            anthropic_error(400, "invalid_request_error", "prompt is too long: 215000 tokens > 200000 maximum"),
            ContextWindowExceededError,
            400,
            None,
        ),
        (
            anthropic_error(400, "invalid_request_error", "messages.1: unexpected `tool_use_id`"),
            ModelAPIError,
            400,
            None,
        ),
        (anthropic_error(500, "api_error", "Internal server error"), ModelAPIError, 500, None),
        (anthropic_error(529, "overloaded_error", "Overloaded", {"retry-after": "2"}), ModelAPIError, 529, 2.0),
    ],
)
async def test_http_errors_map_to_typed_errors_without_sdk_retries(
    server: WireServer,
    model: AnthropicChatModel,
    reply: Reply,
    error: type[ModelAPIError],
    status: int,
    retry_after: float | None,
) -> None:
    server.add(reply, text_reply("should never be fetched"))
    with pytest.raises(ModelAPIError) as info:
        await model.generate([Msg.user("hi")])
    assert type(info.value) is error
    assert info.value.status == status
    assert info.value.retry_after == retry_after
    assert info.value.model == "claude-test"
    assert info.value.body == reply.json
    assert reply.json["error"]["message"] in str(info.value)
    assert len(server.requests) == 1  # the SDK's own retries are off


async def test_error_event_inside_the_stream(server: WireServer, model: AnthropicChatModel) -> None:
    frames = anthropic_message([{"type": "text", "text": "partial answer"}])[:3]
    frames += anthropic_sse([{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}])
    server.add(Reply(sse=frames))
    with pytest.raises(ModelAPIError) as info:
        async for _ in model.stream([Msg.user("hi")]):
            pass
    assert type(info.value) is ModelAPIError
    assert info.value.status == 529
    assert "Overloaded" in str(info.value)


async def test_rate_limit_event_inside_the_stream(server: WireServer, model: AnthropicChatModel) -> None:
    frames = anthropic_sse([{"type": "error", "error": {"type": "rate_limit_error", "message": "Too fast"}}])
    server.add(Reply(sse=frames))
    with pytest.raises(RateLimitError) as info:
        await model.generate([Msg.user("hi")])
    assert info.value.status == 429


async def test_connection_refused() -> None:
    model = AnthropicChatModel("claude-test", api_key="k", base_url=closed_port_url())
    try:
        with pytest.raises(ModelConnectionError, match="Anthropic"):
            await model.generate([Msg.user("hi")])
    finally:
        await model.aclose()


async def test_stream_cut_midway_is_a_connection_error(server: WireServer, model: AnthropicChatModel) -> None:
    server.add(Reply(sse=anthropic_message([{"type": "text", "text": "Hello there, friend."}]), cut_after=4))
    received: list[str] = []
    with pytest.raises(ModelConnectionError):
        async for chunk in model.stream([Msg.user("hi")]):
            received.append(chunk.text)
    assert "".join(received)  # some text arrived before the cut


async def test_timeout(server: WireServer, model: AnthropicChatModel) -> None:
    server.add(Reply(sse=anthropic_message([{"type": "text", "text": "late"}]), delay=5))
    with pytest.raises(ModelTimeoutError):
        await model.generate([Msg.user("hi")], options=GenerateOptions(timeout=0.2))


async def test_missing_credentials(server: WireServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in (
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_PROFILE",
        "ANTHROPIC_IDENTITY_TOKEN",
        "ANTHROPIC_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path))
    model = AnthropicChatModel("claude-test", base_url=server.url)
    try:
        with pytest.raises(AuthenticationError, match="ANTHROPIC_API_KEY"):
            await model.generate([Msg.user("hi")])
    finally:
        await model.aclose()
    assert server.requests == []


# -- client lifecycle ------------------------------------------------------------------------------
async def test_given_client_is_used_and_left_open(server: WireServer) -> None:
    client = anthropic.AsyncAnthropic(api_key="given-key", base_url=server.url, max_retries=0)
    model = AnthropicChatModel("claude-test", client=client)
    server.add(text_reply("from given client"))
    reply = await model.generate([Msg.user("hi")])
    await model.aclose()
    assert reply.text == "from given client"
    assert "given-key" in server.last.headers.get("x-api-key", "") + server.last.headers.get("authorization", "")
    assert not client.is_closed()
    await client.close()


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
async def test_both_transports_and_aclose_is_idempotent(server: WireServer, transport: Any) -> None:
    model = AnthropicChatModel("claude-test", api_key="k", base_url=server.url, transport=transport)
    server.add(text_reply("one"), text_reply("two"))
    assert (await model.generate([Msg.user("hi")])).text == "one"
    await model.aclose()
    await model.aclose()
    assert (await model.generate([Msg.user("hi")])).text == "two"  # a fresh client after aclose
    await model.aclose()


def test_one_model_across_event_loops_closes_its_clients() -> None:
    # call_sync-style use: every asyncio.run is a new loop; the model opens a client per loop and
    # closes it when that loop shuts down (no "Unclosed client session" warnings, which fail tests).
    with threaded(WireServer(repeat=text_reply("again"))) as srv:
        model = AnthropicChatModel("claude-test", api_key="k", base_url=srv.url)
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


async def test_react_agent_tool_call_then_answer(server: WireServer, model: AnthropicChatModel) -> None:
    server.add(
        Reply(
            sse=anthropic_message(
                [
                    {"type": "thinking", "thinking": "I should call add.", "signature": "sig-e2e"},
                    {"type": "tool_use", "id": "toolu_e2e", "name": "add", "input": {"a": 2, "b": 3}},
                ],
                stop_reason="tool_use",
            )
        ),
        text_reply("2 + 3 = 5."),
    )
    toolkit = Toolkit()
    toolkit.register(add)
    agent = ReActAgent("calc", "You add numbers.", model=model, toolkit=toolkit, state_store=InMemoryStateStore())

    reply = await agent.call("What is 2 + 3?", RuntimeContext(user_id="u1", session_id="s1"))

    assert reply.text == "2 + 3 = 5."
    first, second = server.bodies
    assert first["system"] == "You add numbers."
    assert [t["name"] for t in first["tools"]] == ["add"]
    assert first["tools"][0]["input_schema"]["properties"]["a"] == {
        "type": "integer",
        "description": "The first addend.",
    }
    assert second["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "What is 2 + 3?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "I should call add.", "signature": "sig-e2e"},
                {"type": "tool_use", "id": "toolu_e2e", "name": "add", "input": {"a": 2, "b": 3}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_e2e", "content": "5"}]},
    ]


async def test_react_agent_streams_events(server: WireServer, model: AnthropicChatModel) -> None:
    server.add(
        Reply(
            sse=anthropic_message(
                [
                    {"type": "thinking", "thinking": "Plan.", "signature": "sig-s"},
                    {"type": "tool_use", "id": "toolu_s", "name": "add", "input": {"a": 1, "b": 1}},
                ],
                stop_reason="tool_use",
            )
        ),
        text_reply("Two."),
    )
    toolkit = Toolkit()
    toolkit.register(add)
    agent = ReActAgent("calc", "", model=model, toolkit=toolkit, state_store=InMemoryStateStore())

    events = [e async for e in agent.stream_events("1+1?", RuntimeContext(user_id="u", session_id="s"))]

    thinking = [e for e in events if isinstance(e, ev.ThinkingDelta)]
    assert "".join(e.delta for e in thinking) == "Plan."
    assert "sig-s" in [e.signature for e in thinking]
    started = [e for e in events if isinstance(e, ev.ToolCallStarted)]
    assert [(e.tool_call_id, e.name) for e in started] == [("toolu_s", "add")]
    results = [e.result for e in events if isinstance(e, ev.ToolResult)]
    assert [(r.id, r.text) for r in results] == [("toolu_s", "2")]
    assert isinstance(events[-1], ev.RunFinished) and events[-1].msg.text == "Two."


# -- packaging -------------------------------------------------------------------------------------
def _run_python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)


def test_import_agentrt_does_not_import_provider_sdks() -> None:
    done = _run_python(
        "import sys, agentrt, agentrt.model\n"
        "loaded = [m for m in ('anthropic', 'google.genai', 'agentrt.model.providers.anthropic') if m in sys.modules]\n"
        "print(loaded)"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_missing_sdk_names_the_extra() -> None:
    done = _run_python("import sys\nsys.modules['anthropic'] = None\nimport agentrt.model.providers.anthropic")
    assert done.returncode != 0
    assert "pip install 'agentrt[anthropic]'" in done.stderr


async def test_model_from_id_reaches_the_server(server: WireServer) -> None:
    from agentrt.model import model_from_id

    server.add(text_reply("via the registry"))
    model = model_from_id("anthropic:claude-test", api_key="registry-key", base_url=server.url)
    try:
        assert (await model.generate([Msg.user("hi")])).text == "via the registry"
    finally:
        await model.aclose()
    assert server.last.body["model"] == "claude-test"
    assert "registry-key" in server.last.headers.get("x-api-key", "") + server.last.headers.get("authorization", "")


async def test_abandoned_stream_releases_the_connection(server: WireServer, model: AnthropicChatModel) -> None:
    server.add(Reply(sse=anthropic_message([{"type": "text", "text": "a long answer " * 20}])), text_reply("next"))
    stream = model.stream([Msg.user("hi")])
    first = await stream.__anext__()
    assert first.text
    await stream.aclose()  # type: ignore[attr-defined]  # e.g. the run was interrupted
    assert (await model.generate([Msg.user("again")])).text == "next"
