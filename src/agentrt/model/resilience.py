"""Resilience as model wrappers: timeouts, retries with backoff, and fallback models.

`RetryModel(model)` retries the failures that can pass (429, 5xx, connection errors, timeouts;
never 400/401/403/404/422), honours ``Retry-After``, and enforces a first-chunk timeout and an idle
timeout between stream chunks, so a stalled stream raises `ModelTimeoutError` instead of hanging a
run. `FallbackModel(primary, *fallbacks)` moves on to the next model when one fails, before its
first chunk or midway through its stream.

A failure after chunks were already streamed cannot be hidden: the wrapper yields
``ChatResponse(restart=reason)`` and streams the reply again from the start. Consumers (the agent
loop, `ChatModel.generate`) discard what they accumulated when they see ``restart``, and the agent
emits a ``model_restarted`` event. Tool calls only run after a reply is complete, so a restart
never repeats a side effect.

`model_from_id` wraps network models in a `RetryModel` by default (2 retries, 60 s to the first
chunk, 30 s idle); ``max_retries=``, ``timeout=`` and ``idle_timeout=`` change that.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import logging
import weakref
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from agentrt.errors import (
    AuthenticationError,
    ContextWindowExceededError,
    ModelAPIError,
    ModelConnectionError,
    ModelError,
    ModelTimeoutError,
    RateLimitError,
    UserError,
)
from agentrt.message import Msg
from agentrt.model.base import ChatModel, ChatResponse, GenerateOptions, ToolSchema

if TYPE_CHECKING:
    from agentrt.model.pricing import ModelPrice

__all__ = ["FallbackModel", "RetryModel", "is_retryable"]

logger = logging.getLogger("agentrt.model")

_sleep = asyncio.sleep  # tests replace this to observe backoff without waiting
_FIRST, _IDLE, _TOTAL, _WHOLE = 0, 1, 2, 3  # what a timed-out wait was for


def is_retryable(exc: BaseException) -> bool:
    """Whether another attempt may succeed: 429 (unless the quota is spent), 5xx, connection errors, timeouts."""
    if isinstance(exc, RateLimitError):
        return not _quota_exhausted(exc.body)
    if isinstance(exc, (ModelConnectionError, ModelTimeoutError)):
        return True
    if isinstance(exc, (AuthenticationError, ContextWindowExceededError)):
        return False
    if isinstance(exc, ModelAPIError):
        return exc.status is not None and exc.status >= 500
    return False


def _quota_exhausted(body: Any) -> bool:
    # OpenAI answers 429 both for "slow down" and for "no credit left"; only the first passes.
    error = body.get("error") if isinstance(body, Mapping) else None
    return isinstance(error, Mapping) and "insufficient_quota" in (error.get("code"), error.get("type"))


async def _aclose(stream: AsyncIterator[ChatResponse]) -> None:
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()


_BARE = contextvars.Context()
"""The context the watchdog's timers run in: cancelling a task reads no context variable."""


