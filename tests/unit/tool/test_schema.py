"""Tests for `agentrt.tool._schema`: function -> tool schema, argument validation and binding."""

import dataclasses
import enum
from collections.abc import Callable
from types import MappingProxyType
from typing import Annotated, Any, Literal, Optional

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from agentrt.context import RuntimeContext
from agentrt.errors import ToolArgumentsError, ToolDefinitionError
from agentrt.tool._schema import FunctionSchema, Inject, function_schema

# -- types used by the tools under test (module level, so string annotations resolve) ---------------


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(BaseModel):
    x: int
    y: int = 0


@dataclasses.dataclass
class Box:
    width: float
    label: str = "box"


class Address(TypedDict):
    street: str
    zip: int


class Db:
    """A client class pydantic cannot describe: injected from the context."""


@dataclasses.dataclass
class HoldsDb:
    db: Db


class AppContext(RuntimeContext):
    __slots__ = ()


def props(schema: FunctionSchema) -> dict[str, Any]:
    properties: dict[str, Any] = schema.parameters["properties"]
    return properties


# -- name and description ---------------------------------------------------------------------------


def test_name_and_description_default_to_function_name_and_docstring() -> None:
    def greet(who: str) -> str:
        """Say hello.

        Friendly, and long enough to need a second paragraph.

        Args:
            who: Whom to greet.
        """
        return who

    schema = function_schema(greet)
    assert schema.name == "greet"
    assert schema.description == "Say hello.\n\nFriendly, and long enough to need a second paragraph."


def test_name_and_description_overrides_win() -> None:
    def greet(who: str) -> str:
        """Say hello."""
        return who

    schema = function_schema(greet, name="hello", description="  Custom.  ")
    assert (schema.name, schema.description) == ("hello", "  Custom.  ")


def test_no_docstring_gives_empty_description() -> None:
    def bare(x: int) -> int:
        return x

    schema = function_schema(bare)
    assert schema.description == ""
    assert props(schema) == {"x": {"type": "integer"}}


# -- docstring styles -------------------------------------------------------------------------------


def google(a: int, b: str = "x") -> None:
    """Google style summary.

    Args:
        a (int): The first
            parameter.
        b: The second parameter.

    Returns:
        Nothing.
    """


def numpy(a: int, b: str = "x") -> None:
    """Numpy style summary.

    Parameters
    ----------
    a : int
        The first parameter.
    b : str, optional
        The second parameter.
    """


def sphinx(a: int, b: str = "x") -> None:
    """Sphinx style summary.

    :param a: The first parameter.
    :param str b: The second parameter.
    :returns: nothing.
    """


@pytest.mark.parametrize(
    ("fn", "summary", "a_doc"),
    [
        (google, "Google style summary.", "The first\nparameter."),
        (numpy, "Numpy style summary.", "The first parameter."),
        (sphinx, "Sphinx style summary.", "The first parameter."),
    ],
)
def test_docstring_styles(fn: Callable[..., Any], summary: str, a_doc: str) -> None:
    schema = function_schema(fn)
    assert schema.description == summary
    assert schema.parameters == {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "description": a_doc},
            "b": {"type": "string", "default": "x", "description": "The second parameter."},
        },
        "required": ["a"],
        "additionalProperties": False,
    }


def test_field_description_wins_over_docstring() -> None:
    def f(
        a: Annotated[int, Field(description="from Field")],
        b: int = Field(3, description="from default Field"),
        c: int = 1,
    ) -> None:
        """Summary.

        Args:
            a: from docstring
            b: from docstring
            c: from docstring
        """

    p = props(function_schema(f))
    assert p["a"] == {"type": "integer", "description": "from Field"}
    assert p["b"] == {"type": "integer", "default": 3, "description": "from default Field"}
    assert p["c"]["description"] == "from docstring"
    assert function_schema(f).parameters["required"] == ["a"]


# -- types ------------------------------------------------------------------------------------------


def test_scalar_types_and_required_list() -> None:
    def f(  # type: ignore[no-untyped-def]
        s: str, i: int, x: float, flag: bool, nothing: None, anything: Any, untyped, d: int = 5
    ) -> None:
        pass

    schema = function_schema(f)
    assert props(schema) == {
        "s": {"type": "string"},
        "i": {"type": "integer"},
        "x": {"type": "number"},
        "flag": {"type": "boolean"},
        "nothing": {"type": "null"},
        "anything": {},
        "untyped": {},
        "d": {"type": "integer", "default": 5},
    }
    assert schema.parameters["required"] == ["s", "i", "x", "flag", "nothing", "anything", "untyped"]
    assert schema.parameters["additionalProperties"] is False
    assert "$defs" not in schema.parameters


