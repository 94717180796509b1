"""InMemoryStateStore: a process-local store for tests, demos and single-process apps."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from agentrt import _json
from agentrt.errors import StateConflictError, UserError
from agentrt.message import Msg
from agentrt.state.base import (
    STATE_FIELDS,
    AgentState,
    BaseStateStore,
    SessionInfo,
    StateView,
    check_agent,
    check_expected_revision,
    check_idle_ttl,
    check_prune_limit,
    check_since_index,
    is_idle,
)
from agentrt.state.cache import SessionCache
from agentrt.state.pending import Pending
from agentrt.state.runs import (
    DEFAULT_MAX_RUNS,
    RunInfo,
    StoredRun,
    check_max_runs,
    check_reply_id,
    check_stored_run,
    retention_cutoff,
)

__all__ = ["InMemoryStateStore"]


class InMemoryStateStore(BaseStateStore):
    """Keeps sessions in a dict keyed by (agent, user, session). Appends are O(new messages); loads copy.

    Args:
        idle_ttl: Seconds a session may go unwritten before it reads as missing and is deleted
            (see `BaseStateStore.idle_ttl`); None keeps sessions until deleted.
    """

    supports_run_records = True

    def __init__(self, *, idle_ttl: float | None = None) -> None:
        self._sessions: dict[tuple[str, str, str], AgentState] = {}
        self._runs: dict[tuple[str, str, str], dict[str, tuple[float, str, str]]] = {}
        """Run records per session (`agentrt.state.runs`): they go with the session."""
        self._oldest_run: dict[tuple[str, str, str], float] = {}
        """The earliest start among each session's run records (eviction by age without a scan)."""
        # the sessions already are decoded objects in this process: a cache would only double them
        self._session_cache = SessionCache(max_bytes=0)
        self._idle_ttl = check_idle_ttl(idle_ttl)

    def _live(self, key: tuple[str, str, str]) -> AgentState | None:
        """The stored session, or None; an idle-expired one is deleted here."""
        stored = self._sessions.get(key)
        if stored is not None and self._idle_ttl is not None and is_idle(stored.updated_at, self._idle_cutoff()):
            del self._sessions[key]
            self._drop_runs(key)
            return None
        return stored

    async def load(self, user_id: str, session_id: str, *, agent: str = "") -> AgentState | None:
        """The stored state (a copy), or None."""
        stored = self._live((check_agent(agent), user_id, session_id))
        if stored is None:
            return None
        return _copy(stored)

    async def load_context(self, user_id: str, session_id: str, *, agent: str = "") -> AgentState | None:
        """`load`: the messages are objects already, with nothing to decode or skip."""
        return await self.load(user_id, session_id, agent=agent)

    async def load_view(
        self, user_id: str, session_id: str, *, agent: str = "", since_index: int = 0
    ) -> StateView | None:
        """The stored state with the messages from `since_index` on (copies only those), or None."""
        since_index = check_since_index(since_index)
        stored = self._live((check_agent(agent), user_id, session_id))
        if stored is None:
            return None
        offset = min(since_index, len(stored.messages))
        return StateView(_copy(stored, stored.messages[offset:]), offset)

    async def append(
        self,
        user_id: str,
        session_id: str,
        messages: Sequence[Msg],
        *,
        fields: Mapping[str, Any] | None = None,
        expected_revision: int,
        agent: str = "",
    ) -> int:
        """Append messages and set fields if `expected_revision` is current."""
        expected_revision = check_expected_revision(expected_revision)
        key = (check_agent(agent), user_id, session_id)
        if fields:
            unknown = [name for name in fields if name not in STATE_FIELDS]
            if unknown:
                raise UserError(f"unknown AgentState field {unknown[0]!r}; known: {', '.join(STATE_FIELDS)}")
        stored = self._sessions.get(key)
        current = 0 if stored is None else stored.revision
        if current != expected_revision:
            raise StateConflictError(
                f"session {session_id!r} of user {user_id!r} is at revision {current}, not {expected_revision}"
            )
        if stored is None:
            stored = self._sessions[key] = AgentState(agent=agent, user_id=user_id, session_id=session_id)
        stored.messages.extend(messages)
        if fields:
            for name, value in fields.items():
                setattr(stored, name, Pending.coerce(value) if name == "pending" else _copy_value(value))
        stored.revision = current + 1
        stored.updated_at = time.time()
        return stored.revision

    async def save(self, state: AgentState, *, expected_revision: int | None = None) -> int:
        """Replace the session's state."""
        expected_revision = check_expected_revision(expected_revision, optional=True)
        key = (check_agent(state.agent), state.user_id, state.session_id)
        stored = self._sessions.get(key)
        current = 0 if stored is None else stored.revision
        if expected_revision is not None and current != expected_revision:
            raise StateConflictError(
                f"session {state.session_id!r} of user {state.user_id!r} is at revision {current}, "
                f"not {expected_revision}"
            )
        new = _copy(state)
        new.revision = current + 1
        new.updated_at = time.time()
        self._sessions[key] = new
        return new.revision

    async def delete(self, user_id: str, session_id: str, *, agent: str = "") -> bool:
        """Remove the session (and its run records)."""
        key = (check_agent(agent), user_id, session_id)
        self._drop_runs(key)
        return self._sessions.pop(key, None) is not None

    def _drop_runs(self, key: tuple[str, str, str]) -> None:
        self._runs.pop(key, None)
        self._oldest_run.pop(key, None)

    # -- run records ----------------------------------------------------------------------------------

    async def save_run(
        self,
        user_id: str,
        session_id: str,
        run: StoredRun,
        *,
        agent: str = "",
        max_runs: int | None = DEFAULT_MAX_RUNS,
        older_than: float | None = None,
    ) -> bool:
        """Keep the record with its session (False if the session does not exist), evicting old ones.

        Kept as ``(started_at, summary JSON, record JSON)`` tuples of plain values: the garbage
        collector stops scanning them, however many records a process holds.
        """
        check_stored_run(run)
        max_runs = check_max_runs(max_runs)
        cutoff = retention_cutoff(older_than)
        key = (check_agent(agent), user_id, session_id)
        if self._live(key) is None:
            return False
        runs = self._runs.setdefault(key, {})
        started = float(run.started_at)
        runs[run.reply_id] = (started, _json.dumps(run.summary), run.body)
        oldest = self._oldest_run.get(key)
        oldest = started if oldest is None else min(oldest, started)
        self._oldest_run[key] = oldest
        if (max_runs is None or len(runs) <= max_runs) and (cutoff is None or oldest >= cutoff):
            return True  # nothing to evict: no sort
        others = sorted(((v[0], rid) for rid, v in runs.items() if rid != run.reply_id), reverse=True)
        kept = [rid for at, rid in others if cutoff is None or at >= cutoff]
        doomed = [rid for at, rid in others if cutoff is not None and at < cutoff]
        if max_runs is not None:
            doomed += kept[max_runs - 1 :]
        for gone in doomed:
            del runs[gone]
        self._oldest_run[key] = min(v[0] for v in runs.values())
        return True

    async def get_run(self, user_id: str, session_id: str, reply_id: str, *, agent: str = "") -> StoredRun | None:
        """The record stored under `reply_id`, or None."""
        key = (check_agent(agent), user_id, session_id)
        if self._live(key) is None:
            return None
        found = self._runs.get(key, {}).get(check_reply_id(reply_id))
        if found is None:
            return None
        started, summary, body = found
        return StoredRun(reply_id, started, _json.loads(summary), body)

    async def list_runs(
        self, user_id: str, session_id: str, *, agent: str = "", limit: int | None = None
    ) -> list[RunInfo]:
        """The session's runs, newest first."""
        limit = check_prune_limit(limit)
        key = (check_agent(agent), user_id, session_id)
        if self._live(key) is None:
            return []
        runs = sorted(((v[0], rid, v[1]) for rid, v in self._runs.get(key, {}).items()), reverse=True)
        return [RunInfo(rid, started, _json.loads(summary)) for started, rid, summary in runs[:limit]]

    async def list_sessions(self, user_id: str, *, agent: str | None = None) -> list[SessionInfo]:
        """The user's sessions (of every agent, or of `agent`), newest first."""
        if agent is not None:
            check_agent(agent)
        infos = [
            SessionInfo(
                agent=a,
                user_id=u,
                session_id=s,
                message_count=len(st.messages),
                revision=st.revision,
                updated_at=st.updated_at,
            )
            for (a, u, s), st in self._sessions.items()
            if u == user_id and (agent is None or a == agent)
        ]
        cutoff = self._idle_cutoff()
        if cutoff is not None and any(is_idle(info.updated_at, cutoff) for info in infos):
            await self._prune(cutoff, user_id=user_id, agent=agent, limit=None, dry_run=False, skip_locked=True)
            infos = [info for info in infos if not is_idle(info.updated_at, cutoff)]
        infos.sort(key=lambda i: i.updated_at, reverse=True)
        return infos

    async def _prune(
        self,
        cutoff: float | None,
        *,
        user_id: str | None,
        agent: str | None,
        limit: int | None,
        dry_run: bool,
        skip_locked: bool,
    ) -> int:
        """One pass over the dict, oldest first, with no await: atomic on the event loop."""
        held = self._locally_held() if skip_locked else frozenset()
        found = [
            (stored.updated_at, key)
            for key, stored in self._sessions.items()
            if (user_id is None or key[1] == user_id)
            and (agent is None or key[0] == agent)
            and is_idle(stored.updated_at, cutoff)
            and key not in held
        ]
        found.sort()
        if limit is not None:
            found = found[:limit]
        if not dry_run:
            for _, key in found:
                del self._sessions[key]
                self._drop_runs(key)
        return len(found)

    async def _legacy_sessions(self, user_id: str | None) -> list[tuple[str, str]]:
        return [(u, s) for (a, u, s) in self._sessions if a == "" and (user_id is None or u == user_id)]


def _copy_value(value: Any) -> Any:
    if isinstance(value, list):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    return value


def _copy(state: AgentState, messages: list[Msg] | None = None) -> AgentState:
    return replace(
        state,
        messages=list(state.messages) if messages is None else messages,
        rules=tuple(state.rules),
        active_groups=None if state.active_groups is None else list(state.active_groups),
        tool_state=dict(state.tool_state),
        tasks=tuple(state.tasks),
        metadata=dict(state.metadata),
    )
