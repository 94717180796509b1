"""What an agent needs from a knowledge base: passages found for a query, and their citations.

`agentrt.knowledge.Knowledge` implements `Retriever`; the agent layer sees only this protocol
(knowledge sits above the agent in the layering), so ``ReActAgent(knowledge=...)`` accepts any
object with an async `search` returning `Passage` objects.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

__all__ = ["Citation", "KnowledgeMode", "Passage", "Retriever", "SearchFilters", "format_passages", "neutralize"]

KnowledgeMode: TypeAlias = Literal["tool", "static", "both"]
"""``tool``: the model searches with `search_knowledge`; ``static``: the top passages for the user's
message go into the prompt of each call; ``both``: the two together."""

SearchFilters: TypeAlias = Mapping[str, Any]
"""Metadata filters: ``source`` (str or list of str: exact sources), ``tags`` (list: a passage must
carry every tag), ``since`` / ``until`` (datetime or ISO date: the document's date), and any other
key: equality with the document's metadata value."""


@dataclass(frozen=True, slots=True)
class Citation:
    """Where a passage comes from, as a reply cites it (``reply.metadata["citations"]``)."""

    chunk_id: str
    source: str
    title: str | None = None
    location: str | None = None
    """Page, section (heading path) or both, e.g. ``"page 3"`` or ``"Install > Linux"``."""

    def to_dict(self) -> dict[str, str | None]:
        """The JSON form the facades and the web UI carry."""
        return {"chunk_id": self.chunk_id, "source": self.source, "title": self.title, "location": self.location}


@dataclass(frozen=True, slots=True)
class Passage:
    """One chunk of a document found for a query, best first in a result list."""

    chunk_id: str
    text: str
    source: str
    title: str | None = None
    location: str | None = None
    score: float = 0.0
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def citation(self) -> Citation:
        """The passage's citation."""
        return Citation(self.chunk_id, self.source, self.title, self.location)


@runtime_checkable
class Retriever(Protocol):
    """A searchable knowledge base."""

    async def search(self, query: str, k: int = 5, filters: SearchFilters | None = None) -> list[Passage]:
        """The `k` passages most relevant to `query`, best first."""
        ...


_FENCE = re.compile(r"<(/?)(knowledge)", re.IGNORECASE)
_HEADER = re.compile(r"^(\s*)\[(\d+)\]", re.MULTILINE)


def neutralize(text: str) -> str:
    """Passage text that cannot close or open a ``<knowledge>`` block nor forge a ``[n]`` passage header.

    Documents are untrusted: a passage that contains ``</knowledge>`` would otherwise end the block
    it is quoted in, and what follows would read as the surrounding (system) instructions.
    """
    return _HEADER.sub(r"\1(\2)", _FENCE.sub("\u2039\\1\\2", text))


def _one_line(text: str) -> str:
    return neutralize(" ".join(text.split()))


def format_passages(passages: Sequence[Passage]) -> str:
    """Numbered passages with their sources, as the model reads them (``[1] title — location``).

    Every field is `neutralize`-d and the header fields are put on one line, so a document cannot
    end the block the passages are quoted in, nor pass itself off as another numbered passage.
    """
    lines: list[str] = []
    for number, passage in enumerate(passages, 1):
        head = _one_line(passage.title or passage.source)
        if passage.location:
            head = f"{head} — {_one_line(passage.location)}"
        source, chunk_id = _one_line(passage.source), _one_line(passage.chunk_id)
        lines.append(f"[{number}] {head} (source: {source}, id: {chunk_id})\n{neutralize(passage.text)}")
    return "\n\n".join(lines)
