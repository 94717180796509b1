"""OpenAI-compatible Chat Completions over aiohttp.

Serves OpenAI, DeepSeek, DashScope (compatible mode), Ollama ``/v1``, vLLM, LM Studio, OpenRouter
and anything else that speaks ``POST /chat/completions``.

No SDK on purpose: measured on the shared benchmark, the official SDK costs about 2 ms of CPU per
agent run over a raw aiohttp session, which is several times the whole runtime's budget. So this
module speaks the wire format itself over one shared `aiohttp.ClientSession` per event loop
(connection limit raised well above aiohttp's 100), serialises with orjson, and parses the SSE
stream incrementally. Retries and the stall (idle) timeout live in `agentrt.model.resilience`;
`model_from_id` puts them around these models by default.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import fields
from typing import Any, ClassVar
from urllib.parse import urlsplit

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from agentrt.errors import (
    AgentrtError,
    ModelAPIError,
    ModelBehaviorError,
    ModelConnectionError,
    ModelError,
    ModelTimeoutError,
    UserError,
)
from agentrt.message import Msg
from agentrt.model.base import DEFAULT_OPTIONS, ChatModel, ChatResponse, GenerateOptions, ToolSchema
from agentrt.model.providers._errors import connection_cause, public_url
from agentrt.model.providers._http import DEFAULT_MAX_CONNECTIONS, SessionLease
from agentrt.model.providers._openai_format import (
    ChatCompletionsFormat,
    StreamState,
    _uses_max_completion_tokens,
    api_error,
    parse_chunk,
    parse_completion,
    stream_error,
)
from agentrt.model.providers._sse import SSEDecoder

_loads: Callable[[bytes], Any]
try:
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - orjson is a core dependency
    import json

    _loads = json.loads

__all__ = [
    "DashScopeChatModel",
    "DeepSeekChatModel",
    "LMStudioChatModel",
    "OllamaChatModel",
    "OpenAIChatModel",
    "OpenRouterChatModel",
    "VLLMChatModel",
]

_OPTION_FIELDS = frozenset(f.name for f in fields(GenerateOptions))
_DONE = b"[DONE]"
_EVENT_STREAM = "text/event-stream"
_BOM = b"\xef\xbb\xbf"
_SSE_STARTS = (b"data:", b"event:", b":", b"id:", b"retry:")


def _is_sse(raw: bytes) -> bool:
    """Whether a body is SSE frames rather than JSON (looks at its first field name only)."""
    head = raw[:64].lstrip()
    if head[:3] == _BOM:
        head = head[3:].lstrip()
    return head.startswith(_SSE_STARTS)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("agentrt")
    except Exception:  # pragma: no cover - running from a source tree without metadata
        return "dev"


_USER_AGENT = f"agentrt/{_version()} aiohttp/{aiohttp.__version__}"


class OpenAIChatModel(ChatModel):
    """A Chat Completions model over aiohttp.

    Args:
        model_name: The model id the endpoint knows (``gpt-4o-mini``, ``deepseek-chat``, ``llama3.1``...).
        api_key: Sent as ``Authorization: Bearer``; default: the provider's environment variable.
        base_url: The API root holding ``/chat/completions``; default: the provider's (or its env variable).
        options: Default `GenerateOptions` for every call (per-call options are laid over them). Their
            fields may also be given as keywords: ``OpenAIChatModel("gpt-4o", temperature=0.2)``.
        session: An `aiohttp.ClientSession` to use instead of the shared one; the model never closes it.
        stream: True streams every reply (SSE); False asks for whole completions; None (the
            default) streams when the caller consumes the reply as it is generated and asks for the
            whole completion when nobody does (`GenerateOptions.incremental` is False: an agent
            call whose events nobody streams), which costs less CPU. ``extra={"openai_stream": ...}``
            decides per call.
        stream_usage: Ask for the usage chunk at the end of a stream (``stream_options.include_usage``).
        send_reasoning_content: Send assistant thinking back as ``reasoning_content`` (DeepSeek-style
            endpoints that want it); otherwise thinking blocks are dropped from the prompt.
        send_names: Send `Msg.name` as the message ``name`` (multi-speaker history).
        max_tokens_param: ``"max_tokens"`` or ``"max_completion_tokens"``; default: the latter for
            OpenAI's o-series and gpt-5 models.
        headers: Extra HTTP headers (e.g. OpenRouter's ``HTTP-Referer``).
        organization: OpenAI organisation id (``OpenAI-Organization`` header).
        project: OpenAI project id (``OpenAI-Project`` header).
        timeout: Total seconds per request (aiohttp ``total``); None: no limit (use the resilience
            wrapper's first-chunk and idle timeouts instead). ``GenerateOptions.timeout`` overrides it.
        connect_timeout: Seconds to open a connection (TCP and TLS).
        max_connections: Pool size of the shared session.
        trust_env: Honour ``HTTP(S)_PROXY`` and ``~/.netrc`` (off: the lookup costs CPU on every request).
    """

    provider: ClassVar[str] = "openai"
    price_provider: ClassVar[str | None] = "openai"
    supports_native_tools: ClassVar[bool] = True
    supports_structured_output: ClassVar[bool] = True
    supports_vision: ClassVar[bool] = True
    supports_thinking: ClassVar[bool] = False

    default_base_url: ClassVar[str] = "https://api.openai.com/v1"
    base_url_env: ClassVar[str | None] = "OPENAI_BASE_URL"
    api_key_env: ClassVar[str | None] = "OPENAI_API_KEY"
    requires_api_key: ClassVar[bool] = True
    """Whether a key is needed when talking to `default_base_url` (local servers need none)."""
    default_send_reasoning: ClassVar[bool] = False

    def __init__(
        self,
        model_name: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        options: GenerateOptions | None = None,
        session: aiohttp.ClientSession | None = None,
        stream: bool | None = None,
        stream_usage: bool = True,
        send_reasoning_content: bool | None = None,
        send_names: bool = True,
        max_tokens_param: str | None = None,
        headers: Mapping[str, str] | None = None,
        organization: str | None = None,
        project: str | None = None,
        timeout: float | None = None,
        connect_timeout: float | None = 10.0,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        trust_env: bool = False,
        **option_fields: Any,
    ) -> None:
        if not model_name:
            raise UserError(f"{type(self).__name__} needs a model name")
        unknown = set(option_fields) - _OPTION_FIELDS
        if unknown:
            raise UserError(
                f"{type(self).__name__} got unknown option(s) {sorted(unknown)}; generation options are "
                f"{sorted(_OPTION_FIELDS)}"
            )
        self.model_name = model_name
        if option_fields:
            options = (options or DEFAULT_OPTIONS).merge(GenerateOptions(**option_fields))
        self.options = options or DEFAULT_OPTIONS
        self.base_url, explicit_url = self._resolve_base_url(base_url)
        self.api_key = self._resolve_api_key(api_key, explicit_url)
        if max_tokens_param is None:
            max_tokens_param = (
                "max_completion_tokens"
                if self.provider == "openai" and _uses_max_completion_tokens(model_name)
                else "max_tokens"
            )
        if max_tokens_param not in ("max_tokens", "max_completion_tokens"):
            raise UserError(
                f"max_tokens_param must be 'max_tokens' or 'max_completion_tokens', not {max_tokens_param!r}"
            )
        self.stream_by_default = stream
        self.stream_usage = stream_usage
        self.format = ChatCompletionsFormat(
            provider=self.provider,
            send_names=send_names,
            send_reasoning=self.default_send_reasoning if send_reasoning_content is None else send_reasoning_content,
            max_tokens_param=max_tokens_param,
        )
        try:
            self._url = URL(self.base_url.rstrip("/") + "/chat/completions", encoded=False)
        except (TypeError, ValueError) as exc:
            raise UserError(f"invalid base_url {self.base_url!r}: {exc}") from None
        if self._url.scheme not in ("http", "https") or not self._url.host:
            raise UserError(f"base_url must be an http(s) URL like 'https://api.openai.com/v1', not {self.base_url!r}")
        base_headers = {"Content-Type": "application/json", "User-Agent": _USER_AGENT}
        if self.api_key:
            base_headers["Authorization"] = f"Bearer {self.api_key}"
        if organization:
            base_headers["OpenAI-Organization"] = organization
        if project:
            base_headers["OpenAI-Project"] = project
        if headers:
            base_headers.update(headers)
        # Immutable multidicts: aiohttp takes them as they are instead of copying a dict into one per request.
        self._headers = CIMultiDictProxy(CIMultiDict({**base_headers, "Accept": "application/json"}))
        self._stream_headers = CIMultiDictProxy(CIMultiDict({**base_headers, "Accept": _EVENT_STREAM}))
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._client_timeout = aiohttp.ClientTimeout(total=timeout, sock_connect=connect_timeout)
        self._lease = SessionLease(session=session, max_connections=max_connections, trust_env=trust_env)

    # -- configuration --------------------------------------------------------------------------
    def _resolve_base_url(self, base_url: str | None) -> tuple[str, bool]:
        if base_url:
            return base_url, True
        env = os.environ.get(self.base_url_env) if self.base_url_env else None
        if env:
            return self._normalise_env_url(env), True
        return self.default_base_url, False

    def _normalise_env_url(self, url: str) -> str:
        return url

    def _resolve_api_key(self, api_key: str | None, explicit_url: bool) -> str | None:
        if api_key:
            return api_key
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            return key
        if self.requires_api_key and not explicit_url:
            raise UserError(
                f"no API key for {self.provider!r} models: set {self.api_key_env} or pass api_key=...; "
                "for offline tests use agentrt.model.ScriptedModel (or point base_url at a local server)"
            )
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model_name!r}, base_url={self.base_url!r})"

    # -- the model ------------------------------------------------------------------------------
    async def stream(
        self, messages: Sequence[Msg], tools: Sequence[ToolSchema] = (), options: GenerateOptions | None = None
    ) -> AsyncIterator[ChatResponse]:
        """Stream the reply: text, reasoning and tool-call deltas, then finish reason and usage."""
        options = self._call_options(options)
        body, streaming = self._request_body(messages, tools, options, self._streamed(options))
        timeout = self._request_timeout(options)
        session = self._lease.get() or await self._lease.acquire()
        try:
            async with session.post(
                self._url,
                data=body,
                headers=self._stream_headers if streaming else self._headers,
                timeout=timeout,
            ) as resp:
                await self._raise_for_status(resp)
                if not streaming or resp.content_type != _EVENT_STREAM:
                    for part in self._whole_chunks(await resp.read()):
                        yield part
                    return
                # The SSE loop is inlined here: a helper generator would add a layer per chunk.
                decoder = SSEDecoder()
                state = StreamState()
                done = finished = False
                async for data in resp.content.iter_any():
                    for event, payload in decoder.feed(data):
                        if done or payload == _DONE:
                            done = True  # read on to the end, so the connection goes back to the pool
                            continue
                        chunk = self._event(event, payload, state)
                        if chunk is not None:
                            if chunk.finish_reason is not None:
                                finished = True
                            yield chunk
                if not done:
                    for event, payload in decoder.flush():
                        if payload == _DONE:
                            done = True
                        elif (chunk := self._event(event, payload, state)) is not None:
                            finished = finished or chunk.finish_reason is not None
                            yield chunk
                if not (done or finished):
                    raise self._cut_short()
        except ModelError:
            raise
        except (TimeoutError, aiohttp.ClientError, ConnectionError) as exc:
            raise self._transport_error(exc) from exc

    async def whole_reply(
        self, messages: Sequence[Msg], tools: Sequence[ToolSchema] = (), options: GenerateOptions | None = None
    ) -> list[ChatResponse] | None:
        """The reply of a call that is not streamed, as `stream` would yield it; None for a streamed call.

        A coroutine all the way down to aiohttp: no async generator, and the response awaited
        directly rather than through ``async with session.post(...)``, so a request in flight holds
        fewer objects (see `ChatModel.whole_reply`).
        """
        if type(self).stream is not OpenAIChatModel.stream:
            return None  # a subclass that changed how replies are read: it gets its `stream` called
        options = self._call_options(options)
        if self._streamed(options):
            return None
        body, streaming = self._request_body(messages, tools, options, False)
        if streaming:  # an ``openai_stream`` extra asked for it after all
            return None
        timeout = self._request_timeout(options)
        session = self._lease.get() or await self._lease.acquire()
        try:
            resp = await session.post(self._url, data=body, headers=self._headers, timeout=timeout)
            async with resp:
                await self._raise_for_status(resp)
                raw = await resp.read()
        except ModelError:
            raise
        except (TimeoutError, aiohttp.ClientError, ConnectionError) as exc:
            raise self._transport_error(exc) from exc
        return self._whole_chunks(raw)

    def _request_body(
        self, messages: Sequence[Msg], tools: Sequence[ToolSchema], options: GenerateOptions, stream: bool
    ) -> tuple[bytes, bool]:
        """The encoded request body, and whether it asks for a stream (``openai_stream`` extras win)."""
        return self.format.encode(
            self.model_name, messages, tools, options, stream=stream, stream_usage=self.stream_usage
        )

    def _whole_chunks(self, raw: bytes) -> list[ChatResponse]:
        """The chunks of a whole body: a completion, or SSE frames in a plain body folded as a stream.

        (Proxies answer non-stream requests with SSE frames; a server may ignore ``"stream": true``.)
        """
        if not _is_sse(raw):
            return [self._completion(raw)]
        decoder = SSEDecoder()
        state = StreamState()
        chunks: list[ChatResponse] = []
        done = finished = False
        for event, payload in decoder.feed(raw):
            if done or payload == _DONE:
                done = True
                continue
            chunk = self._event(event, payload, state)
            if chunk is not None:
                finished = finished or chunk.finish_reason is not None
                chunks.append(chunk)
        if not done:
            for event, payload in decoder.flush():
                if payload == _DONE:
                    done = True
                elif (chunk := self._event(event, payload, state)) is not None:
                    finished = finished or chunk.finish_reason is not None
                    chunks.append(chunk)
        if not (done or finished):
            raise self._cut_short()
        return chunks

    def _cut_short(self) -> ModelConnectionError:
        # A clean EOF without [DONE] or a finish reason: the server (or a proxy) cut the reply.
        return ModelConnectionError(
            f"{self.provider} model {self.model_name!r}: the response stream ended before the reply was complete"
        )

    async def _raise_for_status(self, resp: aiohttp.ClientResponse) -> None:
        """Raise the typed error for an HTTP error response (the key never shows in its message)."""
        if resp.status >= 400:
            raise api_error(
                provider=self.provider,
                model=self.model_name,
                status=resp.status,
                headers=resp.headers,
                raw=await resp.read(),
                api_key=self.api_key,
                key_env=self.api_key_env,
                url=str(self._url),
                base_url=self.base_url,
            )

    def streams(self, options: GenerateOptions | None = None) -> bool:
        """Whether a call with `options` asks for a stream (SSE) rather than the whole completion."""
        return self._streamed(self._call_options(options))

    def _streamed(self, options: GenerateOptions) -> bool:
        """The ``stream`` flag of the request body (before ``openai_stream`` extras, which win)."""
        if options.extra:
            keys = ("openai_stream", self.provider + "_stream")
            chosen = [value for key, value in options.extra.items() if key in keys]
            if chosen:  # the body takes the last of them (see ChatCompletionsFormat._apply_extra)
                return chosen[-1] is True
        if self.stream_by_default is not None:
            return self.stream_by_default
        return options.incremental is not False

    def _call_options(self, options: GenerateOptions | None) -> GenerateOptions:
        """This call's options over the model's defaults."""
        if options is None:
            return self.options
        if self.options is not DEFAULT_OPTIONS:
            return self.options.merge(options)
        return options

    def _request_timeout(self, options: GenerateOptions) -> aiohttp.ClientTimeout:
        """The request timeout: the call's ``timeout`` option, else the model's."""
        if options.timeout is not None:
            return aiohttp.ClientTimeout(total=options.timeout, sock_connect=self.connect_timeout)
        return self._client_timeout

    def _transport_error(self, exc: TimeoutError | aiohttp.ClientError | ConnectionError) -> AgentrtError:
        """The agentrt error for a failure of the HTTP transport (checked most specific first)."""
        url = public_url(self._url)
        if isinstance(exc, TimeoutError):  # aiohttp's ServerTimeoutError and ConnectionTimeoutError included
            return ModelTimeoutError(
                f"{self.provider} model {self.model_name!r}: request to {self._url.host} timed out "
                f"({str(exc) or type(exc).__name__}; POST {url})"
            )
        if isinstance(exc, aiohttp.InvalidURL):
            return UserError(f"invalid base_url {self.base_url!r}: {exc}")
        if isinstance(exc, aiohttp.ClientConnectorError):
            return ModelConnectionError(
                f"{self.provider} model {self.model_name!r}: cannot connect to {url}: {connection_cause(exc)}"
            )
        return ModelConnectionError(
            f"{self.provider} model {self.model_name!r}: connection to {self._url.host} failed: "
            f"{connection_cause(exc)} (POST {url})"
        )

    def _completion(self, raw: bytes) -> ChatResponse:
        if raw[:3] == _BOM:
            raw = raw[3:]
        try:
            obj = _loads(raw)
        except ValueError:
            raise ModelBehaviorError(
                f"{self.provider} model {self.model_name!r}: the response is not JSON: {raw[:200]!r}"
            ) from None
        if not isinstance(obj, Mapping):
            raise ModelBehaviorError(f"{self.provider} model {self.model_name!r}: unexpected body {raw[:200]!r}")
        if obj.get("error") or obj.get("object") == "error":
            raise stream_error(provider=self.provider, model=self.model_name, obj=obj, api_key=self.api_key)
        try:
            return parse_completion(obj)
        except (TypeError, AttributeError, KeyError, IndexError) as exc:
            raise ModelBehaviorError(
                f"{self.provider} model {self.model_name!r}: unexpected response shape ({exc!r}): {raw[:200]!r}"
            ) from None

    def _event(self, event: str, payload: bytes, state: StreamState) -> ChatResponse | None:
        try:
            obj = _loads(payload)
        except ValueError:
            self._reject_unreadable(event, payload)
            return None
        if type(obj) is not dict:
            raise ModelBehaviorError(
                f"{self.provider} model {self.model_name!r}: unexpected stream chunk {payload[:200]!r}"
            )
        if ("error" in obj or event == "error") and (obj.get("error") or event == "error"):
            # {"error": {...}} mid-stream (OpenAI, vLLM, OpenRouter, which also sends choices with it);
            # "error": null on every chunk (some servers) is no error.
            raise stream_error(provider=self.provider, model=self.model_name, obj=obj, api_key=self.api_key)
        try:
            chunk = parse_chunk(obj, state)
        except (TypeError, AttributeError, KeyError, IndexError) as exc:
            raise ModelBehaviorError(
                f"{self.provider} model {self.model_name!r}: unexpected stream chunk ({exc!r}): {payload[:200]!r}"
            ) from None
        if chunk is None and obj.get("object") == "error":  # older vLLM: {"object": "error", "message": ...}
            raise stream_error(provider=self.provider, model=self.model_name, obj=obj, api_key=self.api_key)
        return chunk

    def _reject_unreadable(self, event: str, payload: bytes) -> None:
        """Raise for a chunk that is not JSON, unless it is harmless (an empty heartbeat)."""
        text = payload.strip()
        if not text or text == _DONE:
            return None  # an empty heartbeat ("data:" alone), or "[DONE]" with stray spaces
        if event == "error":
            message = text[:500].decode("utf-8", "replace")
            if self.api_key:
                message = message.replace(self.api_key, "***")
            raise ModelAPIError(
                f"{self.provider} model {self.model_name!r}: error in the response stream: {message}",
                status=None,
                body=message,
                model=self.model_name,
            )
        raise ModelBehaviorError(
            f"{self.provider} model {self.model_name!r}: unreadable stream chunk {payload[:200]!r}"
        )

    async def aclose(self) -> None:
        """Release the shared session (closed when no other model uses it); a given session stays open."""
        await self._lease.release()


# --------------------------------------------------------------------------------------------------
# OpenAI-compatible providers: defaults only
# --------------------------------------------------------------------------------------------------
class DeepSeekChatModel(OpenAIChatModel):
    """DeepSeek (``DEEPSEEK_API_KEY``); reasoning is read from and sent back as ``reasoning_content``."""

    provider: ClassVar[str] = "deepseek"
    price_provider: ClassVar[str | None] = "deepseek"
    supports_vision: ClassVar[bool] = False
    supports_thinking: ClassVar[bool] = True
    default_base_url: ClassVar[str] = "https://api.deepseek.com/v1"
    base_url_env: ClassVar[str | None] = "DEEPSEEK_BASE_URL"
    api_key_env: ClassVar[str | None] = "DEEPSEEK_API_KEY"
    default_send_reasoning: ClassVar[bool] = True


class DashScopeChatModel(OpenAIChatModel):
    """Alibaba DashScope in OpenAI-compatible mode (``DASHSCOPE_API_KEY``): Qwen models."""

    provider: ClassVar[str] = "dashscope"
    price_provider: ClassVar[str | None] = None  # not in the genai-prices table
    supports_thinking: ClassVar[bool] = True
    default_base_url: ClassVar[str] = "https://dashscope.aliyuncs.com/compatible-mode/v1"
    base_url_env: ClassVar[str | None] = "DASHSCOPE_BASE_URL"
    api_key_env: ClassVar[str | None] = "DASHSCOPE_API_KEY"


class OpenRouterChatModel(OpenAIChatModel):
    """OpenRouter (``OPENROUTER_API_KEY``); model names look like ``anthropic/claude-sonnet-4``."""

    provider: ClassVar[str] = "openrouter"
    price_provider: ClassVar[str | None] = "openrouter"
    supports_thinking: ClassVar[bool] = True
    default_base_url: ClassVar[str] = "https://openrouter.ai/api/v1"
    base_url_env: ClassVar[str | None] = "OPENROUTER_BASE_URL"
    api_key_env: ClassVar[str | None] = "OPENROUTER_API_KEY"


class _LocalServerModel(OpenAIChatModel):
    requires_api_key: ClassVar[bool] = False
    price_provider: ClassVar[str | None] = None  # your own hardware: set `price` to count it
    supports_thinking: ClassVar[bool] = True

    def _normalise_env_url(self, url: str) -> str:
        # OLLAMA_BASE_URL=http://host:11434 (the server root, as Ollama's own docs write it) means its /v1 API.
        if urlsplit(url).path in ("", "/"):
            return url.rstrip("/") + "/v1"
        return url


class OllamaChatModel(_LocalServerModel):
    """Ollama's OpenAI-compatible API (``OLLAMA_BASE_URL``, default ``http://localhost:11434/v1``); no key."""

    provider: ClassVar[str] = "ollama"
    default_base_url: ClassVar[str] = "http://localhost:11434/v1"
    base_url_env: ClassVar[str | None] = "OLLAMA_BASE_URL"
    api_key_env: ClassVar[str | None] = "OLLAMA_API_KEY"


class VLLMChatModel(_LocalServerModel):
    """A vLLM server (``VLLM_BASE_URL``, default ``http://localhost:8000/v1``); key optional (``VLLM_API_KEY``)."""

    provider: ClassVar[str] = "vllm"
    default_base_url: ClassVar[str] = "http://localhost:8000/v1"
    base_url_env: ClassVar[str | None] = "VLLM_BASE_URL"
    api_key_env: ClassVar[str | None] = "VLLM_API_KEY"


class LMStudioChatModel(_LocalServerModel):
    """LM Studio's local server (``LMSTUDIO_BASE_URL``, default ``http://localhost:1234/v1``); no key."""

    provider: ClassVar[str] = "lmstudio"
    default_base_url: ClassVar[str] = "http://localhost:1234/v1"
    base_url_env: ClassVar[str | None] = "LMSTUDIO_BASE_URL"
    api_key_env: ClassVar[str | None] = "LMSTUDIO_API_KEY"
