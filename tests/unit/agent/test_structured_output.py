"""Structured output in native, tool and prompted modes, with tools and with repair rounds."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import pydantic
import pytest
from typing_extensions import TypedDict

from agentrt import GenerateReason, ReActAgent, RuntimeContext, Toolkit, ToolResultBlock, ToolUseBlock, tool
from agentrt.agent._output import GENERATE_RESPONSE, StructuredOutputError
from agentrt.errors import UserError
from agentrt.model import ScriptedModel
from agentrt.state import InMemoryStateStore


class City(pydantic.BaseModel):
    name: str
    population: int


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Movie(TypedDict):
    title: str
    year: int


class NativeModel(ScriptedModel):
    supports_structured_output: ClassVar[bool] = True


class ToolsOnlyModel(ScriptedModel):
    supports_structured_output: ClassVar[bool] = False


class TextOnlyModel(ScriptedModel):
    supports_structured_output: ClassVar[bool] = False
    supports_native_tools: ClassVar[bool] = False


@tool(read_only=True)
async def lookup(city: str) -> str:
    """Look up a city's population."""
    return f"{city}: 2102650"


def make(model: ScriptedModel, **kwargs: Any) -> ReActAgent:
    return ReActAgent("bot", "sys", model=model, toolkit=Toolkit([lookup]), state_store=InMemoryStateStore(), **kwargs)


async def test_native_mode_with_a_tool_step() -> None:
    model = NativeModel(
        [ToolUseBlock(id="t", name="lookup", input={"city": "Paris"}), '{"name": "Paris", "population": 2102650}']
    )
    reply = await make(model).call("population of Paris?", output=City)
    assert reply.generate_reason is GenerateReason.STRUCTURED_OUTPUT
    assert reply.structured(City) == City(name="Paris", population=2102650)
    assert reply.metadata["structured_output"] == {"name": "Paris", "population": 2102650}
    fmt = model.requests[0].options.response_format
    assert fmt is not None and fmt["name"] == "City" and fmt["schema"]["required"] == ["name", "population"]
    assert GENERATE_RESPONSE not in [t.name for t in model.requests[0].tools]


async def test_native_mode_repairs_after_a_validation_error() -> None:
    model = NativeModel(['{"name": "Paris", "population": "lots"}', '```json\n{"name": "Paris", "population": 3}\n```'])
    reply = await make(model).call("x", output=City)
    assert reply.structured(City).population == 3
    correction = model.requests[1].messages[-1]
    assert correction.role == "user" and "'population'" in correction.text


async def test_tool_mode_uses_a_per_call_tool_never_registered() -> None:
    model = ToolsOnlyModel(
        [
            ToolUseBlock(id="t", name="lookup", input={"city": "Paris"}),
            ToolUseBlock(id="g", name=GENERATE_RESPONSE, input={"name": "Paris", "population": 2102650}),
        ]
    )
    agent = make(model)
    reply = await agent.call("x", output=City)
    assert reply.structured(City) == City(name="Paris", population=2102650)
    assert [t.name for t in model.requests[0].tools] == ["lookup", GENERATE_RESPONSE]
    assert GENERATE_RESPONSE not in agent.toolkit  # the shared toolkit is untouched
    # a plain call afterwards does not see the synthetic tool
    model.add("plain answer")
    await agent.call("again")
    assert [t.name for t in model.requests[-1].tools] == ["lookup"]


async def test_tool_mode_invalid_arguments_then_valid() -> None:
    model = ToolsOnlyModel(
        [
            ToolUseBlock(id="g1", name=GENERATE_RESPONSE, input={"name": "Paris"}),
            ToolUseBlock(id="g2", name=GENERATE_RESPONSE, input={"name": "Paris", "population": 1}),
        ]
    )
    reply = await make(model).call("x", output=City)
    assert reply.structured(City).population == 1
    [error] = model.requests[1].messages[-1].blocks(ToolResultBlock)
    assert error.state == "error" and "'population'" in error.output


async def test_tool_mode_text_answer_gets_a_reminder() -> None:
    model = ToolsOnlyModel(
        ["Paris has about 2 million people.", ToolUseBlock(id="g", name=GENERATE_RESPONSE, input={"x": 1, "y": 2})]
    )
    reply = await make(model).call("x", output=Point)
    assert reply.structured(Point) == Point(1, 2)
    assert GENERATE_RESPONSE in model.requests[1].messages[-1].text


async def test_prompted_mode_puts_the_schema_in_the_system_prompt() -> None:
    model = TextOnlyModel(['Sure! {"title": "Alien", "year": 1979} hope that helps'])
    reply = await make(model).call("a movie", output=Movie)
    assert reply.structured() == {"title": "Alien", "year": 1979}
    system = model.requests[0].messages[0].text
    assert system.startswith("sys") and '"title"' in system and "JSON Schema" in system
    assert "lookup" in system  # the text tool protocol lists the tools in the prompt


async def test_json_schema_dict_output() -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    model = NativeModel(['{"ok": "no"}', '{"ok": true}'])
    reply = await make(model).call("x", output=schema)
    assert reply.structured() == {"ok": True}
    assert "'ok'" in model.requests[1].messages[-1].text


async def test_non_object_output_in_tool_mode_is_wrapped() -> None:
    model = ToolsOnlyModel([ToolUseBlock(id="g", name=GENERATE_RESPONSE, input={"value": [1, 2, 3]})])
    reply = await make(model).call("x", output=list[int])
    assert reply.structured(list[int]) == [1, 2, 3]
    assert model.requests[0].tools[-1].parameters["required"] == ["value"]


async def test_gives_up_with_a_typed_error_after_the_retries() -> None:
    model = NativeModel(["nope", "still nope", "never json"])
    agent = make(model, output_retries=2)
    ctx = RuntimeContext(user_id="u", session_id="s")
    with pytest.raises(StructuredOutputError, match="3 attempt"):
        await agent.call("x", ctx, output=City)
    state = await agent.get_state("u", "s")
    assert state.messages[0].text == "x"  # the input and the attempts are kept


@pytest.mark.parametrize("mode", ["native", "tool", "prompted"])
async def test_mode_can_be_forced(mode: str) -> None:
    answer: Any = (
        ToolUseBlock(id="g", name=GENERATE_RESPONSE, input={"x": 1, "y": 2}) if mode == "tool" else '{"x": 1, "y": 2}'
    )
    model = ScriptedModel([answer])
    reply = await make(model, output_mode=mode).call("x", output=Point)
    assert reply.structured(Point) == Point(1, 2)


def test_bad_output_types_are_user_errors() -> None:
    from agentrt.agent._output import output_spec

    with pytest.raises(UserError):
        output_spec(42, ScriptedModel([]))
    with pytest.raises(UserError, match="not a valid JSON Schema"):
        output_spec({"type": "nonsense"}, ScriptedModel([]))
    with pytest.raises(UserError, match="output_mode"):
        output_spec(City, ScriptedModel([]), "sideways")  # type: ignore[arg-type]
