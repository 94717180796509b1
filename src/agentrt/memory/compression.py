"""Context window management: keep the prompt inside the model's window without forgetting what matters.

The full transcript stays in `AgentState.messages`; only the prompt *view* shrinks. The view is
``<summary> + messages[summary_index:]``, with tool results older than the recent rounds cut to a
head and a tail. Before each model call the prompt (system + view + tools) is counted with
`agentrt.model.tokens` (CJK-aware, calibrated with provider-reported usage); over
``trigger_ratio`` of the usable window it is compressed in tiers, re-counted after each:

1. truncate old tool results (and long tool-call arguments) in the view: head + tail + a marker
   saying what was cut;
2. summarise the oldest rounds (tool calls with their results, and the messages around them) into
   the running summary with a model call whose prompt keeps every number, name, identifier and
   conclusion;
3. keep only the system prompt, the summary and the last `keep_recent_rounds` rounds.

Still over the trigger, the tiers run again with fewer recent rounds (down to one): short rounds
(a chat without tools) must leave the view too. The summary is rendered within half the target, so
it cannot grow past the window turn after turn. Over the usable window even so, the view shrinks to
the newest user message (or, within a call, the last round) and, for that request only, texts and
results are cut and the summary shortened: no request exceeds the window unless the newest user
message alone does, which raises `ContextWindowExceededError` before any model call.

A cut never falls between a tool call and its results, and the user's first request (and the
latest one, when it leaves the view) is kept verbatim in the summary. The summary, the view
pointer and the truncation pointer are persisted in the session (`summary`, `summary_index` and
``metadata["agentrt.context"]``).
"""

from __future__ import annotations

import copy
import functools
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from agentrt.errors import ContextWindowExceededError, UsageLimitExceeded, UserError
from agentrt.events import AgentEvent, ContextCompressed
from agentrt.message import (
    AudioBlock,
    ContentBlock,
    ImageBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    TokenUsage,
    ToolResultBlock,
    ToolUseBlock,
    VideoBlock,
)
from agentrt.model.base import ChatModel, GenerateOptions, ToolSchema
from agentrt.model.tokens import (
    MESSAGE_OVERHEAD,
    REPLY_PRIMER,
    TOOLS_OVERHEAD,
    TokenCounter,
    context_window,
    count_text_tokens,
    count_tokens,
    estimate_text_tokens,
)
from agentrt.state.base import AgentState
from agentrt.tool.scope import ModelMeter

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "META_KEY",
    "SUMMARY_PROMPT",
    "Compression",
    "ContextCompressor",
    "ContextConfig",
    "Mode",
    "RunLike",
    "is_round_start_safe",
    "round_starts",
]

logger = logging.getLogger("agentrt.memory")

DEFAULT_MAX_TOKENS = 32_768
"""The window assumed for a model missing from the table (small on purpose: overflow errors also recover)."""
META_KEY = "agentrt.context"
"""Key in `AgentState.metadata` holding the compressor's bookkeeping."""
_CACHE_LIMIT = 32_768
_OMITTED_KEEP = 10

SUMMARY_PROMPT = """\
You maintain the running summary of a conversation between a user and an AI agent that uses tools. \
The summary replaces older messages that no longer fit in the agent's context window: whatever you \
leave out, the agent forgets.

Write an updated summary that merges the previous summary with the new transcript. Rules:
- Keep every number, amount, unit, date and time, every name, every identifier (ids, file paths, \
URLs, commands, error codes, keys, versions) and every quoted value exactly as written.
- Keep every conclusion, decision, result and error, and the user's requests, constraints and preferences.
- For each tool call keep the tool, its key inputs and what it returned or why it failed.
- Say what has been completed and what remains to be done.
- Drop greetings, repetition and filler. Never invent anything.
- Write in the language of the conversation, as concise plain text in short sections: \
Task, Facts and results, Decisions, Open items."""

_SUMMARY_REQUEST = """\
Previous summary:
{previous}

New transcript to fold into the summary:
<transcript>
{transcript}
</transcript>

Reply with the updated summary only, in at most about {length} tokens."""

_SUMMARY_INTRO = (
    "Earlier messages of this conversation were compressed to fit the context window; "
    "this replaces them (the full transcript is kept in the session)."
)


# --------------------------------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class ContextConfig:
    """How an agent keeps its prompt inside the model's context window.

    Args:
        max_tokens: The model's context window; None: looked up from the model id
            (`agentrt.model.context_window`), else `DEFAULT_MAX_TOKENS`.
        trigger_ratio: Compress when the prompt exceeds this share of the usable window
            (``max_tokens - reserve_output_tokens``).
        target_ratio: How far a summary (tier 2) shrinks the prompt, as a share of the usable window;
            below the trigger so that compression does not run again at the next step. Default:
            ``0.75 * trigger_ratio``.
        reserve_output_tokens: Tokens kept free for the reply; None: the options' ``max_tokens`` if
            set, else ``min(4096, max_tokens // 8)``.
        keep_recent_rounds: Rounds (a model reply with its tool results, and the user input before
            it) not truncated, summarised or dropped while the prompt with them fits under the
            trigger; a new user input not answered yet is kept besides them.
        tool_result_max_chars: Old tool results (and tool-call argument strings) longer than this
            are cut to a head and a tail in the prompt view (tier 1).
        max_summary_calls: Most summary model calls (tier 2) per compression.
        summary_max_tokens: ``max_tokens`` of a summary model call.
        summary_prompt: Replaces `SUMMARY_PROMPT`, the summariser's instructions.
        pinned_max_chars: The user's first and latest requests are kept verbatim in the summary up
            to this length (longer ones keep a head and a tail).
        expose_tool: Give the model a ``compress_context`` tool.
        counter: The `TokenCounter` to count and calibrate with (one per agent when None).
    """

    max_tokens: int | None = None
    trigger_ratio: float = 0.7
    target_ratio: float | None = None
    reserve_output_tokens: int | None = None
    keep_recent_rounds: int = 3
    tool_result_max_chars: int = 2000
    max_summary_calls: int = 3
    summary_max_tokens: int = 2048
    summary_prompt: str | None = None
    pinned_max_chars: int = 4000
    expose_tool: bool = False
    counter: TokenCounter | None = None

    def __post_init__(self) -> None:
        if self.max_tokens is not None and (not isinstance(self.max_tokens, int) or self.max_tokens < 256):
            raise UserError(f"ContextConfig.max_tokens must be an integer of at least 256, not {self.max_tokens!r}")
        if not 0 < self.trigger_ratio <= 1:
            raise UserError(f"ContextConfig.trigger_ratio must be in (0, 1], not {self.trigger_ratio!r}")
        if self.target_ratio is not None and not 0 < self.target_ratio <= self.trigger_ratio:
            raise UserError(
                f"ContextConfig.target_ratio must be in (0, trigger_ratio={self.trigger_ratio}], "
                f"not {self.target_ratio!r}"
            )
        if self.reserve_output_tokens is not None and self.reserve_output_tokens < 0:
            raise UserError(f"ContextConfig.reserve_output_tokens must be >= 0, not {self.reserve_output_tokens!r}")
        if self.keep_recent_rounds < 1:
            raise UserError(f"ContextConfig.keep_recent_rounds must be at least 1, not {self.keep_recent_rounds!r}")
        if self.tool_result_max_chars < 100:
            raise UserError(
                f"ContextConfig.tool_result_max_chars must be at least 100, not {self.tool_result_max_chars!r}"
            )
        if self.max_summary_calls < 0 or self.summary_max_tokens < 64 or self.pinned_max_chars < 200:
            raise UserError("ContextConfig: max_summary_calls >= 0, summary_max_tokens >= 64, pinned_max_chars >= 200")


