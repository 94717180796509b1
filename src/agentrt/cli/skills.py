"""``agentrt skills``: list the Agent Skills of folders and show one (front matter and instructions)."""

# No `from __future__ import annotations`: typer reads these signatures at runtime.
import json
from typing import TYPE_CHECKING, Annotated

if TYPE_CHECKING:
    import typer

    from agentrt.tool.skills import Skill

__all__ = ["build_skills_app"]


def build_skills_app() -> "typer.Typer":
    """The ``skills`` command group."""
    import typer

    app = typer.Typer(help="Inspect Agent Skills (folders with a SKILL.md).", no_args_is_help=True)

    @app.command("list")
    def list_(
        paths: Annotated[
            list[str],
            typer.Argument(help="Skill folders or folders of skill folders (a later one wins on a name clash)."),
        ],
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    ) -> None:
        """List the skills of PATHS: name, description and folder. Exits 1 when a SKILL.md is invalid."""
        _list(paths, as_json=as_json)

    @app.command()
    def show(
        path: Annotated[str, typer.Argument(help="A skill folder or a folder of skill folders.")],
        name: Annotated[str | None, typer.Argument(help="The skill (optional when PATH holds one).")] = None,
    ) -> None:
        """Show one skill: its front matter, its files and its instructions (the SKILL.md body)."""
        _show(path, name)

    return app


def _load(paths: list[str]) -> "dict[str, Skill]":
    """The skills of `paths`; exits 1 with the error (file and line) when one is invalid."""
    import typer
    from rich.console import Console
    from rich.markup import escape

    from agentrt.errors import UserError
    from agentrt.tool.skills import load_skills

    try:
        return load_skills(paths)
    except UserError as exc:
        Console(stderr=True).print(
            f"[bold red]error:[/] {type(exc).__name__}: {escape(str(exc))}", highlight=False, soft_wrap=True
        )
        raise typer.Exit(1) from None


def _list(paths: list[str], *, as_json: bool) -> None:
    """``skills list``: a table (or JSON) of the skills found."""
    import typer
    from rich.console import Console
    from rich.table import Table

    skills = _load(paths)
    if as_json:
        rows = [{"name": s.name, "description": s.description, "folder": str(s.folder)} for s in skills.values()]
        typer.echo(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    console = Console()
    if not skills:
        console.print(f"no skills in {', '.join(paths)}", markup=False, highlight=False)
        return
    table = Table("name", "description")
    table.add_column("folder", overflow="fold")
    for skill in sorted(skills.values(), key=lambda s: s.name):
        table.add_row(skill.name, skill.description, str(skill.folder))
    console.print(table, markup=False, highlight=False)


def _show(path: str, name: str | None) -> None:
    """``skills show``: the front matter fields, the files, then the body as written."""
    import typer
    from rich.console import Console

    skills = _load([path])
    if name is None and len(skills) == 1:
        name = next(iter(skills))
    skill = skills.get(name) if name is not None else None
    if skill is None:
        known = ", ".join(sorted(skills)) or "none"
        what = f"no skill named {name!r}" if name is not None else "several skills: name one"
        Console(stderr=True).print(
            f"error: {what} in {path} (skills: {known})", markup=False, highlight=False, soft_wrap=True
        )
        raise typer.Exit(1)
    lines = [f"name: {skill.name}", f"description: {skill.description}"]
    if skill.license:
        lines.append(f"license: {skill.license}")
    if skill.compatibility:
        lines.append(f"compatibility: {skill.compatibility}")
    if skill.allowed_tools:
        lines.append(f"allowed-tools: {' '.join(skill.allowed_tools)}")
    if skill.metadata:
        lines.append("metadata:")
        lines.extend(f"  {key}: {value}" for key, value in skill.metadata.items())
    lines.append(f"folder: {skill.folder}")
    files = skill.files()
    if files:
        lines.append(f"files: {', '.join(files)}")
    typer.echo("\n".join(lines))
    typer.echo("---")
    typer.echo(skill.body.rstrip("\n"))
