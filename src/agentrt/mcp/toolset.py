"""Register an MCP server's tools in a `Toolkit` (`Toolkit.register_mcp` calls `register_mcp`).

Each server tool becomes an `McpTool` named ``mcp__<server>__<tool>`` (or ``<prefix><tool>``),
with the server's schema, description and annotations; its results are converted by
`result_to_block`. A call reads its `ToolCallScope` to attribute progress notifications and the
server's sampling and elicitation requests to the right tool call.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import mcp_types

from agentrt.errors import DuplicateToolError, McpError, ToolRetry, UserError
from agentrt.events import AgentEvent, register_event_type
from agentrt.mcp._content import block_output, listing_text, read_result_blocks, result_to_block
from agentrt.mcp._inbound import McpCall, current_mcp_call
from agentrt.mcp.client import McpClient, ProgressCallback
from agentrt.message import ToolResultBlock
from agentrt.tool.base import Tool
from agentrt.tool.scope import ToolCallScope

if TYPE_CHECKING:
    from agentrt.context import RuntimeContext
    from agentrt.tool.toolkit import Toolkit

__all__ = ["McpProgress", "McpTool", "register_mcp", "result_to_block"]

logger = logging.getLogger("agentrt.mcp")

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class McpTool(Tool):
    """A tool backed by an MCP server: `mcp_client` serves it as `mcp_tool` (None: a resource tool)."""

    __slots__ = ("mcp_client", "mcp_tool")

    def __init__(self, *, mcp_client: McpClient, mcp_tool: str | None, **options: Any) -> None:
        super().__init__(**options)
        self.mcp_client = mcp_client
        self.mcp_tool = mcp_tool


@register_event_type
@dataclass(frozen=True, slots=True, kw_only=True)
class McpProgress(AgentEvent):
    """A progress notification from an MCP server while one of its tools runs (type ``mcp_progress``)."""

    tool_call_id: str = ""
    """The id of the tool call the progress is about ("" when it could not be determined)."""
    server: str = ""
    tool: str = ""
    """The tool's name on the server."""
    progress: float = 0.0
    total: float | None = None
    message: str | None = None


async def register_mcp(
    toolkit: Toolkit,
    client: McpClient,
    *,
    group: str | None = None,
    prefix: str | None = None,
    include: str | Iterable[str] | None = None,
    exclude: str | Iterable[str] | None = None,
    timeout: float | None = None,
    resources: bool | None = None,
) -> list[Tool]:
    """Register the tools of `client`'s server in `toolkit` (see `Toolkit.register_mcp`).

    `resources` adds the read-only tools ``list_resources`` and ``read_resource`` (named like the
    server's tools); None adds them when the server lists resources or resource templates.
    """
    if not isinstance(client, McpClient):
        raise UserError(f"register_mcp needs an McpClient, not {type(client).__name__!r}")
    if client.closed:
        raise UserError(f"McpClient for server {client.name!r} is closed; build a new one")
    if timeout is not None and timeout <= 0:
        raise UserError(f"register_mcp timeout must be positive or None, not {timeout!r}")
    opened_here = not client._owned_by_caller and not client.connected
    try:
        await client._ensure()
        caps = client.server_capabilities
        server_tools = await client.list_tools() if caps is None or caps.tools is not None else []
        if resources is None:
            resources = await _has_resources(client)
        elif resources and caps is not None and caps.resources is None:
            raise UserError(f"MCP server {client.name!r} offers no resources (resources=True)")
        tools = _build_tools(
            client,
            server_tools,
            group=group,
            prefix=prefix,
            include=include,
            exclude=exclude,
            timeout=client.timeout if timeout is None else timeout,
            resources=resources,
        )
        taken = sorted(t.name for t in tools if t.name in toolkit)
        if taken:
            raise DuplicateToolError(
                f"MCP server {client.name!r}: tool name(s) already registered: {', '.join(taken)}; "
                "pass prefix= (or name= on the client) to register them under other names"
            )
    except BaseException:
        if opened_here and not client._toolkits:
            await client._disconnect()  # leave the client as we found it: unconnected, reusable
        raise
    for t in tools:
        toolkit.register(t)
    if not client._owned_by_caller and not any(tk is toolkit for tk in client._toolkits):
        # Toolkits share a client they opened: the last one to close closes it.
        client._toolkits.append(toolkit)

        async def release() -> None:
            client._toolkits = [tk for tk in client._toolkits if tk is not toolkit]
            if not client._toolkits and not client._owned_by_caller:
                await client.aclose()

        toolkit.add_closer(release)
    return list(tools)


