"""The runs a server process has in flight: tracked for graceful shutdown and SSE reconnects.

Nothing here outlives a run: a finished run leaves no trace in memory, so replicas sharing a
state store are interchangeable (a reconnect that lands on another replica reads the session).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentrt import events as ev
from agentrt.agent.base import AgentBase, AgentInput
from agentrt.context import RuntimeContext
from agentrt.message import Msg
from agentrt.server._sse import LiveRun, aclose

__all__ = ["ActiveRun", "RunRegistry", "SessionAddress", "session_address"]

logger = logging.getLogger("agentrt.server")

EventEncoder = Callable[[ev.AgentEvent], bytes]
ErrorEncoder = Callable[[BaseException], bytes]
SessionAddress = tuple[str, str, str]
"""(the agent's state key, user id, session id): a session as the store addresses it."""


def session_address(agent: AgentBase, ctx: RuntimeContext) -> SessionAddress:
    """Where `agent` keeps the session of `ctx` (pipelines without a `state_key` use their name)."""
    user_id, session_id = ctx.key
    return (getattr(agent, "state_key", None) or agent.name, user_id, session_id)


@dataclass(slots=True, eq=False)
class ActiveRun:
    """One agent call started by the server."""

    agent: AgentBase
    ctx: RuntimeContext
    task: asyncio.Task[Any]
    live: LiveRun | None = None
    started: bool = False
    """Whether the call holds its session (a run still queued for the lock has nothing to save)."""


class RunRegistry:
    """In-flight runs of one app: started here, interrupted and awaited at shutdown."""

    __slots__ = ("_active", "_live", "accepting", "buffer_size", "disconnect_grace")

    def __init__(self, *, buffer_size: int = 1024, disconnect_grace: float = 2.0) -> None:
        self.buffer_size = buffer_size
        self.disconnect_grace = disconnect_grace
        self.accepting = True
        self._active: set[ActiveRun] = set()
        self._live: dict[SessionAddress, dict[str, LiveRun]] = {}

    def __len__(self) -> int:
        return len(self._active)

    def is_running(self, key: SessionAddress) -> bool:
        """Whether a run of this server works on the session `key` = (agent state key, user id, session id)."""
        return any(session_address(run.agent, run.ctx) == key for run in self._active)

    # -- plain calls ------------------------------------------------------------------------------------------
    async def call(self, agent: AgentBase, input: AgentInput, ctx: RuntimeContext) -> Msg:
        """``agent.call`` tracked for shutdown."""
        task = asyncio.get_running_loop().create_task(agent.call(input, ctx))
        entry = ActiveRun(agent, ctx, task)
        self._active.add(entry)
        try:
            return await task
        finally:
            self._active.discard(entry)

    def track(self, agent: AgentBase, ctx: RuntimeContext, task: asyncio.Task[Any]) -> ActiveRun:
        """Track a run a facade started itself (call `untrack` when it ends).

        Set ``entry.started = True`` once the run's ``run_started`` event is seen, so a shutdown
        lets a run that already finished its work deliver its last events instead of cancelling it.
        """
        entry = ActiveRun(agent, ctx, task)
        self._active.add(entry)
        return entry

    def untrack(self, entry: ActiveRun) -> None:
        """Forget a run registered with `track`."""
        self._active.discard(entry)

    # -- streamed runs ------------------------------------------------------------------------------------------
    def start_live(
        self,
        agent: AgentBase,
        agent_name: str,
        ctx: RuntimeContext,
        input: AgentInput,
        encode: EventEncoder,
        encode_error: ErrorEncoder,
    ) -> LiveRun:
        """Start the agent's run in a task that fills a `LiveRun` buffer clients read from.

        `encode` gives an event's SSE data (its type names the frame); `encode_error` the
        ``run_error`` data for a failure the agent did not report itself.
        """
        key = session_address(agent, ctx)
        live = LiveRun(key, agent_name, uuid.uuid4().hex[:16], capacity=self.buffer_size, grace=self.disconnect_grace)
        pump = _LivePump(self, agent, ctx, input, live, encode, encode_error)
        task = asyncio.get_running_loop().create_task(pump.run())
        live.task = pump.entry.task = task
        self._active.add(pump.entry)
        self._live.setdefault(key, {})[live.token] = live
        return live

    def _finished(self, entry: ActiveRun, live: LiveRun) -> None:
        self._active.discard(entry)
        key = session_address(entry.agent, entry.ctx)
        runs = self._live.get(key)
        if runs is not None:
            runs.pop(live.token, None)
            if not runs:
                del self._live[key]

    def find_live(self, key: SessionAddress, token: str | None = None) -> LiveRun | None:
        """The live run of a session: the one with `token`, or the most recent."""
        runs = self._live.get(key)
        if not runs:
            return None
        if token is not None:
            return runs.get(token)
        return next(reversed(runs.values()))

    # -- shutdown -------------------------------------------------------------------------------------------------
    async def shutdown(self, timeout: float) -> None:
        """Stop accepting runs, interrupt the running ones and wait up to `timeout` s for their checkpoints.

        A run that holds its session is interrupted (`agent.interrupt`: its reply says so and its
        stream ends with ``run_finished``); a run still queued for the session lock is cancelled.
        Whatever is left after `timeout` is cancelled, which checkpoints it too.
        """
        self.accepting = False
        active = list(self._active)
        if not active:
            return
        logger.info("shutting down: interrupting %d run(s)", len(active))
        for run in active:
            if run.task.done():
                continue
            if _holds_session(run):
                run.agent.interrupt(run.ctx)
            elif not run.started:
                run.task.cancel()
        tasks = [run.task for run in active]
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        if pending:
            logger.warning("%d run(s) still busy after %.1f s: cancelling them", len(pending), timeout)
            for task in pending:
                task.cancel()
            with contextlib.suppress(Exception):
                await asyncio.wait(pending, timeout=max(1.0, timeout / 2))


class _LivePump:
    """One streamed run: runs the agent and pushes each event into its `LiveRun` as it happens.

    A slotted object rather than closures: it is alive for the whole run, so under a burst of
    streamed runs every object it saves is one the garbage collector does not scan again and again.
    """

    __slots__ = ("agent", "ctx", "encode", "encode_error", "ended", "entry", "input", "live", "registry")

    def __init__(
        self,
        registry: RunRegistry,
        agent: AgentBase,
        ctx: RuntimeContext,
        input: AgentInput,
        live: LiveRun,
        encode: EventEncoder,
        encode_error: ErrorEncoder,
    ) -> None:
        self.registry = registry
        self.agent = agent
        self.ctx = ctx
        self.input = input
        self.live = live
        self.encode = encode
        self.encode_error = encode_error
        self.ended = False
        self.entry = ActiveRun(agent, ctx, _NO_TASK, live=live)  # its task is set by `start_live`

    def on_event(self, event: ev.AgentEvent) -> None:
        if type(event) is not ev.TextDelta:
            if isinstance(event, ev.RunStarted):
                if event.source == self.agent.name:
                    self.entry.started = True
            elif isinstance(event, (ev.RunFinished, ev.RunError)) and event.source == self.agent.name:
                self.ended = True
        self.live.push(event.type, self.encode(event))

    async def run(self) -> None:
        agent, live = self.agent, self.live
        # Agents whose events come from `AgentBase.stream_events` push them straight into the
        # buffer (no queue, no generator, one task switch less per event); an agent that streams
        # its own way (a pipeline) is iterated.
        stream = None if _pushes_events(agent) else agent.stream_events(self.input, self.ctx)
        try:
            if stream is None:
                await agent.run_with_events(self.input, self.ctx, self.on_event)
            else:
                async for event in stream:
                    self.on_event(event)
        except Exception as exc:
            if not self.ended:
                live.push(ev.RunError.type, self.encode_error(exc))
            logger.warning("run %s failed: %s: %s", live.token, type(exc).__name__, exc)
        finally:
            if stream is not None:
                await aclose(stream)
            live.close()
            self.registry._finished(self.entry, live)


_NO_TASK: Any = None


def _holds_session(run: ActiveRun) -> bool:
    # `agent.interrupt` addresses a session, not a call: check that the call running on the session
    # is this one (the same context object), so a call queued behind it is cancelled instead.
    current = run.agent.running_call(run.ctx)
    return current is not None and getattr(current, "ctx", None) is run.ctx


def _pushes_events(agent: AgentBase) -> bool:
    """Whether `agent`'s events are those of `AgentBase.stream_events` (so `run_with_events` gives the same)."""
    return type(agent).stream_events is AgentBase.stream_events
