"""The Chat Completions wire format, both ways, without HTTP.

`Msg` lists, tools and options become a request body; response JSON (streamed chunks or a whole
completion) becomes `ChatResponse`; provider errors become typed errors.

Pure functions and a small formatter object, no HTTP: the aiohttp transport is in `openai.py`.
Everything here runs once per request or once per streamed chunk, so it avoids generic helpers
(`dataclasses.asdict`, `GenerateOptions.merge` on empty defaults, regexes) on the hot path.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from agentrt import _json
from agentrt.errors import (
    ModelAPIError,
    UserError,
)
from agentrt.message import (
    AudioBlock,
    Base64Source,
    ContentBlock,
    ImageBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    TokenUsage,
    ToolResultBlock,
    ToolUseBlock,
    VideoBlock,
    token_count,
)
from agentrt.model._accumulate import META_RAW_ARGUMENTS
from agentrt.model.base import ChatResponse, GenerateOptions, ToolCallChunk, ToolSchema
from agentrt.model.providers._errors import classify_api_error, missing_version_hint, public_url
from agentrt.model.providers._retry_after import parse_retry_after

__all__ = [
    "META_EXTRA_CONTENT",
    "ChatCompletionsFormat",
    "StreamState",
    "api_error",
    "parse_chunk",
    "parse_completion",
    "parse_retry_after",
    "parse_usage",
    "stream_error",
]

logger = logging.getLogger("agentrt.model")

_orjson: Any
_Fragment: Any
try:
    import orjson as _orjson

    _Fragment = getattr(_orjson, "Fragment", None)  # orjson >= 3.9: JSON bytes written into a document as they are
except ImportError:  # pragma: no cover - orjson is a core dependency
    _orjson = _Fragment = None

WireMessage = dict[str, Any]
META_EXTRA_CONTENT = "extra_content"
"""ToolUseBlock metadata: a tool call's ``extra_content`` (Gemini's thought signature), sent back as it came."""

_FINISH = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
    "eos": "stop",  # Together, some compatible servers
    "eos_token": "stop",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",  # proxies in front of Anthropic models
    "tool_call": "tool_calls",
    "max_tokens": "length",
    "model_length": "length",  # Mistral
    "model_context_window_exceeded": "length",
    "safety": "content_filter",
    "refusal": "content_filter",
}
_AUDIO_FORMATS = {
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/vnd.wave": "wav",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
    "audio/mpeg3": "mp3",
}
_TOOL_CHOICES = frozenset(("auto", "none", "required"))
_RESPONSE_FORMAT_TYPES = frozenset(("json_schema", "json_object", "text"))
_CONTEXT_MARKERS = (
    "context_length_exceeded",
    "context length",
    "context window",
    "maximum context",
    "prompt is too long",
    "too many tokens",
    "input is too long",
)
_CACHE_LIMIT = 4096


@functools.lru_cache(maxsize=1024)
def _wire_name(name: str) -> str:
    # OpenAI rejects names with whitespace or any of <|\/> and longer than 64 characters.
    out = "".join("_" if ch.isspace() or ch in "<|\\/>" else ch for ch in name)
    return out[:64] or "_"


@functools.lru_cache(maxsize=256)
def _schema_name(name: str) -> str:
    out = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "_-") else "_" for ch in name)
    return out[:64] or "response"


def _media_url(source: str | Base64Source, kind: str) -> str:
    if isinstance(source, Base64Source):
        return f"data:{source.media_type};base64,{source.data}"
    scheme = source.partition(":")[0].lower() if ":" in source else ""
    if scheme not in ("http", "https", "data"):
        raise UserError(
            f"{kind} source {source[:80]!r} is not an http(s) or data: URL; the provider cannot read local "
            "files: load it and pass Base64Source(media_type=..., data=...)"
        )
    return source


def _image_part(block: ImageBlock) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": _media_url(block.source, "image")}}


def _audio_part(block: AudioBlock) -> dict[str, Any]:
    source = block.source
    if not isinstance(source, Base64Source):
        raise UserError(
            "Chat Completions accepts audio only inline: pass AudioBlock(source=Base64Source(media_type='audio/wav' "
            f"or 'audio/mpeg', data=...)), not the URL {source[:80]!r}"
        )
    fmt = _AUDIO_FORMATS.get(source.media_type.lower())
    if fmt is None:
        raise UserError(f"Chat Completions accepts wav or mp3 audio, not {source.media_type!r}; convert the clip first")
    return {"type": "input_audio", "input_audio": {"data": source.data, "format": fmt}}


def _video_error() -> UserError:
    return UserError(
        "Chat Completions has no video input; send frames as ImageBlocks, or use a provider that takes video (gemini)"
    )


def _tool_choice(choice: str | Mapping[str, Any]) -> Any:
    if isinstance(choice, str):
        if choice in _TOOL_CHOICES:
            return choice
        if choice == "any":
            return "required"
        return {"type": "function", "function": {"name": choice}}
    if "type" in choice:
        return dict(choice)
    name = choice.get("name")
    if not isinstance(name, str) or not name:
        raise UserError(f"tool_choice must be 'auto', 'none', 'required' or {{'name': tool_name}}, not {choice!r}")
    return {"type": "function", "function": {"name": name}}


def _response_format(fmt: Mapping[str, Any]) -> dict[str, Any]:
    if fmt.get("type") in _RESPONSE_FORMAT_TYPES:
        return dict(fmt)  # already in wire form
    if "schema" in fmt:
        schema = fmt["schema"]
        name = fmt.get("name") or "response"
        strict = fmt.get("strict", False)
    else:
        schema, name, strict = fmt, fmt.get("title") or "response", False
    return {
        "type": "json_schema",
        "json_schema": {"name": _schema_name(str(name)), "schema": dict(schema), "strict": bool(strict)},
    }


def _uses_max_completion_tokens(model_name: str) -> bool:
    name = model_name.rsplit("/", 1)[-1].lower()
    return name.startswith(("o1", "o3", "o4", "gpt-5"))


class ChatCompletionsFormat:
    """Turns agentrt requests into Chat Completions bodies for one model (with its settings).

    Formatted messages and tools are cached by object identity (both are immutable), so an agent
    step re-serialises only the messages added since the previous step; the cache holds the
    objects it describes, so an id can never be reused while its entry lives. `encode` caches a
    message as its JSON bytes: a cached message is then nothing for the garbage collector (wire
    dicts are, for as long as they are cached), and a request only encodes the messages new to it.
    """

    __slots__ = (
        "_json_cache",
        "_msg_cache",
        "_tool_cache",
        "_wire_cache",
        "max_tokens_param",
        "provider",
        "send_names",
        "send_reasoning",
    )

    def __init__(
        self,
        *,
        provider: str = "openai",
        send_names: bool = True,
        send_reasoning: bool = False,
        max_tokens_param: str = "max_tokens",
    ) -> None:
        self.provider = provider
        self.send_names = send_names
        self.send_reasoning = send_reasoning
        self.max_tokens_param = max_tokens_param
        self._msg_cache: dict[int, Msg] = {}  # the messages the two caches below describe, by id
        self._wire_cache: dict[int, WireMessage | list[WireMessage]] = {}  # one wire message unwrapped
        self._json_cache: dict[int, bytes] = {}  # the wire messages as JSON, comma-separated
        self._tool_cache: dict[int, tuple[ToolSchema, dict[str, Any]]] = {}

    # -- messages -----------------------------------------------------------------------------
    def messages(self, messages: Sequence[Msg]) -> list[WireMessage]:
        """The wire messages for `messages`, in order."""
        out: list[WireMessage] = []
        cache = self._msg_cache
        wires = self._wire_cache
        turn_start = _current_turn_start(messages) if self.send_reasoning else 0
        for i, msg in enumerate(messages):
            wire = wires.get(id(msg)) if cache.get(id(msg)) is msg else None
            if wire is None:
                made = self.message(msg)
                wire = made[0] if len(made) == 1 else made
                self._keep(msg)
                wires[id(msg)] = wire
            if isinstance(wire, list):
                out.extend(wire)
            elif i < turn_start and "reasoning_content" in wire:
                # Reasoning goes back only within the current turn (DeepSeek needs it between tool
                # calls of one turn and ignores or rejects it from earlier turns).
                out.append({k: v for k, v in wire.items() if k != "reasoning_content"})
            else:
                out.append(wire)
        return out

    def _keep(self, msg: Msg) -> None:
        """Hold `msg` while cache entries describe it (its id cannot be reused meanwhile); evict the oldest."""
        cache = self._msg_cache
        if cache.get(id(msg)) is msg:
            return
        if len(cache) >= _CACHE_LIMIT:
            oldest = next(iter(cache))
            del cache[oldest]
            self._wire_cache.pop(oldest, None)
            self._json_cache.pop(oldest, None)
        cache[id(msg)] = msg

    def _encoded_messages(self, messages: Sequence[Msg]) -> list[Any]:
        """`messages` as `orjson.Fragment`s of their JSON, each message encoded once while it is cached."""
        out: list[Any] = []
        cache = self._msg_cache
        encoded = self._json_cache
        for msg in messages:
            raw = encoded.get(id(msg)) if cache.get(id(msg)) is msg else None
            if raw is None:
                parts = [_json.dumps_bytes(wire) for wire in self.message(msg)]
                # orjson's bytes keep its 4 KiB output buffer whatever their length: cache a right-sized copy
                raw = bytes(memoryview(parts[0])) if len(parts) == 1 else b",".join(parts)
                self._keep(msg)
                encoded[id(msg)] = raw
            if raw:  # a message with nothing to send (an empty assistant reply) is left out
                out.append(_Fragment(raw))
        return out

    def message(self, msg: Msg) -> list[WireMessage]:
        """One `Msg` as wire messages (a user Msg with tool results becomes one ``tool`` message per result)."""
        name = _wire_name(msg.name) if self.send_names and msg.name else None
        if msg.role == "assistant":
            wire = self._assistant(msg, name)
            return [wire] if wire is not None else []
        out: list[WireMessage] = []
        parts: list[dict[str, Any]] = []
        for block in msg.content:
            kind = type(block)
            if kind is TextBlock:
                parts.append({"type": "text", "text": block.text})  # type: ignore[union-attr]
            elif kind is ToolResultBlock:
                out.append(self._tool_result(block, parts))  # type: ignore[arg-type]
            elif kind is ImageBlock:
                parts.append(_image_part(block))  # type: ignore[arg-type]
            elif kind is AudioBlock:
                parts.append(_audio_part(block))  # type: ignore[arg-type]
            elif kind is VideoBlock:
                raise _video_error()
            elif kind is ToolUseBlock:
                raise UserError(
                    f"a {msg.role!r} message holds a tool call ({block.name!r}); "  # type: ignore[union-attr]
                    "tool calls belong in assistant messages"
                )
            # ThinkingBlocks outside assistant messages carry nothing the provider accepts.
        if not parts:
            return out
        user: WireMessage
        if msg.role == "system":
            if any(p["type"] != "text" for p in parts):
                raise UserError("a system message can hold only text; put images and audio in a user message")
            user = {"role": "system", "content": "\n".join(p["text"] for p in parts)}
        elif all(p["type"] == "text" for p in parts):
            text = parts[0]["text"] if len(parts) == 1 else "\n".join(p["text"] for p in parts)
            user = {"role": "user", "content": text}
        else:
            user = {"role": "user", "content": parts}
        if name is not None:
            user["name"] = name
        out.append(user)
        return out

    def _assistant(self, msg: Msg, name: str | None) -> WireMessage | None:
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        thinking: list[str] = []
        for block in msg.content:
            kind = type(block)
            if kind is TextBlock:
                texts.append(block.text)  # type: ignore[union-attr]
            elif kind is ToolUseBlock:
                calls.append(_tool_call(block))  # type: ignore[arg-type]
            elif kind is ThinkingBlock:
                thinking.append(block.thinking)  # type: ignore[union-attr]
            # Assistant content parts are text only: generated media cannot be sent back.
        if not texts and not calls:
            return None
        wire: WireMessage = {"role": "assistant", "content": "\n".join(texts) if texts else None}
        if calls:
            wire["tool_calls"] = calls
        if thinking and self.send_reasoning:
            wire["reasoning_content"] = "".join(thinking)
        if name is not None:
            wire["name"] = name
        return wire

    def _tool_result(self, block: ToolResultBlock, parts: list[dict[str, Any]]) -> WireMessage:
        output = block.output
        if isinstance(output, str):
            return {"role": "tool", "tool_call_id": block.id, "content": output}
        texts: list[str] = []
        media: list[dict[str, Any]] = []
        for item in output:
            kind = type(item)
            if kind is TextBlock:
                texts.append(item.text)  # type: ignore[union-attr]
            elif kind is ImageBlock:
                media.append(_image_part(item))  # type: ignore[arg-type]
            elif kind is AudioBlock:
                media.append(_audio_part(item))  # type: ignore[arg-type]
            elif kind is VideoBlock:
                raise _video_error()
            else:
                texts.append(_json.dumps(item.to_dict()))
        text = "\n".join(texts)
        if media:
            # Tool messages take text only: the media follow in a user message after the tool messages.
            note = f"[{len(media)} attachment(s) from this result follow in the next message]"
            text = f"{text}\n{note}" if text else note
            parts.append({"type": "text", "text": f"Attachments returned by tool {block.name!r} (call {block.id}):"})
            parts.extend(media)
        return {"role": "tool", "tool_call_id": block.id, "content": text}

    # -- tools and options ----------------------------------------------------------------------
    def tools(self, tools: Sequence[ToolSchema]) -> list[dict[str, Any]]:
        """Tool schemas as ``{"type": "function", "function": {...}}`` entries."""
        out: list[dict[str, Any]] = []
        cache = self._tool_cache
        for schema in tools:
            hit = cache.get(id(schema))
            if hit is not None and hit[0] is schema:
                out.append(hit[1])
                continue
            fn: dict[str, Any] = {"name": schema.name}
            if schema.description:
                fn["description"] = schema.description
            fn["parameters"] = _plain(schema.parameters)
            if schema.strict:
                fn["strict"] = True
            wire = {"type": "function", "function": fn}
            if len(cache) >= _CACHE_LIMIT:
                del cache[next(iter(cache))]
            cache[id(schema)] = (schema, wire)
            out.append(wire)
        return out

    def body(
        self,
        model: str,
        messages: Sequence[Msg],
        tools: Sequence[ToolSchema],
        options: GenerateOptions,
        *,
        stream: bool,
        stream_usage: bool,
    ) -> dict[str, Any]:
        """The request body. ``options.extra`` keys ``openai_X`` (or ``<provider>_X``) set ``X``; None removes it."""
        body: dict[str, Any] = {"model": model, "messages": self.messages(messages)}
        if tools:
            body["tools"] = self.tools(tools)
            if options.tool_choice is not None:
                body["tool_choice"] = _tool_choice(options.tool_choice)
            if options.parallel_tool_calls is not None:
                body["parallel_tool_calls"] = options.parallel_tool_calls
        if options.temperature is not None:
            body["temperature"] = options.temperature
        if options.top_p is not None:
            body["top_p"] = options.top_p
        if options.max_tokens is not None:
            body[self.max_tokens_param] = options.max_tokens
        if options.stop:
            body["stop"] = [options.stop] if isinstance(options.stop, str) else list(options.stop)
        if options.seed is not None:
            body["seed"] = options.seed
        if options.response_format:
            body["response_format"] = _response_format(options.response_format)
        if stream:
            body["stream"] = True
            if stream_usage:
                body["stream_options"] = {"include_usage": True}
        if options.extra:
            self._apply_extra(body, options.extra)
        return body

    def encode(
        self,
        model: str,
        messages: Sequence[Msg],
        tools: Sequence[ToolSchema],
        options: GenerateOptions,
        *,
        stream: bool,
        stream_usage: bool,
    ) -> tuple[bytes, bool]:
        """`body` as JSON bytes, and whether it asks for a stream (``openai_stream`` extras decide last).

        The messages go in as the JSON cached for each one (`orjson.Fragment`), so a request
        encodes only what is new to it. With reasoning sent back (stripped from earlier turns per
        request) or without orjson, the body is built and encoded whole.
        """
        if _Fragment is None or self.send_reasoning:
            whole = self.body(model, messages, tools, options, stream=stream, stream_usage=stream_usage)
            return _json.dumps_bytes(whole), whole.get("stream") is True
        body = self.body(model, (), tools, options, stream=stream, stream_usage=stream_usage)
        streaming = body.get("stream") is True
        body["messages"] = self._encoded_messages(messages)
        try:
            data: bytes = _orjson.dumps(body, option=_orjson.OPT_NON_STR_KEYS)
        except TypeError:  # a value orjson cannot write (in options.extra): the general encoder
            whole = self.body(model, messages, tools, options, stream=stream, stream_usage=stream_usage)
            data = _json.dumps_bytes(whole)
        return data, streaming

    def _apply_extra(self, body: dict[str, Any], extra: Mapping[str, Any]) -> None:
        """Set (or, for None, remove) the body keys named by ``openai_X`` / ``<provider>_X`` extras."""
        own = self.provider + "_"
        for key, value in extra.items():
            if key.startswith("openai_"):
                key = key[7:]
            elif key.startswith(own):
                key = key[len(own) :]
            else:
                continue
            if value is None:
                body.pop(key, None)
            else:
                body[key] = value
        if body.get("stream") is not True:
            body.pop("stream_options", None)


def _current_turn_start(messages: Sequence[Msg]) -> int:
    """Index of the last user message that is user input (not only tool results); 0 if none."""
    for i in range(len(messages) - 1, -1, -1):
        msg = messages[i]
        if msg.role == "user" and any(type(b) is not ToolResultBlock for b in msg.content):
            return i
    return 0


def _plain(value: Any) -> Any:
    # Tool schemas may hold read-only mappings or tuples; orjson serialises plain dicts and lists only.
    if type(value) is dict:
        if all(type(v) in (str, int, float, bool) or v is None for v in value.values()):
            return value
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _tool_call(block: ToolUseBlock) -> dict[str, Any]:
    raw = block.metadata.get(META_RAW_ARGUMENTS) if block.metadata else None
    # Arguments the model garbled go back verbatim, so it can see (and fix) what it sent.
    arguments = raw if isinstance(raw, str) else _json.dumps(_plain(block.input))
    wire: dict[str, Any] = {
        "id": block.id,
        "type": "function",
        "function": {"name": block.name, "arguments": arguments},
    }
    extra = block.metadata.get(META_EXTRA_CONTENT) if block.metadata else None
    if extra:
        wire["extra_content"] = _plain(extra)  # Gemini wants its thought signature back on the call
    return wire


# --------------------------------------------------------------------------------------------------
# responses
# --------------------------------------------------------------------------------------------------
def parse_usage(usage: Mapping[str, Any]) -> TokenUsage:
    """Chat Completions ``usage`` (with cached and reasoning token details) as `TokenUsage`.

    Counts from the wire are untrusted: each becomes a non-negative int (`token_count`).
    """
    cached = 0
    details = usage.get("prompt_tokens_details")
    if isinstance(details, Mapping):
        cached = token_count(details.get("cached_tokens"))
    if not cached:
        cached = token_count(usage.get("prompt_cache_hit_tokens"))  # DeepSeek
    reasoning = 0
    details = usage.get("completion_tokens_details")
    if isinstance(details, Mapping):
        reasoning = token_count(details.get("reasoning_tokens"))
    return TokenUsage(
        input_tokens=token_count(usage.get("prompt_tokens")),
        output_tokens=token_count(usage.get("completion_tokens")),
        cache_read_tokens=cached,
        reasoning_tokens=reasoning,
    )


class StreamState:
    """What one reply's parser must remember across chunks.

    Tool-call deltas are mapped to stable call indexes here, because servers disagree on how to
    say which call a delta belongs to: OpenAI sends ``index`` (and the ``id`` once), Gemini's
    endpoint and several proxies send no ``index``, Ollama sends ``index: 0`` for every call with
    distinct ids. The rule: a known ``id`` continues its call and a new one starts a call (unless
    it is the first id seen at an ``index`` whose call began without one); a known ``id`` at an
    ``index`` not seen yet starts a call too (a model that repeats an id for two calls: each must
    run); without an id, the ``index`` decides; with neither, the delta continues the last call,
    unless it names a function while the last call already has a name (then it is the next call,
    sent whole).
    """

    __slots__ = ("by_id", "by_index", "calls", "ids", "last", "named", "refused", "with_id")

    def __init__(self) -> None:
        self.calls = 0
        self.last = -1
        self.by_id: dict[str, int] = {}
        self.by_index: dict[Any, int] = {}
        self.ids: dict[int, str] = {}
        self.with_id: set[int] = set()
        self.named: set[int] = set()
        self.refused = False

    def call_index(self, wire_index: Any, call_id: str | None, name: str | None) -> int:
        """Our index for one tool-call delta."""
        if call_id:
            bound = self.by_index.get(wire_index) if wire_index is not None else None
            if bound is not None and self.ids.get(bound) == call_id:
                index: int | None = bound
            else:
                index = self.by_id.get(call_id)
                if index is not None and wire_index is not None and bound is None:
                    index = None  # the id again at a new index: another call with a repeated id
            if index is None:
                index = bound if bound is not None else -1
                if index < 0 or index in self.with_id:
                    index = self._new()
                # else: the id arrives after its call began at this index
                self.by_id[call_id] = index
                self.ids[index] = call_id
                self.with_id.add(index)
            if wire_index is not None:
                self.by_index[wire_index] = index
        elif wire_index is not None:
            index = self.by_index.get(wire_index)
            if index is None:
                index = self.by_index[wire_index] = self._new()
        elif self.last < 0 or (name and self.last in self.named):
            index = self._new()
        else:
            index = self.last
        if name:
            self.named.add(index)
        self.last = index
        return index

    def _new(self) -> int:
        self.calls += 1
        return self.calls - 1

    def finish(self, reason: Any) -> str:
        """The finish reason, corrected: tool calls end with "tool_calls" and refusals with "content_filter"."""
        finish = _FINISH.get(reason)
        if finish is None:
            finish = _FINISH.get(reason.lower(), reason) if isinstance(reason, str) else str(reason)
        if finish == "stop":
            if self.calls:
                return "tool_calls"  # Gemini, Ollama and a forced tool_choice say "stop"
            if self.refused:
                return "content_filter"
        return finish


class _LoneChunk(StreamState):
    """State for a chunk read on its own: tool calls keep their wire ``index`` (else their position)."""

    __slots__ = ()

    def call_index(self, wire_index: Any, call_id: str | None, name: str | None) -> int:
        position = self._new()
        return wire_index if type(wire_index) is int else position


def _tool_call_chunk(call: dict[str, Any], fn: dict[str, Any], index: int, call_id: Any, name: Any) -> ToolCallChunk:
    extra = call.get("extra_content")
    metadata = {META_EXTRA_CONTENT: extra} if extra else None
    call_id = call_id if call_id and type(call_id) is str else None
    name = name if name and type(name) is str else None
    args = fn.get("arguments")
    if args is None or type(args) is str:
        return ToolCallChunk(index=index, id=call_id, name=name, arguments=args or "", metadata=metadata)
    if isinstance(args, dict):  # parsed arguments (several compatible servers)
        return ToolCallChunk(index=index, id=call_id, name=name, input=args, metadata=metadata)
    # A list or a number: kept as text, so the accumulator reports it to the model as invalid.
    return ToolCallChunk(index=index, id=call_id, name=name, arguments=_json.dumps(args), metadata=metadata)


def _stream_calls(calls: Any, state: StreamState) -> tuple[ToolCallChunk, ...]:
    out: list[ToolCallChunk] = []
    for call in calls if type(calls) is list else (calls,):
        if type(call) is not dict:
            continue
        fn = call.get("function")
        if type(fn) is not dict:
            fn = call  # a few servers put name and arguments on the call itself
        name = fn.get("name")
        call_id = call.get("id")
        index = state.call_index(
            call.get("index"),
            call_id if type(call_id) is str else None,
            name if type(name) is str else None,
        )
        args = fn.get("arguments")
        if (args is None or type(args) is str) and "extra_content" not in call:
            # The common delta (an argument piece), built here rather than in _tool_call_chunk.
            out.append(
                ToolCallChunk(
                    index=index,
                    id=call_id if call_id and type(call_id) is str else None,
                    name=name if name and type(name) is str else None,
                    arguments=args or "",
                )
            )
        else:
            out.append(_tool_call_chunk(call, fn, index, call_id, name))
    return tuple(out)


def _whole_calls(calls: Any) -> tuple[ToolCallChunk, ...]:
    # A whole message: each entry is one call, whatever "index" it carries (some servers send 0 for all).
    out: list[ToolCallChunk] = []
    for call in calls if type(calls) is list else (calls,):
        if isinstance(call, dict):
            fn = call.get("function")
            if not isinstance(fn, dict):
                fn = call
            out.append(_tool_call_chunk(call, fn, len(out), call.get("id"), fn.get("name")))
    return tuple(out)


def _plain_text(value: Any) -> str:
    """Text from a string, a ``{"text": ...}``/``{"value": ...}`` object, or a list of those."""
    if type(value) is str:
        return value
    if isinstance(value, dict):
        return _plain_text(value.get("text", value.get("value")))
    if isinstance(value, list):
        return "".join(_plain_text(v) for v in value)
    return ""


def _media_source(url: str) -> str | Base64Source:
    if url[:5].lower() == "data:":
        header, sep, data = url.partition(",")
        if sep and header.endswith(";base64"):
            return Base64Source(media_type=header[5:-7] or "application/octet-stream", data=data)
    return url


def _image_block(part: dict[str, Any]) -> ImageBlock | None:
    value = part.get("image_url") or part.get("url")
    if isinstance(value, dict):
        value = value.get("url")
    if isinstance(value, str) and value:
        return ImageBlock(source=_media_source(value))
    data = part.get("b64_json") or part.get("data")
    if isinstance(data, str) and data:
        media_type = part.get("media_type") or part.get("mime_type")
        return ImageBlock(source=Base64Source(media_type=str(media_type or "image/png"), data=data))
    return None


_RARE_DELTA_KEYS = frozenset(("refusal", "tool_calls", "function_call", "images"))
_TEXT_PARTS = frozenset(("text", "output_text"))
_THINKING_PARTS = frozenset(("thinking", "reasoning", "reasoning_text", "reasoning_content"))
_IMAGE_PARTS = frozenset(("image_url", "output_image", "image"))


def _content_parts(parts: Any, state: StreamState) -> tuple[str, str, str | None, tuple[ContentBlock, ...]]:
    """``content`` sent as a list of parts: (text, thinking, thinking signature, other blocks)."""
    texts: list[str] = []
    thoughts: list[str] = []
    signature: str | None = None
    blocks: list[ContentBlock] = []
    for part in parts if isinstance(parts, list) else (parts,):
        if type(part) is str:
            texts.append(part)
            continue
        if not isinstance(part, dict):
            logger.debug("openai: ignoring a content part of type %s", type(part).__name__)
            continue
        kind = part.get("type")
        if kind in _TEXT_PARTS or (kind is None and "text" in part):
            texts.append(_plain_text(part.get("text")))
        elif kind == "refusal":
            texts.append(_plain_text(part.get("refusal", part.get("text"))))
            state.refused = True
        elif kind in _THINKING_PARTS:
            # {"type": "thinking", "thinking": "..." | [{"type": "text", "text": ...}]} (Mistral,
            # Anthropic-style proxies), {"type": "reasoning", "text": ...} and the like.
            value = part[kind] if kind in part else part.get("thinking", part.get("text"))
            thoughts.append(_plain_text(value))
            sig = part.get("signature")
            if sig and type(sig) is str:
                signature = sig
        elif kind in _IMAGE_PARTS:
            block = _image_block(part)
            if block is not None:
                blocks.append(block)
        else:
            logger.debug("openai: ignoring a content part of type %r", kind)
    return "".join(texts), "".join(thoughts), signature, tuple(blocks)


def _images(images: Any) -> tuple[ContentBlock, ...]:
    # OpenRouter (and gateways like it) put generated images beside the text: "images": [{image_url}].
    out: list[ContentBlock] = []
    for image in images if isinstance(images, list) else (images,):
        block = _image_block(image) if isinstance(image, dict) else None
        if block is not None:
            out.append(block)
    return tuple(out)


def _refusal(value: Any, state: StreamState) -> str:
    state.refused = True
    return _plain_text(value)


def _choice_usage(obj: Mapping[str, Any], choice: Mapping[str, Any]) -> Any:
    """Usage sent elsewhere than at the top level: inside the choice (Kimi) or in ``x_groq`` (Groq)."""
    usage = choice.get("usage")
    if not usage:
        groq = obj.get("x_groq")
        if isinstance(groq, dict):
            usage = groq.get("usage")
    return usage if isinstance(usage, dict) else None


def parse_chunk(obj: Mapping[str, Any], state: StreamState | None = None) -> ChatResponse | None:
    """One ``chat.completion.chunk`` as a `ChatResponse`, or None when it carries nothing (role-only chunks).

    `state` is the reply's `StreamState` (one per stream); without it the chunk is read on its own
    (tool calls keep the ``index`` the server gave them). This runs for every chunk of every reply:
    the common chunks (a text or reasoning piece) return early, and the rarer shapes cost one
    set-disjointness test together (then `_general_chunk` reads them).
    """
    usage = obj.get("usage")
    choices = obj.get("choices")
    if not choices:
        return _usage_chunk(obj, usage)
    choice = choices[0]
    if choice.get("index"):  # the choices of n > 1 beyond the first are ignored
        return _usage_chunk(obj, usage)
    reason = choice.get("finish_reason")
    delta = choice.get("delta")
    if delta is None:
        delta = choice.get("message")  # a proxy sending whole messages as chunks
    if not delta:
        return _general_chunk(obj, choice, delta, state, reason, usage)
    content = delta.get("content")
    if len(delta) == 1 and type(content) is str:  # {"content": "..."}: most chunks
        if not (reason or usage):
            return ChatResponse(text=content, raw=obj) if content else None
        return _general_chunk(obj, choice, delta, state, reason, usage, content)
    if state is None:
        state = _LoneChunk()
    text = thinking = ""
    signature: str | None = None
    blocks: tuple[ContentBlock, ...] = ()
    if content:
        if type(content) is str:
            text = content
        else:  # a list of parts
            text, thinking, signature, blocks = _content_parts(content, state)
    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
    if reasoning:
        if type(reasoning) is not str:
            reasoning = _plain_text(reasoning)
        thinking = reasoning + thinking if thinking else reasoning
    if _RARE_DELTA_KEYS.isdisjoint(delta) and not (reason or usage or signature or blocks):
        # a text or reasoning piece (the disjointness test is one C-level pass instead of four lookups)
        if thinking:
            return ChatResponse(text=text, thinking=thinking, raw=obj)
        return ChatResponse(text=text, raw=obj) if text else None
    return _general_chunk(obj, choice, delta, state, reason, usage, text, thinking, signature, blocks)


def _usage_chunk(obj: Mapping[str, Any], usage: Any) -> ChatResponse | None:
    """A chunk without the first choice (no choices, or another of n > 1): only its usage counts."""
    return ChatResponse(usage=parse_usage(usage), raw=obj) if usage else None


def _general_chunk(
    obj: Mapping[str, Any],
    choice: Mapping[str, Any],
    delta: Any,
    state: StreamState | None,
    reason: Any,
    usage: Any,
    text: str = "",
    thinking: str = "",
    signature: str | None = None,
    blocks: tuple[ContentBlock, ...] = (),
) -> ChatResponse | None:
    """Any chunk but a text or reasoning piece: the rare delta keys, then the finish reason and usage.

    `text`, `thinking`, `signature` and `blocks` are what `parse_chunk` already read from the delta.
    """
    if state is None:
        state = _LoneChunk()
    calls: tuple[ToolCallChunk, ...] = ()
    if delta and not _RARE_DELTA_KEYS.isdisjoint(delta):
        if not text and delta.get("refusal"):
            text = _refusal(delta["refusal"], state)
        tool_calls = delta.get("tool_calls")
        if tool_calls:
            calls = _stream_calls(tool_calls, state)
        elif delta.get("function_call"):  # the legacy functions API
            calls = _stream_calls({"function": delta["function_call"]}, state)
        if delta.get("images"):
            blocks += _images(delta["images"])
    if reason:
        reason = state.finish(reason)
        if not usage:
            usage = _choice_usage(obj, choice)
    if not (text or thinking or signature or calls or blocks or reason or usage):
        return None
    return ChatResponse(
        text=text,
        thinking=thinking,
        thinking_signature=signature,
        tool_calls=calls,
        blocks=blocks,
        usage=parse_usage(usage) if usage else None,
        finish_reason=reason,
        raw=obj,
    )


def parse_completion(obj: Mapping[str, Any]) -> ChatResponse:
    """A whole ``chat.completion`` (non-streaming) as one `ChatResponse`."""
    state = StreamState()
    text = thinking = ""
    signature: str | None = None
    calls: tuple[ToolCallChunk, ...] = ()
    blocks: tuple[ContentBlock, ...] = ()
    finish = "stop"
    usage = obj.get("usage")
    choices = obj.get("choices")
    if choices and type(choices) is list:
        choice = choices[0]
        message = choice.get("message") or choice.get("delta") or {}
        content = message.get("content")
        if content:
            if type(content) is str:
                text = content
            else:
                text, thinking, signature, blocks = _content_parts(content, state)
        if not text and message.get("refusal"):
            text = _refusal(message["refusal"], state)
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if reasoning:
            reasoning = _plain_text(reasoning)
            thinking = reasoning + thinking if thinking else reasoning
        tool_calls = message.get("tool_calls") or (
            {"function": message["function_call"]} if message.get("function_call") else None
        )
        if tool_calls:
            calls = _whole_calls(tool_calls)
            state.calls = len(calls)
        if message.get("images"):
            blocks += _images(message["images"])
        finish = state.finish(choice.get("finish_reason") or "stop")
        if not usage:
            usage = _choice_usage(obj, choice)
    return ChatResponse(
        text=text,
        thinking=thinking,
        thinking_signature=signature,
        tool_calls=calls,
        blocks=blocks,
        usage=parse_usage(usage) if usage else None,
        finish_reason=finish,
        raw=obj,
    )


# --------------------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------------------
def _error_details(body: Any) -> tuple[str, str | None]:
    """The provider's message and error code from an error body (OpenAI, vLLM, Ollama and FastAPI shapes)."""
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping):
            message = error.get("message") or error.get("detail") or body.get("message") or body.get("detail")
            code = error.get("code") or error.get("type")
            return (str(message) if message else _json.dumps(_json.jsonable(body))[:500]), (
                str(code) if code is not None else None
            )
        if isinstance(error, str):
            return error, None
    if isinstance(body, str):
        return body.strip()[:500] or "(empty body)", None
    return _json.dumps(_json.jsonable(body))[:500], None