class _Watchdog:
    """Cancels the consuming task when one wait for a chunk outlasts its limit.

    One timer per stream, re-armed lazily: each chunk only moves ``deadline``; the timer, when it
    fires before the current deadline, re-schedules itself for it. The first timer is set at the
    shortest configured limit, so a later, shorter limit (idle after first chunk) needs no
    re-scheduling either. (An `asyncio.timeout` block per chunk costs a timer handle and a
    context manager for every chunk of every stream: about ten times as much.)
    """

    __slots__ = ("_handle", "_loop", "_shortest", "_task", "_when", "deadline", "expired")

    def __init__(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any], shortest: float) -> None:
        self._loop = loop
        self._task = task
        self._shortest = shortest
        self._handle: asyncio.TimerHandle | None = None
        self._when = 0.0
        self.deadline = -1.0  # absolute loop time; negative while no wait is in progress
        self.expired = False

    def arm(self, limit: float) -> None:
        now = self._loop.time()
        deadline = self.deadline = now + limit
        handle = self._handle
        if handle is None:
            when = now + min(limit, self._shortest)
            self._handle = self._loop.call_at(when, self, context=_BARE)
            self._when = when
        elif deadline < self._when:
            handle.cancel()
            self._handle = self._loop.call_at(deadline, self, context=_BARE)
            self._when = deadline

    def __call__(self) -> None:
        """The timer fired (the timer holds the watchdog itself: no bound method, no context copy per timer)."""
        self._handle = None
        deadline = self.deadline
        if deadline < 0:
            return  # not waiting: the next arm() schedules a new timer
        if deadline <= self._when:
            self.expired = True
            self._task.cancel()
        else:
            self._handle = self._loop.call_at(deadline, self, context=_BARE)
            self._when = deadline

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class _Deadlines:
    """The whole-reply waits of one event loop that have one time limit, under a single timer.

    Waits with equal limits fall due in the order they began, so the oldest pending one is always
    the next: one timer serves them all, set for the oldest and moved on when it fires, instead of
    a timer and a watchdog object per request (500 requests in flight, 500 timers to cancel). A
    wait is two dict entries under an int key: nothing per request for the garbage collector.
    """

    __slots__ = ("_handle", "_tasks", "_when", "expired")

    def __init__(self) -> None:
        self._tasks: dict[int, asyncio.Task[Any]] = {}
        self._when: dict[int, float] = {}  # deadlines in loop time, oldest first
        self._handle: asyncio.TimerHandle | None = None
        self.expired: set[int] = set()

    def start(self, task: asyncio.Task[Any], limit: float) -> int:
        """Cancel `task` unless `stop` is called within `limit` seconds; returns the wait's key."""
        key = next(_wait_keys)
        loop = asyncio.get_running_loop()
        when = loop.time() + limit
        self._tasks[key] = task
        self._when[key] = when
        if self._handle is None:
            self._handle = loop.call_at(when, self, context=_BARE)
        return key

    def stop(self, key: int) -> bool:
        """End a wait; True if it timed out (its task was cancelled for it)."""
        if key in self.expired:
            self.expired.discard(key)
            return True
        del self._tasks[key], self._when[key]
        if not self._tasks and self._handle is not None:
            self._handle.cancel()
            self._handle = None
        return False

    def __call__(self) -> None:
        """The timer fired: cancel the tasks whose deadline passed, then set it for the oldest left."""
        self._handle = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        when = self._when
        while when:
            key = next(iter(when))
            if when[key] > now:
                self._handle = loop.call_at(when[key], self, context=_BARE)
                return
            del when[key]
            self.expired.add(key)
            self._tasks.pop(key).cancel()


_wait_keys = itertools.count()
_deadline_queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[float, _Deadlines]] = (
    weakref.WeakKeyDictionary()
)


def _deadlines(limit: float) -> _Deadlines:
    """The running loop's `_Deadlines` for waits of `limit` seconds."""
    loop = asyncio.get_running_loop()
    queues = _deadline_queues.get(loop)
    if queues is None:
        queues = _deadline_queues[loop] = {}
    queue = queues.get(limit)
    if queue is None:
        queue = queues[limit] = _Deadlines()
    return queue


class _Wrapper(ChatModel):
    """Forwards identity and capabilities to the wrapped model."""

    _inner: ChatModel

    @property
    def provider(self) -> str:  # type: ignore[override]
        return self._inner.provider

    @property
    def price_provider(self) -> str | None:  # type: ignore[override]
        return self._inner.price_provider

    @property
    def price(self) -> ModelPrice | None:
        own: ModelPrice | None = self.__dict__.get("_price")
        return own if own is not None else self._inner.price

    @price.setter
    def price(self, price: ModelPrice | None) -> None:
        self.__dict__["_price"] = price

    @property
    def supports_native_tools(self) -> bool:  # type: ignore[override]
        return self._inner.supports_native_tools

    @property
    def supports_structured_output(self) -> bool:  # type: ignore[override]
        return self._inner.supports_structured_output

    @property
    def supports_vision(self) -> bool:  # type: ignore[override]
        return self._inner.supports_vision

    @property
    def supports_thinking(self) -> bool:  # type: ignore[override]
        return self._inner.supports_thinking

    def streams(self, options: GenerateOptions | None = None) -> bool:
        return self._inner.streams(options)


