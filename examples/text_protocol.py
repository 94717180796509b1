"""Tool calling for a model that has none: the ReAct text protocol, offline.

The "model" here is a ScriptedModel playing a small open model without native tool calling: it
answers in text, sloppily (chatter, single quotes, a comment in the JSON, an unreadable reply
that gets corrected). `ensure_tool_calling` wraps it in `TextProtocolModel`, and the agent runs
real tools exactly as it would with a native model. At the end, the prompt is counted with the
CJK-aware token counter.

Run: PYTHONPATH=src .venv/bin/python examples/text_protocol.py
"""

from __future__ import annotations

import asyncio

from agentrt import ReActAgent, RuntimeContext, Toolkit, tool
from agentrt import events as ev
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.model.text_protocol import ensure_tool_calling, parse_react
from agentrt.model.tokens import context_window, count_tokens
from agentrt.state import InMemoryStateStore


@tool(read_only=True)
async def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: City name, e.g. "Paris".
    """
    return {"Paris": "Sunny, 22 C", "北京": "Cloudy, 18 C"}.get(city, "Rain, 12 C")


@tool(read_only=True)
def convert_temperature(celsius: float) -> str:
    """Convert a temperature from Celsius to Fahrenheit.

    Args:
        celsius: Degrees Celsius.
    """
    return f"{celsius * 9 / 5 + 32:.1f} F"


class TinyTextModel(ScriptedModel):
    """Stands in for a small local model served without tool support."""

    supports_native_tools = False


def answer_from_observations(request: ModelRequest) -> str:
    # What a real model would do: read the Observation lines it was shown and answer from them.
    seen = [line for m in request.messages if m.role == "user" for line in m.text.splitlines()]
    facts = "; ".join(line.split(": ", 1)[1] for line in seen if line.startswith("Observation"))
    return f"Thought: I have all the results now.\nFinal Answer: The tools said: {facts}. Paris is warmer today."


async def main() -> None:
    inner = TinyTextModel(
        [
            # 1: chatter first, both calls in one reply, JSON with single quotes and a comment
            "Sure, let me check!\n"
            "Thought: I need the weather in both cities.\n"
            "Action: get_weather\nAction Input: {'city': 'Paris'}  // the French capital\n"
            "Action: get_weather\nAction Input: {“city”: “北京”}",
            # 2: a reply the parser cannot read: the wrapper asks again with a short correction
            "Thought: Now convert.\nAction: I will convert 22 degrees for you",
            # 3: the corrected reply, with a bare-string input for a one-parameter tool
            "Thought: convert 22 C.\nAction: convert_temperature\nAction Input: 22",
            # 4: the final answer, built from the Observation text the model was shown
            answer_from_observations,
        ],
        name="tiny-7b",
    )
    model = ensure_tool_calling(inner, "auto")  # wraps: the model has no native tool calling
    print(f"model: {model!r}")

    toolkit = Toolkit([get_weather, convert_temperature])
    agent = ReActAgent(
        "forecaster", "You answer weather questions.", model=model, toolkit=toolkit, state_store=InMemoryStateStore()
    )
    ctx = RuntimeContext(user_id="demo", session_id="text-protocol")
    async for event in agent.stream_events("Compare the weather in Paris and Beijing, in Fahrenheit too.", ctx):
        if isinstance(event, ev.ThinkingDelta):
            print(f"  thought: {event.delta}")
        elif isinstance(event, ev.ModelRestarted):
            print(f"  (reply restarted: {event.reason})")
        elif isinstance(event, ev.ToolCallStarted):
            print(f"-> {event.name}", end="")
        elif isinstance(event, ev.ToolCallDelta):
            print(f" {event.delta}")
        elif isinstance(event, ev.ToolResult):
            print(f"<- {event.result.name}: {event.result.output}")
        elif isinstance(event, ev.TextDelta):
            print(event.delta, end="", flush=True)
        elif isinstance(event, ev.RunFinished):
            print(f"\n[done: {event.msg.generate_reason.value}]")

    print(f"\nthe inner model was called {len(inner.requests)} times; the correction it got:")
    print("  " + inner.requests[2].messages[-1].text.replace("\n", "\n  "))
    print("what it saw of the first tool round:")
    for line in inner.requests[1].messages[-2:]:
        print(f"  [{line.role}] " + line.text.replace("\n", "\n  "))

    # the parser on its own
    chinese = "思考：先查天气。\n行动：get_weather\n行动输入：{“city”：“上海”}"  # noqa: RUF001
    print("\nparse_react:", parse_react(chinese))

    state = await agent.get_state("demo", "text-protocol")
    used = count_tokens(state.messages, "qwen2.5:7b", tools=toolkit.schemas())
    print(f"\nsession prompt: ~{used} tokens of a {context_window('ollama:qwen2.5:7b')}-token window")


if __name__ == "__main__":
    asyncio.run(main())
