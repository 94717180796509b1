"""``POST /v1/chat/completions``: an agent behind the OpenAI Chat Completions wire format.

`model` names the agent. The session is the ``X-Session-Id`` header, else the ``user`` field,
else a fresh one (its id comes back in the ``X-Session-Id`` response header):

- a session that already has history gets only the request's **last user message** as input
  (OpenAI clients resend the whole conversation; the server's stored history is the truth);
- a new session is seeded with the request's messages (system/developer messages are skipped:
  the agent has its own prompt) and the last user message is the input.

The agent's own model, tools and settings apply; sampling fields (``temperature``, ``tools``, ...)
are accepted and ignored. ``content`` is the text the agent streamed over the whole run (steps
separated by a blank line), identical with and without streaming.

Approvals and external tools: a paused run answers with ``finish_reason: "tool_calls"``, the
waiting calls in ``message.tool_calls`` and a readable note in ``content``. The next request
answers them with ``role: "tool"`` messages (``tool_call_id`` + ``content``): for an approval the
content is ``approve`` / ``deny`` (or JSON ``{"confirmed": true, "input": {...}, "rules": [...]}``);
any other content (a generic framework's own tool output, an error text) **denies** the call with
that text as the reason the model sees. For an external tool the content is the result. A plain
user message answers every pending approval: ``approve``/``yes`` approves, ``deny``/``no`` denies,
anything else denies and passes the text on to the agent.

Citations: when the reply cites knowledge passages (``reply.metadata["citations"]``, an agent with
``knowledge=``), the completion carries them in an extra top-level ``citations`` field (a list of
``{"chunk_id", "source", "title", "location"}``), on the ``chat.completion`` object and, streamed,
on the chunk that carries ``finish_reason``. OpenAI's own ``message.annotations`` is not used: its
only kind, ``url_citation``, needs a URL and the character range of the cited text in the content,
which a knowledge passage does not have, and stream deltas have no annotations at all. Clients
that do not know the field ignore it.

Cost: ``usage`` carries an extra ``cost_usd`` field, the run's cost in US dollars (subagents
included; ``reply.metadata["usage"]["cost_usd"]``), on the ``chat.completion`` object and on the
usage chunk that ``stream_options.include_usage`` adds. It is ``null`` when a model call of the
run had no known price (or the agent reports no usage): never a guess. OpenAI's ``CompletionUsage``
does not forbid extra fields and its clients keep them (``completion.usage.model_extra`` in Python).

``GET /v1/models`` lists the served agents as models (``GET /v1/models/{id}`` one of them).
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from agentrt import _json
from agentrt import events as ev
from agentrt.errors import AgentrtError, UserError
from agentrt.message import (
    META_CONFIRM_RESULTS,
    ContentBlock,
    GenerateReason,
    ImageBlock,
    Msg,
    TextBlock,
    TokenUsage,
    ToolResultBlock,
    ToolUseBlock,
)
from agentrt.permission import ConfirmResult
from agentrt.server._auth import Scope
from agentrt.server._errors import ApiError, error_for_exception, json_response
from agentrt.server._limits import header_safe
from agentrt.server._models import ChatCompletion, ChatCompletionRequest, ChatMessage
from agentrt.server._openapi import error_responses, schema_ref
from agentrt.server.context import citations_of
from agentrt.state.pending import CONFIRM, EXTERNAL, PendingCall

if TYPE_CHECKING:
    from agentrt.agent.base import AgentBase
    from agentrt.server.context import ServerContext

__all__ = ["openapi_paths", "routes"]

PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"
OWNED_BY = "agentrt"
"""``owned_by`` of every listed model (an agent served here)."""
_APPROVE = frozenset({"approve", "approved", "yes", "y", "ok", "okay", "allow", "confirm", "confirmed"})
_DENY = frozenset({"deny", "denied", "no", "n", "reject", "rejected", "refuse", "cancel"})
_FINISH = {
    GenerateReason.STOP: "stop",
    GenerateReason.STRUCTURED_OUTPUT: "stop",
    GenerateReason.INTERRUPTED: "stop",
    GenerateReason.MAX_ITERS: "length",
    GenerateReason.AWAITING_CONFIRMATION: "tool_calls",
    GenerateReason.AWAITING_EXTERNAL_EXECUTION: "tool_calls",
}


def routes(server: ServerContext) -> list[BaseRoute]:
    """The facade's routes: chat completions and the model list."""
    created = int(time.time())

    async def endpoint(request: Request) -> Response:
        return await chat_completions(server, request)

    async def list_models(request: Request) -> Response:
        await server.authenticate(request, scope=Scope.SESSIONS_READ)
        return json_response({"object": "list", "data": [_model(name, created) for name in server.agents]})

    async def retrieve_model(request: Request) -> Response:
        await server.authenticate(request, scope=Scope.SESSIONS_READ)
        name = request.path_params["model"]
        if name not in server.agents:
            shown = name if len(name) <= 100 else name[:100] + "..."
            raise ApiError(404, f"The model {shown!r} does not exist", code="model_not_found", param="model")
        return json_response(_model(name, created))

    return [
        Route(PATH, endpoint, methods=["POST"]),
        Route(MODELS_PATH, list_models, methods=["GET"]),
        Route(MODELS_PATH + "/{model:path}", retrieve_model, methods=["GET"]),
    ]


