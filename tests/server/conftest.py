"""Fixtures for the server tests: an app over scripted agents, an in-process client, a live uvicorn server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from server_agents import KEYS, make_agent

from agentrt.server import create_app
from agentrt.state import InMemoryStateStore


@pytest.fixture
def store() -> InMemoryStateStore:
    return InMemoryStateStore()


@pytest.fixture
def make_app(store: InMemoryStateStore) -> Callable[..., Any]:
    def build(**options: Any) -> Any:
        agents = options.pop("agents", None) or {"bot": make_agent("bot"), "other": make_agent("other")}
        options.setdefault("disconnect_grace", 0.0)
        return create_app(agents, store=store, api_keys=options.pop("api_keys", KEYS), **options)

    return build


@pytest.fixture
def app(make_app: Callable[..., Any]) -> Any:
    return make_app()


@pytest.fixture
async def client(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as c:
        yield c
