"""Provider errors name what to fix: the URL requested, why a connection failed (in words), a missing ``/v1``."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from agentrt.errors import ModelAPIError, ModelConnectionError
from agentrt.message import Msg
from agentrt.model.providers._errors import connection_cause, missing_version_hint, public_url
from agentrt.model.providers.anthropic import AnthropicChatModel
from agentrt.model.providers.gemini import GeminiChatModel
from agentrt.model.providers.openai import OpenAIChatModel

REFUSED = "connection refused (is the server running and listening on that port?)"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def _failure(model: Any) -> BaseException:
    try:
        async for _ in model.stream([Msg.user("hi")]):
            pass
    except Exception as exc:
        return exc
    finally:
        await model.aclose()
    raise AssertionError("the call did not fail")


@pytest.fixture
async def not_found() -> AsyncIterator[str]:
    """A server answering every request with aiohttp's plain ``404: Not Found``; yields its root URL."""
    runner = web.AppRunner(web.Application())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


def _models(base: str) -> list[tuple[str, Any]]:
    return [
        ("openai", OpenAIChatModel("gpt-x", api_key="k", base_url=base + "/v1")),
        ("anthropic-aiohttp", AnthropicChatModel("claude-x", api_key="k", base_url=base)),
        ("anthropic-httpx", AnthropicChatModel("claude-x", api_key="k", base_url=base, transport="httpx")),
        ("gemini", GeminiChatModel("gemini-x", api_key="k", base_url=base)),
    ]


async def test_connection_errors_name_the_url_and_the_cause_in_plain_words() -> None:
    base = f"http://127.0.0.1:{_closed_port()}"
    expected = {
        "openai": f"openai model 'gpt-x': cannot connect to {base}/v1/chat/completions: {REFUSED}",
        "anthropic-aiohttp": f"Anthropic model 'claude-x': cannot connect to {base}/v1/messages: {REFUSED}",
        "anthropic-httpx": f"Anthropic model 'claude-x': cannot connect to {base}/v1/messages: {REFUSED}",
        "gemini": f"Gemini model 'gemini-x': cannot connect to {base}: {REFUSED}",
    }
    for name, model in _models(base):
        exc = await _failure(model)
        assert isinstance(exc, ModelConnectionError), (name, exc)
        assert str(exc) == expected[name]
        assert "ConnectionKey" not in str(exc) and "SSLContext" not in str(exc)


async def test_an_unknown_host_is_said_in_words() -> None:
    exc = await _failure(GeminiChatModel("gemini-x", api_key="k", base_url="http://no-such-host.invalid"))
    assert isinstance(exc, ModelConnectionError)
    assert str(exc).startswith(
        "Gemini model 'gemini-x': cannot connect to http://no-such-host.invalid: the host name could not be resolved"
    )


async def test_openai_404_names_the_url_and_suggests_v1(not_found: str) -> None:
    exc = await _failure(OpenAIChatModel("gpt-x", api_key="k", base_url=not_found))
    assert isinstance(exc, ModelAPIError) and exc.status == 404
    assert str(exc) == (
        f"openai model 'gpt-x': HTTP 404: 404: Not Found (POST {not_found}/chat/completions); the base URL "
        f"{not_found} ends without a version segment: OpenAI-compatible servers usually serve the API under /v1 "
        f"(base_url='{not_found}/v1')"
    )
    exc = await _failure(OpenAIChatModel("gpt-x", api_key="k", base_url=not_found + "/v1"))
    assert str(exc) == f"openai model 'gpt-x': HTTP 404: 404: Not Found (POST {not_found}/v1/chat/completions)"


async def test_sdk_providers_404_name_the_url_and_the_doubled_version(not_found: str) -> None:
    exc = await _failure(AnthropicChatModel("claude-x", api_key="k", base_url=not_found + "/v1"))
    assert isinstance(exc, ModelAPIError) and exc.status == 404
    assert f"(POST {not_found}/v1/v1/messages)" in str(exc)
    assert f"base_url {not_found}/v1 ends in /v1, which the SDK adds itself: drop it" in str(exc)
    exc = await _failure(GeminiChatModel("gemini-x", api_key="k", base_url=not_found + "/v1beta"))
    assert isinstance(exc, ModelAPIError) and exc.status == 404
    assert f"(POST {not_found}/v1beta/" in str(exc) and "?" not in str(exc)  # no query (keys can ride there)
    assert "ends in an API version, which the SDK adds itself: drop it" in str(exc)


def test_helpers() -> None:
    assert public_url("https://user:pw@example.com/v1/x?key=secret") == "https://example.com/v1/x"
    assert missing_version_hint(404, "http://h/v1") == ""
    assert missing_version_hint(404, "http://h/api/v2beta/") == ""
    assert missing_version_hint(500, "http://h") == ""
    assert "'http://h/openai/v1'" in missing_version_hint(404, "http://h/openai")
    wrapped = RuntimeError("outer")
    wrapped.__cause__ = ConnectionRefusedError(111, "Connect call failed")
    assert connection_cause(wrapped) == REFUSED
    assert connection_cause(OSError(101, "Network is unreachable")) == "network is unreachable"
    assert connection_cause(RuntimeError("weird")) == "weird (RuntimeError)"


async def test_embeddings_404_names_the_url_and_suggests_v1(not_found: str) -> None:
    from agentrt.memory.embeddings import OpenAIEmbeddings

    embeddings = OpenAIEmbeddings(base_url=not_found, api_key="k", max_retries=0)
    try:
        with pytest.raises(ModelAPIError) as caught:
            await embeddings(["hello"])
    finally:
        await embeddings.aclose()
    text = str(caught.value)
    assert f"(POST {not_found}/embeddings)" in text
    assert f"base_url='{not_found}/v1'" in text