def _model(name: str, created: int) -> dict[str, Any]:
    """An agent as an OpenAI ``Model`` object."""
    return {"id": name, "object": "model", "created": created, "owned_by": OWNED_BY}


_MODEL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "A served agent, as an OpenAI `Model`.",
    "required": ["id", "object", "created", "owned_by"],
    "properties": {
        "id": {"type": "string", "description": "The agent's name (the `model` of chat completions)."},
        "object": {"type": "string", "enum": ["model"]},
        "created": {"type": "integer", "description": "When the app was built (Unix seconds)."},
        "owned_by": {"type": "string", "enum": [OWNED_BY]},
    },
}


_COST_SCHEMA: dict[str, Any] = {
    "anyOf": [{"type": "number", "minimum": 0}, {"type": "null"}],
    "description": "agentrt extension: the run's cost in US dollars (subagents included); null when a model "
    "call of the run had no known price.",
}
_COMPLETION_SCHEMA: dict[str, Any] = {
    "allOf": [
        schema_ref(ChatCompletion),
        {"properties": {"usage": {"properties": {"cost_usd": _COST_SCHEMA}}}},
    ]
}


def openapi_paths(server: ServerContext) -> dict[str, Any]:
    """The facade's part of the OpenAPI document."""
    return {
        MODELS_PATH: {
            "get": {
                "operationId": "listModels",
                "summary": "OpenAI-compatible model list: the served agents",
                "responses": {
                    "200": {
                        "description": "The agents, as OpenAI `Model` objects.",
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["object", "data"],
                                    "properties": {
                                        "object": {"type": "string", "enum": ["list"]},
                                        "data": {"type": "array", "items": _MODEL_SCHEMA},
                                    },
                                }
                            }
                        },
                    },
                    **error_responses(401, 429),
                },
            }
        },
        MODELS_PATH + "/{model}": {
            "get": {
                "operationId": "retrieveModel",
                "summary": "One served agent, as an OpenAI `Model`",
                "parameters": [
                    {"name": "model", "in": "path", "required": True, "schema": {"type": "string"}},
                ],
                "responses": {
                    "200": {
                        "description": "The agent, as an OpenAI `Model`.",
                        "content": {"application/json": {"schema": _MODEL_SCHEMA}},
                    },
                    **error_responses(401, 404, 429),
                },
            }
        },
        PATH: {
            "post": {
                "operationId": "createChatCompletion",
                "summary": "OpenAI-compatible chat completion (model = agent name)",
                "description": __doc__,
                "parameters": [
                    {
                        "name": "X-Session-Id",
                        "in": "header",
                        "required": False,
                        "description": "The session to continue (else the `user` field, else a new session).",
                        "schema": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": r"^[\x20-\x7e]+$"},
                    }
                ],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": _request_schema(server)}},
                },
                "responses": {
                    "200": {
                        "description": "The completion, or with `stream: true` SSE `data:` chunks ending with "
                        "`data: [DONE]`.",
                        "content": {
                            "application/json": {"schema": _COMPLETION_SCHEMA},
                            "text/event-stream": {
                                "schema": {
                                    "type": "object",
                                    "required": ["data"],
                                    "properties": {"data": {"type": "string"}},
                                    "description": "A `chat.completion.chunk` as JSON, or `[DONE]` last.",
                                }
                            },
                        },
                    },
                    **error_responses(400, 401, 404, 409, 413, 422, 429, 502, 503, 504),
                },
            }
        },
    }


def _request_schema(server: ServerContext) -> dict[str, Any]:
    return {
        "allOf": [
            schema_ref(ChatCompletionRequest),
            {"properties": {"model": {"type": "string", "enum": list(server.agents)}}},
        ]
    }


