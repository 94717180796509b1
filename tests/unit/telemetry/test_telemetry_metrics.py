"""MetricsMiddleware: Prometheus values after real runs, each test on a fresh CollectorRegistry."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from agentrt import ConfirmResult, Msg, ReActAgent, RuntimeContext, Toolkit, ToolUseBlock, tool
from agentrt.errors import ModelAPIError, SessionBusyError
from agentrt.message import TextBlock, TokenUsage
from agentrt.middleware.telemetry import MetricsMiddleware
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.permission import Decision, PermissionContext, PermissionRule
from agentrt.state import InMemoryStateStore
from agentrt.telemetry.metrics import AgentMetrics, instrument_store, render_latest


@tool(read_only=True)
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool(requires_confirmation=True)
def deploy(env: str) -> str:
    """Deploy somewhere."""
    return f"deployed to {env}"


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    found = registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


def make_agent(model: ScriptedModel, metrics: MetricsMiddleware, **kwargs: object) -> ReActAgent:
    return ReActAgent(
        "calc",
        "",
        model,
        Toolkit([add, deploy]),
        middlewares=[metrics],
        state_store=kwargs.pop("state_store", None) or InMemoryStateStore(),  # type: ignore[arg-type]
        **kwargs,  # type: ignore[arg-type]
    )


async def test_runs_steps_tokens_latency_and_tool_calls(registry: CollectorRegistry) -> None:
    usage = TokenUsage(input_tokens=100, output_tokens=20)
    model = ScriptedModel(
        [ToolUseBlock(name="add", input={"a": 1, "b": 2}), "3.", "Hello."], name="m1", usage=usage, chunk_delay=0.01
    )
    agent = make_agent(model, MetricsMiddleware(registry))
    await agent.call("1+2?", RuntimeContext("u", "s1"))
    await agent.call("hi", RuntimeContext("u", "s2"))

    assert value(registry, "agentrt_runs_total", agent="calc", outcome="stop", error_type="") == 2
    assert value(registry, "agentrt_run_steps_count", agent="calc") == 2
    assert value(registry, "agentrt_run_steps_sum", agent="calc") == 3  # 2 steps + 1 step
    assert value(registry, "agentrt_run_steps_bucket", agent="calc", le="1.0") == 1
    assert value(registry, "agentrt_model_call_duration_seconds_count", model="scripted:m1", status="ok") == 3
    assert value(registry, "agentrt_model_call_duration_seconds_sum", model="scripted:m1", status="ok") > 0
    # Time to first token: one observation per model call, at least one chunk delay each.
    assert value(registry, "agentrt_model_time_to_first_token_seconds_count", model="scripted:m1") == 3
    assert value(registry, "agentrt_model_time_to_first_token_seconds_sum", model="scripted:m1") >= 0.03
    assert value(registry, "agentrt_model_tokens_total", model="scripted:m1", type="input") == 300
    assert value(registry, "agentrt_model_tokens_total", model="scripted:m1", type="output") == 60
    assert value(registry, "agentrt_tool_calls_total", tool="add", status="success") == 1
    assert value(registry, "agentrt_tool_call_duration_seconds_count", tool="add") == 1
    assert value(registry, "agentrt_active_sessions", agent="calc") == 0


async def test_time_to_first_token_is_before_the_end_of_the_stream(registry: CollectorRegistry) -> None:
    model = ScriptedModel([[TextBlock(text="one two three four five six seven eight")]], chunk_delay=0.02)
    agent = make_agent(model, MetricsMiddleware(registry))
    events = [e async for e in agent.stream_events("go", RuntimeContext("u", "s"))]  # streaming still works
    assert sum(e.type == "text_delta" for e in events) == 8
    ttft = value(registry, "agentrt_model_time_to_first_token_seconds_sum", model="scripted:scripted")
    total = value(registry, "agentrt_model_call_duration_seconds_sum", model="scripted:scripted", status="ok")
    assert 0.02 <= ttft < total
    assert total >= 0.16


async def test_errors_pauses_denials_and_interrupts_are_outcomes(registry: CollectorRegistry) -> None:
    metrics = MetricsMiddleware(registry)
    failing = make_agent(ScriptedModel([ModelAPIError("down")], name="bad"), metrics)
    with pytest.raises(ModelAPIError):
        await failing.call("hi", RuntimeContext("u", "s"))
    assert value(registry, "agentrt_runs_total", agent="calc", outcome="error", error_type="ModelAPIError") == 1
    assert value(registry, "agentrt_model_call_duration_seconds_count", model="scripted:bad", status="error") == 1

    # A call that needs approval pauses; the user denies it on resume.
    model = ScriptedModel([ToolUseBlock(name="deploy", input={"env": "prod"}), "Not deployed."])
    agent = make_agent(model, metrics)
    ctx = RuntimeContext("u", "s2")
    paused = await agent.call("deploy", ctx)
    assert value(registry, "agentrt_runs_total", agent="calc", outcome="awaiting_confirmation", error_type="") == 1
    [call] = paused.tool_calls
    await agent.call(Msg.confirm([ConfirmResult(confirmed=False, tool_call=call.id)]), ctx)
    assert value(registry, "agentrt_tool_calls_total", tool="deploy", status="denied") == 1
    assert value(registry, "agentrt_tool_calls_total", tool="deploy", status="success") == 0

    # A deny rule: the call never reaches the tool but is counted.
    ruled = make_agent(
        ScriptedModel([ToolUseBlock(name="add", input={"a": 1, "b": 1}), "Refused."]),
        metrics,
        permission=PermissionContext(rules=[PermissionRule(tool="add", decision=Decision.DENY)]),
    )
    await ruled.call("1+1", RuntimeContext("u", "s3"))
    assert value(registry, "agentrt_tool_calls_total", tool="add", status="denied") == 1

    started = asyncio.Event()

    async def late(request: ModelRequest) -> str:
        started.set()
        await asyncio.sleep(30)  # a model call that only ends by the interrupt
        return "late"

    slow = make_agent(ScriptedModel.from_function(late), metrics)
    sctx = RuntimeContext("u", "s4")
    task = asyncio.create_task(slow.call("wait", sctx))
    await started.wait()
    assert slow.interrupt(sctx)
    await task
    assert value(registry, "agentrt_runs_total", agent="calc", outcome="interrupted", error_type="") == 1


async def test_active_sessions_counts_calls_in_flight(registry: CollectorRegistry) -> None:
    inside = asyncio.Barrier(3)  # both calls and this test
    release = asyncio.Event()

    async def reply(request: ModelRequest) -> str:
        await inside.wait()
        await release.wait()
        return "ok"

    agent = make_agent(ScriptedModel.from_function(reply), MetricsMiddleware(registry))
    tasks = [asyncio.create_task(agent.call("x", RuntimeContext("u", f"s{i}"))) for i in range(2)]
    async with asyncio.timeout(5):
        await inside.wait()  # both calls are inside the model
    assert value(registry, "agentrt_active_sessions", agent="calc") == 2
    release.set()
    await asyncio.gather(*tasks)
    assert value(registry, "agentrt_active_sessions", agent="calc") == 0


async def test_lock_waits_are_measured_by_an_instrumented_store(registry: CollectorRegistry) -> None:
    metrics = MetricsMiddleware(registry)
    store = metrics.instrument_store(InMemoryStateStore(), label="memory")
    model = ScriptedModel(["first", "second"], latency=0.1)
    agent = make_agent(model, metrics, state_store=store)
    ctx = RuntimeContext("u", "same")
    await asyncio.gather(agent.call("a", ctx), agent.call("b", ctx))
    assert value(registry, "agentrt_session_lock_wait_seconds_count", store="memory") == 2
    # The second call waited for the first one's model latency.
    assert value(registry, "agentrt_session_lock_wait_seconds_sum", store="memory") >= 0.09
    state = await agent.get_state("u", "same")  # reads go through the wrapper
    assert len(state.messages) == 4

    holding = asyncio.Event()
    release = asyncio.Event()

    async def hold(request: ModelRequest) -> str:
        holding.set()
        await release.wait()
        return "x"

    busy = ReActAgent("calc", "", ScriptedModel.from_function(hold), state_store=store, lock_timeout=0.05)
    first = asyncio.create_task(busy.call("a", ctx))
    await holding.wait()  # the first call holds the session lock
    with pytest.raises(SessionBusyError):
        await busy.call("b", ctx)
    assert value(registry, "agentrt_session_lock_timeouts_total", store="memory") == 1
    release.set()
    assert (await first).text == "x"


def test_metrics_are_registered_once_per_registry(registry: CollectorRegistry) -> None:
    a, b = MetricsMiddleware(registry), MetricsMiddleware(registry)
    assert a.metrics is b.metrics
    assert instrument_store(InMemoryStateStore(), registry).metrics is a.metrics
    assert AgentMetrics.get(registry, "other") is not a.metrics
    assert MetricsMiddleware(CollectorRegistry()).metrics is not a.metrics


async def test_render_latest_is_the_prometheus_text_format(registry: CollectorRegistry) -> None:
    agent = make_agent(ScriptedModel(["hi"]), MetricsMiddleware(registry))
    await agent.call("x", RuntimeContext("u", "s"))
    body, content_type = render_latest(registry)
    assert content_type.startswith("text/plain; version=")
    text = body.decode()
    assert 'agentrt_runs_total{agent="calc",error_type="",outcome="stop"} 1.0' in text
    assert "# TYPE agentrt_model_time_to_first_token_seconds histogram" in text


async def test_cost_is_counted_per_model_when_its_price_is_known(registry: CollectorRegistry) -> None:
    usage = TokenUsage(input_tokens=1000, output_tokens=100)
    priced = ScriptedModel([ToolUseBlock(name="add", input={"a": 1, "b": 2}), "3."], name="openai:gpt-4o", usage=usage)
    await make_agent(priced, MetricsMiddleware(registry)).call("1+2?")
    per_call = (1000 * 2.5 + 100 * 10) / 1_000_000  # gpt-4o in the genai-prices table
    assert value(registry, "agentrt_cost_usd_total", model="scripted:openai:gpt-4o") == pytest.approx(2 * per_call)
    assert value(registry, "agentrt_model_tokens_total", model="scripted:openai:gpt-4o", type="input") == 2000
    unknown = ScriptedModel(["hi"], name="private", usage=usage)
    await make_agent(unknown, MetricsMiddleware(registry)).call("hi")
    assert registry.get_sample_value("agentrt_cost_usd_total", {"model": "scripted:private"}) is None
    assert "agentrt_cost_usd_total" in render_latest(registry)[0].decode()
