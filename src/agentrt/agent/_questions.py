"""The questions a run puts to its human while a tool call waits (MCP elicitation and approvals).

A tool asks through its `ToolCallScope.ask`, which the agent sets to `asker(run)` when it builds
the executor, if the run can reach a human: the run (or a run it is part of, for a subagent) is
streamed. Each question gets an id, is announced with an `McpElicitation` event into that
stream, waits on a future, and is settled exactly once: by ``agent.answer`` (validated first),
by its timeout, by an interrupt of the run, or because the asking side stopped waiting. Every
settlement emits `McpElicitationClosed` (except at the very end of a run, when nobody listens).

Questions live in memory on the outermost run (`QuestionBoard`), so they are answered on the
process running the call; a question is visible and answerable only through a run it belongs to:
``agent.questions(ctx)`` / ``agent.answer(ctx, ...)`` address the session ``(agent, user,
session)`` of `ctx`, and another user's or another session's questions are never reachable.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agentrt.message import new_id
from agentrt.tool.questions import (
    AskUser,
    ElicitationAnswer,
    McpElicitation,
    McpElicitationClosed,
    QuestionPolicy,
    UserQuestion,
    check_answer,
)

if TYPE_CHECKING:
    from agentrt.agent._run import Run

__all__ = ["QuestionBoard", "asker"]


class _Open:
    """One question waiting for its answer."""

    __slots__ = ("future", "herald", "question", "run", "settled")

    def __init__(self, question: UserQuestion, run: Run, herald: Run, future: asyncio.Future[ElicitationAnswer]):
        self.question = question
        self.run = run
        self.herald = herald
        self.future = future
        self.settled = False


class QuestionBoard:
    """The open questions of one outermost run and of the runs inside it (subagents)."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: dict[str, _Open] = {}

    def __len__(self) -> int:
        return len(self._open)

    def add(self, entry: _Open) -> None:
        self._open[entry.question.id] = entry

    def discard(self, entry: _Open) -> None:
        if self._open.get(entry.question.id) is entry:
            del self._open[entry.question.id]

    def listed(self, run: Run) -> list[UserQuestion]:
        """The open questions asked by `run` or a run inside it, oldest first."""
        return [e.question for e in self._open.values() if _within(e.run, run)]

    def answer(self, run: Run, question_id: str, answer: ElicitationAnswer | Mapping[str, Any]) -> bool:
        """Settle a question of `run` with a validated answer; False if none such is open."""
        entry = self._open.get(question_id)
        if entry is None or entry.settled or entry.future.done() or not _within(entry.run, run):
            return False
        checked = check_answer(entry.question, answer)  # InvalidAnswerError: the question stays open
        self.settle(entry, checked, "answered")
        return True

    def close_all(self, run: Run, reason: str, *, announce: bool = True) -> int:
        """Cancel every open question of `run` (and runs inside it); returns how many.

        Announced in `run`'s own stream: a subagent's stream is about to be cancelled with it.
        """
        entries = [e for e in self._open.values() if _within(e.run, run)]
        herald = _herald(run)
        for entry in entries:
            self.settle(entry, ElicitationAnswer.cancel(), reason, announce=announce, herald=herald)
        return len(entries)

    def settle(
        self,
        entry: _Open,
        answer: ElicitationAnswer,
        reason: str,
        *,
        announce: bool = True,
        herald: Run | None = None,
    ) -> None:
        """Give the waiting asker `answer` and say so in the stream (once per question)."""
        if entry.settled:
            return
        entry.settled = True
        self.discard(entry)
        if not entry.future.done():
            entry.future.set_result(answer)
        if announce:
            _announce_closed(entry, answer.action, reason, herald or entry.herald)


def _within(run: Run | None, ancestor: Run) -> bool:
    while run is not None:
        if run is ancestor:
            return True
        run = run.parent
    return False


def _herald(run: Run) -> Run | None:
    """The run whose stream reaches the human: this one or the nearest enclosing one that streams."""
    current: Run | None = run
    while current is not None:
        if current.streaming:
            return current
        current = current.parent
    return None


def _announce_closed(entry: _Open, action: str, reason: str, herald: Run) -> None:
    run, question = entry.run, entry.question
    herald.emit(
        McpElicitationClosed(
            reply_id=run.reply_id,
            session_id=run.session_id,
            source=run.agent.name,
            question_id=question.id,
            tool_call_id=question.tool_call_id,
            action=action,
            reason=reason,
        )
    )


def asker(run: Run) -> AskUser | None:
    """The question channel of `run`'s tool calls (None when no human can be reached).

    Nobody can answer when nobody streams the run (or the run it is part of), or when its context
    says its consumer cannot (`QuestionPolicy(ask=False)`).
    """
    policy = run.ctx.get(QuestionPolicy)
    herald = _herald(run) if policy is None or policy.ask else None
    if herald is None:
        return None

    async def ask(question: UserQuestion) -> ElicitationAnswer:
        board = run.question_board
        now = time.time()
        timeout = question.timeout
        question = dataclasses.replace(
            question,
            id=f"q-{new_id()[:16]}",
            asked_at=now,
            expires_at=now + timeout if timeout is not None else None,
            source=run.agent.name,
            session_id=run.session_id,
        )
        entry = _Open(question, run, herald, asyncio.get_running_loop().create_future())
        board.add(entry)
        herald.emit(
            McpElicitation(
                reply_id=run.reply_id,
                session_id=run.session_id,
                source=run.agent.name,
                tool_call_id=question.tool_call_id,
                server=question.server,
                tool=question.tool,
                mode=question.mode,
                message=question.message,
                requested_schema=question.requested_schema,
                url=question.url,
                question_id=question.id,
                expires_at=question.expires_at,
            )
        )
        # Cleanup below is synchronous: this may run in a task that anyio keeps cancelling.
        try:
            if timeout is None:
                return await entry.future
            try:
                async with asyncio.timeout(timeout):
                    return await entry.future
            except TimeoutError:
                if entry.future.done() and not entry.future.cancelled():
                    return entry.future.result()  # answered at the very last moment
                board.settle(entry, ElicitationAnswer.cancel(), "expired")
                return ElicitationAnswer.cancel()
        finally:
            if not entry.settled:  # the asker stopped waiting: the tool call or the server gave up
                board.settle(entry, ElicitationAnswer.cancel(), "withdrawn")

    return ask