class RetryModel(_Wrapper):
    """Wraps a model with timeouts and retries.

    Args:
        model: The model to call.
        max_retries: Extra attempts after the first (0: none).
        timeout: Seconds from the call to the first chunk (connecting, sending, and the model's
            time to first token), per attempt. None: no limit.
        whole_timeout: Seconds from the call to the reply when the wrapped model answers a call
            whole rather than streamed (`ChatModel.streams` is False: the first chunk is the last,
            so it waits for the whole generation), per attempt. None: no limit.
        idle_timeout: Seconds allowed between two chunks of a stream. None: no limit.
        total_timeout: Seconds for a whole attempt, first chunk to last. None: no limit.
        backoff: Base delay in seconds; attempt n waits a random time in [0, backoff * 2**(n-1)]
            ("full jitter"), at most `max_backoff`.
        max_backoff: Cap of one backoff delay.
        max_retry_after: Cap of a provider's ``Retry-After``, so a long one cannot stall a run.
        restart_midstream: Retry also when the stream fails after chunks were yielded: a
            ``ChatResponse(restart=...)`` tells the consumer to drop them, then the reply starts over.
            False: such failures are raised.
    """

    def __init__(
        self,
        model: ChatModel,
        *,
        max_retries: int = 2,
        timeout: float | None = 60.0,
        idle_timeout: float | None = 30.0,
        total_timeout: float | None = None,
        whole_timeout: float | None = 600.0,
        backoff: float = 0.5,
        max_backoff: float = 20.0,
        max_retry_after: float = 60.0,
        restart_midstream: bool = True,
    ) -> None:
        if not isinstance(model, ChatModel):
            raise UserError(f"RetryModel wraps a ChatModel, not {type(model).__name__!r}")
        if max_retries < 0:
            raise UserError(f"max_retries must be >= 0, not {max_retries}")
        limits = {
            "timeout": timeout,
            "idle_timeout": idle_timeout,
            "total_timeout": total_timeout,
            "whole_timeout": whole_timeout,
        }
        for name, value in limits.items():
            if value is not None and value <= 0:
                raise UserError(f"{name} must be a positive number of seconds or None, not {value!r}")
        self._inner = model
        self.model_name = model.model_name
        self.options = model.options
        self.max_retries = max_retries
        self.timeout = timeout
        self.idle_timeout = idle_timeout
        self.total_timeout = total_timeout
        self.whole_timeout = whole_timeout
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_retry_after = max_retry_after
        self.restart_midstream = restart_midstream

    @property
    def model(self) -> ChatModel:
        """The wrapped model."""
        return self._inner

    def __repr__(self) -> str:
        return f"RetryModel({self._inner!r}, max_retries={self.max_retries})"

    def delay(self, attempt: int, exc: BaseException) -> float:
        """Seconds to wait before retry number `attempt` (1-based) after `exc`."""
        retry_after = getattr(exc, "retry_after", None)
        if isinstance(retry_after, (int, float)) and retry_after >= 0:
            return float(min(retry_after, self.max_retry_after))
        import random  # only on a retry: not worth its import time for every `import agentrt`

        return random.uniform(0.0, min(self.max_backoff, self.backoff * 2 ** (attempt - 1)))

    async def stream(
        self, messages: Sequence[Msg], tools: Sequence[ToolSchema] = (), options: GenerateOptions | None = None
    ) -> AsyncIterator[ChatResponse]:
        """Stream from the wrapped model, retrying and timing out as configured."""
        # One generator for retries and timeouts: every layer of async generator costs per chunk.
        attempt = 0
        restart: str | None = None
        (first, first_phase), idle, total = self._first_limit(options), self.idle_timeout, self.total_timeout
        limits = [x for x in (first, idle, total) if x is not None]
        wait = 0.0
        while True:
            if restart is not None:
                yield ChatResponse(restart=restart)
                restart = None
            inner = self._inner.stream(messages, tools, options)
            yielded = False
            watch: _Watchdog | None = None
            try:
                if not limits:
                    async for chunk in inner:
                        yielded = True
                        yield chunk
                    return
                loop = asyncio.get_running_loop()
                task = cast("asyncio.Task[Any]", asyncio.current_task())
                cancelling = task.cancelling()
                watch = _Watchdog(loop, task, min(limits))
                end = loop.time() + total if total is not None else None
                limit, phase = first, first_phase
                next_chunk = inner.__anext__
                while True:
                    if end is not None:
                        limit, phase = self._within_total(end - loop.time(), limit, phase)
                    if limit is not None:
                        watch.arm(limit)
                    try:
                        chunk = await next_chunk()
                    except StopAsyncIteration:
                        return
                    except BaseException:
                        if watch.expired and task.uncancel() <= cancelling:
                            raise self._timeout_error(phase) from None
                        raise
                    finally:
                        watch.deadline = -1.0
                    if watch.expired:  # the wrapped model swallowed our cancellation
                        task.uncancel()
                        raise self._timeout_error(phase)
                    yielded = True
                    yield chunk
                    limit, phase = idle, _IDLE
            except ModelError as exc:
                if attempt >= self.max_retries or not is_retryable(exc) or (yielded and not self.restart_midstream):
                    raise
                attempt += 1
                wait, restart = self._plan_retry(attempt, exc, yielded)
            finally:
                if watch is not None:
                    watch.close()
                await _aclose(inner)
            await _sleep(wait)

    async def whole_reply(
        self, messages: Sequence[Msg], tools: Sequence[ToolSchema] = (), options: GenerateOptions | None = None
    ) -> Sequence[ChatResponse] | None:
        """`stream`'s retries and timeouts around the wrapped model's `whole_reply` (None: it streams this call).

        Nothing is yielded before a reply is complete, so a retry never needs a restart chunk.
        """
        inner = self._inner
        if type(self).stream is not RetryModel.stream or inner.streams(options):
            return None
        attempt = 0
        wait = 0.0
        limit, phase = self._first_limit(options)
        if self.total_timeout is not None:
            limit, phase = self._within_total(self.total_timeout, limit, phase)
        while True:
            try:
                if limit is None:
                    return await inner.whole_reply(messages, tools, options)
                task = cast("asyncio.Task[Any]", asyncio.current_task())
                cancelling = task.cancelling()
                deadlines = _deadlines(limit)
                key = deadlines.start(task, limit)
                try:
                    chunks = await inner.whole_reply(messages, tools, options)
                except BaseException:
                    if deadlines.stop(key) and task.uncancel() <= cancelling:
                        raise self._timeout_error(phase) from None
                    raise
                if deadlines.stop(key):  # the wrapped model swallowed our cancellation
                    task.uncancel()
                    raise self._timeout_error(phase)
                return chunks
            except ModelError as exc:
                if attempt >= self.max_retries or not is_retryable(exc):
                    raise
                attempt += 1
                wait, _ = self._plan_retry(attempt, exc, False)
            await _sleep(wait)

    def _first_limit(self, options: GenerateOptions | None) -> tuple[float | None, int]:
        """The limit of the wait for the first chunk: `timeout`, or `whole_timeout` for a reply that comes whole."""
        if self._inner.streams(options):
            return self.timeout, _FIRST
        return self.whole_timeout, _WHOLE

    def _within_total(self, left: float, limit: float | None, phase: int) -> tuple[float | None, int]:
        """The next wait's limit and phase once the whole reply's deadline, `left` seconds away, counts."""
        if left <= 0:
            raise self._timeout_error(_TOTAL)
        if limit is None or left < limit:
            return left, _TOTAL
        return limit, phase

    def _plan_retry(self, attempt: int, exc: ModelError, yielded: bool) -> tuple[float, str | None]:
        """Log the failure; the wait before retry `attempt`, and the restart reason if chunks went out."""
        wait = self.delay(attempt, exc)
        logger.warning(
            "model %s failed (%s: %s); retry %d of %d in %.2f s",
            self._inner.id,
            type(exc).__name__,
            exc,
            attempt,
            self.max_retries,
            wait,
        )
        if not yielded:
            return wait, None
        return wait, f"{self._inner.id} failed mid-stream ({type(exc).__name__}: {exc}); retrying"

    def _timeout_error(self, phase: int) -> ModelTimeoutError:
        if phase == _FIRST:
            what = f"the first chunk (timeout={self.timeout} s)"
        elif phase == _IDLE:
            what = f"the next chunk (idle_timeout={self.idle_timeout} s)"
        elif phase == _WHOLE:
            what = f"the whole (non-streamed) reply (whole_timeout={self.whole_timeout} s)"
        else:
            what = f"the whole reply (total_timeout={self.total_timeout} s)"
        return ModelTimeoutError(f"model {self._inner.id!r} timed out waiting for {what}")

    async def aclose(self) -> None:
        await self._inner.aclose()


