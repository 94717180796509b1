"""Console output shared by the commands: error lines, printed as they are (no markup, no emoji codes)."""

from __future__ import annotations

__all__ = ["print_error"]


def print_error(message: str | BaseException) -> None:
    """``error: <message>`` on standard error; an exception shows as ``Type: message``.

    The text is escaped (a ``[/]`` or ``:x:`` in a message stays as it is) and never wrapped, so a
    long message stays one line to copy or grep.
    """
    from rich.console import Console
    from rich.markup import escape

    text = f"{type(message).__name__}: {message}" if isinstance(message, BaseException) else message
    Console(stderr=True, emoji=False).print(f"[bold red]error:[/] {escape(text)}", highlight=False, soft_wrap=True)
