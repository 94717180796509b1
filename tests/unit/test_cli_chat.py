"""`agentrt chat`: its parts in-process, and the real command driven through a pseudo-terminal."""

from __future__ import annotations

import io
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pexpect  # type: ignore[import-untyped]
import pytest
from rich.console import Console
from terminal_driver import Terminal

from agentrt import RuntimeContext, Toolkit
from agentrt.cli.chat import (
    ChatRenderer,
    _parse_options,
    build_agent,
    pending_calls,
    register_scripted_models,
    resolve_tools,
)
from agentrt.errors import UserError
from agentrt.model import model_from_id
from agentrt.permission import PermissionRule
from agentrt.state import InMemoryStateStore

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "you \u203a "
ALLOW = r"allow\?"


# -- parts ----------------------------------------------------------------------------------------------
def test_offline_models_resolve_through_the_registry() -> None:
    register_scripted_models()
    demo = model_from_id("scripted:demo", latency=0.01)
    assert demo.model_name == "demo"
    echo = model_from_id("scripted:echo")
    assert echo.model_name == "echo"
    assert model_from_id("scripted:anything").model_name == "anything"
    with pytest.raises(UserError):
        model_from_id("scripted:demo", temperature=1)


async def test_echo_model_counts_user_messages_in_the_session() -> None:
    agent, _ = build_agent("scripted:echo", store=InMemoryStateStore())
    ctx = RuntimeContext("u", "s")
    assert (await agent.call("hello", ctx)).text == "echo #1: hello"
    assert (await agent.call("again", ctx)).text == "echo #2: again"


def test_tools_builtin_demo_and_imported(tmp_path: Path) -> None:
    tools, notes = resolve_tools(["builtin"], str(tmp_path))
    names = {t.name for t in tools}
    assert {"calculate", "current_time", "convert_units"} <= names
    if (ROOT / "src/agentrt/tool/builtin/files.py").exists():
        assert {"read_file", "write_file"} <= names
    assert all(isinstance(n, str) for n in notes)
    demo, _ = resolve_tools(["demo"], str(tmp_path))
    assert [t.name for t in demo] == ["calculate", "current_time", "convert_units"]
    imported, _ = resolve_tools(["agentrt.tool.builtin:calculate,none"], str(tmp_path))
    assert [t.name for t in imported] == ["calculate"]
    with pytest.raises(UserError):
        resolve_tools(["nonsense"], str(tmp_path))
    with pytest.raises(UserError):
        resolve_tools(["agentrt.tool.builtin:missing"], str(tmp_path))


def test_agent_defaults_and_confirm_globs() -> None:
    agent, _ = build_agent("scripted:demo", store=InMemoryStateStore(), confirm=["calc*"])
    assert sorted(agent.toolkit.names()) == ["calculate", "convert_units", "current_time"]
    calc = agent.toolkit.get("calculate")
    clock = agent.toolkit.get("current_time")
    assert calc is not None and calc.requires_confirmation
    assert clock is not None and not clock.requires_confirmation
    bare, _ = build_agent("scripted:echo", store=InMemoryStateStore())
    assert isinstance(bare.toolkit, Toolkit) and len(bare.toolkit) == 0


def test_parse_options() -> None:
    assert _parse_options(["temperature=0.2", "name=x", "n=3"]) == {"temperature": 0.2, "name": "x", "n": 3}
    with pytest.raises(UserError):
        _parse_options(["oops"])


def test_pending_calls_flattens_subagents() -> None:
    pending = {
        "reply_id": "r",
        "calls": [
            {"id": "1", "name": "a", "input": {"x": 1}, "kind": "confirm", "suggested_rules": [{"tool": "a"}]},
            {"id": "2", "name": "sub", "kind": "subagent", "children": [{"id": "3", "name": "b", "kind": "external"}]},
        ],
    }
    calls = pending_calls(pending)
    assert [(c.id, c.kind) for c in calls] == [("1", "confirm"), ("3", "external")]
    assert [PermissionRule.coerce(r) for r in calls[0].suggested_rules] == [PermissionRule(tool="a")]
    assert pending_calls(None) == []


async def test_renderer_prints_thinking_tool_calls_results_and_the_answer() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, width=200, color_system=None)
    agent, _ = build_agent("scripted:demo", store=InMemoryStateStore())
    renderer = ChatRenderer(console, agent.name)
    async for event in agent.stream_events("What is 6 * 7?", RuntimeContext("u", "s")):
        renderer.feed(event)
    out = buffer.getvalue()
    assert "thinking: This is arithmetic" in out
    assert '\u2192 calculate {"expression":"6 * 7"}' in out
    assert "\u2190 calculate \u2713: 42" in out
    assert "assistant \u203a 6 * 7 = 42." in out
    assert "2 steps \u00b7 1 tool call" in out