def test_no_title_keys_on_top_object_or_properties() -> None:
    def f(point: Point, n: int = 1) -> None:
        pass

    schema = function_schema(f)
    assert "title" not in schema.parameters
    assert all("title" not in prop for prop in props(schema).values())


def test_optional_union_literal_enum() -> None:
    def f(
        maybe: Optional[int] = None,  # noqa: UP045 - the spelling under test
        either: int | str = 0,
        mode: Literal["fast", "slow"] = "fast",
        only: Literal["one"] = "one",
        color: Color = Color.RED,
    ) -> None:
        pass

    schema = function_schema(f)
    p = props(schema)
    assert p["maybe"] == {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None}
    assert p["either"] == {"anyOf": [{"type": "integer"}, {"type": "string"}], "default": 0}
    assert p["mode"] == {"enum": ["fast", "slow"], "type": "string", "default": "fast"}
    assert p["only"] == {"const": "one", "type": "string", "default": "one"}
    assert p["color"] == {"$ref": "#/$defs/Color", "default": "red"}
    assert schema.parameters["$defs"]["Color"]["enum"] == ["red", "blue"]
    assert schema.parameters["required"] == []


def test_containers() -> None:
    def f(items: list[int], pair: tuple[int, str], tags: set[str], scores: dict[str, float]) -> None:
        pass

    p = props(function_schema(f))
    assert p["items"] == {"type": "array", "items": {"type": "integer"}}
    assert p["pair"] == {
        "type": "array",
        "prefixItems": [{"type": "integer"}, {"type": "string"}],
        "minItems": 2,
        "maxItems": 2,
    }
    assert p["tags"] == {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
    assert p["scores"] == {"type": "object", "additionalProperties": {"type": "number"}}


def test_nested_model_dataclass_and_typeddict_use_defs() -> None:
    def f(point: Point, box: Box, address: Address | None = None) -> None:
        """Nested.

        Args:
            point: Where.
        """

    schema = function_schema(f)
    p = props(schema)
    assert p["point"] == {"$ref": "#/$defs/Point", "description": "Where."}
    assert p["box"] == {"$ref": "#/$defs/Box"}
    assert p["address"] == {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}], "default": None}
    defs = schema.parameters["$defs"]
    assert set(defs) == {"Point", "Box", "Address"}
    assert defs["Point"]["properties"]["x"]["type"] == "integer"
    assert defs["Point"]["required"] == ["x"]
    assert defs["Box"]["properties"]["label"]["default"] == "box"
    assert defs["Box"]["required"] == ["width"]
    assert defs["Address"]["required"] == ["street", "zip"]


def test_annotated_constraints() -> None:
    def f(
        n: Annotated[int, Field(ge=1, le=10)],
        name: Annotated[str, Field(min_length=2, max_length=5)] = "ab",
    ) -> None:
        pass

    schema = function_schema(f)
    p = props(schema)
    assert p["n"] == {"type": "integer", "minimum": 1, "maximum": 10}
    assert p["name"] == {"type": "string", "minLength": 2, "maxLength": 5, "default": "ab"}
    with pytest.raises(ToolArgumentsError, match="'n': input should be less than or equal to 10"):
        schema.validate({"n": 11})


def test_field_default_in_annotated_makes_parameter_optional() -> None:
    def f(n: Annotated[int, Field(default=4)]) -> int:
        return n

    schema = function_schema(f)
    assert schema.parameters["required"] == []
    assert props(schema)["n"] == {"type": "integer", "default": 4}
    assert schema.validate({}) == {"n": 4}


# -- injected parameters ----------------------------------------------------------------------------


def test_injected_parameters_are_hidden_and_reported() -> None:
    def f(
        query: str,
        ctx: RuntimeContext,
        db: Db,
        marked: Annotated[Point, Inject],
        maybe_ctx: RuntimeContext | None = None,
        app: AppContext | None = None,
        maybe_db: Annotated[Optional[Db], Inject()] = None,  # noqa: UP045 - the spelling under test
    ) -> None:
        """Search.

        Args:
            query: What to look for.
            ctx: The context.
            db: The database.
        """

    schema = function_schema(f)
    assert props(schema) == {"query": {"type": "string", "description": "What to look for."}}
    assert schema.parameters["required"] == ["query"]
    assert dict(schema.injected) == {
        "ctx": RuntimeContext,
        "db": Db,
        "marked": Point,
        "maybe_ctx": RuntimeContext,
        "app": RuntimeContext,
        "maybe_db": Db,
    }
    assert dict(schema.injected_defaults) == {"maybe_ctx": None, "app": None, "maybe_db": None}
    with pytest.raises(ToolArgumentsError, match="'ctx': extra inputs are not permitted"):
        schema.validate({"query": "q", "ctx": {}})


