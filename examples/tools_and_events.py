"""Tools, parallel calls and the live event stream, offline with a scripted model.

Run: .venv/bin/python examples/tools_and_events.py
"""

from __future__ import annotations

import asyncio

from agentrt import ReActAgent, RuntimeContext, Toolkit, ToolUseBlock, tool
from agentrt import events as ev
from agentrt.model import ScriptedModel


@tool(read_only=True)
async def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: City name, e.g. "Paris".
    """
    await asyncio.sleep(0.05)  # pretend to call a weather API
    return f"Sunny, 22 C in {city}."


async def main() -> None:
    toolkit = Toolkit()
    toolkit.register(get_weather)
    # The scripted model asks for two tool calls in one turn (they run in parallel), then answers.
    model = ScriptedModel(
        [
            [
                ToolUseBlock(name="get_weather", input={"city": "Paris"}),
                ToolUseBlock(name="get_weather", input={"city": "Rome"}),
            ],
            "Both cities are sunny: Paris and Rome are at 22 C.",
        ]
    )
    agent = ReActAgent("forecaster", "You answer weather questions.", model=model, toolkit=toolkit)
    ctx = RuntimeContext(user_id="alice", session_id="trip")
    async for event in agent.stream_events("Weather in Paris and Rome?", ctx):
        if isinstance(event, ev.ToolCallStarted):
            print(f"-> calling {event.name} ({event.tool_call_id})")
        elif isinstance(event, ev.ToolResult):
            print(f"<- {event.result.name}: {event.result.output} ({event.elapsed * 1000:.0f} ms)")
        elif isinstance(event, ev.TextDelta):
            print(event.delta, end="", flush=True)
        elif isinstance(event, ev.RunFinished):
            print(f"\n[reply {event.msg.id[:8]}, reason {event.msg.generate_reason.value}]")
    state = await agent.get_state("alice", "trip")
    print(f"session holds {len(state.messages)} messages at revision {state.revision}")


if __name__ == "__main__":
    asyncio.run(main())
