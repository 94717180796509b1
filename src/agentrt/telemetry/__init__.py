"""Telemetry for agentrt: OpenTelemetry traces, Prometheus metrics and structured logs.

Everything here is opt-in and costs nothing until used: ``import agentrt.telemetry`` loads
neither opentelemetry nor prometheus-client; they are imported when a `TracingMiddleware` or a
`MetricsMiddleware` is built (install them with ``pip install 'agentrt[otel]'``).

- `TracingMiddleware` (`agentrt.middleware.telemetry`): spans following the OpenTelemetry GenAI
  semantic conventions: ``invoke_agent {agent}``, ``chat {model}``, ``execute_tool {tool}``.
- `MetricsMiddleware`: Prometheus metrics (runs by outcome, steps, model latency, time to first
  token, tool calls, tokens, active sessions, session-lock waits); `render_latest` serves them.
- `configure_logging`: JSON (or text) log lines with request, user and session ids, without
  message contents or secrets unless asked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentrt.middleware.telemetry import LoggingMiddleware, MetricsMiddleware, TracingMiddleware
    from agentrt.telemetry.logging import bind_request_id, configure_logging
    from agentrt.telemetry.metrics import instrument_store, render_latest

__all__ = [
    "LoggingMiddleware",
    "MetricsMiddleware",
    "TracingMiddleware",
    "bind_request_id",
    "configure_logging",
    "instrument_store",
    "render_latest",
]

_LAZY = {
    "LoggingMiddleware": "agentrt.middleware.telemetry",
    "MetricsMiddleware": "agentrt.middleware.telemetry",
    "TracingMiddleware": "agentrt.middleware.telemetry",
    "bind_request_id": "agentrt.telemetry.logging",
    "configure_logging": "agentrt.telemetry.logging",
    "instrument_store": "agentrt.telemetry.metrics",
    "render_latest": "agentrt.telemetry.metrics",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agentrt.telemetry' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
