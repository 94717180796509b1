"""``agentrt sessions``: list, show, export, delete, prune and migrate stored sessions of any state store."""

# No `from __future__ import annotations`: typer reads these signatures at runtime.
import asyncio
import datetime as dt
import json
import re
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

if TYPE_CHECKING:
    import typer
    from rich.console import Console

    from agentrt.message import Msg
    from agentrt.state.base import AgentState, AgentStateStore

__all__ = ["build_sessions_app", "parse_duration", "render_messages"]

T = TypeVar("T")

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?[smhdw])+")
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhdw])")


def parse_duration(text: str) -> float:
    """Seconds in a duration like ``30d``, ``12h``, ``90m``, ``3600s``, ``2w`` or ``1h30m``.

    Raises ValueError (naming the accepted forms) for anything else: a bare number has no unit
    and is refused rather than guessed.
    """
    compact = text.strip().lower().replace(" ", "")
    if not _DURATION.fullmatch(compact):
        raise ValueError(
            f"{text!r} is not a duration: use a number and a unit, like 30d, 12h, 90m or 3600s "
            "(s seconds, m minutes, h hours, d days, w weeks)"
        )
    return sum(float(number) * _UNITS[unit] for number, unit in _PART.findall(compact))


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


def _agent_label(agent: str) -> str:
    return agent if agent else "-"


def _whose(session: str, user: str, agent: str | None) -> str:
    owner = "" if agent is None else f" of agent {agent!r}" if agent else " without an agent"
    return f"session {session!r}{owner} for user {user!r}"


async def _find(
    store: "AgentStateStore", user: str, session: str, agent: str | None
) -> "tuple[str, AgentState | None]":
    """The session's agent and state; with no `agent`, the one agent that has a session with this id.

    Raises ValueError naming the agents when several have one.
    """
    if agent is None:
        owners = sorted({info.agent for info in await store.list_sessions(user) if info.session_id == session})
        if len(owners) > 1:
            names = ", ".join(repr(a) for a in owners)
            raise ValueError(f"several agents have a session {session!r} ({names}): pass --agent")
        if not owners:
            return "", None
        agent = owners[0]
    return agent, await store.load(user, session, agent=agent)


