"""Built-in workspace tools: files and shell confined to a temporary workspace, offline.

A scripted model explores the workspace, edits a file (allowed without asking in accept-edits
mode), tries to read the secrets in `.env` (denied by the tool's own check, whatever the mode),
then runs the tests with the shell tool, which asks for approval first; its output streams as
`ToolOutputDelta` events.

Run: .venv/bin/python examples/workspace_tools.py
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from agentrt import (
    ConfirmResult,
    GenerateReason,
    Msg,
    PermissionContext,
    PermissionMode,
    ReActAgent,
    RuntimeContext,
    Toolkit,
    ToolUseBlock,
)
from agentrt import events as ev
from agentrt.model import ScriptedModel
from agentrt.tool.builtin import FileTools, ShellTool
from agentrt.tool.emit import ToolOutputDelta


def make_workspace(root: Path) -> None:
    (root / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "test_calc.py").write_text(
        "from calc import add\n\nassert add(2, 3) == 5, 'add is broken'\nprint('test_calc: ok')\n"
    )
    (root / ".env").write_text("API_KEY=do-not-leak\n")


async def show(agent: ReActAgent, message: str | Msg, ctx: RuntimeContext) -> Msg:
    reply: Msg | None = None
    async for event in agent.stream_events(message, ctx):
        if isinstance(event, ev.ToolCallStarted):
            print(f"-> {event.name}")
        elif isinstance(event, ToolOutputDelta):
            for line in event.delta.splitlines():
                print(f"   | {line}")
        elif isinstance(event, ev.ToolResult):
            first = str(event.result.output).splitlines()[0] if event.result.output else ""
            print(f"<- {event.result.name} [{event.result.state}]: {first}")
        elif isinstance(event, ev.RunFinished):
            reply = event.msg
    assert reply is not None
    return reply


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_workspace(root)
        toolkit = Toolkit()
        toolkit.register(FileTools(root))
        toolkit.register(ShellTool(root, timeout=30))
        test_command = f"{sys.executable} test_calc.py"
        model = ScriptedModel(
            [
                [ToolUseBlock(id="c1", name="glob_files", input={"pattern": "**/*.py"})],
                [ToolUseBlock(id="c2", name="read_file", input={"path": "calc.py"})],
                [
                    ToolUseBlock(id="c3", name="edit_file", input={"path": "calc.py", "old": "a - b", "new": "a + b"}),
                    ToolUseBlock(id="c4", name="read_file", input={"path": ".env"}),
                ],
                [ToolUseBlock(id="c5", name="run_command", input={"command": test_command})],
                "Fixed `add` in calc.py (it subtracted); the test passes now. I did not read .env.",
            ]
        )
        agent = ReActAgent(
            "coder",
            "You fix bugs in the workspace.",
            model=model,
            toolkit=toolkit,
            # Edits inside the workspace run without asking; commands still ask.
            permission=PermissionContext(mode=PermissionMode.ACCEPT_EDITS, workspace=str(root)),
        )
        ctx = RuntimeContext(user_id="dev", session_id="fix-calc")

        reply = await show(agent, "The add test fails, please fix it.", ctx)
        assert reply.generate_reason is GenerateReason.AWAITING_CONFIRMATION
        [pending] = reply.metadata["pending_tool_calls"]
        print(f"approval needed: {pending['name']} {pending['input']['command']!r} ({pending['reason']})")

        reply = await show(agent, Msg.confirm([ConfirmResult(confirmed=True, tool_call=pending["id"])]), ctx)
        print(reply.text)
        print("calc.py now:", (root / "calc.py").read_text().splitlines()[1].strip())


if __name__ == "__main__":
    asyncio.run(main())
