# ruff: noqa: RUF001 - CJK text with full-width punctuation is what these tests are about
"""Every prompt stays inside the window: a property over whole conversations through the real agent.

For any conversation (plain answers, tool calls, parallel calls, Latin and CJK text, streamed or
not, a summariser that works, writes too much or fails), every request the model receives fits
``max_tokens - reserve_output_tokens`` by the compressor's own count, and never splits a tool call
from its result, whenever the newest user message alone fits. When it does not, the call fails
with `ContextWindowExceededError` naming the sizes before any model call, the message stays in the
session, and the next call works.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from memtest_helpers import check_prompt

from agentrt import (
    Msg,
    ReActAgent,
    RuntimeContext,
    TextBlock,
    ThinkingBlock,
    Toolkit,
    ToolResultBlock,
    ToolUseBlock,
    tool,
)
from agentrt import events as ev
from agentrt.errors import ContextWindowExceededError
from agentrt.memory import ContextConfig
from agentrt.memory.compression import SUMMARY_PROMPT, render_summary
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.model.tokens import TokenCounter, count_tokens, estimate_text_tokens
from agentrt.state import InMemoryStateStore

SYS = "You are a test bot."
CTX = RuntimeContext(user_id="u", session_id="s")
ZH = "我们今天讨论数据分析的结果以及下一步的计划，请详细说明。"


def filler(n: int, cjk: bool) -> str:
    unit = "数据分析结果，季度收入增长。" if cjk else "result data for the quarter "
    return (unit * (n // len(unit) + 1))[:n]


@tool(read_only=True)
def fetch(size: int, cjk: bool = False) -> str:
    """Fetch a page.

    Args:
        size: Characters in the page.
        cjk: Chinese text instead of English.
    """
    return filler(size, cjk)


def check_pairs(messages: list[Msg]) -> None:
    """Every tool call has its result in the next message of the request, and every result its call just before."""
    for i, msg in enumerate(messages):
        calls = {b.id for b in msg.content if isinstance(b, ToolUseBlock)}
        if calls:
            following = messages[i + 1].content if i + 1 < len(messages) else []
            answered = {b.id for b in following if isinstance(b, ToolResultBlock)}
            assert calls <= answered, f"tool calls {sorted(calls - answered)} without their results next"
        results = {b.id for b in msg.content if isinstance(b, ToolResultBlock)}
        if results:
            previous = messages[i - 1].content if i else []
            called = {b.id for b in previous if isinstance(b, ToolUseBlock)}
            assert results <= called, f"tool results {sorted(results - called)} without their calls just before"


# --------------------------------------------------------------------------------------------------
# the conversation generator
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ToolStep:
    text: str
    calls: tuple[tuple[int, bool], ...]  # (result size, CJK) per parallel call


@dataclass(frozen=True)
class Turn:
    text: str
    steps: tuple[ToolStep, ...]
    answer: str


def sizes(small: int, large: int) -> st.SearchStrategy[int]:
    return st.one_of(st.integers(1, small), st.integers(small, large))


@st.composite
def tool_steps(draw: Any) -> ToolStep:
    calls = tuple(
        (draw(sizes(300, 8000)), draw(st.booleans())) for _ in range(draw(st.integers(1, 3)))
    )  # 2-3: parallel calls
    text = filler(draw(st.integers(0, 600)), draw(st.booleans())) if draw(st.booleans()) else ""
    return ToolStep(text=text, calls=calls)


@st.composite
def turns(draw: Any) -> Turn:
    cjk = draw(st.booleans())
    # now and then a message too big for any window drawn below
    size = draw(st.one_of(sizes(200, 1500), sizes(200, 1500), sizes(200, 1500), st.integers(4000, 6000)))
    steps = tuple(draw(st.lists(tool_steps(), max_size=3)))
    answer = filler(draw(st.integers(1, 1500)), draw(st.booleans()))
    return Turn(text=f"Q{draw(st.integers(0, 99))} " + filler(size, cjk), steps=steps, answer=answer)


@st.composite
def configs(draw: Any) -> ContextConfig:
    return ContextConfig(
        max_tokens=draw(st.integers(1000, 4000)),
        reserve_output_tokens=draw(st.integers(0, 300)),
        trigger_ratio=draw(st.sampled_from([0.5, 0.7, 0.9, 1.0])),
        keep_recent_rounds=draw(st.integers(1, 3)),
        tool_result_max_chars=draw(st.sampled_from([100, 500, 2000])),
        max_summary_calls=draw(st.integers(0, 2)),
        counter=TokenCounter(),
    )


class Conversation:
    """A real agent with a scripted model that plays the turns and checks every request it receives."""

    def __init__(self, config: ContextConfig, summary: str, summary_size: int, cjk_summary: bool) -> None:
        assert config.max_tokens is not None and config.reserve_output_tokens is not None
        assert config.counter is not None
        self.counter = config.counter
        self.usable = config.max_tokens - config.reserve_output_tokens
        self.plan: list[Any] = []
        self.ids = itertools.count()
        self.max_tokens = config.max_tokens
        self.summary, self.summary_size, self.cjk_summary = summary, summary_size, cjk_summary
        self.model = ScriptedModel.from_function(self.reply)
        # "own": the agent's model writes the summaries too (the default when no summary model is given)
        self.summary_model = (
            None if summary == "own" else ScriptedModel.from_function(self.summarise, name="summariser")
        )
        self.toolkit = Toolkit([fetch])
        self.agent = ReActAgent(
            "bot",
            SYS,
            model=self.model,
            toolkit=self.toolkit,
            context=config,
            summary_model=self.summary_model,
            state_store=InMemoryStateStore(),
        )
        self.summaries = 0
        self.oversized: list[tuple[int, int]] = []

    def summarise(self, request: ModelRequest) -> Any:
        """A summary call: it fits the window too, with room for the summary it asks for.

        Recorded, not asserted here: the compressor catches a failing summary call.
        """
        model = self.summary_model or self.model
        size = self.counter.count(request.messages, model)
        room = request.options.max_tokens or 0
        if size > self.usable or size + room > self.max_tokens:
            self.oversized.append((size, room))
        self.summaries += 1
        if self.summary == "fails":
            return RuntimeError("summary service down")
        return "Summary: " + filler(self.summary_size, self.cjk_summary)

    def reply(self, request: ModelRequest) -> Any:
        if request.messages and request.messages[0].text == SUMMARY_PROMPT:
            return self.summarise(request)
        size = self.counter.count(request.messages, self.model, tools=request.tools)
        assert size <= self.usable, f"a request of {size} tokens for a budget of {self.usable}"
        check_pairs(request.messages)
        check_prompt(request.messages)
        step = self.plan.pop(0) if self.plan else "done"
        if isinstance(step, ToolStep):
            calls = [
                ToolUseBlock(id=f"c{next(self.ids)}", name="fetch", input={"size": n, "cjk": cjk})
                for n, cjk in step.calls
            ]
            return [TextBlock(text=step.text), *calls] if step.text else calls
        return step

    def floor(self, msg: Msg) -> int:
        """The newest message alone, with the system prompt and the tool schemas."""
        return self.counter.count([Msg.system(SYS), msg], self.model, tools=self.toolkit.schemas())

    async def play(self, turn: Turn, streaming: bool) -> None:
        self.plan = [*turn.steps, turn.answer]
        before, summaries = len(self.model.requests), self.summaries
        msg = Msg.user(turn.text)
        fits = self.floor(msg) <= self.usable
        error: ContextWindowExceededError | None = None
        events: list[ev.AgentEvent] = []
        try:
            if streaming:
                async for e in self.agent.stream_events(msg, CTX):
                    events.append(e)
            else:
                await self.agent.call(msg, CTX)
        except ContextWindowExceededError as exc:
            error = exc
        state = await self.agent.get_state("u", "s")
        if fits:
            assert error is None, f"a message that fits alone was refused: {error}"
            first = next(r for r in self.model.requests[before:] if r.messages[0].text != SUMMARY_PROMPT)
            assert first.messages[-1].text == turn.text, "the newest message is sent whole"
            main = [r for r in self.model.requests[before:] if r.messages[0].text != SUMMARY_PROMPT]
            assert len(main) == len(turn.steps) + 1
            event("fits")
        else:
            assert error is not None, "a message that cannot fit was sent"
            assert len(self.model.requests) == before, "refused before any model call"
            assert self.summaries == summaries, "refused before any summary call"
            assert error.body["budget"] == self.usable
            assert error.body["message_tokens"] > 0 and f"{self.usable:,} tokens" in str(error)
            assert state.messages[-1].id == msg.id, "the refused message stays in the session"
            if streaming:
                last = events[-1]
                assert last.type == "run_error" and isinstance(last, ev.RunError)
                assert "ContextWindowExceeded" in last.error_type
            event("refused")
        assert any(m.id == msg.id for m in state.messages), "nothing is lost from the session"
        assert not self.oversized, f"summary requests (tokens, max_tokens) over {self.usable}/{self.max_tokens}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    config=configs(),
    conversation=st.lists(turns(), min_size=1, max_size=8),
    summary=st.sampled_from(["works", "fails", "own"]),
    summary_size=st.integers(10, 3000),
    cjk_summary=st.booleans(),
    streaming=st.lists(st.booleans(), min_size=8, max_size=8),
)
def test_every_request_fits_the_window_and_keeps_tool_pairs(
    config: ContextConfig,
    conversation: list[Turn],
    summary: str,
    summary_size: int,
    cjk_summary: bool,
    streaming: list[bool],
) -> None:
    async def scenario() -> None:
        chat = Conversation(config, summary, summary_size, cjk_summary)
        for turn, stream in zip(conversation, streaming, strict=False):
            await chat.play(turn, stream)

    logging.getLogger("agentrt.memory").setLevel(logging.ERROR)
    try:
        asyncio.run(scenario())
    finally:
        logging.getLogger("agentrt.memory").setLevel(logging.NOTSET)


# --------------------------------------------------------------------------------------------------
# the conversation of the issue, and the error paths
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("summary", ["works", "fails"])
async def test_a_long_chinese_conversation_without_tools_stays_bounded(summary: str) -> None:
    counter = TokenCounter()
    config = ContextConfig(max_tokens=2000, reserve_output_tokens=200, counter=counter)
    model = ScriptedModel.from_function(lambda request: "好的，" + (ZH * 6)[:150])
    summariser = ScriptedModel.from_function(
        lambda request: RuntimeError("down") if summary == "fails" else "摘要：" + (ZH * 3)[:100], name="summariser"
    )
    agent = ReActAgent(
        "bot", SYS, model=model, context=config, summary_model=summariser, state_store=InMemoryStateStore()
    )
    for i in range(16):
        await agent.call(f"第{i}轮：" + (ZH * 6)[:150], CTX)

    sizes = [counter.count(r.messages, model, tools=r.tools) for r in model.requests]
    trigger = int(1800 * 0.7)
    assert max(sizes) <= 1800
    assert max(sizes[5:]) <= trigger, f"compression brings every later prompt under the trigger: {sizes}"
    assert max(len(r.messages) for r in model.requests[5:]) <= 8, "older rounds leave the view"
    last = model.requests[-1].messages
    assert last[1].text.startswith("<summary>") and "第0轮" in last[1].text, "the first request stays pinned"
    assert last[-1].text.startswith("第15轮")
    state = await agent.get_state("u", "s")
    assert len(state.messages) == 32, "nothing is lost from the session"
    if summary == "works":
        assert summariser.requests, "older rounds are summarised"
        assert "Summary of the earlier conversation:\n摘要" in last[1].text
    else:
        assert "Dropped from view without a summary" in last[1].text


async def test_a_message_too_big_for_the_window_is_refused_before_any_call_and_kept() -> None:
    model = ScriptedModel.from_function(lambda request: "ok")
    config = ContextConfig(max_tokens=1000, reserve_output_tokens=100)
    agent = ReActAgent("bot", SYS, model=model, context=config, state_store=InMemoryStateStore())
    await agent.call("hello", CTX)
    huge = "请" * 1200

    with pytest.raises(ContextWindowExceededError) as info:
        await agent.call(huge, CTX)

    assert len(model.requests) == 1, "no model call for the refused message"
    assert "newest user message needs 1,2" in str(info.value) and "900 tokens" in str(info.value)
    assert info.value.body["budget"] == 900 and info.value.body["message_tokens"] >= 1200
    state = await agent.get_state("u", "s")
    assert state.messages[-1].text == huge, "the refused message is kept in the session"

    await agent.call("a short question", CTX)
    sent = model.requests[-1].messages
    assert sent[-1].text == "a short question"
    assert all(m.text != huge for m in sent), "the refused message is not sent again"
    assert count_tokens(sent, model) <= 900


async def test_a_last_round_that_cannot_be_cut_enough_fails_before_the_call() -> None:
    """Signed reasoning is never cut: a reply whose thinking alone overflows ends the call with the sizes."""
    steps: list[Any] = [
        [ThinkingBlock(thinking="想" * 1500, signature="sig"), ToolUseBlock(id="c1", name="fetch", input={"size": 10})],
        "never sent",
    ]
    model = ScriptedModel(steps)
    agent = ReActAgent(
        "bot",
        SYS,
        model=model,
        toolkit=Toolkit([fetch]),
        context=ContextConfig(max_tokens=1000, reserve_output_tokens=100),
        state_store=InMemoryStateStore(),
    )
    with pytest.raises(ContextWindowExceededError, match="even with every text and tool result cut"):
        await agent.call("go", CTX)
    assert len(model.requests) == 1
    state = await agent.get_state("u", "s")
    assert [b.id for b in state.messages[-1].content if isinstance(b, ToolResultBlock)] == ["c1"]


# --------------------------------------------------------------------------------------------------
# the summary's own budget
# --------------------------------------------------------------------------------------------------
texts_any = st.one_of(st.text(max_size=300), st.builds(filler, st.integers(0, 3000), st.booleans()))


@settings(max_examples=200, deadline=None)
@given(
    first=texts_any,
    latest=texts_any,
    body=texts_any,
    omitted=st.lists(texts_any, max_size=10),
    budget=st.integers(0, 4000),
)
def test_the_summary_is_rendered_within_its_budget(
    first: str, latest: str, body: str, omitted: list[str], budget: int
) -> None:
    meta = {"pins": {"first": first, "latest": latest}, "body": body, "omitted": omitted}
    full = render_summary(meta)
    text = render_summary(meta, budget, estimate_text_tokens)
    if full is None:
        assert text is None
        return
    if estimate_text_tokens(full) <= budget:
        assert text == full, "a summary within its budget is left whole"
    elif text is not None:
        assert estimate_text_tokens(text) <= budget
        if "Dropped from view without a summary:" in text and body:
            assert f"Summary of the earlier conversation:\n{body}" in text, "digest lines go before the body"
        # the first request is kept verbatim, or cut to a head and a tail, or (last of all) left out
        if first and "first request" in text:
            assert f"(verbatim):\n{first}" in text or "cut from the middle of this text" in text


# --------------------------------------------------------------------------------------------------
# the summary call is a request too
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("max_tokens", [800, 2000])
async def test_a_summary_request_fits_the_window_of_the_agents_own_model(max_tokens: int) -> None:
    """Rounds with big tool results are cut to fit the summariser's window, with room left for the summary."""
    counter = TokenCounter()
    sizes: list[tuple[int, int]] = []

    def reply(request: ModelRequest) -> Any:
        if request.messages[0].text == SUMMARY_PROMPT:
            sizes.append((counter.count(request.messages, model), request.options.max_tokens or 0))
            return "Summary: pages fetched."
        if request.messages[-1].role == "user" and request.messages[-1].text.startswith("read"):
            return [ToolUseBlock(id=f"c{len(model.requests)}", name="fetch", input={"size": max_tokens * 6})]
        return "read."

    model = ScriptedModel.from_function(reply)
    config = ContextConfig(max_tokens=max_tokens, reserve_output_tokens=100, keep_recent_rounds=1, counter=counter)
    agent = ReActAgent(
        "bot", SYS, model=model, toolkit=Toolkit([fetch]), context=config, state_store=InMemoryStateStore()
    )
    for i in range(5):
        await agent.call(f"read page {i}", CTX)

    assert sizes, "older rounds are summarised by the agent's own model"
    for size, room in sizes:
        assert size <= max_tokens - 100, f"a summary request of {size} tokens"
        assert room >= 1 and size + room <= max_tokens, "the summary's max_tokens fits what the window leaves"


async def test_no_summary_call_when_the_summariser_prompt_cannot_fit(caplog: pytest.LogCaptureFixture) -> None:
    """A window smaller than the summariser's own instructions: older rounds are dropped with a digest instead."""
    model = ScriptedModel.from_function(lambda request: "ok, noted.")
    config = ContextConfig(max_tokens=300, reserve_output_tokens=50, counter=TokenCounter())
    agent = ReActAgent("bot", SYS, model=model, context=config, state_store=InMemoryStateStore())
    with caplog.at_level(logging.WARNING, "agentrt.memory"):
        for i in range(30):
            await agent.call(f"message {i} " + filler(60, i % 2 == 0), CTX)

    assert all(r.messages[0].text != SUMMARY_PROMPT for r in model.requests), "no summary request over the window"
    assert all(count_tokens(r.messages, model) <= 250 for r in model.requests)
    state = await agent.get_state("u", "s")
    assert state.summary_index > 40, "older rounds left the view"
    assert state.metadata["agentrt.context"]["omitted"], "with a digest line, not a summary"
    assert "cannot hold" in caplog.text or "even cut" in caplog.text
