"""`agentrt chat` answering an MCP server's questions: field prompts in-process, then a real pseudo-terminal."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect  # type: ignore[import-untyped]
import pytest
from rich.console import Console

from agentrt.cli.chat import _SKIP, ChatRenderer, ChatSession, field_value
from agentrt.tool.questions import McpElicitation, McpElicitationClosed
from mcp_questions import Received, agent_with_questions, call

ROOT = Path(__file__).resolve().parents[2]
APP = Path(__file__).with_name("chat_questions_app.py")
PROMPT = "you \u203a "


# -- converting and checking what the user types -------------------------------------------------------------
@pytest.mark.parametrize(
    ("prop", "raw", "required", "expected"),
    [
        ({"type": "integer", "minimum": 1, "maximum": 8}, "3", True, (3, None)),
        ({"type": "integer", "minimum": 1, "maximum": 8}, "9", True, (None, "must be at most 8")),
        ({"type": "integer"}, "three", True, (None, "must be a whole number")),
        ({"type": "number"}, "2.5", True, (2.5, None)),
        ({"type": "number"}, "nan", True, (None, "must be a number")),
        ({"type": "boolean"}, "Yes", True, (True, None)),
        ({"type": "boolean"}, "maybe", True, (None, "answer y or n")),
        ({"type": "boolean", "default": False}, "", True, (False, None)),
        ({"type": "string"}, "", False, (_SKIP, None)),
        ({"type": "string"}, "", True, (None, "this field is required")),
        ({"type": "string", "format": "email"}, "ann", True, (None, "not a valid email")),
        ({"type": "string", "format": "date"}, "2024-02-29", True, ("2024-02-29", None)),
        ({"type": "string", "enum": ["veg", "fish"]}, "2", True, ("fish", None)),
        ({"type": "string", "enum": ["veg", "fish"], "enumNames": ["Veggie", "Fish"]}, "veggie", True, ("veg", None)),
        ({"type": "string", "oneOf": [{"const": "h1", "title": "Superman"}]}, "superman", True, ("h1", None)),
        ({"type": "string", "enum": ["veg"]}, "3", True, (None, "not one of the choices")),
        ({"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 2}, "1, c", True, (["a", "c"], None)),
        (
            {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 2},
            "1,2,3",
            True,
            (None, "choose at most 2"),
        ),
        ({"type": "array", "items": {"anyOf": [{"const": "x", "title": "Ex"}]}}, "ex", True, (["x"], None)),
    ],
)
def test_field_values_are_converted_and_checked(
    prop: dict[str, Any], raw: str, required: bool, expected: tuple[Any, str | None]
) -> None:
    assert field_value("f", prop, raw, required) == expected


def test_the_renderer_shows_questions_as_plain_text() -> None:
    buffer = io.StringIO()
    renderer = ChatRenderer(Console(file=buffer, width=200, color_system=None), "assistant")
    renderer.feed(
        McpElicitation(
            reply_id="r",
            server="evil",
            mode="url",
            message="Sign in \x1b[2J[bold]now[/]\u202e",
            url="https://auth.example.com/x",
            question_id="q-1",
        )
    )
    renderer.feed(McpElicitationClosed(reply_id="r", question_id="q-1", reason="expired"))
    renderer.feed(McpElicitation(reply_id="r", server="s", mode="form", message="Handled elsewhere"))
    out = buffer.getvalue()
    assert "\x1b" not in out and "\u202e" not in out
    assert "MCP server 'evil' asks you to visit a page" in out
    assert "Sign in \\u001b[2J[bold]now[/]\\u202e" in out  # markup and escapes shown, not interpreted
    assert "url: https://auth.example.com/x" in out and "host: auth.example.com" in out
    assert "the question was expired unanswered" in out
    assert "asks you (answered by the application)" in out


# -- the chat session in-process, with typed answers ---------------------------------------------------------
class ScriptedChat(ChatSession):
    """A chat whose user types the given lines (KeyboardInterrupt for None)."""

    def __init__(self, console: Console, agent: Any, typed: list[str | None]) -> None:
        super().__init__(
            console, agent, agent.state_store, user_id="me", session_id="q", model_id="scripted", store_url="memory://"
        )
        self.typed = typed
        self.prompts: list[str] = []

    def _input(self, prompt: str) -> str:
        self.prompts.append(prompt)
        line = self.typed.pop(0)
        if line is None:
            raise KeyboardInterrupt
        return line


def run_chat(steps: list[Any], typed: list[str | None], message: str) -> tuple[ScriptedChat, Received, str]:
    received = Received()
    buffer = io.StringIO()
    with asyncio.Runner() as runner:
        agent, toolkit, _ = runner.run(agent_with_questions(received, steps))
        chat = ScriptedChat(Console(file=buffer, width=200, color_system=None), agent, typed)
        chat._runner = runner
        try:
            chat._send(message)
        finally:
            runner.run(toolkit.aclose())
    return chat, received, buffer.getvalue()


def test_a_form_is_filled_in_field_by_field() -> None:
    typed: list[str | None] = ["", "", "Ann", "ten", "9", "3", "y", "2"]
    chat, received, out = run_chat([call("book", table="T1"), "Booked."], typed, "Book T1")
    assert typed == []
    assert received.answers == [("book", "accept", {"name": "Ann", "seats": 3, "window": True, "meal": "fish"})]
    assert "MCP server 'questions' asks you" in out and "Book table T1: who and how many?" in out
    assert "this field is required" in out and "must be a whole number" in out and "must be at most 8" in out
    assert "1) veg  2) fish  3) meat" in out
    assert "accepted; the tool call goes on" in out and "booked table T1" in out
    assert any("Seats" in p and "whole number >= 1 <= 8" in p for p in chat.prompts)
    assert chat.agent.questions(chat.ctx) == []


def test_ctrl_c_cancels_and_n_declines() -> None:
    steps = [call("book", "c1", table="A"), call("authorize", "c2"), "Done."]
    _, received, out = run_chat(steps, [None, "n"], "Book and connect")
    assert received.answers == [("book", "cancel", None), ("authorize", "decline", None)]
    assert "cancelled; the tool call goes on" in out and "declined; the tool call goes on" in out
    assert "host: auth.example.com" in out


# -- the real terminal -------------------------------------------------------------------------------------
@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[tuple[list[Any], Path]]:
    children: list[Any] = []
    yield children, tmp_path
    for child in children:
        if child.isalive():
            child.terminate(force=True)


def spawn(terminal: tuple[list[Any], Path], steps: list[Any]) -> Any:
    children, home = terminal
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "PYTHONPATH": str(ROOT / "src"),
        "TERM": "dumb",
        "PYTHONIOENCODING": "utf-8",
        "LANG": "C.UTF-8",
    }
    child = pexpect.spawn(
        sys.executable,
        [str(APP), json.dumps(steps)],
        env=env,
        cwd=str(ROOT),
        encoding="utf-8",
        timeout=30,
        dimensions=(50, 200),
    )
    child.logfile_read = io.StringIO()
    children.append(child)
    child.expect(re.escape(PROMPT))
    return child


def test_the_terminal_asks_and_the_tool_call_goes_on(terminal: tuple[list[Any], Path]) -> None:
    child = spawn(terminal, [{"tool": "book", "arguments": {"table": "T9"}}, "Booked."])
    child.sendline("book T9")
    child.expect(r"answer\?")
    assert "Book table T9: who and how many?" in child.before
    child.sendline("y")
    for field, answer in (("Name", "Zoe"), ("Seats", "4"), ("Window", "n"), ("Meal", "meat")):
        child.expect(field + r".*\u203a ")
        child.sendline(answer)
    child.expect("accepted; the tool call goes on")
    child.expect(re.escape(PROMPT))
    before = child.before
    assert 'booked table T9: {"meal": "meat", "name": "Zoe", "seats": 4, "window": false}' in before
    assert "assistant \u203a Booked." in before
    child.sendline("/exit")
    child.expect(pexpect.EOF)


def test_ctrl_c_at_a_question_cancels_it_and_the_chat_goes_on(terminal: tuple[list[Any], Path]) -> None:
    child = spawn(terminal, [{"tool": "book", "arguments": {"table": "T2"}}, "No booking.", "echo"])
    child.sendline("book T2")
    child.expect(r"answer\?.*\u203a ")
    for _ in range(20):  # a Ctrl-C landing while input() sets up the terminal is noticed at the next one
        child.sendintr()
        if child.expect(["cancelled; the tool call goes on", pexpect.TIMEOUT], timeout=0.5) == 0:
            break
    else:
        raise AssertionError("Ctrl-C never cancelled the question")
    child.expect(re.escape(PROMPT))
    assert "not booked (cancel)" in child.before and "No booking." in child.before
    child.sendline("hello again")  # the session goes on
    child.expect("echo")
    child.sendline("/exit")
    child.expect(pexpect.EOF)
