"""Messages and content blocks: the one normalised protocol every part of agentrt speaks.

`Msg` and the blocks are frozen, slotted dataclasses. Content lists are plain lists (so they
compare equal to list literals) and must be treated as read-only: build a new `Msg` with
`msg.replace(...)` instead of mutating one. `Msg.to_json()` / `Msg.from_json()` round-trip exactly.
"""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from os import urandom as _urandom
from typing import Any, ClassVar, Literal, TypeAlias, TypeVar, cast

from agentrt import _json
from agentrt.errors import InvalidTypeError, InvalidValueError

__all__ = [
    "AudioBlock",
    "Base64Source",
    "ContentBlock",
    "GenerateReason",
    "ImageBlock",
    "Msg",
    "Role",
    "TextBlock",
    "ThinkingBlock",
    "TokenUsage",
    "ToolResultBlock",
    "ToolResultState",
    "ToolUseBlock",
    "UserContent",
    "VideoBlock",
    "block_from_dict",
    "new_id",
]

Role: TypeAlias = Literal["user", "assistant", "system"]
ToolResultState: TypeAlias = Literal["success", "error", "denied", "interrupted"]
_ROLES = frozenset(("user", "assistant", "system"))
_RESULT_STATES = frozenset(("success", "error", "denied", "interrupted"))


