"""TracingMiddleware: GenAI spans from real agent runs, exported in memory."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from agentrt import ReActAgent, RuntimeContext, Toolkit, ToolUseBlock, tool
from agentrt.errors import ModelAPIError
from agentrt.message import ContentBlock, TextBlock, ThinkingBlock, TokenUsage
from agentrt.middleware.telemetry import TracingMiddleware
from agentrt.model import GenerateOptions, ModelRequest, ScriptedModel
from agentrt.state import InMemoryStateStore

USAGE = TokenUsage(input_tokens=120, output_tokens=30)


@tool(read_only=True)
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(reason)


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exp = InMemorySpanExporter()
    yield exp
    exp.clear()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    return tp


def by_name(spans: tuple[ReadableSpan, ...], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def agent_with(model: ScriptedModel, provider: TracerProvider, **kwargs: object) -> ReActAgent:
    return ReActAgent(
        "calc",
        "You add numbers.",
        model,
        Toolkit([add, explode]),
        middlewares=[TracingMiddleware(provider)],
        state_store=InMemoryStateStore(),
        **kwargs,  # type: ignore[arg-type]
    )


async def test_a_run_with_a_tool_makes_agent_chat_and_tool_spans(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    call = ToolUseBlock(name="add", input={"a": 2, "b": 3})
    first_step: list[ContentBlock] = [ThinkingBlock(thinking="add them"), call]
    model = ScriptedModel([first_step, "It is 5."], name="planner-1", usage=USAGE)
    agent = agent_with(model, provider, options=GenerateOptions(temperature=0.2, max_tokens=256))
    reply = await agent.call("2+3?", RuntimeContext("alice", "s-42"))
    assert reply.text == "It is 5."

    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["chat planner-1", "execute_tool add", "chat planner-1", "invoke_agent calc"]
    [root] = by_name(spans, "invoke_agent")
    chats = by_name(spans, "chat ")
    [tool_span] = by_name(spans, "execute_tool")

    # Structure: everything is a child of invoke_agent, in one trace.
    assert root.parent is None
    for child in [*chats, tool_span]:
        assert child.parent is not None
        assert child.parent.span_id == root.context.span_id
        assert child.context.trace_id == root.context.trace_id

    attrs = dict(root.attributes or {})
    assert attrs["gen_ai.operation.name"] == "invoke_agent"
    assert attrs["gen_ai.agent.name"] == "calc"
    assert attrs["gen_ai.conversation.id"] == "s-42"
    assert attrs["session.id"] == "s-42"
    assert attrs["user.id"] == "alice"
    assert attrs["gen_ai.request.model"] == "planner-1"
    assert attrs["gen_ai.provider.name"] == "scripted"
    assert attrs["gen_ai.usage.input_tokens"] == 240
    assert attrs["gen_ai.usage.output_tokens"] == 60
    assert attrs["agentrt.steps"] == 2
    assert attrs["agentrt.generate_reason"] == "stop"
    assert attrs["agentrt.reply_id"] == reply.id
    assert root.kind is SpanKind.INTERNAL
    assert root.status.status_code is StatusCode.UNSET

    first, second = chats
    assert first.kind is SpanKind.CLIENT
    chat_attrs = dict(first.attributes or {})
    assert chat_attrs["gen_ai.operation.name"] == "chat"
    assert chat_attrs["gen_ai.request.model"] == "planner-1"
    assert chat_attrs["gen_ai.response.model"] == "planner-1"
    assert chat_attrs["gen_ai.request.temperature"] == 0.2
    assert chat_attrs["gen_ai.request.max_tokens"] == 256
    assert chat_attrs["gen_ai.usage.input_tokens"] == 120
    assert chat_attrs["gen_ai.usage.output_tokens"] == 30
    assert tuple(chat_attrs["gen_ai.response.finish_reasons"]) == ("tool_calls",)  # type: ignore[arg-type]
    assert isinstance(chat_attrs["gen_ai.response.time_to_first_chunk"], float)
    assert tuple(dict(second.attributes or {})["gen_ai.response.finish_reasons"]) == ("stop",)  # type: ignore[arg-type]

    tool_attrs = dict(tool_span.attributes or {})
    assert tool_attrs["gen_ai.operation.name"] == "execute_tool"
    assert tool_attrs["gen_ai.tool.name"] == "add"
    assert tool_attrs["gen_ai.tool.call.id"] == call.id
    assert tool_attrs["gen_ai.tool.type"] == "function"
    assert tool_attrs["gen_ai.tool.description"] == "Add two numbers."
    assert tool_span.status.status_code is StatusCode.UNSET

    # Contents are not captured by default.
    for span in spans:
        assert not any(
            key.startswith(("gen_ai.input", "gen_ai.output", "gen_ai.tool.call.a")) for key in span.attributes or {}
        )


async def test_a_failing_model_marks_chat_and_agent_spans_as_errors(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    model = ScriptedModel([ModelAPIError("upstream exploded")], name="flaky")
    agent = agent_with(model, provider)
    with pytest.raises(ModelAPIError):
        await agent.call("hi", RuntimeContext("bob", "s1"))
    spans = exporter.get_finished_spans()
    [chat] = by_name(spans, "chat ")
    [root] = by_name(spans, "invoke_agent")
    for span in (chat, root):
        assert span.status.status_code is StatusCode.ERROR
        assert "upstream exploded" in (span.status.description or "")
        assert dict(span.attributes or {})["error.type"] == "ModelAPIError"
        [event] = [e for e in span.events if e.name == "exception"]
        assert dict(event.attributes or {})["exception.type"].endswith("ModelAPIError")  # type: ignore[union-attr]


async def test_a_failing_tool_sets_an_error_type_on_its_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    model = ScriptedModel([ToolUseBlock(name="explode", input={"reason": "boom"}), "It failed."])
    agent = agent_with(model, provider)
    reply = await agent.call("go", RuntimeContext("u", "s"))
    assert reply.text == "It failed."
    [span] = by_name(exporter.get_finished_spans(), "execute_tool")
    assert span.status.status_code is StatusCode.ERROR
    assert dict(span.attributes or {})["error.type"] == "tool_error"
    assert dict(span.attributes or {})["agentrt.tool.state"] == "error"
    # The run itself succeeded: the error went back to the model.
    [root] = by_name(exporter.get_finished_spans(), "invoke_agent")
    assert root.status.status_code is StatusCode.UNSET


async def test_capture_content_attaches_messages_and_tool_io(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    model = ScriptedModel([ToolUseBlock(name="add", input={"a": 1, "b": 1}), "Two."])
    agent = ReActAgent(
        "calc",
        "You add numbers.",
        model,
        Toolkit([add]),
        middlewares=[TracingMiddleware(provider, capture_content=True)],
        state_store=InMemoryStateStore(),
    )
    await agent.call("1+1?", RuntimeContext("u", "s"))
    spans = exporter.get_finished_spans()
    [tool_span] = by_name(spans, "execute_tool")
    assert dict(tool_span.attributes or {})["gen_ai.tool.call.arguments"] == '{"a": 1, "b": 1}'
    assert dict(tool_span.attributes or {})["gen_ai.tool.call.result"] == "2"
    first_chat = by_name(spans, "chat ")[0]
    attrs = dict(first_chat.attributes or {})
    assert attrs["gen_ai.system_instructions"] == "You add numbers."
    assert '"1+1?"' in str(attrs["gen_ai.input.messages"])
    assert '"tool_call"' in str(attrs["gen_ai.output.messages"])


async def test_streamed_runs_are_traced_and_still_stream(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    model = ScriptedModel([[TextBlock(text="hello there")]])
    agent = agent_with(model, provider)
    types = [e.type async for e in agent.stream_events("hi", RuntimeContext("u", "s"))]
    assert types.count("text_delta") >= 2
    assert types[-1] == "run_finished"
    assert [s.name for s in exporter.get_finished_spans()] == ["chat scripted", "invoke_agent calc"]


async def test_an_interrupted_run_ends_its_spans_cleanly(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    started = asyncio.Event()

    async def never(request: ModelRequest) -> str:
        started.set()
        await asyncio.sleep(30)  # a model call that only ends by the interrupt
        return "never seen"

    agent = agent_with(ScriptedModel.from_function(never), provider)
    ctx = RuntimeContext("u", "s")
    task = asyncio.create_task(agent.call("wait", ctx))
    await started.wait()
    assert agent.interrupt(ctx)
    reply = await task
    assert reply.generate_reason.value == "interrupted"
    spans = exporter.get_finished_spans()
    [root] = by_name(spans, "invoke_agent")
    assert dict(root.attributes or {})["agentrt.generate_reason"] == "interrupted"
    [chat] = by_name(spans, "chat ")
    assert dict(chat.attributes or {})["agentrt.cancelled"] is True


async def test_cost_and_counts_are_span_attributes(provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    usage = TokenUsage(input_tokens=1000, output_tokens=100)
    model = ScriptedModel([ToolUseBlock(name="add", input={"a": 1, "b": 2}), "3."], name="openai:gpt-4o", usage=usage)
    await agent_with(model, provider).call("1+2?")
    spans = exporter.get_finished_spans()
    per_call = (1000 * 2.5 + 100 * 10) / 1_000_000
    chats = by_name(spans, "chat")
    assert [s.attributes["agentrt.cost_usd"] for s in chats if s.attributes] == [pytest.approx(per_call)] * 2
    [run] = by_name(spans, "invoke_agent")
    assert run.attributes is not None
    assert run.attributes["agentrt.cost_usd"] == pytest.approx(2 * per_call)
    assert (run.attributes["agentrt.requests"], run.attributes["agentrt.tool_calls"]) == (2, 1)
    exporter.clear()
    await agent_with(ScriptedModel(["hi"], name="private", usage=usage), provider).call("hi")
    spans = exporter.get_finished_spans()
    assert all(s.attributes is None or "agentrt.cost_usd" not in s.attributes for s in spans)
