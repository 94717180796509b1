"""The ids a run's timeline and its OpenTelemetry spans share (docs/server.md, "Run timelines").

Every bar of a run record (`agentrt.middleware.timeline.RunRecorder`) has an id, and the span
`agentrt.middleware.telemetry.TracingMiddleware` opens for the same step carries it as the
``agentrt.timeline.span_id`` attribute, beside ``agentrt.reply_id``: a trace backend and the web
UI show the same steps under the same names. Both middlewares compute an id from what each sees
of the step, so neither needs the other:

- a model call: the reply id and the ordinal of the call among the reply's model calls
  (``run.requests + 1`` when the call starts);
- a tool execution: the reply id and the tool call id (unique in its session);
- a wait for an approval or an external result: the id of the reply that paused and the tool call id.
"""

from __future__ import annotations

__all__ = [
    "REPLY_ID",
    "SPAN_ID",
    "call_span_id",
    "model_span_id",
    "tool_span_id",
    "wait_span_id",
]

SPAN_ID = "agentrt.timeline.span_id"
"""The span attribute holding the id of the timeline bar the span stands for."""
REPLY_ID = "agentrt.reply_id"
"""The span attribute holding the reply id of the call the span belongs to."""


def call_span_id(reply_id: str) -> str:
    """The bar of one call (one HTTP request) of a run."""
    return f"{reply_id}:call"


def model_span_id(reply_id: str, ordinal: int) -> str:
    """The bar of the `ordinal`-th model call (from 1) of the reply."""
    return f"{reply_id}:m{ordinal}"


def tool_span_id(reply_id: str, tool_call_id: str) -> str:
    """The bar of the execution of one tool call in the reply."""
    return f"{reply_id}:t:{tool_call_id}"


def wait_span_id(reply_id: str, tool_call_id: str, *, external: bool = False) -> str:
    """The bar of a wait for the approval (or, `external`, the result) of one tool call the reply paused on."""
    return f"{reply_id}:{'x' if external else 'a'}:{tool_call_id}"
