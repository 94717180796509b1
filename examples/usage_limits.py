"""Usage limits and cost: cap a call's model calls, tool calls and dollars; see what it spent; offline.

A scripted stand-in for gpt-4o (priced from the genai-prices table when `agentrt[cost]` is installed)
keeps asking for a tool. The call stops at its limit with `UsageLimitExceeded`; the session keeps
every completed step, and the next call continues it.

Run: .venv/bin/python examples/usage_limits.py
"""

from __future__ import annotations

import asyncio

from agentrt import (
    ReActAgent,
    RuntimeContext,
    Toolkit,
    ToolResultBlock,
    ToolUseBlock,
    UsageLimitExceeded,
    UsageLimits,
    tool,
)
from agentrt.message import TokenUsage
from agentrt.model import ModelPrice, ScriptedModel
from agentrt.state import InMemoryStateStore

searches: list[str] = []


@tool(read_only=True)
def search(query: str) -> str:
    """Search the web.

    Args:
        query: What to look for.
    """
    searches.append(query)
    return f"results for {query!r}"


async def main() -> None:
    model = ScriptedModel(
        [ToolUseBlock(name="search", input={"query": f"topic {i}"}) for i in range(1, 6)] + ["Here is what I found."],
        name="openai:gpt-4o",
        usage=TokenUsage(input_tokens=2_000, output_tokens=150, cache_read_tokens=1_000),
    )
    agent = ReActAgent(
        "researcher",
        "You research.",
        model=model,
        toolkit=Toolkit([search]),
        state_store=InMemoryStateStore(),
        usage_limits=UsageLimits(tool_calls=3),  # the default of every call
    )
    ctx = RuntimeContext("alice", "research")
    try:
        await agent.call("Research everything.", ctx)
    except UsageLimitExceeded as exc:
        print(f"stopped: {exc.limit}={exc.limit_value:g} (would be {exc.used:g})")
        print(
            f"spent so far: {exc.usage.requests} model calls, {exc.usage.tool_calls} tool calls, "
            f"{exc.usage.total_tokens} tokens, cost {exc.usage.cost_usd}"
        )
    print(f"searches that ran: {len(searches)}")
    state = await agent.get_state("alice", "research")
    closed = state.messages[-1].blocks(ToolResultBlock)[0]
    print(f"the session kept {len(state.messages)} messages; the call not run: {closed.state}: {closed.output}")

    # A later call continues the session; this one lifts the default limits.
    reply = await agent.call("Go on.", ctx, usage_limits=UsageLimits())
    usage = reply.metadata["usage"]
    print(
        f"reply: {reply.text} ({usage['requests']} model calls, {usage['tool_calls']} tool calls, "
        f"cost {usage['cost_usd']})"
    )

    # A private model has no price in any table: give it one, or its cost is None (never a guess).
    private = ScriptedModel(
        ["Done."], name="our-llm", usage=TokenUsage(input_tokens=1_000, output_tokens=100), repeat=True
    )
    helper = ReActAgent("helper", model=private, state_store=InMemoryStateStore())
    print("private model, no price:", (await helper.call("hi")).metadata["usage"]["cost_usd"])
    private.price = ModelPrice(input=0.5, output=1.5)  # dollars per million tokens
    print("private model, priced:", (await helper.call("hi")).metadata["usage"]["cost_usd"])


if __name__ == "__main__":
    asyncio.run(main())
