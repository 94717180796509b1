"""`PlanTools` and the ``PLAN`` mode of the permission engine: the plan file, its name, its checks.

The guarantee "no session id names a path outside ``plans/``" is a hypothesis property over generated
ids, checked on the real filesystem after each write.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt import RuntimeContext, tool
from agentrt.errors import UserError
from agentrt.message import ToolUseBlock
from agentrt.permission import Decision, PermissionContext, PermissionDecision, PermissionEngine, PermissionMode
from agentrt.permission import PermissionRule as Rule
from agentrt.permission.engine import PLAN_MODE_TOOLS
from agentrt.tool.base import Tool
from agentrt.tool.builtin import FileTools, PlanTools
from agentrt.tool.builtin.plan import DEFAULT_MAX_PLAN_BYTES, PLAN_EXIT, PLAN_WRITE, is_plan_exit_tool, plan_file_name

A, Q, D = Decision.ALLOW, Decision.ASK, Decision.DENY
M = PermissionMode

HOSTILE_IDS = [
    "..",
    ".",
    "../../etc/passwd",
    "/etc/passwd",
    "a/../../b",
    "plans/../../x",
    "..\\..\\windows",
    "C:\\x",
    "x\x00y",
    ".env",
    ".git",
    "~",
    "~root",
    "CON",
    "con",
    "nul.txt",
    "lpt1",
    "a" * 5000,
    "\ud800",
    "é",
    "\uff21\uff22\uff23",  # fullwidth ABC
    "s1/researcher",
    " ",
    "-",
    "a.",
    "id_rsa",
]


def invoke(t: Tool, args: Mapping[str, Any], session_id: str) -> Any:
    return asyncio.run(t.invoke(args, RuntimeContext(user_id="u", session_id=session_id)))


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def files_under(root: Path) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs}


# -- the file name ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("session_id", ["s1", "abc-123", "2024.01.02", "a_b", "0f8c2a4e-5b7d-4c1e-9f00-1234567890ab"])
def test_plain_ids_are_the_file_name(session_id: str) -> None:
    assert plan_file_name(session_id) == f"{session_id}.md"


@pytest.mark.parametrize("session_id", [i for i in HOSTILE_IDS if i != "id_rsa"])
def test_other_ids_get_a_slug_and_a_hash(session_id: str) -> None:
    name = plan_file_name(session_id)
    assert "+" in name and name.endswith(".md")
    assert "/" not in name and "\\" not in name and "\x00" not in name
    assert not name.startswith(".") and len(name) <= 64
    assert name.isascii()


def test_names_do_not_collide_across_the_plain_and_hashed_forms() -> None:
    hashed = plan_file_name("a/b")
    assert plan_file_name(hashed[: -len(".md")]) != hashed  # "+" never occurs in a plain name
    assert plan_file_name("ABC") != plan_file_name("abc")  # case-insensitive disks


@pytest.mark.parametrize("bad", ["", None, 3])
def test_a_session_id_must_be_a_non_empty_string(bad: Any) -> None:
    with pytest.raises(UserError):
        plan_file_name(bad)


@given(st.lists(st.text(min_size=1, max_size=120), min_size=2, max_size=2, unique=True))
def test_distinct_ids_never_share_a_plan_file(ids: list[str]) -> None:
    first, second = ids
    assert plan_file_name(first) != plan_file_name(second)


@pytest.fixture(scope="module")
def shared_ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("plans-property")
    (root / "keep.txt").write_text("keep\n")
    return root


@settings(max_examples=150, deadline=None)
@given(session_id=st.one_of(st.sampled_from(HOSTILE_IDS), st.text(min_size=1, max_size=300)))
def test_hostile_session_ids_only_ever_write_inside_plans(shared_ws: Path, session_id: str) -> None:
    tools = PlanTools(shared_ws)
    plans = shared_ws / "plans"
    path = tools.plan_path(session_id)
    assert os.path.dirname(path) == str(plans)
    before = files_under(shared_ws)
    out = invoke(tools.plan_write, {"content": f"plan for {session_id!r}"}, session_id)
    assert "Plan saved to plans/" in out
    written = files_under(shared_ws) - before
    assert written <= {os.path.relpath(path, shared_ws)}  # nothing else, nowhere else
    assert os.path.realpath(path) == path and os.path.isfile(path)
    assert (shared_ws / "keep.txt").read_text() == "keep\n"
    assert all(f == "keep.txt" or f.startswith("plans" + os.sep) for f in files_under(shared_ws))
    assert tools.read_plan(session_id) == f"plan for {session_id!r}"


# -- the tools ----------------------------------------------------------------------------------------------------
def test_plan_write_replaces_the_plan_atomically(ws: Path) -> None:
    tools = PlanTools(ws)
    invoke(tools.plan_write, {"content": "first"}, "s")
    invoke(tools.plan_write, {"content": "second"}, "s")
    assert (ws / "plans" / "s.md").read_text() == "second"
    assert os.listdir(ws / "plans") == ["s.md"]  # no temporary file left behind


def test_plan_write_refuses_empty_and_oversized_plans(ws: Path) -> None:
    tools = PlanTools(ws, max_plan_bytes=10)
    for content in ("   ", "x" * 11):
        result = asyncio.run(_run(tools.plan_write, {"content": content}, "s"))
        assert result.state == "error"
    assert not (ws / "plans" / "s.md").exists()
    assert DEFAULT_MAX_PLAN_BYTES >= 10_000


async def _run(t: Tool, args: Mapping[str, Any], session_id: str) -> Any:
    from agentrt.tool._execution import ToolExecutor

    executor = ToolExecutor({t.name: t}, RuntimeContext(user_id="u", session_id=session_id), asyncio.Semaphore(4))
    return await executor.execute(ToolUseBlock(id="c", name=t.name, input=dict(args)))


def test_a_symlinked_plans_directory_is_refused(ws: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "plans").symlink_to(outside, target_is_directory=True)
    tools = PlanTools(ws)
    result = asyncio.run(_run(tools.plan_write, {"content": "x"}, "s"))
    assert result.state == "error" and "symlink" in str(result.output)
    assert list(outside.iterdir()) == []
    assert verdict_of(tools.plan_write, "s").decision is D


def test_a_symlinked_plan_file_is_refused(ws: Path, tmp_path: Path) -> None:
    target = tmp_path / "target.md"
    target.write_text("secret\n")
    (ws / "plans").mkdir()
    (ws / "plans" / "s.md").symlink_to(target)
    tools = PlanTools(ws)
    assert asyncio.run(_run(tools.plan_write, {"content": "x"}, "s")).state == "error"
    assert target.read_text() == "secret\n"
    verdict = verdict_of(tools.plan_exit, "s")
    assert verdict.decision is D and "secret" not in verdict.reason


def verdict_of(t: Tool, session_id: str) -> PermissionDecision:
    check = t.check_permission
    assert check is not None
    verdict = check({}, RuntimeContext(session_id=session_id))
    assert isinstance(verdict, PermissionDecision)
    return verdict


def test_plan_exit_asks_with_the_plan_and_denies_without_one(ws: Path) -> None:
    tools = PlanTools(ws)
    assert verdict_of(tools.plan_exit, "s").decision is D
    unchecked = asyncio.run(_run(tools.plan_exit, {}, "s"))  # a caller that skips the engine
    assert unchecked.state == "error" and "plan_write first" in str(unchecked.output)
    invoke(tools.plan_write, {"content": "# Steps\n1. a"}, "s")
    verdict = verdict_of(tools.plan_exit, "s")
    assert verdict.decision is Q
    assert "# Steps\n1. a" in verdict.reason and "plans/s.md" in verdict.reason
    assert "approved" in invoke(tools.plan_exit, {}, "s")
    assert tools.plan_exit.requires_confirmation


def test_unreadable_or_unwritable_plans_are_reported(ws: Path) -> None:
    tools = PlanTools(ws)
    (ws / "plans").mkdir()
    (ws / "plans" / "s.md").mkdir()  # a directory where the plan file should be
    verdict = verdict_of(tools.plan_exit, "s")
    assert verdict.decision is D and "Cannot read plans/s.md" in verdict.reason
    assert asyncio.run(_run(tools.plan_write, {"content": "x"}, "s")).state == "error"
    blocked = PlanTools(ws, directory="README")
    (ws / "README").write_text("a file, not a directory\n")
    result = asyncio.run(_run(blocked.plan_write, {"content": "x"}, "s"))
    assert result.state == "error" and "Cannot create README/" in str(result.output)
    assert (ws / "README").read_text() == "a file, not a directory\n"


def test_read_plan_is_capped(ws: Path) -> None:
    tools = PlanTools(ws, max_plan_bytes=8)
    (ws / "plans").mkdir()
    (ws / "plans" / "s.md").write_text("0123456789abcdef")
    plan = tools.read_plan("s")
    assert plan is not None and plan.startswith("01234567") and "cut" in plan
    assert tools.read_plan("other") is None


@pytest.mark.parametrize("directory", ["", "/abs", "..", "../x", ".", ".git", ".ssh/plans"])
def test_the_plans_directory_must_stay_inside_the_workspace(ws: Path, directory: str) -> None:
    with pytest.raises(UserError):
        PlanTools(ws, directory=directory)


def test_constructor_checks(ws: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError):
        PlanTools(tmp_path / "missing")
    with pytest.raises(UserError):
        PlanTools(ws, max_plan_bytes=0)
    with pytest.raises(UserError):
        PlanTools(str(ws) + "\x00")
    tools = PlanTools(ws, directory="docs/plans")
    assert tools.plan_path("s") == str(ws / "docs" / "plans" / "s.md")
    assert repr(tools) == f"PlanTools({str(ws)!r})"


def test_is_plan_exit_tool_recognises_only_the_real_one(ws: Path) -> None:
    tools = PlanTools(ws)
    assert is_plan_exit_tool(tools.plan_exit)
    assert is_plan_exit_tool(tools.plan_exit.copy(group="planning"))
    assert not is_plan_exit_tool(tools.plan_write)
    assert not is_plan_exit_tool(None)

    @tool(name=PLAN_EXIT)
    async def fake() -> str:
        """Pretend to be plan_exit."""
        return "ok"

    assert not is_plan_exit_tool(fake)


# -- the engine's PLAN mode ---------------------------------------------------------------------------------------
def make(name: str, **options: Any) -> Tool:
    async def body(x: int = 0) -> str:
        return "ok"

    return Tool.from_function(body, name=name, description="t", **options)


def decide(t: Tool, *, rules: list[Rule] | None = None, args: Mapping[str, Any] | None = None) -> PermissionDecision:
    engine = PermissionEngine(PermissionContext(mode=M.PLAN, rules=rules or []))
    return engine.check(t, ToolUseBlock(id="c", name=t.name, input=dict(args or {"x": 1})), RuntimeContext())


@pytest.mark.parametrize(
    ("name", "options", "expected"),
    [
        ("look", {"read_only": True}, A),
        ("plain", {}, D),
        ("wipe", {"destructive": True}, D),
        ("notify", {"requires_confirmation": True}, D),
        ("browse", {"external": True}, D),
        ("own_allow", {"check_permission": lambda a, c: PermissionDecision.allow()}, D),
        ("todo_write", {}, A),
        (PLAN_WRITE, {}, A),
        (PLAN_EXIT, {"requires_confirmation": True}, Q),
        ("look_asks", {"read_only": True, "requires_confirmation": True}, Q),
    ],
)
def test_plan_mode_by_tool_kind(name: str, options: dict[str, Any], expected: Decision) -> None:
    verdict = decide(make(name, **options))
    assert verdict.decision is expected, verdict.reason
    if expected is D:
        assert "plan mode" in verdict.reason and PLAN_EXIT in verdict.reason and PLAN_WRITE in verdict.reason


def test_plan_mode_rules() -> None:
    writer = make("writer")
    assert decide(writer, rules=[Rule(tool="writer")]).decision is D  # an allow rule does not open a change
    assert decide(make(PLAN_WRITE), rules=[Rule(tool=PLAN_WRITE, decision=D)]).decision is D
    assert decide(make("look", read_only=True), rules=[Rule(tool="look", decision=Q)]).decision is Q
    assert decide(make("look", read_only=True), rules=[Rule(tool="look", decision=D)]).decision is D
    assert {PLAN_WRITE, PLAN_EXIT, "todo_write"} == PLAN_MODE_TOOLS
    assert M("plan") is M.PLAN


def test_file_tools_in_plan_mode(ws: Path) -> None:
    files = FileTools(ws)
    engine = PermissionEngine(PermissionContext(mode=M.PLAN))
    ctx = RuntimeContext()
    read = engine.check(files.read_file, ToolUseBlock(id="r", name="read_file", input={"path": "a"}), ctx)
    write = engine.check(
        files.write_file, ToolUseBlock(id="w", name="write_file", input={"path": "a", "content": "x"}), ctx
    )
    assert (read.decision, write.decision) == (A, D)
