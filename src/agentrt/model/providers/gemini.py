"""Gemini adapter, on the official `google-genai` SDK.

`GeminiChatModel` turns a `Msg` history into ``contents`` (``user``/``model`` turns of parts),
``system_instruction``, ``function_declarations`` and a generation config, and streamed
``GenerateContentResponse`` chunks back into `ChatResponse` chunks.

Thought signatures: Gemini attaches an opaque ``thought_signature`` to some parts and expects it
back on the same part next turn. A signature on a function call is kept in the `ToolUseBlock`'s
metadata (``"thought_signature"``, base64); one on a thought part is the `ThinkingBlock`'s
``signature``; one on a text part (or an empty trailing part) becomes an empty `ThinkingBlock`
at the end of the reply with ``metadata={"gemini_part": "text"}``, sent back on the last text
part. All are sent back exactly as received.
"""

from __future__ import annotations

import base64
import binascii
import importlib
import mimetypes
import re
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, ClassVar
from urllib.parse import urlsplit

try:
    from google import genai
    from google.genai import errors as genai_errors
    from google.genai import types
except ImportError as exc:  # pragma: no cover - exercised only without the extra installed
    raise ImportError(
        f"the Gemini provider needs the 'google-genai' package ({exc}): pip install 'agentrt[gemini]'",
        name=exc.name,
    ) from exc

import pydantic

from agentrt.errors import (
    AuthenticationError,
    ModelBehaviorError,
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
    _new_call_id,
    token_count,
)
from agentrt.model._accumulate import ReplyAccumulator
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

__all__ = ["GeminiChatModel", "format_contents"]

#: `ToolUseBlock.metadata` key: the call part's thought signature (base64, as on the wire).
META_SIGNATURE = "thought_signature"
#: `ToolUseBlock.metadata` key: the id was made up here because Gemini sent none (so it is not sent back).
META_GENERATED_ID = "gemini_generated_id"
#: `ThinkingBlock.metadata` key marking a signature that belongs to the reply's last text part.
META_PART = "gemini_part"
_EXTRA_PREFIX = "gemini_"

_FINISH: dict[str, str] = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
    "IMAGE_PROHIBITED_CONTENT": "content_filter",
    "IMAGE_RECITATION": "content_filter",
    "MODEL_ARMOR": "content_filter",
    "LANGUAGE": "error",
    "OTHER": "error",
    "MALFORMED_FUNCTION_CALL": "error",
    "UNEXPECTED_TOOL_CALL": "error",
    "TOO_MANY_TOOL_CALLS": "error",
    "MISSING_THOUGHT_SIGNATURE": "error",
    "MALFORMED_RESPONSE": "error",
}
_TOO_LONG = ("exceeds the maximum number of tokens", "input token count", "context window", "too long")
_MODES = {
    "auto": types.FunctionCallingConfigMode.AUTO,
    "none": types.FunctionCallingConfigMode.NONE,
    "required": types.FunctionCallingConfigMode.ANY,
}
_CONFIG_FIELDS = frozenset(types.GenerateContentConfig.model_fields)


def _optional_errors(module: str, *names: str) -> tuple[type[BaseException], ...]:
    # The SDK's transports (aiohttp when installed, else httpx2/httpx) raise their own exceptions.
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return ()
    found: list[type[BaseException]] = []
    for name in names:
        cls = getattr(mod, name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found.append(cls)
    return tuple(found)


_aiohttp: Any
try:
    import aiohttp as _aiohttp
except ImportError:  # pragma: no cover - the SDK falls back to httpx
    _aiohttp = None
_DEFAULT_ENDPOINT = "https://generativelanguage.googleapis.com"
"""Where the SDK sends Gemini API requests without a base_url."""
_HAS_AIOHTTP_OPTION = "aiohttp_client" in types.HttpOptions.model_fields
_HAS_CONTINUATION = "automatic_continuation" in types.GenerateContentConfig.model_fields
_MAX_CONNECTIONS = 1000
_READ_BUFSIZE = 2**22  # as the SDK's own session: one SSE line can carry a whole generated image

_TIMEOUT_ERRORS: tuple[type[BaseException], ...] = (
    TimeoutError,
    *_optional_errors("httpx2", "TimeoutException"),
    *_optional_errors("httpx", "TimeoutException"),
)
_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    *_optional_errors("aiohttp", "ClientError"),
    *_optional_errors("httpx2", "TransportError"),
    *_optional_errors("httpx", "TransportError"),
)
_MAPPED_ERRORS: tuple[type[BaseException], ...] = (
    genai_errors.APIError,
    genai_errors.UnknownApiResponseError,
    *_CONNECTION_ERRORS,
)


