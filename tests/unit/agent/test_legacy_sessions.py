"""Sessions written before sessions belonged to an agent, as a `ReActAgent` meets them after the upgrade.

SQLite moves a legacy session natively, JSON files by the generic copy-then-delete (see
tests/legacy_sessions.py; Redis, PostgreSQL and MySQL: tests/integration/test_legacy_adoption_services.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrt.state import JsonFileStateStore, SqliteStateStore
from agentrt.state.base import BaseStateStore
from legacy_sessions import check_legacy_adoption


@pytest.mark.parametrize("kind", ["sqlite", "jsonfile"])
async def test_an_agent_moves_only_its_own_legacy_sessions(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def open_store() -> BaseStateStore:
        if kind == "sqlite":
            return SqliteStateStore(tmp_path / "state.db")
        return JsonFileStateStore(tmp_path / "sessions", fsync=False)

    await check_legacy_adoption(open_store, caplog)
