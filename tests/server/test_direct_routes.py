"""The session routes' direct path (`AgentrtApp`) answers exactly as Starlette's stack would.

Each property drives two apps built alike, one with the direct path and one through Starlette's
middleware stack (a pass-through user middleware turns the direct path off), with the same
generated requests, and compares what a client sees. Other tests check that the direct path is
really taken (Starlette's stack is not called: a counter that does not move), that whatever could
change Starlette's choice of route turns it off, and how an SSE response ends.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_agents import ALICE, BOB, KEYS, make_agent
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentrt.server import create_app
from agentrt.state import InMemoryStateStore

S = "/v1/agents/bot/sessions"


class PassThrough:
    """A user middleware that changes nothing (it makes Starlette's stack mandatory)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


class CountingStack:
    """Wraps an app's built middleware stack and counts the requests that went through it."""

    def __init__(self, app: Any) -> None:
        self.inner = app.middleware_stack or app.build_middleware_stack()
        self.calls = 0
        app.middleware_stack = self

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.calls += 1
        await self.inner(scope, receive, send)


def build(*, direct: bool, store: InMemoryStateStore | None = None) -> Any:
    app = create_app(
        {"bot": make_agent("bot"), "other": make_agent("other")},
        store=store or InMemoryStateStore(),
        api_keys=KEYS,
        disconnect_grace=0.0,
        facades=(),
    )
    if not direct:
        app.add_middleware(PassThrough)
    return app


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app, raise_app_exceptions=False), base_url="http://test")


_VOLATILE = {"id", "timestamp", "created_at", "updated_at", "reply_id", "run_id", "revision", "block_id", "elapsed"}


