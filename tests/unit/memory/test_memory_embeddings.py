"""OpenAIEmbeddings against a local server speaking the ``/embeddings`` wire format."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from agentrt.errors import AuthenticationError, ModelConnectionError
from agentrt.memory import OpenAIEmbeddings, SqliteLongTermMemory


class Server:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.status = 200
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        if self.status != 200:
            return web.json_response(
                {"error": {"message": "bad key sk-secret", "code": "invalid_api_key"}}, status=self.status
            )
        data = [
            {"object": "embedding", "index": i, "embedding": [float(len(text)), float(text.count("e")), 1.0]}
            for i, text in enumerate(body["input"])
        ]
        data.reverse()  # the client must order by index
        return web.json_response({"object": "list", "data": data, "model": body["model"]})


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


async def test_embeddings_request_batches_and_order(server: Server) -> None:
    embed = OpenAIEmbeddings(
        "text-embedding-3-small", base_url=server.url, api_key="sk-test", dimensions=3, batch_size=2
    )
    vectors = await embed(["a", "bee", "cheese"])
    assert vectors == [[1.0, 0.0, 1.0], [3.0, 2.0, 1.0], [6.0, 3.0, 1.0]]
    assert [r["input"] for r in server.requests] == [["a", "bee"], ["cheese"]]
    assert server.requests[0]["model"] == "text-embedding-3-small" and server.requests[0]["dimensions"] == 3
    assert server.headers[0]["Authorization"] == "Bearer sk-test"
    await embed.aclose()


async def test_embeddings_errors_are_typed_and_hide_the_key(server: Server) -> None:
    server.status = 401
    embed = OpenAIEmbeddings(base_url=server.url, api_key="sk-secret")
    with pytest.raises(AuthenticationError) as info:
        await embed(["x"])
    assert "sk-secret" not in str(info.value)
    await embed.aclose()
    closed = OpenAIEmbeddings(base_url="http://127.0.0.1:9/v1", api_key="k", timeout=2)
    with pytest.raises(ModelConnectionError):
        await closed(["x"])
    await closed.aclose()


async def test_embeddings_serve_a_memory(server: Server, tmp_path: Path) -> None:
    embed = OpenAIEmbeddings(base_url=server.url, api_key="k")
    memory = SqliteLongTermMemory(tmp_path / "m.db", embed=embed)
    await memory.record("u", ["The user likes cheese", "The user lives in Lyon"])
    found = await memory.retrieve("u", "cheese", k=1)
    assert found[0].text == "The user likes cheese"
    assert json.dumps(server.requests[-1]["input"]) == '["cheese"]'
    await memory.close()
    await embed.aclose()
