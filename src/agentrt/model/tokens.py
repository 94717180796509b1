"""Token counting for prompts: exact with tiktoken when it can load offline, a CJK-aware estimate otherwise.

Context management needs a count before the model call, in every language. tiktoken (an optional
dependency) gives exact counts for OpenAI models and close ones for models with similar tokenizers,
but downloads its encodings on first use; where that fails (offline machines, sandboxes) the failure
is remembered once and the estimate takes over for the life of the process.

The estimate counts by script: a CJK ideograph, kana or hangul syllable is about one token (never
"characters / 2.5", which undercounts Chinese by half), an ASCII word about 1.3 with its
punctuation, digits in groups of three, emoji about two. Message overhead, tool calls, tool
results and images are added like the providers bill them. `TokenCounter` then corrects the
estimate per model with the input-token counts providers report.
"""

from __future__ import annotations

import base64
import binascii
import importlib
import json
import math
import os
import re
import struct
import threading
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from agentrt.message import (
    AudioBlock,
    Base64Source,
    ContentBlock,
    ImageBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    VideoBlock,
)
from agentrt.model.base import ToolSchema

if TYPE_CHECKING:
    from agentrt.model.base import ChatModel

__all__ = [
    "TokenCounter",
    "context_window",
    "count_text_tokens",
    "count_tokens",
    "estimate_text_tokens",
    "get_counter",
    "tokenizer_for",
]

# Per-message framing (role, separators), the reply primer, per tool-call/result framing.
MESSAGE_OVERHEAD = 4
REPLY_PRIMER = 3
TOOL_CALL_OVERHEAD = 6
TOOL_RESULT_OVERHEAD = 4
TOOLS_OVERHEAD = 12
TOOL_SCHEMA_OVERHEAD = 8
#: An image whose size is unknown (a URL): what OpenAI bills a 1024x1024 image at high detail.
IMAGE_DEFAULT_TOKENS = 765
IMAGE_MIN_TOKENS = 85
IMAGE_MAX_TOKENS = 1600
#: Audio and video have no size hint we can read cheaply; constants in the range providers bill.
AUDIO_TOKENS = 500
VIDEO_TOKENS = 2000

# --------------------------------------------------------------------------------------------------
# the estimate
# --------------------------------------------------------------------------------------------------
_CJK = (
    "\u1100-\u11ff"  # hangul jamo
    "\u2e80-\u2fdf"  # CJK radicals
    "\u3000-\u303f"  # CJK punctuation
    "\u3040-\u30ff"  # hiragana, katakana
    "\u3100-\u31ff"  # bopomofo, hangul compatibility jamo, katakana extensions
    "\u3200-\u4dbf"  # enclosed CJK, CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\ua960-\ua97f"
    "\uac00-\ud7ff"  # hangul syllables
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\ufe30-\ufe4f"
    "\uff00-\uffef"  # full-width forms, half-width kana
    "\U00020000-\U0003134f"  # CJK extensions B-H
)
_EMOJI = "\U0001f000-\U0001faff\u2600-\u27bf\u2b00-\u2bff\U0001f1e6-\U0001f1ff"
_TOKEN_RE = re.compile(
    rf"(?P<cjk>[{_CJK}]+)"
    r"|(?P<word>[A-Za-z]+)"
    r"|(?P<num>[0-9]+)"
    r"|(?P<nl>\s*\n\s*)"
    r"|(?P<space>[ \t]+)"
    r"|(?P<punct>[!-/:-@\[-`{-~]+)"
    rf"|(?P<emoji>[{_EMOJI}])"
    r"|(?P<joiner>[\u200d\ufe0e\ufe0f\U000e0020-\U000e007f])"
    r"|(?P<letters>[^\W\d_]+)"
    r"|(?P<other>.)",
    re.DOTALL,
)


