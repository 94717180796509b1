"""The composites: `sequential`, `fanout`, `route` and `loop`."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar, overload

from agentrt import events as ev
from agentrt.agent.usage import budget_reached
from agentrt.context import RuntimeContext
from agentrt.errors import UsageLimitExceeded, UserError
from agentrt.message import META_STRUCTURED, Msg, TextBlock

from .base import (
    AgentInput,
    AgentLike,
    CallState,
    Composite,
    as_reply,
    check_member,
    combine,
    handoff,
    handoff_all,
    interrupted_reply,
    invoke,
    is_agent,
    is_resume,
    is_stopped,
    maybe_await,
    member_paused,
    to_input,
)
from .hub import heard

__all__ = [
    "FanOut",
    "Loop",
    "RouteSelected",
    "Router",
    "Sequential",
    "fanout",
    "loop",
    "route",
    "sequential",
]

R = TypeVar("R")
Gather = Callable[[list[Msg]], "Msg | str | Awaitable[Msg | str]"]
Classifier = Callable[..., "str | Awaitable[str]"]


def _members(agents: Sequence[Any], what: str) -> tuple[AgentLike, ...]:
    if isinstance(agents, (str, bytes)) or not isinstance(agents, Sequence):
        raise UserError(f"{what} takes a list of agents, not {type(agents).__name__!r}")
    if not agents:
        raise UserError(f"{what} needs at least one agent")
    return tuple(check_member(a, f"{what} member {i}") for i, a in enumerate(agents))


def _with_usage(reply: Msg, state: CallState, **metadata: Any) -> Msg:
    """The composite's reply: `reply` carrying the whole call's usage (and extra metadata)."""
    changes: dict[str, Any] = {}
    if state.usage is not None and state.usage != reply.usage:
        changes["usage"] = state.usage
    if metadata:
        changes["metadata"] = {**reply.metadata, **metadata}
    return reply.replace(**changes) if changes else reply


# ---------------------------------------------------------------------------------------------------------------
class Sequential(Composite[Msg]):
    """Members run one after the other; each receives the previous one's reply (see `sequential`)."""

    def __init__(
        self,
        agents: Sequence[AgentLike],
        *,
        name: str = "sequential",
        description: str = "",
        shared_session: bool = False,
    ) -> None:
        super().__init__(name, description, shared_session=shared_session)
        self._members = _members(agents, "sequential()")

    @property
    def members(self) -> tuple[AgentLike, ...]:
        return self._members

    async def _run(self, messages: list[Msg], ctx: RuntimeContext, state: CallState, output: Any) -> Msg:
        steps = self._members
        start = 0
        if is_resume(messages):
            # The answers go to the member that paused; the pipeline continues from there.
            for i, member in enumerate(steps):
                if await member_paused(member, self.member_ctx(member, ctx)):
                    start = i
                    break
        current = messages
        for i in range(start, len(steps)):
            if state.interrupted:
                return interrupted_reply(self.name, state)
            member = steps[i]
            last = i == len(steps) - 1
            result = await invoke(member, current, self.member_ctx(member, ctx), state, output if last else None)
            reply = as_reply(result, member.name)
            if is_stopped(reply) or last:
                return _with_usage(reply, state)
            following = steps[i + 1]
            # A MsgHub may already have delivered the reply into that member's session.
            current = [] if heard(reply, following, self.member_ctx(following, ctx)) else handoff_all(result)
        raise AssertionError("unreachable")  # pragma: no cover


def sequential(
    agents: Sequence[AgentLike], *, name: str = "sequential", description: str = "", shared_session: bool = False
) -> Sequential:
    """Run `agents` in order, each on the previous one's reply; return the last reply.

    The first agent receives the caller's input. Each agent runs in its own session
    (``<session>/<agent name>``) unless ``shared_session=True`` (all in the caller's session).
    The pipeline stops early, returning that reply, when an agent pauses (awaiting approval or an
    external result) or is interrupted; calling the pipeline again with the answers resumes the
    paused agent and continues with the agents after it. The reply carries the tokens of the whole
    pipeline in `usage`.
    """
    return Sequential(agents, name=name, description=description, shared_session=shared_session)


