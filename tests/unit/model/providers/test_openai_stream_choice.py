"""Streamed or whole replies: an agent call nobody streams asks for whole completions (cheaper),
a streamed call asks for SSE, and explicit settings win. Checked on the wire, at a real HTTP server.

Also: `RetryModel` waits `whole_timeout` (not the first-chunk `timeout`) for a reply that comes whole.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from test_openai_http import KEY, FakeOpenAI, call_stream, completion, fake_openai, raw_reply, sse, text_stream

from agentrt import ReActAgent, RuntimeContext, Toolkit, tool
from agentrt.errors import ModelTimeoutError
from agentrt.message import Msg
from agentrt.model import ChatModel, ChatResponse, GenerateOptions, RetryModel, ToolSchema, model_from_id
from agentrt.model.providers.openai import OpenAIChatModel


@tool(read_only=True)
async def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return f"Sunny, 22 C in {city}."


def agent_for(model: ChatModel) -> ReActAgent:
    toolkit = Toolkit()
    toolkit.register(get_weather)
    return ReActAgent("assistant", "You are a helpful assistant.", model=model, toolkit=toolkit)


def whole_replies(server: FakeOpenAI) -> None:
    tool_call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
    }
    server.add(
        raw_reply(200, completion({"content": None, "tool_calls": [tool_call]}, "tool_calls")),
        raw_reply(200, completion({"content": "It is sunny in Paris."})),
    )


def streamed_replies(server: FakeOpenAI) -> None:
    server.add(
        sse(call_stream([("call_1", "get_weather", ['{"city": "Paris"}'])])),
        sse(text_stream("It is sunny in Paris.")),
    )


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAI]:
    async with fake_openai() as fake:
        yield fake


async def test_a_call_nobody_streams_asks_for_whole_completions(server: FakeOpenAI) -> None:
    whole_replies(server)
    async with model_from_id("openai:gpt-4o", base_url=server.url, api_key=KEY) as model:
        reply = await agent_for(model).call("Weather in Paris?", RuntimeContext(user_id="u", session_id="s"))
    assert reply.text == "It is sunny in Paris."
    assert [body.get("stream") for body in server.requests] == [None, None]
    assert all("stream_options" not in body for body in server.requests)
    assert [h.get("Accept") for h in server.headers] == ["application/json"] * 2


async def test_a_streamed_call_asks_for_sse(server: FakeOpenAI) -> None:
    streamed_replies(server)
    async with model_from_id("openai:gpt-4o", base_url=server.url, api_key=KEY) as model:
        agent = agent_for(model)
        kinds = [e.type async for e in agent.stream_events("Weather?", RuntimeContext(user_id="u", session_id="s"))]
    assert "text_delta" in kinds and kinds[-1] == "run_finished"
    assert [body.get("stream") for body in server.requests] == [True, True]
    assert all(body["stream_options"] == {"include_usage": True} for body in server.requests)


@pytest.mark.parametrize(
    ("setting", "streamed"),
    [
        ({"stream": True}, True),  # the constructor's choice wins over the agent's hint
        ({"stream": False}, False),
        ({"extra": {"openai_stream": True}}, True),  # so does a per-call extra, in the agent's options
    ],
)
async def test_explicit_settings_win_over_the_hint(server: FakeOpenAI, setting: dict[str, Any], streamed: bool) -> None:
    (streamed_replies if streamed else whole_replies)(server)
    constructor = {k: v for k, v in setting.items() if k == "stream"}
    async with OpenAIChatModel("gpt-4o", base_url=server.url, api_key=KEY, **constructor) as model:
        agent = agent_for(model)
        if "extra" in setting:
            agent.options = GenerateOptions(extra=setting["extra"])
        reply = await agent.call("Weather?", RuntimeContext(user_id="u", session_id="s"))
    assert reply.text == "It is sunny in Paris."
    assert [body.get("stream") is True for body in server.requests] == [streamed, streamed]


def test_streams_reports_what_the_request_will_ask() -> None:
    auto = OpenAIChatModel("gpt-4o", api_key=KEY)
    assert auto.streams() and auto.streams(GenerateOptions(incremental=True))
    assert not auto.streams(GenerateOptions(incremental=False))
    assert auto.streams(GenerateOptions(incremental=False, extra={"openai_stream": True}))
    assert not OpenAIChatModel("gpt-4o", api_key=KEY, stream=False).streams()
    assert OpenAIChatModel("gpt-4o", api_key=KEY, stream=True).streams(GenerateOptions(incremental=False))
    assert not RetryModel(auto).streams(GenerateOptions(incremental=False))  # wrappers forward the question


class SlowWhole(ChatModel):
    """Answers whole after `delay` seconds (like a non-streamed completion of a long generation)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.calls = 0

    def streams(self, options: GenerateOptions | None = None) -> bool:
        return False

    async def stream(
        self, messages: Sequence[Msg], tools: Sequence[ToolSchema] = (), options: GenerateOptions | None = None
    ) -> AsyncIterator[ChatResponse]:
        self.calls += 1
        await asyncio.sleep(self.delay)
        yield ChatResponse(text="done", finish_reason="stop")


async def test_a_whole_reply_waits_whole_timeout_not_the_first_chunk_timeout() -> None:
    model = SlowWhole(0.3)
    reply = await RetryModel(model, timeout=0.05, whole_timeout=10, max_retries=0).generate([Msg.user("x")])
    assert reply.text == "done" and model.calls == 1


async def test_whole_timeout_bounds_a_whole_reply() -> None:
    model = SlowWhole(10)
    retry = RetryModel(model, timeout=60, whole_timeout=0.05, max_retries=1, backoff=0)
    with pytest.raises(ModelTimeoutError, match=r"whole_timeout=0\.05"):
        await retry.generate([Msg.user("x")])
    assert model.calls == 2  # a timeout is retried like any other


def test_whole_timeout_is_validated() -> None:
    from agentrt.errors import UserError

    with pytest.raises(UserError, match="whole_timeout"):
        RetryModel(SlowWhole(0), whole_timeout=0)
