"""The versioned JSON format of `AgentState`, shared by every store backend.

Format (version 1)::

    {
      "format": "agentrt.state", "version": 1,
      "agent": "...", "user_id": "...", "session_id": "...", "revision": 7,
      "created_at": 1764460800.0, "updated_at": 1764460900.0,
      "summary": null, "summary_index": 0,
      "rules": [...], "pending": null, "active_groups": null,
      "tool_state": {}, "tasks": [], "metadata": {},
      "messages": [<Msg.to_dict()>, ...]          # omitted by stores that keep messages apart
    }

Older documents are upgraded on read by the functions registered with `register_migration`.
``"agent"`` was added without a version bump: documents without it belong to the legacy agent ``""``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agentrt import _json
from agentrt.errors import StateStoreError, UserError
from agentrt.message import Msg
from agentrt.state.pending import Pending
from agentrt.state.session import SCHEMA_VERSION, STATE_FIELDS, AgentState

__all__ = [
    "FORMAT",
    "decode_message",
    "decode_state",
    "encode_fields",
    "encode_fields_json",
    "encode_message",
    "encode_state",
    "register_migration",
]

FORMAT = "agentrt.state"
Migration = Callable[[dict[str, Any]], dict[str, Any]]
_migrations: dict[int, Migration] = {}


def register_migration(from_version: int, upgrade: Migration) -> None:
    """Register `upgrade`, turning a version-`from_version` document into version ``from_version + 1``."""
    _migrations[from_version] = upgrade


def encode_message(msg: Msg) -> str:
    """One message as JSON text."""
    return msg.to_json()


def decode_message(data: str | bytes | Mapping[str, Any]) -> Msg:
    """One message from JSON text or a parsed dict."""
    try:
        return Msg.from_json(data)
    except (ValueError, KeyError, TypeError) as exc:
        raise StateStoreError(f"stored message is corrupt: {exc}") from exc


def encode_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """JSON-native values of changed `AgentState` fields (rules and pending may hold dataclasses)."""
    return {name: _json.jsonable(_field_value(name, value)) for name, value in fields.items()}


def encode_fields_json(fields: Mapping[str, Any]) -> dict[str, str]:
    """`encode_fields` with each value as its JSON text, encoded in one pass (no Python walk first)."""
    return {name: _json.dumps_jsonable_bytes(_field_value(name, value)).decode() for name, value in fields.items()}


def _field_value(name: str, value: Any) -> Any:
    """The value of field `name` to encode (a `Pending` as `Pending.to_dict`); `UserError` for an unknown field."""
    if name not in STATE_FIELDS:
        raise UserError(f"unknown AgentState field {name!r}; known: {', '.join(STATE_FIELDS)}")
    if name == "pending":  # a `Pending` (or its JSON form) is stored as `Pending.to_dict`
        pending = Pending.coerce(value)
        return None if pending is None else pending.to_dict()
    return value


def encode_state(state: AgentState, *, include_messages: bool = True) -> dict[str, Any]:
    """The whole state as a JSON-ready dict."""
    doc: dict[str, Any] = {
        "format": FORMAT,
        "version": SCHEMA_VERSION,
        "agent": state.agent,
        "user_id": state.user_id,
        "session_id": state.session_id,
        "revision": state.revision,
        "created_at": state.created_at,
        "updated_at": state.updated_at,
        **encode_fields(state.fields_dict()),
    }
    if include_messages:
        doc["messages"] = [m.to_dict() for m in state.messages]
    return doc


def decode_state(doc: Mapping[str, Any], messages: Iterable[Msg] | None = None) -> AgentState:
    """An `AgentState` from `encode_state` output (upgraded first if it is older)."""
    data = dict(doc)
    version = int(data.get("version", 1))
    if version > SCHEMA_VERSION:
        raise StateStoreError(
            f"stored state has format version {version}, newer than this agentrt understands ({SCHEMA_VERSION}); "
            "upgrade agentrt"
        )
    while version < SCHEMA_VERSION:
        upgrade = _migrations.get(version)
        if upgrade is None:
            raise StateStoreError(f"no migration registered from state format version {version}")
        data = upgrade(data)
        version += 1
    if messages is None:
        messages = [decode_message(m) for m in data.get("messages") or ()]
    return AgentState(
        agent=str(data.get("agent") or ""),
        user_id=str(data.get("user_id", "")),
        session_id=str(data.get("session_id", "")),
        messages=list(messages),
        summary=data.get("summary"),
        summary_index=int(data.get("summary_index") or 0),
        rules=list(data.get("rules") or ()),
        pending=_decode_pending(data.get("pending")),
        active_groups=data.get("active_groups"),
        tool_state=dict(data.get("tool_state") or {}),
        tasks=list(data.get("tasks") or ()),
        metadata=dict(data.get("metadata") or {}),
        revision=int(data.get("revision", 0)),
        created_at=float(data.get("created_at") or 0.0),
        updated_at=float(data.get("updated_at") or 0.0),
    )


def _decode_pending(value: Any) -> Pending | None:
    try:
        return Pending.coerce(value)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StateStoreError(f"stored pending tool calls are corrupt: {exc!r}") from exc
