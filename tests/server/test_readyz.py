"""`/readyz`: pass/fail for anyone (probes send no key); the store's details only with a valid API key."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from server_agents import ALICE, KEYS, make_agent

from agentrt.server import create_app
from agentrt.state import InMemoryStateStore

FAILURES = [
    "could not connect to postgresql://bob:hunter2@db.internal:5432/prod",
    "connection to server at db.internal port 5432 failed: host=db.internal dbname=prod password=hunter2",
    "Error 111 connecting to redis://:hunter2@db.internal:5432/0",
]


def broken_app(message: str) -> Any:
    class Broken(InMemoryStateStore):
        async def load(self, user_id: str, session_id: str, *, agent: str = "") -> Any:
            raise ConnectionError(message)

    return create_app({"bot": make_agent(store=Broken())}, api_keys=KEYS)


async def readyz(app: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as c:
        return await c.get("/readyz", headers=headers)


@pytest.mark.parametrize("message", FAILURES)
async def test_unauthenticated_readyz_shows_only_pass_or_fail(message: str) -> None:
    app = broken_app(message)
    for headers in (None, {"Authorization": "Bearer wrong-key"}, {"Authorization": "garbage"}):
        r = await readyz(app, headers)
        assert r.status_code == 503
        assert r.json() == {"status": "unavailable"}
        for secret_or_detail in ("db.internal", "5432", "prod", "hunter2", "Broken", "ConnectionError"):
            assert secret_or_detail not in r.text


@pytest.mark.parametrize("message", FAILURES)
async def test_authenticated_readyz_shows_the_problem_without_the_password(message: str) -> None:
    r = await readyz(broken_app(message), ALICE)
    assert r.status_code == 503
    body = r.json()
    assert body["status"] == "unavailable"
    [problem] = body["problems"]
    assert "state store Broken unreachable: ConnectionError" in problem
    assert "db.internal" in problem
    assert "hunter2" not in r.text
    assert "***" in problem


async def test_ready_store(make_app: Any) -> None:
    app = make_app()
    r = await readyz(app)
    assert (r.status_code, r.json()) == (200, {"status": "ready"})
    r = await readyz(app, ALICE)
    assert (r.status_code, r.json()) == (200, {"status": "ready", "problems": []})
