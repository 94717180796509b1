"""The pieces of a streamed model reply: `ChatResponse` chunks and the `ToolCallChunk`s inside them.

Below `agentrt.model.base` so the accumulator that folds them (`model/_accumulate.py`) and the
model protocol can both use them without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agentrt.message import ContentBlock, TokenUsage

__all__ = ["ChatResponse", "FinishReason", "ToolCallChunk"]

FinishReason = Literal["stop", "tool_calls", "length", "content_filter", "error"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallChunk:
    """A piece of a tool call. Chunks with the same `index` belong to one call.

    The first chunk of a call carries `id` and `name`; `arguments` pieces are concatenated into
    the JSON arguments. Providers that deliver parsed arguments set `input` instead.
    """

    index: int = 0
    id: str | None = None
    name: str | None = None
    arguments: str = ""
    input: Mapping[str, Any] | None = None
    metadata: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatResponse:
    """One streamed chunk of a model reply (a non-streaming reply is a single chunk)."""

    text: str = ""
    thinking: str = ""
    thinking_signature: str | None = None
    tool_calls: Sequence[ToolCallChunk] = ()
    blocks: Sequence[ContentBlock] = ()
    """Complete non-text blocks (e.g. generated images) delivered as they are."""
    usage: TokenUsage | None = None
    finish_reason: str | None = None
    raw: Any = None
    """The provider's own chunk, for debugging; never persisted."""
    restart: str | None = None
    """Set by wrappers (fallback, retry) when a stream died midway and the reply starts over:
    everything accumulated so far for this reply must be discarded. The value says why."""
    served_by: Any = None
    """The `ChatModel` that produced this reply, set by wrappers that pick among models (a
    `FallbackModel` yields it in a chunk of its own once the reply is complete), so the reply is
    priced as that model's and not the wrapper's. The first one of a reply counts (the innermost
    wrapper's); None: the model streamed from."""
