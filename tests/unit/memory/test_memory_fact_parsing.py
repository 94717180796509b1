"""Memory extraction stores only what the model returned as a JSON array of strings, never prose.

The reply must be the array itself or one fenced code block holding it: brackets inside prose
("no durable facts [the user only said hi]") are not facts, and neither is an echo of the prompt.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt import ReActAgent, RuntimeContext
from agentrt.agent._extraction import EXTRACTION_PROMPT, parse_facts
from agentrt.memory import SqliteLongTermMemory
from agentrt.model import ScriptedModel
from agentrt.state import InMemoryStateStore

ALICE = RuntimeContext(user_id="alice", session_id="s1")

facts = st.lists(st.text(min_size=1, max_size=60).filter(lambda s: s.strip()), max_size=6)
anything = st.text(max_size=80)
# prose: no brackets or backticks of its own (a reply that *is* a JSON array is an array, not prose)
prose = st.text(alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="[]`"), max_size=80)


@settings(max_examples=300, deadline=None)
@given(before=prose, inside=anything, after=prose, fence=st.booleans())
def test_prose_with_brackets_never_yields_facts(before: str, inside: str, after: str, fence: bool) -> None:
    text = f"{before}no durable facts [{inside}] {after}"
    assert parse_facts(f"```json\n{text}\n```" if fence else text) == []


@settings(max_examples=300, deadline=None)
@given(items=st.lists(st.text(max_size=60), max_size=6), words=prose.filter(lambda s: s.strip()))
def test_an_array_inside_prose_is_not_taken(items: list[str], words: str) -> None:
    array = json.dumps(items, ensure_ascii=False)
    assert parse_facts(f"{words} {array}") == []
    assert parse_facts(f"{array} {words}") == []
    assert parse_facts(f"{words}\n```json\n{array}\n```") == [], "a fenced block must be the whole reply"


@settings(max_examples=300, deadline=None)
@given(
    items=facts,
    form=st.sampled_from(["bare", "json fence", "plain fence"]),
    pad=st.sampled_from(["", " ", "\n", "\n\n  "]),
    ascii_only=st.booleans(),
)
def test_valid_arrays_yield_their_strings(items: list[str], form: str, pad: str, ascii_only: bool) -> None:
    array = json.dumps(items, ensure_ascii=ascii_only, indent=2 if len(items) > 3 else None)
    reply = {"bare": array, "json fence": f"```json\n{array}\n```", "plain fence": f"```\n{array}\n```"}[form]
    assert parse_facts(pad + reply + pad) == [" ".join(item.split()) for item in items if item.strip()]


def test_rejections_are_logged_without_the_whole_reply(caplog: pytest.LogCaptureFixture) -> None:
    secret = "my bank PIN is 4321 " * 20
    with caplog.at_level(logging.INFO, logger="agentrt.memory"):
        assert parse_facts(f"no durable facts [{secret}]") == []
        assert parse_facts('["ok", 3]') == []
        assert parse_facts("[not json]") == []
    messages = [r.getMessage() for r in caplog.records if r.name == "agentrt.memory"]
    assert len(messages) == 3
    assert "not a JSON array" in messages[0] and "not an array of strings" in messages[1]
    assert "not valid JSON" in messages[2]
    assert all(secret not in m and len(m) < 400 for m in messages), "the reply is truncated in the log"


# -- through the real agent ------------------------------------------------------------------------
async def run_extraction(tmp_path: Path, reply: Any) -> tuple[list[str], ScriptedModel]:
    memory = SqliteLongTermMemory(tmp_path / "memory.db")
    extractor = ScriptedModel.from_function(reply, name="extractor")
    agent = ReActAgent(
        "bot",
        "You are a test bot.",
        model=ScriptedModel.from_function(lambda request: "Hello!"),
        long_term_memory=memory,
        memory_mode="static",
        memory_extraction=True,
        summary_model=extractor,
        state_store=InMemoryStateStore(),
    )
    try:
        await agent.call("hi", ALICE)
        await agent.drain()
        return [item.text for item in await memory.list("alice")], extractor
    finally:
        await memory.close()


@pytest.mark.parametrize(
    "reply",
    [
        "no durable facts [the user only said hi]",
        "Nothing to remember here. [] was my first thought, but [the greeting] is small talk.",
        'Sure: ["The user said hi"]',
        "['The user said hi']",
    ],
)
async def test_prose_replies_store_nothing(tmp_path: Path, reply: str) -> None:
    stored, extractor = await run_extraction(tmp_path, lambda request: reply)
    assert len(extractor.requests) == 1 and extractor.requests[0].messages[0].text == EXTRACTION_PROMPT
    assert stored == []


async def test_an_echoing_model_stores_nothing(tmp_path: Path) -> None:
    stored, extractor = await run_extraction(tmp_path, lambda request: "\n".join(m.text for m in request.messages))
    assert extractor.requests, "the extraction ran"
    assert stored == []


async def test_a_fenced_array_is_stored(tmp_path: Path) -> None:
    reply = '```json\n["The user says hi a lot.", "The user lives in Lyon."]\n```'
    stored, _ = await run_extraction(tmp_path, lambda request: reply)
    assert stored == ["The user says hi a lot.", "The user lives in Lyon."]
