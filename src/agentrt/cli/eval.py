"""``agentrt eval``: run a dataset against an agent, report and gate; ``agentrt eval compare A B``."""

# No `from __future__ import annotations`: typer reads these signatures at runtime.
import asyncio
import inspect
from typing import TYPE_CHECKING, Annotated, Any

if TYPE_CHECKING:
    import typer

    from agentrt.evals import EvalReport

__all__ = ["build_eval_command", "load_agent"]

_USAGE = "agentrt eval DATASET --agent MODULE:ATTR [options] | agentrt eval compare A.json B.json"


def _fail(message: str, code: int) -> "typer.Exit":
    import typer
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def load_agent(spec: str) -> Any:
    """The agent ``MODULE:ATTR`` names; a factory (a callable that is not an agent) is called, awaited if async."""
    from agentrt._target import import_target
    from agentrt.errors import UserError

    target = import_target(spec, example="myapp.agents:agent")
    if not hasattr(target, "call") and callable(target) and _takes_no_arguments(target):
        target = target()
        if inspect.isawaitable(target):
            target = asyncio.run(_await(target))
    if not any(hasattr(target, m) for m in ("run_with_events", "stream_events", "call")):
        raise UserError(f"{spec!r} is {type(target).__name__}, not an agent (or a factory of one)")
    return target


def _takes_no_arguments(fn: Any) -> bool:
    try:
        inspect.signature(fn).bind()
    except (TypeError, ValueError):
        return False
    return True


async def _await(value: Any) -> Any:
    return await value


def build_eval_command() -> Any:
    """The ``eval`` command."""
    import typer

    def eval_command(
        args: Annotated[
            list[str],
            typer.Argument(help="DATASET (.yaml, .jsonl, .csv), or: compare A.json B.json", metavar="DATASET"),
        ],
        agent: Annotated[
            str | None, typer.Option("--agent", help="MODULE:ATTR of the agent (or of a function returning it).")
        ] = None,
        repeat: Annotated[int, typer.Option(min=1, help="Runs per case (pass@k over them).")] = 1,
        concurrency: Annotated[int, typer.Option(min=1, help="Runs in flight at once.")] = 8,
        out: Annotated[str | None, typer.Option(help="Directory for results.json and report.html.")] = None,
        fail_under: Annotated[
            float | None, typer.Option(min=0.0, max=1.0, help="Exit 1 when the pass rate is below this (0..1).")
        ] = None,
        timeout: Annotated[float | None, typer.Option(help="Seconds before one run is stopped (an error).")] = None,
        ray: Annotated[bool, typer.Option("--ray", help="Run on a Ray cluster [ADDRESS] (not available yet).")] = False,
        fail_on_regression: Annotated[
            bool, typer.Option("--fail-on-regression", help="compare: exit 1 when any case or score regressed.")
        ] = False,
        progress: Annotated[
            bool | None, typer.Option("--progress/--no-progress", help="Progress bar (default: when a terminal).")
        ] = None,
    ) -> None:
        """Evaluate an agent on a dataset (exit 1 under --fail-under), or compare two results.json files."""
        if args and args[0] == "compare":
            _compare(args[1:], fail_on_regression)
            return
        if ray:
            raise _fail(
                "--ray is not available yet: evaluations run locally (drop --ray; see docs/evals.md, 'Not there yet')",
                2,
            )
        if len(args) != 1:
            raise _fail(f"expected one DATASET, got {len(args)} arguments ({_USAGE})", 2)
        if agent is None:
            raise _fail(f"--agent MODULE:ATTR is required ({_USAGE})", 2)
        report = _evaluate(args[0], agent, repeat, concurrency, out, timeout, progress)
        from rich.console import Console

        console = Console()
        report.print_summary(console)
        if out is not None:
            console.print(f"wrote {out}/results.json and {out}/report.html", highlight=False, markup=False)
        if fail_under is not None and report.pass_rate < fail_under:
            raise _fail(f"pass rate {report.pass_rate:.1%} is under --fail-under {fail_under:.1%}", 1)

    return eval_command


def _evaluate(
    dataset_path: str,
    agent_spec: str,
    repeat: int,
    concurrency: int,
    out: str | None,
    timeout: float | None,
    progress: bool | None,
) -> "EvalReport":
    from agentrt.errors import AgentrtError
    from agentrt.evals import Dataset

    try:
        dataset = Dataset.from_file(dataset_path)
        agent = load_agent(agent_spec)
        return asyncio.run(
            dataset.evaluate(agent, repeat=repeat, concurrency=concurrency, out=out, timeout=timeout, progress=progress)
        )
    except AgentrtError as exc:
        raise _fail(f"{type(exc).__name__}: {exc}", 2) from None
    except OSError as exc:
        raise _fail(f"cannot write the report: {exc}", 2) from None


def _compare(paths: list[str], fail_on_regression: bool) -> None:
    from rich.console import Console

    from agentrt.errors import AgentrtError
    from agentrt.evals import EvalReport, compare

    if len(paths) != 2:
        raise _fail(f"compare takes two results.json files, got {len(paths)}", 2)
    try:
        before, after = EvalReport.load(paths[0]), EvalReport.load(paths[1])
    except AgentrtError as exc:
        raise _fail(str(exc), 2) from None
    comparison = compare(before, after)
    console = Console()
    if comparison.regressions or comparison.improvements:
        console.print(comparison.table())
    console.print(comparison.summary_line(), highlight=False, markup=False)
    if fail_on_regression and comparison.has_regressions:
        raise _fail(f"{len(comparison.regressions)} regression(s)", 1)
