"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agentrt import ReActAgent, Toolkit
from agentrt.model import ChatModel
from agentrt.state import InMemoryStateStore


def _make_agent(model: ChatModel, *tools: Any, **options: Any) -> ReActAgent:
    toolkit = options.pop("toolkit", None)
    if toolkit is None:
        toolkit = Toolkit()
        for t in tools:
            toolkit.register(t)
    elif tools:
        raise TypeError("make_agent: give tools or toolkit=, not both")
    options.setdefault("state_store", InMemoryStateStore())
    return ReActAgent("bot", "You are a test bot.", model=model, toolkit=toolkit, **options)


@pytest.fixture
def make_agent() -> Callable[..., ReActAgent]:
    """``make_agent(model, *tools, **options)``: the agent "bot" (system prompt "You are a test bot.") over `model`.

    `tools` go into a fresh `Toolkit` (or pass ``toolkit=``); the state store is a fresh
    `InMemoryStateStore` unless ``state_store=`` is given; other options go to `ReActAgent`.
    """
    return _make_agent