class GeminiChatModel(ChatModel):
    """A Gemini model through the ``google-genai`` SDK (Gemini API, or Vertex AI via ``vertexai=True``).

    Args:
        model_name: e.g. ``"gemini-2.5-flash"``.
        api_key: the API key; the SDK reads ``GEMINI_API_KEY`` / ``GOOGLE_API_KEY`` when omitted.
        base_url: API root, for proxies and gateways.
        client: a `google.genai.Client` to use as is (never closed by this model).
        options: default `GenerateOptions`, merged under each call's options.
        thinking_budget: thinking tokens per reply (0 turns thinking off where the model allows,
            -1 lets the model decide).
        include_thoughts: stream thought summaries as thinking.
        **client_options: passed to `google.genai.Client` (``vertexai``, ``project``, ``location``,
            ``http_options``...). The SDK's retries are off unless ``http_options`` sets them.
    """

    provider: ClassVar[str] = "gemini"
    price_provider: ClassVar[str | None] = "google"
    supports_native_tools: ClassVar[bool] = True
    supports_vision: ClassVar[bool] = True
    supports_thinking: ClassVar[bool] = True
    supports_structured_output: ClassVar[bool] = False
    """Structured output goes through a tool by default (older Gemini models cannot combine a
    response schema with function calling); ``response_format`` in the options is still sent as
    ``response_json_schema``."""

    def __init__(
        self,
        model_name: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: genai.Client | None = None,
        options: GenerateOptions | None = None,
        thinking_budget: int | None = None,
        include_thoughts: bool = False,
        **client_options: Any,
    ) -> None:
        if not isinstance(model_name, str) or not model_name:
            raise UserError(f"model_name must be a non-empty string, not {model_name!r}")
        if thinking_budget is not None and (not isinstance(thinking_budget, int) or thinking_budget < -1):
            raise UserError(f"thinking_budget must be an integer >= -1, not {thinking_budget!r}")
        self.model_name = model_name
        self.options = options if options is not None else GenerateOptions()
        self.thinking_budget = thinking_budget
        self.include_thoughts = include_thoughts
        self._api_key = api_key
        self._base_url = base_url
        self._client_options = client_options
        self._given_client = client
        # One SDK client per event loop, closed with the loop (its aiohttp session is bound to it).
        self._clients: LoopClients[tuple[genai.Client, Any]] = LoopClients(self._new_client, _close_client)
        self._tools = WireTools(_wire_tools)

    # -- client lifecycle ------------------------------------------------------------------
    async def _new_client(self) -> tuple[genai.Client, Any]:
        kwargs = dict(self._client_options)
        given = kwargs.pop("http_options", None)
        if isinstance(given, types.HttpOptions):
            http_options = given.model_copy()
        else:
            http_options = types.HttpOptions(**(given or {}))
        if self._base_url is not None:
            http_options.base_url = self._base_url
        if http_options.retry_options is None:
            # attempts=1 also stops the SDK's silent sleep-and-retry on connection errors.
            http_options.retry_options = types.HttpRetryOptions(attempts=1)
        session = None
        if _aiohttp is not None and _HAS_AIOHTTP_OPTION and _sdk_would_use_aiohttp(http_options):
            # Our own session (the SDK uses it as given): a pool sized for many concurrent runs,
            # closed with this model, and none of the SDK's per-session subclassing.
            session = _aiohttp.ClientSession(
                connector=_aiohttp.TCPConnector(limit=_MAX_CONNECTIONS, limit_per_host=0, keepalive_timeout=30),
                trust_env=True,
                read_bufsize=_READ_BUFSIZE,
            )
            http_options.aiohttp_client = session
        if self._api_key is not None:
            kwargs["api_key"] = self._api_key
        try:
            return genai.Client(http_options=http_options, **kwargs), session
        except BaseException as exc:
            if session is not None:
                await session.close()
            if isinstance(exc, ValueError):
                raise AuthenticationError(
                    f"no Gemini credentials for model {self.model_name!r}: pass api_key=... or set GEMINI_API_KEY "
                    f"(or GOOGLE_API_KEY) ({exc})",
                    model=self.model_name,
                ) from exc
            raise

    async def _client(self) -> genai.Client:
        if self._given_client is not None:
            return self._given_client
        client, _session = await self._clients.get()
        return client

    async def aclose(self) -> None:
        """Close the SDK client this model opened on the running loop (a given client is left open)."""
        await self._clients.aclose()

    # -- request ---------------------------------------------------------------------------
    def build_request(
        self, messages: Sequence[Msg], tools: Sequence[ToolSchema] = (), options: GenerateOptions | None = None
    ) -> tuple[list[types.Content], types.GenerateContentConfig]:
        """The ``contents`` and ``config`` of ``client.aio.models.generate_content[_stream]`` for this call."""
        opts = self.options.merge(options)
        system, contents = format_contents(messages)
        config: dict[str, Any] = {
            # The SDK would otherwise try to run Python callables itself (there are none here).
            "automatic_function_calling": types.AutomaticFunctionCallingConfig(disable=True),
        }
        if _HAS_CONTINUATION:
            # A dropped stream must fail the step (agentrt's resilience decides), not resume silently.
            config["automatic_continuation"] = False
        if system:
            config["system_instruction"] = system
        if tools:
            config["tools"] = self._tools.get(tools)
            tool_config = _tool_config(opts.tool_choice)
            if tool_config is not None:
                config["tool_config"] = tool_config
        if opts.temperature is not None:
            config["temperature"] = opts.temperature
        if opts.top_p is not None:
            config["top_p"] = opts.top_p
        if opts.max_tokens is not None:
            config["max_output_tokens"] = opts.max_tokens
        if opts.stop:
            config["stop_sequences"] = list(opts.stop)
        if opts.seed is not None:
            config["seed"] = opts.seed
        if opts.response_format is not None:
            schema = opts.response_format.get("schema", opts.response_format)
            config["response_mime_type"] = "application/json"
            config["response_json_schema"] = dict(schema)
        if self.thinking_budget is not None or self.include_thoughts:
            config["thinking_config"] = types.ThinkingConfig(
                thinking_budget=self.thinking_budget, include_thoughts=self.include_thoughts or None
            )
        if opts.timeout is not None:
            config["http_options"] = types.HttpOptions(timeout=max(1, int(opts.timeout * 1000)))
        config.update(_extra_config(opts.extra))
        try:
            return contents, types.GenerateContentConfig(**config)
        except pydantic.ValidationError as exc:
            raise UserError(f"invalid Gemini generation options: {exc}") from exc

    # -- calls -----------------------------------------------------------------------------
    async def stream(
        self, messages: Sequence[Msg], tools: Sequence[ToolSchema] = (), options: GenerateOptions | None = None
    ) -> AsyncIterator[ChatResponse]:
        """Stream the reply as chunks (text, thoughts, function calls, usage)."""
        contents, config = self.build_request(messages, tools, options)
        client = await self._client()
        state = _ReplyState()
        model = self.model_name
        try:
            responses = await client.aio.models.generate_content_stream(model=model, contents=contents, config=config)
            try:
                async for response in responses:
                    for chunk in state.chunks(response):
                        yield chunk
            finally:
                aclose = getattr(responses, "aclose", None)
                if aclose is not None:
                    await aclose()
        except _MAPPED_ERRORS as exc:
            raise _map_error(exc, model, self._endpoint()) from exc
        for chunk in state.finish():
            yield chunk

    async def generate(
        self, messages: Sequence[Msg], tools: Sequence[ToolSchema] = (), options: GenerateOptions | None = None
    ) -> Msg:
        """One non-streaming ``generateContent`` call, returned as the assistant message."""
        contents, config = self.build_request(messages, tools, options)
        client = await self._client()
        try:
            response = await client.aio.models.generate_content(model=self.model_name, contents=contents, config=config)
        except _MAPPED_ERRORS as exc:
            raise _map_error(exc, self.model_name, self._endpoint()) from exc
        state = _ReplyState()
        acc = ReplyAccumulator()
        for chunk in state.chunks(response):
            acc.add(chunk)
        for chunk in state.finish():
            acc.add(chunk)
        return acc.message(name=None)

    def _endpoint(self) -> str:
        """The API root requests go to, for error messages: base_url, http_options' base_url or the API's own."""
        if self._base_url:
            return self._base_url
        given = self._client_options.get("http_options")
        base = given.get("base_url") if isinstance(given, Mapping) else getattr(given, "base_url", None)
        if isinstance(base, str) and base:
            return base
        if self._client_options.get("vertexai"):
            return "https://aiplatform.googleapis.com (Vertex AI)"
        return _DEFAULT_ENDPOINT

    def __repr__(self) -> str:
        return f"GeminiChatModel({self.model_name!r})"


