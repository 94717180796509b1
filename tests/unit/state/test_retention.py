"""Retention on the embedded stores: `prune`, `idle_ttl`, `delete_user`, `forget_user` and their CLI commands.

Checked by side effect: rows gone from the SQLite tables, folders gone from the JSON-file root, and
every other session still loading as it was (read back by a raw query or a fresh store).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from agentrt.cli import build_app
from agentrt.cli.sessions import parse_duration
from agentrt.errors import InvalidTypeError, InvalidValueError, UserError
from agentrt.knowledge import Knowledge
from agentrt.knowledge.stores.memory import MemoryKnowledgeStore
from agentrt.knowledge.stores.sqlite import SqliteKnowledgeStore
from agentrt.memory import SqliteLongTermMemory
from agentrt.message import Msg
from agentrt.retention import ForgetReport, InvalidUserIdError, check_user_id, forget_user
from agentrt.state import AgentState, BaseStateStore, InMemoryStateStore, SessionInfo
from agentrt.state.pending import Pending, PendingCall
from agentrt.state.stores.jsonfile import JsonFileStateStore
from agentrt.state.stores.sqlite import SqliteStateStore
from agentrt.testing import check_state_store

DAY = 86_400.0


def _raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def _rows(path: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    conn = _raw(path)
    try:
        return [tuple(row) for row in conn.execute(sql, params).fetchall()]
    finally:
        conn.close()


def _age_sqlite(path: Path, user: str, session: str, agent: str, updated_at: float) -> None:
    conn = _raw(path)
    try:
        conn.execute(
            "UPDATE sessions SET updated_at = ? WHERE agent = ? AND user_id = ? AND session_id = ?",
            (updated_at, agent, user, session),
        )
    finally:
        conn.close()


def _age_jsonfile(store: JsonFileStateStore, user: str, session: str, agent: str, updated_at: float) -> None:
    state_file = store.session_path(user, session, agent=agent) / "state.json"
    doc = json.loads(state_file.read_text())
    doc["updated_at"] = updated_at
    state_file.write_text(json.dumps(doc))


# -- the contract, with the idle expiry, on every embedded store ------------------------------------


async def test_contract_memory_with_idle_ttl() -> None:
    await check_state_store(InMemoryStateStore, idle_ttl_factory=lambda ttl: InMemoryStateStore(idle_ttl=ttl))


async def test_contract_sqlite_with_idle_ttl(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await check_state_store(
        lambda: SqliteStateStore(path),
        persistent=True,
        idle_ttl_factory=lambda ttl: SqliteStateStore(path, idle_ttl=ttl),
    )


async def test_contract_sqlite_without_inline_reads(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await check_state_store(
        lambda: SqliteStateStore(path, inline=False),
        persistent=True,
        idle_ttl_factory=lambda ttl: SqliteStateStore(path, inline=False, idle_ttl=ttl),
    )


async def test_contract_jsonfile_with_idle_ttl(tmp_path: Path) -> None:
    root = tmp_path / "root"
    await check_state_store(
        lambda: JsonFileStateStore(root, fsync=False),
        persistent=True,
        idle_ttl_factory=lambda ttl: JsonFileStateStore(root, fsync=False, idle_ttl=ttl),
    )


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf")])
def test_idle_ttl_must_be_a_positive_number(bad: float, tmp_path: Path) -> None:
    for make in (
        lambda: InMemoryStateStore(idle_ttl=bad),
        lambda: SqliteStateStore(tmp_path / "s.db", idle_ttl=bad),
        lambda: JsonFileStateStore(tmp_path, idle_ttl=bad),
    ):
        with pytest.raises(InvalidValueError, match="idle_ttl"):
            make()
    with pytest.raises(InvalidTypeError, match="idle_ttl"):
        InMemoryStateStore(idle_ttl="1d")  # type: ignore[arg-type]
    assert InMemoryStateStore().idle_ttl is None and InMemoryStateStore(idle_ttl=5).idle_ttl == 5.0


# -- SQLite: by the rows -----------------------------------------------------------------------------


async def _seed(store: Any, user: str, session: str, agent: str = "", n: int = 3) -> None:
    pending = Pending(reply_id="r", calls=(PendingCall(id="c", name="search", input={}, kind="confirm"),))
    await store.append(
        user, session, [Msg.user(f"{session} {i}") for i in range(n)], fields={"pending": pending},
        expected_revision=0, agent=agent,
    )  # fmt: skip


async def test_sqlite_prune_deletes_the_rows_of_idle_sessions_only(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    now = time.time()
    async with SqliteStateStore(path) as store:
        for user, session, agent in [
            ("alice", "old", ""),
            ("alice", "old", "bot"),
            ("alice", "new", ""),
            ("bob", "old", "bot"),
            ("bob", "locked", ""),
        ]:
            await _seed(store, user, session, agent)
        for user, session, agent in [("alice", "old", ""), ("alice", "old", "bot"), ("bob", "old", "bot")]:
            _age_sqlite(path, user, session, agent, now - 40 * DAY)
        _age_sqlite(path, "bob", "locked", "", now - 90 * DAY)
        async with store.session_lock("bob", "locked"):
            assert await store.prune(30 * DAY, dry_run=True) == 3
            assert _rows(path, "SELECT count(*) FROM sessions") == [(5,)], "a dry run deletes nothing"
            assert await store.prune(30 * DAY, user_id="alice", agent="bot") == 1
            assert _rows(path, "SELECT count(*) FROM messages WHERE user_id = 'alice' AND agent = 'bot'") == [(0,)]
            assert await store.prune(30 * DAY) == 2
        remaining = _rows(path, "SELECT user_id, session_id, agent FROM sessions ORDER BY user_id, session_id")
        assert remaining == [("alice", "new", ""), ("bob", "locked", "")], "the locked and the fresh sessions stay"
        messages = _rows(path, "SELECT user_id, session_id, count(*) FROM messages GROUP BY 1, 2 ORDER BY 1, 2")
        assert messages == [("alice", "new", 3), ("bob", "locked", 3)], "no message row of a pruned session is left"
        assert await store.prune(30 * DAY) == 1, "once unlocked it goes"
    async with SqliteStateStore(path) as fresh:
        state = await fresh.load("alice", "new")
        assert state is not None and [m.text for m in state.messages] == ["new 0", "new 1", "new 2"]
        assert state.pending is not None


async def test_sqlite_prune_limit_takes_the_oldest_first(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    now = time.time()
    async with SqliteStateStore(path) as store:
        for i in range(5):
            await _seed(store, f"u{i}", "s", n=1)
            _age_sqlite(path, f"u{i}", "s", "", now - (10 + i) * DAY)
        assert await store.prune(DAY, limit=2) == 2
    assert _rows(path, "SELECT user_id FROM sessions ORDER BY user_id") == [("u0",), ("u1",), ("u2",)]


async def test_sqlite_prune_reads_the_updated_at_index_added_to_older_files(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with SqliteStateStore(path) as store:
        await _seed(store, "u", "s")
    conn = _raw(path)
    conn.execute("DROP INDEX sessions_by_updated")  # a database written before the index existed
    conn.close()
    async with SqliteStateStore(path) as store:
        assert await store.load("u", "s") is not None
    indexes = {row[1] for row in _rows(path, "PRAGMA index_list(sessions)")}
    assert "sessions_by_updated" in indexes, "the index is added when the file is opened"
    plan = _rows(
        path,
        "EXPLAIN QUERY PLAN SELECT agent, user_id, session_id FROM sessions WHERE 1 = 1 AND updated_at < ?"
        " ORDER BY updated_at, agent, user_id, session_id LIMIT ? OFFSET ?",
        time.time(),
        500,
        0,
    )
    assert any("sessions_by_updated" in str(row) for row in plan), plan


async def test_sqlite_idle_sessions_read_as_missing_and_their_rows_go(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    now = time.time()
    async with SqliteStateStore(path) as plain:
        for session in ("read", "listed", "fresh"):
            await _seed(plain, "u", session)
        await _seed(plain, "other", "read")
        for session in ("read", "listed"):
            _age_sqlite(path, "u", session, "", now - 2 * DAY)
        _age_sqlite(path, "other", "read", "", now - 2 * DAY)
    async with SqliteStateStore(path, idle_ttl=DAY) as store:
        assert store.idle_ttl == DAY
        assert await store.load("u", "read") is None
        assert _rows(path, "SELECT count(*) FROM messages WHERE user_id = 'u' AND session_id = 'read'") == [(0,)]
        assert [s.session_id for s in await store.list_sessions("u")] == ["fresh"]
        assert _rows(path, "SELECT session_id FROM sessions WHERE user_id = 'u'") == [("fresh",)]
        assert _rows(path, "SELECT count(*) FROM messages WHERE user_id = 'u'") == [(3,)]
        async with store.session_lock("other", "read"):
            assert await store.list_sessions("other") == [], "a locked idle session is hidden from listings"
            assert _rows(path, "SELECT count(*) FROM sessions WHERE user_id = 'other'") == [(1,)], "but not deleted"
            assert await store.load("other", "read") is None, "its lock holder reads it as missing"
            assert await store.append("other", "read", [Msg.user("anew")], expected_revision=0) == 1, (
                "and can start it again at revision 0"
            )
        state = await store.load("other", "read")
        assert state is not None and [m.text for m in state.messages] == ["anew"]


async def test_sqlite_delete_user_leaves_no_row_of_the_user(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with SqliteStateStore(path) as store:
        for agent in ("", "bot", "other-bot"):
            await _seed(store, "alice", "s1", agent)
            await _seed(store, "alice", "s2", agent)
        await _seed(store, "alicex", "s1")
        await _seed(store, "bob", "s1", "bot")
        async with store.session_lock("alice", "s1", agent="bot"):
            assert await store.delete_user("alice") == 6, "locked sessions go too"
        assert await store.delete_user("alice") == 0
    for table in ("sessions", "messages"):
        assert _rows(path, f"SELECT count(*) FROM {table} WHERE user_id = 'alice'") == [(0,)]
        users = _rows(path, f"SELECT DISTINCT user_id FROM {table} ORDER BY user_id")
        assert users == [("alicex",), ("bob",)], f"other users' {table} stay"


# -- JSON files: by the folders ---------------------------------------------------------------------


async def test_jsonfile_delete_user_removes_the_users_folders(tmp_path: Path) -> None:
    root = tmp_path / "root"
    async with JsonFileStateStore(root, fsync=False) as store:
        for agent in ("", "bot"):
            await _seed(store, "alice", "s1", agent)
        await _seed(store, "bob", "s1", "bot")
        alice_bot = store.session_path("alice", "s1", agent="bot")
        crashed = alice_bot.parent / "crashed"
        crashed.mkdir()
        (crashed / "messages.jsonl").write_text('{"uncommitted": "personal data"}\n')  # a write that never committed
        assert await store.delete_user("alice") == 2
    leftovers = [p for p in root.rglob("*") if "alice" in p.name]
    assert leftovers == [], f"nothing named after the user is left: {leftovers}"
    async with JsonFileStateStore(root) as fresh:
        assert await fresh.list_sessions("alice") == []
        bob = await fresh.load("bob", "s1", agent="bot")
        assert bob is not None and len(bob.messages) == 3


async def test_jsonfile_prune_across_users_deletes_the_folders(tmp_path: Path) -> None:
    root = tmp_path / "root"
    now = time.time()
    async with JsonFileStateStore(root, fsync=False) as store:
        for user, agent in [("alice", ""), ("bob", "bot"), ("carol", "bot")]:
            await _seed(store, user, "s", agent)
        _age_jsonfile(store, "alice", "s", "", now - 3 * DAY)
        _age_jsonfile(store, "bob", "s", "bot", now - 3 * DAY)
        assert await store.prune(DAY, agent="bot", dry_run=True) == 1
        assert await store.prune(DAY) == 2
        assert (
            not store.session_path("alice", "s").exists() and not store.session_path("bob", "s", agent="bot").exists()
        )
        assert store.session_path("carol", "s", agent="bot").exists()


# -- the property: exactly the matching sessions go ---------------------------------------------------

USERS = ["u1", "u2", "u3"]
AGENTS = ["", "a", "b"]
_SESSIONS = st.lists(st.tuples(st.sampled_from(USERS), st.sampled_from(AGENTS), st.integers(0, 40)), max_size=12)
_FILTERS = st.tuples(
    st.integers(0, 40),
    st.none() | st.sampled_from(USERS),
    st.none() | st.sampled_from(AGENTS),
    st.none() | st.integers(0, 6),
    st.booleans(),
)

Ager = Callable[[Any, str, str, str, float], None]


def _stores(kind: str, folder: Path) -> tuple[Any, Ager]:
    if kind == "memory":
        memory = InMemoryStateStore()

        def age_memory(store: Any, user: str, session: str, agent: str, at: float) -> None:
            store._sessions[(agent, user, session)].updated_at = at

        return memory, age_memory
    if kind == "sqlite":
        path = folder / "s.db"
        return SqliteStateStore(path), lambda _s, u, s, a, at: _age_sqlite(path, u, s, a, at)
    return JsonFileStateStore(folder / "root", fsync=False), _age_jsonfile


@pytest.mark.parametrize("kind", ["memory", "sqlite", "jsonfile"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sessions=_SESSIONS, filters=_FILTERS)
def test_prune_removes_exactly_the_matching_sessions(
    kind: str, sessions: list[tuple[str, str, int]], filters: tuple[int, str | None, str | None, int | None, bool],
    tmp_path: Path,
) -> None:  # fmt: skip
    older, user, agent, limit, dry_run = filters

    async def run() -> None:
        store, age = _stores(kind, Path(tempfile.mkdtemp(dir=tmp_path)))
        now = time.time()
        stamps: dict[tuple[str, str, str], float] = {}
        async with store:
            for i, (u, a, hours) in enumerate(sessions):
                await store.append(u, f"s{i}", [Msg.user(f"m{i}")], expected_revision=0, agent=a)
                stamps[(u, f"s{i}", a)] = now - hours * 3600
                age(store, u, f"s{i}", a, stamps[(u, f"s{i}", a)])
            # whole hours old, cut half-way between two: no session sits on the boundary
            matching = {
                key
                for key, at in stamps.items()
                if now - at > older * 3600 and (user is None or key[0] == user) and (agent is None or key[2] == agent)
            }
            count = await store.prune((older + 0.5) * 3600, user_id=user, agent=agent, limit=limit, dry_run=dry_run)
            expected = len(matching) if limit is None else min(limit, len(matching))
            assert count == expected
            gone = set()
            for (u, s, a), at in stamps.items():
                state = await store.load(u, s, agent=a)
                if state is None:
                    gone.add((u, s, a))
                    continue
                assert [m.text for m in state.messages] == [f"m{s[1:]}"] and state.revision == 1
                assert state.updated_at == pytest.approx(at), "a kept session is untouched"
            if dry_run:
                assert gone == set(), "a dry run deletes nothing"
                return
            assert gone <= matching and len(gone) == expected, (gone, matching)
            kept = matching - gone
            if gone and kept:
                assert max(stamps[k] for k in gone) <= min(stamps[k] for k in kept), "the oldest go first"

    asyncio.run(run())


# -- forget_user --------------------------------------------------------------------------------------


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[InMemoryStateStore, SqliteLongTermMemory, MemoryKnowledgeStore]]:
    yield InMemoryStateStore(), SqliteLongTermMemory(tmp_path / "m.db", ttl=None), MemoryKnowledgeStore()


async def _seed_everything(
    user: str, state: Any, memory: Any, knowledge: MemoryKnowledgeStore | SqliteKnowledgeStore
) -> None:
    await _seed(state, user, "s1")
    await _seed(state, user, "s2", "bot")
    await memory.record(user, [f"{user} likes tea", f"{user} lives in Lyon"])
    for kb in ("notes", "mail"):
        await Knowledge(kb, store=knowledge, namespace=user).add_text(f"{user}'s {kb}: the quarterly plan")


async def test_forget_user_deletes_everything_of_the_user_only(
    stores: tuple[InMemoryStateStore, SqliteLongTermMemory, MemoryKnowledgeStore],
) -> None:
    state, memory, knowledge = stores
    for user in ("alice", "bob"):
        await _seed_everything(user, state, memory, knowledge)
    kb = Knowledge("notes", store=knowledge, per_user=True)
    report = await forget_user("alice", state=state, memory=memory, knowledge=kb)
    assert report == ForgetReport("alice", sessions=2, memories=2, knowledge_documents=2)
    assert report.total == 6
    assert await state.list_sessions("alice") == [] and await memory.list("alice") == []
    assert await knowledge.kbs("alice") == []
    assert len(await state.list_sessions("bob")) == 2 and len(await memory.list("bob")) == 2
    assert await knowledge.kbs("bob") == ["mail", "notes"]
    again = await forget_user("alice", state=state, memory=memory, knowledge=knowledge)
    assert again == ForgetReport("alice"), "a second call deletes nothing more"
    await memory.close()


async def test_forget_user_on_sqlite_files_leaves_no_row(tmp_path: Path) -> None:
    paths = {name: tmp_path / f"{name}.db" for name in ("state", "memory", "knowledge")}
    state, memory = SqliteStateStore(paths["state"]), SqliteLongTermMemory(paths["memory"], ttl=None)
    knowledge = SqliteKnowledgeStore(paths["knowledge"])
    try:
        for user in ("alice", "bob"):
            await _seed_everything(user, state, memory, knowledge)
        report = await forget_user("alice", state=state, memory=memory, knowledge=knowledge)
    finally:
        for closing in (state, memory, knowledge):
            await closing.close()
    assert (report.sessions, report.memories, report.knowledge_documents) == (2, 2, 2)
    for sql, path in [
        ("SELECT DISTINCT user_id FROM sessions", paths["state"]),
        ("SELECT DISTINCT user_id FROM messages", paths["state"]),
        ("SELECT DISTINCT user_id FROM memories", paths["memory"]),
        ("SELECT DISTINCT namespace FROM kb_documents", paths["knowledge"]),
    ]:
        assert _rows(path, sql) == [("bob",)], sql
    assert _rows(paths["memory"], "SELECT count(*) FROM memories_fts") == [(2,)], "full-text entries go too"
    assert _rows(paths["knowledge"], "SELECT count(*) FROM kb_chunks") == [(2,)]
    assert _rows(paths["knowledge"], "SELECT count(*) FROM kb_fts") == [(2,)]


@pytest.mark.parametrize(
    ("user_id", "error"),
    [
        ("", InvalidUserIdError),
        ("x" * 201, InvalidUserIdError),
        ("a\nb", InvalidUserIdError),
        ("a\x00", InvalidUserIdError),
        ("a\u2028", InvalidUserIdError),
        ("\ud800", InvalidUserIdError),
        (None, InvalidTypeError),
    ],
)
async def test_forget_user_refuses_an_id_no_user_can_have(user_id: Any, error: type[Exception]) -> None:
    state = InMemoryStateStore()
    await _seed(state, "x" * 201, "s")
    with pytest.raises(error):
        await forget_user(user_id, state=state)
    assert len(await state.list_sessions("x" * 201)) == 1, "nothing is deleted"
    assert issubclass(InvalidUserIdError, InvalidValueError)
    assert check_user_id("x" * 200) == "x" * 200


async def test_forget_user_needs_a_store() -> None:
    with pytest.raises(UserError, match="at least one"):
        await forget_user("alice")


class _ProtocolOnly:
    """A state store, memory and knowledge store offering only their protocols' methods."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in ("delete_user", "clear", "delete_namespace", "prune"):
            raise AttributeError(name)
        return getattr(self._inner, name)