@dataclass(frozen=True, slots=True)
class _Limits:
    max_tokens: int
    usable: int
    trigger: int
    target: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Compression:
    """One tier applied: the whole prompt's tokens before and after."""

    tier: int
    before_tokens: int
    after_tokens: int


class RunLike(Protocol):
    """What the compressor needs of a call in progress (`agentrt.agent.Run` provides it)."""

    @property
    def state(self) -> AgentState: ...

    def set_field(self, name: str, value: Any) -> None: ...

    async def checkpoint(self) -> None: ...

    def add_usage(self, usage: TokenUsage) -> None: ...

    def event(self, kind: type[AgentEvent], **fields: Any) -> None: ...


SummaryMeter = ModelMeter
"""The usage accounting of summary calls (the agent's `agentrt.agent.usage.RunMeter`): they are model calls too.

`before` runs right before a summary call is sent and may refuse it by raising
`UsageLimitExceeded` (the usage limits of the call compressing): the call is then not made, the
tiers applied so far are saved, and the error propagates (the agent call stops). `after` counts
what the reply spent (tokens, cost).
"""


Mode = Literal["auto", "overflow", "manual"]


# --------------------------------------------------------------------------------------------------
# structure: rounds and safe cut points
# --------------------------------------------------------------------------------------------------
def _is_input(msg: Msg) -> bool:
    """A message the user (or the application) wrote, as opposed to tool results."""
    if msg.role == "system":
        return True
    if msg.role != "user":
        return False
    return not msg.content or any(type(b) is not ToolResultBlock for b in msg.content)


def _is_request(msg: Msg) -> bool:
    """A user message the user wrote (not tool results, not a runtime nudge)."""
    return msg.role == "user" and _is_input(msg) and not msg.metadata.get("synthetic")


def round_starts(messages: Sequence[Msg], start: int = 0) -> list[int]:
    """Indices (from `start`) where a round begins and the prompt view may begin.

    A round is a model reply with the tool results answering it, plus the user input just before
    it. An index qualifies only when no tool call before it is answered at or after it, so a cut
    there never separates a call from its result.
    """
    answered: set[str] = set()
    for msg in messages[start:]:
        if msg.role == "user":
            for b in msg.content:
                if type(b) is ToolResultBlock:
                    answered.add(b.id)
    open_calls: set[str] = set()
    out: list[int] = []
    previous_input = False
    for i in range(start, len(messages)):
        msg = messages[i]
        is_input = _is_input(msg)
        if not open_calls and not previous_input and (is_input or msg.role == "assistant"):
            out.append(i)
        if msg.role == "assistant":
            for b in msg.content:
                if type(b) is ToolUseBlock and b.id in answered:
                    open_calls.add(b.id)
        else:
            for b in msg.content:
                if type(b) is ToolResultBlock:
                    open_calls.discard(b.id)
        previous_input = is_input
    return out


def is_round_start_safe(messages: Sequence[Msg], index: int) -> bool:
    """Whether a view starting at `index` keeps every tool call with its results (for tests and checks)."""
    before = {b.id for m in messages[:index] if m.role == "assistant" for b in m.content if type(b) is ToolUseBlock}
    after = {b.id for m in messages[index:] for b in m.content if type(b) is ToolResultBlock}
    return not (before & after)


# --------------------------------------------------------------------------------------------------
# truncation (tier 1)
# --------------------------------------------------------------------------------------------------
def _cut_text(text: str, limit: int, what: str) -> str:
    total = len(text)
    head = (limit * 2) // 3
    tail = limit - head
    cut = total - head - tail
    lines = text.count("\n", head, total - tail)
    marker = (
        f"\n[... {cut:,} of {total:,} characters"
        + (f" ({lines:,} lines)" if lines else "")
        + f" cut from the middle of {what} to save context; the full text is kept in the session ...]\n"
    )
    return text[:head] + marker + text[total - tail :]


def _result_text(block: ToolResultBlock) -> tuple[str, int]:
    """The text of a result and how many media blocks it holds."""
    if isinstance(block.output, str):
        return block.output, 0
    texts: list[str] = []
    media = 0
    for item in block.output:
        if isinstance(item, TextBlock):
            texts.append(item.text)
        elif isinstance(item, (ImageBlock, AudioBlock, VideoBlock)):
            media += 1
    return "\n".join(texts), media


# (text, what it is) -> the text cut, or None to keep it whole
_Shorten = Callable[[str, str], "str | None"]


def _cut_long(limit: int, text: str, what: str) -> str | None:
    """`text` cut to `limit` characters if it is longer, else None."""
    return _cut_text(text, limit, what) if len(text) > limit else None


def _shorter(limit: int, model: ChatModel | str | None, text: str, what: str) -> str | None:
    """`text` cut to `limit` characters if that saves tokens (a marker costs some), else None."""
    if len(text) <= limit:
        return None
    cut = _cut_text(text, limit, what)
    return cut if count_text_tokens(cut, model) < count_text_tokens(text, model) else None


