"""An agent's permission configuration (`PermissionContext`) and the user's answers (`ConfirmResult`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrt.errors import UserError
from agentrt.message import ToolUseBlock
from agentrt.permission.rules import PermissionMode, PermissionRule

__all__ = ["ConfirmResult", "PermissionContext"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PermissionContext:
    """The permission configuration of an agent: a mode, rules, and the workspace.

    `implicit` marks the context of an agent created without a ``permission`` argument
    (`PermissionContext.coerce(None)`): only destructive tools and tools that require confirmation
    ask there. Any context the application passes is explicit: in ``DEFAULT`` mode a tool that is not
    read-only asks unless a rule (or the tool's own check) allows it.
    """

    mode: PermissionMode = PermissionMode.DEFAULT
    rules: Sequence[PermissionRule] = ()
    workspace: str | None = None
    """Root directory that ``ACCEPT_EDITS`` trusts edit tools with; relative paths of tools without a
    workspace of their own are taken from it too."""
    implicit: bool = field(default=False, compare=True)
    """True only for the default context of an agent configured without permissions."""
    strict: bool = False
    """Refuse (`UserError` at agent construction) rules whose tool pattern matches no registered
    tool, instead of warning: a misspelt tool name would make a deny rule do nothing."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", PermissionMode(self.mode))
        object.__setattr__(self, "rules", tuple(PermissionRule.coerce(r) for r in self.rules))
        if self.implicit and (self.mode is not PermissionMode.DEFAULT or self.rules):
            # A mode or rules is a configuration: such a context is explicit.
            object.__setattr__(self, "implicit", False)

    @classmethod
    def coerce(cls, value: PermissionContext | PermissionMode | str | None) -> PermissionContext:
        """A context from a context, a mode (or its name), or None (the implicit default)."""
        if value is None:
            return _IMPLICIT_DEFAULT
        if isinstance(value, PermissionContext):
            return value
        try:
            return cls(mode=PermissionMode(value))
        except ValueError:
            raise UserError(
                f"permission must be a PermissionMode, a PermissionContext or None, not {value!r}"
            ) from None


_IMPLICIT_DEFAULT = PermissionContext(implicit=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfirmResult:
    """The user's answer to one pending tool call.

    `tool_call` is the pending `ToolUseBlock` (possibly with edited `input`) or just its id.
    `rules` are rules to remember for the rest of the session (e.g. one of the suggested rules).
    """

    confirmed: bool
    tool_call: ToolUseBlock | str
    rules: Sequence[PermissionRule] = ()
    reason: str = ""

    @property
    def tool_call_id(self) -> str:
        """The id of the answered call."""
        return self.tool_call if isinstance(self.tool_call, str) else self.tool_call.id

    @property
    def edited_input(self) -> Mapping[str, Any] | None:
        """The arguments the user changed the call to, if they sent a call."""
        return None if isinstance(self.tool_call, str) else self.tool_call.input

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        d: dict[str, Any] = {
            "confirmed": self.confirmed,
            "tool_call_id": self.tool_call_id,
            "rules": [PermissionRule.coerce(r).to_dict() for r in self.rules],
        }
        if not isinstance(self.tool_call, str):
            d["input"] = dict(self.tool_call.input)
            if self.tool_call.name:
                d["name"] = self.tool_call.name
        if self.reason:
            d["reason"] = self.reason
        return d

    @classmethod
    def coerce(cls, value: ConfirmResult | Mapping[str, Any]) -> ConfirmResult:
        """A result from a result or its JSON form (``tool_call_id``, ``confirmed``, ``input``?, ``rules``?)."""
        if isinstance(value, ConfirmResult):
            return value
        if not isinstance(value, Mapping):
            raise UserError(f"a confirm result must be a ConfirmResult or a dict, not {type(value).__name__!r}")
        if "confirmed" not in value or not isinstance(value["confirmed"], bool):
            raise UserError("a confirm result needs 'confirmed': true or false")
        raw_call = value.get("tool_call")
        call_id = value.get("tool_call_id")
        if isinstance(raw_call, Mapping):
            call_id = raw_call.get("id", call_id)
        elif isinstance(raw_call, str) and call_id is None:
            call_id = raw_call
        if not isinstance(call_id, str) or not call_id:
            raise UserError("a confirm result needs the 'tool_call_id' of the pending call it answers")
        edited = value.get("input")
        if edited is None and isinstance(raw_call, Mapping):
            edited = raw_call.get("input")
        if edited is not None and not isinstance(edited, Mapping):
            raise UserError(f"confirm result for {call_id!r}: 'input' must be an object")
        tool_call: ToolUseBlock | str = call_id
        if edited is not None:
            name = raw_call.get("name", "") if isinstance(raw_call, Mapping) else value.get("name", "")
            tool_call = ToolUseBlock(id=call_id, name=str(name), input=dict(edited))
        rules = [PermissionRule.coerce(r) for r in value.get("rules") or ()]
        return cls(confirmed=value["confirmed"], tool_call=tool_call, rules=rules, reason=str(value.get("reason", "")))
