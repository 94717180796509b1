"""PostgresLongTermMemory against a real PostgreSQL: the shared contract, vectors, replicas, an agent."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from agentrt import ReActAgent, RuntimeContext
from agentrt.errors import UserError
from agentrt.memory import PostgresLongTermMemory
from agentrt.memory._text import STOP_WORDS
from agentrt.model import ScriptedModel
from agentrt.state import InMemoryStateStore
from agentrt.testing import FakeClock, check_long_term_memory

pytestmark = pytest.mark.integration


def trigram_embed(texts: list[str]) -> list[list[float]]:
    """A stand-in for an embedding model: hashed character trigrams of the content words."""
    out: list[list[float]] = []
    for text in texts:
        vector = [0.0] * 64
        for word in text.lower().split():
            word = "".join(ch for ch in word if ch.isalnum())
            if word and word not in STOP_WORDS:
                padded = f" {word} "
                for i in range(len(padded) - 2):
                    vector[zlib.crc32(padded[i : i + 3].encode()) % 64] += 1.0
        out.append(vector)
    return out


@pytest.fixture
async def prefix(postgres_url: str, unique: str) -> AsyncIterator[str]:
    """A table prefix owned by the test; its table is dropped at the end."""
    name = f"m_{unique}_"
    yield name
    async with PostgresLongTermMemory(postgres_url, table_prefix=name) as cleaner:
        await cleaner.drop_tables()


async def test_contract(postgres_url: str, prefix: str) -> None:
    await check_long_term_memory(
        lambda **kw: PostgresLongTermMemory(postgres_url, table_prefix=prefix, **kw), persistent=True
    )


async def test_contract_with_embeddings(postgres_url: str, prefix: str) -> None:
    await check_long_term_memory(
        lambda **kw: PostgresLongTermMemory(postgres_url, table_prefix=prefix, embed=trigram_embed, **kw),
        persistent=True,
    )


async def test_replicas_share_items_and_keep_the_cap_under_concurrency(postgres_url: str, prefix: str) -> None:
    clock = FakeClock()
    a = PostgresLongTermMemory(postgres_url, table_prefix=prefix, cap=5, clock=clock)
    b = PostgresLongTermMemory(postgres_url, table_prefix=prefix, cap=5, clock=clock)
    try:
        await asyncio.gather(*(m.record("u", [f"fact {i} about topic {i}"]) for i, m in enumerate([a, b] * 10)))
        assert len(await a.list("u")) == 5 == len(await b.list("u")), "the cap holds across replicas"
        (item,) = await a.record("v", ["shared between replicas"])
        assert [i.id for i in await b.retrieve("v", "replicas")] == [item.id]
    finally:
        await a.close()
        await b.close()


async def test_pgvector_is_used_only_when_installed(postgres_url: str, prefix: str) -> None:
    memory = PostgresLongTermMemory(postgres_url, table_prefix=prefix, embed=trigram_embed)
    try:
        await memory.create_tables()
        engine = create_async_engine(postgres_url)
        async with engine.connect() as conn:
            installed = (await conn.execute(sa.text("SELECT 1 FROM pg_extension WHERE extname = 'vector'"))).first()
        await engine.dispose()
        assert memory.pgvector is (installed is not None)
        if installed is None:
            pytest.skip("the pgvector extension is not installed: vectors are scanned in a worker thread")
        await memory.record("u", ["The user loves espresso", "The user lives in Lyon"])
        assert (await memory.retrieve("u", "espresso", k=1))[0].text == "The user loves espresso"
    finally:
        await memory.close()


async def test_an_agent_remembers_across_sessions(postgres_url: str, prefix: str) -> None:
    memory = PostgresLongTermMemory(postgres_url, table_prefix=prefix)
    try:
        model = ScriptedModel(["Noted.", "Lyon, as you told me."])
        agent = ReActAgent(
            "bot",
            "Be brief.",
            model=model,
            state_store=InMemoryStateStore(),
            long_term_memory=memory,
            memory_mode="static",
        )
        await memory.record("alice", ["The user lives in Lyon"])
        await agent.call("hi", RuntimeContext(user_id="alice", session_id="one"))
        await agent.call("Where do I live?", RuntimeContext(user_id="alice", session_id="two"))
        system = model.requests[1].messages[0].text
        assert "<long_term_memory>" in system and "The user lives in Lyon" in system
    finally:
        await memory.close()


def test_url_validation() -> None:
    with pytest.raises(UserError):
        PostgresLongTermMemory("mysql+asyncmy://root@127.0.0.1/test")
    with pytest.raises(UserError):
        PostgresLongTermMemory("postgresql://x@127.0.0.1/test", table_prefix="bad-prefix")
