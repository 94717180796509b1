"""AgentState and the state-store protocol every backend implements."""

from __future__ import annotations

import abc
import asyncio
import logging
import math
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from typing import Any, Protocol, Self, overload, runtime_checkable

from agentrt.errors import InvalidTypeError, InvalidValueError, StateConflictError, UserError
from agentrt.message import Msg
from agentrt.state.cache import SessionCache
from agentrt.state.locks import LocalSessionLocks, SessionLockHold
from agentrt.state.runs import DEFAULT_MAX_RUNS, RunInfo, RunRecordStore, StoredRun, check_stored_run
from agentrt.state.session import (
    LEGACY_AGENT,
    STATE_FIELDS,
    AgentState,
    SessionInfo,
    StateView,
    context_start,
    with_placeholders,
)

__all__ = [
    "LEGACY_AGENT",
    "MAX_REVISION",
    "STATE_FIELDS",
    "AgentState",
    "AgentStateStore",
    "BaseStateStore",
    "RunInfo",
    "RunRecordStore",
    "SessionInfo",
    "StateView",
    "StoredRun",
    "check_agent",
    "check_expected_revision",
    "check_idle_ttl",
    "check_older_than",
    "check_prune_limit",
    "check_since_index",
    "is_idle",
    "legacy_target",
]

logger = logging.getLogger("agentrt.state")


@runtime_checkable
class AgentStateStore(Protocol):
    """Where agents keep `AgentState`, addressed by ``(agent, user_id, session_id)``.

    `agent` is the agent's `state_key` (its name by default), so two agents on one store never
    share a session; ``""`` is the legacy namespace (sessions written before sessions had an agent,
    and writes that name none). Writes are optimistic: `append` and `save` take the revision the
    writer last saw (an ``int`` from 0 below `MAX_REVISION`; anything else raises `InvalidTypeError` /
    `InvalidValueError` before anything is written) and raise `StateConflictError` if the stored revision differs. A
    session that does not exist has revision 0. Implement this protocol (or subclass
    `BaseStateStore`) and run `agentrt.testing.check_state_store` against your backend.

    A store may also keep the run records of its sessions (`agentrt.state.runs.RunRecordStore`:
    ``save_run``, ``get_run``, ``list_runs``, with ``supports_run_records = True``); every built-in
    store does, and deletes a session's records with the session.
    """

    async def load(self, user_id: str, session_id: str, *, agent: str = "") -> AgentState | None:
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
        agent: str = "",
    ) -> int:
        """Append messages and set changed fields atomically; returns the new revision."""
        ...

    async def save(self, state: AgentState, *, expected_revision: int | None = None) -> int:
        """Replace the whole state of ``(state.agent, state.user_id, state.session_id)``; the new revision.

        ``expected_revision=None`` writes whatever the stored revision is.
        """
        ...

    async def delete(self, user_id: str, session_id: str, *, agent: str = "") -> bool:
        """Remove a session; True if it existed."""
        ...

    async def list_sessions(self, user_id: str, *, agent: str | None = None) -> list[SessionInfo]:
        """The user's sessions, most recently updated first: of every agent (None) or of one."""
        ...

    def session_lock(
        self, user_id: str, session_id: str, *, timeout: float | None = None, agent: str = ""
    ) -> AbstractAsyncContextManager[Any]:
        """An async context manager serialising calls on one session (across processes if shared)."""
        ...

    async def close(self) -> None:
        """Release what the store opened."""
        ...


