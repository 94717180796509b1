"""Reciprocal rank fusion: one ranking from several (full text and vectors), by rank, not by score.

BM25 scores and cosine similarities are on scales that cannot be compared; RRF adds ``1 / (k + rank)``
over the rankings a passage appears in (k = 60, the usual constant), so a passage ranked well by
both comes first and one found by a single ranking still counts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from agentrt.memory.retrieval import Passage

__all__ = ["RRF_K", "reciprocal_rank_fusion"]

RRF_K = 60


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[Passage]], *, k: int = RRF_K, limit: int | None = None
) -> list[Passage]:
    """Fuse best-first passage lists into one, deduplicated by chunk id, `score` set to the fused score.

    Ties keep the order of first appearance (the first ranking first). `limit` cuts the result.
    """
    scores: dict[str, float] = {}
    first: dict[str, Passage] = {}
    for ranking in rankings:
        seen: set[str] = set()
        for rank, passage in enumerate(ranking, 1):
            if passage.chunk_id in seen:  # a list repeating a chunk counts it once, at its best rank
                continue
            seen.add(passage.chunk_id)
            first.setdefault(passage.chunk_id, passage)
            scores[passage.chunk_id] = scores.get(passage.chunk_id, 0.0) + 1.0 / (k + rank)
    order = {chunk_id: index for index, chunk_id in enumerate(first)}
    ranked = sorted(first, key=lambda chunk_id: (-scores[chunk_id], order[chunk_id]))
    if limit is not None:
        ranked = ranked[: max(limit, 0)]
    return [dataclasses.replace(first[chunk_id], score=scores[chunk_id]) for chunk_id in ranked]
