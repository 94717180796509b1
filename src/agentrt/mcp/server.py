"""Serve a `Toolkit` or an agent to any MCP client (``agentrt mcp serve MODULE:ATTR``).

A toolkit is exposed tool by tool: each tool's JSON Schema, description and annotations
(``readOnlyHint``, ``destructiveHint``, ``idempotentHint``). Calls run under agentrt's execution
policy (argument validation, timeouts, error results). An agent becomes one tool,
``ask_<name>``, taking ``task: str``; each MCP client connection gets its own agent session (see
`_Sessions` for the rule under each protocol version), so a client's successive questions share
a conversation, and the agent's steps are reported as progress notifications when the client asks
for them.

Built on the official SDK's low-level `Server`, which takes tool schemas as plain JSON Schema.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import sys
import uuid
import weakref
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

try:
    import mcp_types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server
except ImportError as exc:  # pragma: no cover - exercised only without the extra installed
    raise ImportError(
        f"serving MCP needs the official MCP SDK, version 2 or later ({exc}): pip install 'agentrt[mcp]'",
        name=exc.name,
    ) from exc

from agentrt import _json
from agentrt._target import import_target
from agentrt._version import version
from agentrt.context import RuntimeContext
from agentrt.errors import UserError
from agentrt.message import AudioBlock, Base64Source, ContentBlock, ImageBlock, TextBlock, ToolResultBlock, ToolUseBlock
from agentrt.tool.base import Tool
from agentrt.tool.toolkit import Toolkit

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

    from agentrt.events import AgentEvent
    from agentrt.permission import PermissionContext, PermissionMode

__all__ = [
    "DEFAULT_USER",
    "SESSION_META_KEY",
    "ServedAgent",
    "Transport",
    "load_target",
    "mcp_server",
    "serve_mcp",
    "serve_mcp_async",
]

Transport = Literal["stdio", "http", "sse"]
DEFAULT_USER = "mcp"
"""The agentrt user id of unauthenticated MCP calls (unless `serve_mcp(user_id=...)` says otherwise)."""
SESSION_META_KEY = "agentrt/session_id"
"""Request `_meta` key naming the agentrt session of a call; results carry the session used under it."""
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_CLIENT_SESSION = re.compile(r"[A-Za-z0-9._:@-]{1,128}")
_TASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "description": "What the agent should do, with all needed context."},
        "session_id": {
            "type": "string",
            "description": (
                "Optional conversation id (1-128 letters, digits or ._:@-): calls with the same id continue "
                "one conversation; a new random id (e.g. a UUID) starts a new one. Omit it to use this "
                "connection's conversation (a new one per call on stateless HTTP)."
            ),
        },
    },
    "required": ["task"],
    "additionalProperties": False,
}


class ServedAgent(Protocol):
    """What serving an agent uses of it (an `agentrt.agent.AgentBase` has all of it)."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    def stream_events(self, input: Any = None, ctx: RuntimeContext | None = None) -> AsyncIterator[AgentEvent]: ...


def load_target(spec: str) -> Any:
    """Import ``MODULE:ATTR`` (ATTR may be dotted); the current directory is importable, as for uvicorn."""
    return import_target(spec, example="myapp.tools:toolkit")


def mcp_server(
    target: Any,
    *,
    name: str | None = None,
    instructions: str | None = None,
    user_id: str = DEFAULT_USER,
    permission: PermissionContext | PermissionMode | str | None = None,
) -> Server[Any]:
    """An MCP `Server` (the SDK's low-level one) exposing `target`.

    `target` is a `Toolkit`, an agent (any `AgentBase`: one ``ask_<name>`` tool), a `Tool` or a
    function, or a list of those. `permission` (default bypass: the MCP client decides what
    needs approval, from the annotations) is applied to toolkit calls: a call the engine denies,
    or would need to ask about, returns an error result.
    """
    backend: _Backend
    if _is_agent(target):
        backend = _AgentBackend(target, user_id)
        default_name = target.name
    else:
        backend = _ToolkitBackend(_as_toolkit(target), user_id, permission)
        default_name = "agentrt"
    server: Server[Any] = Server(
        name or default_name,
        version=version(),
        instructions=instructions,
        on_list_tools=backend.list_tools,
        on_call_tool=backend.call_tool,
    )
    return server


