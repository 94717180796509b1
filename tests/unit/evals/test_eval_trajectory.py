"""The trajectory matcher: argument matchers, in-order and as-a-set matching, for every input."""

from __future__ import annotations

import itertools
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.errors import UserError
from agentrt.evals import ArgMatcher, ExpectedToolCall, match_trajectory
from agentrt.message import ToolUseBlock

NAMES = st.sampled_from(["search", "fetch", "add", "send"])
VALUES = st.one_of(st.integers(-3, 3), st.sampled_from(["a", "b", "Paris"]))
CALLS = st.builds(
    lambda name, args: ToolUseBlock(name=name, input=args),
    NAMES,
    st.dictionaries(st.sampled_from(["x", "y", "q"]), VALUES, max_size=2),
)


def exactly(call: ToolUseBlock) -> ExpectedToolCall:
    """The expectation that matches `call` and only calls equal to it in name and listed args."""
    return ExpectedToolCall.parse({"name": call.name, "args": dict(call.input)})


def test_matchers() -> None:
    call = ToolUseBlock(name="get", input={"city": "Paris", "n": 2, "opts": {"a": 1}})
    assert ExpectedToolCall.parse({"name": "get", "args": {"city": {"regex": "^Par"}}}).matches(call)
    assert ExpectedToolCall.parse({"name": "get", "args": {"n": {"regex": "^2$"}}}).matches(call)
    assert ExpectedToolCall.parse({"name": "get", "args": {"n": {"any": True}}}).matches(call)
    assert not ExpectedToolCall.parse({"name": "get", "args": {"missing": {"any": True}}}).matches(call)
    assert ExpectedToolCall.parse({"name": "get", "args": {"opts": {"a": 1}}}).matches(call)
    assert not ExpectedToolCall.parse({"name": "get", "args": {"opts": {"a": 2}}}).matches(call)
    assert not ExpectedToolCall.parse({"name": "put"}).matches(call)
    assert ExpectedToolCall.parse("get").describe() == "get()"
    assert ArgMatcher.parse({"regex": "x", "other": 1}).kind == "exact"  # not a matcher's shape
    for bad in (
        {"name": ""},
        {"name": "a", "argz": {}},
        {"name": "a", "args": [1]},
        3,
        {"name": "a", "args": {"x": {"any": 1}}},
    ):
        with pytest.raises(UserError):
            ExpectedToolCall.parse(bad)


def test_reason_lists_missing_and_unexpected_calls() -> None:
    expected = [ExpectedToolCall.parse({"name": "search", "args": {"q": "x"}})]
    result = match_trajectory(expected, [ToolUseBlock(name="search", input={"q": "y"})])
    assert result.score == 0.0
    assert result.reason() == '0/1 expected tool call(s) matched. missing: search(q="x"). unexpected: search(q="y")'
    assert match_trajectory([], []).score == 1.0
    with pytest.raises(UserError):
        match_trajectory([], [], order="sorted")  # type: ignore[arg-type]  # a wrong value on purpose


@settings(max_examples=200, deadline=None)
@given(st.lists(CALLS, max_size=6), st.lists(CALLS, max_size=6), st.sampled_from(["exact", "any"]), st.booleans())
def test_scores_are_fractions_in_range(
    expected_calls: list[ToolUseBlock], actual: list[ToolUseBlock], order: Any, extra: bool
) -> None:
    expected = [exactly(c) for c in expected_calls]
    result = match_trajectory(expected, actual, order=order, allow_extra=extra)
    assert 0.0 <= result.score <= 1.0
    assert result.matched + len(result.missing) == len(expected)
    if not extra:
        assert result.matched + len(result.extra) == len(actual)
    assert (result.score == 1.0) == (not result.missing and not result.extra) or (not expected and not actual)


@settings(max_examples=200, deadline=None)
@given(st.lists(CALLS, max_size=6), st.randoms(use_true_random=False))
def test_the_same_calls_score_one_in_order_and_any_permutation_scores_one_as_a_set(
    calls: list[ToolUseBlock], rnd: Any
) -> None:
    expected = [exactly(c) for c in calls]
    assert match_trajectory(expected, calls, order="exact").score == 1.0
    shuffled = list(calls)
    rnd.shuffle(shuffled)
    assert match_trajectory(expected, shuffled, order="any").score == 1.0


@settings(max_examples=200, deadline=None)
@given(st.lists(CALLS, max_size=6), st.lists(CALLS, max_size=6))
def test_a_set_match_is_never_worse_than_an_in_order_match(
    expected_calls: list[ToolUseBlock], actual: list[ToolUseBlock]
) -> None:
    expected = [exactly(c) for c in expected_calls]
    exact = match_trajectory(expected, actual, order="exact")
    as_set = match_trajectory(expected, actual, order="any")
    assert as_set.matched >= exact.matched


@settings(max_examples=150, deadline=None)
@given(st.lists(CALLS, min_size=1, max_size=5), st.data())
def test_a_missing_or_extra_call_costs_score(calls: list[ToolUseBlock], data: st.DataObject) -> None:
    expected = [exactly(c) for c in calls]
    index = data.draw(st.integers(0, len(calls) - 1))
    fewer = calls[:index] + calls[index + 1 :]
    orders: tuple[Literal["exact", "any"], ...] = ("exact", "any")
    for order in orders:
        assert match_trajectory(expected, fewer, order=order).score < 1.0
        assert match_trajectory(expected[:index] + expected[index + 1 :], calls, order=order).score < 1.0
        relaxed = match_trajectory(expected[:index] + expected[index + 1 :], calls, order=order, allow_extra=True)
        assert relaxed.score == 1.0


@settings(max_examples=100, deadline=None)
@given(st.lists(CALLS, max_size=5), st.lists(CALLS, max_size=5))
def test_the_in_order_match_is_the_longest_common_subsequence(
    expected_calls: list[ToolUseBlock], actual: list[ToolUseBlock]
) -> None:
    expected = [exactly(c) for c in expected_calls]
    best = 0
    for size in range(min(len(expected), len(actual)), 0, -1):
        found = any(
            all(expected[i].matches(actual[j]) for i, j in zip(ei, aj, strict=True))
            for ei in itertools.combinations(range(len(expected)), size)
            for aj in itertools.combinations(range(len(actual)), size)
        )
        if found:
            best = size
            break
    assert match_trajectory(expected, actual, order="exact").matched == best
