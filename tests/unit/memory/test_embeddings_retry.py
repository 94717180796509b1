"""OpenAIEmbeddings retries, concurrent batches and response checks, against a local wire-format server.

Every request body is validated against OpenAI's ``CreateEmbeddingRequest`` schema (below, its
structural keywords as published in ``openai/openai-openapi`` ``openapi.yaml``, commit
``f85dbe223d40e1a31cba812ab2d755c7e98a92a3``, info.version 2.3.0, MIT licence; descriptions and
examples dropped).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from jsonschema import Draft202012Validator

from agentrt.errors import ModelAPIError, ModelBehaviorError, RateLimitError, UserError
from agentrt.memory import OpenAIEmbeddings
from agentrt.memory import embeddings as embeddings_module

CREATE_EMBEDDING_REQUEST: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "input": {
            "oneOf": [
                {"type": "string"},
                {"type": "array", "minItems": 1, "maxItems": 2048, "items": {"type": "string"}},
                {"type": "array", "minItems": 1, "maxItems": 2048, "items": {"type": "integer"}},
                {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 2048,
                    "items": {"type": "array", "minItems": 1, "items": {"type": "integer"}},
                },
            ]
        },
        "model": {
            "anyOf": [
                {"type": "string"},
                {
                    "type": "string",
                    "enum": ["text-embedding-ada-002", "text-embedding-3-small", "text-embedding-3-large"],
                },
            ]
        },
        "encoding_format": {"type": "string", "enum": ["float", "base64"]},
        "dimensions": {"type": "integer", "minimum": 1},
        "user": {"type": "string"},
    },
    "required": ["model", "input"],
}
VALIDATOR = Draft202012Validator(CREATE_EMBEDDING_REQUEST)

Reply = Callable[[list[str]], Awaitable[web.Response]]


def vector(text: str) -> list[float]:
    return [float(len(text)), float(text.count("e")), 1.0]


def ok(texts: list[str], *, dims: int | None = None) -> web.Response:
    data = [{"object": "embedding", "index": i, "embedding": vector(t)[:dims]} for i, t in enumerate(texts)]
    data.reverse()  # the client must order by index
    usage = {"prompt_tokens": len(texts), "total_tokens": len(texts)}
    return web.json_response({"object": "list", "data": data, "model": "m", "usage": usage})


def error(status: int, code: str = "oops", headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": {"message": code, "code": code, "type": code}}, status=status, headers=headers)


class Server:
    """Answers from `script` (one reply maker per hit, then plain success), counting hits."""

    def __init__(self) -> None:
        self.hits = 0
        self.inputs: list[list[str]] = []
        self.schema_errors: list[str] = []
        self.script: list[Reply] = []
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.schema_errors.extend(e.message for e in VALIDATOR.iter_errors(body))
        self.hits += 1
        texts = body["input"]
        self.inputs.append(texts)
        if self.script:
            return await self.script.pop(0)(texts)
        return ok(texts)


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    srv = Server()
    app = web.Application()
    app.router.add_post("/v1/embeddings", srv.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    srv.url = f"http://127.0.0.1:{port}/v1"
    yield srv
    await runner.cleanup()
    assert srv.schema_errors == []


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The backoff delays asked for (none is actually waited)."""
    asked: list[float] = []

    async def fake_sleep(delay: float) -> None:
        asked.append(delay)

    monkeypatch.setattr(embeddings_module, "_sleep", fake_sleep)
    return asked


def replies(*items: web.Response | Reply) -> list[Reply]:
    out: list[Reply] = []
    for item in items:
        if isinstance(item, web.Response):

            async def fixed(texts: list[str], response: web.Response = item) -> web.Response:
                return response

            out.append(fixed)
        else:
            out.append(item)
    return out


async def test_a_429_then_success_retries_once(server: Server, sleeps: list[float]) -> None:
    server.script = replies(error(429, "rate_limit_exceeded", {"Retry-After": "7"}))
    embed = OpenAIEmbeddings("text-embedding-3-small", base_url=server.url, api_key="k", dimensions=3)
    assert await embed(["a", "bee"]) == [vector("a"), vector("bee")]
    assert server.hits == 2 and sleeps == [7.0]  # Retry-After honoured
    await embed.aclose()


async def test_retry_after_is_capped(server: Server, sleeps: list[float]) -> None:
    server.script = replies(error(429, "rate_limit_exceeded", {"Retry-After": "3600"}))
    embed = OpenAIEmbeddings(base_url=server.url, api_key="k", max_retry_after=5.0)
    await embed(["x"])
    assert server.hits == 2 and sleeps == [5.0]
    await embed.aclose()


async def test_a_400_is_not_retried(server: Server, sleeps: list[float]) -> None:
    server.script = replies(error(400, "invalid_request_error"))
    embed = OpenAIEmbeddings(base_url=server.url, api_key="k")
    with pytest.raises(ModelAPIError) as info:
        await embed(["x"])
    assert info.value.status == 400
    assert server.hits == 1 and sleeps == []
    await embed.aclose()


async def test_spent_quota_is_not_retried(server: Server, sleeps: list[float]) -> None:
    server.script = replies(error(429, "insufficient_quota"))
    embed = OpenAIEmbeddings(base_url=server.url, api_key="k")
    with pytest.raises(RateLimitError):
        await embed(["x"])
    assert server.hits == 1 and sleeps == []
    await embed.aclose()


