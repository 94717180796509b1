"""Telemetry middlewares: OpenTelemetry spans, Prometheus metrics and structured log lines.

Opt-in and free when unused: this module imports neither opentelemetry nor prometheus-client;
each middleware imports its library when it is built. Add them like any middleware::

    agent = ReActAgent(..., middlewares=[TracingMiddleware(), MetricsMiddleware()])

Put them first in the list so their spans and timings include the other middlewares' work.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from agentrt import events as ev
from agentrt.message import Msg, TokenUsage, ToolResultBlock, ToolUseBlock
from agentrt.middleware.base import Middleware
from agentrt.model.base import ChatModel, GenerateOptions, ModelRequest
from agentrt.model.pricing import cost_of
from agentrt.telemetry import ids

if TYPE_CHECKING:
    from opentelemetry.trace import Span, TracerProvider
    from prometheus_client import CollectorRegistry

    from agentrt.agent._run import Run
    from agentrt.state.base import AgentStateStore
    from agentrt.telemetry.metrics import InstrumentedStateStore
    from agentrt.tool.scope import EventSink

__all__ = ["LoggingMiddleware", "MetricsMiddleware", "TracingMiddleware"]

_FIRST_CHUNK_EVENTS = (ev.TextDelta, ev.ThinkingDelta, ev.ToolCallStarted)


# --------------------------------------------------------------------------------------------------
# observing one model call
# --------------------------------------------------------------------------------------------------
class _ModelCallProbe:
    """An event sink put in front of the run's own for the duration of one model call.

    The loop reports streamed chunks only as events, so the first content event marks the first
    token. A call nobody streams gets the probe as its only sink: the loop then builds the
    events of that model call (a few objects per chunk) and the probe drops them.

    The call's `ev.Usage` event names the model that served the reply and its cost (a
    `FallbackModel` may answer from a fallback, priced as that model, not as the primary).
    """

    __slots__ = ("first_chunk_at", "inner", "reply_id", "usage_event")

    def __init__(self, inner: EventSink | None, reply_id: str) -> None:
        self.inner = inner
        self.reply_id = reply_id
        self.first_chunk_at: float | None = None
        self.usage_event: ev.Usage | None = None

    def __call__(self, event: ev.AgentEvent) -> None:
        if self.first_chunk_at is None and isinstance(event, _FIRST_CHUNK_EVENTS):
            self.first_chunk_at = time.perf_counter()
        elif isinstance(event, ev.Usage) and event.reply_id == self.reply_id:
            self.usage_event = event
        if self.inner is not None:
            self.inner(event)


@contextmanager
def _probe(run: Run) -> Iterator[_ModelCallProbe]:
    probe = _ModelCallProbe(run.emit_fn, run.reply_id)
    run.emit_fn = probe
    try:
        yield probe
    finally:
        # Hooks nest (onion order), so restoring our predecessor undoes exactly our change.
        run.emit_fn = probe.inner


def _agent_model(run: Run) -> ChatModel | None:
    """The run's agent's model; None when it has none or its model id cannot be resolved (the call says why)."""
    try:
        model = getattr(run.agent, "model", None)
    except Exception:
        return None
    return model if isinstance(model, ChatModel) else None


def _model_of(run: Run) -> tuple[str, str]:
    """``(provider, model name)`` of the run's agent."""
    try:
        model = getattr(run.agent, "model", None)
    except Exception:  # an unresolvable model id: the call itself reports it
        model = None
    if model is None:
        return "unknown", "unknown"
    return str(getattr(model, "provider", "unknown")), str(getattr(model, "model_name", "unknown"))


def _members(model: ChatModel) -> Iterator[ChatModel]:
    """`model` and every model it wraps or chooses among (`RetryModel`, `FallbackModel`, `TextProtocolModel`)."""
    stack = [model]
    seen: set[int] = set()
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        models = getattr(current, "models", None)
        if isinstance(models, tuple):
            stack.extend(m for m in models if isinstance(m, ChatModel))
        for attribute in ("_inner", "inner"):
            inner = getattr(current, attribute, None)
            if isinstance(inner, ChatModel):
                stack.append(inner)


