"""`RunRecorder`: the timeline of every reply, recorded as it runs and stored with the session.

A run record says what one reply did and when: each model call (model, tokens in and out, cost,
retries, a fallback, what it saw and answered), each tool execution (arguments, result, state),
each wait for an approval or an external result, and the context compressions, all timed on one
axis (milliseconds from the start of the run, measured with a monotonic clock from a wall-clock
start). A reply that paused for an approval and was resumed by a later call (another HTTP request,
maybe on another replica) is one run: its record is stored under the first reply id, and the
wait runs from the pause to the call that answered it. See docs/server.md ("Run timelines") for
the JSON schema.

Recording is off unless an agent has the middleware (the server adds it to the agents it serves)::

    agent = ReActAgent(..., middlewares=[RunRecorder()])

It costs a few microseconds per step while the agent runs and one store write when a call ends
(two reads more for a call resuming a paused run). Contents are bounded (`RunRetention`) and
redacted with the logging rules (`agentrt.telemetry.logging`): secrets never reach the store.
Messages the model saw that are in the session's history are stored as references to them,
resolved (and redacted) when the timeline is read.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import operator
import os
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from agentrt import events as ev
from agentrt.message import (
    META_CONFIRM_RESULTS,
    GenerateReason,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from agentrt.middleware.base import Middleware
from agentrt.model.base import ModelRequest
from agentrt.state.pending import META_PENDING
from agentrt.state.runs import RUN_SCHEMA, RunRetention, StoredRun, bound_record, limit_ids, supports_run_records
from agentrt.telemetry import ids
from agentrt.telemetry.logging import _PATTERNS, _SECRET_NAME, REDACTED, _env_secrets, redact

__all__ = ["RunRecorder", "enable_run_records", "recorder_of", "timeline_view"]

logger = logging.getLogger("agentrt.timeline")

_STATUS = {
    GenerateReason.STOP: "completed",
    GenerateReason.STRUCTURED_OUTPUT: "completed",
    GenerateReason.MAX_ITERS: "max_iters",
    GenerateReason.AWAITING_CONFIRMATION: "awaiting_confirmation",
    GenerateReason.AWAITING_EXTERNAL_EXECUTION: "awaiting_external_execution",
    GenerateReason.INTERRUPTED: "interrupted",
}
_WAITING = ("awaiting_confirmation", "awaiting_external_execution")
_CONTEXT_META = "agentrt.context"
"""Where context compression keeps its bookkeeping in a session's metadata (`agentrt.memory.compression`)."""
_COPIES = 64
"""Copies of request messages that are not history (system prompts) reused across records."""
_copies: dict[int, tuple[Msg, tuple[str, ...], int, dict[str, Any]]] = {}
_SECRETS_TTL = 5.0
"""Seconds the secret values of the environment are reused before being read again (when unchanged in number)."""


class RunRecorder(Middleware):
    """Records each reply's timeline and stores it with the session (one write when a call ends).

    Add it first in ``middlewares`` (the server does, for the agents it serves) so that its
    timings include the other middlewares' work. Stores without run records
    (`agentrt.state.runs.supports_run_records`) are left alone: nothing is recorded.

    Args:
        retention: Bounds and retention of the records (`RunRetention`; defaults: 100 runs per
            session, 30 days, 256 KiB per record).
    """

    def __init__(self, retention: RunRetention | None = None) -> None:
        self.retention = retention if retention is not None else RunRetention()
        _install_log_filter()

    async def on_call(self, run: Any, next: Callable[[], Awaitable[Msg]]) -> Msg:
        if not supports_run_records(run.store):
            return await next()
        rec = _Recording(self.retention, run)
        token = _current.set(rec)
        inner = run.emit_fn
        if inner is not None:  # streamed: watch the events (compressions) on their way out
            rec.inner = inner
            run.emit_fn = rec.on_event
        try:
            msg = await next()
        except asyncio.CancelledError:
            rec.end_call(None, "cancelled", None)
            await asyncio.shield(self._save(rec))
            raise
        except Exception as exc:
            rec.end_call(None, "error", exc)
            await self._save(rec)
            raise
        finally:
            if inner is not None:
                run.emit_fn = inner
            _current.reset(token)
        rec.end_call(msg, _STATUS.get(msg.generate_reason, msg.generate_reason.value), None)
        await self._save(rec)
        return msg

    async def on_reasoning(self, run: Any, next: Callable[[], Awaitable[Msg]]) -> Msg:
        rec = _current.get()
        if rec is not None and rec.compressions is None and rec.inner is None and rec.run is run and rec.managed:
            # a call nobody streams has no compression events: count them from here (loaded, not compressed yet)
            rec.compressions = _compressions(run)
        return await next()

    async def on_model_call(
        self, run: Any, request: ModelRequest, next: Callable[[ModelRequest], Awaitable[Msg]]
    ) -> Msg:
        rec = _current.get()
        if rec is None or rec.run is not run:
            return await next(request)
        model = rec.start_model(request)
        try:
            msg = await next(request)
        except BaseException as exc:
            rec.end_model(model, None, exc)
            raise
        rec.end_model(model, msg, None)
        return msg

    async def on_acting(
        self, run: Any, call: ToolUseBlock, next: Callable[[ToolUseBlock], Awaitable[ToolResultBlock]]
    ) -> ToolResultBlock:
        rec = _current.get()
        if rec is None or rec.run is not run:
            return await next(call)
        span = rec.start_tool(call)
        try:
            result = await next(call)
        except BaseException as exc:
            rec.end_tool(span, None, exc)
            raise
        rec.end_tool(span, result, None)
        return result

    async def _save(self, rec: _Recording) -> None:
        """Store the record (merged into the paused run this call resumes); never fails the call."""
        run = rec.run
        store = run.store
        try:
            prior = await _paused_run(store, run, rec.answers) if rec.answers else None
            record = rec.record(prior)
            body, truncated = bound_record(record, self.retention.max_bytes)
            summary = _summary(record, truncated)
            stored = StoredRun(record["reply_id"], record["started_at"], summary, body)
            await store.save_run(
                run.user_id,
                run.session_id,
                stored,
                agent=run.agent_key,
                max_runs=self.retention.max_runs,
                older_than=self.retention.max_age,
            )
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.warning("could not store the timeline of reply %s", run.reply_id, exc_info=True)


