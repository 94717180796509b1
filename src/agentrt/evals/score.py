"""`Score`, `EvalContext` and the `Evaluator` protocol every evaluator follows."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from agentrt.errors import InvalidValueError
from agentrt.message import META_STRUCTURED, Msg, ToolUseBlock

if TYPE_CHECKING:
    from agentrt.evals.case import Case

__all__ = ["EvalContext", "Evaluator", "Score"]


@dataclass(frozen=True, slots=True)
class Score:
    """One evaluator's verdict on one run: a value in [0, 1] and why.

    ``value=None`` means *skipped*: the evaluator could not judge (e.g. `MaxCost` when the cost is
    unknown). A skipped score is left out of every mean and never fails a case.
    """

    value: float | None
    reason: str = ""
    name: str = ""
    threshold: float = 1.0
    """The value at or above which the score passes (set by the runner from the evaluator)."""

    def __post_init__(self) -> None:
        if self.value is not None:
            if isinstance(self.value, bool) or not isinstance(self.value, (int, float)) or math.isnan(self.value):
                raise InvalidValueError(f"Score.value must be a number in [0, 1] or None, not {self.value!r}")
            if not 0.0 <= self.value <= 1.0:
                raise InvalidValueError(f"Score.value must be in [0, 1], not {self.value!r}")
            object.__setattr__(self, "value", float(self.value))
        if not 0.0 <= self.threshold <= 1.0:
            raise InvalidValueError(f"Score.threshold must be in [0, 1], not {self.threshold!r}")

    @property
    def skipped(self) -> bool:
        """Whether the evaluator could not judge (value None)."""
        return self.value is None

    @property
    def passed(self) -> bool:
        """A skipped score passes; otherwise the value reaches the threshold."""
        return self.value is None or self.value >= self.threshold - 1e-12

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "reason": self.reason, "threshold": self.threshold}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Score:
        return cls(d.get("value"), str(d.get("reason", "")), str(d.get("name", "")), float(d.get("threshold", 1.0)))


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalContext:
    """What an evaluator sees of one run: the case, the reply, the event trace, latency and usage."""

    case: Case
    reply: Msg | None
    events: Sequence[Any] = ()
    """The run's `AgentEvent`s in order (their dict forms in a report loaded from JSON)."""
    latency: float = 0.0
    """Seconds from the call to the reply."""
    usage: Mapping[str, Any] | None = None
    """``input_tokens``, ``output_tokens``, ``total_tokens``, ``requests``, ``tool_calls`` and, when
    the model's price is known, ``cost_usd``; None when the agent reported nothing."""
    repetition: int = 0
    _calls: list[ToolUseBlock] | None = field(default=None, repr=False)

    @property
    def output(self) -> str:
        """The reply's text ("" without a reply)."""
        return self.reply.text if self.reply is not None else ""

    @property
    def structured(self) -> Any:
        """The reply's structured output (``call(..., output=...)``), or None."""
        return self.reply.metadata.get(META_STRUCTURED) if self.reply is not None else None

    @property
    def cost_usd(self) -> float | None:
        """The run's cost in US dollars, None when unknown."""
        value = (self.usage or {}).get("cost_usd")
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    @property
    def total_tokens(self) -> int | None:
        """Input plus output tokens, None when the agent reported no usage."""
        if not self.usage:
            return None
        total = self.usage.get("total_tokens")
        if isinstance(total, int):
            return total
        return int(self.usage.get("input_tokens", 0) or 0) + int(self.usage.get("output_tokens", 0) or 0)

    @property
    def tool_calls(self) -> list[ToolUseBlock]:
        """The tool calls the agent's model made during the run, in order (from the trace)."""
        from agentrt.evals.trajectory import tool_calls_from_events

        calls = self._calls
        if calls is None:
            calls = tool_calls_from_events(self.events)
            object.__setattr__(self, "_calls", calls)
        return calls


@runtime_checkable
class Evaluator(Protocol):
    """Anything with a `name`, a `threshold` and ``async evaluate(ctx) -> Score``."""

    name: str
    threshold: float

    async def evaluate(self, ctx: EvalContext) -> Score:
        """Score one run."""
        ...