def _chooses(model: ChatModel) -> bool:
    """Whether another model than `model` itself may serve its calls (a `FallbackModel` in it)."""
    return any(isinstance(getattr(m, "models", None), tuple) for m in _members(model))


def _served_id(run: Run, name: str) -> str:
    """``provider:model`` of the model named `name` that served a call of the run's agent.

    The agent's model when it chooses no other; else the one model of that name among those it
    chooses from. ``unknown:{name}`` when none matches, or several of different providers do.
    """
    model = _agent_model(run)
    if model is None or not _chooses(model):
        provider, configured = _model_of(run)
        return f"{provider}:{configured}" if configured == name else f"unknown:{name}"
    found = {m.id for m in _members(model) if m.model_name == name}
    return found.pop() if len(found) == 1 else f"unknown:{name}"


def _valid_cost(cost: object) -> float | None:
    """`cost` when it is a usable amount of dollars (a finite number >= 0), else None (unknown)."""
    if isinstance(cost, bool) or not isinstance(cost, (int, float)) or not math.isfinite(cost) or cost < 0:
        return None
    return float(cost)


def _served_call(run: Run, probe: _ModelCallProbe, usage: TokenUsage) -> tuple[str, float | None]:
    """``(provider:model, cost in US dollars or None)`` of the model that served one call.

    The loop's `ev.Usage` event names the model that served the reply (a `FallbackModel`'s
    fallback, say) and its cost: the figures of the agent's own usage report. Without that event
    (a middleware answered without calling the model), the agent's model, unless another model may
    have served: then the cost is unknown, never a guess.
    """
    event = probe.usage_event
    if event is not None:
        return _served_id(run, event.model), _valid_cost(event.cost_usd)
    provider, name = _model_of(run)
    model = _agent_model(run)
    if model is None or _chooses(model):
        return f"{provider}:{name}", None
    return f"{provider}:{name}", _valid_cost(cost_of(model, usage))


def _new_denials(run: Run, since: float) -> list[ToolResultBlock]:
    """Denied tool results this call added (denied calls never reach `on_acting`)."""
    found: list[ToolResultBlock] = []
    for msg in reversed(run.state.messages):
        if msg.timestamp < since:
            break
        if msg.role == "user":
            found.extend(b for b in msg.content if isinstance(b, ToolResultBlock) and b.state == "denied")
    return found


def _ms_since(start: float) -> float:
    """Milliseconds since the `time.perf_counter` reading `start`, as the log lines carry them."""
    return round((time.perf_counter() - start) * 1000, 3)