def enable_run_records(agent: object, retention: RunRetention | None = None) -> bool:
    """Give `agent` a `RunRecorder` (outermost) unless it has one; False for agents without middlewares.

    For applications serving agents themselves; `agentrt.server.create_app` does it for its agents.
    Call it before the agent's first call (its middleware chains are built on first use).
    """
    middlewares = getattr(agent, "middlewares", None)
    if not isinstance(middlewares, tuple):
        return False
    if recorder_of(agent) is not None:
        return True
    agent.middlewares = (RunRecorder(retention), *middlewares)  # type: ignore[attr-defined]
    if hasattr(agent, "_chains"):
        agent._chains = None  # rebuilt on the next call, with the recorder
    return True


def recorder_of(agent: object) -> RunRecorder | None:
    """The `RunRecorder` among `agent`'s middlewares, if any."""
    for middleware in getattr(agent, "middlewares", None) or ():
        if isinstance(middleware, RunRecorder):
            return middleware
    return None


# --------------------------------------------------------------------------------------------------
# one call in flight
# --------------------------------------------------------------------------------------------------
class _Model:
    """A model call being recorded: its bar, and what is needed to describe it when the call ends."""

    __slots__ = ("cost0", "history_len", "ordinal", "request", "requests0", "response", "span", "unpriced0")

    def __init__(self, span: dict[str, Any], request: ModelRequest, run: Any, ordinal: int) -> None:
        self.span = span
        self.request = request
        self.history_len = len(run.state.messages) if run.loaded else 0
        """The length of the session's history when the request was made: its history part ends there."""
        self.response: Msg | None = None
        self.ordinal = ordinal
        self.requests0 = run.requests
        self.cost0 = run.cost_usd
        self.unpriced0 = run.unpriced


