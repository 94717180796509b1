"""What the permission layer decides: the modes, the three outcomes and `PermissionDecision`.

The lowest module of `agentrt.permission`: paths, matching and rules build on it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentrt.permission.rules import PermissionRule

__all__ = ["Decision", "PermissionDecision", "PermissionMode"]


class PermissionMode(enum.StrEnum):
    """How tool calls are gated when no rule decides."""

    DEFAULT = "default"
    ACCEPT_EDITS = "accept_edits"
    EXPLORE = "explore"
    BYPASS = "bypass"
    DONT_ASK = "dont_ask"
    PLAN = "plan"
    """Plan before acting: read-only tools and the plan tools run, everything else is denied."""


class Decision(enum.StrEnum):
    """The outcome for one tool call."""

    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


@dataclass(frozen=True, slots=True, kw_only=True)
class PermissionDecision:
    """The engine's answer for one call, with the reason and (for ASK) suggested rules."""

    decision: Decision
    reason: str = ""
    suggested_rules: list[PermissionRule] = field(default_factory=list)

    @classmethod
    def allow(cls, reason: str = "") -> PermissionDecision:
        """Allow the call."""
        return cls(decision=Decision.ALLOW, reason=reason)

    @classmethod
    def ask(cls, reason: str = "") -> PermissionDecision:
        """Ask the user first."""
        return cls(decision=Decision.ASK, reason=reason)

    @classmethod
    def deny(cls, reason: str = "") -> PermissionDecision:
        """Refuse the call."""
        return cls(decision=Decision.DENY, reason=reason)
