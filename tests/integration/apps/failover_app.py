"""The app of test_failover.py: `agentrt serve failover_app:agent --jobs <redis or postgresql URL>`, `agentrt worker`.

Each task ("task <n>") takes one call of the slow, non-idempotent tool `step`, then an answer.
The tool records every start and every completion in Redis (a hash per test prefix, field = the
task), with the pid of the process that ran it: the side effects the test asserts on.

Environment: FAILOVER_STORE_URL (the state store: Redis, or PostgreSQL with tables
``<FAILOVER_PREFIX>_...``), FAILOVER_RECORD_URL (the Redis of the tool's records; default: the
store's URL), FAILOVER_PREFIX, FAILOVER_MODEL_S (model latency), FAILOVER_TOOL_S (tool duration),
FAILOVER_LOCK_TTL (the session lock's ttl: a paused holder keeps its lock that long; a killed
holder's PostgreSQL lock ends with its connection at once).
"""

from __future__ import annotations

import asyncio
import os

import redis

from agentrt import Msg, ReActAgent, Toolkit, ToolResultBlock, ToolUseBlock, tool
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.state import store_from_url

PREFIX = os.environ["FAILOVER_PREFIX"]
MODEL_S = float(os.environ.get("FAILOVER_MODEL_S", "0.2"))
TOOL_S = float(os.environ.get("FAILOVER_TOOL_S", "1.0"))
STORE_URL = os.environ["FAILOVER_STORE_URL"]
_redis = redis.Redis.from_url(os.environ.get("FAILOVER_RECORD_URL", STORE_URL))


@tool
async def step(task: int) -> str:
    """One slow step of a task (not idempotent: it must never run twice).

    Args:
        task: The task number.
    """
    _redis.hincrby(f"{PREFIX}:started", str(task), 1)
    _redis.rpush(f"{PREFIX}:started-by:{task}", os.getpid())
    await asyncio.sleep(TOOL_S)
    _redis.hincrby(f"{PREFIX}:done", str(task), 1)
    return f"step of task {task} done by {os.getpid()}"


async def plan(request: ModelRequest) -> str | ToolUseBlock:
    await asyncio.sleep(MODEL_S)
    last: Msg = request.messages[-1]
    results = [b for b in last.content if isinstance(b, ToolResultBlock)]
    if last.role == "user" and results:
        return f"finished: {results[0].text} [{results[0].state}]"
    text = next(m.text for m in reversed(request.messages) if m.role == "user" and m.text.startswith("task"))
    return ToolUseBlock(id=f"call-{text.split()[1]}", name="step", input={"task": int(text.split()[1])})


if STORE_URL.startswith(("redis://", "rediss://")):
    store = store_from_url(STORE_URL, prefix=PREFIX, lock_ttl=float(os.environ.get("FAILOVER_LOCK_TTL", "2.0")))
else:
    # Every run in flight holds a session-lock connection; three replicas share the server's 100
    # connections with the job backends' pools: 6 gives each replica up to 18 lock connections.
    # The lock is a lease (idle_session_timeout): a paused holder loses it after lock_ttl.
    store = store_from_url(
        STORE_URL, table_prefix=f"{PREFIX}_", pool_size=6, lock_ttl=float(os.environ.get("FAILOVER_LOCK_TTL", "2.0"))
    )
agent = ReActAgent(
    "worker",
    "You do tasks.",
    model=ScriptedModel.from_function(plan, record=False),
    toolkit=Toolkit([step]),
    state_store=store,
)
