"""The agent surface every composite shares, and the plumbing between members.

A composite is called like an agent (`call`, `stream_events`, `call_sync`, `observe`,
`interrupt`, `as_tool`) and runs its members in sessions derived from the caller's
(``<session>/<member name>``), so each member keeps its own history. Replies travel from one
member to the next as *hand-offs*: `user`-role copies keeping the speaker's `name`, with only the
content another model can read (text, media, structured output); tool calls and thinking stay in
the speaker's own history.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from agentrt import events as ev
from agentrt._sync import run_sync, stream_from
from agentrt.agent._scopes import SCOPES, announce, scope_ctx
from agentrt.agent.base import AgentBase, AgentInput
from agentrt.agent.usage import UsageLimits, budget, check_limits
from agentrt.context import RuntimeContext
from agentrt.errors import UserError
from agentrt.message import (
    META_CONFIRM_RESULTS,
    META_GENERATE_REASON,
    META_STRUCTURED,
    AudioBlock,
    ContentBlock,
    GenerateReason,
    ImageBlock,
    Msg,
    TextBlock,
    TokenUsage,
    ToolResultBlock,
    VideoBlock,
    as_messages,
    new_id,
)
from agentrt.state.pending import META_PENDING

if TYPE_CHECKING:
    from agentrt.agent.as_tool import SessionStrategy
    from agentrt.tool.base import Tool
    from agentrt.tool.scope import EventSink

__all__ = [
    "AgentInput",
    "AgentLike",
    "Composite",
    "combine",
    "handoff",
    "is_paused",
    "is_stopped",
]

Result = Msg | list[Msg]
R = TypeVar("R")

META_REPLIES = "replies"
"""Metadata key of a combined fan-out reply: the member replies, in member order."""
_PAUSE_REASONS = (GenerateReason.AWAITING_CONFIRMATION, GenerateReason.AWAITING_EXTERNAL_EXECUTION)
_STOP_REASONS = (*_PAUSE_REASONS, GenerateReason.INTERRUPTED)
_HANDOFF_BLOCKS = (TextBlock, ImageBlock, AudioBlock, VideoBlock)
_END: Any = object()


class AgentLike(Protocol):
    """What a composite member needs: an agent (`ReActAgent`, `UserAgent`, ...) or another composite."""

    @property
    def name(self) -> str: ...

    def call(self, input: Any = ..., ctx: RuntimeContext | None = ...) -> Awaitable[Any]: ...

    def stream_events(self, input: Any = ..., ctx: RuntimeContext | None = ...) -> AsyncIterator[ev.AgentEvent]: ...


# -- replies -------------------------------------------------------------------------------------------------
def is_paused(reply: Msg) -> bool:
    """Whether the reply waits for the caller (approval or an external tool result)."""
    return reply.generate_reason in _PAUSE_REASONS


def is_stopped(reply: Msg) -> bool:
    """Whether a pipeline must stop at this reply: paused, or interrupted."""
    return reply.generate_reason in _STOP_REASONS


def handoff(reply: Msg, *, label: bool = False) -> Msg:
    """The message the next agent receives for `reply`.

    An assistant reply becomes a `user` message with the speaker's `name`, its text and media, and
    its structured output (metadata ``structured_output``); tool calls, tool results and thinking
    are dropped (they belong to the speaker's history and would confuse another model). With
    ``label=True`` the text starts with ``"<name>: "`` so a reader of several speakers (a gather
    step, a `MsgHub` participant) knows who said what even when the provider drops names. Other
    roles pass unchanged.
    """
    if reply.role != "assistant":
        return reply
    content: list[ContentBlock] = [b for b in reply.content if isinstance(b, _HANDOFF_BLOCKS)]
    if label and reply.name:
        first = next((i for i, b in enumerate(content) if isinstance(b, TextBlock)), None)
        if first is None:
            content.insert(0, TextBlock(text=f"{reply.name}:"))
        else:
            block = content[first]
            assert isinstance(block, TextBlock)
            content[first] = TextBlock(text=f"{reply.name}: {block.text}")
    metadata: dict[str, Any] = {"reply_id": reply.id}
    if META_STRUCTURED in reply.metadata:
        metadata[META_STRUCTURED] = reply.metadata[META_STRUCTURED]
    return Msg(role="user", content=content, name=reply.name, metadata=metadata)


def handoff_all(result: Result) -> list[Msg]:
    """Hand-offs for one reply (unlabelled) or several (labelled with their speakers)."""
    if isinstance(result, Msg):
        return [handoff(result)]
    return [handoff(m, label=True) for m in result]


def total_usage(replies: Iterable[Msg]) -> TokenUsage | None:
    """The tokens of several replies added up (None if none reports usage)."""
    usage: TokenUsage | None = None
    for m in replies:
        if m.usage is not None:
            usage = m.usage if usage is None else usage + m.usage
    return usage


def combine(replies: Sequence[Msg], name: str) -> Msg:
    """One message standing for several replies (a fan-out's result as a single `Msg`).

    Its text holds one ``"<speaker>: <text>"`` block per reply; ``metadata["replies"]`` holds the
    replies themselves. If a reply is paused, the combined message is paused too and carries the
    pending calls of all paused replies, so a parent (e.g. agent-as-tool) can surface them.
    """
    content: list[ContentBlock] = [TextBlock(text=f"{m.name}: {m.text}" if m.name else m.text) for m in replies]
    metadata: dict[str, Any] = {META_REPLIES: list(replies)}
    stopped = [m for m in replies if is_stopped(m)]
    if stopped:
        paused = [m for m in stopped if is_paused(m)]
        reason = paused[0].generate_reason if paused else GenerateReason.INTERRUPTED
        metadata[META_GENERATE_REASON] = reason.value
        pending = [p for m in paused for p in m.metadata.get(META_PENDING) or ()]
        if pending:
            metadata[META_PENDING] = pending
    return Msg(role="assistant", content=content, name=name, metadata=metadata, usage=total_usage(replies))


def as_reply(result: Result, name: str) -> Msg:
    """`result` as one message (several replies are combined)."""
    return result if isinstance(result, Msg) else combine(result, name)


def is_resume(messages: Sequence[Msg]) -> bool:
    """Whether an input answers a pause (confirmations, or external tool results)."""
    for m in messages:
        if META_CONFIRM_RESULTS in m.metadata:
            return True
        if m.role == "user" and any(isinstance(b, ToolResultBlock) for b in m.content):
            return True
    return False


def to_input(value: Any, what: str) -> list[Msg]:
    """Normalise an agent input, or raise `UserError` naming `what` received it."""
    try:
        return as_messages(value)
    except TypeError as exc:
        raise UserError(f"{what}: {exc}") from None


@contextlib.asynccontextmanager
async def closing(events: AsyncIterator[ev.AgentEvent]) -> AsyncIterator[AsyncIterator[ev.AgentEvent]]:
    """Close an event stream on exit (a cancelled consumer then stops the producer now, not at collection)."""
    try:
        yield events
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()


async def maybe_await(value: Any) -> Any:
    """`value`, awaited if it is awaitable (user callbacks may be sync or async)."""
    if inspect.isawaitable(value):
        return await value
    return value


def is_agent(obj: Any) -> bool:
    """Whether `obj` has the agent surface (rather than being a plain function)."""
    return isinstance(obj, Composite) or (
        isinstance(getattr(obj, "name", None), str) and callable(getattr(obj, "stream_events", None))
    )


def check_member(obj: Any, what: str) -> AgentLike:
    """`obj` if it can be a member, else a `UserError` naming `what`."""
    if not is_agent(obj) or not callable(getattr(obj, "call", None)):
        raise UserError(f"{what} must be an agent or a pipeline composite, not {type(obj).__name__!r}")
    result: AgentLike = obj
    return result


# -- hubs --------------------------------------------------------------------------------------------------
ListenerKey = tuple[int, tuple[str, str]]
"""Who observes a message where: ``(id(agent), ctx.key)``."""


def nodes(agent: AgentLike, ctx: RuntimeContext) -> Iterator[tuple[AgentLike, RuntimeContext]]:
    """`agent` with `ctx`, then (for a composite) every member, recursively, with the context it runs in."""
    yield agent, ctx
    if isinstance(agent, Composite):
        for member in agent.members:
            yield from nodes(member, agent.member_ctx(member, ctx))


def parts_of(reply: Msg) -> list[Msg]:
    """The replies a message stands for: those a fan-out combined (recursively), else the message itself."""
    replies = reply.metadata.get(META_REPLIES)
    if isinstance(replies, list) and replies and all(isinstance(m, Msg) for m in replies):
        return [p for m in replies for p in parts_of(m)]
    return [reply]


def announces_itself(obj: Any) -> bool:
    """Whether `obj` shares its own replies with the hubs it takes part in (agents and composites do).

    Other agent-like objects are announced by whoever runs them (a composite, `MsgHub.call`).
    """
    return isinstance(obj, (AgentBase, Composite))


# -- one composite call -------------------------------------------------------------------------------------
class CallState:
    """One composite call in flight: where events go, tokens spent, the interrupt flag."""

    __slots__ = ("emit", "interrupted", "reply_id", "session_id", "source", "usage")

    def __init__(self, emit: EventSink | None, source: str = "", session_id: str = "") -> None:
        self.emit = emit
        self.reply_id = new_id()
        self.source = source
        self.session_id = session_id
        self.usage: TokenUsage | None = None
        self.interrupted = False

    def add_usage(self, result: Result) -> None:
        """Count the tokens of a member's result."""
        usage = result.usage if isinstance(result, Msg) else total_usage(result)
        if usage is not None:
            self.usage = usage if self.usage is None else self.usage + usage

    def event(self, kind: type[ev.AgentEvent], **fields: Any) -> None:
        """Emit an event of the composite itself (no-op when nobody streams)."""
        if self.emit is not None:
            self.emit(kind(reply_id=self.reply_id, session_id=self.session_id, source=self.source, **fields))


async def invoke(
    member: AgentLike,
    messages: list[Msg],
    ctx: RuntimeContext,
    state: CallState,
    output: Any = None,
) -> Result:
    """Run one member (streaming into `state.emit` when someone listens) and return its result.

    The member's usage is counted. Agents and composites share their replies with the hubs they take
    part in themselves; the reply of any other agent-like member is announced here.
    """
    kwargs: dict[str, Any] = {"output": output} if output is not None else {}
    result: Any
    if isinstance(member, Composite):
        result = await member._execute(messages, ctx, state.emit, output)
    elif state.emit is None:
        result = await member.call(messages, ctx, **kwargs)
    else:
        last: ev.AgentEvent | None = None
        # aclosing: a cancelled composite closes the member's stream now, which stops the member.
        async with closing(member.stream_events(messages, ctx, **kwargs)) as events:
            async for event in events:
                state.emit(event)
                last = event
        if not isinstance(last, ev.RunFinished):
            raise UserError(f"{member.name!r}: its event stream ended without a run_finished event")
        result = last.msg
    if not (isinstance(result, Msg) or (isinstance(result, list) and all(isinstance(m, Msg) for m in result))):
        raise UserError(f"{member.name!r} returned {type(result).__name__!r}; members must return a Msg")
    state.add_usage(result)
    if SCOPES.get() and not announces_itself(member):
        await announce(member, ctx, as_reply(result, member.name))
    return result


def interrupted_reply(name: str, state: CallState) -> Msg:
    """The reply of a composite interrupted between two members (the members got the interrupt message)."""
    return Msg(
        role="assistant",
        content=[],
        name=name,
        metadata={META_GENERATE_REASON: GenerateReason.INTERRUPTED.value},
        usage=state.usage,
    )


# -- the base class --------------------------------------------------------------------------------------------
class Composite(abc.ABC, Generic[R]):
    """Agents combined into one: called, streamed, nested and used as a tool like an agent.

    Subclasses implement `_run`. A composite holds no conversation state: members keep theirs in
    their own sessions, derived from the caller's (see `member_ctx`), so one composite serves many
    sessions at once.
    """

    def __init__(self, name: str, description: str = "", *, shared_session: bool = False) -> None:
        if not isinstance(name, str) or not name:
            raise UserError(f"a composite's name must be a non-empty string, not {name!r}")
        self.name = name
        self.description = description
        self.shared_session = shared_session
        self._running: dict[tuple[str, str], list[CallState]] = {}

    # -- the agent surface ------------------------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def members(self) -> tuple[AgentLike, ...]:
        """The agents this composite runs (each once, in their usual order)."""

    async def call(
        self,
        input: AgentInput = None,
        ctx: RuntimeContext | None = None,
        *,
        output: Any = None,
        usage_limits: UsageLimits | None = None,
    ) -> R:
        """Run the composite on `input` in the session of `ctx` and return its result.

        `output` (a structured-output spec, as for `ReActAgent.call`) goes to the member that
        produces the result. Without `ctx`, inside a `MsgHub` block the composite takes part in, it
        runs in the hub's context; called in a hub's context, its reply is heard by the other
        participants before this returns.

        `usage_limits` (`agentrt.agent.usage.UsageLimits`) is one budget for the whole call: every
        member's model calls, tokens, cost and tool calls (their subagents' and nested composites'
        included) count against it, on top of the members' own limits. The member that would go
        past it stops after checkpointing its work, and `UsageLimitExceeded` is raised from here
        (``agent`` is the composite's name); calling again continues the sessions.
        """
        ctx = self._ctx(ctx)
        limits = check_limits(usage_limits)
        return await self._execute(to_input(input, f"{self.name} input"), ctx, None, output, limits)

    async def stream_events(
        self,
        input: AgentInput = None,
        ctx: RuntimeContext | None = None,
        *,
        output: Any = None,
        usage_limits: UsageLimits | None = None,
    ) -> AsyncIterator[ev.AgentEvent]:
        """Run the composite and yield the members' events (each with its own `source`) as they happen.

        The stream starts with a `RunStarted` and ends with a `RunFinished` whose `source` is the
        composite's name and whose `msg` is its result (several replies combined into one `Msg`,
        with the replies in ``metadata["replies"]``). Closing the iterator early stops the run.
        `usage_limits`: as for `call`.
        """
        ctx = self._ctx(ctx)
        limits = check_limits(usage_limits)
        messages = to_input(input, f"{self.name} input")

        async def produce(emit: Any) -> None:
            await self._execute(messages, ctx, emit, output, limits)

        async with contextlib.aclosing(stream_from(produce)) as events:
            async for event in events:
                yield event

    def call_sync(
        self,
        input: AgentInput = None,
        ctx: RuntimeContext | None = None,
        *,
        output: Any = None,
        usage_limits: UsageLimits | None = None,
    ) -> R:
        """`call` for scripts without an event loop."""
        return run_sync(lambda: self.call(input, ctx, output=output, usage_limits=usage_limits), "pipeline")

    async def observe(self, msgs: AgentInput, ctx: RuntimeContext | None = None) -> None:
        """Add messages to the history of every member (each in its own session) without replying."""
        ctx = ctx or RuntimeContext.current() or RuntimeContext()
        messages = to_input(msgs, f"{self.name}.observe")
        if not messages:
            return
        seen: set[int] = set()
        targets: list[Awaitable[Any]] = []
        for member in self.members:
            observe = getattr(member, "observe", None)
            if observe is not None and id(member) not in seen:
                seen.add(id(member))
                targets.append(observe(messages, self.member_ctx(member, ctx)))
        await asyncio.gather(*targets)

    def interrupt(
        self,
        ctx_or_user_id: RuntimeContext | str | None = None,
        session_id: str | None = None,
        msg: Msg | str | None = None,
    ) -> bool:
        """Interrupt the call running on one session; True if one was running.

        The running members are interrupted (each returns an interrupted reply, which stops the
        composite), and a composite between two members stops before the next one.
        """
        ctx = (
            ctx_or_user_id if isinstance(ctx_or_user_id, RuntimeContext) else RuntimeContext(ctx_or_user_id, session_id)
        )
        if isinstance(msg, str):
            msg = Msg.user(msg)
        found = False
        for state in self._running.get(ctx.key, ()):
            state.interrupted = True
            found = True
        seen: set[int] = set()
        for member in self.members:
            interrupt = getattr(member, "interrupt", None)
            if interrupt is not None and id(member) not in seen:
                seen.add(id(member))
                found = bool(interrupt(self.member_ctx(member, ctx), msg=msg)) or found
        return found

    def as_tool(
        self,
        name: str | None = None,
        description: str | None = None,
        input_schema: Mapping[str, Any] | type | None = None,
        *,
        timeout: float | None = None,
        session: SessionStrategy = "isolated",
    ) -> Tool:
        """This composite as a tool of another agent (see `agentrt.agent.as_tool.agent_as_tool`)."""
        from agentrt.agent.as_tool import agent_as_tool

        return agent_as_tool(
            self, name=name, description=description, input_schema=input_schema, timeout=timeout, session=session
        )

    def member_ctx(self, member: AgentLike, ctx: RuntimeContext) -> RuntimeContext:
        """The context `member` runs in: the caller's user, session ``<session>/<member name>``."""
        if self.shared_session:
            return ctx
        return ctx.child(session_id=f"{ctx.key[1]}/{member.name}")

    # -- internals ----------------------------------------------------------------------------------------------
    def _ctx(self, ctx: RuntimeContext | None) -> RuntimeContext:
        """The context of a call: `ctx`, else the innermost hub this composite takes part in, else the default."""
        if ctx is None:
            return (scope_ctx(self) if SCOPES.get() else None) or RuntimeContext()
        if not isinstance(ctx, RuntimeContext):
            raise UserError(f"ctx must be a RuntimeContext or None, not {type(ctx).__name__!r}")
        return ctx

    async def _execute(
        self,
        messages: list[Msg],
        ctx: RuntimeContext,
        emit: EventSink | None,
        output: Any,
        usage_limits: UsageLimits | None = None,
    ) -> R:
        """Run one call; `usage_limits` opens a budget for it (a nested call shares the enclosing one)."""
        key = ctx.key
        state = CallState(emit, self.name, key[1])
        running = self._running.setdefault(key, [])
        running.append(state)
        try:
            with ctx.bind():
                state.event(ev.RunStarted, input=messages, user_id=key[0])
                try:
                    with budget(self.name, usage_limits):
                        result = await self._run(messages, ctx, state, output)
                except Exception as exc:
                    state.event(ev.RunError, error=str(exc), error_type=type(exc).__name__)
                    raise
                reply = self._as_msg(result)
                state.event(ev.RunFinished, msg=reply)
            if SCOPES.get():
                await announce(self, ctx, reply)
            return result
        finally:
            running.remove(state)
            if not running and self._running.get(key) is running:
                del self._running[key]

    def _as_msg(self, result: R) -> Msg:
        if isinstance(result, Msg):
            return result
        if isinstance(result, list):
            return combine(result, self.name)
        raise TypeError(f"unexpected composite result {type(result).__name__!r}")  # pragma: no cover

    @abc.abstractmethod
    async def _run(self, messages: list[Msg], ctx: RuntimeContext, state: CallState, output: Any) -> R:
        """Do the work of one call and return the result (with the call's total usage)."""

    async def _paused(self, ctx: RuntimeContext) -> bool:
        """Whether a member waits for answers in the sessions this composite uses under `ctx`."""
        for member in self.members:
            if await member_paused(member, self.member_ctx(member, ctx)):
                return True
        return False

    def __repr__(self) -> str:
        names = ", ".join(m.name for m in self.members)
        return f"{type(self).__name__}({self.name!r}, [{names}])"


async def member_paused(member: AgentLike, ctx: RuntimeContext) -> bool:
    """Whether `member` waits for answers (approvals, external results) in the session of `ctx`."""
    if isinstance(member, Composite):
        return await member._paused(ctx)
    get_state = getattr(member, "get_state", None)
    if get_state is None:
        return False
    state = await get_state(*ctx.key)
    return getattr(state, "pending", None) is not None
