"""Text helpers shared by the long-term memory backends: search terms, normalisation, fusion, cosine.

Full-text engines split words on spaces, which finds nothing in Chinese or Japanese text (no
spaces) and little in Korean (particles glued to nouns). So the backends index terms made here:
words of alphabetic scripts as they are (the database stems them), and runs of CJK characters
as single characters plus overlapping bigrams, the classic CJK analyser. Queries use bigrams (a
one-character run falls back to the character), so "咖啡" finds "我每天早上喝咖啡".
"""

from __future__ import annotations

import math
import re
import unicodedata
from array import array
from collections.abc import Iterable, Sequence
from operator import mul

__all__ = [
    "cosine",
    "fuse",
    "index_terms",
    "nearest",
    "normalise",
    "pack_vector",
    "query_terms",
    "rrf",
    "unit",
    "unpack_vector",
]

_CJK = (
    "\u1100-\u11ff\u3040-\u30ff\u3100-\u312f\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\ua960-\ua97f\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f"
)
_TERM_RE = re.compile(rf"(?P<cjk>[{_CJK}]+)|(?P<word>[^\W_{_CJK}]+)")
_SPACE_RE = re.compile(r"\s+")
_MAX_TERM = 64
#: Words too common to help a query (queries only; documents keep them). "user" is here because
#: remembered facts are written about "the user": it would match every item and make each query
#: score them all.
STOP_WORDS = frozenset(
    """a about after all also am an and any are as at be been before being but by can could did do does
    doing done for from had has have having he her here hers him his how i if in into is it its itself
    just me my myself no nor not now of off on once only or our ours out over own please same she should
    so some such than that the their theirs them then there these they this those through to too under
    until up very was we were what when where which while who whom why will with would you your yours
    tell know remember recall user users""".split()  # noqa: SIM905 - a word list reads better as text
)


def _terms(text: str, *, query: bool) -> list[str]:
    text = unicodedata.normalize("NFKC", text).casefold()
    out: list[str] = []
    for m in _TERM_RE.finditer(text):
        run = m.group("cjk")
        if run is None:
            word = m.group("word")[:_MAX_TERM]
            if not query or (word not in STOP_WORDS and (len(word) > 1 or word.isdigit())):
                out.append(word)
            continue
        if len(run) == 1:
            out.append(run)
            continue
        if not query:
            out.extend(run)
        out.extend(run[i : i + 2] for i in range(len(run) - 1))
    return out


def index_terms(text: str) -> str:
    """The space-separated terms a backend indexes for `text`."""
    return " ".join(_terms(text, query=False))


def query_terms(text: str, limit: int = 32) -> list[str]:
    """Distinct search terms of a query, in order (stop words dropped); at most `limit`."""
    seen: dict[str, None] = {}
    for term in _terms(text, query=True):
        seen.setdefault(term, None)
        if len(seen) >= limit:
            break
    return list(seen)


def normalise(text: str) -> str:
    """The form two texts share when they say the same thing (case, width, spacing, end punctuation)."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return _SPACE_RE.sub(" ", text).strip().rstrip(".!;\u3002\uff01\uff1b")


def similar(a: str, b: str, threshold: float = 0.8) -> bool:
    """Whether two texts share at least `threshold` of their terms (Jaccard), or are equal once normalised."""
    if normalise(a) == normalise(b):
        return True
    ta, tb = set(_terms(a, query=False)), set(_terms(b, query=False))
    if not ta or not tb:
        return False
    return len(ta & tb) / len(ta | tb) >= threshold


def rrf(rankings: Iterable[Sequence[str]], k: int = 60) -> list[str]:
    """Reciprocal-rank fusion of several best-first id lists: best first."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank + 1)
    return sorted(scores, key=lambda item: -scores[item])


def fuse(rankings: Sequence[list[str]], k: int) -> list[str]:
    """The `k` best ids of one ranking, or of several fused by `rrf`."""
    return rankings[0][:k] if len(rankings) == 1 else rrf(rankings)[:k]


def nearest(vector: Sequence[float], rows: Iterable[tuple[str, bytes]], depth: int) -> list[str]:
    """The ids of the `depth` ``(id, packed vector)`` rows most similar to the unit `vector`, best first."""
    scored = sorted(((cosine(vector, unpack_vector(data)), item_id) for item_id, data in rows), reverse=True)
    return [item_id for _, item_id in scored[:depth]]


def unit(vector: Sequence[float]) -> list[float]:
    """`vector` scaled to length 1 (a zero vector stays zero)."""
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0:
        return [0.0 for _ in vector]
    return [x / norm for x in vector]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The dot product of two unit vectors (their cosine similarity)."""
    if len(a) != len(b):
        return 0.0
    return float(sum(map(mul, a, b)))


def pack_vector(vector: Sequence[float]) -> bytes:
    """A unit vector as float32 bytes (the storage form)."""
    return array("f", vector).tobytes()


def unpack_vector(data: bytes) -> array[float]:
    """The inverse of `pack_vector`."""
    out = array("f")
    out.frombytes(data)
    return out