# ---------------------------------------------------------------------------------------------------------------
class FanOut(Composite[R]):
    """Members run in parallel on the same input (see `fanout`)."""

    def __init__(
        self,
        agents: Sequence[AgentLike],
        gather: Gather | AgentLike | None = None,
        *,
        max_concurrency: int | None = None,
        return_exceptions: bool = False,
        name: str = "fanout",
        description: str = "",
        shared_session: bool = False,
    ) -> None:
        super().__init__(name, description, shared_session=shared_session)
        self._members = _members(agents, "fanout()")
        if max_concurrency is not None and (not isinstance(max_concurrency, int) or max_concurrency < 1):
            raise UserError(f"max_concurrency must be a positive integer or None, not {max_concurrency!r}")
        if gather is not None and not (is_agent(gather) or callable(gather)):
            raise UserError(f"gather must be a function of the replies or an agent, not {type(gather).__name__!r}")
        self.gather = gather
        self.max_concurrency = max_concurrency
        self.return_exceptions = return_exceptions

    @property
    def members(self) -> tuple[AgentLike, ...]:
        extra = (self.gather,) if self.gather is not None and is_agent(self.gather) else ()
        return self._members + extra  # type: ignore[operator]

    async def _run(self, messages: list[Msg], ctx: RuntimeContext, state: CallState, output: Any) -> R:
        if is_resume(messages):
            for member in self._members:
                if await member_paused(member, self.member_ctx(member, ctx)):
                    raise UserError(
                        f"fanout {self.name!r} cannot resume its paused member {member.name!r}: answer it directly "
                        f"with `await member.call(answers, fanout.member_ctx(member, ctx))`"
                    )
        gather = self.gather
        member_output = output if gather is None else None
        replies: list[Msg | None] = [None] * len(self._members)
        failures: dict[int, BaseException] = {}
        limit = asyncio.Semaphore(self.max_concurrency) if self.max_concurrency is not None else None

        async def one(index: int, member: AgentLike) -> None:
            async with limit if limit is not None else contextlib.nullcontext():
                try:
                    result = await invoke(member, messages, self.member_ctx(member, ctx), state, member_output)
                except Exception as exc:
                    # A pipeline's usage limit stops the whole call, even with return_exceptions.
                    if not self.return_exceptions or (isinstance(exc, UsageLimitExceeded) and budget_reached()):
                        failures[index] = exc
                        raise
                    replies[index] = _error_reply(member, exc)
                    return
                replies[index] = as_reply(result, member.name)

        try:
            async with asyncio.TaskGroup() as group:
                for index, member in enumerate(self._members):
                    group.create_task(one(index, member))
        except BaseExceptionGroup:
            if failures:
                raise failures[min(failures)] from None
            raise
        done = [r for r in replies if r is not None]
        if gather is None:
            return done  # type: ignore[return-value]
        if any(is_stopped(r) for r in done):
            return _with_usage(combine(done, self.name), state)  # type: ignore[return-value]
        if is_agent(gather):
            agent = check_member(gather, "gather")
            sub = self.member_ctx(agent, ctx)
            # The replies a MsgHub already delivered into the gatherer's session are not passed again.
            inputs = [handoff(r, label=True) for r in done if not heard(r, agent, sub)]
            result = await invoke(agent, inputs, sub, state, output)
            return _with_usage(as_reply(result, agent.name), state)  # type: ignore[return-value]
        value = await maybe_await(gather(done))  # type: ignore[operator]
        if isinstance(value, str):
            value = Msg(role="assistant", content=[TextBlock(text=value)], name=self.name)
        if not isinstance(value, Msg):
            raise UserError(f"the gather function of fanout {self.name!r} returned {type(value).__name__!r}, not a Msg")
        return _with_usage(value, state)  # type: ignore[return-value]


