"""MCP client: use the tools, resources and prompts of any Model Context Protocol server.

```python
from agentrt.mcp import McpClient

toolkit = Toolkit()
await toolkit.register_mcp(McpClient.stdio("uvx", ["mcp-server-git"]))   # tools mcp__git__<tool>
await toolkit.register_mcp(McpClient.http("https://example.com/mcp", headers={...}), prefix="web_")
...
await toolkit.aclose()   # closes the clients the toolkit opened
```

Built on the official ``mcp`` SDK (2.x): its stdio, streamable HTTP and SSE client transports
and its `ClientSession`. Registration into a toolkit: `agentrt.mcp.toolset`; sampling and
elicitation: `agentrt.mcp._inbound`.

**The session task.** The SDK's transports and session are anyio task-group context managers:
they must be entered and exited by one task. Each `McpClient` connection therefore lives in a
background task of its own (the *holder*) that enters the transport and the session, runs the
MCP handshake, and then waits until it is told to close or the connection dies. Callers in any
task talk to the session directly (its requests are memory-stream sends, usable from any task of
the loop); only the lifecycle belongs to the holder. Each call runs as a child task, so a caller
cancelled by an interrupt or a timeout cancels exactly that request: the SDK sends
``notifications/cancelled`` and the session stays usable.

**Reconnects.** When the server process exits (stdio), the HTTP server goes away, or the HTTP
session is no longer known to the server (HTTP 404, or 400 with a session error, as servers that
restarted answer), the connection is replaced by a fresh one (new process, new handshake), with
backoff between attempts. Over HTTP an httpx response hook sees every rejected session: one
rejected POST tells that exactly that request never ran (the hook finds the request through a
context variable the SDK carries into its POST task). A request is retried once, transparently,
when it certainly never reached the server, or when it is idempotent (listings, reads, prompts,
tools annotated read-only or idempotent). Any other tool call in flight when the connection died
is not re-sent: it fails with `McpCallLostError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import json
import logging
import os
import re
import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, TextIO, TypedDict, Unpack
from urllib.parse import urlsplit

try:
    import anyio
    import httpx2
    import mcp_types
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp.client.sse import sse_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.dispatcher import ProgressFnT
    from mcp.shared.exceptions import MCPError
except ImportError as exc:  # pragma: no cover - exercised only without the extra installed
    raise ImportError(
        f"agentrt.mcp needs the official MCP SDK, version 2 or later ({exc}): pip install 'agentrt[mcp]'",
        name=exc.name,
    ) from exc

from agentrt._version import version
from agentrt.errors import McpCallLostError, McpConnectionError, McpError, UserError
from agentrt.mcp._content import prompt_messages, read_result_blocks
from agentrt.mcp._inbound import (
    DEFAULT_ELICITATION_TIMEOUT,
    ElicitationHandler,
    Inbound,
    McpCall,
    SamplingApproval,
    current_mcp_call,
)
from agentrt.message import Msg

if TYPE_CHECKING:
    from agentrt.model.base import ChatModel

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_ELICITATION_TIMEOUT",
    "DEFAULT_RECONNECT_DELAYS",
    "DEFAULT_TIMEOUT",
    "McpCallLostError",
    "McpClient",
    "McpConnectionError",
    "McpError",
    "McpOptions",
    "ProgressCallback",
    "ResourceCallback",
]

logger = logging.getLogger("agentrt.mcp")

DEFAULT_TIMEOUT: Final = 60.0
"""Seconds an MCP tool call may take by default."""
DEFAULT_CONNECT_TIMEOUT: Final = 30.0
"""Seconds to start (or reach) a server and complete the MCP handshake."""
DEFAULT_RECONNECT_DELAYS: Final = (0.0, 0.25, 0.5, 1.0, 2.0)
"""Pauses before each reconnect attempt: five attempts over about four seconds."""

_CLOSE_TIMEOUT = 10.0  # stdio shutdown: stdin close, 2 s grace, SIGTERM, 2 s, SIGKILL
_CANCEL_GRACE = 2.0  # time for the SDK to send notifications/cancelled after a caller cancels
_DEATH_WAIT = 2.0  # time for a failing connection's holder to finish, to learn why it failed
_MAX_PAGES = 1000
_SESSION_HEADER = "mcp-session-id"
_STALE_WORDS = ("not found", "no valid", "invalid", "expired", "terminated", "unknown", "missing")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_LAUNCHERS = frozenset(("python", "python3", "node", "uv", "uvx", "npx", "bun", "deno", "pipx", "sh", "bash"))
_MISSING: Any = object()

ProgressCallback = ProgressFnT
"""``async (progress, total, message) -> None``, called for each progress notification of a call."""
ResourceCallback = Callable[[str], Awaitable[None] | None]
"""``(uri) -> None`` (or a coroutine function): a subscribed resource changed on the server."""


class McpOptions(TypedDict, total=False):
    """The options every `McpClient` constructor takes (documented on `McpClient`)."""

    name: str | None
    timeout: float | None
    connect_timeout: float
    reconnect: bool
    reconnect_delays: Sequence[float]
    sampling_model: ChatModel | str | None
    sampling_approval: bool | SamplingApproval
    elicitation_handler: ElicitationHandler | None
    elicitation_timeout: float | None
    trust_annotations: bool


# --------------------------------------------------------------------------------------------------
# the client
# --------------------------------------------------------------------------------------------------
_Opener = Callable[[contextlib.AsyncExitStack, "_Connection"], Awaitable[tuple[Any, Any]]]


class _Connection:
    """One connection generation: a holder task owning a transport and an initialised session."""

    __slots__ = ("closing", "error", "init", "loop", "lost", "ready", "retired", "session", "stale", "task")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.session: ClientSession | None = None
        self.init: mcp_types.InitializeResult | None = None
        self.ready: asyncio.Future[None] = loop.create_future()
        self.closing = asyncio.Event()
        self.lost = False
        self.retired = False
        self.stale: str | None = None
        """Why the HTTP server rejected this connection's session (it restarted or expired it)."""
        self.error: BaseException | None = None
        self.task: asyncio.Task[None] | None = None

    def mark_lost(self) -> None:
        self.lost = True
        self.closing.set()

    @property
    def alive(self) -> bool:
        return (
            self.ready.done()
            and not self.ready.cancelled()
            and self.ready.exception() is None
            and not self.lost
            and not self.closing.is_set()
        )


