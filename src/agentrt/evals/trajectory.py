"""Expected tool calls, argument matchers and the trajectory matcher (pure functions).

An expected call is ``{"name": ..., "args": {...}}``; each listed argument is checked with a matcher
and arguments that are not listed are ignored. A matcher is an exact value, ``{"regex": "..."}``
(searched in the argument turned to text) or ``{"any": true}`` (present, whatever its value); a
mapping of any other shape is an exact value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentrt import _json
from agentrt.errors import InvalidValueError
from agentrt.message import ToolUseBlock

__all__ = [
    "ArgMatcher",
    "ExpectedToolCall",
    "TrajectoryMatch",
    "match_trajectory",
    "tool_calls_from_events",
]

Order = Literal["exact", "any"]


@dataclass(frozen=True, slots=True)
class ArgMatcher:
    """How one argument is checked: ``kind`` is ``"exact"``, ``"regex"`` or ``"any"``."""

    kind: Literal["exact", "regex", "any"]
    value: Any = None
    _pattern: re.Pattern[str] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def parse(cls, spec: Any) -> ArgMatcher:
        """The matcher a dataset value stands for (see the module docstring)."""
        if isinstance(spec, ArgMatcher):
            return spec
        if isinstance(spec, Mapping) and len(spec) == 1 and "regex" in spec:
            pattern = spec["regex"]
            if not isinstance(pattern, str):
                raise InvalidValueError(f"a regex matcher needs a string pattern, not {pattern!r}")
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise InvalidValueError(f"invalid regex {pattern!r}: {exc}") from None
            return cls("regex", pattern, compiled)
        if isinstance(spec, Mapping) and len(spec) == 1 and "any" in spec:
            if spec["any"] is not True:
                raise InvalidValueError(f"an any matcher is written {{any: true}}, not {dict(spec)!r}")
            return cls("any")
        return cls("exact", spec)

    def matches(self, present: bool, actual: Any) -> bool:
        if not present:
            return False
        if self.kind == "any":
            return True
        if self.kind == "regex":
            assert self._pattern is not None
            text = actual if isinstance(actual, str) else _json.dumps(actual)
            return self._pattern.search(text) is not None
        return bool(_json.jsonable(actual) == _json.jsonable(self.value))

    def describe(self) -> str:
        if self.kind == "any":
            return "<any>"
        if self.kind == "regex":
            return f"/{self.value}/"
        return _json.dumps(_json.jsonable(self.value))

    def to_spec(self) -> Any:
        if self.kind == "any":
            return {"any": True}
        if self.kind == "regex":
            return {"regex": self.value}
        return _json.jsonable(self.value)


@dataclass(frozen=True, slots=True)
class ExpectedToolCall:
    """One expected tool call: its name and matchers for some of its arguments."""

    name: str
    args: Mapping[str, ArgMatcher] = field(default_factory=dict)

    @classmethod
    def parse(cls, spec: Any) -> ExpectedToolCall:
        """From ``"name"``, ``{"name": ..., "args": {...}}`` or an `ExpectedToolCall`."""
        if isinstance(spec, ExpectedToolCall):
            return spec
        if isinstance(spec, str) and spec:
            return cls(spec)
        if not isinstance(spec, Mapping):
            raise InvalidValueError(f"an expected tool call is a name or {{name, args}}, not {spec!r}")
        unknown = set(spec) - {"name", "args"}
        if unknown:
            raise InvalidValueError(f"an expected tool call has only 'name' and 'args', not {sorted(unknown)}")
        name = spec.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidValueError(f"an expected tool call needs a non-empty 'name', not {name!r}")
        args = spec.get("args") or {}
        if not isinstance(args, Mapping):
            raise InvalidValueError(f"the 'args' of expected tool call {name!r} must be a mapping, not {args!r}")
        return cls(name, {str(k): ArgMatcher.parse(v) for k, v in args.items()})

    def matches(self, call: ToolUseBlock) -> bool:
        if call.name != self.name:
            return False
        return all(m.matches(key in call.input, call.input.get(key)) for key, m in self.args.items())

    def describe(self) -> str:
        inner = ", ".join(f"{k}={m.describe()}" for k, m in self.args.items())
        return f"{self.name}({inner})"

    def to_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"name": self.name}
        if self.args:
            spec["args"] = {k: m.to_spec() for k, m in self.args.items()}
        return spec


@dataclass(frozen=True, slots=True)
class TrajectoryMatch:
    """The outcome of matching actual tool calls against expected ones."""

    matched: int
    expected: int
    actual: int
    missing: tuple[ExpectedToolCall, ...]
    extra: tuple[ToolUseBlock, ...]
    score: float

    def reason(self) -> str:
        if not self.missing and not self.extra:
            return f"all {self.expected} expected tool call(s) made"
        parts = [f"{self.matched}/{self.expected} expected tool call(s) matched"]
        if self.missing:
            parts.append("missing: " + "; ".join(e.describe() for e in self.missing))
        if self.extra:
            parts.append("unexpected: " + "; ".join(_describe_call(c) for c in self.extra))
        return ". ".join(parts)


def _describe_call(call: ToolUseBlock) -> str:
    args = ", ".join(f"{k}={_json.dumps(_json.jsonable(v))}" for k, v in call.input.items())
    return f"{call.name}({args})"


def match_trajectory(
    expected: Sequence[ExpectedToolCall],
    actual: Sequence[ToolUseBlock],
    *,
    order: Order = "exact",
    allow_extra: bool = False,
) -> TrajectoryMatch:
    """Match `actual` calls against `expected`.

    ``order="exact"``: the longest run of expected calls matched in order (a common subsequence);
    ``order="any"``: the largest one-to-one matching, in any order. The score is the matched count
    over the larger of the two lists (over the expected count with `allow_extra`), 1.0 when both are
    empty: 1.0 exactly when every expected call was made (in order, for ``"exact"``) and, unless
    `allow_extra`, nothing else was.
    """
    if order == "exact":
        pairs = _lcs_pairs(expected, actual)
    elif order == "any":
        pairs = _bipartite_pairs(expected, actual)
    else:
        raise InvalidValueError(f"order must be 'exact' or 'any', not {order!r}")
    used_e = {e for e, _ in pairs}
    used_a = {a for _, a in pairs}
    missing = tuple(e for i, e in enumerate(expected) if i not in used_e)
    extra = tuple(a for j, a in enumerate(actual) if j not in used_a)
    denominator = len(expected) if allow_extra else max(len(expected), len(actual))
    score = 1.0 if denominator == 0 else len(pairs) / denominator
    return TrajectoryMatch(
        matched=len(pairs),
        expected=len(expected),
        actual=len(actual),
        missing=missing,
        extra=() if allow_extra else extra,
        score=score,
    )


def _lcs_pairs(expected: Sequence[ExpectedToolCall], actual: Sequence[ToolUseBlock]) -> list[tuple[int, int]]:
    n, m = len(expected), len(actual)
    ok = [[expected[i].matches(actual[j]) for j in range(m)] for i in range(n)]
    table = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            if ok[i][j]:
                table[i][j] = table[i + 1][j + 1] + 1
            else:
                table[i][j] = max(table[i + 1][j], table[i][j + 1])
    pairs: list[tuple[int, int]] = []
    i = j = 0
    while i < n and j < m:
        if ok[i][j] and table[i][j] == table[i + 1][j + 1] + 1:
            pairs.append((i, j))
            i += 1
            j += 1
        elif table[i + 1][j] >= table[i][j + 1]:
            i += 1
        else:
            j += 1
    return pairs


def _bipartite_pairs(expected: Sequence[ExpectedToolCall], actual: Sequence[ToolUseBlock]) -> list[tuple[int, int]]:
    """A maximum matching (Kuhn's augmenting paths; the lists are short)."""
    edges = [[j for j, call in enumerate(actual) if e.matches(call)] for e in expected]
    owner: dict[int, int] = {}

    def augment(i: int, seen: set[int]) -> bool:
        for j in edges[i]:
            if j in seen:
                continue
            seen.add(j)
            if j not in owner or augment(owner[j], seen):
                owner[j] = i
                return True
        return False

    for i in range(len(expected)):
        augment(i, set())
    return sorted((i, j) for j, i in owner.items())


def tool_calls_from_events(events: Sequence[Any]) -> list[ToolUseBlock]:
    """The tool calls of the run's own model calls (not a subagent's), from `ModelCallFinished` events.

    Accepts `AgentEvent` objects or their dict forms (a report loaded from JSON).
    """
    from agentrt.events import ModelCallFinished, RunStarted

    calls: list[ToolUseBlock] = []
    source: str | None = None
    for event in events:
        if isinstance(event, Mapping):
            kind, event_source = event.get("type"), event.get("source", "")
            if kind == RunStarted.type and source is None:
                source = event_source
            elif kind == ModelCallFinished.type and (source is None or event_source == source):
                calls.extend(_calls_from_dict(event.get("msg") or {}))
        elif isinstance(event, RunStarted) and source is None:
            source = event.source
        elif isinstance(event, ModelCallFinished) and (source is None or event.source == source):
            calls.extend(event.msg.tool_calls)
    return calls


def _calls_from_dict(msg: Mapping[str, Any]) -> list[ToolUseBlock]:
    content = msg.get("content") or []
    return [
        ToolUseBlock(id=str(b.get("id", "")), name=str(b.get("name", "")), input=b.get("input") or {})
        for b in content
        if isinstance(b, Mapping) and b.get("type") == "tool_use"
    ]
