"""The data of one stored session: `AgentState`, its listing (`SessionInfo`) and partial reads (`StateView`).

Below the store protocol (`agentrt.state.base`), so the codec and the session cache can use the
data without importing the stores.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from agentrt.message import Msg
from agentrt.state.pending import Pending

__all__ = [
    "LEGACY_AGENT",
    "SCHEMA_VERSION",
    "STATE_FIELDS",
    "UNLOADED",
    "AgentState",
    "CONTEXT_MIN_MESSAGES",
    "CallIds",
    "SessionInfo",
    "StateView",
    "Unloaded",
    "context_start",
    "with_placeholders",
]

LEGACY_AGENT = ""
"""The agent part of sessions written before sessions belonged to an agent (and of writes without one)."""

SCHEMA_VERSION = 1

STATE_FIELDS = ("summary", "summary_index", "rules", "pending", "active_groups", "tool_state", "tasks", "metadata")
"""The fields of `AgentState` besides `messages` that `append` can change."""


class Unloaded(Msg):
    """The stand-in for a message a context load did not read (see `AgentState.loaded_from`).

    It cannot be encoded, so no store ever writes one: a state holding stand-ins that reached a
    `save` fails loudly instead of replacing the transcript with placeholders.
    """

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        from agentrt.errors import StateStoreError

        raise StateStoreError("a message not loaded (a context load's placeholder) cannot be stored")

    def to_json(self) -> str:
        return str(self.to_dict())


UNLOADED = Unloaded(role="user", content=[], id="agentrt-unloaded", timestamp=0.0)
"""The one placeholder instance: ``messages[:loaded_from]`` of a context load are all this object."""


_NO_IDS: frozenset[str] = frozenset()


class CallIds:
    """The tool-call ids of an append-only transcript, indexed in O(new messages) per use.

    One index is shared by a session's cached transcript and the states loaded from it (see
    `SessionCache`), so a call on a long conversation does not scan it again. The index remembers
    how many messages it covered and the id of the last one: a list that does not extend what was
    indexed (another writer's transcript, a rewrite) is indexed afresh.
    """

    __slots__ = ("_count", "_ids", "_last")

    def __init__(self) -> None:
        self._ids: set[str] | None = None  # made on first use: most states never ask
        self._count = 0
        self._last: str | None = None

    def of(self, messages: Sequence[Msg]) -> AbstractSet[str]:
        """The ids of every tool call in `messages` (the caller must not change the set)."""
        count = len(messages)
        ids = self._ids
        if self._count > count or (self._count and messages[self._count - 1].id != self._last):
            ids = self._ids = None
            self._count = 0
        for msg in messages[self._count :]:
            if msg.role == "assistant":
                for call in msg.tool_calls:
                    if ids is None:
                        ids = self._ids = set()  # made at the first call: a transcript without any needs none
                    ids.add(call.id)
        self._count = count
        self._last = messages[-1].id if count else None
        return ids if ids is not None else _NO_IDS


@dataclass(slots=True, kw_only=True)
class AgentState:
    """Everything an agent remembers about one (agent, user, session): its working copy during a call.

    `messages` is the full transcript (append-only; compression shrinks only the prompt view via
    `summary` and `summary_index`). `revision` increases with every write and guards against
    lost updates. `agent` is the agent's `state_key` ("" for sessions of the legacy namespace).
    """

    agent: str = ""
    user_id: str = ""
    session_id: str = ""
    messages: list[Msg] = field(default_factory=list)
    summary: str | None = None
    """Running summary of `messages[:summary_index]`, used in the prompt in place of them."""
    summary_index: int = 0
    rules: Sequence[Any] = ()
    """Permission rules the user accepted in this session."""
    pending: Pending | None = None
    """Tool calls waiting for approval or external results, and the reply they belong to."""
    active_groups: list[str] | None = None
    """Tool groups active in this session (None: the toolkit's defaults)."""
    tool_state: dict[str, Any] = field(default_factory=dict)
    tasks: Sequence[Any] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    revision: int = 0
    version: int = SCHEMA_VERSION
    created_at: float = field(default_factory=time.time)
    updated_at: float = 0.0
    call_ids: CallIds | None = field(default=None, repr=False, compare=False)
    """The index of the transcript's tool-call ids (derived data, never stored; made on first use)."""
    loaded_from: int = field(default=0, repr=False, compare=False)
    """Messages before this index were not read: each is `UNLOADED` (a context load, see
    `BaseStateStore.load_context`); 0 for a state holding the whole transcript. Never stored."""

    def tool_call_ids(self) -> AbstractSet[str]:
        """The ids of every tool call in the transcript (through `call_ids`, made on first use)."""
        index = self.call_ids
        if index is None:
            index = self.call_ids = CallIds()
        return index.of(self.messages)

    def fields_dict(self) -> dict[str, Any]:
        """The non-message fields, by name."""
        return {name: getattr(self, name) for name in STATE_FIELDS}

    def reply_names(self) -> frozenset[str]:
        """The names on the transcript's assistant messages: the agents that replied in this session.

        Tells whose a session of the legacy namespace was (one agent's, or several agents' that
        shared it before sessions belonged to an agent); unnamed replies are not counted.
        """
        return frozenset(m.name for m in self.messages if m.role == "assistant" and m.name)


CONTEXT_MIN_MESSAGES = 64
"""A context load skips the summarised messages only when there are at least this many of them."""


def context_start(state: AgentState, message_count: int) -> int:
    """Where the messages a call's prompt needs begin: the end of the summary, or 0 for all of them.

    Below `CONTEXT_MIN_MESSAGES` summarised messages the whole transcript is read: decoding a few
    messages costs less than a second read.
    """
    if not state.summary:
        return 0
    start = min(max(int(state.summary_index), 0), message_count)
    return start if start >= CONTEXT_MIN_MESSAGES else 0


def with_placeholders(view: StateView) -> AgentState:
    """The state of `view` with its messages at their transcript positions, `UNLOADED` before them."""
    state = view.state
    if view.offset:
        state.messages = [UNLOADED] * view.offset + state.messages
        state.loaded_from = view.offset
    return state


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionInfo:
    """A session as listed by `list_sessions`."""

    agent: str = ""
    user_id: str
    session_id: str
    message_count: int
    revision: int
    updated_at: float


@dataclass(slots=True)
class StateView:
    """A session read from message `offset` on (`BaseStateStore.load_view`).

    `state` holds every non-message field and revision as `load` returns them, but its `messages`
    are only the transcript's ``messages[offset:]``; `message_count` is the length of the whole
    transcript. Never `save` such a state: it would drop the messages before `offset`.
    """

    state: AgentState
    offset: int

    @property
    def message_count(self) -> int:
        """Messages in the whole stored transcript."""
        return self.offset + len(self.state.messages)