def _stable(value: Any) -> Any:
    """A JSON value without the parts that differ between two runs (ids, clocks)."""
    if isinstance(value, dict):
        return {k: ("*" if k in _VOLATILE else _stable(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def seen(response: httpx.Response) -> tuple[Any, ...]:
    """What a client sees of a response, ids and clocks left out."""
    kind = response.headers.get("content-type", "").split(";")[0]
    body: Any
    if kind == "text/event-stream":
        body = [
            _stable(json.loads(line[len("data: ") :]))
            for line in response.text.splitlines()
            if line.startswith("data: ")
        ]
    elif kind == "application/json":
        body = _stable(response.json())
    else:
        body = response.text
    headers = {k: response.headers.get(k) for k in ("allow", "x-session-id", "retry-after", "www-authenticate")}
    return response.status_code, kind, headers, body


# Mostly well-formed requests (so runs happen and sessions fill), with every kind of wrong part.
methods = st.sampled_from(["POST"] * 5 + ["GET", "DELETE", "PUT", "PATCH"])
tails = st.sampled_from(
    ["/messages"] * 6
    + ["", "/", "/confirm", "/tool-results", "/interrupt", "/questions", "/answers", "/events", "/nope", "/messages/"]
)
agents = st.sampled_from(["bot"] * 5 + ["other", "ghost", "b%C3%B6t", "bot%2Fx"])
sessions = st.sampled_from(["s1"] * 4 + ["s2", "..", "%2e%2e", "a b", "ü", "x" * 300, "s1%00"])
auths = st.sampled_from([ALICE] * 5 + [BOB, {"Authorization": "Bearer nope"}, {}])
message = st.builds(
    lambda text, stream: json.dumps({"input": text, "stream": stream}).encode(),
    st.sampled_from(["hi", "add", "danger x", "external q", ""]),
    st.booleans(),
)
bodies = st.one_of(
    message,
    message,
    message,
    st.just(None),
    st.just(b"{not json"),
    st.just(b"[]"),
    st.builds(
        lambda ids: json.dumps({"results": [{"tool_call_id": i, "approved": True} for i in ids]}).encode(),
        st.lists(st.sampled_from(["call-danger", "zz"]), max_size=2),
    ),
    st.just(json.dumps({"input": 5}).encode()),
)
requests = st.tuples(methods, agents, sessions, tails, auths, bodies)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(requests, min_size=1, max_size=4))
async def test_the_direct_path_answers_as_starlette_does(sequence: list[tuple[Any, ...]]) -> None:
    fast, slow = build(direct=True), build(direct=False)
    async with client(fast) as a, client(slow) as b:
        for method, agent, session, tail, auth, body in sequence:
            url = f"/v1/agents/{agent}/sessions/{session}{tail}"
            headers = {**auth, "content-type": "application/json"}
            got = await a.request(method, url, headers=headers, content=body)
            want = await b.request(method, url, headers=headers, content=body)
            assert seen(got) == seen(want), (method, url, body)


async def test_the_direct_path_skips_the_middleware_stack() -> None:
    app = build(direct=True)
    stack = CountingStack(app)
    async with client(app) as c:
        r = await c.post(f"{S}/s1/messages", headers=ALICE, json={"input": "hi", "stream": True})
        assert r.status_code == 200 and "run_finished" in r.text
        r = await c.get(f"{S}/s1", headers=ALICE)
        assert r.status_code == 200
        assert stack.calls == 0, "a session route went through Starlette's stack"
        r = await c.get("/v1/agents", headers=ALICE)
        assert r.status_code == 200
        assert stack.calls == 1, "other routes take Starlette's way"


async def test_a_user_middleware_sees_every_request() -> None:
    app = build(direct=False)
    stack = CountingStack(app)
    async with client(app) as c:
        r = await c.post(f"{S}/s1/messages", headers=ALICE, json={"input": "hi"})
        assert r.status_code == 200
    assert stack.calls == 1


async def test_a_route_listed_first_that_could_match_turns_the_direct_path_off() -> None:
    app = build(direct=True)

    async def custom(request: Request) -> Response:
        return JSONResponse({"custom": request.path_params["s"]})

    app.router.routes.insert(0, Route("/v1/agents/{a}/sessions/{s}/messages", custom, methods=["POST"]))
    async with client(app) as c:
        r = await c.post(f"{S}/s1/messages", headers=ALICE, json={"input": "hi"})
    assert r.json() == {"custom": "s1"}, "Starlette's router picks the first match, and so must we"


async def test_a_literal_route_of_another_shape_keeps_the_direct_path() -> None:
    app = build(direct=True)

    async def stats(request: Request) -> Response:
        return JSONResponse({"ok": True})

    app.router.routes.insert(0, Route("/_bench/stats", stats))
    stack = CountingStack(app)
    async with client(app) as c:
        assert (await c.get("/_bench/stats")).json() == {"ok": True}
        r = await c.post(f"{S}/s1/messages", headers=ALICE, json={"input": "hi"})
        assert r.status_code == 200
    assert stack.calls == 1, "only the stats request went through the stack"


@pytest.mark.parametrize("direct", [True, False])
async def test_an_unexpected_error_is_a_500_body_and_reaches_the_server(direct: bool) -> None:
    class Broken(InMemoryStateStore):
        async def load_context(self, user_id: str, session_id: str, *, agent: str = "") -> Any:
            raise RuntimeError("disk on fire")

    app = build(direct=direct, store=Broken())
    transport = httpx.ASGITransport(app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        r = await c.post(f"{S}/s1/messages", headers=ALICE, json={"input": "hi"})
    assert r.status_code == 500
    assert r.json()["error"]["code"] == "internal_error"
    assert "disk on fire" not in r.text
    raising = httpx.ASGITransport(app, raise_app_exceptions=True)
    async with httpx.AsyncClient(transport=raising, base_url="http://test") as c:
        with pytest.raises(RuntimeError, match="disk on fire"):
            await c.post(f"{S}/s1/messages", headers=ALICE, json={"input": "hi"})


# -- how an SSE response ends ---------------------------------------------------------------------
async def asgi_post(
    app: Any, path: str, body: dict[str, Any], receive_after: Callable[[], Awaitable[Message]]
) -> list[Message]:
    raw = json.dumps(body).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"authorization", ALICE["Authorization"].encode()), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
        "state": {},
    }
    sent_body = False
    messages: list[Message] = []

    async def receive() -> Message:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": raw, "more_body": False}
        return await receive_after()

    async def send(message: Message) -> None:
        messages.append(message)

    await app(scope, receive, send)
    return messages


async def test_the_last_frames_end_the_body_in_one_message() -> None:
    app = build(direct=True)
    forever: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
    messages = await asgi_post(app, f"{S}/s1/messages", {"input": "hi", "stream": True}, lambda: forever)
    bodies = [m for m in messages if m["type"] == "http.response.body"]
    assert bodies[-1]["more_body"] is False
    assert b"event: run_finished" in bodies[-1]["body"], "the end of the body carries the last frames"
    assert all(m["body"] for m in bodies), "no empty chunk just to end the body"
    assert all(m["more_body"] for m in bodies[:-1])


async def test_a_client_that_goes_away_ends_the_response_quietly() -> None:
    store = InMemoryStateStore()
    app = build(direct=True, store=store)
    gone: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
    outcome: dict[str, Any] = {}

    async def handler() -> None:
        await asgi_post(app, f"{S}/s1/messages", {"input": "nap", "stream": True}, lambda: gone)
        task = asyncio.current_task()
        assert task is not None
        outcome["cancelling"] = task.cancelling()

    task = asyncio.create_task(handler())
    for _ in range(200):  # until the run is in its tool call
        await asyncio.sleep(0.01)
        state = await store.load("alice", "s1", agent="bot")
        if state is not None and any(m.role == "assistant" for m in state.messages):
            break
    gone.set_result({"type": "http.disconnect"})
    await asyncio.wait_for(task, 5)
    assert outcome == {"cancelling": 0}, "the disconnect's cancellation was taken back"
    assert not task.cancelled()


async def test_a_shutdown_cancel_while_streaming_goes_through() -> None:
    app = build(direct=True)
    forever: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(asgi_post(app, f"{S}/s1/messages", {"input": "nap", "stream": True}, lambda: forever))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
