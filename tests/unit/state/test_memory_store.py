"""The in-memory store passes the store contract."""

from __future__ import annotations

from agentrt.state import InMemoryStateStore
from agentrt.testing import check_state_store


async def test_in_memory_store_contract() -> None:
    await check_state_store(InMemoryStateStore)
