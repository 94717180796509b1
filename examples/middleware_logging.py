"""A middleware that times every model call and tool call, offline with a scripted model.

Run: .venv/bin/python examples/middleware_logging.py
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from agentrt import Middleware, Msg, ReActAgent, Toolkit, ToolResultBlock, ToolUseBlock, tool
from agentrt.agent import Run
from agentrt.model import ModelRequest, ScriptedModel


class Timing(Middleware):
    """Prints how long each model call and tool call took."""

    async def on_model_call(
        self, run: Run, request: ModelRequest, next: Callable[[ModelRequest], Awaitable[Msg]]
    ) -> Msg:
        start = time.perf_counter()
        msg = await next(request)
        print(f"step {run.step}: model answered in {(time.perf_counter() - start) * 1e3:.2f} ms")
        return msg

    async def on_acting(
        self, run: Run, call: ToolUseBlock, next: Callable[[ToolUseBlock], Awaitable[ToolResultBlock]]
    ) -> ToolResultBlock:
        start = time.perf_counter()
        result = await next(call)
        elapsed_ms = (time.perf_counter() - start) * 1e3
        print(f"step {run.step}: {call.name}({dict(call.input)}) -> {result.state} in {elapsed_ms:.2f} ms")
        return result


@tool(read_only=True)
def word_count(text: str) -> int:
    """Count the words in a text."""
    return len(text.split())


async def main() -> None:
    model = ScriptedModel([ToolUseBlock(name="word_count", input={"text": "to be or not to be"}), "Six words."])
    agent = ReActAgent("counter", model=model, toolkit=Toolkit([word_count]), middlewares=[Timing()])
    reply = await agent.call("How many words in 'to be or not to be'?")
    print(reply.text)


if __name__ == "__main__":
    asyncio.run(main())
