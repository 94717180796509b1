"""Long-term memory: facts about a user that outlive a session.

`LongTermMemory` is the protocol every backend implements (`SqliteLongTermMemory` embedded,
`PostgresLongTermMemory` for replicas sharing a database); `agentrt.testing.check_long_term_memory`
is the contract they pass. Items are short texts ("prefers metric units", "works at ACME as a data
engineer"), isolated per user, expiring `ttl` after their last use, capped per user with the least
recently used evicted first.
"""

from __future__ import annotations

import asyncio
import builtins
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol, TypeAlias, runtime_checkable

from agentrt.errors import UserError
from agentrt.memory._text import query_terms, unit

__all__ = [
    "DEFAULT_CAP",
    "DEFAULT_TTL",
    "Embedder",
    "LongTermMemory",
    "MemoryItem",
    "format_memories",
]

logger = logging.getLogger("agentrt.memory")

DEFAULT_TTL = timedelta(days=30)
DEFAULT_CAP = 50
MAX_TEXT_CHARS = 2000
"""Longest item text kept; a memory is a short fact, not a document."""

Embedder: TypeAlias = Callable[[list[str]], "list[list[float]] | Awaitable[list[list[float]]]"]
"""Turns texts into vectors, sync or async (e.g. `agentrt.memory.OpenAIEmbeddings`)."""

Clock: TypeAlias = Callable[[], float]

PURGE_EVERY = 3600.0
"""Seconds between a backend's sweeps of every user's expired items (in between, only the caller's)."""
ITEM_COLUMNS = "id, text, created_at, last_used_at"
"""The columns the SQL backends select for a `MemoryItem` (`item_from_row`)."""


@dataclass(frozen=True, slots=True)
class MemoryItem:
    """One remembered fact.

    Attributes:
        id: Stable id (use it with `forget`).
        text: The fact, in a sentence.
        created_at: When it was first recorded (seconds since the epoch, from the memory's clock).
        last_used_at: When it was last recorded again or retrieved; the TTL counts from here.
    """

    id: str
    text: str
    created_at: float
    last_used_at: float


@runtime_checkable
class LongTermMemory(Protocol):
    """What an agent needs from a long-term memory backend.

    Every method is keyed by `user_id`: a user never sees, finds or forgets another user's items.
    """

    async def record(self, user_id: str, texts: Sequence[str | MemoryItem]) -> builtins.list[MemoryItem]:
        """Remember `texts` (a text equal to an existing item refreshes it instead); returns the items."""
        ...

    async def retrieve(self, user_id: str, query: str, k: int = 5) -> builtins.list[MemoryItem]:
        """The `k` items most relevant to `query`, best first; their TTL starts again."""
        ...

    async def forget(self, user_id: str, ids: Sequence[str]) -> int:
        """Delete items by id; returns how many existed."""
        ...

    async def list(self, user_id: str) -> builtins.list[MemoryItem]:
        """Every live item of the user, oldest first (does not count as use)."""
        ...

    async def close(self) -> None:
        """Release what the backend opened."""
        ...


def ttl_seconds(ttl: timedelta | float | None) -> float | None:
    """A TTL given as a timedelta or seconds, as seconds (None: items never expire)."""
    if ttl is None:
        return None
    seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else float(ttl)
    if seconds <= 0:
        raise UserError(f"ttl must be positive (or None for no expiry), not {ttl!r}")
    return seconds


def check_cap(cap: int | None) -> int | None:
    """Validate a per-user cap (None: unlimited)."""
    if cap is not None and (not isinstance(cap, int) or cap < 1):
        raise UserError(f"cap must be a positive integer (or None for no cap), not {cap!r}")
    return cap


def clean_texts(texts: Sequence[str | MemoryItem]) -> builtins.list[tuple[str, MemoryItem | None]]:
    """Stripped, non-empty texts (clipped to `MAX_TEXT_CHARS`), with the item they came from."""
    if isinstance(texts, (str, MemoryItem)):
        texts = [texts]
    out: builtins.list[tuple[str, MemoryItem | None]] = []
    for entry in texts:
        if isinstance(entry, MemoryItem):
            text, item = entry.text, entry
        elif isinstance(entry, str):
            text, item = entry, None
        else:
            raise UserError(f"record() takes texts or MemoryItems, not {type(entry).__name__!r}")
        text = text.strip()
        if text:
            out.append((text[:MAX_TEXT_CHARS], item))
    return out


async def embed_texts(embed: Embedder, texts: builtins.list[str]) -> builtins.list[builtins.list[float]]:
    """Call a sync or async embedding function; a sync one runs in a thread."""
    if inspect.iscoroutinefunction(embed) or inspect.iscoroutinefunction(type(embed).__call__):
        result: Any = await embed(texts)  # type: ignore[misc]
    else:
        result = await asyncio.to_thread(embed, texts)
        if inspect.isawaitable(result):
            result = await result
    vectors = [builtins.list(map(float, v)) for v in result]
    if len(vectors) != len(texts):
        raise UserError(f"the embedding function returned {len(vectors)} vectors for {len(texts)} texts")
    return vectors


async def query_inputs(
    embed: Embedder | None, query: str, k: int
) -> tuple[builtins.list[str], builtins.list[float] | None] | None:
    """A retrieval's search terms and, with an embedding function, the query's unit vector.

    None when there is nothing to search: ``k <= 0``, or neither terms nor a vector.
    """
    if k <= 0:
        return None
    vector: builtins.list[float] | None = None
    if embed is not None and query.strip():
        (raw,) = await embed_texts(embed, [query])
        vector = unit(raw)
    terms = query_terms(query)
    if not terms and vector is None:
        return None
    return terms, vector


def item_from_row(row: Sequence[Any]) -> MemoryItem:
    """A `MemoryItem` from a row of `ITEM_COLUMNS`."""
    return MemoryItem(str(row[0]), str(row[1]), float(row[2]), float(row[3]))


def forget_ids(ids: Sequence[str]) -> builtins.list[str]:
    """The distinct ids a `forget` call names, in order (a lone str is one id; non-str entries are skipped)."""
    if isinstance(ids, str):
        ids = [ids]
    return [i for i in dict.fromkeys(ids) if isinstance(i, str)]


def format_memories(items: Sequence[MemoryItem]) -> str:
    """Items as the clearly delimited block injected into a system prompt."""
    lines = "\n".join(f"- {item.text}" for item in items)
    return (
        "<long_term_memory>\n"
        "Facts remembered about this user from earlier conversations (they may be outdated; the user's "
        "current words take precedence):\n"
        f"{lines}\n"
        "</long_term_memory>"
    )