async def _close_client(entry: tuple[genai.Client, Any]) -> None:
    client, session = entry
    try:
        # getattr: SDK versions before ~1.40 have no close methods (the GC releases their pools).
        aclose = getattr(client.aio, "aclose", None)
        if aclose is not None:
            await aclose()
        close = getattr(client, "close", None)
        if close is not None:
            close()
    finally:
        if session is not None:
            await session.close()


def _sdk_would_use_aiohttp(options: types.HttpOptions) -> bool:
    # The SDK picks httpx when given an httpx client or transport; then it needs no session.
    args = options.async_client_args or {}
    return options.aiohttp_client is None and options.httpx_async_client is None and "transport" not in args


# --------------------------------------------------------------------------------------------------
# response -> chunks
# --------------------------------------------------------------------------------------------------
class _ReplyState:
    """Turns the responses of one reply into chunks; some facts only settle at the end."""

    __slots__ = ("calls", "finish_reason", "text_signature", "usage")

    def __init__(self) -> None:
        self.calls = 0
        self.text_signature: str | None = None
        self.usage: TokenUsage | None = None
        self.finish_reason: str | None = None

    def chunks(self, response: types.GenerateContentResponse) -> Iterator[ChatResponse]:
        meta = response.usage_metadata
        if meta is not None:
            self.usage = _usage(meta)
        candidates = response.candidates
        if not candidates:
            feedback = response.prompt_feedback
            if feedback is not None and feedback.block_reason is not None:
                self.finish_reason = "content_filter"
            return
        candidate = candidates[0]
        content = candidate.content
        if content is not None and content.parts:
            for part in content.parts:
                yield from self._part(part, response)
        reason = candidate.finish_reason
        if reason is not None:
            name = reason.value if isinstance(reason, types.FinishReason) else str(reason)
            if name != "FINISH_REASON_UNSPECIFIED":
                self.finish_reason = _FINISH.get(name, "stop")

    def _part(self, part: types.Part, response: Any) -> Iterator[ChatResponse]:
        raw_signature = part.thought_signature
        signature = base64.b64encode(raw_signature).decode("ascii") if raw_signature else None
        call = part.function_call
        if call is not None:
            index = self.calls
            self.calls += 1
            metadata: dict[str, Any] = {}
            if signature is not None:
                metadata[META_SIGNATURE] = signature
            call_id = call.id
            if not call_id:
                call_id = _new_call_id()
                metadata[META_GENERATED_ID] = True
            yield ChatResponse(
                tool_calls=(
                    ToolCallChunk(
                        index=index,
                        id=call_id,
                        name=call.name or "",
                        input=dict(call.args or {}),
                        metadata=metadata or None,
                    ),
                ),
                raw=response,
            )
            return
        text = part.text
        if part.thought:
            if text or signature:
                yield ChatResponse(thinking=text or "", thinking_signature=signature, raw=response)
            return
        if text:
            yield ChatResponse(text=text, raw=response)
        inline = part.inline_data
        if inline is not None and inline.data:
            mime = inline.mime_type or "application/octet-stream"
            source = Base64Source(media_type=mime, data=base64.b64encode(inline.data).decode("ascii"))
            block: ContentBlock
            if mime.startswith("audio/"):
                block = AudioBlock(source=source)
            elif mime.startswith("video/"):
                block = VideoBlock(source=source)
            else:
                block = ImageBlock(source=source)
            yield ChatResponse(blocks=(block,), raw=response)
        if signature is not None:
            # Belongs to the text part; streamed text arrives in pieces, so keep it for the end.
            self.text_signature = signature

    def finish(self) -> Iterator[ChatResponse]:
        if self.text_signature is not None:
            yield ChatResponse(
                blocks=(ThinkingBlock(thinking="", signature=self.text_signature, metadata={META_PART: "text"}),)
            )
        finish = self.finish_reason
        if finish == "stop" and self.calls:
            finish = "tool_calls"
        if finish is None and self.calls:
            finish = "tool_calls"
        if finish is not None or self.usage is not None:
            yield ChatResponse(usage=self.usage, finish_reason=finish)


