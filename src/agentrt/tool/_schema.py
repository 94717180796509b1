"""Turn a Python function into a tool description for an LLM, plus a fast validator for its arguments.

`function_schema` reads a function's signature, type hints and docstring once, at definition time, and
returns a `FunctionSchema`: the tool's name and description, the JSON Schema of the parameters the model
fills in, the parameters the runtime injects from the `RuntimeContext` instead, and a pydantic validator
(built once over a TypedDict of the visible parameters) that `FunctionSchema.validate` runs on every call.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, NotRequired, Required, Union

import docstring_parser
import pydantic
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from typing_extensions import TypedDict, is_typeddict  # pydantic needs typing_extensions' TypedDict on 3.11

from agentrt.context import RuntimeContext
from agentrt.errors import ToolArgumentsError, ToolDefinitionError

__all__ = ["FunctionSchema", "Inject", "function_schema"]

_EMPTY: Any = inspect.Parameter.empty
_MAX_REPORTED_ERRORS = 10
_MAX_INPUT_REPR = 80
_VARIADIC = {
    inspect.Parameter.VAR_POSITIONAL: "variadic (*{name})",
    inspect.Parameter.VAR_KEYWORD: "variadic (**{name})",
}
# The functional TypedDict form takes a runtime dict of fields, which type checkers reject.
_make_typeddict: Any = TypedDict


class Inject:
    """Marker forcing a parameter to be injected from the `RuntimeContext` instead of filled by the model.

    Write ``db: Annotated[Database, Inject]``; at call time the runtime passes ``ctx.get(Database)``.
    Parameters annotated `RuntimeContext`, or with a plain class pydantic cannot describe in JSON Schema,
    are injected without the marker.
    """


@dataclass(frozen=True, slots=True)
class FunctionSchema:
    """What the model sees of a tool function, and how to validate and bind the arguments it sends.

    Attributes:
        name: The tool name.
        description: The tool description (the docstring without its parameter sections).
        parameters: JSON Schema of the model-visible parameters: an object with ``properties``,
            ``required``, ``additionalProperties: false`` and ``$defs`` when nested types need them.
        injected: Parameter name -> type to fetch with ``ctx.get(type)`` at call time (`RuntimeContext` for
            parameters that take the context itself, whatever subclass they are annotated with).
        injected_defaults: Default values of the injected parameters that have one.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    injected: Mapping[str, type] = field(default_factory=dict)
    injected_defaults: Mapping[str, Any] = field(default_factory=dict)
    _validator: Any = field(default=None, repr=False, compare=False)
    _positional: tuple[tuple[str, Any], ...] = field(default=(), repr=False, compare=False)
    _keyword: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    def validate(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Validate and coerce the arguments the model sent.

        Args:
            args: The decoded JSON object of arguments.

        Returns:
            The keyword arguments for the visible parameters, defaults filled in and nested values
            converted to the types the function expects.

        Raises:
            ToolArgumentsError: `args` is not a mapping, or a field is missing, unknown or invalid; the
                message names each bad field by its dotted path and is meant for the model.
        """
        if not isinstance(args, dict):
            if not isinstance(args, Mapping):
                raise ToolArgumentsError(
                    f"Invalid arguments for tool {self.name!r}: expected a JSON object of named arguments, "
                    f"got {type(args).__name__}",
                    errors=[{"loc": [], "msg": "input should be an object", "type": "dict_type"}],
                )
            args = dict(args)
        if self._validator is None:
            return dict(args)
        try:
            validated: dict[str, Any] = self._validator.validate_python(args)
        except ValidationError as exc:
            raise _arguments_error(self.name, exc) from None
        return validated

    def bind(self, validated: Mapping[str, Any], injected: Mapping[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Build the ``(args, kwargs)`` to call the function with.

        Positional-only parameters go into ``args`` (a skipped one before a given one gets its default);
        the others go into ``kwargs``. A parameter absent from both mappings is left to its default.

        Args:
            validated: The output of `validate`.
            injected: Injected parameter name -> the value resolved from the context.

        Returns:
            The positional and keyword arguments for ``fn(*args, **kwargs)``.
        """
        if self._keyword is None:
            return (), {**validated, **injected}
        args: list[Any] = []
        pending: list[Any] = []
        for name, default in self._positional:
            if name in validated:
                value = validated[name]
            elif name in injected:
                value = injected[name]
            elif default is _EMPTY:
                break  # cannot be skipped: calling reports the missing argument
            else:
                pending.append(default)
                continue
            if pending:
                args.extend(pending)
                pending.clear()
            args.append(value)
        kwargs: dict[str, Any] = {}
        for name in self._keyword:
            if name in validated:
                kwargs[name] = validated[name]
            elif name in injected:
                kwargs[name] = injected[name]
        return tuple(args), kwargs


def function_schema(
    fn: Callable[..., Any], *, name: str | None = None, description: str | None = None
) -> FunctionSchema:
    """Describe a sync or async function as a tool.

    Args:
        fn: The function (or bound method, or other callable).
        name: The tool name; defaults to ``fn.__name__``.
        description: The tool description; defaults to the docstring's summary and body.

    Returns:
        The tool's `FunctionSchema`.

    Raises:
        ToolDefinitionError: `fn` is not callable, has ``*args``/``**kwargs``, or a parameter type cannot
            be described in JSON Schema nor injected.
    """
    if not callable(fn):
        raise ToolDefinitionError(f"tool {name or repr(fn)!r}: expected a function or other callable, got {fn!r}")
    target = fn.func if isinstance(fn, functools.partial) else fn
    tool_name = name or _callable_name(target)
    signature = _signature(fn, tool_name)
    doc = _parse_docstring(inspect.getdoc(target))
    param_docs = {p.arg_name: p.description.strip() for p in doc.params if p.description} if doc else {}
    if description is None:
        description = (doc.description or "").strip() if doc else ""

    fields: dict[str, Any] = {}
    injected: dict[str, type] = {}
    injected_defaults: dict[str, Any] = {}
    positional: list[tuple[str, Any]] = []
    keyword: list[str] = []
    for param in signature.parameters.values():
        if param.kind in _VARIADIC:
            why = _VARIADIC[param.kind].format(name=param.name)
            raise ToolDefinitionError(
                f"tool {tool_name!r}: parameter {param.name!r} is {why}; tools take named parameters only"
            )
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            positional.append((param.name, param.default))
        else:
            keyword.append(param.name)
        annotation = Any if param.annotation is _EMPTY else param.annotation
        inject_type = _injected_type(tool_name, param.name, annotation)
        if inject_type is not None:
            injected[param.name] = inject_type
            if param.default is not _EMPTY:
                injected_defaults[param.name] = param.default
        else:
            fields[param.name] = _field(param, annotation)

    args_type = _make_typeddict(f"{tool_name}_arguments", fields)
    args_type.__pydantic_config__ = ConfigDict(extra="forbid")
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(args_type)
        raw_schema = adapter.json_schema()
    except pydantic.PydanticUserError as exc:  # per-parameter checks make this unlikely
        raise ToolDefinitionError(f"tool {tool_name!r}: {_first_line(exc)}") from exc

    return FunctionSchema(
        name=tool_name,
        description=description,
        parameters=_clean_schema(raw_schema, param_docs),
        injected=types.MappingProxyType(injected),
        injected_defaults=types.MappingProxyType(injected_defaults),
        _validator=adapter.validator,
        _positional=tuple(positional),
        _keyword=tuple(keyword),
    )


# -- definition time -------------------------------------------------------------------------------


_PROVIDER_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _callable_name(fn: Any) -> str:
    """The function's name as a tool name; a lambda (or any name providers reject) needs an explicit one."""
    name = getattr(fn, "__name__", None)
    name = name if isinstance(name, str) else type(fn).__name__
    if not _PROVIDER_NAME.fullmatch(name):
        raise ToolDefinitionError(
            f"cannot name a tool after {name!r} (providers accept only letters, digits, '_' and '-', up to 64 "
            "characters): pass a name, e.g. tool(fn, name='lookup') or Tool.from_function(fn, name='lookup')"
        )
    return name


def _signature(fn: Callable[..., Any], tool_name: str) -> inspect.Signature:
    try:
        return inspect.signature(fn, eval_str=True)
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(f"tool {tool_name!r}: cannot read the signature of {fn!r} ({exc})") from exc
    except Exception as exc:  # a string annotation failed to evaluate
        culprit = _unresolvable_parameter(fn)
        where = f"the annotation of parameter {culprit!r}" if culprit else "a type annotation"
        raise ToolDefinitionError(
            f"tool {tool_name!r}: cannot resolve {where} ({type(exc).__name__}: {exc}); "
            "annotations must name types importable from the function's module"
        ) from exc


def _unresolvable_parameter(fn: Callable[..., Any]) -> str | None:
    """The first parameter whose string annotation does not evaluate in the function's globals."""
    target: Any = fn.func if isinstance(fn, functools.partial) else fn
    target = getattr(target, "__func__", target)
    if not inspect.isfunction(target) and not inspect.isclass(target):
        target = type(target).__call__
    globalns = getattr(inspect.unwrap(target), "__globals__", {})
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    for param in params:
        if isinstance(param.annotation, str):
            try:
                eval(param.annotation, globalns)  # what inspect.signature(eval_str=True) does
            except Exception:  # any failure marks the culprit
                return param.name
    return None


def _parse_docstring(doc: str | None) -> docstring_parser.Docstring | None:
    if not doc:
        return None
    try:
        return docstring_parser.parse(doc)
    except docstring_parser.ParseError:
        parsed = docstring_parser.Docstring()
        parsed.short_description = doc.strip()
        return parsed


def _strip_annotated(annotation: Any) -> tuple[Any, tuple[Any, ...]]:
    if typing.get_origin(annotation) is Annotated:
        return annotation.__origin__, annotation.__metadata__
    return annotation, ()


def _strip_optional(annotation: Any) -> Any:
    """``X`` for ``Optional[X]`` / ``X | None``, else the annotation unchanged."""
    if typing.get_origin(annotation) in (Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return members[0]
    return annotation


def _is_plain_class(annotation: Any) -> bool:
    return isinstance(annotation, type) and typing.get_origin(annotation) is None


def _is_data_class(cls: type) -> bool:
    """Types meant to carry model data: a schema failure in them is a mistake, not an injection."""
    return issubclass(cls, (BaseModel, enum.Enum)) or dataclasses.is_dataclass(cls) or is_typeddict(cls)


def _injected_type(tool_name: str, param_name: str, annotation: Any) -> type | None:
    """The type to inject for this parameter, or None if the model fills it in.

    Raises ToolDefinitionError when the annotation can neither be described in JSON Schema nor injected.
    """
    base, metadata = _strip_annotated(annotation)
    if any(m is Inject or isinstance(m, Inject) for m in metadata):
        inner = _strip_optional(base)
        if not _is_plain_class(inner):
            raise ToolDefinitionError(
                f"tool {tool_name!r}: parameter {param_name!r} is marked Inject but its type {inner!r} is "
                "not a class; injected values are looked up in the RuntimeContext by class"
            )
        return typing.cast(type, inner)
    inner = _strip_optional(base)
    if _is_plain_class(inner) and issubclass(inner, RuntimeContext):
        # The context itself: `ctx.get(RuntimeContext)` returns it, whatever its class.
        return RuntimeContext
    try:
        TypeAdapter(annotation).json_schema()
    except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticInvalidForJsonSchema) as exc:
        if _is_plain_class(inner) and not _is_data_class(inner):
            return typing.cast(type, inner)
        raise ToolDefinitionError(
            f"tool {tool_name!r}: parameter {param_name!r} has type {annotation!r}, which cannot be described "
            f"in JSON Schema ({_first_line(exc)}); use JSON-like types, pydantic models, dataclasses or "
            "TypedDicts, or mark it Annotated[T, Inject] to take it from the RuntimeContext"
        ) from exc
    except pydantic.PydanticUserError as exc:
        raise ToolDefinitionError(
            f"tool {tool_name!r}: parameter {param_name!r} has an invalid type {annotation!r}: {_first_line(exc)}"
        ) from exc
    return None


def _field(param: inspect.Parameter, annotation: Any) -> Any:
    """The TypedDict field type for a visible parameter, carrying its default."""
    default = param.default
    if isinstance(default, FieldInfo):
        return (Required if default.is_required() else NotRequired)[Annotated[annotation, default]]
    if default is _EMPTY:
        required = FieldInfo.from_annotation(annotation).is_required()
        return (Required if required else NotRequired)[annotation]
    return NotRequired[Annotated[annotation, Field(default=default)]]


def _clean_schema(raw: dict[str, Any], param_docs: Mapping[str, str]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for prop_name, prop in raw.get("properties", {}).items():
        prop = {k: v for k, v in prop.items() if k != "title"}
        if "description" not in prop and prop_name in param_docs:
            prop["description"] = param_docs[prop_name]
        properties[prop_name] = prop
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": list(raw.get("required", [])),
        "additionalProperties": False,
    }
    if "$defs" in raw:
        schema["$defs"] = raw["$defs"]
    return schema


def _first_line(exc: BaseException) -> str:
    """The gist of a pydantic error: its first sentence, without the hints about pydantic config."""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    return text.splitlines()[0].split(". ")[0].rstrip(".")


# -- call time -------------------------------------------------------------------------------------


def _arguments_error(tool_name: str, exc: ValidationError) -> ToolArgumentsError:
    errors = exc.errors(include_url=False, include_context=False)
    parts: list[str] = []
    for error in errors[:_MAX_REPORTED_ERRORS]:
        path = ".".join(str(part) for part in error["loc"]) or "arguments"
        msg = error["msg"]
        msg = msg[:1].lower() + msg[1:]
        if error["type"] not in ("missing", "extra_forbidden"):
            shown = repr(error["input"])
            if len(shown) > _MAX_INPUT_REPR:
                shown = shown[: _MAX_INPUT_REPR - 3] + "..."
            msg = f"{msg} (got {shown})"
        parts.append(f"{path!r}: {msg}")
    if len(errors) > _MAX_REPORTED_ERRORS:
        parts.append(f"and {len(errors) - _MAX_REPORTED_ERRORS} more errors")
    details: list[dict[str, object]] = [
        {"loc": list(error["loc"]), "msg": error["msg"], "type": error["type"]} for error in errors
    ]
    return ToolArgumentsError(f"Invalid arguments for tool {tool_name!r}: {'; '.join(parts)}", errors=details)
