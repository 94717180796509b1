"""MCP client and server against real MCP servers (subprocesses written with the official SDK).

No SDK mocks: ``mcp_servers/demo_server.py`` runs over stdio, streamable HTTP and SSE; our own
``agentrt mcp serve`` is driven by our own client. No external service is needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from agentrt import (
    GenerateReason,
    ImageBlock,
    ReActAgent,
    RuntimeContext,
    TextBlock,
    Toolkit,
    ToolResultBlock,
    ToolUseBlock,
)
from agentrt.events import AgentEvent, ToolResult, event_from_dict
from agentrt.model import ScriptedModel
from agentrt.state import InMemoryStateStore
from agentrt.tool.mcp import McpCallLostError, McpClient, McpConnectionError, McpError, McpProgress

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
DEMO = str(HERE / "mcp_servers" / "demo_server.py")
PAGED = str(HERE / "mcp_servers" / "paged_server.py")
D = "mcp__Demo_Server__"
PERSON = {"name": "Ann", "age": 33, "address": {"city": "Oslo", "country": "NO"}}


# --------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------
@pytest.fixture
def markers(tmp_path: Path) -> Path:
    return tmp_path


def demo_stdio(markers: Path, **options: Any) -> McpClient:
    return McpClient.stdio(sys.executable, [DEMO, "stdio"], env={"DEMO_MARKER_DIR": str(markers)}, **options)


async def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HttpServer:
    """The demo server as a subprocess on a fixed port (so it can be restarted at the same URL)."""

    def __init__(self, mode: str, markers: Path) -> None:
        self.mode = mode
        self.port = free_port()
        self.env = {**os.environ, "DEMO_MARKER_DIR": str(markers)}
        self.proc: subprocess.Popen[bytes] | None = None
        path = "mcp" if mode == "http" else "sse"
        self.url = f"http://127.0.0.1:{self.port}/{path}"

    async def start(self) -> None:
        self.proc = subprocess.Popen(  # noqa: ASYNC220 - Popen only starts the server; it does not wait
            [sys.executable, DEMO, self.mode, str(self.port)],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        await wait_for(self._listening, timeout=20)

    def _listening(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"demo server exited with {self.proc.returncode}")
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    async def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            await asyncio.to_thread(self.proc.wait)
        self.proc = None


@pytest.fixture
async def http_server(markers: Path) -> AsyncIterator[HttpServer]:
    server = HttpServer("http", markers)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def sse_server(markers: Path) -> AsyncIterator[HttpServer]:
    server = HttpServer("sse", markers)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def agent_with(toolkit: Toolkit, *steps: Any) -> ReActAgent:
    return ReActAgent("assistant", model=ScriptedModel(list(steps)), toolkit=toolkit, state_store=InMemoryStateStore())


async def collect(agent: ReActAgent, text: str, ctx: RuntimeContext | None = None) -> list[AgentEvent]:
    return [event async for event in agent.stream_events(text, ctx)]


def results(events: list[AgentEvent]) -> list[Any]:
    return [e.result for e in events if isinstance(e, ToolResult)]


def pid_of(text: str) -> int:
    return int(text.split(":")[0])


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with contextlib.suppress(ChildProcessError):
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    return False


# --------------------------------------------------------------------------------------------------
# registration
# --------------------------------------------------------------------------------------------------
async def test_stdio_registration_names_schemas_and_annotations(markers: Path) -> None:
    toolkit = Toolkit()
    client = demo_stdio(markers, trust_annotations=True)  # a vetted server: its hints are believed
    tools = await toolkit.register_mcp(client)
    try:
        assert client.name == "Demo_Server"  # the reported name "Demo Server!", sanitised
        assert client.server_info is not None and client.server_info.version == "1.0"
        assert client.instructions == "A demo server for agentrt tests."
        names = {t.name for t in tools}
        assert names == {
            D + n for n in ("weather", "explode", "slow", "picture", "wipe", "note", "resources", "stats", "pid")
        }
        assert set(toolkit.names()) == names

        weather = toolkit.get(D + "weather")
        assert weather is not None
        assert weather.description == "Describe a person's local weather."
        schema = weather.parameters
        assert schema["required"] == ["person"]
        person = schema["$defs"]["Person"]
        assert person["properties"]["address"] == {"$ref": "#/$defs/Address"}
        assert schema["$defs"]["Unit"]["enum"] == ["celsius", "fahrenheit"]
        assert schema["$defs"]["Address"]["properties"]["country"]["description"] == "ISO country code"

        flags = {t.name.removeprefix(D): (t.read_only, t.destructive, t.idempotent) for t in tools}
        assert flags["weather"] == (True, False, False)  # readOnlyHint
        assert flags["wipe"] == (False, True, False)  # destructiveHint: true
        assert flags["note"] == (False, False, False)  # no hints: not destructive (documented choice)
        assert flags["slow"] == (False, False, True)  # idempotentHint
        assert toolkit.get(D + "wipe").concurrency_safe is False  # type: ignore[union-attr]
        assert all(t.timeout == 60.0 for t in tools)
    finally:
        await toolkit.aclose()


async def test_prefix_include_exclude_group_and_caller_owned_client(markers: Path) -> None:
    async with demo_stdio(markers, name="demo") as client:
        first = Toolkit()
        tools = await first.register_mcp(client, prefix="d_", include=["w*", "pid"], exclude="wipe", timeout=5)
        assert sorted(t.name for t in tools) == ["d_pid", "d_weather"]
        assert all(t.timeout == 5 for t in tools)

        second = Toolkit()
        grouped = await second.register_mcp(client, group="demo", include="p*")
        assert sorted(t.name for t in grouped) == ["mcp__demo__picture", "mcp__demo__pid"]
        assert "demo" in second.groups and all(t.group == "demo" for t in grouped)
        assert second.schemas() == []  # the group starts inactive

        with pytest.raises(Exception, match="already registered"):
            await first.register_mcp(client, prefix="d_", include="pid")

        await first.aclose()
        await second.aclose()
        assert client.connected and not client.closed  # entered by the caller: stays the caller's
        result = await client.call_tool("pid")
        assert result.is_error is False
    assert client.closed


async def test_pagination_is_followed() -> None:
    toolkit = Toolkit()
    tools = await toolkit.register_mcp(McpClient.stdio(sys.executable, [PAGED]))
    try:
        # "tool.a" is not a valid agentrt tool name: sanitised to tool_a
        assert [t.name for t in tools] == [f"mcp__paged__tool_{n}" for n in "abcdef"]
        result = await toolkit.get("mcp__paged__tool_e").invoke({}, RuntimeContext())  # type: ignore[union-attr]
        assert result.output == "called tool.e"  # the server's own name is used for the call
        # Names over 64 characters (a provider limit) are shortened, staying unique.
        long = await Toolkit().register_mcp(McpClient.stdio(sys.executable, [PAGED]), prefix="x" * 70)
        assert all(len(t.name) <= 64 for t in long) and len({t.name for t in long}) == 6
        await long[0].mcp_client.aclose()  # type: ignore[attr-defined]
    finally:
        await toolkit.aclose()


# --------------------------------------------------------------------------------------------------
# calls through an agent
# --------------------------------------------------------------------------------------------------
async def test_react_agent_runs_mcp_tools_and_maps_results(markers: Path) -> None:
    toolkit = Toolkit()
    await toolkit.register_mcp(demo_stdio(markers))
    calls = [
        ToolUseBlock(id="w", name=D + "weather", input={"person": PERSON, "unit": "fahrenheit"}),
        ToolUseBlock(id="p", name=D + "picture", input={}),
        ToolUseBlock(id="r", name=D + "resources", input={}),
        ToolUseBlock(id="s", name=D + "stats", input={}),
    ]
    model = ScriptedModel([calls, "All done."])
    agent = ReActAgent("assistant", model=model, toolkit=toolkit, state_store=InMemoryStateStore())
    try:
        events = await collect(agent, "What's the weather for Ann?")
        by_id = {r.id: r for r in results(events)}
        assert by_id["w"].state == "success"
        assert by_id["w"].output == "Ann (33) in Oslo, NO: 70 fahrenheit"

        picture = by_id["p"].output
        assert isinstance(picture, list) and isinstance(picture[0], ImageBlock)
        assert picture[0].source.media_type == "image/png"  # type: ignore[union-attr]

        resources = by_id["r"].output
        assert isinstance(resources, list)
        assert resources[0] == TextBlock(text="two resources")
        assert resources[1] == TextBlock(text="[resource file:///notes.txt]\nhello notes")
        assert resources[2] == TextBlock(text="[resource file:///pixel.png (image/png)]")
        assert isinstance(resources[3], ImageBlock)

        assert by_id["s"].output == '{"count":3,"items":["a","b","c"]}'  # structured content only

        # The model's next request carries the results it asked for.
        second = model.requests[1].messages
        sent = [b for m in second for b in m.blocks(ToolResultBlock)]
        assert {b.id for b in sent} == {"w", "p", "r", "s"}
        assert events[-1].msg.text == "All done."  # type: ignore[attr-defined]
    finally:
        await toolkit.aclose()


async def test_error_results(markers: Path) -> None:
    toolkit = Toolkit()
    client = demo_stdio(markers)
    await toolkit.register_mcp(client)
    agent = agent_with(
        toolkit,
        [
            ToolUseBlock(id="e", name=D + "explode", input={"reason": "bad input"}),
            ToolUseBlock(id="v", name=D + "weather", input={"person": {"name": "Ann"}}),
        ],
        "ok",
    )
    try:
        by_id = {r.id: r for r in results(await collect(agent, "go"))}
        assert by_id["e"].state == "error" and "boom: bad input" in by_id["e"].text
        assert by_id["v"].state == "error" and "age" in by_id["v"].text  # the server's validation message

        unknown = await client.call_tool("no_such_tool", {})
        assert unknown.is_error
        with pytest.raises(McpError, match="timed out"):
            await client.call_tool("slow", {"steps": 50, "delay": 0.1}, timeout=0.3)
        assert (await client.call_tool("pid")).is_error is False  # the session survived
    finally:
        await toolkit.aclose()


async def test_progress_notifications_become_events(markers: Path) -> None:
    toolkit = Toolkit()
    await toolkit.register_mcp(demo_stdio(markers))
    agent = agent_with(toolkit, ToolUseBlock(id="call-1", name=D + "slow", input={"steps": 3, "delay": 0.05}), "ok")
    try:
        events = await collect(agent, "work", RuntimeContext("u1", "s1"))
        progress = [e for e in events if isinstance(e, McpProgress)]
        assert [(p.progress, p.total, p.message) for p in progress] == [
            (1, 3, "step 1 of 3"),
            (2, 3, "step 2 of 3"),
            (3, 3, "step 3 of 3"),
        ]
        first = progress[0]
        assert (first.tool_call_id, first.server, first.tool, first.session_id) == (
            "call-1",
            "Demo_Server",
            "slow",
            "s1",
        )
        assert first.type == "mcp_progress" and first.source == "assistant"
        assert event_from_dict(first.to_dict()) == first
        assert results(events)[0].output == "finished 3 steps"
    finally:
        await toolkit.aclose()


# --------------------------------------------------------------------------------------------------
# cancellation and timeouts
# --------------------------------------------------------------------------------------------------
async def test_interrupt_cancels_the_call_on_the_server(markers: Path) -> None:
    toolkit = Toolkit()
    client = demo_stdio(markers)
    await toolkit.register_mcp(client)
    tag = uuid.uuid4().hex[:8]
    agent = agent_with(toolkit, ToolUseBlock(name=D + "slow", input={"steps": 100, "delay": 0.1, "tag": tag}))
    ctx = RuntimeContext("u1", "s1")
    try:
        events: list[AgentEvent] = []
        async for event in agent.stream_events("work", ctx):
            events.append(event)
            if isinstance(event, McpProgress) and event.progress == 2:
                assert agent.interrupt(ctx)
        assert events[-1].msg.generate_reason is GenerateReason.INTERRUPTED  # type: ignore[attr-defined]
        await wait_for(lambda: (markers / f"cancelled-{tag}").exists())  # the server saw notifications/cancelled
        assert not (markers / f"done-{tag}").exists()
        assert (await client.call_tool("pid")).is_error is False  # same session, still usable
        assert client.reconnects == 0
    finally:
        await toolkit.aclose()


async def test_timeout_is_an_error_result_and_cancels_on_the_server(markers: Path) -> None:
    toolkit = Toolkit()
    await toolkit.register_mcp(demo_stdio(markers), timeout=0.5)
    tag = uuid.uuid4().hex[:8]
    agent = agent_with(
        toolkit,
        ToolUseBlock(id="t", name=D + "slow", input={"steps": 100, "delay": 0.1, "tag": tag}),
        ToolUseBlock(id="p", name=D + "pid", input={}),
        "ok",
    )
    try:
        by_id = {r.id: r for r in results(await collect(agent, "work"))}
        assert by_id["t"].state == "error" and "timed out after 0.5 s" in by_id["t"].text
        await wait_for(lambda: (markers / f"cancelled-{tag}").exists())
        assert by_id["p"].state == "success"
    finally:
        await toolkit.aclose()


# --------------------------------------------------------------------------------------------------
# reconnects
# --------------------------------------------------------------------------------------------------
async def test_stdio_server_killed_between_calls_is_restarted_transparently(markers: Path) -> None:
    toolkit = Toolkit()
    client = demo_stdio(markers)
    await toolkit.register_mcp(client)
    pid_tool = toolkit.get(D + "pid")
    assert pid_tool is not None
    try:
        first = pid_of((await pid_tool.invoke({}, RuntimeContext())).output)
        os.kill(first, signal.SIGKILL)
        await wait_for(lambda: not client.connected)  # the client noticed the dead process
        agent = agent_with(toolkit, ToolUseBlock(id="p", name=D + "pid", input={}), "ok")
        (result,) = results(await collect(agent, "pid?"))
        assert result.state == "success"
        assert pid_of(result.output) != first
        assert client.reconnects == 1
    finally:
        await toolkit.aclose()


async def test_stdio_server_killed_during_a_call(markers: Path) -> None:
    toolkit = Toolkit()
    client = demo_stdio(markers)
    await toolkit.register_mcp(client)
    tag = uuid.uuid4().hex[:8]
    # "slow" is annotated idempotent: a call the server died under is sent again on the new process.
    agent = agent_with(
        toolkit,
        ToolUseBlock(id="s", name=D + "slow", input={"steps": 10, "delay": 0.05, "tag": tag}),
        ToolUseBlock(id="p", name=D + "pid", input={}),
        "ok",
    )
    try:
        server_pid = pid_of((await client.call_tool("pid")).content[0].text)  # type: ignore[union-attr]
        events: list[AgentEvent] = []
        async for event in agent.stream_events("work"):
            events.append(event)
            if isinstance(event, McpProgress) and event.progress == 1 and not process_gone(server_pid):
                os.kill(server_pid, signal.SIGKILL)
        by_id = {r.id: r for r in results(events)}
        assert by_id["s"].state == "success" and by_id["s"].output == "finished 10 steps"
        assert [p.progress for p in events if isinstance(p, McpProgress)].count(1) == 2  # it started over
        assert (markers / f"done-{tag}").exists()  # and ran to the end on the new process
        assert by_id["p"].state == "success" and pid_of(by_id["p"].output) != server_pid
        assert client.reconnects == 1

        # The same call marked not idempotent is never sent again: a typed error, and the new
        # process never runs it (it would leave its done marker).
        second_pid = pid_of(by_id["p"].output)
        lost_tag = uuid.uuid4().hex[:8]

        async def kill_on_start(progress: float, total: float | None, message: str | None) -> None:
            if not process_gone(second_pid):
                os.kill(second_pid, signal.SIGKILL)

        with pytest.raises(McpCallLostError) as info:
            args = {"steps": 4, "delay": 0.05, "tag": lost_tag}
            await client.call_tool("slow", args, progress=kill_on_start, idempotent=False)
        assert info.value.restarted and info.value.tool == "slow" and "not sent again" in str(info.value)
        third = pid_of((await client.call_tool("pid")).content[0].text)  # type: ignore[union-attr]
        assert third not in (server_pid, second_pid) and client.reconnects == 2
        await asyncio.sleep(0.5)  # ample time for a re-sent call (4 x 0.05 s) to finish
        assert not (markers / f"done-{lost_tag}").exists()
    finally:
        await toolkit.aclose()


async def test_streamable_http_calls_progress_cancel_and_server_restart(http_server: HttpServer, markers: Path) -> None:
    toolkit = Toolkit()
    client = McpClient.http(
        http_server.url, headers={"X-Test": "1"}, reconnect_delays=(0, 0.1, 0.2), trust_annotations=True
    )
    await toolkit.register_mcp(client)
    try:
        assert client.name == "Demo_Server" and client.transport == "http"
        weather = toolkit.get(D + "weather")
        assert weather is not None and weather.read_only
        agent = agent_with(toolkit, ToolUseBlock(id="w", name=D + "weather", input={"person": PERSON}), "ok")
        (result,) = results(await collect(agent, "weather"))
        assert result.output == "Ann (33) in Oslo, NO: 21 celsius"

        seen: list[tuple[float, float | None, str | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append((progress, total, message))

        done = await client.call_tool("slow", {"steps": 2, "delay": 0.01}, progress=on_progress)
        assert done.content[0].text == "finished 2 steps"  # type: ignore[union-attr]
        assert seen == [(1, 2, "step 1 of 2"), (2, 2, "step 2 of 2")]

        tag = uuid.uuid4().hex[:8]
        running = asyncio.Event()

        async def on_first_step(progress: float, total: float | None, message: str | None) -> None:
            running.set()

        args = {"steps": 100, "delay": 0.1, "tag": tag}
        call = asyncio.create_task(client.call_tool("slow", args, progress=on_first_step))
        async with asyncio.timeout(10):
            await running.wait()  # the server is running the call: cancelling must reach it
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await wait_for(lambda: (markers / f"cancelled-{tag}").exists())

        pid_tool = toolkit.get(D + "pid")
        assert pid_tool is not None
        first = pid_of((await pid_tool.invoke({}, RuntimeContext())).output)

        # Restarted at the same URL: the old session id is unknown there (404), so the call is
        # known undelivered and is retried on a new session (server-everything answers 400
        # instead: tests/integration/test_mcp_everything.py).
        await http_server.stop()
        await http_server.start()
        second = pid_of((await pid_tool.invoke({}, RuntimeContext())).output)
        assert second != first and client.reconnects == 1

        # Down: a clear error naming the server; back up: works again.
        await http_server.stop()
        with pytest.raises(Exception, match=r"Demo_Server.*could not connect"):
            await pid_tool.invoke({}, RuntimeContext())
        await http_server.start()
        third = pid_of((await pid_tool.invoke({}, RuntimeContext())).output)
        assert third not in (first, second)
    finally:
        await toolkit.aclose()


async def test_sse_calls_progress_cancel_and_server_restart(sse_server: HttpServer, markers: Path) -> None:
    toolkit = Toolkit()
    client = McpClient.sse(sse_server.url)
    await toolkit.register_mcp(client, prefix="sse_")
    try:
        assert client.transport == "sse"
        agent = agent_with(
            toolkit,
            [
                ToolUseBlock(id="w", name="sse_weather", input={"person": PERSON, "unit": "celsius"}),
                ToolUseBlock(id="s", name="sse_slow", input={"steps": 2, "delay": 0.01}),
                ToolUseBlock(id="e", name="sse_explode", input={"reason": "sse"}),
            ],
            "ok",
        )
        events = await collect(agent, "go")
        by_id = {r.id: r for r in results(events)}
        assert by_id["w"].output == "Ann (33) in Oslo, NO: 21 celsius"
        assert by_id["s"].output == "finished 2 steps"
        assert by_id["e"].state == "error" and "boom: sse" in by_id["e"].text
        assert [p.progress for p in events if isinstance(p, McpProgress)] == [1, 2]

        tag = uuid.uuid4().hex[:8]
        running = asyncio.Event()

        async def on_first_step(progress: float, total: float | None, message: str | None) -> None:
            running.set()

        args = {"steps": 100, "delay": 0.1, "tag": tag}
        call = asyncio.create_task(client.call_tool("slow", args, progress=on_first_step))
        async with asyncio.timeout(10):
            await running.wait()  # the server is running the call: cancelling must reach it
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await wait_for(lambda: (markers / f"cancelled-{tag}").exists())

        first = pid_of((await client.call_tool("pid")).content[0].text)  # type: ignore[union-attr]
        await sse_server.stop()
        await wait_for(lambda: not client.connected)  # the event stream ended
        await sse_server.start()
        second = pid_of((await client.call_tool("pid")).content[0].text)  # type: ignore[union-attr]
        assert second != first and client.reconnects == 1
    finally:
        await toolkit.aclose()


@pytest.mark.parametrize(
    ("code", "message", "stale"),
    [
        (-32000, "Bad Request: No valid session ID provided", True),  # TypeScript SDK servers, HTTP 400
        (-32600, "Session terminated", True),  # the Python SDK client's reading of HTTP 404
        (-32600, "Session not found", True),
        (-32000, "Bad Request: Server not initialized", True),
        (-32000, "Connection closed", False),  # the SDK's CONNECTION_CLOSED shares the code
        (-32602, "Invalid params: session_id must be a string", False),
        (-32603, "Internal error", False),
    ],
)
def test_stale_session_answers_are_recognised(code: int, message: str, stale: bool) -> None:
    from mcp.shared.exceptions import MCPError

    from agentrt.tool.mcp import _is_expired_session

    assert _is_expired_session(MCPError(code=code, message=message)) is stale


# --------------------------------------------------------------------------------------------------
# failures to start, lifecycle
# --------------------------------------------------------------------------------------------------
async def test_servers_that_cannot_start_give_clear_errors() -> None:
    toolkit = Toolkit()
    with pytest.raises(McpConnectionError) as info:
        await toolkit.register_mcp(McpClient.stdio("agentrt-no-such-command", ["--flag"], name="ghost"))
    assert "'ghost'" in str(info.value) and "not found" in str(info.value)
    assert "agentrt-no-such-command" in str(info.value)
    assert info.value.server == "ghost" and not info.value.retryable
    assert not isinstance(info.value, BaseExceptionGroup)

    with pytest.raises(McpConnectionError, match=r"'quitter'.*exited or closed its output"):
        await toolkit.register_mcp(McpClient.stdio(sys.executable, ["-c", "raise SystemExit(3)"], name="quitter"))

    url = f"http://127.0.0.1:{free_port()}/mcp"
    with pytest.raises(McpConnectionError, match=r"'127_0_0_1_\d+' could not connect to URL"):
        await toolkit.register_mcp(McpClient.http(url))
    with pytest.raises(McpConnectionError, match=r"'nowhere' could not connect"):
        await toolkit.register_mcp(McpClient.sse(url.replace("/mcp", "/sse"), name="nowhere"))
    assert len(toolkit) == 0

    with pytest.raises(Exception, match="http:// or https://"):
        McpClient.http("ftp://example.com/mcp")


async def test_toolkit_aclose_closes_the_clients_it_opened(markers: Path) -> None:
    toolkit = Toolkit()
    owned = demo_stdio(markers, name="owned")
    await toolkit.register_mcp(owned)
    async with demo_stdio(markers, name="mine") as mine:
        await toolkit.register_mcp(mine)
        owned_pid = pid_of((await owned.call_tool("pid")).content[0].text)  # type: ignore[union-attr]
        mine_pid = pid_of((await mine.call_tool("pid")).content[0].text)  # type: ignore[union-attr]

        await toolkit.aclose()
        assert owned.closed and not owned.connected
        await wait_for(lambda: process_gone(owned_pid))
        assert mine.connected and not process_gone(mine_pid)

        tool = toolkit.get("mcp__owned__pid")
        assert tool is not None
        with pytest.raises(Exception, match="closed"):
            await tool.invoke({}, RuntimeContext())
        await owned.aclose()  # idempotent
    await wait_for(lambda: process_gone(mine_pid))


async def test_toolkits_sharing_a_client_close_it_last(markers: Path) -> None:
    shared = demo_stdio(markers, name="shared")
    first, second = Toolkit(), Toolkit()
    await first.register_mcp(shared, include="pid")
    second.register(lambda: None, name="mcp__shared__pid")
    with pytest.raises(Exception, match="already registered"):
        await second.register_mcp(shared, include="pid")
    await second.register_mcp(shared, include="pid", prefix="again_")  # the failure left the client usable
    server_pid = pid_of((await shared.call_tool("pid")).content[0].text)  # type: ignore[union-attr]

    await first.aclose()
    assert shared.connected  # still used by the second toolkit
    again = second.get("again_pid")
    assert again is not None and (await again.invoke({}, RuntimeContext())).state == "success"
    await second.aclose()
    assert shared.closed
    await wait_for(lambda: process_gone(server_pid))


async def test_a_failed_first_registration_leaves_the_client_reusable(markers: Path) -> None:
    client = demo_stdio(markers)
    toolkit = Toolkit()
    toolkit.register(lambda: None, name=D + "pid")
    with pytest.raises(Exception, match="already registered"):
        await toolkit.register_mcp(client)
    assert not client.connected and not client.closed
    tools = await toolkit.register_mcp(client, prefix="demo_")
    assert len(tools) == 9
    await toolkit.aclose()
    assert client.closed


# --------------------------------------------------------------------------------------------------
# our own server: agentrt mcp serve
# --------------------------------------------------------------------------------------------------
def serve_args(target: str, *extra: str) -> list[str]:
    return ["-m", "agentrt.cli", "mcp", "serve", f"mcp_servers.agentrt_target:{target}", *extra]


SERVE_ENV = {"PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(HERE)]), "AGENTRT_STATE_URL": "memory://"}


async def test_agentrt_mcp_serve_toolkit_round_trip() -> None:
    toolkit = Toolkit()
    client = McpClient.stdio(
        sys.executable, serve_args("toolkit"), env=SERVE_ENV, cwd=str(HERE), trust_annotations=True
    )
    tools = await toolkit.register_mcp(client)
    try:
        assert client.name == "agentrt"
        by_name = {t.name: t for t in tools}
        assert set(by_name) == {f"mcp__agentrt__{n}" for n in ("add", "drop_table", "fail", "tiny_image")}
        add = by_name["mcp__agentrt__add"]
        assert add.read_only and not add.destructive
        assert add.parameters["required"] == ["a", "b"]
        assert add.parameters["properties"]["a"]["description"] == "The first number."
        assert add.description.startswith("Add two integers.")
        drop = by_name["mcp__agentrt__drop_table"]
        assert drop.destructive and drop.idempotent and not drop.read_only

        agent = agent_with(
            toolkit,
            [
                ToolUseBlock(id="a", name="mcp__agentrt__add", input={"a": 2, "b": 3}),
                ToolUseBlock(id="bad", name="mcp__agentrt__add", input={"a": "x"}),
                ToolUseBlock(id="f", name="mcp__agentrt__fail", input={"reason": "nope"}),
                ToolUseBlock(id="i", name="mcp__agentrt__tiny_image", input={}),
            ],
            "ok",
        )
        by_id = {r.id: r for r in results(await collect(agent, "add"))}
        assert by_id["a"].output == "5"
        assert by_id["bad"].state == "error" and "b" in by_id["bad"].text  # validated by our server
        assert by_id["f"].state == "error" and "ValueError: nope" in by_id["f"].text
        image = by_id["i"].output
        assert isinstance(image, list) and isinstance(image[0], ImageBlock)
    finally:
        await toolkit.aclose()


async def test_agentrt_mcp_serve_agent_round_trip() -> None:
    toolkit = Toolkit()
    client = McpClient.stdio(sys.executable, serve_args("agent"), env=SERVE_ENV, cwd=str(HERE))
    (ask,) = await toolkit.register_mcp(client)
    try:
        assert client.name == "helper" and ask.name == "mcp__helper__ask_helper"
        assert ask.parameters["required"] == ["task"]
        seen: list[str | None] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(message)

        first = await client.call_tool("ask_helper", {"task": "hello"}, progress=on_progress)
        assert first.content[0].text == "echo: hello (turn 1)"  # type: ignore[union-attr]
        assert seen == ["step 1"]
        # The same MCP connection continues the same agent session.
        second = await client.call_tool("ask_helper", {"task": "again"})
        assert second.content[0].text == "echo: again (turn 2)"  # type: ignore[union-attr]
        bad = await client.call_tool("ask_helper", {"task": ""})
        assert bad.is_error
    finally:
        await toolkit.aclose()


async def test_agentrt_mcp_serve_over_streamable_http() -> None:
    port = free_port()
    proc = subprocess.Popen(  # noqa: ASYNC220 - Popen only starts the server; it does not wait
        [sys.executable, *serve_args("toolkit", "--transport", "http", "--port", str(port), "--name", "calc")],
        env={**os.environ, **SERVE_ENV},
        cwd=str(HERE),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    toolkit = Toolkit()
    try:

        def listening() -> bool:
            assert proc.poll() is None, "agentrt mcp serve exited"
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        await wait_for(listening, timeout=20)
        await toolkit.register_mcp(McpClient.http(f"http://127.0.0.1:{port}/mcp"))
        add = toolkit.get("mcp__calc__add")
        assert add is not None
        assert (await add.invoke({"a": 40, "b": 2}, RuntimeContext())).output == "42"
    finally:
        await toolkit.aclose()
        proc.kill()
        await asyncio.to_thread(proc.wait)
