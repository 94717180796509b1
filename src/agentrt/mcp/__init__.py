"""MCP (Model Context Protocol): use any MCP server's tools, resources and prompts; serve agentrt over MCP.

```python
from agentrt.mcp import McpClient

await toolkit.register_mcp(McpClient.stdio("uvx", ["mcp-server-git"]))   # tools mcp__git__<tool>
```

`client` holds the connection (reconnecting), `toolset` registers a server's tools in a
`Toolkit`, `server` serves a toolkit or an agent (``agentrt mcp serve``). A server's questions
(elicitation) go to the application's handler or to the human of the agent run that made the call
(``mcp_elicitation`` events, ``agent.answer``; see `agentrt.tool.questions`). Needs the official SDK:
``pip install 'agentrt[mcp]'`` (``import agentrt`` never imports it).
"""

from agentrt.errors import McpCallLostError, McpConnectionError, McpError, MissingExtraError

try:
    import mcp  # noqa: F401
    import mcp_types  # noqa: F401
except ImportError as exc:  # pragma: no cover - the packaging tests check it in a venv without the extra
    raise MissingExtraError("agentrt.mcp (MCP clients and servers)", "mcp", exc.name) from exc

from agentrt.mcp._inbound import (
    DEFAULT_ELICITATION_TIMEOUT,
    ElicitationHandler,
    ElicitationRequest,
    SamplingApproval,
    SamplingRequest,
)
from agentrt.mcp.client import DEFAULT_TIMEOUT, McpClient, ProgressCallback, ResourceCallback
from agentrt.mcp.toolset import McpProgress, McpTool, register_mcp, result_to_block
from agentrt.tool.questions import ElicitationAnswer, McpElicitation, McpElicitationClosed, UserQuestion

__all__ = [
    "DEFAULT_ELICITATION_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "ElicitationAnswer",
    "ElicitationHandler",
    "ElicitationRequest",
    "McpCallLostError",
    "McpClient",
    "McpConnectionError",
    "McpElicitation",
    "McpElicitationClosed",
    "McpError",
    "McpProgress",
    "McpTool",
    "ProgressCallback",
    "ResourceCallback",
    "SamplingApproval",
    "SamplingRequest",
    "UserQuestion",
    "register_mcp",
    "result_to_block",
]