class _Recording:
    """The timeline of one call as it runs: bars and marks on a monotonic clock started with the call."""

    __slots__ = (
        "answers",
        "compressions",
        "ended",
        "error",
        "inner",
        "managed",
        "marks",
        "model",
        "model_id",
        "models",
        "msg",
        "ordinals",
        "retention",
        "run",
        "spans",
        "status",
        "t0",
        "wall0",
    )

    def __init__(self, retention: RunRetention, run: Any) -> None:
        self.retention = retention
        self.run = run
        self.wall0 = time.time()
        self.t0 = time.perf_counter()
        self.spans: list[dict[str, Any]] = []
        self.marks: list[dict[str, Any]] = []
        self.models: list[_Model] = []
        self.model: _Model | None = None
        self.ordinals: set[int] = set()
        self.inner: Callable[[ev.AgentEvent], None] | None = None
        self.answers = _answers(run.input)
        self.compressions: int | None = None
        self.managed = getattr(run.agent, "_context", None) is not None
        self.model_id = _model_id(run)
        """Whether the agent manages its context (only then can its prompt be compressed)."""
        self.ended = 0.0
        self.status = "running"
        self.error: dict[str, str] | None = None
        self.msg: Msg | None = None

    def now(self) -> float:
        """Milliseconds since the call started."""
        return round((time.perf_counter() - self.t0) * 1000.0, 3)

    # -- events (streamed calls) ------------------------------------------------------------------
    def on_event(self, event: ev.AgentEvent) -> None:
        if type(event) is ev.ContextCompressed and event.reply_id == self.run.reply_id:
            self.marks.append(
                {
                    "kind": "compression",
                    "at_ms": self.now(),
                    "reply_id": event.reply_id,
                    "before_tokens": event.before_tokens,
                    "after_tokens": event.after_tokens,
                    "tier": event.tier,
                }
            )
            self.compressions = _compressions(self.run)  # seen: the counter must not mark it again
        inner = self.inner
        if inner is not None:
            inner(event)

    def _check_compressions(self) -> None:
        """Mark compressions the session's bookkeeping counted since the last look (calls nobody streams)."""
        count = _compressions(self.run)
        if self.compressions is not None and count > self.compressions:
            self.marks.append(
                {
                    "kind": "compression",
                    "at_ms": self.now(),
                    "reply_id": self.run.reply_id,
                    "count": count - self.compressions,
                }
            )
        self.compressions = count

    # -- model calls ------------------------------------------------------------------------------
    def start_model(self, request: ModelRequest) -> _Model:
        run = self.run
        if self.inner is None and self.managed:
            self._check_compressions()
        ordinal = run.requests + 1
        while ordinal in self.ordinals:  # a middleware answered without calling the model
            ordinal += 1000
        self.ordinals.add(ordinal)
        span: dict[str, Any] = {
            "id": ids.model_span_id(run.reply_id, ordinal),
            "kind": "model",
            "reply_id": run.reply_id,
            "step": run.step,
            "start_ms": self.now(),
            "end_ms": None,
            "model": self.model_id,
        }
        model = self.model = _Model(span, request, run, ordinal)
        self.models.append(model)
        self.spans.append(span)
        return model

    def end_model(self, model: _Model, msg: Msg | None, exc: BaseException | None) -> None:
        span = model.span
        span["end_ms"] = self.now()
        if self.model is model:
            self.model = None
        run = self.run
        if run.requests == model.requests0 or run.unpriced > model.unpriced0:  # no call made, or no known price
            span["cost_usd"] = None
        else:
            span["cost_usd"] = round(run.cost_usd - model.cost0, 12)
        span.setdefault("served_by", span["model"])
        if exc is not None:
            span["error"] = _error(exc)
            return
        assert msg is not None
        model.response = msg
        usage = msg.usage
        span["input_tokens"] = usage.input_tokens if usage is not None else None
        span["output_tokens"] = usage.output_tokens if usage is not None else None
        finish = msg.metadata.get("finish_reason") if msg.metadata else None
        span["finish_reason"] = str(finish) if finish is not None else None
        span["tool_calls"] = [c.name for c in msg.tool_calls]

    def on_retry(self, args: Sequence[Any]) -> None:
        """A `RetryModel` retried a failed model call (its log line's arguments)."""
        model = self.model
        mark: dict[str, Any] = {"kind": "retry", "at_ms": self.now(), "reply_id": self.run.reply_id}
        if len(args) >= 6:
            mark.update(
                model=str(args[0]),
                error=_short(f"{args[1]}: {args[2]}", 500),
                attempt=_number(args[3]),
                max_retries=_number(args[4]),
                wait_s=_number(args[5]),
            )
        if model is not None:
            mark["span"] = model.span["id"]
            model.span["retries"] = int(model.span.get("retries", 0)) + 1
        self.marks.append(mark)

    def on_fallback(self, args: Sequence[Any]) -> None:
        """A `FallbackModel` moved on to its next model (its log line's arguments)."""
        model = self.model
        mark: dict[str, Any] = {"kind": "fallback", "at_ms": self.now(), "reply_id": self.run.reply_id}
        if len(args) >= 2:
            mark.update(reason=_short(str(args[0]), 500), to=str(args[1]))
        if model is not None:
            mark["span"] = model.span["id"]
            model.span["fallback"] = True
            if len(args) >= 2:
                model.span["served_by"] = str(args[1])
        self.marks.append(mark)

    # -- tool executions --------------------------------------------------------------------------
    def start_tool(self, call: ToolUseBlock) -> dict[str, Any]:
        run = self.run
        span: dict[str, Any] = {
            "id": ids.tool_span_id(run.reply_id, call.id),
            "kind": "tool",
            "reply_id": run.reply_id,
            "name": call.name,
            "tool_call_id": call.id,
            "start_ms": self.now(),
            "end_ms": None,
            "_input": call.input,
        }
        if self.models:
            span["parent"] = self.models[-1].span["id"]
        self.spans.append(span)
        return span

    def end_tool(self, span: dict[str, Any], result: ToolResultBlock | None, exc: BaseException | None) -> None:
        span["end_ms"] = self.now()
        if result is None:
            span["state"] = "interrupted" if isinstance(exc, asyncio.CancelledError) else "error"
            if exc is not None and not isinstance(exc, asyncio.CancelledError):
                span["error"] = _error(exc)
        else:
            span["state"] = result.state
            span["_result"] = result

    # -- the end of the call ------------------------------------------------------------------------
    def end_call(self, msg: Msg | None, status: str, exc: BaseException | None) -> None:
        self.ended = self.now()
        self.msg = msg
        self.status = status
        if exc is not None:
            self.error = _error(exc)
        if self.inner is None and self.compressions is not None:
            self._check_compressions()
        for model in self.models:  # calls cut short (an interrupt, a cancel) end with the call
            if model.span["end_ms"] is None:
                model.span["end_ms"] = self.ended
        for span in self.spans:
            if span["end_ms"] is None:
                span["end_ms"] = self.ended
                span.setdefault("state", "interrupted")

    def record(self, prior: dict[str, Any] | None) -> dict[str, Any]:
        """The run record: this call's bars (after the `prior` record of the run it resumes, if any)."""
        run = self.run
        history = run.state.messages if self.retention.capture_messages and self.models and run.loaded else None
        content = _Content(self.retention, history)
        spans = [
            {
                "id": ids.call_span_id(run.reply_id),
                "kind": "call",
                "reply_id": run.reply_id,
                "start_ms": 0.0,
                "end_ms": self.ended,
                "status": self.status,
                "input": content.text(_input_text(run.input), 300),
            }
        ]
        for span in self.spans:
            spans.append(content.tool_span(span) if span["kind"] == "tool" else span)
        for model in self.models:
            content.describe_model(model)
        spans += self._waits(content)
        base: dict[str, Any] = {
            "schema": RUN_SCHEMA,
            "reply_id": run.reply_id,
            "reply_ids": [run.reply_id],
            "agent": run.agent_key,
            "session_id": run.session_id,
            "started_at": self.wall0,
            "status": self.status,
            "error": self.error,
            "truncated": False,
            "spans": spans,
            "marks": self.marks,
            "messages": content.messages,
            "message_ids": [m.response.id for m in self.models if m.response is not None],
        }
        if prior is not None:
            base = _merge(prior, base, self.answers)
        return _with_totals(base)

    def _waits(self, content: _Content) -> list[dict[str, Any]]:
        """Open bars for the calls the reply paused on (closed by the call that answers them)."""
        msg = self.msg
        if msg is None or self.status not in _WAITING or not msg.metadata:
            return []
        waits = []
        for entry in msg.metadata.get(META_PENDING) or ():
            if not isinstance(entry, Mapping) or entry.get("kind") not in ("confirm", "external"):
                continue
            external = entry.get("kind") == "external"
            call_id = str(entry.get("id", ""))
            waits.append(
                {
                    "id": ids.wait_span_id(self.run.reply_id, call_id, external=external),
                    "kind": "external" if external else "approval",
                    "reply_id": self.run.reply_id,
                    "name": str(entry.get("name", "")),
                    "tool_call_id": call_id,
                    "start_ms": self.ended,
                    "end_ms": None,
                    "decision": None,
                    "arguments": content.value(entry.get("input") or {}),
                    "reason": content.text(str(entry.get("reason") or ""), 500),
                }
            )
        return waits


