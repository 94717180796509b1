"""``agentrt eval``: run a dataset against an agent, report and gate; ``agentrt eval compare A B``."""

# No `from __future__ import annotations`: typer reads these signatures at runtime.
import asyncio
from typing import TYPE_CHECKING, Annotated, Any

if TYPE_CHECKING:
    import typer

    from agentrt.evals import EvalReport

__all__ = ["RAY_LOCAL", "bare_ray", "build_eval_command", "load_agent", "ray_executor", "ray_option"]

RAY_LOCAL = "local"
"""The value of a bare ``--ray`` (no ADDRESS): start a local Ray."""

_USAGE = "agentrt eval DATASET --agent MODULE:ATTR [options] | agentrt eval compare A.json B.json"


def _fail(message: str, code: int) -> "typer.Exit":
    import typer
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


_AGENT_METHODS = ("run_with_events", "stream_events", "call")
_EVAL_ACCEPTS = "pass an agent (e.g. a ReActAgent) or a function taking no arguments that returns one (may be async)"


def load_agent(spec: str) -> Any:
    """The agent ``MODULE:ATTR`` names; a factory (a callable that is not an agent) is called, awaited if async.

    A target that is neither (a tool, a toolkit, a class, a function needing arguments...) is a
    `TargetError` saying what it is, before anything is called.
    """
    from agentrt._target import import_target, is_factory, not_agents
    from agentrt.evals._agent import load_agent as load

    value = import_target(spec, example="myapp.agents:agent")
    agent_like = not isinstance(value, type) and any(hasattr(value, m) for m in _AGENT_METHODS)
    if not agent_like and not is_factory(value):
        raise not_agents(spec, value, accepts=_EVAL_ACCEPTS)
    return load(spec)


def ray_option(what: str) -> Any:
    """``--ray ADDRESS`` (`RAY_LOCAL`: a local Ray); `bare_ray` gives a bare ``--ray`` that value."""
    import typer

    return typer.Option(
        "--ray",
        metavar="[ADDRESS]",
        help=f"Run the {what} as Ray tasks: no ADDRESS (or 'local') starts a local Ray; 'auto', 'ray://head:10001'.",
    )


def bare_ray(args: list[str]) -> list[str]:
    """`args` with a bare ``--ray`` (last, or before another option) given the value `RAY_LOCAL`."""
    out: list[str] = []
    for i, arg in enumerate(args):
        out.append(arg)
        if arg == "--ray" and (i + 1 == len(args) or args[i + 1].startswith("-")):
            out.append(RAY_LOCAL)
    return out


def ray_executor(ray: str | None, concurrency: int) -> Any:
    """The `RayExecutor` of ``--ray [ADDRESS]`` (None without --ray); exit 2 when Ray is not installed."""
    if ray is None:
        return None
    try:
        import ray as _ray  # noqa: F401
    except ImportError:
        raise _fail("--ray needs Ray: pip install 'agentrt[ray]'", 2) from None
    from agentrt.evals import RayExecutor

    return RayExecutor(None if ray == RAY_LOCAL else ray, concurrency_per_worker=concurrency)


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
        evaluator_timeout: Annotated[
            float,
            typer.Option(min=0.0, help="Seconds one evaluator may take before it scores 0 (0: no bound)."),
        ] = 60.0,
        ray: Annotated[
            str | None,
            ray_option("cases"),
        ] = None,
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
        if len(args) != 1:
            raise _fail(f"expected one DATASET, got {len(args)} arguments ({_USAGE})", 2)
        if agent is None:
            raise _fail(f"--agent MODULE:ATTR is required ({_USAGE})", 2)
        bound = evaluator_timeout or None
        report = _evaluate(args[0], agent, repeat, concurrency, out, timeout, progress, ray, bound)
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
    ray: str | None,
    evaluator_timeout: float | None = 60.0,
) -> "EvalReport":
    from agentrt.errors import AgentrtError
    from agentrt.evals import Dataset

    executor = ray_executor(ray, concurrency)
    try:
        dataset = Dataset.from_file(dataset_path)
        # Through Ray the agent goes as its MODULE:ATTR, built on each worker.
        agent = agent_spec if executor is not None else load_agent(agent_spec)
        return asyncio.run(
            dataset.evaluate(
                agent,
                repeat=repeat,
                concurrency=concurrency,
                out=out,
                timeout=timeout,
                evaluator_timeout=evaluator_timeout,
                progress=progress,
                executor=executor,
            )
        )
    except AgentrtError as exc:
        raise _fail(f"{type(exc).__name__}: {exc}", 2) from None
    except (ConnectionError, TimeoutError) as exc:  # OSErrors too, but not of the report's files
        raise _fail(f"cannot reach what the run needs ({type(exc).__name__}): {exc}", 2) from None
    except OSError as exc:
        raise _fail(f"cannot write the report: {exc}", 2) from None
    finally:
        if executor is not None:
            executor.shutdown()


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
