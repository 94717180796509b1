"""Telemetry prices and labels a model call by the model that served it (a FallbackModel's fallback).

Side effects only: the ``agentrt.cost_usd`` / ``gen_ai.response.model`` attributes of the spans an
in-memory exporter received, and the values and labels of the Prometheus counters.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from agentrt import ReActAgent
from agentrt.errors import ModelAPIError
from agentrt.message import TokenUsage
from agentrt.middleware.telemetry import MetricsMiddleware, TracingMiddleware
from agentrt.model import FallbackModel, RetryModel, ScriptedModel
from agentrt.model.base import ChatModel
from agentrt.model.pricing import ModelPrice
from agentrt.state import InMemoryStateStore
from agentrt.telemetry.metrics import render_latest

USAGE = TokenUsage(input_tokens=1_000_000, output_tokens=100_000)
PRIMARY_PRICE = ModelPrice(input=10.0, output=40.0)  # $10 + $4 = $14 for USAGE
BACKUP_PRICE = ModelPrice(input=1.0, output=2.0)  # $1 + $0.2 = $1.2 for USAGE


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exp = InMemorySpanExporter()
    yield exp
    exp.clear()


@pytest.fixture
def tracer_provider(exporter: InMemorySpanExporter) -> TracerProvider:
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    return tp


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def agent_on(model: ChatModel, tracer_provider: TracerProvider, registry: CollectorRegistry) -> ReActAgent:
    return ReActAgent(
        "a",
        "",
        model,
        middlewares=[TracingMiddleware(tracer_provider), MetricsMiddleware(registry)],
        state_store=InMemoryStateStore(),
    )


def chat_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]


def failing_primary() -> ScriptedModel:
    return ScriptedModel([ModelAPIError("primary down", status=503)], name="big", usage=USAGE, price=PRIMARY_PRICE)


def _exposition(registry: CollectorRegistry) -> str:
    return render_latest(registry)[0].decode()


async def test_a_fallback_reply_is_priced_and_labelled_as_the_fallback(
    tracer_provider: TracerProvider, exporter: InMemorySpanExporter, registry: CollectorRegistry
) -> None:
    backup = ScriptedModel(["from the backup"], name="small", usage=USAGE, price=BACKUP_PRICE)
    agent = agent_on(FallbackModel(failing_primary(), backup), tracer_provider, registry)

    reply = await agent.call("hi")

    assert reply.text == "from the backup"
    [chat] = chat_spans(exporter)
    assert chat.attributes is not None
    assert chat.attributes["agentrt.cost_usd"] == pytest.approx(1.2)
    assert chat.attributes["gen_ai.response.model"] == "small"
    assert chat.attributes["gen_ai.request.model"] == "big"  # what was asked for stays the primary
    [run] = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert run.attributes is not None
    assert run.attributes["agentrt.cost_usd"] == pytest.approx(1.2)

    assert registry.get_sample_value("agentrt_cost_usd_total", {"model": "scripted:small"}) == pytest.approx(1.2)
    assert registry.get_sample_value("agentrt_cost_usd_total", {"model": "scripted:big"}) is None
    tokens = {"model": "scripted:small", "type": "input"}
    assert registry.get_sample_value("agentrt_model_tokens_total", tokens) == 1_000_000
    assert registry.get_sample_value("agentrt_model_tokens_total", {"model": "scripted:big", "type": "input"}) is None
    # The agent's own report agrees with the telemetry.
    assert reply.metadata["usage"]["cost_usd"] == pytest.approx(1.2)


async def test_a_reply_of_the_primary_is_still_priced_as_the_primary(
    tracer_provider: TracerProvider, exporter: InMemorySpanExporter, registry: CollectorRegistry
) -> None:
    primary = ScriptedModel(["from the primary"], name="big", usage=USAGE, price=PRIMARY_PRICE)
    backup = ScriptedModel(["never"], name="small", usage=USAGE, price=BACKUP_PRICE)
    await agent_on(FallbackModel(primary, backup), tracer_provider, registry).call("hi")

    [chat] = chat_spans(exporter)
    assert chat.attributes is not None
    assert chat.attributes["agentrt.cost_usd"] == pytest.approx(14.0)
    assert registry.get_sample_value("agentrt_cost_usd_total", {"model": "scripted:big"}) == pytest.approx(14.0)
    assert registry.get_sample_value("agentrt_cost_usd_total", {"model": "scripted:small"}) is None


async def test_an_unpriced_fallback_has_no_cost_never_the_primarys(
    tracer_provider: TracerProvider, exporter: InMemorySpanExporter, registry: CollectorRegistry
) -> None:
    backup = ScriptedModel(["from a private model"], name="private", usage=USAGE)  # no price anywhere
    reply = await agent_on(FallbackModel(failing_primary(), backup), tracer_provider, registry).call("hi")

    [chat] = chat_spans(exporter)
    assert chat.attributes is not None
    assert "agentrt.cost_usd" not in chat.attributes
    [run] = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert run.attributes is not None and "agentrt.cost_usd" not in run.attributes
    assert registry.get_sample_value("agentrt_cost_usd_total", {"model": "scripted:private"}) is None
    assert registry.get_sample_value("agentrt_cost_usd_total", {"model": "scripted:big"}) is None
    assert "agentrt_cost_usd_total{" not in _exposition(registry)
    tokens = {"model": "scripted:private", "type": "output"}
    assert registry.get_sample_value("agentrt_model_tokens_total", tokens) == 100_000
    assert reply.metadata["usage"]["cost_usd"] is None


async def test_the_serving_model_is_found_inside_wrappers(
    tracer_provider: TracerProvider, exporter: InMemorySpanExporter, registry: CollectorRegistry
) -> None:
    backup = ScriptedModel(["wrapped backup"], name="small", usage=USAGE, price=BACKUP_PRICE)
    model = FallbackModel(RetryModel(failing_primary(), max_retries=0), RetryModel(backup, max_retries=0))
    await agent_on(model, tracer_provider, registry).call("hi")

    [chat] = chat_spans(exporter)
    assert chat.attributes is not None
    assert chat.attributes["agentrt.cost_usd"] == pytest.approx(1.2)
    assert registry.get_sample_value("agentrt_cost_usd_total", {"model": "scripted:small"}) == pytest.approx(1.2)


async def test_the_serving_model_is_found_under_the_text_tool_protocol(
    tracer_provider: TracerProvider, exporter: InMemorySpanExporter, registry: CollectorRegistry
) -> None:
    backup = ScriptedModel(["wrapped backup"], name="small", usage=USAGE, price=BACKUP_PRICE)
    agent = ReActAgent(
        "a",
        "",
        FallbackModel(failing_primary(), backup),
        middlewares=[TracingMiddleware(tracer_provider), MetricsMiddleware(registry)],
        state_store=InMemoryStateStore(),
        tool_calling="text",  # the agent's model is a TextProtocolModel around the FallbackModel
    )
    await agent.call("hi")

    [chat] = chat_spans(exporter)
    assert chat.attributes is not None
    assert chat.attributes["agentrt.cost_usd"] == pytest.approx(1.2)
    assert registry.get_sample_value("agentrt_cost_usd_total", {"model": "scripted:small"}) == pytest.approx(1.2)