async def test_forget_user_works_with_protocol_only_backends(
    stores: tuple[InMemoryStateStore, SqliteLongTermMemory, MemoryKnowledgeStore],
) -> None:
    state, memory, knowledge = stores
    for user in ("alice", "bob"):
        await _seed_everything(user, state, memory, knowledge)
    report = await forget_user(
        "alice", state=_ProtocolOnly(state), memory=_ProtocolOnly(memory), knowledge=_ProtocolOnly(knowledge)
    )
    assert (report.sessions, report.memories, report.knowledge_documents) == (2, 2, 2)
    assert await state.list_sessions("alice") == [] and await memory.list("alice") == []
    assert await knowledge.kbs("alice") == [] and await knowledge.kbs("bob") == ["mail", "notes"]
    await memory.close()


class _ListingStore(BaseStateStore):
    """A third-party store with only the abstract methods: the generic prune and delete_user."""

    def __init__(self) -> None:
        self.inner = InMemoryStateStore()

    async def load(self, user_id: str, session_id: str, *, agent: str = "") -> AgentState | None:
        return await self.inner.load(user_id, session_id, agent=agent)

    async def append(
        self,
        user_id: str,
        session_id: str,
        messages: Sequence[Msg],
        *,
        fields: Mapping[str, Any] | None = None,
        expected_revision: int,
        agent: str = "",
    ) -> int:
        return await self.inner.append(
            user_id, session_id, messages, fields=fields, expected_revision=expected_revision, agent=agent
        )

    async def load_context(self, user_id: str, session_id: str, *, agent: str = "") -> AgentState | None:
        return await self.inner.load_context(user_id, session_id, agent=agent)

    async def save(self, state: AgentState, *, expected_revision: int | None = None) -> int:
        return await self.inner.save(state, expected_revision=expected_revision)

    async def delete(self, user_id: str, session_id: str, *, agent: str = "") -> bool:
        return await self.inner.delete(user_id, session_id, agent=agent)

    async def list_sessions(self, user_id: str, *, agent: str | None = None) -> list[SessionInfo]:
        return await self.inner.list_sessions(user_id, agent=agent)

    async def _legacy_sessions(self, user_id: str | None) -> list[tuple[str, str]]:
        return await self.inner._legacy_sessions(user_id)


