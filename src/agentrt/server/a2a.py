"""A2A facade: every agent as an A2A agent (agent card, JSON-RPC ``SendMessage`` / ``SendStreamingMessage``).

Built on the ``a2a-sdk`` server pieces: an `AgentExecutor` per agent driving ``agent.stream_events``,
the SDK's ``DefaultRequestHandler`` and JSON-RPC routes (A2A 1.0 method names, plus the 0.3 names
``message/send`` and ``message/stream``), and a task store kept in memory (bounded).

* ``GET /a2a/{agent}/.well-known/agent-card.json``: the agent card (public, so clients can discover
  the bearer-key security scheme); ``GET /.well-known/agent-card.json`` too when the app serves one
  agent.
* ``POST /a2a/{agent}``: JSON-RPC, authenticated with the server's API keys.

The A2A context id is the agentrt session id (under the caller's user id); task states follow the
reply: ``completed``, ``input-required`` while tool calls wait for approval or for the client
(carrying the pending calls in a data part), ``canceled`` when interrupted, ``failed`` on errors.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping, Sequence
from typing import Any
from urllib.parse import quote

from a2a.auth.user import UnauthenticatedUser, User
from a2a.helpers import get_data_parts, new_data_part, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import DefaultServerCallContextBuilder, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    HTTPAuthSecurityScheme,
    Message,
    Part,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    Task,
    TaskState,
    TaskStatus,
)
from a2a.utils.constants import (
    AGENT_CARD_WELL_KNOWN_PATH,
    PROTOCOL_VERSION_0_3,
    PROTOCOL_VERSION_1_0,
    TransportProtocol,
)
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive

from agentrt import _json
from agentrt import events as ev
from agentrt.agent.base import AgentBase
from agentrt.context import RuntimeContext
from agentrt.errors import UserError
from agentrt.message import (
    META_CONFIRM_RESULTS,
    META_STRUCTURED,
    AudioBlock,
    Base64Source,
    ContentBlock,
    GenerateReason,
    ImageBlock,
    Msg,
    TextBlock,
    ToolResultBlock,
    VideoBlock,
)
from agentrt.server._auth import Scope
from agentrt.server._errors import ApiError, protocol_message
from agentrt.server.context import ServerContext, pending_calls
from agentrt.state.pending import CONFIRM, EXTERNAL, PendingCall

__all__ = [
    "DATA_KEY",
    "SECURITY_SCHEME",
    "TEXT_ARTIFACT",
    "AgentrtExecutor",
    "build_agent_card",
    "openapi_paths",
    "routes",
]

DATA_KEY = "agentrt"
"""Key of the agentrt payload inside A2A data parts (pending calls, tool activity)."""
SECURITY_SCHEME = "bearer"
"""Name of the card's security scheme: ``Authorization: Bearer <API key>``."""
INTERRUPTED_TASK_TIMEOUT = 600.0
"""Seconds an ``input-required`` task stays loaded; a later answer reloads it from the task store."""
MAX_TASKS = 10_000
"""Tasks kept per agent by the in-memory task store before the oldest (finished ones first) are dropped."""
MAX_TOOL_OUTPUT = 4000
"""Characters of a tool's output shown in a task's progress update (the session keeps all of it)."""
TEXT_ARTIFACT = "text"
"""Name of the artifacts that carry the reply's text blocks (one per block)."""

_SCOPE_USER = "agentrt.user_id"
_APPROVE = frozenset({"approve", "approved", "yes", "y", "ok", "allow"})
_DENY = frozenset({"deny", "denied", "no", "n", "reject"})
_MEDIA: dict[str, type[ImageBlock | AudioBlock | VideoBlock]] = {
    "image": ImageBlock,
    "audio": AudioBlock,
    "video": VideoBlock,
}


