"""MCP elicitation, offline: an MCP server asks the user in the middle of a tool call; the human answers.

An in-process MCP server (the official SDK's `MCPServer`, FastMCP) has a ``book`` tool that asks
for the booking details with ``ctx.elicit(...)``. The agent's run is streamed; the question
arrives as an ``mcp_elicitation`` event with a ``question_id``, and a separate task (standing in
for a person at a web UI, a terminal or an HTTP client) answers with ``agent.answer``. The first
answer does not fit the form and is refused (the question stays open, nothing reaches the server);
the second is taken, and the tool call goes on with it.

Run: .venv/bin/python examples/mcp_elicitation.py
"""

# No `from __future__ import annotations`: the SDK reads the tools' annotations at runtime.
import asyncio
from typing import Literal

from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel, Field

from agentrt import ReActAgent, RuntimeContext, Toolkit, ToolUseBlock
from agentrt import events as ev
from agentrt.errors import InvalidAnswerError
from agentrt.mcp import ElicitationAnswer, McpClient, McpElicitation, McpElicitationClosed
from agentrt.model import ScriptedModel
from agentrt.state import InMemoryStateStore


class Booking(BaseModel):
    name: str = Field(description="Who the table is for")
    seats: int = Field(ge=1, le=8, description="How many seats")
    window: bool = False
    meal: Literal["veg", "fish", "meat"] = "veg"


server = MCPServer("restaurant")


@server.tool(description="Book a table; asks the user for the details.")
async def book(ctx: Context, table: str) -> str:
    result = await ctx.elicit(f"Book table {table}: who, and how many seats?", Booking)
    if result.action != "accept":
        return f"Not booked: the user chose {result.action}."
    b = result.data
    return f"Booked table {table} for {b.name}: {b.seats} seats, {'window, ' if b.window else ''}{b.meal} menu."


async def human(agent: ReActAgent, ctx: RuntimeContext, questions: "asyncio.Queue[McpElicitation]") -> None:
    """The person answering: reads each question, tries a wrong answer, then a right one."""
    question = await questions.get()
    print(f"\n? {question.server} asks ({question.mode}): {question.message}")
    for name, field in (question.requested_schema or {}).get("properties", {}).items():
        print(f"    {name}: {field.get('type')} {field.get('description', '')}".rstrip())
    try:
        agent.answer(ctx, question.question_id, ElicitationAnswer.accept({"name": "Ann", "seats": 12}))
    except InvalidAnswerError as exc:
        print(
            f"  refused: {exc.problems}  (still open: {[q.id for q in agent.questions(ctx)] == [question.question_id]})"
        )
    answer = {"action": "accept", "content": {"name": "Ann", "seats": 4, "window": True, "meal": "fish"}}
    print("  answered:", agent.answer(ctx, question.question_id, answer))


async def main() -> None:
    toolkit = Toolkit()
    await toolkit.register_mcp(McpClient.memory(server, name="restaurant", elicitation_timeout=60))
    model = ScriptedModel(
        [ToolUseBlock(id="call-1", name="mcp__restaurant__book", input={"table": "T7"}), "Your table is booked."]
    )
    agent = ReActAgent("concierge", "You book tables.", model=model, toolkit=toolkit, state_store=InMemoryStateStore())
    ctx = RuntimeContext(user_id="ann", session_id="dinner")
    questions: asyncio.Queue[McpElicitation] = asyncio.Queue()
    answering = asyncio.create_task(human(agent, ctx, questions))
    try:
        async for event in agent.stream_events("Book table T7 for me", ctx):
            if isinstance(event, McpElicitation) and event.question_id:
                questions.put_nowait(event)  # the run waits in the tool call until the answer comes
            elif isinstance(event, McpElicitationClosed):
                print(f"  question closed: {event.action} ({event.reason})")
            elif isinstance(event, ev.ToolResult):
                print(f"\n← {event.result.name}: {event.result.text}")
            elif isinstance(event, ev.RunFinished):
                print(f"\n{agent.name}: {event.msg.text}")
        await answering
    finally:
        await toolkit.aclose()


if __name__ == "__main__":
    asyncio.run(main())