async def test_the_generic_prune_works_one_user_at_a_time() -> None:
    store = _ListingStore()
    await check_state_store(_ListingStore)
    for user in ("alice", "bob"):
        await _seed(store, user, "old")
        store.inner._sessions[("", user, "old")].updated_at = time.time() - 3 * DAY
        await _seed(store, user, "new")
    with pytest.raises(UserError, match="one user"):
        await store.prune(DAY)
    async with store.session_lock("bob", "old"):
        assert await store.prune(DAY, user_id="bob") == 0, "the generic prune skips sessions locked here"
    assert await store.prune(DAY, user_id="alice") == 1
    assert [s.session_id for s in await store.list_sessions("alice")] == ["new"]
    assert await store.delete_user("bob") == 2 and await store.list_sessions("bob") == []


# -- the command line ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30d", 30 * DAY), ("12h", 43_200), ("90m", 5400), ("3600s", 3600), ("2w", 14 * DAY), ("1h30m", 5400),
     (" 1.5D ", 1.5 * DAY)],
)  # fmt: skip
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["30", "", "d", "-1d", "30 days", "1y", "3e5s", "1d-2h"])
def test_parse_duration_refuses_the_rest(text: str) -> None:
    with pytest.raises(ValueError, match="30d, 12h, 90m or 3600s"):
        parse_duration(text)


