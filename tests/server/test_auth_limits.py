"""Authentication, per-user isolation, body size limits, validation and rate limits."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from server_agents import ALICE, BOB, KEYS

from agentrt.server import RateLimit
from agentrt.server._auth import RateLimiter, parse_api_keys_env
from agentrt.state import InMemoryStateStore

S = "/v1/agents/bot/sessions"
BODY = {"input": "hi"}

# (method, path, json body) for every route that needs a key
AUTHED: list[tuple[str, str, Any]] = [
    ("GET", "/v1/agents", None),
    ("GET", S, None),
    ("GET", f"{S}/s1", None),
    ("DELETE", f"{S}/s1", None),
    ("POST", f"{S}/s1/messages", BODY),
    ("POST", f"{S}/s1/confirm", {"results": [{"tool_call_id": "x", "confirmed": True}]}),
    ("POST", f"{S}/s1/tool-results", {"results": [{"tool_call_id": "x", "output": "r"}]}),
    ("POST", f"{S}/s1/interrupt", {}),
    ("GET", f"{S}/s1/events", None),
    ("POST", "/v1/chat/completions", {"model": "bot", "messages": [{"role": "user", "content": "hi"}]}),
]
# every route addressing one session, answered 404 for someone else's session
SESSION_ROUTES = [r for r in AUTHED if "/s1" in r[1]]


@pytest.mark.parametrize(("method", "path", "body"), AUTHED, ids=[f"{m} {p}" for m, p, _ in AUTHED])
@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer nope"}, {"Authorization": "key-alice"}, {"Authorization": "Basic a2V5LWFsaWNl"}],
    ids=["missing", "unknown", "no-scheme", "basic"],
)
async def test_missing_or_unknown_key_is_401(
    client: httpx.AsyncClient, method: str, path: str, body: Any, headers: dict[str, str]
) -> None:
    r = await client.request(method, path, json=body, headers=headers)
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert r.json()["error"]["type"] == "authentication_error"
    assert "key-alice" not in r.text


async def test_open_routes_need_no_key(client: httpx.AsyncClient) -> None:
    for path in ("/healthz", "/readyz", "/openapi.json"):
        assert (await client.get(path)).status_code == 200


@pytest.mark.parametrize(("method", "path", "body"), SESSION_ROUTES, ids=[f"{m} {p}" for m, p, _ in SESSION_ROUTES])
async def test_another_users_session_is_404(
    client: httpx.AsyncClient, store: InMemoryStateStore, method: str, path: str, body: Any
) -> None:
    r = await client.post(f"{S}/s1/messages", json={"input": "danger secret"}, headers=ALICE)  # pending approval
    assert r.json()["message"]["metadata"]["generate_reason"] == "awaiting_confirmation"
    before = await store.load("alice", "s1", agent="bot")
    assert before is not None
    if path.endswith("/messages"):
        # Posting to the same id makes Bob his own session; Alice's stays untouched.
        r = await client.request(method, path, json=body, headers=BOB)
        assert r.status_code == 200
        assert r.json()["message"]["content"][0]["text"] == "echo: hi (turn 1)"
    else:
        r = await client.request(method, path, json=body, headers=BOB)
        assert r.status_code == 404, r.text
        assert r.json()["error"]["code"] == "session_not_found"
    after = await store.load("alice", "s1", agent="bot")
    assert after is not None
    assert after.revision == before.revision
    assert [s["session_id"] for s in (await client.get(S, headers=BOB)).json()["sessions"]] in ([], ["s1"])


async def test_chat_completions_sessions_are_per_user(client: httpx.AsyncClient) -> None:
    body = {"model": "bot", "messages": [{"role": "user", "content": "mine"}]}
    await client.post("/v1/chat/completions", json=body, headers={**ALICE, "X-Session-Id": "c1"})
    r = await client.post(
        "/v1/chat/completions",
        json={**body, "messages": [{"role": "user", "content": "theirs"}]},
        headers={**BOB, "X-Session-Id": "c1"},
    )
    assert r.json()["choices"][0]["message"]["content"] == "echo: theirs (turn 1)"


# -- size limits and validation ------------------------------------------------------------------------------------
async def test_body_over_one_mib_is_413(client: httpx.AsyncClient) -> None:
    big = {"input": "x" * (1024 * 1024 + 10)}
    r = await client.post(f"{S}/s1/messages", json=big, headers=ALICE)
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "request_too_large"
    assert (await client.get(f"{S}/s1", headers=ALICE)).status_code == 404  # nothing ran


async def test_streamed_body_is_cut_off_while_reading(client: httpx.AsyncClient) -> None:
    chunks_sent = 0

    async def body() -> Any:
        nonlocal chunks_sent
        yield b'{"input": "'
        for _ in range(64):
            chunks_sent += 1
            yield b"y" * 65536
        yield b'"}'

    r = await client.post(f"{S}/s1/messages", content=body(), headers=ALICE)  # chunked: no Content-Length
    assert r.status_code == 413
    assert chunks_sent < 64


async def test_body_limit_is_configurable(make_app: Any) -> None:
    app = make_app(max_body_bytes=100)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as c:
        assert (await c.post(f"{S}/s1/messages", json=BODY, headers=ALICE)).status_code == 200
        r = await c.post(f"{S}/s1/messages", json={"input": "z" * 200}, headers=ALICE)
        assert r.status_code == 413


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({}, "input: Field required"),
        ({"input": 5}, "input"),
        ({"input": "hi", "stream": "maybe"}, "stream"),
        ({"input": "hi", "steam": True}, "steam: Extra inputs are not permitted"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input.list[MsgModel].0.role"),
        ({"input": [{"role": "user", "content": [{"type": "mystery"}]}]}, "input"),
        ({"input": [{"role": "user", "content": [{"type": "tool_use", "id": "x"}]}]}, "name"),
        ([1, 2], "Input should be a valid dictionary"),
    ],
)
async def test_bad_bodies_are_422_with_the_field_named(client: httpx.AsyncClient, body: Any, needle: str) -> None:
    r = await client.post(f"{S}/s1/messages", json=body, headers=ALICE)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "validation_error"
    assert needle in error["message"]
    assert error["details"]


@pytest.mark.parametrize(
    "session_id",
    ["x" * 201, "bad%01id", "tab%09id", "nl%0Aid", "%7F"],
    ids=["too-long", "control", "tab", "newline", "del"],
)
async def test_bad_session_ids_are_422(client: httpx.AsyncClient, session_id: str) -> None:
    for method, suffix, body in (("POST", "/messages", BODY), ("GET", "", None), ("DELETE", "", None)):
        r = await client.request(method, f"{S}/{session_id}{suffix}", json=body, headers=ALICE)
        assert r.status_code == 422, (method, r.text)
        assert r.json()["error"]["code"] == "invalid_session_id"
    ok = "x" * 200
    assert (await client.post(f"{S}/{ok}/messages", json=BODY, headers=ALICE)).status_code == 200


async def test_unknown_agent_is_404(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/agents/ghost/sessions/s1/messages", json=BODY, headers=ALICE)
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "agent_not_found"


# -- rate limits ---------------------------------------------------------------------------------------------------
async def test_rate_limit_is_429_with_retry_after(make_app: Any) -> None:
    app = make_app(rate_limit=RateLimit(rate=0.5, burst=3))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as c:
        codes = [(await c.get("/v1/agents", headers=ALICE)).status_code for _ in range(3)]
        assert codes == [200, 200, 200]
        r = await c.get("/v1/agents", headers=ALICE)
        assert r.status_code == 429
        assert int(r.headers["retry-after"]) >= 1
        assert r.json()["error"]["code"] == "rate_limit_exceeded"
        # the bucket is per key: Bob is not limited by Alice's requests
        assert (await c.get("/v1/agents", headers=BOB)).status_code == 200
        # a wrong key is a 401, and costs Alice's bucket nothing either way
        assert (await c.get("/v1/agents", headers={"Authorization": "Bearer nope"})).status_code == 401


def test_token_bucket_refills() -> None:
    now = [0.0]
    limiter = RateLimiter(RateLimit(rate=2.0, burst=2), clock=lambda: now[0])
    assert limiter.acquire("k") == 0
    assert limiter.acquire("k") == 0
    assert limiter.acquire("k") == pytest.approx(0.5)
    now[0] += 0.5
    assert limiter.acquire("k") == 0
    assert limiter.acquire("other") == 0


def test_api_keys_from_env_format() -> None:
    assert parse_api_keys_env(" a=alice , b=bob,") == {"a": "alice", "b": "bob"}
    with pytest.raises(Exception, match="key1=user1") as info:
        parse_api_keys_env("secret-key-without-user")
    assert "secret-key-without-user" not in str(info.value)
    assert KEYS  # the fixture keys are what the app uses
