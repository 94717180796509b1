"""``agentrt mcp``: serve a toolkit or an agent over MCP; list an MCP server's tools, resources and prompts."""

# No `from __future__ import annotations`: typer reads these signatures at runtime.
import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

if TYPE_CHECKING:
    import typer
    from rich.table import Table

    from agentrt.mcp import McpClient

T = TypeVar("T")

__all__ = ["build_mcp_app"]


def build_mcp_app() -> "typer.Typer":
    """The ``mcp`` command group."""
    import typer

    app = typer.Typer(help="Serve agentrt tools and agents over MCP; inspect MCP servers.", no_args_is_help=True)

    @app.command()
    def serve(
        target: Annotated[str, typer.Argument(help="MODULE:ATTR of a Toolkit, an agent, a tool or a list of tools.")],
        transport: Annotated[str, typer.Option("--transport", "-t", help="stdio, http (streamable) or sse.")] = "stdio",
        host: Annotated[str, typer.Option(help="Address to listen on (http, sse).")] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="Port to listen on (http, sse).")] = 8000,
        path: Annotated[str | None, typer.Option(help="Endpoint path (default /mcp for http, /sse for sse).")] = None,
        name: Annotated[str | None, typer.Option(help="Server name reported to clients.")] = None,
        user: Annotated[str, typer.Option("--user", "-u", help="agentrt user id of the calls.")] = "mcp",
    ) -> None:
        """Expose a toolkit (one MCP tool per tool) or an agent (one ask_<name> tool) to MCP clients."""
        _serve(target, transport, host=host, port=port, path=path, name=name, user=user)

    # Everything after the server's command is its own: `agentrt mcp tools npx -y @pkg --flag`.
    # Options of ours go before the command (or use `--`).
    passthrough = {"allow_interspersed_args": False, "ignore_unknown_options": True}
    # The server to inspect, the same for every listing command (typer copies the parameter infos).
    Command = Annotated[list[str] | None, typer.Argument(help="Command (and arguments) starting a stdio MCP server.")]  # noqa: N806
    Http = Annotated[str | None, typer.Option(help="URL of a streamable HTTP MCP server.")]  # noqa: N806
    Sse = Annotated[str | None, typer.Option(help="URL of an SSE MCP server.")]  # noqa: N806

    @app.command(context_settings=passthrough)
    def tools(
        command: Command = None,
        http: Http = None,
        sse: Sse = None,
        prefix: Annotated[str | None, typer.Option(help="Name prefix, as register_mcp(prefix=...).")] = None,
    ) -> None:
        """List an MCP server's tools under the names agentrt registers them with.

        Options come before the server's command; everything after it is passed to the server.
        """
        _list_tools(_client(command, http, sse), prefix)

    @app.command(context_settings=passthrough)
    def resources(
        command: Command = None,
        http: Http = None,
        sse: Sse = None,
    ) -> None:
        """List an MCP server's resources and resource templates."""
        _list_resources(_client(command, http, sse))

    @app.command(context_settings=passthrough)
    def prompts(
        command: Command = None,
        http: Http = None,
        sse: Sse = None,
    ) -> None:
        """List an MCP server's prompts and their arguments (required ones marked *)."""
        _list_prompts(_client(command, http, sse))

    return app


def _serve(target: str, transport: str, *, host: str, port: int, path: str | None, name: str | None, user: str) -> None:
    """``mcp serve``: load the target and serve it until the transport closes."""
    from agentrt.errors import AgentrtError
    from agentrt.mcp.server import load_target, serve_mcp

    if transport not in ("stdio", "http", "sse"):
        _fail(f"--transport must be stdio, http or sse, not {transport!r}")
    try:
        obj = load_target(target)
        _check_target(target, obj)
        # stdout carries the protocol under stdio: everything else goes to stderr.
        print("\n".join(_startup_summary(obj, transport, host=host, port=port, path=path)), file=sys.stderr, flush=True)
        serve_mcp(obj, transport, host=host, port=port, path=path, name=name, user_id=user)  # type: ignore[arg-type]
    except AgentrtError as exc:
        _fail(f"{type(exc).__name__}: {exc}")
    except KeyboardInterrupt:  # pragma: no cover - interactive
        pass


_MCP_ACCEPTED = "pass a Toolkit, an agent, a tool (an @tool function), a function or a list of tools"


def _check_target(spec: str, obj: Any) -> None:
    """A `TargetError` saying what `obj` is when it cannot be served over MCP."""
    import inspect

    from agentrt._target import TargetError, describe_target
    from agentrt.agent.base import AgentBase
    from agentrt.tool.base import Tool
    from agentrt.tool.toolkit import Toolkit

    if isinstance(obj, (Toolkit, AgentBase, Tool)) or inspect.isfunction(obj):
        return
    if isinstance(obj, (list, tuple)) and obj:
        return  # the toolkit built from it names an item that is not a tool
    found = describe_target(obj)
    raise TargetError(f"{spec} is {found}, which cannot be served over MCP; {_MCP_ACCEPTED}", target=spec, found=found)


