"""SqlStateStore against real PostgreSQL and MariaDB: the contract, ids, locks, races and two processes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import sys
import traceback
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql as sa_mysql
from sqlalchemy.ext.asyncio import create_async_engine

from agentrt.errors import InvalidValueError, SessionBusyError, StateConflictError, StateStoreError, UserError
from agentrt.message import Msg
from agentrt.state.base import AgentState
from agentrt.state.stores.sql import SqlStateStore, _Key
from agentrt.testing import check_state_store

pytestmark = pytest.mark.integration

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(params=["postgres", "mysql"])
def db_url(request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


@pytest.fixture
async def prefix(db_url: str, unique: str) -> AsyncIterator[str]:
    """A table prefix owned by the test; its tables are dropped at the end."""
    name = f"t_{unique}_"
    yield name
    async with SqlStateStore(db_url, table_prefix=name) as cleaner:
        await cleaner.drop_tables()


@pytest.fixture
async def store(db_url: str, prefix: str) -> AsyncIterator[SqlStateStore]:
    async with SqlStateStore(db_url, table_prefix=prefix) as s:
        yield s


def _is_pg(url: str) -> bool:
    return url.startswith("postgresql")


# -- the contract ---------------------------------------------------------------------------------


async def test_contract(db_url: str, prefix: str) -> None:
    await check_state_store(lambda: SqlStateStore(db_url, table_prefix=prefix))


async def test_tables_created_once_by_racing_first_uses(db_url: str, prefix: str) -> None:
    stores = [SqlStateStore(db_url, table_prefix=prefix) for _ in range(6)]
    try:
        revs = await asyncio.gather(
            *(s.append("u", f"s{i}", [Msg.user("hi")], expected_revision=0) for i, s in enumerate(stores))
        )
        assert revs == [1] * 6
        assert len(await stores[0].list_sessions("u")) == 6
    finally:
        for s in stores:
            await s.close()


# -- ids ------------------------------------------------------------------------------------------


async def test_long_and_awkward_ids(db_url: str, store: SqlStateStore) -> None:
    long_user = "u" * 300
    ids = [
        "s" * 255,  # the longest id kept verbatim
        "s" * 256,  # the shortest one hashed
        "x" * 5000,
        "😀" * 255,  # 1020 UTF-8 bytes: still fits the MySQL key column
        "😀" * 256,
        "sha256:" + "0" * 64,  # looks like a hashed key: must not collide with one
        "abc",
        "ABC",  # case, trailing spaces and accents are all different ids (MySQL collations would fold them)
        "abc ",
        "äbc",
    ]
    for i, sid in enumerate(ids):
        await store.append(long_user, sid, [Msg.user(f"msg {i} 🦄")], expected_revision=0)
    for i, sid in enumerate(ids):
        state = await store.load(long_user, sid)
        assert state is not None, f"session #{i} must load"
        assert (state.user_id, state.session_id) == (long_user, sid)
        assert state.messages[0].text == f"msg {i} 🦄"
    listed = {info.session_id for info in await store.list_sessions(long_user)}
    assert listed == set(ids)
    assert await store.list_sessions("u" * 299) == []

    # long ids are stored as a hash, with the original beside it
    sessions = sa.table(
        f"{store.table_prefix}sessions",
        sa.column("session_id"),
        sa.column("session_id_full"),
        sa.column("user_id_full"),
    )
    async with store.engine.connect() as conn:
        rows = (await conn.execute(sa.select(sessions.c.session_id_full, sessions.c.user_id_full))).all()
    assert all(user_full == long_user for _, user_full in rows)
    assert {full for full, _ in rows if full is not None} == {"s" * 256, "x" * 5000, "😀" * 256, "sha256:" + "0" * 64}

    assert await store.delete(long_user, "x" * 5000) is True
    assert await store.load(long_user, "x" * 5000) is None
    with pytest.raises(UserError, match="NUL"):
        await store.append("u", "a\x00b", [], expected_revision=0)


# -- tables of the previous version (sessions without an agent) -----------------------------------


def _v1_tables(prefix: str) -> tuple[sa.MetaData, sa.Table, sa.Table]:
    """The tables as agentrt defined them before sessions belonged to an agent, verbatim."""
    metadata = sa.MetaData()
    long_text = sa.Text().with_variant(sa_mysql.LONGTEXT(), "mysql", "mariadb")
    sessions = sa.Table(
        f"{prefix}sessions",
        metadata,
        sa.Column("user_id", _Key(), primary_key=True),
        sa.Column("session_id", _Key(), primary_key=True),
        sa.Column("user_id_full", long_text, nullable=True),
        sa.Column("session_id_full", long_text, nullable=True),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.Column("doc", long_text, nullable=False),
        sa.Column("message_count", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.Index(f"{prefix}sessions_by_user", "user_id", "updated_at"),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
    )
    messages = sa.Table(
        f"{prefix}messages",
        metadata,
        sa.Column("user_id", _Key(), primary_key=True),
        sa.Column("session_id", _Key(), primary_key=True),
        sa.Column("seq", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("body", long_text, nullable=False),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
    )
    return metadata, sessions, messages


async def _v1_database(url: str, prefix: str, sessions: dict[tuple[str, str], list[str]]) -> None:
    metadata, s, m = _v1_tables(prefix)
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(metadata.create_all)
            for i, ((user, session), texts) in enumerate(sessions.items()):
                key = session if len(session) <= 255 else "sha256:" + hashlib.sha256(session.encode()).hexdigest()
                doc = {
                    "format": "agentrt.state",
                    "version": 1,
                    "user_id": user,
                    "session_id": session,
                    "summary": "old",
                }
                await conn.execute(
                    sa.insert(s).values(
                        user_id=user,
                        session_id=key,
                        session_id_full=None if key == session else session,
                        revision=2,
                        doc=json.dumps(doc),
                        message_count=len(texts),
                        created_at=1000.0 + i,
                        updated_at=2000.0 + i,
                    )
                )
                rows = [
                    {"user_id": user, "session_id": key, "seq": n, "body": Msg.user(t).to_json()}
                    for n, t in enumerate(texts)
                ]
                await conn.execute(sa.insert(m), rows)
    finally:
        await engine.dispose()


async def test_tables_of_the_previous_version_are_migrated(db_url: str, prefix: str) -> None:
    long_sid = "bot:" + "z" * 300
    await _v1_database(
        db_url,
        prefix,
        {("alice", "bot:s1"): ["hello", "again"], ("alice", "plain"): ["p"], ("alice", long_sid): ["long"]},
    )
    stores = [SqlStateStore(db_url, table_prefix=prefix) for _ in range(3)]  # first uses race on the migration
    try:
        loaded = await asyncio.gather(*(s.load("alice", "bot:s1") for s in stores))
        for state in loaded:
            assert state is not None and state.agent == "" and [m.text for m in state.messages] == ["hello", "again"]
            assert (state.revision, state.summary, state.created_at) == (2, "old", 1000.0)
        store = stores[0]
        assert all(s.has_legacy_sessions for s in stores)
        assert await store.load("alice", "s1", agent="bot") is None
        assert await store.append("alice", "bot:s1", [Msg.user("old way")], expected_revision=2) == 3
        assert await store.migrate_legacy("bot") == 2
        assert store.has_legacy_sessions is True  # "plain" is left

        def inspect(conn: sa.Connection) -> dict[str, Any]:
            inspector = sa.inspect(conn)
            return {
                name: inspector.get_pk_constraint(f"{prefix}{name}")["constrained_columns"]
                for name in ("sessions", "messages")
            }

        async with store.engine.connect() as conn:
            assert await conn.run_sync(inspect) == {
                "sessions": ["agent", "user_id", "session_id"],
                "messages": ["agent", "user_id", "session_id", "seq"],
            }
            t = sa.table(f"{prefix}sessions", sa.column("agent"), sa.column("session_id_full"), sa.column("revision"))
            rows = (await conn.execute(sa.select(t.c.agent, t.c.session_id_full, t.c.revision))).all()
        assert sorted((bytes(a).decode() if isinstance(a, bytes) else a, f or "", r) for a, f, r in rows) == [
            ("", "", 2),
            ("bot", "", 3),
            ("bot", "z" * 300, 2),
        ], "moved rows keep their revision; a long id stays hashed with its original beside it"
        state = await store.load("alice", "s1", agent="bot")
        assert state is not None and [m.text for m in state.messages] == ["hello", "again", "old way"]
        state = await store.load("alice", "z" * 300, agent="bot")
        assert state is not None and [m.text for m in state.messages] == ["long"]
        listed = {(i.agent, i.session_id) for i in await store.list_sessions("alice")}
        assert listed == {("bot", "s1"), ("bot", "z" * 300), ("", "plain")}
        assert await store.migrate_legacy("bot", all_unprefixed=True) == 1
        assert store.has_legacy_sessions is False
    finally:
        for s in stores:
            await s.close()
    async with SqlStateStore(db_url, table_prefix=prefix) as again:  # migrated tables are left as they are
        state = await again.load("alice", "plain", agent="bot")
        assert state is not None and state.revision == 2 and again.has_legacy_sessions is False


async def test_agents_are_part_of_the_key(db_url: str, store: SqlStateStore) -> None:
    long_agent = "a" * 101  # past the agent column: stored as its hash, with the original beside it
    await store.append("u", "s", [Msg.user("one")], expected_revision=0, agent="alpha")
    await store.append("u", "s", [Msg.user("two")], expected_revision=0, agent=long_agent)
    t = sa.table(f"{store.table_prefix}sessions", sa.column("agent"), sa.column("agent_full"))
    async with store.engine.connect() as conn:
        rows = (await conn.execute(sa.select(t.c.agent, t.c.agent_full))).all()
    agents = sorted((bytes(a).decode() if isinstance(a, bytes) else a, full) for a, full in rows)
    assert agents[0] == ("alpha", None)
    assert agents[1][0].startswith("sha256:") and agents[1][1] == long_agent
    assert {i.agent for i in await store.list_sessions("u")} == {"alpha", long_agent}
    state = await store.load("u", "s", agent=long_agent)
    assert state is not None and state.agent == long_agent and state.messages[0].text == "two"


# -- compare-and-set ------------------------------------------------------------------------------


async def test_concurrent_appends_from_two_instances(db_url: str, prefix: str) -> None:
    a = SqlStateStore(db_url, table_prefix=prefix)
    b = SqlStateStore(db_url, table_prefix=prefix)
    accepted: list[int] = []
    conflicts = 0

    async def writer(store: SqlStateStore, tag: str) -> None:
        nonlocal conflicts
        for i in range(5):
            while True:
                state = await store.load("u", "race")
                try:
                    rev = await store.append(
                        "u", "race", [Msg.user(f"{tag}-{i}")], expected_revision=0 if state is None else state.revision
                    )
                except StateConflictError:
                    conflicts += 1
                    continue
                accepted.append(rev)
                break

    try:
        await asyncio.gather(*(writer(s, f"{name}{k}") for k in range(6) for name, s in (("a", a), ("b", b))))
        state = await a.load("u", "race")
        assert state is not None
        assert sorted(accepted) == list(range(1, 61)), "every accepted write must get its own revision"
        assert state.revision == 60 and len(state.messages) == 60, "no accepted message may be lost"
        texts = [m.text for m in state.messages]
        for name in ("a", "b"):
            for k in range(6):
                mine = [t for t in texts if t.startswith(f"{name}{k}-")]
                assert mine == [f"{name}{k}-{i}" for i in range(5)], "each writer's messages keep their order"
        assert conflicts > 0, "the writers were meant to race"
    finally:
        await a.close()
        await b.close()


async def test_save_races_and_conflicts(store: SqlStateStore) -> None:
    base = [Msg.user(f"m{i}") for i in range(3)]
    revs = await asyncio.gather(*(store.save(AgentState(user_id="u", session_id="s", messages=base)) for _ in range(8)))
    assert sorted(revs) == list(range(1, 9)), "unconditional saves serialise"
    with pytest.raises(StateConflictError, match="at revision 8, not 3"):
        await store.save(AgentState(user_id="u", session_id="s"), expected_revision=3)
    with pytest.raises(StateConflictError, match="at revision 8, not 0"):
        await store.append("u", "s", [], expected_revision=0)
    with pytest.raises(InvalidValueError):  # a revision is never negative: a bug, not a conflict
        await store.append("u", "s", [], expected_revision=-1)
    with pytest.raises(UserError, match="unknown AgentState field"):
        await store.append("u", "s", [], fields={"nope": 1}, expected_revision=8)
    state = await store.load("u", "s")
    assert state is not None and state.messages == base and state.revision == 8


# -- session locks --------------------------------------------------------------------------------


async def test_lock_is_exclusive_across_instances(db_url: str, prefix: str) -> None:
    stores = [SqlStateStore(db_url, table_prefix=prefix, lock_poll=0.01) for _ in range(2)]
    inside = 0
    peak = 0
    entries = 0

    async def worker(store: SqlStateStore) -> None:
        nonlocal inside, peak, entries
        for _ in range(5):
            async with store.session_lock("u", "shared", timeout=30):
                inside += 1
                entries += 1
                peak = max(peak, inside)
                await asyncio.sleep(0.005)
                inside -= 1

    try:
        await asyncio.gather(*(worker(s) for s in stores for _ in range(3)))
        assert entries == 30 and peak == 1, "only one holder at a time, whichever instance it uses"
        async with stores[0].session_lock("u", "shared"), stores[1].session_lock("u", "other", timeout=1):
            pass  # different sessions do not block each other
    finally:
        for s in stores:
            await s.close()


async def test_busy_lock_times_out_then_frees(db_url: str, prefix: str) -> None:
    a = SqlStateStore(db_url, table_prefix=prefix)
    b = SqlStateStore(db_url, table_prefix=prefix)
    try:
        async with a.session_lock("u", "s"):
            with pytest.raises(SessionBusyError, match="session 's' of user 'u' is busy"):
                async with b.session_lock("u", "s", timeout=0.2):
                    raise AssertionError("acquired a held lock")
            with pytest.raises(SessionBusyError):
                async with b.session_lock("u", "s", timeout=0):
                    raise AssertionError("acquired a held lock")
        async with b.session_lock("u", "s", timeout=5):
            pass
        async with b.session_lock("u", "fresh", timeout=0):  # a free lock needs no waiting at all
            pass
    finally:
        await a.close()
        await b.close()


async def test_exhausted_lock_pool_is_busy_not_stuck(db_url: str, prefix: str) -> None:
    store = SqlStateStore(db_url, table_prefix=prefix, pool_size=1)  # lock pool: 1 + 2 overflow
    release = asyncio.Event()
    all_in = asyncio.Event()
    entered = 0

    async def holder(session: str) -> None:
        nonlocal entered
        async with store.session_lock("u", session):
            entered += 1
            if entered == 3:
                all_in.set()
            await release.wait()

    try:
        holders = [asyncio.ensure_future(holder(f"s{i}")) for i in range(3)]
        await asyncio.wait_for(all_in.wait(), 10)  # the three holders use up the lock pool
        with pytest.raises(SessionBusyError, match="no session-lock connection"):
            async with store.session_lock("u", "other", timeout=0.1):
                pass
        waiting = asyncio.ensure_future(holder("cancelled"))
        await asyncio.sleep(0.1)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        release.set()
        await asyncio.gather(*holders)
        async with store.session_lock("u", "other", timeout=5), store.session_lock("u", "cancelled", timeout=5):
            pass
    finally:
        await store.close()


async def test_waiting_process_is_not_starved(db_url: str, prefix: str) -> None:
    """A process releasing the lock cannot take it back while another process waits in line."""
    a = SqlStateStore(db_url, table_prefix=prefix, lock_poll=0.01)
    b = SqlStateStore(db_url, table_prefix=prefix, lock_poll=0.01)
    order: list[str] = []

    holding = asyncio.Event()

    async def hold(store: SqlStateStore, tag: str, seconds: float) -> None:
        async with store.session_lock("u", "s"):
            order.append(tag)
            holding.set()
            await asyncio.sleep(seconds)

    try:
        first = asyncio.ensure_future(hold(a, "a0", 0.3))
        await asyncio.wait_for(holding.wait(), 10)  # a0 holds the lock before anyone else asks
        # a's next calls queue in-process; b's call arrives while a0 still holds the lock
        queued = [asyncio.ensure_future(hold(a, f"a{i}", 0.01)) for i in range(1, 6)]
        await asyncio.gather(first, hold(b, "b", 0.01), *queued)
        assert order[:2] == ["a0", "b"], f"process b must get the next turn, before a's queue: {order}"
    finally:
        await a.close()
        await b.close()


async def _kill_lock_holder(db_url: str, store: SqlStateStore) -> None:
    params = store._lock_params("", "u", "s")
    admin = create_async_engine(db_url, isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            if _is_pg(db_url):
                key = params["main"] & 0xFFFFFFFFFFFFFFFF
                pid = (
                    await conn.execute(
                        sa.text(
                            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
                            " AND classid = :c AND objid = :o AND objsubid = 1"
                        ),
                        {"c": key >> 32, "o": key & 0xFFFFFFFF},
                    )
                ).scalar_one()
                assert (await conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})).scalar() is True
            else:
                owner = (await conn.execute(sa.text("SELECT IS_USED_LOCK(:n)"), {"n": params["main"]})).scalar_one()
                await conn.execute(sa.text(f"KILL {int(owner)}"))
    finally:
        await admin.dispose()


async def test_holder_whose_connection_dies_releases(
    db_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    a = SqlStateStore(db_url, table_prefix=prefix)
    b = SqlStateStore(db_url, table_prefix=prefix, lock_poll=0.01)
    try:
        with caplog.at_level(logging.WARNING, logger="agentrt.state"):
            async with a.session_lock("u", "s"):
                with pytest.raises(SessionBusyError):
                    async with b.session_lock("u", "s", timeout=0.1):
                        pass
                await _kill_lock_holder(db_url, a)
                async with b.session_lock("u", "s", timeout=10):
                    pass  # the server freed the dead connection's lock
            # a's exit noticed the loss and logged it instead of failing the call
        assert any("session 's' of user 'u'" in r.getMessage() for r in caplog.records)
        async with a.session_lock("u", "s", timeout=5):  # a keeps working with a fresh connection
            await a.append("u", "s", [Msg.user("after")], expected_revision=0)
    finally:
        await a.close()
        await b.close()


async def test_cancellation_releases_locks(db_url: str, prefix: str) -> None:
    a = SqlStateStore(db_url, table_prefix=prefix, lock_poll=0.01)
    b = SqlStateStore(db_url, table_prefix=prefix, lock_poll=0.01)
    c = SqlStateStore(db_url, table_prefix=prefix, lock_poll=0.01)
    entered = asyncio.Event()

    async def holder() -> None:
        async with a.session_lock("u", "s"):
            entered.set()
            await asyncio.sleep(3600)

    async def waiter(store: SqlStateStore) -> None:
        async with store.session_lock("u", "s"):
            raise AssertionError("must not get the lock")

    try:
        held = asyncio.ensure_future(holder())
        await entered.wait()
        waiting = asyncio.ensure_future(waiter(b))  # b gets in line (takes the "want" lock)
        await asyncio.sleep(0.2)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        held.cancel()
        with pytest.raises(asyncio.CancelledError):
            await held
        # neither the cancelled holder nor the cancelled waiter left anything behind
        async with c.session_lock("u", "s", timeout=2):
            pass
        async with b.session_lock("u", "s", timeout=2):
            pass
    finally:
        for s in (a, b, c):
            await s.close()


async def test_lock_with_a_callers_engine(db_url: str, prefix: str) -> None:
    engine = create_async_engine(db_url, pool_size=4)
    try:
        async with SqlStateStore(engine=engine, table_prefix=prefix) as s:
            async with s.session_lock("u", "s", timeout=5):
                state = await s.load("u", "s")
                await s.append("u", "s", [Msg.user("hi")], expected_revision=0 if state is None else state.revision)
            other = SqlStateStore(db_url, table_prefix=prefix)
            async with other.session_lock("u", "s", timeout=5):
                pass
            await other.close()
        async with engine.connect() as conn:  # not disposed by the store
            assert (await conn.execute(sa.text("SELECT 1"))).scalar() == 1
    finally:
        await engine.dispose()


# -- two processes --------------------------------------------------------------------------------

_WORKER = """
import asyncio, json, sys
from agentrt.errors import StateConflictError
from agentrt.message import Msg
from agentrt.state.stores.sql import SqlStateStore