def new_id() -> str:
    """A fresh random id (32 hex characters): the hex form of a random (version 4) UUID.

    Made from the random bytes directly: ``uuid.uuid4().hex`` builds a `UUID` object first, at
    three times the cost, and a run makes several ids.
    """
    raw = bytearray(_urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # RFC 4122 variant
    return raw.hex()


def _new_call_id() -> str:
    return "call_" + new_id()[:24]


class GenerateReason(enum.StrEnum):
    """Why an agent call returned."""

    STOP = "stop"
    """The model finished with a reply that asks for no tool."""
    MAX_ITERS = "max_iters"
    """The step budget ran out; the reply is a tool-free summary."""
    AWAITING_CONFIRMATION = "awaiting_confirmation"
    """A tool call waits for the user's approval."""
    AWAITING_EXTERNAL_EXECUTION = "awaiting_external_execution"
    """A tool call waits for the caller to run it and send the result."""
    INTERRUPTED = "interrupted"
    """The call was interrupted."""
    STRUCTURED_OUTPUT = "structured_output"
    """The reply carries the requested structured output."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Base64Source:
    """Inline binary media."""

    media_type: str
    """MIME type, e.g. ``image/png``."""
    data: str
    """Base64-encoded bytes."""


MediaSource: TypeAlias = "str | Base64Source"


def _source_to_json(source: str | Base64Source) -> Any:
    if isinstance(source, str):
        return source
    return {"type": "base64", "media_type": source.media_type, "data": source.data}


def _source_from_json(data: Any) -> str | Base64Source:
    if isinstance(data, str):
        return data
    if isinstance(data, Mapping) and data.get("type", "base64") == "base64":
        return Base64Source(media_type=data["media_type"], data=data["data"])
    raise InvalidValueError(f"not a media source: {data!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class TextBlock:
    """Plain text."""

    type: ClassVar[Literal["text"]] = "text"
    text: str

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of this block."""
        return {"type": "text", "text": self.text}


@dataclass(frozen=True, slots=True, kw_only=True)
class ThinkingBlock:
    """Model reasoning; `signature` is the provider's opaque proof, kept for the next turn."""

    type: ClassVar[Literal["thinking"]] = "thinking"
    thinking: str
    signature: str | None = None
    metadata: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of this block."""
        d: dict[str, Any] = {"type": "thinking", "thinking": self.thinking}
        if self.signature is not None:
            d["signature"] = self.signature
        if self.metadata is not None:
            d["metadata"] = dict(self.metadata)
        return d


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageBlock:
    """An image, by URL or inline base64."""

    type: ClassVar[Literal["image"]] = "image"
    source: str | Base64Source

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of this block."""
        return {"type": "image", "source": _source_to_json(self.source)}


@dataclass(frozen=True, slots=True, kw_only=True)
class AudioBlock:
    """An audio clip, by URL or inline base64."""

    type: ClassVar[Literal["audio"]] = "audio"
    source: str | Base64Source

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of this block."""
        return {"type": "audio", "source": _source_to_json(self.source)}


@dataclass(frozen=True, slots=True, kw_only=True)
class VideoBlock:
    """A video, by URL or inline base64."""

    type: ClassVar[Literal["video"]] = "video"
    source: str | Base64Source

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of this block."""
        return {"type": "video", "source": _source_to_json(self.source)}


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolUseBlock:
    """A tool call requested by the model."""

    type: ClassVar[Literal["tool_use"]] = "tool_use"
    id: str = field(default_factory=_new_call_id)
    name: str
    input: Mapping[str, Any] = field(default_factory=dict)
    metadata: Mapping[str, Any] | None = None
    """Provider data to carry across turns (e.g. Gemini thought signatures)."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of this block."""
        d: dict[str, Any] = {"type": "tool_use", "id": self.id, "name": self.name, "input": dict(self.input)}
        if self.metadata is not None:
            d["metadata"] = dict(self.metadata)
        return d


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResultBlock:
    """The result of one tool call; travels in a ``user``-role `Msg`."""

    type: ClassVar[Literal["tool_result"]] = "tool_result"
    id: str
    """The id of the `ToolUseBlock` this answers."""
    name: str
    output: str | list[ContentBlock]
    state: ToolResultState = "success"
    metadata: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.state not in _RESULT_STATES:
            raise InvalidValueError(
                f"ToolResultBlock.state must be one of {sorted(_RESULT_STATES)}, not {self.state!r}"
            )

    @property
    def text(self) -> str:
        """The output as text (text blocks joined by newlines)."""
        if isinstance(self.output, str):
            return self.output
        return "\n".join(b.text for b in self.output if isinstance(b, TextBlock))

    @property
    def is_error(self) -> bool:
        """True unless the tool ran successfully."""
        return self.state != "success"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of this block."""
        output: Any = self.output if isinstance(self.output, str) else [b.to_dict() for b in self.output]
        d: dict[str, Any] = {
            "type": "tool_result",
            "id": self.id,
            "name": self.name,
            "output": output,
            "state": self.state,
        }
        if self.metadata is not None:
            d["metadata"] = dict(self.metadata)
        return d


ContentBlock: TypeAlias = (
    TextBlock | ThinkingBlock | ImageBlock | AudioBlock | VideoBlock | ToolUseBlock | ToolResultBlock
)
_BLOCK_TYPES: tuple[type, ...] = (
    TextBlock,
    ThinkingBlock,
    ImageBlock,
    AudioBlock,
    VideoBlock,
    ToolUseBlock,
    ToolResultBlock,
)
B = TypeVar("B", bound=ContentBlock)


def block_from_dict(d: Mapping[str, Any]) -> ContentBlock:
    """Rebuild a content block from its JSON form."""
    kind = d.get("type")
    if kind == "text":
        return TextBlock(text=d["text"])
    if kind == "tool_use":
        return ToolUseBlock(id=d["id"], name=d["name"], input=d.get("input") or {}, metadata=d.get("metadata"))
    if kind == "tool_result":
        out = d.get("output", "")
        output: str | list[ContentBlock] = out if isinstance(out, str) else [block_from_dict(b) for b in out]
        return ToolResultBlock(
            id=d["id"], name=d["name"], output=output, state=d.get("state", "success"), metadata=d.get("metadata")
        )
    if kind == "thinking":
        return ThinkingBlock(thinking=d["thinking"], signature=d.get("signature"), metadata=d.get("metadata"))
    if kind == "image":
        return ImageBlock(source=_source_from_json(d["source"]))
    if kind == "audio":
        return AudioBlock(source=_source_from_json(d["source"]))
    if kind == "video":
        return VideoBlock(source=_source_from_json(d["source"]))
    raise InvalidValueError(f"unknown content block type {kind!r}")


def token_count(value: object) -> int:
    """`value` (a token count from a provider) as a non-negative int: what usage accounting may trust.

    A provider, or whatever answers in its place, is not trusted to send sane counts: a negative
    count would lower a call's running totals (and its cost) and reset its token limits, a NaN one
    would make every limit comparison false. So: an int stays (a negative one becomes 0), a finite
    float is truncated (a negative one becomes 0), anything else (NaN, infinities, bools, strings,
    None) is 0.
    """
    if type(value) is int:  # the common case, first
        return value if value >= 0 else 0
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return int(value) if value >= 0 else 0
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value > 0 else 0
    return 0


_TOKEN_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenUsage:
    """Token counts reported by a provider; `+` adds them up.

    Every count is a non-negative int (see `token_count`): a negative one becomes 0, a float is
    truncated, a NaN, infinity, bool or non-number is 0, so a hostile or broken provider cannot
    lower a call's totals or switch its token limits off.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    def __post_init__(self) -> None:
        for name in _TOKEN_FIELDS:
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                object.__setattr__(self, name, token_count(value))

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )

    def to_dict(self) -> dict[str, int]:
        """The JSON form (all five counts)."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "reasoning_tokens": self.reasoning_tokens,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TokenUsage:
        """Rebuild from `to_dict` output (missing counts are 0)."""
        return cls(
            input_tokens=int(d.get("input_tokens", 0)),
            output_tokens=int(d.get("output_tokens", 0)),
            cache_read_tokens=int(d.get("cache_read_tokens", 0)),
            cache_write_tokens=int(d.get("cache_write_tokens", 0)),
            reasoning_tokens=int(d.get("reasoning_tokens", 0)),
        )


#: Metadata keys the runtime reads and writes.
META_GENERATE_REASON = "generate_reason"
META_CONFIRM_RESULTS = "confirm_results"
META_STRUCTURED = "structured_output"


@dataclass(frozen=True, slots=True, kw_only=True)
class Msg:
    """One message: who said it, in which role, and what (a list of content blocks).

    ``Msg(role="user", content="hi")`` accepts a string as a shorthand for one `TextBlock`.
    """

    role: Role
    content: list[ContentBlock] = field(default_factory=list)
    name: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    id: str = field(default_factory=new_id)
    timestamp: float = field(default_factory=time.time)
    usage: TokenUsage | None = None
    """Tokens spent producing this message (assistant messages)."""

    def __post_init__(self) -> None:
        if self.role not in _ROLES:
            raise InvalidValueError(f"Msg.role must be 'user', 'assistant' or 'system', not {self.role!r}")
        content: Any = self.content
        if isinstance(content, str):
            object.__setattr__(self, "content", [TextBlock(text=content)])
        elif not isinstance(content, list):
            object.__setattr__(self, "content", list(content))
        for block in self.content:
            if not isinstance(block, _BLOCK_TYPES):
                raise InvalidTypeError(f"Msg.content holds {type(block).__name__!r}, which is not a content block")

    # -- constructors -------------------------------------------------------------------
    @classmethod
    def user(
        cls, content: str | UserContent | Sequence[str | UserContent], *, name: str | None = None, **metadata: Any
    ) -> Msg:
        """A user message: a text, or texts and media (`TextBlock`, `ImageBlock`, `AudioBlock`, `VideoBlock`).

        Tool results are returned with `Msg.tool_results`; tool calls and reasoning are assistant
        content. Anything else is refused with an error saying what to use instead.
        """
        return cls(role="user", content=_user_content(content), name=name, metadata=metadata)

    @classmethod
    def tool_results(cls, results: Iterable[ToolResultBlock] | ToolResultBlock, *, text: str = "") -> Msg:
        """The user message returning results of external tools (``ToolResultBlock(id=..., name=..., output=...)``)."""
        if isinstance(results, ToolResultBlock):
            results = [results]
        elif not isinstance(results, Iterable) or isinstance(results, (str, bytes, Mapping)):
            raise InvalidTypeError(f"Msg.tool_results takes a list of ToolResultBlocks, not {type(results).__name__!r}")
        blocks = list(results)
        for block in blocks:
            if not isinstance(block, ToolResultBlock):
                raise InvalidTypeError(f"Msg.tool_results takes ToolResultBlocks, not {type(block).__name__!r}")
        if not blocks:
            raise InvalidValueError("Msg.tool_results needs at least one ToolResultBlock")
        content: list[ContentBlock] = [*blocks, TextBlock(text=text)] if text else list(blocks)
        return cls(role="user", content=content)

    @classmethod
    def assistant(cls, text: str, *, name: str | None = None, **metadata: Any) -> Msg:
        """An assistant message holding `text`."""
        _require_text(text, "Msg.assistant")
        return cls(role="assistant", content=[TextBlock(text=text)], name=name, metadata=metadata)

    @classmethod
    def system(cls, text: str, *, name: str | None = None) -> Msg:
        """A system message holding `text`."""
        _require_text(text, "Msg.system")
        return cls(role="system", content=[TextBlock(text=text)], name=name)

    @classmethod
    def confirm(cls, results: Iterable[Any], *, text: str = "") -> Msg:
        """The message that answers pending tool approvals (see `ConfirmResult`)."""
        content: list[ContentBlock] = [TextBlock(text=text)] if text else []
        return cls(role="user", content=content, metadata={META_CONFIRM_RESULTS: list(results)})

    # -- accessors ----------------------------------------------------------------------
    @property
    def text(self) -> str:
        """All text blocks joined by newlines."""
        parts = [b.text for b in self.content if type(b) is TextBlock]
        return parts[0] if len(parts) == 1 else "\n".join(parts)

    def blocks(self, kind: type[B]) -> list[B]:
        """The blocks of one type, in order."""
        return [b for b in self.content if isinstance(b, kind)]

    def has(self, kind: type[ContentBlock]) -> bool:
        """Whether any block has this type."""
        return any(isinstance(b, kind) for b in self.content)

    @property
    def tool_calls(self) -> list[ToolUseBlock]:
        """The tool calls in this message."""
        return [b for b in self.content if type(b) is ToolUseBlock]

    @property
    def generate_reason(self) -> GenerateReason:
        """Why the call that produced this message returned (`STOP` unless the metadata says otherwise)."""
        value = self.metadata.get(META_GENERATE_REASON)
        if value is None:
            return GenerateReason.STOP
        return GenerateReason(value)

    def structured(self, model: type[Any] | None = None) -> Any:
        """The structured output of this reply, validated into `model` when given."""
        data = self.metadata.get(META_STRUCTURED)
        if data is None:
            raise InvalidValueError("this message carries no structured output (call with output=...)")
        if model is None:
            return data
        from pydantic import TypeAdapter

        return TypeAdapter(model).validate_python(data)

    def replace(self, **changes: Any) -> Msg:
        """A copy with some fields changed (the id is kept unless given)."""
        return replace(self, **changes)

    def with_metadata(self, **items: Any) -> Msg:
        """A copy with metadata items added or replaced."""
        return replace(self, metadata={**self.metadata, **items})

    # -- codec --------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form of this message."""
        d: dict[str, Any] = {
            "id": self.id,
            "role": self.role,
            "name": self.name,
            "content": [b.to_dict() for b in self.content],
            "metadata": _json.jsonable(self.metadata) if self.metadata else {},
            "timestamp": self.timestamp,
        }
        if self.usage is not None:
            d["usage"] = self.usage.to_dict()
        return d

    def to_json(self) -> str:
        """This message as a JSON string; `Msg.from_json` reverses it exactly."""
        return _json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Msg:
        """Rebuild a message from `to_dict` output."""
        usage = d.get("usage")
        return cls(
            id=d["id"] if "id" in d else new_id(),
            role=d["role"],
            name=d.get("name"),
            content=_content_from_json(d.get("content", [])),
            metadata=d.get("metadata") or {},
            timestamp=float(d["timestamp"]) if "timestamp" in d else time.time(),
            usage=TokenUsage.from_dict(usage) if usage is not None else None,
        )

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> Msg:
        """Rebuild a message from a JSON string or an already-parsed dict."""
        if isinstance(data, (str, bytes)):
            data = cast("Mapping[str, Any]", _json.loads(data))
        return cls.from_dict(data)


