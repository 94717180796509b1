"""`ToolCallScope`: what a running tool knows about its call, set by the executor for each call.

Tools (and what they call: emitters, MCP clients) read `ToolCallScope.current()`; they never
reach into the agent loop. The agent fills in the event sink, the ids and the question channel
(`ask`) when it builds the executor; outside an agent run (or when nobody streams) `emit` and
`ask` are None: emitting is a no-op and a question is declined.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from agentrt.context import RuntimeContext
from agentrt.events import AgentEvent
from agentrt.message import TokenUsage
from agentrt.tool.questions import AskUser, ElicitationAnswer, UserQuestion

if TYPE_CHECKING:
    from agentrt.model.base import ChatModel

__all__ = ["CallClock", "EventSink", "ModelMeter", "ToolCallScope", "UsageSink"]

EventSink = Callable[[AgentEvent], None]
"""Takes one event into the stream of the run the tool call belongs to."""
UsageSink = Callable[[TokenUsage], None]
"""Counts tokens spent on behalf of the call (e.g. an MCP server's sampling requests)."""


class ModelMeter(Protocol):
    """The usage accounting of model calls made on a run's behalf outside its loop.

    For a tool's calls (an MCP server's sampling requests) and the compressor's summary calls: the
    agent's `agentrt.agent.usage.RunMeter`. `before` runs right before the call is sent and may
    refuse it by raising `UsageLimitExceeded` (the run's usage limits), in which case it is not
    made; `after` counts what the reply spent (tokens, cost at `model`'s price).
    """

    def before(self, model: ChatModel) -> None: ...

    def after(self, model: ChatModel, usage: TokenUsage | None) -> None: ...


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
    meter: ModelMeter | None = None
    """Reserves and counts the model calls the tool makes for the run (None: not metered)."""
    ask: AskUser | None = None
    """Puts a question to the run's human and waits for the answer (None: the run has no way to ask)."""
    clock: CallClock | None = None
    """The call's deadline, paused while the call waits for the human (None: no timeout to pause)."""

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

    @property
    def can_ask(self) -> bool:
        """Whether the run can put a question to its human (someone streams it)."""
        return self.ask is not None

    async def ask_user(self, question: UserQuestion) -> ElicitationAnswer:
        """Ask the run's human `question` and wait for the answer; ``decline`` when the run cannot ask.

        The question is attributed to this call (its `tool_call_id`, and `tool` unless given), and
        the call's timeout stands still while the human thinks: the question's own `timeout`
        bounds the wait instead.
        """
        ask = self.ask
        if ask is None:
            return ElicitationAnswer.decline()
        question = replace(
            question, tool_call_id=question.tool_call_id or self.call_id, tool=question.tool or self.tool_name
        )
        clock = self.clock
        if clock is None:
            return await ask(question)
        with clock.paused():
            return await ask(question)

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


class CallClock:
    """The deadline of one tool call (the executor's ``asyncio.timeout``), which questions can pause.

    A call that waits for its human should not time out because the human takes a minute: while
    at least one question of the call is open, the deadline is suspended, and it resumes with the
    time that was left.
    """

    __slots__ = ("_left", "_paused", "_timeout")

    def __init__(self) -> None:
        self._timeout: asyncio.Timeout | None = None
        self._paused = 0
        self._left: float | None = None

    def attach(self, timeout: asyncio.Timeout) -> None:
        """The call entered its deadline (suspended at once if a question is already open)."""
        self._timeout = timeout
        if self._paused:
            self._suspend()

    def detach(self) -> None:
        """The call left its deadline (finished, failed or timed out)."""
        self._timeout = None
        self._left = None

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Suspend the deadline for the ``with`` block (nested and concurrent blocks count)."""
        self._paused += 1
        if self._paused == 1:
            self._suspend()
        try:
            yield
        finally:
            self._paused -= 1
            if not self._paused:
                self._resume()

    def _suspend(self) -> None:
        timeout = self._timeout
        if timeout is None or self._left is not None or timeout.expired():
            return
        when = timeout.when()
        if when is None:
            return
        with contextlib.suppress(RuntimeError):  # the call just left its deadline
            timeout.reschedule(None)
            self._left = max(0.0, when - asyncio.get_running_loop().time())

    def _resume(self) -> None:
        timeout, left = self._timeout, self._left
        self._left = None
        if timeout is None or left is None or timeout.expired():
            return
        with contextlib.suppress(RuntimeError):
            timeout.reschedule(asyncio.get_running_loop().time() + left)