def _estimate(text: str) -> int:
    total = 0.0
    for m in _TOKEN_RE.finditer(text):
        kind = m.lastgroup
        n = m.end() - m.start()
        if kind == "cjk":
            total += n
        elif kind == "word":
            # Common words are one token with their leading space; long or rare ones split.
            total += 1.0 if n <= 6 else 1.0 + (n - 6) / 4.0
        elif kind == "num":
            total += math.ceil(n / 3)
        elif kind == "nl":
            total += 1
        elif kind == "space":
            if n > 1:
                total += 1 + (n - 1) // 8  # indentation runs merge into few tokens
        elif kind == "punct":
            total += (n + 1) // 2
        elif kind == "emoji":
            total += 2
        elif kind == "joiner":
            total += 1
        elif kind == "letters":
            # Other alphabets (Cyrillic, Greek, Arabic, Hebrew, Thai, Devanagari, accented Latin).
            total += max(1.0, n / 2.5)
        else:
            total += 1
    return math.ceil(total)


@lru_cache(maxsize=8192)
def _estimate_cached(text: str) -> int:
    return _estimate(text)


def estimate_text_tokens(text: str) -> int:
    """The CJK-aware estimate of the tokens in `text` (no tokenizer involved)."""
    if not text:
        return 0
    if len(text) < 64:
        return _estimate(text)
    return _estimate_cached(text)


# --------------------------------------------------------------------------------------------------
# tiktoken, when it loads offline
# --------------------------------------------------------------------------------------------------
_lock = threading.Lock()
_encodings: dict[str, Any] = {}  # encoding name → Encoding, or None after a failure
_tiktoken: Any = None
_tiktoken_failed = False

_O200K_PREFIXES = ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o", "gpt-oss", "codex")
_CL100K_PREFIXES = ("gpt-4", "gpt-3.5", "gpt-35", "text-embedding", "claude", "llama", "mistral", "mixtral")


def _model_name(model: str | ChatModel | None) -> str | None:
    if model is None:
        return None
    if isinstance(model, str):
        return model
    return getattr(model, "model_name", None) or None


def _encoding_name(model: str | None) -> str:
    if not model:
        return "o200k_base"
    name = _normalise(model)
    if name.startswith(_O200K_PREFIXES):
        return "o200k_base"
    if name.startswith(_CL100K_PREFIXES):
        return "cl100k_base"
    return "o200k_base"


def _load_encoding(name: str) -> Any:
    """The tiktoken encoding, or None. Each failure (no tiktoken, no network) is tried only once."""
    global _tiktoken, _tiktoken_failed
    if _tiktoken_failed:
        return None
    if name in _encodings:
        return _encodings[name]
    with _lock:
        if _tiktoken_failed:
            return None
        if name in _encodings:
            return _encodings[name]
        if os.environ.get("AGENTRT_TOKENIZER", "").lower() == "estimate":
            _tiktoken_failed = True
            return None
        if _tiktoken is None:
            try:
                # imported by name: tiktoken is optional and may have no stubs installed
                _tiktoken = importlib.import_module("tiktoken")
            except Exception:  # ImportError, or a broken install
                _tiktoken_failed = True
                return None
        try:
            encoding = _tiktoken.get_encoding(name)
        except Exception:  # the encoding file is not cached and cannot be downloaded
            encoding = None
        _encodings[name] = encoding
        return encoding


def tokenizer_for(model: str | ChatModel | None = None) -> str:
    """Which counter serves `model`: ``"tiktoken:<encoding>"`` or ``"estimate"``."""
    name = _encoding_name(_model_name(model))
    return f"tiktoken:{name}" if _load_encoding(name) is not None else "estimate"


def _reset_tokenizer_cache() -> None:
    """Forget what was learnt about tiktoken (tests)."""
    global _tiktoken, _tiktoken_failed
    with _lock:
        _encodings.clear()
        _tiktoken = None
        _tiktoken_failed = False
        _tiktoken_count.cache_clear()


