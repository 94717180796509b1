"""The OpenAI facade reports the run's cost as ``usage.cost_usd`` (null when any model call was unpriced).

Bodies are checked against OpenAI's own response schemas (``CreateChatCompletionResponse`` /
``CreateChatCompletionStreamResponse`` of ``../shared/specs/openai-openapi.yaml``, when that file is
there) and read with the official ``openai`` client and types, which keep the extra field.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from server_agents import ALICE, parse_sse, plan

from agentrt import ReActAgent, Toolkit
from agentrt.errors import ModelAPIError
from agentrt.message import TokenUsage
from agentrt.model import FallbackModel, ScriptedModel
from agentrt.model.pricing import ModelPrice
from agentrt.tool import tool

URL = "/v1/chat/completions"
USAGE = TokenUsage(input_tokens=1000, output_tokens=100)
PRICE = ModelPrice(input=2.0, output=8.0)  # per million tokens
PER_CALL = (1000 * 2.0 + 100 * 8.0) / 1_000_000  # $0.0028
SPEC = Path(__file__).parents[2].parent / "shared" / "specs" / "openai-openapi.yaml"


@tool(read_only=True)
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: First.
        b: Second.
    """
    return a + b


def agent_on(name: str, model: Any) -> ReActAgent:
    return ReActAgent(name, "You are a test agent.", model=model, toolkit=Toolkit([add]))


@pytest.fixture
async def client(make_app: Callable[..., Any]) -> AsyncIterator[httpx.AsyncClient]:
    priced = ScriptedModel.from_function(plan, usage=USAGE, price=PRICE, record=False)
    unpriced = ScriptedModel.from_function(plan, name="private", usage=USAGE, record=False)
    down = ScriptedModel([ModelAPIError("down", status=503)], name="big", usage=USAGE, price=PRICE)
    private_backup = ScriptedModel.from_function(plan, name="private", usage=USAGE, record=False)
    app = make_app(
        agents={
            "priced": agent_on("priced", priced),
            "unpriced": agent_on("unpriced", unpriced),
            "fallback": agent_on("fallback", FallbackModel(down, private_backup)),
        }
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as c:
        yield c


async def post(client: httpx.AsyncClient, model: str, text: str, **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": text}], **extra}
    r = await client.post(URL, json=body, headers=ALICE)
    assert r.status_code == 200, r.text
    return r


# -- OpenAI's own response schemas ---------------------------------------------------------------------
@functools.cache
def _openai_components() -> Any:
    """The spec's components, OpenAPI 3.0 leftovers translated (the request schema tests' translation)."""
    yaml = pytest.importorskip("yaml")
    if not SPEC.is_file():
        pytest.skip(f"OpenAI's OpenAPI description is not at {SPEC}")
    path = Path(__file__).parents[1] / "unit" / "model" / "providers" / "data" / "openai_schema.py"
    spec = importlib.util.spec_from_file_location("openai_schema", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("openai_schema", module)
    spec.loader.exec_module(module)
    doc = yaml.load(SPEC.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return module.translate(copy.deepcopy(doc["components"]))


@functools.cache
def _openai_validator(root: str) -> Any:
    jsonschema = pytest.importorskip("jsonschema")
    schema = {"$ref": f"#/components/schemas/{root}", "components": _openai_components()}
    return jsonschema.Draft202012Validator(schema)


def check_openai(root: str, body: Any) -> None:
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in _openai_validator(root).iter_errors(body)]
    assert errors == []


# -- tests ---------------------------------------------------------------------------------------------
async def test_the_completion_carries_the_runs_cost_in_its_usage(client: httpx.AsyncClient) -> None:
    r = await post(client, "priced", "add")  # a tool call and the answer: two priced model calls
    body = r.json()
    assert body["usage"]["cost_usd"] == pytest.approx(2 * PER_CALL)
    assert body["usage"]["prompt_tokens"] == 2000
    check_openai("CreateChatCompletionResponse", body)
    completion = ChatCompletion.model_validate(body)
    assert completion.usage is not None
    assert completion.usage.total_tokens == 2200
    assert completion.usage.model_extra == {"cost_usd": pytest.approx(2 * PER_CALL)}


async def test_an_unpriced_run_has_a_null_cost_never_a_guess(client: httpx.AsyncClient) -> None:
    body = (await post(client, "unpriced", "hello")).json()
    assert "cost_usd" in body["usage"] and body["usage"]["cost_usd"] is None
    assert body["usage"]["completion_tokens"] == 100
    check_openai("CreateChatCompletionResponse", body)
    # A fallback answering from an unpriced model: not the failed primary's price either.
    body = (await post(client, "fallback", "hello")).json()
    assert body["choices"][0]["message"]["content"] == "echo: hello (turn 1)"
    assert body["usage"]["cost_usd"] is None


async def test_the_streamed_usage_chunk_carries_the_cost(client: httpx.AsyncClient) -> None:
    r = await post(client, "priced", "add", stream=True, stream_options={"include_usage": True})
    frames = parse_sse(r.text)
    assert frames[-1]["data"] == "[DONE]"
    bodies = [json.loads(f["data"]) for f in frames[:-1]]
    for body in bodies:
        check_openai("CreateChatCompletionStreamResponse", body)
    *rest, last = bodies
    assert last["choices"] == []
    assert last["usage"]["cost_usd"] == pytest.approx(2 * PER_CALL)
    assert all("usage" not in b for b in rest)
    chunk = ChatCompletionChunk.model_validate(last)
    assert chunk.usage is not None and chunk.usage.model_extra == {"cost_usd": pytest.approx(2 * PER_CALL)}
    # Without include_usage there is no usage chunk, so no cost either (as OpenAI's own streams).
    r = await post(client, "priced", "hello", stream=True)
    assert not any("usage" in json.loads(f["data"]) for f in parse_sse(r.text)[:-1])


async def test_the_official_client_keeps_the_cost(client: httpx.AsyncClient) -> None:
    # openai types http_client as an httpx2 client but also takes an httpx one (here: over the ASGI app).
    official = openai.AsyncOpenAI(base_url="http://test/v1", api_key="key-alice", http_client=client, max_retries=0)  # type: ignore[arg-type]
    completion = await official.chat.completions.create(model="priced", messages=[{"role": "user", "content": "hi"}])
    assert completion.usage is not None
    assert completion.usage.model_extra is not None
    assert completion.usage.model_extra["cost_usd"] == pytest.approx(PER_CALL)
    stream = await official.chat.completions.create(
        model="unpriced",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [c async for c in stream]
    usage = chunks[-1].usage
    assert usage is not None and usage.model_extra == {"cost_usd": None}


async def test_the_openapi_document_describes_the_cost(client: httpx.AsyncClient) -> None:
    doc = (await client.get("/openapi.json")).json()
    schema = doc["paths"][URL]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    [extension] = [part for part in schema["allOf"] if "$ref" not in part]
    cost = extension["properties"]["usage"]["properties"]["cost_usd"]
    assert {"type": "null"} in cost["anyOf"]
