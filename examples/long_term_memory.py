"""Long-term memory across sessions, offline with scripted models.

Session 1: the user mentions who they are; after the reply, a background extraction (a model call
on the cheaper summary model) stores durable facts in a SQLite memory. Session 2, days later: the
facts relevant to the new question are put into the system prompt (static mode), and the model can
also search its memory with the ``recall`` tool (agent mode); ``memory_mode="both"`` does both.
Retrieval here is full-text (BM25, any language); give the memory an ``embed=`` function to also
match by meaning ("diet" finding "vegetarian").

Run: .venv/bin/python examples/long_term_memory.py
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from agentrt import ReActAgent, RuntimeContext, ToolResultBlock, ToolUseBlock
from agentrt.memory import SqliteLongTermMemory
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.state import InMemoryStateStore


def extractor(request: ModelRequest) -> str:
    # Stands in for the summary model: the extraction prompt asks for a JSON array of short facts.
    said = request.messages[-1].text
    facts = []
    if "vegetarian" in said:
        facts.append("The user is vegetarian.")
    if "Lyon" in said:
        facts.append("The user lives in Lyon.")
    if "metric" in said:
        facts.append("The user prefers metric units.")
    return str(facts).replace("'", '"')


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="agentrt-memory-") as folder:
        await session_demo(Path(folder) / "memory.db")


async def session_demo(path: Path) -> None:
    async with SqliteLongTermMemory(path) as memory:
        model = ScriptedModel(
            [
                "Nice to meet you! Noted.",
                ToolUseBlock(name="recall", input={"query": "units"}),
                "A mushroom risotto for 4: 320 g of rice, 500 g of mushrooms, 1.2 l of stock.",
            ]
        )
        agent = ReActAgent(
            "chef",
            "You suggest recipes.",
            model=model,
            state_store=InMemoryStateStore(),
            long_term_memory=memory,
            memory_mode="both",
            memory_extraction=True,
            summary_model=ScriptedModel.from_function(extractor, name="small-model"),
        )

        first = RuntimeContext(user_id="alice", session_id="monday")
        reply = await agent.call("Hi! I live in Lyon, I'm vegetarian and I cook with metric units.", first)
        print(f"session 1 reply: {reply.text}")
        await agent.drain()  # the extraction ran after the reply; wait for it before looking
        for item in await memory.list("alice"):
            print(f"  remembered: {item.text}")

        second = RuntimeContext(user_id="alice", session_id="friday")
        reply = await agent.call("Suggest a vegetarian dinner for four.", second)
        system = model.requests[1].messages[0].text
        print("\nsession 2 system prompt:\n" + system)
        [recalled] = model.requests[2].messages[-1].blocks(ToolResultBlock)
        print(f"\nrecall tool returned:\n{recalled.output}")
        print(f"\nsession 2 reply: {reply.text}")
        print(f"\nanother user sees nothing: {await memory.retrieve('bob', 'vegetarian Lyon')}")
        await agent.drain()  # session 2 started an extraction too


if __name__ == "__main__":
    asyncio.run(main())
