"""``agentrt sessions``: list, show, export and delete stored sessions of any state store."""

# No `from __future__ import annotations`: typer reads these signatures at runtime.
import asyncio
import datetime as dt
import json
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

if TYPE_CHECKING:
    import typer
    from rich.console import Console

    from agentrt.message import Msg
    from agentrt.state.base import AgentStateStore

__all__ = ["build_sessions_app", "render_messages"]

T = TypeVar("T")


def _run(url: str | None, work: "Callable[[AgentStateStore], Awaitable[T]]") -> T:
    from agentrt.state import default_state_url, store_from_url

    async def go() -> T:
        store = store_from_url(url or default_state_url())
        try:
            return await work(store)
        finally:
            await store.close()

    return asyncio.run(go())


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if ts else "-"


def render_messages(console: "Console", messages: "list[Msg]") -> None:
    """Print a conversation: one panel per message, tool calls and results shown inline."""
    from rich.markup import escape
    from rich.panel import Panel

    from agentrt import _json
    from agentrt.message import TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock

    colours = {"user": "cyan", "assistant": "green", "system": "magenta"}
    for msg in messages:
        lines: list[str] = []
        for block in msg.content:
            if isinstance(block, TextBlock):
                lines.append(escape(block.text))
            elif isinstance(block, ThinkingBlock):
                lines.append(f"[dim italic]{escape(block.thinking)}[/]")
            elif isinstance(block, ToolUseBlock):
                lines.append(
                    f"[yellow]→ {escape(block.name)}[/] {escape(_json.dumps(dict(block.input)))} [dim]{block.id}[/]"
                )
            elif isinstance(block, ToolResultBlock):
                style = "red" if block.state != "success" else "blue"
                lines.append(f"[{style}]← {escape(block.name)} ({block.state}):[/] {escape(block.text[:2000])}")
            else:
                lines.append(f"[dim]<{block.type}>[/]")
        title = f"{msg.role}" + (f" · {msg.name}" if msg.name else "") + f" · {_when(msg.timestamp)}"
        console.print(
            Panel(
                "\n".join(lines) or "[dim](empty)[/]",
                title=title,
                title_align="left",
                border_style=colours.get(msg.role, "white"),
            )
        )


def build_sessions_app() -> "typer.Typer":
    """The ``sessions`` command group."""
    import typer
    from rich.console import Console
    from rich.table import Table

    from agentrt.context import ANONYMOUS_USER

    app = typer.Typer(help="Inspect the sessions kept in a state store.", no_args_is_help=True)
    store_opt = typer.Option("--store", "-s", help="Store URL (default: AGENTRT_STATE_URL or ~/.agentrt/state.db).")
    user_opt = typer.Option("--user", "-u", help="The user whose sessions to read.")

    @app.command("list")
    def list_(
        store: Annotated[str | None, store_opt] = None,
        user: Annotated[str, user_opt] = ANONYMOUS_USER,
    ) -> None:
        """List a user's sessions, newest first."""
        sessions = _run(store, lambda s: s.list_sessions(user))
        table = Table("session", "messages", "revision", "updated")
        for info in sessions:
            table.add_row(info.session_id, str(info.message_count), str(info.revision), _when(info.updated_at))
        Console().print(table if sessions else f"no sessions for user {user!r}")

    @app.command()
    def show(
        session: Annotated[str, typer.Argument(help="Session id.")],
        store: Annotated[str | None, store_opt] = None,
        user: Annotated[str, user_opt] = ANONYMOUS_USER,
    ) -> None:
        """Show a session's conversation and state."""
        state = _run(store, lambda s: s.load(user, session))
        console = Console()
        if state is None:
            console.print(f"[red]no session {session!r} for user {user!r}[/]")
            raise typer.Exit(1)
        render_messages(console, state.messages)
        extras = {k: v for k, v in state.fields_dict().items() if v not in (None, (), [], {}, 0)}
        from rich.markup import escape

        summary = escape(json.dumps(extras, default=str)[:2000])
        console.print(f"[dim]revision {state.revision}; {len(state.messages)} messages; {summary}[/]", markup=True)

    @app.command()
    def export(
        session: Annotated[str, typer.Argument(help="Session id.")],
        store: Annotated[str | None, store_opt] = None,
        user: Annotated[str, user_opt] = ANONYMOUS_USER,
        output: Annotated[str | None, typer.Option("--output", "-o", help="File to write (default: stdout).")] = None,
    ) -> None:
        """Export a session as JSON (the versioned state format)."""
        from agentrt.state.codec import encode_state

        state = _run(store, lambda s: s.load(user, session))
        if state is None:
            Console(stderr=True).print(f"[red]no session {session!r} for user {user!r}[/]")
            raise typer.Exit(1)
        text = json.dumps(encode_state(state), ensure_ascii=False, indent=2)
        if output:
            with open(output, "w", encoding="utf-8") as fh:
                fh.write(text + "\n")
        else:
            sys.stdout.write(text + "\n")

    @app.command()
    def delete(
        session: Annotated[str, typer.Argument(help="Session id.")],
        store: Annotated[str | None, store_opt] = None,
        user: Annotated[str, user_opt] = ANONYMOUS_USER,
        yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    ) -> None:
        """Delete a session."""
        if not yes and not typer.confirm(f"Delete session {session!r} of user {user!r}?"):
            raise typer.Exit(1)
        existed = _run(store, lambda s: s.delete(user, session))
        Console().print("deleted" if existed else f"no session {session!r} for user {user!r}")
        if not existed:
            raise typer.Exit(1)

    return app
