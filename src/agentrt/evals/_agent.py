"""The agent a ``MODULE:ATTR`` string names, built once per process (the CLI, and each Ray worker)."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from agentrt.errors import UserError

__all__ = ["agent_for", "load_agent", "load_agent_async"]

_AGENTS: dict[str, Any] = {}
"""Agents built in this process, keyed by their ``MODULE:ATTR`` (a Ray worker builds each once)."""


def _target(spec: str) -> Any:
    from agentrt._target import import_target

    return import_target(spec, example="myapp.agents:agent")


def _is_factory(target: Any) -> bool:
    if hasattr(target, "call") or not callable(target):
        return False
    try:
        inspect.signature(target).bind()
    except (TypeError, ValueError):
        return False
    return True


def _check(spec: str, target: Any) -> Any:
    if not any(hasattr(target, m) for m in ("run_with_events", "stream_events", "call")):
        raise UserError(f"{spec!r} is {type(target).__name__}, not an agent (or a factory of one)")
    return target


def load_agent(spec: str) -> Any:
    """The agent ``MODULE:ATTR`` names; a factory (a callable that is not an agent) is called, awaited if async."""
    target = _target(spec)
    if _is_factory(target):
        target = target()
        if inspect.isawaitable(target):
            target = asyncio.run(_await(target))
    return _check(spec, target)


async def load_agent_async(spec: str) -> Any:
    """`load_agent` on a running event loop (an async factory is awaited on it)."""
    target = _target(spec)
    if _is_factory(target):
        target = target()
        if inspect.isawaitable(target):
            target = await target
    return _check(spec, target)


async def agent_for(spec: str) -> Any:
    """The agent of `spec` built in this process, built on first use."""
    agent = _AGENTS.get(spec)
    if agent is None:
        agent = _AGENTS[spec] = await load_agent_async(spec)
    return agent


async def _await(value: Any) -> Any:
    return await value
