"""Tools: the `@tool` decorator, `Tool`, `Toolkit`, the execution policy and Agent Skills (`Skill`)."""

from agentrt.errors import ToolRetry
from agentrt.tool.base import Tool, ToolOptions, tool
from agentrt.tool.skills import Skill
from agentrt.tool.toolkit import ToolGroup, Toolkit

__all__ = ["Inject", "Skill", "Tool", "ToolGroup", "ToolOptions", "ToolRetry", "Toolkit", "tool"]


def __getattr__(name: str) -> object:
    if name == "Inject":  # lives with the schema builder, which imports pydantic: load on demand
        from agentrt.tool._schema import Inject

        return Inject
    raise AttributeError(f"module 'agentrt.tool' has no attribute {name!r}")
