"""Property-based requests generated from /openapi.json: the server never answers with a 5xx.

Schemathesis (https://schemathesis.io) generates valid and invalid requests for every operation
in the schema, including the OpenAI-compatible facade and the knowledge routes, and checks the responses against it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from agentrt import ReActAgent, Toolkit, ToolUseBlock, tool  # noqa: E402
from agentrt.knowledge import Knowledge  # noqa: E402
from agentrt.model import ModelRequest, ScriptedModel  # noqa: E402
from agentrt.server import create_app  # noqa: E402
from agentrt.state import InMemoryStateStore  # noqa: E402


@tool(requires_confirmation=True)
def danger(target: str) -> str:
    """Needs approval.

    Args:
        target: What to act on.
    """
    return f"did {target}"


def plan(request: ModelRequest) -> Any:
    last = request.messages[-1] if request.messages else None
    if last is not None and last.role == "user" and last.text.startswith("danger"):
        return ToolUseBlock(id="call-1", name="danger", input={"target": "x"})
    return "ok: " + (last.text[:50] if last is not None else "")


def build() -> Any:
    agent = ReActAgent("bot", "sys", model=ScriptedModel.from_function(plan, record=False), toolkit=Toolkit([danger]))
    return create_app(
        {"bot": agent},
        store=InMemoryStateStore(),
        api_keys={"fuzz-key": "fuzzer"},
        facades=("openai",),
        knowledge=Knowledge("docs", store="memory://"),
    )


app = build()
schema = schemathesis.openapi.from_asgi("/openapi.json", app)
AUTH = {"Authorization": "Bearer fuzz-key"}
# schemathesis types parametrize() as a bare Callable; this is the shape it has here.
parametrize: Callable[[Callable[[Any], None]], Callable[[Any], None]] = schema.parametrize()


@parametrize
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_no_server_errors(case: Any) -> None:
    case.call_and_validate(
        headers=AUTH,
        checks=[not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance],
    )
