"""The built-in evaluators: output text, structured output, tool trajectory, budgets, any function.

Each has a `name` (the key of its scores in reports), a `threshold` (the score at which a run passes,
1.0 unless said otherwise) and ``async evaluate(ctx) -> Score``. `reads` names the case fields an
evaluator uses, so a dataset adds no default evaluator for a field one of its evaluators reads.
"""

from __future__ import annotations

import collections.abc as cabc
import inspect
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from agentrt import _json
from agentrt.errors import InvalidValueError, UserError
from agentrt.evals.score import EvalContext, Evaluator, Score
from agentrt.evals.trajectory import ExpectedToolCall, match_trajectory

__all__ = [
    "Callable",
    "Contains",
    "Equals",
    "JsonSchema",
    "MaxCost",
    "MaxLatency",
    "MaxTokens",
    "PydanticModel",
    "Regex",
    "ToolTrajectory",
    "evaluator_from_spec",
]

_UNSET: Any = object()


def _threshold(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise InvalidValueError(f"threshold must be a number in [0, 1], not {value!r}")
    return float(value)


def _short(value: Any, limit: int = 120) -> str:
    text = value if isinstance(value, str) else _json.dumps(_json.jsonable(value))
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


class _Base:
    name: str = ""
    threshold: float = 1.0
    reads: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class Equals(_Base):
    """The reply equals a value (`value`, else the case's ``expected_output``).

    Text is compared after stripping surrounding whitespace (and case-insensitively with
    ``case_sensitive=False``); a non-text expected value is compared with the structured output,
    else with the reply's text parsed as JSON. Skipped when there is nothing to compare with.
    """

    def __init__(self, value: Any = _UNSET, *, case_sensitive: bool = True, name: str = "equals") -> None:
        self.value = value
        self.case_sensitive = case_sensitive
        self.name = name
        self.reads = ("expected_output",) if value is _UNSET else ()

    async def evaluate(self, ctx: EvalContext) -> Score:
        expected = ctx.case.expected_output if self.value is _UNSET else self.value
        if expected is None:
            return Score(None, "no expected output")
        if isinstance(expected, str):
            actual, want = ctx.output.strip(), expected.strip()
            if not self.case_sensitive:
                actual, want = actual.casefold(), want.casefold()
            if actual == want:
                return Score(1.0, "output equals the expected text")
            return Score(0.0, f"expected {_short(expected)}, got {_short(ctx.output)}")
        actual_value = ctx.structured
        if actual_value is None:
            try:
                actual_value = json.loads(ctx.output)
            except ValueError:
                return Score(0.0, f"expected {_short(expected)}, got text that is not JSON: {_short(ctx.output)}")
        if _json.jsonable(actual_value) == _json.jsonable(expected):
            return Score(1.0, "output equals the expected value")
        return Score(0.0, f"expected {_short(expected)}, got {_short(actual_value)}")


class Contains(_Base):
    """The reply's text contains a string (or each of several: partial credit per string found).

    Without `value`, the case's ``expected_output`` (text) is looked for.
    """

    def __init__(
        self,
        value: str | Sequence[str] | None = None,
        *,
        case_sensitive: bool = True,
        threshold: float = 1.0,
        name: str = "contains",
    ) -> None:
        if value is not None and not isinstance(value, str):
            value = list(value)
            if not value or not all(isinstance(v, str) for v in value):
                raise InvalidValueError("Contains(value) takes a string or a non-empty list of strings")
        self.value = value
        self.case_sensitive = case_sensitive
        self.threshold = _threshold(threshold)
        self.name = name
        self.reads = ("expected_output",) if value is None else ()

    async def evaluate(self, ctx: EvalContext) -> Score:
        wanted = self.value if self.value is not None else ctx.case.expected_output
        if wanted is None:
            return Score(None, "no expected output")
        raw: list[Any] = (
            [wanted] if isinstance(wanted, str) else list(wanted) if isinstance(wanted, (list, tuple)) else [None]
        )
        needles = [n for n in raw if isinstance(n, str)]
        if len(needles) != len(raw):
            return Score(None, "the expected output is not text")
        haystack = ctx.output if self.case_sensitive else ctx.output.casefold()
        missing = [n for n in needles if (n if self.case_sensitive else n.casefold()) not in haystack]
        found = len(needles) - len(missing)
        if not missing:
            return Score(1.0, f"output contains {', '.join(map(_short, needles))}")
        return Score(found / len(needles), f"output lacks {', '.join(map(_short, missing))}")


class Regex(_Base):
    """The reply's text matches a regular expression (searched; ``full_match=True`` for the whole text)."""

    def __init__(self, pattern: str, *, flags: int = 0, full_match: bool = False, name: str = "regex") -> None:
        try:
            self.pattern = re.compile(pattern, flags)
        except (re.error, TypeError) as exc:
            raise InvalidValueError(f"Regex: invalid pattern {pattern!r}: {exc}") from None
        self.full_match = full_match
        self.name = name

    async def evaluate(self, ctx: EvalContext) -> Score:
        text = ctx.output
        found = self.pattern.fullmatch(text) if self.full_match else self.pattern.search(text)
        if found:
            return Score(1.0, f"matched {found.group(0)[:80]!r}")
        return Score(0.0, f"/{self.pattern.pattern}/ does not match {_short(text)}")


def _structured_or_json(ctx: EvalContext) -> tuple[bool, Any]:
    if ctx.structured is not None:
        return True, ctx.structured
    try:
        return True, json.loads(ctx.output)
    except ValueError:
        return False, None


class JsonSchema(_Base):
    """The structured output (else the reply's text parsed as JSON) is valid against a JSON Schema."""

    def __init__(self, schema: Mapping[str, Any], *, name: str = "json_schema") -> None:
        from jsonschema import Draft202012Validator, SchemaError

        try:
            Draft202012Validator.check_schema(dict(schema))
        except SchemaError as exc:
            raise InvalidValueError(f"JsonSchema: invalid schema: {exc.message}") from None
        self.schema = dict(schema)
        self._validator = Draft202012Validator(self.schema)
        self.name = name

    async def evaluate(self, ctx: EvalContext) -> Score:
        ok, value = _structured_or_json(ctx)
        if not ok:
            return Score(0.0, f"no structured output and the text is not JSON: {_short(ctx.output)}")
        errors = sorted(self._validator.iter_errors(value), key=lambda e: list(e.path))
        if not errors:
            return Score(1.0, "valid against the schema")
        shown = "; ".join(f"{'/'.join(map(str, e.path)) or '(root)'}: {e.message}" for e in errors[:3])
        return Score(0.0, f"{len(errors)} schema error(s): {shown}")


class PydanticModel(_Base):
    """The structured output (else the reply's text as JSON) validates into a pydantic model (or any type).

    With ``compare_expected=True`` the validated value must also equal the case's ``expected_output``
    validated the same way.
    """

    def __init__(self, model: Any, *, compare_expected: bool = False, name: str | None = None) -> None:
        from pydantic import TypeAdapter

        self.model = model
        self._adapter: Any = TypeAdapter(model)
        self.compare_expected = compare_expected
        self.name = name or f"pydantic:{getattr(model, '__name__', 'model')}"
        self.reads = ("expected_output",) if compare_expected else ()

    async def evaluate(self, ctx: EvalContext) -> Score:
        from pydantic import ValidationError

        ok, value = _structured_or_json(ctx)
        if not ok:
            return Score(0.0, f"no structured output and the text is not JSON: {_short(ctx.output)}")
        try:
            parsed = self._adapter.validate_python(value)
        except ValidationError as exc:
            return Score(0.0, f"{exc.error_count()} validation error(s): {_validation_summary(exc)}")
        if not self.compare_expected:
            return Score(1.0, f"valid {self.name.removeprefix('pydantic:')}")
        if ctx.case.expected_output is None:
            return Score(None, "no expected output")
        try:
            expected = self._adapter.validate_python(ctx.case.expected_output)
        except ValidationError as exc:
            return Score(None, f"the expected output is not a valid {self.name}: {_validation_summary(exc)}")
        if parsed == expected:
            return Score(1.0, "equals the expected value")
        return Score(0.0, f"expected {_short(_json.jsonable(expected))}, got {_short(_json.jsonable(parsed))}")


def _validation_summary(exc: Any) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in exc.errors()[:3])


