"""Two OS processes drive one session through a shared store: calls serialise, nothing is lost."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrt.state import store_from_url

ROOT = Path(__file__).parents[2]
WORKER = Path(__file__).with_name("agent_worker.py")
CALLS = 100


@pytest.fixture(params=["redis", "postgres"])
def shared_url(request: pytest.FixtureRequest, unique: str) -> tuple[str, str]:
    if request.param == "redis":
        return request.getfixturevalue("redis_url"), f"t-shared-{unique}"
    return request.getfixturevalue("postgres_url"), f"t_shared_{unique}_"


def test_two_processes_one_session(shared_url: tuple[str, str]) -> None:
    url, prefix = shared_url
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), url, prefix, "one-session", tag, str(CALLS)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in ("A", "B")
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]

    async def check() -> None:
        option = {"prefix": prefix} if url.startswith("redis") else {"table_prefix": prefix}
        store = store_from_url(url, **option)
        try:
            state = await store.load("two-procs", "one-session", agent="shared")
            assert state is not None
            texts = [m.text for m in state.messages]
            assert len(texts) == 4 * CALLS, "every call's input and reply are stored"
            # calls never interleave: each input is followed directly by its own reply
            for question, answer in zip(texts[::2], texts[1::2], strict=True):
                assert answer == f"re: {question}"
            for tag in ("A", "B"):  # each process's calls in its own order
                mine = [t for t in texts[::2] if t.startswith(f"{tag}-")]
                assert mine == [f"{tag}-{i}" for i in range(CALLS)]
            assert state.revision >= 2 * 2 * CALLS  # input and reply checkpointed for every call
        finally:
            if url.startswith("redis"):
                client = getattr(store, "_client", None)
                del client
            elif hasattr(store, "drop_tables"):
                await store.drop_tables()
            await store.close()

    asyncio.run(check())
    if url.startswith("redis"):
        asyncio.run(_drop_redis(prefix))


async def _drop_redis(prefix: str) -> None:
    import redis.asyncio as aioredis

    client = aioredis.from_url("redis://127.0.0.1:6379/0")
    try:
        async for key in client.scan_iter(match=f"{prefix}*"):
            await client.delete(key)
    finally:
        await client.aclose()
