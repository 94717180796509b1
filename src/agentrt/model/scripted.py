"""ScriptedModel: a model that answers from a script, for tests, demos and benchmarks."""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, ClassVar, TypeAlias

from agentrt import _json
from agentrt.errors import UnexpectedModelCallError
from agentrt.message import (
    AudioBlock,
    ContentBlock,
    ImageBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    TokenUsage,
    ToolUseBlock,
    VideoBlock,
)
from agentrt.model.base import ChatModel, ChatResponse, GenerateOptions, ModelRequest, ToolCallChunk, ToolSchema
from agentrt.model.pricing import ModelPrice

__all__ = ["ScriptedModel", "Step"]

Reply: TypeAlias = (
    "str | ContentBlock | Sequence[ContentBlock] | Sequence[ChatResponse] | ChatResponse | Msg | BaseException"
)
Step: TypeAlias = "Reply | Callable[[ModelRequest], Reply | Awaitable[Reply]]"

_WORDS = re.compile(r"\s*\S+\s*|\s+")
_BLOCK_TYPES = (TextBlock, ThinkingBlock, ToolUseBlock, ImageBlock, AudioBlock, VideoBlock)


class ScriptedModel(ChatModel):
    """Replies with one step of a script per call.

    A step is a `str` (text), a content block, a list of blocks (one reply with several blocks,
    e.g. parallel tool calls), a `Msg`, a `ChatResponse` or a list of them (raw chunks, streamed
    as given), an exception instance (raised by the call), or a callable taking the
    `ModelRequest` and returning one of those. Text is streamed word by word.

    `usage` is reported after each reply. A scripted model has no cost unless it is given a
    `price`, or its `name` names a model of the genai-prices table as ``"provider:model"``
    (``ScriptedModel(name="openai:gpt-4o")`` costs what gpt-4o costs; see `agentrt.model.pricing`).

    ``requests`` records every request (unless ``record=False``, for long benchmarks);
    `assert_complete()` fails if steps remain. A call beyond the script raises
    `UnexpectedModelCallError`.
    """

    provider: ClassVar[str] = "scripted"
    supports_structured_output: ClassVar[bool] = True
    supports_vision: ClassVar[bool] = True
    supports_thinking: ClassVar[bool] = True
    __test__ = False  # not a pytest class

    def __init__(
        self,
        steps: Sequence[Step] = (),
        *,
        name: str = "scripted",
        latency: float = 0.0,
        chunk_delay: float = 0.0,
        usage: TokenUsage | None = None,
        repeat: bool = False,
        record: bool = True,
        price: ModelPrice | None = None,
    ) -> None:
        self.model_name = name
        self.price = price
        self._steps: list[Step] = list(steps)
        self._function: Callable[[ModelRequest], Any] | None = None
        self.latency = latency
        self.chunk_delay = chunk_delay
        self.usage = usage
        self.repeat = repeat
        self.record = record
        self.requests: list[ModelRequest] = []
        self._next = 0
        self._calls = 0

    @classmethod
    def from_function(
        cls,
        fn: Callable[[ModelRequest], Reply | Awaitable[Reply]],
        *,
        name: str = "function",
        latency: float = 0.0,
        usage: TokenUsage | None = None,
        record: bool = True,
        price: ModelPrice | None = None,
    ) -> ScriptedModel:
        """A model whose every reply is ``fn(request)`` (sync or async)."""
        model = cls((), name=name, latency=latency, usage=usage, record=record, price=price)
        model._function = fn
        return model

    # -- script bookkeeping -------------------------------------------------------------------
    @property
    def remaining(self) -> int:
        """Steps not used yet."""
        return max(0, len(self._steps) - self._next)

    def add(self, *steps: Step) -> None:
        """Append steps to the script."""
        self._steps.extend(steps)

    def assert_complete(self) -> None:
        """Fail (AssertionError) if the script has unused steps."""
        if self._function is None and self._next < len(self._steps):
            raise AssertionError(
                f"ScriptedModel {self.model_name!r} has {len(self._steps) - self._next} unused step(s) "
                f"of {len(self._steps)}; it was called {self._calls} time(s)"
            )

    def _take(self, request: ModelRequest) -> Step:
        if self._function is not None:
            return self._function
        if self._next >= len(self._steps):
            if self.repeat and self._steps:
                self._next = 0
            else:
                raise UnexpectedModelCallError(
                    f"ScriptedModel {self.model_name!r} was called {self._calls} time(s) but its script "
                    f"has {len(self._steps)} step(s); last user text: {request.last_user_text[:200]!r}"
                )
        step = self._steps[self._next]
        self._next += 1
        return step

    # -- the model -------------------------------------------------------------------------------
    async def stream(
        self, messages: Sequence[Msg], tools: Sequence[ToolSchema] = (), options: GenerateOptions | None = None
    ) -> AsyncIterator[ChatResponse]:
        """Stream the next scripted reply."""
        request = ModelRequest(
            messages if type(messages) is list else list(messages),
            tools if type(tools) is list else list(tools),
            options or self.options,
        )
        if self.record:
            self.requests.append(request)
        self._calls += 1
        step = self._take(request)
        reply: Any = step
        if callable(step) and not isinstance(step, (BaseException, type)):
            reply = step(request)
            if inspect.isawaitable(reply):
                reply = await reply
        if self.latency:
            await asyncio.sleep(self.latency)
        if isinstance(reply, BaseException):
            raise reply
        for chunk in self._chunks(reply):
            if self.chunk_delay:
                await asyncio.sleep(self.chunk_delay)
            yield chunk
        if self.usage is not None:
            yield ChatResponse(usage=self.usage)

    def _chunks(self, reply: Any) -> list[ChatResponse]:
        if isinstance(reply, ChatResponse):
            return [reply]
        if isinstance(reply, str):
            return _text_chunks(reply)
        if isinstance(reply, Msg):
            blocks: Sequence[Any] = reply.content
        elif isinstance(reply, _BLOCK_TYPES):
            blocks = [reply]
        elif isinstance(reply, Sequence) and reply and all(isinstance(c, ChatResponse) for c in reply):
            return list(reply)
        elif isinstance(reply, Sequence):
            blocks = reply
        else:
            # Garbage on purpose: the accumulator rejects it with a typed error.
            return [reply]
        chunks: list[ChatResponse] = []
        index = 0
        finish = "stop"
        for block in blocks:
            if isinstance(block, TextBlock):
                chunks.extend(_text_chunks(block.text))
            elif isinstance(block, ThinkingBlock):
                chunks.append(ChatResponse(thinking=block.thinking, thinking_signature=block.signature))
            elif isinstance(block, ToolUseBlock):
                chunks.append(
                    ChatResponse(
                        tool_calls=(
                            ToolCallChunk(
                                index=index,
                                id=block.id,
                                name=block.name,
                                arguments=_json.dumps(dict(block.input)),
                                metadata=block.metadata,
                            ),
                        )
                    )
                )
                index += 1
                finish = "tool_calls"
            elif isinstance(block, str):
                chunks.extend(_text_chunks(block))
            else:
                chunks.append(ChatResponse(blocks=(block,)))
        chunks.append(ChatResponse(finish_reason=finish))
        return chunks


def _text_chunks(text: str) -> list[ChatResponse]:
    if not text:
        return [ChatResponse(finish_reason="stop")]
    out = [ChatResponse(text=piece) for piece in _WORDS.findall(text)]
    out.append(ChatResponse(finish_reason="stop"))
    return out
