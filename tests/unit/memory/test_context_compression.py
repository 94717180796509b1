"""Context compression in a real ReActAgent driven by scripted models: each tier, the loop, overflow, the API."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from memtest_helpers import check_prompt, results_in, tool_round, words

from agentrt import Middleware, Msg, ReActAgent, RuntimeContext, Toolkit, ToolResultBlock, ToolUseBlock, tool
from agentrt import events as ev
from agentrt.errors import ContextWindowExceededError, UserError
from agentrt.memory import ContextConfig
from agentrt.memory.compression import META_KEY, SUMMARY_PROMPT, ContextCompressor
from agentrt.message import TokenUsage
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.model.tokens import count_tokens
from agentrt.state import InMemoryStateStore

SRC = str(Path(__file__).parents[3] / "src")
CTX = RuntimeContext(user_id="u", session_id="s")
TASK = "Read the quarterly report pages and tell me the revenue of ACME-42 in 2023."
#: The `make_agent` fixture (tests/unit/conftest.py): ``make_agent(model, *tools, **options)``.
MakeAgent = Callable[..., ReActAgent]


def summariser(text: str = "SUMMARY: pages 0-3 read; ACME-42 revenue 2023 = 12.5 MEUR.") -> ScriptedModel:
    return ScriptedModel.from_function(lambda request: text, name="summariser")


async def seed(agent: ReActAgent, rounds: list[int], *, ctx: RuntimeContext = CTX) -> list[Msg]:
    """A session holding the task and one tool round per entry (the entry: result size in words)."""
    history = [Msg.user(TASK)]
    for i, size in enumerate(rounds):
        history.extend(tool_round(i, size))
    await agent.observe(history, ctx)
    return history


async def events_of(agent: ReActAgent, text: str, ctx: RuntimeContext = CTX) -> list[ev.AgentEvent]:
    return [e async for e in agent.stream_events(text, ctx)]


def compressed(events: list[ev.AgentEvent]) -> list[ev.ContextCompressed]:
    return [e for e in events if isinstance(e, ev.ContextCompressed)]


def view_of(request: ModelRequest) -> list[Msg]:
    return request.messages


# -- tier 1 -----------------------------------------------------------------------------------------
async def test_tier1_cuts_old_tool_results_in_the_view_and_keeps_the_transcript(make_agent: MakeAgent) -> None:
    model = ScriptedModel(["done"])
    summary = summariser()
    agent = make_agent(model, context=ContextConfig(max_tokens=14_000, keep_recent_rounds=2), summary_model=summary)
    history = await seed(agent, [1500] * 6)

    events = await events_of(agent, "continue")

    [step] = compressed(events)
    assert step.tier == 1 and step.after_tokens < step.before_tokens
    assert summary.requests == [], "tier 1 alone was enough: no summary call"
    prompt = view_of(model.requests[0])
    check_prompt(prompt)
    results = results_in(prompt)
    assert [r.id for r in results] == [f"call_{i}" for i in range(6)], "every call keeps its result"
    for result in results[:4]:
        text = result.text
        assert len(text) < 2300
        assert text.startswith(f"PAGE-{result.id[5:]}-HEAD") and text.endswith(f"PAGE-{result.id[5:]}-END")
        assert "characters" in text and "cut from the middle of this fetch result" in text
    for i in (4, 5):
        assert results[i].text == history[2 + 2 * i].content[0].output, "the recent rounds stay whole"  # type: ignore[union-attr]
    state = await agent.get_state("u", "s")
    assert state.messages[: len(history)] == history, "the stored transcript is untouched"
    assert state.summary_index == 0 and state.summary is None
    assert state.metadata[META_KEY]["truncate_before"] > 0
    counted = count_tokens(prompt, model, tools=model.requests[0].tools)
    assert counted == step.after_tokens, "after_tokens is the count of the whole prompt that was sent"


async def test_tier1_also_cuts_long_tool_call_arguments(make_agent: MakeAgent) -> None:
    model = ScriptedModel(["done"])
    agent = make_agent(model, context=ContextConfig(max_tokens=6000, keep_recent_rounds=1), summary_model=summariser())
    body = words(3000, "code")
    call = ToolUseBlock(id="w1", name="write_file", input={"path": "/tmp/a.py", "content": body})
    await agent.observe(
        [
            Msg.user(TASK),
            Msg(role="assistant", content=[call]),
            Msg(role="user", content=[ToolResultBlock(id="w1", name="write_file", output="ok")]),
            Msg.assistant("written"),
        ],
        CTX,
    )
    await agent.call("next", CTX)
    [sent] = [b for m in model.requests[0].messages for b in m.blocks(ToolUseBlock)]
    assert sent.input["path"] == "/tmp/a.py"
    assert len(sent.input["content"]) < 2300 and "cut from the middle of this argument" in sent.input["content"]
    state = await agent.get_state("u", "s")
    assert state.messages[1].tool_calls[0].input["content"] == body


# -- tier 2 -----------------------------------------------------------------------------------------
async def test_tier2_summarises_the_oldest_rounds_with_a_model_call(make_agent: MakeAgent) -> None:
    model = ScriptedModel(["done"])
    summary = summariser()
    config = ContextConfig(max_tokens=2000, keep_recent_rounds=2, tool_result_max_chars=1000)
    agent = make_agent(model, context=config, summary_model=summary)
    history = await seed(agent, [900, 900, 900, 900, 30, 30])

    events = await events_of(agent, "continue")

    tiers = [e.tier for e in compressed(events)]
    assert tiers[:2] == [1, 2], tiers
    assert len(summary.requests) >= 1
    prompt = view_of(model.requests[0])
    check_prompt(prompt)
    assert prompt[0].role == "system"
    head = prompt[1].text
    assert head.startswith("<summary>") and "ACME-42 revenue 2023 = 12.5 MEUR" in head
    assert f"(verbatim):\n{TASK}" in head, "the first request is kept verbatim in the summary"
    sent_ids = {r.id for r in results_in(prompt)}
    assert "call_0" not in sent_ids and {"call_4", "call_5"} <= sent_ids
    assert prompt[-1].text == "continue"
    state = await agent.get_state("u", "s")
    assert state.messages[: len(history)] == history, "nothing is lost from the stored transcript"
    assert state.summary is not None and state.summary_index > 1
    assert history[state.summary_index].role == "assistant", "the view starts at a round, never at a result"
    last = compressed(events)[-1]
    assert last.after_tokens <= ContextCompressor(config).limits(model).trigger


async def test_summary_prompt_keeps_numbers_names_identifiers_and_conclusions(make_agent: MakeAgent) -> None:
    for phrase in ("number", "name", "identifier", "conclusion", "file paths", "URLs", "error"):
        assert phrase in SUMMARY_PROMPT
    model = ScriptedModel(["done"])
    summary = summariser()
    agent = make_agent(
        model, context=ContextConfig(max_tokens=3000, keep_recent_rounds=1, max_summary_calls=1), summary_model=summary
    )
    call = ToolUseBlock(id="q1", name="sql_query", input={"query": "SELECT revenue FROM acme WHERE year=2023"})
    result = ToolResultBlock(
        id="q1", name="sql_query", output="revenue=12500000 EUR; invoice INV-2023-0042 " + words(900)
    )
    await agent.observe(
        [Msg.user(TASK), Msg(role="assistant", content=[call]), Msg(role="user", content=[result])], CTX
    )
    await agent.observe(tool_round(7, 900), CTX)
    await agent.call("and 2024?", CTX)

    request = summary.requests[0]
    assert request.tools == []
    system, user = request.messages
    assert system.role == "system" and system.text == SUMMARY_PROMPT
    text = user.text
    assert "Previous summary:\n(none yet)" in text
    assert "[assistant bot called tool sql_query (call q1)]" in text or "called tool sql_query (call q1)" in text
    assert "SELECT revenue FROM acme WHERE year=2023" in text
    assert "revenue=12500000 EUR; invoice INV-2023-0042" in text
    assert "[result of sql_query (call q1, success)]" in text
    assert TASK in text
    # summary_max_tokens (2048) at most, and never more than the window leaves after the request
    assert request.options.max_tokens is not None and request.options.max_tokens <= 2048
    assert count_tokens(request.messages, summary) + request.options.max_tokens <= 3000


async def test_summary_model_defaults_to_the_agents_model_and_its_usage_is_counted(make_agent: MakeAgent) -> None:
    usage = TokenUsage(input_tokens=100, output_tokens=10)

    def reply(request: ModelRequest) -> str:
        if request.messages[0].text == SUMMARY_PROMPT:
            return "SUMMARY of pages"
        return "done"

    model = ScriptedModel.from_function(reply, usage=usage)
    agent = make_agent(model, context=ContextConfig(max_tokens=2000, keep_recent_rounds=1, max_summary_calls=1))
    await seed(agent, [700, 700, 700, 700, 20])
    answer = await agent.call("continue", CTX)
    kinds = ["summary" if r.messages[0].text == SUMMARY_PROMPT else "main" for r in model.requests]
    assert kinds[-1] == "main" and "summary" in kinds
    assert answer.usage is not None and answer.usage.input_tokens == 100 * len(model.requests)


# -- tier 3 -----------------------------------------------------------------------------------------
async def test_tier3_keeps_summary_and_last_rounds_when_no_summary_can_be_made(
    caplog: pytest.LogCaptureFixture,
    make_agent: MakeAgent,
) -> None:
    model = ScriptedModel(["done"])
    broken = ScriptedModel([RuntimeError("summary service down")], name="summariser")
    agent = make_agent(model, context=ContextConfig(max_tokens=3000, keep_recent_rounds=2), summary_model=broken)
    history = await seed(agent, [600, 600, 600, 600, 20, 20])

    with caplog.at_level(logging.WARNING, logger="agentrt.memory"):
        events = await events_of(agent, "continue")

    tiers = [e.tier for e in compressed(events)]
    assert 3 in tiers and 2 not in tiers, tiers
    assert "summary model call failed" in caplog.text
    prompt = view_of(model.requests[0])
    check_prompt(prompt)
    summary = prompt[1].text
    assert summary.startswith("<summary>") and f"(verbatim):\n{TASK}" in summary
    assert "Dropped from view without a summary" in summary and "fetch x" in summary
    assert [r.id for r in results_in(prompt)] == ["call_4", "call_5"], "only the last two rounds stay"
    state = await agent.get_state("u", "s")
    assert state.messages[: len(history)] == history


async def test_tier3_with_summaries_disabled(make_agent: MakeAgent) -> None:
    model = ScriptedModel(["done"])
    summary = summariser()
    agent = make_agent(
        model, context=ContextConfig(max_tokens=3000, keep_recent_rounds=1, max_summary_calls=0), summary_model=summary
    )
    await seed(agent, [600, 600, 600, 20])
    events = await events_of(agent, "go on")
    assert summary.requests == []
    assert compressed(events)[-1].tier == 3
    assert [r.id for r in results_in(model.requests[0].messages)] == ["call_3"], "the last round and the new input"
    check_prompt(model.requests[0].messages)


# -- the iterative loop -----------------------------------------------------------------------------
async def test_compression_grows_with_the_run_and_stays_under_the_trigger(make_agent: MakeAgent) -> None:
    @tool(read_only=True)
    def fetch(page: int) -> str:
        """Fetch one page."""
        return f"PAGE-{page}-HEAD {words(700)} PAGE-{page}-END"

    steps: list[Any] = [ToolUseBlock(id=f"c{i}", name="fetch", input={"page": i}) for i in range(14)]
    model = ScriptedModel([*steps, "all read"])
    summary = summariser()
    config = ContextConfig(max_tokens=5000, keep_recent_rounds=2)
    agent = make_agent(model, context=config, toolkit=Toolkit([fetch]), summary_model=summary, max_iters=20)

    events = await events_of(agent, TASK)

    assert events[-1].type == "run_finished"
    tiers = [e.tier for e in compressed(events)]
    assert 1 in tiers and 2 in tiers
    trigger = ContextCompressor(config).limits(model).trigger
    for request in model.requests:
        check_prompt(request.messages)
        assert count_tokens(request.messages, model, tools=request.tools) <= trigger
        assert TASK in request.messages[1].text, "the task survives, verbatim or in the summary"
    for step in compressed(events):
        assert step.after_tokens < step.before_tokens
    state = await agent.get_state("u", "s")
    assert len(state.messages) == 2 + 2 * 14, "every message is kept in the store"
    assert sum(1 for m in state.messages if m.role == "assistant") == 15


async def test_under_the_trigger_nothing_happens(make_agent: MakeAgent) -> None:
    model = ScriptedModel(["done"])
    agent = make_agent(model, context=ContextConfig(max_tokens=100_000), summary_model=summariser())
    await seed(agent, [200] * 3)
    events = await events_of(agent, "continue")
    assert compressed(events) == []
    state = await agent.get_state("u", "s")
    assert state.summary is None and META_KEY not in state.metadata


# -- overflow ---------------------------------------------------------------------------------------
async def test_context_window_error_forces_compression_and_one_retry(make_agent: MakeAgent) -> None:
    model = ScriptedModel([ContextWindowExceededError("prompt is too long", status=400), "done"])
    summary = summariser()
    agent = make_agent(model, context=ContextConfig(max_tokens=100_000, keep_recent_rounds=1), summary_model=summary)
    await seed(agent, [600] * 4)

    events = await events_of(agent, "continue")

    assert events[-1].type == "run_finished" and events[-1].msg.text == "done"  # type: ignore[attr-defined]
    first, second = model.requests
    assert compressed(events), "a forced compression ran although the count was under the trigger"
    assert [e.type for e in events].count("model_restarted") == 1
    before = count_tokens(first.messages, model, tools=first.tools)
    after = count_tokens(second.messages, model, tools=second.tools)
    assert after <= before * 0.6
    check_prompt(second.messages)
    model.assert_complete()


async def test_a_second_overflow_propagates(make_agent: MakeAgent) -> None:
    model = ScriptedModel([ContextWindowExceededError("too long"), ContextWindowExceededError("still too long")])
    agent = make_agent(model, context=ContextConfig(max_tokens=100_000), summary_model=summariser())
    await seed(agent, [600] * 4)
    with pytest.raises(ContextWindowExceededError, match="still too long"):
        await agent.call("continue", CTX)
    assert len(model.requests) == 2, "exactly one retry"


async def test_overflow_with_nothing_to_compress_propagates_without_retry(make_agent: MakeAgent) -> None:
    model = ScriptedModel([ContextWindowExceededError("too long")])
    agent = make_agent(model, context=ContextConfig(max_tokens=100_000), summary_model=summariser())
    with pytest.raises(ContextWindowExceededError):
        await agent.call("hello", CTX)
    assert len(model.requests) == 1


async def test_overflow_without_context_config_propagates(make_agent: MakeAgent) -> None:
    model = ScriptedModel([ContextWindowExceededError("too long")])
    agent = make_agent(model, context=None)
    with pytest.raises(ContextWindowExceededError):
        await agent.call("hello", CTX)


# -- the API: compress(ctx) and the compress_context tool ---------------------------------------------
async def test_agent_compress_compresses_now_and_persists(make_agent: MakeAgent) -> None:
    model = ScriptedModel(["done"])
    summary = summariser()
    agent = make_agent(model, context=ContextConfig(keep_recent_rounds=1), summary_model=summary)
    history = await seed(agent, [400] * 4)

    events = await agent.compress(CTX)

    assert [e.tier for e in events] == [1, 2]
    assert all(e.type == "context_compressed" and e.session_id == "s" and e.source == "bot" for e in events)
    assert events[-1].after_tokens < events[0].before_tokens
    state = await agent.get_state("u", "s")
    assert state.messages == history
    assert state.summary is not None and "12.5 MEUR" in state.summary
    await agent.call("continue", CTX)
    prompt = model.requests[0].messages
    assert prompt[1].text.startswith("<summary>")
    assert [r.id for r in results_in(prompt)] == ["call_3"]
    assert await agent.compress(RuntimeContext(user_id="u", session_id="empty")) == []


class LockWatchingStore(InMemoryStateStore):
    """Reports each request for a session lock, so a test can wait until a caller queues for it."""

    def __init__(self) -> None:
        super().__init__()
        self.lock_requested = asyncio.Event()

    def session_lock(self, *args: Any, **kwargs: Any) -> Any:
        self.lock_requested.set()
        return super().session_lock(*args, **kwargs)


async def test_compress_works_without_a_context_config_and_waits_for_the_session(make_agent: MakeAgent) -> None:
    gate = asyncio.Event()
    started = asyncio.Event()
    store = LockWatchingStore()

    async def slow(request: ModelRequest) -> str:
        started.set()
        await gate.wait()
        return "done"

    model = ScriptedModel.from_function(slow)
    agent = make_agent(model, context=None, summary_model=summariser(), state_store=store)
    await seed(agent, [400] * 4)
    call = asyncio.create_task(agent.call("continue", CTX))
    await started.wait()  # the call holds the session lock
    store.lock_requested.clear()
    compress = asyncio.create_task(agent.compress(CTX))
    await store.lock_requested.wait()
    for _ in range(20):
        await asyncio.sleep(0)  # loop turns only: compress would run through them were it not queued
    assert not compress.done(), "compress waits for the call holding the session"
    gate.set()
    await call
    events = await compress
    assert events and events[-1].tier == 2
    assert agent._context is None, "an explicit compress does not turn on automatic compression"


async def test_compress_context_tool(make_agent: MakeAgent) -> None:
    model = ScriptedModel([ToolUseBlock(id="cc", name="compress_context", input={}), "done"])
    agent = make_agent(
        model,
        context=ContextConfig(max_tokens=100_000, keep_recent_rounds=1, expose_tool=True),
        summary_model=summariser(),
    )
    await seed(agent, [400] * 4)
    await agent.call("continue", CTX)
    assert "compress_context" in [t.name for t in model.requests[0].tools]
    second = model.requests[1].messages
    check_prompt(second)
    assert second[1].text.startswith("<summary>")
    [result] = [r for r in results_in(second) if r.id == "cc"]
    assert result.state == "success" and "Context compressed from" in result.text
    state = await agent.get_state("u", "s")
    assert any(b.id == "cc" for m in state.messages for b in m.blocks(ToolResultBlock))


# -- integration details ----------------------------------------------------------------------------
async def test_model_call_middleware_sees_the_compressed_prompt(make_agent: MakeAgent) -> None:
    seen: list[int] = []

    class Spy(Middleware):
        async def on_model_call(self, run: Any, request: ModelRequest, nxt: Any) -> Msg:
            seen.append(len(request.messages))
            return await nxt(request)  # type: ignore[no-any-return]

    model = ScriptedModel(["done"])
    agent = make_agent(
        model,
        context=ContextConfig(max_tokens=3000, keep_recent_rounds=1),
        summary_model=summariser(),
        middlewares=[Spy()],
    )
    await seed(agent, [600] * 4)
    await agent.call("continue", CTX)
    assert seen == [len(model.requests[0].messages)] and seen[0] < 10


async def test_provider_usage_calibrates_the_count(make_agent: MakeAgent) -> None:
    model = ScriptedModel(["one", "two"], usage=TokenUsage(input_tokens=1000, output_tokens=1))
    agent = make_agent(model, context=ContextConfig(max_tokens=100_000))
    await agent.call("hello", CTX)
    compressor = agent._context
    assert compressor is not None
    assert compressor.counter.samples(model) == 1
    assert compressor.counter.ratio(model) > 1.5, "the provider counted more than our estimate"


async def test_a_compressed_session_reads_back_the_same_view_after_reload(make_agent: MakeAgent) -> None:
    store = InMemoryStateStore()
    model = ScriptedModel(["done", "again"])
    config = ContextConfig(max_tokens=2000, keep_recent_rounds=2, tool_result_max_chars=1000)
    agent = make_agent(model, context=config, summary_model=summariser(), state_store=store)
    await seed(agent, [900, 900, 900, 900, 30, 30])
    await agent.call("continue", CTX)
    other = make_agent(model, context=config, summary_model=summariser(), state_store=store)
    state = await other.get_state("u", "s")
    view = ContextCompressor(config).view(state)
    assert view[0].text.startswith("<summary>") and view[0].text == f"<summary>\n{state.summary}\n</summary>"
    await other.call("more", CTX)
    assert model.requests[1].messages[1].text == view[0].text


def test_config_validation() -> None:
    for bad in (
        {"trigger_ratio": 0},
        {"trigger_ratio": 1.5},
        {"target_ratio": 0.9, "trigger_ratio": 0.7},
        {"keep_recent_rounds": 0},
        {"max_tokens": 10},
        {"tool_result_max_chars": 5},
        {"reserve_output_tokens": -1},
    ):
        with pytest.raises(UserError):
            ContextConfig(**bad)
    with pytest.raises(UserError, match="ContextConfig"):
        ReActAgent("bot", model=ScriptedModel([]), context={"max_tokens": 1000})  # type: ignore[arg-type]


def test_limits_default_to_the_models_window() -> None:
    from agentrt.model.base import GenerateOptions

    c = ContextCompressor()
    gpt = c.limits("openai:gpt-4o-mini")
    assert gpt.max_tokens == 128_000 and gpt.usable == 128_000 - 4096
    assert gpt.trigger == int(gpt.usable * 0.7) and gpt.target == int(gpt.usable * 0.525)
    assert c.limits("scripted").max_tokens == 32_768, "unknown model: the safe default"
    assert c.limits("x", GenerateOptions(max_tokens=1000)).usable == 32_768 - 1000
    own = ContextCompressor(ContextConfig(max_tokens=8000, reserve_output_tokens=0, trigger_ratio=0.5))
    assert own.limits("openai:gpt-4o").trigger == 4000


def test_no_context_means_no_token_counting_and_no_memory_import() -> None:
    code = (
        "import sys\n"
        "import agentrt.model.tokens as t\n"
        "def boom(*a, **k):\n    raise AssertionError('counted tokens')\n"
        "t._raw_count = boom\n"
        "from agentrt import ReActAgent, ToolUseBlock, Toolkit, tool\n"
        "from agentrt.model import ScriptedModel\n"
        "from agentrt.state import InMemoryStateStore\n"
        "@tool\ndef f(x: int) -> int:\n    '''f.'''\n    return x\n"
        "m = ScriptedModel([ToolUseBlock(name='f', input={'x': 1}), 'ok'])\n"
        "a = ReActAgent('b', 's', model=m, toolkit=Toolkit([f]), state_store=InMemoryStateStore())\n"
        "assert a.call_sync('hi').text == 'ok'\n"
        "print(sorted(n for n in sys.modules if n.startswith('agentrt.memory')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": SRC}, check=True
    )
    assert out.stdout.strip() == "[]"