class BaseStateStore(abc.ABC):
    """Shared behaviour for backends: lifecycle, in-process session locks and legacy migration.

    Backends shared between processes override `session_lock` with a distributed lock. Backends
    with a legacy layout override `has_legacy_sessions` and `_legacy_sessions` (and may move
    sessions natively by overriding `_move_legacy`).
    """

    _locks: LocalSessionLocks | None = None
    _session_cache: SessionCache | None = None

    @abc.abstractmethod
    async def load(self, user_id: str, session_id: str, *, agent: str = "") -> AgentState | None:
        """The stored state, or None if the session does not exist."""

    async def load_view(
        self, user_id: str, session_id: str, *, agent: str = "", since_index: int = 0
    ) -> StateView | None:
        """The session with only the messages from `since_index` on, or None if it does not exist.

        Costs O(fields + messages read) in the stores that implement it natively (memory, SQLite,
        SQL, Redis); this generic version loads everything and slices. A `since_index` past the end
        gives no messages and ``offset == message_count``.
        """
        since_index = check_since_index(since_index)
        state = await self.load(user_id, session_id, agent=agent)
        if state is None:
            return None
        offset = min(since_index, len(state.messages))
        if offset:
            state.messages = state.messages[offset:]
        return StateView(state, offset)

    async def load_context(self, user_id: str, session_id: str, *, agent: str = "") -> AgentState | None:
        """The session as a call's prompt needs it, or None: the summarised messages are not read.

        Every field is loaded; of the messages only those from ``summary_index`` on (what the
        prompt shows after the summary) are decoded, and each one before is the `UNLOADED`
        placeholder, so indexes and ``len(messages)`` stay those of the transcript and
        ``state.loaded_from`` tells where the real messages begin. A session without a summary
        (or with fewer than `CONTEXT_MIN_MESSAGES` summarised) is loaded whole. Such a state is
        for a call's working copy only: placeholders cannot be encoded, so a `save` of it fails.

        This generic version reads twice (the fields, then the messages from the summary's end);
        a store may override it with one read.
        """
        head = await self.load_view(user_id, session_id, agent=agent, since_index=MAX_REVISION)
        if head is None:
            return None
        start = context_start(head.state, head.message_count)
        if start == 0:
            return await self.load(user_id, session_id, agent=agent)
        view = await self.load_view(user_id, session_id, agent=agent, since_index=start)
        if view is None:
            return None
        if view.offset != start or context_start(view.state, view.message_count) < start:
            # rewritten in between (a save with an earlier summary): read it all
            return await self.load(user_id, session_id, agent=agent)
        return with_placeholders(view)

    @property
    def session_cache(self) -> SessionCache:
        """This store's per-process cache of decoded transcripts (used by agents' `Run.load`).

        Set ``store.session_cache.max_bytes`` to change its budget (0 disables it).
        """
        cache = self._session_cache
        if cache is None:
            cache = self._session_cache = SessionCache()
        return cache

    @abc.abstractmethod
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
        """Append messages and set changed fields atomically; returns the new revision."""

    @abc.abstractmethod
    async def save(self, state: AgentState, *, expected_revision: int | None = None) -> int:
        """Replace the whole state of ``(state.agent, state.user_id, state.session_id)``; the new revision."""

    @abc.abstractmethod
    async def delete(self, user_id: str, session_id: str, *, agent: str = "") -> bool:
        """Remove a session; True if it existed."""

    @abc.abstractmethod
    async def list_sessions(self, user_id: str, *, agent: str | None = None) -> list[SessionInfo]:
        """The user's sessions, most recently updated first: of every agent (None) or of one."""

    def session_lock(
        self, user_id: str, session_id: str, *, timeout: float | None = None, agent: str = ""
    ) -> SessionLockHold:
        """In-process FIFO lock per (agent, user, session)."""
        locks = self._locks
        if locks is None:
            locks = self._locks = LocalSessionLocks()
        return locks.hold((check_agent(agent), user_id, session_id), timeout=timeout)

    # -- run records (`agentrt.state.runs`) ----------------------------------------------------------

    supports_run_records: bool = False
    """Whether the store keeps run records (every built-in store does; this generic base keeps none)."""

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
        """Store the record of `run.reply_id` with its session (see `RunRecordStore.save_run`).

        This generic version keeps nothing and returns False: backends override it.
        """
        check_stored_run(run)
        return False

    async def get_run(self, user_id: str, session_id: str, reply_id: str, *, agent: str = "") -> StoredRun | None:
        """The record stored under `reply_id`, or None (this generic version keeps none)."""
        return None

    async def list_runs(
        self, user_id: str, session_id: str, *, agent: str = "", limit: int | None = None
    ) -> list[RunInfo]:
        """The session's runs, newest first (this generic version keeps none)."""
        return []

    # -- retention --------------------------------------------------------------------------------

    _idle_ttl: float | None = None

    @property
    def idle_ttl(self) -> float | None:
        """Seconds a session may go unwritten before it reads as missing (None: sessions are kept forever).

        Set with the store's ``idle_ttl=`` option. A session last written (`updated_at`) more than
        `idle_ttl` seconds ago is not returned by `load`, `load_view`, `load_context` or
        `list_sessions`, and is deleted when one of them comes across it (a `load` deletes it even
        while its lock is held: the holder may be about to start it again at revision 0; a listing
        leaves a locked one to a later access) and by `prune`. `RedisStateStore` expires sessions
        natively instead, counting loads as use too.
        """
        return self._idle_ttl

    def _idle_cutoff(self) -> float | None:
        """Sessions last written before this time are expired; None without `idle_ttl`."""
        ttl = self._idle_ttl
        return None if ttl is None else time.time() - ttl

    async def prune(
        self,
        older_than: float,
        *,
        user_id: str | None = None,
        agent: str | None = None,
        limit: int | None = None,
        dry_run: bool = False,
    ) -> int:
        """Delete the sessions last written more than `older_than` seconds ago; how many went.

        Each session goes whole (its messages, pending calls and index entries with it). Only the
        sessions of `user_id` and / or of `agent` (its state_key; ``""`` for the legacy namespace)
        when given, at most `limit` of them (oldest first where the store can sort). A session
        whose lock is held (a call running on it) is skipped, as far as the store can tell
        cheaply: every store sees the locks held in its own process; `SqlStateStore` and
        `RedisStateStore` see every process's. A session written while the prune runs is kept.
        With `dry_run`, nothing is deleted: the count is of the sessions that would go.

        Raises:
            InvalidTypeError: `older_than` is not a number, `user_id` not a str, `limit` not an int.
            InvalidValueError: `older_than` is negative or not finite, `limit` is negative.
        """
        older_than = check_older_than(older_than)
        if user_id is not None and not isinstance(user_id, str):
            raise InvalidTypeError(f"user_id must be a str or None, not {type(user_id).__name__}")
        if agent is not None:
            check_agent(agent)
        limit = check_prune_limit(limit)
        if limit == 0:
            return 0
        cutoff = time.time() - older_than
        return await self._prune(
            cutoff, user_id=user_id, agent=agent, limit=limit, dry_run=bool(dry_run), skip_locked=True
        )

    async def delete_user(self, user_id: str) -> int:
        """Delete every session of `user_id`, of every agent (locked ones too); how many there were.

        For data-protection requests: nothing of the user's sessions is left (messages, fields,
        index entries). Idempotent: a second call returns 0. See `agentrt.retention.forget_user`
        for a user's long-term memory and knowledge too.
        """
        if not isinstance(user_id, str):
            raise InvalidTypeError(f"user_id must be a str, not {type(user_id).__name__}")
        return await self._prune(None, user_id=user_id, agent=None, limit=None, dry_run=False, skip_locked=False)

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
        """Delete (or with `dry_run` count) the matching sessions written before `cutoff` (None: all).

        Backends override this with a native version. This generic one works one user at a time
        (`list_sessions`, then `delete` of each match: a session written in between is deleted
        anyway) and skips the sessions locked in this process when `skip_locked`.
        """
        if user_id is None:
            raise UserError(f"{type(self).__name__} can prune only one user's sessions at a time: pass user_id")
        held = self._locally_held() if skip_locked else frozenset()
        count = 0
        for info in await self.list_sessions(user_id, agent=agent):
            if limit is not None and count >= limit:
                break
            if not is_idle(info.updated_at, cutoff) or (info.agent, info.user_id, info.session_id) in held:
                continue
            if dry_run or await self.delete(user_id, info.session_id, agent=info.agent):
                count += 1
        return count

    def _locally_held(self) -> frozenset[Any]:
        """The ``(agent, user_id, session_id)`` of the sessions whose in-process lock is held now."""
        locks = self._locks
        if locks is None:
            return frozenset()
        # LocalSessionLocks keeps one entry per (event loop, key) while anyone holds or waits
        return frozenset(key for (_, key), entry in locks._entries.items() if entry.lock.locked())

    # -- the legacy namespace ---------------------------------------------------------------------

    @property
    def has_legacy_sessions(self) -> bool:
        """Whether the store held sessions of the legacy (agent ``""``) namespace when it was opened.

        Checked once, during the store's first operation (so it is known after the first `load`),
        and again after `migrate_legacy`. False for stores without a legacy layout.
        """
        return False

    async def _legacy_sessions(self, user_id: str | None) -> list[tuple[str, str]]:
        """``(user_id, session_id)`` of the legacy sessions (of one user, or of all when None)."""
        return []

    async def migrate_legacy(
        self,
        agent: str,
        *,
        user_id: str | None = None,
        all_unprefixed: bool = False,
        prefix: str | None = None,
    ) -> int:
        """Move legacy sessions (agent ``""``) that belong to `agent` under `agent`; the number moved.

        A legacy session ``"<agent>:<sid>"`` (how the agentrt server named its sessions; the name
        before the ``:`` is `prefix` when given, e.g. the name an agent was served under) becomes
        ``(agent, user, "<sid>")``. With `all_unprefixed`, legacy sessions whose id holds no ``:``
        (written by programs outside the server) move too, keeping their id; ids holding a ``:``
        may be another agent's and stay. A session whose new address is already taken stays where
        it is (nothing is overwritten). Only one user's sessions with `user_id`.
        """
        agent = check_agent(agent)
        if not agent:
            raise InvalidValueError("migrate_legacy needs the name of the agent the sessions move to")
        owner = agent if prefix is None else check_agent(prefix)
        moved = 0
        for user, session_id in await self._legacy_sessions(user_id):
            target = legacy_target(owner, session_id, all_unprefixed=all_unprefixed)
            if target is None:
                continue
            outcome = await self._move_legacy(user, session_id, agent, target)
            if outcome:
                moved += 1
            elif outcome is False:
                logger.info(
                    "legacy session %r of user %r not moved: agent %r already has a session %r",
                    session_id,
                    user,
                    agent,
                    target,
                )
        await self._recheck_legacy()
        return moved

    async def _move_legacy(self, user_id: str, session_id: str, agent: str, target: str) -> bool | None:
        """Move one legacy session to ``(agent, user_id, target)``.

        True when moved, False when the new address is taken, None when the session is gone
        (moved or deleted meanwhile, e.g. by another process). This generic version copies (`save`
        at revision 0, so an existing session is never overwritten) and then deletes the original,
        both under the original's session lock.
        """
        async with self.session_lock(user_id, session_id):
            state = await self.load(user_id, session_id)
            if state is None:
                return None
            try:
                await self.save(replace(state, agent=agent, session_id=target), expected_revision=0)
            except StateConflictError:
                return False
            if self.supports_run_records:  # the run records move with their session
                for info in reversed(await self.list_runs(user_id, session_id)):
                    stored = await self.get_run(user_id, session_id, info.reply_id)
                    if stored is not None:
                        await self.save_run(user_id, target, stored, agent=agent, max_runs=None)
            await self.delete(user_id, session_id)
        return True

    async def _recheck_legacy(self) -> None:  # noqa: B027 - optional hook with a no-op default
        """Refresh `has_legacy_sessions` (after a migration)."""

    async def close(self) -> None:  # noqa: B027 - optional hook with a no-op default
        """Release what the store opened (idempotent)."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class LegacyFlag:
    """`has_legacy_sessions` of a store: found by one async check the first time it is needed.

    Concurrent first callers share the check and resume in arrival order (so FIFO session locks
    taken right after stay FIFO); a failed check is tried again by the next caller.
    """

    __slots__ = ("_pending", "value")

    def __init__(self) -> None:
        self.value: bool | None = None
        self._pending: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task[bool]] = (
            weakref.WeakKeyDictionary()
        )

    async def get(self, check: Callable[[], Awaitable[bool]]) -> bool:
        """The flag, running `check` (once, shared) if it is not known yet."""
        if self.value is not None:
            return self.value
        loop = asyncio.get_running_loop()
        task = self._pending.get(loop)
        if task is None:

            async def run() -> bool:
                return await check()

            task = self._pending[loop] = loop.create_task(run())
        try:
            value = await asyncio.shield(task)
        finally:
            if task.done() and self._pending.get(loop) is task:
                del self._pending[loop]
        self.value = value
        return value


def check_agent(agent: object) -> str:
    """`agent` if it is a str (`InvalidTypeError` otherwise): the agent part of a session's address."""
    if not isinstance(agent, str):
        raise InvalidTypeError(f"agent must be a str (the agent's state_key), not {type(agent).__name__}")
    return agent


