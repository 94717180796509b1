"""Kill a running agent process with SIGKILL at many points; a new process must resume cleanly."""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from services import require_service

from agentrt.message import Msg, ToolResultBlock
from agentrt.state import store_from_url

ROOT = Path(__file__).parents[2]
WORKER = Path(__file__).with_name("crash_worker.py")
KILL_POINTS = [
    "model-start 1",  # during the first model stream
    "model-done 1",  # between a model reply and its tools
    "tool-start 1a",  # during a tool
    "tool-done 1a",  # between a tool result and the next step
    "tool-start 2a",  # during a parallel batch
    "tool-done 2a",  # half of a parallel batch finished
    "tool-done 2b",
    "model-start 3",
    "tool-start 3a",
    "model-start 4",  # streaming the final answer
]


def _start(url: str, session: str, log: Path, mode: str, prefix: str | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    if prefix:
        env["CRASH_PREFIX"] = prefix
    return subprocess.Popen(
        [sys.executable, str(WORKER), url, session, str(log), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _kill_at(proc: subprocess.Popen[str], marker: str) -> bool:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.strip() == marker:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            return True
    proc.wait(10)
    return False


def _check_history(url: str, session: str, log: Path, prefix: str | None) -> None:
    async def load() -> list[Msg]:
        store = store_from_url(url, **({"prefix": prefix} if prefix else {}))
        try:
            state = await store.load("crash-user", session, agent="crashy")
        finally:
            await store.close()
        assert state is not None
        return state.messages

    messages = asyncio.run(load())
    assert messages[0].text == "do the work", "the first input must survive the crash"
    calls = [c.id for m in messages for c in m.tool_calls]
    results = collections.Counter(b.id for m in messages for b in m.blocks(ToolResultBlock))
    assert sorted(calls) == sorted(results), "every tool call has exactly one result"
    assert all(n == 1 for n in results.values()), "no tool call has two results"
    assert messages[-1].role == "assistant" and messages[-1].text.startswith("finished"), "the resumed run finished"
    done = collections.Counter(line.split()[1] for line in log.read_text().splitlines() if line.startswith("done "))
    assert all(n == 1 for n in done.values()), f"a completed tool ran twice: {done}"


def _scenario(url: str, marker: str, tag: str, tmp_path: Path, prefix: str | None = None) -> None:
    session = f"crash-{tag}"
    log = tmp_path / f"{tag}.log"
    first = _start(url, session, log, "start", prefix)
    try:
        killed = _kill_at(first, marker)
        assert killed, f"the worker never reached {marker!r}: {first.stderr.read() if first.stderr else ''}"
    finally:
        for pipe in (first.stdout, first.stderr):
            if pipe is not None:
                pipe.close()
    second = _start(url, session, log, "resume", prefix)
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err[-3000:]
    assert "reply stop finished" in out, out
    _check_history(url, session, log, prefix)


@pytest.mark.parametrize("marker", KILL_POINTS)
def test_sqlite_crash_resume(marker: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    _scenario(url, marker, marker.replace(" ", "-"), tmp_path)


@pytest.mark.parametrize("marker", KILL_POINTS)
def test_redis_crash_resume(marker: str, tmp_path: Path, unique: str) -> None:
    require_service("redis")
    prefix = f"t-crash-{unique}"
    try:
        _scenario("redis://127.0.0.1:6379/0", marker, marker.replace(" ", "-"), tmp_path, prefix)
    finally:
        asyncio.run(_drop_prefix(prefix))


async def _drop_prefix(prefix: str) -> None:
    import redis.asyncio as aioredis

    client = aioredis.from_url("redis://127.0.0.1:6379/0")
    try:
        async for key in client.scan_iter(match=f"{prefix}*"):
            await client.delete(key)
    finally:
        await client.aclose()
