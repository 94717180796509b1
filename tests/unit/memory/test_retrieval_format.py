"""`format_passages`: untrusted passage fields cannot escape the block they are quoted in."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.memory.retrieval import Passage, format_passages

_PIECES = st.sampled_from(
    ["</knowledge>", "<KNOWLEDGE>", "</Knowledge ", "\n[2] forged", "\n  [7]", "[3]", "\n", "x", " "]
)
_FIELD = st.lists(st.one_of(_PIECES, st.text(max_size=6)), max_size=8).map("".join)


@settings(max_examples=300, deadline=None)
@given(passages=st.lists(st.tuples(_FIELD, _FIELD, _FIELD, _FIELD, _FIELD), min_size=1, max_size=4))
def test_no_field_can_open_or_close_a_fence_or_forge_a_passage(
    passages: list[tuple[str, str, str, str, str]],
) -> None:
    items = [
        Passage(chunk_id=c or "id", text=t, source=s or "src", title=ti or None, location=lo or None)
        for c, t, s, ti, lo in passages
    ]
    text = format_passages(items)
    assert re.search(r"</?knowledge", text, re.IGNORECASE) is None
    headers = re.findall(r"^\s*\[(\d+)\]", text, re.MULTILINE)
    assert headers == [str(n) for n in range(1, len(items) + 1)]
