"""An in-process MCP server that asks its user questions (elicitation, sampling), for the question tests.

Built with the official SDK's `MCPServer` (FastMCP) and reached with `McpClient.memory`, so the
tests of the question channel need no Node.js and no subprocess. Every tool records what the
server really received in `Received`, the observable side effect the tests assert on.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import SamplingMessage, TextContent
from pydantic import BaseModel, Field

from agentrt import ReActAgent, Toolkit, ToolUseBlock
from agentrt.events import AgentEvent
from agentrt.mcp import McpClient, McpElicitation
from agentrt.model import ScriptedModel
from agentrt.state import InMemoryStateStore

AUTH_URL = "https://auth.example.com/authorize?client=agentrt"
P = "mcp__questions__"


class Booking(BaseModel):
    """The form `book` asks for."""

    name: str = Field(min_length=1, description="Who the table is for")
    seats: int = Field(ge=1, le=8, description="How many seats")
    window: bool = False
    meal: Literal["veg", "fish", "meat"] = "veg"


@dataclass
class Received:
    """What the server got back for its questions, in order: (tool, action, content)."""

    answers: list[tuple[str, str, Any]] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    """Tools whose call was cancelled while their question waited."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, tool: str, action: str, content: Any) -> None:
        self.answers.append((tool, action, content))
        self.changed.set()


def question_server(received: Received) -> MCPServer:
    """A server whose tools ask: a form (`book`), a URL (`authorize`), any form (`ask`), sampling (`summarize`)."""
    server = MCPServer("questions", instructions="Asks its user things.")

    @server.tool(description="Book a table; asks for the booking details.")
    async def book(ctx: Context, table: str) -> str:
        try:
            result = await ctx.elicit(f"Book table {table}: who and how many?", Booking)
        except asyncio.CancelledError:
            received.cancelled.append("book")
            received.changed.set()
            raise
        data = result.data.model_dump() if result.action == "accept" else None
        received.add("book", result.action, data)
        if result.action == "accept":
            return f"booked table {table}: {json.dumps(data, sort_keys=True)}"
        return f"not booked ({result.action})"

    @server.tool(description="Connect an account; asks the user to authorize on a web page.")
    async def authorize(ctx: Context, url: str = AUTH_URL) -> str:
        result = await ctx.elicit_url("Sign in to connect your account.", url, elicitation_id="auth-1")
        received.add("authorize", result.action, None)
        return f"authorization: {result.action}"

    @server.tool(description="Ask a form given as a JSON Schema (for tests).")
    async def ask(ctx: Context, schema: str, message: str = "Fill this in.") -> str:
        result = await ctx.session.elicit_form(
            message=message, requested_schema=json.loads(schema), related_request_id=ctx.request_id
        )
        received.add("ask", result.action, result.content)
        return json.dumps({"action": result.action, "content": result.content}, sort_keys=True)

    @server.tool(description="Summarise a text with the client's model (sampling).")
    async def summarize(ctx: Context, text: str) -> str:
        try:
            with warnings.catch_warnings():  # the SDK marks sampling deprecated for the 2026-07-28 protocol
                warnings.simplefilter("ignore")
                result = await ctx.session.create_message(
                    messages=[
                        SamplingMessage(role="user", content=TextContent(type="text", text=f"Summarise: {text}"))
                    ],
                    max_tokens=50,
                    related_request_id=ctx.request_id,
                )
        except Exception as exc:
            received.add("summarize", "refused", str(exc))
            return f"sampling refused: {exc}"
        content = result.content
        answer = content.text if isinstance(content, TextContent) else str(content)
        received.add("summarize", "accept", answer)
        return f"summary: {answer}"

    return server


def call(tool: str, call_id: str = "call-1", **arguments: Any) -> ToolUseBlock:
    """A model step calling one of the server's tools."""
    return ToolUseBlock(id=call_id, name=P + tool, input=arguments)


async def agent_with_questions(
    received: Received, steps: list[Any], *, name: str = "assistant", sampling: bool = False, **client_options: Any
) -> tuple[ReActAgent, Toolkit, ScriptedModel]:
    """A ReActAgent whose toolkit holds the question server's tools (close the toolkit afterwards).

    With `sampling`, the server may sample the agent's own model behind the human's approval.
    """
    model = ScriptedModel(steps)
    if sampling:
        client_options.update(sampling_model=model, sampling_approval=True)
    toolkit = Toolkit()
    await toolkit.register_mcp(McpClient.memory(question_server(received), name="questions", **client_options))
    agent = ReActAgent(name, "You book tables.", model=model, toolkit=toolkit, state_store=InMemoryStateStore())
    return agent, toolkit, model


def questions_in(events: list[AgentEvent]) -> list[McpElicitation]:
    """The question events of a stream."""
    return [e for e in events if isinstance(e, McpElicitation)]
