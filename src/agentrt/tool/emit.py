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

The executor binds each call in a `ToolCallScope`, so the emitter knows exactly which call it
reports for, even when one tool runs several times in parallel.

`emit_nowait` is thread-safe: sync tools (which run in a worker thread) call it directly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentrt.events import AgentEvent, register_event_type
from agentrt.tool.scope import ToolCallScope

if TYPE_CHECKING:
    from agentrt.context import RuntimeContext

__all__ = ["AUTO_EMITTER", "ToolCallScope", "ToolEmitter", "ToolOutputDelta"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolOutputDelta(AgentEvent):
    """A piece of output a running tool streamed (its final result still comes as `ToolResult`)."""

    tool_call_id: str
    """Id of the tool call that produced it."""
    name: str
    """The tool's name."""
    delta: str


register_event_type(ToolOutputDelta)


@dataclass(frozen=True, slots=True)
class _Target:
    scope: ToolCallScope
    name: str


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
            name: The tool's name for the events (default: the name of the running call).
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
        return target.scope.call_id if target is not None else ""

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
        scope = target.scope
        sink = scope.emit
        if sink is None:
            return
        event = ToolOutputDelta(
            reply_id=scope.reply_id,
            session_id=scope.session_id,
            source=scope.source,
            tool_call_id=scope.call_id,
            name=target.name,
            delta=delta,
        )
        loop = scope.loop
        if loop is None or _on_loop_thread(loop):
            sink(event)
        elif not loop.is_closed():
            loop.call_soon_threadsafe(sink, event)

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
    scope = ToolCallScope.current()
    if scope is None or not scope.streaming:
        return None
    return _Target(scope, name or scope.tool_name)


AUTO_EMITTER = ToolEmitter()
"""An emitter following whichever tool call runs where it emits: the default for ``emitter`` parameters."""