async def test_the_footer_shows_tokens_and_the_cost_when_known() -> None:
    from agentrt import ReActAgent
    from agentrt.cli.chat import _dollars
    from agentrt.message import TokenUsage
    from agentrt.model import ScriptedModel

    usage = TokenUsage(input_tokens=1000, output_tokens=100)
    for name, cost in (("openai:gpt-4o", "$0.0035"), ("private", None)):
        buffer = io.StringIO()
        agent = ReActAgent("a", model=ScriptedModel(["hi"], name=name, usage=usage), state_store=InMemoryStateStore())
        renderer = ChatRenderer(Console(file=buffer, width=200, color_system=None), agent.name)
        async for event in agent.stream_events("hi"):
            renderer.feed(event)
        out = buffer.getvalue()
        assert "1000 in / 100 out tokens" in out
        assert (cost in out) if cost else ("$" not in out)
    assert [_dollars(v) for v in (0, 0.00005, 0.0123, 12.5)] == ["$0.0000", "<$0.0001", "$0.0123", "$12.50"]


# -- the real command in a pseudo-terminal -------------------------------------------------------------------
@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "PYTHONPATH": str(ROOT / "src"),
        "AGENTRT_STATE_URL": f"sqlite:///{tmp_path / 'state.db'}",
        "TERM": "dumb",
        "PYTHONIOENCODING": "utf-8",
        "LANG": "C.UTF-8",
    }