def count_text_tokens(text: str, model: str | ChatModel | None = None) -> int:
    """Tokens in `text` for `model`: tiktoken when it is available offline, the estimate otherwise."""
    if not text:
        return 0
    name = _encoding_name(_model_name(model))
    encoding = _load_encoding(name)
    if encoding is not None:
        if len(text) < 64:
            return len(encoding.encode(text, disallowed_special=()))
        return _tiktoken_count(name, text)
    return estimate_text_tokens(text)


@lru_cache(maxsize=8192)
def _tiktoken_count(name: str, text: str) -> int:
    # Histories are re-counted every step; the cache makes that a lookup per unchanged text.
    return len(_encodings[name].encode(text, disallowed_special=()))


# --------------------------------------------------------------------------------------------------
# messages
# --------------------------------------------------------------------------------------------------
def _image_size(data: str) -> tuple[int, int] | None:
    """Width and height from the header of a base64 PNG, GIF, JPEG or WebP image."""
    try:
        head = base64.b64decode(data[:87380], validate=False)  # the first 64 KiB hold any header
    except (binascii.Error, ValueError):
        return None
    if head.startswith(b"\x89PNG\r\n\x1a\n") and len(head) >= 24:
        w, h = struct.unpack(">II", head[16:24])
        return int(w), int(h)
    if head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        w, h = struct.unpack("<HH", head[6:10])
        return int(w), int(h)
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP" and len(head) >= 30:
        chunk = head[12:16]
        if chunk == b"VP8X":
            w = 1 + int.from_bytes(head[24:27], "little")
            h = 1 + int.from_bytes(head[27:30], "little")
            return w, h
        if chunk == b"VP8 " and len(head) >= 30:
            w, h = struct.unpack("<HH", head[26:30])
            return int(w) & 0x3FFF, int(h) & 0x3FFF
        if chunk == b"VP8L" and len(head) >= 25:
            bits = int.from_bytes(head[21:25], "little")
            return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if head.startswith(b"\xff\xd8"):
        i = 2
        while i + 9 < len(head):
            if head[i] != 0xFF:
                i += 1
                continue
            marker = head[i + 1]
            if marker == 0xFF:  # fill byte
                i += 1
                continue
            if marker in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF):
                h, w = struct.unpack(">HH", head[i + 5 : i + 9])
                return int(w), int(h)
            if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
                i += 2
                continue
            (length,) = struct.unpack(">H", head[i + 2 : i + 4])
            i += 2 + int(length)
    return None


def image_tokens(width: int, height: int) -> int:
    """Tokens for an image of this size (OpenAI's high-detail tiling, clamped to 85..1600)."""
    if width <= 0 or height <= 0:
        return IMAGE_DEFAULT_TOKENS
    scale = min(1.0, 2048 / max(width, height))
    w, h = width * scale, height * scale
    scale = min(1.0, 768 / min(w, h))
    w, h = w * scale, h * scale
    tiles = math.ceil(w / 512) * math.ceil(h / 512)
    return max(IMAGE_MIN_TOKENS, min(IMAGE_MAX_TOKENS, 85 + 170 * tiles))


def _image_block_tokens(block: ImageBlock) -> int:
    source = block.source
    if isinstance(source, Base64Source):
        size = _image_size(source.data)
        if size is not None:
            return image_tokens(*size)
    return IMAGE_DEFAULT_TOKENS


def _block_tokens(block: ContentBlock, model: str | ChatModel | None) -> int:
    if isinstance(block, TextBlock):
        return count_text_tokens(block.text, model)
    if isinstance(block, ThinkingBlock):
        return count_text_tokens(block.thinking, model)
    if isinstance(block, ToolUseBlock):
        args = json.dumps(dict(block.input), ensure_ascii=False, separators=(",", ":"), default=str)
        return TOOL_CALL_OVERHEAD + count_text_tokens(block.name, model) + count_text_tokens(args, model)
    if isinstance(block, ToolResultBlock):
        if isinstance(block.output, str):
            return TOOL_RESULT_OVERHEAD + count_text_tokens(block.output, model)
        return TOOL_RESULT_OVERHEAD + sum(_block_tokens(b, model) for b in block.output)
    if isinstance(block, ImageBlock):
        return _image_block_tokens(block)
    if isinstance(block, AudioBlock):
        return AUDIO_TOKENS
    if isinstance(block, VideoBlock):
        return VIDEO_TOKENS
    return 0  # pragma: no cover - every content block type is handled above


