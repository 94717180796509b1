"""Splitting documents into chunks: token-aware, Markdown-heading and paragraph aware, with overlap.

A chunk never straddles a heading (each carries the heading path it sits under) nor a page; it
packs whole paragraphs (a fenced code block is one paragraph, kept whole where it fits), and
splits a paragraph too long for one chunk at sentence ends (Latin and CJK punctuation), then at
words (every CJK character is a word: CJK text has no spaces), then, for a word longer than a
chunk, at characters. Sizes are counted with the project's CJK-aware estimate
(`agentrt.model.tokens.estimate_text_tokens`), never tiktoken, so boundaries and chunk ids are the
same on every machine. Each chunk but a section's first starts with the tail of the one before
(`overlap` tokens at most, cut at a word start).
"""

from __future__ import annotations

import hashlib
import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from agentrt.errors import InvalidTypeError, InvalidValueError
from agentrt.knowledge.base import Chunk
from agentrt.model.tokens import estimate_text_tokens

__all__ = ["MAX_CHUNK_TOKENS", "MIN_CHUNK_TOKENS", "Chunker", "Piece", "chunk_id", "count_tokens"]

MIN_CHUNK_TOKENS = 16
MAX_CHUNK_TOKENS = 8192

_CJK = (
    "\u1100-\u11ff\u2e80-\u2fdf\u3040-\u30ff\u3100-\u31ff\u3200-\u4dbf\u4e00-\u9fff\ua960-\ua97f"
    "\uac00-\ud7ff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f"
)
_HEADING = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+|(?<=[\u3002\uff01\uff1f\uff1b\u2026])\s*|\n+")
_WORD = re.compile(rf"[{_CJK}]|[^\s{_CJK}]+")
_OVERLAP_START = re.compile(rf"[{_CJK}]|(?<!\S)\S")


def count_tokens(text: str) -> int:
    """The CJK-aware token estimate chunk sizes are measured with."""
    return estimate_text_tokens(text)


