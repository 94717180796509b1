"""``agentrt knowledge``: add documents to a knowledge base, search it, list and delete what it holds."""

# No `from __future__ import annotations`: typer reads these signatures at runtime.
import asyncio
import datetime as dt
import json
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

if TYPE_CHECKING:
    import typer
    from rich.console import Console

    from agentrt.knowledge import AddReport, Document, Knowledge, Passage

__all__ = ["ENV_KNOWLEDGE_URL", "build_knowledge_app"]

ENV_KNOWLEDGE_URL = "AGENTRT_KNOWLEDGE_URL"
"""Environment variable with the knowledge store URL the commands use by default."""

T = TypeVar("T")


def _url(db: str | None) -> str:
    from agentrt.knowledge.knowledge import DEFAULT_KNOWLEDGE_URL

    return db or os.environ.get(ENV_KNOWLEDGE_URL) or DEFAULT_KNOWLEDGE_URL


def _fail(message: str) -> "typer.Exit":
    import typer
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(1)


def _run(kb: str, db: str | None, namespace: str, work: "Callable[[Knowledge], Awaitable[T]]") -> T:
    """Run `work` on the knowledge base `kb` of the store at `db` (closed afterwards); errors exit 1."""
    from agentrt.errors import AgentrtError
    from agentrt.knowledge import Knowledge

    async def go() -> T:
        async with Knowledge(kb, store=_url(db), namespace=namespace) as knowledge:
            return await work(knowledge)

    try:
        return asyncio.run(go())
    except AgentrtError as exc:
        raise _fail(f"{type(exc).__name__}: {exc}") from None
    except (OSError, ImportError) as exc:
        raise _fail(f"cannot open the knowledge store {_url(db)!r}: {type(exc).__name__}: {exc}") from None


def build_knowledge_app() -> "typer.Typer":
    """The ``knowledge`` command group."""
    import typer

    app = typer.Typer(help="Manage knowledge bases: add documents, search, list, delete.", no_args_is_help=True)
    db_opt = typer.Option(
        "--db", help=f"Knowledge store URL (default: {ENV_KNOWLEDGE_URL}, else sqlite:///~/.agentrt/knowledge.db)."
    )
    kb_opt = typer.Option("--kb", help="The knowledge base's name (1 to 128 of A-Za-z0-9._@:-).")
    ns_opt = typer.Option("--namespace", "-n", help="The tenant (a served user's id); default 'default'.")

    @app.command()
    def add(
        paths: Annotated[list[str], typer.Argument(help="Files, folders (recursively) or http(s) URLs.")],
        kb: Annotated[str, kb_opt],
        db: Annotated[str | None, db_opt] = None,
        tag: Annotated[list[str] | None, typer.Option("--tag", help="A tag for every document (repeatable).")] = None,
        namespace: Annotated[str, ns_opt] = "default",
    ) -> None:
        """Index documents (Markdown, text, HTML, PDF, DOCX); unchanged ones are skipped. Exits 1 if any failed."""
        metadata = {"tags": list(tag)} if tag else None
        report = _run(kb, db, namespace, lambda k: _add(k, paths, metadata))
        _print_report(report)
        if report.failed:
            raise typer.Exit(1)

    @app.command()
    def search(
        query: Annotated[str, typer.Argument(help="What to look for.")],
        kb: Annotated[str, kb_opt],
        k: Annotated[int, typer.Option("-k", help="Most passages to show (1 to 100).")] = 5,
        db: Annotated[str | None, db_opt] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
        namespace: Annotated[str, ns_opt] = "default",
    ) -> None:
        """Search a knowledge base: the best passages first, with their source and location."""
        passages = _run(kb, db, namespace, lambda knowledge: knowledge.search(query, k))
        if as_json:
            rows = [
                {
                    "chunk_id": p.chunk_id,
                    "source": p.source,
                    "title": p.title,
                    "location": p.location,
                    "score": p.score,
                    "text": p.text,
                }
                for p in passages
            ]
            typer.echo(json.dumps(rows, ensure_ascii=False, indent=2))
            return
        _print_passages(passages)

    @app.command("list")
    def list_(
        kb: Annotated[str | None, typer.Option("--kb", help="List this knowledge base's documents.")] = None,
        db: Annotated[str | None, db_opt] = None,
        namespace: Annotated[str, ns_opt] = "default",
    ) -> None:
        """List the knowledge bases, or with --kb the documents of one."""
        from rich.console import Console

        console = Console()
        if kb is None:
            names = _run("default", db, namespace, lambda knowledge: knowledge.store.kbs(namespace))
            if not names:
                console.print(f"no knowledge bases in {_url(db)}", markup=False, highlight=False)
            for name in names:
                console.print(name, markup=False, highlight=False)
            return
        documents = _run(kb, db, namespace, lambda knowledge: knowledge.documents())
        _print_documents(console, kb, documents)

    @app.command()
    def delete(
        source: Annotated[str | None, typer.Argument(help="The document's source (as listed), or a file path.")] = None,
        kb: Annotated[str, kb_opt] = "",
        db: Annotated[str | None, db_opt] = None,
        drop: Annotated[bool, typer.Option("--drop", help="Delete the whole knowledge base.")] = False,
        namespace: Annotated[str, ns_opt] = "default",
    ) -> None:
        """Delete a document (SOURCE) or, with --drop, a whole knowledge base. Exits 1 when there was nothing."""
        if not kb:
            raise _fail("--kb names the knowledge base")
        if drop == (source is not None):
            raise _fail("give either a SOURCE to delete or --drop for the whole knowledge base")
        if drop:
            count = _run(kb, db, namespace, lambda knowledge: knowledge.drop())
            typer.echo(f"dropped {kb}: {count} document(s)")
            if not count:
                raise typer.Exit(1)
            return
        assert source is not None
        if not _run(kb, db, namespace, lambda knowledge: knowledge.delete(source)):
            raise _fail(f"no document {source!r} in {kb}")
        typer.echo(f"deleted {source}")

    return app


