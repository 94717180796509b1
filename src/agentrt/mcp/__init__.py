"""MCP (Model Context Protocol): use any MCP server's tools, resources and prompts; serve agentrt over MCP.

```python
from agentrt.mcp import McpClient

await toolkit.register_mcp(McpClient.stdio("uvx", ["mcp-server-git"]))   # tools mcp__git__<tool>
```

`client` holds the connection (reconnecting), `toolset` registers a server's tools in a
`Toolkit`, `server` serves a toolkit or an agent (``agentrt mcp serve``). Needs the official SDK:
``pip install 'agentrt[mcp]'`` (``import agentrt`` never imports it).
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
from agentrt.mcp.client import DEFAULT_TIMEOUT, McpClient, ProgressCallback, ResourceCallback
from agentrt.mcp.toolset import McpProgress, McpTool, register_mcp, result_to_block

__all__ = [
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
    "register_mcp",
    "result_to_block",
]
