"""agentrt: an async agent runtime. Give it a model, tools and a prompt; it runs a reason-act loop."""

from agentrt.agent import ReActAgent, UserAgent
from agentrt.context import RuntimeContext
from agentrt.message import (
    AudioBlock,
    Base64Source,
    GenerateReason,
    ImageBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    VideoBlock,
)
from agentrt.middleware import Middleware
from agentrt.permission import ConfirmResult, PermissionContext, PermissionMode, PermissionRule
from agentrt.tool import Toolkit, tool

__version__ = "0.1.0"

__all__ = [
    "AudioBlock",
    "Base64Source",
    "ConfirmResult",
    "GenerateReason",
    "ImageBlock",
    "Middleware",
    "Msg",
    "PermissionContext",
    "PermissionMode",
    "PermissionRule",
    "ReActAgent",
    "RuntimeContext",
    "TextBlock",
    "ThinkingBlock",
    "Toolkit",
    "ToolResultBlock",
    "ToolUseBlock",
    "UserAgent",
    "VideoBlock",
    "tool",
]
