"""``agentrt serve``: load agents from ``MODULE:ATTR``, read the config, run the app with uvicorn.

Shutdown is graceful in the order a load balancer needs: on SIGTERM the app first refuses new runs
(503, and ``/readyz`` turns 503) and interrupts the running ones, which checkpoint and end their
streams with ``run_finished``; only then does uvicorn close the listening socket and the
connections.
"""

from __future__ import annotations

import gc
import inspect
import json
import os
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrt._target import TargetError, import_target, is_factory, not_agents
from agentrt.agent.base import AgentBase
from agentrt.errors import UserError
from agentrt.server._auth import (
    DEV_USER,
    ENV_API_KEYS,
    ApiKeyAuth,
    DevAuth,
    RateLimit,
    is_loopback,
    parse_api_keys_env,
    parse_scopes,
)
from agentrt.server._errors import redact_secrets
from agentrt.server._limits import DEFAULT_MAX_BODY_BYTES

__all__ = [
    "DevModeError",
    "ServeConfig",
    "check_dev_host",
    "describe_auth",
    "dev_banner",
    "graceful_server",
    "load_agents",
    "load_config",
    "run_server",
    "startup_summary",
]

_CONFIG_KEYS = {
    "api_keys",
    "oidc",
    "store",
    "max_body_bytes",
    "rate_limit",
    "shutdown_timeout",
    "disconnect_grace",
    "heartbeat",
    "event_buffer",
    "facades",
    "knowledge",
    "max_upload_bytes",
}


_OIDC_KEYS = {
    "issuer",
    "audience",
    "jwks_url",
    "user_claim",
    "scopes_claim",
    "scope_prefix",
    "default_scopes",
    "algorithms",
    "leeway",
    "jwks_ttl",
    "refetch_interval",
    "timeout",
    "allow_http",
    "trust_env",
}
"""Settings of the config file's ``[oidc]`` table: `OidcAuth`'s arguments (a shared secret is not one)."""
_OIDC_ENV = {
    "issuer": "AGENTRT_OIDC_ISSUER",
    "audience": "AGENTRT_OIDC_AUDIENCE",
    "user_claim": "AGENTRT_OIDC_USER_CLAIM",
    "jwks_url": "AGENTRT_OIDC_JWKS_URL",
}
"""Environment variables that set (over the config file) the main ``[oidc]`` settings."""


class DevModeError(UserError):
    """``agentrt serve --dev`` where it cannot be: on a non-loopback interface, or with credentials configured."""


def check_dev_host(host: str) -> None:
    """`DevModeError` unless `host` is a loopback interface (checked before anything binds)."""
    if not is_loopback(host):
        raise DevModeError(
            f"--dev serves without authentication, so it only listens on this machine: --host {host!r} is not a "
            "loopback address (use 127.0.0.1, ::1 or localhost); to serve other machines, drop --dev and "
            f"configure API keys ({ENV_API_KEYS}) or OIDC"
        )


def dev_banner(host: str, port: int, user_id: str = DEV_USER) -> str:
    """The warning `agentrt serve --dev` prints before it starts (plain text, several lines)."""
    return "\n".join(
        [
            "!" * 78,
            "!!  DEVELOPMENT MODE (--dev): NO AUTHENTICATION",
            f"!!  Every request, from any program on this machine, acts as the user {user_id!r}",
            f"!!  with every scope. Listening on {host}:{port} (loopback) only.",
            "!!  For local development only: never use --dev in production.",
            "!" * 78,
        ]
    )