def _message_tokens(msg: Msg, model: str | ChatModel | None) -> int:
    total = MESSAGE_OVERHEAD + sum(_block_tokens(b, model) for b in msg.content)
    if msg.name:
        total += 1 + count_text_tokens(msg.name, model)
    return total


def _tools_tokens(tools: Sequence[ToolSchema], model: str | ChatModel | None) -> int:
    if not tools:
        return 0
    total = TOOLS_OVERHEAD
    for schema in tools:
        params = json.dumps(dict(schema.parameters or {}), ensure_ascii=False, separators=(",", ":"), default=str)
        total += (
            TOOL_SCHEMA_OVERHEAD
            + count_text_tokens(schema.name, model)
            + count_text_tokens(schema.description, model)
            + count_text_tokens(params, model)
        )
    return total


def _raw_count(messages: Sequence[Msg], model: str | ChatModel | None, tools: Sequence[ToolSchema]) -> int:
    if not messages and not tools:
        return 0
    return REPLY_PRIMER + sum(_message_tokens(m, model) for m in messages) + _tools_tokens(tools, model)


def count_tokens(
    messages: Sequence[Msg],
    model: str | ChatModel | None = None,
    *,
    tools: Sequence[ToolSchema] = (),
    counter: TokenCounter | None = None,
) -> int:
    """Tokens a prompt of `messages` (and `tools`) costs `model`.

    Text is counted with tiktoken when it loads offline, else estimated; message framing, tool
    calls (name and JSON arguments), tool results, images (by their size when inline) and tool
    schemas are added. With a `counter`, the count is corrected by what it learnt from
    provider-reported usage for that model (see `TokenCounter`).
    """
    raw = _raw_count(messages, model, tools)
    if counter is None:
        return raw
    return counter.adjust(raw, model)


