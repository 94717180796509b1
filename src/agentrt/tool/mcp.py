"""Moved to `agentrt.mcp` (client: `agentrt.mcp.client`, registration: `agentrt.mcp.toolset`).

This module re-exports the old names so ``from agentrt.tool.mcp import McpClient`` keeps working.
"""

from agentrt.errors import McpCallLostError, McpConnectionError, McpError
from agentrt.mcp._inbound import (
    ElicitationAnswer,
    ElicitationHandler,
    ElicitationRequest,
    McpElicitation,
    SamplingApproval,
    SamplingRequest,
)
from agentrt.mcp.client import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_RECONNECT_DELAYS,
    DEFAULT_TIMEOUT,
    McpClient,
    ProgressCallback,
    ResourceCallback,
    _is_expired_session,
)
from agentrt.mcp.toolset import McpProgress, McpTool, register_mcp, result_to_block

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_RECONNECT_DELAYS",
    "DEFAULT_TIMEOUT",
    "ElicitationAnswer",
    "ElicitationHandler",
    "ElicitationRequest",
    "McpCallLostError",
    "McpClient",
    "McpConnectionError",
    "McpElicitation",
    "McpError",
    "McpProgress",
    "McpTool",
    "ProgressCallback",
    "ResourceCallback",
    "SamplingApproval",
    "SamplingRequest",
    "_is_expired_session",
    "register_mcp",
    "result_to_block",
]
