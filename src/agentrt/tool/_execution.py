"""Runs tool calls under the execution policy: validation, timeouts, limits, concurrency.

Errors the model can act on (unknown tool, bad arguments, a tool exception or timeout, a call
limit) become error `ToolResultBlock`s; errors only the developer can fix (`UserError`) and
cancellation propagate.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from agentrt import _json
from agentrt.context import RuntimeContext
from agentrt.errors import ToolArgumentsError, ToolRetry, ToolSuspended, UserError
from agentrt.message import (
    AudioBlock,
    ContentBlock,
    ImageBlock,
    Msg,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    VideoBlock,
)
from agentrt.model._accumulate import META_ARGUMENTS_ERROR
from agentrt.tool.base import Tool
from agentrt.tool.questions import AskUser
from agentrt.tool.scope import CallClock, EventSink, ModelMeter, ToolCallScope, UsageSink

__all__ = ["META_SUSPENDED", "CallRunner", "ToolExecutor", "error_result", "partition_batches", "to_result"]

CallRunner = Callable[[ToolUseBlock], Awaitable[ToolResultBlock]]
META_SUSPENDED = "agentrt_suspended"
"""Metadata key of a result that is not a result: the tool suspended (see `ToolSuspended`)."""
_MEDIA = (TextBlock, ImageBlock, AudioBlock, VideoBlock)


def error_result(call: ToolUseBlock, message: str, state: str = "error") -> ToolResultBlock:
    """An error result for `call` carrying `message` for the model."""
    return ToolResultBlock(id=call.id, name=call.name, output=message, state=state)  # type: ignore[arg-type]


def suspended_result(call: ToolUseBlock, exc: ToolSuspended) -> ToolResultBlock:
    """The placeholder result of a call that suspended: what it waits for travels in its metadata."""
    return ToolResultBlock(
        id=call.id,
        name=call.name,
        output="(waiting for the caller)",
        metadata={META_SUSPENDED: {"pending": exc.pending, "state": exc.state}},
    )


def to_result(call: ToolUseBlock, value: Any) -> ToolResultBlock:
    """Convert whatever a tool returned into a `ToolResultBlock` answering `call`."""
    if isinstance(value, ToolResultBlock):
        if value.id == call.id and value.name == call.name:
            return value
        return dataclasses.replace(value, id=call.id, name=call.name)
    if isinstance(value, str):
        output: str | list[ContentBlock] = value
    elif value is None:
        output = "Done."
    elif isinstance(value, _MEDIA):
        output = [value]
    elif isinstance(value, Msg):
        output = list(value.content)
    elif isinstance(value, (list, tuple)) and value and all(isinstance(v, _MEDIA) for v in value):
        output = list(value)
    elif isinstance(value, (bool, int, float)):
        output = _json.dumps(value)
    else:
        output = _json.dumps(_json.jsonable(value))
    return ToolResultBlock(id=call.id, name=call.name, output=output, state="success")


def partition_batches(
    calls: Sequence[ToolUseBlock], is_safe: Callable[[ToolUseBlock], bool]
) -> list[list[ToolUseBlock]]:
    """Split one turn's calls into batches: contiguous concurrency-safe calls share a batch; others run alone."""
    batches: list[list[ToolUseBlock]] = []
    current: list[ToolUseBlock] = []
    for call in calls:
        if is_safe(call):
            current.append(call)
            continue
        if current:
            batches.append(current)
            current = []
        batches.append([call])
    if current:
        batches.append(current)
    return batches