async def test_5xx_backs_off_exponentially_then_gives_up(
    server: Server, sleeps: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    server.script = replies(*(error(503, "overloaded") for _ in range(10)))
    monkeypatch.setattr("random.uniform", lambda low, high: high)  # the top of each jitter range
    embed = OpenAIEmbeddings(base_url=server.url, api_key="k", backoff=1.0, max_backoff=3.0)
    with pytest.raises(ModelAPIError) as info:
        await embed(["x"])
    assert info.value.status == 503
    assert server.hits == 4 and sleeps == [1.0, 2.0, 3.0]  # max_retries=3 by default
    once = OpenAIEmbeddings(base_url=server.url, api_key="k", max_retries=0)
    with pytest.raises(ModelAPIError):
        await once(["x"])
    assert server.hits == 5
    await embed.aclose()
    await once.aclose()


async def test_a_dropped_connection_is_retried(server: Server, sleeps: list[float]) -> None:
    async def drop(texts: list[str]) -> web.Response:
        raise ConnectionResetError  # aiohttp closes the connection without an answer

    server.script = [drop]
    embed = OpenAIEmbeddings(base_url=server.url, api_key="k", backoff=0.0)
    assert await embed(["x"]) == [vector("x")]
    assert server.hits == 2 and len(sleeps) == 1
    await embed.aclose()


async def test_batches_run_concurrently_and_come_back_in_order(server: Server, sleeps: list[float]) -> None:
    in_flight = peak = 0
    second_arrived = asyncio.Event()
    texts = [f"text {'e' * i}" for i in range(9)]

    async def tracked(inputs: list[str]) -> web.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            if inputs[0] == texts[0]:
                await asyncio.wait_for(second_arrived.wait(), 10)  # the first batch answers after the second
            else:
                second_arrived.set()
            return ok(inputs)
        finally:
            in_flight -= 1

    server.script = [tracked] * 5
    embed = OpenAIEmbeddings(base_url=server.url, api_key="k", batch_size=2, max_concurrency=2)
    assert await embed(texts) == [vector(t) for t in texts]
    assert server.hits == 5 and peak == 2
    assert sorted(map(tuple, server.inputs)) == sorted(tuple(texts[i : i + 2]) for i in range(0, 9, 2))
    assert await embed([]) == [] and server.hits == 5
    await embed.aclose()


async def test_one_failed_batch_fails_the_call_with_its_own_error(server: Server, sleeps: list[float]) -> None:
    async def by_batch(inputs: list[str]) -> web.Response:
        return error(401, "invalid_api_key") if inputs[0] == "c" else ok(inputs)

    server.script = [by_batch] * 3
    embed = OpenAIEmbeddings(base_url=server.url, api_key="k", batch_size=2)
    with pytest.raises(ModelAPIError) as info:  # the typed error, not an ExceptionGroup
        await embed(["a", "b", "c", "d", "e"])
    assert info.value.status == 401 and sleeps == []
    await embed.aclose()


def raw(data: Any, status: int = 200) -> Reply:
    async def reply(texts: list[str]) -> web.Response:
        return web.json_response({"object": "list", "data": data, "model": "m"}, status=status)

    return reply


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ([{"index": 0, "embedding": [1.0, 2.0]}], "1 vectors for 2 texts"),
        ([{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [2.0]}], "index 0 twice"),
        ([{"index": 1, "embedding": [1.0]}, {"index": 2, "embedding": [2.0]}], "indexes not 0 to n-1"),
        ([{"index": 0, "embedding": [1.0, 2.0]}, {"index": 1, "embedding": [2.0]}], "vector lengths"),
        ([{"index": 0, "embedding": "AAAA"}, {"index": 1, "embedding": "AAAA"}], "list 'embedding'"),
        ([{"index": "0", "embedding": [1.0]}, {"index": 1, "embedding": [2.0]}], "integer 'index'"),
        ([{"index": 0, "embedding": []}, {"index": 1, "embedding": []}], "vector lengths"),
        ({"oops": 1}, "not a list"),
        ([{"embedding": [1.0]}, {"index": 1, "embedding": [1.0]}], "index"),
    ],
)
async def test_malformed_responses_are_typed_and_not_retried(
    server: Server, sleeps: list[float], data: Any, match: str
) -> None:
    server.script = [raw(data)]
    embed = OpenAIEmbeddings(base_url=server.url, api_key="k")
    with pytest.raises(ModelBehaviorError, match=match):
        await embed(["a", "b"])
    assert server.hits == 1
    await embed.aclose()


async def test_dimensions_are_checked(server: Server, sleeps: list[float]) -> None:
    async def two(texts: list[str]) -> web.Response:
        return ok(texts, dims=2)

    server.script = [two]
    embed = OpenAIEmbeddings(base_url=server.url, api_key="k", dimensions=3)
    with pytest.raises(ModelBehaviorError, match=r"vector lengths \[2\] \(asked for 3\)"):
        await embed(["a"])
    server.script = [two]  # batches that disagree with each other, no dimensions asked
    free = OpenAIEmbeddings(base_url=server.url, api_key="k", batch_size=1, max_concurrency=1)
    with pytest.raises(ModelBehaviorError, match="different vector lengths"):
        await free(["a", "b"])
    await embed.aclose()
    await free.aclose()


def test_settings_are_checked() -> None:
    for kwargs in ({"max_retries": -1}, {"max_concurrency": 0}, {"dimensions": 0}, {"batch_size": 0}):
        with pytest.raises(UserError):
            OpenAIEmbeddings(api_key="k", **kwargs)  # type: ignore[arg-type]
    embed = OpenAIEmbeddings(api_key="k")
    assert (embed.max_retries, embed.max_concurrency) == (3, 4)
