"""The OpenAI-compatible adapter over real HTTP, against an in-process aiohttp server that speaks
Chat Completions (JSON and SSE) and checks every request body against OpenAI's request schema.

Covers streaming and non-streaming replies, typed errors, the shared session, and the fault
paths through `RetryModel` / `FallbackModel` (429 with Retry-After, 500s, 400, stalls, a stream
cut mid-tool-call) and full `ReActAgent` runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import socket
import sys
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from agentrt import ReActAgent, RuntimeContext, TextBlock, Toolkit, ToolUseBlock, tool
from agentrt import events as ev
from agentrt.errors import (
    AuthenticationError,
    ContextWindowExceededError,
    ModelAPIError,
    ModelConnectionError,
    ModelTimeoutError,
    RateLimitError,
)
from agentrt.message import Msg, ThinkingBlock, TokenUsage, ToolResultBlock
from agentrt.model import ChatResponse, FallbackModel, GenerateOptions, RetryModel, ToolSchema, model_from_id
from agentrt.model import resilience as resilience_module
from agentrt.model._accumulate import ReplyAccumulator
from agentrt.model.providers import _http
from agentrt.model.providers.openai import DeepSeekChatModel, OpenAIChatModel

_spec = importlib.util.spec_from_file_location("openai_schema", Path(__file__).parent / "data" / "openai_schema.py")
assert _spec is not None and _spec.loader is not None
openai_schema = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("openai_schema", openai_schema)
_spec.loader.exec_module(openai_schema)

KEY = "sk-test-0123456789abcdef"
WEATHER = ToolSchema(
    name="get_weather",
    description="Get the current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# --------------------------------------------------------------------------------------------------
# the fake server
# --------------------------------------------------------------------------------------------------
def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-abc",
        "object": "chat.completion.chunk",
        "created": 1764460000,
        "model": "gpt-4o-2024-08-06",
        "system_fingerprint": "fp_1",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        "usage": None,
    }


def usage_chunk(prompt: int = 20, completion: int = 10, cached: int = 0, reasoning: int = 0) -> dict[str, Any]:
    return {
        "id": "chatcmpl-abc",
        "object": "chat.completion.chunk",
        "created": 1764460000,
        "model": "gpt-4o-2024-08-06",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": reasoning, "audio_tokens": 0},
        },
    }


def text_stream(text: str, *, usage: bool = True) -> list[dict[str, Any]]:
    words = text.split(" ")
    out = [chunk({"role": "assistant", "content": "", "refusal": None})]
    out += [chunk({"content": w if i == 0 else " " + w}) for i, w in enumerate(words)]
    out.append(chunk({}, "stop"))
    if usage:
        out.append(usage_chunk())
    return out


def call_stream(calls: list[tuple[str, str, list[str]]]) -> list[dict[str, Any]]:
    """Tool calls streamed the way OpenAI does it: id and name first, then argument pieces."""
    out = [chunk({"role": "assistant", "content": None})]
    for index, (call_id, name, pieces) in enumerate(calls):
        out.append(
            chunk(
                {
                    "tool_calls": [
                        {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
                    ]
                }
            )
        )
        out += [chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]}) for p in pieces]
    out.append(chunk({}, "tool_calls"))
    out.append(usage_chunk())
    return out


def sse(
    chunks: list[dict[str, Any]],
    *,
    done: bool = True,
    stall_after: int | None = None,
    cut_after: int | None = None,
    crlf: bool = False,
) -> Callable[[web.Request, FakeOpenAI], Awaitable[web.StreamResponse]]:
    async def reply(request: web.Request, server: FakeOpenAI) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        sep = b"\r\n" if crlf else b"\n"
        for i, c in enumerate(chunks):
            if i == stall_after:
                await server.stall()
            if i == cut_after:
                assert request.transport is not None
                request.transport.close()
                return resp
            await resp.write(b"data: " + json.dumps(c).encode() + sep + sep)
        if stall_after is not None and stall_after >= len(chunks):
            await server.stall()
        if done:
            await resp.write(b"data: [DONE]" + sep + sep)
        await resp.write_eof()
        return resp

    return reply


def raw_reply(
    status: int = 200, body: Any = None, headers: dict[str, str] | None = None, *, stall: bool = False
) -> Callable[[web.Request, FakeOpenAI], Awaitable[web.StreamResponse]]:
    async def reply(request: web.Request, server: FakeOpenAI) -> web.StreamResponse:
        if stall:
            await server.stall()
        text = body if isinstance(body, str) else json.dumps(body)
        ctype = "application/json" if not isinstance(body, str) else "text/plain"
        return web.Response(status=status, text=text, headers={"Content-Type": ctype, **(headers or {})})

    return reply


def error_reply(
    status: int, message: str, *, code: str | None = None, type_: str = "invalid_request_error", **headers: str
) -> Callable[[web.Request, FakeOpenAI], Awaitable[web.StreamResponse]]:
    payload = {"error": {"message": message, "type": type_, "param": None, "code": code}}
    return raw_reply(status, payload, {k.replace("_", "-"): v for k, v in headers.items()})


def completion(message: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-xyz",
        "object": "chat.completion",
        "created": 1764460000,
        "model": "gpt-4o-2024-08-06",
        "choices": [
            {"index": 0, "message": {"role": "assistant", **message}, "logprobs": None, "finish_reason": finish}
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
    }


class FakeOpenAI:
    """Records requests, validates their bodies, answers from a queue of scripted replies."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.invalid: list[str] = []
        self.replies: deque[Callable[[web.Request, FakeOpenAI], Awaitable[web.StreamResponse]]] = deque()
        self.released = asyncio.Event()
        self.url = ""

    def add(self, *replies: Callable[[web.Request, FakeOpenAI], Awaitable[web.StreamResponse]]) -> None:
        self.replies.extend(replies)

    async def stall(self) -> None:
        # "Hang" until the test ends (at most 5 s): the client's timeouts must fire first.
        try:
            await asyncio.wait_for(self.released.wait(), 5)
        except TimeoutError:
            pass

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        problems = openai_schema.errors(body)
        if problems:
            self.invalid.append(f"request {len(self.requests)}: {problems}")
        if not self.replies:
            return await error_reply(500, "the test scripted no more replies", type_="server_error")(request, self)
        return await self.replies.popleft()(request, self)


