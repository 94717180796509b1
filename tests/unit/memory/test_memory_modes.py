"""Long-term memory in agent runs: static injection, remember / recall tools, both, background extraction."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentrt import ReActAgent, RuntimeContext, ToolResultBlock, ToolUseBlock
from agentrt.agent._extraction import EXTRACTION_PROMPT, parse_facts
from agentrt.errors import UserError
from agentrt.memory import MemoryItem, SqliteLongTermMemory
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.state import InMemoryStateStore

SYSTEM = "You are a test bot."  # the system prompt of the make_agent fixture (tests/unit/conftest.py)
ALICE = RuntimeContext(user_id="alice", session_id="s1")
#: The `make_agent` fixture (tests/unit/conftest.py): ``make_agent(model, *tools, **options)``.
MakeAgent = Callable[..., ReActAgent]


@pytest.fixture
async def memory(tmp_path: Path) -> Any:
    mem = SqliteLongTermMemory(tmp_path / "memory.db")
    await mem.record("alice", ["The user prefers strong coffee", "The user lives in Lyon"])
    await mem.record("bob", ["The user prefers green tea"])
    yield mem
    await mem.close()


def tool_names(request: ModelRequest) -> list[str]:
    return [t.name for t in request.tools]


# -- static -----------------------------------------------------------------------------------------
async def test_static_mode_injects_relevant_memories_into_the_system_prompt(memory: Any, make_agent: MakeAgent) -> None:
    model = ScriptedModel(["Espresso, then."])
    agent = make_agent(model, long_term_memory=memory, memory_mode="static")
    await agent.call("Which coffee should I order?", ALICE)
    system = model.requests[0].messages[0]
    assert system.role == "system" and system.text.startswith(SYSTEM + "\n\n<long_term_memory>\n")
    assert "- The user prefers strong coffee" in system.text and system.text.endswith("</long_term_memory>")
    assert "green tea" not in system.text, "another user's memories never leak"
    assert tool_names(model.requests[0]) == []
    state = await agent.get_state("alice", "s1")
    assert all("<long_term_memory>" not in m.text for m in state.messages), "memories are not stored in the session"


async def test_static_mode_leaves_the_prompt_alone_when_nothing_matches(memory: Any, make_agent: MakeAgent) -> None:
    model = ScriptedModel(["Hello!"])
    agent = make_agent(model, long_term_memory=memory, memory_mode="static")
    await agent.call("hi", ALICE)
    assert model.requests[0].messages[0].text == SYSTEM


async def test_static_mode_survives_a_failing_memory(caplog: pytest.LogCaptureFixture, make_agent: MakeAgent) -> None:
    class Broken:
        async def record(self, user_id: str, texts: Any) -> list[MemoryItem]:
            raise RuntimeError("down")

        retrieve = forget = list = record

    model = ScriptedModel(["fine"])
    agent = make_agent(model, long_term_memory=Broken(), memory_mode="static")
    with caplog.at_level(logging.WARNING, logger="agentrt.agent"):
        reply = await agent.call("coffee?", ALICE)
    assert reply.text == "fine" and "retrieval failed" in caplog.text


async def test_static_mode_with_no_system_prompt(memory: Any) -> None:
    model = ScriptedModel(["ok"])
    agent = ReActAgent("bot", model=model, state_store=InMemoryStateStore(), long_term_memory=memory)
    await agent.call("where do I live?", ALICE)
    assert model.requests[0].messages[0].text.startswith("<long_term_memory>")


# -- agent-controlled ---------------------------------------------------------------------------------
async def test_agent_mode_remember_and_recall_tools(memory: Any, make_agent: MakeAgent) -> None:
    model = ScriptedModel(
        [
            ToolUseBlock(id="r1", name="remember", input={"facts": ["The user's cat is called Miso"]}),
            ToolUseBlock(id="r2", name="recall", input={"query": "cat name", "k": 3}),
            "Your cat is Miso.",
        ]
    )
    agent = make_agent(model, long_term_memory=memory, memory_mode="agent")
    reply = await agent.call("My cat is called Miso. Remember that.", ALICE)
    assert reply.text == "Your cat is Miso."
    assert model.requests[0].messages[0].text == SYSTEM, "agent mode injects nothing"
    assert tool_names(model.requests[0]) == ["remember", "recall"]
    [remembered] = model.requests[1].messages[-1].blocks(ToolResultBlock)
    assert remembered.output == "Remembered 1 fact(s)."
    [recalled] = model.requests[2].messages[-1].blocks(ToolResultBlock)
    assert isinstance(recalled.output, str)
    assert recalled.output.startswith("Remembered facts") and "- The user's cat is called Miso" in recalled.output
    assert "The user's cat is called Miso" in [i.text for i in await memory.list("alice")]
    assert "Miso" not in str([i.text for i in await memory.list("bob")])


async def test_memory_tools_validate_arguments(memory: Any, make_agent: MakeAgent) -> None:
    model = ScriptedModel(
        [
            ToolUseBlock(id="a", name="remember", input={"facts": []}),
            ToolUseBlock(id="b", name="recall", input={"query": " "}),
            ToolUseBlock(id="c", name="recall", input={"query": "unrelated zebra"}),
            "ok",
        ]
    )
    agent = make_agent(model, long_term_memory=memory, memory_mode="agent")
    await agent.call("go", ALICE)
    outputs = [r.output for req in model.requests[1:] for r in req.messages[-1].blocks(ToolResultBlock)]
    assert "non-empty list" in outputs[0] and "non-empty string" in outputs[1]
    assert outputs[2] == "Nothing remembered matches that."


async def test_both_mode_injects_and_offers_tools(memory: Any, make_agent: MakeAgent) -> None:
    model = ScriptedModel(["ok"])
    agent = make_agent(model, long_term_memory=memory)  # "both" is the default
    assert agent.memory_mode == "both"
    await agent.call("Do I like coffee?", ALICE)
    assert "strong coffee" in model.requests[0].messages[0].text
    assert tool_names(model.requests[0]) == ["remember", "recall"]


# -- extraction -------------------------------------------------------------------------------------
async def test_extraction_runs_after_the_reply_and_deduplicates(memory: Any, make_agent: MakeAgent) -> None:
    release, called = asyncio.Event(), asyncio.Event()
    seen: list[ModelRequest] = []

    async def extract(request: ModelRequest) -> str:
        seen.append(request)
        called.set()
        await release.wait()
        return (
            '```json\n["The user lives in Lyon.", "The user prefers metric units.", '
            '"the user prefers metric units", "The user is vegetarian"]\n```'
        )

    model = ScriptedModel(["Noted!"])
    agent = make_agent(
        model,
        long_term_memory=memory,
        memory_mode="static",
        memory_extraction=True,
        summary_model=ScriptedModel.from_function(extract),
    )
    reply = await agent.call("I'm vegetarian and I use metric units. Any recipe ideas?", ALICE)

    assert reply.text == "Noted!", "the reply is returned while the extraction still runs"
    await asyncio.wait_for(called.wait(), 5)
    assert len(seen) == 1
    system, user = seen[0].messages
    assert system.text == EXTRACTION_PROMPT
    assert "- The user lives in Lyon" in user.text, "existing memories are shown for de-duplication"
    assert "[user] I'm vegetarian and I use metric units." in user.text and "[assistant] Noted!" in user.text
    assert {i.text for i in await memory.list("alice")} == {"The user prefers strong coffee", "The user lives in Lyon"}
    release.set()
    await agent.drain()
    texts = [i.text for i in await memory.list("alice")]
    assert texts == [
        "The user prefers strong coffee",
        "The user lives in Lyon",
        "The user prefers metric units.",
        "The user is vegetarian",
    ]


async def test_extraction_errors_are_logged_not_raised(
    memory: Any, caplog: pytest.LogCaptureFixture, make_agent: MakeAgent
) -> None:
    model = ScriptedModel(["ok"])
    broken = ScriptedModel([RuntimeError("extraction model down")])
    agent = make_agent(
        model, long_term_memory=memory, memory_mode="static", memory_extraction=True, summary_model=broken
    )
    with caplog.at_level(logging.ERROR, logger="agentrt.memory"):
        assert (await agent.call("remember I like jazz", ALICE)).text == "ok"
        await agent.drain()
    assert "memory extraction failed" in caplog.text
    assert len(await memory.list("alice")) == 2


async def test_extraction_skips_paused_calls_and_empty_inputs(memory: Any, make_agent: MakeAgent) -> None:
    summary = ScriptedModel([])
    model = ScriptedModel(["ok"])
    agent = make_agent(
        model, long_term_memory=memory, memory_extraction=True, memory_mode="static", summary_model=summary
    )
    await agent.call(None, ALICE)
    await agent.drain()
    assert summary.requests == []


def test_call_sync_waits_for_extraction(tmp_path: Path, make_agent: MakeAgent) -> None:
    memory = SqliteLongTermMemory(tmp_path / "m.db")
    model = ScriptedModel(["ok"])
    summary = ScriptedModel(['["The user plays the cello"]'])
    agent = make_agent(
        model, long_term_memory=memory, memory_mode="static", memory_extraction=True, summary_model=summary
    )
    assert agent.call_sync("I play the cello", ALICE).text == "ok"
    items = asyncio.run(memory.list("alice"))
    assert [i.text for i in items] == ["The user plays the cello"]
    asyncio.run(memory.close())


async def test_explicit_extraction(memory: Any, make_agent: MakeAgent) -> None:
    from agentrt import Msg

    summary = ScriptedModel(['["The user works night shifts"]'])
    agent = make_agent(ScriptedModel([]), long_term_memory=memory, summary_model=summary)
    items = await agent.extract_memories(ALICE, [Msg.user("I work nights"), Msg.assistant("Got it")])
    assert [i.text for i in items] == ["The user works night shifts"]


def test_parse_facts() -> None:
    assert parse_facts('```json\n["a", "b"]\n```') == ["a", "b"]
    assert parse_facts("nothing here") == []
    assert parse_facts('  ["  spaced   out ", ""]\n') == ["spaced out"]
    assert parse_facts("['single quoted', ]") == [], "not JSON: nothing is guessed"
    assert parse_facts('[1, "a string", null]') == [], "only an array of strings"
    assert parse_facts('Sure: ["a fact"]') == [], "only the whole reply or one fenced block"
    assert parse_facts('{"facts": 1}') == []


def test_configuration_errors(tmp_path: Path) -> None:
    model = ScriptedModel([])
    with pytest.raises(UserError, match="memory_extraction"):
        ReActAgent("bot", model=model, memory_extraction=True)
    with pytest.raises(UserError, match="memory_mode"):
        ReActAgent("bot", model=model, long_term_memory=SqliteLongTermMemory(tmp_path / "m.db"), memory_mode="x")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="LongTermMemory"):
        ReActAgent("bot", model=model, long_term_memory=object())  # type: ignore[arg-type]
    with pytest.raises(UserError, match="summary_model"):
        ReActAgent("bot", model=model, summary_model=42)  # type: ignore[arg-type]
    with pytest.raises(UserError, match="memory_top_k"):
        ReActAgent("bot", model=model, memory_top_k=0)
