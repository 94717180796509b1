"""The app both replicas of test_server_replicas.py serve: `agentrt serve replica_app:agent`.

Environment: REPLICA_NAME (shown in replies), REPLICA_STORE_URL and REPLICA_STORE_PREFIX (one
shared Redis store, a key prefix per test).
"""

from __future__ import annotations

import asyncio
import os

from agentrt import Msg, ReActAgent, Toolkit, ToolResultBlock, ToolUseBlock, tool
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.state import store_from_url

NAME = os.environ.get("REPLICA_NAME", "?")


@tool(requires_confirmation=True)
def transfer(amount: int) -> str:
    """Move money (needs the user's approval).

    Args:
        amount: How much.
    """
    return f"moved {amount} on {NAME}"


async def plan(request: ModelRequest) -> str | ToolUseBlock:
    last: Msg = request.messages[-1]
    results = [b for b in last.content if isinstance(b, ToolResultBlock)]
    if last.role == "user" and results:
        return f"transferred: {results[0].text} (answered by {NAME})"
    text = last.text
    if text.startswith("transfer"):
        return ToolUseBlock(id="call-transfer", name="transfer", input={"amount": int(text.split()[1])})
    await asyncio.sleep(0.005)  # long enough for concurrent calls to overlap
    turn = sum(1 for m in request.messages if m.role == "user" and m.text)
    return f"re: {text} #{turn} by {NAME}"


store = store_from_url(os.environ["REPLICA_STORE_URL"], prefix=os.environ["REPLICA_STORE_PREFIX"])
agent = ReActAgent(
    "shared",
    "You answer.",
    model=ScriptedModel.from_function(plan, record=False),
    toolkit=Toolkit([transfer]),
    state_store=store,
)
