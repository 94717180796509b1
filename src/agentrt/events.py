"""Events streamed by an agent call, and a reducer that folds them back into the reply.

Every event is a small frozen dataclass with a snake-case `type`, the `reply_id` of the call (the
same for every event of one call, and the id of the returned `Msg`), the `session_id` and the
`source` agent name. Content events carry a `block_id` unique to one block of one call, so a
client can correlate the deltas of several text, thinking and tool-call blocks.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agentrt import _json
from agentrt.errors import InvalidValueError
from agentrt.message import (
    META_GENERATE_REASON,
    ContentBlock,
    GenerateReason,
    Msg,
    TextBlock,
    ThinkingBlock,
    TokenUsage,
    ToolResultBlock,
    ToolUseBlock,
)

__all__ = [
    "AgentEvent",
    "ContextCompressed",
    "EventReducer",
    "ExternalExecutionResult",
    "Interrupted",
    "ModelCallFinished",
    "ModelCallStarted",
    "ModelRestarted",
    "PendingToolCall",
    "RequireExternalExecution",
    "RequireUserConfirm",
    "RunError",
    "RunFinished",
    "RunStarted",
    "SubagentTaskFinished",
    "SubagentTaskStarted",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallDelta",
    "ToolCallStarted",
    "ToolResult",
    "Usage",
    "event_from_dict",
    "reduce_events",
    "register_event_type",
]

_EVENT_TYPES: dict[str, type[AgentEvent]] = {}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentEvent:
    """Base of all events."""

    type: ClassVar[str] = "agent_event"
    reply_id: str
    """Id of the call (and of the `Msg` it returns)."""
    session_id: str = ""
    source: str = ""
    """Name of the agent that emitted the event (a subagent's events keep their own source)."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form, with ``type`` first."""
        d: dict[str, Any] = {"type": self.type}
        for f in dataclasses.fields(self):
            d[f.name] = _json.jsonable(getattr(self, f.name))
        return d

    def to_json(self) -> str:
        """The event as a JSON string."""
        return _json.dumps(self.to_dict())


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStarted(AgentEvent):
    """A call began; `input` is what the caller sent."""

    input: list[Msg] = field(default_factory=list)
    user_id: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelCallStarted(AgentEvent):
    """A reasoning step (one model call) began."""

    step: int
    model: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta(AgentEvent):
    """A piece of assistant text."""

    block_id: str
    delta: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ThinkingDelta(AgentEvent):
    """A piece of model reasoning; the last delta of a block may carry the provider signature."""

    block_id: str
    delta: str
    signature: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallStarted(AgentEvent):
    """The model began a tool call."""

    block_id: str
    tool_call_id: str
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallDelta(AgentEvent):
    """A piece of a tool call's JSON arguments, as streamed by the model."""

    block_id: str
    tool_call_id: str
    delta: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRestarted(AgentEvent):
    """The model stream died midway and the step starts over (e.g. on a fallback model): discard its deltas."""

    step: int
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelCallFinished(AgentEvent):
    """A reasoning step ended; `msg` is the assistant message it produced."""

    step: int
    msg: Msg
    finish_reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResult(AgentEvent):
    """A tool call finished (successfully or not)."""

    result: ToolResultBlock
    elapsed: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingToolCall:
    """A tool call waiting for the caller: approval, or external execution."""

    id: str
    name: str
    input: Mapping[str, Any]
    suggested_rules: list[Any] = field(default_factory=list)
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form."""
        return {
            "id": self.id,
            "name": self.name,
            "input": _json.jsonable(self.input),
            "suggested_rules": _json.jsonable(self.suggested_rules),
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class RequireUserConfirm(AgentEvent):
    """The run paused: these tool calls need the user's approval."""

    tool_calls: list[PendingToolCall]


@dataclass(frozen=True, slots=True, kw_only=True)
class RequireExternalExecution(AgentEvent):
    """The run paused: the caller must run these tool calls and send back their results."""

    tool_calls: list[PendingToolCall]


@dataclass(frozen=True, slots=True, kw_only=True)
class ExternalExecutionResult(AgentEvent):
    """Results of externally executed tool calls arrived with the resume call."""

    results: list[ToolResultBlock]


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage(AgentEvent):
    """Tokens spent by one model call, and its cost in US dollars (None when the model's price is unknown)."""

    usage: TokenUsage
    model: str = ""
    cost_usd: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextCompressed(AgentEvent):
    """The prompt was compressed to fit the context window."""

    before_tokens: int
    after_tokens: int
    tier: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Interrupted(AgentEvent):
    """The call was interrupted."""

    message: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunError(AgentEvent):
    """The call failed; the exception is raised to the caller after this event."""

    error: str
    error_type: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFinished(AgentEvent):
    """The call ended; `msg` is the reply `call` returns."""

    msg: Msg


@dataclass(frozen=True, slots=True, kw_only=True)
class SubagentTaskStarted(AgentEvent):
    """A subagent task began (``agent_spawn``); its own events follow under its `name` as `source`."""

    task_id: str
    name: str
    task: str = ""
    background: bool = False
    subagent_session_id: str = ""
    """The session the subagent runs in (derived from the parent's session and the task id)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SubagentTaskFinished(AgentEvent):
    """A subagent task ended: `status` is completed, failed, cancelled or interrupted."""

    task_id: str
    name: str
    status: str
    background: bool = False
    summary: str = ""
    """The start of the result (or the error), for display; ``task_output`` returns all of it."""
    tokens: int = 0


def register_event_type(cls: type[AgentEvent]) -> type[AgentEvent]:
    """Give an event class its snake-case `type` and make `event_from_dict` know it (custom events too)."""
    if "type" not in cls.__dict__:
        cls.type = _snake(cls.__name__)
    _EVENT_TYPES[cls.type] = cls
    return cls


for _cls in (
    RunStarted,
    ModelCallStarted,
    TextDelta,
    ThinkingDelta,
    ToolCallStarted,
    ToolCallDelta,
    ModelCallFinished,
    ModelRestarted,
    ToolResult,
    RequireUserConfirm,
    RequireExternalExecution,
    ExternalExecutionResult,
    Usage,
    ContextCompressed,
    Interrupted,
    RunError,
    RunFinished,
    SubagentTaskStarted,
    SubagentTaskFinished,
):
    register_event_type(_cls)


def event_from_dict(d: Mapping[str, Any]) -> AgentEvent:
    """Rebuild an event from `to_dict` output (the inverse used by clients of the SSE stream)."""
    cls = _EVENT_TYPES.get(str(d.get("type")))
    if cls is None:
        raise InvalidValueError(f"unknown event type {d.get('type')!r}")
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in d:
            continue
        value = d[f.name]
        if f.name in ("msg",):
            value = Msg.from_dict(value)
        elif f.name == "input" and cls is RunStarted:
            value = [Msg.from_dict(m) for m in value]
        elif f.name == "result":
            value = _block(value)
        elif f.name == "results":
            value = [_block(v) for v in value]
        elif f.name == "usage":
            value = TokenUsage.from_dict(value)
        elif f.name == "tool_calls":
            value = [PendingToolCall(**v) for v in value]
        kwargs[f.name] = value
    return cls(**kwargs)


def _block(d: Mapping[str, Any]) -> Any:
    from agentrt.message import block_from_dict

    return block_from_dict(d)


class EventReducer:
    """Folds a stream of events into the reply `Msg`, also while the stream is still running.

    ``reducer.msg`` is the reply so far: the content of the latest reasoning step (the final
    answer once the run ends), the reply id as its id, usage summed over the call and the
    generate reason once known. Feed it events in order with `feed`.
    """

    __slots__ = (
        "_args",
        "_blocks",
        "_calls",
        "_final",
        "_order",
        "_reason",
        "_resumed_only",
        "_source",
        "_usage",
        "reply_id",
    )

    def __init__(self) -> None:
        self.reply_id: str | None = None
        self._source = ""
        self._order: list[str] = []
        self._blocks: dict[str, list[str]] = {}
        self._calls: dict[str, tuple[str, str]] = {}
        self._args: dict[str, list[str]] = {}
        self._usage: TokenUsage | None = None
        self._reason: GenerateReason | None = None
        self._final: Msg | None = None
        self._resumed_only = False

    def feed(self, event: AgentEvent) -> None:
        """Apply one event."""
        if self.reply_id is None:
            self.reply_id = event.reply_id
            self._source = event.source
        elif event.reply_id != self.reply_id or event.source != self._source:
            return  # another call's events (e.g. a forwarded subagent stream)
        if isinstance(event, (ModelCallStarted, ModelRestarted)):
            self._new_step()
        elif isinstance(event, (TextDelta, ThinkingDelta)):
            self._add_delta(event)
        elif isinstance(event, ToolCallStarted):
            key = "c:" + event.block_id
            self._calls[key] = (event.tool_call_id, event.name)
            self._args[key] = []
            self._order.append(key)
        elif isinstance(event, ToolCallDelta):
            self._args.setdefault("c:" + event.block_id, []).append(event.delta)
        elif isinstance(event, Usage):
            self._usage = event.usage if self._usage is None else self._usage + event.usage
        elif isinstance(event, (RequireUserConfirm, RequireExternalExecution)):
            self._pause(event)
        elif isinstance(event, Interrupted):
            self._reason = GenerateReason.INTERRUPTED
        elif isinstance(event, RunFinished):
            self._final = event.msg

    def _new_step(self) -> None:
        """Forget the content of the previous (or the restarted) reasoning step."""
        self._order.clear()
        self._blocks.clear()
        self._calls.clear()
        self._args.clear()

    def _add_delta(self, event: TextDelta | ThinkingDelta) -> None:
        """Append a text or thinking delta to its block (opened on its first delta)."""
        key = ("t:" if isinstance(event, TextDelta) else "k:") + event.block_id
        parts = self._blocks.get(key)
        if parts is None:
            parts = self._blocks[key] = []
            self._order.append(key)
        parts.append(event.delta)
        if isinstance(event, ThinkingDelta) and event.signature is not None:
            self._blocks[key + ":sig"] = [event.signature]

    def _pause(self, event: RequireUserConfirm | RequireExternalExecution) -> None:
        """Record why the run paused (approval wins over external execution) and, if needed, the waiting calls."""
        if isinstance(event, RequireUserConfirm):
            self._reason = GenerateReason.AWAITING_CONFIRMATION
        elif self._reason is None:
            self._reason = GenerateReason.AWAITING_EXTERNAL_EXECUTION
        if self._resumed_only or not self._order:
            # A resumed call that pauses again made no model step: the reply lists the waiting calls.
            self._resumed_only = True
            for call in event.tool_calls:
                key = f"c:pending-{call.id}"
                self._calls[key] = (call.id, call.name)
                self._args[key] = [_json.dumps(dict(call.input))]
                self._order.append(key)

    def feed_all(self, events: Iterable[AgentEvent]) -> Msg:
        """Apply every event and return the reply."""
        for event in events:
            self.feed(event)
        return self.msg

    @property
    def finished(self) -> bool:
        """Whether the run-finished event has been seen."""
        return self._final is not None

    @property
    def msg(self) -> Msg:
        """The reply as reconstructed from the deltas seen so far."""
        content: list[ContentBlock] = []
        for key in self._order:
            if key.startswith("t:"):
                content.append(TextBlock(text="".join(self._blocks[key])))
            elif key.startswith("k:"):
                sig = self._blocks.get(key + ":sig")
                content.append(ThinkingBlock(thinking="".join(self._blocks[key]), signature=sig[0] if sig else None))
            else:
                call_id, name = self._calls[key]
                raw = "".join(self._args.get(key, ()))
                try:
                    args = _json.loads(raw) if raw else {}
                except ValueError:
                    args = {}
                content.append(ToolUseBlock(id=call_id, name=name, input=args if isinstance(args, dict) else {}))
        metadata: dict[str, Any] = {}
        reason = self._reason
        if self._final is not None:
            reason = self._final.generate_reason
        if reason is not None and reason is not GenerateReason.STOP:
            metadata[META_GENERATE_REASON] = reason.value
        msg = Msg(
            role="assistant",
            content=content,
            name=self._source or None,
            metadata=metadata,
            id=self.reply_id or "",
            usage=self._usage,
        )
        if self._final is not None:
            # Timestamp and any metadata the runtime added are not streamed; take them from the end event.
            # A composite (pipeline) streams its members' deltas, not its own: take its content too.
            changes: dict[str, Any] = {"timestamp": self._final.timestamp, "metadata": self._final.metadata}
            if not content:
                changes["content"] = list(self._final.content)
                changes["usage"] = self._final.usage
            msg = msg.replace(**changes)
        return msg


def reduce_events(events: Iterable[AgentEvent]) -> Msg:
    """Fold a complete event stream into the reply `Msg` (equal to `RunFinished.msg`)."""
    return EventReducer().feed_all(events)