def _usage(meta: types.GenerateContentResponseUsageMetadata) -> TokenUsage:
    # Counts from the wire are untrusted: each becomes a non-negative int (`token_count`) before any sum.
    thoughts = token_count(meta.thoughts_token_count)
    return TokenUsage(
        input_tokens=token_count(meta.prompt_token_count) + token_count(meta.tool_use_prompt_token_count),
        # Gemini counts thinking apart from the candidates; agentrt's output_tokens include it.
        output_tokens=token_count(meta.candidates_token_count) + thoughts,
        cache_read_tokens=token_count(meta.cached_content_token_count),
        reasoning_tokens=thoughts,
    )


# --------------------------------------------------------------------------------------------------
# formatting: Msg list -> contents
# --------------------------------------------------------------------------------------------------
def format_contents(messages: Sequence[Msg]) -> tuple[str | None, list[types.Content]]:
    """Split `messages` into the system instruction and the ``contents`` list.

    Leading system messages become the system instruction; a system message later in the
    history becomes user text at its place. Assistant messages are ``model`` turns; consecutive
    messages of one role are merged into one turn.
    """
    system: list[str] = []
    contents: list[types.Content] = []
    generated_ids: set[str] = set()
    leading = True
    for msg in messages:
        role = msg.role
        if role == "system":
            text = "\n".join(b.text for b in msg.content if isinstance(b, TextBlock) and b.text)
            if leading:
                if text:
                    system.append(text)
                continue
            parts = [types.Part(text=text)] if text else []
            wire_role = "user"
        elif role == "assistant":
            parts = _model_parts(msg.content, generated_ids)
            wire_role = "model"
        else:
            parts = _user_parts(msg.content, generated_ids)
            wire_role = "user"
        leading = False
        if not parts:
            continue
        if contents and contents[-1].role == wire_role:
            previous = contents[-1].parts
            assert previous is not None
            previous.extend(parts)
        else:
            contents.append(types.Content(role=wire_role, parts=parts))
    return ("\n\n".join(system) if system else None), contents