_current: contextvars.ContextVar[_Recording | None] = contextvars.ContextVar("agentrt_run_recording", default=None)
"""The recording of the call running in this task (tools' tasks inherit it)."""


# --------------------------------------------------------------------------------------------------
# contents: bounded, redacted with the logging rules
# --------------------------------------------------------------------------------------------------
class _Content:
    """Turns arguments, results and messages into record values: cut to size, secrets redacted."""

    __slots__ = ("history", "limit", "messages", "retention", "secrets")

    def __init__(self, retention: RunRetention, history: list[Msg] | None = None) -> None:
        self.retention = retention
        self.limit = retention.max_field_chars
        self.secrets = _secrets()
        self.messages: dict[str, dict[str, Any]] = {}
        self.history = history
        """The session's messages: request messages that are these very objects are stored as references."""

    def text(self, text: str, limit: int | None = None) -> str:
        """`text` redacted and cut to `limit` characters (the field limit by default), marked when cut."""
        limit = self.limit if limit is None else limit
        if len(text) <= limit:
            return _redact(text, self.secrets)
        # Redacted before the cut, with a margin: a secret the cut would split is still recognised.
        kept = _redact(text[: limit + 256], self.secrets)[:limit]
        return f"{kept}…[truncated {len(text) - limit} chars]"

    def value(self, value: Any, depth: int = 0) -> Any:
        """A JSON value with every string cut and redacted, and the values of secret-named keys hidden."""
        if isinstance(value, str):
            return self.text(value)
        if value is None or isinstance(value, bool | int | float):
            return value
        if depth > 6:
            return self.text(repr(value))
        if isinstance(value, Mapping):
            out: dict[str, Any] = {}
            for i, (key, item) in enumerate(value.items()):
                if i >= 100:
                    out["…"] = f"[{len(value) - 100} more keys]"
                    break
                name = str(key)
                out[name] = REDACTED if _SECRET_NAME.search(name) else self.value(item, depth + 1)
            return out
        if isinstance(value, list | tuple | set | frozenset):
            items = list(value)
            out_list = [self.value(item, depth + 1) for item in items[:100]]
            if len(items) > 100:
                out_list.append(f"…[{len(items) - 100} more items]")
            return out_list
        return self.text(str(value))

    def tool_span(self, span: dict[str, Any]) -> dict[str, Any]:
        """A tool bar for the record: its arguments and result bounded and redacted."""
        out = {k: v for k, v in span.items() if not k.startswith("_")}
        out["arguments"] = self.value(span.get("_input") or {})
        result = span.get("_result")
        if isinstance(result, ToolResultBlock):
            out["result"] = self.text(result.text)
        return out

    def describe_model(self, model: _Model) -> None:
        """Add what the model saw and answered to its bar (unless messages are not captured)."""
        if not self.retention.capture_messages:
            return
        request = model.request
        messages = request.messages
        keep = self.retention.max_messages
        shown = messages[-keep:]
        model.span["request"] = {
            "messages": self.request_items(shown, model.history_len),
            "omitted": len(messages) - len(shown),
            "tools": [t.name for t in request.tools],
        }
        response = model.response
        if response is not None:
            history, at = self.history, model.history_len
            if history is not None and at < len(history) and history[at] is response:
                # stored as it was answered, right after what the model saw: a reference is enough
                model.span["response"] = {"history": response.id, "count": 1, "last": response.id}
            else:
                model.span["response"] = self.message(response)

    def request_items(self, messages: Sequence[Msg], history_len: int) -> list[dict[str, Any]]:
        """A request's messages as record items.

        The part of the request that is the session's history as it was then (the newest
        `history_len` messages' tail, the very same objects) becomes one ``{"history": first id,
        "count", "last": last id}``; the others (system prompt, summary, reminders, messages a
        compression rewrote) ``{"ref": id, "role"}`` to a copy kept in the record.
        """
        first, end = _history_run(messages, self.history, history_len)
        items = [self.copy_ref(m) for m in messages[:first]]
        if first < end:
            items.append({"history": messages[first].id, "count": end - first, "last": messages[end - 1].id})
        items += [self.copy_ref(m) for m in messages[end if first < end else first :]]
        return items

    def copy_ref(self, msg: Msg) -> dict[str, Any]:
        """A reference to a copy of `msg` kept in the record (made once per record).

        Copies are reused across records while the message object lives (an agent's system
        prompt is one object for all its calls): made once, not once per run.
        """
        if msg.id not in self.messages:
            cached = _copies.get(id(msg))
            if cached is not None and cached[0] is msg and cached[1] is self.secrets and cached[2] == self.limit:
                copy = cached[3]
            else:
                copy = self.message(msg)
                if len(_copies) >= _COPIES:
                    del _copies[next(iter(_copies))]
                _copies[id(msg)] = (msg, self.secrets, self.limit, copy)
            self.messages[msg.id] = copy
        return {"ref": msg.id, "role": msg.role}

    def message(self, msg: Msg) -> dict[str, Any]:
        """A message's content, bounded and redacted (images and other media as their type only)."""
        blocks: list[dict[str, Any]] = []
        for block in msg.content:
            if isinstance(block, TextBlock):
                blocks.append({"type": "text", "text": self.text(block.text)})
            elif isinstance(block, ThinkingBlock):
                blocks.append({"type": "thinking", "thinking": self.text(block.thinking)})
            elif isinstance(block, ToolUseBlock):
                blocks.append(
                    {"type": "tool_use", "id": block.id, "name": block.name, "input": self.value(block.input)}
                )
            elif isinstance(block, ToolResultBlock):
                blocks.append(
                    {
                        "type": "tool_result",
                        "id": block.id,
                        "name": block.name,
                        "state": block.state,
                        "output": self.text(block.text),
                    }
                )
            else:
                blocks.append({"type": str(getattr(block, "type", "other"))})
        out: dict[str, Any] = {"id": msg.id, "role": msg.role, "content": blocks}
        if msg.name:
            out["name"] = msg.name
        return out