def describe_auth(auth: Any) -> str:
    """How callers authenticate, in a few words: ``API keys (2)``, ``OIDC bearer tokens from <issuer>``..."""
    from agentrt.server._auth import CombinedAuth

    if isinstance(auth, DevAuth):
        return f"none (--dev): every request is the user {auth.principal.user_id!r}"
    if isinstance(auth, ApiKeyAuth):
        return f"API keys ({len(auth)})"
    if isinstance(auth, CombinedAuth):
        return " or ".join(describe_auth(member) for member in auth.authenticators)
    issuer = getattr(auth, "issuer", None)
    if isinstance(issuer, str):
        return f"OIDC bearer tokens from {redact_secrets(issuer)}"
    return type(auth).__name__


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def startup_summary(
    agents: Mapping[str, AgentBase],
    *,
    host: str,
    port: int,
    store_url: str | None,
    store: Any = None,
    auth: str,
    knowledge_url: str | None = None,
    jobs_url: str | None = None,
) -> list[str]:
    """What ``agentrt serve`` prints once it listens: the agents, the stores (passwords masked), the URLs.

    `store_url` is the URL of `store`, the store of the agents without one of their own.
    """
    from agentrt.state import default_state_url

    base = f"http://{_url_host(host)}:{port}"
    lines = [f"agentrt serve: {len(agents)} agent(s): {', '.join(agents)}"]
    shared = [name for name, agent in agents.items() if not agent.has_own_store]
    if store_url:
        lines.append(f"  store:     {redact_secrets(store_url)}")
    elif shared:
        lines.append(
            f"  store:     {redact_secrets(default_state_url())} (the default; set --store or AGENTRT_STATE_URL)"
        )
    own = [
        f"{name} ({type(agent.state_store).__name__})"
        for name, agent in agents.items()
        if agent.has_own_store and (store is None or agent.state_store is not store)
    ]
    if own:
        lines.append(f"  own store: {', '.join(own)}")
    if knowledge_url:
        lines.append(f"  knowledge: {redact_secrets(knowledge_url)}")
    if jobs_url:
        lines.append(f"  jobs:      {redact_secrets(jobs_url)}")
    lines += [
        f"  auth:      {auth}",
        f"  API:       {base}/v1  (e.g. GET {base}/v1/agents)",
        f"  web UI:    {base}/",
        f"  OpenAPI:   {base}/openapi.json",
    ]
    return lines


@dataclass(slots=True, kw_only=True)
class ServeConfig:
    """Settings of `agentrt serve` (from ``--config FILE`` and the environment)."""

    api_keys: dict[str, str | dict[str, Any]] = field(default_factory=dict)
    oidc: dict[str, Any] = field(default_factory=dict)
    """`OidcAuth` arguments (none: no bearer tokens, API keys only)."""
    store: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    rate_limit: RateLimit | None = None
    shutdown_timeout: float = 10.0
    disconnect_grace: float = 2.0
    heartbeat: float = 15.0
    event_buffer: int = 1024
    facades: tuple[str, ...] = ("openai", "agui", "a2a")
    knowledge: str | None = None
    """Store URL of the knowledge bases served under ``/v1/knowledge`` (none when unset)."""
    max_upload_bytes: int = 20 * 1024 * 1024

    def with_oidc(self, **settings: str | None) -> ServeConfig:
        """Set the ``[oidc]`` settings given (not None) over the file's and the environment's (CLI options)."""
        for name, value in settings.items():
            if name not in _OIDC_KEYS:
                raise UserError(f"unknown OIDC setting {name!r}")
            if value is not None:
                self.oidc[name] = _oidc_value(name, value)
        return self

    def auth_options(self, *, dev: bool = False) -> dict[str, Any]:
        """`create_app`'s `api_keys` and `auth`: the keys, an `OidcAuth`, or both (`UserError` if half set).

        `dev` (``agentrt serve --dev``): a `DevAuth`, no credentials at all; a `DevModeError` when
        keys or OIDC are configured too (a deployment's settings never turn into an open server).
        """
        if dev:
            configured = []
            if self.api_keys:
                configured.append(f"API keys ({ENV_API_KEYS} or api_keys in the config file)")
            if self.oidc:
                configured.append("OIDC (--oidc-* options, AGENTRT_OIDC_* variables or the [oidc] table)")
            if configured:
                raise DevModeError(
                    f"--dev serves without authentication and cannot be combined with {' and '.join(configured)}: "
                    "drop --dev to use them, or unset them for local development"
                )
            return {"api_keys": None, "auth": DevAuth()}
        keys = ApiKeyAuth(self.api_keys)
        if not self.oidc:
            return {"api_keys": keys}
        missing = [name for name in ("issuer", "audience") if not self.oidc.get(name)]
        if missing:
            raise UserError(
                f"OIDC needs an issuer and an audience; {' and '.join(missing)} missing "
                "(--oidc-issuer/--oidc-audience, AGENTRT_OIDC_ISSUER/AGENTRT_OIDC_AUDIENCE, or the [oidc] table)"
            )
        from agentrt.server._oidc import OidcAuth

        oidc = dict(self.oidc)
        auth = OidcAuth(oidc.pop("issuer"), oidc.pop("audience"), **oidc)
        return {"api_keys": keys, "auth": auth} if len(keys) else {"auth": auth}

    def app_options(self, *, dev: bool = False) -> dict[str, Any]:
        """Keyword arguments for `create_app` (`dev`: no authentication, see `auth_options`)."""
        return {
            **self.auth_options(dev=dev),
            "max_body_bytes": self.max_body_bytes,
            "rate_limit": self.rate_limit,
            "shutdown_timeout": self.shutdown_timeout,
            "disconnect_grace": self.disconnect_grace,
            "heartbeat": self.heartbeat,
            "event_buffer": self.event_buffer,
            "facades": self.facades,
            "max_upload_bytes": self.max_upload_bytes,
        }


