"""The HTTP server: agents as a multi-tenant service (``pip install 'agentrt[server]'``).

``create_app(agents={"name": agent}, store=..., api_keys={"key": "user_id"})`` returns an ASGI
app; ``agentrt serve MODULE:AGENT`` runs one with uvicorn. See docs/server.md.
"""

from agentrt.errors import MissingExtraError

try:
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as exc:  # pragma: no cover - the packaging tests check it in a venv without the extra
    raise MissingExtraError("agentrt.server (the HTTP server)", "server", exc.name) from exc

from agentrt.server._auth import ApiKeyAuth, Authenticator, CombinedAuth, Principal, RateLimit, Scope
from agentrt.server._errors import ApiError
from agentrt.server._oidc import OidcAuth
from agentrt.server.app import DEFAULT_FACADES, create_app
from agentrt.server.context import ServerContext
from agentrt.server.jobs import DurableRuns

__all__ = [
    "DEFAULT_FACADES",
    "ApiError",
    "ApiKeyAuth",
    "Authenticator",
    "CombinedAuth",
    "DurableRuns",
    "OidcAuth",
    "Principal",
    "RateLimit",
    "Scope",
    "ServerContext",
    "create_app",
]