def _content_from_json(content: Any) -> list[ContentBlock]:
    if isinstance(content, str):
        return [TextBlock(text=content)]
    return [block_from_dict(b) for b in content]


def as_messages(value: str | Msg | Sequence[Msg] | None, *, name: str | None = None) -> list[Msg]:
    """Normalise an agent input to a list of messages, or raise `TypeError`."""
    if value is None:
        return []
    if isinstance(value, str):
        return [Msg(role="user", content=[TextBlock(text=value)], name=name)]
    if isinstance(value, Msg):
        return [value]
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        out: list[Msg] = []
        for item in value:
            if not isinstance(item, Msg):
                raise InvalidTypeError(f"input list holds {type(item).__name__!r}; every item must be a Msg")
            out.append(item)
        return out
    raise InvalidTypeError(f"input must be a str, a Msg or a list of Msg, not {type(value).__name__!r}")


UserContent: TypeAlias = TextBlock | ImageBlock | AudioBlock | VideoBlock
"""What a person can say: text and media (not tool calls, tool results or reasoning)."""
_USER_TYPES: tuple[type, ...] = (TextBlock, ImageBlock, AudioBlock, VideoBlock)


def _user_block(item: object) -> ContentBlock:
    """One piece of `Msg.user` content as a block, or a clear error for what is not user content."""
    if isinstance(item, str):
        return TextBlock(text=item)
    if isinstance(item, _USER_TYPES):
        return cast(ContentBlock, item)
    if isinstance(item, ToolResultBlock):
        raise InvalidTypeError(
            "Msg.user does not take tool results: return them with Msg.tool_results([ToolResultBlock(...)])"
        )
    if isinstance(item, (ToolUseBlock, ThinkingBlock)):
        raise InvalidTypeError(
            f"Msg.user does not take a {type(item).__name__}: tool calls and reasoning are assistant content "
            "(Msg(role='assistant', content=[...]))"
        )
    raise InvalidTypeError(
        f"Msg.user takes a str, or a list of str, TextBlock, ImageBlock, AudioBlock and VideoBlock, "
        f"not {type(item).__name__!r}"
    )


def _user_content(content: object) -> list[ContentBlock]:
    """`Msg.user` content as blocks: a text, one user block, or a list or tuple of them."""
    if isinstance(content, (str, *_BLOCK_TYPES)):
        return [_user_block(content)]
    if not isinstance(content, (list, tuple)):
        raise InvalidTypeError(
            f"Msg.user takes a str, or a list of str, TextBlock, ImageBlock, AudioBlock and VideoBlock, "
            f"not {type(content).__name__!r}"
        )
    if not content:
        raise InvalidValueError("Msg.user needs a text or at least one content block, not an empty list")
    return [_user_block(item) for item in content]


def _require_text(text: object, where: str) -> None:
    if not isinstance(text, str):
        hint = (
            "; return tool results with Msg.tool_results([...])"
            if isinstance(text, (list, tuple)) and any(isinstance(b, ToolResultBlock) for b in text)
            else "; build other content with Msg(role=..., content=[...])"
        )
        raise InvalidTypeError(f"{where} takes a str, not {type(text).__name__!r}{hint}")
