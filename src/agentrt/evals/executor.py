"""Executors: how the runner maps "run one case" over its jobs.

`LocalExecutor` runs them on this event loop with at most `concurrency` in flight. An executor for a
cluster (`agentrt.evals.ray_executor.RayExecutor`) implements the same `map`; it gets the jobs and must
hand results back in order. The runner's job functions carry a `RemoteWork` (as their ``remote``
attribute): the half of a job that can run in another process (picklable, JSON in and out, the agent
rebuilt there from its ``MODULE:ATTR``) and the half that finishes it here (scoring).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from agentrt.errors import InvalidValueError

__all__ = ["Executor", "LocalExecutor", "RemoteWork"]

T = TypeVar("T")
R = TypeVar("R")


@runtime_checkable
class Executor(Protocol):
    """Runs ``fn`` on every item and returns the results in the items' order.

    ``on_result`` is called with each result as it is ready (any order), on the caller's loop.
    """

    async def map(
        self,
        fn: Callable[[Any], Awaitable[Any]],
        items: Sequence[Any],
        on_result: Callable[[Any], None] | None = None,
    ) -> list[Any]: ...


@dataclass(frozen=True, slots=True)
class RemoteWork:
    """How a job splits for an executor that runs it in other processes.

    ``run(payload(item))`` runs there (`run` is pickled: it holds a ``MODULE:ATTR`` string and plain
    data, never a live agent; its optional ``async prepare()`` is awaited once per batch of items
    before them, so a broken agent fails fast); ``finish(item, outcome)`` turns its JSON-ready outcome
    into the job's result here.
    """

    run: Callable[[Any], Awaitable[Any]]
    payload: Callable[[Any], Any]
    finish: Callable[[Any, Any], Awaitable[Any]]


class LocalExecutor:
    """At most `concurrency` calls of ``fn`` in flight on the running event loop.

    `concurrency` worker tasks take the next item as they finish one (no task per item), so
    10,000 jobs cost `concurrency` tasks. An exception from ``fn`` cancels the others and propagates
    (the runner's job function records a case's failure instead of raising).
    """

    def __init__(self, concurrency: int = 8) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidValueError(f"concurrency must be an integer >= 1, not {concurrency!r}")
        self.concurrency = concurrency

    async def map(
        self,
        fn: Callable[[T], Awaitable[R]],
        items: Sequence[T],
        on_result: Callable[[R], None] | None = None,
    ) -> list[R]:
        results: list[Any] = [None] * len(items)
        indices = iter(range(len(items)))

        async def worker() -> None:
            for i in indices:  # shared: each worker takes the next free item
                result = await fn(items[i])
                results[i] = result
                if on_result is not None:
                    on_result(result)

        async with asyncio.TaskGroup() as group:
            for _ in range(min(self.concurrency, len(items))):
                group.create_task(worker())
        return results

    def __repr__(self) -> str:
        return f"LocalExecutor(concurrency={self.concurrency})"
