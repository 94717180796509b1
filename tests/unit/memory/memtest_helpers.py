"""Helpers shared by the context and memory tests: histories, a fake run, prompt-validity checks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentrt.events import AgentEvent
from agentrt.message import Msg, TokenUsage, ToolResultBlock, ToolUseBlock
from agentrt.state.base import AgentState


def words(n: int, tag: str = "lorem") -> str:
    """About `n` tokens of English-like text."""
    return " ".join(f"{tag}{i % 97}" for i in range(n))


def tool_round(i: int, result_words: int, *, name: str = "fetch") -> list[Msg]:
    """An assistant tool call and the user message holding its result (head and tail marked)."""
    call = ToolUseBlock(id=f"call_{i}", name=name, input={"page": i})
    output = f"PAGE-{i}-HEAD {words(result_words)} PAGE-{i}-END"
    return [
        Msg(role="assistant", content=[call], name="bot"),
        Msg(role="user", content=[ToolResultBlock(id=call.id, name=name, output=output)]),
    ]


class FakeRun:
    """What the compressor needs of a run, recording checkpoints, usage and events."""

    def __init__(self, messages: Sequence[Msg], **fields: Any) -> None:
        self.state = AgentState(user_id="u", session_id="s", messages=list(messages), **fields)
        self.checkpoints = 0
        self.usage: TokenUsage | None = None
        self.events: list[tuple[type[AgentEvent], dict[str, Any]]] = []
        self.dirty: dict[str, Any] = {}

    def set_field(self, name: str, value: Any) -> None:
        setattr(self.state, name, value)
        self.dirty[name] = value

    async def checkpoint(self) -> None:
        self.checkpoints += 1

    def add_usage(self, usage: TokenUsage) -> None:
        self.usage = usage if self.usage is None else self.usage + usage

    def event(self, kind: type[AgentEvent], **fields: Any) -> None:
        self.events.append((kind, fields))


def check_openai_wire(messages: Sequence[Msg]) -> None:
    """The Chat Completions rules: every tool message answers a call of the assistant message just before it
    (only tool messages in between), and every call is answered before the next other message."""
    from agentrt.model.providers._openai_format import ChatCompletionsFormat

    wire = ChatCompletionsFormat().messages(messages)
    pending: set[str] = set()
    allowed: set[str] = set()
    for entry in wire:
        role = entry["role"]
        if role == "tool":
            call_id = entry["tool_call_id"]
            assert call_id in allowed, f"orphan tool result {call_id!r}"
            allowed.discard(call_id)
            pending.discard(call_id)
            continue
        assert not pending, f"tool calls without results before a {role} message: {sorted(pending)}"
        allowed = set()
        if role == "assistant" and entry.get("tool_calls"):
            ids = {c["id"] for c in entry["tool_calls"]}
            pending, allowed = set(ids), set(ids)


def check_anthropic_wire(messages: Sequence[Msg]) -> None:
    """The Messages API rules: tool_result blocks answer tool_use blocks of the previous assistant turn and
    every tool_use is answered in the next user turn; turns alternate."""
    from agentrt.model.providers.anthropic import format_messages

    _, wire = format_messages(messages)
    previous_calls: set[str] = set()
    for i, turn in enumerate(wire):
        if i:
            assert turn["role"] != wire[i - 1]["role"], "turns must alternate"
        blocks = turn["content"]
        if turn["role"] == "user":
            results = {b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"}
            assert results <= previous_calls, f"tool results without a call: {sorted(results - previous_calls)}"
            assert previous_calls <= results, f"tool calls without results: {sorted(previous_calls - results)}"
            previous_calls = set()
        else:
            assert not previous_calls, "an assistant turn follows unanswered tool calls"
            previous_calls = {b["id"] for b in blocks if b.get("type") == "tool_use"}


def check_gemini_wire(messages: Sequence[Msg]) -> None:
    """The Gemini rules: function responses answer the function calls of the model turn just before."""
    from agentrt.model.providers.gemini import format_contents

    _, contents = format_contents(messages)
    previous_calls: set[str] = set()
    for turn in contents:
        parts = turn.parts or []
        calls = {p.function_call.id for p in parts if p.function_call is not None and p.function_call.id}
        responses = {
            p.function_response.id for p in parts if p.function_response is not None and p.function_response.id
        }
        if turn.role == "user":
            assert responses == previous_calls, f"responses {sorted(responses)} != calls {sorted(previous_calls)}"
            previous_calls = set()
        else:
            assert not previous_calls, "a model turn follows unanswered function calls"
            previous_calls = calls


def check_prompt(messages: Sequence[Msg]) -> None:
    """The prompt is valid input for every provider formatter we ship (OpenAI, Anthropic, Gemini)."""
    check_openai_wire(messages)
    check_anthropic_wire(messages)
    check_gemini_wire(messages)


def results_in(messages: Sequence[Msg]) -> list[ToolResultBlock]:
    return [b for m in messages for b in m.blocks(ToolResultBlock)]


def trigram_embed(texts: list[str]) -> list[list[float]]:
    """A stand-in for a real embedding model: hashed character trigrams of the content words (64 dims)."""
    import zlib

    from agentrt.memory._text import STOP_WORDS

    out: list[list[float]] = []
    for text in texts:
        vector = [0.0] * 64
        for word in text.lower().split():
            word = "".join(ch for ch in word if ch.isalnum())
            if not word or word in STOP_WORDS:
                continue
            padded = f" {word} "
            for i in range(len(padded) - 2):
                vector[zlib.crc32(padded[i : i + 3].encode()) % 64] += 1.0
        out.append(vector)
    return out
