"""The MCP client against the npm reference server ``@modelcontextprotocol/server-everything``.

The server is installed by ``scripts/install-node-deps.sh`` into ``tests/node/node_modules``. The
tests skip when Node.js or the package is missing locally, and fail under ``CI=true``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from agentrt import GenerateReason, Msg, ReActAgent, RuntimeContext, Toolkit, ToolUseBlock
from agentrt.events import AgentEvent, RunFinished, ToolResult, event_from_dict
from agentrt.model import ScriptedModel
from agentrt.state import InMemoryStateStore
from agentrt.tool.mcp import (
    ElicitationAnswer,
    ElicitationRequest,
    McpCallLostError,
    McpClient,
    McpElicitation,
    McpProgress,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "tests" / "node" / "node_modules" / "@modelcontextprotocol" / "server-everything"
BIN = ROOT / "tests" / "node" / "node_modules" / ".bin" / "mcp-server-everything"
E = "mcp__everything__"
TEXT_7 = "demo://resource/dynamic/text/7"


def everything_bin() -> str:
    """The server's bin; skip (locally) or fail (CI=true) without Node.js or the package."""
    if shutil.which("node") is not None and BIN.exists():
        return str(BIN)
    message = "Node.js or @modelcontextprotocol/server-everything is missing (run scripts/install-node-deps.sh)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message}; CI must run the MCP interop tests")
    pytest.skip(message)


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


