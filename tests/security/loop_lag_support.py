"""Loop-lag probe and a one-turn agent runner for the tool hardening tests.

`LoopLagProbe` runs a 10 ms periodic task and records the longest gap between its ticks: how long
the event loop was blocked while the code under test ran. `run_calls` sends tool calls through a
real `ReActAgent` (scripted model, permission engine, executor, worker threads) and returns the
tool results the model got back.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from types import TracebackType

from agentrt import ReActAgent, RuntimeContext, Toolkit, ToolResultBlock, ToolUseBlock
from agentrt.model import ScriptedModel
from agentrt.permission import PermissionContext, PermissionMode

TICK = 0.01
LAG_BUDGET = 1.5
"""Longest loop stall a test accepts. Healthy runs stall ~10-100 ms; a loaded 2-core CI machine has
shown 0.52 s of scheduler noise. The regressions these tests guard (a backtracking regex holding the
GIL, a tool's work on the loop) are sized to stall for 6 s or more, so they still fail by seconds."""
_sessions = itertools.count()


class LoopLagProbe:
    """Measures the longest gap between ticks of a 10 ms periodic task while the block runs."""

    def __init__(self) -> None:
        self.max_gap = 0.0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LoopLagProbe:
        self._task = asyncio.create_task(self._tick())
        await asyncio.sleep(TICK * 2)  # the ticker is running before the code under test starts
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.sleep(TICK * 2)  # one more tick: a stall at the very end is measured too
        assert self._task is not None
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(TICK)
            now = loop.time()
            self.max_gap = max(self.max_gap, now - last)
            last = now


async def run_calls(
    toolkit: Toolkit, calls: Sequence[ToolUseBlock], mode: PermissionMode = PermissionMode.BYPASS
) -> dict[str, ToolResultBlock]:
    """Run `calls` as one model turn of a real agent; the results by call id."""
    model = ScriptedModel([list(calls), "done"])
    agent = ReActAgent("probe", model=model, toolkit=toolkit, permission=PermissionContext(mode=mode))
    await agent.call("go", RuntimeContext(user_id="u", session_id=f"lag-{next(_sessions)}"))
    return {block.id: block for msg in model.requests[-1].messages for block in msg.blocks(ToolResultBlock)}