# ==================================================================================================
# Routes
# ==================================================================================================
def routes(server: ServerContext) -> list[BaseRoute]:
    """The A2A routes: per agent a card and a JSON-RPC endpoint under ``/a2a/{agent}``."""
    builder = _ContextBuilder()
    endpoints: dict[str, Callable[[Request], Awaitable[Response]]] = {}
    cards: dict[str, Callable[[Request], Awaitable[Response]]] = {}
    for name, agent in server.agents.items():
        path = "/a2a/" + quote(name, safe="")
        handler = DefaultRequestHandler(
            agent_executor=AgentrtExecutor(server, name, agent),
            task_store=_BoundedTaskStore(MAX_TASKS),  # per agent: a task id never crosses agents
            agent_card=build_agent_card(agent, "http://localhost" + path),
            interrupted_task_timeout=INTERRUPTED_TASK_TIMEOUT,
        )
        [route] = create_jsonrpc_routes(handler, "/", context_builder=builder, enable_v0_3_compat=True)
        if not isinstance(route, Route):  # pragma: no cover - the SDK builds plain routes
            raise TypeError(f"unexpected A2A route {route!r}")
        endpoints[name] = route.endpoint
        cards[name] = _card_endpoint(agent, path)

    async def rpc(request: Request) -> Response:
        user_id = await server.authenticate(request, scope=Scope.MESSAGES_WRITE)
        name = request.path_params["agent"]
        server.get_agent(name)  # 404 for an unknown agent
        # The server reads the body under its size limit (413) and JSON check (400); the SDK reads
        # the request itself, so it gets the parsed body back as bytes.
        body = _json.dumps_bytes(await server.parse_json(request))
        request.scope[_SCOPE_USER] = user_id
        response: Response = await endpoints[name](Request(request.scope, _replay(body, request.receive)))
        return response

    async def card(request: Request) -> Response:
        name = request.path_params["agent"]
        server.get_agent(name)
        return await cards[name](request)

    out: list[BaseRoute] = [
        Route("/a2a/{agent}", rpc, methods=["POST"], name="a2a_rpc"),
        Route("/a2a/{agent}" + AGENT_CARD_WELL_KNOWN_PATH, card, methods=["GET"], name="a2a_card"),
    ]
    if len(cards) == 1:
        [only] = cards.values()
        out.append(Route(AGENT_CARD_WELL_KNOWN_PATH, only, methods=["GET"], name="a2a_root_card"))
    return out