def chunk_id(kb: str, source: str, ordinal: int, text: str) -> str:
    """A chunk's stable id: sha256 over the kb, the source, the ordinal and the text (32 hex digits)."""
    digest = hashlib.sha256("\x00".join((kb, source, str(ordinal), text)).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Piece:
    """A chunk before it gets an id: its text and where it sits in the text it was cut from.

    ``text[overlap_start:end]`` of the input is `text`; ``[start, end)`` is its own part (the
    pieces' own parts cover the input's non-blank text in order, without overlapping), and
    ``[overlap_start, start)`` the tail of the previous piece it repeats.
    """

    text: str
    heading_path: tuple[str, ...]
    start: int
    end: int
    overlap_start: int
    tokens: int
    page: int | None = None


@dataclass(frozen=True, slots=True)
class _Span:
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class _Block:
    """A paragraph (or fenced code block) of a section."""

    start: int
    end: int
    code: bool = False


@dataclass(frozen=True, slots=True)
class _Section:
    path: tuple[str, ...]
    blocks: tuple[_Block, ...]


@dataclass(frozen=True, slots=True)
class Chunker:
    """Splits text into chunks of at most `chunk_tokens` tokens, `overlap` of them repeated.

    Args:
        chunk_tokens: Most tokens in a chunk, overlap included (16 to 8192).
        overlap: Most tokens of the previous chunk a chunk starts with (0 to half of `chunk_tokens`).
    """

    chunk_tokens: int = 400
    overlap: int = 60

    def __post_init__(self) -> None:
        for name in ("chunk_tokens", "overlap"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidTypeError(f"{name} must be an int, not {type(value).__name__}")
        if not MIN_CHUNK_TOKENS <= self.chunk_tokens <= MAX_CHUNK_TOKENS:
            raise InvalidValueError(
                f"chunk_tokens must be between {MIN_CHUNK_TOKENS} and {MAX_CHUNK_TOKENS}, not {self.chunk_tokens}"
            )
        if not 0 <= self.overlap <= self.chunk_tokens // 2:
            raise InvalidValueError(
                f"chunk overlap must be between 0 and half of chunk_tokens ({self.chunk_tokens // 2}), "
                f"not {self.overlap}"
            )

    @property
    def body_tokens(self) -> int:
        """Most tokens of a chunk's own part (what is left once the overlap is counted)."""
        return self.chunk_tokens - self.overlap

    # -- public -------------------------------------------------------------------------------------------
    def split(self, text: str, *, page: int | None = None, headings: Sequence[str] = ()) -> list[Piece]:
        """The pieces of `text` (Markdown or plain), in order; `headings` is the path it starts under."""
        pieces, _ = self._split(text, tuple((level, title) for level, title in enumerate(headings, 1)), page)
        return pieces

    def split_pages(self, pages: Sequence[str]) -> list[Piece]:
        """The pieces of a paged document (page numbers from 1); headings carry over page breaks."""
        out: list[Piece] = []
        stack: tuple[tuple[int, str], ...] = ()
        for number, page_text in enumerate(pages, 1):
            pieces, stack = self._split(page_text, stack, number)
            out.extend(pieces)
        return out

    def chunks(self, kb: str, source: str, text: str = "", *, pages: Sequence[str] | None = None) -> list[Chunk]:
        """The `Chunk` objects of a document (from `pages` when given, else from `text`), with stable ids."""
        pieces = self.split_pages(pages) if pages is not None else self.split(text)
        return [
            Chunk(
                chunk_id=chunk_id(kb, source, ordinal, piece.text),
                source=source,
                ordinal=ordinal,
                text=piece.text,
                heading_path=piece.heading_path,
                page=piece.page,
                tokens=piece.tokens,
            )
            for ordinal, piece in enumerate(pieces)
        ]

    # -- splitting ----------------------------------------------------------------------------------------
    def _split(
        self, text: str, stack: tuple[tuple[int, str], ...], page: int | None
    ) -> tuple[list[Piece], tuple[tuple[int, str], ...]]:
        sections, stack = _sections(text, stack)
        out: list[Piece] = []
        for section in sections:
            previous: _Span | None = None
            for body in self._pack(text, [_Span(b.start, b.end) for b in section.blocks]):
                out.append(self._piece(text, body, previous, section.path, page))
                previous = body
        return out, stack

    def _pack(self, text: str, units: list[_Span]) -> list[_Span]:
        """Greedily merge consecutive `units` into spans of at most `body_tokens`.

        A unit too long for one span is replaced, where it stands, by its sentences, a sentence too
        long by its words, a word too long by runs of characters, and packing goes on with those.
        """
        budget = self.body_tokens
        out: list[_Span] = []
        group: list[_Span] = []
        estimate = 0
        queue = deque((unit, 0) for unit in units)
        while queue:
            unit, level = queue.popleft()
            cost = count_tokens(text[unit.start : unit.end])
            if cost > budget:
                queue.extendleft(reversed([(finer, level + 1) for finer in self._split_unit(text, unit, level)]))
                continue
            gap = count_tokens(text[group[-1].end : unit.start]) if group else 0
            if group and estimate + gap + cost > budget:
                out.extend(self._flush(text, group))
                group, estimate, gap = [], 0, 0
            group.append(unit)
            estimate += gap + cost
        out.extend(self._flush(text, group))
        return out

    def _flush(self, text: str, group: list[_Span]) -> list[_Span]:
        """`group` as one span, or several when the exact count of the joined text is over budget."""
        out: list[_Span] = []
        while group:
            end = len(group)
            while end > 1 and count_tokens(text[group[0].start : group[end - 1].end]) > self.body_tokens:
                end -= 1
            out.append(_Span(group[0].start, group[end - 1].end))
            group = group[end:]
        return out

    def _split_unit(self, text: str, unit: _Span, level: int) -> list[_Span]:
        """A unit over budget, cut at sentence ends (level 0), words (1), then characters (2)."""
        if level == 0:
            finer = _finer(text, unit, _SENTENCE_END, split=True)
            if len(finer) > 1:
                return finer
        if level <= 1:
            finer = _finer(text, unit, _WORD, split=False)
            if len(finer) > 1:
                return finer
        return self._by_characters(text, unit)

    def _by_characters(self, text: str, unit: _Span) -> list[_Span]:
        """A word longer than a chunk: the longest runs of characters that fit, in order.

        Each run's end is searched near the previous run's length (runs of one word are alike),
        galloping out from there, then bisecting: a few counts of about one chunk's text per run,
        so an unbroken run of any length is cut in linear time. The search never looks past
        `_run_limit` characters, which no run of `body_tokens` tokens reaches.
        """
        budget = self.body_tokens
        limit = _run_limit(budget)
        out: list[_Span] = []
        start = unit.start
        guess = max(1, budget // 2)  # a character costs 2 tokens at most (an emoji)

        def fits(end: int) -> bool:
            return count_tokens(text[start:end]) <= budget

        while start < unit.end:
            # the end: the largest index that fits, at least one character; the count grows with it
            good, bad = start + 1, min(unit.end, start + limit) + 1  # `good` is taken, `bad` too far
            probe = min(bad - 1, start + guess)
            step = 1
            if probe > good and fits(probe):
                good = probe
                while good + 1 < bad:  # gallop up
                    probe = min(bad - 1, good + step)
                    if not fits(probe):
                        bad = probe
                        break
                    good, step = probe, step * 2
            elif probe > good:
                bad = probe
                while good + 1 < bad:  # gallop down
                    probe = max(good + 1, bad - step)
                    if fits(probe):
                        good = probe
                        break
                    bad, step = probe, step * 2
            while good + 1 < bad:
                mid = (good + bad) // 2
                if fits(mid):
                    good = mid
                else:
                    bad = mid
            out.append(_Span(start, good))
            guess = good - start
            start = good
        return out

    def _piece(self, text: str, body: _Span, previous: _Span | None, path: tuple[str, ...], page: int | None) -> Piece:
        """The piece for `body`, starting with as much of `previous` as the overlap allows."""
        body_text = text[body.start : body.end]
        tokens = count_tokens(body_text)
        start = body.start
        allowance = min(self.overlap, self.chunk_tokens - tokens)
        if previous is not None and allowance > 0:
            starts = [m.start() for m in _OVERLAP_START.finditer(text, previous.start, previous.end)]
            lo, hi = 0, len(starts)  # `hi`: earliest start known to fit (len: no overlap)
            while lo < hi:
                mid = (lo + hi) // 2
                if self._fits(text, starts[mid], previous.end, body, allowance):
                    hi = mid
                else:
                    lo = mid + 1
            if hi < len(starts):
                start = starts[hi]
        piece_text = text[start : body.end]
        return Piece(
            text=piece_text,
            heading_path=path,
            start=body.start,
            end=body.end,
            overlap_start=start,
            tokens=count_tokens(piece_text) if start != body.start else tokens,
            page=page,
        )

    def _fits(self, text: str, start: int, tail_end: int, body: _Span, allowance: int) -> bool:
        return (
            count_tokens(text[start:tail_end]) <= allowance
            and count_tokens(text[start : body.end]) <= self.chunk_tokens
        )


def _run_limit(budget: int) -> int:
    """Characters a run of `budget` tokens without whitespace never exceeds, with room to spare.

    The estimate counts a run of ASCII letters at one token for its first six characters and four
    characters a token after that (digits three a token, punctuation two, other scripts 2.5, CJK
    one, emoji half), so ``budget`` tokens hold ``4 * budget + 2`` characters at most. Whitespace
    can cost less (a newline run is one token), but a word cut at characters has none.
    """
    return 6 * budget + 8


def _finer(text: str, unit: _Span, pattern: re.Pattern[str], *, split: bool) -> list[_Span]:
    """`unit` cut by `pattern`: at its matches (``split``) or into its matches; blank parts dropped."""
    spans: list[_Span] = []
    if split:
        cursor = unit.start
        for m in pattern.finditer(text, unit.start, unit.end):
            if m.end() == m.start() and m.start() in (unit.start, unit.end):
                continue
            spans.append(_Span(cursor, m.start()))
            cursor = m.end()
        spans.append(_Span(cursor, unit.end))
    else:
        spans = [_Span(m.start(), m.end()) for m in pattern.finditer(text, unit.start, unit.end)]
    return [trimmed for span in spans if (trimmed := _trim(text, span)) is not None]


def _trim(text: str, span: _Span) -> _Span | None:
    start, end = span.start, span.end
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return _Span(start, end) if start < end else None


def _heading(line: str) -> tuple[int, str] | None:
    m = _HEADING.fullmatch(line)
    if m is None:
        return None
    return len(m.group(1)), (m.group(2) or "").strip()


def _sections(
    text: str, start_stack: tuple[tuple[int, str], ...]
) -> tuple[list[_Section], tuple[tuple[int, str], ...]]:
    """`text` cut at its ATX headings (outside code fences) into sections of paragraphs.

    `start_stack` is the ``(level, title)`` path the text starts under; the path at its end is returned.
    """
    sections: list[_Section] = []
    stack = list(start_stack)
    blocks: list[_Block] = []
    block_start: int | None = None
    fence: str | None = None
    fence_start = 0
    position = 0

    def close(end: int, code: bool = False) -> None:
        nonlocal block_start
        if block_start is not None:
            span = _trim(text, _Span(block_start, end))
            if span is not None:
                blocks.append(_Block(span.start, span.end, code))
        block_start = None

    def flush_section() -> None:
        if blocks:
            sections.append(_Section(tuple(title for _, title in stack if title), tuple(blocks)))
            blocks.clear()

    for line in text.splitlines(keepends=True):
        line_start, position = position, position + len(line)
        bare = line.rstrip("\r\n")
        if fence is not None:
            m = _FENCE.match(bare)
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not bare[m.end() :].strip():
                fence = None
                block_start = fence_start
                close(position, code=True)
            continue
        m = _FENCE.match(bare)
        if m is not None:
            close(line_start)
            fence, fence_start = m.group(1), line_start
            continue
        heading = _heading(bare)
        if heading is not None:
            close(line_start)
            flush_section()
            level, title = heading
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            block_start = line_start
            close(position)  # the heading line opens its section
            continue
        if not bare.strip():
            close(line_start)
        elif block_start is None:
            block_start = line_start
    if fence is not None:  # an unclosed fence runs to the end
        block_start = fence_start
        close(position, code=True)
    close(position)
    flush_section()
    return sections, tuple(stack)
