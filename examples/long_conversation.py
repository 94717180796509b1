"""A long tool-using run that outgrows a small context window, offline with scripted models.

The agent reads twelve report pages. Its context is capped at 6,000 tokens, so as results pile up
the runtime compresses the prompt: old tool results are cut to a head and a tail (tier 1), older
steps are summarised by a (cheaper) summary model (tier 2), and if needed only the recent rounds
are kept (tier 3). The session keeps every message; only the prompt view shrinks.

Run: .venv/bin/python examples/long_conversation.py
"""

from __future__ import annotations

import asyncio

from agentrt import ReActAgent, RuntimeContext, Toolkit, ToolUseBlock, tool
from agentrt import events as ev
from agentrt.memory import ContextConfig
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.state import InMemoryStateStore

REVENUE = {page: 100 + 7 * page for page in range(12)}


@tool(read_only=True)
def read_page(page: int) -> str:
    """Read one page of the annual report.

    Args:
        page: Page number, from 0.
    """
    filler = " ".join(f"line{n} of the regional breakdown" for n in range(120))
    return f"Page {page}: revenue of region R{page} was {REVENUE[page]} MEUR. {filler} (end of page {page})"


def summarise(request: ModelRequest) -> str:
    # A real summary model would write this from the transcript it receives; here we pick the
    # numbers out of it, which is what the summary prompt asks the model to keep.
    transcript = request.messages[-1].text
    found = [f"R{p}={v} MEUR" for p, v in REVENUE.items() if f"revenue of region R{p} was {v} MEUR" in transcript]
    previous = transcript.split("Previous summary:\n", 1)[1].split("\n\nNew transcript", 1)[0]
    known = "" if previous.startswith("(none") else previous.removeprefix("Regional revenue so far: ") + ", "
    return "Regional revenue so far: " + known + ", ".join(found)


async def main() -> None:
    steps: list[object] = [ToolUseBlock(name="read_page", input={"page": p}) for p in range(12)]
    total = sum(REVENUE.values())
    steps.append(f"Total revenue across the 12 regions: {total} MEUR.")
    model = ScriptedModel(steps, name="gpt-4o")  # type: ignore[arg-type]
    agent = ReActAgent(
        "analyst",
        "You read reports page by page and add up numbers exactly.",
        model=model,
        toolkit=Toolkit([read_page]),
        state_store=InMemoryStateStore(),
        max_iters=20,
        context=ContextConfig(max_tokens=6000, keep_recent_rounds=2),
        summary_model=ScriptedModel.from_function(summarise, name="small-summariser"),
    )
    ctx = RuntimeContext(user_id="alice", session_id="report")
    async for event in agent.stream_events("Add up the revenue of all 12 regions in the report.", ctx):
        if isinstance(event, ev.ContextCompressed):
            print(f"   compressed (tier {event.tier}): {event.before_tokens:,} -> {event.after_tokens:,} tokens")
        elif isinstance(event, ev.ToolCallStarted):
            print(f"-> {event.name}")
        elif isinstance(event, ev.RunFinished):
            print(f"answer: {event.msg.text}")
    state = await agent.get_state("alice", "report")
    print(f"\nthe session holds all {len(state.messages)} messages; the prompt starts at #{state.summary_index}")
    print("the summary in the prompt:\n" + (state.summary or ""))
    sizes = [len(r.messages) for r in model.requests]
    print(f"prompt sizes (messages) per model call: {sizes}")


if __name__ == "__main__":
    asyncio.run(main())
