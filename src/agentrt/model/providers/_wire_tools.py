"""`WireTools`: an adapter's wire form of the tool schemas, converted once per tool list."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from agentrt.model.base import ToolSchema

__all__ = ["WireTools"]

T = TypeVar("T")


class WireTools(Generic[T]):
    """The converted form of the last tool list, reused while the same schema objects come again.

    Agents send the same `ToolSchema` objects every step, so `convert` runs once per toolkit change.
    """

    __slots__ = ("_convert", "_last")

    def __init__(self, convert: Callable[[Sequence[ToolSchema]], T]) -> None:
        self._convert = convert
        self._last: tuple[tuple[ToolSchema, ...], T] | None = None

    def get(self, tools: Sequence[ToolSchema]) -> T:
        """The wire form of `tools`."""
        key = tuple(tools)
        last = self._last
        if last is not None and len(key) == len(last[0]) and all(a is b for a, b in zip(key, last[0], strict=True)):
            return last[1]
        wire = self._convert(key)
        self._last = (key, wire)
        return wire
