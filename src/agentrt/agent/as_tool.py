"""Agent-as-tool: a subagent the model calls like any tool, with its own session and event stream.

The subagent runs in a session derived from the caller's (``<session>/<tool name>``), so its
history is isolated but continues across calls from the same parent session. Its events are
forwarded into the parent's stream (keeping their own `source`), its token usage is added to the
parent's, and interrupting the parent cancels it. When the subagent pauses for approval, the
tool suspends: the parent pauses too and surfaces the subagent's pending calls; the answers are
routed back to the subagent, which resumes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentrt import _json
from agentrt.agent._run import current_run
from agentrt.context import RuntimeContext
from agentrt.errors import ToolSuspended, UserError
from agentrt.events import RunFinished
from agentrt.message import GenerateReason, Msg, ToolResultBlock
from agentrt.permission import ConfirmResult
from agentrt.tool.base import Tool

if TYPE_CHECKING:
    from agentrt.agent.base import AgentBase

__all__ = ["agent_as_tool"]

_SAFE = re.compile(r"[^A-Za-z0-9_-]+")
_DEFAULT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"task": {"type": "string", "description": "What the agent should do, with all needed context."}},
    "required": ["task"],
    "additionalProperties": False,
}
_PAUSED = (GenerateReason.AWAITING_CONFIRMATION, GenerateReason.AWAITING_EXTERNAL_EXECUTION)


def agent_as_tool(
    agent: AgentBase,
    *,
    name: str | None = None,
    description: str | None = None,
    input_schema: Mapping[str, Any] | None = None,
    timeout: float | None = None,
) -> Tool:
    """Wrap `agent` as a `Tool` (see the module docstring)."""
    tool_name = name or _SAFE.sub("_", agent.name).strip("_") or "subagent"
    text = description or agent.description or f"Delegate a task to the {agent.name!r} agent and get its answer."

    def child_ctx(ctx: RuntimeContext) -> RuntimeContext:
        parent_session = ctx.key[1]
        return ctx.child(session_id=f"{parent_session}/{tool_name}")

    async def handler(args: Mapping[str, Any], ctx: RuntimeContext) -> Any:
        if input_schema is None:
            task = args.get("task")
            if not isinstance(task, str) or not task.strip():
                raise UserError(f"tool {tool_name!r} needs a non-empty 'task' string")
            message = Msg.user(task)
        else:
            message = Msg.user(_json.dumps(dict(args)))
        return _outcome(await _run_child(agent, [message], child_ctx(ctx)))

    async def resume(state: Any, answers: Sequence[Any], ctx: RuntimeContext) -> Any:
        confirms = [a for a in answers if isinstance(a, ConfirmResult)]
        results = [a for a in answers if isinstance(a, ToolResultBlock)]
        messages: list[Msg] = []
        if confirms:
            messages.append(Msg.confirm(confirms))
        if results:
            messages.append(Msg(role="user", content=list(results)))
        return _outcome(await _run_child(agent, messages, child_ctx(ctx)))

    tool = Tool.from_handler(
        tool_name,
        text,
        dict(input_schema) if input_schema is not None else _DEFAULT_SCHEMA,
        handler,
        timeout=timeout,
        concurrency_safe=True,
    )
    tool.resume = resume
    return tool


async def _run_child(agent: AgentBase, messages: list[Msg], ctx: RuntimeContext) -> Msg:
    parent = current_run.get()
    reply: Msg | None = None
    if parent is None or not parent.streaming:
        reply = await agent.call(messages, ctx)
    else:
        async for event in agent.stream_events(messages, ctx):
            parent.emit(event)
            if isinstance(event, RunFinished):
                reply = event.msg
    if reply is None:  # pragma: no cover - stream_events always ends with RunFinished or raises
        raise UserError(f"subagent {agent.name!r} ended without a reply")
    if parent is not None and reply.usage is not None:
        parent.add_usage(reply.usage)
    return reply


def _outcome(reply: Msg) -> Any:
    if reply.generate_reason in _PAUSED:
        from agentrt.agent._hitl import META_PENDING

        pending = [dict(p) for p in reply.metadata.get(META_PENDING) or ()]
        raise ToolSuspended(pending, state=None)
    if reply.generate_reason is GenerateReason.STRUCTURED_OUTPUT:
        return reply.metadata.get("structured_output")
    return reply.text
