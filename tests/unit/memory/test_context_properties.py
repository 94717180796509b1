# ruff: noqa: RUF001 - CJK text with full-width punctuation is what these tests are about
"""Invariants of context compression, as hypothesis properties over random histories.

For any history (tool rounds with parallel calls and results of any size, plain answers, new user
inputs, in any language), any configuration, a summariser that may fail or write junk, and any mode:
  * a tool call and its results are never separated: the view starts at a safe cut point;
  * the view is valid input for the OpenAI and Anthropic formatters (no orphan call or result);
  * the first user message survives, verbatim in the view or in the summary;
  * nothing is lost from the persisted state: the transcript is never changed;
  * the pointer only moves forward and each tier shrinks the prompt.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from memtest_helpers import FakeRun, check_prompt

from agentrt.memory.compression import ContextCompressor, ContextConfig, is_round_start_safe, round_starts
from agentrt.message import ContentBlock, Msg, TextBlock, ToolResultBlock, ToolUseBlock
from agentrt.model import ModelRequest, ScriptedModel

SYSTEM = Msg.system("You are a careful assistant.")
_ids = itertools.count()

texts = st.one_of(
    st.text(min_size=1, max_size=80),
    st.sampled_from(
        ["读取第三页并总结", "東京の天気は？", "résumé naïve café", "Привет, мир", "fix bug #42 in src/app.py"]
    ),
)


@st.composite
def sizes(draw: Any) -> int:
    return int(draw(st.one_of(st.integers(0, 200), st.integers(200, 4000), st.integers(4000, 12000))))


def _filler(n: int, cjk: bool) -> str:
    unit = "数据分析结果，" if cjk else "result data "
    return (unit * (n // len(unit) + 1))[:n]


@st.composite
def tool_round(draw: Any) -> list[Msg]:
    calls = [
        ToolUseBlock(id=f"c{next(_ids)}", name=draw(st.sampled_from(["fetch", "search", "run"])), input={"n": i})
        for i in range(draw(st.integers(1, 3)))
    ]
    content: list[Any] = []
    if draw(st.booleans()):
        content.append(TextBlock(text=draw(texts)))
    assistant = Msg(role="assistant", content=[*content, *calls])
    results: list[ContentBlock] = [
        ToolResultBlock(id=c.id, name=c.name, output=_filler(draw(sizes()), draw(st.booleans()))) for c in calls
    ]
    if len(results) > 1 and draw(st.booleans()):
        # results of one turn split over two messages (e.g. an approval answered later)
        return [assistant, Msg(role="user", content=results[:1]), Msg(role="user", content=results[1:])]
    extra: list[Any] = [TextBlock(text=draw(texts))] if draw(st.integers(0, 5)) == 0 else []
    return [assistant, Msg(role="user", content=[*results, *extra])]


@st.composite
def segment(draw: Any) -> list[Msg]:
    kind = draw(st.sampled_from(["tools", "tools", "tools", "answer", "user"]))
    if kind == "tools":
        return list(draw(tool_round()))
    if kind == "answer":
        return [Msg.assistant(draw(texts) + " " + _filler(draw(sizes()), draw(st.booleans())))]
    return [Msg.user(draw(texts))]


@st.composite
def histories(draw: Any) -> list[Msg]:
    first = Msg.user("TASK: " + draw(texts))
    out = [first]
    for part in draw(st.lists(segment(), min_size=2, max_size=25)):
        out.extend(part)
    return out


@st.composite
def configs(draw: Any) -> ContextConfig:
    return ContextConfig(
        max_tokens=draw(st.integers(1000, 6000)),
        trigger_ratio=draw(st.sampled_from([0.5, 0.7, 0.9])),
        keep_recent_rounds=draw(st.integers(1, 4)),
        tool_result_max_chars=draw(st.sampled_from([100, 500, 2000])),
        max_summary_calls=draw(st.integers(0, 3)),
        pinned_max_chars=10_000,
    )


def summariser(behaviour: str) -> ScriptedModel:
    def reply(request: ModelRequest) -> Any:
        if behaviour == "fails":
            return RuntimeError("down")
        if behaviour == "empty":
            return ""
        if behaviour == "junk":
            return "ok"
        return "Summary: " + request.messages[-1].text[-300:]

    return ScriptedModel.from_function(reply)


def first_user_text(messages: list[Msg]) -> str:
    return messages[0].text


def check_invariants(compressor: ContextCompressor, run: FakeRun, transcript: list[Msg], previous_index: int) -> None:
    state = run.state
    assert state.messages == transcript, "the persisted transcript never changes"
    assert all(a is b for a, b in zip(state.messages, transcript, strict=True))
    assert previous_index <= state.summary_index <= len(transcript), "the view pointer only moves forward"
    assert is_round_start_safe(transcript, state.summary_index), "a call and its results are never separated"
    view = compressor.view(state)
    check_prompt([SYSTEM, *view])
    first = first_user_text(transcript)
    # verbatim in the view or the summary; cut to a head and a tail only when it alone outgrows the summary's budget
    assert any(first in m.text for m in view) or (
        "first request" in view[0].text and "cut from the middle of this text" in view[0].text
    ), "the first user message survives, verbatim or in the summary"
    if state.summary_index:
        assert state.summary and view[0].text.startswith("<summary>")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    history=histories(),
    config=configs(),
    behaviour=st.sampled_from(["works", "junk", "fails", "empty"]),
    modes=st.lists(st.sampled_from(["auto", "auto", "overflow", "manual"]), min_size=1, max_size=3),
    growth=st.lists(segment(), min_size=0, max_size=3),
)
def test_compression_invariants(
    history: list[Msg], config: ContextConfig, behaviour: str, modes: list[str], growth: list[list[Msg]]
) -> None:
    async def scenario() -> None:
        compressor = ContextCompressor(config)
        model = ScriptedModel(name="scripted")
        summary = summariser(behaviour)
        run = FakeRun(history)
        transcript = list(history)
        extra = [[], *growth]
        for step, mode in enumerate(modes):
            for msg in extra[step] if step < len(extra) else []:
                run.state.messages.append(msg)
                transcript.append(msg)
            before_index = run.state.summary_index
            steps = await compressor.compress(run, [SYSTEM], [], [], model, None, lambda: summary, mode=mode)  # type: ignore[arg-type]
            for s in steps:
                assert s.after_tokens < s.before_tokens, f"tier {s.tier} did not shrink the prompt"
            assert [kind.type for kind, _ in run.events[-len(steps) :]] == ["context_compressed"] * len(
                steps
            ) or not steps
            check_invariants(compressor, run, transcript, before_index)
            event(f"tiers={sorted({s.tier for s in steps})} moved={run.state.summary_index > before_index}")
            if mode == "manual":
                protected = compressor._protected_start(run.state, config.keep_recent_rounds)
                assert run.state.summary_index <= protected, "manual compression never touches the recent rounds"

    asyncio.run(scenario())


@settings(max_examples=200, deadline=None)
@given(history=histories(), start=st.integers(0, 60))
def test_every_round_start_is_a_safe_cut(history: list[Msg], start: int) -> None:
    start = min(start, len(history))
    # only start from safe points, as the compressor does
    while not is_round_start_safe(history, start):
        start -= 1
    for index in round_starts(history, start):
        assert start <= index < len(history)
        assert is_round_start_safe(history, index)
        assert history[index].role != "user" or not all(isinstance(b, ToolResultBlock) for b in history[index].content)