def _number(data: Mapping[str, Any], key: str, kind: type[int] | type[float], default: Any) -> Any:
    value: Any = data.get(key, default)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
    if ok and kind is int and not isinstance(value, int):
        ok = False
    if not ok:
        raise UserError(f"config: {key!r} must be a non-negative {kind.__name__}, not {value!r}")
    return kind(value)


def _oidc_value(name: str, value: Any) -> Any:
    """A checked ``[oidc]`` setting (`OidcAuth` checks the rest when it is built)."""
    if name == "audience":
        if isinstance(value, str):
            value = [a.strip() for a in value.split(",") if a.strip()]
        if not isinstance(value, list) or not value or not all(isinstance(a, str) and a for a in value):
            raise UserError("config: oidc.audience must be a string (comma-separated for several) or a list")
        return value[0] if len(value) == 1 else value
    if name == "default_scopes":
        return parse_scopes(value, "config: oidc.default_scopes")
    if name in ("leeway", "jwks_ttl", "refetch_interval", "timeout"):
        return _number({name: value}, name, float, None)
    if name in ("allow_http", "trust_env"):
        if not isinstance(value, bool):
            raise UserError(f"config: oidc.{name} must be true or false")
        return value
    if name in ("scopes_claim", "algorithms") and isinstance(value, list):
        if not all(isinstance(v, str) for v in value):
            raise UserError(f"config: oidc.{name} must be a list of strings")
        return tuple(value)
    if not isinstance(value, str):
        raise UserError(f"config: oidc.{name} must be a string")
    return value