class ToolTrajectory(_Base):
    """The tool calls the agent made match the expected ones (`expected`, else the case's ``expected_tools``).

    ``order="exact"`` (in order) or ``"any"`` (as a set; default: the case's ``expected_tools_order``);
    partial credit is the fraction matched; extra calls count against the score unless `allow_extra`.
    """

    def __init__(
        self,
        expected: Sequence[Any] | None = None,
        *,
        order: Literal["exact", "any"] | None = None,
        allow_extra: bool = False,
        threshold: float = 1.0,
        name: str = "tool_trajectory",
    ) -> None:
        self.expected = None if expected is None else tuple(ExpectedToolCall.parse(e) for e in expected)
        if order not in (None, "exact", "any"):
            raise InvalidValueError(f"ToolTrajectory(order=) is 'exact' or 'any', not {order!r}")
        self.order = order
        self.allow_extra = allow_extra
        self.threshold = _threshold(threshold)
        self.name = name
        self.reads = ("expected_tools",) if expected is None else ()

    async def evaluate(self, ctx: EvalContext) -> Score:
        expected = self.expected if self.expected is not None else ctx.case.expected_calls
        if expected is None:
            return Score(None, "no expected tools")
        order = self.order or ctx.case.expected_tools_order
        result = match_trajectory(list(expected), ctx.tool_calls, order=order, allow_extra=self.allow_extra)
        return Score(result.score, result.reason())


