"""Shared test fixtures: hermetic environment (no provider keys), service discovery for integration tests."""

from __future__ import annotations

import os
from collections.abc import AsyncIterable, Awaitable, Callable
from typing import Any

import pytest

# Agents built without a state store use the process-wide default store; in tests it lives in
# memory rather than in ~/.agentrt/state.db. Tests of the default itself set the variable.
os.environ.setdefault("AGENTRT_STATE_URL", "memory://")


@pytest.fixture(autouse=True)
def _no_api_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never reach a real provider: strip every *_API_KEY variable."""
    for name in list(os.environ):
        if name.endswith("_API_KEY") or name in ("GOOGLE_APPLICATION_CREDENTIALS",):
            monkeypatch.delenv(name, raising=False)


Collect = Callable[[AsyncIterable[Any]], Awaitable[list[Any]]]


async def _collect(items: AsyncIterable[Any]) -> list[Any]:
    return [item async for item in items]


@pytest.fixture
def collect() -> Collect:
    """``await collect(aiter)``: every item of an async iterator (an event stream, a model stream), as a list."""
    return _collect
