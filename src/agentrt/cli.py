"""The ``agentrt`` command line.

typer and rich are imported when the command runs, never by ``import agentrt``. Commands:

- ``agentrt demo [QUESTION]``: the offline demo (a scripted planner model, the real built-in
  tools and runtime) printing the ReAct trace.
- ``agentrt sessions list|show|export|delete --store URL --user ID``: inspect stored sessions.
"""

# No `from __future__ import annotations` here: typer reads the command signatures at runtime, and
# their annotations refer to names imported lazily inside `build_app`.
import functools
from typing import TYPE_CHECKING, Annotated, Any

if TYPE_CHECKING:
    import typer

__all__ = ["build_app", "main"]

_DEFAULT_QUESTION = "What is 128 * 37 + 500?"


@functools.cache
def build_app() -> "typer.Typer":
    """The typer application (built once, on first use)."""
    import typer

    app = typer.Typer(
        name="agentrt",
        help="agentrt: an async agent runtime.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_show_locals=False,
    )

    @app.callback()
    def root() -> None:
        """agentrt: an async agent runtime (reason-act loop, tools, durable state, streaming)."""

    @app.command()
    def demo(
        question: Annotated[
            str, typer.Argument(help="The question to ask: arithmetic, the time somewhere, or a unit conversion.")
        ] = _DEFAULT_QUESTION,
    ) -> None:
        """Run the offline demo: a scripted planner model with real tools, printing the ReAct trace."""
        import asyncio

        from rich.console import Console

        from agentrt._demo import run_demo
        from agentrt.errors import AgentrtError

        console = Console()
        try:
            asyncio.run(run_demo(question, console))
        except AgentrtError as exc:
            Console(stderr=True).print(f"[bold red]error:[/] {type(exc).__name__}: {exc}", highlight=False, markup=True)
            raise typer.Exit(1) from None

    from agentrt._cli_sessions import build_sessions_app

    app.add_typer(build_sessions_app(), name="sessions")
    return app


def __getattr__(name: str) -> Any:
    if name == "app":
        return build_app()
    raise AttributeError(f"module 'agentrt.cli' has no attribute {name!r}")


def main() -> None:
    """Entry point of the ``agentrt`` command."""
    build_app()()


if __name__ == "__main__":
    main()