def test_injected_and_defaults_are_read_only() -> None:
    def f(ctx: RuntimeContext) -> None:
        pass

    schema = function_schema(f)
    with pytest.raises(TypeError):
        schema.injected["other"] = Db  # type: ignore[index]


# -- definition errors ------------------------------------------------------------------------------


def test_var_positional_is_rejected() -> None:
    def f(a: int, *args: int) -> None:
        pass

    with pytest.raises(ToolDefinitionError) as info:
        function_schema(f)
    assert str(info.value) == "tool 'f': parameter 'args' is variadic (*args); tools take named parameters only"


def test_var_keyword_is_rejected() -> None:
    def f(a: int, **options: Any) -> None:
        pass

    with pytest.raises(ToolDefinitionError, match=r"tool 'f': parameter 'options' is variadic \(\*\*options\)"):
        function_schema(f)


def test_callable_parameter_is_rejected() -> None:
    def f(callback: Callable[[int], int]) -> None:
        pass

    with pytest.raises(ToolDefinitionError, match=r"tool 'f': parameter 'callback' has type .*JSON Schema"):
        function_schema(f)


def test_container_of_unschemable_class_is_rejected_not_injected() -> None:
    def f(dbs: list[Db]) -> None:
        pass

    with pytest.raises(ToolDefinitionError, match="parameter 'dbs'"):
        function_schema(f)


def test_data_class_with_unschemable_field_is_rejected_not_injected() -> None:
    def f(holder: HoldsDb) -> None:
        pass

    with pytest.raises(ToolDefinitionError, match="parameter 'holder'"):
        function_schema(f)


def test_inject_on_non_class_is_rejected() -> None:
    def f(numbers: Annotated[list[int], Inject]) -> None:
        pass

    with pytest.raises(ToolDefinitionError, match="parameter 'numbers' is marked Inject"):
        function_schema(f)


def test_unresolvable_annotation_names_the_parameter() -> None:
    def f(a: int, b: "Undefined") -> None:  # type: ignore[name-defined]  # noqa: F821
        pass

    with pytest.raises(ToolDefinitionError, match=r"parameter 'b'.*Undefined"):
        function_schema(f)


@pytest.mark.parametrize("thing", [3, "f", None])
def test_non_callable_is_rejected(thing: Any) -> None:
    with pytest.raises(ToolDefinitionError, match="expected a function or other callable"):
        function_schema(thing)


# -- validate ---------------------------------------------------------------------------------------


def add(a: int, b: int = 2) -> int:
    return a + b


def test_validate_coerces_and_fills_defaults() -> None:
    schema = function_schema(add)
    assert schema.validate({"a": "3"}) == {"a": 3, "b": 2}
    assert schema.validate(MappingProxyType({"a": 1, "b": 5})) == {"a": 1, "b": 5}


def test_validate_builds_nested_instances() -> None:
    def f(point: Point, box: Box, color: Color, pair: tuple[int, int], tags: set[str]) -> None:
        pass

    validated = function_schema(f).validate(
        {"point": {"x": "1"}, "box": {"width": 2}, "color": "blue", "pair": [1, "2"], "tags": ["a", "a"]}
    )
    assert validated == {
        "point": Point(x=1, y=0),
        "box": Box(width=2.0),
        "color": Color.BLUE,
        "pair": (1, 2),
        "tags": {"a"},
    }
    assert isinstance(validated["point"], Point)


def test_validate_mutable_default_is_not_shared() -> None:
    def f(items: list[int] = []) -> list[int]:  # noqa: B006 - the case under test
        return items

    schema = function_schema(f)
    schema.validate({})["items"].append(1)
    assert schema.validate({}) == {"items": []}


def test_validate_missing_and_wrong_type() -> None:
    with pytest.raises(ToolArgumentsError) as info:
        function_schema(add).validate({"b": "x"})
    message = str(info.value)
    assert message.startswith("Invalid arguments for tool 'add': ")
    assert "'a': field required" in message
    assert "'b': input should be a valid integer" in message
    assert "(got 'x')" in message
    assert [(e["loc"], e["type"]) for e in info.value.errors] == [(["a"], "missing"), (["b"], "int_parsing")]


