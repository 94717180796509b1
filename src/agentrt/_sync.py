"""Edges every runnable shares: a producer as an event stream, and a coroutine from sync code."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from agentrt.errors import UserError

__all__ = ["run_sync", "stream_from"]

T = TypeVar("T")
_END: Any = object()


async def stream_from(produce: Callable[[Callable[[Any], None]], Awaitable[Any]]) -> AsyncGenerator[Any, None]:
    """Run ``produce(emit)`` in a task and yield what it emits, in order, until it returns.

    The producer's exception is re-raised after its events. Closing the iterator early cancels
    the producer (which checkpoints, for agents) and waits for it.
    """
    queue: asyncio.Queue[Any] = asyncio.Queue()

    async def run() -> None:
        try:
            await produce(queue.put_nowait)
        finally:
            queue.put_nowait(_END)

    task = asyncio.get_running_loop().create_task(run())
    try:
        while True:
            item = await queue.get()
            if item is _END:
                break
            yield item
        await task  # re-raise the run's exception, if any
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def run_sync(make: Callable[[], Coroutine[Any, Any, T]], what: str) -> T:
    """Run the coroutine `make()` in a fresh event loop; refuse inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    raise UserError(f"{what}.call_sync() cannot run inside a running event loop; use `await {what}.call(...)`")
