"""A process that answers an approval and is killed while the approved tool runs (test_approval_crash.py).

Usage: python approval_worker.py STORE_URL SESSION LOG_FILE MODE [CALL_ID]

MODE ``ask`` makes the model ask for a destructive call and prints ``paused <id>``; ``approve``
approves CALL_ID and blocks inside the tool (printing ``tool-start``) until killed; ``reapprove``
sends the same approval again and prints ``refused <error type>`` or ``ran``; ``continue`` sends a
plain message and prints the reply; ``history`` prints the stored history as JSON lines. The log
file records every run of the tool (the side effect the parent counts).
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from agentrt import ConfirmResult, Msg, ReActAgent, RuntimeContext, Toolkit, ToolResultBlock, ToolUseBlock, tool
from agentrt.errors import AgentrtError
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.state import store_from_url

STORE_URL, SESSION, LOG, MODE = sys.argv[1:5]
CALL_ID = sys.argv[5] if len(sys.argv) > 5 else ""


def mark(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def append_log(line: str) -> None:
    with open(LOG, "a", encoding="utf-8") as fh:
        fh.write(line)


@tool(destructive=True)
async def launch(target: str) -> str:
    """Launch something that must happen once."""
    await asyncio.to_thread(append_log, f"run {target}\n")
    mark("tool-start")
    if MODE == "approve":
        await asyncio.Event().wait()  # held here until SIGKILL
    return f"launched {target}"


def plan(request: ModelRequest) -> Any:
    if request.messages[-1].blocks(ToolResultBlock):
        return "done"
    turn = sum(1 for m in request.messages if m.role == "user" and m.text)
    return ToolUseBlock(id=f"call{turn}", name="launch", input={"target": f"t{turn}"})


async def main() -> None:
    prefix = os.environ.get("APPROVAL_PREFIX")
    store = store_from_url(STORE_URL, **({"prefix": prefix, "lock_ttl": 1.0} if prefix else {}))
    agent = ReActAgent(
        "launcher", model=ScriptedModel.from_function(plan), toolkit=Toolkit([launch]), state_store=store
    )
    ctx = RuntimeContext(user_id="approver", session_id=SESSION)
    try:
        if MODE == "ask":
            reply = await agent.call("launch it", ctx)
            mark(f"paused {reply.tool_calls[0].id}")
        elif MODE in ("approve", "reapprove"):
            try:
                await agent.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call=CALL_ID)]), ctx)
                mark("ran")
            except AgentrtError as exc:
                mark(f"refused {type(exc).__name__}")
        elif MODE == "continue":
            reply = await agent.call("what now?", ctx)
            mark(f"reply {reply.generate_reason.value}")
        elif MODE == "history":
            state = await agent.get_state("approver", SESSION)
            for msg in state.messages:
                mark("msg " + msg.to_json())
            mark(f"pending {bool(state.pending)}")
    finally:
        await store.close()


asyncio.run(main())
