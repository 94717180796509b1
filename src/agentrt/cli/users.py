"""``agentrt users``: delete everything stored about a user (data-protection requests)."""

# No `from __future__ import annotations`: typer reads these signatures at runtime.
import asyncio
from typing import TYPE_CHECKING, Annotated, Any

if TYPE_CHECKING:
    import typer

    from agentrt.retention import ForgetReport

__all__ = ["build_users_app", "memory_from_url"]


def memory_from_url(url: str) -> Any:
    """The long-term memory a URL names: ``sqlite:///path`` (``~`` expanded) or ``postgresql://...``.

    Opened with no TTL and no cap, so opening it changes nothing but what the command does.
    Raises ValueError for another scheme or a URL naming no file.
    """
    from pathlib import Path

    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if sep and scheme == "sqlite":
        path = rest[1:] if rest.startswith("/") else rest  # sqlite:///rel.db, sqlite:////abs.db
        if not path:
            raise ValueError(f"the SQLite URL {url!r} names no file")
        from agentrt.memory.stores.sqlite import SqliteLongTermMemory

        return SqliteLongTermMemory(Path(path).expanduser(), ttl=None, cap=None)
    if sep and scheme in ("postgres", "postgresql", "postgresql+asyncpg"):
        from agentrt.memory.stores.postgres import PostgresLongTermMemory

        return PostgresLongTermMemory(url.replace("postgres://", "postgresql://", 1), ttl=None, cap=None)
    raise ValueError(f"not a long-term memory URL: {url!r} (use sqlite:///path or postgresql://...)")


def build_users_app() -> "typer.Typer":
    """The ``users`` command group."""
    import typer

    app = typer.Typer(help="Delete what is stored about a user (data-protection requests).", no_args_is_help=True)

    @app.command()
    def forget(
        user_id: Annotated[str, typer.Argument(help="The user whose data to delete.")],
        store: Annotated[
            str | None,
            typer.Option(
                "--store", "--db", "-s", help="State store URL (default: AGENTRT_STATE_URL or ~/.agentrt/state.db)."
            ),
        ] = None,
        memory: Annotated[
            str | None,
            typer.Option("--memory", help="Long-term memory URL: sqlite:///path or postgresql://... (default: none)."),
        ] = None,
        knowledge: Annotated[
            str | None,
            typer.Option(
                "--knowledge",
                help="Knowledge store URL (sqlite:///path, postgresql://...): the user's namespace (default: none).",
            ),
        ] = None,
        yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    ) -> None:
        """Delete every session (of every agent), long-term memory and knowledge base of USER_ID.

        Sessions are deleted from the state store (--db, or the default one); memory and knowledge
        only from the stores named with --memory and --knowledge. Running it again deletes
        nothing more. Exits 2 for a user id no user can have, 1 when not confirmed or on an error.
        """
        _forget(user_id, store, memory, knowledge, yes=yes)

    return app


def _forget(user_id: str, store: str | None, memory: str | None, knowledge: str | None, *, yes: bool) -> None:
    """``users forget``: confirm, open the stores, `forget_user`, report the counts."""
    import typer
    from rich.console import Console
    from rich.markup import escape

    from agentrt.errors import AgentrtError
    from agentrt.retention import InvalidUserIdError, check_user_id
    from agentrt.state import default_state_url

    try:
        check_user_id(user_id)
    except InvalidUserIdError as exc:
        raise typer.BadParameter(str(exc), param_hint="USER_ID") from None
    state_url = store or default_state_url()
    places = [f"sessions in {state_url}"]
    if memory:
        places.append(f"long-term memory in {memory}")
    if knowledge:
        places.append(f"knowledge bases in {knowledge}")
    if not yes and not typer.confirm(f"Delete everything of user {user_id!r}: {'; '.join(places)}?"):
        Console(stderr=True).print("nothing deleted", highlight=False)
        raise typer.Exit(1)
    try:
        report = asyncio.run(_forget_in(user_id, state_url, memory, knowledge))
    except ValueError as exc:  # a malformed --memory or --knowledge URL
        raise typer.BadParameter(str(exc)) from None
    except AgentrtError as exc:
        Console(stderr=True).print(f"[red]{escape(type(exc).__name__)}: {escape(str(exc))}[/]", highlight=False)
        raise typer.Exit(1) from None
    parts = [_count(report.sessions, "session")]
    if memory:
        parts.append(_count(report.memories, "memory", "memories"))
    if knowledge:
        parts.append(_count(report.knowledge_documents, "knowledge document"))
    Console().print(f"deleted {', '.join(parts)} of user {user_id!r}", highlight=False)


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


async def _forget_in(user_id: str, state_url: str, memory_url: str | None, knowledge_url: str | None) -> "ForgetReport":
    """`forget_user` over stores opened from the URLs (each closed afterwards)."""
    from contextlib import AsyncExitStack

    from agentrt.knowledge.knowledge import store_from_url as knowledge_from_url
    from agentrt.retention import forget_user
    from agentrt.state import store_from_url

    async with AsyncExitStack() as stack:
        # every URL is checked before anything is deleted
        memory = memory_from_url(memory_url) if memory_url else None
        if memory is not None:
            stack.push_async_callback(memory.close)
        knowledge = knowledge_from_url(knowledge_url) if knowledge_url else None
        if knowledge is not None:
            stack.push_async_callback(knowledge.close)
        state = store_from_url(state_url)
        stack.push_async_callback(state.close)
        return await forget_user(user_id, state=state, memory=memory, knowledge=knowledge)