async def serve_mcp_async(
    target: Any,
    transport: Transport = "stdio",
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    path: str | None = None,
    log_level: str = "warning",
    **server_options: Any,
) -> None:
    """Serve `target` over MCP until cancelled (stdio: until the client closes stdin).

    HTTP transports listen on `host`:`port`; streamable HTTP at `path` (default ``/mcp``), SSE
    at `path` (default ``/sse``) with messages posted to ``/messages/``. `server_options` go to
    `mcp_server`.
    """
    server = target if isinstance(target, Server) else mcp_server(target, **server_options)
    if transport == "stdio":
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        return
    if transport not in ("http", "sse"):
        raise UserError(f"MCP transport must be 'stdio', 'http' or 'sse', not {transport!r}")
    import uvicorn

    if transport == "http":
        app: Any = server.streamable_http_app(streamable_http_path=path or "/mcp", host=host)
    else:
        app = _sse_app(server, path or "/sse", host)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on")
    await uvicorn.Server(config).serve()


def serve_mcp(
    target: Any,
    transport: Transport = "stdio",
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    path: str | None = None,
    **server_options: Any,
) -> None:
    """Serve `target` over MCP, blocking (see `serve_mcp_async`); for scripts and the CLI."""
    asyncio.run(serve_mcp_async(target, transport, host=host, port=port, path=path, **server_options))


# --------------------------------------------------------------------------------------------------
# backends
# --------------------------------------------------------------------------------------------------
class _Backend:
    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        raise NotImplementedError

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        raise NotImplementedError


class _ToolkitBackend(_Backend):
    def __init__(self, toolkit: Toolkit, user_id: str, permission: Any) -> None:
        from agentrt.permission import PermissionContext, PermissionEngine, PermissionMode

        self.toolkit = toolkit
        self.sessions = _Sessions(user_id)
        self.engine = PermissionEngine(PermissionContext.coerce(permission or PermissionMode.BYPASS))

    def _available(self) -> dict[str, Tool]:
        active = self.toolkit.default_active_groups()
        return {
            name: t
            for name, t in self.toolkit.tools.items()
            if not t.external and (t.group is None or t.group in active)
        }

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=[_describe(t) for t in self._available().values()])

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        from agentrt.permission import Decision
        from agentrt.tool._execution import ToolExecutor

        tools = self._available()
        call = ToolUseBlock(id=f"mcp_{ctx.request_id}", name=params.name, input=dict(params.arguments or {}))
        rctx = self.sessions.context(ctx, None)
        if isinstance(rctx, str):
            return _error(rctx)
        tool = tools.get(params.name)
        if tool is not None:
            verdict = self.engine.check(tool, call, rctx)
            if verdict.decision is Decision.DENY:
                return _error(f"Permission denied: {verdict.reason or 'denied by policy'}.", rctx)
            if verdict.decision is Decision.ASK:
                return _error(
                    f"Tool {params.name!r} needs approval ({verdict.reason}), which this MCP server cannot ask for.",
                    rctx,
                )
        executor = ToolExecutor(tools, rctx, self.toolkit.semaphore())
        token = rctx._set()
        try:
            result = await executor.execute(call)
        finally:
            RuntimeContext._reset(token)
        return _with_session(_call_result(result), rctx)