# -- the endpoint ----------------------------------------------------------------------------------------------
async def chat_completions(server: ServerContext, request: Request) -> Response:
    """Run the agent named by `model` on the request's messages."""
    user_id = await server.authenticate(request, scope=Scope.MESSAGES_WRITE)
    raw = await server.parse_json(request)
    body = server.validate(raw, ChatCompletionRequest)
    if body.model not in server.agents:
        raise ApiError(404, f"no agent named {body.model[:100]!r}", code="model_not_found", param="model")
    agent = server.agents[body.model]
    session_id = request.headers.get("x-session-id") or body.user
    fresh = not session_id
    if not session_id:
        session_id = "chat-" + uuid.uuid4().hex
    server.check_session_id(session_id)
    ctx = server.context_for(user_id, body.model, session_id)
    state = None if fresh else await agent.state_store.load(*ctx.key, agent=server.state_key(agent))
    from agentrt.server.context import pending_calls

    pending = pending_calls(state) if state is not None else []
    has_history = state is not None and bool(state.messages)
    input = _input(body.messages, pending, has_history)
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    completion = _Completion(body.model, agent, include_usage=include_usage)
    headers = {"X-Session-Id": header_safe(session_id)}
    if server.jobs is not None:  # a durable run: a job any replica's worker runs (docs/deployment.md)
        events = await server.job_agent_events(body.model, user_id, session_id, input)
    else:
        events = server.stream_events(agent, ctx, input)
    if body.stream:
        return server.sse_response(
            events, request, encode=completion.chunk_frames, on_error=completion.error_frame, headers=headers
        )
    reply: Msg | None = None
    async for event in events:
        completion.feed(event)
        if isinstance(event, ev.RunFinished) and event.source == agent.name:
            reply = event.msg
    if reply is None:  # pragma: no cover - stream_events raises instead
        raise ApiError(500, "the run ended without a reply", code="internal_error")
    return json_response(completion.response(reply), headers=headers)


# -- request -> agent input -------------------------------------------------------------------------------------
def _text_of(message: ChatMessage) -> str:
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.text or "" for part in content if part.type in ("text", "input_text"))


def _blocks_of(message: ChatMessage) -> list[ContentBlock]:
    content = message.content
    if content is None:
        return []
    if isinstance(content, str):
        return [TextBlock(text=content)] if content else []
    blocks: list[ContentBlock] = []
    for part in content:
        if part.text is not None and part.type in ("text", "input_text"):
            blocks.append(TextBlock(text=part.text))
        elif part.image_url is not None:
            blocks.append(ImageBlock(source=part.image_url.url))
    return blocks


def _to_msg(message: ChatMessage, index: int) -> Msg | None:
    role = message.role
    if role == "user":
        return Msg(role="user", content=_blocks_of(message), name=message.name)
    if role == "assistant":
        blocks = _blocks_of(message)
        for call in message.tool_calls or ():
            blocks.append(ToolUseBlock(id=call.id, name=call.function.name, input=_arguments(call.function.arguments)))
        return Msg(role="assistant", content=blocks, name=message.name)
    if role == "tool":
        if not message.tool_call_id:
            raise ApiError(
                422,
                f"messages.{index}: a tool message needs tool_call_id",
                code="invalid_messages",
                param=f"messages.{index}",
            )
        return Msg(
            role="user",
            content=[ToolResultBlock(id=message.tool_call_id, name=message.name or "", output=_text_of(message))],
        )
    return None  # system / developer / function: the agent has its own prompt


def _arguments(raw: str) -> dict[str, Any]:
    try:
        value = _json.loads(raw) if raw else {}
    except ValueError:
        return {"arguments": raw}
    return value if isinstance(value, dict) else {"arguments": value}


def _input(messages: Sequence[ChatMessage], pending: list[PendingCall], has_history: bool) -> Msg | list[Msg]:
    if pending:
        return _answers(messages, pending)
    last = messages[-1]
    if last.role != "user":
        raise ApiError(
            409 if last.role == "tool" else 422,
            "the last message must be a user message"
            + (" (no tool call of this session waits for a result)" if last.role == "tool" else ""),
            code="invalid_messages",
            param=f"messages.{len(messages) - 1}",
        )
    if has_history:
        msg = _to_msg(last, len(messages) - 1)
        assert msg is not None
        return msg
    seeded = [msg for i, message in enumerate(messages) if (msg := _to_msg(message, i)) is not None]
    return seeded


