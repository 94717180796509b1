"""`Case`: one question for an agent and what to expect back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentrt.errors import InvalidValueError
from agentrt.evals.score import Evaluator
from agentrt.evals.trajectory import ExpectedToolCall
from agentrt.message import Msg

__all__ = ["Case", "check_evaluators"]


@dataclass(frozen=True, slots=True)
class Case:
    """One question for the agent and what a good answer looks like.

    `input` is what the agent is called with (text, a `Msg` or a list of them). `expected_output`
    is read by `Equals`, `Contains` (text) and structured-output checks; `expected_tools` by
    `ToolTrajectory`: a list of ``{"name": ..., "args": {...}}`` with argument matchers, matched in
    order (``expected_tools_order="exact"``) or as a set (``"any"``). `evaluators` run on this case
    only, after the dataset's.
    """

    name: str
    input: str | Msg | Sequence[Msg]
    expected_output: Any = None
    expected_tools: Sequence[Any] | None = None
    """`ExpectedToolCall`s, ``{name, args}`` mappings or names; stored parsed (read `expected_calls`)."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    evaluators: Sequence[Evaluator] = ()
    expected_tools_order: Literal["exact", "any"] = "exact"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise InvalidValueError(f"Case.name must be a non-empty string, not {self.name!r}")
        _check_input(self.input)
        if self.expected_tools is not None:
            if isinstance(self.expected_tools, (str, Mapping)) or not isinstance(self.expected_tools, Sequence):
                raise InvalidValueError(f"Case.expected_tools must be a list, not {type(self.expected_tools).__name__}")
            object.__setattr__(self, "expected_tools", tuple(ExpectedToolCall.parse(t) for t in self.expected_tools))
        if self.expected_tools_order not in ("exact", "any"):
            raise InvalidValueError(
                f"Case.expected_tools_order must be 'exact' or 'any', not {self.expected_tools_order!r}"
            )
        if not isinstance(self.metadata, Mapping):
            raise InvalidValueError(f"Case.metadata must be a mapping, not {type(self.metadata).__name__}")
        object.__setattr__(self, "evaluators", check_evaluators(self.evaluators, f"case {self.name!r}"))
        if not isinstance(self.input, str) and not isinstance(self.input, Msg):
            object.__setattr__(self, "input", tuple(self.input))

    @property
    def expected_calls(self) -> tuple[ExpectedToolCall, ...] | None:
        """`expected_tools`, parsed."""
        return None if self.expected_tools is None else tuple(self.expected_tools)

    @property
    def input_text(self) -> str:
        """The input as text (the messages' texts joined)."""
        if isinstance(self.input, str):
            return self.input
        if isinstance(self.input, Msg):
            return self.input.text
        return "\n".join(m.text for m in self.input)

    def to_dict(self) -> dict[str, Any]:
        """The case as data (evaluators by name)."""
        from agentrt import _json

        data: dict[str, Any] = {"name": self.name, "input": _input_json(self.input)}
        if self.expected_output is not None:
            data["expected_output"] = _json.jsonable(self.expected_output)
        if self.expected_calls is not None:
            data["expected_tools"] = [t.to_spec() for t in self.expected_calls]
            data["expected_tools_order"] = self.expected_tools_order
        if self.metadata:
            data["metadata"] = _json.jsonable(self.metadata)
        if self.evaluators:
            data["evaluators"] = [e.name for e in self.evaluators]
        return data


def _input_json(value: str | Msg | Sequence[Msg]) -> Any:
    if isinstance(value, str):
        return value
    if isinstance(value, Msg):
        return value.to_dict()
    return [m.to_dict() for m in value]


def _check_input(value: Any) -> None:
    if isinstance(value, (str, Msg)):
        return
    if isinstance(value, Sequence) and value and all(isinstance(m, Msg) for m in value):
        return
    raise InvalidValueError(f"Case.input must be a string, a Msg or a non-empty list of Msg, not {value!r}")


def check_evaluators(value: Any, where: str) -> tuple[Evaluator, ...]:
    """`value` as a tuple of evaluators, or InvalidValueError naming `where`."""
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        raise InvalidValueError(f"the evaluators of {where} must be a list, not {type(value).__name__}")
    for item in value:
        if not isinstance(item, Evaluator):
            raise InvalidValueError(
                f"the evaluators of {where}: {item!r} is not an evaluator (name, threshold, async evaluate(ctx))"
            )
    return tuple(value)