def is_idle(updated_at: float, cutoff: float | None) -> bool:
    """Whether a session last written at `updated_at` is older than `cutoff` (None: every session is)."""
    return cutoff is None or updated_at < cutoff


def _seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidTypeError(f"{what} must be a number of seconds, not {value!r}")
    seconds = float(value)
    if not math.isfinite(seconds):
        raise InvalidValueError(f"{what} must be a finite number of seconds, not {value!r}")
    return seconds


def check_idle_ttl(value: object, what: str = "idle_ttl") -> float | None:
    """`value` as seconds if it is a positive finite number, None for None; else a typed error."""
    if value is None:
        return None
    seconds = _seconds(value, what)
    if seconds <= 0:
        raise InvalidValueError(f"{what} must be a positive number of seconds or None, not {value!r}")
    return seconds


def check_older_than(value: object) -> float:
    """`value` as seconds if it is a finite number >= 0 (the `older_than` of `prune`), else a typed error."""
    seconds = _seconds(value, "older_than")
    if seconds < 0:
        raise InvalidValueError(f"older_than must not be negative, not {value!r}")
    return seconds


def check_prune_limit(value: object) -> int | None:
    """`value` if it is None or an int >= 0 (the `limit` of `prune`), else a typed error."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"limit must be an int >= 0 or None, not {value!r}")
    if value < 0:
        raise InvalidValueError(f"limit must not be negative, not {value}")
    return int(value)


MAX_REVISION = 2**63 - 1
"""Largest revision (and message index) a store holds: a signed 64-bit integer, like SQL's BIGINT."""


