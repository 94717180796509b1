"""Local HTTP servers that speak provider wire formats, for hermetic provider-adapter tests.

`WireServer` is an `aiohttp.web` app on 127.0.0.1:<free port> that records every request it
gets and answers each with the next scripted `Reply`: a JSON body with any status and headers,
or a Server-Sent-Events stream written in pieces (frames split mid-way, so clients must parse
incrementally). Builders below turn compact descriptions into recorded-style Anthropic Messages
and Gemini ``streamGenerateContent`` streams.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import socket
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

__all__ = [
    "Recorded",
    "Reply",
    "WireServer",
    "anthropic_error",
    "camel_keys",
    "closed_port_url",
    "anthropic_message",
    "anthropic_sse",
    "gemini_chunk",
    "gemini_error",
    "gemini_sse",
    "gemini_unary",
    "threaded",
]


@dataclass
class Recorded:
    """One request the server received."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class Reply:
    """One scripted answer: `json` (any status) or `sse` frames (status 200 unless given).

    A reply with both serves `json` to Gemini's non-streaming ``:generateContent``.
    """

    status: int = 200
    json: Any = None
    sse: Sequence[str] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    cut_after: int | None = None
    """Drop the connection after this many SSE frames (a stream that dies midway)."""
    delay: float = 0.0
    """Seconds to wait before answering (a stalled provider)."""


class WireServer:
    """Records requests and replays scripted replies, in order."""

    def __init__(self, *replies: Reply, repeat: Reply | None = None) -> None:
        self.requests: list[Recorded] = []
        self._replies: deque[Reply] = deque(replies)
        self._repeat = repeat
        self._runner: web.AppRunner | None = None
        self.url = ""

    def add(self, *replies: Reply) -> None:
        """Queue more replies."""
        self._replies.extend(replies)

    @property
    def last(self) -> Recorded:
        """The most recent request."""
        return self.requests[-1]

    @property
    def bodies(self) -> list[Any]:
        """The JSON bodies of all requests, in order."""
        return [r.body for r in self.requests]

    async def __aenter__(self) -> WireServer:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.Server)
        port = server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
        self.requests.append(
            Recorded(
                method=request.method,
                path=request.path,
                query=dict(request.query),
                headers={k.lower(): v for k, v in request.headers.items()},
                body=body,
            )
        )
        if self._replies:
            reply = self._replies.popleft()
        elif self._repeat is not None:
            reply = self._repeat
        else:
            return web.json_response({"error": "the test scripted no reply for this request"}, status=599)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.sse is None or (reply.json is not None and request.path.endswith(":generateContent")):
            return web.json_response(reply.json, status=reply.status, headers=dict(reply.headers))
        response = web.StreamResponse(
            status=reply.status, headers={"content-type": "text/event-stream", **dict(reply.headers)}
        )
        await response.prepare(request)
        for i, frame in enumerate(reply.sse):
            if reply.cut_after is not None and i >= reply.cut_after:
                # Abort the connection without the chunked terminator: the client sees a broken stream.
                transport = request.transport
                if transport is not None:
                    transport.abort()
                return response
            data = frame.encode()
            half = len(data) // 2
            # Two writes per frame, with a loop turn between, so frames arrive split mid-way.
            await response.write(data[:half])
            await asyncio.sleep(0)
            await response.write(data[half:])
        await response.write_eof()
        return response


@contextmanager
def threaded(server: WireServer) -> Iterator[WireServer]:
    """Run `server` on its own loop in a thread (for tests that drive several `asyncio.run` loops)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(server.__aenter__(), loop).result(10)
        try:
            yield server
        finally:
            asyncio.run_coroutine_threadsafe(server.__aexit__(None, None, None), loop).result(10)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def closed_port_url() -> str:
    """A loopback URL nothing listens on (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# --------------------------------------------------------------------------------------------------
# Anthropic Messages API
# --------------------------------------------------------------------------------------------------
def anthropic_sse(events: Iterable[Mapping[str, Any]]) -> list[str]:
    """Encode Messages stream events as SSE frames (``event: <type>`` + ``data: <json>``)."""
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events]


