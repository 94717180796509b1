"""The timeline of a reply: two tools in parallel and an approval wait, recorded and printed; offline.

`RunRecorder` times every model call, tool execution and approval wait of a reply on one axis and
stores the record with the session (the server does this for every agent it serves, and shows the
waterfall in its web UI). Here an agent with a scripted model runs two read-only tools at once and
one that needs approval; the user approves; the record of the whole run is printed as JSON, as
``GET /v1/agents/{agent}/sessions/{id}/runs/{reply_id}`` returns it.

Run: .venv/bin/python examples/run_timeline.py
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agentrt import ConfirmResult, Msg, ReActAgent, RuntimeContext, Toolkit, ToolResultBlock, ToolUseBlock, tool
from agentrt.message import TokenUsage
from agentrt.middleware.timeline import RunRecorder, timeline_view
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.state import InMemoryStateStore
from agentrt.state.runs import RunRetention, find_run


@tool(read_only=True)
async def weather(city: str) -> str:
    """Today's weather.

    Args:
        city: The city.
    """
    await asyncio.sleep(0.2)
    return f"sunny in {city}"


@tool(read_only=True)
async def calendar(day: str) -> str:
    """The day's meetings.

    Args:
        day: The day.
    """
    await asyncio.sleep(0.2)
    return f"no meetings {day}"


@tool(requires_confirmation=True)
async def book_picnic(place: str) -> str:
    """Book a picnic spot (asks first).

    Args:
        place: Where.
    """
    return f"booked {place}"


def planner(request: ModelRequest) -> Any:
    results = request.messages[-1].blocks(ToolResultBlock)
    if results:
        return "Plan: " + "; ".join(r.text for r in results)
    return [
        ToolUseBlock(name="weather", input={"city": "Lyon"}),
        ToolUseBlock(name="calendar", input={"day": "today"}),
        ToolUseBlock(name="book_picnic", input={"place": "Parc de la Tête d'Or"}),
    ]


async def main() -> None:
    store = InMemoryStateStore()
    model = ScriptedModel.from_function(planner, name="planner", usage=TokenUsage(input_tokens=150, output_tokens=40))
    agent = ReActAgent(
        "planner",
        "You plan outings.",
        model=model,
        toolkit=Toolkit([weather, calendar, book_picnic]),
        state_store=store,
        middlewares=[RunRecorder(RunRetention(max_runs=50))],  # first: its timings include the rest
    )
    ctx = RuntimeContext(user_id="alice", session_id="outing")

    paused = await agent.call("Plan a picnic today", ctx)
    [pending] = paused.metadata["pending_tool_calls"]
    print(f"paused: {pending['name']} waits for approval")
    await asyncio.sleep(0.3)  # the user reads the request
    call = ToolUseBlock(id=pending["id"], name=pending["name"], input=pending["input"])
    reply = await agent.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call=call)]), ctx)
    print(f"reply: {reply.text}")

    stored = await find_run(store, "alice", "outing", reply.id, agent="planner")
    assert stored is not None
    state = await store.load("alice", "outing", agent="planner")
    assert state is not None
    timeline = timeline_view(stored.record(), state.messages)
    print("\nbars (ms from the start of the run):")
    for span in timeline["spans"]:
        end = span["end_ms"]
        label = span.get("name") or span.get("served_by") or span.get("status", "")
        extra = f" {span['decision']}" if span.get("decision") else ""
        print(f"  {span['kind']:<9} {label:<22} {span['start_ms']:8.1f} -> {end:8.1f}{extra}")
    print(f"\ntotals: {timeline['totals']}")
    print("\nthe record as JSON:")
    print(json.dumps(timeline, indent=2, ensure_ascii=False)[:4000])


if __name__ == "__main__":
    asyncio.run(main())