class FallbackModel(_Wrapper):
    """Tries `primary`, then each fallback in order, when a model fails with one of `fallback_on`.

    A failure before the first chunk switches silently (with a log warning); a failure midway
    through a stream yields ``ChatResponse(restart="primary X failed: ...; continuing with Y")``
    and streams Y's reply from the start. When the last model fails too, its error is raised,
    with the earlier failures attached as notes.

    Identity (`provider`, `model_name`) is the primary's; a capability is claimed only when every
    model has it (thinking: when any has it). Once a reply is complete, a last
    ``ChatResponse(served_by=model)`` says which model produced it, so the agent prices the reply
    as that model's (a fallback's reply is not billed at the primary's price).
    """

    def __init__(
        self,
        primary: ChatModel,
        *fallbacks: ChatModel,
        fallback_on: type[BaseException] | tuple[type[BaseException], ...] = (ModelError,),
    ) -> None:
        models = (primary, *fallbacks)
        for model in models:
            if not isinstance(model, ChatModel):
                raise UserError(f"FallbackModel takes ChatModels, not {type(model).__name__!r}")
        if not fallbacks:
            raise UserError("FallbackModel needs at least one fallback model after the primary")
        on = fallback_on if isinstance(fallback_on, tuple) else (fallback_on,)
        for kind in on:
            if not (isinstance(kind, type) and issubclass(kind, Exception)):
                raise UserError(f"fallback_on must hold Exception subclasses, not {kind!r}")
        self._inner = primary
        self.models: tuple[ChatModel, ...] = models
        self.fallback_on: tuple[type[BaseException], ...] = on
        self.model_name = primary.model_name
        self.options = primary.options

    @property
    def supports_native_tools(self) -> bool:  # type: ignore[override]
        return all(m.supports_native_tools for m in self.models)

    @property
    def supports_structured_output(self) -> bool:  # type: ignore[override]
        return all(m.supports_structured_output for m in self.models)

    @property
    def supports_vision(self) -> bool:  # type: ignore[override]
        return all(m.supports_vision for m in self.models)

    @property
    def supports_thinking(self) -> bool:  # type: ignore[override]
        return any(m.supports_thinking for m in self.models)

    def __repr__(self) -> str:
        return f"FallbackModel({', '.join(repr(m) for m in self.models)})"

    async def stream(
        self, messages: Sequence[Msg], tools: Sequence[ToolSchema] = (), options: GenerateOptions | None = None
    ) -> AsyncIterator[ChatResponse]:
        """Stream from the first model that works."""
        models = self.models
        last = len(models) - 1
        failures: list[str] = []
        for i, model in enumerate(models):
            inner = model.stream(messages, tools, options)
            yielded = False
            marked = False  # a wrapper inside `model` already said which model served the reply
            restart: str | None = None
            try:
                async for chunk in inner:
                    yielded = True
                    if chunk.served_by is not None:
                        marked = True
                    yield chunk
                if not marked:
                    yield ChatResponse(served_by=model)
                return
            except self.fallback_on as exc:
                role = "primary" if i == 0 else "fallback"
                if i == last:
                    for failure in failures:
                        exc.add_note(failure)
                    raise
                failure = f"{role} {model.id} failed: {type(exc).__name__}: {exc}"
                failures.append(failure)
                logger.warning("%s; continuing with %s", failure, models[i + 1].id)
                if yielded:
                    restart = f"{failure}; continuing with {models[i + 1].id}"
            finally:
                await _aclose(inner)
            if restart is not None:
                yield ChatResponse(restart=restart)

    async def aclose(self) -> None:
        for model in self.models:
            await model.aclose()