def _signature_bytes(value: Any) -> bytes | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def _model_parts(content: Sequence[ContentBlock], generated_ids: set[str]) -> list[types.Part]:
    parts: list[types.Part] = []
    for block in content:
        if isinstance(block, TextBlock):
            if block.text:
                parts.append(types.Part(text=block.text))
        elif isinstance(block, ToolUseBlock):
            meta = block.metadata or {}
            if meta.get(META_GENERATED_ID):
                generated_ids.add(block.id)
                call = types.FunctionCall(name=block.name, args=dict(block.input))
            else:
                call = types.FunctionCall(id=block.id, name=block.name, args=dict(block.input))
            parts.append(types.Part(function_call=call, thought_signature=_signature_bytes(meta.get(META_SIGNATURE))))
        elif isinstance(block, ThinkingBlock):
            signature = _signature_bytes(block.signature)
            if block.metadata and block.metadata.get(META_PART) == "text":
                if signature is None:
                    continue
                # A text part's signature: back on that part when the text ends the reply, else on
                # an empty text part at this place (as Gemini streams it after a function call).
                last = parts[-1] if parts else None
                if last is not None and last.text and not last.thought and last.thought_signature is None:
                    parts[-1] = types.Part(text=last.text, thought_signature=signature)
                else:
                    parts.append(types.Part(text="", thought_signature=signature))
            elif block.thinking or signature is not None:
                parts.append(types.Part(text=block.thinking, thought=True, thought_signature=signature))
        elif isinstance(block, ToolResultBlock):
            parts.extend(_result_parts(block, generated_ids))
        elif isinstance(block, (ImageBlock, AudioBlock, VideoBlock)):
            parts.append(_media_part(block))
    return parts


