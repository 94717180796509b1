"""``agentrt batch IN.jsonl --agent MODULE:ATTR --out OUT.jsonl``: every row against an agent, resumable."""

# No `from __future__ import annotations`: typer reads these signatures at runtime.
import asyncio
from typing import Annotated, Any

from agentrt.cli.eval import _fail, ray_executor, ray_option

__all__ = ["build_batch_command"]


def build_batch_command() -> Any:
    """The ``batch`` command."""
    import typer

    def batch_command(
        input: Annotated[str, typer.Argument(help="JSONL input: one JSON object per line.", metavar="INPUT.jsonl")],
        agent: Annotated[
            str, typer.Option("--agent", help="MODULE:ATTR of the agent (or of a function returning it).")
        ],
        out: Annotated[str, typer.Option("--out", help="JSONL output (rows in input order); a re-run resumes it.")],
        concurrency: Annotated[int, typer.Option(min=1, help="Rows in flight at once.")] = 8,
        id_field: Annotated[
            str, typer.Option("--id-field", help="The field of a row's id (default: its line).")
        ] = "id",
        input_field: Annotated[str, typer.Option("--input-field", help="The field of a row's input.")] = "input",
        max_requests: Annotated[int | None, typer.Option(min=0, help="Usage limit per row: model calls.")] = None,
        max_total_tokens: Annotated[int | None, typer.Option(min=0, help="Usage limit per row: tokens.")] = None,
        max_cost_usd: Annotated[float | None, typer.Option(min=0.0, help="Usage limit per row: US dollars.")] = None,
        timeout: Annotated[float | None, typer.Option(help="Seconds before one row is stopped (its error).")] = None,
        retry_errors: Annotated[
            bool, typer.Option("--retry-errors/--keep-errors", help="A re-run retries rows that failed before.")
        ] = True,
        ray: Annotated[
            str | None,
            ray_option("rows"),
        ] = None,
        progress: Annotated[
            bool | None, typer.Option("--progress/--no-progress", help="Progress bar (default: when a terminal).")
        ] = None,
    ) -> None:
        """Run every row of INPUT.jsonl against an agent, each in its own session; rows in order to --out."""
        from rich.console import Console

        from agentrt import UsageLimits
        from agentrt.errors import AgentrtError
        from agentrt.evals import run_batch

        limits = None
        if (max_requests, max_total_tokens, max_cost_usd) != (None, None, None):
            limits = UsageLimits(requests=max_requests, total_tokens=max_total_tokens, cost_usd=max_cost_usd)
        executor = ray_executor(ray, concurrency)
        try:
            report = asyncio.run(
                run_batch(
                    agent if executor is not None else _load(agent),
                    input,
                    out=out,
                    concurrency=concurrency,
                    usage_limits=limits,
                    timeout=timeout,
                    id_field=id_field,
                    input_field=input_field,
                    retry_errors=retry_errors,
                    progress=progress,
                    executor=executor,
                )
            )
        except AgentrtError as exc:
            raise _fail(f"{type(exc).__name__}: {exc}", 2) from None
        except (ConnectionError, TimeoutError) as exc:  # OSErrors too, but not of the output file
            raise _fail(f"cannot reach what the run needs ({type(exc).__name__}): {exc}", 2) from None
        except OSError as exc:
            raise _fail(f"cannot write the output: {exc}", 2) from None
        finally:
            if executor is not None:
                executor.shutdown()
        ran = len(report.rows) - report.resumed
        Console().print(
            f"{len(report.rows)} rows ({ran} run now, {report.resumed} resumed), {report.errors} with errors: {out}",
            highlight=False,
            markup=False,
        )

    return batch_command


def _load(spec: str) -> Any:
    from agentrt.cli.eval import load_agent

    return load_agent(spec)