def build_sessions_app() -> "typer.Typer":
    """The ``sessions`` command group."""
    import typer

    from agentrt.context import ANONYMOUS_USER

    app = typer.Typer(help="Inspect the sessions kept in a state store.", no_args_is_help=True)
    store_opt = typer.Option(
        "--store", "--db", "-s", help="Store URL (default: AGENTRT_STATE_URL or ~/.agentrt/state.db)."
    )
    user_opt = typer.Option("--user", "-u", help="The user whose sessions to read.")
    agent_opt = typer.Option(
        "--agent",
        "-a",
        help="The agent (its state_key) the session belongs to; '' for sessions written before sessions "
        "had an agent. Default: the only agent with a session of that id.",
    )

    @app.command("list")
    def list_(
        store: Annotated[str | None, store_opt] = None,
        user: Annotated[str, user_opt] = ANONYMOUS_USER,
        agent: Annotated[
            str | None, typer.Option("--agent", "-a", help="Only this agent's sessions (default: every agent's).")
        ] = None,
    ) -> None:
        """List a user's sessions, newest first."""
        _list_sessions(store, user, agent)

    @app.command()
    def show(
        session: Annotated[str, typer.Argument(help="Session id.")],
        store: Annotated[str | None, store_opt] = None,
        user: Annotated[str, user_opt] = ANONYMOUS_USER,
        agent: Annotated[str | None, agent_opt] = None,
    ) -> None:
        """Show a session's conversation and state."""
        _show(store, user, session, agent)

    @app.command()
    def export(
        session: Annotated[str, typer.Argument(help="Session id.")],
        store: Annotated[str | None, store_opt] = None,
        user: Annotated[str, user_opt] = ANONYMOUS_USER,
        agent: Annotated[str | None, agent_opt] = None,
        output: Annotated[str | None, typer.Option("--output", "-o", help="File to write (default: stdout).")] = None,
    ) -> None:
        """Export a session as JSON (the versioned state format)."""
        _export(store, user, session, agent, output)

    @app.command()
    def delete(
        session: Annotated[str, typer.Argument(help="Session id.")],
        store: Annotated[str | None, store_opt] = None,
        user: Annotated[str, user_opt] = ANONYMOUS_USER,
        agent: Annotated[str | None, agent_opt] = None,
        yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    ) -> None:
        """Delete a session."""
        _delete(store, user, session, agent, yes=yes)

    @app.command()
    def prune(
        older_than: Annotated[
            str,
            typer.Option(
                "--older-than", help="Delete sessions not written for this long: 30d, 12h, 90m, 3600s (also w, 1h30m)."
            ),
        ],
        store: Annotated[str | None, store_opt] = None,
        user: Annotated[
            str | None, typer.Option("--user", "-u", help="Only this user's sessions (default: every user's).")
        ] = None,
        agent: Annotated[
            str | None,
            typer.Option(
                "--agent", "-a", help="Only this agent's sessions ('' for sessions without an agent; default: all)."
            ),
        ] = None,
        dry_run: Annotated[
            bool, typer.Option("--dry-run", help="Only count the sessions that would be deleted.")
        ] = False,
    ) -> None:
        """Delete the sessions idle for longer than --older-than (sessions locked by a running call stay).

        Each session goes whole: its messages, pending approvals and index entries. Exits 2 for a
        malformed duration.
        """
        try:
            seconds = parse_duration(older_than)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--older-than") from None
        _prune(store, seconds, older_than, user, agent, dry_run=dry_run)

    @app.command()
    def migrate(
        agent: Annotated[str, typer.Option("--agent", "-a", help="The agent (its state_key) sessions move to.")],
        store: Annotated[str | None, store_opt] = None,
        user: Annotated[
            str | None, typer.Option("--user", "-u", help="Only this user's sessions (default: every user's).")
        ] = None,
        all_unprefixed: Annotated[
            bool,
            typer.Option(
                "--all-unprefixed", help="Also move sessions whose id holds no ':' (written outside the server)."
            ),
        ] = False,
        prefix: Annotated[
            str | None,
            typer.Option("--prefix", help="The name before ':' in the stored ids, when not AGENT (the served name)."),
        ] = None,
    ) -> None:
        """Move sessions written before sessions had an agent to AGENT.

        Sessions the server stored as '<agent>:<id>' become the agent's session '<id>'; with
        --all-unprefixed, sessions whose id holds no ':' move too, keeping their id. A session whose
        new address is taken stays where it is.
        """
        _migrate(store, agent, user, all_unprefixed=all_unprefixed, prefix=prefix)

    return app


def _load(store: str | None, user: str, session: str, agent: str | None) -> "tuple[str, AgentState]":
    """The session's agent and state; exits with an error when it is ambiguous or missing."""
    import typer
    from rich.console import Console

    try:
        owner, state = _run(store, lambda s: _find(s, user, session, agent))
    except ValueError as exc:
        Console(stderr=True).print(f"[red]{exc}[/]", markup=True, highlight=False)
        raise typer.Exit(1) from None
    if state is None:
        Console(stderr=True).print(f"[red]no {_whose(session, user, agent)}[/]", highlight=False)
        raise typer.Exit(1)
    return owner, state


def _list_sessions(store: str | None, user: str, agent: str | None) -> None:
    """``sessions list``: a table of the user's sessions (of one agent, or of every agent)."""
    from rich.console import Console
    from rich.table import Table

    sessions = _run(store, lambda s: s.list_sessions(user, agent=agent))
    table = Table("agent", "session", "messages", "revision", "updated")
    for info in sessions:
        table.add_row(
            _agent_label(info.agent),
            info.session_id,
            str(info.message_count),
            str(info.revision),
            _when(info.updated_at),
        )
    owner = f" of agent {agent!r}" if agent else ""
    Console().print(table if sessions else f"no sessions{owner} for user {user!r}")


