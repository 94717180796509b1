"""Two real `agentrt serve` processes on one shared Redis store behave as one service."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import httpx
import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
APPS = Path(__file__).with_name("apps")
KEY = {"Authorization": "Bearer replica-key"}
S = "/v1/agents/shared/sessions"
CONCURRENT = 20  # requests per replica, all at once, on one session


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def _replicas(store_url: str, prefix: str) -> Iterator[list[str]]:
    procs: list[tuple[subprocess.Popen[str], IO[str]]] = []
    urls: list[str] = []
    try:
        for name in ("A", "B"):
            port = _free_port()
            env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(APPS)]),
                "AGENTRT_API_KEYS": "replica-key=carol",
                "REPLICA_NAME": name,
                "REPLICA_STORE_URL": store_url,
                "REPLICA_STORE_PREFIX": prefix,
            }
            log: IO[str] = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed below
            cmd = [sys.executable, "-m", "agentrt.cli", "serve", "replica_app:agent", "--port", str(port)]
            cmd += ["--log-level", "warning"]
            procs.append((subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True), log))
            urls.append(f"http://127.0.0.1:{port}")
        for (proc, log), url in zip(procs, urls, strict=True):
            deadline = time.monotonic() + 30
            while True:
                if proc.poll() is not None:
                    log.seek(0)
                    raise AssertionError(f"replica exited: {log.read()}")
                try:
                    with urllib.request.urlopen(url + "/readyz", timeout=1):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)  # noqa: TID251 - sync fixture code, no event loop
        yield urls
    finally:
        for proc, log in procs:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


async def _drop_keys(url: str, prefix: str) -> None:
    import redis.asyncio as aioredis

    client = aioredis.from_url(url)
    try:
        async for key in client.scan_iter(match=f"{prefix}*"):
            await client.delete(key)
    finally:
        await client.aclose()


@pytest.fixture
def replicas(redis_url: str, unique: str) -> Iterator[list[str]]:
    prefix = f"t-replicas-{unique}"
    try:
        with _replicas(redis_url, prefix) as urls:
            yield urls
    finally:
        asyncio.run(_drop_keys(redis_url, prefix))


def test_conversation_alternating_between_replicas_keeps_its_history(replicas: list[str]) -> None:
    async def go() -> None:
        async with httpx.AsyncClient(timeout=30) as c:
            for i in range(6):
                url = replicas[i % 2]
                stream = i % 3 == 2
                r = await c.post(f"{url}{S}/talk/messages", json={"input": f"m{i}", "stream": stream}, headers=KEY)
                assert r.status_code == 200, r.text
                if stream:
                    assert r.text.rstrip().splitlines()[-2] == "event: run_finished"
                    continue
                assert r.json()["message"]["content"][0]["text"] == f"re: m{i} #{i + 1} by {'AB'[i % 2]}"
            for url in replicas:
                state = (await c.get(f"{url}{S}/talk", headers=KEY)).json()
                texts = [m["content"][0]["text"] for m in state["messages"]]
                assert texts[::2] == [f"m{i}" for i in range(6)]
                assert texts[1::2] == [f"re: m{i} #{i + 1} by {'AB'[i % 2]}" for i in range(6)]
                sessions = (await c.get(f"{url}{S}", headers=KEY)).json()["sessions"]
                assert [s["session_id"] for s in sessions] == ["talk"]

    asyncio.run(go())


def test_approval_asked_on_one_replica_is_answered_on_the_other(replicas: list[str]) -> None:
    a, b = replicas

    async def go() -> None:
        async with httpx.AsyncClient(timeout=30) as c:
            r = await c.post(f"{a}{S}/pay/messages", json={"input": "transfer 42"}, headers=KEY)
            assert r.json()["message"]["metadata"]["generate_reason"] == "awaiting_confirmation"
            pending = (await c.get(f"{b}{S}/pay", headers=KEY)).json()["pending"]
            assert [p["id"] for p in pending["tool_calls"]] == ["call-transfer"]
            r = await c.post(
                f"{b}{S}/pay/confirm",
                json={"results": [{"tool_call_id": "call-transfer", "confirmed": True}], "stream": True},
                headers=KEY,
            )
            assert "event: run_finished" in r.text
            assert "transferred: moved 42 on B (answered by B)" in r.text
            state = (await c.get(f"{a}{S}/pay", headers=KEY)).json()
            assert state["pending"] is None
            assert state["messages"][-1]["content"][0]["text"] == "transferred: moved 42 on B (answered by B)"

    asyncio.run(go())


def test_concurrent_requests_through_both_replicas_are_serialised(replicas: list[str]) -> None:
    async def go() -> None:
        limits = httpx.Limits(max_connections=4 * CONCURRENT)
        async with httpx.AsyncClient(timeout=120, limits=limits) as c:

            async def ask(url: str, text: str) -> str:
                r = await c.post(f"{url}{S}/busy/messages", json={"input": text}, headers=KEY)
                assert r.status_code == 200, r.text
                return str(r.json()["message"]["content"][0]["text"])

            jobs = [ask(url, f"{'AB'[n]}-{i}") for i in range(CONCURRENT) for n, url in enumerate(replicas)]
            replies = await asyncio.gather(*jobs)
            assert all(reply.startswith("re: ") for reply in replies)
            state = (await c.get(f"{replicas[0]}{S}/busy", headers=KEY)).json()
        texts = [m["content"][0]["text"] for m in state["messages"]]
        assert len(texts) == 4 * CONCURRENT, "every question and answer is stored"
        questions, answers = texts[::2], texts[1::2]
        assert sorted(questions) == sorted(f"{t}-{i}" for t in "AB" for i in range(CONCURRENT))
        for turn, (question, answer) in enumerate(zip(questions, answers, strict=True), start=1):
            # never interleaved: each answer follows its own question and saw all earlier turns
            assert answer.startswith(f"re: {question} #{turn} by ")

    asyncio.run(go())
