"""Retention against real PostgreSQL, MariaDB and Redis: `prune`, `idle_ttl`, `delete_user`, `forget_user`.

Checked by side effect: rows and keys gone from the database (a raw query or a raw Redis client),
other users' data still there, sessions locked by another store instance (another process's
connection) left alone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from agentrt.errors import UserError
from agentrt.knowledge import Knowledge
from agentrt.knowledge.stores.postgres import PostgresKnowledgeStore
from agentrt.memory import PostgresLongTermMemory
from agentrt.message import Msg
from agentrt.retention import ForgetReport, forget_user
from agentrt.state.pending import Pending, PendingCall
from agentrt.state.stores.redis import RedisStateStore, _id_token
from agentrt.state.stores.sql import SqlStateStore
from agentrt.testing import check_state_store

pytestmark = pytest.mark.integration

DAY = 86_400.0


@pytest.fixture(params=["postgres", "mysql"])
def db_url(request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


@pytest.fixture
async def prefix(db_url: str, unique: str) -> AsyncIterator[str]:
    """A table prefix owned by the test; its tables are dropped at the end."""
    name = f"r_{unique}_"
    yield name
    async with SqlStateStore(db_url, table_prefix=name) as cleaner:
        await cleaner.drop_tables()


@pytest.fixture
async def redis_prefix(redis_url: str, unique: str) -> AsyncIterator[str]:
    """A key prefix owned by one test; every key under it is deleted afterwards."""
    name = f"r-{unique}"
    yield name
    client = aioredis.from_url(redis_url)
    try:
        keys = [key async for key in client.scan_iter(match=f"{name}:*", count=1000)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


@pytest.fixture
async def raw_redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(redis_url)
    yield client
    await client.aclose()


async def _seed(store: Any, user: str, session: str, agent: str = "", n: int = 3) -> None:
    pending = Pending(reply_id="r", calls=(PendingCall(id="c", name="search", input={}, kind="confirm"),))
    await store.append(
        user,
        session,
        [Msg.user(f"{session} {i}") for i in range(n)],
        fields={"pending": pending},
        expected_revision=0,
        agent=agent,
    )


async def _sql(url: str, statement: str, **params: Any) -> list[tuple[Any, ...]]:
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            result = await conn.execute(sa.text(statement), params)
            return [tuple(row) for row in result.all()] if result.returns_rows else []
    finally:
        await engine.dispose()


def _text(value: Any) -> str:
    return bytes(value).decode() if isinstance(value, (bytes, bytearray, memoryview)) else str(value)


async def _owners(url: str, prefix: str) -> dict[str, list[tuple[str, str, str]]]:
    """(user, session, agent) of every session row, and of every message row, read with a raw query."""
    out = {}
    for table in ("sessions", "messages"):
        rows = await _sql(url, f"SELECT DISTINCT user_id, session_id, agent FROM {prefix}{table}")
        out[table] = sorted((_text(u), _text(s), _text(a)) for u, s, a in rows)
    return out


async def _age(url: str, prefix: str, user: str, session: str, agent: str, at: float) -> None:
    binary = not url.startswith("postgresql")  # MariaDB keys are VARBINARY (UTF-8 bytes)
    key = {k: v.encode() if binary else v for k, v in {"u": user, "s": session, "a": agent}.items()}
    await _sql(
        url,
        f"UPDATE {prefix}sessions SET updated_at = :t WHERE user_id = :u AND session_id = :s AND agent = :a",
        t=at,
        **key,
    )


# -- the contract, with the idle expiry --------------------------------------------------------------


async def test_contract_sql_with_idle_ttl(db_url: str, prefix: str) -> None:
    await check_state_store(
        lambda: SqlStateStore(db_url, table_prefix=prefix),
        persistent=True,
        idle_ttl_factory=lambda ttl: SqlStateStore(db_url, table_prefix=prefix, idle_ttl=ttl),
    )


@pytest.mark.parametrize("option", ["idle_ttl", "ttl"])
async def test_contract_redis_with_idle_ttl(redis_url: str, redis_prefix: str, option: str) -> None:
    await check_state_store(
        lambda: RedisStateStore(redis_url, prefix=redis_prefix),
        persistent=True,
        idle_ttl_factory=lambda ttl: (
            RedisStateStore(redis_url, prefix=redis_prefix, idle_ttl=ttl)
            if option == "idle_ttl"
            else RedisStateStore(redis_url, prefix=redis_prefix, ttl=ttl)
        ),
    )


def test_redis_ttl_and_idle_ttl_are_one_setting(redis_url: str) -> None:
    store = RedisStateStore(redis_url, idle_ttl=60)
    assert store.ttl == store.idle_ttl == 60
    assert RedisStateStore(redis_url, ttl=5, idle_ttl=5).idle_ttl == 5
    with pytest.raises(UserError, match="not both"):
        RedisStateStore(redis_url, ttl=5, idle_ttl=6)
    with pytest.raises(UserError, match="idle_ttl"):
        RedisStateStore(redis_url, idle_ttl=0)


# -- SQL: by the rows --------------------------------------------------------------------------------


async def test_sql_prune_deletes_rows_and_skips_sessions_locked_by_another_process(db_url: str, prefix: str) -> None:
    now = time.time()
    long_user = "u" * 300  # hashed in the key columns
    seeded = [("alice", "old", ""), ("alice", "old", "bot"), ("alice", "new", ""), ("bob", "locked", "")]
    seeded += [(long_user, "old", "bot")]
    async with (
        SqlStateStore(db_url, table_prefix=prefix) as store,
        SqlStateStore(db_url, table_prefix=prefix) as other_process,
    ):
        for user, session, agent in seeded:
            await _seed(store, user, session, agent)
        for user, session, agent in [("alice", "old", ""), ("alice", "old", "bot"), ("bob", "locked", "")]:
            await _age(db_url, prefix, user, session, agent, now - 40 * DAY)
        hashed = (await _sql(db_url, f"SELECT user_id FROM {prefix}sessions WHERE user_id_full IS NOT NULL"))[0][0]
        await _age(db_url, prefix, _text(hashed), "old", "bot", now - 40 * DAY)
        async with other_process.session_lock("bob", "locked"):  # its own lock connection
            assert await store.prune(30 * DAY, dry_run=True) == 3
            assert len((await _owners(db_url, prefix))["sessions"]) == 5, "a dry run deletes nothing"
            assert await store.prune(30 * DAY, agent="bot") == 2
            assert await store.prune(30 * DAY) == 1
            assert await store.prune(30 * DAY) == 0, "the session locked by another process stays"
        owners = await _owners(db_url, prefix)
        expected = [("alice", "new", ""), ("bob", "locked", "")]
        assert owners == {"sessions": expected, "messages": expected}, owners
        assert await store.prune(30 * DAY) == 1, "unlocked, it goes"
        state = await other_process.load("alice", "new")
        assert state is not None and [m.text for m in state.messages] == ["new 0", "new 1", "new 2"]


async def test_sql_idle_sessions_read_as_missing_and_their_rows_go(db_url: str, prefix: str) -> None:
    now = time.time()
    async with SqlStateStore(db_url, table_prefix=prefix) as plain:
        for user, session in [("u", "read"), ("u", "listed"), ("u", "fresh"), ("v", "locked")]:
            await _seed(plain, user, session)
        for user, session in [("u", "read"), ("u", "listed"), ("v", "locked")]:
            await _age(db_url, prefix, user, session, "", now - 2 * DAY)
        async with SqlStateStore(db_url, table_prefix=prefix, idle_ttl=DAY) as store:
            assert await store.load("u", "read") is None
            assert [s.session_id for s in await store.list_sessions("u")] == ["fresh"]
            owners = await _owners(db_url, prefix)
            assert owners["sessions"] == owners["messages"] == [("u", "fresh", ""), ("v", "locked", "")]
            async with plain.session_lock("v", "locked"):
                assert await store.list_sessions("v") == [], "hidden"
                assert len((await _owners(db_url, prefix))["sessions"]) == 2, "but a locked one is not deleted"


async def test_sql_delete_user_leaves_no_row_of_the_user(db_url: str, prefix: str) -> None:
    long_user = "é" * 300
    async with SqlStateStore(db_url, table_prefix=prefix) as store:
        for user in ("alice", long_user):
            for agent in ("", "bot", "x" * 150):
                await _seed(store, user, "s1", agent)
                await _seed(store, user, "y" * 300, agent)
        await _seed(store, "alicex", "s1")
        async with store.session_lock("alice", "s1"):
            assert await store.delete_user("alice") == 6
        assert await store.delete_user(long_user) == 6
        assert await store.delete_user("alice") == 0
    owners = await _owners(db_url, prefix)
    assert owners == {"sessions": [("alicex", "s1", "")], "messages": [("alicex", "s1", "")]}, owners


async def test_sql_prune_index_is_added_to_older_tables(db_url: str, prefix: str) -> None:
    async with SqlStateStore(db_url, table_prefix=prefix) as store:
        await _seed(store, "u", "s")
    drop = f"DROP INDEX {prefix}sessions_by_updated"
    await _sql(db_url, drop if db_url.startswith("postgresql") else f"{drop} ON {prefix}sessions")

    async def indexes() -> set[str]:
        engine = create_async_engine(db_url)
        try:
            async with engine.connect() as conn:
                return await conn.run_sync(
                    lambda sync: {str(ix["name"]) for ix in sa.inspect(sync).get_indexes(f"{prefix}sessions")}
                )
        finally:
            await engine.dispose()

    assert f"{prefix}sessions_by_updated" not in await indexes()
    async with SqlStateStore(db_url, table_prefix=prefix) as store:
        assert await store.prune(DAY) == 0
    assert f"{prefix}sessions_by_updated" in await indexes()


# -- Redis: by the keys ------------------------------------------------------------------------------


async def _keys(client: aioredis.Redis, pattern: str) -> list[str]:
    return sorted([key.decode() async for key in client.scan_iter(match=pattern, count=1000)])


async def test_redis_delete_user_leaves_no_key_of_the_user(
    redis_url: str, redis_prefix: str, raw_redis: aioredis.Redis
) -> None:
    async with (
        RedisStateStore(redis_url, prefix=redis_prefix) as store,
        RedisStateStore(redis_url, prefix=redis_prefix) as other_process,
    ):
        for agent in ("", "bot", "x" * 150):
            await _seed(store, "alice", "s1", agent)
            await _seed(store, "alice", "y" * 300, agent)
            async with store.session_lock("alice", "s1", agent=agent):
                pass  # leaves a fencing counter behind
        await _seed(store, "bob", "s1", "bot")
        await _seed(store, "alice", "earlier")
        async with store.session_lock("alice", "earlier"):
            pass
        await store.delete("alice", "earlier")  # its fencing counter stays behind (a delete keeps it)
        assert await _keys(raw_redis, f"{redis_prefix}:*:fence") != []
        async with other_process.session_lock("alice", "y" * 300, agent="bot"):
            assert await store.delete_user("alice") == 6, "locked sessions go too"
            left = await _keys(raw_redis, f"{redis_prefix}:{{{_id_token('alice')}}}*")
            locked = other_process._session_base("bot", "alice", "y" * 300)
            assert left == [f"{locked}:fence", f"{locked}:lock"], f"only the held lock is left: {left}"
        assert await _keys(raw_redis, f"{redis_prefix}:{{{_id_token('alice')}}}:*:h") == []
        assert await store.delete_user("alice") == 0
        bob = await store.load("bob", "s1", agent="bot")
        assert bob is not None and len(bob.messages) == 3
        assert await _keys(raw_redis, f"{redis_prefix}:{{{_id_token('bob')}}}*") != []
    left = await _keys(raw_redis, f"{redis_prefix}:{{{_id_token('alice')}}}*")
    assert left == [], f"the second call, with the lock free, leaves no key named after the user: {left}"


async def test_redis_prune_across_users_skips_sessions_locked_by_another_process(
    redis_url: str, redis_prefix: str, raw_redis: aioredis.Redis
) -> None:
    async with (
        RedisStateStore(redis_url, prefix=redis_prefix) as store,
        RedisStateStore(redis_url, prefix=redis_prefix) as other_process,
    ):
        for user, agent in [("alice", ""), ("bob", "bot"), ("carol", "bot"), ("dave", "")]:
            await _seed(store, user, "old", agent)
        await asyncio.sleep(0.3)
        middle = time.time()
        await asyncio.sleep(0.2)
        await _seed(store, "alice", "new")
        async with other_process.session_lock("dave", "old"):
            assert await store.prune(time.time() - middle, dry_run=True) == 3
            assert await store.prune(time.time() - middle, agent="bot", limit=1) == 1
            assert await store.prune(time.time() - middle) == 2
        hashes = await _keys(raw_redis, f"{redis_prefix}:*:h")
        mine = {f"{store._session_base('', 'alice', 'new')}:h", f"{store._session_base('', 'dave', 'old')}:h"}
        assert set(hashes) == mine, hashes
        assert await _keys(raw_redis, f"{redis_prefix}:*:m") == sorted(key[:-2] + ":m" for key in mine)
        assert await _keys(raw_redis, f"{redis_prefix}:*:agents") == [], "agents without sessions leave the set"
        indexes = await _keys(raw_redis, f"{redis_prefix}:*index")
        assert indexes == sorted([store._index_key("", "alice"), store._index_key("", "dave")])


# -- long-term memory and knowledge in PostgreSQL, and forget_user over them -----------------------------


@pytest.fixture
async def pg_stores(postgres_url: str, unique: str) -> AsyncIterator[tuple[SqlStateStore, Any, Any]]:
    state = SqlStateStore(postgres_url, table_prefix=f"fs_{unique}_")
    memory = PostgresLongTermMemory(postgres_url, table_prefix=f"fm_{unique}_", ttl=None)
    knowledge = PostgresKnowledgeStore(postgres_url, table_prefix=f"fk_{unique}")
    yield state, memory, knowledge
    await state.drop_tables()
    await memory.drop_tables()
    await knowledge.drop_tables()
    for store in (state, memory, knowledge):
        await store.close()


async def test_forget_user_on_postgres_leaves_no_row_of_the_user(
    postgres_url: str, unique: str, pg_stores: tuple[SqlStateStore, Any, Any]
) -> None:
    state, memory, knowledge = pg_stores
    for user in ("alice", "bob"):
        await _seed(state, user, "s1")
        await _seed(state, user, "s2", "bot")
        await memory.record(user, [f"{user} likes tea", f"{user} lives in Lyon"])
        for kb in ("notes", "mail"):
            await Knowledge(kb, store=knowledge, namespace=user).add_text(f"{user}'s {kb}: the quarterly plan")
    report = await forget_user("alice", state=state, memory=memory, knowledge=knowledge)
    assert report == ForgetReport("alice", sessions=2, memories=2, knowledge_documents=2)
    for sql in (
        f"SELECT DISTINCT user_id FROM fs_{unique}_sessions",
        f"SELECT DISTINCT user_id FROM fs_{unique}_messages",
        f"SELECT DISTINCT user_id FROM fm_{unique}_memories",
        f"SELECT DISTINCT namespace FROM fk_{unique}_documents",
        f"SELECT DISTINCT namespace FROM fk_{unique}_chunks",
    ):
        assert await _sql(postgres_url, sql) == [("bob",)], sql
    assert await forget_user("alice", state=state, memory=memory, knowledge=knowledge) == ForgetReport("alice")


async def test_postgres_memory_delete_user_waits_for_a_record_in_flight(
    pg_stores: tuple[SqlStateStore, Any, Any],
) -> None:
    _, memory, _ = pg_stores
    await memory.record("alice", ["first fact"])
    results = await asyncio.gather(
        *(memory.record("alice", [f"fact {i}"]) for i in range(5)), memory.delete_user("alice")
    )
    deleted = results[-1]
    left = await memory.list("alice")
    assert deleted + len(left) == 6, "every item is either deleted or recorded after the deletion"


async def test_forget_user_with_redis_sessions(redis_url: str, redis_prefix: str, raw_redis: aioredis.Redis) -> None:
    async with RedisStateStore(redis_url, prefix=redis_prefix) as state:
        for user in ("alice", "bob"):
            await _seed(state, user, "s1", "bot")
        report = await forget_user("alice", state=state)
        assert report.sessions == 1
        assert await _keys(raw_redis, f"{redis_prefix}:{{{_id_token('alice')}}}*") == []
        assert await state.load("bob", "s1", agent="bot") is not None
