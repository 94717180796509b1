"""Moved to `agentrt.mcp.server`; the old names stay importable from here."""

from agentrt.mcp.server import (
    DEFAULT_USER,
    SESSION_META_KEY,
    ServedAgent,
    Transport,
    load_target,
    mcp_server,
    serve_mcp,
    serve_mcp_async,
)

__all__ = [
    "DEFAULT_USER",
    "SESSION_META_KEY",
    "ServedAgent",
    "Transport",
    "load_target",
    "mcp_server",
    "serve_mcp",
    "serve_mcp_async",
]
