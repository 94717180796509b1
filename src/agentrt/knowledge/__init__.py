"""Knowledge bases: documents in, passages with citations out (retrieval-augmented answers).

- `Knowledge`: ``await kb.add(paths_or_urls_or_texts)``, ``await kb.search(query, k, filters)``;
  ``ReActAgent(knowledge=kb)`` answers from it and cites its passages; ``Knowledge(name,
  per_user=True)`` uses the caller's user id as its namespace (`NoCallerError` outside a call).
- `KnowledgeStore` (protocol) with `MemoryKnowledgeStore` (in-process), `SqliteKnowledgeStore`
  (the default: one file, FTS5 and sqlite-vec) and `PostgresKnowledgeStore` (tsvector, pgvector
  where installed); every backend passes `agentrt.testing.check_knowledge_store`.
- `Document`, `Chunk`, `AddReport`, `Passage`, `Citation`; `OpenAIEmbeddings` for vectors.

Nothing here is imported by ``import agentrt``; the SQLite and PostgreSQL backends, the embeddings
client and the file parsers load when used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentrt.knowledge.base import AddReport, Chunk, Document, KnowledgeStore
from agentrt.knowledge.knowledge import EmbedTimeoutError, Knowledge, NoCallerError
from agentrt.knowledge.stores.memory import MemoryKnowledgeStore
from agentrt.memory.retrieval import Citation, Passage

if TYPE_CHECKING:
    from agentrt.knowledge.stores.postgres import PostgresKnowledgeStore
    from agentrt.knowledge.stores.sqlite import SqliteKnowledgeStore
    from agentrt.memory.embeddings import OpenAIEmbeddings

__all__ = [
    "AddReport",
    "Chunk",
    "Citation",
    "Document",
    "EmbedTimeoutError",
    "Knowledge",
    "KnowledgeStore",
    "MemoryKnowledgeStore",
    "NoCallerError",
    "OpenAIEmbeddings",
    "Passage",
    "PostgresKnowledgeStore",
    "SqliteKnowledgeStore",
]

_LAZY = {
    "SqliteKnowledgeStore": "agentrt.knowledge.stores.sqlite",
    "PostgresKnowledgeStore": "agentrt.knowledge.stores.postgres",
    "OpenAIEmbeddings": "agentrt.memory.embeddings",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agentrt.knowledge' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