def _answers(messages: Sequence[ChatMessage], pending: list[PendingCall]) -> Msg:
    """The resume message answering the session's pending calls from the request's trailing messages."""
    by_id = {c.id: c for c in pending}
    trailing: list[tuple[int, ChatMessage]] = []
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role != "tool":
            break
        trailing.append((i, messages[i]))
    trailing.reverse()
    confirms: list[ConfirmResult] = []
    results: list[ContentBlock] = []
    if trailing:
        for i, message in trailing:
            entry = by_id.get(message.tool_call_id or "")
            if entry is None:
                raise ApiError(
                    409,
                    f"messages.{i}: tool call {message.tool_call_id!r} does not wait for an answer in this session "
                    f"(waiting: {', '.join(sorted(by_id))})",
                    code="not_pending",
                    param=f"messages.{i}.tool_call_id",
                )
            text = _text_of(message)
            if entry.kind == CONFIRM:
                confirms.append(_confirmation(entry, text, i))
            else:
                results.append(ToolResultBlock(id=entry.id, name=entry.name, output=text))
        return Msg(role="user", content=results, metadata={META_CONFIRM_RESULTS: confirms} if confirms else {})
    last = messages[-1]
    if last.role != "user":
        raise ApiError(
            422, "answer the pending tool calls with tool messages or a user message", code="invalid_messages"
        )
    if any(c.kind == EXTERNAL for c in pending):
        waiting = ", ".join(f"{c.name} ({c.id})" for c in pending if c.kind == EXTERNAL)
        raise ApiError(
            409,
            f"the session waits for the results of {waiting}: send them as tool messages with their tool_call_id",
            code="awaiting_tool_results",
        )
    text = _text_of(last)
    word = _word(text)
    if word in _APPROVE or word in _DENY:
        confirmed = word in _APPROVE
        return Msg.confirm([ConfirmResult(confirmed=confirmed, tool_call=c.id) for c in pending])
    # Anything else refuses the waiting calls and goes to the agent as the user's next words.
    return Msg.confirm(
        [ConfirmResult(confirmed=False, tool_call=c.id, reason="the user replied instead") for c in pending],
        text=text,
    )


def _word(text: str) -> str:
    return text.strip().strip(".!").strip().lower()


def _confirmation(entry: PendingCall, text: str, index: int) -> ConfirmResult:
    """The answer a tool message gives to a pending approval.

    ``approve``/``deny`` (and their synonyms) or JSON with ``confirmed`` decide it; anything else is
    a denial carrying the text as its reason, so a generic client that answers the call with its
    own tool output (e.g. "Unknown tool name") gets past the approval instead of a 422 forever.
    """
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            data = _json.loads(stripped)
        except ValueError:
            data = None
        if isinstance(data, dict) and "confirmed" in data:
            try:
                return ConfirmResult.coerce({**data, "tool_call_id": entry.id, "name": entry.name})
            except (UserError, ValueError, TypeError, KeyError) as exc:
                raise ApiError(
                    422, f"messages.{index}: {exc}", code="invalid_confirmation", param=f"messages.{index}.content"
                ) from None
    word = _word(stripped)
    if word in _APPROVE or word in _DENY:
        return ConfirmResult(confirmed=word in _APPROVE, tool_call=entry.id)
    return ConfirmResult(confirmed=False, tool_call=entry.id, reason=stripped)


