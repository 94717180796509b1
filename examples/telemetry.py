"""Traces, metrics and JSON logs of an agent run, offline with a scripted model.

Needs the otel extra: pip install 'agentrt[otel]'.
Run: .venv/bin/python examples/telemetry.py
"""

from __future__ import annotations

import asyncio
import logging
import sys

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from agentrt import ReActAgent, RuntimeContext, Toolkit, ToolUseBlock, tool
from agentrt.message import TokenUsage
from agentrt.middleware.telemetry import LoggingMiddleware, MetricsMiddleware, TracingMiddleware
from agentrt.model import ScriptedModel
from agentrt.state import InMemoryStateStore
from agentrt.telemetry.logging import configure_logging
from agentrt.telemetry.metrics import render_latest
from agentrt.telemetry.tracing import setup_tracing


@tool(read_only=True)
def word_count(text: str) -> int:
    """Count the words in a text."""
    return len(text.split())


async def main() -> None:
    # Spans go to an in-memory exporter here; use an OTLP exporter (or ConsoleSpanExporter) in production.
    spans = InMemorySpanExporter()
    registry = CollectorRegistry()  # or None: prometheus-client's default registry
    metrics = MetricsMiddleware(registry)
    configure_logging(json=True, level=logging.INFO, stream=sys.stdout)

    model = ScriptedModel(
        [ToolUseBlock(name="word_count", input={"text": "to be or not to be"}), "Six words."],
        name="planner",
        usage=TokenUsage(input_tokens=42, output_tokens=7),
    )
    agent = ReActAgent(
        "counter",
        "Count words with the tool.",
        model,
        Toolkit([word_count]),
        middlewares=[TracingMiddleware(setup_tracing(spans, simple=True)), metrics, LoggingMiddleware()],
        state_store=metrics.instrument_store(InMemoryStateStore()),
    )
    ctx = RuntimeContext("alice", "s-1", request_id="r-1")
    reply = await agent.call("How many words in 'to be or not to be'?", ctx)
    print("reply:", reply.text)

    print("\nspans (children end first):")
    for span in spans.get_finished_spans():
        attrs = span.attributes or {}
        keys = ("gen_ai.request.model", "gen_ai.tool.name", "gen_ai.usage.input_tokens", "session.id")
        shown = {k: attrs[k] for k in keys if k in attrs}
        print(f"  {span.name:<24} {shown}")

    print("\nmetrics (a few lines of /metrics):")
    body, _content_type = render_latest(registry)
    for line in body.decode().splitlines():
        if line.startswith(("agentrt_runs_total", "agentrt_tool_calls_total", "agentrt_model_tokens_total")):
            print("  " + line)


if __name__ == "__main__":
    asyncio.run(main())
