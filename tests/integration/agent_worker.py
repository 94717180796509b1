"""One process making N agent calls on one shared session (used by test_shared_sessions.py).

Usage: python agent_worker.py STORE_URL PREFIX SESSION TAG N
"""

from __future__ import annotations

import asyncio
import sys

from agentrt import ReActAgent, RuntimeContext
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.state import store_from_url

URL, PREFIX, SESSION, TAG, N = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])


def echo(request: ModelRequest) -> str:
    return f"re: {request.messages[-1].text}"


async def main() -> None:
    option = {"prefix": PREFIX} if URL.startswith("redis") else {"table_prefix": PREFIX}
    store = store_from_url(URL, **option)
    agent = ReActAgent("shared", model=ScriptedModel.from_function(echo, record=False), state_store=store)
    ctx = RuntimeContext(user_id="two-procs", session_id=SESSION)
    for i in range(N):
        reply = await agent.call(f"{TAG}-{i}", ctx)
        assert reply.text == f"re: {TAG}-{i}", reply.text
    await store.close()


asyncio.run(main())
