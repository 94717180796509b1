"""Rendering tools and the protocol into the prompt, and history into protocol text."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from agentrt.message import (
    ContentBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from agentrt.model.base import ToolSchema

logger = logging.getLogger(__name__)

ToolCallingMode = Literal["native", "text", "auto"]
ToolsArg = Sequence[ToolSchema] | Mapping[str, ToolSchema] | None


# --------------------------------------------------------------------------------------------------
# prompt and history
# --------------------------------------------------------------------------------------------------
_DEFAULT_TEMPLATE = """\
# Tools

You can call the tools below. Each one is given by its name, what it does, and its arguments as a \
JSON Schema.

{tools}

# How to reply

Always reply in exactly this format. To call a tool:

Thought: what you need to do next, and why
Action: the tool name, exactly as listed above (one of: {tool_names})
Action Input: the arguments, as one JSON object

{parallel}Then stop: the results come back to you as "Observation: ..." in the next message. Never \
write an Observation yourself.

When you can answer without calling a tool:

Thought: why you can answer now
Final Answer: your answer to the user
{choice}
Example:

{example}"""

_PARALLEL = "To call several tools at once, write several Action / Action Input pairs one after another. "
_SINGLE = "Call at most one tool per reply. "

CORRECTION = (
    "Your last reply could not be used: {error}. Reply again in the required format, either\n"
    "Thought: ...\nAction: <one of: {tool_names}>\nAction Input: <a JSON object>\n"
    "or\nThought: ...\nFinal Answer: <your answer>"
)


def _compact_schema(value: Any) -> Any:
    """The schema without the noise pydantic adds (titles, additionalProperties: false)."""
    if isinstance(value, Mapping):
        return {
            k: _compact_schema(v)
            for k, v in value.items()
            if k != "title" and not (k == "additionalProperties" and v is False)
        }
    if isinstance(value, list):
        return [_compact_schema(v) for v in value]
    return value


def _sample_value(schema: Mapping[str, Any], name: str) -> Any:
    """A value for the example call: the schema's own example (or enum, default, const), else one of its type."""
    for key in ("examples", "enum"):
        values = schema.get(key)
        if isinstance(values, list) and values:
            return values[0]
    if "default" in schema:
        return schema["default"]
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind is None:
        option = _first_typed_option(schema)
        if option is not None:
            return _sample_value(option, name)
    return _sample_of_type(kind, name)


