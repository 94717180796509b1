"""RunRecorder: the timeline of each reply, recorded as it runs and read back from the store."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentrt import Msg, ReActAgent, RuntimeContext, Toolkit, ToolResultBlock, ToolUseBlock, tool
from agentrt.errors import ModelConnectionError
from agentrt.memory import ContextConfig
from agentrt.message import TokenUsage
from agentrt.middleware.telemetry import TracingMiddleware
from agentrt.middleware.timeline import RunRecorder, enable_run_records, recorder_of, timeline_view
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.model.pricing import ModelPrice
from agentrt.model.resilience import FallbackModel, RetryModel
from agentrt.permission import ConfirmResult
from agentrt.state import InMemoryStateStore, SqliteStateStore
from agentrt.state.runs import RUN_SCHEMA, RunRetention, StoredRun, bound_record, find_run
from agentrt.telemetry import ids

CTX = RuntimeContext(user_id="u", session_id="s")
TOOL_SECONDS = 0.05
SECRET = "sk-live-0123456789abcdefghijklmnop"
PRICE = ModelPrice(input=1.0, output=2.0)


@tool(read_only=True)
async def fetch(url: str) -> str:
    """Fetch a page.

    Args:
        url: The page.
    """
    await asyncio.sleep(TOOL_SECONDS)
    return f"page {url}"


@tool(read_only=True)
async def lookup(term: str, api_key: str = "") -> str:
    """Look a term up.

    Args:
        term: The term.
        api_key: A key for the service.
    """
    await asyncio.sleep(TOOL_SECONDS)
    return f"{term}: defined (token {SECRET})"


@tool(destructive=True)
async def wipe(path: str) -> str:
    """Wipe a path (asks first).

    Args:
        path: The path.
    """
    return f"wiped {path}"


def planner(request: ModelRequest) -> Any:
    """Two parallel read-only calls and one that needs approval, then an answer."""
    results = request.messages[-1].blocks(ToolResultBlock)
    if results:
        return "Summary: " + "; ".join(r.text for r in results)
    return [
        ToolUseBlock(name="fetch", input={"url": "https://example.test/"}),
        ToolUseBlock(name="lookup", input={"term": "agent", "api_key": "hunter2-secret-value"}),
        ToolUseBlock(name="wipe", input={"path": "/tmp/x"}),
    ]


def agent_with(model: Any, store: Any, *middlewares: Any, **options: Any) -> ReActAgent:
    recorder = options.pop("recorder", None) or RunRecorder()
    return ReActAgent(
        "bot",
        "You help.",
        model=model,
        toolkit=Toolkit([fetch, lookup, wipe]),
        state_store=store,
        middlewares=[recorder, *middlewares],
        **options,
    )


async def record_of(store: Any, reply_id: str, ctx: RuntimeContext = CTX, agent: str = "bot") -> dict[str, Any]:
    stored = await find_run(store, ctx.user_id or "", ctx.session_id or "", reply_id, agent=agent)
    assert stored is not None, f"no run record for {reply_id}"
    return stored.record()


def spans_of(record: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [s for s in record["spans"] if s["kind"] == kind]


def approve_all(reply: Msg) -> Msg:
    pending = reply.metadata["pending_tool_calls"]
    return Msg.confirm(
        [
            ConfirmResult(confirmed=True, tool_call=ToolUseBlock(id=p["id"], name=p["name"], input=p["input"]))
            for p in pending
        ]
    )


async def run(agent: ReActAgent, input: Any, stream: bool, ctx: RuntimeContext = CTX) -> Msg:
    if not stream:
        return await agent.call(input, ctx)
    events = [e async for e in agent.stream_events(input, ctx)]
    return events[-1].msg  # type: ignore[attr-defined,no-any-return]


# -- the timeline of a paused and resumed run -------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True], ids=["call", "stream"])
async def test_parallel_tools_overlap_and_the_approval_wait_spans_the_two_calls(stream: bool) -> None:
    store = InMemoryStateStore()
    agent = agent_with(
        ScriptedModel.from_function(planner, price=PRICE, usage=TokenUsage(input_tokens=100, output_tokens=20)), store
    )
    paused = await run(agent, "Look things up and wipe /tmp/x", stream)
    assert paused.generate_reason.value == "awaiting_confirmation"
    first = await record_of(store, paused.id)
    assert first["status"] == "awaiting_confirmation" and first["reply_ids"] == [paused.id]
    [open_wait] = spans_of(first, "approval")
    assert open_wait["end_ms"] is None and open_wait["decision"] is None and open_wait["name"] == "wipe"
    listed = await store.list_runs("u", "s", agent="bot")
    assert listed[0].summary["waiting"] == [open_wait["tool_call_id"]]

    await asyncio.sleep(0.1)  # the human thinks
    answered = await run(agent, approve_all(paused), stream)
    assert answered.text.startswith("Summary: wiped /tmp/x")
    record = await record_of(store, answered.id)
    assert record == await record_of(store, paused.id), "both reply ids lead to the one run"
    assert record["schema"] == RUN_SCHEMA and record["reply_id"] == paused.id
    assert record["reply_ids"] == [paused.id, answered.id] and record["status"] == "completed"
    assert len(await store.list_runs("u", "s", agent="bot")) == 1, "a resumed run is one record"

    calls = spans_of(record, "call")
    assert [c["reply_id"] for c in calls] == [paused.id, answered.id]
    fetch_bar, lookup_bar, wipe_bar = (
        next(s for s in spans_of(record, "tool") if s["name"] == n) for n in ("fetch", "lookup", "wipe")
    )
    [wait] = spans_of(record, "approval")
    model1, model2 = spans_of(record, "model")
    # the two read-only tools ran at once: their bars overlap, each lasting about TOOL_SECONDS
    assert fetch_bar["start_ms"] < lookup_bar["end_ms"] and lookup_bar["start_ms"] < fetch_bar["end_ms"]
    for bar in (fetch_bar, lookup_bar):
        assert bar["end_ms"] - bar["start_ms"] >= TOOL_SECONDS * 1000 * 0.9
        assert bar["start_ms"] >= model1["end_ms"] and bar["parent"] == model1["id"] and bar["state"] == "success"
    # the wait: from the pause (the end of the first call) to the call that answered (its start)
    assert wait["start_ms"] == calls[0]["end_ms"] >= max(fetch_bar["end_ms"], lookup_bar["end_ms"])
    assert wait["end_ms"] == calls[1]["start_ms"] and wait["end_ms"] - wait["start_ms"] >= 100 * 0.9
    assert wait["decision"] == "approved" and wait["arguments"] == {"path": "/tmp/x"}
    assert (
        wipe_bar["reply_id"] == answered.id
        and wipe_bar["start_ms"] >= wait["end_ms"]
        and model2["start_ms"] >= wipe_bar["end_ms"]
    )
    # ids: the call's reply id, the ordinal of the model call, the tool call id
    assert model1["id"] == ids.model_span_id(paused.id, 1) and model2["id"] == ids.model_span_id(answered.id, 1)
    assert fetch_bar["id"] == ids.tool_span_id(paused.id, fetch_bar["tool_call_id"])
    assert wait["id"] == ids.wait_span_id(paused.id, wipe_bar["tool_call_id"])
    # tokens, cost and totals
    assert (model1["input_tokens"], model1["output_tokens"]) == (100, 20)
    assert model1["cost_usd"] == pytest.approx((100 * 1.0 + 20 * 2.0) / 1e6)
    totals = record["totals"]
    assert totals["model_calls"] == 2 and totals["tool_calls"] == 3
    assert (totals["input_tokens"], totals["output_tokens"]) == (200, 40)
    assert totals["cost_usd"] == pytest.approx(2 * (100 + 40) / 1e6)
    assert totals["wait_ms"] == pytest.approx(wait["end_ms"] - wait["start_ms"])
    assert record["duration_ms"] == pytest.approx(calls[1]["end_ms"])
    assert record["ended_at"] == pytest.approx(record["started_at"] + record["duration_ms"] / 1000)


async def test_a_denied_call_closes_its_wait_and_never_runs() -> None:
    store = InMemoryStateStore()
    agent = agent_with(ScriptedModel.from_function(planner), store)
    paused = await agent.call("go", CTX)
    pending = paused.metadata["pending_tool_calls"][0]
    denied = Msg.confirm(
        [ConfirmResult(confirmed=False, tool_call=ToolUseBlock(id=pending["id"], name="wipe", input={}))]
    )
    answer = await agent.call(denied, CTX)
    record = await record_of(store, answer.id)
    [wait] = spans_of(record, "approval")
    assert wait["decision"] == "denied" and wait["end_ms"] is not None
    assert [s["name"] for s in spans_of(record, "tool")] == ["fetch", "lookup"], "a denied call has no execution bar"


async def test_a_resume_on_another_instance_continues_the_stored_run(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    async with SqliteStateStore(path) as store:
        paused = await agent_with(ScriptedModel.from_function(planner), store).call("go", CTX)
    async with SqliteStateStore(path) as store:  # a restart: a new process, agent and recorder
        answer = await agent_with(ScriptedModel.from_function(planner), store).call(approve_all(paused), CTX)
        record = await record_of(store, answer.id)
    assert record["reply_ids"] == [paused.id, answer.id] and spans_of(record, "approval")[0]["decision"] == "approved"


# -- retries, fallbacks, compressions ---------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True], ids=["call", "stream"])
async def test_retries_and_fallbacks_are_marked_on_their_model_call(stream: bool) -> None:
    flaky = ScriptedModel([ModelConnectionError("connection reset"), "from the primary"], name="primary")
    store = InMemoryStateStore()
    agent = agent_with(RetryModel(flaky, max_retries=2, backoff=0.0), store)
    reply = await run(agent, "hi", stream)
    record = await record_of(store, reply.id)
    [model] = spans_of(record, "model")
    assert model["retries"] == 1 and "fallback" not in model
    [mark] = [m for m in record["marks"] if m["kind"] == "retry"]
    assert mark["span"] == model["id"] and mark["attempt"] == 1 and "connection reset" in mark["error"]
    assert model["start_ms"] <= mark["at_ms"] <= model["end_ms"]

    broken = ScriptedModel([ModelConnectionError("down")], name="primary")
    backup = ScriptedModel(
        ["from the backup"], name="backup", price=PRICE, usage=TokenUsage(input_tokens=1000, output_tokens=100)
    )
    store = InMemoryStateStore()
    agent = agent_with(FallbackModel(broken, backup), store)
    reply = await run(agent, "hi", stream)
    assert reply.text == "from the backup"
    record = await record_of(store, reply.id)
    [model] = spans_of(record, "model")
    assert (
        model["fallback"] is True and model["model"] == "scripted:primary" and model["served_by"] == "scripted:backup"
    )
    assert model["cost_usd"] == pytest.approx((1000 * 1.0 + 100 * 2.0) / 1e6), "priced as the model that answered"
    [mark] = [m for m in record["marks"] if m["kind"] == "fallback"]
    assert mark["span"] == model["id"] and mark["to"] == "scripted:backup" and "down" in mark["reason"]


def tool_round(i: int, words: int) -> list[Msg]:
    call = ToolUseBlock(id=f"call_{i}", name="fetch", input={"url": f"https://example.test/{i}"})
    return [
        Msg(role="assistant", content=[call], name="bot"),
        Msg(role="user", content=[ToolResultBlock(id=call.id, name="fetch", output=" ".join(["word"] * words))]),
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["call", "stream"])
async def test_compressions_are_marked(stream: bool) -> None:
    store = InMemoryStateStore()
    summary = ScriptedModel.from_function(lambda request: "SUMMARY: pages read.", name="summariser")
    agent = agent_with(
        ScriptedModel(["done"]),
        store,
        context=ContextConfig(max_tokens=2000, keep_recent_rounds=1),
        summary_model=summary,
    )
    history = [Msg.user("Read the pages.")]
    for i, words in enumerate([900, 900, 900, 900, 30]):
        history += tool_round(i, words)
    await agent.observe(history, CTX)
    reply = await run(agent, "continue", stream)
    record = await record_of(store, reply.id)
    marks = [m for m in record["marks"] if m["kind"] == "compression"]
    assert marks, "the compression before the model call is marked"
    [model] = spans_of(record, "model")
    assert all(m["at_ms"] <= model["start_ms"] for m in marks), "compression happens before the call it shrinks"
    if stream:  # the streamed events say how much
        assert all(m["before_tokens"] > m["after_tokens"] for m in marks)
    else:
        assert sum(m["count"] for m in marks) >= 1
    # what the model saw: the summary and the kept rounds, not the whole history
    view = timeline_view(record, (await store.load("u", "s", agent="bot")).messages)  # type: ignore[union-attr]
    texts = [b.get("text", "") for m in view["spans"][1]["request"]["messages"] for b in m["content"]]
    assert any("SUMMARY: pages read." in t for t in texts)


# -- contents: redacted and bounded ------------------------------------------------------------------
async def test_secrets_never_reach_the_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EXAMPLE_SERVICE_API_KEY", "env-secret-abcdef-123456")

    @tool(read_only=True)
    def leaky(note: str, password: str) -> str:
        """Echo.

        Args:
            note: A note.
            password: A password.
        """
        return f"{note} / Authorization: Bearer abcdefghijklmnop / env-secret-abcdef-123456"

    def plan(request: ModelRequest) -> Any:
        if request.messages[-1].blocks(ToolResultBlock):
            return f"Done, the key was {SECRET}."
        return ToolUseBlock(name="leaky", input={"note": f"use {SECRET}", "password": "pa55word-plain"})

    store = SqliteStateStore(tmp_path / "s.db")
    agent = ReActAgent(
        "bot",
        "Never say sk-system-prompt-secret-0000000",
        model=ScriptedModel.from_function(plan),
        toolkit=Toolkit([leaky]),
        state_store=store,
        middlewares=[RunRecorder()],
    )
    reply = await agent.call(f"my token is {SECRET}", CTX)
    raw = (await store.get_run("u", "s", reply.id, agent="bot")).body  # type: ignore[union-attr]
    await store.close()
    for secret in (SECRET, "pa55word-plain", "env-secret-abcdef-123456", "abcdefghijklmnop", "sk-system-prompt-secret"):
        assert secret not in raw, f"{secret!r} reached the stored record"
    assert "[REDACTED]" in raw
    # the same rules when the timeline is read (the history messages are resolved then)
    async with SqliteStateStore(tmp_path / "s.db") as store:
        state = await store.load("u", "s", agent="bot")
        record = (await store.get_run("u", "s", reply.id, agent="bot")).record()  # type: ignore[union-attr]
    assert state is not None and SECRET in state.messages[0].text, "the session itself keeps what the user wrote"
    shown = str(timeline_view(record, state.messages))
    assert SECRET not in shown and "my token is [REDACTED]" in shown


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=60_000), min_size=1, max_size=6),
    max_bytes=st.integers(min_value=4096, max_value=64 * 1024),
    max_field_chars=st.integers(min_value=64, max_value=5000),
)
def test_records_stay_within_their_bounds(sizes: list[int], max_bytes: int, max_field_chars: int) -> None:
    """Whatever the tools take and return, the stored record fits `max_bytes` and says what was cut."""

    @tool(read_only=True)
    def echo(text: str) -> str:
        """Echo.

        Args:
            text: The text.
        """
        return text + "é" * len(text)

    def plan(request: ModelRequest) -> Any:
        if request.messages[-1].blocks(ToolResultBlock):
            return "answer " + "x" * sizes[0]
        return [ToolUseBlock(name="echo", input={"text": "ab" * (n // 2)}) for n in sizes]

    retention = RunRetention(max_bytes=max_bytes, max_field_chars=max_field_chars)

    async def scenario() -> None:
        store = InMemoryStateStore()
        agent = ReActAgent(
            "bot",
            "s",
            model=ScriptedModel.from_function(plan),
            toolkit=Toolkit([echo]),
            state_store=store,
            middlewares=[RunRecorder(retention)],
        )
        reply = await agent.call("go", CTX)
        stored = await store.get_run("u", "s", reply.id, agent="bot")
        assert stored is not None
        assert len(stored.body.encode()) <= max_bytes, f"{len(stored.body.encode())} > {max_bytes}"
        record = stored.record()
        assert record["schema"] == RUN_SCHEMA and record["reply_id"] == reply.id and record["status"] == "completed"
        assert record["totals"]["tool_calls"] == len(sizes), "totals count every call, even when bars are cut"
        for span in record["spans"]:
            for key in ("result", "arguments"):
                value = span.get(key)
                text = value if isinstance(value, str) else str(value or "")
                if len(text) > max_field_chars + 60:
                    raise AssertionError(f"{key} of {span['id']} is longer than the field limit")
        big = max(sizes) * 2 > max_field_chars
        if big:
            assert "[truncated" in stored.body or record.get("truncated"), "a cut is marked"
        summary = (await store.list_runs("u", "s", agent="bot"))[0].summary
        assert summary["totals"] == record["totals"]

    asyncio.run(scenario())


@settings(max_examples=60, deadline=None)
@given(
    spans=st.lists(
        st.fixed_dictionaries(
            {
                "kind": st.sampled_from(["call", "model", "tool", "approval"]),
                "text": st.text(max_size=3000),
                "n": st.integers(min_value=0, max_value=200),
            }
        ),
        max_size=60,
    ),
    max_bytes=st.integers(min_value=4096, max_value=40_000),
)
def test_bound_record_always_fits(spans: list[dict[str, Any]], max_bytes: int) -> None:
    record = {
        "schema": RUN_SCHEMA,
        "reply_id": "r" * 32,
        "reply_ids": ["r" * 32],
        "started_at": 1.0,
        "status": "completed",
        "totals": {"model_calls": 1},
        "spans": [
            {
                "id": f"s{i}",
                "kind": s["kind"],
                "start_ms": float(i),
                "end_ms": float(i + 1),
                "arguments": {"text": s["text"] * 3},
                "result": s["text"] * s["n"],
                "request": {"messages": [{"ref": str(j)} for j in range(s["n"])]},
            }
            for i, s in enumerate(spans)
        ],
        "marks": [{"kind": "retry", "at_ms": 1.0, "error": "e" * 500}] * 10,
    }
    text, cut = bound_record(record, max_bytes)
    assert len(text.encode()) <= max_bytes
    assert StoredRun("r", 1.0, {}, text).record()["reply_id"] == "r" * 32
    if cut:
        assert '"truncated":true' in text


async def test_max_runs_and_max_age_are_kept_per_session() -> None:
    store = InMemoryStateStore()
    agent = ReActAgent(
        "bot",
        "s",
        model=ScriptedModel(["ok"], repeat=True),
        state_store=store,
        middlewares=[RunRecorder(RunRetention(max_runs=3, max_age=3600))],
    )
    replies = [await agent.call(f"q{i}", CTX) for i in range(5)]
    kept = [info.reply_id for info in await store.list_runs("u", "s", agent="bot")]
    assert kept == [r.id for r in reversed(replies[2:])], "the newest max_runs runs are kept"
    other = RuntimeContext(user_id="u", session_id="other")
    await agent.call("elsewhere", other)
    assert len(await store.list_runs("u", "other", agent="bot")) == 1, "limits are per session"


async def test_request_and_response_can_be_left_out() -> None:
    store = InMemoryStateStore()
    agent = agent_with(
        ScriptedModel.from_function(planner), store, recorder=RunRecorder(RunRetention(capture_messages=False))
    )
    reply = await agent.call("go", CTX)
    record = await record_of(store, reply.id)
    assert all("request" not in s and "response" not in s for s in spans_of(record, "model"))
    assert record["messages"] == {}


async def test_the_request_references_the_history_and_resolves_it() -> None:
    store = InMemoryStateStore()
    agent = agent_with(ScriptedModel(["one", "two"]), store)
    await agent.call("first question", CTX)
    reply = await agent.call("second question", CTX)
    record = await record_of(store, reply.id)
    [model] = spans_of(record, "model")
    items = model["request"]["messages"]
    assert items[0] == {"ref": items[0]["ref"], "role": "system"}, "the system prompt is a copy in the record"
    assert items[1]["count"] == 3 and "history" in items[1], "the history it saw is one reference (3 messages)"
    state = await store.load("u", "s", agent="bot")
    assert state is not None
    view = timeline_view(record, state.messages)
    seen = [(m["role"], m["content"][0]["text"]) for m in view["spans"][1]["request"]["messages"]]
    assert seen == [
        ("system", "You help."),
        ("user", "first question"),
        ("assistant", "one"),
        ("user", "second question"),
    ]
    assert view["spans"][1]["response"]["content"][0]["text"] == "two"
    gone = timeline_view(record, state.messages[2:])
    assert gone["spans"][1]["request"]["messages"][1]["missing"] is True, "a message no longer stored is said so"


# -- switching it on and off, failures ---------------------------------------------------------------
async def test_off_unless_enabled_and_idempotent_to_enable() -> None:
    store = InMemoryStateStore()
    agent = ReActAgent("bot", "s", model=ScriptedModel(["ok"], repeat=True), state_store=store)
    await agent.call("hi", CTX)
    assert await store.list_runs("u", "s", agent="bot") == [], "plain library calls record nothing"
    assert enable_run_records(agent) is True and enable_run_records(agent) is True
    assert (
        sum(isinstance(m, RunRecorder) for m in agent.middlewares) == 1 and recorder_of(agent) is agent.middlewares[0]
    )
    await agent.call("hi again", CTX)
    assert len(await store.list_runs("u", "s", agent="bot")) == 1
    assert enable_run_records(object()) is False


class _NoRuns(InMemoryStateStore):
    supports_run_records = False


class _BrokenRuns(InMemoryStateStore):
    async def save_run(self, *args: Any, **kwargs: Any) -> bool:
        raise RuntimeError("disk full")


async def test_a_store_without_records_or_failing_to_save_never_fails_the_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    for store in (_NoRuns(), _BrokenRuns()):
        agent = ReActAgent("bot", "s", model=ScriptedModel(["ok"]), state_store=store, middlewares=[RunRecorder()])
        with caplog.at_level(logging.WARNING, logger="agentrt.timeline"):
            reply = await agent.call("hi", CTX)
        assert reply.text == "ok"
    assert "could not store the timeline" in caplog.text


async def test_a_failed_call_is_recorded_with_its_error() -> None:
    store = InMemoryStateStore()
    agent = agent_with(ScriptedModel([ModelConnectionError("provider down")]), store)
    with pytest.raises(ModelConnectionError):
        await agent.call("hi", CTX)
    [info] = await store.list_runs("u", "s", agent="bot")
    record = (await store.get_run("u", "s", info.reply_id, agent="bot")).record()  # type: ignore[union-attr]
    assert record["status"] == "error" and record["error"]["type"] == "ModelConnectionError"
    [model] = spans_of(record, "model")
    assert model["error"]["message"] == "provider down" and model["end_ms"] is not None


# -- the same ids on the OpenTelemetry spans ----------------------------------------------------------
@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exp = InMemorySpanExporter()
    yield exp
    exp.clear()


async def test_otel_spans_carry_the_ids_of_the_timeline_bars(exporter: InMemorySpanExporter) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    store = InMemoryStateStore()
    agent = agent_with(ScriptedModel.from_function(planner), store, TracingMiddleware(provider))
    paused = await agent.call("go", CTX)
    answer = await agent.call(approve_all(paused), CTX)
    record = await record_of(store, answer.id)
    traced = {
        span.attributes[ids.SPAN_ID]: span
        for span in exporter.get_finished_spans()
        if span.attributes is not None and ids.SPAN_ID in span.attributes
    }
    for bar in record["spans"]:
        if bar["kind"] in ("approval", "external"):
            continue  # a wait is no span: it spans two requests
        span = traced.get(bar["id"])
        assert span is not None, f"no OpenTelemetry span for the bar {bar['id']}"
        assert span.attributes is not None and span.attributes[ids.REPLY_ID] == bar["reply_id"]
        expected = {"call": "invoke_agent", "model": "chat", "tool": "execute_tool"}[bar["kind"]]
        assert span.name.startswith(expected), (bar["id"], span.name)
    assert len(traced) == len([b for b in record["spans"] if b["kind"] not in ("approval", "external")])