class ToolExecutor:
    """Executes tool calls for one agent call (holds the per-run call counters).

    Each call runs under a `ToolCallScope` built from `ctx` and the keyword arguments: `emit`
    takes the events tools stream (None: nobody streams), `reply_id`, `session_id` and `source`
    stamp them, `add_usage` counts tokens spent on a call's behalf, `ask` puts a call's questions
    to the run's human (None: the run cannot ask; questions are declined).
    """

    __slots__ = (
        "_active_groups",
        "_add_usage",
        "_ask",
        "_counts",
        "_emit",
        "_meter",
        "_reply_id",
        "_semaphore",
        "_session_id",
        "_source",
        "ctx",
        "tools",
    )

    def __init__(
        self,
        tools: Mapping[str, Tool],
        ctx: RuntimeContext,
        semaphore: asyncio.Semaphore,
        active_groups: frozenset[str] | None = None,
        *,
        emit: EventSink | None = None,
        reply_id: str = "",
        session_id: str | None = None,
        source: str = "",
        add_usage: UsageSink | None = None,
        meter: ModelMeter | None = None,
        ask: AskUser | None = None,
    ) -> None:
        self.tools = tools
        self.ctx = ctx
        self._semaphore = semaphore
        self._counts: dict[str, int] = {}
        self._active_groups = active_groups
        self._emit = emit
        self._reply_id = reply_id
        self._session_id = ctx.key[1] if session_id is None else session_id
        self._source = source
        self._add_usage = add_usage
        self._meter = meter
        self._ask = ask

    def scope(self, call: ToolUseBlock, clock: CallClock | None = None) -> ToolCallScope:
        """The scope `call` runs under (bound by `execute`); `clock` is its pausable deadline."""
        return ToolCallScope(
            call_id=call.id,
            tool_name=call.name,
            ctx=self.ctx,
            emit=self._emit,
            task=asyncio.current_task(),
            reply_id=self._reply_id,
            session_id=self._session_id,
            source=self._source,
            add_usage=self._add_usage,
            meter=self._meter,
            ask=self._ask,
            clock=clock,
        )

    def set_active_groups(self, groups: frozenset[str] | None) -> None:
        """Change which groups are available (the meta tool switches them mid-call)."""
        self._active_groups = groups

    def lookup(self, name: str) -> Tool | None:
        """The tool if registered and available in this session."""
        tool = self.tools.get(name)
        if tool is None or tool.group is None or self._active_groups is None:
            return tool
        return tool if tool.group in self._active_groups else None

    def is_safe(self, call: ToolUseBlock) -> bool:
        """Whether the call may overlap other calls of its turn."""
        tool = self.lookup(call.name)
        return tool is None or tool.concurrency_safe

    def _unknown(self, call: ToolUseBlock) -> ToolResultBlock:
        names = sorted(
            n
            for n, t in self.tools.items()
            if t.group is None or self._active_groups is None or t.group in self._active_groups
        )
        available = ", ".join(names) if names else "(no tools are available)"
        return error_result(call, f"Unknown tool {call.name!r}. Available tools: {available}.")

    async def execute(self, call: ToolUseBlock) -> ToolResultBlock:
        """Run one call and return its result (errors the model can fix become error results)."""
        tool = self.lookup(call.name)
        if tool is None:
            return self._unknown(call)
        if call.metadata and META_ARGUMENTS_ERROR in call.metadata:
            return error_result(
                call,
                f"Invalid arguments for tool {call.name!r}: {call.metadata[META_ARGUMENTS_ERROR]}. Send a JSON object.",
            )
        if tool.max_calls is not None:
            used = self._counts.get(tool.name, 0)
            if used >= tool.max_calls:
                return error_result(
                    call,
                    f"Tool {tool.name!r} was already called {used} time(s) in this run, its limit. "
                    "Do not call it again; continue with the results you have.",
                )
            self._counts[tool.name] = used + 1
        # Only a call that can ask its human needs a pausable deadline.
        clock = CallClock() if self._ask is not None and tool.timeout is not None else None
        try:
            with self.scope(call, clock).bind():
                async with self._semaphore:
                    if tool.timeout is None:
                        value = await tool.invoke(call.input, self.ctx)
                    else:
                        async with asyncio.timeout(tool.timeout) as deadline:
                            if clock is None:
                                value = await tool.invoke(call.input, self.ctx)
                            else:
                                clock.attach(deadline)
                                try:
                                    value = await tool.invoke(call.input, self.ctx)
                                finally:
                                    clock.detach()
        except ToolArgumentsError as exc:
            return error_result(call, str(exc))
        except ToolRetry as exc:
            return error_result(call, exc.message)
        except ToolSuspended as exc:
            return suspended_result(call, exc)
        except TimeoutError:
            return error_result(call, f"Tool {tool.name!r} timed out after {tool.timeout:g} s.")
        except UserError:
            raise
        except Exception as exc:
            return error_result(call, f"Tool {tool.name!r} failed: {type(exc).__name__}: {exc}")
        return to_result(call, value)

    async def execute_all(
        self,
        calls: Sequence[ToolUseBlock],
        runner: CallRunner | None = None,
        on_result: Callable[[ToolResultBlock, float], Awaitable[None]] | None = None,
    ) -> list[ToolResultBlock]:
        """Run one turn's calls: safe neighbours in parallel, the rest in order; results in call order.

        `runner` wraps each call (middleware, permission checks); `on_result` sees each result as it
        lands (events, checkpoints).
        """
        run = runner or self.execute
        if len(calls) == 1:  # the common turn: no batches, no result table, no closure
            started = time.perf_counter()
            result = await run(calls[0])
            if on_result is not None:
                await on_result(result, time.perf_counter() - started)
            return [result]
        results: dict[int, ToolResultBlock] = {}
        position = {id(c): i for i, c in enumerate(calls)}

        async def one(call: ToolUseBlock) -> None:
            started = time.perf_counter()
            result = await run(call)
            results[position[id(call)]] = result
            if on_result is not None:
                await on_result(result, time.perf_counter() - started)

        for batch in partition_batches(calls, self.is_safe):
            if len(batch) == 1:
                await one(batch[0])
            else:
                async with asyncio.TaskGroup() as group:
                    for call in batch:
                        group.create_task(one(call))
        return [results[i] for i in range(len(calls))]