def _user_parts(content: Sequence[ContentBlock], generated_ids: set[str]) -> list[types.Part]:
    parts: list[types.Part] = []
    media: list[types.Part] = []
    for block in content:
        if isinstance(block, TextBlock):
            if block.text:
                parts.append(types.Part(text=block.text))
        elif isinstance(block, ToolResultBlock):
            for part in _result_parts(block, generated_ids):
                (parts if part.function_response is not None else media).append(part)
        elif isinstance(block, (ImageBlock, AudioBlock, VideoBlock)):
            parts.append(_media_part(block))
        # Thinking and tool calls in a user message have no place in a Gemini user turn.
    # Images returned by tools follow the function responses they belong to.
    return parts + media if media else parts


def _result_parts(block: ToolResultBlock, generated_ids: set[str]) -> list[types.Part]:
    output = block.output
    media: list[types.Part] = []
    if isinstance(output, str):
        text = output
    else:
        texts: list[str] = []
        for item in output:
            if isinstance(item, TextBlock):
                texts.append(item.text)
            elif isinstance(item, (ImageBlock, AudioBlock, VideoBlock)):
                media.append(_media_part(item))
            elif isinstance(item, ToolResultBlock):
                texts.append(item.text)
        text = "\n".join(texts)
    response: dict[str, Any] = {"result": text} if block.state == "success" else {"error": text}
    call_id = None if block.id in generated_ids else block.id
    part = types.Part(function_response=types.FunctionResponse(id=call_id, name=block.name, response=response))
    return [part, *media]


_DATA_URL = re.compile(r"data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?:;[^,]*)?,(?P<data>.*)", re.DOTALL)


def _media_part(block: ImageBlock | AudioBlock | VideoBlock) -> types.Part:
    source = block.source
    if isinstance(source, Base64Source):
        return types.Part(inline_data=types.Blob(mime_type=source.media_type, data=base64.b64decode(source.data)))
    match = _DATA_URL.match(source)
    if match is not None:
        mime = match.group("mime") or "application/octet-stream"
        return types.Part(inline_data=types.Blob(mime_type=mime, data=base64.b64decode(match.group("data"))))
    mime = mimetypes.guess_type(source.split("?", 1)[0])[0]
    if mime is None:
        mime = {"image": "image/jpeg", "audio": "audio/mpeg", "video": "video/mp4"}[block.type]
    return types.Part(file_data=types.FileData(file_uri=source, mime_type=mime))


def _extra_config(extra: Mapping[str, Any]) -> dict[str, Any]:
    """The config fields set by ``gemini_X`` extras (``X`` must be a `GenerateContentConfig` field)."""
    config: dict[str, Any] = {}
    for key, value in extra.items():
        if not key.startswith(_EXTRA_PREFIX):
            continue
        name = key[len(_EXTRA_PREFIX) :]
        if name not in _CONFIG_FIELDS:
            raise UserError(
                f"unknown Gemini option {key!r}: after the 'gemini_' prefix it must name a field of "
                "google.genai.types.GenerateContentConfig (e.g. 'gemini_top_k', 'gemini_safety_settings')"
            )
        config[name] = value
    return config