def _shorten_value(value: Any, shorten: _Shorten) -> tuple[Any, bool]:
    """A tool-call argument with its strings shortened, and whether any was."""
    if isinstance(value, str):
        cut = shorten(value, "this argument")
        return (value, False) if cut is None else (cut, True)
    if isinstance(value, Mapping):
        pairs = {key: _shorten_value(item, shorten) for key, item in value.items()}
        if any(hit for _, hit in pairs.values()):
            return {key: item for key, (item, _) in pairs.items()}, True
        return value, False
    if isinstance(value, (list, tuple)):
        items = [_shorten_value(item, shorten) for item in value]
        if any(hit for _, hit in items):
            return [item for item, _ in items], True
        return value, False
    return value, False


def _shorten_message(msg: Msg, shorten: _Shorten, *, texts: bool) -> Msg | None:
    """`msg` with tool results, tool-call argument strings and (with `texts`) texts shortened (same id), or None."""
    blocks: list[ContentBlock] = []
    changed = False
    for block in msg.content:
        kind = type(block)
        if kind is TextBlock and texts:
            text_block: TextBlock = block  # type: ignore[assignment]
            cut = shorten(text_block.text, "this message")
            if cut is not None:
                blocks.append(TextBlock(text=cut))
                changed = True
                continue
        elif kind is ToolResultBlock:
            result: ToolResultBlock = block  # type: ignore[assignment]
            text, media = _result_text(result)
            cut = shorten(text, f"this {result.name} result")
            if cut is not None or media:
                output = text if cut is None else cut
                if media:
                    output += f"\n[{media} attachment(s) of this result omitted to save context]"
                blocks.append(
                    ToolResultBlock(
                        id=result.id, name=result.name, output=output, state=result.state, metadata=result.metadata
                    )
                )
                changed = True
                continue
        elif kind is ToolUseBlock:
            call: ToolUseBlock = block  # type: ignore[assignment]
            new_input, hit = _shorten_value(call.input, shorten)
            if hit:
                blocks.append(ToolUseBlock(id=call.id, name=call.name, input=new_input, metadata=call.metadata))
                changed = True
                continue
        blocks.append(block)
    return msg.replace(content=blocks) if changed else None


def truncate_message(msg: Msg, limit: int) -> Msg | None:
    """`msg` with long tool results and tool-call argument strings cut (same id), or None if nothing is long."""
    return _shorten_message(msg, functools.partial(_cut_long, limit), texts=False)


def _cut_message(msg: Msg, limit: int, model: ChatModel | str | None) -> Msg | None:
    """`msg` with texts, tool results and tool-call argument strings cut to `limit` characters, or None.

    The last resort for one call's prompt (never persisted); thinking blocks stay whole, since
    providers reject altered signed reasoning. A cut that saves no tokens is not made.
    """
    return _shorten_message(msg, functools.partial(_shorter, limit, model), texts=True)


def _longest_text(msg: Msg) -> int:
    """The longest text, tool result or tool-call argument string in `msg`, in characters."""
    longest = 0
    for block in msg.content:
        if isinstance(block, TextBlock):
            longest = max(longest, len(block.text))
        elif isinstance(block, ToolResultBlock):
            longest = max(longest, len(_result_text(block)[0]))
        elif isinstance(block, ToolUseBlock):
            longest = max(longest, len(json.dumps(dict(block.input), ensure_ascii=False, default=str)))
    return longest


# --------------------------------------------------------------------------------------------------
# the summariser's input (tier 2)
# --------------------------------------------------------------------------------------------------
def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else _cut_text(text, limit, "this text")


def render_transcript(messages: Sequence[Msg], result_chars: int) -> str:
    """Messages as plain text for the summariser (tool calls and results labelled, long ones clipped)."""
    lines: list[str] = []
    for msg in messages:
        who = msg.role if not msg.name else f"{msg.role} {msg.name}"
        for block in msg.content:
            if isinstance(block, TextBlock):
                if block.text.strip():
                    lines.append(f"[{who}] {_clip(block.text, result_chars)}")
            elif isinstance(block, ToolUseBlock):
                args = json.dumps(dict(block.input), ensure_ascii=False, default=str)
                lines.append(f"[{who} called tool {block.name} (call {block.id})] {_clip(args, result_chars)}")
            elif isinstance(block, ToolResultBlock):
                text, media = _result_text(block)
                note = f" (+{media} attachment(s))" if media else ""
                lines.append(
                    f"[result of {block.name} (call {block.id}, {block.state}){note}] {_clip(text, result_chars)}"
                )
            elif isinstance(block, ThinkingBlock):
                continue  # the reasoning behind a step; its outcome is in the text and tool calls
            else:
                lines.append(f"[{who} sent {type(block).__name__.removesuffix('Block').lower()}]")
    return "\n".join(lines)


def _pin_text(msg: Msg, limit: int) -> str:
    text = msg.text or render_transcript([msg], limit)
    return _clip(text, limit)


def _compose(first: str | None, latest: str | None, body: str | None, omitted: Sequence[str]) -> str | None:
    parts: list[str] = []
    if first:
        parts.append(f"The user's first request in this conversation (verbatim):\n{first}")
    if latest and latest != first:
        parts.append(f"The user's most recent request before the messages below (verbatim):\n{latest}")
    if body:
        parts.append(f"Summary of the earlier conversation:\n{body}")
    if omitted:
        parts.append("Dropped from view without a summary:\n" + "\n".join(f"- {line}" for line in omitted))
    if not parts:
        return None
    return _SUMMARY_INTRO + "\n\n" + "\n\n".join(parts)