@contextlib.asynccontextmanager
async def fake_openai() -> AsyncIterator[FakeOpenAI]:
    fake = FakeOpenAI()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", fake.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    fake.url = f"http://127.0.0.1:{port}/v1"
    try:
        yield fake
    finally:
        fake.released.set()
        await runner.cleanup()
    assert not fake.invalid, "\n".join(fake.invalid)


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAI]:
    async with fake_openai() as fake:
        yield fake


@pytest.fixture
async def server2() -> AsyncIterator[FakeOpenAI]:
    async with fake_openai() as fake:
        yield fake


@pytest.fixture
async def models() -> AsyncIterator[list[Any]]:
    """Models a test creates; closed at the end so no socket outlives the test."""
    made: list[Any] = []
    yield made
    for model in made:
        await model.aclose()


def make(models: list[Any], server: FakeOpenAI, **kwargs: Any) -> OpenAIChatModel:
    model = OpenAIChatModel(kwargs.pop("name", "gpt-4o"), base_url=server.url, api_key=KEY, **kwargs)
    models.append(model)
    return model


def refused_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Backoff delays the retry wrapper asked for (without waiting them)."""
    delays: list[float] = []

    async def fake_sleep(delay: float) -> None:
        delays.append(delay)

    monkeypatch.setattr(resilience_module, "_sleep", fake_sleep)
    return delays


async def collect(
    model: Any, messages: list[Msg], tools: list[ToolSchema] | None = None, **kw: Any
) -> list[ChatResponse]:
    return [c async for c in model.stream(messages, tools or [], kw.get("options"))]


# --------------------------------------------------------------------------------------------------
# streaming and non-streaming replies
# --------------------------------------------------------------------------------------------------
async def test_streamed_text_reply_and_request(server: FakeOpenAI, models: list[Any]) -> None:
    stream = text_stream("Hello there, friend.")
    stream[-1] = usage_chunk(prompt=30, completion=5, cached=16, reasoning=2)
    server.add(sse(stream))
    model = make(models, server, temperature=0.3)
    reply = await model.generate([Msg.system("Be kind."), Msg.user("Hi!")], options=GenerateOptions(seed=1))
    assert reply.content == [TextBlock(text="Hello there, friend.")]
    assert reply.usage == TokenUsage(input_tokens=30, output_tokens=5, cache_read_tokens=16, reasoning_tokens=2)
    assert reply.metadata == {"finish_reason": "stop"}
    assert server.requests == [
        {
            "model": "gpt-4o",
            "messages": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi!"}],
            "temperature": 0.3,
            "seed": 1,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ]
    headers = server.headers[0]
    assert headers["Authorization"] == f"Bearer {KEY}"
    assert headers["Content-Type"] == "application/json"
    assert headers["Accept"] == "text/event-stream"
    assert headers["User-Agent"].startswith("agentrt/")


async def test_stream_chunks_arrive_incrementally(server: FakeOpenAI, models: list[Any]) -> None:
    server.add(sse(text_stream("one two three", usage=False), crlf=True))
    chunks = await collect(make(models, server), [Msg.user("count")])
    assert [c.text for c in chunks if c.text] == ["one", " two", " three"]
    assert chunks[-1].finish_reason == "stop"
    assert all(c.raw is not None for c in chunks)


async def test_reasoning_content_becomes_thinking(server: FakeOpenAI, models: list[Any]) -> None:
    server.add(
        sse(
            [
                chunk({"role": "assistant", "content": None, "reasoning_content": ""}),
                chunk({"reasoning_content": "The user greets. "}),
                chunk({"reasoning_content": "Greet back."}),
                chunk({"content": "Hi!"}),
                chunk({}, "stop"),
                usage_chunk(reasoning=6),
            ]
        )
    )
    model = DeepSeekChatModel("deepseek-reasoner", base_url=server.url, api_key=KEY)
    models.append(model)
    reply = await model.generate([Msg.user("hello")])
    assert reply.content == [ThinkingBlock(thinking="The user greets. Greet back."), TextBlock(text="Hi!")]
    assert reply.usage is not None and reply.usage.reasoning_tokens == 6
    # Within the turn (here: a tool result follows), the thinking goes back to DeepSeek.
    call = Msg(role="assistant", content=[*reply.content, ToolUseBlock(id="c1", name="get_weather", input={})])
    result = Msg(role="user", content=[ToolResultBlock(id="c1", name="get_weather", output="Sunny")])
    server.add(sse(text_stream("Bye.")))
    await model.generate([Msg.user("hello"), call, result], [WEATHER])
    assert server.requests[1]["messages"][1] == {
        "role": "assistant",
        "content": "Hi!",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}],
        "reasoning_content": "The user greets. Greet back.",
    }


async def test_parallel_tool_calls_with_split_argument_deltas(server: FakeOpenAI, models: list[Any]) -> None:
    server.add(
        sse(
            call_stream(
                [
                    ("call_paris", "get_weather", ['{"ci', 'ty": "Pa', 'ris"}']),
                    ("call_rome", "get_weather", ['{"city"', ': "Rome"}']),
                ]
            )
        )
    )
    reply = await make(models, server).generate(
        [Msg.user("Paris and Rome?")], [WEATHER], GenerateOptions(parallel_tool_calls=True, tool_choice="auto")
    )
    assert reply.content == [
        ToolUseBlock(id="call_paris", name="get_weather", input={"city": "Paris"}),
        ToolUseBlock(id="call_rome", name="get_weather", input={"city": "Rome"}),
    ]
    assert reply.metadata == {"finish_reason": "tool_calls"}
    request = server.requests[0]
    assert request["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Get the current weather for a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            },
        }
    ]
    assert request["parallel_tool_calls"] is True
    assert request["tool_choice"] == "auto"


async def test_non_streaming_by_flag(server: FakeOpenAI, models: list[Any]) -> None:
    server.add(
        raw_reply(
            200,
            completion(
                {
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_9",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                        }
                    ],
                },
                "tool_calls",
            ),
        )
    )
    model = make(models, server, stream=False)
    chunks = await collect(model, [Msg.user("Oslo?")], [WEATHER])
    assert len(chunks) == 1
    assert chunks[0].usage == TokenUsage(input_tokens=12, output_tokens=3)
    assert "stream" not in server.requests[0]
    assert server.headers[0]["Accept"] == "application/json"
    server.add(raw_reply(200, completion({"content": "ok"})))
    assert (await model.generate([Msg.user("again")])).text == "ok"


async def test_non_streaming_per_call_through_extra(server: FakeOpenAI, models: list[Any]) -> None:
    server.add(raw_reply(200, completion({"content": "Whole reply."})))
    reply = await make(models, server).generate(
        [Msg.user("x")], options=GenerateOptions(extra={"openai_stream": False})
    )
    assert reply.text == "Whole reply."
    assert server.requests[0]["stream"] is False
    assert "stream_options" not in server.requests[0]


async def test_server_that_ignores_stream_true(server: FakeOpenAI, models: list[Any]) -> None:
    server.add(raw_reply(200, completion({"content": "I do not stream."})))
    assert (await make(models, server).generate([Msg.user("x")])).text == "I do not stream."


def comparable(chunks: list[ChatResponse] | None) -> list[tuple[Any, ...]]:
    assert chunks is not None
    return [(c.text, c.thinking, c.tool_calls, c.finish_reason, c.usage) for c in chunks]


@pytest.mark.parametrize(
    "reply",
    [
        raw_reply(200, completion({"content": "Whole."})),
        sse(text_stream("Folded from a plain body.")),  # SSE frames to a request that asked for JSON
        sse(call_stream([("call_3", "get_weather", ['{"city": ', '"Rome"}'])])),
    ],
)
async def test_a_whole_reply_is_what_the_stream_yields(
    server: FakeOpenAI, models: list[Any], reply: Callable[[web.Request, FakeOpenAI], Awaitable[web.StreamResponse]]
) -> None:
    model = make(models, server, stream=False)
    server.add(reply, reply)
    whole = await model.whole_reply([Msg.user("x")], [WEATHER])
    streamed = await collect(model, [Msg.user("x")], [WEATHER])
    assert comparable(whole) == comparable(streamed)
    assert server.requests[0] == server.requests[1] and "stream" not in server.requests[0]


async def test_a_streamed_call_has_no_whole_reply(server: FakeOpenAI, models: list[Any]) -> None:
    assert await make(models, server).whole_reply([Msg.user("x")]) is None  # streams unless told otherwise
    quiet = GenerateOptions(incremental=False)
    assert await make(models, server, stream=True).whole_reply([Msg.user("x")], options=quiet) is None

    class OwnStream(OpenAIChatModel):
        async def stream(
            self, messages: Any, tools: Any = (), options: GenerateOptions | None = None
        ) -> AsyncIterator[ChatResponse]:
            yield ChatResponse(text="mine", finish_reason="stop")

    own = OwnStream("gpt-4o", base_url=server.url, api_key=KEY)
    models.append(own)
    assert await own.whole_reply([Msg.user("x")], options=quiet) is None, "a subclass's own stream is used"
    assert server.requests == []


async def test_whole_reply_errors_are_typed(server: FakeOpenAI, models: list[Any]) -> None:
    server.add(error_reply(401, f"Incorrect API key provided: {KEY}.", code="invalid_api_key"))
    with pytest.raises(AuthenticationError) as info:
        await make(models, server, stream=False).whole_reply([Msg.user("x")])
    assert KEY not in str(info.value)
    refused = OpenAIChatModel("gpt-4o", base_url=refused_url(), api_key=KEY, stream=False)
    models.append(refused)
    with pytest.raises(ModelConnectionError, match="cannot connect"):
        await refused.whole_reply([Msg.user("x")])
    server.add(sse([chunk({"content": "Hel"})], done=False))
    with pytest.raises(ModelConnectionError, match="ended before the reply was complete"):
        await make(models, server, stream=False).whole_reply([Msg.user("x")])


# --------------------------------------------------------------------------------------------------
# typed errors
# --------------------------------------------------------------------------------------------------
async def test_401_is_authentication_error_without_the_key(server: FakeOpenAI, models: list[Any]) -> None:
    server.add(
        error_reply(401, f"Incorrect API key provided: {KEY}. You can find your API key at ...", code="invalid_api_key")
    )
    with pytest.raises(AuthenticationError) as info:
        await make(models, server).generate([Msg.user("x")])
    message = str(info.value)
    assert KEY not in message
    assert "openai model 'gpt-4o': HTTP 401 (invalid_api_key): Incorrect API key provided: ***" in message
    assert info.value.status == 401


async def test_429_is_rate_limit_error_with_retry_after(server: FakeOpenAI, models: list[Any]) -> None:
    server.add(error_reply(429, "Rate limit reached for gpt-4o", code="rate_limit_exceeded", retry_after="3"))
    with pytest.raises(RateLimitError) as info:
        await make(models, server).generate([Msg.user("x")])
    assert info.value.retry_after == 3.0
    assert info.value.status == 429


async def test_400_context_length(server: FakeOpenAI, models: list[Any]) -> None:
    server.add(
        error_reply(
            400,
            "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.",
            code="context_length_exceeded",
        )
    )
    with pytest.raises(ContextWindowExceededError, match="maximum context length"):
        await make(models, server).generate([Msg.user("x")])


async def test_500_is_api_error_with_status_and_body(server: FakeOpenAI, models: list[Any]) -> None:
    server.add(error_reply(500, "The server had an error while processing your request.", type_="server_error"))
    with pytest.raises(ModelAPIError) as info:
        await make(models, server).generate([Msg.user("x")])
    assert type(info.value) is ModelAPIError
    assert info.value.status == 500
    assert info.value.body["error"]["type"] == "server_error"
    assert info.value.model == "gpt-4o"


async def test_error_inside_the_stream(server: FakeOpenAI, models: list[Any]) -> None:
    server.add(sse([chunk({"content": "Hel"}), {"error": {"code": 502, "message": "Upstream provider died"}}]))
    with pytest.raises(ModelAPIError, match="Upstream provider died") as info:
        await make(models, server).generate([Msg.user("x")])
    assert info.value.status == 502


async def test_connection_refused(models: list[Any]) -> None:
    model = OpenAIChatModel("gpt-4o", base_url=refused_url(), api_key=KEY)
    models.append(model)
    with pytest.raises(ModelConnectionError, match="cannot connect") as info:
        await model.generate([Msg.user("x")])
    assert KEY not in str(info.value)


async def test_stream_cut_by_the_server(server: FakeOpenAI, models: list[Any]) -> None:
    server.add(sse(call_stream([("c1", "get_weather", ['{"city": ', '"Paris"}'])]), cut_after=3))
    with pytest.raises(ModelConnectionError, match=r"connection to 127\.0\.0\.1 failed"):
        await make(models, server).generate([Msg.user("x")], [WEATHER])


async def test_stream_ending_without_done_or_finish(server: FakeOpenAI, models: list[Any]) -> None:
    server.add(sse([chunk({"content": "Hel"})], done=False))
    with pytest.raises(ModelConnectionError, match="ended before the reply was complete"):
        await make(models, server).generate([Msg.user("x")])


async def test_stream_ending_with_finish_but_no_done_is_fine(server: FakeOpenAI, models: list[Any]) -> None:
    server.add(sse(text_stream("Fine.", usage=False), done=False))
    assert (await make(models, server).generate([Msg.user("x")])).text == "Fine."


async def test_total_timeout_per_call(server: FakeOpenAI, models: list[Any]) -> None:
    server.add(raw_reply(200, completion({"content": "late"}), stall=True))
    with pytest.raises(ModelTimeoutError, match="timed out"):
        await make(models, server).generate([Msg.user("x")], options=GenerateOptions(timeout=0.2))


# --------------------------------------------------------------------------------------------------
# the shared session
# --------------------------------------------------------------------------------------------------
async def test_models_share_one_session_per_loop(server: FakeOpenAI) -> None:
    server.add(sse(text_stream("a")), sse(text_stream("b")), sse(text_stream("c")))
    a = OpenAIChatModel("gpt-4o", base_url=server.url, api_key=KEY)
    b = DeepSeekChatModel("deepseek-chat", base_url=server.url, api_key=KEY)
    await a.generate([Msg.user("x")])
    await b.generate([Msg.user("x")])
    session = a._lease.get()
    assert session is not None and session is b._lease.get()
    assert isinstance(session.connector, aiohttp.TCPConnector)
    assert session.connector.limit == _http.DEFAULT_MAX_CONNECTIONS > 100
    await a.aclose()
    assert not session.closed  # b still uses it
    await b.generate([Msg.user("x")])
    await b.aclose()
    assert session.closed
    await a.aclose()  # idempotent


async def test_a_given_session_is_never_closed(server: FakeOpenAI) -> None:
    server.add(sse(text_stream("a")))
    async with aiohttp.ClientSession() as session:
        model = OpenAIChatModel("gpt-4o", base_url=server.url, api_key=KEY, session=session)
        assert (await model.generate([Msg.user("x")])).text == "a"
        await model.aclose()
        assert not session.closed


async def test_model_reopens_after_aclose(server: FakeOpenAI, models: list[Any]) -> None:
    server.add(sse(text_stream("a")), sse(text_stream("b")))
    model = make(models, server)
    await model.generate([Msg.user("x")])
    await model.aclose()
    assert (await model.generate([Msg.user("x")])).text == "b"


async def test_many_concurrent_streams(server: FakeOpenAI, models: list[Any]) -> None:
    n = 150  # above aiohttp's default pool limit of 100
    server.add(*(sse(text_stream(f"reply {i}")) for i in range(n)))
    model = make(models, server)
    replies = await asyncio.gather(*(model.generate([Msg.user(str(i))]) for i in range(n)))
    assert sorted(r.text for r in replies) == sorted(f"reply {i}" for i in range(n))


# --------------------------------------------------------------------------------------------------
# resilience over HTTP
# --------------------------------------------------------------------------------------------------
async def test_429_with_retry_after_then_success(server: FakeOpenAI, models: list[Any], sleeps: list[float]) -> None:
    server.add(
        error_reply(429, "Rate limit reached", code="rate_limit_exceeded", retry_after="2"), sse(text_stream("ok"))
    )
    model = RetryModel(make(models, server), max_retries=2)
    assert (await model.generate([Msg.user("x")])).text == "ok"
    assert len(server.requests) == 2
    assert sleeps == [2.0]


async def test_retry_after_is_capped(server: FakeOpenAI, models: list[Any], sleeps: list[float]) -> None:
    server.add(error_reply(429, "slow down", retry_after="3600"), sse(text_stream("ok")))
    model = RetryModel(make(models, server), max_retry_after=5)
    assert (await model.generate([Msg.user("x")])).text == "ok"
    assert sleeps == [5.0]


async def test_500_twice_then_success(server: FakeOpenAI, models: list[Any], sleeps: list[float]) -> None:
    server.add(
        error_reply(500, "oops", type_="server_error"),
        error_reply(503, "overloaded", type_="server_error"),
        sse(text_stream("third time lucky")),
    )
    model = RetryModel(make(models, server), max_retries=2, backoff=0.5)
    assert (await model.generate([Msg.user("x")])).text == "third time lucky"
    assert len(server.requests) == 3
    assert len(sleeps) == 2
    assert 0 <= sleeps[0] <= 0.5 and 0 <= sleeps[1] <= 1.0  # full jitter, doubling cap


async def test_retries_run_out(server: FakeOpenAI, models: list[Any], sleeps: list[float]) -> None:
    server.add(*(error_reply(500, f"oops {i}", type_="server_error") for i in range(3)))
    with pytest.raises(ModelAPIError, match="oops 2"):
        await RetryModel(make(models, server), max_retries=2).generate([Msg.user("x")])
    assert len(server.requests) == 3


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_client_errors_are_not_retried(
    server: FakeOpenAI, models: list[Any], sleeps: list[float], status: int
) -> None:
    server.add(error_reply(status, "you did something wrong"), sse(text_stream("never")))
    with pytest.raises(ModelAPIError) as info:
        await RetryModel(make(models, server), max_retries=3).generate([Msg.user("x")])
    assert info.value.status == status
    assert len(server.requests) == 1
    assert sleeps == []


async def test_insufficient_quota_is_not_retried(server: FakeOpenAI, models: list[Any], sleeps: list[float]) -> None:
    server.add(
        error_reply(429, "You exceeded your current quota", code="insufficient_quota", type_="insufficient_quota")
    )
    with pytest.raises(RateLimitError):
        await RetryModel(make(models, server), max_retries=3).generate([Msg.user("x")])
    assert len(server.requests) == 1


async def test_connection_refused_is_retried_then_raised(models: list[Any], sleeps: list[float]) -> None:
    inner = OpenAIChatModel("gpt-4o", base_url=refused_url(), api_key=KEY)
    models.append(inner)
    with pytest.raises(ModelConnectionError):
        await RetryModel(inner, max_retries=2).generate([Msg.user("x")])
    assert len(sleeps) == 2


async def test_stalled_stream_hits_the_idle_timeout(server: FakeOpenAI, models: list[Any]) -> None:
    server.add(sse(text_stream("never finished"), stall_after=2))
    model = RetryModel(make(models, server), max_retries=0, idle_timeout=0.2)
    seen: list[str] = []
    with pytest.raises(ModelTimeoutError, match=r"idle_timeout=0\.2"):
        async for c in model.stream([Msg.user("x")]):
            seen.append(c.text)
    assert seen == ["never"]


async def test_server_that_never_answers_hits_the_first_chunk_timeout(server: FakeOpenAI, models: list[Any]) -> None:
    server.add(raw_reply(200, completion({"content": "too late"}), stall=True))
    model = RetryModel(make(models, server), max_retries=0, timeout=0.2)
    with pytest.raises(ModelTimeoutError, match="first chunk"):
        await model.generate([Msg.user("x")])


async def test_stall_then_retry_restarts_the_reply(server: FakeOpenAI, models: list[Any], sleeps: list[float]) -> None:
    server.add(sse(text_stream("half a"), stall_after=2), sse(text_stream("whole reply")))
    model = RetryModel(make(models, server), max_retries=1, idle_timeout=0.2)
    chunks = await collect(model, [Msg.user("x")])
    restarts = [c.restart for c in chunks if c.restart]
    assert len(restarts) == 1 and "ModelTimeoutError" in restarts[0]
    acc = ReplyAccumulator()
    for c in chunks:
        acc.add(c)
    assert acc.message(name=None).text == "whole reply"


async def test_default_model_from_id_is_resilient(server: FakeOpenAI, sleeps: list[float]) -> None:
    server.add(error_reply(500, "oops", type_="server_error"), sse(text_stream("ok")))
    model = model_from_id("openai:gpt-4o", base_url=server.url, api_key=KEY)
    try:
        assert isinstance(model, RetryModel)
        assert (model.max_retries, model.timeout, model.idle_timeout) == (2, 60.0, 30.0)
        assert (await model.generate([Msg.user("x")])).text == "ok"
    finally:
        await model.aclose()


# --------------------------------------------------------------------------------------------------
# agent runs
# --------------------------------------------------------------------------------------------------
@tool(read_only=True)
async def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return f"Sunny, 22 C in {city}."


def weather_agent(model: Any) -> ReActAgent:
    toolkit = Toolkit()
    toolkit.register(get_weather)
    return ReActAgent(name="assistant", sys_prompt="You are a helpful assistant.", model=model, toolkit=toolkit)


async def test_an_agent_call_nobody_streams_reads_whole_replies(
    server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_stream(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a call nobody streams is read whole, through no async generator")

    monkeypatch.setattr(OpenAIChatModel, "stream", no_stream)
    monkeypatch.setattr(RetryModel, "stream", no_stream)
    server.add(
        raw_reply(
            200,
            completion(
                {
                    "content": None,
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
                    ],
                },
                "tool_calls",
            ),
        ),
        raw_reply(200, completion({"content": "It is sunny."})),
    )
    model = model_from_id("openai:gpt-4o-mini", base_url=server.url, api_key=KEY)  # in a RetryModel
    assert isinstance(model, RetryModel)
    try:
        reply = await weather_agent(model).call("Weather?", RuntimeContext(user_id="u", session_id="whole"))
    finally:
        await model.aclose()
    assert reply.text == "It is sunny."
    assert [r.get("stream") for r in server.requests] == [None, None]


async def test_react_agent_end_to_end(server: FakeOpenAI) -> None:
    server.add(
        sse(call_stream([("call_w1", "get_weather", ['{"city": "Pa', 'ris"}'])])),
        sse(text_stream("It is sunny in Paris.")),
    )
    model = model_from_id("openai:gpt-4o-mini", base_url=server.url, api_key=KEY)
    try:
        agent = weather_agent(model)
        reply = await agent.call("What is the weather in Paris?", RuntimeContext(user_id="u", session_id="s1"))
    finally:
        await model.aclose()
    assert reply.text == "It is sunny in Paris."
    assert reply.usage == TokenUsage(input_tokens=40, output_tokens=20)
    first, second = server.requests
    assert first["messages"] == [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the weather in Paris?"},
    ]
    assert [t["function"]["name"] for t in first["tools"]] == ["get_weather"]
    assert first["tools"][0]["function"]["parameters"]["properties"]["city"]["type"] == "string"
    assert second["messages"][2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_w1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
            "name": "assistant",
        },
        {"role": "tool", "tool_call_id": "call_w1", "content": "Sunny, 22 C in Paris."},
    ]


async def test_stream_cut_mid_tool_call_falls_back(server: FakeOpenAI, server2: FakeOpenAI) -> None:
    # The primary starts a reply with text and a tool call, then the connection drops.
    server.add(
        sse(
            [
                chunk({"role": "assistant", "content": "Let me check the "}),
                chunk({"content": "weather in Lyon."}),
                *call_stream([("call_primary", "get_weather", ['{"city": "Ly', 'on"}'])])[1:],
            ],
            cut_after=4,
        ),
        sse(text_stream("Primary says: sunny in Paris.")),
    )
    server2.add(sse(call_stream([("call_fallback", "get_weather", ['{"city": "Paris"}'])])))
    primary = OpenAIChatModel("gpt-4o", base_url=server.url, api_key=KEY)
    fallback = OpenAIChatModel("backup-model", base_url=server2.url, api_key=KEY)
    model = FallbackModel(RetryModel(primary, max_retries=0), fallback)
    agent = weather_agent(model)
    ctx = RuntimeContext(user_id="u", session_id="s2")
    events = []
    try:
        async for event in agent.stream_events("Weather in Paris?", ctx):
            events.append(event)
    finally:
        await model.aclose()
    restarts = [e for e in events if isinstance(e, ev.ModelRestarted)]
    assert len(restarts) == 1
    assert "primary openai:gpt-4o failed" in restarts[0].reason
    assert "continuing with openai:backup-model" in restarts[0].reason
    state = await agent.get_state("u", "s2")
    tool_call_msg = state.messages[1]
    # Only the fallback's output survives: no text and no call from the cut primary reply.
    assert tool_call_msg.content == [ToolUseBlock(id="call_fallback", name="get_weather", input={"city": "Paris"})]
    results = [e for e in events if isinstance(e, ev.ToolResult)]
    assert [r.result.id for r in results] == ["call_fallback"]
    final = events[-1]
    assert final.type == "run_finished"
    assert isinstance(final, ev.RunFinished)
    assert final.msg.text == "Primary says: sunny in Paris."


async def test_malformed_tool_arguments_are_repaired(server: FakeOpenAI) -> None:
    server.add(
        sse(call_stream([("call_1", "get_weather", ['{"city": "Paris"'])])),  # missing brace
        sse(text_stream("Sunny.")),
    )
    model = OpenAIChatModel("gpt-4o", base_url=server.url, api_key=KEY)
    try:
        reply = await weather_agent(model).call("Paris?", RuntimeContext(user_id="u", session_id="s3"))
    finally:
        await model.aclose()
    assert reply.text == "Sunny."
    assert server.requests[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "Sunny, 22 C in Paris.",
    }


async def test_unreadable_tool_arguments_go_back_to_the_model(server: FakeOpenAI) -> None:
    server.add(
        sse(call_stream([("call_1", "get_weather", ["city=Paris, please"])])),
        sse(call_stream([("call_2", "get_weather", ['{"city": "Paris"}'])])),
        sse(text_stream("Sunny.")),
    )
    model = OpenAIChatModel("gpt-4o", base_url=server.url, api_key=KEY)
    try:
        reply = await weather_agent(model).call("Paris?", RuntimeContext(user_id="u", session_id="s4"))
    finally:
        await model.aclose()
    assert reply.text == "Sunny."
    second = server.requests[1]["messages"]
    # The garbled arguments are sent back verbatim, with an error result the model can act on.
    assert second[-2]["tool_calls"][0]["function"]["arguments"] == "city=Paris, please"
    assert second[-1]["role"] == "tool" and second[-1]["tool_call_id"] == "call_1"
    assert "JSON" in second[-1]["content"]
    assert server.requests[2]["messages"][-1]["content"] == "Sunny, 22 C in Paris."