# --------------------------------------------------------------------------------------------------
# tracing
# --------------------------------------------------------------------------------------------------
class TracingMiddleware(Middleware):
    """OpenTelemetry spans following the GenAI semantic conventions.

    - ``invoke_agent {agent}`` around each call: ``gen_ai.operation.name``, ``gen_ai.agent.name``,
      ``gen_ai.conversation.id`` and ``session.id`` (the session), ``user.id``,
      ``gen_ai.request.model``, ``gen_ai.provider.name``, summed ``gen_ai.usage.*`` tokens,
      ``agentrt.requests``, ``agentrt.tool_calls`` and ``agentrt.cost_usd`` (subagents included; the
      cost only when every model call had a known price), and ``agentrt.generate_reason`` /
      ``agentrt.steps`` / ``agentrt.reply_id``.
    - ``chat {model}`` (kind CLIENT) around each model call: request model and options, token
      usage, ``agentrt.cost_usd`` (when the model's price is known, see `agentrt.model.pricing`),
      ``gen_ai.response.finish_reasons``, ``gen_ai.response.time_to_first_chunk``.
    - ``execute_tool {tool}`` around each tool run: ``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
      ``gen_ai.tool.type``; a result that is not a success sets ``error.type`` to its state.

    Every span carries ``agentrt.reply_id`` and ``agentrt.timeline.span_id``: the ids of the bar
    the run record (`agentrt.middleware.timeline.RunRecorder`) has for the same call or step.

    Exceptions are recorded on the span that saw them (exception event, ``error.type``, ERROR
    status) and re-raised. Message contents, tool arguments and results are attached only with
    ``capture_content=True`` (``gen_ai.input.messages``, ``gen_ai.output.messages``,
    ``gen_ai.tool.call.arguments``, ``gen_ai.tool.call.result``).

    Args:
        tracer_provider: Where spans go; the global provider (``opentelemetry.trace``) when None.
        capture_content: Attach contents to spans (sensitive: off by default).
    """

    def __init__(self, tracer_provider: TracerProvider | None = None, *, capture_content: bool = False) -> None:
        from agentrt.telemetry import tracing

        self._t = tracing
        self.tracer = tracing.get_tracer(tracer_provider)
        self.capture_content = capture_content

    def _span(self, name: str, attributes: dict[str, Any], *, client: bool = False) -> AbstractContextManager[Span]:
        """The current span of one hook; `_recorded` records its errors (OpenTelemetry's own recording is off)."""
        from opentelemetry.trace import SpanKind

        return self.tracer.start_as_current_span(
            name,
            kind=SpanKind.CLIENT if client else SpanKind.INTERNAL,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        )

    @contextmanager
    def _recorded(self, span: Span) -> Iterator[None]:
        """Mark `span` cancelled, or record the exception on it, as it leaves the block."""
        try:
            yield
        except asyncio.CancelledError:
            span.set_attribute("agentrt.cancelled", True)
            raise
        except Exception as exc:
            self._t.record_error(span, exc)
            raise

    async def on_call(self, run: Run, next: Callable[[], Awaitable[Msg]]) -> Msg:
        t = self._t
        agent = run.agent
        provider, model = _model_of(run)
        attributes: dict[str, Any] = {
            t.GEN_AI_OPERATION_NAME: "invoke_agent",
            t.GEN_AI_AGENT_NAME: agent.name,
            t.GEN_AI_CONVERSATION_ID: run.session_id,
            t.SESSION_ID: run.session_id,
            t.USER_ID: run.user_id,
            t.GEN_AI_PROVIDER_NAME: provider,
            t.GEN_AI_REQUEST_MODEL: model,
            ids.REPLY_ID: run.reply_id,
            ids.SPAN_ID: ids.call_span_id(run.reply_id),
        }
        if agent.description:
            attributes[t.GEN_AI_AGENT_DESCRIPTION] = agent.description
        with self._span(f"invoke_agent {agent.name}", attributes) as span:
            if self.capture_content and run.input:
                span.set_attribute(t.GEN_AI_INPUT_MESSAGES, t.messages_attribute(run.input))
            try:
                with self._recorded(span):
                    msg = await next()
            finally:
                span.set_attribute("agentrt.steps", run.step)
            span.set_attribute("agentrt.generate_reason", msg.generate_reason.value)
            if run.usage is not None:
                span.set_attribute(t.GEN_AI_USAGE_INPUT_TOKENS, run.usage.input_tokens)
                span.set_attribute(t.GEN_AI_USAGE_OUTPUT_TOKENS, run.usage.output_tokens)
            span.set_attribute(t.AGENTRT_REQUESTS, run.requests)
            span.set_attribute(t.AGENTRT_TOOL_CALLS, run.tool_calls)
            if run.requests and not run.unpriced:
                span.set_attribute(t.AGENTRT_COST_USD, run.cost_usd)
            if self.capture_content:
                span.set_attribute(t.GEN_AI_OUTPUT_MESSAGES, t.messages_attribute([msg]))
            return msg

    async def on_model_call(
        self, run: Run, request: ModelRequest, next: Callable[[ModelRequest], Awaitable[Msg]]
    ) -> Msg:
        t = self._t
        provider, model = _model_of(run)
        attributes: dict[str, Any] = {
            t.GEN_AI_OPERATION_NAME: "chat",
            t.GEN_AI_PROVIDER_NAME: provider,
            t.GEN_AI_REQUEST_MODEL: model,
            t.GEN_AI_CONVERSATION_ID: run.session_id,
            "agentrt.step": run.step,
            # the ids of the run record's bar for this call (`agentrt.telemetry.ids`)
            ids.REPLY_ID: run.reply_id,
            ids.SPAN_ID: ids.model_span_id(run.reply_id, run.requests + 1),
        }
        self._add_request_options(attributes, request.options)
        with self._span(f"chat {model}", attributes, client=True) as span:
            if self.capture_content:
                system = [m for m in request.messages if m.role == "system"]
                if system:
                    span.set_attribute(t.GEN_AI_SYSTEM_INSTRUCTIONS, "\n\n".join(m.text for m in system))
                span.set_attribute(
                    t.GEN_AI_INPUT_MESSAGES, t.messages_attribute([m for m in request.messages if m.role != "system"])
                )
            start = time.perf_counter()
            with _probe(run) as probe:
                try:
                    with self._recorded(span):
                        msg = await next(request)
                finally:
                    if probe.first_chunk_at is not None:
                        span.set_attribute(t.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, probe.first_chunk_at - start)
            # The model that served the reply: a FallbackModel's fallback, when the primary failed
            # (left out when a model that may answer with another reported no usage, so no name).
            served = probe.usage_event
            if served is not None:
                span.set_attribute(t.GEN_AI_RESPONSE_MODEL, served.model)
            elif (configured := _agent_model(run)) is None or not _chooses(configured):
                span.set_attribute(t.GEN_AI_RESPONSE_MODEL, model)
            finish = msg.metadata.get("finish_reason") if msg.metadata else None
            if finish:
                span.set_attribute(t.GEN_AI_RESPONSE_FINISH_REASONS, [str(finish)])
            usage = msg.usage
            if usage is not None:
                self._set_usage(span, usage)
                _, cost = _served_call(run, probe, usage)
                if cost is not None:
                    span.set_attribute(t.AGENTRT_COST_USD, cost)
            if self.capture_content:
                span.set_attribute(
                    t.GEN_AI_OUTPUT_MESSAGES, t.messages_attribute([msg], finish_reason=str(finish or "stop"))
                )
            return msg

    def _add_request_options(self, attributes: dict[str, Any], options: GenerateOptions) -> None:
        """The ``gen_ai.request.*`` attributes of the options a model call sets."""
        t = self._t
        if options.temperature is not None:
            attributes[t.GEN_AI_REQUEST_TEMPERATURE] = options.temperature
        if options.top_p is not None:
            attributes[t.GEN_AI_REQUEST_TOP_P] = options.top_p
        if options.max_tokens is not None:
            attributes[t.GEN_AI_REQUEST_MAX_TOKENS] = options.max_tokens
        if options.seed is not None:
            attributes[t.GEN_AI_REQUEST_SEED] = options.seed
        if options.stop:
            attributes[t.GEN_AI_REQUEST_STOP_SEQUENCES] = list(options.stop)

    def _set_usage(self, span: Span, usage: TokenUsage) -> None:
        """A model call's token counts (cache counts only when there are any)."""
        t = self._t
        span.set_attribute(t.GEN_AI_USAGE_INPUT_TOKENS, usage.input_tokens)
        span.set_attribute(t.GEN_AI_USAGE_OUTPUT_TOKENS, usage.output_tokens)
        if usage.cache_read_tokens:
            span.set_attribute(t.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, usage.cache_read_tokens)
        if usage.cache_write_tokens:
            span.set_attribute(t.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, usage.cache_write_tokens)

    async def on_acting(
        self, run: Run, call: ToolUseBlock, next: Callable[[ToolUseBlock], Awaitable[ToolResultBlock]]
    ) -> ToolResultBlock:
        t = self._t
        attributes: dict[str, Any] = {
            t.GEN_AI_OPERATION_NAME: "execute_tool",
            t.GEN_AI_TOOL_NAME: call.name,
            t.GEN_AI_TOOL_CALL_ID: call.id,
            t.GEN_AI_CONVERSATION_ID: run.session_id,
            ids.REPLY_ID: run.reply_id,
            ids.SPAN_ID: ids.tool_span_id(run.reply_id, call.id),
        }
        executor = run.executor
        tool = executor.lookup(call.name) if executor is not None else None
        if tool is not None:
            attributes[t.GEN_AI_TOOL_TYPE] = "extension" if tool.external else "function"
            if tool.description:
                attributes[t.GEN_AI_TOOL_DESCRIPTION] = tool.description[:500]
        with self._span(f"execute_tool {call.name}", attributes) as span:
            if self.capture_content:
                span.set_attribute(t.GEN_AI_TOOL_CALL_ARGUMENTS, t.json_attribute(call.input))
            with self._recorded(span):
                result = await next(call)
            span.set_attribute("agentrt.tool.state", result.state)
            if result.state != "success":
                from opentelemetry.trace import Status, StatusCode

                span.set_attribute(t.ERROR_TYPE, f"tool_{result.state}")
                span.set_status(Status(StatusCode.ERROR, f"tool result state: {result.state}"))
            if self.capture_content:
                span.set_attribute(t.GEN_AI_TOOL_CALL_RESULT, result.text)
            return result