class _Budget(_Base):
    unit: ClassVar[str] = ""

    def __init__(self, limit: float, *, name: str) -> None:
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit < 0:
            raise InvalidValueError(f"{type(self).__name__} takes a number >= 0, not {limit!r}")
        self.limit = limit
        self.name = name

    def _measure(self, ctx: EvalContext) -> float | None:
        raise NotImplementedError

    async def evaluate(self, ctx: EvalContext) -> Score:
        value = self._measure(ctx)
        if value is None:
            return Score(None, f"{self.unit} unknown")
        if value <= self.limit:
            return Score(1.0, f"{self.unit} {value:g} <= {self.limit:g}")
        return Score(0.0, f"{self.unit} {value:g} > {self.limit:g}")


class MaxLatency(_Budget):
    """The run took at most `seconds`."""

    unit = "latency (s)"

    def __init__(self, seconds: float, *, name: str = "max_latency") -> None:
        super().__init__(seconds, name=name)

    def _measure(self, ctx: EvalContext) -> float | None:
        return round(ctx.latency, 6)


class MaxCost(_Budget):
    """The run cost at most `usd`. Skipped (value None) when the cost is unknown (an unpriced model)."""

    unit = "cost (USD)"

    def __init__(self, usd: float, *, name: str = "max_cost") -> None:
        super().__init__(usd, name=name)

    def _measure(self, ctx: EvalContext) -> float | None:
        return ctx.cost_usd


class MaxTokens(_Budget):
    """The run spent at most `tokens` (input plus output). Skipped when the agent reported no usage."""

    unit = "tokens"

    def __init__(self, tokens: int, *, name: str = "max_tokens") -> None:
        super().__init__(tokens, name=name)

    def _measure(self, ctx: EvalContext) -> float | None:
        total = ctx.total_tokens
        return None if total is None else float(total)