# --------------------------------------------------------------------------------------------------
# calibration
# --------------------------------------------------------------------------------------------------
class TokenCounter:
    """Counts prompt tokens and learns, per model, how far the count is from the provider's.

    After a model call, feed `calibrate` the count you made for that prompt (`estimate`, not
    `count`) and the ``usage.input_tokens`` the provider reported; an exponential moving average
    of the ratio (clamped, so one odd report cannot wreck it) then scales every later `count`
    for that model.

    Args:
        model: The default model for `count` and `calibrate`.
        alpha: Weight of each new observation in the moving average (the first one is taken whole).
        min_ratio: Lowest ratio kept.
        max_ratio: Highest ratio kept.
    """

    __slots__ = ("_lock", "_ratios", "_samples", "alpha", "max_ratio", "min_ratio", "model")

    def __init__(
        self,
        model: str | ChatModel | None = None,
        *,
        alpha: float = 0.3,
        min_ratio: float = 0.25,
        max_ratio: float = 4.0,
    ) -> None:
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], not {alpha!r}")
        self.model = model
        self.alpha = alpha
        self.min_ratio = min_ratio
        self.max_ratio = max_ratio
        self._ratios: dict[str, float] = {}
        self._samples: dict[str, int] = {}
        self._lock = threading.Lock()

    def _key(self, model: str | ChatModel | None) -> str:
        name = _model_name(model if model is not None else self.model)
        # Keyed by the bare model name: every provider serving a model shares its tokenizer.
        return _normalise(name) if name else ""

    def ratio(self, model: str | ChatModel | None = None) -> float:
        """The learnt reported/estimated ratio for the model (1.0 before any calibration)."""
        return self._ratios.get(self._key(model), 1.0)

    def samples(self, model: str | ChatModel | None = None) -> int:
        """How many reports have calibrated the model."""
        return self._samples.get(self._key(model), 0)

    def calibrate(self, estimated: int, reported: int, model: str | ChatModel | None = None) -> float:
        """Learn from one call: our uncalibrated `estimated` count against the provider's `reported` one.

        Returns the updated ratio. Reports with a zero or negative count are ignored.
        """
        key = self._key(model)
        if estimated <= 0 or reported <= 0:
            return self._ratios.get(key, 1.0)
        observed = min(self.max_ratio, max(self.min_ratio, reported / estimated))
        with self._lock:
            previous = self._ratios.get(key)
            ratio = observed if previous is None else previous + self.alpha * (observed - previous)
            self._ratios[key] = ratio
            self._samples[key] = self._samples.get(key, 0) + 1
        return ratio

    def adjust(self, raw: int, model: str | ChatModel | None = None) -> int:
        """Scale an uncalibrated count by the model's learnt ratio."""
        ratio = self._ratios.get(self._key(model))
        return raw if ratio is None else max(0, round(raw * ratio))

    def estimate(
        self, messages: Sequence[Msg], model: str | ChatModel | None = None, *, tools: Sequence[ToolSchema] = ()
    ) -> int:
        """The uncalibrated count (what `calibrate` wants as `estimated`)."""
        return _raw_count(messages, model if model is not None else self.model, tools)

    def count(
        self, messages: Sequence[Msg], model: str | ChatModel | None = None, *, tools: Sequence[ToolSchema] = ()
    ) -> int:
        """The calibrated count of a prompt."""
        ref = model if model is not None else self.model
        return self.adjust(_raw_count(messages, ref, tools), ref)

    def count_text(self, text: str, model: str | ChatModel | None = None) -> int:
        """The calibrated count of a text."""
        ref = model if model is not None else self.model
        return self.adjust(count_text_tokens(text, ref), ref)

    def __repr__(self) -> str:
        return f"TokenCounter(model={self._key(None)!r}, ratios={self._ratios!r})"


_counters: dict[str, TokenCounter] = {}
_counters_lock = threading.Lock()


def get_counter(model: str | ChatModel | None = None) -> TokenCounter:
    """The process-wide `TokenCounter` of a model (one per model id), created on first use."""
    key = TokenCounter()._key(model)
    counter = _counters.get(key)
    if counter is None:
        with _counters_lock:
            counter = _counters.get(key)
            if counter is None:
                counter = _counters[key] = TokenCounter(model)
    return counter


