"""`agentrt demo`: the planner, the live trace, the CLI in-process and as a real subprocess."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from agentrt import Msg, RuntimeContext
from agentrt.cli.demo import DEFAULT_QUESTION, HELP_ANSWER, build_demo_agent, plan_tool_call, run_demo
from agentrt.state import InMemoryStateStore

ROOT = Path(__file__).resolve().parents[2]


def make_console() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, width=100, color_system=None), buffer


# -- the planner ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("question", "tool", "args"),
    [
        ("What is 128 * 37 + 500?", "calculate", {"expression": "128 * 37 + 500"}),
        ("calculate (3 + 4) * 2", "calculate", {"expression": "(3 + 4) * 2"}),
        ("What is 12 times 7?", "calculate", {"expression": "12 * 7"}),
        ("What's 2^10?", "calculate", {"expression": "2**10"}),
        ("What is sqrt(2) * pi?", "calculate", {"expression": "sqrt(2) * pi"}),
        ("Hey, can you tell me 12*(3+4) please?", "calculate", {"expression": "12*(3+4)"}),
        ("What time is it in Tokyo?", "current_time", {"timezone": "Asia/Tokyo"}),
        ("What's the time in Europe/Paris?", "current_time", {"timezone": "Europe/Paris"}),
        ("What is the time in New York right now?", "current_time", {"timezone": "America/New_York"}),
        ("What's the date today?", "current_time", {"timezone": "UTC"}),
        ("How many km in 5 miles?", "convert_units", {"value": 5, "from_unit": "miles", "to_unit": "km"}),
        ("How many feet in a mile?", "convert_units", {"value": 1, "from_unit": "mile", "to_unit": "feet"}),
        ("Convert 100 F to C", "convert_units", {"value": 100, "from_unit": "F", "to_unit": "C"}),
        ("What is 2.5 kg in pounds?", "convert_units", {"value": 2.5, "from_unit": "kg", "to_unit": "pounds"}),
        ("convert 1,500 m to km", "convert_units", {"value": 1500, "from_unit": "m", "to_unit": "km"}),
    ],
)
def test_planner_picks_the_tool(question: str, tool: str, args: dict[str, object]) -> None:
    planned = plan_tool_call(question)
    assert planned is not None
    thought, call = planned
    assert thought
    assert call.name == tool
    assert dict(call.input) == args


@pytest.mark.parametrize("question", ["Tell me a joke", "Who are you?", "What is 42?", ""])
def test_planner_finds_nothing_to_do(question: str) -> None:
    assert plan_tool_call(question) is None


# -- the run and its trace ----------------------------------------------------------------------------
async def test_demo_arithmetic_trace() -> None:
    console, buffer = make_console()
    reply = await run_demo("What is 128 * 37 + 500?", console)
    assert isinstance(reply, Msg)
    assert "5236" in reply.text
    assert reply.text == "128 * 37 + 500 = 5236."
    out = buffer.getvalue()
    for needle in ("What is 128 * 37 + 500?", "Thought", "Action", "calculate", "Observation", "5236", "Final answer"):
        assert needle in out, needle
    assert '{"expression": "128 * 37 + 500"}' in out
    assert "2 steps" in out and "1 tool call" in out and " ms" in out
    # The sections come in ReAct order.
    order = [out.index(s) for s in ("Thought", "Action", "Observation", "Final answer")]
    assert order == sorted(order)


async def test_demo_time_question() -> None:
    console, buffer = make_console()
    reply = await run_demo("What time is it in Tokyo?", console)
    assert "Asia/Tokyo" in reply.text
    assert "+09:00" in reply.text
    out = buffer.getvalue()
    assert "current_time" in out and '"Asia/Tokyo"' in out and "Observation" in out


async def test_demo_unit_question() -> None:
    console, buffer = make_console()
    reply = await run_demo("How many km in 5 miles?", console)
    assert "8.04672 km" in reply.text
    assert "convert_units" in buffer.getvalue()


async def test_demo_tool_error_is_reported_in_the_answer() -> None:
    console, buffer = make_console()
    reply = await run_demo("What is 1 / 0?", console)
    assert "error" in reply.text
    assert "Division by zero" in reply.text
    assert "[error]" in buffer.getvalue()


async def test_demo_unknown_zone_and_incompatible_units() -> None:
    console, _ = make_console()
    reply = await run_demo("What time is it in Atlantis?", console)
    assert "couldn't" in reply.text and "Atlantis" in reply.text
    reply = await run_demo("Convert 5 km to kg", console)
    assert "couldn't" in reply.text and "length" in reply.text and "mass" in reply.text


async def test_demo_without_a_matching_tool_answers_politely() -> None:
    console, buffer = make_console()
    reply = await run_demo("Tell me a joke", console)
    assert reply.text == HELP_ANSWER
    out = buffer.getvalue()
    assert "Action" not in out and "Observation" not in out
    assert "1 step" in out and "0 tool calls" in out


async def test_demo_agent_uses_the_given_store_and_checkpoints_the_run() -> None:
    store = InMemoryStateStore()
    agent = build_demo_agent(store)
    console, _ = make_console()
    ctx = RuntimeContext(user_id="u1", session_id="s1")
    await run_demo(DEFAULT_QUESTION, console, agent=agent, ctx=ctx)
    state = await store.load("u1", "s1", agent="demo")
    assert state is not None
    # question, tool call, tool result, answer
    assert [m.role for m in state.messages] == ["user", "assistant", "user", "assistant"]
    assert state.messages[-1].text == "128 * 37 + 500 = 5236."
    # A second question on the same session still gets planned from the newest message.
    reply = await run_demo("How many feet in a mile?", console, agent=agent, ctx=ctx)
    assert "5280 ft" in reply.text


async def test_demo_agent_call_without_streaming() -> None:
    agent = build_demo_agent()
    reply = await agent.call("What is 6 * 7?")
    assert reply.text == "6 * 7 = 42."


# -- the CLI ----------------------------------------------------------------------------------------------
def test_importing_agentrt_does_not_import_the_cli_stack() -> None:
    code = "import sys, agentrt; print(any(m == 'typer' or m.startswith('typer.') for m in sys.modules))"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True, timeout=60)
    assert out.stdout.strip() == "False"


def test_cli_demo_in_process() -> None:
    from typer.testing import CliRunner

    from agentrt.cli import build_app

    runner = CliRunner()
    result = runner.invoke(build_app(), ["demo"])
    assert result.exit_code == 0, result.output
    assert "5236" in result.output
    assert "Observation" in result.output

    result = runner.invoke(build_app(), ["demo", "How many km in 5 miles?"])
    assert result.exit_code == 0, result.output
    assert "8.04672" in result.output


def test_cli_without_a_command_shows_help() -> None:
    from typer.testing import CliRunner

    from agentrt.cli import build_app

    result = CliRunner().invoke(build_app(), [])
    assert "demo" in result.output


def test_cli_demo_subprocess() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "NO_COLOR": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "agentrt.cli", "demo"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "5236" in proc.stdout
    for needle in ("Thought", "Action", "calculate", "Observation", "Final answer"):
        assert needle in proc.stdout, needle


def test_cli_demo_subprocess_with_a_question() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, "-m", "agentrt.cli", "demo", "What time is it in Asia/Kolkata?"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "+05:30" in proc.stdout
