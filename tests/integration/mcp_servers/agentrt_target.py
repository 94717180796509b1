"""Targets for ``agentrt mcp serve``: a toolkit and an agent (scripted model), used by test_mcp.py."""

from __future__ import annotations

import base64

from agentrt import Base64Source, ImageBlock, ReActAgent, Toolkit, tool
from agentrt.model import ScriptedModel
from agentrt.model.base import ModelRequest
from agentrt.state import InMemoryStateStore

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="


@tool(read_only=True)
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


@tool(destructive=True, idempotent=True)
def drop_table(table: str) -> str:
    """Drop a database table (pretend)."""
    return f"dropped {table}"


@tool
def fail(reason: str) -> str:
    """Always fails."""
    raise ValueError(reason)


@tool(read_only=True)
def tiny_image() -> ImageBlock:
    """A 1x1 PNG."""
    base64.b64decode(PNG)  # valid base64
    return ImageBlock(source=Base64Source(media_type="image/png", data=PNG))


toolkit = Toolkit([add, drop_table, fail, tiny_image])


def _answer(request: ModelRequest) -> str:
    users = [m for m in request.messages if m.role == "user"]
    return f"echo: {users[-1].text} (turn {len(users)})"


agent = ReActAgent(
    "helper",
    model=ScriptedModel.from_function(_answer),
    description="Echoes the task back.",
    state_store=InMemoryStateStore(),
)