class _AgentBackend(_Backend):
    def __init__(self, agent: ServedAgent, user_id: str) -> None:
        self.agent = agent
        self.sessions = _Sessions(user_id)
        self.tool_name = ("ask_" + _UNSAFE.sub("_", agent.name).strip("_"))[:64]
        self.spec = mcp_types.Tool(
            name=self.tool_name,
            description=agent.description or f"Ask the {agent.name!r} agent to do a task; returns its answer.",
            input_schema=_TASK_SCHEMA,
            annotations=mcp_types.ToolAnnotations(title=f"Ask {agent.name}", read_only_hint=False),
        )

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=[self.spec])

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        from agentrt.events import ModelCallStarted, RunFinished, ToolCallStarted
        from agentrt.message import GenerateReason

        if params.name != self.tool_name:
            return _error(f"Unknown tool {params.name!r}. Available tools: {self.tool_name}.")
        arguments = params.arguments or {}
        task = arguments.get("task")
        if not isinstance(task, str) or not task.strip():
            return _error("Invalid arguments: 'task' must be a non-empty string.")
        unknown = sorted(set(arguments) - {"task", "session_id"})
        if unknown:
            return _error(
                f"Invalid arguments: unexpected {', '.join(map(repr, unknown))}; expected 'task', 'session_id'."
            )
        rctx = self.sessions.context(ctx, arguments)
        if isinstance(rctx, str):
            return _error(rctx)
        reply = None
        step = 0
        # report_progress is a no-op unless the client asked for progress.
        async for event in self.agent.stream_events(task, rctx):
            if isinstance(event, ModelCallStarted) and event.source == self.agent.name:
                step = event.step
                await ctx.session.report_progress(step, None, f"step {step}")
            elif isinstance(event, ToolCallStarted) and event.source == self.agent.name:
                await ctx.session.report_progress(step, None, f"calling {event.name}")
            elif isinstance(event, RunFinished) and event.source == self.agent.name:
                reply = event.msg
        if reply is None:  # pragma: no cover - stream_events always ends with RunFinished or raises
            return _error(f"agent {self.agent.name!r} returned no reply")
        content = _contents(list(reply.content))
        reason = reply.generate_reason
        if reason in (GenerateReason.AWAITING_CONFIRMATION, GenerateReason.AWAITING_EXTERNAL_EXECUTION):
            note = (
                f"The agent paused ({reason.value}): a tool call needs approval or an external result, "
                "which cannot be given over MCP. Serve an agent whose permission mode does not ask."
            )
            return _with_session(mcp_types.CallToolResult(content=[*content, _text(note)], is_error=True), rctx)
        return _with_session(mcp_types.CallToolResult(content=content or [_text("(no answer)")]), rctx)


# --------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------
def _is_agent(target: Any) -> bool:
    """Whether `target` is an `AgentBase` (looked up, not imported: this layer sits below the agents)."""
    module = sys.modules.get("agentrt.agent.base")
    return module is not None and isinstance(target, module.AgentBase)


def _as_toolkit(target: Any) -> Toolkit:
    if isinstance(target, Toolkit):
        return target
    if isinstance(target, Tool) or inspect.isfunction(target):
        return Toolkit([target])
    if isinstance(target, Sequence) and not isinstance(target, (str, bytes)) and target:
        return Toolkit(list(target))
    raise UserError(
        f"cannot serve {type(target).__name__!r} over MCP: expected a Toolkit, an agent, a tool or a list of tools"
    )


def _describe(tool: Tool) -> mcp_types.Tool:
    parameters = dict(tool.parameters)
    parameters.setdefault("type", "object")
    annotations = mcp_types.ToolAnnotations(
        read_only_hint=tool.read_only,
        destructive_hint=tool.destructive if not tool.read_only else False,
        idempotent_hint=True if tool.idempotent else None,
    )
    return mcp_types.Tool(
        name=tool.name, description=tool.description or None, input_schema=parameters, annotations=annotations
    )


class _Sessions:
    """Chooses the ``RuntimeContext(user_id, session_id)`` of each MCP call.

    User: the authenticated principal on HTTP with authentication (its ``sub``, else its client id),
    else the configured user id. Session, first that applies: the id the client sends (the
    ``session_id`` argument of ``ask_<name>`` or the `SESSION_META_KEY` ``_meta`` key); the transport
    session (``mcp-<Mcp-Session-Id>``: stateful streamable HTTP, handshake protocols); one random
    ``mcp-<uuid>`` per client connection on duplex transports (stdio, SSE, in-memory; every
    protocol version); else a new random one per call (2026-07-28 HTTP, stateless HTTP).
    """

    def __init__(self, user_id: str) -> None:
        self.user_id = user_id
        # Keyed by the connection's standalone channel: one object per client connection, which
        # outlives the per-request `Connection` objects of 2026-07-28 duplex connections.
        self._by_channel: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()

    def context(self, ctx: ServerRequestContext[Any], arguments: Mapping[str, Any] | None) -> RuntimeContext | str:
        """The call's context, or an error message for a malformed client session id.

        `arguments` are the ``ask_<name>`` arguments (None for toolkit calls: those belong to the tool).
        """
        requested = (ctx.meta or {}).get(SESSION_META_KEY)
        if arguments is not None and "session_id" in arguments:
            if requested is not None and requested != arguments["session_id"]:
                return f"Invalid arguments: 'session_id' differs from _meta {SESSION_META_KEY!r}."
            requested = arguments["session_id"]
        if requested is not None and not (isinstance(requested, str) and _CLIENT_SESSION.fullmatch(requested)):
            return "Invalid session id: use 1-128 letters, digits or '._:@-' (a random UUID is best)."
        session = requested or self._connection_session(ctx) or _new_session()
        return RuntimeContext(user_id=_principal(ctx) or self.user_id, session_id=session)

    def _connection_session(self, ctx: ServerRequestContext[Any]) -> str | None:
        connection = getattr(ctx.session, "_connection", None)  # the SDK keeps no public handle on it
        if connection is None:
            return None
        transport_session = getattr(connection, "session_id", None)
        if isinstance(transport_session, str) and transport_session:
            return f"mcp-{transport_session}"
        if not getattr(connection, "has_standalone_channel", False):
            return None  # a per-request connection (2026-07-28 or stateless HTTP): no identity
        channel = connection.outbound
        try:
            session = self._by_channel.get(channel)
            if session is None:
                session = self._by_channel[channel] = _new_session()
        except TypeError:  # pragma: no cover - a channel that cannot be weakly referenced
            return None
        return session


