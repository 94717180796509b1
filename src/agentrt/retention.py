"""Deleting a user's data in one call, for data-protection requests: `forget_user`.

A user's data lives in up to three places: their sessions in a state store (every agent's), their
long-term memory, and the knowledge bases of their namespace (the server and ``Knowledge(...,
per_user=True)`` use the user id as the namespace). ``await forget_user("alice", state=store,
memory=ltm, knowledge=kb)`` deletes all of it and reports what went::

    report = await forget_user("alice", state=store, memory=ltm, knowledge=kb)
    report.sessions, report.memories, report.knowledge_documents

Each part is deleted by the backend's own ``delete_user`` (one statement or script per batch,
nothing read back), falling back to the protocol's methods for backends without one. Calling it
again deletes nothing more (every count 0), so a call that failed half-way (a database down) is
simply made again. Idle sessions and old data are a separate matter: see ``prune`` and
``idle_ttl`` of the state stores, and the ``ttl`` of long-term memory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentrt.errors import InvalidTypeError, InvalidValueError, UserError

if TYPE_CHECKING:
    from agentrt.knowledge.base import KnowledgeStore
    from agentrt.knowledge.knowledge import Knowledge
    from agentrt.memory.long_term import LongTermMemory
    from agentrt.state.base import AgentStateStore

__all__ = ["MAX_USER_ID_LENGTH", "ForgetReport", "InvalidUserIdError", "check_user_id", "forget_user"]

MAX_USER_ID_LENGTH = 200
"""Longest user id accepted: the server refuses longer ones, so no such user can have data."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


class InvalidUserIdError(InvalidValueError):
    """A user id no user can have: empty, over 200 characters, holding control characters, or not UTF-8."""


def check_user_id(user_id: object) -> str:
    """`user_id` if a user can have it (the rules of the server's ids), else a typed error.

    Raises:
        InvalidTypeError: `user_id` is not a str.
        InvalidUserIdError: it is empty, longer than `MAX_USER_ID_LENGTH`, holds a control
            character (C0, DEL, C1, line or paragraph separator) or a lone surrogate.
    """
    if not isinstance(user_id, str):
        raise InvalidTypeError(f"the user id must be a str, not {type(user_id).__name__}")
    if not user_id:
        raise InvalidUserIdError("the user id must not be empty")
    if len(user_id) > MAX_USER_ID_LENGTH:
        raise InvalidUserIdError(f"the user id must be at most {MAX_USER_ID_LENGTH} characters (got {len(user_id)})")
    if _CONTROL.search(user_id):
        raise InvalidUserIdError("the user id must not contain control characters")
    try:
        user_id.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidUserIdError("the user id must be valid UTF-8 text") from None
    return user_id


@dataclass(frozen=True, slots=True)
class ForgetReport:
    """What `forget_user` deleted (0 for a part it was not given, or that held nothing)."""

    user_id: str
    sessions: int = 0
    """Sessions deleted from the state store, of every agent."""
    memories: int = 0
    """Long-term memory items deleted."""
    knowledge_documents: int = 0
    """Documents deleted from the knowledge bases of the user's namespace (their chunks with them)."""

    @property
    def total(self) -> int:
        """Everything deleted, summed."""
        return self.sessions + self.memories + self.knowledge_documents


async def forget_user(
    user_id: str,
    *,
    state: AgentStateStore | None = None,
    memory: LongTermMemory | None = None,
    knowledge: KnowledgeStore | Knowledge | None = None,
) -> ForgetReport:
    """Delete everything stored about `user_id` in the stores given; what went, counted.

    Args:
        user_id: The user (the `RuntimeContext` user id the data was written under).
        state: A state store: every session of the user, of every agent, goes (locked ones too:
            a call still running on one fails its next checkpoint).
        memory: A long-term memory: every item of the user goes.
        knowledge: A knowledge store, or a `Knowledge` (its store is used): every knowledge base
            of the namespace named by the user id goes, whatever the `Knowledge`'s own name.

    The parts are deleted in that order; an error stops the call and propagates (what was
    deleted stays deleted): call it again.

    Raises:
        InvalidUserIdError: No user can have `user_id` (empty, over 200 characters, control
            characters); nothing is deleted.
        UserError: No store was given.
    """
    user_id = check_user_id(user_id)
    if state is None and memory is None and knowledge is None:
        raise UserError("forget_user needs at least one of state=, memory= or knowledge= to delete from")
    sessions = await _delete_sessions(state, user_id) if state is not None else 0
    memories = await _delete_memories(memory, user_id) if memory is not None else 0
    documents = await _delete_knowledge(knowledge, user_id) if knowledge is not None else 0
    return ForgetReport(user_id, sessions=sessions, memories=memories, knowledge_documents=documents)


async def _delete_sessions(store: Any, user_id: str) -> int:
    delete_user = getattr(store, "delete_user", None)
    if delete_user is not None:
        return int(await delete_user(user_id))
    count = 0  # a store implementing only the protocol
    for info in await store.list_sessions(user_id):
        if await store.delete(user_id, info.session_id, agent=info.agent):
            count += 1
    return count


async def _delete_memories(memory: Any, user_id: str) -> int:
    for name in ("delete_user", "clear"):
        method = getattr(memory, name, None)
        if method is not None:
            return int(await method(user_id))
    items = await memory.list(user_id)
    return int(await memory.forget(user_id, [item.id for item in items])) if items else 0


async def _delete_knowledge(knowledge: Any, user_id: str) -> int:
    from agentrt.knowledge.knowledge import Knowledge

    store = knowledge.store if isinstance(knowledge, Knowledge) else knowledge
    for name in ("delete_user", "delete_namespace"):
        method = getattr(store, name, None)
        if method is not None:
            return int(await method(user_id))
    return sum([int(await store.drop(user_id, kb)) for kb in await store.kbs(user_id)])