def _pieces(text: str, n: int) -> list[str]:
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def anthropic_message(
    blocks: Sequence[Mapping[str, Any]],
    *,
    stop_reason: str = "end_turn",
    model: str = "claude-test",
    input_tokens: int = 10,
    output_tokens: int = 5,
    cache_read: int | None = None,
    cache_write: int | None = None,
    msg_id: str = "msg_01",
    ping: bool = True,
) -> list[str]:
    """A recorded-style Messages stream producing `blocks` (in the API's content-block JSON form).

    Text and thinking arrive in several deltas, a thinking block's signature in a
    ``signature_delta``, and tool input as ``input_json_delta`` pieces split mid-JSON.
    """
    usage: dict[str, Any] = {"input_tokens": input_tokens, "output_tokens": 1}
    if cache_read is not None:
        usage["cache_read_input_tokens"] = cache_read
    if cache_write is not None:
        usage["cache_creation_input_tokens"] = cache_write
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": usage,
            },
        }
    ]
    if ping:
        events.append({"type": "ping"})
    for index, block in enumerate(blocks):
        kind = block["type"]
        if kind == "text":
            events.append(
                {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}
            )
            for piece in _pieces(block["text"], 3):
                events.append(
                    {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}
                )
        elif kind == "thinking":
            events.append(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                }
            )
            for piece in _pieces(block["thinking"], 2):
                events.append(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "thinking_delta", "thinking": piece},
                    }
                )
            events.append(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "signature_delta", "signature": block["signature"]},
                }
            )
        elif kind == "redacted_thinking":
            events.append({"type": "content_block_start", "index": index, "content_block": dict(block)})
        elif kind == "tool_use":
            events.append(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}},
                }
            )
            raw = block.get("raw_json")
            partial = raw if raw is not None else json.dumps(block["input"])
            for piece in ["", *_pieces(partial, 3)]:
                events.append(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    }
                )
        else:  # pragma: no cover - test helper misuse
            raise ValueError(f"unknown block type {kind!r}")
        events.append({"type": "content_block_stop", "index": index})
    final_usage: dict[str, Any] = {"output_tokens": output_tokens}
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": final_usage,
        }
    )
    events.append({"type": "message_stop"})
    return anthropic_sse(events)


def anthropic_error(status: int, error_type: str, message: str, headers: Mapping[str, str] | None = None) -> Reply:
    """A Messages API error response."""
    return Reply(
        status=status,
        json={"type": "error", "error": {"type": error_type, "message": message}},
        headers=dict(headers or {}),
    )


# --------------------------------------------------------------------------------------------------
# Gemini generateContent / streamGenerateContent
# --------------------------------------------------------------------------------------------------
def gemini_chunk(
    parts: Sequence[Mapping[str, Any]] | None = None,
    *,
    finish_reason: str | None = None,
    usage: Mapping[str, Any] | None = None,
    model_version: str = "gemini-test",
) -> dict[str, Any]:
    """One ``GenerateContentResponse`` as the REST API sends it (camelCase)."""
    candidate: dict[str, Any] = {"index": 0}
    if parts is not None:
        candidate["content"] = {"role": "model", "parts": [dict(p) for p in parts]}
    if finish_reason is not None:
        candidate["finishReason"] = finish_reason
    chunk: dict[str, Any] = {"candidates": [candidate], "modelVersion": model_version, "responseId": "resp-1"}
    if usage is not None:
        chunk["usageMetadata"] = dict(usage)
    return chunk


def gemini_unary(chunks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``:generateContent`` response equivalent to streamed `chunks` (parts joined, last finish and usage)."""
    parts: list[Any] = []
    merged: dict[str, Any] = {}
    candidate: dict[str, Any] = {"index": 0}
    for chunk in chunks:
        for key, value in chunk.items():
            if key != "candidates":
                merged[key] = value
        for cand in chunk.get("candidates", []):
            parts.extend(cand.get("content", {}).get("parts", []))
            if "finishReason" in cand:
                candidate["finishReason"] = cand["finishReason"]
    if parts or "finishReason" in candidate:
        candidate["content"] = {"role": "model", "parts": parts}
        merged["candidates"] = [candidate]
    return merged


def gemini_sse(chunks: Iterable[Mapping[str, Any]]) -> list[str]:
    """Encode chunks the way ``:streamGenerateContent?alt=sse`` does (``data: <json>`` + CRLF CRLF)."""
    return [f"data: {json.dumps(c)}\r\n\r\n" for c in chunks]


def gemini_error(status: int, code_status: str, message: str, headers: Mapping[str, str] | None = None) -> Reply:
    """A Google API error response (``{"error": {"code", "message", "status"}}``)."""
    return Reply(
        status=status,
        json={"error": {"code": status, "message": message, "status": code_status}},
        headers=dict(headers or {}),
    )


_OPAQUE = frozenset({"parametersJsonSchema", "responseJsonSchema", "responseSchema", "parameters", "args", "response"})


def _camel(name: str) -> str:
    return re.sub(r"_([a-z0-9])", lambda m: m.group(1).upper(), name)


_BYTES_FIELDS = frozenset({"data", "thoughtSignature"})


def camel_keys(value: Any) -> Any:
    """Google request JSON with every field name in lowerCamelCase and bytes in standard base64.

    Protobuf JSON accepts ``snake_case`` and ``lowerCamelCase`` field names alike, and standard or
    URL-safe base64 for bytes; the SDK sends a mix of names and URL-safe base64. Normalising lets
    tests compare whole bodies exactly. User data (JSON schemas, function arguments and
    responses) is left as it is.
    """
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            name = _camel(key)
            if name in _OPAQUE:
                out[name] = item
            elif name in _BYTES_FIELDS and isinstance(item, str):
                out[name] = base64.b64encode(base64.urlsafe_b64decode(item)).decode()
            else:
                out[name] = camel_keys(item)
        return out
    if isinstance(value, list):
        return [camel_keys(v) for v in value]
    return value
