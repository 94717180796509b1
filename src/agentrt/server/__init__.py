"""The HTTP server: agents as a multi-tenant service (``pip install 'agentrt[server]'``).

``create_app(agents={"name": agent}, store=..., api_keys={"key": "user_id"})`` returns an ASGI
app; ``agentrt serve MODULE:AGENT`` runs one with uvicorn. See docs/server.md.
"""

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
