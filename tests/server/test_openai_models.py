"""``GET /v1/models`` with the official openai client, and every error body in OpenAI's error shape.

Responses are checked against OpenAI's own schemas: ``Model``, ``ListModelsResponse``, ``Error`` and
``ErrorResponse`` copied verbatim below from ``openai/openai-openapi`` ``openapi.yaml``, commit
``f85dbe223d40e1a31cba812ab2d755c7e98a92a3`` (info.version 2.3.0; MIT licence, see
``tests/unit/model/providers/data/openai-openapi.LICENSE``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
from jsonschema import Draft202012Validator
from server_agents import ALICE, KEYS, make_agent

from agentrt.server import create_app
from agentrt.state import InMemoryStateStore

_STRING_OR_NULL = {"anyOf": [{"type": "string"}, {"type": "null"}]}
SCHEMAS: dict[str, Any] = {
    "Model": {
        "title": "Model",
        "properties": {
            "id": {"type": "string"},
            "created": {"type": "integer", "format": "unixtime"},
            "object": {"type": "string", "enum": ["model"]},
            "owned_by": {"type": "string"},
            "shutdown_date": {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}]},
        },
        "required": ["id", "object", "created", "owned_by"],
    },
    "ListModelsResponse": {
        "type": "object",
        "properties": {
            "object": {"type": "string", "enum": ["list"]},
            "data": {"type": "array", "items": {"$ref": "#/$defs/Model"}},
        },
        "required": ["object", "data"],
    },
    "Error": {
        "type": "object",
        "properties": {
            "code": _STRING_OR_NULL,
            "message": {"type": "string"},
            "param": _STRING_OR_NULL,
            "type": {"type": "string"},
        },
        "required": ["type", "message", "param", "code"],
    },
    "ErrorResponse": {
        "type": "object",
        "properties": {"error": {"$ref": "#/$defs/Error"}},
        "required": ["error"],
    },
}


def check(schema: str, body: Any) -> None:
    """`body` is valid against OpenAI's schema named `schema`."""
    Draft202012Validator({"$ref": f"#/$defs/{schema}", "$defs": SCHEMAS}).validate(body)


def check_error(response: httpx.Response, status: int, code: str | None = None) -> None:
    """An error in OpenAI's shape, with a code (never null)."""
    assert response.status_code == status, response.text
    body = response.json()
    check("ErrorResponse", body)
    assert isinstance(body["error"]["code"], str) and body["error"]["code"], body
    if code is not None:
        assert body["error"]["code"] == code


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    agents = {"bot": make_agent("bot"), "helper": make_agent("helper")}
    app = create_app(agents, store=InMemoryStateStore(), api_keys=KEYS, max_body_bytes=4096, disconnect_grace=0.0)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as c:
        yield c


def official(http: httpx.AsyncClient, key: str = "key-alice") -> openai.AsyncOpenAI:
    # openai types http_client as an httpx2 client but also takes an httpx one (here: over the ASGI app).
    return openai.AsyncOpenAI(base_url="http://test/v1", api_key=key, http_client=http, max_retries=0)  # type: ignore[arg-type]


async def test_the_official_client_lists_and_retrieves_the_agents_as_models(http: httpx.AsyncClient) -> None:
    client = official(http)
    models = [m async for m in client.models.list()]
    assert [(m.id, m.object, m.owned_by) for m in models] == [
        ("bot", "model", "agentrt"),
        ("helper", "model", "agentrt"),
    ]
    assert all(isinstance(m.created, int) and m.created > 0 for m in models)
    one = await client.models.retrieve("helper")
    assert one == models[1]
    with pytest.raises(openai.NotFoundError) as caught:
        await client.models.retrieve("ghost")
    assert caught.value.code == "model_not_found"
    with pytest.raises(openai.AuthenticationError):
        await official(http, "wrong").models.list()
    # The wire bodies against OpenAI's schemas.
    listed = await http.get("/v1/models", headers=ALICE)
    check("ListModelsResponse", listed.json())
    check("Model", (await http.get("/v1/models/bot", headers=ALICE)).json())
    check_error(await http.get("/v1/models/ghost", headers=ALICE), 404, "model_not_found")
    check_error(await http.get("/v1/models"), 401, "missing_api_key")


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("GET", "/no/such/route", None, 404, "not_found"),  # Starlette's own 404
        ("GET", "/v1/nothing", None, 404, "not_found"),
        ("DELETE", "/v1/models", None, 405, "method_not_allowed"),  # Starlette's own 405
        ("PUT", "/v1/chat/completions", None, 405, "method_not_allowed"),
        ("POST", "/v1/chat/completions", b"{", 400, "invalid_json"),
        ("POST", "/v1/chat/completions", b"[" + b"1," * 4096 + b"1]", 413, "request_too_large"),
        ("POST", "/v1/chat/completions", b'{"model": "bot"}', 422, "validation_error"),
        ("POST", "/v1/chat/completions", b'{"model": "x", "messages": [{"role": "user", "content": "x"}]}', 404, None),
        ("GET", "/v1/agents/ghost/sessions", None, 404, "agent_not_found"),
        ("GET", "/v1/agents/bot/sessions/none", None, 404, "session_not_found"),
        ("GET", "/v1/agents/bot/sessions/none?limit=x", None, 422, "invalid_query_parameter"),
        ("POST", "/v1/agents/bot/sessions/s/confirm", b'{"results": []}', 422, "validation_error"),
        ("POST", "/agui/bot", b"{}", 422, "validation_error"),
        ("POST", "/a2a/ghost", b"{}", 404, "agent_not_found"),
    ],
)
async def test_every_error_path_answers_in_the_documented_shape_with_a_code(
    http: httpx.AsyncClient, method: str, path: str, body: bytes | None, status: int, code: str | None
) -> None:
    check_error(await http.request(method, path, headers=ALICE, content=body), status, code)
