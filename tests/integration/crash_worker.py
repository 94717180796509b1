"""A process that runs an agent until it is killed (used by test_crash_resume.py).

Usage: python crash_worker.py STORE_URL SESSION LOG_FILE (start|resume)

The scripted model asks for three tool steps, the second one with two parallel calls, then
answers. Markers on stdout let the parent kill the process at chosen points; the log file
records every tool start and completion (to prove no completed tool ran twice).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from agentrt import Middleware, Msg, ReActAgent, RuntimeContext, Toolkit, ToolResultBlock, ToolUseBlock, tool
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.state import store_from_url

STORE_URL, SESSION, LOG, MODE = sys.argv[1:5]


def mark(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def log(line: str) -> None:
    with open(LOG, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
        fh.flush()


@tool(read_only=True)
async def work(step: int, part: str = "a") -> str:
    """Do one unit of work."""
    key = f"{step}{part}"
    log(f"start {key}")
    mark(f"tool-start {key}")
    await asyncio.sleep(0.05)
    log(f"done {key}")
    mark(f"tool-done {key}")
    return f"result {key}"


def plan(request: ModelRequest) -> Any:
    done = sum(1 for m in request.messages for b in m.blocks(ToolResultBlock) if b.state == "success")
    asked = sum(1 for m in request.messages for _ in m.tool_calls)
    if asked == 0:
        return ToolUseBlock(name="work", input={"step": 1})
    if asked == 1:
        return [
            ToolUseBlock(name="work", input={"step": 2, "part": "a"}),
            ToolUseBlock(name="work", input={"step": 2, "part": "b"}),
        ]
    if asked == 3:
        return ToolUseBlock(name="work", input={"step": 3})
    return f"finished with {done} successful tool results " + "word " * 30


class Marks(Middleware):
    async def on_model_call(
        self, run: Any, request: ModelRequest, next: Callable[[ModelRequest], Awaitable[Msg]]
    ) -> Msg:
        mark(f"model-start {run.step}")
        msg = await next(request)
        mark(f"model-done {run.step}")
        return msg


async def main() -> None:
    model = ScriptedModel.from_function(plan)
    model.chunk_delay = 0.002
    prefix = os.environ.get("CRASH_PREFIX")
    # A killed holder's Redis lock expires after lock_ttl: keep it short so the resume does not wait long.
    store = store_from_url(STORE_URL, **({"prefix": prefix, "lock_ttl": 1.0} if prefix else {}))
    agent = ReActAgent("crashy", "sys", model=model, toolkit=Toolkit([work]), middlewares=[Marks()], state_store=store)
    ctx = RuntimeContext(user_id="crash-user", session_id=SESSION)
    mark("ready")
    reply = await agent.call("do the work" if MODE == "start" else "continue", ctx)
    mark(f"reply {reply.generate_reason.value} {reply.text[:40]}")
    await store.close()


asyncio.run(main())
