"""`MsgHub`: a conversation among agents in one context, each reply heard by the other participants."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any

from agentrt import events as ev
from agentrt.agent._run import current_run
from agentrt.agent._scopes import SCOPES, announce
from agentrt.context import RuntimeContext
from agentrt.errors import UserError
from agentrt.message import Msg

from .base import (
    AgentInput,
    AgentLike,
    Composite,
    ListenerKey,
    announces_itself,
    as_reply,
    check_member,
    closing,
    handoff,
    is_stopped,
    nodes,
    parts_of,
    to_input,
)

__all__ = ["MsgHub", "heard"]

Relay = Callable[[Msg], "Msg | None"]
_REMEMBERED = 4096  # reply ids a hub remembers the listeners of (enough to spot a reply shared twice)


def _default_relay(msg: Msg) -> Msg:
    return handoff(msg, label=True)


def _key(agent: Any, ctx: RuntimeContext) -> ListenerKey:
    return (id(agent), ctx.key)


def _busy() -> set[ListenerKey]:
    """The agents (and sessions) whose calls this task runs inside: they hold their session locks.

    The innermost call, and its callers when runs know their parent (``Run.parent``).
    """
    keys: set[ListenerKey] = set()
    run: Any = current_run.get()
    while run is not None:
        keys.add(_key(run.agent, run.ctx))
        run = getattr(run, "parent", None)
    return keys


def _runs_here(agent: Any, ctx: RuntimeContext) -> bool:
    """Whether `agent` has a call on `ctx`'s session running in this very task (so one we run inside).

    Catches the callers `_busy` cannot see, e.g. a participant whose tool called a participant
    whose tool called the speaker.
    """
    running = getattr(agent, "_running", None)  # AgentBase's calls in flight, by session
    run = running.get(ctx.key) if isinstance(running, dict) else None
    return run is not None and getattr(run, "task", None) is asyncio.current_task()


class MsgHub:
    """A conversation in one context: every participant's reply is observed by the others.

    ::

        async with MsgHub([alice, bob, carol], announcement="Debate: tabs or spaces?", ctx=ctx) as hub:
            await alice.call("Open.")         # runs in the hub's ctx; bob and carol hear the reply
            await hub.round()                 # each speaks once, in order; all hear everyone
            hub.add(dave); hub.remove(bob)
            await hub.broadcast(Msg.user("Time is up.", name="moderator"))

    Inside the block every participant speaks and listens in the hub's context `ctx` (each agent
    keeps its own state for that session). A participant's call in that context, ``a.call(x)``
    without ctx included, is heard by every other current participant before it returns: through
    their ``observe``, as a ``user`` message named after the speaker and labelled
    ``"<speaker>: ..."`` (tool calls and thinking stay private; change this with `relay`). A call in
    another context, and any call after the block, is private to the speaker.

    Hubs nest: a reply is heard by the participants of every open hub that contains the speaker and
    has the call's context, once each. A composite participant (`sequential`, `fanout`, ...)
    listens through its members and speaks when called in the hub's ctx (its reply is shared).
    Its members that run in the hub's ctx too (``shared_session=True``) take part in their own
    right: their replies are shared, and they hear one another; a member the hub already gave a
    reply is not handed it again by the composite, and a composite's reply that is a member's is
    not shared twice. Members in sessions of their own are the composite's business. A
    participant whose own call is running in the task that produced a reply (it delegated to
    another participant) does not observe it: it would wait for itself, and it gets the reply as
    its tool result anyway.

    Args:
        participants: The agents (or composites) taking part; names must be unique.
        announcement: Observed by every participant on entering (a str, a Msg or a list).
        ctx: The hub's context (user and session); default: the anonymous default session.
        relay: How a message looks to the others: a function of the message returning the
            message to deliver, or None to deliver nothing.
        name: The hub's name.
    """

    def __init__(
        self,
        participants: Iterable[AgentLike],
        announcement: AgentInput = None,
        ctx: RuntimeContext | None = None,
        *,
        relay: Relay | None = None,
        name: str = "hub",
    ) -> None:
        if ctx is not None and not isinstance(ctx, RuntimeContext):
            raise UserError(f"ctx must be a RuntimeContext or None, not {type(ctx).__name__!r}")
        self.name = name
        self.ctx = ctx if ctx is not None else RuntimeContext()
        self.announcement = to_input(announcement, "MsgHub announcement")
        self.relay: Relay = relay or _default_relay
        self._participants: list[AgentLike] = []
        self._guests: list[AgentLike] = []  # outsiders speaking through `call` / `stream_events`
        self._open = False
        self._heard: dict[str, set[ListenerKey]] = {}  # reply id -> who has it (insertion-ordered, capped)
        self.add(*participants)

    # -- membership ------------------------------------------------------------------------------------------
    @property
    def participants(self) -> tuple[AgentLike, ...]:
        """The current participants, in speaking order."""
        return tuple(self._participants)

    def add(self, *agents: AgentLike) -> None:
        """Add participants: they hear what is said from now on, and are heard."""
        for agent in agents:
            check_member(agent, "MsgHub participant")
            if not callable(getattr(agent, "observe", None)):
                raise UserError(f"MsgHub participant {agent.name!r} has no observe() method")
            if any(p is agent for p in self._participants):
                continue
            if any(p.name == agent.name for p in self._participants):
                raise UserError(f"MsgHub already has a participant named {agent.name!r}; names must be unique")
            self._participants.append(agent)

    def remove(self, *agents: AgentLike | str) -> None:
        """Remove participants (agents or names): they stop hearing and being heard; unknown ones are ignored."""
        for agent in agents:
            self._participants = [
                p for p in self._participants if not (p is agent or (isinstance(agent, str) and p.name == agent))
            ]

    def ctx_for(self, agent: AgentLike) -> RuntimeContext:
        """The context `agent` speaks and listens in: the hub's `ctx`, for every participant.

        Kept for compatibility (participants once had sessions of their own, ``<session>/<name>``).
        """
        return self.ctx

    def includes(self, agent: Any) -> bool:
        """Whether the hub is open and `agent` speaks in it: a participant, or a member of one running in `ctx`."""
        if not self._open:
            self._forget()  # still listed in a context it was entered in but not left in (another task left it)
            return False
        return self._owner(agent) is not None

    def _owner(self, agent: Any) -> AgentLike | None:
        """The participant (or speaking outsider) that is `agent` or runs it in the hub's context."""
        key = self.ctx.key
        for speaker in (*self._participants, *self._guests):
            for node, ctx in nodes(speaker, self.ctx):
                if node is agent and ctx.key == key:
                    return speaker
        return None

    def _listeners(self) -> Iterator[tuple[Any, RuntimeContext]]:
        """The agents that observe for the current participants (a composite's members), each once."""
        seen: set[ListenerKey] = set()
        for participant in self._participants:
            for node, ctx in nodes(participant, self.ctx):
                key = _key(node, ctx)
                if isinstance(node, Composite) or key in seen or not callable(getattr(node, "observe", None)):
                    continue
                seen.add(key)
                yield node, ctx

    def _resolve(self, agent: AgentLike | str) -> AgentLike:
        if isinstance(agent, str):
            for p in self._participants:
                if p.name == agent:
                    return p
            raise UserError(f"MsgHub has no participant named {agent!r}")
        return check_member(agent, "MsgHub speaker")

    # -- the block -----------------------------------------------------------------------------------------------
    async def __aenter__(self) -> MsgHub:
        if self._open:
            raise UserError(f"MsgHub {self.name!r} is already entered")
        self._open = True
        SCOPES.set((*(s for s in SCOPES.get() if s is not self), self))
        try:
            if self.announcement:
                await self.broadcast(self.announcement)
        except BaseException:
            self._close()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._close()

    def _close(self) -> None:
        # Closed, the hub shares nothing even where it is still in SCOPES (a context it was entered
        # in but not left in, e.g. the block ended in another task); `includes` drops it there.
        self._open = False
        self._heard.clear()
        self._forget()

    def _forget(self) -> None:
        """Drop the hub from `SCOPES` in this context."""
        scopes = SCOPES.get()
        if any(s is self for s in scopes):
            SCOPES.set(tuple(s for s in scopes if s is not self))

    def _check_open(self, what: str) -> None:
        if not self._open:
            raise UserError(f"MsgHub.{what}() outside its block: use it inside `async with MsgHub(...) as hub:`")

    @contextlib.contextmanager
    def _turn(self, speaker: AgentLike) -> Iterator[None]:
        """While `speaker` speaks through the hub: heard even if an outsider, the hub visible in this context."""
        guest = self._owner(speaker) is None
        if guest:
            self._guests.append(speaker)
        scopes = SCOPES.get()
        token = None if any(s is self for s in scopes) else SCOPES.set((*scopes, self))
        try:
            yield
        finally:
            if token is not None:
                with contextlib.suppress(ValueError):  # a stream closed in another context
                    SCOPES.reset(token)
            if guest:
                index = next(i for i, g in enumerate(self._guests) if g is speaker)
                del self._guests[index]

    # -- the conversation --------------------------------------------------------------------------------------
    async def broadcast(self, msgs: AgentInput) -> None:
        """Every current participant observes `msgs` (through `relay`)."""
        self._check_open("broadcast")
        messages = [m for m in (self.relay(m) for m in to_input(msgs, "MsgHub.broadcast")) if m is not None]
        if not messages:
            return
        busy = _busy()
        await asyncio.gather(
            *(
                agent.observe(messages, ctx)
                for agent, ctx in self._listeners()
                if _key(agent, ctx) not in busy and not _runs_here(agent, ctx)
            )
        )

    async def call(self, agent: AgentLike | str, input: AgentInput = None, *, output: Any = None) -> Msg:
        """`agent` replies to `input` (None: to the conversation so far) in the hub's ctx; the others hear it.

        The same as ``agent.call(input, hub.ctx)`` for a participant. The speaker may also be an
        outsider, e.g. a moderator, whose reply every participant hears.
        """
        self._check_open("call")
        speaker = self._resolve(agent)
        kwargs: dict[str, Any] = {"output": output} if output is not None else {}
        with self._turn(speaker):
            reply = as_reply(await speaker.call(input, self.ctx, **kwargs), speaker.name)
            if not announces_itself(speaker):
                await announce(speaker, self.ctx, reply)
        return reply

    async def stream_events(
        self, agent: AgentLike | str, input: AgentInput = None, *, output: Any = None
    ) -> AsyncIterator[ev.AgentEvent]:
        """`call`, yielding the speaker's events; the others hear the reply before the stream ends."""
        self._check_open("stream_events")
        speaker = self._resolve(agent)
        kwargs: dict[str, Any] = {"output": output} if output is not None else {}
        with self._turn(speaker):
            last: ev.AgentEvent | None = None
            async with closing(speaker.stream_events(input, self.ctx, **kwargs)) as events:
                async for event in events:
                    last = event
                    yield event
            if isinstance(last, ev.RunFinished) and not announces_itself(speaker):
                await announce(speaker, self.ctx, last.msg)

    async def round(self, order: Sequence[AgentLike | str] | None = None, input: AgentInput = None) -> list[Msg]:
        """Each participant (or each of `order`) speaks once, in turn, hearing everyone before it.

        `input`, when given, is broadcast first (e.g. the question of the round). A paused or
        interrupted reply ends the round early. Returns the replies in speaking order.
        """
        self._check_open("round")
        speakers = [self._resolve(a) for a in order] if order is not None else list(self._participants)
        if input is not None:
            await self.broadcast(input)
        replies: list[Msg] = []
        for speaker in speakers:
            reply = await self.call(speaker)
            replies.append(reply)
            if is_stopped(reply):
                break
        return replies

    # -- sharing (the `ConversationScope` protocol of the agent layer) --------------------------------------------
    async def share(self, speaker: Any, reply: Msg, observed: set[ListenerKey]) -> set[ListenerKey]:
        """Deliver `speaker`'s reply to the agents of the hub that do not have it yet; returns who has it.

        Skipped: the speaker; a composite speaker's members running in sessions of their own (the
        composite passes replies among them); whoever is in `observed` (heard it through another
        hub) or has it from this hub already (a composite's reply that is its last member's); and
        the agents whose calls this task runs inside. A fan-out's combined reply is shared as the
        replies it combines.
        """
        if not self.includes(speaker):
            return set()
        hub_key = self.ctx.key
        silent = {_key(node, ctx) for node, ctx in nodes(speaker, self.ctx) if ctx.key != hub_key}
        silent.add(_key(speaker, self.ctx))
        busy = _busy()
        result: set[ListenerKey] = set()
        for part in parts_of(reply):
            heard = self._heard.get(part.id)
            if heard is None:
                heard = self._heard[part.id] = set()
                if len(self._heard) > _REMEMBERED:
                    del self._heard[next(iter(self._heard))]
            heard |= silent
            msg = self.relay(part)
            if msg is not None and msg.content:
                jobs: list[Awaitable[Any]] = []
                for agent, ctx in self._listeners():
                    key = _key(agent, ctx)
                    if key in heard or key in observed or key in busy or _runs_here(agent, ctx):
                        continue
                    heard.add(key)
                    jobs.append(agent.observe([msg], ctx))
                await asyncio.gather(*jobs)
            result |= heard
        return result

    def _has_heard(self, reply_id: str, key: ListenerKey) -> bool:
        return self._open and key in self._heard.get(reply_id, ())

    def __repr__(self) -> str:
        return f"MsgHub({self.name!r}, [{', '.join(p.name for p in self._participants)}])"


def heard(reply: Msg, listener: AgentLike, ctx: RuntimeContext) -> bool:
    """Whether the open hubs already delivered `reply` (every part of it) to `listener` running in `ctx`.

    A composite passing a reply on to its next member asks this first, so the member does not get
    the reply twice (once observed through a hub, once as its input).
    """
    hubs = [s for s in SCOPES.get() if isinstance(s, MsgHub) and s._open]
    if not hubs:
        return False
    keys = [_key(n, c) for n, c in nodes(listener, ctx) if not isinstance(n, Composite)]
    return bool(keys) and all(
        any(hub._has_heard(part.id, key) for hub in hubs) for part in parts_of(reply) for key in keys
    )