def _build_tools(
    client: McpClient,
    server_tools: Sequence[mcp_types.Tool],
    *,
    group: str | None,
    prefix: str | None,
    include: str | Iterable[str] | None,
    exclude: str | Iterable[str] | None,
    timeout: float | None,
    resources: bool = False,
) -> list[McpTool]:
    includes = _patterns(include)
    excludes = _patterns(exclude)
    server = client.name

    def wanted(name: str) -> bool:
        if includes is not None and not any(fnmatch.fnmatchcase(name, p) for p in includes):
            return False
        return not (excludes and any(fnmatch.fnmatchcase(name, p) for p in excludes))

    def local(name: str) -> str:
        return _tool_name(f"{prefix}{name}" if prefix is not None else f"mcp__{server}__{name}")

    tools: list[McpTool] = []
    used: set[str] = set()
    for spec in server_tools:
        if not wanted(spec.name):
            continue
        name = local(spec.name)
        if name in used:
            base, n = name, 2
            while name in used:
                name = _tool_name(f"{base[:60]}_{n}")
                n += 1
        used.add(name)
        notes = spec.annotations
        # The server is untrusted: hints that would loosen a check count only when the application
        # trusts this server. The retry of a lost call still follows the hints (the server's own
        # tool is the one re-run), as does destructiveHint, which only adds caution.
        claims_read_only = bool(notes is not None and notes.read_only_hint is True)
        claims_idempotent = bool(notes is not None and notes.idempotent_hint is True)
        read_only = claims_read_only and client.trust_annotations
        idempotent = claims_idempotent and client.trust_annotations
        # MCP's default for destructiveHint is true (for tools that are not read-only); we only trust
        # an explicit hint, so unannotated servers do not ask for approval on every call.
        destructive = bool(notes is not None and notes.destructive_hint is True and not claims_read_only)
        parameters: dict[str, Any] = dict(spec.input_schema or {})
        parameters.setdefault("type", "object")
        if parameters.get("type") == "object":
            parameters.setdefault("properties", {})
        description = spec.description or (notes.title if notes is not None and notes.title else None) or spec.title
        tool = McpTool(
            name=name,
            description=description or f"Tool {spec.name!r} of MCP server {server!r}.",
            parameters=parameters,
            handler=_make_handler(client, spec.name, name, retry_safe=claims_read_only or claims_idempotent),
            read_only=read_only,
            destructive=destructive,
            idempotent=idempotent,
            timeout=timeout,
            group=group,
            mcp_client=client,
            mcp_tool=spec.name,
        )
        tools.append(tool)
    if resources:
        for kind in ("list_resources", "read_resource"):
            name = local(kind)
            if not wanted(kind) or name in used:
                continue  # filtered out, or the server has a tool of that name
            used.add(name)
            tools.append(_resource_tool(client, kind, name, group=group, timeout=timeout))
    return tools


async def _has_resources(client: McpClient) -> bool:
    """Whether the server offers resources: some servers advertise the capability with none."""
    caps = client.server_capabilities
    if caps is None or caps.resources is None:
        return False
    try:
        return bool(await client.list_resources() or await client.list_resource_templates())
    except McpError as exc:
        logger.debug("MCP server %r: cannot list resources: %s", client.name, exc)
        return False


_READ_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "uri": {"type": "string", "description": "The resource's URI (from list_resources, a template or a link)."}
    },
    "required": ["uri"],
}


def _resource_tool(client: McpClient, kind: str, name: str, *, group: str | None, timeout: float | None) -> McpTool:
    """The read-only ``list_resources`` or ``read_resource`` tool of a server."""
    server = client.name

    async def list_handler(args: Mapping[str, Any], ctx: RuntimeContext) -> Any:
        try:
            found = await client.list_resources()
        except McpError as exc:
            raise ToolRetry(str(exc)) from None
        try:
            templates = await client.list_resource_templates()
        except McpError:  # servers without templates may not know the method
            templates = []
        return listing_text(server, found, templates)

    async def read_handler(args: Mapping[str, Any], ctx: RuntimeContext) -> Any:
        uri = args.get("uri")
        if not isinstance(uri, str) or not uri:
            raise ToolRetry("Give the URI of the resource to read, e.g. from list_resources.")
        try:
            result = await client.read_resource(uri)
        except McpError as exc:
            raise ToolRetry(str(exc)) from None
        return ToolResultBlock(id="", name=name, output=block_output(read_result_blocks(result)))

    if kind == "list_resources":
        description = f"List the resources (and resource URI templates) of MCP server {server!r}."
        schema: dict[str, Any] = {"type": "object", "properties": {}}
        handler = list_handler
    else:
        description = (
            f"Read a resource of MCP server {server!r} by its URI: one from list_resources, a filled-in "
            "resource template, or a resource link in a tool result."
        )
        schema = dict(_READ_SCHEMA)
        handler = read_handler
    return McpTool(
        name=name,
        description=description,
        parameters=schema,
        handler=handler,
        read_only=True,
        idempotent=True,
        timeout=timeout,
        group=group,
        mcp_client=client,
        mcp_tool=None,
    )


def _make_handler(
    client: McpClient, mcp_name: str, tool_name: str, *, retry_safe: bool
) -> Callable[[Mapping[str, Any], RuntimeContext], Awaitable[Any]]:
    async def handler(args: Mapping[str, Any], ctx: RuntimeContext) -> Any:
        scope = ToolCallScope.current()
        call_id = scope.call_id if scope is not None else ""
        progress: ProgressCallback | None = None
        if scope is not None and scope.streaming:
            server = client.name

            async def forward(progress: float, total: float | None, message: str | None) -> None:
                scope.event(
                    McpProgress,
                    tool_call_id=call_id,
                    server=server,
                    tool=mcp_name,
                    progress=progress,
                    total=total,
                    message=message,
                )

            progress = forward

        # Server requests during the call (sampling, elicitation) are attributed to it.
        token = current_mcp_call.set(McpCall(tool=mcp_name, scope=scope, tool_call_id=call_id))
        try:
            # The executor enforces the tool's timeout (and cancels this call); no second clock here.
            result = await client.call_tool(mcp_name, args, timeout=None, progress=progress, idempotent=retry_safe)
        except McpError as exc:
            raise ToolRetry(str(exc)) from None
        finally:
            current_mcp_call.reset(token)
        return result_to_block(result, tool_name, server=client.name)

    return handler


def _tool_name(raw: str) -> str:
    name = _UNSAFE.sub("_", raw)
    if _TOOL_NAME.match(name):
        return name
    if not name.strip("_"):
        name = "tool"
    if len(name) > 64:
        digest = hashlib.sha1(raw.encode()).hexdigest()[:8]
        name = f"{name[:55]}_{digest}"
    return name


def _patterns(value: str | Iterable[str] | None) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]
