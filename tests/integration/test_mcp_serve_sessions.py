"""`agentrt mcp serve`: one agent session per MCP client connection, under every protocol version.

The official SDK client in its default mode (2026-07-28: no handshake, no transport session) and
in ``mode="legacy"`` (2025-11-25) talks to real ``agentrt mcp serve`` processes over stdio and
streamable HTTP, and to the in-process server behind a real uvicorn with bearer authentication.
The served agent's scripted model answers with every user message it was sent, and the sessions
are read back from the store the server wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import uvicorn
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp_types import CallToolResult, TextContent
from pydantic import AnyHttpUrl

from agentrt import ReActAgent, RuntimeContext, Toolkit, tool
from agentrt.model import ScriptedModel
from agentrt.model.base import ModelRequest
from agentrt.state import InMemoryStateStore, SqliteStateStore
from agentrt.tool._mcp_server import SESSION_META_KEY, mcp_server

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
TARGET = f"{Path(__file__).stem}:agent"
MODERN, LEGACY = "2026-07-28", "2025-11-25"


def _answer(request: ModelRequest) -> str:
    return " | ".join(m.text for m in request.messages if m.role == "user")


# Served by the `agentrt mcp serve` subprocesses (sessions go to AGENTRT_STATE_URL).
agent = ReActAgent("helper", model=ScriptedModel.from_function(_answer), description="Repeats every task so far.")


# --------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------
def serve_env(db: Path) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(HERE)]), "AGENTRT_STATE_URL": f"sqlite:///{db}"}


def stdio_params(db: Path) -> StdioServerParameters:
    args = ["-m", "agentrt.cli", "mcp", "serve", TARGET]
    return StdioServerParameters(command=sys.executable, args=args, env=serve_env(db), cwd=str(HERE))


def meta(session: str) -> Any:
    """Request `_meta` naming an agentrt session."""
    return {SESSION_META_KEY: session}


def text(result: CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def ask(client: Client, task: str, *, meta: Any = None, **arguments: Any) -> tuple[str, str]:
    """The answer's text and the agent session it ran in."""
    result = await client.call_tool("ask_helper", {"task": task, **arguments}, meta=meta)
    assert not result.is_error, result.content
    assert result.meta is not None
    return text(result), result.meta[SESSION_META_KEY]


async def transcripts(db: Path, user: str = "mcp") -> dict[str, list[str]]:
    """Every stored session of the served agent: session id -> the texts of its messages."""
    store = SqliteStateStore(db)
    try:
        out: dict[str, list[str]] = {}
        for info in await store.list_sessions(user, agent="helper"):
            state = await store.load(user, info.session_id, agent="helper")
            assert state is not None
            out[info.session_id] = [m.text for m in state.messages]
        return out
    finally:
        await store.close()


@contextlib.asynccontextmanager
async def http_client(
    url: str, token: str | None = None, seen: set[str] | None = None, **options: Any
) -> AsyncIterator[Client]:
    """An SDK client over streamable HTTP, with a bearer token; `seen` collects the Mcp-Session-Ids."""

    async def record(response: httpx2.Response) -> None:
        if seen is not None and (session := response.headers.get("mcp-session-id")):
            seen.add(session)

    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    http = httpx2.AsyncClient(headers=headers, timeout=30, event_hooks={"response": [record]})
    async with http, Client(streamable_http_client(url, http_client=http), **options) as client:
        yield client


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_listening(port: int, proc: subprocess.Popen[bytes] | None = None) -> None:
    for _ in range(1200):  # a minute: the machine may be busy
        assert proc is None or proc.poll() is None, "agentrt mcp serve exited"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        await asyncio.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port}")


@contextlib.asynccontextmanager
async def serve_http(db: Path) -> AsyncIterator[str]:
    """``agentrt mcp serve -t http`` as a subprocess; yields its URL."""
    port = free_port()
    args = ["-m", "agentrt.cli", "mcp", "serve", TARGET, "-t", "http", "--port", str(port)]
    env = {**os.environ, **serve_env(db)}
    proc = subprocess.Popen([sys.executable, *args], env=env, cwd=HERE, stdout=subprocess.DEVNULL)  # noqa: ASYNC220 - Popen only starts the server; it does not wait
    try:
        await wait_listening(port, proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait)


# --------------------------------------------------------------------------------------------------
# stdio: one session per connection, whatever the protocol
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("mode", "version"), [(None, MODERN), ("legacy", LEGACY)])
async def test_stdio_connection_keeps_one_session(tmp_path: Path, mode: str | None, version: str) -> None:
    db = tmp_path / "state.db"
    options: dict[str, Any] = {} if mode is None else {"mode": mode}
    async with Client(stdio_params(db), **options) as ann, Client(stdio_params(db), **options) as bob:
        assert ann.protocol_version == bob.protocol_version == version
        _, sa = await ask(ann, "ann 1")
        _, sb = await ask(bob, "bob 1")
        # The second turn's request held the first turn of its own connection only.
        assert await ask(ann, "ann 2") == ("ann 1 | ann 2", sa)
        assert await ask(bob, "bob 2") == ("bob 1 | bob 2", sb)
    assert sa != sb
    assert await transcripts(db) == {
        sa: ["ann 1", "ann 1", "ann 2", "ann 1 | ann 2"],
        sb: ["bob 1", "bob 1", "bob 2", "bob 1 | bob 2"],
    }


