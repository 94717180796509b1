"""Folds streamed `ChatResponse` chunks into one assistant `Msg`, reporting each block as it grows."""

from __future__ import annotations

from typing import Any, Protocol

from agentrt import _json
from agentrt.errors import ModelBehaviorError
from agentrt.message import (
    AudioBlock,
    ContentBlock,
    ImageBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    TokenUsage,
    ToolResultBlock,
    ToolUseBlock,
    VideoBlock,
    _new_call_id,
)
from agentrt.model.chunks import ChatResponse, ToolCallChunk

__all__ = ["BlockListener", "ReplyAccumulator", "parse_tool_arguments"]

_CONTENT_TYPES = (TextBlock, ThinkingBlock, ToolUseBlock, ImageBlock, AudioBlock, VideoBlock, ToolResultBlock)
META_RAW_ARGUMENTS = "raw_arguments"
META_ARGUMENTS_ERROR = "arguments_error"


class BlockListener(Protocol):
    """Receives block-level progress (the agent turns it into events)."""

    def on_text(self, index: int, delta: str) -> None: ...
    def on_thinking(self, index: int, delta: str, signature: str | None) -> None: ...
    def on_tool_call(self, index: int, call_id: str, name: str) -> None: ...
    def on_tool_delta(self, index: int, call_id: str, delta: str) -> None: ...
    def on_restart(self, reason: str) -> None: ...


class _Call:
    __slots__ = ("args", "block", "id", "input", "metadata", "name")

    def __init__(self, block: int) -> None:
        self.block = block
        self.id = ""
        self.name = ""
        self.args: list[str] = []
        self.input: dict[str, Any] | None = None
        self.metadata: dict[str, Any] | None = None


def parse_tool_arguments(raw: str) -> tuple[dict[str, Any], str | None]:
    """Parse streamed tool arguments; repair broken JSON when json-repair is installed.

    Returns the arguments and, when they could not be read as a JSON object, an error message
    (the executor sends it back to the model instead of running the tool).
    """
    text = raw.strip()
    if not text:
        return {}, None
    try:
        value = _json.loads(text)
    except ValueError as exc:
        try:
            import json_repair
        except ImportError:  # pragma: no cover - json-repair is a core dependency
            return {}, f"arguments are not valid JSON ({exc})"
        try:
            value = json_repair.loads(text)
        except Exception as repair_exc:
            return {}, f"arguments are not valid JSON ({repair_exc})"
        if not isinstance(value, dict) or (not value and text not in ("{}", "")):
            return {}, f"arguments are not valid JSON: {text[:200]!r}"
    if not isinstance(value, dict):
        return {}, f"arguments must be a JSON object, got {type(value).__name__}: {text[:200]!r}"
    return value, None