async def main(url, prefix, tag, calls):
    conflicts = 0
    async with SqlStateStore(url, table_prefix=prefix) as store:
        await store.create_tables()
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        for i in range(calls):
            async with store.session_lock("u", "shared", timeout=60):
                state = await store.load("u", "shared")
                try:
                    await store.append(
                        "u", "shared", [Msg.user(f"{tag}-{i}")],
                        expected_revision=0 if state is None else state.revision,
                    )
                except StateConflictError:
                    conflicts += 1
    print(json.dumps({"conflicts": conflicts}), flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
"""


@pytest.mark.slow
async def test_two_processes_share_one_session(db_url: str, store: SqlStateStore, tmp_path: Path) -> None:
    calls = 100
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    assert await store.append("u", "shared", [], expected_revision=0) == 1
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            str(script),
            db_url,
            store.table_prefix,
            tag,
            str(calls),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        for tag in ("p", "q")
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            if line.strip() != b"ready":
                assert proc.stderr is not None
                raise AssertionError(f"worker failed to start: {line!r} {await proc.stderr.read()!r}")
        for proc in procs:  # start both at once
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            await proc.stdin.drain()
        outputs = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in procs)), 100)
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    results: list[dict[str, Any]] = []
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err.decode()
        results.append(json.loads(out.decode().strip().splitlines()[-1]))
    assert [r["conflicts"] for r in results] == [0, 0], "the lock serialises the calls: no conflicts"
    state = await store.load("u", "shared")
    assert state is not None
    assert state.revision == 2 * calls + 1
    texts = [m.text for m in state.messages]
    assert len(texts) == 2 * calls
    for tag in ("p", "q"):
        assert [t for t in texts if t.startswith(f"{tag}-")] == [f"{tag}-{i}" for i in range(calls)]


# -- errors ---------------------------------------------------------------------------------------


def _full_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


async def test_bad_credentials_do_not_leak_the_password(db_url: str, prefix: str) -> None:
    secret = "s3cr3t-Pa55"
    if _is_pg(db_url):
        bad = f"postgresql+asyncpg://nobody_{prefix}:{secret}@127.0.0.1:5432/test"
    else:
        bad = f"mysql+asyncmy://root:{secret}@127.0.0.1:3306/test"
    store = SqlStateStore(bad, table_prefix=prefix)
    assert secret not in repr(store)
    with pytest.raises(StateStoreError) as info:
        await store.load("u", "s")
    message = str(info.value)
    assert "127.0.0.1" in message and "'test'" in message, message
    assert secret not in _full_text(info.value)
    with pytest.raises(StateStoreError) as info:
        async with store.session_lock("u", "s", timeout=5):
            pass
    assert secret not in _full_text(info.value)
    await store.close()


async def test_unreachable_host(db_url: str, prefix: str) -> None:
    secret = "another-s3cret"
    scheme = "postgresql+asyncpg" if _is_pg(db_url) else "mysql+asyncmy"
    async with SqlStateStore(f"{scheme}://root:{secret}@127.0.0.1:1/test", table_prefix=prefix) as store:
        with pytest.raises(StateStoreError, match=r"127\.0\.0\.1:1") as info:
            await store.list_sessions("u")
        assert secret not in _full_text(info.value)


def test_invalid_urls() -> None:
    with pytest.raises(StateStoreError, match="invalid SQL state store URL") as info:
        SqlStateStore("::not a url:pw::")
    assert "pw" not in str(info.value)
    with pytest.raises(StateStoreError, match="async"):
        SqlStateStore("postgresql+psycopg2://u:hidden@h/db")
    with pytest.raises(StateStoreError, match="supports"):
        SqlStateStore("sqlite:///x.db")
    with pytest.raises(UserError):
        SqlStateStore("postgresql://h/db", table_prefix="bad-prefix;")
    with pytest.raises(UserError):
        SqlStateStore()
    with pytest.raises(UserError, match="not both"):
        SqlStateStore("postgresql://h/db", engine=create_async_engine("postgresql+asyncpg://h/db"))
    store = SqlStateStore("postgresql://u:hidden@h/db")  # the default async driver is filled in
    assert "asyncpg" in repr(store) and "hidden" not in repr(store)


async def test_closed_store_refuses_work(db_url: str, prefix: str) -> None:
    store = SqlStateStore(db_url, table_prefix=prefix)
    await store.close()
    await store.close()
    with pytest.raises(UserError, match="closed"):
        await store.load("u", "s")
