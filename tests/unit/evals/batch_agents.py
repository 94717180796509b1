"""Agents for the batch and Ray tests, importable by ``MODULE:ATTR`` (Ray workers rebuild them from it).

Each process that builds one counts the model calls it served in `CALLS` (the driver's count shows
what ran locally).
"""

from __future__ import annotations

from agentrt import ReActAgent, Toolkit, tool
from agentrt.message import ToolResultBlock, ToolUseBlock
from agentrt.model import ModelRequest, ScriptedModel

CALLS: list[str] = []


def echo(request: ModelRequest) -> str:
    text = request.last_user_text
    CALLS.append(text)
    if "explode" in text:
        raise RuntimeError(f"model failure on {text!r}")
    return f"echo: {text}"


def agent() -> ReActAgent:
    """A factory: the echo agent (a fresh scripted model)."""
    return ReActAgent("echo-bot", model=ScriptedModel.from_function(echo))


@tool
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    return key.upper()


def uses_a_tool(request: ModelRequest) -> str | ToolUseBlock:
    last = request.messages[-1].content if request.messages else []
    if any(isinstance(block, ToolResultBlock) for block in last):
        return "looked up"
    return ToolUseBlock(name="lookup", input={"key": request.last_user_text})


_toolkit = Toolkit()
_toolkit.register(lookup)
tool_agent = ReActAgent("tool-bot", model=ScriptedModel.from_function(uses_a_tool), toolkit=_toolkit)
