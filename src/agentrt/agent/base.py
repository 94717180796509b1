"""`AgentBase`: the lifecycle every agent shares (call, stream, observe, interrupt, state access)."""

from __future__ import annotations

import abc
import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentrt import events as ev
from agentrt._sync import run_sync, stream_from
from agentrt.agent import _scopes, _turns
from agentrt.agent._run import Run, current_run
from agentrt.agent.usage import UsageLimits, check_limits
from agentrt.context import RuntimeContext
from agentrt.errors import SessionBusyError, UserError
from agentrt.message import Msg, as_messages, new_id
from agentrt.state.base import AgentState, AgentStateStore

if TYPE_CHECKING:
    from agentrt.tool.base import Tool
    from agentrt.tool.questions import ElicitationAnswer, UserQuestion

__all__ = ["AgentBase", "AgentInput"]

AgentInput = str | Msg | Sequence[Msg] | None

_default_store: AgentStateStore | None = None
_END: Any = object()


def default_store() -> AgentStateStore:
    """The process-wide store of agents built without one, opened on first use.

    SQLite at ``~/.agentrt/state.db`` unless ``AGENTRT_STATE_URL`` says otherwise (e.g. ``memory://``).
    """
    global _default_store
    if _default_store is None:
        from agentrt.state import default_state_url, store_from_url

        _default_store = store_from_url(default_state_url())
    return _default_store


