"""Rule matching has no spelling gaps: regexes span newlines, values compare in a canonical form,
deny rules see through Unicode compatibility forms and case, tool names match exactly.

Side effects are checked with a real agent in BYPASS mode (where only a deny rule can stop a call):
the counter of the tool must not move.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt import (
    PermissionContext,
    PermissionMode,
    PermissionRule,
    ReActAgent,
    RuntimeContext,
    Toolkit,
    ToolResultBlock,
    ToolUseBlock,
    tool,
)
from agentrt.model import ScriptedModel
from agentrt.permission import Decision, suggest_rules
from agentrt.state import InMemoryStateStore


def deny(key: str, pattern: str, name: str = "t") -> PermissionRule:
    return PermissionRule(tool=name, decision=Decision.DENY, args={key: pattern})


# -- regular expressions -------------------------------------------------------------------------------------
@pytest.mark.parametrize("tail", ["\n", "\r", "\n\n", "\r\n", "\n# comment", "\u2028", "\x0b"])
def test_regex_rules_span_line_breaks(tail: str) -> None:
    assert deny("command", r"re:rm\s+-rf\s+/.*", "run_command").matches("run_command", {"command": "rm -rf /" + tail})
    assert deny("sql", r"re:DROP\s.*").matches("t", {"sql": "DROP TABLE users;" + tail + "--"})


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=20))
def test_regex_deny_matches_whatever_follows(tail: str) -> None:
    assert deny("sql", r"re:DROP\s.*").matches("t", {"sql": "DROP TABLE x" + tail})


def test_regex_is_a_full_match() -> None:
    assert not PermissionRule(tool="t", args={"v": "re:ab"}).matches("t", {"v": "abc"})
    assert not PermissionRule(tool="t", args={"v": "re:ab"}).matches("t", {"v": "ab\n"})


# -- canonical values ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value", [1, 1.0, "1", "1.0", "1.00", "1e0", "10e-1", " 1 ", "+1", "01", "1.", "1_0e-1", "\uff11"]
)
def test_deny_on_a_number_catches_every_spelling(value: Any) -> None:
    assert deny("n", "1").matches("t", {"n": value})
    assert deny("n", "1.0").matches("t", {"n": value})


@pytest.mark.parametrize("value", [True, "true", 2, 1.5, "one", None, [1]])
def test_deny_on_a_number_is_not_a_bool_or_another_number(value: Any) -> None:
    assert not deny("n", "1").matches("t", {"n": value})


def test_allow_on_a_number_matches_the_number_not_other_strings() -> None:
    rule = PermissionRule(tool="t", args={"n": "1"})
    assert rule.matches("t", {"n": 1}) and rule.matches("t", {"n": 1.0})
    assert not rule.matches("t", {"n": "1.0"})  # allow: a string is compared as it is
    assert not rule.matches("t", {"n": True})


def test_bools_and_null() -> None:
    assert deny("b", "true").matches("t", {"b": True})
    assert deny("b", "true").matches("t", {"b": "True"})  # deny rules fold case
    assert not deny("b", "true").matches("t", {"b": 1})
    assert deny("b", "null").matches("t", {"b": None})


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(alphabet="abc", max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(alphabet="xyz", min_size=1, max_size=2), inner, max_size=3)
    ),
    max_leaves=8,
)


def _shuffled(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value) if rng.random() < 0.5 else value
    return value


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(alphabet="pqr", min_size=1, max_size=2), _JSON, min_size=1, max_size=4), st.integers())
def test_nested_values_match_in_any_key_order_and_number_spelling(value: dict[str, Any], seed: int) -> None:
    other = _shuffled(value, random.Random(seed))
    exact = suggest_rules("t", {"o": value})[0]
    assert exact.matches("t", {"o": other})
    as_text = json.dumps(value)
    assert deny("o", as_text).matches("t", {"o": other})
    escaped = re.sub(r"([\[\]*?])", r"[\1]", as_text)  # the glob-escaped spelling
    assert deny("o", escaped).matches("t", {"o": other})


def test_a_json_object_pattern_matches_regardless_of_key_order() -> None:
    rule = deny("o", '{"mode": "prod", "opts": {"b": 1, "a": 2.0}}')
    assert rule.matches("t", {"o": {"opts": {"a": 2, "b": 1}, "mode": "prod"}})


# -- Unicode and case ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["admin", "Admin", "ADMIN", "\uff41\uff44\uff4d\uff49\uff4e", "\uff21dmin"])
def test_deny_sees_through_case_and_compatibility_forms(value: str) -> None:
    assert deny("user", "admin").matches("t", {"user": value})


def test_allow_compares_strings_exactly() -> None:
    rule = PermissionRule(tool="t", args={"user": "admin"})
    assert rule.matches("t", {"user": "admin"})
    assert not rule.matches("t", {"user": "Admin"})
    assert not rule.matches("t", {"user": "\uff41dmin"})


@pytest.mark.parametrize(
    "name", ["Run_Command", "run_command ", "\uff52un_command", "run_command\u200b", "run-command"]
)
def test_tool_names_match_exactly(name: str) -> None:
    rule = PermissionRule(tool="run_command", decision=Decision.DENY)
    assert not rule.matches(name, {})
    assert rule.matches("run_command", {})


# -- side effects: a real agent in bypass mode -------------------------------------------------------------
class Counter:
    def __init__(self) -> None:
        self.calls: list[Any] = []

        @tool
        async def set_level(level: float) -> str:
            """Set the level."""
            self.calls.append(level)
            return "ok"

        @tool
        async def configure(options: dict[str, Any]) -> str:
            """Apply options."""
            self.calls.append(options)
            return "ok"

        @tool
        async def run_query(sql: str) -> str:
            """Run SQL."""
            self.calls.append(sql)
            return "ok"

        @tool
        async def notify(recipients: list[str], note: str = "") -> str:
            """Send a note."""
            self.calls.append(recipients)
            return "ok"

        @tool
        async def deploy(target: str) -> str:
            """Deploy to a target (`target` is one of the names the engine reads as a path)."""
            self.calls.append(target)
            return "ok"

        self.tools = [set_level, configure, run_query, notify, deploy]


@pytest.mark.parametrize(
    ("rule", "call"),
    [
        (deny("level", "1", "set_level"), {"name": "set_level", "input": {"level": 1.0}}),
        (
            deny("options", '{"force":true,"target":"prod"}', "configure"),
            {"name": "configure", "input": {"options": {"target": "prod", "force": True}}},
        ),
        (deny("sql", r"re:DROP\s.*", "run_query"), {"name": "run_query", "input": {"sql": "DROP TABLE t\n-- bye"}}),
        (
            deny("sql", "drop table*", "run_query"),
            {"name": "run_query", "input": {"sql": "\uff24\uff32\uff2f\uff30 TABLE t"}},
        ),
        # invisible format characters, whitespace around, a JSON array pattern as written
        (deny("sql", "drop*", "run_query"), {"name": "run_query", "input": {"sql": "dr\u200bop table t"}}),
        (deny("sql", "drop*", "run_query"), {"name": "run_query", "input": {"sql": "  drop table t"}}),
        (deny("sql", "drop*", "run_query"), {"name": "run_query", "input": {"sql": "d\u00adrop table t"}}),
        (
            deny("recipients", '["ceo@example.com"]', "notify"),
            {"name": "notify", "input": {"recipients": ["ceo@example.com"]}},
        ),
        (
            deny("recipients", '[ "ceo@example.com" , "cfo@example.com" ]', "notify"),
            {"name": "notify", "input": {"recipients": ["ceo@example.com", "cfo@example.com"]}},
        ),
        # a string argument that holds a number or a JSON object, as the tool may parse it
        (deny("sql", "7", "run_query"), {"name": "run_query", "input": {"sql": "+07"}}),
        (deny("sql", "7", "run_query"), {"name": "run_query", "input": {"sql": "\uff17"}}),
        (
            deny("sql", '{"a":1,"b":[2]}', "run_query"),
            {"name": "run_query", "input": {"sql": ' {"b": [2.0], "a": 1} '}},
        ),
        # an argument named like a path is also matched as the raw text a tool may take it for
        (deny("target", "prod*", "deploy"), {"name": "deploy", "input": {"target": " prod-db"}}),
        (deny("target", "prod*", "deploy"), {"name": "deploy", "input": {"target": "\nPROD"}}),
        (deny("target", r"re:rm\s+-rf.*", "deploy"), {"name": "deploy", "input": {"target": "rm  -rf\tvictim.txt"}}),
    ],
)
async def test_denied_spelling_never_runs(rule: PermissionRule, call: dict[str, Any]) -> None:
    counter = Counter()
    model = ScriptedModel([ToolUseBlock(id="c1", name=call["name"], input=call["input"]), "done"])
    agent = ReActAgent(
        "a",
        "s",
        model=model,
        toolkit=Toolkit(counter.tools),
        state_store=InMemoryStateStore(),
        permission=PermissionContext(mode=PermissionMode.BYPASS, rules=[rule]),
    )
    await agent.call("go", RuntimeContext(user_id="u", session_id="s"))
    [result] = [b for m in model.requests[-1].messages for b in m.blocks(ToolResultBlock)]
    assert result.state == "denied"
    assert counter.calls == []


# -- paths and commands in deny rules ------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["rm -rf //", "rm -rf /.", "rm -rf /tmp/..", "sudo rm -rf ///", "rm -rf /./"])
def test_a_deny_on_a_command_sees_collapsed_paths(command: str) -> None:
    assert deny("command", "rm -rf /", "run_command").matches("run_command", {"command": command})


@pytest.mark.parametrize("path", ["secret", "secret/x.txt", "secret/deep/y.txt", "SECRET/x.txt"])
def test_a_regex_deny_on_a_directory_covers_what_is_below(path: str) -> None:
    rule = deny("path", "re:/ws/secret", "read_file")
    assert rule.matches("read_file", {"path": path}, workspace="/ws")
    assert not rule.matches("read_file", {"path": "secrets.txt"}, workspace="/ws")
