"""AgentState and the state-store protocol every backend implements."""

from __future__ import annotations

import abc
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, Self, runtime_checkable

from agentrt.message import Msg
from agentrt.state.locks import LocalSessionLocks, SessionLockHold

__all__ = [
    "STATE_FIELDS",
    "AgentState",
    "AgentStateStore",
    "BaseStateStore",
    "SessionInfo",
]

SCHEMA_VERSION = 1

STATE_FIELDS = ("summary", "summary_index", "rules", "pending", "active_groups", "tool_state", "tasks", "metadata")
"""The fields of `AgentState` besides `messages` that `append` can change."""


@dataclass(slots=True, kw_only=True)
class AgentState:
    """Everything an agent remembers about one (user, session): its working copy during a call.

    `messages` is the full transcript (append-only; compression shrinks only the prompt view via
    `summary` and `summary_index`). `revision` increases with every write and guards against
    lost updates.
    """

    user_id: str = ""
    session_id: str = ""
    messages: list[Msg] = field(default_factory=list)
    summary: str | None = None
    """Running summary of `messages[:summary_index]`, used in the prompt in place of them."""
    summary_index: int = 0
    rules: Sequence[Any] = ()
    """Permission rules the user accepted in this session."""
    pending: Mapping[str, Any] | None = None
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

    def fields_dict(self) -> dict[str, Any]:
        """The non-message fields, by name."""
        return {name: getattr(self, name) for name in STATE_FIELDS}


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionInfo:
    """A session as listed by `list_sessions`."""

    user_id: str
    session_id: str
    message_count: int
    revision: int
    updated_at: float


@runtime_checkable
class AgentStateStore(Protocol):
    """Where agents keep `AgentState`, addressed by ``(user_id, session_id)``.

    Writes are optimistic: `append` and `save` take the revision the writer last saw and raise
    `StateConflictError` if the stored revision differs. A session that does not exist has
    revision 0. Implement this protocol (or subclass `BaseStateStore`) and run
    `agentrt.testing.check_state_store` against your backend.
    """

    async def load(self, user_id: str, session_id: str) -> AgentState | None:
        """The stored state, or None if the session does not exist."""
        ...

    async def append(
        self,
        user_id: str,
        session_id: str,
        messages: Sequence[Msg],
        *,
        fields: Mapping[str, Any] | None = None,
        expected_revision: int,
    ) -> int:
        """Append messages and set changed fields atomically; returns the new revision."""
        ...

    async def save(self, state: AgentState, *, expected_revision: int | None = None) -> int:
        """Replace the whole state (rarely needed); returns the new revision."""
        ...

    async def delete(self, user_id: str, session_id: str) -> bool:
        """Remove a session; True if it existed."""
        ...

    async def list_sessions(self, user_id: str) -> list[SessionInfo]:
        """The user's sessions, most recently updated first."""
        ...

    def session_lock(
        self, user_id: str, session_id: str, *, timeout: float | None = None
    ) -> AbstractAsyncContextManager[Any]:
        """An async context manager serialising calls on one session (across processes if shared)."""
        ...

    async def close(self) -> None:
        """Release what the store opened."""
        ...


class BaseStateStore(abc.ABC):
    """Shared behaviour for backends: context-manager lifecycle and in-process session locks.

    Backends shared between processes override `session_lock` with a distributed lock.
    """

    _locks: LocalSessionLocks | None = None

    @abc.abstractmethod
    async def load(self, user_id: str, session_id: str) -> AgentState | None:
        """The stored state, or None if the session does not exist."""

    @abc.abstractmethod
    async def append(
        self,
        user_id: str,
        session_id: str,
        messages: Sequence[Msg],
        *,
        fields: Mapping[str, Any] | None = None,
        expected_revision: int,
    ) -> int:
        """Append messages and set changed fields atomically; returns the new revision."""

    @abc.abstractmethod
    async def save(self, state: AgentState, *, expected_revision: int | None = None) -> int:
        """Replace the whole state; returns the new revision."""

    @abc.abstractmethod
    async def delete(self, user_id: str, session_id: str) -> bool:
        """Remove a session; True if it existed."""

    @abc.abstractmethod
    async def list_sessions(self, user_id: str) -> list[SessionInfo]:
        """The user's sessions, most recently updated first."""

    def session_lock(self, user_id: str, session_id: str, *, timeout: float | None = None) -> SessionLockHold:
        """In-process FIFO lock per session."""
        locks = self._locks
        if locks is None:
            locks = self._locks = LocalSessionLocks()
        return locks.hold((user_id, session_id), timeout=timeout)

    async def close(self) -> None:  # noqa: B027 - optional hook with a no-op default
        """Release what the store opened (idempotent)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