def _error_reply(member: AgentLike, exc: BaseException) -> Msg:
    return Msg(
        role="assistant",
        content=[TextBlock(text=f"{type(exc).__name__}: {exc}")],
        name=member.name,
        metadata={"error": {"type": type(exc).__name__, "message": str(exc)}},
    )


@overload
def fanout(
    agents: Sequence[AgentLike],
    gather: None = None,
    *,
    max_concurrency: int | None = None,
    return_exceptions: bool = False,
    name: str = "fanout",
    description: str = "",
    shared_session: bool = False,
) -> FanOut[list[Msg]]: ...
@overload
def fanout(
    agents: Sequence[AgentLike],
    gather: Gather | AgentLike,
    *,
    max_concurrency: int | None = None,
    return_exceptions: bool = False,
    name: str = "fanout",
    description: str = "",
    shared_session: bool = False,
) -> FanOut[Msg]: ...
def fanout(
    agents: Sequence[AgentLike],
    gather: Gather | AgentLike | None = None,
    *,
    max_concurrency: int | None = None,
    return_exceptions: bool = False,
    name: str = "fanout",
    description: str = "",
    shared_session: bool = False,
) -> FanOut[Any]:
    """Run `agents` in parallel on the same input; return their replies in agent order.

    Args:
        agents: The members; each runs in its own session (``<session>/<agent name>``).
        gather: Reduces the replies to one `Msg`: a function of the list of replies (sync or async,
            returning a `Msg` or a str), or an agent that receives the replies as its input (as
            ``user`` messages labelled with their speakers). With a gather, `call` returns a `Msg`.
        max_concurrency: At most this many members run at once (None: all).
        return_exceptions: By default a member's exception cancels the others and propagates;
            with True it becomes that member's reply: an assistant `Msg` with the error's text and
            ``metadata["error"]`` (except `UsageLimitExceeded` from the usage limits of this
            pipeline call or one it runs inside: that stops the whole call).
        name: The composite's name (the `source` of its own events).
        description: What it does (used by `as_tool`).
        shared_session: Run every member in the caller's session instead of its own.

    A paused member's reply is returned as is (the gather step is skipped); resume it directly on
    its session (`FanOut.member_ctx`).
    """
    return FanOut(
        agents,
        gather,
        max_concurrency=max_concurrency,
        return_exceptions=return_exceptions,
        name=name,
        description=description,
        shared_session=shared_session,
    )


# ---------------------------------------------------------------------------------------------------------------
@ev.register_event_type
@dataclass(frozen=True, slots=True, kw_only=True)
class RouteSelected(ev.AgentEvent):
    """A router chose where the input goes (`source` is the router)."""

    type: ClassVar[str] = "route_selected"
    label: str
    target: str


_WORD = re.compile(r"[\w-]+")


def _match_label(text: str, labels: Sequence[str]) -> str | None:
    """The label a classifier's answer names: exact, then ignoring case and quotes, then the one label mentioned."""
    if text in labels:
        return text
    folded = {label.casefold(): label for label in labels}
    cleaned = text.strip().strip("\"'`*.:;!").strip().casefold()
    if cleaned in folded:
        return folded[cleaned]
    mentioned = {folded[w] for w in (m.group(0).casefold() for m in _WORD.finditer(text)) if w in folded}
    if len(mentioned) == 1:
        return mentioned.pop()
    phrases = {label for key, label in folded.items() if not _WORD.fullmatch(key) and key in text.casefold()}
    return phrases.pop() if len(phrases) == 1 and not mentioned else None


