"""Structured output: a schema for the final answer, three ways to get it, validation and repair.

Modes: ``native`` (the provider's JSON-Schema response format), ``tool`` (a per-call
``generate_response`` tool the model must call; never registered on the shared toolkit) and
``prompted`` (the schema in the system prompt, JSON extracted from the text). ``auto`` picks
native when the model says it supports it, else tool when it has native tool calling, else
prompted. A reply that fails validation goes back to the model with the errors, up to
``output_retries`` times, then `StructuredOutputError` is raised.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agentrt import _json
from agentrt.errors import StructuredOutputError, UserError
from agentrt.model.base import ChatModel, ToolSchema

__all__ = ["GENERATE_RESPONSE", "OutputMode", "OutputSpec", "StructuredOutputError", "output_spec"]

OutputMode = Literal["auto", "native", "tool", "prompted"]
GENERATE_RESPONSE = "generate_response"
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """What the caller asked for and how this call will get it."""

    schema: dict[str, Any]
    name: str
    mode: Literal["native", "tool", "prompted"]
    validator: Callable[[Any], Any]
    """Validates parsed JSON; returns the JSON-native value to store (raises ValueError with the errors)."""

    def tool_schema(self) -> ToolSchema:
        """The synthetic tool of tool mode."""
        return ToolSchema(
            name=GENERATE_RESPONSE,
            description="Give the final answer in the required structure. Call this exactly once, when done.",
            parameters=self.schema,
        )

    def response_format(self) -> dict[str, Any]:
        """The response format of native mode."""
        return {"name": self.name, "schema": self.schema, "strict": False}

    def prompt(self) -> str:
        """The system-prompt instruction of prompted mode."""
        return (
            "When you give your final answer, reply with only a JSON value (no prose, no code fence) that "
            f"matches this JSON Schema:\n{_json.dumps(self.schema)}"
        )

    def parse_text(self, text: str) -> Any:
        """Extract and validate JSON from a text reply (code fences and broken JSON tolerated)."""
        candidate = text.strip()
        fenced = _FENCE.search(candidate)
        if fenced:
            candidate = fenced.group(1).strip()
        elif candidate and candidate[0] not in "{[":
            start = min((i for i in (candidate.find("{"), candidate.find("[")) if i >= 0), default=-1)
            if start >= 0:
                candidate = candidate[start:]
        try:
            value = _json.loads(candidate)
        except ValueError:
            try:
                import json_repair
            except ImportError:  # pragma: no cover - json-repair is a core dependency
                raise ValueError("the reply is not valid JSON") from None
            value = json_repair.loads(candidate)
            if value in ("", None) and candidate not in ("null", '""'):
                raise ValueError("the reply is not valid JSON") from None
        return self.validator(value)


def output_spec(output: Any, model: ChatModel, mode: OutputMode = "auto") -> OutputSpec:
    """Build the spec for `output` (a pydantic model, dataclass, TypedDict or JSON-Schema dict)."""
    if isinstance(output, Mapping):
        schema = dict(output)
        if not schema:
            raise UserError("output= JSON Schema must not be empty")
        name = str(schema.get("title") or "output")
        validator = _jsonschema_validator(schema)
    elif isinstance(output, type) or hasattr(output, "__origin__"):
        try:
            from pydantic import TypeAdapter, ValidationError
        except ImportError as exc:  # pragma: no cover - pydantic is a core dependency
            raise UserError("structured output needs pydantic") from exc
        try:
            adapter: Any = TypeAdapter(output)
            schema = adapter.json_schema()
        except Exception as exc:
            raise UserError(f"output={output!r} cannot be turned into a JSON Schema: {exc}") from None
        name = getattr(output, "__name__", "output")

        def validator(value: Any) -> Any:
            try:
                return adapter.dump_python(adapter.validate_python(value), mode="json")
            except ValidationError as exc:
                raise ValueError(_pydantic_errors(exc)) from None

    else:
        raise UserError(
            f"output must be a pydantic model, a dataclass, a TypedDict or a JSON-Schema dict, not {output!r}"
        )
    name = re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] or "output"
    chosen: Literal["native", "tool", "prompted"]
    if mode == "auto":
        # Instance attributes: wrappers (retry, fallback, text protocol) report their inner model's facts.
        if getattr(model, "supports_structured_output", False) is True:
            chosen = "native"
        elif getattr(model, "supports_native_tools", True) is True and not getattr(model, "tools_via_text", False):
            chosen = "tool"
        else:
            chosen = "prompted"
    elif mode in ("native", "tool", "prompted"):
        chosen = mode
    else:
        raise UserError(f"output_mode must be 'auto', 'native', 'tool' or 'prompted', not {mode!r}")
    if chosen == "tool" and schema.get("type") != "object":
        # Tool arguments are always an object: wrap other shapes in {"value": ...}.
        inner_schema, inner_validator = schema, validator
        schema = {"type": "object", "properties": {"value": inner_schema}, "required": ["value"]}

        def validator(value: Any) -> Any:
            if not isinstance(value, Mapping) or "value" not in value:
                raise ValueError("'value': field required")
            return inner_validator(value["value"])

    return OutputSpec(schema=schema, name=name, mode=chosen, validator=validator)


def _pydantic_errors(exc: Any) -> str:
    parts = []
    for err in exc.errors()[:10]:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(root)"
        parts.append(f"{loc!r}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


def _jsonschema_validator(schema: dict[str, Any]) -> Callable[[Any], Any]:
    try:
        import jsonschema
    except ImportError as exc:
        raise UserError("output= with a JSON-Schema dict needs the 'jsonschema' package") from exc
    try:
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise UserError(f"output= is not a valid JSON Schema: {exc.message}") from None
    checker = cls(schema)

    def validate(value: Any) -> Any:
        errors = sorted(checker.iter_errors(value), key=lambda e: list(e.path))
        if errors:
            raise ValueError(
                "; ".join(f"{'.'.join(str(p) for p in e.path) or '(root)'!r}: {e.message}" for e in errors[:10])
            )
        return value

    return validate


def jsonable_output(value: Any) -> Any:
    """JSON-native form of a validated value (dataclass instances included)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return _json.jsonable(value)
