"""SqliteStateStore: the store contract plus WAL, incremental appends, persistence, corruption, threading."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
import tempfile
import threading
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt.errors import StateConflictError, StateStoreError, UserError
from agentrt.message import Msg
from agentrt.state.base import AgentState
from agentrt.state.stores import sqlite as sqlite_module
from agentrt.state.stores.sqlite import SqliteStateStore
from agentrt.testing import check_state_store


def _raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


async def _seed(store: SqliteStateStore, n: int, *, session: str = "s") -> int:
    return await store.save(AgentState(user_id="u", session_id=session, messages=[Msg.user(f"m{i}") for i in range(n)]))


async def test_contract_file(tmp_path: Path) -> None:
    await check_state_store(lambda: SqliteStateStore(tmp_path / "s.db"), persistent=True)


async def test_contract_memory() -> None:
    await check_state_store(lambda: SqliteStateStore(":memory:"))


async def test_wal_mode_and_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with SqliteStateStore(path) as store:
        await store.append("u", "s", [Msg.user("hi")], expected_revision=0)
        assert await store._call(lambda conn: conn.execute("PRAGMA synchronous").fetchone()[0]) == 1  # NORMAL
        assert await store._call(lambda conn: conn.execute("PRAGMA foreign_keys").fetchone()[0]) == 1
        assert Path(f"{path}-wal").exists(), "a WAL database keeps a -wal file while open"  # noqa: ASYNC240 - the test inspects the files on disk
    with _raw(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == sqlite_module.SCHEMA_VERSION
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'index')")}
        assert {"sessions", "messages", "sessions_by_user_updated"} <= tables
    conn.close()


@pytest.mark.parametrize("inline", [False, True], ids=["worker", "inline"])
async def test_append_touches_only_new_rows(tmp_path: Path, inline: bool) -> None:
    async with SqliteStateStore(tmp_path / "s.db") as store:
        rev = await _seed(store, 500)
        if inline:  # small appends run on the caller's thread, on the inline connection
            runner = store._inline
            assert runner is not None
            assert await store.load("u", "none") is None  # a small read: opens it
            conn = runner._conn
            assert conn is not None

            async def on_conn(fn: Callable[[sqlite3.Connection], Any]) -> Any:
                return fn(conn)
        else:
            store._inline = None

            async def on_conn(fn: Callable[[sqlite3.Connection], Any]) -> Any:
                return await store._call(fn)

        statements: list[str] = []
        await on_conn(lambda conn: conn.set_trace_callback(statements.append))
        before = await on_conn(lambda conn: conn.total_changes)
        rev = await store.append("u", "s", [Msg.assistant("a"), Msg.user("b")], expected_revision=rev)
        after = await on_conn(lambda conn: conn.total_changes)
        assert after - before == 3, "two message inserts plus one session update, nothing else"
        before = after
        rev = await store.append("u", "s", [Msg.assistant("c")], fields={"summary": "s"}, expected_revision=rev)
        assert await on_conn(lambda conn: conn.total_changes) - before == 2
        await on_conn(lambda conn: conn.set_trace_callback(None))
        touching_messages = [s for s in statements if "messages" in s and not s.startswith("INSERT")]
        assert touching_messages == [], f"appends must not read or rewrite stored messages: {touching_messages}"
        state = await store.load("u", "s")
        assert state is not None and len(state.messages) == 503 and state.summary == "s" and state.revision == rev
        assert [m.text for m in state.messages[-3:]] == ["a", "b", "c"]


async def test_data_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "s.db"  # missing folders are created
    msgs = [Msg.user("one"), Msg.assistant("two")]
    async with SqliteStateStore(path) as store:
        rev = await store.append("u", "s", msgs, fields={"metadata": {"title": "t"}}, expected_revision=0)
        rev = await store.append("u", "s", [Msg.user("three")], expected_revision=rev)
    async with SqliteStateStore(path) as store:
        state = await store.load("u", "s")
        assert state is not None
        assert state.messages[:2] == msgs and state.messages[2].text == "three"
        assert (state.revision, state.metadata) == (rev, {"title": "t"})
        [info] = await store.list_sessions("u")
        assert (info.message_count, info.revision) == (3, rev)


async def test_default_path_is_under_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    async with SqliteStateStore() as store:
        assert store.path == str(tmp_path / ".agentrt" / "state.db")
        await store.append("u", "s", [Msg.user("hi")], expected_revision=0)
    assert (tmp_path / ".agentrt" / "state.db").is_file()


async def test_two_stores_on_one_file_see_each_other_and_conflict(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with SqliteStateStore(path) as a, SqliteStateStore(path) as b:
        await a.append("u", "s", [Msg.user("hi")], expected_revision=0)
        results = await asyncio.gather(
            a.append("u", "s", [Msg.user("from a")], expected_revision=1),
            b.append("u", "s", [Msg.user("from b")], expected_revision=1),
            return_exceptions=True,
        )
        assert sorted(type(r).__name__ for r in results) == ["StateConflictError", "int"]
        state = await b.load("u", "s")
        assert state is not None and len(state.messages) == 2 and state.revision == 2


async def test_delete_removes_message_rows(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with SqliteStateStore(path) as store:
        await _seed(store, 10)
        await _seed(store, 5, session="other")
        assert await store.delete("u", "s") is True
    with _raw(path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM messages WHERE session_id = 's'").fetchone()[0] == 0
        assert conn.execute("SELECT COUNT(*) FROM messages WHERE session_id = 'other'").fetchone()[0] == 5
    conn.close()


async def test_list_sessions_uses_the_index(tmp_path: Path) -> None:
    async with SqliteStateStore(tmp_path / "s.db") as store:
        for sid in ("a", "b", "c"):
            await store.append("u", sid, [Msg.user(sid)], expected_revision=0)
        await store.append("u", "a", [Msg.user("again")], expected_revision=1)
        assert (await store.list_sessions("u"))[0].session_id == "a"
        plan = await store._call(
            lambda conn: conn.execute(
                "EXPLAIN QUERY PLAN SELECT session_id, message_count, revision, updated_at FROM sessions"
                " WHERE user_id = ? ORDER BY updated_at DESC, session_id",
                ("u",),
            ).fetchall()
        )
        assert "sessions_by_user_updated" in " ".join(str(row[-1]) for row in plan)


@pytest.mark.parametrize(
    ("sql", "what"),
    [
        ("UPDATE messages SET body = 'not json' WHERE seq = 1", "a message body that is not JSON"),
        ('UPDATE messages SET body = \'{"role": "robot"}\' WHERE seq = 1', "a message that is not a Msg"),
        ("UPDATE sessions SET doc = '{oops'", "a session doc that is not JSON"),
        ("UPDATE sessions SET doc = '[1, 2]'", "a session doc that is not an object"),
        ('UPDATE sessions SET doc = \'{"summary_index": "x"}\'', "a session doc with a bad field"),
        ("UPDATE sessions SET doc = '{\"version\": 99}'", "a session doc from a newer format"),
        ("DELETE FROM messages WHERE seq = 1", "a missing message row"),
        ("UPDATE sessions SET message_count = 5", "a wrong message count"),
    ],
)
async def test_corrupt_rows_raise_state_store_error(tmp_path: Path, sql: str, what: str) -> None:
    path = tmp_path / "s.db"
    async with SqliteStateStore(path) as store:
        await _seed(store, 3)
    with _raw(path) as conn:
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute(sql)
    conn.close()
    async with SqliteStateStore(path) as store:
        with pytest.raises(StateStoreError):
            await store.load("u", "s")
        if "doc" in sql and "version" not in sql and "summary_index" not in sql:
            with pytest.raises(StateStoreError):
                await store.append("u", "s", [], fields={"summary": "x"}, expected_revision=1)


async def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    conn = _raw(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    async with SqliteStateStore(path) as store:
        with pytest.raises(StateStoreError, match="newer"):
            await store.load("u", "s")


async def test_text_that_is_not_unicode_is_refused(tmp_path: Path) -> None:
    async with SqliteStateStore(tmp_path / "s.db") as store:
        with pytest.raises(StateStoreError, match="Unicode"):
            await store.append("u", "\ud800", [Msg.user("x")], expected_revision=0)
        with pytest.raises(StateStoreError, match="Unicode"):
            await store.append("u", "s", [Msg.user("\ud800")], expected_revision=0)
        assert await store.load("u", "s") is None
        await store.append("u", "s", [Msg.user("one")], expected_revision=0)
        with pytest.raises(StateStoreError, match="Unicode"):
            await store.append("u", "s", [Msg.user("two")], fields={"summary": "\ud800"}, expected_revision=1)
        state = await store.load("u", "s")
        assert state is not None and [m.text for m in state.messages] == ["one"] and state.revision == 1


async def test_unknown_field_is_refused(tmp_path: Path) -> None:
    async with SqliteStateStore(tmp_path / "s.db") as store:
        with pytest.raises(UserError, match="unknown AgentState field"):
            await store.append("u", "s", [], fields={"nope": 1}, expected_revision=0)
        assert await store.load("u", "s") is None


async def test_conflict_leaves_nothing_behind(tmp_path: Path) -> None:
    async with SqliteStateStore(tmp_path / "s.db") as store:
        await _seed(store, 2)
        with pytest.raises(StateConflictError):
            await store.append("u", "s", [Msg.user("late")], fields={"summary": "x"}, expected_revision=0)
        state = await store.load("u", "s")
        assert state is not None and len(state.messages) == 2 and state.summary is None and state.revision == 1


async def test_work_runs_on_one_dedicated_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[int] = []
    original_append, original_load = sqlite_module._append, sqlite_module._load

    def append(*args: Any) -> int:
        threads.append(threading.get_ident())
        return original_append(*args)

    def load(*args: Any) -> AgentState | None:
        threads.append(threading.get_ident())
        return original_load(*args)

    monkeypatch.setattr(sqlite_module, "_append", append)
    monkeypatch.setattr(sqlite_module, "_load", load)
    # FULL fsyncs every commit: nothing runs on the caller's thread then.
    async with SqliteStateStore(tmp_path / "s.db", synchronous="FULL") as store:
        await store.append("u", "s", [Msg.user("hi")], expected_revision=0)
        await store.append("u", "s", [Msg.user("again")], expected_revision=1)
        await store.load("u", "s")
        await asyncio.to_thread(lambda: None)  # the default executor is not the store's thread
    assert len(threads) == 3 and len(set(threads)) == 1 and threads[0] != threading.get_ident()
    assert not any(t.ident == threads[0] for t in threading.enumerate()), "close must stop the worker thread"


def _record_threads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Patch the operations to record (name, thread) of each run."""
    seen: list[tuple[str, int]] = []
    for name in ("_append", "_load", "_load_small"):
        original = getattr(sqlite_module, name)

        def wrapped(*args: Any, _name: str = name, _original: Any = original) -> Any:
            seen.append((_name, threading.get_ident()))
            return _original(*args)

        monkeypatch.setattr(sqlite_module, name, wrapped)
    return seen


