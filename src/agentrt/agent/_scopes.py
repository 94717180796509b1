"""Conversation scopes an agent call joins (a `MsgHub` block): where a call without ctx runs, who hears replies.

The agent layer knows scopes only through this protocol; `agentrt.pipeline.MsgHub` implements it.
Entering a scope pushes it on `SCOPES` (a context variable, so tasks started inside inherit it);
leaving pops it, which ends all sharing.
"""

from __future__ import annotations

import contextvars
from typing import Any, Protocol

from agentrt.context import RuntimeContext
from agentrt.message import Msg

__all__ = ["SCOPES", "ConversationScope", "announce", "scope_ctx"]

Observed = set[tuple[int, tuple[str, str]]]


class ConversationScope(Protocol):
    """A conversation agents take part in, in one context."""

    @property
    def ctx(self) -> RuntimeContext:
        """The context every participant speaks and listens in."""
        ...

    def includes(self, agent: Any) -> bool:
        """Whether `agent` is a current participant."""
        ...

    async def share(self, speaker: Any, reply: Msg, observed: Observed) -> Observed:
        """Deliver `reply` to the other participants not in `observed`; returns who observed it."""
        ...


SCOPES: contextvars.ContextVar[tuple[ConversationScope, ...]] = contextvars.ContextVar("agentrt_scopes", default=())


def scope_ctx(agent: Any) -> RuntimeContext | None:
    """The context of the innermost entered scope `agent` takes part in (None outside any)."""
    for scope in reversed(SCOPES.get()):
        if scope.includes(agent):
            return scope.ctx
    return None


async def announce(agent: Any, ctx: RuntimeContext, reply: Msg) -> Observed:
    """Share `agent`'s reply in every entered scope it takes part in with this very context, once per listener.

    A call in another context than the scope's is private to the speaker.
    """
    scopes = SCOPES.get()
    observed: Observed = set()
    if not scopes:
        return observed
    key = ctx.key
    for scope in reversed(scopes):
        if scope.ctx.key == key and scope.includes(agent):
            observed |= await scope.share(agent, reply, observed)
    return observed
