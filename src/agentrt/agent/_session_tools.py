"""Per-session tools the agent adds itself: the tool-group meta tool and the task list.

They live with the agent, never in the shared `Toolkit`, and change only the calling session's
`AgentState` (active groups, tasks), so sessions served by one agent never see each other's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentrt.agent._run import current_run
from agentrt.context import RuntimeContext
from agentrt.errors import ToolRetry
from agentrt.tool.base import Tool
from agentrt.tool.toolkit import Toolkit

__all__ = ["META_TOOL", "TODO_TOOL", "meta_tool", "task_reminder", "todo_tool"]

META_TOOL = "manage_tool_groups"
TODO_TOOL = "todo_write"
_STATUSES = ("pending", "in_progress", "completed")


def _run_or_fail() -> Any:
    run = current_run.get()
    if run is None:
        raise ToolRetry(f"{META_TOOL} can only be used inside an agent call")
    return run


def meta_tool(toolkit: Toolkit) -> Tool:
    """A tool letting the model list tool groups and switch them on or off for this session."""

    async def handler(args: Mapping[str, Any], ctx: RuntimeContext) -> str:
        action = args.get("action")
        group = args.get("group")
        run = _run_or_fail()
        groups = toolkit.groups
        active = set(
            run.state.active_groups if run.state.active_groups is not None else toolkit.default_active_groups()
        )
        if action == "list":
            if not groups:
                return "There are no tool groups."
            lines = []
            for g in groups.values():
                tools = sorted(t.name for t in toolkit.tools.values() if t.group == g.name)
                state = "active" if g.name in active else "inactive"
                lines.append(f"- {g.name} ({state}): {g.description or 'no description'}; tools: {', '.join(tools)}")
            return "Tool groups:\n" + "\n".join(lines)
        if action not in ("activate", "deactivate"):
            raise ToolRetry("action must be 'list', 'activate' or 'deactivate'")
        if not isinstance(group, str) or group not in groups:
            raise ToolRetry(f"unknown group {group!r}; groups: {', '.join(sorted(groups)) or '(none)'}")
        if action == "activate":
            active.add(group)
        else:
            active.discard(group)
        run.set_field("active_groups", sorted(active))
        if run.executor is not None:
            run.executor.set_active_groups(frozenset(active))
        return f"Group {group!r} is now {'active' if action == 'activate' else 'inactive'} for this session."

    schema = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["list", "activate", "deactivate"]},
            "group": {"type": "string", "description": "Group name (for activate / deactivate)."},
        },
        "required": ["action"],
        "additionalProperties": False,
    }
    return Tool.from_handler(
        META_TOOL,
        "List the tool groups, or activate / deactivate one for this conversation to get the tools you need.",
        schema,
        handler,
        concurrency_safe=False,
    )


def todo_tool() -> Tool:
    """`todo_write`: replace the session's task list (at most one task in progress)."""

    async def handler(args: Mapping[str, Any], ctx: RuntimeContext) -> str:
        todos = args.get("todos")
        if not isinstance(todos, list):
            raise ToolRetry("'todos' must be a list of {content, status} objects")
        clean: list[dict[str, str]] = []
        for i, item in enumerate(todos):
            if not isinstance(item, Mapping):
                raise ToolRetry(f"todos[{i}] must be an object with 'content' and 'status'")
            content = item.get("content")
            status = item.get("status", "pending")
            if not isinstance(content, str) or not content.strip():
                raise ToolRetry(f"todos[{i}].content must be a non-empty string")
            if status not in _STATUSES:
                raise ToolRetry(f"todos[{i}].status must be one of {', '.join(_STATUSES)}")
            clean.append({"content": content.strip(), "status": status})
        if sum(1 for t in clean if t["status"] == "in_progress") > 1:
            raise ToolRetry("at most one task may be in_progress at a time")
        run = _run_or_fail()
        run.set_field("tasks", clean)
        open_tasks = sum(1 for t in clean if t["status"] != "completed")
        return f"Task list saved: {len(clean)} task(s), {open_tasks} open."

    schema = {
        "type": "object",
        "properties": {
            "todos": {
                "type": "array",
                "description": "The whole task list (it replaces the previous one).",
                "items": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "string"},
                        "status": {"type": "string", "enum": list(_STATUSES)},
                    },
                    "required": ["content", "status"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["todos"],
        "additionalProperties": False,
    }
    return Tool.from_handler(
        TODO_TOOL,
        "Write the task list for this request: all tasks with status pending, in_progress or completed. "
        "Keep exactly one task in_progress while working and mark tasks completed as soon as they are done.",
        schema,
        handler,
        concurrency_safe=False,
    )


def task_reminder(tasks: Any) -> str | None:
    """A short reminder of the open tasks, or None when there are none."""
    open_tasks = [t for t in tasks or () if isinstance(t, Mapping) and t.get("status") != "completed"]
    if not open_tasks:
        return None
    lines = [f"- [{t.get('status', 'pending')}] {t.get('content', '')}" for t in open_tasks]
    return (
        "<system-reminder>\nOpen tasks:\n"
        + "\n".join(lines)
        + "\nUpdate the list with todo_write as you progress.\n</system-reminder>"
    )
