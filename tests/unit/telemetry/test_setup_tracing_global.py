"""``setup_tracing(exporter)`` as documented exports agentrt's spans (each case in a fresh process: the global
tracer provider is process-wide and can be set only once)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parents[3]

AGENT = """
from agentrt import ReActAgent, Toolkit, ToolUseBlock, tool
from agentrt.middleware.telemetry import TracingMiddleware
from agentrt.model import ScriptedModel
from agentrt.state import InMemoryStateStore


@tool(read_only=True)
def word_count(text: str) -> int:
    '''Count the words of a text.'''
    return len(text.split())


def run_agent():
    agent = ReActAgent(
        "counter",
        "Count words.",
        ScriptedModel([ToolUseBlock(name="word_count", input={"text": "a b c"}), "Three."], name="planner"),
        Toolkit([word_count]),
        middlewares=[TracingMiddleware()],  # no provider: the global one, as the docs show
        state_store=InMemoryStateStore(),
    )
    return agent.call_sync("How many words?").text
"""


def _run(script: str) -> Any:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    code = AGENT + textwrap.dedent(script)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_the_documented_call_exports_the_agent_spans() -> None:
    result, _ = _run(
        """
        import json
        from opentelemetry import trace
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from agentrt.telemetry.tracing import setup_tracing

        exporter = InMemorySpanExporter()
        provider = setup_tracing(exporter)          # batched, as in docs/telemetry.md
        reply = run_agent()
        provider.force_flush()
        print(json.dumps({
            "reply": reply,
            "global": trace.get_tracer_provider() is provider,
            "spans": sorted(s.name for s in exporter.get_finished_spans()),
        }))
        """
    )
    assert result["reply"] == "Three."
    assert result["global"] is True
    assert result["spans"] == ["chat planner", "chat planner", "execute_tool word_count", "invoke_agent counter"]


def test_an_existing_global_provider_is_kept_and_the_new_one_still_works_when_passed() -> None:
    result, stderr = _run(
        """
        import json
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from agentrt.telemetry.tracing import setup_tracing

        theirs, ours = InMemorySpanExporter(), InMemorySpanExporter()
        app_provider = TracerProvider()
        app_provider.add_span_processor(SimpleSpanProcessor(theirs))
        trace.set_tracer_provider(app_provider)   # the application set up OpenTelemetry itself
        provider = setup_tracing(ours, simple=True)
        run_agent()
        print(json.dumps({
            "global": trace.get_tracer_provider() is app_provider,
            "theirs": len(theirs.get_finished_spans()),
            "ours": len(ours.get_finished_spans()),
            "same": provider is not app_provider,
        }))
        """
    )
    assert result == {"global": True, "theirs": 4, "ours": 0, "same": True}
    assert "a global tracer provider is already set and stays" in stderr


def test_set_global_false_leaves_the_global_provider_alone() -> None:
    result, _ = _run(
        """
        import json
        from opentelemetry import trace
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from agentrt.telemetry.tracing import setup_tracing

        exporter = InMemorySpanExporter()
        setup_tracing(exporter, simple=True, set_global=False)
        run_agent()
        print(json.dumps({
            "proxy": isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider),
            "spans": len(exporter.get_finished_spans()),
        }))
        """
    )
    assert result == {"proxy": True, "spans": 0}
