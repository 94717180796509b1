"""The transcript rules every provider enforces, checked on stored histories by the security tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection, Sequence
from typing import Any

from agentrt import Msg, ToolResultBlock
from agentrt.state import InMemoryStateStore
from agentrt.state.base import AgentStateStore


def assert_valid_history(messages: Sequence[Msg], pending: Collection[str] = ()) -> None:
    """Each tool call has exactly one result, in the result-only user messages right after its turn.

    No result answers an unknown call or sits anywhere else (e.g. after an "(interrupted)" reply).
    `pending`: ids of calls that still wait for an answer (only the last turn may be open, by them).
    """
    i = 0
    seen_calls: set[str] = set()
    while i < len(messages):
        msg = messages[i]
        if msg.role == "assistant" and msg.tool_calls:
            ids = [c.id for c in msg.tool_calls]
            assert len(set(ids)) == len(ids), f"duplicate call ids in one turn: {ids}"
            seen_calls.update(ids)
            answered: list[str] = []
            j = i + 1
            while j < len(messages) and messages[j].role == "user" and messages[j].blocks(ToolResultBlock):
                blocks = messages[j].content
                assert all(isinstance(b, ToolResultBlock) for b in blocks), (
                    f"message {j} mixes tool results with other content"
                )
                answered.extend(b.id for b in messages[j].blocks(ToolResultBlock))
                j += 1
            waiting = [c for c in ids if c in pending] if j == len(messages) else []
            assert not set(waiting) & set(answered), f"turn {i}: {waiting} both wait and have results"
            assert sorted(answered + waiting) == sorted(ids), f"turn {i}: calls {ids} answered by {answered}"
            i = j
            continue
        stray = msg.blocks(ToolResultBlock)
        assert not stray, f"message {i} holds results {[b.id for b in stray]} outside their turn"
        i += 1


async def crash_during(
    task: asyncio.Task[Any], started: asyncio.Event, store: AgentStateStore, agent: str, key: tuple[str, str]
) -> InMemoryStateStore:
    """A SIGKILL while `task` runs, simulated: the session as stored once `started` is set, in a fresh store.

    The task is then cancelled (its own writes after the snapshot are what a killed process never makes).
    """
    await started.wait()
    snapshot = await store.load(*key, agent=agent)
    assert snapshot is not None
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    crashed = InMemoryStateStore()
    await crashed.save(snapshot)
    return crashed