def _history_run(messages: Sequence[Msg], history: list[Msg] | None, history_len: int) -> tuple[int, int]:
    """``(first, end)``: `messages[first:end]` are the very objects ending the history's first `history_len`.

    The history run ends at the last history message (a few messages may follow it: a reminder,
    a nudge) and starts after the system prompt (and a summary). Checked object by object in C
    (`operator.is_`); when a compression rewrote messages inside it, walked back from its end.
    ``(n, n)`` when no history message is there.
    """
    n = len(messages)
    if history is None or not 0 < history_len <= len(history):
        return n, n
    last = history[history_len - 1]
    end = n
    while end > 0 and messages[end - 1] is not last and n - end < 8:
        end -= 1
    if end == 0 or messages[end - 1] is not last:
        return n, n
    offset = history_len - end  # messages[i] is history[offset + i] inside the run
    first = 0
    while first < end and (offset + first < 0 or messages[first] is not history[offset + first]):
        first += 1
    if all(map(operator.is_, messages[first:end], history[offset + first : history_len])):
        return first, end
    first, k = end - 1, history_len - 2  # rewritten in the middle: the run that ends the history
    while first > 0 and k >= 0 and messages[first - 1] is history[k]:
        first -= 1
        k -= 1
    return first, end


def timeline_view(
    record: Mapping[str, Any], history: Sequence[Msg], retention: RunRetention | None = None
) -> dict[str, Any]:
    """A stored record as the timeline API returns it: what each model call saw, resolved.

    Request messages stored as references are looked up in the session's `history` (and shown
    bounded and redacted with the logging rules, like everything in the record); those kept in the
    record come from it. A message no longer in the session is shown as ``{"id", "role",
    "missing": true}``.
    """
    content = _Content(retention if retention is not None else RunRetention())
    positions = {m.id: i for i, m in enumerate(history)}
    kept = record.get("messages")
    inline: Mapping[str, Any] = kept if isinstance(kept, Mapping) else {}
    view = {k: v for k, v in record.items() if k != "messages"}
    spans: list[Any] = []
    for span in record.get("spans") or ():
        request = span.get("request") if isinstance(span, Mapping) else None
        if isinstance(request, Mapping) and isinstance(request.get("messages"), list):
            resolved: list[dict[str, Any]] = []
            for item in request["messages"]:
                if isinstance(item, Mapping):
                    resolved += _resolve(item, history, positions, inline, content)
            span = {**span, "request": {**request, "messages": resolved}}
        response = span.get("response") if isinstance(span, Mapping) else None
        if isinstance(response, Mapping) and "history" in response:
            span = {**span, "response": _resolve(response, history, positions, inline, content)[0]}
        spans.append(span)
    view["spans"] = spans
    return view