# --------------------------------------------------------------------------------------------------
# context windows
# --------------------------------------------------------------------------------------------------
_K = 1024
# Longest matching prefix wins. Values are the documented total context (input + output) in tokens.
_WINDOWS: dict[str, int] = {
    # OpenAI
    "gpt-5": 400_000,
    "gpt-4.1": 1_047_576,
    "gpt-4.5": 128_000,
    "gpt-4o": 128_000,
    "chatgpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4-1106": 128_000,
    "gpt-4-0125": 128_000,
    "gpt-4-vision": 128_000,
    "gpt-4-32k": 32_768,
    "gpt-4": 8_192,
    "gpt-3.5-turbo-instruct": 4_096,
    "gpt-3.5-turbo": 16_385,
    "gpt-35-turbo": 16_385,
    "gpt-oss": 131_072,
    "o1-mini": 128_000,
    "o1-preview": 128_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "codex-mini": 200_000,
    # Anthropic
    "claude-opus-4": 200_000,
    "claude-sonnet-4": 200_000,
    "claude-haiku-4": 200_000,
    "claude-4": 200_000,
    "claude-3-7": 200_000,
    "claude-3.7": 200_000,
    "claude-3-5": 200_000,
    "claude-3.5": 200_000,
    "claude-3": 200_000,
    "claude-2.1": 200_000,
    "claude-2": 100_000,
    "claude-instant": 100_000,
    # Google
    "gemini-2.5": 1_048_576,
    "gemini-2.0": 1_048_576,
    "gemini-1.5-pro": 2_097_152,
    "gemini-1.5-flash": 1_048_576,
    "gemini-1.5": 1_048_576,
    "gemini-1.0-pro": 32_760,
    "gemini-pro": 32_760,
    "gemma-3": 131_072,
    "gemma-2": 8_192,
    # DeepSeek (the API's deepseek-chat / -reasoner went from 64k to 128k with V3.1)
    "deepseek-chat": 131_072,
    "deepseek-reasoner": 131_072,
    "deepseek-v3": 131_072,
    "deepseek-r1": 131_072,
    "deepseek-coder": 131_072,
    # Qwen (DashScope names and open weights)
    "qwen-max-latest": 131_072,
    "qwen-max": 32_768,
    "qwen-plus": 131_072,
    "qwen-turbo": 1_000_000,
    "qwen-long": 10_000_000,
    "qwen3": 131_072,
    "qwen2.5": 131_072,
    "qwen2": 32_768,
    "qwq": 131_072,
    # Meta
    "llama3.3": 131_072,
    "llama-3.3": 131_072,
    "llama3.2": 131_072,
    "llama-3.2": 131_072,
    "llama3.1": 131_072,
    "llama-3.1": 131_072,
    "meta-llama-3.1": 131_072,
    "llama-4": 1_048_576,
    "llama3": 8_192,
    "llama-3": 8_192,
    "meta-llama-3": 8_192,
    "llama2": 4_096,
    "llama-2": 4_096,
    # others
    "mistral-large": 131_072,
    "mistral-small": 32_768,
    "mistral-nemo": 131_072,
    "codestral": 256_000,
    "mixtral-8x22b": 65_536,
    "mixtral": 32_768,
    "mistral": 32_768,
    "command-r": 128_000,
    "glm-4": 128_000,
    "moonshot-v1-8k": 8 * _K,
    "moonshot-v1-32k": 32 * _K,
    "moonshot-v1-128k": 128 * _K,
    "kimi-k2": 131_072,
    "phi-4": 16_384,
    "phi-3": 4_096,
}
_PREFIXES = sorted(_WINDOWS, key=len, reverse=True)
_PROVIDERS = frozenset(
    (
        "openai",
        "anthropic",
        "gemini",
        "google",
        "deepseek",
        "dashscope",
        "ollama",
        "vllm",
        "openrouter",
        "lmstudio",
        "azure",
        "bedrock",
        "vertex",
        "scripted",
        "groq",
        "together",
        "mistral",
    )
)


def _normalise(model: str) -> str:
    name = model.strip().lower()
    head, sep, tail = name.partition(":")
    if sep and head in _PROVIDERS:
        name = tail
    name = name.rsplit("/", 1)[-1]  # "meta-llama/Llama-3.1-8B", "anthropic/claude-3.5-sonnet"
    for vendor in ("us.anthropic.", "eu.anthropic.", "anthropic.", "meta.", "models/"):
        if name.startswith(vendor):
            name = name[len(vendor) :]
    return name


def context_window(model: str | ChatModel | None) -> int | None:
    """The context window (tokens) of a known model, by id or name; None when unknown.

    ``"openai:gpt-4o-mini"``, ``"gpt-4o-mini"``, ``"openrouter:anthropic/claude-3.5-sonnet"`` and
    ``"ollama:llama3.1:8b"`` all work: the provider prefix and organisation path are dropped,
    then the longest known prefix wins.
    """
    name = _model_name(model)
    if not name:
        return None
    normalised = _normalise(name)
    for prefix in _PREFIXES:
        if normalised.startswith(prefix):
            return _WINDOWS[prefix]
    return None


def _windows() -> Mapping[str, int]:
    """The table (read-only view, for docs and tests)."""
    return dict(_WINDOWS)
