"""Durable sessions: one agent, a SQLite store, a conversation that continues after a restart; offline.

Run: .venv/bin/python examples/durable_sessions.py
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from agentrt import ReActAgent, RuntimeContext
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.state import store_from_url


def remember(request: ModelRequest) -> str:
    # A model that answers with what it has seen so far in the session.
    said = [m.text for m in request.messages if m.role == "user"]
    return f"So far you told me: {'; '.join(said)}"


async def chat(db: Path, text: str) -> str:
    # A fresh store and agent each time, as if the process had restarted.
    store = store_from_url(f"sqlite:///{db}")
    try:
        agent = ReActAgent("memo", model=ScriptedModel.from_function(remember), state_store=store)
        reply = await agent.call(text, RuntimeContext(user_id="alice", session_id="notes"))
        return reply.text
    finally:
        await store.close()


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "state.db"
        print(await chat(db, "my cat is called Miso"))
        print(await chat(db, "I live in Lyon"))
        store = store_from_url(f"sqlite:///{db}")
        try:
            sessions = await store.list_sessions("alice")
            print(f"alice has {len(sessions)} session(s); 'notes' holds {sessions[0].message_count} messages")
        finally:
            await store.close()


if __name__ == "__main__":
    asyncio.run(main())
