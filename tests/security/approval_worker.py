"""A process that answers an approval and is killed while the approved tool runs (test_approval_crash.py).

Usage: python approval_worker.py STORE_URL SESSION LOG_FILE MODE [CALL_ID ...]

MODE ``ask`` makes the model ask for destructive calls (``APPROVAL_CALLS`` of them in one turn,
default 1) and prints ``paused <id> ...``; ``approve`` approves the CALL_IDs and blocks inside the
last one's tool run (printing ``tool-start`` as each starts) until killed; ``approve-settle`` lets
the tools finish and blocks when the turn's results are about to be stored (printing
``settling``); ``reapprove`` sends the same approvals again and prints ``refused <error type>`` or
``ran``; ``continue`` sends a plain message and prints the reply; ``history`` prints the stored
history as JSON lines. The log file records every run of the tool (the side effect the parent
counts).
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
CALL_IDS = [a for a in sys.argv[5:] if a]
CALLS = int(os.environ.get("APPROVAL_CALLS", "1"))


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
    if MODE == "approve" and target.endswith(CALL_IDS[-1].removeprefix("call")):
        await asyncio.Event().wait()  # held here until SIGKILL
    return f"launched {target}"


def plan(request: ModelRequest) -> Any:
    if request.messages[-1].blocks(ToolResultBlock):
        return "done"
    turn = sum(1 for m in request.messages if m.role == "user" and m.text)
    if CALLS == 1:
        return ToolUseBlock(id=f"call{turn}", name="launch", input={"target": f"t{turn}"})
    return [ToolUseBlock(id=f"call{turn}{k}", name="launch", input={"target": f"t{turn}{k}"}) for k in "ab"[:CALLS]]


def hold_the_results(store: Any) -> None:
    """Block the checkpoint that stores a turn's results (the process is killed there)."""
    append = store.append

    async def held(user_id: str, session_id: str, messages: Any, **kwargs: Any) -> Any:
        if any(m.blocks(ToolResultBlock) for m in messages):
            mark("settling")
            await asyncio.Event().wait()
        return await append(user_id, session_id, messages, **kwargs)

    store.append = held


async def main() -> None:
    prefix = os.environ.get("APPROVAL_PREFIX")
    store = store_from_url(STORE_URL, **({"prefix": prefix, "lock_ttl": 1.0} if prefix else {}))
    if MODE == "approve-settle":
        hold_the_results(store)
    agent = ReActAgent(
        "launcher", model=ScriptedModel.from_function(plan), toolkit=Toolkit([launch]), state_store=store
    )
    ctx = RuntimeContext(user_id="approver", session_id=SESSION)
    approvals = Msg.confirm([ConfirmResult(confirmed=True, tool_call=i) for i in CALL_IDS])
    try:
        if MODE == "ask":
            reply = await agent.call("launch it", ctx)
            mark("paused " + " ".join(c.id for c in reply.tool_calls))
        elif MODE in ("approve", "approve-settle", "reapprove"):
            try:
                await agent.call(approvals, ctx)
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
            mark(f"pending {bool(state.pending and state.pending.calls)}")
    finally:
        await store.close()


asyncio.run(main())