class Callable(_Base):
    """Any function of the `EvalContext` (sync or async) as an evaluator.

    It returns a bool, a float in [0, 1], a `Score`, or None (skipped).
    """

    def __init__(
        self, fn: cabc.Callable[[EvalContext], Any], *, name: str | None = None, threshold: float = 1.0
    ) -> None:
        if not callable(fn):
            raise InvalidValueError(f"Callable takes a function, not {fn!r}")
        self.fn = fn
        self.name = name or str(getattr(fn, "__name__", "callable"))
        self.threshold = _threshold(threshold)

    async def evaluate(self, ctx: EvalContext) -> Score:
        result = self.fn(ctx)
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, Score):
            return result
        if result is None:
            return Score(None, "skipped")
        if isinstance(result, bool):
            return Score(1.0 if result else 0.0, "true" if result else "false")
        if isinstance(result, (int, float)):
            return Score(result, f"{result:g}")
        raise InvalidValueError(
            f"evaluator {self.name!r} returned {type(result).__name__}: expected bool, float or Score"
        )


# -- specs in dataset files ------------------------------------------------------------------------
def _one_or_kwargs(factory: Any, arg: str) -> cabc.Callable[[Any], Evaluator]:
    def build(value: Any) -> Evaluator:
        if isinstance(value, Mapping):
            return factory(**value)  # type: ignore[no-any-return]
        return factory(**{arg: value})  # type: ignore[no-any-return]

    return build


def _judge(value: Any) -> Evaluator:
    from agentrt.evals.judge import LLMJudge
    from agentrt.model import model_from_id

    if not isinstance(value, Mapping) or "model" not in value or "rubric" not in value:
        raise UserError("llm_judge takes {model: PROVIDER:MODEL, rubric: ..., threshold?: ...}")
    options = dict(value)
    return LLMJudge(model_from_id(str(options.pop("model"))), **options)


def _bare(factory: Any) -> cabc.Callable[[Any], Evaluator]:
    def build(value: Any) -> Evaluator:
        if value is None or value is True:
            return factory()  # type: ignore[no-any-return]
        if isinstance(value, Mapping):
            return factory(**value)  # type: ignore[no-any-return]
        raise UserError(f"{factory.__name__} takes options as a mapping, not {value!r}")

    return build


_SPECS: dict[str, cabc.Callable[[Any], Evaluator]] = {
    "equals": lambda v: Equals() if v is None or v is True else _one_or_kwargs(Equals, "value")(v),
    "contains": lambda v: Contains() if v is None or v is True else _one_or_kwargs(Contains, "value")(v),
    "regex": _one_or_kwargs(Regex, "pattern"),
    "json_schema": lambda v: JsonSchema(**v) if isinstance(v, Mapping) and "schema" in v else JsonSchema(v),
    "tool_trajectory": _bare(ToolTrajectory),
    "max_latency": _one_or_kwargs(MaxLatency, "seconds"),
    "max_cost": _one_or_kwargs(MaxCost, "usd"),
    "max_tokens": _one_or_kwargs(MaxTokens, "tokens"),
    "llm_judge": _judge,
}


def evaluator_from_spec(spec: Any) -> Evaluator:
    """An evaluator from its dataset-file form.

    ``"equals"``, ``{contains: "Paris"}`` or ``{contains: {value: paris, case_sensitive: false}}``;
    names: equals, contains, regex, json_schema, tool_trajectory, max_latency, max_cost, max_tokens,
    llm_judge.
    """
    if isinstance(spec, str):
        kind, value = spec, None
    elif isinstance(spec, Mapping) and len(spec) == 1:
        ((kind, value),) = spec.items()
    else:
        raise UserError(f"an evaluator is a name or a mapping of one name to its options, not {spec!r}")
    build = _SPECS.get(str(kind))
    if build is None:
        raise UserError(f"unknown evaluator {kind!r}; known: {', '.join(sorted(_SPECS))}")
    if value is None and kind not in ("equals", "contains", "tool_trajectory"):
        raise UserError(f"evaluator {kind!r} needs a value")
    try:
        return build(value)
    except TypeError as exc:
        raise UserError(f"evaluator {kind!r}: {exc}") from None