def test_validate_rejects_extra_keys() -> None:
    with pytest.raises(ToolArgumentsError, match="'c': extra inputs are not permitted") as info:
        function_schema(add).validate({"a": 1, "c": 3})
    assert info.value.errors[0]["type"] == "extra_forbidden"


def test_validate_nested_error_uses_dotted_path() -> None:
    def f(point: Point, items: list[int]) -> None:
        pass

    with pytest.raises(ToolArgumentsError) as info:
        function_schema(f).validate({"point": {"x": "nope"}, "items": [1, "two"]})
    message = str(info.value)
    assert "'point.x': input should be a valid integer" in message
    assert "'items.1': input should be a valid integer" in message
    assert info.value.errors[0]["loc"] == ["point", "x"]


def test_validate_truncates_long_inputs_in_message() -> None:
    with pytest.raises(ToolArgumentsError) as info:
        function_schema(add).validate({"a": "z" * 500})
    assert len(str(info.value)) < 250
    assert "...)" in str(info.value)


@pytest.mark.parametrize("bad", [None, [1, 2], "a=1", 3])
def test_validate_rejects_non_mapping(bad: Any) -> None:
    with pytest.raises(ToolArgumentsError, match="Invalid arguments for tool 'add': expected a JSON object"):
        function_schema(add).validate(bad)


@given(a=st.integers(), b=st.integers())
def test_validate_accepts_any_int_as_number_or_string(a: int, b: int) -> None:
    schema = function_schema(add)
    assert schema.validate({"a": a, "b": str(b)}) == {"a": a, "b": b}


# -- bind -------------------------------------------------------------------------------------------


def test_bind_positional_only_keyword_and_injected() -> None:
    def f(a: int, ctx: RuntimeContext, /, b: int, *, c: int = 3, db: Db) -> tuple[Any, ...]:
        return (a, ctx, b, c, db)

    schema = function_schema(f)
    assert schema.parameters["required"] == ["a", "b"]
    ctx, db = RuntimeContext(), Db()
    args, kwargs = schema.bind(schema.validate({"a": "1", "b": 2}), {"ctx": ctx, "db": db})
    assert args == (1, ctx)
    assert kwargs == {"b": 2, "c": 3, "db": db}
    assert f(*args, **kwargs) == (1, ctx, 2, 3, db)


def test_bind_fills_skipped_positional_only_default() -> None:
    sentinel = Db()

    def f(a: int, db: Db = sentinel, ctx: RuntimeContext | None = None, /) -> tuple[Any, ...]:
        return (a, db, ctx)

    schema = function_schema(f)
    ctx = RuntimeContext()
    args, kwargs = schema.bind(schema.validate({"a": 1}), {"ctx": ctx})
    assert (args, kwargs) == ((1, sentinel, ctx), {})
    args, kwargs = schema.bind(schema.validate({"a": 1}), {})
    assert (args, kwargs) == ((1,), {})
    assert f(*args, **kwargs) == (1, sentinel, None)


# -- kinds of callables -----------------------------------------------------------------------------


async def async_add(a: int, b: int = 2) -> int:
    """Add two numbers.

    Args:
        a: First.
        b: Second.
    """
    return a + b


def sync_add(a: int, b: int = 2) -> int:
    """Add two numbers.

    Args:
        a: First.
        b: Second.
    """
    return a + b


async def test_async_function_works_like_sync() -> None:
    async_schema = function_schema(async_add)
    sync_schema = function_schema(sync_add)
    assert async_schema.parameters == sync_schema.parameters
    assert async_schema.description == sync_schema.description == "Add two numbers."
    args, kwargs = async_schema.bind(async_schema.validate({"a": "4"}), {})
    assert await async_add(*args, **kwargs) == 6


def test_bound_method_drops_self() -> None:
    class Calculator:
        def __init__(self, offset: int) -> None:
            self.offset = offset

        def shift(self, x: int) -> int:
            """Shift x by the offset."""
            return x + self.offset

    calc = Calculator(10)
    schema = function_schema(calc.shift)
    assert schema.name == "shift"
    assert props(schema) == {"x": {"type": "integer"}}
    args, kwargs = schema.bind(schema.validate({"x": 1}), {})
    assert calc.shift(*args, **kwargs) == 11


def test_parameter_names_shadowing_model_attributes_work() -> None:
    def f(json: str, model_config: int, _private: bool = False) -> None:
        pass

    schema = function_schema(f)
    assert list(props(schema)) == ["json", "model_config", "_private"]
    assert schema.validate({"json": "{}", "model_config": 1}) == {"json": "{}", "model_config": 1, "_private": False}