def _show(store: str | None, user: str, session: str, agent: str | None) -> None:
    """``sessions show``: the conversation, then a line summing up the rest of the state."""
    from rich.console import Console
    from rich.markup import escape

    owner, state = _load(store, user, session, agent)
    console = Console()
    render_messages(console, state.messages)
    extras = {k: v for k, v in state.fields_dict().items() if v not in (None, (), [], {}, 0)}
    summary = escape(json.dumps(extras, default=str)[:2000])
    console.print(
        f"[dim]agent {escape(_agent_label(owner))}; revision {state.revision}; {len(state.messages)} messages; "
        f"{summary}[/]",
        markup=True,
    )


def _export(store: str | None, user: str, session: str, agent: str | None, output: str | None) -> None:
    """``sessions export``: the encoded state as JSON, to `output` or stdout."""
    from agentrt.state.codec import encode_state

    _, state = _load(store, user, session, agent)
    text = json.dumps(encode_state(state), ensure_ascii=False, indent=2)
    if output:
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    else:
        sys.stdout.write(text + "\n")


def _delete(store: str | None, user: str, session: str, agent: str | None, *, yes: bool) -> None:
    """``sessions delete``: delete the session once confirmed (unless `yes`); exits 1 when there is none."""
    import typer
    from rich.console import Console

    async def work(s: "AgentStateStore") -> tuple[str, bool] | None:
        owner, state = await _find(s, user, session, agent)
        if state is None:
            return None
        if not yes and not typer.confirm(f"Delete {_whose(session, user, owner)}?"):
            raise typer.Exit(1)
        return owner, await s.delete(user, session, agent=owner)

    try:
        done = _run(store, work)
    except ValueError as exc:
        Console(stderr=True).print(f"[red]{exc}[/]", markup=True, highlight=False)
        raise typer.Exit(1) from None
    if done is None or not done[1]:
        Console().print(f"no {_whose(session, user, agent)}", highlight=False)
        raise typer.Exit(1)
    Console().print(f"deleted {_whose(session, user, done[0])}", highlight=False)


def _prune(
    store: str | None, seconds: float, shown: str, user: str | None, agent: str | None, *, dry_run: bool
) -> None:
    """``sessions prune``: delete (or count) the idle sessions and say how many."""
    import typer
    from rich.console import Console
    from rich.markup import escape

    from agentrt.errors import AgentrtError

    async def work(s: "AgentStateStore") -> int:
        pruner = getattr(s, "prune", None)
        if pruner is None:
            raise typer.BadParameter(f"{type(s).__name__} cannot prune sessions")
        count: int = await pruner(seconds, user_id=user, agent=agent, dry_run=dry_run)
        return count

    try:
        count = _run(store, work)
    except AgentrtError as exc:
        Console(stderr=True).print(f"[red]{type(exc).__name__}: {escape(str(exc))}[/]", highlight=False)
        raise typer.Exit(1) from None
    scope = (f" of user {user!r}" if user is not None else "") + (f" of agent {agent!r}" if agent is not None else "")
    what = f"{count} session{'' if count == 1 else 's'}{scope} idle for more than {shown.strip()}"
    if dry_run:
        Console().print(f"{what} would be deleted (dry run: nothing deleted)", highlight=False)
    else:
        Console().print(f"deleted {what}", highlight=False)


def _migrate(store: str | None, agent: str, user: str | None, *, all_unprefixed: bool, prefix: str | None) -> None:
    """``sessions migrate``: move the legacy sessions to `agent` and say how many moved."""
    import typer
    from rich.console import Console

    if not agent:
        Console(stderr=True).print("[red]--agent must name an agent[/]")
        raise typer.Exit(2)

    async def work(s: "AgentStateStore") -> tuple[int, bool]:
        mover = getattr(s, "migrate_legacy", None)
        if mover is None:
            raise typer.BadParameter(f"{type(s).__name__} cannot migrate sessions")
        moved = await mover(agent, user_id=user, all_unprefixed=all_unprefixed, prefix=prefix)
        return moved, bool(getattr(s, "has_legacy_sessions", False))

    moved, left = _run(store, work)
    plural = "" if moved == 1 else "s"
    tail = "; sessions without an agent are left" if left else ""
    Console().print(f"moved {moved} session{plural} to agent {agent!r}{tail}", highlight=False)