# --------------------------------------------------------------------------------------------------
# streamable HTTP
# --------------------------------------------------------------------------------------------------
async def test_http_sessions_under_both_protocols(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    mine, theirs = str(uuid.uuid4()), str(uuid.uuid4())
    async with serve_http(db) as url:
        # 2025-11-25: the transport session (Mcp-Session-Id) is the agent session.
        transport_sessions: set[str] = set()
        async with http_client(url, seen=transport_sessions, mode="legacy") as a, Client(url, mode="legacy") as b:
            assert a.protocol_version == LEGACY
            _, sa = await ask(a, "a 1")
            answer, sb = await ask(b, "b 1")
            assert answer == "b 1" and sb != sa
            assert await ask(a, "a 2") == ("a 1 | a 2", sa)
        assert {f"mcp-{s}" for s in transport_sessions} == {sa}
        # 2026-07-28 (the default) has no transport session: the client names its session.
        async with Client(url) as client, Client(url) as other:
            assert client.protocol_version == MODERN
            assert await ask(client, "m 1", session_id=mine) == ("m 1", mine)
            assert await ask(other, "t 1", meta=meta(theirs)) == ("t 1", theirs)
            assert await ask(client, "m 2", meta=meta(mine)) == ("m 1 | m 2", mine)
            assert await ask(other, "t 2", session_id=theirs) == ("t 1 | t 2", theirs)
            # Without one, each call is a conversation of its own, continued by the id it returns.
            _, fresh = await ask(client, "f 1")
            assert (await ask(other, "f 2"))[0] == "f 2"
            assert await ask(other, "f 3", session_id=fresh) == ("f 1 | f 3", fresh)
            for bad in ({"session_id": "has space"}, {"session_id": 7}, {"session_id": mine, "extra": 1}):
                assert (await client.call_tool("ask_helper", {"task": "t", **bad})).is_error
            conflict = await client.call_tool("ask_helper", {"task": "t", "session_id": mine}, meta=meta(theirs))
            assert conflict.is_error
        stored = await transcripts(db)
    assert stored[mine] == ["m 1", "m 1", "m 2", "m 1 | m 2"]
    assert stored[theirs] == ["t 1", "t 1", "t 2", "t 1 | t 2"]
    assert stored[sa] == ["a 1", "a 1", "a 2", "a 1 | a 2"]
    assert stored[sb] == ["b 1", "b 1"]
    assert stored[fresh] == ["f 1", "f 1", "f 3", "f 1 | f 3"]
    assert len(stored) == 6  # and "f 2" alone


class Tokens:
    """Bearer tokens of two users of one OAuth client."""

    async def verify_token(self, token: str) -> AccessToken | None:
        subject = {"t-ann": "ann", "t-bob": "bob"}.get(token)
        return None if subject is None else AccessToken(token=token, client_id="ide", scopes=[], subject=subject)


@contextlib.asynccontextmanager
async def uvicorn_app(app: Any) -> AsyncIterator[str]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    try:
        await wait_listening(port)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        await task


async def test_http_with_auth_user_is_the_principal() -> None:
    model = ScriptedModel.from_function(_answer)
    served = ReActAgent("helper", model=model, state_store=InMemoryStateStore())
    auth = AuthSettings(issuer_url=AnyHttpUrl("https://auth.example"), resource_server_url=None)
    app = mcp_server(served, user_id="nobody").streamable_http_app(auth=auth, token_verifier=Tokens())
    shared = str(uuid.uuid4())
    async with uvicorn_app(app) as url:
        async with http_client(url, "t-ann") as ann, http_client(url, "t-bob") as bob:
            assert ann.protocol_version == MODERN
            await ask(ann, "ann 1", session_id=shared)
            await ask(bob, "bob 1", session_id=shared)  # the same id, another user: another session
            assert await ask(ann, "ann 2", session_id=shared) == ("ann 1 | ann 2", shared)
        async with http_client(url, "t-bob", mode="legacy") as legacy:
            _, session = await ask(legacy, "bob 2")
            assert await ask(legacy, "bob 3") == ("bob 2 | bob 3", session)
        async with httpx2.AsyncClient() as anonymous:
            assert (await anonymous.post(url, json={})).status_code == 401
    # What the model saw, call by call: each user's own turns only.
    seen = [[m.text for m in r.messages if m.role == "user"] for r in model.requests]
    assert seen == [["ann 1"], ["bob 1"], ["ann 1", "ann 2"], ["bob 2"], ["bob 2", "bob 3"]]
    assert len((await served.get_state("ann", shared)).messages) == 4
    assert len((await served.get_state("bob", shared)).messages) == 2
    assert len((await served.get_state("bob", session)).messages) == 4
    assert not (await served.get_state("nobody", shared)).messages


async def test_toolkit_calls_take_the_session_from_meta() -> None:
    @tool
    def whoami(ctx: RuntimeContext) -> str:
        """The caller's agentrt user and session."""
        return f"{ctx.user_id} {ctx.session_id}"

    async with Client(mcp_server(Toolkit([whoami]), user_id="u")) as client:  # in-process, 2026-07-28
        given = await client.call_tool("whoami", {}, meta=meta("s-1"))
        assert text(given) == "u s-1" and given.meta is not None and given.meta[SESSION_META_KEY] == "s-1"
        one, two = [text(await client.call_tool("whoami", {})) for _ in range(2)]
        assert one != two and one.startswith("u mcp-")