class EverythingHttp:
    """The server over streamable HTTP on a fixed port; each start is a new generation (AGENTRT_GEN)."""

    def __init__(self, bin_path: str) -> None:
        self.bin = bin_path
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc: subprocess.Popen[bytes] | None = None
        self.generation = 0

    async def start(self) -> None:
        self.generation += 1
        env = {**os.environ, "PORT": str(self.port), "AGENTRT_GEN": str(self.generation)}
        self.proc = subprocess.Popen(  # noqa: ASYNC220 - Popen only starts the server; it does not wait
            [self.bin, "streamableHttp"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        await wait_for(self._listening, timeout=20)

    def _listening(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"server-everything exited with {self.proc.returncode}")
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    async def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            await asyncio.to_thread(self.proc.wait)
        self.proc = None

    async def restart(self) -> None:
        await self.kill()
        await self.start()


@pytest.fixture
async def http_server() -> AsyncIterator[EverythingHttp]:
    server = EverythingHttp(everything_bin())
    await server.start()
    try:
        yield server
    finally:
        await server.kill()


def stdio_client(**options: Any) -> McpClient:
    return McpClient.stdio(everything_bin(), ["stdio"], name="everything", **options)


def agent_with(toolkit: Toolkit, model: ScriptedModel) -> ReActAgent:
    return ReActAgent("assistant", model=model, toolkit=toolkit, state_store=InMemoryStateStore())


def results(events: list[AgentEvent]) -> dict[str, Any]:
    return {e.result.id: e.result for e in events if isinstance(e, ToolResult)}


def generation(text: str) -> str:
    """The AGENTRT_GEN of the process that answered ``get-env``."""
    return str(json.loads(text)["AGENTRT_GEN"])


# --------------------------------------------------------------------------------------------------
# issue 13.2: the server restarts on the same port
# --------------------------------------------------------------------------------------------------
async def test_http_server_restart_on_the_same_port(http_server: EverythingHttp) -> None:
    asked: list[ElicitationRequest] = []
    updates: list[str] = []

    async def human(request: ElicitationRequest) -> ElicitationAnswer:
        asked.append(request)
        await asyncio.Event().wait()  # never answers: the server dies first
        raise AssertionError("unreachable")

    client = McpClient.http(http_server.url, name="everything", elicitation_handler=human, trust_annotations=True)
    toolkit = Toolkit()
    await toolkit.register_mcp(client)
    get_env = toolkit.get(E + "get-env")
    assert get_env is not None and get_env.read_only
    try:
        assert generation((await get_env.invoke({}, RuntimeContext())).output) == "1"
        await client.subscribe_resource(TEXT_7, updates.append)

        # Restarted: the old session id gets HTTP 400 "No valid session ID provided". The call is
        # known undelivered, so it is sent again on a new session, served by the new process.
        await http_server.restart()
        assert generation((await get_env.invoke({}, RuntimeContext())).output) == "2"
        assert client.reconnects == 1 and client.connected

        # The subscription was renewed on the new session: the new process sends its updates.
        toggled = await client.call_tool("toggle-subscriber-updates", {})
        assert "Started" in toggled.content[0].text  # type: ignore[union-attr]
        await wait_for(lambda: TEXT_7 in updates)

        # A non-idempotent call in flight when the server dies is never sent again.
        call = asyncio.create_task(client.call_tool("trigger-elicitation-request", {}))
        await wait_for(lambda: len(asked) == 1)
        await http_server.restart()
        with pytest.raises(McpCallLostError) as info:
            await call
        assert info.value.restarted and info.value.tool == "trigger-elicitation-request"
        assert "not sent again" in str(info.value)
        assert client.reconnects == 2
        await asyncio.sleep(0.5)
        assert len(asked) == 1  # a re-sent call would have asked again
        assert generation((await get_env.invoke({}, RuntimeContext())).output) == "3"

        # An idempotent (read-only) call in flight is sent again and completes on the new process.
        seen: list[float] = []
        restarts: list[asyncio.Task[None]] = []

        async def kill_once(progress: float, total: float | None, message: str | None) -> None:
            seen.append(progress)
            if len(seen) == 1:
                restarts.append(asyncio.create_task(http_server.restart()))

        args = {"duration": 0.8, "steps": 4}
        done = await client.call_tool("trigger-long-running-operation", args, progress=kill_once)
        await restarts[0]
        assert done.content[0].text.startswith("Long running operation completed")  # type: ignore[union-attr]
        assert seen.count(1) == 2 and seen[-1] == 4  # it started over and ran to the end
        assert client.reconnects == 3
        assert generation((await get_env.invoke({}, RuntimeContext())).output) == "4"
    finally:
        await toolkit.aclose()


# --------------------------------------------------------------------------------------------------
# issue 13.6: resources, prompts, sampling, elicitation
# --------------------------------------------------------------------------------------------------
async def test_resources_prompts_subscriptions_and_default_decline() -> None:
    model = ScriptedModel(
        [
            [
                ToolUseBlock(id="list", name=E + "list_resources", input={}),
                ToolUseBlock(id="read", name=E + "read_resource", input={"uri": TEXT_7}),
                ToolUseBlock(id="bad", name=E + "read_resource", input={"uri": "demo://resource/dynamic/text/0"}),
            ],
            "Read them.",
            "It is cold.",
            "A summary.",
        ]
    )
    toolkit = Toolkit()
    client = stdio_client()
    tools = await toolkit.register_mcp(client)
    agent = agent_with(toolkit, model)
    try:
        by_name = {t.name: t for t in tools}
        assert by_name[E + "list_resources"].read_only and by_name[E + "read_resource"].read_only
        by_id = results([e async for e in agent.stream_events("What resources are there?")])
        listing = by_id["list"].output
        assert "- demo://resource/static/document/features.md (features.md, text/markdown)" in listing
        assert "- demo://resource/dynamic/text/{resourceId} (Dynamic Text Resource, text/plain)" in listing
        assert by_id["read"].output.startswith(f"[resource {TEXT_7}]\nResource 7: This is a plaintext resource")
        assert by_id["bad"].state == "error" and "Unknown resource" in by_id["bad"].text

        # A blob of text/plain is decoded; a resource attached as context reaches the model.
        blob = await client.resource_message("demo://resource/dynamic/blob/3")
        assert "Resource 3: This is a base64 blob" in blob.text

        # Prompts are templates for a call.
        assert {"simple-prompt", "args-prompt", "resource-prompt"} <= {p.name for p in await client.list_prompts()}
        prompt = await client.get_prompt("args-prompt", {"city": "Oslo", "state": "NO"})
        assert [(m.role, m.text) for m in prompt] == [("user", "What's weather in Oslo, NO?")]
        assert (await agent.call(prompt)).text == "It is cold."
        assert model.requests[-1].messages[-1].text == "What's weather in Oslo, NO?"
        embedded = await client.get_prompt("resource-prompt", {"resourceType": "Text", "resourceId": "2"})
        assert embedded[1].text.startswith("[resource demo://resource/dynamic/text/2]\nResource 2:")

        doc = await client.resource_message("demo://resource/static/document/features.md")
        await agent.call([doc, Msg.user("Summarise this.")])
        sent = "\n".join(m.text for m in model.requests[-1].messages)
        assert "# Everything Server - Features" in sent

        # Subscriptions: the server only notifies URIs this session subscribed to.
        updates: list[str] = []
        await client.subscribe_resource(TEXT_7, updates.append)
        await client.call_tool("toggle-subscriber-updates", {})
        await wait_for(lambda: updates == [TEXT_7])
        await client.unsubscribe_resource(TEXT_7)
        await client.call_tool("toggle-subscriber-updates", {})  # stops the server's timer

        # Without an elicitation_handler, every question is declined.
        declined = await client.call_tool("trigger-elicitation-request", {})
        assert "User declined" in declined.content[0].text  # type: ignore[union-attr]
    finally:
        await toolkit.aclose()


async def test_sampling_by_the_agents_model_behind_an_approval(http_server: EverythingHttp) -> None:
    model = ScriptedModel(
        [
            ToolUseBlock(id="call-1", name=E + "trigger-sampling-request", input={"prompt": "6*7?", "maxTokens": 20}),
            "It is 42.",  # the server's sampling request, answered by the same model
            ToolUseBlock(id="call-2", name=E + "trigger-sampling-request", input={"prompt": "A secret?"}),
            "Done.",
        ]
    )
    questions: list[ElicitationRequest] = []

    async def human(request: ElicitationRequest) -> bool:
        questions.append(request)
        assert request.sampling is not None
        return request.sampling.messages[-1].text.endswith("6*7?")  # approve the first only

    client = McpClient.http(
        http_server.url, name="everything", sampling_model=model, sampling_approval=True, elicitation_handler=human
    )
    toolkit = Toolkit()
    await toolkit.register_mcp(client, include="trigger-sampling-*")
    agent = agent_with(toolkit, model)
    try:
        events = [e async for e in agent.stream_events("Ask the server", RuntimeContext("u1", "s1"))]
        by_id = results(events)
        first = by_id["call-1"]
        assert first.state == "success"
        assert '"text": "It is 42."' in first.output and '"model": "scripted:scripted"' in first.output
        sampling = model.requests[1]
        assert [(m.role, m.text) for m in sampling.messages] == [
            ("system", "You are a helpful test server."),
            ("user", "Resource trigger-sampling-request context: 6*7?"),
        ]
        assert sampling.options.max_tokens == 20 and sampling.options.temperature == 0.7

        # The approval was asked of the user of the run, naming the tool call that caused it.
        assert [(q.mode, q.tool, q.tool_call_id) for q in questions] == [
            ("sampling", "trigger-sampling-request", "call-1"),
            ("sampling", "trigger-sampling-request", "call-2"),
        ]
        assert questions[0].ctx is not None and questions[0].ctx.user_id == "u1"

        # Declined: the server's tool fails, and the model was never asked to sample it.
        assert by_id["call-2"].state == "error" and "rejected" in by_id["call-2"].text
        assert len(model.requests) == 4
        asks = [e for e in events if isinstance(e, McpElicitation)]
        assert [(a.tool_call_id, a.mode) for a in asks] == [("call-1", "sampling"), ("call-2", "sampling")]
        assert event_from_dict(asks[0].to_dict()) == asks[0]
    finally:
        await toolkit.aclose()


async def test_elicitation_form_and_url_through_the_handler() -> None:
    asked: list[ElicitationRequest] = []

    async def human(request: ElicitationRequest) -> ElicitationAnswer | dict[str, Any]:
        asked.append(request)
        if request.mode == "url":
            return ElicitationAnswer.accept()
        return {"name": "Ann", "check": True, "integer": 7}

    url = "https://example.com/authorize"
    model = ScriptedModel(
        [
            ToolUseBlock(id="form", name=E + "trigger-elicitation-request", input={}),
            ToolUseBlock(id="url", name=E + "trigger-url-elicitation", input={"url": url}),
            "Thanks.",
        ]
    )
    toolkit = Toolkit()
    await toolkit.register_mcp(stdio_client(elicitation_handler=human), include="trigger-*elicitation*")
    try:
        events = [e async for e in agent_with(toolkit, model).stream_events("Ask me", RuntimeContext("u2", "s2"))]
        by_id = results(events)
        form = by_id["form"].output
        assert "- Name: Ann" in form and "- Agreed to terms: true" in form and "- Favorite Integer: 7" in form
        assert '"action": "accept"' in by_id["url"].output

        first, second = asked
        assert first.mode == "form" and first.requested_schema is not None
        assert first.requested_schema["required"] == ["name"]
        assert (first.tool_call_id, first.ctx.user_id if first.ctx else None) == ("form", "u2")
        assert (second.mode, second.url, second.tool_call_id) == ("url", url, "url")
        assert second.elicitation_id
        assert [e.tool_call_id for e in events if isinstance(e, McpElicitation)] == ["form", "url"]
        assert not [e for e in events if isinstance(e, McpProgress)]
    finally:
        await toolkit.aclose()


# --------------------------------------------------------------------------------------------------
# elicitation through the run: the reference server's questions answered by the run's human
# --------------------------------------------------------------------------------------------------
ANSWER = {
    "name": "Ann Example",
    "check": True,
    "email": "ann@example.com",
    "birthdate": "1990-02-03",
    "integer": 7,
    "untitledSingleSelectEnum": "Ross",
    "untitledMultipleSelectEnum": ["Piano", "Drums"],
    "titledSingleSelectEnum": "hero-2",
    "titledMultipleSelectEnum": ["fish-2"],
    "legacyTitledEnum": "pet-3",
}


async def test_the_runs_human_answers_the_reference_servers_form() -> None:
    from agentrt.errors import InvalidAnswerError
    from agentrt.tool.questions import schema_problem

    model = ScriptedModel([ToolUseBlock(id="form", name=E + "trigger-elicitation-request", input={}), "Thanks."])
    toolkit = Toolkit()
    await toolkit.register_mcp(stdio_client(), include="trigger-elicitation-request")  # no handler
    agent = agent_with(toolkit, model)
    ctx = RuntimeContext("u3", "s3")
    events: list[AgentEvent] = []
    try:
        async for event in agent.stream_events("Ask me", ctx):
            events.append(event)
            if isinstance(event, McpElicitation):
                # The reference schema (formats, ranges, single and multiple choices, titled and
                # legacy enums) is the spec's flat form: it can be shown, and answers are checked.
                assert schema_problem(event.requested_schema) is None
                assert [q.id for q in agent.questions(ctx)] == [event.question_id]
                assert not agent.answer(RuntimeContext("intruder", "s3"), event.question_id, {"action": "decline"})
                with pytest.raises(InvalidAnswerError) as info:
                    agent.answer(ctx, event.question_id, {"action": "accept", "content": {**ANSWER, "integer": 500}})
                assert info.value.problems == [{"field": "integer", "message": "must be at most 100"}]
                with pytest.raises(InvalidAnswerError):
                    agent.answer(ctx, event.question_id, {"action": "accept", "content": {**ANSWER, "email": "nope"}})
                with pytest.raises(InvalidAnswerError):
                    bad_choice = {**ANSWER, "untitledMultipleSelectEnum": ["Kazoo"]}
                    agent.answer(ctx, event.question_id, {"action": "accept", "content": bad_choice})
                assert agent.answer(ctx, event.question_id, {"action": "accept", "content": ANSWER})
    finally:
        await toolkit.aclose()
    output = results(events)["form"].output
    assert "User provided the requested information" in output
    assert "- Name: Ann Example" in output and "- Agreed to terms: true" in output
    assert "- Email: ann@example.com" in output and "- Favorite Integer: 7" in output
    assert '"untitledMultipleSelectEnum": [\n      "Piano",\n      "Drums"\n    ]' in output  # the raw result
    assert [e.type for e in events].count("mcp_elicitation_closed") == 1


async def test_the_runs_human_answers_url_and_sampling_questions(http_server: EverythingHttp) -> None:
    url = "https://example.com/authorize?state=1"
    model = ScriptedModel(
        [
            [
                ToolUseBlock(id="url", name=E + "trigger-url-elicitation", input={"url": url}),
            ],
            ToolUseBlock(id="sample", name=E + "trigger-sampling-request", input={"prompt": "6*7?", "maxTokens": 20}),
            "It is 42.",  # the server's sampling request, answered by the agent's model once approved
            "Done.",
        ]
    )
    client = McpClient.http(http_server.url, name="everything", sampling_model=model, sampling_approval=True)
    toolkit = Toolkit()
    await toolkit.register_mcp(client, include=["trigger-url-elicitation", "trigger-sampling-request"])
    agent = agent_with(toolkit, model)
    ctx = RuntimeContext("u4", "s4")
    asked: list[McpElicitation] = []
    events: list[AgentEvent] = []
    try:
        async for event in agent.stream_events("Authorize, then ask", ctx):
            events.append(event)
            if isinstance(event, McpElicitation):
                asked.append(event)
                assert agent.answer(ctx, event.question_id, ElicitationAnswer.accept())
    finally:
        await toolkit.aclose()
    assert [(a.mode, a.tool_call_id) for a in asked] == [("url", "url"), ("sampling", "sample")]
    assert asked[0].url == url and "6*7?" in asked[1].message
    by_id = results(events)
    assert '"action": "accept"' in by_id["url"].output
    assert '"text": "It is 42."' in by_id["sample"].output


async def test_an_unanswered_reference_question_expires_as_cancel() -> None:
    model = ScriptedModel([ToolUseBlock(id="form", name=E + "trigger-elicitation-request", input={}), "Okay."])
    toolkit = Toolkit()
    await toolkit.register_mcp(stdio_client(elicitation_timeout=0.3), include="trigger-elicitation-request")
    try:
        events = [e async for e in agent_with(toolkit, model).stream_events("Ask me", RuntimeContext("u5", "s5"))]
    finally:
        await toolkit.aclose()
    assert "User cancelled the elicitation dialog" in results(events)["form"].output
    [closed] = [e for e in events if e.type == "mcp_elicitation_closed"]
    assert closed.reason == "expired"  # type: ignore[attr-defined]


async def test_interrupting_the_run_cancels_the_reference_question() -> None:
    model = ScriptedModel([ToolUseBlock(id="form", name=E + "trigger-elicitation-request", input={}), "unused"])
    toolkit = Toolkit()
    await toolkit.register_mcp(stdio_client(), include="trigger-elicitation-request")
    agent = agent_with(toolkit, model)
    ctx = RuntimeContext("u6", "s6")
    events: list[AgentEvent] = []
    try:
        async for event in agent.stream_events("Ask me", ctx):
            events.append(event)
            if isinstance(event, McpElicitation):
                assert agent.interrupt(ctx)
    finally:
        await toolkit.aclose()
    closed = [e for e in events if e.type == "mcp_elicitation_closed"]
    assert [(c.action, c.reason) for c in closed] == [("cancel", "interrupted")]  # type: ignore[attr-defined]
    assert isinstance(events[-1], RunFinished) and events[-1].msg.generate_reason is GenerateReason.INTERRUPTED
    assert agent.questions(ctx) == []


# --------------------------------------------------------------------------------------------------
# the CLI: server arguments are passed through
# --------------------------------------------------------------------------------------------------
def test_cli_passes_server_arguments_through() -> None:
    from typer.testing import CliRunner

    from agentrt.cli import build_app

    bin_path = everything_bin()
    runner = CliRunner()
    env = {"COLUMNS": "200"}
    # Arguments starting with "-" after the command belong to the server (which ignores these).
    listed = runner.invoke(
        build_app(), ["mcp", "tools", "--prefix", "ev_", bin_path, "stdio", "-y", "--verbose"], env=env
    )
    assert listed.exit_code == 0, listed.output
    assert "MCP server 'mcp-servers_everything'" in listed.output
    assert "ev_get-sum" in listed.output and "ev_read_resource" in listed.output

    index = str(PACKAGE / "dist" / "index.js")
    prompts = runner.invoke(build_app(), ["mcp", "prompts", "node", "--no-warnings", index, "stdio"], env=env)
    assert prompts.exit_code == 0, prompts.output
    assert "args-prompt" in prompts.output and "city*, state" in prompts.output

    resources = runner.invoke(build_app(), ["mcp", "resources", "--", bin_path, "stdio"], env=env)
    assert resources.exit_code == 0, resources.output
    assert "demo://resource/static/document/features.md" in resources.output