def _resolve(
    item: Mapping[str, Any],
    history: Sequence[Msg],
    positions: Mapping[str, int],
    inline: Mapping[str, Any],
    content: _Content,
) -> list[dict[str, Any]]:
    """The messages one request item stands for: a run of history messages, or a copy kept in the record."""
    if "history" in item:
        first, count, last = str(item.get("history")), item.get("count"), item.get("last")
        start = positions.get(first)
        if isinstance(count, int) and start is not None and 0 < count <= len(history) - start:
            found = history[start : start + count]
            if found[-1].id == last:
                return [content.message(m) for m in found]
        gone = count if isinstance(count, int) and 0 < count <= 10_000 else 1
        return [{"id": first, "role": "", "missing": True, "content": [], "count": gone}]
    key = str(item.get("ref", ""))
    copy = inline.get(key)
    if isinstance(copy, dict):
        return [copy]
    return [{"id": key, "role": str(item.get("role", "")), "missing": True, "content": []}]


# --------------------------------------------------------------------------------------------------
# resuming, totals, summary
# --------------------------------------------------------------------------------------------------
def _answers(inputs: Sequence[Msg]) -> dict[str, str]:
    """What a resuming call answers: tool call id -> "approved", "denied" or "result: <state>"."""
    answers: dict[str, str] = {}
    for msg in inputs:
        raw = msg.metadata.get(META_CONFIRM_RESULTS) if msg.metadata else None
        if isinstance(raw, list | tuple):
            for item in raw:
                call_id, confirmed = _confirmation(item)
                if call_id:
                    answers[call_id] = "approved" if confirmed else "denied"
        for block in msg.content:
            if isinstance(block, ToolResultBlock):
                answers[block.id] = f"result: {block.state}"
    return answers