def openapi_paths(server: ServerContext) -> dict[str, Any]:
    """The OpenAPI description of the A2A routes."""
    agent_param = {
        "name": "agent",
        "in": "path",
        "required": True,
        "description": "The agent's name.",
        "schema": {"type": "string", "enum": list(server.agents)},
    }
    return {
        "/a2a/{agent}": {
            "post": {
                "operationId": "a2aJsonRpc",
                "summary": "A2A JSON-RPC endpoint",
                "description": "A2A 1.0 methods (SendMessage, SendStreamingMessage, GetTask, CancelTask, ...; send "
                "`A2A-Version: 1.0`) and the 0.3 ones (message/send, message/stream, tasks/get, ...). The context "
                "id is the session id. See docs/protocols.md.",
                "parameters": [agent_param],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["jsonrpc", "method"],
                                "properties": {
                                    "jsonrpc": {"const": "2.0"},
                                    "id": {"type": ["string", "integer", "null"]},
                                    "method": {"type": "string"},
                                    "params": {"type": "object"},
                                },
                            }
                        }
                    },
                },
                "responses": {
                    "200": {
                        "description": "A JSON-RPC response, or an SSE stream for streaming methods.",
                        "content": {"application/json": {}, "text/event-stream": {}},
                    },
                    "400": {"description": "Not JSON."},
                    "401": {"description": "Missing or unknown API key."},
                    "404": {"description": "No such agent."},
                    "413": {"description": "Body too large."},
                    "429": {"description": "Rate limited."},
                },
            }
        },
        "/a2a/{agent}" + AGENT_CARD_WELL_KNOWN_PATH: {
            "get": {
                "operationId": "a2aAgentCard",
                "summary": "The agent's A2A agent card",
                "parameters": [agent_param],
                "security": [],
                "responses": {
                    "200": {"description": "The agent card.", "content": {"application/json": {}}},
                    "404": {"description": "No such agent."},
                },
            }
        },
    }


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands the already-read body to the SDK (which reads the request itself)."""
    sent = False

    async def replay() -> MutableMapping[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _card_endpoint(agent: AgentBase, path: str) -> Callable[[Request], Awaitable[Response]]:
    cache: dict[str, dict[str, Any]] = {}

    async def card(request: Request) -> Response:
        base = str(request.base_url).rstrip("/")
        body = cache.get(base)
        if body is None:
            body = agent_card_to_dict(build_agent_card(agent, base + path))
            if len(cache) < 16:  # one entry per host name the app is reached by
                cache[base] = body
        return JSONResponse(body)

    return card


def build_agent_card(agent: AgentBase, url: str) -> AgentCard:
    """The A2A agent card of `agent` served at `url` (JSON-RPC, A2A 1.0 and 0.3)."""
    from agentrt import __version__

    skills = _skills(agent)
    return AgentCard(
        name=agent.name,
        description=agent.description or f"The {agent.name} agent (agentrt).",
        version=__version__,
        provider=AgentProvider(organization="agentrt", url="https://github.com/agentrt/agentrt"),
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding=TransportProtocol.JSONRPC, protocol_version=PROTOCOL_VERSION_1_0),
            AgentInterface(url=url, protocol_binding=TransportProtocol.JSONRPC, protocol_version=PROTOCOL_VERSION_0_3),
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        security_schemes={
            SECURITY_SCHEME: SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="bearer", description="An agentrt API key: Authorization: Bearer <key>."
                )
            )
        },
        security_requirements=[SecurityRequirement(schemes={SECURITY_SCHEME: StringList()})],
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        skills=skills,
    )


def _skills(agent: AgentBase) -> list[AgentSkill]:
    toolkit = getattr(agent, "toolkit", None)
    tools = list(toolkit) if toolkit is not None else []
    skills = [
        AgentSkill(
            id=t.name,
            name=t.name,
            description=t.description or f"The {t.name} tool.",
            tags=[
                t.group or "tool",
                *(["read-only"] if t.read_only else []),
                *(["needs-approval"] if _asks(t) else []),
            ],
        )
        for t in tools
        if not t.external
    ]
    if not skills:
        skills.append(
            AgentSkill(
                id="chat",
                name=agent.name,
                description=agent.description or f"Talk to the {agent.name} agent.",
                tags=["chat"],
            )
        )
    return skills


def _asks(tool: Any) -> bool:
    return bool(getattr(tool, "destructive", False) or getattr(tool, "requires_confirmation", False))


# ==================================================================================================
# Users and the task store
# ==================================================================================================
class _ApiKeyUser(User):
    """The user the server's API key authenticated (tasks are stored per user)."""

    def __init__(self, user_id: str) -> None:
        self._user_id = user_id

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self._user_id


class _ContextBuilder(DefaultServerCallContextBuilder):
    def build_user(self, request: Request) -> User:
        user_id = request.scope.get(_SCOPE_USER)
        return _ApiKeyUser(user_id) if isinstance(user_id, str) and user_id else UnauthenticatedUser()


class _BoundedTaskStore(InMemoryTaskStore):
    """`InMemoryTaskStore` that forgets the oldest tasks (finished ones first) beyond `max_tasks`.

    It also keeps one text part per text artifact: streamed chunks arrive as appended parts, which
    the SDK adds one by one to the task; joined here, ``GetTask`` and unary ``SendMessage`` return
    the text whole (``get_artifact_text`` gives it back unchanged) while streaming clients still get
    every chunk.
    """

    def __init__(self, max_tasks: int) -> None:
        super().__init__()
        self.max_tasks = max_tasks
        self._order: OrderedDict[tuple[str, str], bool] = OrderedDict()

    async def save(self, task: Task, context: ServerCallContext) -> None:
        # In place: the task is the SDK's working copy too, so only the newest chunk is joined each time.
        _join_text_parts(task)
        await super().save(task, context)
        key = (context.user.user_name, task.id)
        self._order[key] = task.status.state in _FINISHED
        self._order.move_to_end(key)
        excess = len(self._order) - self.max_tasks
        if excess > 0:
            victims = list(itertools.islice((k for k, done in self._order.items() if done), excess))
            if len(victims) < excess:
                victims += list(itertools.islice((k for k in self._order if k not in victims), excess - len(victims)))
            for owner, task_id in victims:
                del self._order[(owner, task_id)]
                await super().delete(task_id, ServerCallContext(user=_ApiKeyUser(owner)))

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        self._order.pop((context.user.user_name, task_id), None)
        await super().delete(task_id, context)


