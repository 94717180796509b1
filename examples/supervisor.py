"""A supervisor delegating to two subagents through `as_tool`; offline with scripted models.

The supervisor's model sees two tools, ``researcher`` and ``writer``. Each is a whole agent with
its own session (``<session>/<tool name>``) and, for the researcher, its own tools. The
subagents' events are forwarded into the supervisor's stream with their own `source`, and their
token usage is added to the supervisor's reply.

Run: .venv/bin/python examples/supervisor.py
"""

from __future__ import annotations

import asyncio

from agentrt import ReActAgent, RuntimeContext, Toolkit, ToolResultBlock, ToolUseBlock, tool
from agentrt import events as ev
from agentrt.message import TokenUsage
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.state import InMemoryStateStore

PRICES = {"oslo": "NOK 95 for a day pass", "lisbon": "EUR 6.80 for a day pass", "kyoto": "JPY 1,100 for a bus day pass"}


@tool(read_only=True)
async def transit_prices(city: str) -> str:
    """Look up public transport prices.

    Args:
        city: The city, e.g. "Lisbon".
    """
    return PRICES.get(city.lower(), "unknown")


def researcher_plan(request: ModelRequest) -> object:
    """Look up each city named in the task, then report the facts."""
    results = request.messages[-1].blocks(ToolResultBlock)
    if not results:
        cities = [c for c in PRICES if c in request.last_user_text.lower()]
        return [ToolUseBlock(name="transit_prices", input={"city": c.capitalize()}) for c in cities]
    calls = {c.id: c for m in request.messages for c in m.tool_calls}
    return "; ".join(f"{calls[r.id].input['city']}: {r.text}" for r in results)


def writer_plan(request: ModelRequest) -> str:
    """Turn the facts in the task into a friendly paragraph."""
    facts = request.last_user_text.split("Facts: ", 1)[-1]
    items = [f.split(": ", 1) for f in facts.split("; ")]
    body = ", ".join(f"in {city} expect {price}" for city, price in items)
    return f"Getting around is cheap: {body}. Buy passes at any metro station."


def supervisor_plan(request: ModelRequest) -> object:
    """Research first, then have the writer draft, then hand the draft to the user."""
    last = request.messages[-1].blocks(ToolResultBlock)
    if not last:
        return ToolUseBlock(name="researcher", input={"task": f"Find transit prices for: {request.last_user_text}"})
    if last[0].name == "researcher":
        return ToolUseBlock(name="writer", input={"task": f"Write a travel tip. Facts: {last[0].text}"})
    return f"Here is your travel tip:\n{last[0].text}"


async def main() -> None:
    store = InMemoryStateStore()
    usage = TokenUsage(input_tokens=120, output_tokens=30)
    researcher = ReActAgent(
        "researcher",
        "You find facts with your tools.",
        model=ScriptedModel.from_function(researcher_plan, usage=usage),
        toolkit=Toolkit([transit_prices]),
        state_store=store,
        description="Finds facts (transit prices) for a list of cities.",
    )
    writer = ReActAgent(
        "writer",
        "You write short, friendly travel tips.",
        model=ScriptedModel.from_function(writer_plan, usage=usage),
        state_store=store,
        description="Writes a short travel tip from facts given in the task.",
    )
    supervisor = ReActAgent(
        "supervisor",
        "You plan the work and delegate it to your team.",
        model=ScriptedModel.from_function(supervisor_plan, usage=usage),
        toolkit=Toolkit([researcher.as_tool(), writer.as_tool()]),
        state_store=store,
    )
    ctx = RuntimeContext(user_id="bob", session_id="trip")

    depth = {"supervisor": "", "researcher": "    ", "writer": "    "}
    tokens: dict[str, int] = {}
    async for event in supervisor.stream_events("Lisbon and Kyoto", ctx):
        pad = depth.get(event.source, "")
        if isinstance(event, ev.ToolCallStarted):
            print(f"{pad}[{event.source}] calls {event.name}")
        elif isinstance(event, ev.ToolResult):
            print(f"{pad}[{event.source}] {event.result.name} returned: {event.result.text[:60]}...")
        elif isinstance(event, ev.Usage):
            tokens[event.source] = tokens.get(event.source, 0) + event.usage.total_tokens
        elif isinstance(event, ev.RunFinished) and event.source != "supervisor":
            print(f"{pad}[{event.source}] answered in session {event.session_id!r}")
        elif isinstance(event, ev.RunFinished):
            print(f"\n{event.msg.text}")
            total = event.msg.usage.total_tokens if event.msg.usage else 0
            print(f"\ntokens: {tokens} -> the supervisor's reply counts {total}")

    for name in ("researcher", "writer"):
        state = await store.load("bob", f"trip/{name}", agent=name)  # sessions belong to their agent
        print(f"session trip/{name}: {len(state.messages) if state else 0} messages")


if __name__ == "__main__":
    asyncio.run(main())
