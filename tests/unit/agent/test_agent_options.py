"""`ReActAgent` option groups: `LoopOptions`, `OutputOptions`, `MemoryOptions` and their flat keywords."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pydantic
import pytest

import agentrt
from agentrt import (
    GenerateReason,
    LoopOptions,
    MemoryOptions,
    Msg,
    OutputOptions,
    ReActAgent,
    RuntimeContext,
    Toolkit,
    ToolUseBlock,
    tool,
)
from agentrt.agent._output import StructuredOutputError
from agentrt.errors import StateConflictError, UserError
from agentrt.memory import SqliteLongTermMemory
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.state import InMemoryStateStore

CTX = RuntimeContext(user_id="u", session_id="s")


@tool(read_only=True)
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def make(model: ScriptedModel, **kwargs: Any) -> ReActAgent:
    kwargs.setdefault("state_store", InMemoryStateStore())
    return ReActAgent("bot", "sys", model=model, toolkit=Toolkit([add]), **kwargs)


def add_call() -> ToolUseBlock:
    return ToolUseBlock(name="add", input={"a": 1, "b": 1})


class _Broken:
    """Not a long-term memory: it has no methods at all."""


# -- each refused value: typed, and named as the caller wrote it ---------------------------------------
# (values of the wrong type are passed on purpose: hence the `type: ignore[arg-type]`)
INVALID = [
    # (options object, its message starts with, the same value as flat keywords, their exact message)
    (
        lambda: LoopOptions(max_iters=0),
        "LoopOptions.max_iters must be a positive integer",
        {"max_iters": 0},
        "max_iters must be a positive integer, not 0",
    ),
    (
        lambda: LoopOptions(max_iters="3"),  # type: ignore[arg-type]
        "LoopOptions.max_iters must be a positive integer",
        {"max_iters": "3"},
        "max_iters must be a positive integer, not '3'",
    ),
    (
        lambda: LoopOptions(tool_calling="json"),  # type: ignore[arg-type]
        "LoopOptions.tool_calling must be",
        {"tool_calling": "json"},
        "tool_calling must be 'auto', 'native' or 'text', not 'json'",
    ),
    (
        lambda: LoopOptions(conflict_policy="retry"),  # type: ignore[arg-type]
        "LoopOptions.conflict_policy must be",
        {"conflict_policy": "retry"},
        "conflict_policy must be 'merge' or 'fail', not 'retry'",
    ),
    (
        lambda: OutputOptions(retries=-1),
        "OutputOptions.retries must be >= 0",
        {"output_retries": -1},
        "output_retries must be >= 0, not -1",
    ),
    (
        lambda: MemoryOptions(mode="never"),  # type: ignore[arg-type]
        "MemoryOptions.mode must be",
        {"memory_mode": "never"},
        "memory_mode must be 'static', 'agent' or 'both', not 'never'",
    ),
    (
        lambda: MemoryOptions(top_k=0),
        "MemoryOptions.top_k must be a positive integer",
        {"memory_top_k": 0},
        "memory_top_k must be a positive integer, not 0",
    ),
    (
        lambda: MemoryOptions(summary_model=42),  # type: ignore[arg-type]
        "MemoryOptions.summary_model must be a ChatModel",
        {"summary_model": 42},
        "summary_model must be a ChatModel or a 'provider:model' string, not 'int'",
    ),
    (
        lambda: MemoryOptions(long_term_memory=_Broken()),  # type: ignore[arg-type]
        "MemoryOptions.long_term_memory must implement agentrt.memory.LongTermMemory (no record()",
        {"long_term_memory": _Broken()},
        "long_term_memory must implement agentrt.memory.LongTermMemory (no record() on '_Broken')",
    ),
    (
        lambda: MemoryOptions(extraction=True),
        "MemoryOptions.extraction=True needs a long_term_memory",
        {"memory_extraction": True},
        "memory_extraction=True needs a long_term_memory to record into",
    ),
]
IDS = [flat_message.split(" ")[0] for *_, flat_message in INVALID]


@pytest.mark.parametrize(("build", "message"), [(b, m) for b, m, _, _ in INVALID], ids=IDS)
def test_an_options_object_refuses_a_bad_value_naming_its_field(build: Callable[[], object], message: str) -> None:
    with pytest.raises(UserError) as caught:
        build()
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize(("flat", "message"), [(f, m) for _, _, f, m in INVALID], ids=IDS)
def test_a_flat_keyword_keeps_its_message(flat: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError) as caught:
        ReActAgent("bot", model=ScriptedModel([]), **flat)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("keyword", "value", "expected"),
    [
        ("loop", MemoryOptions(), r"loop must be LoopOptions\(...\), not 'MemoryOptions'"),
        ("output_options", {"retries": 1}, r"output_options must be OutputOptions\(...\), not 'dict'"),
        ("memory", "static", r"memory must be MemoryOptions\(...\), not 'str'"),
    ],
)
def test_a_group_keyword_takes_only_its_own_options(keyword: str, value: Any, expected: str) -> None:
    with pytest.raises(UserError, match=expected):
        ReActAgent("bot", model=ScriptedModel([]), **{keyword: value})


def test_options_are_frozen_keyword_only_and_exported() -> None:
    with pytest.raises(TypeError):
        LoopOptions(3)  # type: ignore[call-arg]
    options = MemoryOptions(top_k=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.top_k = 4  # type: ignore[misc]
    assert dataclasses.replace(options, mode="static") == MemoryOptions(top_k=3, mode="static")
    for name in ("LoopOptions", "OutputOptions", "MemoryOptions"):
        assert getattr(agentrt, name) is getattr(agentrt.agent, name)
        assert getattr(agentrt, name).__module__ == "agentrt.agent.options"


# -- both spellings build the same agent ------------------------------------------------------------------
def loop_spellings(**flat: Any) -> list[dict[str, Any]]:
    return [flat, {"loop": LoopOptions(**flat)}]


@pytest.mark.parametrize("spelling", loop_spellings(max_iters=2), ids=["flat", "object"])
async def test_max_iters_either_way(spelling: dict[str, Any]) -> None:
    model = ScriptedModel([add_call(), add_call(), "wrapped up"])
    agent = make(model, **spelling)
    reply = await agent.call("loop", CTX)
    assert agent.max_iters == 2
    assert reply.generate_reason is GenerateReason.MAX_ITERS
    assert len(model.requests) == 3 and model.requests[-1].options.tool_choice == "none"


@pytest.mark.parametrize("spelling", loop_spellings(tool_calling="text"), ids=["flat", "object"])
async def test_tool_calling_either_way(spelling: dict[str, Any]) -> None:
    model = ScriptedModel(["Thought: easy\nFinal Answer: 4"])
    agent = make(model, **spelling)
    assert (await agent.call("2 + 2?", CTX)).text == "4"
    assert model.requests[0].tools == [], "the text protocol lists the tools in the prompt instead"
    assert "add" in model.requests[0].messages[0].text


@pytest.mark.parametrize("spelling", loop_spellings(conflict_policy="fail"), ids=["flat", "object"])
async def test_conflict_policy_either_way(spelling: dict[str, Any]) -> None:
    store = InMemoryStateStore()

    async def answer_after_another_writer(request: ModelRequest) -> str:
        state = await store.load("u", "s", agent="bot")
        assert state is not None
        await store.append("u", "s", [Msg.user("meanwhile")], expected_revision=state.revision, agent="bot")
        return "done"

    agent = make(ScriptedModel.from_function(answer_after_another_writer), state_store=store, **spelling)
    with pytest.raises(StateConflictError):
        await agent.call("hi", CTX)
    merging = make(ScriptedModel.from_function(answer_after_another_writer), state_store=store)
    await merging.call("again", CTX)
    assert [m.text for m in (await merging.get_state("u", "s")).messages][-2:] == ["meanwhile", "done"]


class City(pydantic.BaseModel):
    name: str


class NativeModel(ScriptedModel):
    supports_structured_output: ClassVar[bool] = True


@pytest.mark.parametrize(
    "spelling",
    [{"output_mode": "prompted", "output_retries": 0}, {"output_options": OutputOptions(mode="prompted", retries=0)}],
    ids=["flat", "object"],
)
async def test_output_options_either_way(spelling: dict[str, Any]) -> None:
    model = NativeModel(["not json", "never reached"])
    agent = make(model, **spelling)
    with pytest.raises(StructuredOutputError, match="1 attempt"):
        await agent.call("a city", CTX, output=City)
    assert len(model.requests) == 1, "no retry"
    assert "JSON Schema" in model.requests[0].messages[0].text, "prompted mode, although the model has a native one"
    assert model.requests[0].options.response_format is None


@pytest.fixture
async def memory(tmp_path: Path) -> Any:
    mem = SqliteLongTermMemory(tmp_path / "memory.db")
    await mem.record("u", ["The user likes jazz", "The user likes tea", "The user likes chess"])
    yield mem
    await mem.close()


@pytest.mark.parametrize("spelling", ["flat", "object"])
async def test_memory_options_either_way(memory: Any, spelling: str) -> None:
    extracted: list[ModelRequest] = []

    def extract(request: ModelRequest) -> str:
        extracted.append(request)
        return '["The user plays the piano"]'

    summary_model = ScriptedModel.from_function(extract)
    keywords: dict[str, Any] = (
        {
            "long_term_memory": memory,
            "memory_mode": "static",
            "memory_top_k": 1,
            "memory_extraction": True,
            "summary_model": summary_model,
        }
        if spelling == "flat"
        else {
            "memory": MemoryOptions(
                long_term_memory=memory, mode="static", top_k=1, extraction=True, summary_model=summary_model
            )
        }
    )
    model = ScriptedModel(["Noted."])
    agent = make(model, **keywords)
    await agent.call("What do I like? I play the piano, by the way.", CTX)
    await agent.drain()

    system = model.requests[0].messages[0].text
    assert system.count("- The user likes") == 1, "top_k=1 in the system prompt"
    assert [t.name for t in model.requests[0].tools] == ["add"], "static mode: no memory tools"
    assert len(extracted) == 1, "extraction ran on the summary model"
    assert "The user plays the piano" in [i.text for i in await memory.list("u")]


# -- mixing the spellings ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("keywords", "expected"),
    [
        (
            {"max_iters": 3, "loop": LoopOptions(max_iters=4)},
            "max_iters=3 conflicts with loop=LoopOptions(max_iters=4)",
        ),
        (
            {"output_retries": 1, "output_options": OutputOptions(retries=3)},
            "output_retries=1 conflicts with output_options=OutputOptions(retries=3)",
        ),
        (
            {"memory_top_k": 3, "memory": MemoryOptions(top_k=2)},
            "memory_top_k=3 conflicts with memory=MemoryOptions(top_k=2)",
        ),
        (
            {"memory_mode": "agent", "memory": MemoryOptions(mode="static")},
            "memory_mode='agent' conflicts with memory=MemoryOptions(mode='static')",
        ),
    ],
)
def test_a_flat_keyword_that_contradicts_its_group_is_refused(keywords: dict[str, Any], expected: str) -> None:
    with pytest.raises(UserError) as caught:
        ReActAgent("bot", model=ScriptedModel([]), **keywords)
    assert str(caught.value) == f"{expected}: set it in one place only"


async def test_extraction_asked_flat_with_the_memory_in_the_object_is_a_conflict(memory: Any) -> None:
    # Not "memory_extraction=True needs a long_term_memory": the memory is there, in the object.
    with pytest.raises(
        UserError, match=r"^memory_extraction=True conflicts with memory=MemoryOptions\(extraction=False\)"
    ):
        ReActAgent(
            "bot", model=ScriptedModel([]), memory_extraction=True, memory=MemoryOptions(long_term_memory=memory)
        )


def test_flat_keywords_that_agree_or_keep_their_default_defer_to_the_group() -> None:
    agent = ReActAgent(
        "bot",
        model=ScriptedModel([]),
        max_iters=4,  # the same value: no conflict
        loop=LoopOptions(max_iters=4, conflict_policy="fail"),
        output_options=OutputOptions(retries=0),
        memory=MemoryOptions(top_k=2),
    )
    assert (agent.max_iters, agent.conflict_policy, agent.tool_calling) == (4, "fail", "auto")
    assert (agent.output_mode, agent.output_retries) == ("auto", 0)
    assert (agent.memory_mode, agent.memory_top_k, agent.memory_extraction) == ("both", 2, False)