def _confirmation(item: Any) -> tuple[str, bool]:
    """(tool call id, confirmed) of one approval answer (a `ConfirmResult` or its dict form)."""
    if isinstance(item, Mapping):
        call = item.get("tool_call")
        call_id = item.get("tool_call_id") or (call.get("id") if isinstance(call, Mapping) else None)
        return (str(call_id) if call_id else "", bool(item.get("confirmed")))
    call_id = getattr(item, "tool_call_id", None)
    return (str(call_id) if call_id else "", bool(getattr(item, "confirmed", False)))


async def _paused_run(store: Any, run: Any, answers: Mapping[str, str]) -> dict[str, Any] | None:
    """The record of the session's latest run if it waits for one of `answers`' calls (this call resumes it)."""
    latest = await store.list_runs(run.user_id, run.session_id, agent=run.agent_key, limit=1)
    if not latest or not set(latest[0].summary.get("waiting") or ()) & set(answers):
        return None
    stored = await store.get_run(run.user_id, run.session_id, latest[0].reply_id, agent=run.agent_key)
    if stored is None:
        return None
    record = stored.record()
    return record if record.get("schema") == RUN_SCHEMA and isinstance(record.get("spans"), list) else None


def _merge(prior: dict[str, Any], current: dict[str, Any], answers: Mapping[str, str]) -> dict[str, Any]:
    """`current` (a resuming call) appended to the record of the run it resumes, its waits closed."""
    spans = [s for s in prior.get("spans") or () if isinstance(s, dict)]
    last = max((_end(s) for s in spans), default=0.0)
    started = float(prior.get("started_at") or current["started_at"])
    # Offsets of another replica's clock: never before what the record already holds.
    offset = round(max((current["started_at"] - started) * 1000.0, last), 3)
    for span in spans:
        if span.get("kind") in ("approval", "external") and span.get("end_ms") is None:
            answer = answers.get(str(span.get("tool_call_id")))
            if answer is not None:
                span["end_ms"] = offset
                span["decision"] = answer
    for span in current["spans"]:
        span["start_ms"] = round(span["start_ms"] + offset, 3)
        if span.get("end_ms") is not None:
            span["end_ms"] = round(span["end_ms"] + offset, 3)
    marks = [m for m in prior.get("marks") or () if isinstance(m, dict)]
    for mark in current["marks"]:
        mark["at_ms"] = round(mark["at_ms"] + offset, 3)
    stored_messages = prior.get("messages")
    messages: dict[str, Any] = stored_messages if isinstance(stored_messages, dict) else {}
    prior_ids = [i for i in prior.get("reply_ids") or [prior.get("reply_id")] if isinstance(i, str)]
    return {
        **current,
        "reply_id": str(prior.get("reply_id") or current["reply_id"]),
        "reply_ids": limit_ids([*prior_ids, current["reply_id"]]),
        "started_at": started,
        "truncated": bool(prior.get("truncated")),
        "spans": spans + current["spans"],
        "marks": marks + current["marks"],
        "messages": {**messages, **current["messages"]},
        "message_ids": limit_ids([*(prior.get("message_ids") or []), *current["message_ids"]]),
    }


def _end(span: Mapping[str, Any]) -> float:
    end = span.get("end_ms")
    start = span.get("start_ms")
    value = end if isinstance(end, int | float) else start
    return float(value) if isinstance(value, int | float) else 0.0


def _with_totals(record: dict[str, Any]) -> dict[str, Any]:
    """The record with its totals, duration and end time computed from its bars (one pass)."""
    models = tools = tokens_in = tokens_out = 0
    cost = busy = wait = duration = 0.0
    priced = True
    for span in record["spans"]:
        kind = span.get("kind")
        start = span.get("start_ms")
        end = _end(span)
        duration = max(duration, end)
        if kind == "model":
            models += 1
            tokens_in += int(span.get("input_tokens") or 0)
            tokens_out += int(span.get("output_tokens") or 0)
            price = span.get("cost_usd")
            if isinstance(price, int | float):
                cost += price
            else:
                priced = False
        elif kind == "tool":
            tools += 1
        elif kind == "call" and isinstance(start, int | float):
            busy += end - start
        elif kind in ("approval", "external") and span.get("end_ms") is not None and isinstance(start, int | float):
            wait += end - start
    duration = round(duration, 3)
    record["duration_ms"] = duration
    record["ended_at"] = record["started_at"] + duration / 1000.0
    record["totals"] = {
        "model_calls": models,
        "tool_calls": tools,
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        "cost_usd": round(cost, 12) if models and priced else None,
        "busy_ms": round(busy, 3),
        "wait_ms": round(wait, 3),
    }
    return record


