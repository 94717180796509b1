# ruff: noqa: RUF001 - CJK text with full-width punctuation is what these tests are about
"""Token counting: the CJK-aware estimate, message costs, calibration, the tiktoken fallback, context windows."""

from __future__ import annotations

import base64
import importlib
import struct
import sys
import types
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.message import (
    AudioBlock,
    Base64Source,
    ImageBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from agentrt.model import ScriptedModel, tokens
from agentrt.model.base import ToolSchema
from agentrt.model.tokens import (
    TokenCounter,
    context_window,
    count_text_tokens,
    count_tokens,
    estimate_text_tokens,
    get_counter,
    tokenizer_for,
)

ZH = (
    "人工智能是计算机科学的一个分支，它企图了解智能的实质，并生产出一种新的能以人类智能相似的方式做出反应的智能机器。"
    "该领域的研究包括机器人、语言识别、图像识别、自然语言处理和专家系统等。自诞生以来，理论和技术日益成熟，应用领域也不断扩大。"
)
JA = (
    "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。"
    "何でも薄暗いじめじめした所でニャーニャー泣いていた事だけは記憶している。"
)
KO = "대한민국은 동아시아의 한반도 남부에 위치한 민주공화국이다. 수도는 서울특별시이며, 공용어는 한국어이다."
EN = (
    "The quick brown fox jumps over the lazy dog. Artificial intelligence is a branch of computer science "
    "that aims to build machines capable of performing tasks that typically require human intelligence."
)
CODE = (
    "def fibonacci(n: int) -> list[int]:\n"
    "    seq = [0, 1]\n"
    "    while len(seq) < n:\n"
    "        seq.append(seq[-1] + seq[-2])\n"
    "    return seq[:n]\n"
)
EMOJI = "Great job 🎉🎉 👍 — see you soon 😀 👨‍👩‍👧"


@pytest.fixture(autouse=True)
def _estimate_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts with a fresh tokenizer cache and, unless it says otherwise, no tiktoken."""
    tokens._reset_tokenizer_cache()
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # importing it raises ImportError
    yield
    tokens._reset_tokenizer_cache()


# ==================================================================================================
# the estimate
# ==================================================================================================
def test_chinese_is_about_one_token_per_character() -> None:
    n = estimate_text_tokens(ZH)
    assert 0.7 * len(ZH) <= n <= 1.3 * len(ZH), (n, len(ZH))
    assert n > len(ZH) / 2.5 * 1.5  # far above the naive chars/2.5


def test_japanese_and_korean() -> None:
    assert 0.7 * len(JA) <= estimate_text_tokens(JA) <= 1.3 * len(JA)
    hangul = sum(1 for ch in KO if "\uac00" <= ch <= "\ud7a3")
    assert hangul * 0.8 <= estimate_text_tokens(KO) <= len(KO) * 1.3


def test_english_is_about_one_and_a_third_tokens_per_word() -> None:
    words = len(EN.split())
    n = estimate_text_tokens(EN)
    assert words <= n <= 1.6 * words, (n, words)
    assert len(EN) / 6 <= n <= len(EN) / 3  # and about four characters per token


def test_code_counts_symbols_and_indentation() -> None:
    n = estimate_text_tokens(CODE)
    assert len(CODE) / 5 <= n <= len(CODE) / 2, (n, len(CODE))
    assert estimate_text_tokens("        x") > estimate_text_tokens("x")


def test_digits_are_grouped_by_three() -> None:
    assert estimate_text_tokens("123") == 1
    assert estimate_text_tokens("1234567") == 3


def test_emoji_cost_more_than_letters() -> None:
    assert estimate_text_tokens("😀") == 2
    assert estimate_text_tokens(EMOJI) > estimate_text_tokens("Great job — see you soon")


def test_mixed_language_is_the_sum_of_its_parts() -> None:
    mixed = f"{EN} {ZH}"
    total = estimate_text_tokens(mixed)
    parts = estimate_text_tokens(EN) + estimate_text_tokens(ZH)
    assert abs(total - parts) <= 2


def test_other_alphabets_are_not_free() -> None:
    russian = "Искусственный интеллект — это область информатики"
    assert estimate_text_tokens(russian) >= len(russian.replace(" ", "")) / 3


def test_empty_text_is_zero() -> None:
    assert estimate_text_tokens("") == 0
    assert count_text_tokens("") == 0


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200), st.text(max_size=50))
def test_estimate_is_monotonic_in_length(prefix: str, more: str) -> None:
    assert estimate_text_tokens(prefix) <= estimate_text_tokens(prefix + more)


def test_estimate_grows_steadily_over_prefixes() -> None:
    text = f"{EN}\n{ZH}\n{CODE}\n{JA}\n{EMOJI}"
    counts = [estimate_text_tokens(text[:i]) for i in range(len(text) + 1)]
    assert counts == sorted(counts)
    assert counts[-1] == estimate_text_tokens(text)


def test_long_texts_are_cached() -> None:
    text = ZH * 20
    assert estimate_text_tokens(text) == estimate_text_tokens(text) == tokens._estimate(text)


# ==================================================================================================
# messages
# ==================================================================================================
def _png(width: int, height: int) -> str:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    data = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", len(ihdr)) + chunk + struct.pack(">I", zlib.crc32(chunk))
    return base64.b64encode(data).decode()


def _jpeg(width: int, height: int) -> str:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return base64.b64encode(b"\xff\xd8" + app0 + sof + b"\xff\xd9").decode()


def test_message_overhead_and_name() -> None:
    one = count_tokens([Msg.user("hello")])
    assert one == tokens.REPLY_PRIMER + tokens.MESSAGE_OVERHEAD + 1
    named = count_tokens([Msg.user("hello", name="alice")])
    assert named > one
    assert count_tokens([]) == 0
    two = count_tokens([Msg.user("hello"), Msg.assistant("hello")])
    assert two == one + tokens.MESSAGE_OVERHEAD + 1


def test_tool_calls_and_results_are_counted() -> None:
    base = [Msg.user("Weather in Paris?")]
    call = Msg(role="assistant", content=[ToolUseBlock(id="c1", name="get_weather", input={"city": "Paris"})])
    result = Msg(role="user", content=[ToolResultBlock(id="c1", name="get_weather", output="Sunny, 22 C " * 50)])
    with_call = count_tokens([*base, call])
    with_result = count_tokens([*base, call, result])
    assert with_call - count_tokens(base) >= tokens.MESSAGE_OVERHEAD + tokens.TOOL_CALL_OVERHEAD + 5
    assert with_result - with_call >= estimate_text_tokens("Sunny, 22 C " * 50)
    block_output = Msg(
        role="user",
        content=[
            ToolResultBlock(id="c1", name="x", output=[TextBlock(text="done"), ImageBlock(source="https://x/y.png")])
        ],
    )
    assert count_tokens([block_output]) > tokens.IMAGE_DEFAULT_TOKENS


def test_chinese_tool_arguments_are_counted_per_character() -> None:
    args = {"text": "北京今天天气晴朗，气温二十五度。" * 10}
    msg = Msg(role="assistant", content=[ToolUseBlock(id="c", name="translate", input=args)])
    assert count_tokens([msg]) >= len(args["text"])


def test_thinking_is_counted() -> None:
    plain = count_tokens([Msg.assistant("ok")])
    thought = Msg(
        role="assistant", content=[ThinkingBlock(thinking="Let me think about it " * 20), TextBlock(text="ok")]
    )
    assert count_tokens([thought]) > plain + 60


def test_images_by_size_and_constant_for_urls() -> None:
    def image_msg(source: Any) -> list[Msg]:
        return [Msg(role="user", content=[ImageBlock(source=source)])]

    empty = count_tokens([Msg(role="user", content=[])])
    url = count_tokens(image_msg("https://example.com/cat.png")) - empty
    assert url == tokens.IMAGE_DEFAULT_TOKENS
    small = count_tokens(image_msg(Base64Source(media_type="image/png", data=_png(64, 64)))) - empty
    large = count_tokens(image_msg(Base64Source(media_type="image/png", data=_png(2048, 2048)))) - empty
    jpeg = count_tokens(image_msg(Base64Source(media_type="image/jpeg", data=_jpeg(1024, 768)))) - empty
    assert small == 255  # one 512 tile: 85 + 170
    assert large == 765  # scaled to 768 x 768: four tiles
    assert jpeg == 765
    assert tokens.IMAGE_MIN_TOKENS <= small < jpeg <= tokens.IMAGE_MAX_TOKENS
    garbage = count_tokens(image_msg(Base64Source(media_type="image/png", data="not base64!!"))) - empty
    assert garbage == tokens.IMAGE_DEFAULT_TOKENS
    audio = count_tokens([Msg(role="user", content=[AudioBlock(source="https://x/a.mp3")])]) - empty
    assert audio == tokens.AUDIO_TOKENS


def test_image_tokens_are_clamped() -> None:
    assert tokens.image_tokens(10, 10) == 255
    assert tokens.IMAGE_MIN_TOKENS <= tokens.image_tokens(100_000, 100) <= tokens.IMAGE_MAX_TOKENS
    assert tokens.image_tokens(8000, 8000) <= tokens.IMAGE_MAX_TOKENS
    assert tokens.image_tokens(0, 0) == tokens.IMAGE_DEFAULT_TOKENS


def test_tool_schemas_add_tokens() -> None:
    schema = ToolSchema(
        name="get_weather",
        description="Get the current weather for a city.",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    )
    msgs = [Msg.user("hi")]
    assert count_tokens(msgs, tools=[schema]) > count_tokens(msgs) + tokens.TOOLS_OVERHEAD
    assert count_tokens(msgs, tools=[schema, schema]) > count_tokens(msgs, tools=[schema])


def test_model_may_be_a_name_or_a_chat_model() -> None:
    msgs = [Msg.user(ZH)]
    assert count_tokens(msgs, "gpt-4o") == count_tokens(msgs, ScriptedModel([], name="gpt-4o")) == count_tokens(msgs)


# ==================================================================================================
# calibration
# ==================================================================================================
def test_calibration_converges_to_the_reported_ratio() -> None:
    counter = TokenCounter("qwen-max")
    assert counter.ratio() == 1.0
    for i, estimated in enumerate(range(1000, 3000, 100)):
        noise = 1 + (0.03 if i % 2 else -0.03)
        counter.calibrate(estimated, round(estimated * 0.72 * noise))
    assert counter.ratio() == pytest.approx(0.72, rel=0.04)
    assert counter.samples() == 20
    msgs = [Msg.user(ZH * 3)]
    raw = counter.estimate(msgs)
    assert counter.count(msgs) == pytest.approx(raw * 0.72, rel=0.05)
    assert count_tokens(msgs, "qwen-max", counter=counter) == counter.count(msgs)
    assert count_tokens(msgs, "qwen-max") == raw  # without a counter: uncalibrated
    assert counter.count_text(ZH) == pytest.approx(estimate_text_tokens(ZH) * 0.72, rel=0.05)


def test_calibration_is_per_model_and_robust() -> None:
    counter = TokenCounter()
    counter.calibrate(1000, 1300, model="claude-3-5-sonnet")
    counter.calibrate(1000, 900, model="openai:gpt-4o")
    assert counter.ratio("claude-3-5-sonnet") == pytest.approx(1.3)
    assert counter.ratio("gpt-4o") == pytest.approx(0.9)  # the provider prefix does not split models
    assert counter.ratio(ScriptedModel([], name="gpt-4o")) == pytest.approx(0.9)
    assert counter.ratio("llama3.1") == 1.0
    before = counter.ratio("gpt-4o")
    counter.calibrate(0, 500, model="gpt-4o")
    counter.calibrate(500, 0, model="gpt-4o")
    assert counter.ratio("gpt-4o") == before  # nonsense reports are ignored
    counter.calibrate(10, 10_000, model="gpt-4o")
    assert counter.ratio("gpt-4o") <= counter.max_ratio  # one wild report cannot run away
    with pytest.raises(ValueError):
        TokenCounter(alpha=0)
    assert "TokenCounter" in repr(counter)


def test_get_counter_keeps_one_counter_per_model() -> None:
    a = get_counter("deepseek-chat")
    assert get_counter("deepseek:deepseek-chat") is a
    assert get_counter("gpt-4o") is not a
    assert a.model == "deepseek-chat"


# ==================================================================================================
# tiktoken: used when it loads, remembered when it does not
# ==================================================================================================
class _FakeEncoding:
    def __init__(self, name: str) -> None:
        self.name = name

    def encode(self, text: str, disallowed_special: Any = ()) -> list[int]:
        return [0] * len(text.split())


def _fake_tiktoken(monkeypatch: pytest.MonkeyPatch, get_encoding: Any) -> None:
    module = types.ModuleType("tiktoken")
    module.get_encoding = get_encoding  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tiktoken", module)
    tokens._reset_tokenizer_cache()


def test_missing_tiktoken_falls_back_once(monkeypatch: pytest.MonkeyPatch) -> None:
    imports: list[str] = []
    real_import = importlib.import_module  # the function agentrt.model.tokens calls

    def spy(name: str, package: str | None = None) -> Any:
        imports.append(name)
        return real_import(name, package)

    monkeypatch.setattr(importlib, "import_module", spy)
    for _ in range(5):
        assert count_text_tokens(ZH, "gpt-4o") == estimate_text_tokens(ZH)
        assert count_tokens([Msg.user(EN)], "claude-3-5-sonnet") > 0
    assert imports == ["tiktoken"]
    assert tokenizer_for("gpt-4o") == "estimate"


def test_encoding_that_cannot_load_falls_back_without_retrying(monkeypatch: pytest.MonkeyPatch) -> None:
    attempts: list[str] = []

    def get_encoding(name: str) -> Any:
        attempts.append(name)
        raise ConnectionError("could not download the encoding (offline)")

    _fake_tiktoken(monkeypatch, get_encoding)
    for _ in range(5):
        assert count_text_tokens(EN, "gpt-4o") == estimate_text_tokens(EN)
        assert count_text_tokens(EN, "gpt-4") == estimate_text_tokens(EN)
    assert sorted(attempts) == ["cl100k_base", "o200k_base"]  # once per encoding, never again
    assert tokenizer_for("gpt-4o") == "estimate"


def test_tiktoken_is_used_when_it_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_tiktoken(monkeypatch, _FakeEncoding)
    assert count_text_tokens("one two three") == 3
    assert count_text_tokens(EN * 3, "gpt-4o") == len((EN * 3).split())
    assert tokenizer_for("gpt-4o-mini") == "tiktoken:o200k_base"
    assert tokenizer_for("gpt-3.5-turbo") == "tiktoken:cl100k_base"
    assert tokenizer_for(None) == "tiktoken:o200k_base"


def test_environment_can_force_the_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_tiktoken(monkeypatch, _FakeEncoding)
    monkeypatch.setenv("AGENTRT_TOKENIZER", "estimate")
    assert tokenizer_for("gpt-4o") == "estimate"
    assert count_text_tokens("one two three") == estimate_text_tokens("one two three")


# ==================================================================================================
# context windows
# ==================================================================================================
@pytest.mark.parametrize(
    ("model", "window"),
    [
        ("gpt-4o", 128_000),
        ("openai:gpt-4o-mini-2024-07-18", 128_000),
        ("gpt-4.1-mini", 1_047_576),
        ("o3", 200_000),
        ("o4-mini", 200_000),
        ("o1-mini", 128_000),
        ("gpt-4", 8_192),
        ("gpt-3.5-turbo", 16_385),
        ("anthropic:claude-3-5-sonnet-20241022", 200_000),
        ("claude-3-7-sonnet-latest", 200_000),
        ("claude-sonnet-4-20250514", 200_000),
        ("openrouter:anthropic/claude-3.5-sonnet", 200_000),
        ("gemini:gemini-2.0-flash", 1_048_576),
        ("gemini-1.5-pro-002", 2_097_152),
        ("deepseek:deepseek-chat", 131_072),
        ("dashscope:qwen-max", 32_768),
        ("qwen-max-latest", 131_072),
        ("ollama:llama3.1:8b", 131_072),
        ("meta-llama/Llama-3.1-70B-Instruct", 131_072),
        ("vllm:meta-llama/Meta-Llama-3-8B-Instruct", 8_192),
        ("ollama:qwen2.5:7b", 131_072),
    ],
)
def test_context_window(model: str, window: int) -> None:
    assert context_window(model) == window


def test_context_window_unknown_and_models() -> None:
    assert context_window("my-private-model") is None
    assert context_window("") is None
    assert context_window(None) is None
    assert context_window(ScriptedModel([], name="gpt-4o")) == 128_000