class ReplyAccumulator:
    """Accumulates one model reply. Feed chunks with `add`, then take `message()`."""

    __slots__ = (
        "_calls",
        "_kinds",
        "_listener",
        "_parts",
        "_signatures",
        "_text_open",
        "_think_open",
        "blocks_extra",
        "chunks",
        "finish_reason",
        "served_by",
        "usage",
    )

    def __init__(self, listener: BlockListener | None = None) -> None:
        self._listener = listener
        self._kinds: list[str] = []  # per block: "text" | "thinking" | "call" | "extra"
        self._parts: list[list[str]] = []
        self._signatures: dict[int, str] = {}
        self._calls: dict[int, _Call] = {}  # by provider index
        self._text_open = -1
        self._think_open = -1
        self.blocks_extra: dict[int, ContentBlock] = {}
        self.usage: TokenUsage | None = None
        self.finish_reason: str | None = None
        self.served_by: Any = None
        """The model that produced the reply when a wrapper said so (`ChatResponse.served_by`), else None."""
        self.chunks = 0

    def reset(self) -> None:
        """Forget everything accumulated (the stream starts over)."""
        self._kinds.clear()
        self._parts.clear()
        self._signatures.clear()
        self._calls.clear()
        self._text_open = self._think_open = -1
        self.blocks_extra.clear()
        self.usage = None
        self.finish_reason = None
        self.served_by = None

    def _new_block(self, kind: str) -> int:
        self._kinds.append(kind)
        self._parts.append([])
        return len(self._kinds) - 1

    def add(self, chunk: ChatResponse) -> None:
        """Apply one chunk."""
        if type(chunk) is not ChatResponse and not isinstance(chunk, ChatResponse):
            raise ModelBehaviorError(f"model stream yielded {type(chunk).__name__!r}, expected ChatResponse")
        self.chunks += 1
        listener = self._listener
        if chunk.restart is not None:
            self._restart(chunk.restart)
        if chunk.thinking or chunk.thinking_signature:
            idx = self._think_open
            if idx < 0:
                idx = self._think_open = self._new_block("thinking")
                self._text_open = -1
            if chunk.thinking:
                self._parts[idx].append(chunk.thinking)
            if chunk.thinking_signature:
                self._signatures[idx] = chunk.thinking_signature
            if listener is not None:
                listener.on_thinking(idx, chunk.thinking, chunk.thinking_signature)
        if chunk.text:
            idx = self._text_open
            if idx < 0:
                idx = self._text_open = self._new_block("text")
                self._think_open = -1
            self._parts[idx].append(chunk.text)
            if listener is not None:
                listener.on_text(idx, chunk.text)
        for call in chunk.tool_calls:
            self._add_call(call)
        for block in chunk.blocks:
            self._add_block(block)
        self._add_ending(chunk)

    def _add_ending(self, chunk: ChatResponse) -> None:
        """What a chunk says about the whole reply: usage, finish reason, the model that served it."""
        if chunk.usage is not None:
            self.usage = chunk.usage if self.usage is None else _merge_usage(self.usage, chunk.usage)
        if chunk.finish_reason is not None:
            self.finish_reason = chunk.finish_reason
        if chunk.served_by is not None and self.served_by is None:
            self.served_by = chunk.served_by  # the innermost wrapper's says it first

    def _restart(self, reason: str) -> None:
        """The stream starts over: drop the reply so far and tell the listener why."""
        self.reset()
        if self._listener is not None:
            self._listener.on_restart(reason)

    def _add_block(self, block: ContentBlock) -> None:
        """A complete non-text block (e.g. a generated image) becomes a block of its own."""
        if not isinstance(block, _CONTENT_TYPES):
            raise ModelBehaviorError(f"model stream yielded a {type(block).__name__!r} block, not a content block")
        idx = self._new_block("extra")
        self.blocks_extra[idx] = block
        self._text_open = self._think_open = -1

    def _add_call(self, chunk: ToolCallChunk) -> None:
        if not isinstance(chunk, ToolCallChunk):
            raise ModelBehaviorError(f"tool call chunk is {type(chunk).__name__!r}, expected ToolCallChunk")
        call = self._calls.get(chunk.index)
        listener = self._listener
        if call is None:
            call = self._calls[chunk.index] = _Call(self._new_block("call"))
            self._text_open = self._think_open = -1
            call.id = chunk.id or _new_call_id()
            call.name = chunk.name or ""
            if listener is not None:
                listener.on_tool_call(call.block, call.id, call.name)
        elif chunk.name and not call.name:
            call.name = chunk.name
        if chunk.metadata:
            call.metadata = {**(call.metadata or {}), **chunk.metadata}
        if chunk.input is not None:
            call.input = dict(chunk.input)
            if listener is not None:
                listener.on_tool_delta(call.block, call.id, _json.dumps(call.input))
        if chunk.arguments:
            call.args.append(chunk.arguments)
            if listener is not None:
                listener.on_tool_delta(call.block, call.id, chunk.arguments)

    @property
    def empty(self) -> bool:
        """True when the reply holds no answer text, no tool call and no other block (thinking alone is empty)."""
        return not any(
            kind in ("call", "extra") or (kind == "text" and "".join(self._parts[i]).strip())
            for i, kind in enumerate(self._kinds)
        )

    def content(self) -> list[ContentBlock]:
        """The blocks accumulated so far, in order of first appearance."""
        calls_by_block = {c.block: c for c in self._calls.values()}
        out: list[ContentBlock] = []
        for i, kind in enumerate(self._kinds):
            if kind == "text":
                out.append(TextBlock(text="".join(self._parts[i])))
            elif kind == "thinking":
                out.append(ThinkingBlock(thinking="".join(self._parts[i]), signature=self._signatures.get(i)))
            elif kind == "extra":
                out.append(self.blocks_extra[i])
            else:
                call = calls_by_block[i]
                if not call.name:
                    raise ModelBehaviorError(f"model streamed a tool call ({call.id!r}) without a name")
                metadata = call.metadata
                if call.input is not None:
                    args = call.input
                else:
                    args, error = parse_tool_arguments("".join(call.args))
                    if error is not None:
                        metadata = {
                            **(metadata or {}),
                            META_RAW_ARGUMENTS: "".join(call.args),
                            META_ARGUMENTS_ERROR: error,
                        }
                out.append(ToolUseBlock(id=call.id, name=call.name, input=args, metadata=metadata))
        return out

    def message(self, *, name: str | None, msg_id: str | None = None) -> Msg:
        """The accumulated reply as an assistant message."""
        metadata = {"finish_reason": self.finish_reason} if self.finish_reason else {}
        if msg_id is None:
            return Msg(role="assistant", content=self.content(), name=name, metadata=metadata, usage=self.usage)
        return Msg(role="assistant", content=self.content(), name=name, metadata=metadata, usage=self.usage, id=msg_id)


def _merge_usage(a: TokenUsage, b: TokenUsage) -> TokenUsage:
    # Providers report usage either once (final chunk) or cumulatively; keep the larger counts.
    return TokenUsage(
        input_tokens=max(a.input_tokens, b.input_tokens),
        output_tokens=max(a.output_tokens, b.output_tokens),
        cache_read_tokens=max(a.cache_read_tokens, b.cache_read_tokens),
        cache_write_tokens=max(a.cache_write_tokens, b.cache_write_tokens),
        reasoning_tokens=max(a.reasoning_tokens, b.reasoning_tokens),
    )
