"""Anthropic Messages API adapter, on the official `anthropic` SDK.

`AnthropicChatModel` turns a `Msg` history into a Messages API request (top-level ``system``,
alternating ``user``/``assistant`` turns, ``tool_use``/``tool_result`` blocks, images, signed
``thinking`` blocks sent back unchanged, prompt-cache markers) and the streamed events back into
`ChatResponse` chunks. The SDK's own retries are off: agentrt's resilience wrappers retry.

The SDK runs on its aiohttp transport by default (``transport="aiohttp"``), which measured
faster than its default httpx transport for streamed replies (see docs/providers-anthropic-gemini.md).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, ClassVar, Literal, cast
from urllib.parse import urlsplit

try:
    import anthropic
except ImportError as exc:  # pragma: no cover - exercised only without the extra installed
    raise ImportError(
        f"the Anthropic provider needs the 'anthropic' package ({exc}): pip install 'agentrt[anthropic]'",
        name=exc.name,
    ) from exc

from agentrt.errors import (
    AuthenticationError,
    ModelConnectionError,
    ModelError,
    ModelTimeoutError,
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
from agentrt.model.base import ChatModel, ChatResponse, GenerateOptions, ToolCallChunk, ToolSchema
from agentrt.model.providers._errors import (
    classify_api_error,
    connection_cause,
    public_url,
    request_target,
    response_url,
)
from agentrt.model.providers._loop_clients import LoopClients
from agentrt.model.providers._retry_after import parse_retry_after
from agentrt.model.providers._wire_tools import WireTools

__all__ = ["AnthropicChatModel", "format_messages"]

#: `ThinkingBlock.metadata` key holding the opaque data of a ``redacted_thinking`` block.
META_REDACTED = "redacted_thinking"
#: `Msg.metadata` key: ``True`` or a cache_control dict (``{"type": "ephemeral", "ttl": "1h"}``).
META_CACHE_CONTROL = "cache_control"
_EXTRA_PREFIX = "anthropic_"
_EPHEMERAL: dict[str, Any] = {"type": "ephemeral"}
_DECLARED = frozenset(("model", "max_tokens", "messages", "stream"))

_FINISH: dict[str | None, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}
# An error event inside a 200 stream carries only its type; give it the status the API would use.
_ERROR_TYPE_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
_DEFAULT_ENDPOINT = "https://api.anthropic.com"
"""Where the SDK sends requests without a base_url or ANTHROPIC_BASE_URL."""
_TOO_LONG = ("prompt is too long", "exceed context limit", "context window", "too many total text bytes")


def _optional_classes(*names: tuple[str, str]) -> tuple[type[BaseException], ...]:
    # Exception classes that exist only in some versions of the SDK or of its HTTP stack. The SDK
    # wraps transport errors while sending, not while a stream is read: those arrive raw (httpx2
    # in SDK 2.x, httpx before; aiohttp under them).
    found: list[type[BaseException]] = []
    for module, name in names:
        try:
            cls = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found.append(cls)
    return tuple(found)


_STREAM_TIMEOUTS: tuple[type[BaseException], ...] = (
    TimeoutError,
    anthropic.APITimeoutError,
    *_optional_classes(("httpx2", "TimeoutException"), ("httpx", "TimeoutException")),
)
_CREDENTIALS_ERRORS = _optional_classes(("anthropic", "CredentialsError"))
_STREAM_ERRORS: tuple[type[BaseException], ...] = (
    anthropic.AnthropicError,
    *_STREAM_TIMEOUTS,
    *_optional_classes(("httpx2", "TransportError"), ("httpx", "TransportError"), ("aiohttp", "ClientError")),
)


class AnthropicChatModel(ChatModel):
    """A Claude model through the Anthropic Messages API (streaming).

    Args:
        model_name: e.g. ``"claude-sonnet-4-5"``.
        api_key: the API key; the SDK reads ``ANTHROPIC_API_KEY`` (and its other credential
            sources) when omitted.
        base_url: API root, for proxies and gateways (the SDK also reads ``ANTHROPIC_BASE_URL``).
        client: an `anthropic.AsyncAnthropic` to use as is (never closed by this model).
        max_tokens: the reply budget sent when the call's options set none (the API requires one).
        options: default `GenerateOptions`, merged under each call's options.
        thinking_budget: enable extended thinking with this many budget tokens, or ``"adaptive"``
            to let the model decide (newer models).
        cache_system_prompt: mark the system prompt (and so the tools before it) for prompt caching.
        transport: ``"aiohttp"`` (default, faster) or ``"httpx"`` for the SDK's default transport.
        **client_options: passed to `anthropic.AsyncAnthropic` (``timeout``, ``default_headers``,
            ``http_client``...). ``max_retries`` defaults to 0.
    """

    provider: ClassVar[str] = "anthropic"
    price_provider: ClassVar[str | None] = "anthropic"
    supports_native_tools: ClassVar[bool] = True
    supports_vision: ClassVar[bool] = True
    supports_thinking: ClassVar[bool] = True
    supports_structured_output: ClassVar[bool] = False
    """Structured output goes through a tool by default; ``response_format`` in the options is
    still sent as ``output_config.format`` for models that support it."""

    def __init__(
        self,
        model_name: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: anthropic.AsyncAnthropic | None = None,
        max_tokens: int = 4096,
        options: GenerateOptions | None = None,
        thinking_budget: int | Literal["adaptive"] | None = None,
        cache_system_prompt: bool = False,
        transport: Literal["aiohttp", "httpx"] = "aiohttp",
        **client_options: Any,
    ) -> None:
        if not isinstance(model_name, str) or not model_name:
            raise UserError(f"model_name must be a non-empty string, not {model_name!r}")
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise UserError(f"max_tokens must be a positive integer, not {max_tokens!r}")
        if (
            thinking_budget is not None
            and thinking_budget != "adaptive"
            and (not isinstance(thinking_budget, int) or thinking_budget < 1024)
        ):
            raise UserError(f"thinking_budget must be an integer >= 1024 or 'adaptive', not {thinking_budget!r}")
        if transport not in ("aiohttp", "httpx"):
            raise UserError(f"transport must be 'aiohttp' or 'httpx', not {transport!r}")
        self.model_name = model_name
        self.max_tokens = max_tokens
        self.options = options if options is not None else GenerateOptions()
        self.thinking_budget = thinking_budget
        self.cache_system_prompt = cache_system_prompt
        self.transport = transport
        self._api_key = api_key
        self._base_url = base_url
        self._client_options = client_options
        self._given_client = client
        # One SDK client per event loop: its connection pool is bound to the loop that opened it.
        self._clients: LoopClients[anthropic.AsyncAnthropic] = LoopClients(self._open_client, _close_client)
        self._tools = WireTools(_wire_tools)

    # -- client lifecycle ------------------------------------------------------------------
    def _new_client(self) -> anthropic.AsyncAnthropic:
        kwargs: dict[str, Any] = {"max_retries": 0, **self._client_options}
        if self._api_key is not None:
            kwargs["api_key"] = self._api_key
        if self._base_url is not None:
            kwargs["base_url"] = self._base_url
        aiohttp_client = getattr(anthropic, "DefaultAioHttpClient", None)  # SDK >= 0.55
        if self.transport == "aiohttp" and "http_client" not in kwargs and aiohttp_client is not None:
            try:
                kwargs["http_client"] = aiohttp_client()
            except RuntimeError:  # aiohttp missing: the SDK's default transport still works
                pass
        return anthropic.AsyncAnthropic(**kwargs)

    async def _open_client(self) -> anthropic.AsyncAnthropic:
        return self._new_client()

    async def _client(self) -> anthropic.AsyncAnthropic:
        if self._given_client is not None:
            return self._given_client
        return await self._clients.get()

    async def aclose(self) -> None:
        """Close the SDK client this model opened on the running loop (a given client is left open)."""
        await self._clients.aclose()

    # -- request ---------------------------------------------------------------------------
    def build_request(
        self, messages: Sequence[Msg], tools: Sequence[ToolSchema] = (), options: GenerateOptions | None = None
    ) -> dict[str, Any]:
        """The JSON body of the Messages API request for this call."""
        return self._prepare(messages, tools, options)[0]

    def _prepare(
        self, messages: Sequence[Msg], tools: Sequence[ToolSchema], options: GenerateOptions | None
    ) -> tuple[dict[str, Any], dict[str, str], float | None]:
        opts = self.options.merge(options)
        system, wire_messages = format_messages(messages, cache_system_prompt=self.cache_system_prompt)
        max_tokens = opts.max_tokens if opts.max_tokens is not None else self.max_tokens
        body: dict[str, Any] = {
            "model": self.model_name,
            "max_tokens": max_tokens,
            "messages": wire_messages,
            "stream": True,
        }
        if system is not None:
            body["system"] = system
        if tools:
            body["tools"] = self._tools.get(tools)
            choice = _tool_choice(opts.tool_choice, opts.parallel_tool_calls)
            if choice is not None:
                body["tool_choice"] = choice
        if opts.temperature is not None:
            body["temperature"] = opts.temperature
        if opts.top_p is not None:
            body["top_p"] = opts.top_p
        if opts.stop:
            body["stop_sequences"] = list(opts.stop)
        budget = self.thinking_budget
        if budget == "adaptive":
            body["thinking"] = {"type": "adaptive"}
        elif budget is not None:
            if budget >= max_tokens:
                raise UserError(
                    f"thinking_budget ({budget}) must be less than max_tokens ({max_tokens}): thinking tokens "
                    "count toward max_tokens"
                )
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        if opts.response_format is not None:
            schema = opts.response_format.get("schema", opts.response_format)
            body["output_config"] = {"format": {"type": "json_schema", "schema": dict(schema)}}
        headers: dict[str, str] = {}
        for key, value in opts.extra.items():
            if not key.startswith(_EXTRA_PREFIX):
                continue
            name = key[len(_EXTRA_PREFIX) :]
            if name == "extra_headers":
                headers.update(value)
            elif name == "betas":
                headers["anthropic-beta"] = ",".join(value)
            else:
                body[name] = value
        return body, headers, opts.timeout

    # -- streaming -------------------------------------------------------------------------
    async def stream(
        self, messages: Sequence[Msg], tools: Sequence[ToolSchema] = (), options: GenerateOptions | None = None
    ) -> AsyncIterator[ChatResponse]:
        """Stream the reply as chunks (text, thinking with signature, tool-call deltas, usage)."""
        body, headers, timeout = self._prepare(messages, tools, options)
        # Only the parameters every SDK version declares go as arguments; the rest of the body
        # rides in `extra_body` (merged into the same JSON), so new API fields need no SDK upgrade.
        call: dict[str, Any] = {
            "model": body["model"],
            "max_tokens": body["max_tokens"],
            "messages": body["messages"],
            "stream": True,
            "extra_body": {k: v for k, v in body.items() if k not in _DECLARED},
        }
        if headers:
            call["extra_headers"] = headers
        if timeout is not None:
            call["timeout"] = timeout
        model = self.model_name
        reader = _EventReader()
        try:
            stream = await self._open_stream(call)
            async with stream:
                async for event in stream:
                    chunk = reader.read(event)
                    if chunk is not None:
                        yield chunk
        except _STREAM_ERRORS as exc:
            raise _map_error(exc, model, self._endpoint()) from exc

    async def _open_stream(self, call: dict[str, Any]) -> Any:
        """Start the streamed request (the SDK's event stream)."""
        client = await self._client()
        try:
            return await client.messages.create(**call)
        except TypeError as exc:
            # The SDK raises TypeError when it finds no credentials at all.
            if "authentication" in str(exc).lower() or "api_key" in str(exc):
                raise AuthenticationError(
                    f"no Anthropic credentials for model {self.model_name!r}: pass api_key=... or set "
                    f"ANTHROPIC_API_KEY ({exc})",
                    model=self.model_name,
                ) from exc
            raise

    def _endpoint(self) -> str:
        """The API root requests go to (for error messages): base_url, ANTHROPIC_BASE_URL or the API's own."""
        if self._given_client is not None:
            return str(self._given_client.base_url)
        return self._base_url or os.environ.get("ANTHROPIC_BASE_URL") or _DEFAULT_ENDPOINT

    def __repr__(self) -> str:
        return f"AnthropicChatModel({self.model_name!r})"


async def _close_client(client: anthropic.AsyncAnthropic) -> None:
    await client.close()


# --------------------------------------------------------------------------------------------------
# streaming: SDK events -> ChatResponse
# --------------------------------------------------------------------------------------------------
class _EventReader:
    """Turns the SDK's stream events into chunks, one reader per reply.

    The prompt-side usage comes in ``message_start``; ``message_delta`` carries cumulative counts
    (newer API versions repeat the input side there), so the reader keeps the largest seen. Events
    are typed Any: their classes differ across the SDK versions supported (hence the getattr calls).
    """

    __slots__ = ("cache_read", "cache_write", "input_tokens")

    def __init__(self) -> None:
        self.input_tokens = self.cache_read = self.cache_write = 0

    def read(self, event: Any) -> ChatResponse | None:
        """The chunk for one event, or None for an event that carries nothing to yield."""
        kind = event.type
        if kind == "content_block_delta":
            return _block_delta(event)
        if kind == "content_block_start":
            return _block_start(event)
        if kind == "message_start":
            self._message_start(event)
        elif kind == "message_delta":
            return self._message_delta(event)
        return None

    def _message_start(self, event: Any) -> None:
        usage = event.message.usage
        # Counts from the wire are untrusted: each becomes a non-negative int (`token_count`).
        self.input_tokens = token_count(usage.input_tokens)
        # getattr: fields older SDK versions do not declare.
        self.cache_read = token_count(getattr(usage, "cache_read_input_tokens", None))
        self.cache_write = token_count(getattr(usage, "cache_creation_input_tokens", None))

    def _message_delta(self, event: Any) -> ChatResponse:
        du = event.usage
        # Cumulative counts; newer API versions repeat the input side here.
        input_tokens = self.input_tokens = max(self.input_tokens, token_count(getattr(du, "input_tokens", None)))
        cache_read = self.cache_read = max(self.cache_read, token_count(getattr(du, "cache_read_input_tokens", None)))
        cache_write = self.cache_write = max(
            self.cache_write, token_count(getattr(du, "cache_creation_input_tokens", None))
        )
        details = getattr(du, "output_tokens_details", None)
        reasoning = token_count(getattr(details, "thinking_tokens", None))
        stop_reason = event.delta.stop_reason
        return ChatResponse(
            usage=TokenUsage(
                # The API counts cached prompt tokens apart; agentrt's input_tokens is the whole prompt.
                input_tokens=input_tokens + cache_read + cache_write,
                output_tokens=token_count(du.output_tokens),
                cache_read_tokens=cache_read,
                cache_write_tokens=cache_write,
                reasoning_tokens=reasoning,
            ),
            finish_reason=_FINISH.get(stop_reason, "stop") if stop_reason is not None else None,
            raw=event,
        )


def _block_delta(event: Any) -> ChatResponse | None:
    """A ``content_block_delta``: a piece of text, tool arguments, thinking or its signature."""
    delta = event.delta
    dtype = delta.type
    if dtype == "text_delta":
        return ChatResponse(text=delta.text, raw=event)
    if dtype == "input_json_delta":
        if not delta.partial_json:
            return None
        return ChatResponse(tool_calls=(ToolCallChunk(index=event.index, arguments=delta.partial_json),), raw=event)
    if dtype == "thinking_delta":
        return ChatResponse(thinking=delta.thinking, raw=event)
    if dtype == "signature_delta":
        return ChatResponse(thinking_signature=delta.signature, raw=event)
    return None


def _block_start(event: Any) -> ChatResponse | None:
    """A ``content_block_start``: a tool call begins, or a block that opens with content."""
    block = event.content_block
    btype = block.type
    if btype == "tool_use":
        call = ToolCallChunk(
            index=event.index,
            id=block.id,
            name=block.name,
            input=cast("dict[str, Any]", block.input) if block.input else None,
        )
        return ChatResponse(tool_calls=(call,), raw=event)
    if btype == "text":
        return ChatResponse(text=block.text, raw=event) if block.text else None
    if btype == "thinking":
        signature = getattr(block, "signature", None) or None
        if block.thinking or signature:
            return ChatResponse(thinking=block.thinking, thinking_signature=signature, raw=event)
        return None
    if btype == "redacted_thinking":
        return ChatResponse(blocks=(ThinkingBlock(thinking="", metadata={META_REDACTED: block.data}),), raw=event)
    return None


# --------------------------------------------------------------------------------------------------
# formatting: Msg list -> Messages API
# --------------------------------------------------------------------------------------------------
def format_messages(
    messages: Sequence[Msg], *, cache_system_prompt: bool = False
) -> tuple[str | list[dict[str, Any]] | None, list[dict[str, Any]]]:
    """Split `messages` into the ``system`` parameter and the ``messages`` list of the Messages API.

    Leading system messages become ``system``; a system message later in the history becomes
    user text at its place. Consecutive messages of one role are merged into one turn (tool
    results first, as the API requires). A ``cache_control`` entry in a message's metadata marks
    its last block for prompt caching.
    """
    system_blocks: list[dict[str, Any]] = []
    turns: list[tuple[str, list[dict[str, Any]]]] = []
    leading = True
    for msg in messages:
        role: str = msg.role
        if role == "system" and leading:
            text = _system_text(msg)
            if text:
                block: dict[str, Any] = {"type": "text", "text": text}
                _mark_cache(block, msg.metadata.get(META_CACHE_CONTROL))
                system_blocks.append(block)
            continue
        leading = False
        if role == "system":
            text = _system_text(msg)
            blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
            role = "user"
        else:
            blocks = _blocks(msg.content, assistant=role == "assistant")
        if not blocks:
            continue
        cache = msg.metadata.get(META_CACHE_CONTROL) if msg.metadata else None
        if cache:
            blocks[-1] = {**blocks[-1]}
            _mark_cache(blocks[-1], cache)
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    wire: list[dict[str, Any]] = []
    for role, blocks in turns:
        if role == "user" and len(blocks) > 1:
            blocks = _results_first(blocks)
        wire.append({"role": role, "content": blocks})
    if cache_system_prompt and system_blocks and "cache_control" not in system_blocks[-1]:
        system_blocks[-1]["cache_control"] = dict(_EPHEMERAL)
    system: str | list[dict[str, Any]] | None
    if not system_blocks:
        system = None
    elif len(system_blocks) == 1 and "cache_control" not in system_blocks[0]:
        system = system_blocks[0]["text"]
    else:
        system = system_blocks
    return system, wire


def _system_text(msg: Msg) -> str:
    return "\n".join(b.text for b in msg.content if isinstance(b, TextBlock) and b.text)


def _mark_cache(block: dict[str, Any], cache: Any) -> None:
    if cache is True:
        block["cache_control"] = dict(_EPHEMERAL)
    elif isinstance(cache, Mapping):
        block["cache_control"] = dict(cache)


def _results_first(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # The API wants a turn's tool_result blocks before any other content.
    results = [b for b in blocks if b["type"] == "tool_result"]
    if not results or len(results) == len(blocks) or blocks[: len(results)] == results:
        return blocks
    return results + [b for b in blocks if b["type"] != "tool_result"]


def _blocks(content: Sequence[ContentBlock], *, assistant: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for block in content:
        kind = type(block)
        if kind is TextBlock:
            text = cast(TextBlock, block).text
            if text:  # the API rejects empty text blocks
                out.append({"type": "text", "text": text})
        elif kind is ToolUseBlock:
            call = cast(ToolUseBlock, block)
            out.append({"type": "tool_use", "id": call.id, "name": call.name, "input": dict(call.input)})
        elif kind is ToolResultBlock:
            out.append(_tool_result(cast(ToolResultBlock, block)))
        elif kind is ThinkingBlock:
            if assistant:
                thinking = _thinking(cast(ThinkingBlock, block))
                if thinking is not None:
                    out.append(thinking)
        elif kind is ImageBlock:
            out.append(_image(cast(ImageBlock, block).source))
        elif kind is AudioBlock or kind is VideoBlock:
            out.append({"type": "text", "text": f"[{block.type} omitted: Anthropic models do not accept {block.type}]"})
    return out


def _thinking(block: ThinkingBlock) -> dict[str, Any] | None:
    redacted = block.metadata.get(META_REDACTED) if block.metadata else None
    if redacted:
        return {"type": "redacted_thinking", "data": redacted}
    if block.signature:
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    # Unsigned reasoning (another provider's, or a stream cut before the signature) cannot be
    # verified by the API, which rejects it: leave it out.
    return None


def _tool_result(block: ToolResultBlock) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.id}
    output = block.output
    if isinstance(output, str):
        if output:
            out["content"] = output
    else:
        parts: list[dict[str, Any]] = []
        for item in output:
            if isinstance(item, TextBlock):
                if item.text:
                    parts.append({"type": "text", "text": item.text})
            elif isinstance(item, ImageBlock):
                parts.append(_image(item.source))
            else:
                parts.append({"type": "text", "text": _describe(item)})
        if parts:
            out["content"] = parts
    if block.state != "success":
        out["is_error"] = True
    return out


def _describe(block: ContentBlock) -> str:
    if isinstance(block, ToolResultBlock):
        return block.text
    if isinstance(block, ThinkingBlock):
        return block.thinking
    if isinstance(block, ToolUseBlock):
        return f"[tool call {block.name}]"
    return f"[{block.type} omitted]"


def _image(source: str | Base64Source) -> dict[str, Any]:
    if isinstance(source, Base64Source):
        return {"type": "image", "source": {"type": "base64", "media_type": source.media_type, "data": source.data}}
    if source.startswith("data:"):
        header, _, data = source.partition(",")
        media_type = header[5:].split(";", 1)[0] or "image/png"
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": source}}


def _wire_tools(tools: Sequence[ToolSchema]) -> list[dict[str, Any]]:
    wire: list[dict[str, Any]] = []
    for t in tools:
        entry: dict[str, Any] = {"name": t.name, "input_schema": dict(t.parameters)}
        if t.description:
            entry["description"] = t.description
        if t.strict:
            entry["strict"] = True
        wire.append(entry)
    return wire


def _tool_choice(choice: str | Mapping[str, Any] | None, parallel: bool | None) -> dict[str, Any] | None:
    wire: dict[str, Any]
    if choice is None:
        if parallel is not False:
            return None
        wire = {"type": "auto"}
    elif choice == "auto":
        wire = {"type": "auto"}
    elif choice == "none":
        return {"type": "none"}
    elif choice == "required":
        wire = {"type": "any"}
    elif isinstance(choice, Mapping) and isinstance(choice.get("name"), str):
        wire = {"type": "tool", "name": choice["name"]}
    elif isinstance(choice, Mapping) and choice.get("type") in ("auto", "any", "tool", "none"):
        return dict(choice)  # already in Anthropic's form
    else:
        raise UserError(f"tool_choice must be 'auto', 'none', 'required' or {{'name': tool}}, not {choice!r}")
    if parallel is False:
        wire["disable_parallel_tool_use"] = True
    return wire


# --------------------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------------------
def _map_error(exc: BaseException, model: str, endpoint: str = _DEFAULT_ENDPOINT) -> ModelError:
    """The agentrt error for an SDK or transport exception; `endpoint` is the API root requests go to."""
    url = request_target(exc, endpoint)
    if isinstance(exc, _STREAM_TIMEOUTS):
        return ModelTimeoutError(f"Anthropic model {model!r} timed out ({url}): {exc}")
    if isinstance(exc, _CREDENTIALS_ERRORS):
        return AuthenticationError(
            f"no usable Anthropic credentials for model {model!r}: pass api_key=... or set ANTHROPIC_API_KEY ({exc})",
            model=model,
        )
    if isinstance(exc, anthropic.APIConnectionError) or not isinstance(exc, anthropic.AnthropicError):
        return ModelConnectionError(f"Anthropic model {model!r}: cannot connect to {url}: {connection_cause(exc)}")
    if isinstance(exc, anthropic.APIStatusError):
        body = exc.body
        error = body.get("error") if isinstance(body, Mapping) else None
        err_type = error.get("type") if isinstance(error, Mapping) else None
        message = error.get("message") if isinstance(error, Mapping) else None
        if not isinstance(message, str) or not message:
            message = str(exc)
        status = exc.status_code
        headers: Mapping[str, str] | None = None
        if status < 400:
            # An `error` event inside a 200 stream.
            status = _ERROR_TYPE_STATUS.get(str(err_type), 500)
        else:
            headers = exc.response.headers
        text = f"Anthropic API error {status}" + (f" ({err_type})" if err_type else "") + f" from {model!r}: {message}"
        requested = response_url(getattr(exc, "response", None)) if exc.status_code >= 400 else None
        if requested:
            text += f" (POST {requested})"
        if status == 404 and urlsplit(endpoint).path.rstrip("/").endswith("/v1"):
            text += f"; base_url {public_url(endpoint)} ends in /v1, which the SDK adds itself: drop it"
        return classify_api_error(
            status,
            body,
            text=text,
            model=model,
            message=message,
            too_long=_TOO_LONG,
            too_long_statuses=(400, 413),
            retry_after=parse_retry_after(headers),
            rate_limited=err_type == "rate_limit_error",
        )
    return ModelError(f"Anthropic SDK error for model {model!r}: {exc}")
