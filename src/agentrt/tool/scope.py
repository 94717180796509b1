"""`ToolCallScope`: what a running tool knows about its call, set by the executor for each call.

Tools (and what they call: emitters, MCP clients) read `ToolCallScope.current()`; they never
reach into the agent loop. The agent fills in the event sink and the ids when it builds the
executor; outside an agent run (or when nobody streams) `emit` is None and emitting is a no-op.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from agentrt.context import RuntimeContext
from agentrt.events import AgentEvent
from agentrt.message import TokenUsage

__all__ = ["EventSink", "ToolCallScope", "UsageSink"]

EventSink = Callable[[AgentEvent], None]
"""Takes one event into the stream of the run the tool call belongs to."""
UsageSink = Callable[[TokenUsage], None]
"""Counts tokens spent on behalf of the call (e.g. an MCP server's sampling requests)."""

_current: contextvars.ContextVar[ToolCallScope | None] = contextvars.ContextVar("agentrt_tool_call", default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallScope:
    """The tool call running in this task (or worker thread), as the executor bound it."""

    call_id: str
    tool_name: str
    ctx: RuntimeContext
    emit: EventSink | None = None
    """Where events go (None when nobody streams the run's events)."""
    task: asyncio.Task[Any] | None = None
    """The task running the call: cancelling it cancels the call; its loop receives thread-safe emits."""
    reply_id: str = ""
    session_id: str = ""
    source: str = ""
    """The name of the agent running the tool (the events' ``source``)."""
    add_usage: UsageSink | None = None

    @classmethod
    def current(cls) -> ToolCallScope | None:
        """The scope of the tool call running here (None outside an executor)."""
        return _current.get()

    @property
    def streaming(self) -> bool:
        """Whether anyone consumes the run's events."""
        return self.emit is not None

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the call runs on."""
        return self.task.get_loop() if self.task is not None else None

    def event(self, kind: type[AgentEvent], **fields: Any) -> None:
        """Build an event of `kind` stamped with the run's ids and emit it (no-op when nobody streams)."""
        if self.emit is not None:
            self.emit(kind(reply_id=self.reply_id, session_id=self.session_id, source=self.source, **fields))

    @contextlib.contextmanager
    def bind(self) -> Iterator[ToolCallScope]:
        """Make this the current scope for the ``with`` block (the executor does this for each call)."""
        token = _current.set(self)
        try:
            yield self
        finally:
            _current.reset(token)
