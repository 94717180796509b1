"""``MODULE:ATTR`` references on the command line (`agentrt serve`, `agentrt mcp serve`...), imported and described.

A target that is not what the command takes is a `TargetError` saying what it is (`describe_target`)
and what fits instead, never a raw ``TypeError`` from calling it.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Mapping
from typing import Any

from agentrt.errors import UserError

__all__ = [
    "AGENTS_ACCEPTED",
    "TargetError",
    "describe_target",
    "import_target",
    "is_factory",
    "not_agents",
    "required_parameters",
]


def import_target(spec: str, *, example: str) -> Any:
    """The object ``MODULE:ATTR`` names (ATTR may be dotted); the current directory is importable, as for uvicorn.

    A module that is missing is a `UserError`; an ImportError raised *inside* the module (one of its
    own imports failed) propagates unchanged, so its traceback points at the real cause.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UserError(f"expected MODULE:ATTR (e.g. {example!r}), not {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if exc.name == module_name or (exc.name and module_name.startswith(exc.name + ".")):
            raise UserError(f"cannot import module {module_name!r}: {exc}") from None
        raise
    value: Any = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise UserError(f"module {module_name!r} has no attribute {attr!r}") from None
    return value


class TargetError(UserError):
    """A ``MODULE:ATTR`` target names something the command cannot use.

    The message says what the target is (`found`, e.g. ``"a tool (function 'search')"``) and what
    the command accepts instead; `target` is the ``MODULE:ATTR`` string.
    """

    def __init__(self, message: str, *, target: str, found: str) -> None:
        super().__init__(message)
        self.target = target
        self.found = found


AGENTS_ACCEPTED = (
    "pass an agent (e.g. a ReActAgent), a dict or list of agents, or a function taking no arguments that returns one"
)
"""What the agent-serving commands (`agentrt serve`, `agentrt worker`) accept, for messages."""


def _agent_base() -> type | None:
    """`AgentBase`, looked up rather than imported (``agentrt.mcp`` sits below the agents and uses this module).

    When ``agentrt.agent.base`` was never imported, no object is an agent.
    """
    module = sys.modules.get("agentrt.agent.base")
    found = getattr(module, "AgentBase", None)
    return found if isinstance(found, type) else None


def _is_agent(value: Any) -> bool:
    base = _agent_base()
    return base is not None and isinstance(value, base)


def _callable_name(value: Any) -> str:
    return str(getattr(value, "__qualname__", None) or getattr(value, "__name__", None) or type(value).__name__)


def required_parameters(value: Any) -> list[str] | None:
    """The parameters a call of `value` with no arguments would miss (None: its signature is unknown)."""
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):
        return None
    return [
        name
        for name, parameter in signature.parameters.items()
        if parameter.default is inspect.Parameter.empty
        and parameter.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]


def describe_target(value: Any) -> str:
    """What `value` is, in the caller's terms: ``"a tool (function 'search')"``, ``"the class ReActAgent"``..."""
    from agentrt.tool.base import Tool
    from agentrt.tool.toolkit import Toolkit

    agent_base = _agent_base()
    if value is None:
        return "None"
    if isinstance(value, Tool):
        kind = "function" if getattr(value, "fn", None) is not None else "handler"
        return f"a tool ({kind} {value.name!r})"
    if isinstance(value, Toolkit):
        return f"a Toolkit ({len(value)} tool(s))"
    if _is_agent(value):
        return f"an agent ({type(value).__name__} {value.name!r})"
    if inspect.ismodule(value):
        return f"the module {value.__name__}"
    if isinstance(value, type):
        if agent_base is not None and issubclass(value, agent_base):
            return f"the agent class {value.__name__} (a class, not an agent built from it)"
        return f"the class {value.__name__}"
    if callable(value):
        name = _callable_name(value)
        if inspect.iscoroutinefunction(value):
            return f"an async function ({name})"
        missing = required_parameters(value)
        if missing:
            return f"a function ({name}) taking the argument(s) {', '.join(missing)}"
        return f"a function ({name})"
    if isinstance(value, Mapping):
        return f"a {type(value).__name__} of {len(value)} item(s)"
    if isinstance(value, (list, tuple, set, frozenset)):
        return f"a {type(value).__name__} of {len(value)} item(s)"
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name} value"


def is_factory(value: Any) -> bool:
    """Whether `value` is a plain callable to call with no arguments (not an agent, a tool, a toolkit or a class)."""
    from agentrt.tool.base import Tool
    from agentrt.tool.toolkit import Toolkit

    if not callable(value) or _is_agent(value) or isinstance(value, (Tool, Toolkit, type)):
        return False
    return required_parameters(value) == []


def not_agents(spec: str, value: Any, *, returned: bool = False, accepts: str = AGENTS_ACCEPTED) -> TargetError:
    """The `TargetError` for a target (or what its factory `returned`) that is not an agent, with hints."""
    from agentrt.tool.base import Tool
    from agentrt.tool.toolkit import Toolkit

    found = describe_target(value)
    what = f"{spec} returned {found}" if returned else f"{spec} is {found}"
    hints = [accepts]
    if isinstance(value, type):
        hints.append(f"build it in the module (e.g. assistant = {value.__name__}(...)) and name that")
    elif isinstance(value, (Tool, Toolkit)) and not returned:
        hints.append(f"to serve tools to MCP clients, use `agentrt mcp serve {spec}`")
    elif callable(value) and not returned and required_parameters(value):
        hints.append("a factory is called with no arguments")
    return TargetError(f"{what}, not an agent; {'; '.join(hints)}", target=spec, found=found)
