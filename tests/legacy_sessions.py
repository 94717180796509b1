"""A `ReActAgent` meeting sessions written before sessions belonged to an agent (shared by the store tests).

An agent takes over (moves) its own legacy session: the server's ``"<agent>:<id>"``, or ``<id>``
when no other agent replied in it. A deleted session stays deleted, and no other agent inherits a
legacy session or its pending approvals; a session several agents replied in is left alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

import pytest

from agentrt import Msg, ReActAgent, RuntimeContext, Toolkit, ToolUseBlock, tool
from agentrt.errors import NotPendingError
from agentrt.model import ScriptedModel
from agentrt.permission import ConfirmResult
from agentrt.state.base import AgentStateStore, BaseStateStore

__all__ = ["check_legacy_adoption"]

PAUSED = RuntimeContext(user_id="u", session_id="paused")
SOLO = RuntimeContext(user_id="u", session_id="solo")
SHARED = RuntimeContext(user_id="u", session_id="shared")
SERVED = RuntimeContext(user_id="u", session_id="served")


def asked(model: ScriptedModel) -> str:
    """The texts of the last request `model` received."""
    return " | ".join(m.text for m in model.requests[-1].messages)


async def seed_legacy(store: AgentStateStore, toolkit: Toolkit) -> None:
    """The legacy namespace as earlier versions left it: bot's paused and solo sessions, a shared one."""
    model = ScriptedModel([ToolUseBlock(id="c1", name="run_command", input={"command": "ls"}), "solo answer"])
    bot = ReActAgent("bot", model=model, toolkit=toolkit, state_store=store)
    for ctx, text in ((PAUSED, "paused question"), (SOLO, "solo question")):
        await bot.call(text, ctx)
        state = await store.load(*ctx.key, agent="bot")
        assert state is not None
        await store.save(replace(state, agent=""), expected_revision=0)
        await store.delete(*ctx.key, agent="bot")
    shared = [
        Msg.user("q1"),
        Msg.assistant("bot said", name="bot"),
        Msg.user("q2"),
        Msg.assistant("other said", name="other"),
    ]
    await store.append("u", "shared", shared, expected_revision=0)
    served = [Msg.user("served question"), Msg.assistant("served answer")]  # unnamed: the prefix says whose
    await store.append("u", "bot:served", served, expected_revision=0)


async def check_legacy_adoption(open_store: Callable[[], BaseStateStore], caplog: pytest.LogCaptureFixture) -> None:
    ran: list[str] = []

    @tool(requires_confirmation=True)
    async def run_command(command: str) -> str:
        """Run a command."""
        ran.append(command)
        return "ran"

    toolkit = Toolkit([run_command])
    async with open_store() as old:
        await seed_legacy(old, toolkit)
    async with open_store() as store:  # opened after the upgrade: finds the legacy sessions
        model = ScriptedModel.from_function(lambda request: "ok")
        bot = ReActAgent("bot", model=model, toolkit=toolkit, state_store=store)
        coder_model = ScriptedModel.from_function(lambda request: "coded")
        coder = ReActAgent("coder", model=coder_model, state_store=store)

        reply = await coder.call("write fizzbuzz", PAUSED)  # bot's pending approval does not block coder
        assert reply.text == "coded" and "paused question" not in asked(coder_model)
        await bot.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call="c1")]), PAUSED)
        assert ran == ["ls"] and "paused question" in asked(model)
        assert await store.load(*PAUSED.key, agent="") is None, "moved, not copied"
        assert await store.delete(*PAUSED.key, agent="bot")
        with pytest.raises(NotPendingError):  # deleted for good: the approval is not there to give twice
            await bot.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call="c1")]), PAUSED)
        assert ran == ["ls"]

        await bot.call("again", SOLO)
        assert "solo question" in asked(model) and "solo answer" in asked(model)
        assert await store.delete(*SOLO.key, agent="bot")
        await bot.call("afresh", SOLO)
        assert "solo" not in asked(model), "a deleted session does not come back from the legacy namespace"

        await bot.call("next", SERVED)
        assert "served question | served answer" in asked(model)

        with caplog.at_level(logging.WARNING, logger="agentrt.state"):
            await bot.call("hello", SHARED)
        assert "q1" not in asked(model) and "other said" not in asked(model), "a shared legacy session is no one's"
        assert "'bot', 'other'" in caplog.text and "agentrt sessions migrate" in caplog.text
        legacy = await store.load(*SHARED.key, agent="")
        assert legacy is not None and len(legacy.messages) == 4, "left for migrate_legacy"