def _join_text_parts(task: Task) -> None:
    """Join the text parts of each text artifact of `task` into one part."""
    for artifact in task.artifacts:
        parts = artifact.parts
        if len(parts) > 1 and artifact.name == TEXT_ARTIFACT and all(p.HasField("text") for p in parts):
            text = "".join(p.text for p in parts)
            del parts[1:]
            parts[0].text = text


_FINISHED = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_REJECTED,
    }
)


# ==================================================================================================
# The executor
# ==================================================================================================
class AgentrtExecutor(AgentExecutor):
    """Runs an agentrt agent for A2A requests: context id = session id, events = task updates."""

    def __init__(self, server: ServerContext, name: str, agent: AgentBase) -> None:
        self.server = server
        self.name = name
        self.agent = agent

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Run the agent on the request's message and publish the task's progress and outcome."""
        user_id = context.call_context.user.user_name
        task_id, context_id = context.task_id, context.context_id
        if not user_id or not task_id or not context_id or context.message is None:
            raise UserError("an A2A request needs an authenticated user, a task id, a context id and a message")
        updater = TaskUpdater(event_queue, task_id, context_id)
        if context.current_task is None:
            task = Task(id=task_id, context_id=context_id, status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED))
            task.history.append(context.message)
            await event_queue.enqueue_event(task)
        await updater.start_work()
        try:
            self.server.ensure_accepting()
            ctx = self.server.context_for(user_id, self.name, self.server.check_session_id(context_id))
        except ApiError as exc:
            await updater.failed(_error_message(updater, exc))
            return
        ctx["a2a_task_id"] = task_id
        ctx["a2a_context_id"] = context_id
        publisher = _Publisher(updater)
        runs = self.server.runs
        entry = None
        stream: AsyncIterator[ev.AgentEvent] | None = None
        try:
            message = await self._input(context.message, ctx)
            current = asyncio.current_task()
            entry = runs.track(self.agent, ctx, current) if current is not None else None
            stream = self.agent.stream_events([message], ctx)
            async for event in stream:
                if entry is not None and isinstance(event, ev.RunStarted) and event.source == self.agent.name:
                    entry.started = True
                await publisher.feed(event)
        except UserError as exc:
            # Typically a plain message while calls wait: say how to answer, and keep waiting.
            pending = pending_calls(await self.agent.get_state(*ctx.key))
            await publisher.flush()
            if pending:
                await updater.requires_input(_pending_message(updater, pending, note=protocol_message(str(exc), "a2a")))
            else:
                await updater.failed(_error_message(updater, exc))
            return
        except Exception as exc:
            await publisher.flush()
            await updater.failed(_error_message(updater, exc))
            return
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()  # stops the run at once if we leave early (checkpointed first)
            if entry is not None:
                runs.untrack(entry)
        await publisher.finish()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Mark the task canceled; the SDK then cancels `execute`, which checkpoints and stops the run."""
        if context.task_id and context.context_id:
            await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()

    async def _input(self, message: Message, ctx: RuntimeContext) -> Msg:
        """The agentrt message for an A2A message (answers to pending calls included)."""
        blocks: list[ContentBlock] = []
        confirms: list[Any] = []
        for part in message.parts:
            if part.HasField("text"):
                if part.text:
                    blocks.append(TextBlock(text=part.text))
            elif part.HasField("data"):
                [data] = [_whole_numbers(d) for d in get_data_parts([part])]
                if isinstance(data, Mapping) and ("confirm_results" in data or "tool_results" in data):
                    confirms.extend(_list(data.get("confirm_results"), "confirm_results"))
                    blocks.extend(_tool_results(_list(data.get("tool_results"), "tool_results")))
                else:
                    blocks.append(TextBlock(text=_json.dumps(data)))
            else:
                blocks.append(_media(part))
        if not confirms and not any(isinstance(b, ToolResultBlock) for b in blocks):
            word = " ".join(b.text for b in blocks if isinstance(b, TextBlock)).strip().strip(".!").lower()
            if word in _APPROVE or word in _DENY:
                # A bare "approve" / "deny" answers every call waiting for approval.
                state = await self.agent.get_state(*ctx.key)
                waiting = [p for p in pending_calls(state) if p.kind == CONFIRM]
                if waiting:
                    confirms = [{"tool_call_id": p.id, "confirmed": word in _APPROVE} for p in waiting]
                    blocks = []
        metadata = {META_CONFIRM_RESULTS: confirms} if confirms else {}
        return Msg(role="user", content=blocks, metadata=metadata, id=message.message_id or uuid.uuid4().hex)


