"""The ``agentrt`` command line.

typer and rich are imported when the command runs, never by ``import agentrt``. Commands:

- ``agentrt demo [QUESTION]``: the offline demo (a scripted planner model, the real built-in
  tools and runtime) printing the ReAct trace.
- ``agentrt chat --model ID [--tools builtin] [--session ID]``: an interactive chat (streaming,
  live tool calls, inline approvals, Ctrl-C interrupts a reply).
- ``agentrt work [PATH] --model ID``: the chat on a workspace agent for a folder (files, shell,
  AGENTS.md, @path mentions, skills, plan mode with ``/plan`` or Shift+Tab).
- ``agentrt sessions list|show|export|delete|migrate --store URL --user ID --agent NAME``: inspect
  stored sessions; move sessions written before sessions had an agent to one.
  ``agentrt sessions prune --older-than 30d [--dry-run]``: delete idle sessions.
- ``agentrt users forget USER_ID [--db URL --memory URL --knowledge URL]``: delete everything
  stored about a user (sessions, long-term memory, knowledge bases).
- ``agentrt serve MODULE:ATTR [--host --port --store URL --config FILE --oidc-issuer URL --oidc-audience AUD]``:
  serve agents over HTTP (API keys and/or OIDC bearer tokens; ``--dev``: none, loopback only), printing
  the agents, the store and the URLs once it listens.
- ``agentrt mcp serve MODULE:ATTR`` / ``agentrt mcp tools ...``: expose a toolkit or agent over MCP;
  list an MCP server's tools.
- ``agentrt skills list PATH... [--json]`` / ``agentrt skills show PATH [NAME]``: the Agent Skills
  (SKILL.md folders) of some folders; one skill's front matter and instructions.
- ``agentrt knowledge add|search|list|delete ... --kb NAME [--db URL]``: knowledge bases (documents
  in, passages out), on ``AGENTRT_KNOWLEDGE_URL`` or ``~/.agentrt/knowledge.db`` by default.
- ``agentrt eval DATASET --agent MODULE:ATTR [--repeat --concurrency --out --fail-under]`` /
  ``agentrt eval compare A.json B.json``: evaluate an agent on a dataset; compare two runs.
- ``agentrt batch IN.jsonl --agent MODULE:ATTR --out OUT.jsonl [--ray [ADDRESS]]``: every row against
  an agent; resumable.
"""

# No `from __future__ import annotations` here: typer reads the command signatures at runtime, and
# their annotations refer to names imported lazily inside `build_app`.
import functools
from typing import TYPE_CHECKING, Annotated, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    import typer

__all__ = ["build_app", "main"]

_DEFAULT_QUESTION = "What is 128 * 37 + 500?"