class AgentBase(abc.ABC):
    """Receive messages, reason, act, reply. Subclasses implement `_execute`.

    One instance serves many users and sessions at once: per-call data lives in a `Run` and per
    session data in the state store, never on the agent. Calls on one session are serialised
    (FIFO); calls on different sessions run in parallel.
    """

    __slots__ = (
        "__weakref__",
        "_running",
        "_store",
        "description",
        "lock_timeout",
        "name",
        "state_key",
        "usage_limits",
    )

    def __init__(
        self,
        name: str,
        *,
        description: str = "",
        state_store: AgentStateStore | None = None,
        lock_timeout: float | None = None,
        state_key: str | None = None,
        usage_limits: UsageLimits | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise UserError(f"agent name must be a non-empty string, not {name!r}")
        if state_key is not None and (not isinstance(state_key, str) or not state_key):
            raise UserError(f"state_key must be a non-empty string or None, not {state_key!r}")
        self.name = name
        self.state_key = state_key if state_key is not None else name
        """Which agent a session belongs to in the store: sessions are ``(state_key, user_id, session_id)``."""
        self.description = description
        self._store = state_store
        self.lock_timeout = lock_timeout
        self.usage_limits = check_limits(usage_limits)
        """The default `UsageLimits` of each call (a call's ``usage_limits=`` replaces it); None: none."""
        self._running: dict[str, Run] | None = None  # by `_session_key`

    # -- configuration ----------------------------------------------------------------------------
    @property
    def state_store(self) -> AgentStateStore:
        """Where this agent keeps session state."""
        return self._store if self._store is not None else default_store()

    @state_store.setter
    def state_store(self, store: AgentStateStore) -> None:
        self._store = store

    @property
    def has_own_store(self) -> bool:
        """Whether a store was configured (False: the process-wide default)."""
        return self._store is not None

    # -- the call -------------------------------------------------------------------------------------
    async def call(
        self,
        input: AgentInput = None,
        ctx: RuntimeContext | None = None,
        *,
        output: Any = None,
        usage_limits: UsageLimits | None = None,
    ) -> Msg:
        """Run the agent on `input` in the session of `ctx` and return its reply.

        Without `ctx`, inside a `MsgHub` block the agent takes part in, the call runs in the hub's
        context, and the other participants hear the reply before this returns.

        `usage_limits` (`agentrt.agent.usage.UsageLimits`) replaces the agent's default limits for
        this call (``UsageLimits()`` lifts them); past one the call stops with `UsageLimitExceeded`,
        its work saved in the session.
        """
        run = self._new_run(input, ctx, None, output, usage_limits)
        # `_drive` without its events (nobody streams a plain call), inlined: a call in flight holds
        # one coroutine frame per level of its await chain, and this level is the caller's own.
        async with run.store.session_lock(run.user_id, run.session_id, timeout=self.lock_timeout, agent=run.agent_key):
            self._enter(run)
            try:
                reply = await self._execute(run)
            finally:
                self._leave(run)
        if _scopes.SCOPES.get():
            await _scopes.announce(self, run.ctx, reply)
        return reply

    async def stream_events(
        self,
        input: AgentInput = None,
        ctx: RuntimeContext | None = None,
        *,
        output: Any = None,
        usage_limits: UsageLimits | None = None,
    ) -> AsyncIterator[ev.AgentEvent]:
        """Run the agent and yield its events as they happen, ending with `RunFinished`.

        Closing the iterator early (or cancelling its consumer) stops the run, and its state is
        checkpointed first. `usage_limits`: as for `call`.
        """
        run = self._new_run(input, ctx, None, output, usage_limits)

        async def produce(emit: Any) -> None:
            run.emit_fn = emit
            reply = await self._drive(run)
            if _scopes.SCOPES.get():
                await _scopes.announce(self, run.ctx, reply)

        async with contextlib.aclosing(stream_from(produce)) as events:
            async for event in events:
                yield event

    async def run_with_events(
        self,
        input: AgentInput,
        ctx: RuntimeContext | None,
        on_event: Callable[[ev.AgentEvent], None],
        *,
        output: Any = None,
        usage_limits: UsageLimits | None = None,
    ) -> Msg:
        """`stream_events` in push form: each event goes to `on_event` as it happens; returns the reply.

        `on_event` runs synchronously in the run's own task, with no queue or generator between the
        run and it (a server encodes each event as it comes; one task switch less per event). An
        exception it raises stops the run as a consumer that stops reading a `stream_events`
        iterator does: no more events reach it, the run is cancelled at its next step (checkpointed
        first) and the exception is raised here. Cancelling the awaiting task stops the run the same way.
        """
        task = asyncio.current_task()
        failed: list[BaseException] = []

        def deliver(event: ev.AgentEvent) -> None:
            if failed:
                return
            try:
                on_event(event)
            except Exception as exc:  # the consumer's failure, not the run's: stop the run at its next await
                failed.append(exc)
                if task is not None:
                    task.cancel()

        run = self._new_run(input, ctx, deliver, output, usage_limits)
        try:
            reply = await self._drive(run)
            if _scopes.SCOPES.get():
                await _scopes.announce(self, run.ctx, reply)
            if failed:  # the run ended before an await took the cancellation: take it here
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            if not failed or task is None or task.uncancel() > 0:
                raise  # cancelled from outside (too)
            raise failed[0] from None
        return reply

    def call_sync(
        self,
        input: AgentInput = None,
        ctx: RuntimeContext | None = None,
        *,
        output: Any = None,
        usage_limits: UsageLimits | None = None,
    ) -> Msg:
        """`call` for scripts without an event loop."""
        return run_sync(lambda: self.call(input, ctx, output=output, usage_limits=usage_limits), "agent")

    async def observe(self, msgs: AgentInput, ctx: RuntimeContext | None = None) -> None:
        """Add messages to the session's history without replying.

        Raises:
            SessionBusyError: at once, when called from inside a running call of this session (a
                tool of it): that call holds the session's lock, so waiting for it would never end.
        """
        messages = _as_input(msgs, None)
        if not messages:
            return
        ctx = ctx or RuntimeContext.current() or RuntimeContext()
        if self._own_running_call(ctx) is not None:
            raise SessionBusyError(
                f"observe() on session {ctx.key!r} from inside its own running call of agent {self.name!r}: "
                "the call holds the session's lock; return the text from the tool instead"
            )
        user_id, session_id = ctx.key
        store = self.state_store
        async with store.session_lock(user_id, session_id, timeout=self.lock_timeout, agent=self.state_key):
            run = Run(self, ctx, messages, store, new_id(), None)
            await run.load()
            _turns.observed(run, messages)  # inert, and never inside a turn that waits for results
            await run.checkpoint()

    def interrupt(
        self,
        ctx_or_user_id: RuntimeContext | str | None = None,
        session_id: str | None = None,
        msg: Msg | str | None = None,
    ) -> bool:
        """Interrupt the call running on one session; True if one was running.

        The model stream and running tools are cancelled, dangling tool calls get "interrupted"
        results, `msg` (if given) is added to the history, and the call returns a reply with
        `GenerateReason.INTERRUPTED`.
        """
        run = (self._running or {}).get(_key(ctx_or_user_id, session_id))
        if run is None:
            return False
        if isinstance(msg, str):
            msg = Msg.user(msg)
        run.interrupt_requested = True
        run.interrupt_message = msg
        run.close_questions("interrupted")  # the tools waiting on them get "cancel" at once
        if run.task is not None and not run.task.done():
            run.task.cancel(msg="agentrt-interrupt")
        return True

    def running_call(
        self, ctx_or_user_id: RuntimeContext | str | None = None, session_id: str | None = None
    ) -> Run | None:
        """The call of this agent running on one session in this process, or None when it is idle.

        Work that outlives a call (a background subagent) uses it to reach whichever call of the
        session is running now, e.g. to forward events into its stream while someone streams it.
        """
        return (self._running or {}).get(_key(ctx_or_user_id, session_id))

    def questions(
        self, ctx_or_user_id: RuntimeContext | str | None = None, session_id: str | None = None
    ) -> list[UserQuestion]:
        """The questions the call running on one session waits for its human to answer, oldest first.

        Tools ask them in the middle of a call (an MCP server's elicitation, a sampling approval);
        each was announced with an ``mcp_elicitation`` event carrying its id. Only the session's
        own questions are listed (its subagents' included): never another user's or session's.
        """
        run = (self._running or {}).get(_key(ctx_or_user_id, session_id))
        return run.open_questions() if run is not None else []

    def answer(
        self,
        ctx_or_user_id: RuntimeContext | str | None,
        question_id: str,
        answer: ElicitationAnswer | Mapping[str, Any],
        *,
        session_id: str | None = None,
    ) -> bool:
        """Answer an open question of the call running on one session; True if it was waiting.

        `answer` is an `ElicitationAnswer` or its JSON form ``{"action": "accept" | "decline" |
        "cancel", "content": {...}}``. It is validated against the question first: an accepted
        form must fit the requested schema, or `InvalidAnswerError` is raised and the question
        stays open. False when no such question waits on this session (unknown id, already
        settled, expired, another user's or session's, or the call runs in another process).
        Call it on the event loop running the call (as `interrupt`).
        """
        run = (self._running or {}).get(_key(ctx_or_user_id, session_id))
        if run is None or not isinstance(question_id, str):
            return False
        return run.question_board.answer(run, question_id, answer)

    def as_tool(
        self,
        name: str | None = None,
        description: str | None = None,
        input_schema: Mapping[str, Any] | type | None = None,
        *,
        timeout: float | None = None,
        session: Any = "isolated",
    ) -> Tool:
        """This agent as a tool for another agent (isolated session, forwarded events, approvals surfaced).

        `session`: ``"isolated"`` (one child session per parent session), ``"per_call"`` or a function
        of the parent's `RuntimeContext` returning the child's session id.
        """
        from agentrt.agent.as_tool import agent_as_tool

        return agent_as_tool(
            self, name=name, description=description, input_schema=input_schema, timeout=timeout, session=session
        )

    async def get_state(self, user_id: str | None = None, session_id: str | None = None) -> AgentState:
        """The stored state of a session (empty if it does not exist)."""
        run = Run(self, RuntimeContext(user_id, session_id), [], self.state_store, "", None)
        await run.load()
        return run.state

    # -- internals ------------------------------------------------------------------------------------
    def _own_running_call(self, ctx: RuntimeContext) -> Run | None:
        """The live call of this agent on `ctx`'s session that the current task runs inside, if any.

        Session changes made from a tool of that call (tool groups, plan mode) go to the call's
        working state: it holds the session lock, so waiting for the lock would never end. A call
        that has ended is not returned (its lock is free: the caller takes it and saves).

        Raises:
            SessionBusyError: at once, when the current task runs inside a live call of another
                agent holding this session's lock (one sharing this agent's `state_key` and store).
        """
        key = ctx.key
        run = current_run.get()
        while run is not None:
            if (run.user_id, run.session_id) == key and _is_live(run):
                if run.agent is self:
                    return run
                if run.agent_key == self.state_key and run.store is self.state_store:
                    raise SessionBusyError(
                        f"session {(self.state_key, *key)!r} is held by the running call of agent "
                        f"{run.agent.name!r} (same state_key) that this code runs inside; waiting for it "
                        f"would never end: change it through {run.agent.name!r}"
                    )
            run = run.parent
        return None

    def _new_run(
        self, input: AgentInput, ctx: RuntimeContext | None, emit: Any, output: Any, usage_limits: Any = None
    ) -> Run:
        if ctx is not None and not isinstance(ctx, RuntimeContext):
            raise UserError(f"ctx must be a RuntimeContext or None, not {type(ctx).__name__!r}")
        limits = check_limits(usage_limits)
        messages = _as_input(input, None)
        if ctx is None:
            ctx = _scopes.scope_ctx(self) if _scopes.SCOPES.get() else None
        run = Run(self, ctx or RuntimeContext(), messages, self.state_store, new_id(), emit, output)
        if limits is None:
            limits = self.usage_limits
        run.limits = None if limits is None or limits.empty else limits
        return run

    async def _drive(self, run: Run) -> Msg:
        """Run `run` under the session lock with its events (`call` does the same without events)."""
        async with run.store.session_lock(run.user_id, run.session_id, timeout=self.lock_timeout, agent=run.agent_key):
            self._enter(run)
            try:
                if run.streaming:
                    run.event(ev.RunStarted, input=run.input, user_id=run.user_id)
                msg = await self._execute(run)
                if run.streaming:
                    run.event(ev.RunFinished, msg=msg)
                return msg
            except Exception as exc:
                if run.streaming:
                    run.event(ev.RunError, error=str(exc), error_type=type(exc).__name__)
                raise
            finally:
                self._leave(run)

    def _enter(self, run: Run) -> None:
        """`run` becomes the session's running call and the current one (until `_leave`)."""
        running = self._running
        if running is None:
            running = self._running = {}
        running[_session_key(run.user_id, run.session_id)] = run
        run.task = asyncio.current_task()
        run._ctx_token = run.ctx._set()
        run._outer = current_run.get()
        current_run.set(run)  # restored by value in `_leave`: no Token kept alive for the whole call

    def _leave(self, run: Run) -> None:
        run.ended = True
        run.close_questions("ended", announce=False)  # a finished run leaves none behind
        current_run.set(run._outer)
        run._outer = None
        if run._ctx_token is not None:
            RuntimeContext._reset(run._ctx_token)
            run._ctx_token = None
        key = _session_key(run.user_id, run.session_id)
        running = self._running
        if running is not None and running.get(key) is run:
            del running[key]

    @abc.abstractmethod
    def _execute(self, run: Run) -> Awaitable[Msg]:
        """Do the work of one call (state loading and checkpoints included) and return the reply.

        An ``async def`` does; so does a plain method returning the awaitable that does the work.
        """

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


def _is_live(run: Run) -> bool:
    """Whether `run` is still the call its agent runs on its session (not one that has ended)."""
    running = getattr(run.agent, "_running", None)
    return isinstance(running, dict) and running.get(_session_key(run.user_id, run.session_id)) is run


def _session_key(user_id: str, session_id: str) -> str:
    """The key of a session in `AgentBase._running`: a string, unambiguous (the user id's length leads).

    Not a ``(user_id, session_id)`` tuple: a string is no object for the cyclic garbage collector,
    and a tuple would be one more per call in flight.
    """
    return f"{len(user_id)}:{user_id}{session_id}"


def _key(ctx_or_user_id: RuntimeContext | str | None, session_id: str | None) -> str:
    if isinstance(ctx_or_user_id, RuntimeContext):
        return _session_key(*ctx_or_user_id.key)
    return _session_key(*RuntimeContext(ctx_or_user_id, session_id).key)


def _as_input(value: Any, name: str | None) -> list[Msg]:
    try:
        return as_messages(value, name=name)
    except TypeError as exc:
        raise UserError(f"agent input: {exc}") from None
