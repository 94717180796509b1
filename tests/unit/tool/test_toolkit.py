"""Tool, @tool, Toolkit and the execution policy, tested directly (no agent)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import pydantic
import pytest

from agentrt import ImageBlock, Msg, RuntimeContext, TextBlock, Toolkit, ToolResultBlock, ToolUseBlock, tool
from agentrt.errors import DuplicateToolError, ToolDefinitionError, ToolRetry, UserError
from agentrt.tool import Tool
from agentrt.tool._execution import ToolExecutor, partition_batches, to_result


def executor(toolkit: Toolkit, ctx: RuntimeContext | None = None, groups: frozenset[str] | None = None) -> ToolExecutor:
    return ToolExecutor(toolkit.tools, ctx or RuntimeContext(), asyncio.Semaphore(toolkit.max_concurrency), groups)


@tool
def multiply(a: float, b: float = 2.0) -> float:
    """Multiply two numbers.

    Args:
        a: First factor.
        b: Second factor.
    """
    return a * b


class Calculator:
    """An object holding tools as methods."""

    def __init__(self, offset: int) -> None:
        self.offset = offset

    @tool(read_only=True)
    def shift(self, x: int) -> int:
        """Add the offset."""
        return x + self.offset

    @tool(name="shift_async")
    async def shift_later(self, x: int) -> int:
        """Add the offset, asynchronously."""
        return x + self.offset

    def not_a_tool(self) -> None:
        """Plain method."""


def test_decorated_function_stays_callable_and_has_a_schema() -> None:
    assert isinstance(multiply, Tool)
    assert multiply(3, 4) == 12
    schema = multiply.schema()
    assert schema.name == "multiply"
    assert schema.description == "Multiply two numbers."
    assert schema.parameters["required"] == ["a"]
    assert schema.parameters["properties"]["b"]["description"] == "Second factor."


def test_tool_options_are_kept() -> None:
    @tool(name="rm", timeout=5, destructive=True, requires_confirmation=True, group="fs", max_calls=3)
    def remove(path: str) -> str:
        """Remove a file."""
        return path

    assert (remove.name, remove.timeout, remove.destructive, remove.group, remove.max_calls) == ("rm", 5, True, "fs", 3)
    assert remove.requires_confirmation and not remove.concurrency_safe and not remove.read_only


def test_bad_definitions_name_the_parameter() -> None:
    with pytest.raises(ToolDefinitionError, match="'rest'"):

        @tool
        def variadic(*rest: int) -> None:
            """Bad."""

    with pytest.raises(ToolDefinitionError, match="'fn'"):

        @tool
        def takes_callable(fn: Callable[[int], int]) -> None:
            """Bad."""

    with pytest.raises(ToolDefinitionError):
        tool(42)  # type: ignore[call-overload]
    with pytest.raises(ToolDefinitionError, match="timeout"):

        @tool(timeout=0)
        def zero() -> None:
            """Bad."""


def test_register_object_with_tool_methods_binds_them() -> None:
    toolkit = Toolkit()
    registered = toolkit.register(Calculator(10))
    assert isinstance(registered, list)
    assert toolkit.names() == ["shift", "shift_async"]
    assert [t.schema().parameters["required"] for t in registered] == [["x"], ["x"]]
    assert "self" not in toolkit.get("shift").schema().parameters["properties"]  # type: ignore[union-attr]


async def test_bound_method_tools_use_their_instance() -> None:
    toolkit = Toolkit()
    toolkit.register(Calculator(10))
    run = executor(toolkit)
    a = await run.execute(ToolUseBlock(name="shift", input={"x": 1}))
    b = await run.execute(ToolUseBlock(name="shift_async", input={"x": 2}))
    assert (a.output, b.output) == ("11", "12")


def test_duplicates_are_refused_unless_replace() -> None:
    toolkit = Toolkit([multiply])
    with pytest.raises(DuplicateToolError, match="'multiply'"):
        toolkit.register(Tool.from_function(multiply.fn, name="multiply"))  # type: ignore[arg-type]
    toolkit.register(multiply)  # the same tool again is fine
    other = toolkit.register(lambda_tool := Tool.from_function(lambda x: x, name="multiply"), replace=True)
    assert toolkit.get("multiply") is other is lambda_tool


def test_register_renames_and_unregister_reports_known_names() -> None:
    toolkit = Toolkit()
    toolkit.register(multiply, name="times", group="math")
    assert toolkit.names() == ["times"] and toolkit.get("times").group == "math"  # type: ignore[union-attr]
    assert multiply.name == "multiply"  # the original is untouched
    toolkit.unregister("times")
    with pytest.raises(KeyError, match="no tool named 'times'"):
        toolkit.unregister("times")
    with pytest.raises(ToolDefinitionError):
        toolkit.register(object())


def test_schema_cache_follows_changes_and_groups() -> None:
    toolkit = Toolkit([multiply])
    first = toolkit.schemas()
    assert toolkit.schemas() is first  # cached
    toolkit.create_group("admin", "Dangerous tools")
    toolkit.register(Tool.from_function(lambda: "x", name="drop"), group="admin")
    assert [s.name for s in toolkit.schemas()] == ["multiply"]
    assert [s.name for s in toolkit.schemas({"admin"})] == ["multiply", "drop"]
    toolkit.create_group("admin", active=True)
    assert [s.name for s in toolkit.schemas()] == ["multiply", "drop"]


def test_snapshot_is_unchanged_by_later_registration() -> None:
    toolkit = Toolkit([multiply])
    snapshot = toolkit.tools
    toolkit.register(Tool.from_function(lambda: 1, name="later"))
    assert list(snapshot) == ["multiply"] and "later" in toolkit


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Model(pydantic.BaseModel):
    a: int


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("plain", "plain"),
        (None, "Done."),
        (42, "42"),
        (1.5, "1.5"),
        (True, "true"),
        ({"k": [1, 2]}, '{"k":[1,2]}'),
        (Point(1, 2), '{"x":1,"y":2}'),
        (Model(a=1), '{"a":1}'),
        (TextBlock(text="t"), [TextBlock(text="t")]),
        ([ImageBlock(source="http://x/y.png"), TextBlock(text="caption")], None),
        (Msg.assistant("from a msg"), [TextBlock(text="from a msg")]),
    ],
)
def test_return_values_become_results(value: Any, expected: Any) -> None:
    call = ToolUseBlock(id="c1", name="t")
    result = to_result(call, value)
    assert (result.id, result.name, result.state) == ("c1", "t", "success")
    assert result.output == (expected if expected is not None else list(value))


def test_returned_result_block_is_readdressed_to_the_call() -> None:
    call = ToolUseBlock(id="c9", name="t")
    result = to_result(call, ToolResultBlock(id="other", name="x", output="o", state="error"))
    assert (result.id, result.name, result.output, result.state) == ("c9", "t", "o", "error")


async def test_tool_retry_sends_its_message() -> None:
    @tool
    async def picky(n: int) -> int:
        """Picky."""
        raise ToolRetry("n must be even, try again with n+1")

    result = await executor(Toolkit([picky])).execute(ToolUseBlock(name="picky", input={"n": 1}))
    assert (result.state, result.output) == ("error", "n must be even, try again with n+1")


async def test_missing_injected_dependency_is_a_user_error() -> None:
    class Missing:
        pass

    def needs(x: int, dep: Missing) -> int:
        return x

    needs.__annotations__ = {"x": int, "dep": Missing, "return": int}
    needs_tool = Tool.from_function(needs)
    with pytest.raises(UserError, match="needs a Missing in the RuntimeContext"):
        await executor(Toolkit([needs_tool])).execute(ToolUseBlock(name="needs", input={"x": 1}))


async def test_grouped_tool_is_unknown_while_its_group_is_inactive() -> None:
    toolkit = Toolkit()
    toolkit.register(multiply, group="math")
    inactive = await executor(toolkit, groups=frozenset()).execute(ToolUseBlock(name="multiply", input={"a": 1}))
    assert inactive.state == "error" and "Unknown tool" in inactive.output
    active = await executor(toolkit, groups=frozenset({"math"})).execute(ToolUseBlock(name="multiply", input={"a": 3}))
    assert active.output == "6.0"


def test_partition_keeps_safe_neighbours_together() -> None:
    calls = [ToolUseBlock(name=n) for n in ("r1", "r2", "w1", "r3", "w2", "w3", "r4")]
    batches = partition_batches(calls, lambda c: c.name.startswith("r"))
    assert [[c.name for c in b] for b in batches] == [["r1", "r2"], ["w1"], ["r3"], ["w2"], ["w3"], ["r4"]]


async def test_results_follow_call_order_even_with_duplicate_ids() -> None:
    @tool(read_only=True)
    async def echo(v: int) -> int:
        """Echo after a delay inversely proportional to v."""
        await asyncio.sleep(0.01 / v)
        return v

    calls = [ToolUseBlock(id="same", name="echo", input={"v": v}) for v in (1, 2, 3)]
    results = await executor(Toolkit([echo])).execute_all(calls)
    assert [r.output for r in results] == ["1", "2", "3"]


# -- names providers accept ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: tool(lambda q: q),
        lambda: tool()(lambda q: q),
        lambda: Toolkit([lambda q: q]),
        lambda: Toolkit().register(lambda q: q),
        lambda: Tool.from_function(lambda q: q),
    ],
)
def test_a_lambda_without_a_name_is_refused_with_the_fix(make: Callable[[], Any]) -> None:
    with pytest.raises(ToolDefinitionError, match=r"'<lambda>'.*pass a name, e\.g\. tool\(fn, name="):
        make()


async def handler(args: Mapping[str, Any], ctx: RuntimeContext) -> None:
    return None


@pytest.mark.parametrize("name", ["<lambda>", "my tool", "a/b", "", "x" * 129])
def test_an_explicit_name_providers_reject_is_refused_however_it_is_given(name: str) -> None:
    ok = tool(name="ok")(lambda q: q)
    makers: list[Callable[[], object]] = [
        lambda: tool(name=name)(lambda q: q),
        lambda: Toolkit().register(lambda q: q, name=name),
        lambda: Tool.from_handler(name, "d", {"type": "object"}, handler),
        lambda: ok.copy(name=name),
    ]
    for make in makers:
        with pytest.raises(ToolDefinitionError, match="letters, digits"):
            make()


def test_a_lambda_with_a_name_and_other_callables_get_sensible_names() -> None:
    import functools

    def lookup(q: str) -> str:
        return q

    class Finder:
        def __call__(self, q: str) -> str:
            return q

    toolkit = Toolkit()
    toolkit.register(lambda q: q, name="echo")
    assert tool(functools.partial(lookup)).name == "lookup"
    assert tool(Finder()).name == "Finder"
    assert tool(Finder(), name="find").name == "find"
    assert toolkit.names() == ["echo"]
