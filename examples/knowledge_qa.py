"""Answer a question from a knowledge base, with citations (offline: a scripted model, a temporary SQLite file).

Two Markdown files are written to a temporary folder and indexed into a `Knowledge` on a SQLite
file (FTS5/BM25; no embedder, no network). The agent gets the ``search_knowledge`` tool; the
scripted model searches, then answers citing passage [1]. The reply's ``metadata["citations"]``
names the passages it used (source, title, location, chunk id). Run it a second time and the files
are skipped as unchanged.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from agentrt import ReActAgent, ToolResultBlock, ToolUseBlock
from agentrt.knowledge import Knowledge
from agentrt.model import ModelRequest, ScriptedModel

HANDBOOK = """# Employee handbook

## Leave

### Vacation
Full-time employees get 25 vacation days a year. Unused days carry over until the end of March.

### Sick leave
Tell your manager before 10:00 on the first day; a doctor's note is needed from the fourth day.
"""

IT_GUIDE = """# IT guide

## Laptops
Laptops are replaced every three years. Ask the service desk for a loaner while yours is repaired.

## Passwords
Use the company password manager; passwords are at least 14 characters long.
"""


def planner(request: ModelRequest) -> Any:
    """A scripted model: search the knowledge base for the question, then answer from passage [1]."""
    results = request.messages[-1].blocks(ToolResultBlock)
    if not results:
        return ToolUseBlock(name="search_knowledge", input={"query": request.last_user_text, "k": 3})
    # Passage [1] is the lines after its "[1] title — location (source, id)" line, up to passage [2].
    passage = results[0].text.split("[1] ", 1)[-1].split("\n[2] ", 1)[0]
    sentence = next((line for line in passage.splitlines()[1:] if line.strip() and not line.startswith("#")), "")
    return f"According to the handbook: {sentence.strip()} [1]"


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "docs"
        folder.mkdir()
        (folder / "handbook.md").write_text(HANDBOOK)
        (folder / "it-guide.md").write_text(IT_GUIDE)

        async with Knowledge("company", store=f"sqlite:///{tmp}/knowledge.db") as kb:
            report = await kb.add(folder, metadata={"tags": ["internal"]})
            print(f"indexed: {len(report.added)} documents, {report.chunks} chunks")
            again = await kb.add(folder, metadata={"tags": ["internal"]})
            print(f"re-added: {len(again.skipped)} unchanged, {len(again.added)} indexed again")

            agent = ReActAgent(
                "hr",
                "Answer from the company's documents and cite them.",
                model=ScriptedModel.from_function(planner, name="planner"),
                knowledge=kb,  # knowledge_mode="tool" (the default): the model gets search_knowledge
            )
            reply = await agent.call("How many vacation days do I get?")
            print("answer:", reply.text)
            for number, citation in enumerate(reply.metadata["citations"], 1):
                name = Path(citation["source"]).name
                print(
                    f"  [{number}] {citation['title']} — {citation['location']} ({name}, chunk {citation['chunk_id']})"
                )


if __name__ == "__main__":
    asyncio.run(main())