async def test_small_operations_run_on_the_callers_thread_large_ones_on_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _record_threads(monkeypatch)
    here = threading.get_ident()
    async with SqliteStateStore(tmp_path / "s.db") as store:
        rev = await store.append("u", "s", [Msg.user("first")], expected_revision=0)  # opens the database
        seen.clear()
        rev = await store.append("u", "s", [Msg.user("small")], expected_revision=rev)
        assert await store.load("u", "s") is not None
        rev = await store.append("u", "s", [Msg.user("x" * 70_000)], expected_revision=rev)  # > 64 KiB
        rev = await store.append("u", "s", [Msg.user(str(i)) for i in range(40)], expected_revision=rev)
        state = await store.load("u", "s")  # 43 messages: more than a read on the caller's thread decodes
        assert state is not None and len(state.messages) == 43
    assert [(name, thread == here) for name, thread in seen] == [
        ("_append", True),
        ("_load_small", True),
        ("_append", False),
        ("_append", True),
        ("_load_small", True),  # it looked, found 43 messages and left the read to the worker
        ("_load", False),
    ]


async def test_another_writer_holding_the_lock_never_blocks_the_loop(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with SqliteStateStore(path) as store:
        rev = await store.append("u", "s", [Msg.user("first")], expected_revision=0)
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process writing
        try:
            task = asyncio.ensure_future(store.append("u", "s", [Msg.user("second")], expected_revision=rev))
            ticks = 0
            while ticks < 50:  # the append waits on the worker; the loop keeps running
                await asyncio.sleep(0)
                ticks += 1
            assert not task.done()
        finally:
            other.execute("COMMIT")
            other.close()
        assert await task == rev + 1
        state = await store.load("u", "s")
        assert state is not None and [m.text for m in state.messages] == ["first", "second"]


async def test_operations_keep_their_order_behind_a_queued_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    original = sqlite_module._delete
    order: list[str] = []

    def slow_delete(*args: Any) -> bool:
        release.wait(5)
        order.append("delete")
        return original(*args)

    monkeypatch.setattr(sqlite_module, "_delete", slow_delete)
    async with SqliteStateStore(tmp_path / "s.db") as store:
        await store.append("u", "gone", [Msg.user("x")], expected_revision=0)
        deleting = asyncio.ensure_future(store.delete("u", "gone"))
        await asyncio.sleep(0)  # the delete is queued on the worker and waits
        # Issued after the delete: a small append that must not overtake it.
        appending = asyncio.ensure_future(store.append("u", "gone", [Msg.user("new")], expected_revision=0))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not appending.done(), "it waits behind the queued delete"
        release.set()
        assert await deleting is True
        assert await appending == 1
    assert order == ["delete"]


async def test_inline_commits_ask_the_worker_to_checkpoint(tmp_path: Path) -> None:
    from agentrt.state.stores import _sqlite_inline

    async with SqliteStateStore(tmp_path / "s.db") as store:
        rev = await store.append("u", "s", [Msg.user("0")], expected_revision=0)
        checkpoints: list[int] = []
        await store._call(
            lambda conn: conn.set_trace_callback(lambda sql: checkpoints.append(1) if "checkpoint" in sql else None)
        )
        for i in range(_sqlite_inline.CHECKPOINT_EVERY + 1):
            rev = await store.append("u", "s", [Msg.user(str(i))], expected_revision=rev)
        await store._call(lambda conn: conn.set_trace_callback(None))
    assert checkpoints, "the WAL of inline commits is checkpointed by the worker"


async def test_event_loop_keeps_running_during_a_slow_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    original = sqlite_module._append

    def slow_append(*args: Any) -> int:
        release.wait(5)
        return original(*args)

    monkeypatch.setattr(sqlite_module, "_append", slow_append)
    async with SqliteStateStore(tmp_path / "s.db") as store:
        task = asyncio.ensure_future(store.append("u", "s", [Msg.user("hi")], expected_revision=0))
        ticks = 0
        while ticks < 50:  # the loop runs other tasks while the write waits on the worker thread
            await asyncio.sleep(0)
            ticks += 1
        assert not task.done()
        release.set()
        assert await task == 1


async def test_close_is_idempotent_and_final(tmp_path: Path) -> None:
    store = SqliteStateStore(tmp_path / "s.db")
    await store.close()  # never used: nothing to close
    await store.close()
    with pytest.raises(StateStoreError, match="closed"):
        await store.load("u", "s")
    async with SqliteStateStore(tmp_path / "s.db") as used:
        await used.append("u", "s", [], expected_revision=0)
    await used.close()
    with pytest.raises(StateStoreError, match="closed"):
        await used.append("u", "s", [], expected_revision=1)


async def test_unopenable_path_raises_state_store_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    async with SqliteStateStore(tmp_path / "file" / "s.db") as store:
        with pytest.raises(StateStoreError):
            await store.load("u", "s")


_WORKER = """
import asyncio, sys
from agentrt.errors import StateConflictError
from agentrt.message import Msg
from agentrt.state.stores.sqlite import SqliteStateStore

async def main(path, tag, n):
    async with SqliteStateStore(path) as store:
        done = 0
        while done < n:
            state = await store.load("u", "shared")
            try:
                await store.append("u", "shared", [Msg.user(f"{tag}-{done}")],
                                   expected_revision=0 if state is None else state.revision)
            except StateConflictError:
                continue
            done += 1

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


async def test_two_processes_writing_one_database_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    procs = [
        await asyncio.create_subprocess_exec(sys.executable, "-c", _WORKER, str(path), tag, "50", env=env)
        for tag in ("p", "q")
    ]
    assert await asyncio.gather(*(p.wait() for p in procs)) == [0, 0]
    async with SqliteStateStore(path) as store:
        state = await store.load("u", "shared")
    assert state is not None and state.revision == 100 and len(state.messages) == 100
    texts = [m.text for m in state.messages]
    for tag in ("p", "q"):
        assert [t for t in texts if t.startswith(tag)] == [f"{tag}-{i}" for i in range(50)]


async def test_concurrent_appends_commit_together_and_a_conflict_rejects_only_itself(tmp_path: Path) -> None:
    async with SqliteStateStore(tmp_path / "s.db") as store:
        await store.append("u", "shared", [Msg.user("first")], expected_revision=0)
        jobs = [store.append("u", f"s{i}", [Msg.user(f"m{i}")], expected_revision=0) for i in range(50)]
        jobs.append(store.append("u", "shared", [Msg.user("stale")], expected_revision=0))
        jobs.append(store.append("u", "shared", [Msg.user("second")], expected_revision=1))
        results = await asyncio.gather(*jobs, return_exceptions=True)
        assert results[:50] == [1] * 50
        assert isinstance(results[50], StateConflictError) and results[51] == 2
        for i in (0, 25, 49):
            state = await store.load("u", f"s{i}")
            assert state is not None and [m.text for m in state.messages] == [f"m{i}"]
        shared = await store.load("u", "shared")
        assert shared is not None and [m.text for m in shared.messages] == ["first", "second"]


# -- schema version 1 (sessions without an agent) -----------------------------------------------

# The schema of agentrt before sessions belonged to an agent, verbatim.
_V1_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    user_id       TEXT    NOT NULL,
    session_id    TEXT    NOT NULL,
    revision      INTEGER NOT NULL,
    doc           TEXT    NOT NULL,
    message_count INTEGER NOT NULL,
    created_at    REAL    NOT NULL,
    updated_at    REAL    NOT NULL,
    PRIMARY KEY (user_id, session_id)
);
CREATE INDEX IF NOT EXISTS sessions_by_user_updated ON sessions (user_id, updated_at);
CREATE TABLE IF NOT EXISTS messages (
    user_id    TEXT    NOT NULL,
    session_id TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    body       TEXT    NOT NULL,
    PRIMARY KEY (user_id, session_id, seq),
    FOREIGN KEY (user_id, session_id) REFERENCES sessions (user_id, session_id) ON DELETE CASCADE
);
PRAGMA user_version = 1;
"""


def _v1_database(path: Path, sessions: dict[tuple[str, str], list[str]]) -> None:
    """A database as agentrt wrote it before sessions had an agent (docs without "agent")."""
    conn = _raw(path)
    conn.executescript(_V1_SCHEMA)
    for i, ((user, session), texts) in enumerate(sessions.items()):
        doc = {"format": "agentrt.state", "version": 1, "user_id": user, "session_id": session, "summary": f"sum {i}"}
        conn.execute(
            "INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?)",
            (user, session, 3, json.dumps(doc), len(texts), 1000.0 + i, 2000.0 + i),
        )
        for seq, text in enumerate(texts):
            conn.execute("INSERT INTO messages VALUES (?, ?, ?, ?)", (user, session, seq, Msg.user(text).to_json()))
    conn.close()


async def test_version_1_database_is_migrated_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _v1_database(path, {("alice", "bot:s1"): ["hello", "again"], ("alice", "plain"): ["p"], ("bob", "x"): ["b"]})
    async with SqliteStateStore(path) as store:
        state = await store.load("alice", "bot:s1")
        assert state is not None and state.agent == "" and [m.text for m in state.messages] == ["hello", "again"]
        assert (state.revision, state.summary, state.created_at, state.updated_at) == (3, "sum 0", 1000.0, 2000.0)
        assert store.has_legacy_sessions is True
        assert await store.load("alice", "s1", agent="bot") is None
        assert await store.append("alice", "bot:s1", [Msg.user("old way")], expected_revision=3) == 4
        assert await store.migrate_legacy("bot") == 1
    with _raw(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == sqlite_module.SCHEMA_VERSION == 2
        pk = [r[1] for r in sorted(conn.execute("PRAGMA table_info(sessions)"), key=lambda r: r[5]) if r[5]]
        assert pk == ["agent", "user_id", "session_id"]
        rows = conn.execute(
            "SELECT agent, user_id, session_id, revision FROM sessions ORDER BY user_id, agent"
        ).fetchall()
        assert rows == [("", "alice", "plain", 3), ("bot", "alice", "s1", 4), ("", "bob", "x", 3)]
        moved = conn.execute("SELECT seq FROM messages WHERE agent = 'bot' AND session_id = 's1' ORDER BY seq")
        assert [r[0] for r in moved] == [0, 1, 2], "the messages moved with their session"
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    conn.close()
    async with SqliteStateStore(path) as store:  # opening again changes nothing
        state = await store.load("alice", "s1", agent="bot")
        assert state is not None and [m.text for m in state.messages] == ["hello", "again", "old way"]
        assert state.revision == 4 and store.has_legacy_sessions is True
        assert await store.migrate_legacy("bot", all_unprefixed=True) == 2  # "plain" and bob's "x"
        assert store.has_legacy_sessions is False
    async with SqliteStateStore(path) as store:
        await store.load("alice", "plain", agent="bot")
        assert store.has_legacy_sessions is False, "checked again on open"


_OPENER = """
import asyncio, sys
from agentrt.state.stores.sqlite import SqliteStateStore

async def main(path: str) -> None:
    async with SqliteStateStore(path, busy_timeout=30) as store:
        state = await store.load("alice", "bot:s1")
        assert state is not None and len(state.messages) == 2, state
        print(store.has_legacy_sessions)

asyncio.run(main(sys.argv[1]))
"""


async def test_two_processes_opening_a_version_1_database_at_once(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _v1_database(path, {("alice", "bot:s1"): ["hello", "again"], **{("u", f"s{i}"): ["m"] * 20 for i in range(200)}})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", _OPENER, str(path), env=env, stdout=asyncio.subprocess.PIPE
        )
        for _ in range(3)
    ]
    outputs = await asyncio.gather(*(p.communicate() for p in procs))
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert [out.strip() for out, _ in outputs] == [b"True"] * 3
    with _raw(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
        assert conn.execute("SELECT count(*), sum(message_count) FROM sessions").fetchone() == (201, 4002)
        assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 4002
        tables = {
            r[0]
            for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%'")
        }
        # `runs` (the run records) is created when a database is opened, whatever its version
        assert tables == {"sessions", "messages", "runs"}, "no table of the migration is left behind"
    conn.close()


async def test_sessions_of_agents_are_rows_of_their_own(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with SqliteStateStore(path) as store:
        await store.append("u", "s", [Msg.user("a")], expected_revision=0, agent="alpha")
        await store.append("u", "s", [Msg.user("b1"), Msg.user("b2")], expected_revision=0, agent="beta")
        assert store.has_legacy_sessions is False
    with _raw(path) as conn:
        rows = conn.execute("SELECT agent, user_id, session_id, message_count FROM sessions ORDER BY agent").fetchall()
        assert rows == [("alpha", "u", "s", 1), ("beta", "u", "s", 2)]
        assert conn.execute("SELECT agent, count(*) FROM messages GROUP BY agent ORDER BY agent").fetchall() == [
            ("alpha", 1),
            ("beta", 2),
        ]
    conn.close()


async def test_inline_false_keeps_every_operation_on_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _record_threads(monkeypatch)
    async with SqliteStateStore(tmp_path / "s.db", inline=False) as store:
        rev = await store.append("u", "s", [Msg.user("first")], expected_revision=0)
        await store.append("u", "s", [Msg.user("small")], expected_revision=rev)
        assert await store.load("u", "s") is not None
    assert len(seen) == 3 and all(thread != threading.get_ident() for _, thread in seen)
    with pytest.raises(ValueError, match="inline"):
        SqliteStateStore(tmp_path / "x.db", inline="yes")  # type: ignore[arg-type]


async def test_a_database_not_in_wal_mode_keeps_every_operation_on_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentrt.state.stores import _sqlite_inline

    real_connect = sqlite3.connect

    class RollbackJournal:
        """A connection that reports a rollback journal (a commit there may fsync on the loop)."""

        def __init__(self, conn: sqlite3.Connection) -> None:
            self.conn = conn

        def execute(self, sql: str, *args: Any) -> Any:
            if sql.strip().upper() == "PRAGMA JOURNAL_MODE":
                return self.conn.execute("SELECT 'delete'")
            return self.conn.execute(sql, *args)

        def close(self) -> None:
            self.conn.close()

    fake = types.SimpleNamespace(
        connect=lambda *a, **k: RollbackJournal(real_connect(*a, **k)),
        Error=sqlite3.Error,
        Connection=sqlite3.Connection,
    )
    monkeypatch.setattr(_sqlite_inline, "sqlite3", fake)  # the inline runner's connections only
    seen = _record_threads(monkeypatch)
    async with SqliteStateStore(tmp_path / "s.db") as store:
        rev = await store.append("u", "s", [Msg.user("first")], expected_revision=0)
        await store.append("u", "s", [Msg.user("small")], expected_revision=rev)
        assert store._inline is not None and store._inline.closed
    assert len(seen) == 2 and all(thread != threading.get_ident() for _, thread in seen)


# -- appends of one loop iteration share a transaction ---------------------------------------------


def _wal_frames(path: Path) -> int:
    wal = Path(f"{path}-wal")
    size = wal.stat().st_size if wal.exists() else 0
    return max(size - 32, 0) // (4096 + 24)


async def _fresh_store(path: Path) -> SqliteStateStore:
    store = SqliteStateStore(path)
    await store.append("u", "warm", [Msg.user("open the connections")], expected_revision=0)
    return store


async def test_appends_issued_in_one_loop_iteration_share_one_commit(tmp_path: Path) -> None:
    # The side effect: WAL frames written. 40 appends in one iteration cost about two commits' worth
    # of pages; the same 40 appends one after the other commit 40 times.
    together = await _fresh_store(tmp_path / "together.db")
    apart = await _fresh_store(tmp_path / "apart.db")
    try:
        before = _wal_frames(tmp_path / "together.db")
        revisions = await asyncio.gather(
            *(together.append("u", f"s{i}", [Msg.user(f"m{i}")], expected_revision=0) for i in range(40))
        )
        frames_together = _wal_frames(tmp_path / "together.db") - before
        before = _wal_frames(tmp_path / "apart.db")
        for i in range(40):
            await apart.append("u", f"s{i}", [Msg.user(f"m{i}")], expected_revision=0)
        frames_apart = _wal_frames(tmp_path / "apart.db") - before
        assert revisions == [1] * 40
        assert frames_together * 5 < frames_apart, (frames_together, frames_apart)
        for i in (0, 1, 39):
            state = await together.load("u", f"s{i}")
            assert state is not None and [m.text for m in state.messages] == [f"m{i}"]
    finally:
        await together.close()
        await apart.close()


async def test_a_batch_of_appends_is_one_transaction_of_plain_statements(tmp_path: Path) -> None:
    # The side effect: the statements run. An append that waited for the iteration end runs in the
    # batch's transaction without a savepoint of its own (a conflict is raised before it writes), and
    # a new session is inserted without reading for it first.
    store = await _fresh_store(tmp_path / "s.db")
    try:
        assert await store.load("u", "none") is None  # a small read: opens the inline connection
        assert store._inline is not None and store._inline._conn is not None
        conn = store._inline._conn
        statements: list[str] = []
        conn.set_trace_callback(statements.append)
        new = [store.append("u", f"s{i}", [Msg.user("m")], expected_revision=0) for i in range(10)]
        assert await asyncio.gather(*new) == [1] * 10
        fields = {"tool_state": {"in_flight": {"calls": ["c1"]}}}
        more = [store.append("u", f"s{i}", [Msg.assistant("a")], fields=fields, expected_revision=1) for i in range(10)]
        assert await asyncio.gather(*more) == [2] * 10
        conn.set_trace_callback(None)
        verbs = [sql.split()[0] for sql in statements]
        assert "SAVEPOINT" not in verbs and "SELECT" not in verbs, statements
        # per gather: the first append inline (its own transaction), the nine others in one
        assert verbs.count("BEGIN") == verbs.count("COMMIT") == 4
        assert len(statements) == 4 * 2 + 20 * 2, "an append is two statements: the session row, the message"
        state = await store.load("u", "s7")
        assert state is not None and state.tool_state == fields["tool_state"] and state.revision == 2
    finally:
        await store.close()


async def test_an_append_cancelled_while_it_waits_for_the_iteration_end_writes_nothing(tmp_path: Path) -> None:
    store = await _fresh_store(tmp_path / "s.db")
    try:
        first = asyncio.ensure_future(store.append("u", "a", [Msg.user("a")], expected_revision=0))
        second = asyncio.ensure_future(store.append("u", "b", [Msg.user("b")], expected_revision=0))
        await asyncio.sleep(0)  # both start in this iteration: "a" inline, "b" waits for the iteration end
        second.cancel()
        assert await first == 1
        with pytest.raises(asyncio.CancelledError):
            await second
        await asyncio.sleep(0.01)
        assert await store.load("u", "b") is None
        assert (await store.append("u", "b", [Msg.user("b again")], expected_revision=0)) == 1
    finally:
        await store.close()


async def test_a_batch_that_finds_the_database_busy_is_written_by_the_worker_once_it_is_free(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    store = await _fresh_store(path)
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        # A first append runs inline, the others queue for the iteration end; then another process
        # takes the write lock before that end comes, so the batch goes to the worker, which waits.
        first = asyncio.ensure_future(store.append("u", "s0", [Msg.user("m0")], expected_revision=0))
        rest = [
            asyncio.ensure_future(store.append("u", f"s{i}", [Msg.user(f"m{i}")], expected_revision=0))
            for i in range(1, 6)
        ]
        await asyncio.sleep(0)
        assert first.done()
        other.execute("BEGIN IMMEDIATE")
        await asyncio.sleep(0.05)
        assert not any(task.done() for task in rest)  # nothing committed under the other writer's lock
        other.execute("COMMIT")
        assert await asyncio.gather(*rest) == [1] * 5
        for i in range(6):
            state = await store.load("u", f"s{i}")
            assert state is not None and [m.text for m in state.messages] == [f"m{i}"]
    finally:
        other.close()
        await store.close()


# -- the one-statement append (UPDATE ... RETURNING, fields merged by json_set) ------------------------------

_FIELD_VALUES = {
    "summary": st.one_of(st.none(), st.text(max_size=20)),
    "summary_index": st.integers(0, 50),
    "metadata": st.dictionaries(
        st.text(max_size=5),
        st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.text(max_size=8), st.lists(st.integers())),
        max_size=4,
    ),
    "tool_state": st.dictionaries(st.sampled_from(["a", "b", "c.d", '"q"']), st.text(max_size=5), max_size=3),
    "active_groups": st.lists(st.sampled_from(["web", "files", "shell"]), max_size=3, unique=True),
}
_STEPS = st.lists(
    st.tuples(
        st.integers(0, 3),
        st.dictionaries(st.sampled_from(sorted(_FIELD_VALUES)), st.none(), max_size=3).flatmap(
            lambda keys: st.fixed_dictionaries({k: _FIELD_VALUES[k] for k in keys})
        ),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_STEPS)
def test_the_one_statement_append_stores_what_the_read_modify_write_one_stores(
    steps: list[tuple[int, dict[str, Any]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def replay(path: Path) -> AgentState:
        async with SqliteStateStore(path, inline=False) as store:
            revision = 0
            for n, (count, fields) in enumerate(steps):
                messages = [Msg.user(f"m{n}-{i}") for i in range(count)]
                revision = await store.append("u", "s", messages, fields=fields, expected_revision=revision)
            state = await store.load("u", "s")
            assert state is not None
            return state

    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    fast = asyncio.run(replay(folder / "fast.db"))
    with monkeypatch.context() as patch:
        patch.setattr(sqlite_module, "_RETURNING", False)
        slow = asyncio.run(replay(folder / "slow.db"))
    assert fast.fields_dict() == slow.fields_dict()
    assert [m.text for m in fast.messages] == [m.text for m in slow.messages]
    assert fast.revision == slow.revision == len(steps)


async def test_a_stale_revision_is_a_conflict_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with SqliteStateStore(path) as store:
        await store.append("u", "s", [Msg.user("one")], expected_revision=0)
        await store.append("u", "s", [Msg.user("two")], fields={"summary": "kept"}, expected_revision=1)
        with pytest.raises(StateConflictError, match="revision 2, not 1"):
            await store.append("u", "s", [Msg.user("stale")], fields={"summary": "lost"}, expected_revision=1)
        with pytest.raises(StateConflictError, match="revision 0, not 3"):
            await store.append("u", "gone", [Msg.user("x")], expected_revision=3)
    with _raw(path) as conn:
        assert conn.execute("SELECT count(*) FROM messages WHERE session_id = 's'").fetchone() == (2,)
        assert (
            json.loads(conn.execute("SELECT doc FROM sessions WHERE session_id = 's'").fetchone()[0])["summary"]
            == "kept"
        )
        assert conn.execute("SELECT count(*) FROM sessions WHERE session_id = 'gone'").fetchone() == (0,)
    conn.close()
