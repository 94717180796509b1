"""`agentrt chat` shows the plan ``plan_exit`` asks to approve, line by line, as untrusted text."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest
from rich.console import Console

from agentrt import RuntimeContext
from agentrt.cli.chat import ChatSession, build_agent
from agentrt.permission import ConfirmResult
from agentrt.state import InMemoryStateStore, PendingCall
from agentrt.tool.builtin import PlanTools


def session(console: Console) -> ChatSession:
    store = InMemoryStateStore()
    agent, _ = build_agent("scripted:demo", store=store)
    return ChatSession(
        console, agent, store, user_id="u", session_id="s", model_id="scripted:demo", store_url="memory://"
    )


def test_the_plan_is_shown_below_the_approval_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tools = PlanTools(tmp_path)
    plan = "# Plan\n1. Edit [bold]main.py[/bold]\n2. Run the tests \x1b[2J"
    asyncio.run(tools.plan_write.invoke({"content": plan}, RuntimeContext(session_id="s")))
    check = tools.plan_exit.check_permission
    assert check is not None
    reason = check({}, RuntimeContext(session_id="s")).reason
    buffer = io.StringIO()
    chat = session(Console(file=buffer, width=200, color_system=None))
    monkeypatch.setattr(chat, "_input", lambda prompt: "y")
    answers = chat._ask_approvals([PendingCall(id="x1", name="plan_exit", input={}, reason=reason)])
    assert answers is not None
    [answer] = answers
    assert isinstance(answer, ConfirmResult) and answer.confirmed and answer.tool_call_id == "x1"
    out = buffer.getvalue()
    assert "\u26a0 approve plan_exit {} (approve this plan (plans/s.md) and leave plan mode?)" in out
    lines = out.splitlines()
    assert "  \u2502 # Plan" in lines
    assert "  \u2502 1. Edit [bold]main.py[/bold]" in lines  # shown as text, not as markup
    assert "  \u2502 2. Run the tests \\u001b[2J" in lines  # a control sequence cannot repaint the terminal