# --------------------------------------------------------------------------------------------------
# metrics
# --------------------------------------------------------------------------------------------------
class MetricsMiddleware(Middleware):
    """Prometheus metrics of agent calls, model calls and tool calls.

    See `agentrt.telemetry.metrics` for the metric families. Serve them with
    ``agentrt.telemetry.metrics.render_latest(registry)``. Session-lock waits are measured by a
    store wrapped with `instrument_store` (the lock is taken before any hook runs).

    Args:
        registry: The `CollectorRegistry` to register the metrics in; prometheus-client's default
            registry when None. Middlewares sharing a registry share the metric objects.
        namespace: The metric name prefix.
    """

    def __init__(self, registry: CollectorRegistry | None = None, *, namespace: str = "agentrt") -> None:
        from agentrt.telemetry.metrics import AgentMetrics

        self.metrics = AgentMetrics.get(registry, namespace)

    @property
    def registry(self) -> CollectorRegistry:
        """The registry holding the metrics."""
        return self.metrics.registry

    def instrument_store(self, store: AgentStateStore, *, label: str | None = None) -> InstrumentedStateStore:
        """`store` wrapped so its session-lock waits land in this middleware's registry."""
        from agentrt.telemetry.metrics import InstrumentedStateStore

        return InstrumentedStateStore(store, self.metrics, label)

    async def on_call(self, run: Run, next: Callable[[], Awaitable[Msg]]) -> Msg:
        m = self.metrics
        agent = run.agent.name
        active = m.active_sessions.labels(agent)
        active.inc()
        started_wall = time.time()
        start = time.perf_counter()
        outcome, error_type = "error", ""
        try:
            msg = await next()
            outcome = msg.generate_reason.value
            return msg
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        except Exception as exc:
            error_type = type(exc).__name__
            raise
        finally:
            active.dec()
            m.runs.labels(agent, outcome, error_type).inc()
            m.run_steps.labels(agent).observe(run.step)
            m.run_duration.labels(agent).observe(time.perf_counter() - start)
            for denied in _new_denials(run, started_wall):
                m.tool_calls.labels(denied.name, "denied").inc()

    async def on_model_call(
        self, run: Run, request: ModelRequest, next: Callable[[ModelRequest], Awaitable[Msg]]
    ) -> Msg:
        m = self.metrics
        provider, name = _model_of(run)
        model = f"{provider}:{name}"
        start = time.perf_counter()
        status = "error"
        with _probe(run) as probe:
            try:
                msg = await next(request)
                status = "ok"
            finally:
                m.model_latency.labels(model, status).observe(time.perf_counter() - start)
                if probe.first_chunk_at is not None:
                    m.time_to_first_token.labels(model).observe(probe.first_chunk_at - start)
        usage = msg.usage
        if usage is not None:
            # Tokens and cost are the serving model's (a FallbackModel's fallback, when the primary failed).
            served, cost = _served_call(run, probe, usage)
            if usage.input_tokens:
                m.tokens.labels(served, "input").inc(usage.input_tokens)
            if usage.output_tokens:
                m.tokens.labels(served, "output").inc(usage.output_tokens)
            if cost is not None:
                m.cost.labels(served).inc(cost)
        return msg

    async def on_acting(
        self, run: Run, call: ToolUseBlock, next: Callable[[ToolUseBlock], Awaitable[ToolResultBlock]]
    ) -> ToolResultBlock:
        m = self.metrics
        start = time.perf_counter()
        status = "error"
        try:
            result = await next(call)
            status = result.state
            return result
        except asyncio.CancelledError:
            status = "interrupted"
            raise
        finally:
            m.tool_calls.labels(call.name, status).inc()
            m.tool_duration.labels(call.name).observe(time.perf_counter() - start)