def _seed_cli_store(path: Path) -> None:
    now = time.time()

    async def seed() -> None:
        async with SqliteStateStore(path) as store:
            for user, session, agent, days in [
                ("alice", "ancient", "", 90),
                ("alice", "month", "bot", 31),
                ("alice", "recent", "", 1),
                ("bob", "ancient", "bot", 90),
            ]:
                await _seed(store, user, session, agent)
                _age_sqlite(path, user, session, agent, now - days * DAY)

    asyncio.run(seed())


def _sessions(path: Path) -> list[tuple[str, str, str]]:
    return [
        (str(u), str(s), str(a))
        for u, s, a in _rows(path, "SELECT user_id, session_id, agent FROM sessions ORDER BY 1, 2")
    ]


def test_cli_sessions_prune(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    _seed_cli_store(path)
    url = f"sqlite:///{path}"
    runner, app = CliRunner(), build_app()
    dry = runner.invoke(app, ["sessions", "prune", "--older-than", "30d", "--db", url, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "3 sessions idle for more than 30d would be deleted" in dry.output
    assert len(_sessions(path)) == 4, "a dry run deletes nothing"
    one = runner.invoke(app, ["sessions", "prune", "--older-than", "60d", "--db", url, "--user", "alice"])
    assert one.exit_code == 0 and "deleted 1 session of user 'alice'" in one.output, one.output
    assert ("alice", "ancient", "") not in _sessions(path) and ("bob", "ancient", "bot") in _sessions(path)
    by_agent = runner.invoke(app, ["sessions", "prune", "--older-than", "30d", "--db", url, "--agent", "bot"])
    assert by_agent.exit_code == 0 and "deleted 2 sessions of agent 'bot'" in by_agent.output, by_agent.output
    assert _sessions(path) == [("alice", "recent", "")]
    assert _rows(path, "SELECT DISTINCT session_id FROM messages") == [("recent",)], "their messages went too"


@pytest.mark.parametrize("bad", ["30", "thirty days", "-3d", ""])
def test_cli_sessions_prune_refuses_a_bad_duration(bad: str, tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    _seed_cli_store(path)
    result = CliRunner().invoke(build_app(), ["sessions", "prune", "--older-than", bad, "--db", f"sqlite:///{path}"])
    assert result.exit_code == 2, result.output
    assert "30d, 12h, 90m or 3600s" in result.output
    assert len(_sessions(path)) == 4


def test_cli_sessions_prune_needs_older_than(tmp_path: Path) -> None:
    result = CliRunner().invoke(build_app(), ["sessions", "prune", "--db", f"sqlite:///{tmp_path / 's.db'}"])
    assert result.exit_code == 2 and "--older-than" in result.output


def _seed_cli_user_data(tmp_path: Path) -> dict[str, Path]:
    paths = {name: tmp_path / f"{name}.db" for name in ("state", "memory", "knowledge")}

    async def seed() -> None:
        state, memory = SqliteStateStore(paths["state"]), SqliteLongTermMemory(paths["memory"], ttl=None)
        knowledge = SqliteKnowledgeStore(paths["knowledge"])
        try:
            for user in ("alice", "bob"):
                await _seed_everything(user, state, memory, knowledge)
        finally:
            for closing in (state, memory, knowledge):
                await closing.close()

    asyncio.run(seed())
    return paths


def _owners(paths: dict[str, Path]) -> dict[str, list[tuple[Any, ...]]]:
    return {
        "sessions": _rows(paths["state"], "SELECT DISTINCT user_id FROM sessions ORDER BY 1"),
        "messages": _rows(paths["state"], "SELECT DISTINCT user_id FROM messages ORDER BY 1"),
        "memories": _rows(paths["memory"], "SELECT DISTINCT user_id FROM memories ORDER BY 1"),
        "knowledge": _rows(paths["knowledge"], "SELECT DISTINCT namespace FROM kb_documents ORDER BY 1"),
    }


def test_cli_users_forget(tmp_path: Path) -> None:
    paths = _seed_cli_user_data(tmp_path)
    args = [
        "users", "forget", "alice", "--db", f"sqlite:///{paths['state']}",
        "--memory", f"sqlite:///{paths['memory']}", "--knowledge", f"sqlite:///{paths['knowledge']}",
    ]  # fmt: skip
    runner, app = CliRunner(), build_app()
    declined = runner.invoke(app, args, input="n\n")
    assert declined.exit_code == 1, declined.output
    assert "Delete everything of user 'alice'" in declined.output and "nothing deleted" in declined.output
    both = [("alice",), ("bob",)]
    assert _owners(paths) == {"sessions": both, "messages": both, "memories": both, "knowledge": both}
    accepted = runner.invoke(app, args, input="y\n")
    assert accepted.exit_code == 0, accepted.output
    assert "deleted 2 sessions, 2 memories, 2 knowledge documents of user 'alice'" in accepted.output
    bob = [("bob",)]
    assert _owners(paths) == {"sessions": bob, "messages": bob, "memories": bob, "knowledge": bob}
    again = runner.invoke(app, [*args, "--yes"])
    assert again.exit_code == 0 and "deleted 0 sessions, 0 memories, 0 knowledge documents" in again.output


def test_cli_users_forget_only_sessions_by_default(tmp_path: Path) -> None:
    paths = _seed_cli_user_data(tmp_path)
    result = CliRunner().invoke(build_app(), ["users", "forget", "alice", "--db", f"sqlite:///{paths['state']}", "-y"])
    assert result.exit_code == 0 and "deleted 2 sessions of user 'alice'" in result.output, result.output
    owners = _owners(paths)
    assert owners["sessions"] == [("bob",)] and owners["memories"] == [("alice",), ("bob",)]


@pytest.mark.parametrize("bad", ["", "x" * 201, "a\tb", "a\x7fb"])
def test_cli_users_forget_refuses_a_bad_user_id(bad: str, tmp_path: Path) -> None:
    paths = _seed_cli_user_data(tmp_path)
    result = CliRunner().invoke(build_app(), ["users", "forget", bad, "--db", f"sqlite:///{paths['state']}", "--yes"])
    assert result.exit_code == 2, result.output
    assert len(_owners(paths)["sessions"]) == 2


def test_cli_users_forget_refuses_a_bad_memory_url(tmp_path: Path) -> None:
    paths = _seed_cli_user_data(tmp_path)
    args = ["users", "forget", "alice", "--db", f"sqlite:///{paths['state']}", "--memory", "redis://x", "--yes"]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 2 and "long-term memory URL" in result.output, result.output
    assert len(_owners(paths)["sessions"]) == 2, "nothing is deleted when a URL is wrong"
