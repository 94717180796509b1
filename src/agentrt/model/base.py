"""The model protocol: what every chat model adapter implements and what the agent loop consumes."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, ClassVar

from agentrt.message import Msg
from agentrt.model.chunks import ChatResponse, ToolCallChunk

if TYPE_CHECKING:
    from agentrt.model.pricing import ModelPrice

__all__ = [
    "ChatModel",
    "ChatResponse",
    "GenerateOptions",
    "ModelRequest",
    "ToolCallChunk",
    "ToolSchema",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSchema:
    """A tool as the model sees it: name, description and JSON Schema of its arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    strict: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The neutral JSON form."""
        return {"name": self.name, "description": self.description, "parameters": dict(self.parameters)}


@dataclass(frozen=True, slots=True, kw_only=True)
class GenerateOptions:
    """Generation settings shared by providers. `None` means "the provider's default".

    Provider-specific settings go in `extra` as ``{"openai_logprobs": True}``-style keys (each
    adapter reads its own prefix and passes unknown keys through where the API allows).
    """

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stop: Sequence[str] | None = None
    seed: int | None = None
    tool_choice: str | Mapping[str, Any] | None = None
    """``"auto"``, ``"none"``, ``"required"`` or ``{"name": tool_name}``."""
    parallel_tool_calls: bool | None = None
    response_format: Mapping[str, Any] | None = None
    """A JSON Schema the reply must follow (structured output), as ``{"name": ..., "schema": ...}``."""
    timeout: float | None = None
    incremental: bool | None = None
    """Whether the caller consumes the reply as it is generated. None: unknown (the default). False
    (set by the agent when nobody streams its events): a model whose streaming is automatic asks
    for the whole reply at once, which costs less CPU than parsing a stream of chunks."""
    extra: Mapping[str, Any] = field(default_factory=dict)

    def merge(self, override: GenerateOptions | None) -> GenerateOptions:
        """These options with every non-None field of `override` laid over them."""
        if override is None:
            return self
        changes: dict[str, Any] = {}
        for f in fields(override):
            value = getattr(override, f.name)
            if f.name == "extra":
                if value:
                    changes["extra"] = {**self.extra, **value}
            elif value is not None:
                changes[f.name] = value
        return replace(self, **changes) if changes else self


DEFAULT_OPTIONS = GenerateOptions()


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One request to a model: the prompt messages, the tool schemas and the options."""

    messages: list[Msg]
    tools: list[ToolSchema]
    options: GenerateOptions = DEFAULT_OPTIONS

    @property
    def last_user_text(self) -> str:
        """Text of the last user message holding text (handy in scripted functions)."""
        for msg in reversed(self.messages):
            if msg.role == "user" and msg.text:
                return msg.text
        return ""


class ChatModel(abc.ABC):
    """A chat model. Adapters implement `stream`; everything else has a default.

    Capability facts are class attributes so the runtime can decide without a call (e.g. use the
    text tool protocol when `supports_native_tools` is False).
    """

    provider: ClassVar[str] = "unknown"
    supports_native_tools: ClassVar[bool] = True
    supports_structured_output: ClassVar[bool] = False
    supports_vision: ClassVar[bool] = False
    supports_thinking: ClassVar[bool] = False
    price_provider: ClassVar[str | None] = None
    """The provider's id in the genai-prices table (`agentrt.model.pricing`); None: not listed there."""

    model_name: str = "unknown"
    options: GenerateOptions = DEFAULT_OPTIONS
    price: ModelPrice | None = None
    """This model's own price (`agentrt.model.pricing.ModelPrice`), over the genai-prices table's."""

    @abc.abstractmethod
    def stream(
        self, messages: Sequence[Msg], tools: Sequence[ToolSchema] = (), options: GenerateOptions | None = None
    ) -> AsyncIterator[ChatResponse]:
        """Stream the reply to `messages` as chunks."""

    async def whole_reply(
        self, messages: Sequence[Msg], tools: Sequence[ToolSchema] = (), options: GenerateOptions | None = None
    ) -> Sequence[ChatResponse] | None:
        """The reply's chunks all at once, for a call this model answers whole; None: iterate `stream`.

        A shortcut for callers that do not consume the reply as it is generated (the agent loop of a
        call nobody streams): one coroutine per model layer instead of an async generator, whose
        frame, ``asend`` object and finaliser registration live as long as the request. A model that
        returns chunks here returns what `stream` would have yielded for the same call; the default
        (None) always defers to `stream`.
        """
        return None

    async def generate(
        self, messages: Sequence[Msg], tools: Sequence[ToolSchema] = (), options: GenerateOptions | None = None
    ) -> Msg:
        """Run the model to completion and return the assistant message."""
        from agentrt.model._accumulate import ReplyAccumulator

        acc = ReplyAccumulator()
        async for chunk in self.stream(messages, tools, options):
            acc.add(chunk)
        return acc.message(name=None)

    def streams(self, options: GenerateOptions | None = None) -> bool:
        """Whether a call with `options` delivers the reply in chunks as it is generated.

        False means the reply arrives whole after the model finished, so a timeout between chunks
        must cover the whole generation (`RetryModel` uses its `whole_timeout` then).
        """
        return True

    @property
    def id(self) -> str:
        """``provider:model``."""
        return f"{self.provider}:{self.model_name}"

    async def aclose(self) -> None:  # noqa: B027 - optional hook with a no-op default
        """Release connections the model opened (idempotent)."""

    async def __aenter__(self) -> ChatModel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model_name!r})"
