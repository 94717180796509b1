"""OpenTelemetry tracing helpers: GenAI semantic-convention names, the tracer, content capture.

Importing this module imports ``opentelemetry-api``; `agentrt.middleware.telemetry.TracingMiddleware`
imports it when it is built, never before. Attribute names follow the OpenTelemetry semantic
conventions for generative AI (``gen_ai.*``), plus the general ``session.id``, ``user.id`` and
``error.type``; the few facts the conventions have no name for use the ``agentrt.`` prefix.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentrt.errors import MissingExtraError
from agentrt.message import Msg, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock

try:
    from opentelemetry import trace
    from opentelemetry.trace import Span, Status, StatusCode, Tracer, TracerProvider
except ImportError as exc:  # pragma: no cover - the packaging tests check it in a venv without the extra
    raise MissingExtraError("OpenTelemetry tracing (TracingMiddleware, setup_tracing)", "otel", exc.name) from exc

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = [
    "ERROR_TYPE",
    "GEN_AI_AGENT_DESCRIPTION",
    "GEN_AI_AGENT_NAME",
    "GEN_AI_CONVERSATION_ID",
    "GEN_AI_INPUT_MESSAGES",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_OUTPUT_MESSAGES",
    "GEN_AI_PROVIDER_NAME",
    "GEN_AI_REQUEST_MAX_TOKENS",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_REQUEST_SEED",
    "GEN_AI_REQUEST_STOP_SEQUENCES",
    "GEN_AI_REQUEST_TEMPERATURE",
    "GEN_AI_REQUEST_TOP_P",
    "GEN_AI_RESPONSE_FINISH_REASONS",
    "GEN_AI_RESPONSE_ID",
    "GEN_AI_RESPONSE_MODEL",
    "GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK",
    "GEN_AI_SYSTEM_INSTRUCTIONS",
    "GEN_AI_TOOL_CALL_ARGUMENTS",
    "GEN_AI_TOOL_CALL_ID",
    "GEN_AI_TOOL_CALL_RESULT",
    "GEN_AI_TOOL_DESCRIPTION",
    "GEN_AI_TOOL_NAME",
    "GEN_AI_TOOL_TYPE",
    "GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS",
    "GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "AGENTRT_COST_USD",
    "AGENTRT_REQUESTS",
    "AGENTRT_TOOL_CALLS",
    "SESSION_ID",
    "TRACER_NAME",
    "USER_ID",
    "get_tracer",
    "messages_attribute",
    "record_error",
    "setup_tracing",
]

TRACER_NAME = "agentrt"

# -- semantic-convention attribute names (strings, so no incubating semconv module is needed) --------------
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_AGENT_DESCRIPTION = "gen_ai.agent.description"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_REQUEST_TEMPERATURE = "gen_ai.request.temperature"
GEN_AI_REQUEST_TOP_P = "gen_ai.request.top_p"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_SEED = "gen_ai.request.seed"
GEN_AI_REQUEST_STOP_SEQUENCES = "gen_ai.request.stop_sequences"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
# The GenAI conventions define no cost attribute (yet): ours, under the agentrt namespace.
AGENTRT_COST_USD = "agentrt.cost_usd"
AGENTRT_REQUESTS = "agentrt.requests"
AGENTRT_TOOL_CALLS = "agentrt.tool_calls"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"
GEN_AI_TOOL_DESCRIPTION = "gen_ai.tool.description"
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
GEN_AI_SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
SESSION_ID = "session.id"
USER_ID = "user.id"
ERROR_TYPE = "error.type"


def get_tracer(tracer_provider: TracerProvider | None = None) -> Tracer:
    """The agentrt tracer from `tracer_provider`, or from the global provider when None."""
    from agentrt._version import version

    if tracer_provider is None:
        return trace.get_tracer(TRACER_NAME, version())
    return tracer_provider.get_tracer(TRACER_NAME, version())


def record_error(span: Span, exc: BaseException) -> None:
    """Mark `span` failed by `exc`: an exception event, ``error.type`` and an ERROR status."""
    span.record_exception(exc)
    span.set_attribute(ERROR_TYPE, type(exc).__qualname__)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:1000]))


def _parts(msg: Msg) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for block in msg.content:
        if isinstance(block, TextBlock):
            parts.append({"type": "text", "content": block.text})
        elif isinstance(block, ThinkingBlock):
            parts.append({"type": "reasoning", "content": block.thinking})
        elif isinstance(block, ToolUseBlock):
            parts.append({"type": "tool_call", "id": block.id, "name": block.name, "arguments": dict(block.input)})
        elif isinstance(block, ToolResultBlock):
            parts.append({"type": "tool_call_response", "id": block.id, "response": block.text})
        else:
            parts.append({"type": block.type})
    return parts


def messages_attribute(messages: Sequence[Msg], *, finish_reason: str | None = None) -> str:
    """Messages in the GenAI conventions' JSON shape (``[{"role", "parts": [...]}]``), as one string.

    Only used when content capture is on: message contents are sensitive.
    """
    out: list[dict[str, Any]] = []
    for msg in messages:
        role: str = msg.role
        if role == "user" and msg.has(ToolResultBlock):
            role = "tool"
        entry: dict[str, Any] = {"role": role, "parts": _parts(msg)}
        if finish_reason is not None:
            entry["finish_reason"] = finish_reason
        out.append(entry)
    return json.dumps(out, ensure_ascii=False, default=str)


def json_attribute(value: Any) -> str:
    """A value as a JSON string attribute (tool arguments and results)."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        value = dict(value)
    return json.dumps(value, ensure_ascii=False, default=str)


def setup_tracing(
    exporter: SpanExporter | None = None,
    *,
    service_name: str = "agentrt",
    simple: bool = False,
    set_global: bool = True,
) -> SdkTracerProvider:
    """A ready SDK `TracerProvider` exporting to `exporter` (the console when None), made the global one.

    ``setup_tracing(exporter)`` then ``TracingMiddleware()`` exports agentrt's spans: unless
    `set_global` is False, the provider becomes OpenTelemetry's global tracer provider (the one a
    `TracingMiddleware` without a provider uses, and other instrumentations too) when none is set
    yet. OpenTelemetry lets a process set it only once: when one is already set, it is kept, a
    warning says so, and the returned provider only serves those given it
    (``TracingMiddleware(provider)``).

    A convenience for scripts and examples; applications usually configure the SDK themselves
    (e.g. with an OTLP exporter). `simple=True` exports each span as it ends (tests); otherwise
    spans are batched (and flushed when the process exits, or by ``provider.force_flush()``).

    Needs ``opentelemetry-sdk``.
    """
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider as _SdkTracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor

    provider = _SdkTracerProvider(resource=Resource.create({"service.name": service_name}))
    exporter = exporter if exporter is not None else ConsoleSpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter) if simple else BatchSpanProcessor(exporter))
    if set_global:
        if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):  # none set yet
            trace.set_tracer_provider(provider)
        else:
            logging.getLogger("agentrt.telemetry").warning(
                "setup_tracing: a global tracer provider is already set and stays; pass the provider "
                "setup_tracing returns to TracingMiddleware(tracer_provider=...) to export to its exporter"
            )
    return provider