# --------------------------------------------------------------------------------------------------
# logging
# --------------------------------------------------------------------------------------------------
class LoggingMiddleware(Middleware):
    """One log line per agent call, model call and tool call, for `configure_logging`'s handler.

    Lines carry facts (names, states, durations, token counts) as ``extra`` fields; contents
    (the input text, tool arguments and results) go only in the `CONTENT_FIELDS` extras, which
    the formatter drops unless ``debug_content=True``.

    Args:
        logger: The logger name.
        level: Level of the per-call lines (model and tool lines are logged at DEBUG).
    """

    def __init__(self, logger: str = "agentrt.agent", *, level: int = logging.INFO) -> None:
        self.logger = logging.getLogger(logger)
        self.level = level

    async def on_call(self, run: Run, next: Callable[[], Awaitable[Msg]]) -> Msg:
        log = self.logger
        start = time.perf_counter()
        if log.isEnabledFor(logging.DEBUG):
            log.debug("agent call started", extra={"content": "\n".join(m.text for m in run.input)})
        try:
            msg = await next()
        except Exception as exc:
            log.error(
                "agent call failed: %s",
                type(exc).__name__,
                extra={"error_type": type(exc).__name__, "error": str(exc), "steps": run.step},
            )
            raise
        if log.isEnabledFor(self.level):
            usage = run.usage
            log.log(
                self.level,
                "agent call finished: %s",
                msg.generate_reason.value,
                extra={
                    "generate_reason": msg.generate_reason.value,
                    "steps": run.step,
                    "duration_ms": _ms_since(start),
                    "input_tokens": usage.input_tokens if usage else None,
                    "output_tokens": usage.output_tokens if usage else None,
                    "content": msg.text,
                },
            )
        return msg

    async def on_model_call(
        self, run: Run, request: ModelRequest, next: Callable[[ModelRequest], Awaitable[Msg]]
    ) -> Msg:
        start = time.perf_counter()
        msg = await next(request)
        if self.logger.isEnabledFor(logging.DEBUG):
            provider, name = _model_of(run)
            self.logger.debug(
                "model call finished",
                extra={
                    "model": f"{provider}:{name}",
                    "step": run.step,
                    "duration_ms": _ms_since(start),
                    "tool_calls": [c.name for c in msg.tool_calls],
                    "finish_reason": msg.metadata.get("finish_reason") if msg.metadata else None,
                    "content": msg.text,
                },
            )
        return msg

    async def on_acting(
        self, run: Run, call: ToolUseBlock, next: Callable[[ToolUseBlock], Awaitable[ToolResultBlock]]
    ) -> ToolResultBlock:
        start = time.perf_counter()
        result = await next(call)
        if self.logger.isEnabledFor(logging.DEBUG):
            self.logger.debug(
                "tool call finished: %s",
                call.name,
                extra={
                    "tool": call.name,
                    "tool_call_id": call.id,
                    "state": result.state,
                    "duration_ms": _ms_since(start),
                    "arguments": dict(call.input),
                    "result": result.text[:2000],
                },
            )
        elif result.state == "error" and self.logger.isEnabledFor(logging.WARNING):
            self.logger.warning("tool call failed: %s", call.name, extra={"tool": call.name, "tool_call_id": call.id})
        return result