class _Attempt:
    """One sending of one request; the HTTP response hook marks it when the server refused its session."""

    __slots__ = ("method", "rejected")

    def __init__(self, method: str) -> None:
        self.method = method
        self.rejected = False


_attempt: contextvars.ContextVar[_Attempt | None] = contextvars.ContextVar("agentrt_mcp_attempt", default=None)


async def _attempted(attempt: _Attempt, request: Awaitable[Any]) -> Any:
    # Runs in the request's own child task: the SDK snapshots this context into its POST task.
    _attempt.set(attempt)
    return await request


async def _note_stale_session(response: httpx2.Response, conn: _Connection) -> None:
    """Response hook: a request carrying a session id that the server does not know (any more)."""
    request = response.request
    status = response.status_code
    if status not in (400, 404) or _SESSION_HEADER not in request.headers:
        return
    if status == 400:
        try:
            body = (await response.aread())[:4000].decode("utf-8", "replace")
        except Exception:  # the SDK reports the failed request itself
            return
        if not _is_stale_text(body):
            return
        reason = f"HTTP 400: {body.strip()[:200]}"
    else:
        reason = "HTTP 404: session not found"
    if conn.stale is None:
        conn.stale = reason
    attempt = _attempt.get()
    if attempt is not None and request.method == "POST" and _request_method(request) == attempt.method:
        # This very request was refused before the server ran anything. Its sender winds the
        # connection down once the SDK has delivered the error (closing it now races that).
        attempt.rejected = True
        return
    if not conn.retired:
        logger.info("MCP session at %s rejected (%s); reconnecting", request.url, reason)
    conn.mark_lost()


def _request_method(request: httpx2.Request) -> str | None:
    """The JSON-RPC method of a POSTed request (None for responses and notifications)."""
    try:
        body = json.loads(request.content or b"null")
    except (ValueError, httpx2.RequestNotRead):
        return None
    if isinstance(body, dict) and "id" in body and isinstance(body.get("method"), str):
        return str(body["method"])
    return None


