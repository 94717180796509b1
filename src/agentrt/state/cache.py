"""SessionCache: a per-store, per-process cache of decoded transcripts, validated by revision on every use.

Without it every call decodes the whole transcript of its session, so the cost of a call grows with
the conversation. With it, a call on a cached session reads the session's fields and only the
messages appended since the cached copy (`BaseStateStore.load_view` from the cached length minus
one): O(fields + new messages) however long the conversation is.

The cache is never trusted blindly: each load re-reads the stored fields and revision and checks
that the stored transcript still extends the cached one (same ``created_at``, at least as many
messages, the same message id at the last cached position). A write by another process or replica
bumps the revision and appends messages, which the check then reads; a session deleted and created
again (new ``created_at``) or rewritten by `save` (shorter, or another message where the cached copy
ends) is loaded in full again. Transcripts are append-only (see `AgentState.messages`): a `save`
that rewrites earlier messages but keeps the length and the last message is outside that contract.

Memory is bounded: least recently used sessions are dropped once the cached messages exceed
`max_bytes` (measured as their JSON size); a session larger than the budget is not cached.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from agentrt.message import Msg
from agentrt.state.codec import encode_message
from agentrt.state.session import AgentState, CallIds

__all__ = ["DEFAULT_MAX_BYTES", "SessionCache"]

DEFAULT_MAX_BYTES = 32 * 1024 * 1024
"""The default budget of a store's cache: 32 MiB of message JSON."""

_Key = tuple[str, str, str]


class _Entry:
    __slots__ = ("call_ids", "created_at", "loaded_from", "messages", "nbytes", "revision")

    def __init__(
        self, messages: list[Msg], nbytes: int, revision: int, created_at: float, call_ids: CallIds, loaded_from: int
    ) -> None:
        self.messages = messages
        self.loaded_from = loaded_from
        """From a context load: ``messages[:loaded_from]`` are placeholders (see `AgentState.loaded_from`)."""
        self.nbytes = nbytes
        self.revision = revision
        self.created_at = created_at
        self.call_ids = call_ids
        """Shared with the states loaded from this entry, so the ids are indexed once per session."""


def _size(messages: Sequence[Msg]) -> int:
    return sum(len(encode_message(m)) for m in messages)


class SessionCache:
    """Recently used transcripts of one store, keyed by ``(agent, user_id, session_id)``; LRU by bytes."""

    __slots__ = ("_entries", "_nbytes", "hits", "max_bytes", "misses")

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must not be negative")
        self.max_bytes = max_bytes
        """The budget, in bytes of message JSON (0 disables the cache)."""
        self._entries: OrderedDict[_Key, _Entry] = OrderedDict()
        self._nbytes = 0
        self.hits = 0
        """Loads served from the cache (plus the messages appended since)."""
        self.misses = 0
        """Loads that read the whole transcript."""

    @property
    def nbytes(self) -> int:
        """Bytes of message JSON held."""
        return self._nbytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def clear(self) -> None:
        """Forget every session."""
        self._entries.clear()
        self._nbytes = 0

    def discard(self, agent: str, user_id: str, session_id: str) -> None:
        """Forget one session."""
        entry = self._entries.pop((agent, user_id, session_id), None)
        if entry is not None:
            self._nbytes -= entry.nbytes

    async def load(
        self, store: Any, user_id: str, session_id: str, *, agent: str = "", context: bool = False
    ) -> AgentState | None:
        """`store.load(...)`, from the cached transcript plus what was appended since when possible.

        `store` must have `load` and `load_view` (every `BaseStateStore` has). The returned state
        is the caller's own: its `messages` list is a new list. With `context`, a session not
        cached is read with `store.load_context` (the summarised messages left unread, see
        `AgentState.loaded_from`), and such an entry serves only later `context` loads.
        """
        key = (agent, user_id, session_id)
        entry = self._entries.get(key) if self.max_bytes > 0 else None
        if entry is not None and entry.loaded_from and not context:
            self.discard(*key)  # it lacks the messages a whole load returns
            entry = None
        if entry is not None:
            cached = len(entry.messages)
            since = max(cached - 1, 0)
            view = await store.load_view(user_id, session_id, agent=agent, since_index=since)
            if view is None:
                self.discard(*key)
                return None
            state: AgentState = view.state
            got = state.messages
            if (
                view.offset == since
                and state.created_at == entry.created_at
                and (cached == 0 or (got and got[0].id == entry.messages[-1].id))
                and self._entries.get(key) is entry
            ):
                fresh = got[cached - since :]
                state.messages = [*entry.messages, *fresh]
                state.call_ids = entry.call_ids
                state.loaded_from = entry.loaded_from
                self.hits += 1
                self._grow(key, entry, fresh, state.revision)
                return state
            self.discard(*key)
        self.misses += 1
        load_context = getattr(store, "load_context", None) if context else None
        full: AgentState | None
        if load_context is not None:
            full = await load_context(user_id, session_id, agent=agent)
        else:
            full = await store.load(user_id, session_id, agent=agent)
        if full is not None:
            self.put(full)
        return full

    def put(self, state: AgentState) -> None:
        """Cache (a copy of the message list of) a state as it is stored now."""
        if self.max_bytes <= 0:
            return
        key = (state.agent, state.user_id, state.session_id)
        self.discard(*key)
        nbytes = _size(state.messages[state.loaded_from :])
        if nbytes > self.max_bytes:
            return
        if state.call_ids is None:  # the entry and the states loaded from it share one index
            state.call_ids = CallIds()
        self._entries[key] = _Entry(
            list(state.messages), nbytes, state.revision, state.created_at, state.call_ids, state.loaded_from
        )
        self._nbytes += nbytes
        self._evict()

    def appended(
        self, agent: str, user_id: str, session_id: str, messages: Sequence[Msg], *, base: int, revision: int
    ) -> None:
        """Record a successful `append(..., expected_revision=base)` that returned `revision`.

        Extends the cached transcript when it was at `base`; otherwise leaves it for the next load
        to bring up to date.
        """
        key = (agent, user_id, session_id)
        entry = self._entries.get(key)
        if entry is None or entry.revision != base:
            return
        self._grow(key, entry, messages, revision)

    def _grow(self, key: _Key, entry: _Entry, messages: Sequence[Msg], revision: int) -> None:
        entry.revision = revision
        if messages:
            added = _size(messages)
            entry.messages.extend(messages)
            entry.nbytes += added
            self._nbytes += added
            if entry.nbytes > self.max_bytes:
                self.discard(*key)
                return
        self._entries.move_to_end(key)
        self._evict()

    def _evict(self) -> None:
        entries = self._entries
        while self._nbytes > self.max_bytes and entries:
            _, entry = entries.popitem(last=False)
            self._nbytes -= entry.nbytes