class Router(Composite[Msg]):
    """Sends the input to one of several agents, chosen by a classifier (see `route`)."""

    def __init__(
        self,
        classifier: Classifier | AgentLike,
        routes: Mapping[str, AgentLike],
        default: AgentLike | None = None,
        *,
        name: str = "route",
        description: str = "",
        shared_session: bool = False,
    ) -> None:
        super().__init__(name, description, shared_session=shared_session)
        if not isinstance(routes, Mapping) or not routes:
            raise UserError("route() needs a non-empty mapping of labels to agents")
        self.routes = {str(label): check_member(agent, f"route {label!r}") for label, agent in routes.items()}
        self.default = check_member(default, "route default") if default is not None else None
        if is_agent(classifier):
            self.classifier: Classifier | AgentLike = check_member(classifier, "route classifier")
            self._arity = 0
        elif callable(classifier):
            self.classifier = classifier
            self._arity = _positional_arity(classifier)
        else:
            raise UserError(f"classifier must be a function or an agent, not {type(classifier).__name__!r}")

    @property
    def members(self) -> tuple[AgentLike, ...]:
        out: list[AgentLike] = []
        candidates: list[Any] = [self.classifier, *self.routes.values(), self.default]
        for agent in candidates:
            if agent is not None and is_agent(agent) and all(agent is not o for o in out):
                out.append(agent)
        return tuple(out)

    async def _run(self, messages: list[Msg], ctx: RuntimeContext, state: CallState, output: Any) -> Msg:
        targets = [*self.routes.values(), *([self.default] if self.default is not None else [])]
        target: AgentLike | None = None
        label = ""
        if is_resume(messages):
            for candidate in targets:
                if await member_paused(candidate, self.member_ctx(candidate, ctx)):
                    target = candidate
                    label = next((k for k, v in self.routes.items() if v is candidate), "default")
                    break
        if target is None:
            label = await self._classify(messages, ctx, state)
            target = self.routes.get(label)
            if target is None:
                matched = _match_label(label, list(self.routes))
                target = self.routes.get(matched) if matched is not None else None
                label = matched or label
            if target is None:
                if self.default is None:
                    known = ", ".join(repr(k) for k in self.routes)
                    raise UserError(f"route {self.name!r}: the classifier chose {label!r}, which is none of {known}")
                target = self.default
        state.event(RouteSelected, label=label, target=target.name)
        if state.interrupted:
            return interrupted_reply(self.name, state)
        result = await invoke(target, messages, self.member_ctx(target, ctx), state, output)
        return _with_usage(as_reply(result, target.name), state, route=label)

    async def _classify(self, messages: list[Msg], ctx: RuntimeContext, state: CallState) -> str:
        classifier = self.classifier
        if isinstance(classifier, Composite) or is_agent(classifier):
            agent = check_member(classifier, "classifier")
            reply = as_reply(await invoke(agent, messages, self.member_ctx(agent, ctx), state), agent.name)
            if is_stopped(reply):
                raise UserError(
                    f"route {self.name!r}: the classifier {agent.name!r} stopped ({reply.generate_reason.value})"
                )
            structured = reply.metadata.get(META_STRUCTURED)
            if isinstance(structured, str):
                return structured
            if isinstance(structured, Mapping):
                for key in ("label", "route", "category", "choice"):
                    if isinstance(structured.get(key), str):
                        return str(structured[key])
            return reply.text.strip()
        fn: Classifier = classifier  # type: ignore[assignment]
        value = await maybe_await(fn(messages, ctx) if self._arity >= 2 else fn(messages))
        if not isinstance(value, str):
            raise UserError(f"route {self.name!r}: the classifier returned {type(value).__name__!r}, not a label str")
        return value


