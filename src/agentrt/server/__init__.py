"""The HTTP server: agents as a multi-tenant service (``pip install 'agentrt[server]'``).

``create_app(agents={"name": agent}, store=..., api_keys={"key": "user_id"})`` returns an ASGI
app; ``agentrt serve MODULE:AGENT`` runs one with uvicorn. See docs/server.md.
"""

from agentrt.server._auth import ApiKeyAuth, RateLimit
from agentrt.server._errors import ApiError
from agentrt.server.app import DEFAULT_FACADES, create_app
from agentrt.server.context import ServerContext

__all__ = ["DEFAULT_FACADES", "ApiError", "ApiKeyAuth", "RateLimit", "ServerContext", "create_app"]
