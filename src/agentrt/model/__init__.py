"""Chat models: the protocol, the scripted model, the registry, resilience wrappers and (lazily) the providers."""

from agentrt.model.base import ChatModel, ChatResponse, GenerateOptions, ModelRequest, ToolCallChunk, ToolSchema
from agentrt.model.pricing import ModelPrice
from agentrt.model.registry import model_from_id, register_provider
from agentrt.model.resilience import FallbackModel, RetryModel
from agentrt.model.scripted import ScriptedModel

__all__ = [
    "ChatModel",
    "ChatResponse",
    "FallbackModel",
    "GenerateOptions",
    "ModelPrice",
    "ModelRequest",
    "RetryModel",
    "ScriptedModel",
    "ToolCallChunk",
    "ToolSchema",
    "TextProtocolModel",
    "context_window",
    "count_tokens",
    "ensure_tool_calling",
    "model_from_id",
    "register_provider",
]

_LAZY = {
    "TextProtocolModel": "agentrt.model.text_protocol",
    "ensure_tool_calling": "agentrt.model.text_protocol",
    "count_tokens": "agentrt.model.tokens",
    "context_window": "agentrt.model.tokens",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agentrt.model' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
