"""agentrt: an async agent runtime. Give it a model, tools and a prompt; it runs a reason-act loop."""

from agentrt import _version
from agentrt.agent import LoopOptions, MemoryOptions, OutputOptions, ReActAgent, UsageLimits, UserAgent
from agentrt.context import RuntimeContext
from agentrt.errors import UsageLimitExceeded
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

__version__: str  # read from the installed package's metadata on first access (see __getattr__)

__all__ = [
    "AudioBlock",
    "Base64Source",
    "ConfirmResult",
    "GenerateReason",
    "ImageBlock",
    "LoopOptions",
    "MemoryOptions",
    "Middleware",
    "Msg",
    "OutputOptions",
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
    "UsageLimitExceeded",
    "UsageLimits",
    "UserAgent",
    "VideoBlock",
    "tool",
]


def __getattr__(name: str) -> str:
    # importlib.metadata (email, zipfile, csv...) costs more to import than agentrt's own modules,
    # so the version is read when asked for, not by `import agentrt`.
    if name != "__version__":
        raise AttributeError(f"module 'agentrt' has no attribute {name!r}")
    found = _version.version()
    globals()["__version__"] = found
    return found


_source_tree_version = _version.source_tree_version
