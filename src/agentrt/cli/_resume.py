"""The command line that reproduces an invocation: ``agentrt chat``'s and ``agentrt work``'s exit hint.

The hint is rebuilt from the parsed parameters of the command that is running (its typer context),
so every option that shaped the session (model, tools, permission mode and rules, store, user,
system prompt, model options...) is in it, quoted for a POSIX shell with `shlex`; only the
values equal to their defaults are left out. Parsing the hint again gives the same parameters.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import typer

__all__ = ["command_argv", "command_line", "resume_from_context"]


# The parameters are typer's (its own copy of click): read through the attributes click documents
# (``param_type_name``, ``opts``, ``secondary_opts``, ``is_flag``, ``multiple``, ``nargs``, ``default``).
def _long(param: Any) -> str:
    opts: list[str] = list(param.opts)
    return next((opt for opt in opts if opt.startswith("--")), opts[0])


def _pair(option: str, value: Any) -> list[str]:
    text = str(value)
    # A value that looks like an option is glued to its long option, so no parser takes it for one.
    return [f"{option}={text}"] if text.startswith("-") and option.startswith("--") else [option, text]


def _option(param: Any, value: Any) -> list[str]:
    if param.is_flag:
        if value == param.default or value is None:
            return []
        if param.secondary_opts:  # --x/--no-x
            return [_long(param) if value else param.secondary_opts[0]]
        return [_long(param)] if value else []
    if param.multiple:
        return [token for item in value or () for token in _pair(_long(param), item)]
    if value is None or value == param.default:
        return []
    return _pair(_long(param), value)


def command_argv(
    program: Sequence[str],
    command: Any,
    params: Mapping[str, Any],
    *,
    drop: Collection[str] = (),
) -> list[str]:
    """`program` followed by the arguments that make `command` parse to `params` (defaults left out).

    Positional arguments come first (after ``--`` at the end when one starts with ``-``), then the
    options in the command's order; `drop` names parameters to leave out.
    """
    arguments: list[str] = []
    options: list[str] = []
    for param in command.params:
        name = param.name
        if name is None or name in drop or name not in params:
            continue
        value = params[name]
        if param.param_type_name == "argument":
            if value is None:
                continue
            values = value if param.multiple or param.nargs != 1 else [value]
            arguments += [str(v) for v in values]
        elif param.param_type_name == "option":
            options += _option(param, value)
    if any(arg.startswith("-") for arg in arguments):
        return [*program, *options, "--", *arguments]
    return [*program, *arguments, *options]


def command_line(argv: Sequence[str]) -> str:
    """`argv` as one line to paste into a POSIX shell (each argument quoted as needed)."""
    return shlex.join(argv)


def resume_from_context(
    ctx: typer.Context,
    program: Sequence[str],
    *,
    overrides: Mapping[str, Any] | None = None,
    drop: Collection[str] = (),
) -> Callable[[str], list[str]]:
    """For the running command (`ctx`): a function from a session id to the argv that continues it.

    `overrides` replaces parsed values (e.g. the folder made absolute); the session id goes to the
    ``session`` parameter; `drop` names parameters to leave out (``--continue``).
    """
    command, params = ctx.command, {**ctx.params, **(overrides or {})}

    def argv(session_id: str) -> list[str]:
        return command_argv(program, command, {**params, "session": session_id}, drop=drop)

    return argv
