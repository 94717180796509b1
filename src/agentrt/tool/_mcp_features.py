"""Moved to `agentrt.mcp` (`agentrt.mcp._content` and `agentrt.mcp._inbound`); the old names stay importable."""

from agentrt.mcp._content import (
    block_output,
    content_blocks,
    listing_text,
    prompt_messages,
    read_result_blocks,
    resource_contents_blocks,
    result_to_block,
    sampling_messages,
)
from agentrt.mcp._inbound import (
    SAMPLING_SCHEMA,
    USER_REJECTED,
    ElicitationAnswer,
    ElicitationHandler,
    ElicitationRequest,
    Inbound,
    McpCall,
    McpElicitation,
    SamplingApproval,
    SamplingRequest,
    current_mcp_call,
)

__all__ = [
    "SAMPLING_SCHEMA",
    "USER_REJECTED",
    "ElicitationAnswer",
    "ElicitationHandler",
    "ElicitationRequest",
    "Inbound",
    "McpCall",
    "McpElicitation",
    "SamplingApproval",
    "SamplingRequest",
    "block_output",
    "content_blocks",
    "current_mcp_call",
    "listing_text",
    "prompt_messages",
    "read_result_blocks",
    "resource_contents_blocks",
    "result_to_block",
    "sampling_messages",
]