def _whole_numbers(value: Any) -> Any:
    """JSON from a protobuf ``Value`` with its whole numbers as ints (``Value`` keeps every number as a double)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: _whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(v) for v in value]
    return value


def _list(value: Any, name: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise UserError(f"'{name}' must be a list")
    return value


def _tool_results(items: Sequence[Any]) -> list[ContentBlock]:
    out: list[ContentBlock] = []
    for item in items:
        if not isinstance(item, Mapping):
            raise UserError("each of 'tool_results' must be an object with 'tool_call_id' and 'output'")
        call_id = item.get("tool_call_id", item.get("id"))
        if not isinstance(call_id, str) or not call_id:
            raise UserError("each of 'tool_results' needs the 'tool_call_id' of the call it answers")
        output = item.get("output", "")
        state = item.get("state", "success")
        if state not in ("success", "error"):
            raise UserError("'state' of a tool result must be 'success' or 'error'")
        text = output if isinstance(output, str) else _json.dumps(output)
        out.append(ToolResultBlock(id=call_id, name=str(item.get("name", "")), output=text, state=state))
    return out


def _media(part: Part) -> ContentBlock:
    kind = part.media_type.split("/", 1)[0] if part.media_type else ""
    block = _MEDIA.get(kind)
    if part.HasField("url"):
        if block is not None:
            return block(source=part.url)
        return TextBlock(
            text=f"[attachment {part.filename}: {part.url}]" if part.filename else f"[attachment: {part.url}]"
        )
    if part.HasField("raw") and block is not None:
        return block(source=Base64Source(media_type=part.media_type, data=base64.b64encode(part.raw).decode("ascii")))
    return TextBlock(text=f"[attachment {part.filename or part.media_type or 'file'} omitted: unsupported type]")


def _error_message(updater: TaskUpdater, exc: BaseException) -> Message:
    text = exc.message if isinstance(exc, ApiError) else f"{type(exc).__name__}: {protocol_message(str(exc), 'a2a')}"
    return updater.new_agent_message([new_text_part(text)])


def _pending_message(
    updater: TaskUpdater, calls: Sequence[PendingCall], *, reply_id: str = "", note: str = ""
) -> Message:
    confirm = [c for c in calls if c.kind == CONFIRM]
    external = [c for c in calls if c.kind == EXTERNAL]
    lines = []
    if note:
        lines.append(note)
    if confirm:
        lines.append(
            "Approval needed for: "
            + "; ".join(f"{c.name}({_json.dumps(dict(c.input))}) [call {c.id}]" for c in confirm)
            + ". Reply 'approve' or 'deny', or send a data part "
            '{"confirm_results": [{"tool_call_id": "...", "confirmed": true}]}.'
        )
    if external:
        lines.append(
            "Run these calls and send their results: "
            + "; ".join(f"{c.name}({_json.dumps(dict(c.input))}) [call {c.id}]" for c in external)
            + ' as a data part {"tool_results": [{"tool_call_id": "...", "output": "..."}]}.'
        )
    payload = {
        DATA_KEY: {
            "type": "require_user_confirm" if confirm else "require_external_execution",
            "reply_id": reply_id,
            "tool_calls": [_call_dict(c) for c in calls],
        }
    }
    return updater.new_agent_message([new_text_part("\n".join(lines)), new_data_part(payload, "application/json")])


def _call_dict(call: PendingCall) -> dict[str, Any]:
    return {
        "id": call.id,
        "name": call.name,
        "kind": call.kind,
        "input": _json.jsonable(dict(call.input)),
        "suggested_rules": _json.jsonable(list(call.suggested_rules)),
        "reason": call.reason,
    }


class _Publisher:
    """Turns one call's agentrt events into A2A task updates.

    Text streams as artifacts (one per text block, its deltas appended as text parts, which the
    task store joins into one); tool calls and results as ``working`` status updates with a data
    part; the end as ``completed`` (the reply as the status message), ``input-required``, or
    ``canceled``.
    """

    __slots__ = (
        "_block",
        "_confirm",
        "_external",
        "_first",
        "_held",
        "_reply",
        "_reply_id",
        "updater",
    )

    def __init__(self, updater: TaskUpdater) -> None:
        self.updater = updater
        self._reply_id: str | None = None
        self._block: str | None = None
        self._held: str | None = None
        self._first = True
        self._confirm: list[ev.PendingToolCall] = []
        self._external: list[ev.PendingToolCall] = []
        self._reply: Msg | None = None

    async def feed(self, event: ev.AgentEvent) -> None:
        if self._reply_id is None:
            self._reply_id = event.reply_id
        if event.reply_id != self._reply_id:
            return  # a subagent's own stream: its outcome reaches us through the parent's events
        if isinstance(event, ev.TextDelta):
            if not event.delta:
                return
            if event.block_id != self._block:
                await self.flush()
                self._block, self._first = event.block_id, True
            if self._held is not None:
                await self._chunk(self._held, last=False)
            self._held = event.delta
        elif isinstance(event, (ev.ModelCallFinished, ev.ModelRestarted)):
            await self.flush()
            if isinstance(event, ev.ModelCallFinished) and event.msg.tool_calls:
                calls = [
                    {"id": c.id, "name": c.name, "input": _json.jsonable(dict(c.input))} for c in event.msg.tool_calls
                ]
                await self._working({"type": "tool_calls", "tool_calls": calls})
        elif isinstance(event, ev.ToolResult):
            r = event.result
            output = r.text
            payload: dict[str, Any] = {"type": "tool_result", "tool_call_id": r.id, "name": r.name, "state": r.state}
            if len(output) > MAX_TOOL_OUTPUT:
                payload["truncated"] = True
                output = output[:MAX_TOOL_OUTPUT]
            payload["output"] = output
            await self._working(payload)
        elif isinstance(event, ev.RequireUserConfirm):
            self._confirm.extend(event.tool_calls)
        elif isinstance(event, ev.RequireExternalExecution):
            self._external.extend(event.tool_calls)
        elif isinstance(event, ev.RunFinished):
            self._reply = event.msg

    async def _chunk(self, text: str, *, last: bool) -> None:
        assert self._block is not None
        await self.updater.add_artifact(
            [new_text_part(text)],
            artifact_id=self._block,
            name=TEXT_ARTIFACT,
            append=not self._first,
            last_chunk=last,
        )
        self._first = False

    async def flush(self) -> None:
        """Send the held text chunk as the last of its artifact."""
        if self._held is not None:
            held, self._held = self._held, None
            await self._chunk(held, last=True)
        self._block = None

    async def _working(self, payload: dict[str, Any]) -> None:
        message = self.updater.new_agent_message([new_data_part({DATA_KEY: payload}, "application/json")])
        await self.updater.update_status(TaskState.TASK_STATE_WORKING, message=message)

    async def finish(self) -> None:
        """Publish the task's final state for this call."""
        await self.flush()
        reply = self._reply
        if reply is None:
            await self.updater.failed(self.updater.new_agent_message([new_text_part("The run ended without a reply.")]))
            return
        reason = reply.generate_reason
        if self._confirm or self._external:
            calls = [_pending_entry(c, CONFIRM) for c in self._confirm]
            calls += [_pending_entry(c, EXTERNAL) for c in self._external]
            await self.updater.requires_input(_pending_message(self.updater, calls, reply_id=reply.id))
            return
        parts = [new_text_part(reply.text)] if reply.text else []
        if META_STRUCTURED in reply.metadata:
            parts.append(new_data_part(_json.jsonable(reply.metadata[META_STRUCTURED]), "application/json"))
        message = self.updater.new_agent_message(parts) if parts else None
        if reason is GenerateReason.INTERRUPTED:
            await self.updater.cancel(message)
        else:
            await self.updater.complete(message)


def _pending_entry(call: ev.PendingToolCall, kind: str) -> PendingCall:
    data = call.to_dict()
    return PendingCall(
        id=call.id,
        name=call.name,
        input=data["input"],
        kind=kind,
        reason=call.reason,
        suggested_rules=tuple(data["suggested_rules"]),
    )
