"""Research, then summarise: two agents in a `sequential` pipeline, offline with scripted models.

The researcher searches a small offline knowledge base with a tool and writes up its findings;
the summariser turns the findings into a two-line brief. Each agent keeps its own session
(``<session>/<agent name>``), and the pipeline's event stream interleaves both agents' events,
each tagged with its `source`.

Run: .venv/bin/python examples/research_pipeline.py
"""

from __future__ import annotations

import asyncio

from agentrt import Msg, ReActAgent, RuntimeContext, Toolkit, ToolResultBlock, ToolUseBlock, tool
from agentrt import events as ev
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.pipeline import sequential
from agentrt.state import InMemoryStateStore

KNOWLEDGE = {
    "honeybee": [
        "Honeybees communicate the direction of food with a waggle dance.",
        "A colony can hold 20,000 to 80,000 bees in summer.",
        "Worker bees live about six weeks in the busy season.",
    ],
    "octopus": [
        "An octopus has three hearts and blue blood.",
        "Two thirds of an octopus's neurons are in its arms.",
    ],
}


@tool(read_only=True)
async def search(query: str) -> str:
    """Search the offline knowledge base.

    Args:
        query: What to look for, e.g. "honeybee".
    """
    hits = [fact for topic, facts in KNOWLEDGE.items() if topic in query.lower() for fact in facts]
    return "\n".join(hits) if hits else "No results."


def researcher_plan(request: ModelRequest) -> object:
    """Search first; once the results are in, write them up as findings."""
    last = request.messages[-1]
    results = last.blocks(ToolResultBlock)
    if not results:
        topic = request.last_user_text.split()[-1].strip("?.!").lower()
        return ToolUseBlock(name="search", input={"query": topic})
    facts = results[0].text.splitlines()
    return "Findings:\n" + "\n".join(f"- {fact}" for fact in facts)


def summariser_plan(request: ModelRequest) -> str:
    """Keep the two most striking findings (the longest ones), one line each."""
    findings = [line[2:] for line in request.last_user_text.splitlines() if line.startswith("- ")]
    best = sorted(findings, key=len, reverse=True)[:2]
    return "Brief: " + " ".join(best)


async def main() -> None:
    store = InMemoryStateStore()
    researcher = ReActAgent(
        "researcher",
        "You research topics with the search tool and report findings.",
        model=ScriptedModel.from_function(researcher_plan),
        toolkit=Toolkit([search]),
        state_store=store,
    )
    summariser = ReActAgent(
        "summariser",
        "You condense findings into a short brief.",
        model=ScriptedModel.from_function(summariser_plan),
        state_store=store,
    )
    pipeline = sequential([researcher, summariser], name="research_pipeline")
    ctx = RuntimeContext(user_id="alice", session_id="bees")

    async for event in pipeline.stream_events(Msg.user("Tell me about the honeybee"), ctx):
        if isinstance(event, ev.RunStarted):
            print(f"[{event.source}] started in session {event.session_id!r}")
        elif isinstance(event, ev.ToolCallStarted):
            print(f"[{event.source}] -> {event.name}")
        elif isinstance(event, ev.ToolResult):
            print(f"[{event.source}] <- {event.result.name}: {len(event.result.text.splitlines())} facts")
        elif isinstance(event, ev.RunFinished) and event.source != pipeline.name:
            print(f"[{event.source}] replied:\n    " + event.msg.text.replace("\n", "\n    "))
        elif isinstance(event, ev.RunFinished):
            print(f"\n[{event.source}] result: {event.msg.text}")

    for agent in (researcher, summariser):
        state = await agent.get_state("alice", f"bees/{agent.name}")
        print(f"session bees/{agent.name}: {len(state.messages)} messages")


if __name__ == "__main__":
    asyncio.run(main())