async def _add(knowledge: "Knowledge", paths: list[str], metadata: dict[str, list[str]] | None) -> "AddReport":
    """`Knowledge.add` with a progress bar on a terminal (stderr)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console(stderr=True)
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task("indexing", total=None)

        def progress(done: int, total: int, source: str) -> None:
            bar.update(task, completed=done, total=total, description=f"indexing {os.path.basename(source)[:40]}")

        return await knowledge.add(paths, metadata=metadata, progress=progress)


def _print_report(report: "AddReport") -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table("status", title="knowledge add")
    table.add_column("source", overflow="fold")
    table.add_column("detail", overflow="fold")
    for source in report.added:
        table.add_row("added", source, "")
    for source in report.skipped:
        table.add_row("skipped", source, "unchanged or unsupported type")
    for source, reason in report.failed:
        table.add_row("failed", source, reason, style="red")
    if report.added or report.skipped or report.failed:
        console.print(table, markup=False, highlight=False)
    console.print(
        f"{len(report.added)} added ({report.chunks} chunks), {len(report.skipped)} skipped, "
        f"{len(report.failed)} failed",
        markup=False,
        highlight=False,
    )


def _print_passages(passages: "list[Passage]") -> None:
    from rich.console import Console
    from rich.markup import escape

    console = Console()
    if not passages:
        console.print("no passages match", markup=False, highlight=False)
        return
    for number, passage in enumerate(passages, 1):
        head = passage.title or passage.source
        if passage.location:
            head = f"{head} — {passage.location}"
        console.print(
            f"[bold][{number}] {escape(head)}[/] [dim]({escape(passage.source)}, score {passage.score:.3f}, "
            f"id {escape(passage.chunk_id)})[/]",
            highlight=False,
        )
        console.print(passage.text.strip(), markup=False, highlight=False)
        console.print()


def _print_documents(console: "Console", kb: str, documents: "list[Document]") -> None:
    from rich.table import Table

    if not documents:
        console.print(f"no documents in {kb}", markup=False, highlight=False)
        return
    table = Table(title=kb)
    table.add_column("source", overflow="fold")
    for column in ("title", "chunks", "added"):
        table.add_column(column)
    for doc in documents:
        when = dt.datetime.fromtimestamp(doc.added_at, tz=dt.UTC).strftime("%Y-%m-%d %H:%M") if doc.added_at else "-"
        table.add_row(doc.source, doc.title or "", str(doc.chunk_count), when)
    console.print(table, markup=False, highlight=False)
