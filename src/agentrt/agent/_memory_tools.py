"""Tools an agent adds for its memory: ``remember`` / ``recall`` (long-term memory) and ``compress_context``.

Like the session tools, they live with the agent, not in the shared `Toolkit`, and act for the
calling user and session only (the user id comes from the call's `RuntimeContext`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agentrt.agent._run import current_run
from agentrt.context import RuntimeContext
from agentrt.errors import ToolRetry
from agentrt.tool.base import Tool

if TYPE_CHECKING:
    from agentrt.memory.long_term import LongTermMemory

__all__ = ["COMPRESS_TOOL", "RECALL_TOOL", "REMEMBER_TOOL", "compress_tool", "recall_tool", "remember_tool"]

REMEMBER_TOOL = "remember"
RECALL_TOOL = "recall"
COMPRESS_TOOL = "compress_context"
_MAX_FACTS = 20


def remember_tool(memory: LongTermMemory) -> Tool:
    """``remember(facts)``: save durable facts about the user for future conversations."""

    async def handler(args: Mapping[str, Any], ctx: RuntimeContext) -> str:
        facts = args.get("facts")
        if isinstance(facts, str):
            facts = [facts]
        if not isinstance(facts, list) or not facts or not all(isinstance(f, str) for f in facts):
            raise ToolRetry("'facts' must be a non-empty list of short sentences")
        clean = [f.strip() for f in facts if f.strip()][:_MAX_FACTS]
        if not clean:
            raise ToolRetry("'facts' must hold at least one non-empty sentence")
        items = await memory.record(ctx.key[0], clean)
        return f"Remembered {len(items)} fact(s)."

    schema = {
        "type": "object",
        "properties": {
            "facts": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Each fact one short, self-contained sentence, e.g. 'The user prefers metric units.'",
            }
        },
        "required": ["facts"],
        "additionalProperties": False,
    }
    return Tool.from_handler(
        REMEMBER_TOOL,
        "Save durable facts about the user for future conversations: identity, preferences, constraints, "
        "decisions, and anything the user asks you to remember. Not for details of the current task only.",
        schema,
        handler,
        concurrency_safe=False,
    )


def recall_tool(memory: LongTermMemory) -> Tool:
    """``recall(query, k)``: search what was remembered about the user in earlier conversations."""

    async def handler(args: Mapping[str, Any], ctx: RuntimeContext) -> str:
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolRetry("'query' must be a non-empty string")
        k = args.get("k", 5)
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= 50:
            raise ToolRetry("'k' must be an integer from 1 to 50")
        items = await memory.retrieve(ctx.key[0], query, k)
        if not items:
            return "Nothing remembered matches that."
        return "Remembered facts, best match first:\n" + "\n".join(f"- {item.text}" for item in items)

    schema = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to look for, in a few words."},
            "k": {"type": "integer", "minimum": 1, "maximum": 50, "description": "Most facts to return (5)."},
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    return Tool.from_handler(
        RECALL_TOOL,
        "Search the facts remembered about the user in earlier conversations (preferences, identity, decisions).",
        schema,
        handler,
        read_only=True,
    )


def compress_tool() -> Tool:
    """``compress_context()``: compress this conversation's context now (summarise old steps)."""

    async def handler(args: Mapping[str, Any], ctx: RuntimeContext) -> str:
        run = current_run.get()
        if run is None:
            raise ToolRetry(f"{COMPRESS_TOOL} can only be used inside an agent call")
        from agentrt.agent._loop import compress_run

        async with run.lock:
            steps = await compress_run(run.agent, run, "manual")  # type: ignore[arg-type]
        if not steps:
            return "Nothing to compress: the context holds only the most recent steps."
        return (
            f"Context compressed from {steps[0].before_tokens:,} to {steps[-1].after_tokens:,} tokens; "
            "older steps are now in the summary at the top of the conversation."
        )

    return Tool.from_handler(
        COMPRESS_TOOL,
        "Compress the conversation so far to free context space: old tool results are shortened and older "
        "steps are replaced by a summary that keeps every number, name and result. Use it before a long "
        "stretch of work when the conversation is already long.",
        {"type": "object", "properties": {}, "additionalProperties": False},
        handler,
        read_only=True,
        concurrency_safe=False,
        timeout=None,
    )
