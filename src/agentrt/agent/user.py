"""`UserAgent`: a human at the console taking part in a conversation (pipelines, MsgHub)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable

from agentrt.agent._run import Run
from agentrt.agent.base import AgentBase
from agentrt.message import Msg, TextBlock

__all__ = ["UserAgent"]


def _console_input(prompt: str) -> str:
    return input(prompt)


class UserAgent(AgentBase):
    """Shows the incoming messages and replies with what the person types.

    `read` is the function that reads one line (default: `input`); it runs in a worker thread so
    the event loop keeps serving other sessions while the person types. End of input (Ctrl-D)
    replies with an empty message.
    """

    __slots__ = ("prompt", "read", "write")

    def __init__(
        self,
        name: str = "user",
        *,
        prompt: str = "> ",
        read: Callable[[str], str] | None = None,
        write: Callable[[str], object] | None = None,
    ) -> None:
        super().__init__(name, description="A human at the console")
        self.prompt = prompt
        self.read = read or _console_input
        self.write = write or (lambda text: print(text, file=sys.stdout, flush=True))

    async def _execute(self, run: Run) -> Msg:
        for msg in run.input:
            if msg.text:
                self.write(f"{msg.name or msg.role}: {msg.text}")
        try:
            text = await asyncio.to_thread(self.read, self.prompt)
        except EOFError:
            text = ""
        return Msg(role="user", content=[TextBlock(text=text)], name=self.name, id=run.reply_id)