class _WatchedReadStream:
    """The transport's read stream, reporting its end (the server went away) to the connection."""

    __slots__ = ("_inner", "_on_end")

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    @property
    def last_context(self) -> contextvars.Context | None:
        # The dispatcher reads the sender's context from here when the transport provides one.
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise

    async def aclose(self) -> None:
        self._on_end()
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedReadStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _WatchedReadStream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class McpClient:
    """A connection to one MCP server, as an async context manager; reconnects by itself.

    Build one with `McpClient.stdio`, `McpClient.http` (streamable HTTP) or `McpClient.sse`, then
    either hand it to `Toolkit.register_mcp` (which connects it and closes it on
    `Toolkit.aclose`) or enter it yourself (``async with client:``; then it stays yours to close).
    The constructors take these options:

    Args:
        name: Server name used in tool names and messages; defaults to the name the server
            reports (sanitised to ``[A-Za-z0-9_-]``), else the command or host.
        timeout: Default seconds per tool call (None: no limit).
        connect_timeout: Seconds to start or reach the server and finish the handshake.
        reconnect: Replace a dead connection automatically (False: calls fail once it dies).
        reconnect_delays: Pauses before successive reconnect attempts.
        sampling_model: A `ChatModel` (or model id) that answers the server's sampling requests
            (None: sampling is not offered to the server).
        sampling_approval: Ask before each sampling request: True asks the user (through
            `elicitation_handler` when given, else the human of the agent run that made the call;
            with no way to ask, the request is refused); an async callable
            ``(SamplingRequest) -> bool`` decides itself.
        elicitation_handler: ``async (ElicitationRequest) -> answer``, the server's questions to
            the user. None (the default): a question asked during a tool call of a streamed agent
            run goes to that run's human (an ``mcp_elicitation`` event; answer with
            ``agent.answer``); any other is declined.
        elicitation_timeout: Seconds a question put to the run's human waits for the answer,
            then it is cancelled (None: until the call ends). While it waits, the tool call's own
            timeout stands still.
        trust_annotations: Take the server's ``readOnlyHint`` and ``idempotentHint`` at their
            word (False, the default: an MCP server is untrusted, as the MCP specification says, so
            its tools are neither read-only nor idempotent to the permission engine, whatever the
            server claims; ``destructiveHint`` is always honoured, since it only adds caution).
    """

    __slots__ = (
        "_closed",
        "_conn",
        "_describe",
        "_fallback",
        "_inbound",
        "_inflight",
        "_lock",
        "_lock_loop",
        "_name",
        "_opened",
        "_opener",
        "_owned_by_caller",
        "_program",
        "_retiring",
        "_reviving",
        "_subscriptions",
        "_tool_specs",
        "_toolkits",
        "_transport",
        "connect_timeout",
        "reconnect",
        "reconnect_delays",
        "reconnects",
        "timeout",
        "trust_annotations",
    )

    def __init__(
        self,
        opener: _Opener,
        *,
        transport: str,
        describe: str,
        fallback_name: str,
        program: str | None = None,
        name: str | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        reconnect: bool = True,
        reconnect_delays: Sequence[float] = DEFAULT_RECONNECT_DELAYS,
        sampling_model: ChatModel | str | None = None,
        sampling_approval: bool | SamplingApproval = False,
        elicitation_handler: ElicitationHandler | None = None,
        elicitation_timeout: float | None = DEFAULT_ELICITATION_TIMEOUT,
        trust_annotations: bool = False,
    ) -> None:
        if timeout is not None and timeout <= 0:
            raise UserError(f"McpClient timeout must be positive or None, not {timeout!r}")
        if connect_timeout <= 0:
            raise UserError(f"McpClient connect_timeout must be positive, not {connect_timeout!r}")
        if not reconnect_delays or any(d < 0 for d in reconnect_delays):
            raise UserError("McpClient reconnect_delays must be a non-empty sequence of non-negative seconds")
        if name is not None and not _sanitise(name):
            raise UserError(f"McpClient name must contain letters, digits, '_' or '-', not {name!r}")
        self._opener = opener
        self._transport = transport
        self._describe = describe
        self._program = program
        self._fallback = _sanitise(fallback_name) or "server"
        self._name = _sanitise(name) if name is not None else None
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.reconnect = reconnect
        self.reconnect_delays = tuple(reconnect_delays)
        self.reconnects = 0
        """How many times the connection was replaced after it died."""
        if not isinstance(trust_annotations, bool):
            raise UserError(f"McpClient trust_annotations must be True or False, not {trust_annotations!r}")
        self.trust_annotations = trust_annotations
        """Whether the server's read-only and idempotent hints decide permissions (see the class)."""
        self._conn: _Connection | None = None
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._opened = 0
        self._owned_by_caller = False
        self._toolkits: list[Any] = []
        self._retiring: set[asyncio.Task[None]] = set()
        self._reviving: set[asyncio.Task[None]] = set()
        self._inflight: dict[int, McpCall] = {}
        self._subscriptions: dict[str, list[ResourceCallback]] = {}
        self._tool_specs: dict[str, mcp_types.Tool] = {}
        self._inbound = Inbound(
            lambda: self.name,
            lambda: list(self._inflight.values()),
            sampling_model=sampling_model,
            sampling_approval=sampling_approval,
            elicitation_handler=elicitation_handler,
            elicitation_timeout=elicitation_timeout,
        )

    # -- constructors -------------------------------------------------------------------------------
    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        errlog: TextIO | None = None,
        **options: Unpack[McpOptions],
    ) -> McpClient:
        """A server started as a subprocess speaking MCP on its stdin/stdout.

        `env` is added to a minimal inherited environment (PATH, HOME, ...), as the SDK does;
        the server's stderr goes to `errlog` (default: this process's stderr). Reconnecting
        starts a new process.
        """
        if not isinstance(command, str) or not command:
            raise UserError(f"McpClient.stdio needs a command string, not {command!r}")
        if isinstance(args, str):
            raise UserError("McpClient.stdio args must be a sequence of strings, not one string")
        arg_list = [str(a) for a in args]
        params = StdioServerParameters(
            command=command,
            args=arg_list,
            env=dict(env) if env is not None else None,
            cwd=os.fspath(cwd) if cwd is not None else None,
        )

        async def open_stdio(stack: contextlib.AsyncExitStack, conn: _Connection) -> tuple[Any, Any]:
            log = errlog if errlog is not None else sys.stderr
            if not _has_fileno(log):  # the child needs a real file descriptor (pytest swaps stderr)
                log = sys.__stderr__ if sys.__stderr__ is not None else log
            streams: tuple[Any, Any] = await stack.enter_async_context(stdio_client(params, errlog=log))
            return streams

        shown = " ".join([command, *arg_list])
        return cls(
            open_stdio,
            transport="stdio",
            describe=f"command {shown!r}",
            fallback_name=_command_name(command, arg_list),
            program=command,
            **options,
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        **options: Unpack[McpOptions],
    ) -> McpClient:
        """A server reached over streamable HTTP at `url` (e.g. ``http://127.0.0.1:8000/mcp``).

        `headers` go with every request (e.g. ``{"Authorization": "Bearer ..."}``). A session the
        server no longer knows (it answers 404, or 400 with a session error) is replaced by a new one.
        """
        _check_url(url)
        header_dict = dict(headers) if headers else None
        # The SDK's defaults: 30 s to connect or write, 5 minutes between bytes of an event stream.
        # A call's stream stays quiet while its question waits for the human: outlast the question.
        asked = options.get("elicitation_timeout", DEFAULT_ELICITATION_TIMEOUT)
        read = None if asked is None else max(300.0, float(asked) + 30.0)

        async def open_http(stack: contextlib.AsyncExitStack, conn: _Connection) -> tuple[Any, Any]:
            async def on_response(response: httpx2.Response) -> None:
                await _note_stale_session(response, conn)

            http = httpx2.AsyncClient(
                headers=header_dict,
                timeout=httpx2.Timeout(30.0, read=read),
                event_hooks={"response": [on_response]},
            )
            http_client = await stack.enter_async_context(http)
            streams: tuple[Any, Any] = await stack.enter_async_context(
                streamable_http_client(url, http_client=http_client)
            )
            return streams

        return cls(
            open_http,
            transport="http",
            describe=f"URL {url!r}",
            fallback_name=_host_name(url),
            **options,
        )

    @classmethod
    def sse(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        **options: Unpack[McpOptions],
    ) -> McpClient:
        """A server reached over the (legacy) HTTP+SSE transport at `url` (e.g. ``http://host/sse``)."""
        _check_url(url)
        header_dict = dict(headers) if headers else None

        async def open_sse(stack: contextlib.AsyncExitStack, conn: _Connection) -> tuple[Any, Any]:
            streams: tuple[Any, Any] = await stack.enter_async_context(
                sse_client(url, headers=header_dict, timeout=options.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT))
            )
            return streams

        return cls(
            open_sse,
            transport="sse",
            describe=f"URL {url!r}",
            fallback_name=_host_name(url),
            **options,
        )

    @classmethod
    def memory(cls, server: Any, **options: Unpack[McpOptions]) -> McpClient:
        """A server object of the official SDK run in this process, over in-memory streams.

        `server` is an ``mcp.server.mcpserver.MCPServer`` (the SDK's FastMCP) or a low-level
        ``mcp.server.lowlevel.Server``. The server runs in the client's connection task and stops
        with it; a reconnect starts it again on fresh streams. For tests, examples and servers
        embedded in the application.
        """
        from mcp.client._memory import InMemoryTransport  # the transport of the SDK's own Client(server)
        from mcp.server.lowlevel import Server
        from mcp.server.mcpserver import MCPServer

        if not isinstance(server, (MCPServer, Server)):
            raise UserError(f"McpClient.memory needs an MCPServer or a low-level Server, not {type(server).__name__!r}")

        async def open_memory(stack: contextlib.AsyncExitStack, conn: _Connection) -> tuple[Any, Any]:
            streams: tuple[Any, Any] = await stack.enter_async_context(InMemoryTransport(server))
            return streams

        label = getattr(server, "name", None) or "server"
        return cls(
            open_memory,
            transport="memory",
            describe=f"in-process server {label!r}",
            fallback_name=str(label),
            **options,
        )

    # -- identity -------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The server name used in tool names: given, else reported by the server, else the command or host."""
        if self._name is not None:
            return self._name
        conn = self._conn
        if conn is not None and conn.init is not None:
            reported = _sanitise(conn.init.server_info.name)
            if reported:
                self._name = reported  # fixed from now on, so tool names survive reconnects
                return reported
        return self._fallback

    @property
    def transport(self) -> str:
        """``"stdio"``, ``"http"``, ``"sse"`` or ``"memory"``."""
        return self._transport

    @property
    def server_info(self) -> mcp_types.Implementation | None:
        """What the server said about itself in the handshake (None before connecting)."""
        conn = self._conn
        return conn.init.server_info if conn is not None and conn.init is not None else None

    @property
    def instructions(self) -> str | None:
        """The server's usage instructions from the handshake, if any."""
        conn = self._conn
        return conn.init.instructions if conn is not None and conn.init is not None else None

    @property
    def server_capabilities(self) -> mcp_types.ServerCapabilities | None:
        """What the server offers (tools, resources, prompts, ...), from the handshake."""
        conn = self._conn
        return conn.init.capabilities if conn is not None and conn.init is not None else None

    @property
    def connected(self) -> bool:
        """Whether a live connection exists right now."""
        conn = self._conn
        return conn is not None and conn.alive

    @property
    def closed(self) -> bool:
        """Whether `aclose` was called."""
        return self._closed

    def __repr__(self) -> str:
        return f"McpClient({self.name!r}, {self._transport}, {self._describe})"

    # -- lifecycle ------------------------------------------------------------------------------------
    async def connect(self) -> McpClient:
        """Start or reach the server and complete the handshake (no-op when connected); returns self.

        A client connected this way (or with ``async with``) belongs to the caller: a toolkit it
        is registered in will not close it.
        """
        self._owned_by_caller = True
        await self._ensure()
        return self

    async def __aenter__(self) -> McpClient:
        return await self.connect()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection (stops a stdio server process); idempotent. The client cannot be reused."""
        if self._closed:
            return
        self._closed = True
        await self._disconnect()

    async def _disconnect(self) -> None:
        """Close the current connection (and wait for replaced ones to finish closing)."""
        loop = asyncio.get_running_loop()
        reviving = [t for t in self._reviving if t.get_loop() is loop]
        for task in reviving:
            task.cancel()
        if reviving:
            await asyncio.wait(reviving, timeout=_CLOSE_TIMEOUT)
        conn, self._conn = self._conn, None
        if conn is not None:
            await self._retire(conn)
        pending = [t for t in self._retiring if t.get_loop() is loop]
        if pending:
            await asyncio.wait(pending, timeout=_CLOSE_TIMEOUT)

    # -- tools ------------------------------------------------------------------------------------------
    async def list_tools(self) -> list[mcp_types.Tool]:
        """All tools the server offers (every page)."""
        tools: list[mcp_types.Tool] = await self._list_all(
            "tools", "tools/list", lambda session, params: session.list_tools(params=params)
        )
        self._tool_specs = {t.name: t for t in tools}
        return tools

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = _MISSING,
        progress: ProgressCallback | None = None,
        idempotent: bool | None = None,
    ) -> mcp_types.CallToolResult:
        """Call a tool by its name on the server and return the SDK's result.

        `timeout` defaults to the client's (None: no limit); `progress` receives the server's
        progress notifications. `idempotent` says whether the call may be sent again when the
        connection dies under it (None: when the server annotated the tool read-only or
        idempotent). Raises `McpCallLostError` when the connection died during a call that is not
        re-sent, `McpConnectionError` when the server cannot be reached, `McpError` for a
        protocol error or timeout. A tool that fails returns a result with ``is_error=True``.
        """
        read_timeout = self.timeout if timeout is _MISSING else timeout
        args = dict(arguments) if arguments is not None else None
        if idempotent is None:
            idempotent = _retry_safe(self._tool_specs.get(name))

        def send(session: ClientSession) -> Awaitable[mcp_types.CallToolResult]:
            return session.call_tool(name, args, read_timeout_seconds=read_timeout, progress_callback=progress)

        call = current_mcp_call.get() or McpCall(tool=name)
        token = id(call)
        self._inflight[token] = call
        try:
            result: mcp_types.CallToolResult = await self._request(
                send, f"run tool {name!r}", method="tools/call", idempotent=idempotent, tool=name
            )
            return result
        except MCPError as exc:
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                raise McpError(
                    f"MCP tool {name!r} on server {self.name!r} timed out after {read_timeout:g} s", server=self.name
                ) from None
            raise McpError(
                f"MCP server {self.name!r} refused tool {name!r}: {exc.message} (code {exc.code})", server=self.name
            ) from None
        except McpError:
            raise
        except Exception as exc:  # e.g. a result that fails the SDK's validation
            raise McpError(
                f"MCP server {self.name!r} gave an unusable answer for tool {name!r}: {_describe_exc(exc)}",
                server=self.name,
            ) from exc
        finally:
            self._inflight.pop(token, None)
            call.withdraw()

    # -- resources --------------------------------------------------------------------------------------
    async def list_resources(self) -> list[mcp_types.Resource]:
        """All resources the server lists (every page)."""
        resources: list[mcp_types.Resource] = await self._list_all(
            "resources", "resources/list", lambda session, params: session.list_resources(params=params)
        )
        return resources

    async def list_resource_templates(self) -> list[mcp_types.ResourceTemplate]:
        """All resource templates (URI patterns such as ``file:///{path}``) the server offers."""
        templates: list[mcp_types.ResourceTemplate] = await self._list_all(
            "resource_templates",
            "resources/templates/list",
            lambda session, params: session.list_resource_templates(params=params),
        )
        return templates

    async def read_resource(self, uri: str) -> mcp_types.ReadResourceResult:
        """Read one resource; its contents are text or base64 blobs."""
        _check_uri(uri)

        def send(session: ClientSession) -> Awaitable[mcp_types.ReadResourceResult]:
            return session.read_resource(uri)

        result: mcp_types.ReadResourceResult = await self._ask(send, f"read resource {uri!r}", "resources/read")
        return result

    async def resource_message(self, uri: str) -> Msg:
        """A user message holding a resource's contents, to attach as context to an agent call."""
        blocks = read_result_blocks(await self.read_resource(uri))
        return Msg(role="user", content=blocks, metadata={"mcp_resource": uri, "mcp_server": self.name})

    async def subscribe_resource(self, uri: str, on_update: ResourceCallback) -> None:
        """Call ``on_update(uri)`` whenever the server says the resource changed.

        The subscription is renewed on every new connection; `unsubscribe_resource` ends it.
        """
        _check_uri(uri)
        if not callable(on_update):
            raise UserError(f"subscribe_resource needs a callable on_update, not {on_update!r}")
        await self._ensure()
        caps = self.server_capabilities
        if caps is None or caps.resources is None or not caps.resources.subscribe:
            raise McpError(f"MCP server {self.name!r} does not support resource subscriptions", server=self.name)
        first = uri not in self._subscriptions
        self._subscriptions.setdefault(uri, []).append(on_update)
        if not first:
            return
        try:
            await self._ask(_subscribe(uri), f"subscribe to resource {uri!r}", "resources/subscribe")
        except BaseException:
            self._subscriptions.pop(uri, None)
            raise

    async def unsubscribe_resource(self, uri: str, on_update: ResourceCallback | None = None) -> None:
        """Stop calling `on_update` (None: every callback) for `uri`; unsubscribes when none is left."""
        callbacks = self._subscriptions.get(uri)
        if callbacks is None:
            return
        if on_update is not None:
            callbacks[:] = [c for c in callbacks if c != on_update]
        if on_update is not None and callbacks:
            return
        del self._subscriptions[uri]
        if self.connected:
            await self._ask(_unsubscribe(uri), f"unsubscribe from resource {uri!r}", "resources/unsubscribe")

    # -- prompts ----------------------------------------------------------------------------------------
    async def list_prompts(self) -> list[mcp_types.Prompt]:
        """All prompts (message templates) the server offers, with their arguments."""
        prompts: list[mcp_types.Prompt] = await self._list_all(
            "prompts", "prompts/list", lambda session, params: session.list_prompts(params=params)
        )
        return prompts

    async def get_prompt(self, name: str, arguments: Mapping[str, Any] | None = None) -> list[Msg]:
        """Fill in a prompt: its messages, ready to pass to ``agent.call`` (argument values become strings)."""
        if not isinstance(name, str) or not name:
            raise UserError(f"get_prompt needs a prompt name, not {name!r}")
        args = {str(k): v if isinstance(v, str) else json.dumps(v, default=str) for k, v in (arguments or {}).items()}

        def send(session: ClientSession) -> Awaitable[mcp_types.GetPromptResult]:
            return session.get_prompt(name, args or None)

        result: mcp_types.GetPromptResult = await self._ask(send, f"get prompt {name!r}", "prompts/get")
        return prompt_messages(result)

    # -- requests ---------------------------------------------------------------------------------------
    async def _ask(self, send: Callable[[ClientSession], Awaitable[Any]], what: str, method: str) -> Any:
        """An idempotent request, its failures as `McpError`."""
        try:
            return await self._request(send, what, method=method, idempotent=True)
        except MCPError as exc:
            raise McpError(
                f"MCP server {self.name!r} could not {what}: {exc.message} (code {exc.code})", server=self.name
            ) from None
        except McpError:
            raise
        except Exception as exc:
            raise McpError(
                f"MCP server {self.name!r} could not {what}: {_describe_exc(exc)}", server=self.name
            ) from exc

    async def _list_all(
        self, field: str, method: str, fetch: Callable[[ClientSession, mcp_types.PaginatedRequestParams | None], Any]
    ) -> list[Any]:
        """Every page of a listing (`field` names the list in each page)."""
        items: list[Any] = []
        cursor: str | None = None
        seen: set[str] = set()
        kind = field.removesuffix("s").replace("_", " ")
        for _ in range(_MAX_PAGES):
            params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor is not None else None

            def send(session: ClientSession, params: Any = params) -> Awaitable[Any]:
                page: Awaitable[Any] = fetch(session, params)
                return page

            page = await self._ask(send, f"list its {kind}s", method)
            items.extend(getattr(page, field))
            cursor = page.next_cursor
            if cursor is None:
                return items
            if cursor in seen:
                raise McpError(
                    f"MCP server {self.name!r} repeated the {method} cursor {cursor!r}; stopping", server=self.name
                )
            seen.add(cursor)
        raise McpError(f"MCP server {self.name!r} returned more than {_MAX_PAGES} pages of {kind}s", server=self.name)

    async def _request(
        self,
        send: Callable[[ClientSession], Awaitable[Any]],
        what: str,
        *,
        method: str,
        idempotent: bool = False,
        tool: str = "",
    ) -> Any:
        """Send one request over a live connection, reconnecting and retrying once when that is safe.

        Safe: the request certainly never reached the server, or it is `idempotent`. Otherwise a
        request in flight when the connection died raises `McpCallLostError`.
        """
        retried = False
        while True:
            conn = await self._ensure()
            session = conn.session
            assert session is not None
            attempt = _Attempt(method)
            try:
                return await _run_child(_attempted(attempt, send(session)))
            except MCPError as exc:
                verdict = await self._diagnose(conn, exc, attempt)
                if verdict == "ok":
                    raise  # a protocol-level error; the connection is fine
                self._forget(conn)
                reason = conn.stale or exc.message
                if verdict == "undelivered" or idempotent:
                    if self.reconnect and not retried:
                        retried = True
                        logger.info("MCP server %r: %s; reconnecting to %s", self.name, reason, what)
                        continue
                    raise McpConnectionError(
                        f"MCP server {self.name!r} could not be reached to {what}: {reason}", server=self.name
                    ) from None
                # The request was (or may have been) delivered: never re-send it.
                restarted = False
                if self.reconnect and not self._closed:
                    with contextlib.suppress(McpError):
                        await self._ensure()
                        restarted = True
                raise _lost_error(self.name, what, restarted, reason, tool) from None

    async def _diagnose(self, conn: _Connection, exc: MCPError, attempt: _Attempt) -> str:
        """Classify a failed request: ``ok`` (the server answered), ``undelivered`` or ``lost``."""
        if attempt.rejected or (self._transport != "stdio" and _is_expired_session(exc)):
            conn.mark_lost()
            return "undelivered"  # the server refused the stale session before doing anything
        closed = exc.code == mcp_types.CONNECTION_CLOSED
        if closed and isinstance(exc.__context__, (anyio.BrokenResourceError, anyio.ClosedResourceError)):
            conn.mark_lost()
            return "undelivered"  # the SDK could not even write the request
        if conn.stale is not None:
            return "lost"  # the session died under the request (e.g. the server restarted)
        if not closed:
            return "ok"
        # Wait for the holder to finish so its error (why the transport died) is known.
        task = conn.task
        if task is not None and not task.done():
            conn.mark_lost()
            await asyncio.wait({task}, timeout=_DEATH_WAIT)
        if attempt.rejected:
            return "undelivered"
        if conn.error is not None and _is_connect_failure(conn.error):
            return "undelivered"
        return "lost"

    # -- connection management --------------------------------------------------------------------------
    def _get_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            self._lock = asyncio.Lock()
            self._lock_loop = loop
        return self._lock

    def _forget(self, conn: _Connection) -> None:
        # The holder sees `closing` and winds the transport down; `_ensure` replaces the connection.
        conn.mark_lost()

    async def _ensure(self) -> _Connection:
        """A live connection: the current one, or a new one (reconnecting with backoff)."""
        if self._closed:
            raise McpConnectionError(f"MCP client for server {self.name!r} is closed", server=self.name)
        loop = asyncio.get_running_loop()
        conn = self._conn
        if conn is not None and conn.alive and conn.loop is loop:
            return conn
        async with self._get_lock():
            if self._closed:
                raise McpConnectionError(f"MCP client for server {self.name!r} is closed", server=self.name)
            conn = self._conn
            if conn is not None and conn.alive and conn.loop is loop:
                return conn
            first = self._opened == 0
            if conn is not None:
                self._conn = None
                if conn.loop is loop:
                    # Wind the old connection down in the background: a hung HTTP server must not
                    # delay the new connection (stdio processes are still reaped).
                    retiring = loop.create_task(self._retire(conn), context=contextvars.Context())
                    self._retiring.add(retiring)
                    retiring.add_done_callback(self._retiring.discard)
            if first or not self.reconnect:
                if not first:
                    raise McpConnectionError(
                        f"the connection to MCP server {self.name!r} was lost and reconnect=False", server=self.name
                    )
                new = await self._open()
            else:
                new = await self._reopen()
            if self._closed:  # closed while connecting (e.g. by a background revival)
                await self._retire(new)
                raise McpConnectionError(f"MCP client for server {self.name!r} is closed", server=self.name)
            self._conn = new
            self._opened += 1
            return new

    async def _reopen(self) -> _Connection:
        last: McpError | None = None
        for delay in self.reconnect_delays:
            if delay:
                await asyncio.sleep(delay)
            try:
                conn = await self._open()
            except McpConnectionError as exc:
                last = exc
                if not exc.retryable:
                    raise
                continue
            self.reconnects += 1
            logger.info("MCP server %r: reconnected (reconnect #%d)", self.name, self.reconnects)
            return conn
        assert last is not None
        raise McpConnectionError(
            f"{last} (gave up after {len(self.reconnect_delays)} reconnect attempts)", server=self.name
        ) from None

    async def _open(self) -> _Connection:
        loop = asyncio.get_running_loop()
        conn = _Connection(loop)
        # An empty context: the holder must not keep the first caller's run (and its state) alive.
        conn.task = loop.create_task(self._hold(conn), name=f"mcp-{self.name}", context=contextvars.Context())
        try:
            # Backstop for a transport that hangs before the handshake (which has its own deadline).
            async with asyncio.timeout(self.connect_timeout + _CLOSE_TIMEOUT):
                await asyncio.shield(conn.ready)
        except asyncio.CancelledError:
            conn.task.cancel()
            raise
        except TimeoutError:
            conn.task.cancel()
            raise McpConnectionError(
                f"MCP server {self.name!r} ({self._describe}) did not answer within {self.connect_timeout:g} s",
                server=self.name,
            ) from None
        except BaseException:
            # Let the holder finish unwinding, so its error (why it failed) is complete.
            await asyncio.wait({conn.task}, timeout=_DEATH_WAIT)
            raise self._startup_error(conn.error) from None
        return conn

    async def _hold(self, conn: _Connection) -> None:
        """The holder task: enter the transport and the session, handshake, wait, exit (same task)."""
        cancelled = False
        inbound = self._inbound
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await self._opener(stack, conn)
                session = await stack.enter_async_context(
                    ClientSession(
                        _WatchedReadStream(read, conn.mark_lost),
                        write,
                        sampling_callback=inbound.sampling if inbound.samples else None,
                        elicitation_callback=inbound.elicitation,
                        message_handler=self._on_message,
                        client_info=mcp_types.Implementation(name="agentrt", version=version()),
                    )
                )
                with anyio.fail_after(self.connect_timeout):
                    conn.init = await session.initialize()
                    await self._resubscribe(session)
                conn.session = session
                if not conn.ready.done():
                    conn.ready.set_result(None)
                await conn.closing.wait()
        except BaseException as exc:
            conn.error = exc
            if not conn.ready.done():
                conn.ready.set_exception(exc if isinstance(exc, Exception) else ConnectionError(str(exc)))
                # The future's exception is retrieved by `_open`; mark it so a cancelled opener leaks no warning.
                conn.ready.exception()
            if isinstance(exc, asyncio.CancelledError):
                cancelled = True
                raise
            if conn.ready.done() and conn.init is not None:
                logger.info("MCP server %r: connection ended: %s", self.name, _describe_exc(exc))
        finally:
            conn.lost = True
            conn.closing.set()
            if not cancelled and conn.session is not None and not conn.retired and self._subscriptions:
                self._revive_soon(conn)

    async def _resubscribe(self, session: ClientSession) -> None:
        """Renew the resource subscriptions on a new session."""
        for uri in list(self._subscriptions):
            try:
                await _subscribe(uri)(session)
            except MCPError as exc:
                logger.warning("MCP server %r: could not renew the subscription to %r: %s", self.name, uri, exc)

    def _revive_soon(self, conn: _Connection) -> None:
        """Reconnect in the background when a connection with subscriptions dies (updates resume)."""
        if self._closed or not self.reconnect or self._conn is not conn:
            return

        async def revive() -> None:
            try:
                await self._ensure()
            except McpError as exc:
                logger.warning("MCP server %r: subscriptions paused until the next call: %s", self.name, exc)

        task = conn.loop.create_task(revive(), name=f"mcp-{self.name}-revive", context=contextvars.Context())
        self._reviving.add(task)
        task.add_done_callback(self._reviving.discard)

    async def _retire(self, conn: _Connection) -> None:
        task = conn.task
        conn.retired = True
        if conn.loop is not asyncio.get_running_loop():
            return  # made in an event loop that has ended; its tasks were cancelled with it
        conn.closing.set()
        if task is None or task.done():
            return
        done, _ = await asyncio.wait({task}, timeout=_CLOSE_TIMEOUT)
        if not done:
            task.cancel()
            await asyncio.wait({task}, timeout=_CLOSE_TIMEOUT)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            logger.warning("MCP server %r: transport error: %s", self.name, _describe_exc(message))
            return
        logger.debug("MCP server %r: notification %s", self.name, type(message).__name__)
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            uri = message.params.uri
            for callback in list(self._subscriptions.get(uri, ())):
                try:
                    outcome = callback(uri)
                    if inspect.isawaitable(outcome):
                        await outcome
                except Exception:
                    logger.exception("MCP server %r: resource update callback for %r failed", self.name, uri)

    def _startup_error(self, exc: BaseException | None) -> McpConnectionError:
        label = self.name
        where = self._describe
        leaf = _most_telling(exc)
        retryable = True
        if isinstance(leaf, FileNotFoundError):
            program = f"command {self._program!r}" if self._program else where
            text = f"could not start: {program} not found ({leaf.strerror or leaf})"
            retryable = False
        elif isinstance(leaf, PermissionError):
            program = f"command {self._program!r}" if self._program else where
            text = f"could not start: {program} is not executable ({leaf})"
            retryable = False
        elif isinstance(leaf, (httpx2.ConnectError, ConnectionRefusedError)):
            text = f"could not connect to {where}: {str(leaf) or 'connection refused'}"
        elif isinstance(leaf, httpx2.HTTPStatusError):
            text = f"{where} answered HTTP {leaf.response.status_code}; is it an MCP {self._transport} endpoint?"
        elif isinstance(leaf, (httpx2.InvalidURL, httpx2.UnsupportedProtocol)):
            text = f"bad {where}: {leaf}"
            retryable = False
        elif isinstance(leaf, TimeoutError):
            text = f"{where} did not complete the MCP handshake within {self.connect_timeout:g} s"
        elif isinstance(leaf, MCPError) and leaf.code == mcp_types.CONNECTION_CLOSED:
            if self._transport == "stdio":
                text = (
                    f"{where} exited or closed its output before completing the MCP handshake "
                    "(is it an MCP server on stdio? see its stderr)"
                )
            else:
                text = f"the connection to {where} closed during the MCP handshake"
        elif isinstance(leaf, MCPError):
            text = f"{where} refused the MCP handshake: {leaf.message}"
            if self._transport != "stdio":
                text += " (is this the MCP endpoint?)"
        elif isinstance(leaf, OSError):
            text = f"could not start {where}: {leaf}"
        else:
            text = f"could not connect via {where}: {_describe_exc(leaf)}"
        return McpConnectionError(f"MCP server {label!r} {text}", server=label, retryable=retryable)


def _lost_error(server: str, what: str, restarted: bool, detail: str, tool: str) -> McpCallLostError:
    if restarted:
        text = (
            f"MCP server {server!r} stopped or lost its session while trying to {what} ({detail}); the "
            "connection has been restarted. The call may or may not have taken effect and was not sent "
            "again: check, then call the tool again if needed."
        )
    else:
        text = (
            f"MCP server {server!r} stopped or lost its session while trying to {what} ({detail}) and could "
            "not be restarted yet. The call may or may not have taken effect."
        )
    return McpCallLostError(text, server=server, tool=tool, restarted=restarted)


async def _run_child(awaitable: Awaitable[Any]) -> Any:
    """Await `awaitable` in a child task, so a cancelled caller cancels it exactly once.

    The SDK answers that cancellation by sending ``notifications/cancelled``; the child gets a
    moment to do so even if the caller is cancelled again meanwhile.
    """
    task: asyncio.Future[Any] = asyncio.ensure_future(awaitable)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.cancel()
        task.add_done_callback(_consume)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait({task}, timeout=_CANCEL_GRACE)
        raise


def _consume(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


# --------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------
def _sanitise(name: str) -> str:
    return _UNSAFE.sub("_", name).strip("_")


def _command_name(command: str, args: Sequence[str]) -> str:
    stem = os.path.splitext(os.path.basename(command))[0]
    if stem.lower().rstrip("0123456789.") in _LAUNCHERS:
        for arg in args:
            if arg.startswith("-") or arg in ("run", "exec", "tool", "x"):
                continue
            base = os.path.basename(arg.rstrip("/"))
            return os.path.splitext(base)[0] if base.endswith((".py", ".js")) else base
    return stem


def _host_name(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:
        return "server"
    host = parts.hostname or "server"
    return f"{host}_{parts.port}" if parts.port else host


def _check_url(url: str) -> None:
    if not isinstance(url, str) or not url:
        raise UserError(f"MCP server URL must be a non-empty string, not {url!r}")
    scheme = urlsplit(url).scheme
    if scheme not in ("http", "https"):
        raise UserError(f"MCP server URL must start with http:// or https://, not {url!r}")


def _has_fileno(stream: Any) -> bool:
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    return True


def _leaves(exc: BaseException | None) -> Iterator[BaseException]:
    """Every exception inside `exc`: group members and causes, depth first."""
    seen: set[int] = set()
    stack = [exc] if exc is not None else []
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, BaseExceptionGroup):
            stack.extend(reversed(current.exceptions))
            continue
        yield current
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                stack.append(linked)


def _most_telling(exc: BaseException | None) -> BaseException | None:
    """The exception that best explains a failed connection (a refused connect over a closed stream)."""
    leaves = [e for e in _leaves(exc) if not isinstance(e, (asyncio.CancelledError, anyio.get_cancelled_exc_class()))]
    for kind in (
        FileNotFoundError,
        PermissionError,
        httpx2.ConnectError,
        ConnectionRefusedError,
        httpx2.HTTPStatusError,
        httpx2.InvalidURL,
        httpx2.UnsupportedProtocol,
        TimeoutError,
        OSError,
    ):
        for leaf in leaves:
            if isinstance(leaf, kind):
                return leaf
    mcp_errors = [e for e in leaves if isinstance(e, MCPError)]
    for leaf in mcp_errors:
        if leaf.code != mcp_types.CONNECTION_CLOSED:
            return leaf
    if mcp_errors:
        return mcp_errors[0]
    return leaves[0] if leaves else exc


def _is_connect_failure(exc: BaseException) -> bool:
    return any(isinstance(e, (httpx2.ConnectError, ConnectionRefusedError)) for e in _leaves(exc))


def _is_expired_session(exc: MCPError) -> bool:
    """A server's answer that it does not know the session (-32600 from the SDK, -32000 from servers)."""
    return exc.code in (mcp_types.INVALID_REQUEST, -32000) and _is_stale_text(exc.message)


def _is_stale_text(text: str) -> bool:
    text = text.lower()
    if "not initialized" in text or "not initialised" in text:
        return True
    return "session" in text and any(w in text for w in _STALE_WORDS)


def _retry_safe(spec: mcp_types.Tool | None) -> bool:
    """Whether a tool may be called again after a lost call: annotated read-only or idempotent."""
    notes = spec.annotations if spec is not None else None
    return bool(notes is not None and (notes.read_only_hint is True or notes.idempotent_hint is True))


def _subscribe(uri: str) -> Callable[[ClientSession], Awaitable[mcp_types.EmptyResult]]:
    # Sent directly: the SDK marks its subscribe_resource helper deprecated (2026-07-28 listen()).
    def send(session: ClientSession) -> Awaitable[mcp_types.EmptyResult]:
        request = mcp_types.SubscribeRequest(params=mcp_types.SubscribeRequestParams(uri=uri))
        return session.send_request(request, mcp_types.EmptyResult)

    return send


def _unsubscribe(uri: str) -> Callable[[ClientSession], Awaitable[mcp_types.EmptyResult]]:
    def send(session: ClientSession) -> Awaitable[mcp_types.EmptyResult]:
        request = mcp_types.UnsubscribeRequest(params=mcp_types.UnsubscribeRequestParams(uri=uri))
        return session.send_request(request, mcp_types.EmptyResult)

    return send


def _check_uri(uri: str) -> None:
    if not isinstance(uri, str) or not uri:
        raise UserError(f"an MCP resource URI must be a non-empty string, not {uri!r}")


def _describe_exc(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
