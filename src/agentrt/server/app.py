"""The agentrt HTTP server app: `create_app` assembles the routes, the facades and the error handlers.

The parts live beside it: the request context routes and facades share (`ServerContext`,
``server/context.py``), auth (``server/_auth.py``), the native routes (``server/routes.py``) and
the error mapping (``server/_errors.py``).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute

from agentrt.agent.base import AgentBase
from agentrt.errors import UserError
from agentrt.server._auth import (
    ApiKeyAuth,
    Authenticator,
    CombinedAuth,
    DevAuth,
    OpenAccessHeader,
    RateLimit,
    RateLimiter,
    is_configured,
)
from agentrt.server._errors import exception_handlers
from agentrt.server._fast import AgentrtApp
from agentrt.server._limits import DEFAULT_MAX_BODY_BYTES, id_problem
from agentrt.server._runs import RunRegistry
from agentrt.server._serve import graceful_server
from agentrt.server._sse import DEFAULT_HEARTBEAT
from agentrt.server.context import ServerContext, pending_calls, validation_error
from agentrt.server.jobs import DurableRuns
from agentrt.server.routes import service_routes, session_routes
from agentrt.state.base import AgentStateStore
from agentrt.state.runs import RunRetention

if TYPE_CHECKING:
    from agentrt.knowledge import Knowledge

__all__ = ["DEFAULT_FACADES", "ServerContext", "create_app", "graceful_server", "pending_calls", "validation_error"]

logger = logging.getLogger("agentrt.server")

DEFAULT_FACADES = ("openai", "agui", "a2a")
_FACADE_MODULES = {
    "openai": "agentrt.server.openai_compat",
    "agui": "agentrt.server.agui",
    "a2a": "agentrt.server.a2a",
}


def _normalise_agents(agents: Mapping[str, AgentBase] | AgentBase | Sequence[AgentBase]) -> dict[str, AgentBase]:
    if isinstance(agents, AgentBase):
        named: dict[str, AgentBase] = {agents.name: agents}
    elif isinstance(agents, Mapping):
        named = dict(agents)
    elif isinstance(agents, Sequence) and not isinstance(agents, (str, bytes)):
        named = {}
        for agent in agents:
            if not isinstance(agent, AgentBase):
                raise UserError(f"agents must be agents, not {type(agent).__name__!r}")
            if agent.name in named:
                raise UserError(f"two agents are named {agent.name!r}; pass a dict to serve them under other names")
            named[agent.name] = agent
    else:
        raise UserError(f"agents must be a dict of name -> agent, an agent or a list of agents, not {agents!r}")
    if not named:
        raise UserError("create_app needs at least one agent")
    for name, agent in named.items():
        if not isinstance(agent, AgentBase):
            raise UserError(f"agents[{name!r}] is a {type(agent).__name__}, not an agent")
        if not isinstance(name, str) or id_problem("agent name", name) or ":" in name or "/" in name:
            raise UserError(f"agent name {name!r} cannot be served: use 1-200 characters without ':', '/' or controls")
    return named


def create_app(
    agents: Mapping[str, AgentBase] | AgentBase | Sequence[AgentBase],
    store: AgentStateStore | None = None,
    api_keys: Mapping[str, str | Mapping[str, Any]] | ApiKeyAuth | None = None,
    *,
    auth: Authenticator | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    rate_limit: RateLimit | None = None,
    heartbeat: float = DEFAULT_HEARTBEAT,
    disconnect_grace: float = 2.0,
    event_buffer: int = 1024,
    shutdown_timeout: float = 10.0,
    facades: Sequence[str] = DEFAULT_FACADES,
    static_dir: str | Path | None = None,
    debug: bool = False,
    knowledge: Knowledge | None = None,
    max_upload_bytes: int = 20 * 1024 * 1024,
    jobs: DurableRuns | None = None,
    run_records: RunRetention | bool = True,
) -> Starlette:
    """The ASGI app serving `agents` over HTTP (see docs/server.md).

    Args:
        agents: ``{"name": agent}`` (or one agent, or a list, served under their own names).
        store: The state store of every agent that has none of its own.
        api_keys: ``{"key": "user_id"}`` (or ``{"key": {"user": "user_id", "scopes": [...]}}``) or an
            `ApiKeyAuth`; default, unless `auth` is given: ``AGENTRT_API_KEYS`` (``key1=user1,key2=user2``).
        auth: How callers authenticate: an `ApiKeyAuth`, an `OidcAuth` (bearer JWTs of an OpenID
            Connect provider), a `CombinedAuth` of both, or any `Authenticator`. With `api_keys`
            too, both are accepted (keys first). Keys or a token issuer are required.
        max_body_bytes: Larger request bodies get 413 (default 1 MiB).
        rate_limit: Token bucket per API key (429 with Retry-After); None: unlimited.
        heartbeat: Seconds between ``: ping`` comments on a quiet SSE stream.
        disconnect_grace: Seconds a streamed run survives without any client before it is
            cancelled (and checkpointed); a reconnect with ``Last-Event-ID`` within it resumes.
        event_buffer: Events kept per streamed run for reconnects.
        shutdown_timeout: Seconds to wait for interrupted runs to checkpoint at shutdown.
        facades: Protocol facades to mount when available (``openai``, ``agui``, ``a2a``, or a
            module path exposing ``routes(server)``); one whose module or SDK is missing is skipped.
        static_dir: The web UI's folder (default: the packaged one, served at ``/`` if present).
        debug: Starlette debug mode (tracebacks in 500 responses; never in production).
        knowledge: Serve ``/v1/knowledge`` over it: each user manages and searches the knowledge
            bases of their own namespace (the user id) on its store (docs/knowledge.md).
        max_upload_bytes: Largest document a knowledge route accepts (413 above; default 20 MiB).
        jobs: Durable runs (`agentrt.server.jobs.DurableRuns`): a message to the native routes
            becomes a job in the shared backend, run by a worker of any replica (this process's
            workers start with the app), taken over when its worker dies, its events readable
            from any replica with ``Last-Event-ID``. None: runs execute in this process.
        run_records: Record each reply's timeline with the session (docs/server.md, "Run timelines"):
            True (default) with the bounds of `RunRetention.from_env` (``AGENTRT_RUN_RECORDS=off``
            turns it off), a `RunRetention` for other bounds, False for none.
    """
    named = _normalise_agents(agents)
    auth = _authenticator(api_keys, auth)
    if not isinstance(max_body_bytes, int) or max_body_bytes < 1:
        raise UserError(f"max_body_bytes must be a positive integer, not {max_body_bytes!r}")
    if store is not None:
        for agent in named.values():
            if not agent.has_own_store:
                agent.state_store = store
    server = ServerContext(
        agents=named,
        store=store,
        auth=auth,
        max_body_bytes=max_body_bytes,
        rate_limiter=RateLimiter(rate_limit) if rate_limit is not None else None,
        heartbeat=heartbeat,
        shutdown_timeout=shutdown_timeout,
        runs=RunRegistry(buffer_size=event_buffer, disconnect_grace=disconnect_grace),
        jobs=jobs,
        run_records=_run_retention(run_records),
    )
    native = session_routes(server)
    routes = list(native)
    extra_paths: dict[str, Any] = {}
    for facade in facades:
        routes.extend(_load_facade(facade, server, extra_paths))
    if knowledge is not None:
        from agentrt.server.knowledge_routes import knowledge_openapi_paths, knowledge_routes

        routes += knowledge_routes(server, knowledge, max_upload_bytes=max_upload_bytes)
        extra_paths.update(knowledge_openapi_paths())
    routes += service_routes(server, extra_paths, static_dir)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        server.runs.accepting = True  # an app can be started again after a shutdown (tests do)
        await server.migrate_legacy_sessions()
        if jobs is not None:
            jobs.start(named, server.event_bytes)
        yield
        await server.shutdown()

    middleware = None
    if isinstance(auth, DevAuth):  # no credentials needed: tell the web UI not to ask for a key
        user = auth.principal.user_id
        logger.warning("no authentication: every request is the user %r (local development only)", user)
        middleware = [Middleware(OpenAccessHeader)]
    app = AgentrtApp(
        debug=debug, routes=routes, lifespan=lifespan, exception_handlers=exception_handlers(), middleware=middleware
    )
    app.enable_direct_routes(native)
    app.state.agentrt = server
    return app


def _run_retention(setting: RunRetention | bool) -> RunRetention | None:
    if setting is True:
        return RunRetention.from_env()
    if setting is False:
        return None
    if not isinstance(setting, RunRetention):
        raise UserError(f"run_records must be True, False or a RunRetention, not {setting!r}")
    return setting


def _authenticator(
    api_keys: Mapping[str, str | Mapping[str, Any]] | ApiKeyAuth | None, auth: Authenticator | None
) -> Authenticator:
    """The app's authenticator from `create_app`'s `api_keys` and `auth` (`UserError` when it accepts no one)."""
    keys: ApiKeyAuth | None = None
    if isinstance(api_keys, ApiKeyAuth):
        keys = api_keys
    elif api_keys is not None:
        keys = ApiKeyAuth(api_keys)
    elif auth is None:
        keys = ApiKeyAuth.from_env()
    if auth is not None and not isinstance(auth, Authenticator):
        raise UserError(f"auth must be an ApiKeyAuth, an OidcAuth or another Authenticator, not {auth!r}")
    chosen: Authenticator
    if auth is None:
        assert keys is not None
        chosen = keys
    elif keys is None:
        chosen = auth
    else:
        chosen = CombinedAuth([keys, auth])
    if not is_configured(chosen):
        raise UserError(
            "no API keys or token issuer configured: pass api_keys={'key': 'user_id'} or auth=OidcAuth(issuer, "
            "audience), set AGENTRT_API_KEYS='key1=user1,...' or AGENTRT_OIDC_ISSUER and AGENTRT_OIDC_AUDIENCE, "
            "or use `agentrt serve --config FILE`"
        )
    return chosen


def _load_facade(facade: str, server: ServerContext, extra_paths: dict[str, Any]) -> list[BaseRoute]:
    module_name = _FACADE_MODULES.get(facade, facade)
    try:
        module = importlib.import_module(module_name)
        routes: list[BaseRoute] = list(module.routes(server))
        paths = getattr(module, "openapi_paths", None)
        if callable(paths):
            extra_paths.update(paths(server))
    except ImportError as exc:
        logger.info("facade %r is not available (%s: %s); skipped", facade, type(exc).__name__, exc)
        return []
    return routes