def _positional_arity(fn: Callable[..., Any]) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 2
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 2
    return sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def route(
    classifier: Classifier | AgentLike,
    routes: Mapping[str, AgentLike],
    default: AgentLike | None = None,
    *,
    name: str = "route",
    description: str = "",
    shared_session: bool = False,
) -> Router:
    """Send the input to the agent whose label the classifier picks; return that agent's reply.

    Args:
        classifier: A function ``(messages, ctx) -> label`` (or ``(messages) -> label``; sync or
            async), or an agent whose reply names the label: its structured output (a str, or a
            dict with ``label``), else its text; matching ignores case, quotes and surrounding
            words when exactly one label is mentioned.
        routes: Label to agent.
        default: Where unknown labels go; without it an unknown label raises `UserError` naming
            the labels.
        name: The composite's name (the `source` of its own events).
        description: What it does (used by `as_tool`).
        shared_session: Run the classifier and targets in the caller's session instead of their own.

    The reply carries the chosen label in ``metadata["route"]``; streams include a
    `RouteSelected` event. Answers to a paused target go straight back to it.
    """
    return Router(classifier, routes, default, name=name, description=description, shared_session=shared_session)


# ---------------------------------------------------------------------------------------------------------------
class Loop(Composite[Msg]):
    """Re-runs an agent on its own reply until a condition holds (see `loop`)."""

    def __init__(
        self,
        agent: AgentLike,
        until: Callable[[Msg], bool | Awaitable[bool]],
        *,
        max_rounds: int = 10,
        feedback: Callable[[Msg], AgentInput | Awaitable[AgentInput]] | None = None,
        name: str = "loop",
        description: str = "",
        shared_session: bool = False,
    ) -> None:
        super().__init__(name, description, shared_session=shared_session)
        self.agent = check_member(agent, "loop() agent")
        if not callable(until):
            raise UserError(f"until must be a function of the reply, not {type(until).__name__!r}")
        if not isinstance(max_rounds, int) or max_rounds < 1:
            raise UserError(f"max_rounds must be a positive integer, not {max_rounds!r}")
        self.until = until
        self.max_rounds = max_rounds
        self.feedback = feedback

    @property
    def members(self) -> tuple[AgentLike, ...]:
        return (self.agent,)

    async def _run(self, messages: list[Msg], ctx: RuntimeContext, state: CallState, output: Any) -> Msg:
        agent = self.agent
        sub = self.member_ctx(agent, ctx)
        current = messages
        reply: Msg | None = None
        for round_no in range(1, self.max_rounds + 1):
            if state.interrupted:
                return interrupted_reply(self.name, state)
            result = await invoke(agent, current, sub, state, output)
            reply = as_reply(result, agent.name)
            if is_stopped(reply):
                return _with_usage(reply, state, loop={"rounds": round_no, "done": False})
            if await maybe_await(self.until(reply)):
                return _with_usage(reply, state, loop={"rounds": round_no, "done": True})
            if round_no < self.max_rounds:
                if self.feedback is None:
                    current = handoff_all(result)
                else:
                    current = to_input(await maybe_await(self.feedback(reply)), f"loop {self.name!r} feedback")
        assert reply is not None
        return _with_usage(reply, state, loop={"rounds": self.max_rounds, "done": False})


def loop(
    agent: AgentLike,
    until: Callable[[Msg], bool | Awaitable[bool]],
    *,
    max_rounds: int = 10,
    feedback: Callable[[Msg], AgentInput | Awaitable[AgentInput]] | None = None,
    name: str = "loop",
    description: str = "",
    shared_session: bool = False,
) -> Loop:
    """Run `agent`, then again on its own reply, until ``until(reply)`` holds or `max_rounds` ran.

    The first round receives the caller's input; later rounds receive the previous reply (as a
    ``user`` hand-off), or what ``feedback(reply)`` returns (a str, a Msg or a list; sync or
    async). The agent keeps one session across rounds. Returns the last reply, with
    ``metadata["loop"] = {"rounds": n, "done": bool}`` (``done`` is False when the rounds ran out).
    A paused or interrupted reply ends the loop at once.
    """
    return Loop(
        agent,
        until,
        max_rounds=max_rounds,
        feedback=feedback,
        name=name,
        description=description,
        shared_session=shared_session,
    )
