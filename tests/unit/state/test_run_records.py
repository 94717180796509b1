"""Run records in the embedded stores: schema upgrades, what is left on disk, the retention setting."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from agentrt.errors import InvalidTypeError, InvalidValueError
from agentrt.message import Msg
from agentrt.state import InMemoryStateStore, JsonFileStateStore, SqliteStateStore
from agentrt.state.base import BaseStateStore
from agentrt.state.runs import DEFAULT_MAX_AGE, DEFAULT_MAX_RUNS, RunRetention, StoredRun, supports_run_records


def _run(reply_id: str, started_at: float | None = None) -> StoredRun:
    return StoredRun(reply_id, time.time() if started_at is None else started_at, {"reply_ids": [reply_id]}, "{}")


async def test_a_sqlite_database_of_an_earlier_version_gets_the_runs_table(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    async with SqliteStateStore(path) as store:
        await store.append("u", "s", [Msg.user("old")], expected_revision=0, agent="a")
    with sqlite3.connect(path) as conn:  # as an earlier version left it: no runs table
        conn.execute("DROP TABLE runs")
    conn.close()
    async with SqliteStateStore(path) as store:
        assert await store.save_run("u", "s", _run("r1"), agent="a") is True
        assert [i.reply_id for i in await store.list_runs("u", "s", agent="a")] == ["r1"]
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 2, "no version change: older versions still open it"
        indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert "runs_by_start" in indexes
    conn.close()


async def test_sqlite_deletes_leave_no_run_rows(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    async with SqliteStateStore(path) as store:
        for sid in ("a", "b", "c"):
            await store.append("u", sid, [Msg.user(sid)], expected_revision=0, agent="x")
            await store.save_run("u", sid, _run(f"r-{sid}"), agent="x")
        await store.delete("u", "a", agent="x")
        assert await store.prune(0, user_id="u", agent="x", limit=1) == 1
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (1,)
    conn.close()
    async with SqliteStateStore(path) as store:
        await store.delete_user("u")
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (0,)
    conn.close()


async def test_jsonfile_keeps_runs_in_the_session_folder_and_removes_them_with_it(tmp_path: Path) -> None:
    store = JsonFileStateStore(tmp_path / "root")
    await store.append("u", "s", [Msg.user("hi")], expected_revision=0, agent="a")
    assert await store.save_run("u", "s", _run("first/../id"), agent="a")
    folder = store.session_path("u", "s", agent="a")
    files = sorted(p.name for p in (folder / "runs").iterdir())
    assert "index.json" in files and len(files) == 2 and all("/" not in f and ".." not in f for f in files)
    await store.delete("u", "s", agent="a")
    assert not folder.exists(), "the session folder goes whole, its runs with it"
    await store.append("u", "s", [Msg.user("again")], expected_revision=0, agent="a")
    assert await store.list_runs("u", "s", agent="a") == []


def test_retention_settings_are_checked_and_read_from_the_environment() -> None:
    default = RunRetention()
    assert (default.max_runs, default.max_age) == (DEFAULT_MAX_RUNS, DEFAULT_MAX_AGE)
    for bad in ({"max_runs": 0}, {"max_age": -1.0}, {"max_bytes": 100}, {"max_field_chars": 1}):
        with pytest.raises(InvalidValueError):
            RunRetention(**bad)
    with pytest.raises(InvalidTypeError):
        RunRetention(max_runs="10")  # type: ignore[arg-type]
    assert RunRetention.from_env({"AGENTRT_RUN_RECORDS": "off"}) is None
    custom = RunRetention.from_env(
        {
            "AGENTRT_RUN_RECORDS_MAX_RUNS": "7",
            "AGENTRT_RUN_RECORDS_MAX_AGE": "0",
            "AGENTRT_RUN_RECORDS_MAX_BYTES": "10000",
            "AGENTRT_RUN_RECORDS_CAPTURE_MESSAGES": "off",
        }
    )
    assert custom == RunRetention(max_runs=7, max_age=None, max_bytes=10000, capture_messages=False)
    with pytest.raises(InvalidValueError):
        RunRetention.from_env({"AGENTRT_RUN_RECORDS_MAX_RUNS": "many"})


async def test_a_store_without_native_records_keeps_none() -> None:
    class Bare(BaseStateStore):
        load = InMemoryStateStore.load
        append = InMemoryStateStore.append
        save = InMemoryStateStore.save
        delete = InMemoryStateStore.delete
        list_sessions = InMemoryStateStore.list_sessions

    store = Bare()
    assert not supports_run_records(store) and supports_run_records(InMemoryStateStore())
    assert await store.save_run("u", "s", _run("r")) is False
    assert await store.get_run("u", "s", "r") is None and await store.list_runs("u", "s") == []
