"""``agentrt chat``'s session around an agent whose MCP tools ask questions (run on a pseudo-terminal by tests).

Usage: ``python chat_questions_app.py STEPS_JSON``: the scripted model's steps, each a text reply
or ``{"tool": name, "arguments": {...}}`` for a call of the in-process question server's tools.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the question server

from rich.console import Console

from agentrt import ReActAgent, Toolkit
from agentrt.cli.chat import ChatSession
from agentrt.mcp import McpClient
from agentrt.model import ScriptedModel
from agentrt.state import InMemoryStateStore
from mcp_questions import Received, call, question_server


class QuestionChat(ChatSession):
    """The chat, with the question server's tools registered on the chat's own event loop."""

    def _banner(self) -> None:
        client = McpClient.memory(question_server(Received()), name="questions")
        self._run(lambda: self.agent.toolkit.register_mcp(client))
        super()._banner()


def main() -> int:
    steps: list[Any] = []
    for step in json.loads(sys.argv[1]):
        steps.append(
            call(step["tool"], step.get("id", "call-1"), **step.get("arguments", {}))
            if isinstance(step, dict)
            else step
        )
    store = InMemoryStateStore()
    agent = ReActAgent("assistant", "You book tables.", ScriptedModel(steps), Toolkit(), state_store=store)
    chat = QuestionChat(
        Console(soft_wrap=True),
        agent,
        store,
        user_id="me",
        session_id="q",
        model_id="scripted:questions",
        store_url="memory://",
    )
    return chat.run()


if __name__ == "__main__":
    sys.exit(main())
