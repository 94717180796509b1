"""A MODULE:ATTR that is not what a command takes: a `TargetError` saying what it is, on every loading path."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentrt._target import TargetError, describe_target
from agentrt.cli import build_app
from agentrt.server._serve import load_agents

MODULE = "odd_targets"
SOURCE = """\
from agentrt import ReActAgent, Toolkit, tool
from agentrt.model import ScriptedModel


@tool
def some_tool(x: int) -> int:
    '''Double x.'''
    return 2 * x


def needs_args(name):
    return name


def returns_tool():
    return some_tool


async def async_factory():
    return ReActAgent("a", "x", ScriptedModel([]))


kit = Toolkit([some_tool])
number = 42
agents = {"good": ReActAgent("good", "x", ScriptedModel([])), "bad": some_tool}
AgentClass = ReActAgent
"""


@pytest.fixture
def targets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The module above, importable from the current directory (as the commands import targets)."""
    (tmp_path / f"{MODULE}.py").write_text(SOURCE)
    (tmp_path / "cases.jsonl").write_text('{"name": "c1", "input": "hi"}\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENTRT_API_KEYS", raising=False)
    yield tmp_path
    sys.modules.pop(MODULE, None)


def _invoke(*args: str) -> Any:
    result = CliRunner().invoke(build_app(), list(args))
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output and "TypeError" not in result.output, result.output
    return result


@pytest.mark.parametrize(
    ("attr", "found", "hint"),
    [
        ("some_tool", "is a tool (function 'some_tool'), not an agent", f"use `agentrt mcp serve {MODULE}:some_tool`"),
        ("kit", "is a Toolkit (1 tool(s)), not an agent", "agentrt mcp serve"),
        ("needs_args", "is a function (needs_args) taking the argument(s) name, not an agent", "no arguments"),
        ("AgentClass", "is the agent class ReActAgent (a class, not an agent built from it)", "= ReActAgent(...)"),
        ("number", "is an int value, not an agent", "pass an agent (e.g. a ReActAgent)"),
    ],
)
def test_serve_names_what_the_target_is(targets: Path, attr: str, found: str, hint: str) -> None:
    result = _invoke("serve", f"{MODULE}:{attr}", "--dev")
    assert f"error: TargetError: {MODULE}:{attr} {found}" in result.output
    assert hint in result.output


def test_load_agents_checks_what_a_factory_returns_and_each_member(targets: Path) -> None:
    with pytest.raises(TargetError, match=rf"{MODULE}:returns_tool returned a tool \(function 'some_tool'\)"):
        load_agents(f"{MODULE}:returns_tool")
    with pytest.raises(TargetError, match=rf"{MODULE}:agents\['bad'\] is a tool \(function 'some_tool'\)"):
        load_agents(f"{MODULE}:agents")
    with pytest.raises(TargetError, match="is an async factory; make it a plain function") as info:
        load_agents(f"{MODULE}:async_factory")
    assert info.value.target == f"{MODULE}:async_factory"


def test_worker_names_what_the_target_is(targets: Path) -> None:
    result = _invoke("worker", f"{MODULE}:some_tool", "--jobs", "redis://127.0.0.1:1/0")
    assert f"TargetError: {MODULE}:some_tool is a tool (function 'some_tool'), not an agent" in result.output


@pytest.mark.parametrize("command", ["eval", "batch"])
def test_eval_and_batch_name_what_the_target_is(targets: Path, command: str) -> None:
    out = ["--out", "rows.jsonl"] if command == "batch" else []
    result = _invoke(command, "cases.jsonl", "--agent", f"{MODULE}:kit", *out)
    assert f"TargetError: {MODULE}:kit is a Toolkit (1 tool(s)), not an agent; pass an agent" in result.output
    result = _invoke(command, "cases.jsonl", "--agent", f"{MODULE}:AgentClass", *out)
    assert f"{MODULE}:AgentClass is the agent class ReActAgent" in result.output


def test_mcp_serve_names_what_the_target_is(targets: Path) -> None:
    result = _invoke("mcp", "serve", f"{MODULE}:number")
    assert f"TargetError: {MODULE}:number is an int value, which cannot be served over MCP" in result.output
    assert "pass a Toolkit, an agent, a tool" in result.output


def test_chat_tools_names_what_the_target_is(targets: Path) -> None:
    result = _invoke("chat", "--model", "scripted:echo", "--store", "memory://", "--tools", f"{MODULE}:number")
    assert f"TargetError: --tools {MODULE}:number is an int value, not a tool; pass a Toolkit" in result.output
    result = _invoke("chat", "--model", "scripted:echo", "--store", "memory://", "--tools", f"{MODULE}:AgentClass")
    assert f"--tools {MODULE}:AgentClass is the agent class ReActAgent" in result.output


def test_describe_target_in_the_callers_terms() -> None:
    import os

    assert describe_target(None) == "None"
    assert describe_target(os) == "the module os"
    assert describe_target([1, 2]) == "a list of 2 item(s)"
    assert describe_target(dict) == "the class dict"
    assert describe_target(3.5) == "a float value"
