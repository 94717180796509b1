"""Context window management and long-term memory.

- `ContextConfig`: ``ReActAgent(context=ContextConfig(...))`` keeps prompts inside the model's
  window by tiered compression (truncate old tool results, summarise old rounds, keep the recent
  ones), with the full transcript kept in the session.
- `LongTermMemory` (protocol), `MemoryItem`, `SqliteLongTermMemory` (embedded, FTS5 + BM25),
  `PostgresLongTermMemory` (shared by replicas), `OpenAIEmbeddings` (optional vectors):
  ``ReActAgent(long_term_memory=..., memory_mode="static" | "agent" | "both")``.

Nothing here is imported by ``import agentrt``; the PostgreSQL backend and the embeddings client load
their drivers only when used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentrt.memory.compression import ContextCompressor, ContextConfig
from agentrt.memory.long_term import LongTermMemory, MemoryItem, format_memories
from agentrt.memory.stores.sqlite import SqliteLongTermMemory

if TYPE_CHECKING:
    from agentrt.memory.embeddings import OpenAIEmbeddings
    from agentrt.memory.stores.postgres import PostgresLongTermMemory

__all__ = [
    "ContextCompressor",
    "ContextConfig",
    "LongTermMemory",
    "MemoryItem",
    "OpenAIEmbeddings",
    "PostgresLongTermMemory",
    "SqliteLongTermMemory",
    "format_memories",
]

_LAZY = {
    "PostgresLongTermMemory": "agentrt.memory.stores.postgres",
    "OpenAIEmbeddings": "agentrt.memory.embeddings",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agentrt.memory' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