def _load_oidc(data: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    raw = data.get("oidc") or {}
    if not isinstance(raw, dict):
        raise UserError('config: \'oidc\' must be a table like {issuer = "https://...", audience = "agentrt"}')
    unknown = sorted(set(raw) - _OIDC_KEYS)
    if unknown:
        raise UserError(f"config: unknown oidc setting(s) {', '.join(map(repr, unknown))}; known: {sorted(_OIDC_KEYS)}")
    oidc = {name: _oidc_value(name, value) for name, value in raw.items()}
    for name, variable in _OIDC_ENV.items():
        if env.get(variable):
            oidc[name] = _oidc_value(name, env[variable])
    return oidc


def _load_api_keys(data: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, str | dict[str, Any]]:
    keys = data.get("api_keys") or {}

    def grant(value: Any) -> bool:
        if isinstance(value, str):
            return True
        return isinstance(value, dict) and isinstance(value.get("user"), str)

    if not isinstance(keys, dict) or not all(isinstance(k, str) and grant(v) for k, v in keys.items()):
        raise UserError(
            "config: 'api_keys' must be a table of key = \"user id\" strings "
            '(or key = {user = "user id", scopes = [...]})'
        )
    api_keys: dict[str, str | dict[str, Any]] = dict(keys)
    api_keys.update(parse_api_keys_env(env.get(ENV_API_KEYS, "")))
    ApiKeyAuth(api_keys)  # checks the scopes and user ids now, without naming a key
    return api_keys


def load_config(path: str | os.PathLike[str] | None, environ: Mapping[str, str] | None = None) -> ServeConfig:
    """Read a TOML (``.toml``) or JSON config file, then add keys from ``AGENTRT_API_KEYS``.

    Keys: ``api_keys`` (table key -> user id, or -> ``{user, scopes}``), ``oidc`` (`OidcAuth`'s
    settings: ``issuer``, ``audience``, ``user_claim``, ``jwks_url``, ...; ``AGENTRT_OIDC_ISSUER``,
    ``AGENTRT_OIDC_AUDIENCE``, ``AGENTRT_OIDC_USER_CLAIM``, ``AGENTRT_OIDC_JWKS_URL`` set those four
    over the file), ``store``, ``max_body_bytes``, ``rate_limit``
    (``{rate = <per second>, burst = <n>}``), ``shutdown_timeout``, ``disconnect_grace``,
    ``heartbeat``, ``event_buffer``, ``facades``, ``knowledge`` (a knowledge store URL: serves
    ``/v1/knowledge``), ``max_upload_bytes``.
    """
    env = os.environ if environ is None else environ
    data: dict[str, Any] = {}
    if path is not None:
        file = Path(path)
        try:
            raw = file.read_bytes()
        except OSError as exc:
            raise UserError(f"cannot read config file {str(file)!r}: {exc.strerror or exc}") from None
        try:
            loaded = json.loads(raw) if file.suffix.lower() == ".json" else tomllib.loads(raw.decode())
        except (ValueError, UnicodeDecodeError) as exc:
            kind = "JSON" if file.suffix.lower() == ".json" else "TOML"
            raise UserError(f"config file {str(file)!r} is not valid {kind}: {exc}") from None
        if not isinstance(loaded, dict):
            raise UserError(f"config file {str(file)!r} must hold a table/object at the top level")
        data = loaded
    unknown = sorted(set(data) - _CONFIG_KEYS)
    if unknown:
        raise UserError(f"config: unknown setting(s) {', '.join(map(repr, unknown))}; known: {sorted(_CONFIG_KEYS)}")
    api_keys = _load_api_keys(data, env)
    oidc = _load_oidc(data, env)
    rate_limit = None
    raw_limit = data.get("rate_limit")
    if raw_limit is not None:
        if not isinstance(raw_limit, dict) or "rate" not in raw_limit:
            raise UserError("config: 'rate_limit' must be a table like {rate = 5.0, burst = 20}")
        rate = _number(raw_limit, "rate", float, None)
        rate_limit = RateLimit(rate=rate, burst=_number(raw_limit, "burst", int, max(1, int(rate))))
    store = data.get("store")
    if store is not None and not isinstance(store, str):
        raise UserError("config: 'store' must be a URL string")
    knowledge = data.get("knowledge")
    if knowledge is not None and not isinstance(knowledge, str):
        raise UserError("config: 'knowledge' must be a URL string")
    facades = data.get("facades", ("openai", "agui", "a2a"))
    if not isinstance(facades, (list, tuple)) or not all(isinstance(f, str) for f in facades):
        raise UserError("config: 'facades' must be a list of names")
    return ServeConfig(
        api_keys=api_keys,
        oidc=oidc,
        store=store,
        max_body_bytes=_number(data, "max_body_bytes", int, DEFAULT_MAX_BODY_BYTES),
        rate_limit=rate_limit,
        shutdown_timeout=_number(data, "shutdown_timeout", float, 10.0),
        disconnect_grace=_number(data, "disconnect_grace", float, 2.0),
        heartbeat=_number(data, "heartbeat", float, 15.0),
        event_buffer=_number(data, "event_buffer", int, 1024),
        facades=tuple(facades),
        knowledge=knowledge,
        max_upload_bytes=_number(data, "max_upload_bytes", int, 20 * 1024 * 1024),
    )


def load_agents(target: str) -> dict[str, AgentBase] | AgentBase | Sequence[AgentBase]:
    """The agents named by ``MODULE:ATTR``: an agent, a dict or list of agents, or a factory returning one.

    The current directory is importable, as with ``python -m``. Anything else (a tool, a toolkit,
    a class, a function that needs arguments...) is a `TargetError` saying what it is.
    """
    value = import_target(target, example="myapp.agents:assistant")
    returned = False
    if not isinstance(value, (AgentBase, Mapping, list, tuple)):
        if not is_factory(value):
            raise not_agents(target, value)
        value = value()
        returned = True
        if inspect.isawaitable(value):
            if inspect.iscoroutine(value):
                value.close()  # never awaited: no "coroutine was never awaited" warning
            raise TargetError(
                f"{target} is an async factory; make it a plain function returning the agents",
                target=target,
                found="an async function",
            )
    if isinstance(value, AgentBase):
        return value
    if isinstance(value, (Mapping, list, tuple)):
        items = value.items() if isinstance(value, Mapping) else enumerate(value)
        for key, item in items:
            if not isinstance(item, AgentBase):
                where = f"{target}{'()' if returned else ''}[{key!r}]"
                raise not_agents(where, item, accepts="every item must be an agent")
        return dict(value) if isinstance(value, Mapping) else list(value)
    raise not_agents(target, value, returned=returned)


_PYTHON_GC_THRESHOLD = (700, 10, 10)
SERVER_GC_THRESHOLD = (20_000, 20, 20)
"""The cyclic GC's thresholds while serving (Python's are 700, 10, 10). Thousands of concurrent runs
keep many young objects alive, so young collections at every 700 allocations scan them again and
again; measured on benchmarks/server.py, 1,000 concurrent sessions: ~20% less server CPU per run.
An application that sets its own thresholds before serving keeps them."""


def graceful_server(
    app: Any, *, close: Sequence[Any] = (), started: Callable[[str, int], None] | None = None, **options: Any
) -> Any:
    """A ``uvicorn.Server`` for `app` whose shutdown first interrupts and checkpoints the app's runs.

    `options` go to ``uvicorn.Config``; `close` lists objects (state stores) whose ``close()`` is
    awaited once the server has stopped; `started` is called with the host and port it listens on
    (the port really bound, for ``port=0``) once it accepts connections.
    """
    import uvicorn

    server_ctx = getattr(getattr(app, "state", None), "agentrt", None)
    timeout = getattr(server_ctx, "shutdown_timeout", 10.0)

    class GracefulServer(uvicorn.Server):
        async def startup(self, sockets: list[Any] | None = None) -> None:
            await super().startup(sockets)
            if started is not None and self.started:
                started(*_bound(self, options.get("host", "127.0.0.1"), options.get("port", 8000)))
            # Everything loaded so far (modules, agents, tools) lives as long as the process: keep
            # it out of the cyclic GC's generations, whose full scans otherwise grow with it.
            gc.collect()
            gc.freeze()
            if gc.get_threshold() == _PYTHON_GC_THRESHOLD:  # the application did not tune it itself
                gc.set_threshold(*SERVER_GC_THRESHOLD)

        async def shutdown(self, sockets: list[Any] | None = None) -> None:
            if server_ctx is not None:
                await server_ctx.shutdown()
            await super().shutdown(sockets)
            for item in close:
                await item.close()

    options.setdefault("timeout_graceful_shutdown", int(timeout) + 5)
    options.setdefault("lifespan", "on")
    return GracefulServer(uvicorn.Config(app, **options))


def _bound(server: Any, host: str, port: int) -> tuple[str, int]:
    """The host and port `server` listens on (its first socket's), else the ones it was given."""
    for listener in getattr(server, "servers", None) or ():
        for sock in getattr(listener, "sockets", None) or ():
            name = sock.getsockname()
            if isinstance(name, tuple) and len(name) >= 2:
                return host, int(name[1])
    return host, port


def run_server(
    app: Any,
    *,
    host: str,
    port: int,
    log_level: str = "info",
    access_log: bool = True,
    close: Sequence[Any] = (),
    started: Callable[[str, int], None] | None = None,
) -> None:
    """Run `app` (from `create_app`) with uvicorn until SIGINT/SIGTERM, shutting down gracefully.

    `started(host, port)` is called once it listens (``agentrt serve`` prints its URLs then).
    """
    server = graceful_server(
        app, close=close, started=started, host=host, port=port, log_level=log_level, access_log=access_log
    )
    # uvicorn's own runner: it builds the loop its config names (uvloop when installed, as with
    # `uvicorn[standard]`); a plain `asyncio.run` would serve on the slower default loop.
    server.run()