def api_error(
    *,
    provider: str,
    model: str,
    status: int,
    headers: Mapping[str, str],
    raw: bytes,
    api_key: str | None = None,
    key_env: str | None = None,
    url: str = "",
    base_url: str = "",
) -> ModelAPIError:
    """The typed error for an HTTP error response; the message never contains the API key.

    With `url` (the URL requested) the message names it; a 404 from a `base_url` without a
    version segment suggests adding ``/v1``.
    """
    text = raw.decode("utf-8", "replace")
    if api_key and api_key in text:
        text = text.replace(api_key, "***")
    body: Any
    try:
        body = _json.loads(text) if text.strip() else text
    except ValueError:
        body = text
    message, code = _error_details(body)
    where = f"{provider} model {model!r}: HTTP {status}" + (f" ({code})" if code else "")
    hint = f"; check the API key ({key_env} or api_key=...)" if key_env else "; check the API key"
    requested = f" (POST {public_url(url)})" if url else ""
    return classify_api_error(
        status,
        body,
        text=f"{where}: {message}{requested}{missing_version_hint(status, base_url)}",
        model=model,
        message=message,
        too_long=_CONTEXT_MARKERS,
        context_exceeded=code == "context_length_exceeded",
        retry_after=parse_retry_after(headers) if status == 429 else None,
        auth_hint=hint,
    )


def stream_error(*, provider: str, model: str, obj: Mapping[str, Any], api_key: str | None = None) -> ModelAPIError:
    """An ``{"error": ...}`` object sent inside a 200 stream or body (OpenRouter, vLLM and some proxies do this).

    The error's numeric ``code``, when it has one, becomes the status (so a 429 or 502 is retried).
    """
    error = obj.get("error")
    if not isinstance(error, Mapping) and obj.get("object") == "error":
        error = obj  # older vLLM: {"object": "error", "message": ..., "code": 400}
    status: int | None = None
    if isinstance(error, Mapping):
        code = error.get("code") or error.get("status")
        if isinstance(code, int) or (isinstance(code, str) and code.isdigit()):
            status = int(code)
    if status is not None and status >= 400:
        raw = _json.dumps_bytes(_json.jsonable(obj))
        return api_error(provider=provider, model=model, status=status, headers={}, raw=raw, api_key=api_key)
    message, code_text = _error_details(_json.jsonable(obj))
    if api_key and api_key in message:
        message = message.replace(api_key, "***")
    where = f"{provider} model {model!r}: error in the response stream" + (f" ({code_text})" if code_text else "")
    return ModelAPIError(f"{where}: {message}", status=None, body=_json.jsonable(obj), model=model)
