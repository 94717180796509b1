"""Step checkpoints: what a crash leaves behind, and how the next call recovers from it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from agentrt import Msg, ReActAgent, RuntimeContext, Toolkit, ToolResultBlock, ToolUseBlock, tool
from agentrt.model import ScriptedModel
from agentrt.state import AgentState, InMemoryStateStore

CTX = RuntimeContext(user_id="u", session_id="s")
runs: list[str] = []


@tool(read_only=True)
async def fast(tag: str) -> str:
    """Finishes at once."""
    runs.append(f"fast {tag}")
    return f"fast {tag}"


@tool(read_only=True, idempotent=True)
async def lookup(key: str) -> str:
    """Safe to repeat."""
    runs.append(f"lookup {key}")
    return f"value of {key}"


@tool(read_only=True)
async def charge(amount: int) -> str:
    """Not safe to repeat."""
    runs.append(f"charge {amount}")
    return "charged"


class WatchedStore(InMemoryStateStore):
    """An in-memory store that wakes waiters on every write, so a test waits on state, not on time."""

    def __init__(self) -> None:
        super().__init__()
        self.written = asyncio.Condition()

    async def append(self, *args: Any, **kwargs: Any) -> int:
        revision = await super().append(*args, **kwargs)
        async with self.written:
            self.written.notify_all()
        return revision

    async def save(self, *args: Any, **kwargs: Any) -> int:
        revision = await super().save(*args, **kwargs)
        async with self.written:
            self.written.notify_all()
        return revision

    async def wait_for_state(self, predicate: Callable[[AgentState], bool]) -> AgentState:
        """The first stored state of session u/s (agent "bot") that satisfies ``predicate``."""
        async with asyncio.timeout(5), self.written:
            while True:
                state = await self.load("u", "s", agent="bot")
                if state is not None and predicate(state):
                    return state
                await self.written.wait()


async def test_each_result_of_a_parallel_batch_is_checkpointed_as_it_lands() -> None:
    release = asyncio.Event()
    store = WatchedStore()

    @tool(read_only=True)
    async def slow() -> str:
        """Waits."""
        await release.wait()
        return "slow done"

    model = ScriptedModel(
        [[ToolUseBlock(id="a", name="fast", input={"tag": "1"}), ToolUseBlock(id="b", name="slow")], "ok"]
    )
    agent = ReActAgent("bot", model=model, toolkit=Toolkit([fast, slow]), state_store=store)
    task = asyncio.create_task(agent.call("go", CTX))
    # the batch is checkpointed as in flight first with no results, then again as "a" lands
    state = await store.wait_for_state(lambda s: bool(s.tool_state.get("in_flight", {}).get("results")))
    in_flight = state.tool_state["in_flight"]
    assert [r["id"] for r in in_flight["results"]] == ["a"]
    assert in_flight["assistant_id"] == state.messages[-1].id
    release.set()
    assert (await task).text == "ok"
    final = await store.load("u", "s", agent="bot")
    assert final is not None and "in_flight" not in final.tool_state


async def test_recovery_keeps_recorded_results_reruns_idempotent_tools_and_interrupts_the_rest() -> None:
    runs.clear()
    store = InMemoryStateStore()
    calls = [
        ToolUseBlock(id="done", name="fast", input={"tag": "x"}),
        ToolUseBlock(id="again", name="lookup", input={"key": "k"}),
        ToolUseBlock(id="risky", name="charge", input={"amount": 5}),
    ]
    assistant = Msg(role="assistant", content=list(calls))
    recorded = ToolResultBlock(id="done", name="fast", output="fast x (recorded before the crash)")
    await store.append(
        "u",
        "s",
        [Msg.user("pay"), assistant],
        fields={"tool_state": {"in_flight": {"assistant_id": assistant.id, "results": [recorded.to_dict()]}}},
        expected_revision=0,
        agent="bot",
    )
    model = ScriptedModel(["recovered"])
    agent = ReActAgent("bot", model=model, toolkit=Toolkit([fast, lookup, charge]), state_store=store)
    assert (await agent.call("continue", CTX)).text == "recovered"
    assert runs == ["lookup k"]  # the finished tool did not run twice; the risky one did not run at all
    by_id: dict[str, Any] = {b.id: b for m in model.requests[0].messages for b in m.blocks(ToolResultBlock)}
    assert by_id["done"].output == "fast x (recorded before the crash)"
    assert by_id["again"].output == "value of k" and by_id["again"].state == "success"
    assert by_id["risky"].state == "interrupted"
    state = await store.load("u", "s", agent="bot")
    assert state is not None and "in_flight" not in state.tool_state
    assert [m.role for m in state.messages] == ["user", "assistant", "user", "user", "assistant"]
