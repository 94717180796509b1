"""Permission modes, decisions and rules (the data; matching lives in `agentrt.permission.matching`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentrt.errors import UserError
from agentrt.permission.decision import Decision, PermissionDecision, PermissionMode
from agentrt.permission.matching import CallView, allow_covers, deny_matches

__all__ = ["Decision", "PermissionDecision", "PermissionMode", "PermissionRule"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PermissionRule:
    """Allow, ask or deny calls of tools matching `tool` (a glob) whose arguments match `args`.

    `args` maps an argument name to a glob (``"git status *"``, ``"/workspace/**"``) or, prefixed
    with ``re:``, a regular expression (full match, ``.`` matches newlines). Shell command arguments
    are matched on the parsed command, path arguments on the resolved path, other values in a
    canonical JSON form; docs/permissions.md has the exact semantics. A rule without `args` matches
    every call of the tool.
    """

    tool: str
    decision: Decision = Decision.ALLOW
    args: Mapping[str, str] | None = None
    source: str = "config"
    """Where the rule came from: ``config``, ``session`` (accepted by the user), ``suggested``."""

    def __post_init__(self) -> None:
        if not isinstance(self.tool, str) or not self.tool:
            raise UserError(f"PermissionRule.tool must be a non-empty glob, not {self.tool!r}")
        try:
            object.__setattr__(self, "decision", Decision(self.decision))
        except ValueError:
            raise UserError(
                f"PermissionRule.decision must be 'allow', 'ask' or 'deny', not {self.decision!r}"
            ) from None
        if self.args is not None:
            for key, pattern in self.args.items():
                if not isinstance(pattern, str):
                    raise UserError(f"PermissionRule.args[{key!r}] must be a glob or 're:' pattern, not {pattern!r}")
                if pattern.startswith("re:"):
                    try:
                        re.compile(pattern[3:], re.DOTALL)
                    except re.error as exc:
                        raise UserError(f"PermissionRule.args[{key!r}]: bad regular expression ({exc})") from None

    def matches(self, tool_name: str, args: Mapping[str, Any], *, workspace: str | None = None) -> bool:
        """Whether this rule applies to a call of `tool_name` with `args`.

        Relative paths (in the call and in the rule) are taken from `workspace` (default: the working
        directory). Allow rules need every part of a shell command to match; deny and ask rules need
        any part (see docs/permissions.md).
        """
        view = CallView.build(tool_name, args, workspace or _cwd())
        if self.decision is Decision.ALLOW:
            return allow_covers((self,), view)
        return deny_matches(self, view)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (stored in `AgentState.rules`)."""
        d: dict[str, Any] = {"tool": self.tool, "decision": self.decision.value, "source": self.source}
        if self.args is not None:
            d["args"] = dict(self.args)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PermissionRule:
        """Rebuild a rule from its JSON form."""
        return cls(
            tool=d["tool"],
            decision=Decision(d.get("decision", "allow")),
            args=d.get("args"),
            source=d.get("source", "config"),
        )

    @classmethod
    def coerce(cls, value: PermissionRule | Mapping[str, Any]) -> PermissionRule:
        """A rule from a rule or its JSON form."""
        return value if isinstance(value, PermissionRule) else cls.from_dict(value)


def _cwd() -> str:
    import os

    return os.getcwd()