def _clip_part(text: str, size_with: Callable[[str | None], int], budget: int) -> str | None:
    """The longest head-and-tail cut of `text` for which ``size_with(cut)`` fits `budget`; None: drop it."""
    base = size_with(None)
    if base >= budget:
        return None
    full = size_with(text) - base
    limit = min(len(text) - 1, len(text) * (budget - base) // max(1, full))
    while limit > 0:
        cut = _cut_text(text, limit, "this text")
        if size_with(cut) <= budget:
            return cut
        limit = limit * 4 // 5
    cut = _cut_text(text, 0, "this text")
    return cut if size_with(cut) <= budget else None


def render_summary(
    meta: Mapping[str, Any], budget: int | None = None, measure: Callable[[str], int] | None = None
) -> str | None:
    """The summary text shown in the prompt, from the compressor's bookkeeping.

    With a `budget` (tokens, as counted by `measure`) the text is made to fit it: the oldest
    digest lines go first, then the body, the latest and the first request are cut to a head and a
    tail, in that order; None when not even that fits. The bookkeeping itself keeps every part whole.
    """
    pins = meta.get("pins") or {}
    parts: dict[str, Any] = {
        "first": pins.get("first") or None,
        "latest": pins.get("latest") or None,
        "body": meta.get("body") or None,
        "omitted": list(meta.get("omitted") or ()),
    }

    def compose() -> str | None:
        return _compose(parts["first"], parts["latest"], parts["body"], parts["omitted"])

    text = compose()
    if budget is None or text is None:
        return text
    count = measure or estimate_text_tokens
    size = count(text)
    while size > budget and parts["omitted"]:
        parts["omitted"].pop(0)  # the oldest digest line first
        text = compose()
        if text is None:
            return None
        size = count(text)
    for name in ("body", "latest", "first"):
        if size <= budget:
            return text
        if not parts[name]:
            continue

        def size_with(candidate: str | None, key: str = name) -> int:
            parts[key] = candidate
            rendered = compose()
            return count(rendered) if rendered is not None else 0

        parts[name] = _clip_part(parts[name], size_with, budget)
        text = compose()
        if text is None:
            return None
        size = count(text)
    return text if size <= budget else None


def _digest(messages: Sequence[Msg]) -> str:
    """One line describing messages dropped without a summary (tier 3)."""
    users = assistants = 0
    tools: dict[str, int] = {}
    requests: list[str] = []
    for msg in messages:
        if msg.role == "assistant":
            assistants += 1
            for call in msg.tool_calls:
                tools[call.name] = tools.get(call.name, 0) + 1
        elif _is_input(msg):
            users += 1
            if msg.text.strip() and len(requests) < 3:
                requests.append(_clip(" ".join(msg.text.split()), 160))
    parts = [f"{len(messages)} message(s): {users} from the user, {assistants} from the assistant"]
    if tools:
        parts.append("tool calls " + ", ".join(f"{name} x{n}" for name, n in sorted(tools.items())))
    if requests:
        parts.append("user said: " + " | ".join(repr(r) for r in requests))
    return "; ".join(parts)


# --------------------------------------------------------------------------------------------------
# the compressor
# --------------------------------------------------------------------------------------------------
def _model_key(model: ChatModel | str | None) -> str:
    if model is None:
        return ""
    return model if isinstance(model, str) else model.model_name


def _goals(mode: Mode, limits: _Limits, current: int) -> tuple[int, int]:
    """The size a pass must get under, and the size summaries aim at (tier 2 frees what lies above it)."""
    if mode == "auto":
        return limits.trigger, limits.target
    if mode == "overflow":
        goal = min(limits.target, int(current * 0.6))
        return goal, goal
    return 0, 0


@dataclass(slots=True, kw_only=True)
class _Pass:
    """One `ContextCompressor.compress` call: the prompt sizes so far, the tiers kept, and how to undo one.

    A tier changes the session's state in place; `settle` keeps it only if the prompt shrank.
    """

    run: RunLike
    state: AgentState
    measure: Callable[[], int]
    meta: dict[str, Any]  # the compressor's bookkeeping being rewritten (saved by `_record`)
    goal: int  # get the prompt under this
    sizing: int  # tier 2 frees what lies above this
    room: int  # tokens the summary may take
    measure_summary: Callable[[str], int]
    sizes: list[int]
    meter: SummaryMeter | None = None  # the usage accounting of summary calls
    steps: list[Compression] = field(default_factory=list)
    summary_calls: int = 0
    summary_failed: bool = False
    summarised: bool = False

    @property
    def size(self) -> int:
        """The prompt's size now."""
        return self.sizes[-1]

    @property
    def over(self) -> bool:
        """Whether the prompt is still over the goal."""
        return self.sizes[-1] > self.goal

    def snapshot(self) -> tuple[Any, ...]:
        """What `settle` restores when a tier does not pay off."""
        state = self.state
        return (state.summary, state.summary_index, state.metadata, copy.deepcopy(self.meta))

    def settle(self, tier: int, before: tuple[Any, ...]) -> bool:
        """Keep a tier that shrank the prompt (recording it); undo one that did not."""
        after = self.measure()
        if after < self.sizes[-1]:
            self.steps.append(Compression(tier=tier, before_tokens=self.sizes[-1], after_tokens=after))
            self.sizes.append(after)
            return True
        state, run = self.state, self.run
        summary, index, metadata, old_meta = before
        if state.summary != summary:
            run.set_field("summary", summary)
        if state.summary_index != index:
            run.set_field("summary_index", index)
        if state.metadata is not metadata:
            run.set_field("metadata", metadata)
        self.meta.clear()
        self.meta.update(old_meta)
        return False


class ContextCompressor:
    """Builds the prompt view of a session and compresses it when it outgrows the window.

    One per agent (stateless across sessions apart from caches keyed by message id): everything
    about a session lives in its `AgentState`.
    """

    __slots__ = ("_counts", "_limits", "_summaries", "_tool_counts", "_truncated", "config", "counter")

    def __init__(self, config: ContextConfig | None = None) -> None:
        self.config = config if config is not None else ContextConfig()
        self.counter = self.config.counter if self.config.counter is not None else TokenCounter()
        self._counts: dict[tuple[str, int, str], int] = {}
        self._tool_counts: dict[tuple[int, str], tuple[ToolSchema, int]] = {}
        self._truncated: dict[tuple[str, int], Msg | None] = {}
        self._summaries: dict[str, Msg] = {}
        self._limits: dict[tuple[str, int | None], _Limits] = {}

    # -- limits -----------------------------------------------------------------------------------------
    def limits(self, model: ChatModel | str | None, options: GenerateOptions | None = None) -> _Limits:
        """Window, usable tokens, trigger and target for `model`."""
        key = (_model_key(model), options.max_tokens if options is not None else None)
        cached = self._limits.get(key)
        if cached is not None:
            return cached
        if len(self._limits) >= 256:
            self._limits.clear()
        limits = self._limits[key] = self._compute_limits(model, options)
        return limits

    def _compute_limits(self, model: ChatModel | str | None, options: GenerateOptions | None) -> _Limits:
        cfg = self.config
        window = cfg.max_tokens or context_window(model) or DEFAULT_MAX_TOKENS
        reserve = cfg.reserve_output_tokens
        if reserve is None:
            reserve = options.max_tokens if options is not None and options.max_tokens else min(4096, window // 8)
        reserve = min(reserve, window // 2)
        usable = max(1, window - reserve)
        target_ratio = cfg.target_ratio if cfg.target_ratio is not None else cfg.trigger_ratio * 0.75
        return _Limits(window, usable, int(usable * cfg.trigger_ratio), int(usable * target_ratio))

    # -- the view ---------------------------------------------------------------------------------------
    def _summary_msg(self, text: str) -> Msg:
        msg = self._summaries.get(text)
        if msg is None:
            if len(self._summaries) >= 1024:
                self._summaries.clear()
            msg = self._summaries[text] = Msg.user(f"<summary>\n{text}\n</summary>")
        return msg

    def _view_entries(self, state: AgentState) -> list[tuple[Msg, int]]:
        """The view as (message, tag) pairs: tag is the truncation limit for cut copies, else 0."""
        messages = state.messages
        start = min(state.summary_index, len(messages))
        meta = state.metadata.get(META_KEY) if state.metadata else None
        trunc = min(int(meta.get("truncate_before", 0)), len(messages)) if isinstance(meta, Mapping) else 0
        out: list[tuple[Msg, int]] = []
        if state.summary and start:
            out.append((self._summary_msg(state.summary), 0))
        if trunc > start:
            limit = self.config.tool_result_max_chars
            cache = self._truncated
            for msg in messages[start:trunc]:
                key = (msg.id, limit)
                if key in cache:
                    cut = cache[key]
                else:
                    if len(cache) >= _CACHE_LIMIT:
                        cache.clear()
                    cut = cache[key] = truncate_message(msg, limit)
                out.append((msg, 0) if cut is None else (cut, limit))
            out.extend((msg, 0) for msg in messages[trunc:])
        else:
            out.extend((msg, 0) for msg in messages[start:])
        return out

    def view(self, state: AgentState) -> list[Msg]:
        """The messages the model sees in place of the whole transcript."""
        return [msg for msg, _ in self._view_entries(state)]

    # -- counting ---------------------------------------------------------------------------------------
    def _message_tokens(self, msg: Msg, tag: int, model: ChatModel | str | None) -> int:
        # Keyed by message id (messages are immutable) and model (tokenizers differ).
        key = (msg.id, tag, _model_key(model))
        n = self._counts.get(key)
        if n is None:
            if len(self._counts) >= _CACHE_LIMIT:
                self._counts.clear()
            n = self._counts[key] = count_tokens([msg], model) - REPLY_PRIMER
        return n

    def _tools_tokens(self, tools: Sequence[ToolSchema], model: ChatModel | str | None) -> int:
        if not tools:
            return 0
        total = TOOLS_OVERHEAD
        cache = self._tool_counts
        name = _model_key(model)
        for schema in tools:
            key = (id(schema), name)
            hit = cache.get(key)
            if hit is None or hit[0] is not schema:
                if len(cache) >= 4096:
                    cache.clear()
                hit = cache[key] = (
                    schema,
                    count_tokens((), model, tools=[schema]) - REPLY_PRIMER - TOOLS_OVERHEAD,
                )
            total += hit[1]
        return total

    def raw_count(
        self,
        head: Sequence[Msg],
        entries: Sequence[tuple[Msg, int]],
        tail: Sequence[Msg],
        tools: Sequence[ToolSchema],
        model: ChatModel | str | None,
    ) -> int:
        """`count_tokens` of ``head + view + tail`` with `tools` (uncalibrated), memoised per message."""
        total = REPLY_PRIMER + self._tools_tokens(tools, model)
        for msg in head:
            total += self._message_tokens(msg, 0, model)
        for msg, tag in entries:
            total += self._message_tokens(msg, tag, model)
        for msg in tail:
            total += count_tokens([msg], model) - REPLY_PRIMER
        return total

    def count_prompt(
        self,
        state: AgentState,
        head: Sequence[Msg],
        tail: Sequence[Msg],
        tools: Sequence[ToolSchema],
        model: ChatModel | str | None,
    ) -> int:
        """The calibrated token count of the prompt the session would send now."""
        return self.counter.adjust(self.raw_count(head, self._view_entries(state), tail, tools, model), model)

    def calibrate(self, raw: int, usage: TokenUsage | None, model: ChatModel | str | None) -> None:
        """Learn from the input tokens a provider reported for a prompt we counted as `raw`."""
        if usage is not None and usage.input_tokens > 0 and raw > 0:
            self.counter.calibrate(raw, usage.input_tokens, model)

    # -- before each model call ---------------------------------------------------------------------------
    async def prepare(
        self,
        run: RunLike,
        head: list[Msg],
        tail: list[Msg],
        tools: Sequence[ToolSchema],
        model: ChatModel,
        options: GenerateOptions | None,
        summary_model: Callable[[], ChatModel],
        *,
        meter: SummaryMeter | None = None,
    ) -> tuple[list[Msg], int]:
        """The prompt to send (compressed first if it is over the trigger) and its uncalibrated count.

        The prompt never exceeds the usable window: past the persisted tiers, the summary and the
        newest round are cut for this call only. Raises `ContextWindowExceededError` (before any
        model call) when the newest user message alone, or the newest round cut to the bone, cannot fit.
        `meter`: as for `compress`.
        """
        state = run.state
        entries = self._view_entries(state)
        raw = self.raw_count(head, entries, tail, tools, model)
        limits = self.limits(model, options)
        tokens = self.counter.adjust(raw, model)
        if tokens > limits.trigger:
            self._check_newest(state, head, tail, tools, model, limits)
            steps = await self.compress(run, head, tail, tools, model, options, summary_model, mode="auto", meter=meter)
            if steps:
                entries = self._view_entries(state)
                raw = self.raw_count(head, entries, tail, tools, model)
            if self.counter.adjust(raw, model) > limits.usable:
                entries = self._fit(state, head, entries, tail, tools, model, limits)
                raw = self.raw_count(head, entries, tail, tools, model)
        return [*head, *(msg for msg, _ in entries), *tail], raw

    def _newest_request(self, state: AgentState) -> Msg | None:
        for msg in reversed(state.messages):
            if _is_request(msg):
                return msg
        return None

    def _check_newest(
        self,
        state: AgentState,
        head: Sequence[Msg],
        tail: Sequence[Msg],
        tools: Sequence[ToolSchema],
        model: ChatModel,
        limits: _Limits,
    ) -> None:
        """Raise `ContextWindowExceededError` when the newest user message cannot fit even alone."""
        newest = self._newest_request(state)
        if newest is None:
            return
        floor = self.counter.adjust(self.raw_count(head, [(newest, 0)], tail, tools, model), model)
        if floor <= limits.usable:
            return
        size = self.counter.adjust(self._message_tokens(newest, 0, model), model)
        raise ContextWindowExceededError(
            f"the newest user message needs {size:,} tokens ({floor:,} with the system prompt, tool schemas and "
            f"reminders), more than the {limits.usable:,} tokens the context window leaves for the prompt "
            f"({limits.max_tokens:,} minus {limits.max_tokens - limits.usable:,} reserved for the reply); send a "
            "shorter message or use a model with a larger window",
            model=_model_key(model) or None,
            body={
                "message_tokens": size,
                "prompt_tokens": floor,
                "budget": limits.usable,
                "max_tokens": limits.max_tokens,
            },
        )

    def _fit(
        self,
        state: AgentState,
        head: Sequence[Msg],
        entries: list[tuple[Msg, int]],
        tail: Sequence[Msg],
        tools: Sequence[ToolSchema],
        model: ChatModel,
        limits: _Limits,
    ) -> list[tuple[Msg, int]]:
        """`entries` made to fit the usable window for this call only (nothing persisted).

        The messages after the summary are cut first if they alone are too big (tool results,
        tool-call arguments and texts other than the newest user message, down to a marker), then
        the summary gets the room left (re-rendered smaller, or left out).
        """
        usable = limits.usable

        def size(view: Sequence[tuple[Msg, int]]) -> int:
            return self.counter.adjust(self.raw_count(head, view, tail, tools, model), model)

        has_summary = bool(state.summary) and min(state.summary_index, len(state.messages)) > 0
        rest = entries[1:] if has_summary else entries
        if size(rest) > usable:
            newest = self._newest_request(state)
            keep_id = newest.id if newest is not None else None
            longest = max((_longest_text(msg) for msg, _ in rest), default=0)
            low, high = 0, longest
            best = self._cut_all(rest, 0, keep_id, model)
            if size(best) > usable:
                needed = size(best)
                raise ContextWindowExceededError(
                    f"the newest messages of this call (the last model reply and its tool results) need {needed:,} "
                    f"tokens even with every text and tool result cut, more than the {usable:,} tokens the context "
                    f"window leaves for the prompt ({limits.max_tokens:,} minus "
                    f"{limits.max_tokens - usable:,} reserved for the reply)",
                    model=_model_key(model) or None,
                    body={"prompt_tokens": needed, "budget": usable, "max_tokens": limits.max_tokens},
                )
            while low < high:  # the largest cut that fits
                mid = (low + high + 1) // 2
                candidate = self._cut_all(rest, mid, keep_id, model)
                if size(candidate) <= usable:
                    low, best = mid, candidate
                else:
                    high = mid - 1
            rest = best
        if not has_summary:
            return rest
        meta = state.metadata.get(META_KEY) if state.metadata else None
        if not isinstance(meta, Mapping):
            return rest
        ratio = self.counter.ratio(model)
        room = int((usable - size(rest)) / ratio)
        measure = self._summary_measure(model)
        for _ in range(8):
            text = render_summary(meta, room, measure) if room > 0 else None
            if text is None:
                break
            candidate = [(self._summary_msg(text), 0), *rest]
            if size(candidate) <= usable:
                return candidate
            room = room * 9 // 10
        return rest

    def _cut_all(
        self, entries: Sequence[tuple[Msg, int]], limit: int, keep_id: str | None, model: ChatModel
    ) -> list[tuple[Msg, int]]:
        """Every message but `keep_id` with texts, tool results and argument strings cut to `limit` characters."""
        out: list[tuple[Msg, int]] = []
        for msg, tag in entries:
            cut = None if msg.id == keep_id else _cut_message(msg, limit, model)
            # A negative tag keeps these transient cuts apart from the persisted ones in the count cache.
            out.append((msg, tag) if cut is None else (cut, -1 - limit))
        return out

    def _summary_budget(self, limits: _Limits, model: ChatModel | str | None) -> int:
        """Most (uncalibrated) tokens the summary message may take: half the target."""
        return max(64, int(limits.target // 2 / self.counter.ratio(model)))

    def _summary_measure(self, model: ChatModel | str | None) -> Callable[[str], int]:
        """Counts a summary text as the `<summary>` message that carries it (uncalibrated)."""

        def measure(text: str) -> int:
            return MESSAGE_OVERHEAD + count_text_tokens(f"<summary>\n{text}\n</summary>", model)

        return measure

    # -- compression ----------------------------------------------------------------------------------------
    async def compress(
        self,
        run: RunLike,
        head: Sequence[Msg],
        tail: Sequence[Msg],
        tools: Sequence[ToolSchema],
        model: ChatModel,
        options: GenerateOptions | None,
        summary_model: Callable[[], ChatModel],
        *,
        mode: Mode = "auto",
        meter: SummaryMeter | None = None,
    ) -> list[Compression]:
        """Compress the session's view in tiers; returns the tiers applied (events are emitted on `run`).

        ``auto``: until the prompt is under the trigger, keeping fewer recent rounds if need be (down
        to one, then every tool result cut, then only the newest message or round when the prompt is
        over the usable window). ``overflow`` (the provider rejected the prompt): until it is well
        under both the target and what was rejected, down to the newest message or round.
        ``manual``: as far as tiers 1 and 2 go (tier 3 only when no summary can be made), whatever the
        size, never touching the recent rounds.

        `meter` counts the summary calls against the usage limits of the call compressing: when it
        refuses one (`UsageLimitExceeded`), no summary call is made, the tiers applied so far are
        saved, and the error propagates.
        """
        limits = self.limits(model, options)
        work = self._start_pass(run, head, tail, tools, model, limits, mode)
        work.meter = meter
        keep_recent = self.config.keep_recent_rounds
        # The configured recent rounds first; when they (with the summary) are still over the goal,
        # fewer of them: a long conversation of short rounds must still leave older rounds behind.
        levels = [keep_recent] if mode == "manual" else range(keep_recent, 0, -1)
        try:
            for keep in levels:
                if not work.over:
                    break
                await self._compress_keeping(work, keep, model, summary_model, mode)
        except UsageLimitExceeded:
            await self._record(work)  # a summary call past a usage limit: keep what was done, then stop
            raise
        if mode != "manual":
            self._last_resorts(work, limits, mode)
            self._warn_if_over(work, limits, model)
        await self._record(work)
        return work.steps

    def _start_pass(
        self,
        run: RunLike,
        head: Sequence[Msg],
        tail: Sequence[Msg],
        tools: Sequence[ToolSchema],
        model: ChatModel,
        limits: _Limits,
        mode: Mode,
    ) -> _Pass:
        """A compression pass over the session of `run`, with the prompt measured as it stands."""
        state = run.state

        def measure() -> int:
            return self.count_prompt(state, head, tail, tools, model)

        current = measure()
        goal, sizing = _goals(mode, limits, current)
        return _Pass(
            run=run,
            state=state,
            measure=measure,
            meta=dict(state.metadata.get(META_KEY) or {}) if state.metadata else {},
            goal=goal,
            sizing=sizing,
            room=self._summary_budget(limits, model),
            measure_summary=self._summary_measure(model),
            sizes=[current],
        )

    async def _compress_keeping(
        self, work: _Pass, keep: int, model: ChatModel, summary_model: Callable[[], ChatModel], mode: Mode
    ) -> None:
        """Tiers 1, 2 and 3 with the last `keep` rounds left alone."""
        # tier 1: cut old tool results in the view
        before = work.snapshot()
        if self._tier1(work.run, work.meta, keep):
            work.settle(1, before)
        await self._summarise_oldest(work, keep, model, summary_model)
        # tier 3: keep the summary and the last rounds only
        if work.over and (mode != "manual" or not work.summarised):
            before = work.snapshot()
            if self._tier3(
                work.run, work.meta, self._protected_start(work.state, keep), work.room, work.measure_summary
            ):
                work.settle(3, before)

    async def _summarise_oldest(
        self, work: _Pass, keep: int, model: ChatModel, summary_model: Callable[[], ChatModel]
    ) -> None:
        """Tier 2: fold the oldest rounds into the summary while over the goal, within `max_summary_calls`.

        Stops for good (for the whole pass) once a summary cannot be made, and for this level once one
        does not shrink the prompt.
        """
        while work.over and work.summary_calls < self.config.max_summary_calls and not work.summary_failed:
            span = self._pick_span(work.state, work.size - work.sizing, model, summary_model, keep, work.room)
            if span is None:
                return
            work.summary_calls += 1
            before = work.snapshot()
            if not await self._tier2(
                work.run, work.meta, span, summary_model, work.room, work.measure_summary, work.meter
            ):
                work.summary_failed = True
                return
            if not work.settle(2, before):
                return
            work.summarised = True

    def _last_resorts(self, work: _Pass, limits: _Limits, mode: Mode) -> None:
        """Past every level (``auto`` and ``overflow``): cut all tool results, then keep only the newest turn."""
        if work.over:
            # The last round itself is big: cut every tool result in the view.
            before = work.snapshot()
            if self._tier1(work.run, work.meta, 0):
                work.settle(1, before)
        if work.size > (work.goal if mode == "overflow" else limits.usable):
            # Still over the window: keep only the newest user message (or, within a call, the last round).
            before = work.snapshot()
            if self._tier3(work.run, work.meta, self._floor_start(work.state), work.room, work.measure_summary):
                work.settle(3, before)

    def _warn_if_over(self, work: _Pass, limits: _Limits, model: ChatModel) -> None:
        """Log what still fills the prompt when every tier left it over the goal."""
        if not work.over:
            return
        state = work.state
        summary = self._message_tokens(self._summary_msg(state.summary), 0, model) if state.summary else 0
        logger.warning(
            "context of session %r still holds %d tokens after compression (goal %d, window %d for the "
            "prompt): the summary takes %d, the system prompt, tools and the newest messages the rest",
            state.session_id,
            work.size,
            work.goal,
            limits.usable,
            summary,
        )

    async def _record(self, work: _Pass) -> None:
        """Save the tiers kept (bookkeeping, checkpoint) and emit one `ContextCompressed` event per tier."""
        if not work.steps:
            return
        run, meta = work.run, work.meta
        meta["compressions"] = int(meta.get("compressions", 0)) + 1
        run.set_field("metadata", {**(work.state.metadata or {}), META_KEY: meta})
        await run.checkpoint()
        for step in work.steps:
            run.event(
                ContextCompressed, before_tokens=step.before_tokens, after_tokens=step.after_tokens, tier=step.tier
            )

    def _floor_start(self, state: AgentState) -> int:
        """Where the smallest view begins: the newest user message, or within a call the model's last reply."""
        messages = state.messages
        start = min(state.summary_index, len(messages))
        for i in range(len(messages) - 1, start, -1):
            msg = messages[i]
            if (msg.role == "assistant" or _is_request(msg)) and is_round_start_safe(messages, i):
                return i
        return start

    def _protected_start(self, state: AgentState, keep: int) -> int:
        """Where the last `keep` rounds begin (the view start when there are fewer).

        The newest user input, not answered yet, is always kept on top and does not count as a round.
        """
        messages = state.messages
        start = min(state.summary_index, len(messages))
        if keep <= 0:
            return len(messages)
        starts = round_starts(messages, start)
        if starts and not any(m.role == "assistant" for m in messages[starts[-1] :]):
            keep += 1
        return starts[-keep] if len(starts) >= keep else start

    def _tier1(self, run: RunLike, meta: dict[str, Any], keep: int) -> bool:
        state = run.state
        limit = self.config.tool_result_max_chars
        new = self._protected_start(state, keep)
        old = max(int(meta.get("truncate_before", 0)), min(state.summary_index, len(state.messages)))
        if new <= old:
            return False
        if not any(truncate_message(msg, limit) is not None for msg in state.messages[old:new]):
            return False
        meta["truncate_before"] = new
        run.set_field("metadata", {**(state.metadata or {}), META_KEY: dict(meta)})
        return True

    def _pick_span(
        self,
        state: AgentState,
        need: int,
        model: ChatModel,
        summary_model: Callable[[], ChatModel],
        keep: int,
        room: int,
    ) -> tuple[int, int] | None:
        """The oldest rounds ``[start, cut)`` whose removal frees about `need` tokens, in the summariser's budget."""
        start = min(state.summary_index, len(state.messages))
        protected = self._protected_start(state, keep)
        candidates = [c for c in round_starts(state.messages, start) if start < c <= protected]
        if not candidates:
            return None
        try:
            sm = summary_model()
        except Exception:  # a summary model id that cannot be resolved: tier 2 is unavailable
            logger.exception("cannot resolve the summary model")
            return None
        # What the summariser can read at once (a bigger round is cut to fit its window).
        budget = max(1, min(self.limits(model).usable, self.limits(sm).usable) // 2)
        need += min(self.config.summary_max_tokens, room) // 2  # the new summary takes some of the room back
        limit = self.config.tool_result_max_chars
        trunc = 0
        meta = state.metadata.get(META_KEY) if state.metadata else None
        if isinstance(meta, Mapping):
            trunc = int(meta.get("truncate_before", 0))
        freed = 0
        chosen: int | None = None
        position = start
        for cut in candidates:
            for i in range(position, cut):
                msg = state.messages[i]
                tag = 0
                if i < trunc:
                    cut_msg = self._truncated.get((msg.id, limit))
                    if cut_msg is not None:
                        msg, tag = cut_msg, limit
                freed += self._message_tokens(msg, tag, model)
            position = cut
            if chosen is not None and freed > budget:
                break
            chosen = cut
            if freed >= need:
                break
        return None if chosen is None else (start, chosen)

    async def _tier2(
        self,
        run: RunLike,
        meta: dict[str, Any],
        span: tuple[int, int],
        summary_model: Callable[[], ChatModel],
        room: int,
        measure: Callable[[str], int],
        meter: SummaryMeter | None = None,
    ) -> bool:
        state = run.state
        start, cut = span
        try:
            model = summary_model()
            made = self._summary_request(meta, state.messages[start:cut], room, model)
        except Exception:
            logger.warning("summary model call failed; compressing without a new summary", exc_info=True)
            return False
        if made is None:
            return False
        request, max_tokens = made
        if meter is not None:
            meter.before(model)  # raises (no call made) rather than go past a usage limit
        try:
            reply = await model.generate(request, (), GenerateOptions(max_tokens=max_tokens))
        except Exception:
            logger.warning("summary model call failed; compressing without a new summary", exc_info=True)
            return False
        if meter is not None:
            meter.after(model, reply.usage)
        elif reply.usage is not None:
            run.add_usage(reply.usage)
        body = reply.text.strip()
        if not body:
            logger.warning("the summary model returned an empty summary; compressing without it")
            return False
        meta["body"] = body
        self._move_start(run, meta, start, cut, room, measure)
        return True

    def _summary_request(
        self, meta: Mapping[str, Any], messages: Sequence[Msg], room: int, model: ChatModel
    ) -> tuple[list[Msg], int] | None:
        """The summariser's request and its ``max_tokens``, cut to fit the summary model's window; None: it cannot.

        The summary call is a request like any other: it must fit ``max_tokens - reserve_output_tokens``
        and leave the summary its room, so the transcript (then the previous summary) is cut to a head
        and a tail when the rounds to fold are too big for the summariser's window.
        """
        cfg = self.config
        limits = self.limits(model)
        length = max(50, min(cfg.summary_max_tokens, room * 2 // 3))
        output = min(cfg.summary_max_tokens, max(64, room))
        budget = min(limits.usable, limits.max_tokens - output)
        system = Msg.system(cfg.summary_prompt or SUMMARY_PROMPT)
        parts: dict[str, str | None] = {
            "transcript": render_transcript(messages, 4 * cfg.tool_result_max_chars),
            "previous": str(meta.get("body") or "") or None,
        }

        def build() -> list[Msg]:
            text = _SUMMARY_REQUEST.format(
                previous=parts["previous"] or "(none yet)",
                transcript=parts["transcript"] or "(cut: too long for the summariser's window)",
                length=length,
            )
            return [system, Msg.user(text)]

        def size() -> int:
            return self.counter.adjust(count_tokens(build(), model), model)

        def size_with(name: str) -> Callable[[str | None], int]:
            def measure(candidate: str | None) -> int:
                parts[name] = candidate
                return size()

            return measure

        previous, transcript = parts["previous"], parts["transcript"]
        if previous is not None and size() > budget:
            # The previous summary takes at most half of what the transcript leaves, the transcript the rest.
            parts["transcript"] = None
            fixed = size_with("previous")(None)
            parts["previous"] = _clip_part(previous, size_with("previous"), fixed + max(0, budget - fixed) // 2)
            parts["transcript"] = transcript
        if transcript is not None and size() > budget:
            parts["transcript"] = _clip_part(transcript, size_with("transcript"), budget)
        if parts["transcript"] is None or (previous is not None and parts["previous"] is None):
            # A summary without the rounds, or without the previous one, would forget: keep the old one.
            logger.warning("the summary model's window cannot hold these rounds; compressing without a new summary")
            return None
        used = size()
        if used > budget:
            logger.warning(
                "the summary request needs %d tokens even cut, more than the %d the summary model's window "
                "leaves; compressing without a new summary",
                used,
                budget,
            )
            return None
        return build(), max(1, min(cfg.summary_max_tokens, limits.max_tokens - used))

    def _tier3(self, run: RunLike, meta: dict[str, Any], cut: int, room: int, measure: Callable[[str], int]) -> bool:
        """Drop ``messages[view start:cut]`` from the view with a one-line digest in the summary."""
        state = run.state
        start = min(state.summary_index, len(state.messages))
        if cut <= start:
            return False
        omitted = [*(meta.get("omitted") or ()), _digest(state.messages[start:cut])]
        meta["omitted"] = omitted[-_OMITTED_KEEP:]
        self._move_start(run, meta, start, cut, room, measure)
        return True

    def _move_start(
        self, run: RunLike, meta: dict[str, Any], start: int, cut: int, room: int, measure: Callable[[str], int]
    ) -> None:
        """Hide ``messages[start:cut]`` behind the summary (within `room` tokens), pinning requests that leave."""
        state = run.state
        messages = state.messages
        first = next((i for i, m in enumerate(messages) if _is_request(m)), None)
        latest = next((i for i in range(len(messages) - 1, -1, -1) if _is_request(messages[i])), None)
        pins = dict(meta.get("pins") or {})
        limit = self.config.pinned_max_chars
        if first is not None and start <= first < cut and "first" not in pins:
            pins["first"] = _pin_text(messages[first], limit)
        if latest is not None and start <= latest < cut and latest != first:
            pins["latest"] = _pin_text(messages[latest], limit)
        meta["pins"] = pins
        run.set_field("summary_index", cut)
        run.set_field("summary", render_summary(meta, room, measure))
        run.set_field("metadata", {**(state.metadata or {}), META_KEY: dict(meta)})
