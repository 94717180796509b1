# ruff: noqa: RUF001 - CJK text with full-width punctuation is what these tests are about
"""Counting for context management: CJK and mixed-language prompts, the memoised count, calibration."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memtest_helpers import FakeRun

from agentrt import Msg, ReActAgent, RuntimeContext
from agentrt.memory import ContextConfig
from agentrt.memory.compression import META_KEY, ContextCompressor
from agentrt.message import ToolResultBlock, ToolUseBlock
from agentrt.model import ScriptedModel
from agentrt.model.base import ToolSchema
from agentrt.model.tokens import TokenCounter, count_text_tokens, count_tokens
from agentrt.state import InMemoryStateStore

CHINESE = "上下文窗口管理必须在每种语言中都正确计数，中文每个汉字大约是一个词元。" * 20
JAPANESE = "東京の天気は晴れです。明日は雨が降るでしょう。" * 20
KOREAN = "서울의 날씨는 맑습니다. 내일은 비가 올 것입니다. " * 20


@pytest.mark.parametrize("text", [CHINESE, JAPANESE, KOREAN], ids=["zh", "ja", "ko"])
def test_cjk_text_counts_near_one_token_per_character(text: str) -> None:
    chars = sum(1 for ch in text if not ch.isspace())
    tokens = count_text_tokens(text, "openai:gpt-4o")
    assert tokens >= 0.6 * chars, f"{tokens} tokens for {chars} characters: CJK must not be undercounted"
    assert tokens <= 1.6 * chars
    assert tokens > 2 * (len(text) / 4), "far above the chars/4 rule of thumb that breaks on CJK"


def test_mixed_language_counts_add_up() -> None:
    parts = [
        "The quarterly revenue of ACME-42 was 12.5 MEUR. ",
        "营收同比增长百分之十二。",
        "売上は好調です。",
        "매출이 늘었다.",
    ]
    whole = count_text_tokens("".join(parts), "openai:gpt-4o")
    separate = sum(count_text_tokens(p, "openai:gpt-4o") for p in parts)
    assert abs(whole - separate) <= len(parts)


@settings(max_examples=80, deadline=None)
@given(
    texts=st.lists(
        st.one_of(st.text(max_size=200), st.sampled_from([CHINESE[:90], JAPANESE[:60], KOREAN[:70]])),
        min_size=1,
        max_size=8,
    ),
    with_tools=st.booleans(),
    truncate=st.booleans(),
)
def test_memoised_count_equals_count_tokens(texts: list[str], with_tools: bool, truncate: bool) -> None:
    messages: list[Msg] = [Msg.user(texts[0])]
    for i, text in enumerate(texts[1:]):
        call = ToolUseBlock(id=f"c{i}", name="lookup", input={"q": text[:20]})
        messages.append(Msg(role="assistant", content=[call]))
        messages.append(Msg(role="user", content=[ToolResultBlock(id=call.id, name="lookup", output=text * 5)]))
    run = FakeRun(messages)
    if truncate:
        run.state.metadata = {META_KEY: {"truncate_before": len(messages)}}
    tools = (
        [ToolSchema(name="lookup", description="查找 something", parameters={"type": "object"})] if with_tools else []
    )
    system = [Msg.system("系统提示 system prompt")]
    compressor = ContextCompressor(ContextConfig(tool_result_max_chars=100))
    for _ in range(2):  # the second time from the memo
        counted = compressor.raw_count(system, compressor._view_entries(run.state), [], tools, "openai:gpt-4o")
        expected = count_tokens([*system, *compressor.view(run.state)], "openai:gpt-4o", tools=tools)
        assert counted == expected


async def test_a_chinese_conversation_is_compressed_by_its_real_size() -> None:
    model = ScriptedModel(["好的"])
    summary = ScriptedModel.from_function(lambda request: "摘要：已读取报告。")
    agent = ReActAgent(
        "bot",
        "你是一个助手。",
        model=model,
        state_store=InMemoryStateStore(),
        context=ContextConfig(max_tokens=4000, keep_recent_rounds=1),
        summary_model=summary,
    )
    ctx = RuntimeContext(user_id="u", session_id="zh")
    history = [Msg.user("请阅读报告并告诉我二零二三年的营收。")]
    for i in range(4):
        call = ToolUseBlock(id=f"c{i}", name="read_page", input={"page": i})
        history.append(Msg(role="assistant", content=[call]))
        history.append(Msg(role="user", content=[ToolResultBlock(id=call.id, name="read_page", output=CHINESE)]))
    await agent.observe(history, ctx)
    characters = sum(len(m.text) + sum(len(b.text) for b in m.blocks(ToolResultBlock)) for m in history)
    assert characters / 4 < 0.7 * 3500, "a chars/4 estimate would not even trigger"
    events = [e async for e in agent.stream_events("继续", ctx)]
    assert any(e.type == "context_compressed" for e in events)
    prompt = model.requests[0].messages
    assert count_tokens(prompt, model) < 0.7 * 3500
    assert "请阅读报告并告诉我二零二三年的营收。" in prompt[1].text


def test_calibration_scales_the_trigger_decision() -> None:
    counter = TokenCounter()
    config = ContextConfig(max_tokens=10_000, counter=counter)
    compressor = ContextCompressor(config)
    run = FakeRun([Msg.user(CHINESE)])
    before = compressor.count_prompt(run.state, [], [], [], "deepseek-chat")
    compressor.calibrate(before, None, "deepseek-chat")  # no usage: nothing learnt
    assert counter.samples("deepseek-chat") == 0
    from agentrt.message import TokenUsage

    compressor.calibrate(before, TokenUsage(input_tokens=before * 2), "deepseek-chat")
    assert compressor.count_prompt(run.state, [], [], [], "deepseek-chat") == before * 2
    assert compressor.count_prompt(run.state, [], [], [], "gpt-4o") != before * 2, "calibration is per model"