def _first_typed_option(schema: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The first ``anyOf``/``oneOf`` alternative that is not ``null``."""
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list):
            for opt in options:
                if isinstance(opt, Mapping) and opt.get("type") != "null":
                    return opt
    return None


def _sample_of_type(kind: Any, name: str) -> Any:
    """A plain value of JSON Schema type `kind`; a ``<name>`` placeholder for strings and the unknown."""
    if kind == "integer":
        return 1
    if kind == "number":
        return 1.5
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    if kind == "object":
        return {}
    return f"<{name}>"


def _example(tool: ToolSchema) -> str:
    params = tool.parameters or {}
    props: Mapping[str, Any] = params.get("properties") or {}
    required = list(params.get("required") or props)
    args = {k: _sample_value(props.get(k) or {}, k) for k in required if k in props}
    return (
        f"Thought: I should call {tool.name} to find out.\n"
        f"Action: {tool.name}\n"
        f"Action Input: {json.dumps(args, ensure_ascii=False)}\n"
        "Observation: (the result, sent back to you)\n"
        "Thought: I now have what I need.\n"
        "Final Answer: (your answer, based on the result)"
    )


def render_tool_prompt(
    tools: Sequence[ToolSchema],
    *,
    tool_choice: str | Mapping[str, Any] | None = None,
    parallel_tool_calls: bool | None = None,
    template: str | None = None,
) -> str:
    """The system-prompt section that teaches a model the tools and the ReAct format.

    Args:
        tools: The tools to describe (name, description, compact JSON Schema of the arguments).
        tool_choice: ``"required"``, ``"none"`` or ``{"name": tool}`` add a line saying so.
        parallel_tool_calls: False asks for at most one tool per reply.
        template: Replaces the default text; it may use ``{tools}``, ``{tool_names}``,
            ``{parallel}``, ``{choice}`` and ``{example}``.
    """
    described = []
    for t in tools:
        schema = json.dumps(_compact_schema(t.parameters or {}), ensure_ascii=False, separators=(",", ":"))
        description = " ".join(t.description.split()) if t.description else "(no description)"
        described.append(f"## {t.name}\n{description}\nArguments: {schema}")
    choice = ""
    if tool_choice == "required":
        choice = "\nIn this reply you must call at least one tool.\n"
    elif tool_choice == "none":
        choice = "\nDo not call any tool in this reply: give your Final Answer.\n"
    elif isinstance(tool_choice, Mapping) and tool_choice.get("name"):
        choice = f"\nIn this reply you must call the tool {tool_choice['name']}.\n"
    first = tools[0] if tools else ToolSchema(name="tool_name", description="", parameters={})
    if isinstance(tool_choice, Mapping) and tool_choice.get("name"):
        first = next((t for t in tools if t.name == tool_choice["name"]), first)
    return (template or _DEFAULT_TEMPLATE).format(
        tools="\n\n".join(described) if described else "(no tools)",
        tool_names=", ".join(t.name for t in tools) or "none",
        parallel=_SINGLE if parallel_tool_calls is False else _PARALLEL,
        choice=choice,
        example=_example(first),
    )


def _action_text(call: ToolUseBlock) -> str:
    return f"Action: {call.name}\nAction Input: {json.dumps(dict(call.input), ensure_ascii=False, default=str)}"


def _observation_text(result: ToolResultBlock, number: int) -> str:
    # Several results answer the Actions in order; the number and tool name tie each to its call.
    label = f"Observation {number} ({result.name})" if number else "Observation"
    body = result.text if isinstance(result.output, str) else result.text or "(no text output)"
    if result.state != "success":
        body = f"[{result.state}] {body}"
    return f"{label}: {body}"


def _convert_assistant(msg: Msg) -> Msg:
    calls = [b for b in msg.content if isinstance(b, ToolUseBlock)]
    thinking = [b.thinking.strip() for b in msg.content if isinstance(b, ThinkingBlock) and b.thinking.strip()]
    texts = [b.text.strip() for b in msg.content if isinstance(b, TextBlock) and b.text.strip()]
    others: list[ContentBlock] = [
        b for b in msg.content if not isinstance(b, (ToolUseBlock, ThinkingBlock, TextBlock, ToolResultBlock))
    ]
    lines: list[str] = []
    if calls:
        thought = "\n".join([*thinking, *texts])
        if thought:
            lines.append(f"Thought: {thought}")
        lines.extend(_action_text(c) for c in calls)
    else:
        if thinking:
            lines.append(f"Thought: {chr(10).join(thinking)}")
        if texts:
            lines.append(f"Final Answer: {chr(10).join(texts)}" if thinking else "\n".join(texts))
    content: list[ContentBlock] = [TextBlock(text="\n".join(lines))] if lines else []
    return msg.replace(content=[*content, *others])


def _convert_user(msg: Msg) -> Msg:
    numbered = sum(1 for b in msg.content if isinstance(b, ToolResultBlock)) > 1
    number = 0
    content: list[ContentBlock] = []
    texts: list[str] = []
    media: list[ContentBlock] = []
    for block in msg.content:
        if isinstance(block, ToolResultBlock):
            number += 1
            texts.append(_observation_text(block, number if numbered else 0))
            if not isinstance(block.output, str):
                media.extend(b for b in block.output if not isinstance(b, TextBlock))
        elif isinstance(block, TextBlock):
            texts.append(block.text)
        else:
            if texts:
                content.append(TextBlock(text="\n".join(texts)))
                texts = []
            content.append(block)
    if texts:
        content.append(TextBlock(text="\n".join(texts)))
    return msg.replace(content=[*content, *media])


def _needs_conversion(msg: Msg) -> bool:
    if msg.role == "assistant":
        return any(isinstance(b, (ToolUseBlock, ThinkingBlock, ToolResultBlock)) for b in msg.content)
    return any(isinstance(b, (ToolResultBlock, ToolUseBlock)) for b in msg.content)


def _has_tool_blocks(messages: Sequence[Msg]) -> bool:
    return any(isinstance(b, (ToolUseBlock, ToolResultBlock)) for m in messages for b in m.content)
