"""Streaming tool output: a tool sends partial output into the agent's event stream while it runs.

Inside a tool body::

    @tool
    async def build(target: str) -> str:
        emitter = ToolEmitter.current("build")
        async for line in run_build(target):
            await emitter.emit(line)
        return "build finished"

Each emission becomes a `ToolOutputDelta` event (``tool_call_id``, ``name``, ``delta``) in the
stream of the agent running the tool, before that call's `ToolResult`; the tool's return value is
still its result. Outside an agent, or when nobody streams the agent's events (a plain
``agent.call``), emitting does nothing, so a tool never needs to check.

A tool can also declare a parameter ``emitter: ToolEmitter = AUTO_EMITTER``: a parameter typed with
a plain class is injected by the runtime and hidden from the model, and the default (an emitter
that follows whichever call is running when it emits) is used when the context holds none.

Which call is running is known exactly when the executor (or `ToolCallScopeMiddleware`) binds it
with `tool_call_scope`; otherwise the emitter finds it in the running turn when only one call of
the tool is in it, and leaves ``tool_call_id`` empty when that is ambiguous.

`emit_nowait` is thread-safe: sync tools (which run in a worker thread) call it directly.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentrt.events import AgentEvent, register_event_type
from agentrt.message import ToolUseBlock
from agentrt.middleware.base import Middleware
from agentrt.tool._execution import current_call

if TYPE_CHECKING:
    from agentrt.agent._run import Run
    from agentrt.context import RuntimeContext
    from agentrt.message import ToolResultBlock

__all__ = [
    "AUTO_EMITTER",
    "ToolCallScopeMiddleware",
    "ToolEmitter",
    "ToolOutputDelta",
    "current_tool_call",
    "tool_call_scope",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolOutputDelta(AgentEvent):
    """A piece of output a running tool streamed (its final result still comes as `ToolResult`)."""

    tool_call_id: str
    """Id of the tool call that produced it ("" when the emitter could not tell which call runs)."""
    name: str
    """The tool's name."""
    delta: str


register_event_type(ToolOutputDelta)

# The executor binds each running call here (see `agentrt.tool._execution.current_call`).
_current_call = current_call


def current_tool_call() -> ToolUseBlock | None:
    """The tool call running in this task (or worker thread), when the executor bound it."""
    return _current_call.get()


@contextlib.contextmanager
def tool_call_scope(call: ToolUseBlock) -> Iterator[None]:
    """Mark `call` as the tool call running in this context (for `ToolEmitter` and anything else)."""
    token = _current_call.set(call)
    try:
        yield
    finally:
        _current_call.reset(token)


class ToolCallScopeMiddleware(Middleware):
    """Binds each tool call with `tool_call_scope`, so emitters know their call id exactly.

    Only needed until the tool executor binds the call itself; harmless afterwards.
    """

    async def on_acting(
        self, run: Run, call: ToolUseBlock, next: Callable[[ToolUseBlock], Awaitable[ToolResultBlock]]
    ) -> ToolResultBlock:
        with tool_call_scope(call):
            return await next(call)


@dataclass(frozen=True, slots=True)
class _Target:
    run: Run
    call_id: str
    name: str
    loop: asyncio.AbstractEventLoop | None


class ToolEmitter:
    """Sends partial output of a running tool into the agent's event stream.

    ``ToolEmitter()`` follows whichever tool call is running where it emits; `ToolEmitter.current`
    binds to the call running now (use it to hand the emitter to another thread). With `sink`, the
    emissions go to ``sink(delta)`` instead (tests, or using a tool outside an agent).
    """

    __slots__ = ("_bound", "_name", "_sink")

    def __init__(self, sink: Callable[[str], object] | None = None, *, name: str | None = None) -> None:
        self._sink = sink
        self._name = name
        self._bound: _Target | None = None

    @classmethod
    def current(cls, name: str | None = None) -> ToolEmitter:
        """An emitter bound to the tool call running now (a silent one outside a streaming agent run).

        Args:
            name: The tool's name, used for the event and to find the call when it is not bound.
        """
        emitter = cls(name=name)
        emitter._bound = _resolve(name)
        return emitter

    @classmethod
    def __agentrt_inject__(cls, ctx: RuntimeContext, tool_name: str) -> ToolEmitter:
        """The value for a parameter typed `ToolEmitter`, for a runtime that injects through this hook."""
        return cls.current(tool_name)

    @property
    def active(self) -> bool:
        """Whether emissions go anywhere (a sink, or an agent run whose events are streamed)."""
        if self._sink is not None:
            return True
        target = self._bound if self._bound is not None else _resolve(self._name)
        return target is not None

    @property
    def tool_call_id(self) -> str:
        """The id of the call the emissions are attributed to ("" when unknown)."""
        target = self._bound if self._bound is not None else _resolve(self._name)
        return target.call_id if target is not None else ""

    def emit_nowait(self, delta: str) -> None:
        """Emit `delta` now; safe from any thread. Empty strings are dropped."""
        if not delta:
            return
        if self._sink is not None:
            self._sink(delta)
            return
        target = self._bound if self._bound is not None else _resolve(self._name)
        if target is None:
            return
        event = ToolOutputDelta(
            reply_id=target.run.reply_id,
            session_id=target.run.session_id,
            source=target.run.agent.name,
            tool_call_id=target.call_id,
            name=target.name,
            delta=delta,
        )
        loop = target.loop
        if loop is None or _on_loop_thread(loop):
            target.run.emit(event)
        elif not loop.is_closed():
            loop.call_soon_threadsafe(target.run.emit, event)

    async def emit(self, delta: str) -> None:
        """Emit `delta`, then yield to the event loop so consumers see it while the tool goes on."""
        self.emit_nowait(delta)
        await asyncio.sleep(0)

    def __repr__(self) -> str:
        return f"ToolEmitter(name={self._name!r}, call={self.tool_call_id!r})"


def _on_loop_thread(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:  # no loop runs in this thread: a worker thread
        return False


def _resolve(name: str | None) -> _Target | None:
    from agentrt.agent._run import current_run

    run = current_run.get()
    if run is None or not run.streaming:
        return None
    loop = run.task.get_loop() if run.task is not None else None
    call = _current_call.get()
    if call is not None:
        return _Target(run, call.id, name or call.name, loop)
    found = _find_call(run, name)
    if found is not None:
        return _Target(run, found.id, found.name, loop)
    return _Target(run, "", name or "", loop)


def _find_call(run: Run, name: str | None) -> ToolUseBlock | None:
    """The only call of tool `name` (or the only call at all) in the turn being acted on."""
    for msg in reversed(run.state.messages):
        if msg.role != "assistant":
            continue
        calls = msg.tool_calls
        if name is not None:
            calls = [c for c in calls if c.name == name]
        return calls[0] if len(calls) == 1 else None
    return None


AUTO_EMITTER = ToolEmitter()
"""An emitter following whichever tool call runs where it emits: the default for ``emitter`` parameters."""
