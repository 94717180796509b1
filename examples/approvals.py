"""Human in the loop: a destructive tool pauses the run until the user answers; offline.

Run: .venv/bin/python examples/approvals.py
"""

from __future__ import annotations

import asyncio

from agentrt import ConfirmResult, GenerateReason, Msg, ReActAgent, RuntimeContext, Toolkit, ToolUseBlock, tool
from agentrt.model import ScriptedModel
from agentrt.permission import PermissionRule


@tool(destructive=True)
async def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


async def main() -> None:
    model = ScriptedModel(
        [
            ToolUseBlock(id="call-1", name="delete_file", input={"path": "/tmp/report.old"}),
            "I deleted /tmp/report.old.",
            ToolUseBlock(id="call-2", name="delete_file", input={"path": "/tmp/notes.old"}),
            "I deleted /tmp/notes.old as well.",
        ]
    )
    agent = ReActAgent("janitor", "You tidy up files.", model=model, toolkit=Toolkit([delete_file]))
    ctx = RuntimeContext(user_id="alice", session_id="cleanup")

    reply = await agent.call("Delete /tmp/report.old", ctx)
    assert reply.generate_reason is GenerateReason.AWAITING_CONFIRMATION
    [pending] = reply.metadata["pending_tool_calls"]
    print(f"approval needed: {pending['name']}({pending['input']}) because {pending['reason']}")
    for rule in pending["suggested_rules"]:
        print(f"  suggested rule: {rule}")

    # The user approves and accepts the broader rule: later deletions under /tmp/ run without asking.
    always = PermissionRule.from_dict(pending["suggested_rules"][1])
    reply = await agent.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call="call-1", rules=[always])]), ctx)
    print(reply.text)

    reply = await agent.call("And /tmp/notes.old", ctx)
    print(reply.text, f"(reason: {reply.generate_reason.value})")


if __name__ == "__main__":
    asyncio.run(main())
