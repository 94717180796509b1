"""The chunker: sizes, coverage, overlap, heading paths, pages, CJK and code fences, stable ids."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt.errors import InvalidTypeError, InvalidValueError
from agentrt.knowledge.chunking import Chunker, Piece, chunk_id, count_tokens

HEADING = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*")
FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")

# -- hypothesis: text made of Markdown pieces --------------------------------------------------------------
WORDS = st.sampled_from(
    ["alpha", "beta", "gamma", "install", "the", "configuration", "x", "42", "naïve", "café", "🚀", "--", "(a)"]
)
CJK = st.text(alphabet="我每天早上喝咖啡今天气很好东京の天晴れです서울의지하철", min_size=1, max_size=60)
SENTENCE = st.one_of(
    st.lists(WORDS, min_size=1, max_size=30).map(lambda ws: " ".join(ws) + "."),
    CJK.map(lambda s: s + "。"),
    CJK,
    st.text(alphabet="abcdefghijklmnop", min_size=40, max_size=300),  # one very long word
)
PARAGRAPH = st.lists(SENTENCE, min_size=1, max_size=8).map(" ".join)
HEADING_LINE = st.tuples(st.integers(1, 4), st.lists(WORDS, min_size=1, max_size=3)).map(
    lambda t: "#" * t[0] + " " + " ".join(t[1])
)
CODE = st.lists(st.lists(WORDS, max_size=6).map(" ".join), min_size=1, max_size=12).map(
    lambda lines: "```python\n" + "\n".join(lines) + "\n```"
)
BLOCK = st.one_of(PARAGRAPH, PARAGRAPH, HEADING_LINE, CODE)
DOCUMENT = st.lists(BLOCK, min_size=0, max_size=14).flatmap(
    lambda blocks: st.lists(st.sampled_from(["\n\n", "\n", "\n\n\n"]), min_size=len(blocks), max_size=len(blocks)).map(
        lambda seps: "".join(b + s for b, s in zip(blocks, seps, strict=True))
    )
)
SIZES = st.integers(16, 120).flatmap(lambda size: st.tuples(st.just(size), st.integers(0, size // 2)))
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _reference_paths(text: str) -> list[tuple[int, tuple[str, ...]]]:
    """(line start offset, heading path in force from there) for each heading line outside fences."""
    out: list[tuple[int, tuple[str, ...]]] = [(0, ())]
    stack: list[tuple[int, str]] = []
    fence: str | None = None
    offset = 0
    for line in text.splitlines(keepends=True):
        bare = line.rstrip("\r\n")
        m = FENCE.match(bare)
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not bare[m.end() :].strip():
                fence = None
        elif m:
            fence = m.group(1)
        elif h := HEADING.fullmatch(bare):
            level = len(h.group(1))
            stack = [entry for entry in stack if entry[0] < level] + [(level, (h.group(2) or "").strip())]
            out.append((offset, tuple(title for _, title in stack if title)))
        offset += len(line)
    return out


def _path_at(paths: list[tuple[int, tuple[str, ...]]], position: int) -> tuple[str, ...]:
    return [path for start, path in paths if start <= position][-1]


@PROPERTY
@given(DOCUMENT, SIZES)
def test_pieces_cover_the_text_in_order_within_the_size(text: str, sizes: tuple[int, int]) -> None:
    chunk_tokens, overlap = sizes
    pieces = Chunker(chunk_tokens, overlap).split(text)
    cursor = 0
    for piece in pieces:
        assert piece.start >= cursor, "pieces do not overlap in their own parts, and come in order"
        assert not text[cursor : piece.start].strip(), "only whitespace lies between pieces"
        assert text[piece.overlap_start : piece.end] == piece.text, "a piece's text is a slice of the input"
        assert piece.text == piece.text.strip() and piece.text, "no blank or padded pieces"
        assert piece.tokens == count_tokens(piece.text)
        # A single character can be over a tiny budget only if it is itself more tokens (never here).
        assert piece.tokens <= chunk_tokens, f"{piece.tokens} > {chunk_tokens}: {piece.text!r}"
        cursor = piece.end
    assert not text[cursor:].strip(), "the text after the last piece is blank"


@PROPERTY
@given(DOCUMENT, SIZES)
def test_overlap_repeats_at_most_overlap_tokens_of_the_previous_piece(text: str, sizes: tuple[int, int]) -> None:
    chunk_tokens, overlap = sizes
    pieces = Chunker(chunk_tokens, overlap).split(text)
    for before, piece in zip([None, *pieces], pieces, strict=False):
        repeated = text[piece.overlap_start : piece.start].strip()
        if before is None or before.heading_path != piece.heading_path or overlap == 0:
            assert piece.overlap_start == piece.start, "no overlap across sections, nor when it is 0"
        if not repeated:
            continue
        assert before is not None and before.heading_path == piece.heading_path, "overlap never crosses a heading"
        assert before.start <= piece.overlap_start < before.end, "the overlap comes from the previous piece"
        assert count_tokens(text[piece.overlap_start : before.end]) <= overlap, "at most `overlap` tokens"


@PROPERTY
@given(DOCUMENT, SIZES)
def test_heading_paths_follow_the_headings(text: str, sizes: tuple[int, int]) -> None:
    pieces = Chunker(*sizes).split(text)
    paths = _reference_paths(text)
    for piece in pieces:
        assert piece.heading_path == _path_at(paths, piece.start), f"wrong path for {piece.text[:40]!r}"
        crossing = [start for start, _ in paths[1:] if piece.overlap_start < start < piece.end]
        assert not crossing, "a piece never straddles a heading"


@PROPERTY
@given(DOCUMENT, SIZES)
def test_chunk_ids_are_stable_and_unique(text: str, sizes: tuple[int, int]) -> None:
    chunker = Chunker(*sizes)
    first = chunker.chunks("kb", "doc.md", text)
    again = chunker.chunks("kb", "doc.md", text)
    assert first == again, "chunking is deterministic"
    assert len({c.chunk_id for c in first}) == len(first), "ids are unique within a document"
    assert [c.ordinal for c in first] == list(range(len(first)))
    for chunk in first:
        assert chunk.chunk_id == chunk_id("kb", "doc.md", chunk.ordinal, chunk.text)
        assert re.fullmatch(r"[0-9a-f]{32}", chunk.chunk_id)
    other = chunker.chunks("other-kb", "doc.md", text)
    assert not {c.chunk_id for c in first} & {c.chunk_id for c in other}, "ids depend on the kb"


def test_headings_nest_and_chunks_carry_the_path() -> None:
    text = (
        "# Guide\n\nIntro.\n\n## Install\n\nRun the installer.\n\n### Linux\n\nUse apt.\n\n"
        "## Configure ##\n\nEdit the file.\n\n#### Deep\n\nDeep text.\n"
    )
    pieces = Chunker(400, 0).split(text)
    assert [(p.heading_path, p.text) for p in pieces] == [
        (("Guide",), "# Guide\n\nIntro."),
        (("Guide", "Install"), "## Install\n\nRun the installer."),
        (("Guide", "Install", "Linux"), "### Linux\n\nUse apt."),
        (("Guide", "Configure"), "## Configure ##\n\nEdit the file."),
        (("Guide", "Configure", "Deep"), "#### Deep\n\nDeep text."),
    ]
    chunks = Chunker(400, 0).chunks("kb", "g.md", text)
    assert chunks[2].location == "Guide > Install > Linux"


def test_a_heading_inside_a_code_fence_is_code() -> None:
    text = "# Real\n\n```bash\n# not a heading\necho hi\n```\n\nAfter the fence.\n"
    pieces = Chunker(400, 0).split(text)
    assert len(pieces) == 1
    assert pieces[0].heading_path == ("Real",)
    assert "# not a heading" in pieces[0].text


def test_a_code_fence_that_fits_is_kept_whole() -> None:
    prose = " ".join(["word"] * 50)
    code = "```python\n" + "\n".join(f"print({i})" for i in range(12)) + "\n```"
    text = f"{prose}\n\n{code}\n\n{prose}"
    chunker = Chunker(80, 0)
    assert count_tokens(code) <= chunker.body_tokens
    pieces = chunker.split(text)
    assert any(code in p.text for p in pieces), [p.text for p in pieces]


def test_long_paragraphs_split_at_sentences() -> None:
    sentences = [f"Sentence number {i} says something about the topic at hand." for i in range(40)]
    pieces = Chunker(64, 0).split(" ".join(sentences))
    assert len(pieces) > 3
    for piece in pieces:
        assert piece.text.endswith("."), f"cut at a sentence end: {piece.text[-30:]!r}"
        assert piece.tokens <= 64


def test_cjk_without_spaces_splits_at_punctuation_then_characters() -> None:
    sentence = "我每天早上都会在家附近的咖啡店喝一杯咖啡"  # 20 characters, about 20 tokens
    text = "。".join([sentence] * 10) + "。"
    pieces = Chunker(48, 8).split(text)
    assert len(pieces) > 3
    assert all(p.tokens <= 48 for p in pieces)
    assert all(p.text.endswith("。") for p in pieces[:-1]), [p.text for p in pieces]
    no_punctuation = "咖" * 500
    pieces = Chunker(32, 4).split(no_punctuation)
    assert "".join(text_part for p in pieces for text_part in [no_punctuation[p.start : p.end]]) == no_punctuation
    assert all(p.tokens <= 32 for p in pieces)


def test_a_word_longer_than_a_chunk_is_cut_by_characters() -> None:
    word = "x" * 2000
    pieces = Chunker(16, 0).split(f"before {word} after")
    assert all(p.tokens <= 16 for p in pieces)
    assert "".join(p.text for p in pieces).replace(" ", "") == f"before{word}after"


def test_overlap_starts_the_next_chunk_with_the_previous_tail() -> None:
    words = " ".join(f"w{i}" for i in range(200))
    pieces = Chunker(40, 10).split(words)
    for before, piece in itertools.pairwise(pieces):
        tail = piece.text[: piece.start - piece.overlap_start].strip()
        assert tail and before.text.endswith(tail), "each chunk starts with the end of the one before"
        assert count_tokens(tail) <= 10


def test_pages_are_chunked_separately_with_their_numbers() -> None:
    pages = ["# Report\n\nPage one text.", "Page two text.", "", "## Annex\n\nPage four text."]
    chunks = Chunker(400, 60).chunks("kb", "r.pdf", pages=pages)
    assert [(c.page, c.heading_path, c.text) for c in chunks] == [
        (1, ("Report",), "# Report\n\nPage one text."),
        (2, ("Report",), "Page two text."),
        (4, ("Report", "Annex"), "## Annex\n\nPage four text."),
    ]
    assert chunks[1].location == "page 2, Report"


def test_empty_and_blank_text_make_no_chunks() -> None:
    assert Chunker().split("") == []
    assert Chunker().split("  \n\n \t\n") == []


def test_split_starts_under_the_given_headings() -> None:
    (piece,) = Chunker().split("Body.", headings=["A", "B"])
    assert piece == Piece("Body.", ("A", "B"), 0, 5, 0, count_tokens("Body."), None)


@pytest.mark.parametrize(
    ("chunk_tokens", "overlap", "error"),
    [
        (15, 0, InvalidValueError),
        (8193, 0, InvalidValueError),
        (100, 51, InvalidValueError),
        (100, -1, InvalidValueError),
        (100.0, 0, InvalidTypeError),
        (True, 0, InvalidTypeError),
        (100, "10", InvalidTypeError),
    ],
)
def test_sizes_are_validated(chunk_tokens: object, overlap: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        Chunker(chunk_tokens, overlap)  # type: ignore[arg-type]  # wrong types on purpose


def test_ids_change_with_text_source_and_ordinal() -> None:
    base = chunk_id("kb", "s", 0, "text")
    assert base == chunk_id("kb", "s", 0, "text")
    assert (
        len({base, chunk_id("kb", "s", 1, "text"), chunk_id("kb", "t", 0, "text"), chunk_id("kb", "s", 0, "txt")}) == 4
    )


# -- a word longer than a chunk: maximal runs, in linear time ------------------------------------------------
RUN_CHARS = st.sampled_from(["a", "Z", "7", "!", "é", "я", "😀", "\u200d", "-", "ﬁ", "\u0301"])


@PROPERTY
@given(st.lists(RUN_CHARS, min_size=1, max_size=3000).map("".join), st.integers(16, 200))
def test_a_long_word_is_cut_into_the_longest_runs_that_fit(word: str, chunk_tokens: int) -> None:
    """Each run is the longest prefix of the rest that fits (what a scan over the whole word finds).

    No CJK character: each is a word of its own, so the run would be cut at words, not characters.
    """
    chunker = Chunker(chunk_tokens, 0)
    pieces = chunker.split(word)
    assert "".join(p.text for p in pieces) == word
    for piece in pieces:
        assert count_tokens(piece.text) <= chunk_tokens or piece.end - piece.start == 1
        if piece.end < len(word) and count_tokens(word[piece.start : piece.end]) <= chunk_tokens:
            assert count_tokens(word[piece.start : piece.end + 1]) > chunk_tokens, "the run could be longer"


@pytest.mark.parametrize("chunk_tokens", [16, 400, 8192])
def test_the_search_window_holds_the_longest_possible_run(chunk_tokens: int) -> None:
    """ASCII letters are the cheapest run (4 characters a token past the first 6): it is cut at its full length."""
    pieces = Chunker(chunk_tokens, 0).split("a" * (20 * chunk_tokens))
    assert [len(p.text) for p in pieces[:-1]] == [4 * chunk_tokens + 2] * (len(pieces) - 1)


def test_cutting_an_unbroken_run_counts_about_two_chunks_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import agentrt.knowledge.chunking as chunking

    counted = [0]
    real = chunking.count_tokens

    def counting(text: str) -> int:
        counted[0] += len(text)
        return real(text)

    monkeypatch.setattr(chunking, "count_tokens", counting)
    for text in ("a" * 400_000, "😀" * 50_000, "ab!" * 100_000):
        counted[0] = 0
        Chunker().split(text)
        assert counted[0] < 12 * len(text), (text[:3], counted[0] / len(text))