def _wire_tools(tools: Sequence[ToolSchema]) -> list[types.Tool]:
    declarations = []
    for t in tools:
        params = dict(t.parameters)
        declarations.append(
            types.FunctionDeclaration(
                name=t.name,
                description=t.description or None,
                # JSON Schema as is ($ref/$defs included): the API reads it as JSON Schema. A tool
                # without parameters sends none (an empty object schema is rejected by some models).
                parameters_json_schema=params if params.get("properties") or "$ref" in params else None,
            )
        )
    return [types.Tool(function_declarations=declarations)]


def _tool_config(choice: str | Mapping[str, Any] | None) -> types.ToolConfig | None:
    if choice is None:
        return None
    if isinstance(choice, str) and choice in _MODES:
        return types.ToolConfig(function_calling_config=types.FunctionCallingConfig(mode=_MODES[choice]))
    if isinstance(choice, Mapping) and isinstance(choice.get("name"), str):
        return types.ToolConfig(
            function_calling_config=types.FunctionCallingConfig(
                mode=types.FunctionCallingConfigMode.ANY, allowed_function_names=[choice["name"]]
            )
        )
    raise UserError(f"tool_choice must be 'auto', 'none', 'required' or {{'name': tool}}, not {choice!r}")


# --------------------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------------------
def _header(headers: Any, name: str) -> str | None:
    if headers is None:
        return None
    try:
        value = headers.get(name)
    except AttributeError:
        return None
    return value if isinstance(value, str) else None


def _retry_after(exc: genai_errors.APIError) -> float | None:
    response = getattr(exc, "response", None)
    value = _header(getattr(response, "headers", None), "retry-after")
    if value:
        delay = parse_retry_after({"retry-after": value})
        if delay is not None:
            return delay
    # Google APIs put the delay in a google.rpc.RetryInfo detail ("retryDelay": "37s").
    details = exc.details
    error = details.get("error", details) if isinstance(details, Mapping) else None
    items = error.get("details") if isinstance(error, Mapping) else None
    if isinstance(items, list):
        for item in items:
            delay = item.get("retryDelay") if isinstance(item, Mapping) else None
            if isinstance(delay, str) and delay.endswith("s"):
                try:
                    return max(0.0, float(delay[:-1]))
                except ValueError:
                    return None
    return None


def _map_error(exc: BaseException, model: str, endpoint: str = _DEFAULT_ENDPOINT) -> ModelError:
    """The agentrt error for an SDK or transport exception; `endpoint` is the API root requests go to."""
    if isinstance(exc, genai_errors.APIError):
        status = exc.code
        message = exc.message or str(exc)
        text = f"Gemini API error {status}" + (f" ({exc.status})" if exc.status else "") + f" from {model!r}: {message}"
        requested = response_url(getattr(exc, "response", None))
        if requested:
            text += f" (POST {requested})"
        if status == 404 and re.search(r"/v\d+(?:alpha|beta)?\d*/?$", urlsplit(endpoint).path):
            text += f"; base_url {public_url(endpoint)} ends in an API version, which the SDK adds itself: drop it"
        return classify_api_error(
            status,
            exc.details,
            text=text,
            model=model,
            message=message,
            too_long=_TOO_LONG,
            too_long_statuses=(400,),
            retry_after=_retry_after(exc),
            auth_failed=status == 400 and ("api key not valid" in message.lower() or "API_KEY_INVALID" in str(exc)),
        )
    if isinstance(exc, genai_errors.UnknownApiResponseError):
        return ModelBehaviorError(f"Gemini model {model!r} sent a response that is not JSON: {exc}")
    url = request_target(exc, endpoint)
    if isinstance(exc, _TIMEOUT_ERRORS):
        return ModelTimeoutError(f"Gemini model {model!r} timed out ({url}): {str(exc) or type(exc).__name__}")
    return ModelConnectionError(f"Gemini model {model!r}: cannot connect to {url}: {connection_cause(exc)}")