def check_since_index(value: object) -> int:
    """`value` as a plain int if it is an int >= 0 (the `since_index` of `load_view`), else a typed error.

    An index past `MAX_REVISION` is past the end of every session: it is capped there, so each
    store (and database driver) gets an integer it can hold and answers the same way.

    Raises:
        InvalidTypeError: `value` is not an int (bools are refused too).
        InvalidValueError: `value` is negative.
    """
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidTypeError(f"since_index must be an int >= 0, not {value!r}")
    if value < 0:
        raise InvalidValueError(f"since_index must be >= 0, not {value}")
    return min(int(value), MAX_REVISION)  # int(): an IntEnum is sent to a database as a number


@overload
def check_expected_revision(value: object) -> int: ...
@overload
def check_expected_revision(value: object, *, optional: bool) -> int | None: ...


def check_expected_revision(value: object, *, optional: bool = False) -> int | None:
    """`value` as a plain int if it is an int >= 0 (or None when `optional`), else a typed error.

    Checked before any write, with the same answer from every store: a value no write can start
    from (negative, or `MAX_REVISION` and above: the write's revision would not fit in 64 bits) is
    refused, not sent to a database driver to overflow in.

    Raises:
        InvalidTypeError: `value` is not an int (bools are refused too), or None where not `optional`.
        InvalidValueError: `value` is negative, or `MAX_REVISION` or more.
    """
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        wanted = "an int >= 0 or None" if optional else "an int >= 0 (0 for a new session)"
        raise InvalidTypeError(f"expected_revision must be {wanted}, not {value!r}")
    if value < 0:
        raise InvalidValueError(f"expected_revision must be >= 0, not {value}")
    if value >= MAX_REVISION:
        raise InvalidValueError(f"expected_revision must be below 2**63 - 1 (revisions are 64-bit), not {value}")
    return int(value)  # an IntEnum would reach Redis as its repr


def legacy_target(agent: str, session_id: str, *, all_unprefixed: bool = False) -> str | None:
    """The session id a legacy session gets under `agent`, or None if it is not `agent`'s."""
    prefix = agent + ":"
    if session_id.startswith(prefix):
        return session_id[len(prefix) :]
    if all_unprefixed and ":" not in session_id:
        return session_id
    return None
