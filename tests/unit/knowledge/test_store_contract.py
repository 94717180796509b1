"""Every KnowledgeStore backend passes the public contract suite (`agentrt.testing.check_knowledge_store`)."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest

from agentrt.knowledge import KnowledgeStore, MemoryKnowledgeStore
from agentrt.knowledge.base import Document
from agentrt.testing import check_knowledge_store

POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def _require_postgres() -> None:
    """Skip (locally) or fail (CI=true) when PostgreSQL does not listen (as tests/integration/services.py)."""
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=1.0):
            return
    except OSError:
        pass
    message = "postgres is not reachable on 127.0.0.1:5432"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message}; CI must run against real services")
    pytest.skip(message)


async def test_memory_store_passes_the_contract() -> None:
    await check_knowledge_store(MemoryKnowledgeStore)


async def test_sqlite_store_passes_the_contract(tmp_path: Path) -> None:
    sqlite = pytest.importorskip("agentrt.knowledge.stores.sqlite")
    path = tmp_path / "kb.db"
    await check_knowledge_store(lambda: sqlite.SqliteKnowledgeStore(path), persistent=True)


async def test_postgres_store_passes_the_contract() -> None:
    postgres = pytest.importorskip("agentrt.knowledge.stores.postgres")
    _require_postgres()

    def make() -> Any:
        return postgres.PostgresKnowledgeStore(POSTGRES_URL, table_prefix="agentrt_kb_contract")

    await check_knowledge_store(make, persistent=True)


class _Leaky(MemoryKnowledgeStore):
    """A broken backend: `documents` ignores the namespace."""

    async def documents(self, namespace: str, kb: str) -> list[Document]:
        out: list[Document] = []
        for (_ns, name), docs in self._kbs.items():
            if name == kb:
                out.extend(entry.document for entry in docs.values())
        return out


class _NoReplace(MemoryKnowledgeStore):
    """A broken backend: an upsert adds the new chunks to the old ones instead of replacing them."""

    async def upsert(self, namespace: str, kb: str, document: Document, chunks: Any) -> None:
        old = self._kbs.get((namespace, kb), {}).get(document.source)
        await super().upsert(namespace, kb, document, [*(old.chunks if old else ()), *chunks])


class _RaisesOnSyntax(MemoryKnowledgeStore):
    """A broken backend: a query with a quote raises, as raw FTS5 MATCH would."""

    async def search_text(self, namespace: str, kb: str, query: str, k: int, filters: Any = None) -> Any:
        if '"' in query:
            raise RuntimeError("fts5: syntax error near '\"'")
        return await super().search_text(namespace, kb, query, k, filters)


@pytest.mark.parametrize(
    ("broken", "rule"),
    [
        (_Leaky, "document"),
        (_NoReplace, "replaced version"),
        (_RaisesOnSyntax, "raised RuntimeError"),
    ],
)
async def test_the_contract_catches_broken_backends(broken: type[KnowledgeStore], rule: str) -> None:
    with pytest.raises(AssertionError, match=rule):
        await check_knowledge_store(broken)
