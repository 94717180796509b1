"""What a model call cost, in US dollars, from its token usage.

Prices come from a model's own `ModelPrice` (``model.price = ModelPrice(...)``, for private or
self-hosted models and negotiated rates) or else from pydantic's maintained price table, the
`genai-prices` package (``pip install 'agentrt[cost]'``, imported on first use). A model neither
knows has no cost: `cost_of` returns None, never a guess.

Token semantics follow `TokenUsage`: ``input_tokens`` is the whole prompt, cache reads and writes
included (each billed at its own rate, the input rate when the table has none); ``output_tokens``
includes reasoning tokens, which providers bill as output.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentrt.errors import InvalidTypeError, InvalidValueError

if TYPE_CHECKING:
    from agentrt.message import TokenUsage
    from agentrt.model.base import ChatModel

__all__ = ["ModelPrice", "cost_of", "price_known"]

logger = logging.getLogger("agentrt.model")

_REFRESH = 3600.0
"""Seconds a price found in the table is reused before it is looked up again (prices change by date)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelPrice:
    """A model's price in US dollars per million tokens.

    Args:
        input: Per million prompt tokens (not read from or written to a cache).
        output: Per million output tokens (reasoning tokens included).
        cache_read: Per million prompt tokens read from the provider's cache; the input price when None.
        cache_write: Per million prompt tokens written to the cache; the input price when None.
    """

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None

    def __post_init__(self) -> None:
        for name in ("input", "output", "cache_read", "cache_write"):
            value = getattr(self, name)
            if value is None and name in ("cache_read", "cache_write"):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidTypeError(f"ModelPrice.{name} must be a number (USD per million tokens), not {value!r}")
            if not math.isfinite(value) or value < 0:
                raise InvalidValueError(f"ModelPrice.{name} must be a finite number >= 0, not {value!r}")

    def cost(self, usage: TokenUsage) -> float:
        """The cost in US dollars of a call that spent `usage`."""
        read = usage.cache_read_tokens
        written = usage.cache_write_tokens
        uncached = max(0, usage.input_tokens - read - written)
        total = (
            uncached * self.input
            + read * (self.input if self.cache_read is None else self.cache_read)
            + written * (self.input if self.cache_write is None else self.cache_write)
            + usage.output_tokens * self.output
        )
        return total / 1_000_000


class _TableEntry:
    """A model found in the genai-prices table: its flat price (fast path) or the table's own calculator."""

    __slots__ = ("flat", "found_at", "info", "provider")

    def __init__(self, info: Any, provider: Any) -> None:
        self.info = info
        self.provider = provider
        self.found_at: float | None = None
        self.flat: ModelPrice | None = None

    def cost(self, usage: TokenUsage) -> float:
        now = time.monotonic()
        # Not ``now - 0.0 > _REFRESH``: the monotonic clock may start near zero (an hour after boot).
        if self.found_at is None or now - self.found_at > _REFRESH:
            self.found_at = now
            self.flat = _flat(self.info)
        if self.flat is not None:
            return self.flat.cost(usage)
        # Tiered prices (by prompt length): the table's own calculation (slower, exact).
        from genai_prices import Usage

        calc = self.info.calc_price(
            Usage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
            ),
            self.provider,
        )
        return float(calc.total_price)


def _flat(info: Any) -> ModelPrice | None:
    """The current price of a table model as a `ModelPrice`, or None when it is tiered."""
    from datetime import UTC, datetime

    price = info.get_prices(datetime.now(tz=UTC))
    values: dict[str, float | None] = {}
    for ours, theirs in (
        ("input", "input_mtok"),
        ("output", "output_mtok"),
        ("cache_read", "cache_read_mtok"),
        ("cache_write", "cache_write_mtok"),
    ):
        value = getattr(price, theirs, None)
        if value is None:
            values[ours] = None
            continue
        try:
            values[ours] = float(value)
        except (TypeError, ValueError):
            return None  # a tiered price
    if values["input"] is None or values["output"] is None:
        return None
    return ModelPrice(
        input=values["input"],
        output=values["output"],
        cache_read=values["cache_read"],
        cache_write=values["cache_write"],
    )


_table: dict[tuple[str, str], _TableEntry | None] = {}
_missing_package_logged = False


def _lookup_key(model: ChatModel) -> tuple[str, str] | None:
    """``(genai-prices provider id, model name)`` of `model`, or None when it names no priced provider.

    Adapters declare their provider's id in the table (`ChatModel.price_provider`); a model standing
    in for another (a `ScriptedModel` named ``"openai:gpt-4o"``) names it in full.
    """
    name = str(getattr(model, "model_name", "") or "")
    provider = getattr(model, "price_provider", None)
    if provider is None:
        head, sep, tail = name.partition(":")
        if not sep or not head or not tail:
            return None
        provider, name = head, tail
    return (str(provider), name) if name else None


def _entry(key: tuple[str, str]) -> _TableEntry | None:
    if key in _table:
        return _table[key]
    global _missing_package_logged
    try:
        from genai_prices import Usage, calc_price
    except ImportError:
        if not _missing_package_logged:
            _missing_package_logged = True
            logger.info("genai-prices is not installed (pip install 'agentrt[cost]'): model calls have no cost")
        _table[key] = None  # a failed import walks sys.path: not once per model call
        return None
    provider, name = key
    try:
        found = calc_price(Usage(input_tokens=0, output_tokens=0), model_ref=name, provider_id=provider)
    except LookupError:
        entry = None
    else:
        entry = _TableEntry(found.model, found.provider)
    _table[key] = entry
    return entry


def _source(model: ChatModel) -> ModelPrice | _TableEntry | None:
    price = getattr(model, "price", None)
    if isinstance(price, ModelPrice):
        return price
    key = _lookup_key(model)
    return _entry(key) if key is not None else None


def cost_of(model: ChatModel, usage: TokenUsage | None) -> float | None:
    """The cost in US dollars of one call of `model` that spent `usage`; None when unknown.

    Unknown: no usage reported, a model with no `price` that the genai-prices table does not list
    (or genai-prices is not installed).
    """
    if usage is None:
        return None
    source = _source(model)
    if source is None:
        return None
    try:
        return source.cost(usage)
    except Exception:  # a table entry we cannot compute: no cost rather than a wrong one
        logger.warning("cannot compute the cost of a call of model %r", getattr(model, "id", model), exc_info=True)
        return None


def price_known(model: ChatModel) -> bool:
    """Whether calls of `model` get a cost (its own `price`, or a genai-prices table entry)."""
    return _source(model) is not None