def _new_session() -> str:
    return f"mcp-{uuid.uuid4().hex}"


def _principal(ctx: ServerRequestContext[Any]) -> str | None:
    """The authenticated principal's user id (HTTP with the SDK's bearer authentication), else None."""
    from mcp.server.auth.middleware.auth_context import get_access_token
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import principal_components

    scope = getattr(ctx.request, "scope", None)
    user = scope.get("user") if isinstance(scope, Mapping) else None
    token = user.access_token if isinstance(user, AuthenticatedUser) else get_access_token()
    if token is None:
        return None
    client_id, _issuer, subject = principal_components(token)
    return subject or client_id


def _with_session(result: mcp_types.CallToolResult, rctx: RuntimeContext) -> mcp_types.CallToolResult:
    result.meta = {**(result.meta or {}), SESSION_META_KEY: rctx.session_id}
    return result


def _text(text: str) -> mcp_types.TextContent:
    return mcp_types.TextContent(type="text", text=text)


def _error(text: str, rctx: RuntimeContext | None = None) -> mcp_types.CallToolResult:
    result = mcp_types.CallToolResult(content=[_text(text)], is_error=True)
    return result if rctx is None else _with_session(result, rctx)


def _call_result(result: ToolResultBlock) -> mcp_types.CallToolResult:
    output = result.output
    content = [_text(output)] if isinstance(output, str) else _contents(output)
    return mcp_types.CallToolResult(content=content, is_error=result.state != "success")


def _contents(blocks: list[ContentBlock]) -> list[Any]:
    content: list[Any] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            content.append(_text(block.text))
        elif isinstance(block, (ImageBlock, AudioBlock)):
            source = block.source
            if isinstance(source, Base64Source):
                if isinstance(block, ImageBlock):
                    content.append(mcp_types.ImageContent(type="image", data=source.data, mime_type=source.media_type))
                else:
                    content.append(mcp_types.AudioContent(type="audio", data=source.data, mime_type=source.media_type))
            else:
                content.append(_text(f"[{block.type} {source}]"))
        elif isinstance(block, ToolResultBlock):
            content.extend(_call_result(block).content)
        elif block.type in ("thinking", "tool_use"):
            continue  # the agent's working, not its answer
        else:
            content.append(_text(_json.dumps(_json.jsonable(block))))
    return content


def _sse_app(server: Server[Any], path: str, host: str) -> Any:
    from mcp.server.sse import SseServerTransport
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Mount, Route

    security = None
    if host in ("127.0.0.1", "localhost", "::1"):
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        )
    sse = SseServerTransport("/messages/", security_settings=security)

    async def endpoint(request: Request) -> Response:
        async with sse.connect_sse(request.scope, request.receive, request._send) as (read, write):
            await server.run(read, write, server.create_initialization_options())
        return Response()

    return Starlette(
        routes=[Route(path, endpoint=endpoint, methods=["GET"]), Mount("/messages/", app=sse.handle_post_message)]
    )
