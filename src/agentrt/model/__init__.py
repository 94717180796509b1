"""Chat models: the protocol, the scripted model, the registry and (lazily) the provider adapters."""

from agentrt.model.base import ChatModel, ChatResponse, GenerateOptions, ModelRequest, ToolCallChunk, ToolSchema
from agentrt.model.registry import model_from_id, register_provider
from agentrt.model.scripted import ScriptedModel

__all__ = [
    "ChatModel",
    "ChatResponse",
    "GenerateOptions",
    "ModelRequest",
    "ScriptedModel",
    "ToolCallChunk",
    "ToolSchema",
    "model_from_id",
    "register_provider",
]
