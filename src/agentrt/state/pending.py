"""What a paused session waits for: `Pending` (``AgentState.pending``) and its `PendingCall`s.

The stored JSON form (kept as earlier versions wrote it, so old sessions load)::

    {"reply_id": "...", "assistant_id": "...",
     "calls": [{"id", "name", "input", "kind": "confirm" | "external" | "subagent", "reason",
                "suggested_rules": [<rule dict>], "children"?: [<call>], "state"?: ...}],
     "notes"?: [<Msg.to_dict()>]}

``children`` and ``state`` are written for subagent entries only: the calls the subagent waits
for, and what its tool needs to resume.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentrt import _json
from agentrt.message import Msg

__all__ = [
    "CONFIRM",
    "EXTERNAL",
    "META_PENDING",
    "SUBAGENT",
    "Pending",
    "PendingCall",
    "flatten_pending",
]

CONFIRM = "confirm"
"""`PendingCall.kind` of a call waiting for the user's approval."""
EXTERNAL = "external"
"""`PendingCall.kind` of a call the caller runs and answers with its result."""
SUBAGENT = "subagent"
"""`PendingCall.kind` of a tool call suspended on its subagent's pending calls (`children`)."""
META_PENDING = "pending_tool_calls"
"""`Msg.metadata` key of a pause reply: the calls the caller must answer (`PendingCall.to_dict` form)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingCall:
    """One tool call waiting in a session; a subagent entry holds its subagent's calls in `children`."""

    id: str
    name: str
    input: Mapping[str, Any] = field(default_factory=dict)
    kind: str = CONFIRM
    reason: str = ""
    suggested_rules: tuple[Mapping[str, Any], ...] = ()
    """Rules (as dicts: `PermissionRule.to_dict`) the user may accept with an approval."""
    children: tuple[PendingCall, ...] = ()
    state: Any = None
    """What a suspended tool needs to resume (subagent entries)."""

    def to_dict(self) -> dict[str, Any]:
        """The stored JSON form."""
        out: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "input": dict(self.input),
            "kind": self.kind,
            "reason": self.reason,
            "suggested_rules": [dict(r) for r in self.suggested_rules],
        }
        if self.kind == SUBAGENT:
            out["children"] = [c.to_dict() for c in self.children]
            out["state"] = self.state
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PendingCall:
        """A call from its JSON form (missing fields take their defaults)."""
        return cls(
            id=str(data["id"]),
            name=str(data["name"]),
            input=dict(data.get("input") or {}),
            kind=str(data.get("kind") or CONFIRM),
            reason=str(data.get("reason") or ""),
            suggested_rules=tuple(
                dict(r) if isinstance(r, Mapping) else _json.jsonable(r) for r in data.get("suggested_rules") or ()
            ),
            children=tuple(cls.from_dict(c) for c in data.get("children") or ()),
            state=data.get("state"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Pending:
    """The tool calls a paused session waits for, the reply that paused and the turn they belong to.

    `notes` are messages that came with answers while other calls still waited: they join the
    history once the turn is complete.
    """

    reply_id: str = ""
    assistant_id: str = ""
    calls: tuple[PendingCall, ...] = ()
    notes: tuple[Msg, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The stored JSON form."""
        out: dict[str, Any] = {
            "reply_id": self.reply_id,
            "assistant_id": self.assistant_id,
            "calls": [c.to_dict() for c in self.calls],
        }
        if self.notes:
            out["notes"] = [n.to_dict() for n in self.notes]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Pending:
        """`Pending` from its JSON form."""
        return cls(
            reply_id=str(data.get("reply_id") or ""),
            assistant_id=str(data.get("assistant_id") or ""),
            calls=tuple(PendingCall.from_dict(c) for c in data.get("calls") or ()),
            notes=tuple(Msg.from_json(n) for n in data.get("notes") or ()),
        )

    @classmethod
    def coerce(cls, value: Pending | Mapping[str, Any] | None) -> Pending | None:
        """`value` as a `Pending` (its JSON form is converted; None stays None)."""
        if value is None or isinstance(value, Pending):
            return value
        return cls.from_dict(value)


def flatten_pending(pending: Pending | Iterable[PendingCall] | None) -> list[PendingCall]:
    """The calls the caller must answer: subagent entries are replaced by their children."""
    if pending is None:
        return []
    out: list[PendingCall] = []
    for call in pending.calls if isinstance(pending, Pending) else pending:
        if call.kind == SUBAGENT:
            out.extend(flatten_pending(call.children))
        else:
            out.append(call)
    return out