class Chat(Terminal):
    """One `agentrt chat` process on a pseudo-terminal."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        super().__init__(env, "chat", *args, prompt_pattern=re.escape(PROMPT))


@pytest.fixture
def chats() -> Iterator[list[Chat]]:
    opened: list[Chat] = []
    yield opened
    for chat in opened:
        chat.close()


def start(chats: list[Chat], env: dict[str, str], *args: str) -> Chat:
    chat = Chat(env, *args)
    chats.append(chat)
    return chat


def test_a_question_streams_the_answer_and_shows_the_tool_call(env: dict[str, str], chats: list[Chat]) -> None:
    chat = start(chats, env, "--model", "scripted:demo", "--session", "q1")
    banner = chat.prompt()
    assert "model scripted:demo" in banner and "session q1" in banner
    assert "tools: calculate, convert_units, current_time" in banner
    out = chat.say("What is 128 * 37 + 500?")
    assert "thinking: This is arithmetic" in out
    assert '\u2192 calculate {"expression":"128 * 37 + 500"}' in out
    assert "\u2190 calculate \u2713: 5236" in out
    assert "assistant \u203a 128 * 37 + 500 = 5236." in out
    order = [out.index(s) for s in ("thinking:", "\u2192 calculate", "\u2190 calculate", "assistant \u203a")]
    assert order == sorted(order)
    out = chat.say("Tell me a joke")
    assert "only handle three kinds of questions" in out
    assert chat.exit() == 0


def test_approvals_yes_no_edit_and_always(env: dict[str, str], chats: list[Chat]) -> None:
    chat = start(chats, env, "--model", "scripted:demo", "--session", "ap", "--confirm", "convert_units")
    chat.prompt()

    chat.child.sendline("How many km in 5 miles?")
    before = chat.expect(ALLOW)
    assert '\u26a0 approve convert_units {"value": 5, "from_unit": "miles", "to_unit": "km"}' in before
    assert "requires confirmation" in before
    out = chat.say("y")
    assert "\u2190 convert_units \u2713: 5 mi = 8.04672 km" in out
    assert "assistant \u203a 5 mi = 8.04672 km." in out

    chat.child.sendline("How many km in 7 miles?")
    chat.expect(ALLOW)
    out = chat.say("n")
    assert "\u2190 convert_units \u2717 denied: The user denied this tool call." in out
    assert "did not run (denied)" in out

    chat.child.sendline("How many km in 9 miles?")
    chat.expect(ALLOW)
    chat.child.sendline("maybe")
    chat.expect("answer y, n, e or a")
    chat.child.sendline("e")
    chat.expect("new arguments")
    chat.child.sendline("not json")
    chat.expect("not JSON")
    out = chat.say('{"value": 2, "from_unit": "miles", "to_unit": "m"}')
    assert re.search(r"2 mi = 3218\.\d+ m", out)
    assert "The user changed the arguments" in out

    chat.child.sendline("How many km in 1 mile?")
    chat.expect(ALLOW)
    out = chat.say("a")
    assert "allowing every convert_units call for the rest of this session" in out
    assert re.search(r"1 mi = 1\.609\d* km", out)
    out = chat.say("How many km in 3 miles?")  # no question asked any more
    assert "allow?" not in out and re.search(r"3 mi = 4\.828\d* km", out)
    state = chat.say("/state")
    assert "allow every convert_units call (session)" in state
    assert "pending: none" in state
    assert chat.exit() == 0


def test_commands_state_new_sessions_help(env: dict[str, str], chats: list[Chat]) -> None:
    chat = start(chats, env, "--model", "scripted:echo", "--session", "first", "--user", "ann")
    chat.prompt()
    assert "echo #1: hi" in chat.say("hi")
    state = chat.say("/state")
    assert "session first \u00b7 user ann \u00b7 revision" in state
    assert "2 messages (1 user, 1 assistant)" in state
    assert "rules: none" in state and "pending: none" in state
    new = chat.say("/new second")
    assert "new session second" in new
    assert "echo #1: fresh start" in chat.say("fresh start")
    sessions = chat.say("/sessions")
    rows = {m[1]: line for line in sessions.splitlines() if (m := re.search(r"\b(first|second)\b", line))}
    assert set(rows) == {"first", "second"}
    assert rows["second"].lstrip().startswith("*") and not rows["first"].lstrip().startswith("*")
    auto = chat.say("/new")
    assert re.search(r"new session chat-[0-9a-f]{8}", auto)
    assert "2 messages" not in chat.say("/state")
    assert "/sessions" in chat.say("/help")
    assert "unknown command /nope" in chat.say("/nope")
    history = chat.say("/new first") + chat.say("/history")
    assert "hi" in history and "echo #1: hi" in history
    assert chat.exit() == 0


def test_ctrl_c_interrupts_a_slow_reply_and_the_session_goes_on(env: dict[str, str], chats: list[Chat]) -> None:
    chat = start(chats, env, "--model", "scripted:echo", "--session", "slow")
    chat.prompt()
    assert "echo #1: one" in chat.say("one")
    chat.child.sendline("sleep 60")
    chat.expect("sleeping 60 s")
    chat.child.sendintr()
    out = chat.prompt()
    assert "interrupting" in out
    assert "the reply was interrupted; the session keeps everything so far" in out
    # The next message works, in the same session (three user messages so far).
    assert "echo #3: two" in chat.say("two")
    assert "6 messages" in chat.say("/state")
    # Ctrl-C at the prompt: once warns, twice quits cleanly.
    chat.interrupt("press Ctrl-C again")
    chat.interrupt("session slow is saved")
    chat.child.expect(pexpect.EOF)
    chat.child.close()
    assert chat.child.exitstatus == 0


def test_the_session_persists_across_processes(env: dict[str, str], chats: list[Chat]) -> None:
    first = start(chats, env, "--model", "scripted:echo", "--session", "keep")
    first.prompt()
    assert "echo #1: remember me" in first.say("remember me")
    assert first.exit() == 0

    second = start(chats, env, "--model", "scripted:echo", "--session", "keep")
    banner = second.prompt()
    assert "resumed session keep: 2 messages" in banner
    assert "echo #2: still there?" in second.say("still there?")
    assert "4 messages" in second.say("/state")
    assert second.exit() == 0


def test_a_pending_approval_survives_a_restart(env: dict[str, str], chats: list[Chat]) -> None:
    first = start(chats, env, "--model", "scripted:demo", "--session", "wait", "--confirm", "calculate")
    first.prompt()
    first.child.sendline("What is 2 + 2?")
    first.expect(ALLOW)
    first.interrupt("left waiting")  # leave it waiting
    first.prompt()
    assert "calculate" in first.say("/state").split("pending:")[1]
    assert first.exit() == 0

    second = start(chats, env, "--model", "scripted:demo", "--session", "wait", "--confirm", "calculate")
    banner = second.expect(ALLOW)
    assert "1 tool call(s) waiting for an answer" in banner
    assert '\u26a0 approve calculate {"expression": "2 + 2"}' in banner
    out = second.say("y")
    assert "2 + 2 = 4." in out
    assert "pending: none" in second.say("/state")
    assert second.exit() == 0


def test_a_bad_model_id_fails_fast(env: dict[str, str]) -> None:
    child = pexpect.spawn(
        sys.executable, ["-m", "agentrt.cli", "chat", "--model", "nope"], env=env, encoding="utf-8", timeout=30
    )
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 2
    assert "model id must look like 'provider:model'" in str(child.before)
