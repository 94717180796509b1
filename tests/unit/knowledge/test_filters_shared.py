"""One reading of search filters: the agent's ``search_knowledge`` tool checks the model's filters with
`check_untrusted_filters`, built on the `check_filters` every store, `Knowledge.search` and the server
share; typed errors for the callers, a tool error for the model, never a crash.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt import ReActAgent, RuntimeContext, ToolResultBlock
from agentrt.errors import InvalidTypeError, InvalidValueError
from agentrt.knowledge import Knowledge
from agentrt.knowledge import filters as public
from agentrt.knowledge.contract import BAD_FILTERS
from agentrt.knowledge.filters import check_filters, check_untrusted_filters
from agentrt.knowledge.stores.sqlite import SqliteKnowledgeStore
from agentrt.memory.retrieval import Passage
from agentrt.model import ChatResponse, ScriptedModel, ToolCallChunk
from agentrt.state import InMemoryStateStore

CTX = RuntimeContext(user_id="alice", session_id="s1")
TYPED = (InvalidTypeError, InvalidValueError)


class Recorder:
    """A retriever recording the filters it receives."""

    def __init__(self) -> None:
        self.calls: list[Mapping[str, Any] | None] = []

    async def search(self, query: str, k: int = 5, filters: Mapping[str, Any] | None = None) -> list[Passage]:
        self.calls.append(filters)
        return [Passage("c1", "Vacation is 25 days.", "handbook.md", "Handbook")]


async def tool_outcome(filters: Any, knowledge: Any = None) -> tuple[ToolResultBlock, Recorder]:
    """The ``search_knowledge`` result the model gets for `filters`, and what reached the retriever."""
    retriever = Recorder()
    # Parsed arguments as given (a provider's JSON parser yields NaN, inf, huge ints and lone surrogates too).
    call = ToolCallChunk(id="k1", name="search_knowledge", input={"query": "vacation", "filters": filters})
    model = ScriptedModel([[ChatResponse(tool_calls=[call])], "ok"])
    agent = ReActAgent(
        "bot", "You answer.", model=model, state_store=InMemoryStateStore(), knowledge=knowledge or retriever
    )
    await agent.call("vacation?", CTX)
    [result] = [b for m in model.requests[1].messages for b in m.blocks(ToolResultBlock)]
    return result, retriever


def test_the_public_module_is_the_one_implementation() -> None:
    from agentrt.agent import _knowledge
    from agentrt.memory import _search_filters

    for name in public.__all__:
        assert getattr(public, name) is getattr(_search_filters, name), name
    # The agent's module keeps no filter rules of its own.
    assert not {"_strings", "_iso_date", "_MAX_FILTERS", "_SCALARS"} & set(vars(_knowledge))


FILTERS: list[Any] = [
    None,
    {},
    {"source": "handbook.md"},
    {"source": ["a.md", "b.md"], "tags": "hr", "since": " 2024-01-31 ", "until": "2025-01-01T00:00:00Z"},
    {"lang": "en", "version": 2, "draft": False, "score": 0.5},
    # refused by both readings
    "source = 'x' OR 1=1",
    {"since": "yesterday"},
    {"until": 20240101},
    {"tags": [1, 2]},
    {"year": 2**63},
    # refused only for untrusted callers (check_filters reads these for code)
    {"source": []},
    {"tags": []},
    {"team": None},
    {"source": None},
    {"team": {"$ne": "x"}},
    {"team": [1, 2]},
    {"source": ["s"] * 51},
    {"x": "y" * 501},
    {"x" * 101: 1},
    {f"k{i}": i for i in range(17)},
    {"  ": 1},
    # refused now that the tool shares check_filters (its own check let them through)
    {"x": math.nan},
    {"x": math.inf},
    {"x": 2**64},
    {"x": "\ud800"},
    {"\udfff": 1},
    {"tags": ["\ud800"]},
]


@pytest.mark.parametrize("filters", FILTERS, ids=lambda f: repr(f)[:40])
async def test_the_tool_validates_exactly_as_check_untrusted_filters(filters: Any) -> None:
    try:
        expected: Any = check_untrusted_filters(filters)
    except TYPED as exc:
        expected = exc
    result, retriever = await tool_outcome(filters)
    if isinstance(expected, Exception):
        assert result.state == "error"
        assert result.text == str(expected)
        assert retriever.calls == [], "nothing reached the knowledge base"
    else:
        assert result.state == "success"
        assert retriever.calls == [expected]


@pytest.mark.parametrize("filters", BAD_FILTERS, ids=lambda f: repr(f)[:40])
def test_whatever_check_filters_refuses_an_untrusted_caller_cannot_send(filters: Any) -> None:
    with pytest.raises(TYPED):
        check_filters(filters)
    with pytest.raises(TYPED):
        check_untrusted_filters(filters)


def test_accepted_untrusted_filters_read_the_same_as_check_filters_reads_them() -> None:
    until = "2025-01-01T10:00:00+02:00"
    filters = {"source": "a.md", "tags": "hr", "since": "20240131", "until": until, "n": 3}
    checked = check_untrusted_filters(filters)
    assert checked == {"source": ["a.md"], "tags": ["hr"], "since": "20240131", "until": until, "n": 3}
    assert check_filters(checked) == check_filters(filters)


_json_leaf = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
_json = st.recursive(
    _json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_keys = st.sampled_from(["source", "tags", "since", "until", "team", ""]) | st.text(max_size=120)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.none() | _json | st.dictionaries(_keys, _json, max_size=20))
def test_hostile_filters_are_typed_errors_never_a_crash(filters: Any) -> None:
    try:
        checked = check_untrusted_filters(filters)
    except TYPED:
        return
    assert checked is None or check_filters(checked) is not None


async def test_sql_in_a_model_filter_is_a_bound_value(tmp_path: Path) -> None:
    async with SqliteKnowledgeStore(tmp_path / "kb.db", vectors=False) as store:
        kb = Knowledge("kb", store=store)
        await kb.add("Vacation is 25 days a year.", source="handbook.md", metadata={"team": "hr"})
        hostile = {"team'); DROP TABLE kb_chunks; --": "x", "team": "hr' OR '1'='1"}
        result, _ = await tool_outcome(hostile, kb)
        assert result.state == "success" and "No passages" in result.text
        assert [p.source for p in await kb.search("vacation", 5, {"team": "hr"})] == ["handbook.md"]
