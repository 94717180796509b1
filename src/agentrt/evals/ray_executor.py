"""`RayExecutor`: evaluation cases and batch rows as Ray tasks across a cluster (the ``ray`` extra).

Jobs go out in chunks, one Ray task per chunk (one CPU each). A task gets the job function's
picklable half (`RemoteWork.run`: the agent's ``MODULE:ATTR`` and plain data, never a live agent)
and the chunk's JSON payloads; the worker process builds the agent once (cached per target for the
process's life), runs the chunk on one long-lived event loop with a `LocalExecutor` bounded by
``concurrency_per_worker`` and returns JSON outcomes. The driver finishes each outcome (scores a
case) as its chunk completes, so progress streams back, and returns the results in the jobs' order.

``ray`` is imported on first use: ``pip install 'agentrt[ray]'``.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from agentrt.errors import InvalidValueError, UserError
from agentrt.evals.executor import LocalExecutor, RemoteWork

__all__ = ["RayExecutor"]

_LOOP: asyncio.AbstractEventLoop | None = None
"""The worker process's event loop: every chunk runs on it, so agents built once keep one loop."""


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError("Ray is not installed: pip install 'agentrt[ray]'") from None
    return ray


def run_chunk(run: Callable[[Any], Awaitable[Any]], concurrency: int, payloads: list[Any]) -> list[Any]:
    """What one Ray task runs (in a worker process): `run` over `payloads`, `concurrency` in flight."""
    global _LOOP
    if _LOOP is None or _LOOP.is_closed():
        _LOOP = asyncio.new_event_loop()
    return _LOOP.run_until_complete(_run_chunk(run, concurrency, payloads))


async def _run_chunk(run: Callable[[Any], Awaitable[Any]], concurrency: int, payloads: list[Any]) -> list[Any]:
    prepare = getattr(run, "prepare", None)
    if prepare is not None:
        await prepare()
    return await LocalExecutor(concurrency).map(run, payloads)


async def _get(ray: Any, ref: Any) -> Any:
    try:
        return await asyncio.to_thread(ray.get, ref)
    except ray.exceptions.RayError as exc:
        cause = getattr(exc, "cause", None) or exc
        while isinstance(cause, BaseExceptionGroup) and len(cause.exceptions) == 1:
            cause = cause.exceptions[0]
        raise UserError(
            f"a Ray task failed: {type(cause).__name__}: {cause} (is the agent's module importable on the "
            "workers? docs/evals.md, 'Running on Ray')"
        ) from exc


async def _identity(item: Any, outcome: Any) -> Any:
    return outcome


def _same(item: Any) -> Any:
    return item


class RayExecutor:
    """Runs jobs as Ray tasks: `concurrency_per_worker` in flight in each task, results in the jobs' order.

    Args:
        address: The cluster: None starts a local Ray (``num_cpus`` of them), ``"auto"`` joins the
            cluster of this machine (inside a Ray or KubeRay pod), ``"ray://head:10001"`` connects
            through Ray Client. Ignored when Ray is already initialised in this process.
        num_cpus: CPUs of a local Ray started here (None: all of this machine's).
        concurrency_per_worker: Jobs in flight at once in each task (each task takes one CPU).
        chunk_size: Jobs per task (None: enough chunks to keep every CPU busy, at most
            4 x `concurrency_per_worker` jobs each, so progress streams back).
        runtime_env: Ray's ``runtime_env`` for a Ray started or joined here (``working_dir``,
            ``py_modules``, ``pip``: how the agent's module reaches the workers).

    The jobs' function must be picklable (a module-level function or a picklable callable), or carry
    a `RemoteWork` as its ``remote`` attribute, as the evaluation runner's and the batch runner's do
    when they are given the agent as ``"MODULE:ATTR"``.
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        num_cpus: int | None = None,
        concurrency_per_worker: int = 8,
        chunk_size: int | None = None,
        runtime_env: Mapping[str, Any] | None = None,
    ) -> None:
        for name, value in (("concurrency_per_worker", concurrency_per_worker), ("num_cpus", num_cpus)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise InvalidValueError(f"{name} must be an integer >= 1, not {value!r}")
        if chunk_size is not None and (
            isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1
        ):
            raise InvalidValueError(f"chunk_size must be an integer >= 1 or None, not {chunk_size!r}")
        self.address = address
        self.num_cpus = num_cpus
        self.concurrency_per_worker = concurrency_per_worker
        self.chunk_size = chunk_size
        self.runtime_env = dict(runtime_env) if runtime_env is not None else None
        self._started = False

    def start(self) -> None:
        """Initialise Ray in this process unless it is already (`map` calls it)."""
        ray = _import_ray()
        if ray.is_initialized():
            return
        kwargs: dict[str, Any] = {"address": self.address, "log_to_driver": False}
        if self.address is None:
            kwargs.update(num_cpus=self.num_cpus, include_dashboard=False)
        if self.runtime_env is not None:
            kwargs["runtime_env"] = self.runtime_env
        ray.init(**kwargs)
        self._started = True

    def shutdown(self) -> None:
        """Disconnect from Ray (stopping a local Ray) if `start` initialised it, else nothing."""
        if self._started:
            _import_ray().shutdown()
            self._started = False

    def _chunk_size(self, ray: Any, total: int) -> int:
        if self.chunk_size is not None:
            return self.chunk_size
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        return max(1, min(4 * self.concurrency_per_worker, math.ceil(total / cpus)))

    async def map(
        self,
        fn: Callable[[Any], Awaitable[Any]],
        items: Sequence[Any],
        on_result: Callable[[Any], None] | None = None,
    ) -> list[Any]:
        if not items:
            return []
        work = getattr(fn, "remote", None)
        if not isinstance(work, RemoteWork):
            work = RemoteWork(fn, _same, _identity)
        self.start()
        ray = _import_ray()
        size = self._chunk_size(ray, len(items))
        task = ray.remote(num_cpus=1, max_retries=0)(run_chunk)
        run_ref = ray.put(work.run)
        pending: dict[Any, range] = {}
        for start in range(0, len(items), size):
            span = range(start, min(start + size, len(items)))
            ref = task.remote(run_ref, self.concurrency_per_worker, [work.payload(items[i]) for i in span])
            pending[ref] = span
        results: list[Any] = [None] * len(items)
        try:
            while pending:
                ready, _ = await asyncio.to_thread(ray.wait, list(pending), num_returns=1)
                for ref in ready:
                    span = pending.pop(ref)
                    outcomes = await _get(ray, ref)
                    finished = await asyncio.gather(
                        *(work.finish(items[i], o) for i, o in zip(span, outcomes, strict=True))
                    )
                    for i, result in zip(span, finished, strict=True):
                        results[i] = result
                        if on_result is not None:
                            on_result(result)
        finally:
            for ref in pending:
                ray.cancel(ref, force=False)
        return results

    def __repr__(self) -> str:
        return (
            f"RayExecutor(address={self.address!r}, num_cpus={self.num_cpus!r}, "
            f"concurrency_per_worker={self.concurrency_per_worker})"
        )