def _startup_summary(obj: Any, transport: str, *, host: str, port: int, path: str | None) -> list[str]:
    """What ``mcp serve`` prints on standard error as it starts: what it serves, the store, where."""
    from agentrt.agent.base import AgentBase
    from agentrt.server._errors import redact_secrets
    from agentrt.state import default_state_url
    from agentrt.tool.base import Tool
    from agentrt.tool.toolkit import Toolkit

    if isinstance(obj, AgentBase):
        served = f"the agent {obj.name!r} (one tool: ask_{obj.name})"
        if obj.has_own_store:
            store = type(obj.state_store).__name__
        else:
            store = f"{redact_secrets(default_state_url())} (the default; set AGENTRT_STATE_URL)"
    else:
        tools = list(obj) if isinstance(obj, Toolkit) else obj if isinstance(obj, (list, tuple)) else [obj]
        names = [t.name if isinstance(t, Tool) else str(getattr(t, "__name__", t)) for t in tools]
        served = f"{len(names)} tool(s): {', '.join(names)}"
        store = "none (tools keep no sessions)"
    if transport == "stdio":
        where = "stdio (this process's standard input and output)"
    else:
        url_host = f"[{host}]" if ":" in host else host
        where = f"{transport}: http://{url_host}:{port}{path or ('/mcp' if transport == 'http' else '/sse')}"
    return [f"agentrt mcp serve: {served}", f"  store:     {store}", f"  endpoint:  {where}"]


def _list_tools(client: "McpClient", prefix: str | None) -> None:
    """``mcp tools``: print the server's tools as a toolkit registers them."""
    from rich.table import Table

    from agentrt.tool.toolkit import Toolkit

    async def go() -> Toolkit:
        toolkit = Toolkit()
        try:
            await toolkit.register_mcp(client, prefix=prefix)
        finally:
            await toolkit.aclose()
        return toolkit

    toolkit = _run(go)
    table = Table("tool", "kind", "description", title=f"MCP server {client.name!r}")
    for t in toolkit:
        kind = "read-only" if t.read_only else ("destructive" if t.destructive else "")
        table.add_row(t.name, kind, (t.description or "").split("\n")[0][:100])
    _print(table)


def _list_resources(client: "McpClient") -> None:
    """``mcp resources``: print the server's resources and resource templates."""
    from rich.table import Table

    async def go() -> list[tuple[str, str, str, str]]:
        async with client:
            caps = client.server_capabilities
            if caps is None or caps.resources is None:
                return []
            rows = [(r.uri, r.name, r.mime_type or "", r.description or "") for r in await client.list_resources()]
            for t in await client.list_resource_templates():
                rows.append((t.uri_template, t.name, t.mime_type or "", t.description or ""))
            return rows

    rows = _run(go)
    table = Table("uri", "name", "type", "description", title=f"MCP server {client.name!r}: resources")
    for uri, name, mime, description in rows:
        table.add_row(uri, name, mime, description.split("\n")[0][:100])
    _print(table)


def _list_prompts(client: "McpClient") -> None:
    """``mcp prompts``: print the server's prompts and their arguments."""
    from rich.table import Table

    async def go() -> list[tuple[str, str, str]]:
        async with client:
            caps = client.server_capabilities
            if caps is None or caps.prompts is None:
                return []
            return [
                (
                    p.name,
                    ", ".join(a.name + ("*" if a.required else "") for a in p.arguments or ()),
                    p.description or "",
                )
                for p in await client.list_prompts()
            ]

    found = _run(go)
    table = Table("prompt", "arguments", "description", title=f"MCP server {client.name!r}: prompts")
    for name, arguments, description in found:
        table.add_row(name, arguments, description.split("\n")[0][:100])
    _print(table)


def _client(command: list[str] | None, http: str | None, sse: str | None) -> "McpClient":
    from agentrt.errors import AgentrtError
    from agentrt.mcp import McpClient

    chosen = [x for x in (command, http, sse) if x]
    if len(chosen) != 1:
        _fail("give exactly one server: a COMMAND (stdio), --http URL or --sse URL (options before the command)")
    try:
        if http:
            return McpClient.http(http)
        if sse:
            return McpClient.sse(sse)
        assert command
        return McpClient.stdio(command[0], command[1:])
    except AgentrtError as exc:
        _fail(f"{type(exc).__name__}: {exc}")


def _run(go: "Callable[[], Coroutine[Any, Any, T]]") -> T:
    from agentrt.errors import AgentrtError

    try:
        return asyncio.run(go())
    except AgentrtError as exc:
        _fail(f"{type(exc).__name__}: {exc}")


def _print(table: "Table") -> None:
    from rich.console import Console

    Console().print(table)


def _fail(message: str) -> NoReturn:
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", highlight=False, markup=True, soft_wrap=True)
    raise SystemExit(2)


if __name__ == "__main__":  # pragma: no cover
    build_mcp_app()(sys.argv[1:])
