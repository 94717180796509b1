"""``agentrt worker``: run durable-run jobs without serving HTTP (docs/deployment.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["LeaseOption", "LogTtlOption", "build_worker_command"]


LeaseOption = Annotated[
    float, typer.Option(min=0.5, help="Seconds a dead worker keeps its job before another takes it over.")
]
"""``--lease``, shared by ``serve`` and ``worker``."""
LogTtlOption = Annotated[
    float,
    typer.Option(
        min=1.0,
        help="Seconds a run's job and event log are kept after their last write (with --jobs).",
        envvar="AGENTRT_JOBS_LOG_TTL",
    ),
]
"""``--log-ttl``, shared by ``serve`` and ``worker``."""


def build_worker_command() -> Callable[..., None]:
    """The ``worker`` command."""

    def worker(
        target: Annotated[str, typer.Argument(help="MODULE:ATTR of the agents, as for `agentrt serve`.")],
        jobs: Annotated[
            str,
            typer.Option(
                help="redis:// or postgresql:// URL of the job backend the servers use.", envvar="AGENTRT_JOBS_URL"
            ),
        ],
        jobs_prefix: Annotated[
            str, typer.Option(help="Key prefix of the job backend (one per deployment).", envvar="AGENTRT_JOBS_PREFIX")
        ] = "agentrt",
        store: Annotated[
            str | None,
            typer.Option(help="State store URL for agents without one (default: AGENTRT_STATE_URL)."),
        ] = None,
        workers: Annotated[int, typer.Option(min=1, help="Worker loops in this process.")] = 1,
        concurrency: Annotated[int, typer.Option(min=1, help="Jobs each worker runs at once.")] = 8,
        lease: LeaseOption = 10.0,
        log_ttl: LogTtlOption = 24 * 3600.0,
        grace: Annotated[
            float, typer.Option(min=0.0, help="Seconds to finish running jobs on SIGTERM before handing them back.")
        ] = 10.0,
    ) -> None:
        """Run agents' jobs from the shared backend until SIGTERM (then drain: finish or hand back)."""
        import asyncio

        from agentrt.cli._output import print_error
        from agentrt.errors import AgentrtError

        try:
            asyncio.run(_work(target, jobs, jobs_prefix, store, workers, concurrency, lease, grace, log_ttl))
        except AgentrtError as exc:
            print_error(exc)
            raise typer.Exit(1) from None

    return worker


async def _work(
    target: str,
    url: str,
    prefix: str,
    store_url: str | None,
    workers: int,
    concurrency: int,
    lease: float,
    grace: float,
    log_ttl: float,
) -> None:
    import asyncio
    import logging
    import signal

    from agentrt.middleware.timeline import enable_run_records
    from agentrt.server._serve import load_agents
    from agentrt.server.app import _normalise_agents
    from agentrt.server.context import encode_event
    from agentrt.server.jobs import DurableRuns
    from agentrt.server.jobs.factory import jobs_from_url
    from agentrt.state import store_from_url
    from agentrt.state.runs import RunRetention

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    agents = _normalise_agents(load_agents(target))
    state_store: Any = store_from_url(store_url) if store_url else None
    if state_store is not None:
        for agent in agents.values():
            if not agent.has_own_store:
                agent.state_store = state_store
    backend = jobs_from_url(url, prefix=prefix, lease_seconds=lease, log_ttl=log_ttl)
    runs = DurableRuns(backend, workers=workers, concurrency=concurrency)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    retention = RunRetention.from_env()  # the same run timelines as a server records (docs/server.md)
    if retention is not None:
        for agent in agents.values():
            enable_run_records(agent, retention)
    runs.start(agents, encode_event)
    logging.getLogger("agentrt.server").info("worker started: %d loop(s) on %s", workers, ", ".join(agents))
    await stop.wait()
    await runs.drain(grace)
    await runs.close()
    if state_store is not None:
        await state_store.close()
