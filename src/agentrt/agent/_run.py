"""`Run`: the per-call working state of an agent (one instance per call, never shared)."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agentrt import events as ev
from agentrt.context import RuntimeContext
from agentrt.errors import StateConflictError
from agentrt.message import Msg, TokenUsage
from agentrt.state.base import AgentState, AgentStateStore
from agentrt.state.cache import SessionCache

if TYPE_CHECKING:
    from agentrt.agent._questions import QuestionBoard
    from agentrt.agent.base import AgentBase
    from agentrt.agent.usage import UsageLimits
    from agentrt.tool.questions import UserQuestion
    from agentrt.tool.scope import EventSink

__all__ = ["Run", "current_run"]

logger = logging.getLogger("agentrt.state")

_UNKNOWN = object()

current_run: contextvars.ContextVar[Run | None] = contextvars.ContextVar("agentrt_run", default=None)
"""The call in progress in this task (tools and subagents read it, e.g. to forward events)."""


class Run:
    """One agent call in flight: context, loaded state, unsaved changes, event emission, interrupt flag.

    Middleware receives it as ``run``: read `ctx`, `state`, `step`, `reply_id`; call `emit` to add
    custom events to the stream.
    """

    __slots__ = (
        "_block_seq",
        "_ctx_token",
        "_dirty",
        "_lock",
        "_outer",
        "_questions",
        "_session_cache",
        "_state",
        "_unsaved",
        "agent",
        "agent_key",
        "cost_usd",
        "ctx",
        "emit_fn",
        "ended",
        "executor",
        "input",
        "interrupt_message",
        "interrupt_requested",
        "knowledge",
        "limits",
        "options",
        "output",
        "parent",
        "reply_id",
        "requests",
        "session_id",
        "step",
        "store",
        "task",
        "tool_calls",
        "unpriced",
        "usage",
        "user_id",
    )

    def __init__(
        self,
        agent: AgentBase,
        ctx: RuntimeContext,
        input: list[Msg],
        store: AgentStateStore,
        reply_id: str,
        emit: EventSink | None,
        output: Any = None,
    ) -> None:
        self.agent = agent
        self.parent: Run | None = current_run.get()
        """The call this one runs inside (a subagent's parent, a delegating participant), if any."""
        self.agent_key: str = getattr(agent, "state_key", None) or agent.name
        """The agent part of the session's address in the store (`AgentBase.state_key`)."""
        self.ctx = ctx
        self.user_id, self.session_id = ctx.key
        self.input = input
        self.store = store
        self.reply_id = reply_id
        self.emit_fn = emit
        self.output = output
        self.options: Any = None
        self.executor: Any = None
        self.knowledge: Any = None
        """The call's knowledge bookkeeping (`agentrt.agent._knowledge.TurnKnowledge`) when the agent has knowledge."""
        self._state: AgentState | None = None
        self.step = 0
        self.usage: TokenUsage | None = None
        """Tokens this call spent, its subagents' included."""
        self.requests = 0
        """Model calls made by this call (and subagents inside it)."""
        self.tool_calls = 0
        """Tool calls run by this call (and subagents inside it)."""
        self.cost_usd = 0.0
        """The summed cost of the model calls with a known price (see `unpriced`)."""
        self.unpriced = 0
        """Model calls whose cost is unknown (then the call's cost is unknown too)."""
        self.limits: UsageLimits | None = None
        """The call's usage limits (`agentrt.agent.usage`), if any."""
        self.ended = False
        """Whether the call has returned or raised (a subagent outliving it no longer counts against it)."""
        self.task: asyncio.Task[Any] | None = None
        self.interrupt_requested = False
        self.interrupt_message: Msg | None = None
        self._unsaved: list[Msg] | None = None  # a list only while messages wait for a checkpoint
        self._dirty: dict[str, Any] | None = None
        self._block_seq = 0
        self._lock: asyncio.Lock | None = None
        self._questions: QuestionBoard | None = None
        self._session_cache: SessionCache | object | None = _UNKNOWN
        self._ctx_token: contextvars.Token[RuntimeContext | None] | None = None
        """Set while the call runs (`AgentBase._enter`): restores the caller's `RuntimeContext`."""
        self._outer: Run | None = None
        """The call that was current before this one started (restored when it ends)."""

    # -- events -------------------------------------------------------------------------------------
    @property
    def streaming(self) -> bool:
        """Whether anyone consumes events (False for a plain `call`, which then skips building them)."""
        return self.emit_fn is not None

    def emit(self, event: ev.AgentEvent) -> None:
        """Add an event to the stream (no-op when nobody streams)."""
        if self.emit_fn is not None:
            self.emit_fn(event)

    def event(self, kind: type[ev.AgentEvent], **fields: Any) -> None:
        """Build and emit an event of `kind` stamped with this call's ids."""
        if self.emit_fn is not None:
            self.emit_fn(kind(reply_id=self.reply_id, session_id=self.session_id, source=self.agent.name, **fields))

    def new_block_id(self) -> str:
        """A block id unique within this call (and globally, as it embeds the reply id)."""
        self._block_seq += 1
        return f"{self.reply_id}-{self._block_seq}"

    def add_usage(self, usage: TokenUsage) -> None:
        """Count tokens spent in this call (also in the running calls it runs inside, for a subagent)."""
        run: Run | None = self
        while run is not None:
            run.usage = usage if run.usage is None else run.usage + usage
            run = run.parent
            if run is not None and run.ended:
                break

    # -- questions for the human --------------------------------------------------------------------
    @property
    def question_board(self) -> QuestionBoard:
        """The open questions of the outermost run this one belongs to (created on first use)."""
        root = self
        while root.parent is not None:
            root = root.parent
        board = root._questions
        if board is None:
            from agentrt.agent._questions import QuestionBoard

            board = root._questions = QuestionBoard()
        return board

    def open_questions(self) -> list[UserQuestion]:
        """The questions this call (or a subagent inside it) waits for its human to answer."""
        root = self
        while root.parent is not None:
            root = root.parent
        return root._questions.listed(self) if root._questions else []

    def close_questions(self, reason: str, *, announce: bool = True) -> int:
        """Cancel the open questions of this call (and of subagents inside it); returns how many."""
        root = self
        while root.parent is not None:
            root = root.parent
        return root._questions.close_all(self, reason, announce=announce) if root._questions else 0

    # -- state ----------------------------------------------------------------------------------------
    @property
    def lock(self) -> asyncio.Lock:
        """Serialises checkpoints made from concurrently finishing tool calls."""
        lock = self._lock
        if lock is None:
            lock = self._lock = asyncio.Lock()
        return lock

    @property
    def state(self) -> AgentState:
        """The session's state as this call sees it (loaded at the start of the call)."""
        state = self._state
        if state is None:
            state = self._state = AgentState(agent=self.agent_key, user_id=self.user_id, session_id=self.session_id)
        return state

    @state.setter
    def state(self, state: AgentState) -> None:
        self._state = state

    @property
    def loaded(self) -> bool:
        """Whether the session's state was read from the store (or set) for this call."""
        return self._state is not None

    def add_messages(self, *msgs: Msg) -> None:
        """Append to the transcript; persisted at the next `checkpoint`."""
        self.state.messages.extend(msgs)
        if self._unsaved is None:
            self._unsaved = list(msgs)
        else:
            self._unsaved.extend(msgs)

    def set_field(self, name: str, value: Any) -> None:
        """Change a non-message state field; persisted at the next `checkpoint`."""
        setattr(self.state, name, value)
        if self._dirty is None:
            self._dirty = {}
        self._dirty[name] = value

    @property
    def has_unsaved(self) -> bool:
        """Whether changes wait for a checkpoint."""
        return bool(self._unsaved or self._dirty)

    async def load(self, *, context: bool = False) -> None:
        """Load the session's state from the store (a new session starts empty).

        `context`: only what a call's prompt needs (`BaseStateStore.load_context`: the messages a
        summary covers stay unread placeholders); for a call's own working copy, never for a
        state handed to the application.

        A store holding sessions written before sessions belonged to an agent is read as a
        fallback: the server's ``"<agent>:<session>"`` row, then the ``(user, session)`` row if no
        other agent replied in it; what is found moves under this agent's own address.
        """
        store = self.store
        cache = self._cache()
        if cache is not None:  # the cached transcript plus what was appended since: O(new messages)
            state = await cache.load(store, self.user_id, self.session_id, agent=self.agent_key, context=context)
        else:
            state = await store.load(self.user_id, self.session_id, agent=self.agent_key)
        if state is None and getattr(store, "has_legacy_sessions", False):
            state = await self._adopt_legacy()
        self._state = state

    def _cache(self) -> SessionCache | None:
        """The store's session cache, if it has one (every `BaseStateStore`, and wrappers that forward it)."""
        cache = self._session_cache
        if cache is _UNKNOWN:  # looked up once per call, not at every checkpoint
            found = getattr(self.store, "session_cache", None)
            usable = isinstance(found, SessionCache) and callable(getattr(self.store, "load_view", None))
            cache = self._session_cache = found if usable else None
        return cache  # type: ignore[return-value]

    async def _adopt_legacy(self) -> AgentState | None:
        """This agent's legacy session, moved (not copied) under its own address; None if it has none.

        The server's ``"<state_key>:<id>"`` is this agent's; a plain ``"<id>"`` only when every named
        reply in it is this agent's (one several agents shared is left for `migrate_legacy`). Moving
        means a deleted session stays deleted, and no other agent inherits it or its pending calls.
        """
        store = self.store
        owners = {self.agent_key, self.agent.name}
        for legacy_id, prefixed in ((f"{self.agent_key}:{self.session_id}", True), (self.session_id, False)):
            legacy = await store.load(self.user_id, legacy_id, agent="")
            if legacy is None:
                continue
            if not prefixed and not _owned(legacy, owners, self.agent_key):
                continue
            await _move_legacy(store, legacy, legacy_id, self.agent_key, self.session_id)
            state = await store.load(self.user_id, self.session_id, agent=self.agent_key)
            if state is not None:
                return state
        return None

    async def checkpoint(self, *, merge: bool = True) -> None:
        """Persist unsaved messages and fields (O(new messages) for incremental stores).

        On a concurrent write, ``conflict_policy="merge"`` appends after the other writer; with
        `merge` False the `StateConflictError` is raised instead (for writes that must be decided on
        what is stored, such as spending an approval).
        """
        if not self._unsaved and not self._dirty:
            return
        messages: Sequence[Msg] = self._unsaved or ()
        fields = self._dirty
        base = self.state.revision
        try:
            revision = await self.store.append(
                self.user_id,
                self.session_id,
                messages,
                fields=fields,
                expected_revision=base,
                agent=self.agent_key,
            )
        except StateConflictError:
            if not merge or getattr(self.agent, "conflict_policy", "merge") != "merge":
                raise
            revision = await self._merge(messages, fields)
        else:
            cache = self._cache()
            if cache is not None:
                cache.appended(self.agent_key, self.user_id, self.session_id, messages, base=base, revision=revision)
        self.state.revision = revision
        self._unsaved = None
        self._dirty = None

    async def _merge(self, messages: Sequence[Msg], fields: dict[str, Any] | None) -> int:
        # Another writer got in first: re-read, then append our messages after theirs.
        for _ in range(5):
            cache = self._cache()
            if cache is not None:
                latest = await cache.load(self.store, self.user_id, self.session_id, agent=self.agent_key)
            else:
                latest = await self.store.load(self.user_id, self.session_id, agent=self.agent_key)
            base = 0 if latest is None else latest.revision
            try:
                revision = await self.store.append(
                    self.user_id, self.session_id, messages, fields=fields, expected_revision=base, agent=self.agent_key
                )
            except StateConflictError:
                continue
            if cache is not None:
                cache.appended(self.agent_key, self.user_id, self.session_id, messages, base=base, revision=revision)
            if latest is not None:
                latest.messages.extend(messages)
                for name, value in (fields or {}).items():
                    setattr(latest, name, value)
                self.state = latest
            return revision
        raise StateConflictError(
            f"session {self.session_id!r} of user {self.user_id!r} kept changing under this call; gave up after 5 tries"
        )

    def __repr__(self) -> str:
        return f"Run(agent={self.agent.name!r}, user={self.user_id!r}, session={self.session_id!r}, step={self.step})"


def _owned(legacy: AgentState, owners: set[str], agent_key: str) -> bool:
    """Whether no agent but one of `owners` replied in `legacy` (so it may be theirs alone)."""
    others = legacy.reply_names() - owners
    if others:
        logger.warning(
            "session %r of user %r, written before sessions belonged to an agent, holds replies of %s: agent %r "
            "does not read it; move it with `agentrt sessions migrate --agent NAME --all-unprefixed`",
            legacy.session_id,
            legacy.user_id,
            ", ".join(repr(n) for n in sorted(legacy.reply_names())),
            agent_key,
        )
    return not others


async def _move_legacy(store: AgentStateStore, legacy: AgentState, legacy_id: str, agent: str, target: str) -> None:
    """Move a legacy session to ``(agent, user, target)``: natively when the store can, else copy and delete.

    Whatever the outcome (moved, or moved or deleted meanwhile by another process), the caller
    reads what is at the new address.
    """
    mover = getattr(store, "_move_legacy", None)
    if callable(mover):
        await mover(legacy.user_id, legacy_id, agent, target)
        return
    try:
        await store.save(replace(legacy, agent=agent, session_id=target), expected_revision=0)
    except StateConflictError:  # adopted meanwhile by another process
        return
    await store.delete(legacy.user_id, legacy_id, agent="")