# -- agent events -> completion --------------------------------------------------------------------------------------
class _Completion:
    """Folds one run's events into a completion, or into ``chat.completion.chunk`` frames."""

    def __init__(self, model: str, agent: AgentBase, *, include_usage: bool) -> None:
        self.model = model
        self.source = agent.name
        self.include_usage = include_usage
        self.id = "chatcmpl-" + uuid.uuid4().hex
        self.created = int(time.time())
        self.parts: list[str] = []
        self.step_has_text = False
        self.pending: list[tuple[str, ev.PendingToolCall]] = []
        self.started = False

    def feed(self, event: ev.AgentEvent) -> str | None:
        """Take one event; returns a piece of content to stream, if any."""
        if event.source != self.source:
            return None
        if isinstance(event, (ev.ModelCallStarted, ev.ModelRestarted)):
            self.step_has_text = False
        elif isinstance(event, ev.TextDelta) and event.delta:
            piece = event.delta
            if not self.step_has_text and self.parts:
                piece = "\n\n" + piece
            self.step_has_text = True
            self.parts.append(piece)
            return piece
        elif isinstance(event, ev.RequireUserConfirm):
            self.pending.extend(("confirm", call) for call in event.tool_calls)
        elif isinstance(event, ev.RequireExternalExecution):
            self.pending.extend(("external", call) for call in event.tool_calls)
        return None

    def _note(self) -> str:
        lines = []
        for kind, call in self.pending:
            args = _json.dumps(_json.jsonable(dict(call.input)))
            if kind == "confirm":
                why = f" ({call.reason})" if call.reason else ""
                lines.append(
                    f'[approval needed] {call.name}({args}), id {call.id}{why}. Reply "approve" or "deny" '
                    "(or answer each call with a tool message)."
                )
            else:
                lines.append(
                    f"[tool result needed] {call.name}({args}), id {call.id}: run it and send the result as a tool "
                    f'message with tool_call_id "{call.id}".'
                )
        return "\n".join(lines)

    def _tool_calls(self) -> list[dict[str, Any]]:
        return [
            {
                "index": i,
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": _json.dumps(_json.jsonable(dict(call.input)))},
            }
            for i, (_, call) in enumerate(self.pending)
        ]

    def _usage(self, reply: Msg) -> dict[str, Any]:
        """OpenAI's ``CompletionUsage`` of the run, plus the extension ``cost_usd`` (see `_cost`)."""
        usage = reply.usage or TokenUsage()
        return {
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens,
            "cost_usd": _cost(reply),
        }

    def _content(self, reply: Msg) -> str:
        text = "".join(self.parts) or reply.text
        if self.pending:
            note = self._note()
            text = f"{text}\n\n{note}" if text else note
        return text

    def response(self, reply: Msg) -> dict[str, Any]:
        """The non-streaming completion."""
        message: dict[str, Any] = {"role": "assistant", "content": self._content(reply), "refusal": None}
        if self.pending:
            message["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in self._tool_calls()]
        body = {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": _FINISH.get(reply.generate_reason, "stop"),
                    "logprobs": None,
                }
            ],
            "usage": self._usage(reply),
        }
        citations = citations_of(reply)
        if citations:
            body["citations"] = citations
        return body

    def _chunk(self, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        chunk = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
            **extra,
        }
        return b"data: " + _json.dumps_bytes(chunk) + b"\n\n"

    def chunk_frames(self, event: ev.AgentEvent) -> bytes | None:
        """The SSE frames for one event (None when it adds nothing)."""
        frames: list[bytes] = []
        if not self.started:
            self.started = True
            frames.append(self._chunk({"role": "assistant", "content": ""}))
        piece = self.feed(event)
        if piece:
            frames.append(self._chunk({"content": piece}))
        if isinstance(event, ev.RunFinished) and event.source == self.source:
            reply = event.msg
            if not self.parts and reply.text:
                self.parts.append(reply.text)
                frames.append(self._chunk({"content": reply.text}))
            if self.pending:
                note = self._note()
                frames.append(
                    self._chunk({"content": ("\n\n" if self.parts else "") + note, "tool_calls": self._tool_calls()})
                )
            citations = citations_of(reply)
            extra = {"citations": citations} if citations else {}
            frames.append(self._chunk({}, _FINISH.get(reply.generate_reason, "stop"), **extra))
            if self.include_usage:
                usage_chunk = {
                    "id": self.id,
                    "object": "chat.completion.chunk",
                    "created": self.created,
                    "model": self.model,
                    "choices": [],
                    "usage": self._usage(reply),
                }
                frames.append(b"data: " + _json.dumps_bytes(usage_chunk) + b"\n\n")
            frames.append(b"data: [DONE]\n\n")
        return b"".join(frames) if frames else None

    def error_frame(self, exc: BaseException) -> bytes:
        """An error in the middle of a stream, the way OpenAI sends one, then the end marker."""
        error = error_for_exception(exc) if isinstance(exc, (AgentrtError, ApiError)) else None
        if error is None:
            error = ApiError(500, "internal server error", code="internal_error")
        return b"data: " + _json.dumps_bytes(error.body()) + b"\n\ndata: [DONE]\n\n"


def _cost(reply: Msg) -> float | None:
    """The run's cost in US dollars from ``reply.metadata["usage"]`` (`agentrt.agent.usage.RunUsage`).

    None when it is unknown: a model call of the run had no known price, or the agent reports no
    usage (never a guess). Anything but a finite number >= 0 is unknown too.
    """
    usage = reply.metadata.get("usage") if reply.metadata else None
    cost = usage.get("cost_usd") if isinstance(usage, dict) else None
    if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not math.isfinite(cost) or cost < 0:
        return None
    return float(cost)