@functools.cache
def build_app() -> "typer.Typer":
    """The typer application (built once, on first use)."""
    import typer

    from agentrt.cli.worker import LeaseOption, LogTtlOption

    app = typer.Typer(
        name="agentrt",
        help="agentrt: an async agent runtime.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_show_locals=False,
    )

    def print_version(value: bool) -> None:
        if value:
            import agentrt

            typer.echo(f"agentrt {agentrt.__version__}")
            raise typer.Exit()

    @app.callback()
    def root(
        version: Annotated[
            bool,
            typer.Option("--version", callback=print_version, is_eager=True, help="Print the version and exit."),
        ] = False,
    ) -> None:
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

        from agentrt.cli._output import print_error
        from agentrt.cli.demo import run_demo
        from agentrt.errors import AgentrtError

        console = Console()
        try:
            asyncio.run(run_demo(question, console))
        except AgentrtError as exc:
            print_error(exc)
            raise typer.Exit(1) from None

    from agentrt.cli.chat import build_chat_command

    @app.command()
    def serve(
        target: Annotated[
            str, typer.Argument(help="MODULE:ATTR of an agent, a dict or list of agents, or a factory of them.")
        ],
        host: Annotated[str, typer.Option(help="Interface to bind.", envvar="AGENTRT_HOST")] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="Port to bind.", envvar="AGENTRT_PORT")] = 8000,
        store: Annotated[
            str | None,
            typer.Option(help="State store URL for agents without one (default: AGENTRT_STATE_URL, else SQLite)."),
        ] = None,
        config: Annotated[
            str | None,
            typer.Option(
                help="TOML or JSON file: api_keys, oidc, store, limits (docs/server.md).", envvar="AGENTRT_CONFIG"
            ),
        ] = None,
        oidc_issuer: Annotated[
            str | None,
            typer.Option(help="Accept bearer JWTs of this OpenID Connect issuer (env AGENTRT_OIDC_ISSUER)."),
        ] = None,
        oidc_audience: Annotated[
            str | None,
            typer.Option(help="The audience (aud) those tokens must name (env AGENTRT_OIDC_AUDIENCE)."),
        ] = None,
        oidc_user_claim: Annotated[
            str | None,
            typer.Option(help="The token claim holding the user id (default sub; env AGENTRT_OIDC_USER_CLAIM)."),
        ] = None,
        oidc_jwks_url: Annotated[
            str | None,
            typer.Option(help="The issuer's JWKS URL (default: from its discovery document; AGENTRT_OIDC_JWKS_URL)."),
        ] = None,
        knowledge: Annotated[
            str | None,
            typer.Option(help="Knowledge store URL: serve /v1/knowledge, each user's own bases (docs/knowledge.md)."),
        ] = None,
        jobs: Annotated[
            str | None,
            typer.Option(
                help="redis:// or postgresql:// URL: durable runs, jobs any replica's worker runs and takes over"
                " (docs/deployment.md).",
                envvar="AGENTRT_JOBS_URL",
            ),
        ] = None,
        jobs_prefix: Annotated[
            str, typer.Option(help="Key prefix of the job backend (one per deployment).", envvar="AGENTRT_JOBS_PREFIX")
        ] = "agentrt",
        workers: Annotated[int, typer.Option(min=0, help="Job workers in this process (with --jobs).")] = 1,
        concurrency: Annotated[int, typer.Option(min=1, help="Jobs each worker runs at once (with --jobs).")] = 8,
        lease: LeaseOption = 10.0,
        log_ttl: LogTtlOption = 24 * 3600.0,
        max_runs_per_user: Annotated[
            int,
            typer.Option(
                min=0,
                help="Runs one user may have waiting or running across the cluster; one more gets HTTP 429"
                " (with --jobs; 0: no limit).",
                envvar="AGENTRT_MAX_RUNS_PER_USER",
            ),
        ] = 0,
        log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
        dev: Annotated[
            bool,
            typer.Option(
                "--dev",
                help="Local development: no API keys (every request is one local user), loopback --host only,"
                " a warning banner. Never in production.",
            ),
        ] = False,
    ) -> None:
        """Serve agents over HTTP (REST + SSE, OpenAI-compatible chat completions, web UI)."""
        from agentrt.cli._output import print_error
        from agentrt.errors import AgentrtError

        try:
            from agentrt.server import create_app
            from agentrt.server._serve import check_dev_host, load_agents, load_config, run_server
            from agentrt.state import store_from_url
        except ImportError as exc:
            print_error(f"the server needs: pip install 'agentrt[server]' ({exc.name} is missing)")
            raise typer.Exit(1) from None
        try:
            if dev:
                check_dev_host(host)  # before anything is loaded or bound
            settings = load_config(config).with_oidc(
                issuer=oidc_issuer, audience=oidc_audience, user_claim=oidc_user_claim, jwks_url=oidc_jwks_url
            )
            auth_options = settings.app_options(dev=dev)
            agents = load_agents(target)
            url = store or settings.store
            state_store = store_from_url(url) if url else None
            knowledge_url = knowledge or settings.knowledge
            kb = None
            if knowledge_url:
                from agentrt.knowledge import Knowledge

                kb = Knowledge(store=knowledge_url)
            durable = None
            if jobs:
                from agentrt.server.jobs import DurableRuns
                from agentrt.server.jobs.factory import jobs_from_url

                backend = jobs_from_url(jobs, prefix=jobs_prefix, lease_seconds=lease, log_ttl=log_ttl)
                durable = DurableRuns(
                    backend, workers=workers, concurrency=concurrency, max_runs_per_user=max_runs_per_user
                )
            application = create_app(agents, state_store, knowledge=kb, jobs=durable, **auth_options)
        except AgentrtError as exc:
            print_error(exc)
            raise typer.Exit(1) from None
        closing = tuple(item for item in (state_store, kb, durable) if item is not None)
        started = _serve_started(application, store_url=url, knowledge_url=knowledge_url, jobs_url=jobs, dev=dev)
        run_server(application, host=host, port=port, log_level=log_level, close=closing, started=started)

    from agentrt.cli.sessions import build_sessions_app

    app.command("chat")(build_chat_command())
    from agentrt.cli.work import build_work_command

    app.command("work")(build_work_command())
    app.add_typer(build_sessions_app(), name="sessions")
    from agentrt.cli.users import build_users_app

    app.add_typer(build_users_app(), name="users")
    from agentrt.cli.mcp import build_mcp_app

    app.add_typer(build_mcp_app(), name="mcp")
    from agentrt.cli.skills import build_skills_app

    app.add_typer(build_skills_app(), name="skills")
    from agentrt.cli.knowledge import build_knowledge_app

    app.add_typer(build_knowledge_app(), name="knowledge")
    from agentrt.cli.eval import build_eval_command

    app.command("eval")(build_eval_command())
    from agentrt.cli.batch import build_batch_command

    app.command("batch")(build_batch_command())
    from agentrt.cli.worker import build_worker_command

    app.command("worker")(build_worker_command())
    return app


def _serve_started(
    application: Any, *, store_url: str | None, knowledge_url: str | None, jobs_url: str | None, dev: bool
) -> "Callable[[str, int], None]":
    """What ``agentrt serve`` prints (on standard error) once it listens: the banner of --dev, agents, stores, URLs."""
    import sys

    from agentrt.server._serve import describe_auth, dev_banner, startup_summary

    server = application.state.agentrt
    described = describe_auth(server.auth)

    def started(host: str, port: int) -> None:
        lines = startup_summary(
            server.agents,
            host=host,
            port=port,
            store_url=store_url,
            store=server.store,
            auth=described,
            knowledge_url=knowledge_url,
            jobs_url=jobs_url,
        )
        if dev:
            lines.insert(0, dev_banner(host, port))
        print("\n".join(lines), file=sys.stderr, flush=True)

    return started


def __getattr__(name: str) -> Any:
    if name == "app":
        return build_app()
    raise AttributeError(f"module 'agentrt.cli' has no attribute {name!r}")


def main() -> None:
    """Entry point of the ``agentrt`` command."""
    import sys

    from agentrt.cli.eval import bare_ray

    build_app()(args=bare_ray(sys.argv[1:]))
