"""WorkspaceAgent: files, AGENTS.md, @path mentions, skills and plan mode on one folder, offline.

A copy of `examples/workspace/` (its `AGENTS.md` and skills) in a temporary folder is the
workspace. A scripted model stands in for the LLM:

1. The user mentions `@skills/release-notes/references/style.md`: the file is attached to the
   message, and `@../outside.txt` is refused (outside the workspace) with a note.
2. The session goes into plan mode: a write is denied, the model writes its plan and asks for
   approval with `plan_exit`; the "human" approves, plan mode ends.
3. The model loads the `release-notes` skill and writes `CHANGELOG.md`, which asks for approval
   (a file edit in DEFAULT mode); once approved, the file is there.

What the model received (the system prompt with AGENTS.md and the skills list, the attachment)
is printed from `model.requests`.

Run: .venv/bin/python examples/workspace_agent.py
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

from agentrt import ConfirmResult, GenerateReason, Msg, RuntimeContext, ToolUseBlock
from agentrt import events as ev
from agentrt.harness import MentionsExpanded, WorkspaceAgent
from agentrt.model import ScriptedModel

EXAMPLE = Path(__file__).parent / "workspace"
PLAN = "1. Load release-notes.\n2. Write CHANGELOG.md.\n"
CHANGELOG = "# Changelog\n\n## 1.1.0\n\nWorkspace agents read AGENTS.md.\n"


def scripted_model() -> ScriptedModel:
    return ScriptedModel(
        [
            # 1. a question about an attached file
            "The style guide asks for plain words in the present tense.",
            # 2. plan mode: a write is denied, then the plan and its approval
            ToolUseBlock(id="w0", name="write_file", input={"path": "CHANGELOG.md", "content": CHANGELOG}),
            ToolUseBlock(
                id="p1", name="plan_write", input={"content": "1. Load release-notes.\n2. Write CHANGELOG.md.\n"}
            ),
            ToolUseBlock(id="x1", name="plan_exit", input={}),
            # 3. carry out the plan: load the skill, write the file (asks), answer
            ToolUseBlock(id="s1", name="load_skill", input={"name": "release-notes"}),
            ToolUseBlock(id="w1", name="write_file", input={"path": "CHANGELOG.md", "content": CHANGELOG}),
            "CHANGELOG.md has the 1.1.0 entry.",
        ]
    )


async def show(agent: WorkspaceAgent, message: str | Msg, ctx: RuntimeContext) -> Msg:
    reply: Msg | None = None
    async for event in agent.stream_events(message, ctx):
        if isinstance(event, MentionsExpanded):
            for m in event.mentions:
                print(f"   @ {m.path}: " + (f"attached ({m.size} bytes)" if m.attached else f"refused: {m.reason}"))
        elif isinstance(event, ev.ToolCallStarted):
            print(f"-> {event.name}")
        elif isinstance(event, ev.ToolResult):
            first = str(event.result.output).splitlines()[0] if event.result.output else ""
            print(f"<- {event.result.name} [{event.result.state}]: {first[:110]}")
        elif event.type == "plan_mode_changed":
            print(f"   plan mode {'on' if getattr(event, 'active', False) else 'off'}")
        elif isinstance(event, ev.RunFinished):
            reply = event.msg
    assert reply is not None
    print(f"agent: {reply.text}" if reply.text else f"(paused: {reply.generate_reason.value})")
    return reply


async def approve_all(agent: WorkspaceAgent, reply: Msg, ctx: RuntimeContext) -> Msg:
    while reply.generate_reason is GenerateReason.AWAITING_CONFIRMATION:
        waiting = reply.metadata["pending_tool_calls"]
        for call in waiting:
            print(f"   human approves {call['name']}")
        answers = [ConfirmResult(confirmed=True, tool_call=call["id"]) for call in waiting]
        reply = await show(agent, Msg.confirm(answers), ctx)
    return reply


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "workspace"
        shutil.copytree(EXAMPLE, folder)
        (Path(tmp) / "outside.txt").write_text("not for the model\n")
        model = scripted_model()
        agent = WorkspaceAgent(folder, model, sandbox=None, subagents=False)
        ctx = RuntimeContext(user_id="ann", session_id="release")
        try:
            print("== 1. @path mentions")
            await show(agent, "What does @skills/release-notes/references/style.md ask? And @../outside.txt?", ctx)
            system = model.requests[0].messages[0].text
            print("   system prompt holds AGENTS.md:", "one sentence per line" in system)
            print("   system prompt lists the skills:", "release-notes" in system and "csv-report" in system)
            assert "not for the model" not in model.requests[0].messages[-1].text

            print("== 2. plan mode")
            await agent.enter_plan_mode(ctx)
            reply = await show(agent, "Add a 1.1.0 entry to CHANGELOG.md.", ctx)
            reply = await approve_all(agent, reply, ctx)
            print("   plan:", (folder / "plans" / "release.md").read_text().replace("\n", " "))
            assert not await agent.in_plan_mode(ctx)
            assert (folder / "CHANGELOG.md").read_text() == CHANGELOG
            print("== CHANGELOG.md\n" + (folder / "CHANGELOG.md").read_text())
            model.assert_complete()
        finally:
            await agent.aclose()


if __name__ == "__main__":
    asyncio.run(main())
