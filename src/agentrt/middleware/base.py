"""Middleware: onion hooks around an agent call, each reasoning step, each model call and each tool call.

Order: middlewares listed first are outermost. For ``middlewares=[a, b]`` a call runs
``a.on_call → b.on_call → (loop)``; inside the loop each step runs ``a.on_reasoning →
b.on_reasoning → a.on_model_call → b.on_model_call → model``, and each tool call runs
``a.on_acting → b.on_acting → tool``. `on_system_prompt` is a pipeline run once per call, in
list order, each middleware receiving the previous one's prompt.

Every hook has a pass-through default; override only what you need. Hooks that a middleware
does not override cost nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from agentrt.message import Msg, ToolResultBlock, ToolUseBlock
from agentrt.model.base import ModelRequest

if TYPE_CHECKING:
    from agentrt.agent._run import Run

__all__ = ["Middleware"]


class Middleware:
    """Base class for middleware; all hooks pass through by default."""

    async def on_call(self, run: Run, next: Callable[[], Awaitable[Msg]]) -> Msg:
        """Around a whole agent call; returns the reply."""
        return await next()

    async def on_reasoning(self, run: Run, next: Callable[[], Awaitable[Msg]]) -> Msg:
        """Around one reasoning step (prompt building, model call, accumulation); returns the assistant message."""
        return await next()

    async def on_model_call(
        self, run: Run, request: ModelRequest, next: Callable[[ModelRequest], Awaitable[Msg]]
    ) -> Msg:
        """Around one model call; may rewrite the request or the resulting message (deltas already streamed stay)."""
        return await next(request)

    async def on_acting(
        self, run: Run, call: ToolUseBlock, next: Callable[[ToolUseBlock], Awaitable[ToolResultBlock]]
    ) -> ToolResultBlock:
        """Around one tool call; may rewrite the call or its result, or answer without running the tool."""
        return await next(call)

    async def on_system_prompt(self, run: Run, prompt: str) -> str:
        """Transform the system prompt once per call."""
        return prompt

    def overrides(self, hook: str) -> bool:
        """Whether this middleware overrides `hook` (unchanged hooks are skipped entirely)."""
        return getattr(type(self), hook) is not getattr(Middleware, hook)
