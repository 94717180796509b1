"""`ToolTraits`: what the permission engine reads of a tool (an `agentrt.tool.Tool` has all of it).

A structural type, so the permission layer sits below the tool layer: tools may use permission
helpers (built-in tools refuse protected paths) without an import cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agentrt.context import RuntimeContext

__all__ = ["ToolTraits"]


class ToolTraits(Protocol):
    """The attributes of a tool that permission decisions depend on."""

    @property
    def name(self) -> str: ...

    @property
    def parameters(self) -> Mapping[str, Any]: ...

    @property
    def read_only(self) -> bool: ...

    @property
    def destructive(self) -> bool: ...

    @property
    def requires_confirmation(self) -> bool: ...

    @property
    def check_permission(self) -> Callable[[Mapping[str, Any], RuntimeContext], Any] | None: ...

    @property
    def workspace(self) -> str | None: ...
