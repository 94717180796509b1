"""`MsgHub`: a conversation among agents, each keeping its own session."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from types import TracebackType
from typing import Any

from agentrt import events as ev
from agentrt.context import RuntimeContext
from agentrt.errors import UserError
from agentrt.message import Msg

from ._base import (
    LISTENERS,
    AgentInput,
    AgentLike,
    ReplyListener,
    as_reply,
    check_member,
    closing,
    handoff,
    is_stopped,
    running_key,
    to_input,
)

__all__ = ["MsgHub"]

Relay = Callable[[Msg], "Msg | None"]


def _default_relay(msg: Msg) -> Msg:
    return handoff(msg, label=True)


class MsgHub:
    """A conversation in which every participant's reply is observed by the others.

    ::

        async with MsgHub([alice, bob, carol], announcement="Debate: tabs or spaces?", ctx=ctx) as hub:
            await hub.round()                 # each speaks once, in order; all hear everyone
            await hub.call(alice, "Sum up.")  # one participant speaks; the others observe
            hub.add(dave); hub.remove(bob)
            await hub.broadcast(Msg.user("Time is up.", name="moderator"))

    Each participant keeps its own session, ``<hub session>/<participant name>`` (see `ctx_for`),
    so participants share a conversation without sharing state: a reply reaches the others through
    their ``observe``, as a ``user`` message named after the speaker and labelled
    ``"<speaker>: ..."`` (tool calls and thinking stay private; change this with `relay`).

    Replies are shared when a participant speaks through the hub (`call`, `stream_events`,
    `round`) and, inside the ``async with`` block, when a pipeline composite (`sequential`,
    `fanout`, `route`, `loop`) runs a participant. A participant's plain ``agent.call(...)`` is
    private to it. The announcement is broadcast on entering.

    Args:
        participants: The agents (or composites) taking part; names must be unique.
        announcement: Observed by every participant on entering (a str, a Msg or a list).
        ctx: The hub's context (user and base session); default: an anonymous default session.
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
        self._token: contextvars.Token[tuple[ReplyListener, ...]] | None = None
        self._shared: dict[str, None] = {}  # ids of replies already shared (insertion-ordered, capped)
        self.add(*participants)

    # -- membership ------------------------------------------------------------------------------------------
    @property
    def participants(self) -> tuple[AgentLike, ...]:
        """The current participants, in speaking order."""
        return tuple(self._participants)

    def add(self, *agents: AgentLike) -> None:
        """Add participants (they hear what is said from now on)."""
        for agent in agents:
            check_member(agent, "MsgHub participant")
            if not callable(getattr(agent, "observe", None)):
                raise UserError(f"MsgHub participant {agent.name!r} has no observe() method")
            if any(p is agent for p in self._participants):
                continue
            if any(p.name == agent.name for p in self._participants):
                raise UserError(
                    f"MsgHub already has a participant named {agent.name!r}; names must be unique "
                    "(each participant's session is named after it)"
                )
            self._participants.append(agent)

    def remove(self, *agents: AgentLike | str) -> None:
        """Remove participants (given as agents or names); unknown ones are ignored."""
        for agent in agents:
            self._participants = [
                p for p in self._participants if not (p is agent or (isinstance(agent, str) and p.name == agent))
            ]

    def ctx_for(self, agent: AgentLike) -> RuntimeContext:
        """The context `agent` speaks and listens in: the hub's user, session ``<hub session>/<name>``."""
        return self.ctx.child(session_id=f"{self.ctx.key[1]}/{agent.name}")

    def _resolve(self, agent: AgentLike | str) -> AgentLike:
        if isinstance(agent, str):
            for p in self._participants:
                if p.name == agent:
                    return p
            raise UserError(f"MsgHub has no participant named {agent!r}")
        return check_member(agent, "MsgHub speaker")

    # -- the conversation --------------------------------------------------------------------------------------
    async def __aenter__(self) -> MsgHub:
        if self._token is not None:
            raise UserError("this MsgHub is already entered")
        self._token = LISTENERS.set((*LISTENERS.get(), self))
        if self.announcement:
            await self.broadcast(self.announcement)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        token, self._token = self._token, None
        if token is None:
            return
        try:
            LISTENERS.reset(token)
        except ValueError:  # left in another context than it was entered in
            LISTENERS.set(tuple(h for h in LISTENERS.get() if h is not self))

    async def broadcast(self, msgs: AgentInput) -> None:
        """Every participant observes `msgs` (through `relay`)."""
        messages = [m for m in (self.relay(m) for m in to_input(msgs, "MsgHub.broadcast")) if m is not None]
        if messages:
            await self._deliver(messages, None)

    async def call(self, agent: AgentLike | str, input: AgentInput = None, *, output: Any = None) -> Msg:
        """`agent` replies to `input` (None: to the conversation so far); the others observe the reply.

        The speaker may be a participant (or its name) or an outsider, e.g. a moderator, whose
        replies every participant hears.
        """
        speaker = self._resolve(agent)
        kwargs: dict[str, Any] = {"output": output} if output is not None else {}
        reply = as_reply(await speaker.call(input, self.ctx_for(speaker), **kwargs), speaker.name)
        await self._share(speaker, reply)
        return reply

    async def stream_events(
        self, agent: AgentLike | str, input: AgentInput = None, *, output: Any = None
    ) -> AsyncIterator[ev.AgentEvent]:
        """`call`, yielding the speaker's events; the others observe the reply when it is complete."""
        speaker = self._resolve(agent)
        kwargs: dict[str, Any] = {"output": output} if output is not None else {}
        last: ev.AgentEvent | None = None
        async with closing(speaker.stream_events(input, self.ctx_for(speaker), **kwargs)) as events:
            async for event in events:
                last = event
                yield event
        if isinstance(last, ev.RunFinished):
            await self._share(speaker, last.msg)

    async def round(self, order: Sequence[AgentLike | str] | None = None, input: AgentInput = None) -> list[Msg]:
        """Each participant (or each of `order`) speaks once, in turn, hearing everyone before it.

        `input`, when given, is broadcast first (e.g. the question of the round). A paused or
        interrupted reply ends the round early. Returns the replies in speaking order.
        """
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

    # -- sharing -------------------------------------------------------------------------------------------------
    async def _share(self, speaker: AgentLike, reply: Msg) -> set[tuple[int, tuple[str, str]]]:
        if reply.id in self._shared:  # e.g. a pipeline's reply that is its last member's, already shared
            return set()
        self._shared[reply.id] = None
        if len(self._shared) > 4096:
            del self._shared[next(iter(self._shared))]
        msg = self.relay(reply)
        if msg is None or not msg.content:
            return set()
        return await self._deliver([msg], speaker)

    async def _deliver(self, messages: list[Msg], speaker: AgentLike | None) -> set[tuple[int, tuple[str, str]]]:
        # The agent whose call we run inside (a participant delegating to a pipeline) holds its own
        # session lock: it must not observe now, or it would wait for itself.
        inside = running_key()
        observed: set[tuple[int, tuple[str, str]]] = set()
        jobs: list[Awaitable[Any]] = []
        for participant in self._participants:
            if participant is speaker:
                continue
            ctx = self.ctx_for(participant)
            key = (id(participant), ctx.key)
            if key == inside:
                continue
            observed.add(key)
            jobs.append(participant.observe(messages, ctx))  # type: ignore[attr-defined]
        await asyncio.gather(*jobs)
        return observed

    async def _on_reply(self, agent: Any, reply: Msg) -> set[tuple[int, tuple[str, str]]]:
        if not any(p is agent for p in self._participants):
            return set()
        return await self._share(agent, reply)

    def __repr__(self) -> str:
        return f"MsgHub({self.name!r}, [{', '.join(p.name for p in self._participants)}])"