def _summary(record: dict[str, Any], truncated: bool) -> dict[str, Any]:
    """What a listing shows of a run (small: read without the record)."""
    waiting = [
        s.get("tool_call_id")
        for s in record["spans"]
        if s.get("kind") in ("approval", "external") and s.get("end_ms") is None
    ]
    title = next((s.get("input") for s in record["spans"] if s.get("kind") == "call"), "") or ""
    return {
        "schema": RUN_SCHEMA,
        "reply_ids": record["reply_ids"],
        "message_ids": record["message_ids"],
        "status": record["status"],
        "started_at": record["started_at"],
        "ended_at": record["ended_at"],
        "duration_ms": record["duration_ms"],
        "totals": record["totals"],
        "waiting": waiting[:50],
        "title": title[:120],
        "truncated": truncated or bool(record.get("truncated")),
    }


# --------------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------------
_secrets_cache: tuple[int, float, tuple[str, ...]] | None = None

# One search for any of the logging rules' patterns (built from them: it cannot drift from them),
# so that text holding none of them skips the substitutions.
_ANY_SECRET = re.compile(
    "|".join(f"(?{'i' if pattern.flags & re.IGNORECASE else ''}:{pattern.pattern})" for pattern, _ in _PATTERNS)
)


def _redact(text: str, secrets: tuple[str, ...]) -> str:
    """`redact` (the logging rules), at the cost of one regex search for text holding no secret."""
    if _ANY_SECRET.search(text) is None and not any(secret in text for secret in secrets):
        return text
    return redact(text, secrets)


def _secrets() -> tuple[str, ...]:
    """The secret values of the environment (the logging rules'), read again every few seconds or when it changes.

    Reading them means walking the whole environment, which costs more than the rest of a record.
    """
    global _secrets_cache
    cached = _secrets_cache
    now = time.monotonic()
    size = len(os.environ)
    if cached is not None and cached[0] == size and now - cached[1] < _SECRETS_TTL:
        return cached[2]
    values = _env_secrets()
    _secrets_cache = (size, now, values)
    return values


def _model_id(run: Any) -> str:
    try:
        model = run.agent.model
    except Exception:  # an unresolvable model id: the call itself reports it
        return "unknown"
    return str(getattr(model, "id", "unknown"))


def _compressions(run: Any) -> int:
    """How many compressions the session's bookkeeping counts (0 when it has none)."""
    if not run.loaded:
        return 0
    metadata = run.state.metadata
    meta = metadata.get(_CONTEXT_META) if metadata else None
    count = meta.get("compressions") if isinstance(meta, Mapping) else None
    return count if isinstance(count, int) else 0


def _input_text(inputs: Sequence[Msg]) -> str:
    return "\n".join(m.text for m in inputs if m.role == "user" and m.text)


def _error(exc: BaseException) -> dict[str, str]:
    return {"type": type(exc).__name__, "message": _short(str(exc), 500)}


def _short(text: str, limit: int) -> str:
    text = _redact(text, _secrets())
    return text if len(text) <= limit else text[:limit] + "…"


def _number(value: Any) -> float | int | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


# --------------------------------------------------------------------------------------------------
# retries and fallbacks: the resilience wrappers say so in their log lines
# --------------------------------------------------------------------------------------------------
_RETRY_LINE = "model %s failed (%s: %s); retry %d of %d in %.2f s"
_FALLBACK_LINE = "%s; continuing with %s"


class _ModelLogWatch(logging.Filter):
    """Sees the ``agentrt.model`` log lines of retries and fallbacks and marks them on the running call's timeline.

    The lines are logged by `RetryModel` and `FallbackModel` in the task of the model call, so the
    call's recording is found through the context. Never drops a record.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.msg
        if msg in (_RETRY_LINE, _FALLBACK_LINE):
            rec = _current.get()
            if rec is not None and isinstance(record.args, tuple):
                if msg == _RETRY_LINE:
                    rec.on_retry(record.args)
                else:
                    rec.on_fallback(record.args)
        return True


_WATCH = _ModelLogWatch()


def _install_log_filter() -> None:
    """Watch the model log (once per process; filters cost nothing for other lines but one comparison)."""
    model_logger = logging.getLogger("agentrt.model")
    if _WATCH not in model_logger.filters:
        model_logger.addFilter(_WATCH)
