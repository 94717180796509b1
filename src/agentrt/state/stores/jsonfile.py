"""JsonFileStateStore: one folder per agent/user/session, append-only JSONL messages plus an atomic state file.

Layout::

    <root>/@<enc(agent)>/<enc(user_id)>/<enc(session_id)>/    a session of an agent
    <root>/<enc(user_id)>/<enc(session_id)>/                  agent "": the legacy layout (before
                                                              sessions had an agent), read as it is
        state.json        the session document: `encode_state(include_messages=False)` plus
                          "message_count", "messages_bytes" and "messages_file"; replaced atomically
        messages.jsonl    one `encode_message` JSON text per line, append-only
        .lock             `flock`ed around every revision check + write (cross-process)
        runs/             the session's run records (`agentrt.state.runs`), written under the same lock:
            <enc(reply_id)>.json   one record: {"reply_id", "started_at", "summary", "body"}
            index.json             {reply_id: {"started_at", "summary", "file"}}: the listing (its commit point)

``state.json`` is the commit record: a load reads exactly ``message_count`` lines (the first
``messages_bytes`` bytes) of ``messages_file``, so lines written by an append that crashed before
replacing ``state.json`` are never seen, and the next append overwrites them. `save` writes the
whole conversation to a new ``messages.<revision>.jsonl`` and switches ``state.json`` to it, so a
crash during a save leaves the previous state intact.

Ids are folder names through `encode_id`: ids made only of ``[a-z0-9_-]`` (1 to 100 characters)
are used as they are; every other id (upper case included, so that ids differing only in case stay
apart on case-insensitive file systems) becomes ``~`` + lower-case base32 of its UTF-8 bytes, and an
id whose encoding would be too long a file name becomes ``~~`` + a prefix of that + a SHA-256 digest.
Folder names therefore only ever contain ``[a-z0-9_~-]``: no separators, no dots, no NUL bytes, and
agent folders (``@`` + the encoded agent) never collide with the user folders of the legacy layout.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import hashlib
import logging
import os
import re
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from agentrt import _json
from agentrt.errors import StateConflictError, StateStoreError
from agentrt.message import Msg
from agentrt.state.base import (
    AgentState,
    BaseStateStore,
    LegacyFlag,
    SessionInfo,
    check_agent,
    check_expected_revision,
    check_idle_ttl,
    check_prune_limit,
    is_idle,
)
from agentrt.state.codec import decode_message, decode_state, encode_fields, encode_message, encode_state
from agentrt.state.locks import LocalSessionLocks
from agentrt.state.runs import (
    DEFAULT_MAX_RUNS,
    RunInfo,
    StoredRun,
    check_max_runs,
    check_reply_id,
    check_stored_run,
    retention_cutoff,
)

__all__ = ["JsonFileStateStore", "decode_id", "encode_id"]

logger = logging.getLogger("agentrt.state")

STATE_FILE = "state.json"
LOCK_FILE = ".lock"
RUNS_DIR = "runs"
RUNS_INDEX = "index.json"
FIRST_MESSAGES_FILE = "messages.jsonl"
AGENT_MARK = "@"

_SAFE_ID = re.compile(r"[a-z0-9_-]{1,100}")
_MESSAGES_FILE = re.compile(r"messages(?:\.[0-9]+)?\.jsonl")
_MAX_ENCODED = 200  # file names are limited to 255 bytes on common file systems
_HASHED_PREFIX = 120
_WINDOWS_RESERVED = frozenset(
    ["con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))]
)
_LOAD_ATTEMPTS = 20

if sys.platform != "win32":
    import fcntl

    def _lock_fd(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX)

else:  # pragma: no cover - no cross-process lock on Windows; in-process writes are still serialised

    def _lock_fd(fd: int) -> None:
        return None


def encode_id(value: str) -> str:
    """The folder name for a user or session id (injective; never ``.``/``..``, never a path)."""
    if _SAFE_ID.fullmatch(value) and value not in _WINDOWS_RESERVED:
        return value
    raw = value.encode("utf-8", "surrogatepass")
    encoded = base64.b32encode(raw).decode("ascii").rstrip("=").lower()
    if len(encoded) + 1 <= _MAX_ENCODED:
        return "~" + encoded
    return f"~~{encoded[:_HASHED_PREFIX]}-{hashlib.sha256(raw).hexdigest()}"


def decode_id(name: str) -> str | None:
    """The id `encode_id` turned into `name`; None for hashed (over-long) ids and foreign names."""
    if name.startswith("~~"):
        return None
    if name.startswith("~"):
        body = name[1:]
        if not re.fullmatch(r"[a-z2-7]*", body):
            return None
        try:
            raw = base64.b32decode(body.upper() + "=" * (-len(body) % 8))
            return raw.decode("utf-8", "surrogatepass")
        except (ValueError, UnicodeDecodeError):
            return None
    return name if _SAFE_ID.fullmatch(name) else None


class JsonFileStateStore(BaseStateStore):
    """Sessions as plain files under `root`, one folder per user and session.

    Args:
        root: The directory holding the store (created on first write).
        fsync: Flush each write to disk before it counts as committed (files and folders). Without
            it, writes still survive a crash of the process, not necessarily of the machine.
        idle_ttl: Seconds a session may go unwritten before it reads as missing and is deleted
            (see `BaseStateStore.idle_ttl`); None keeps sessions until deleted.

    File I/O runs in worker threads (`asyncio.to_thread`). Writes to one session are serialised by
    an asyncio lock within the process and by ``flock`` on the session's ``.lock`` file across
    processes, around the revision check and the write. Loads take no lock: they read the committed
    prefix named by ``state.json``. `session_lock` is in-process only. ``flock`` needs a POSIX
    system and a local file system (or one that supports it, like NFSv4 on Linux).

    A write whose caller is cancelled while the write runs may still commit: reload to find out.
    `prune` across users walks every session folder (there is no index): O(sessions stored).
    """

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True, idle_ttl: float | None = None) -> None:
        self._idle_ttl = check_idle_ttl(idle_ttl)
        self._root = Path(root).expanduser().absolute()
        self._fsync = fsync
        self._write_locks = LocalSessionLocks()
        self._closed = False
        self._legacy = LegacyFlag()

    @property
    def root(self) -> Path:
        """The directory holding the store."""
        return self._root

    def __repr__(self) -> str:
        return f"JsonFileStateStore({str(self._root)!r})"

    def session_path(self, user_id: str, session_id: str, *, agent: str = "") -> Path:
        """The folder holding one session (whether or not it exists)."""
        return self._user_path(user_id, agent) / encode_id(_valid_id(session_id, "session id"))

    def _user_path(self, user_id: str, agent: str) -> Path:
        return self._agent_path(agent) / encode_id(_valid_id(user_id, "user id"))

    def _agent_path(self, agent: str) -> Path:
        if not check_agent(agent):
            return self._root  # the legacy layout
        return self._root / (AGENT_MARK + encode_id(_valid_id(agent, "agent")))

    async def __aenter__(self) -> Self:
        return self

    # -- store protocol -------------------------------------------------------------------
    async def load(self, user_id: str, session_id: str, *, agent: str = "") -> AgentState | None:
        """The stored state, or None if the session does not exist."""
        await self._ready()
        folder = self.session_path(user_id, session_id, agent=agent)
        state = await asyncio.to_thread(_load, folder, agent, user_id, session_id)
        cutoff = self._idle_cutoff()
        if state is not None and cutoff is not None and is_idle(state.updated_at, cutoff):
            await self._delete_folder(folder, cutoff)  # unless written meanwhile
            return None
        return state

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
        """Append lines to the session's JSONL file, then replace its state file."""
        expected_revision = check_expected_revision(expected_revision)
        await self._ready()
        folder = self.session_path(user_id, session_id, agent=agent)
        # Encoded here, on the caller's thread: the write stores the values as they are now.
        payload = _encode_lines(messages)
        changed = encode_fields(fields) if fields else {}
        ids = (agent, user_id, session_id)
        async with self._write_locks.hold(str(folder)):
            return await asyncio.to_thread(
                _append, self._root, folder, ids, payload, len(messages), changed, expected_revision, self._fsync
            )

    async def save(self, state: AgentState, *, expected_revision: int | None = None) -> int:
        """Write the whole conversation to a new messages file, then switch the state file to it."""
        expected_revision = check_expected_revision(expected_revision, optional=True)
        await self._ready()
        folder = self.session_path(state.user_id, state.session_id, agent=state.agent)
        doc = encode_state(state, include_messages=False)
        payload = _encode_lines(state.messages)
        async with self._write_locks.hold(str(folder)):
            return await asyncio.to_thread(
                _save, self._root, folder, doc, payload, len(state.messages), expected_revision, self._fsync
            )

    async def delete(self, user_id: str, session_id: str, *, agent: str = "") -> bool:
        """Remove the session's folder; True if the session existed."""
        await self._ready()
        return await self._delete_folder(self.session_path(user_id, session_id, agent=agent))

    async def _delete_folder(self, folder: Path, cutoff: float | None = None) -> bool:
        """Delete a session folder (with `cutoff`: only if the session was last written before it)."""
        async with self._write_locks.hold(str(folder)):
            return await asyncio.to_thread(_delete, folder, self._fsync, cutoff)

    # -- run records ----------------------------------------------------------------------

    supports_run_records = True

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
        """Write the record's file, then the session's run index, under the session's lock."""
        check_stored_run(run)
        max_runs = check_max_runs(max_runs)
        cutoff = retention_cutoff(older_than)
        await self._ready()
        folder = self.session_path(user_id, session_id, agent=agent)
        data = _json.dumps_bytes(
            {"reply_id": run.reply_id, "started_at": float(run.started_at), "summary": run.summary, "body": run.body}
        )
        entry = {"started_at": float(run.started_at), "summary": run.summary}
        ids = (agent, user_id, session_id)
        async with self._write_locks.hold(str(folder)):
            return await asyncio.to_thread(
                _save_run, folder, ids, run.reply_id, entry, data, max_runs, cutoff, self._fsync
            )

    async def get_run(self, user_id: str, session_id: str, reply_id: str, *, agent: str = "") -> StoredRun | None:
        """The record stored under `reply_id`, or None."""
        check_reply_id(reply_id)
        await self._ready()
        folder = self.session_path(user_id, session_id, agent=agent)
        return await asyncio.to_thread(_get_run, folder, (agent, user_id, session_id), reply_id)

    async def list_runs(
        self, user_id: str, session_id: str, *, agent: str = "", limit: int | None = None
    ) -> list[RunInfo]:
        """The session's runs, newest first (from its run index)."""
        limit = check_prune_limit(limit)
        await self._ready()
        folder = self.session_path(user_id, session_id, agent=agent)
        infos = await asyncio.to_thread(_list_runs, folder, (agent, user_id, session_id))
        return infos[:limit]

    async def list_sessions(self, user_id: str, *, agent: str | None = None) -> list[SessionInfo]:
        """The user's sessions (of every agent, or of `agent`), most recently updated first."""
        infos = await self._list_stored(user_id, agent)
        cutoff = self._idle_cutoff()
        if cutoff is not None and any(is_idle(info.updated_at, cutoff) for info in infos):
            await self._prune(cutoff, user_id=user_id, agent=agent, limit=None, dry_run=False, skip_locked=True)
            infos = [info for info in infos if not is_idle(info.updated_at, cutoff)]
        return infos

    async def _list_stored(self, user_id: str, agent: str | None) -> list[SessionInfo]:
        await self._ready()
        if agent is not None:
            return await asyncio.to_thread(_list_sessions, self._user_path(user_id, agent), user_id, agent)
        user_dir = encode_id(_valid_id(user_id, "user id"))
        return await asyncio.to_thread(_list_all_sessions, self._root, user_dir, user_id)

    async def delete_user(self, user_id: str) -> int:
        """`BaseStateStore.delete_user`, then the user's folders: leftovers of crashed writes go too."""
        count = await super().delete_user(user_id)
        await asyncio.to_thread(_remove_user_leftovers, self._root, encode_id(_valid_id(user_id, "user id")))
        return count

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
        """Reads the state files (of one user, or of every session folder), then deletes folder by folder.

        Each deletion holds the session's write locks and checks `updated_at` again, so a session
        written meanwhile stays. Locks are in-process for this store.
        """
        if user_id is not None:
            infos = await self._list_stored(user_id, agent)
        else:
            await self._ready()
            infos = await asyncio.to_thread(_all_sessions, self._root, agent)
        held = self._locally_held() if skip_locked else frozenset()
        found = [
            info
            for info in infos
            if is_idle(info.updated_at, cutoff) and (info.agent, info.user_id, info.session_id) not in held
        ]
        found.sort(key=lambda i: (i.updated_at, i.agent, i.user_id, i.session_id))
        count = 0
        for info in found:
            if limit is not None and count >= limit:
                break
            if dry_run:
                count += 1
                continue
            folder = self.session_path(info.user_id, info.session_id, agent=info.agent)
            if await self._delete_folder(folder, cutoff):
                count += 1
        return count

    # -- the legacy layout ----------------------------------------------------------------
    @property
    def has_legacy_sessions(self) -> bool:
        """Whether the root held sessions in the legacy layout (agent ``""``) when first used.

        Checked during the store's first operation (looked up now if there was none yet) and again
        after `migrate_legacy`.
        """
        if self._legacy.value is None:
            self._legacy.value = _any_legacy(self._root)
        return self._legacy.value

    async def _legacy_sessions(self, user_id: str | None) -> list[tuple[str, str]]:
        await self._ready()
        return await asyncio.to_thread(_legacy_sessions, self._root, user_id)

    async def _recheck_legacy(self) -> None:
        self._legacy.value = await asyncio.to_thread(_any_legacy, self._root)

    async def _ready(self) -> None:
        self._check_open()
        if self._legacy.value is None:
            await self._legacy.get(lambda: asyncio.to_thread(_any_legacy, self._root))

    async def close(self) -> None:
        """Mark the store closed (it holds no open files between operations)."""
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise StateStoreError(f"{self!r} is closed")


# -- file operations (run in worker threads) ----------------------------------------------------


def _valid_id(value: str, what: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise StateStoreError(f"{what} {value!r} is not valid Unicode text: {exc.reason}") from None
    return value


def _encode_lines(messages: Sequence[Msg]) -> bytes:
    """JSONL: one message per line (JSON text escapes every newline inside strings)."""
    try:
        return b"".join(encode_message(m).encode("utf-8") + b"\n" for m in messages)
    except UnicodeEncodeError as exc:
        raise StateStoreError(f"a message is not valid Unicode text: {exc.reason}") from None


def _where(folder: Path) -> str:
    return f"session folder {str(folder)!r}"


def _fsync_dir(path: Path) -> None:
    if sys.platform == "win32":  # pragma: no cover - directories cannot be opened on Windows
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _read_doc(folder: Path) -> dict[str, Any] | None:
    try:
        raw = (folder / STATE_FILE).read_bytes()
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise StateStoreError(f"{_where(folder)} is not a folder") from None
    try:
        doc = _json.loads(raw)
    except ValueError as exc:
        raise StateStoreError(f"{_where(folder)}: {STATE_FILE} is corrupt: {exc}") from exc
    if not isinstance(doc, dict):
        raise StateStoreError(f"{_where(folder)}: {STATE_FILE} is not a JSON object")
    return doc


Ids = tuple[str, str, str]
"""(agent, user_id, session_id)"""


def _check_ids(folder: Path, doc: Mapping[str, Any], ids: Ids) -> None:
    # A hashed (over-long) id could in theory share a folder with another id: never mix them up.
    agent, user_id, session_id = ids
    if (doc.get("agent") or "") != agent or doc.get("user_id") != user_id or doc.get("session_id") != session_id:
        owner = f" of agent {doc.get('agent')!r}" if doc.get("agent") else ""
        raise StateStoreError(
            f"{_where(folder)} holds session {doc.get('session_id')!r} of user {doc.get('user_id')!r}{owner}, "
            f"not {session_id!r} of {user_id!r}" + (f" of agent {agent!r}" if agent else "")
        )


def _commit_info(folder: Path, doc: Mapping[str, Any]) -> tuple[int, int, str]:
    """(message_count, messages_bytes, messages_file) of a state document, validated."""
    try:
        count = int(doc.get("message_count", 0))
        nbytes = int(doc.get("messages_bytes", -1))
    except (TypeError, ValueError) as exc:
        raise StateStoreError(f"{_where(folder)}: {STATE_FILE} is corrupt: {exc}") from exc
    name = doc.get("messages_file", FIRST_MESSAGES_FILE)
    if not isinstance(name, str) or not _MESSAGES_FILE.fullmatch(name) or count < 0:
        raise StateStoreError(f"{_where(folder)}: {STATE_FILE} is corrupt (messages_file {name!r}, count {count})")
    return count, nbytes, name


def _read_lines(folder: Path, name: str, count: int, nbytes: int) -> list[bytes]:
    """The first `count` lines of the messages file (FileNotFoundError if it is gone)."""
    if count == 0:
        return []
    with open(folder / name, "rb") as f:
        data = f.read(nbytes) if nbytes >= 0 else f.read()
    if nbytes >= 0 and len(data) < nbytes:
        raise StateStoreError(f"{_where(folder)}: {name} is shorter than its committed {nbytes} bytes")
    lines = data.split(b"\n", count)
    if len(lines) <= count or (nbytes >= 0 and lines[count]):
        # fewer complete lines than committed, or committed bytes not ending at a line end
        raise StateStoreError(f"{_where(folder)}: {name} does not hold the {count} committed messages")
    return lines[:count]


def _load(folder: Path, agent: str, user_id: str, session_id: str) -> AgentState | None:
    try:
        return _load_committed(folder, (agent, user_id, session_id))
    except OSError as exc:
        raise StateStoreError(f"cannot read {_where(folder)}: {exc}") from exc


def _load_committed(folder: Path, ids: Ids) -> AgentState | None:
    for _ in range(_LOAD_ATTEMPTS):
        doc = _read_doc(folder)
        if doc is None:
            return None
        _check_ids(folder, doc, ids)
        count, nbytes, name = _commit_info(folder, doc)
        try:
            lines = _read_lines(folder, name, count, nbytes)
        except FileNotFoundError:
            continue  # a concurrent save or delete switched files under us: read state.json again
        try:
            messages = [decode_message(line) for line in lines]
            return decode_state(doc, messages)
        except (TypeError, ValueError) as exc:
            raise StateStoreError(f"{_where(folder)} is corrupt: {exc}") from exc
    raise StateStoreError(f"{_where(folder)} kept changing while being read")


def _open_locked(folder: Path, *, create: bool) -> int | None:
    """An fd holding the folder's exclusive lock (None if the folder is missing and not `create`).

    The lock file may be removed by a concurrent delete while we wait for it; locking a removed
    file locks nothing, so after locking, check that the path still names the file we locked.
    """
    while True:
        try:
            if create:
                folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            if not create:
                return None
            continue  # a concurrent delete removed a parent folder between mkdir and open
        except NotADirectoryError:
            raise StateStoreError(f"{_where(folder)} is not a folder") from None
        try:
            _lock_fd(fd)
            held = os.fstat(fd)
            try:
                current = os.stat(folder / LOCK_FILE)
            except FileNotFoundError:
                current = None
        except BaseException:
            os.close(fd)
            raise
        if current is not None and (current.st_ino, current.st_dev) == (held.st_ino, held.st_dev):
            return fd
        os.close(fd)


def _write_doc(folder: Path, doc: Mapping[str, Any], fsync: bool) -> None:
    """Replace state.json atomically (temp file in the same folder + `os.replace`)."""
    tmp = folder / f".{STATE_FILE}.{uuid.uuid4().hex}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            _write_all(fd, _json.dumps_bytes(doc))
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, folder / STATE_FILE)
    except BaseException:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        raise
    if fsync:
        _fsync_dir(folder)


def _remove_stray_files(folder: Path, keep: str | None) -> None:
    """Remove message files (and temp files) that no committed state refers to."""
    with os.scandir(folder) as entries:
        names = [entry.name for entry in entries]
    for name in names:
        if name != keep and (_MESSAGES_FILE.fullmatch(name) or name.endswith(".tmp")):
            (folder / name).unlink(missing_ok=True)


def _conflict(current: int, expected: int, user_id: str, session_id: str) -> StateConflictError:
    return StateConflictError(f"session {session_id!r} of user {user_id!r} is at revision {current}, not {expected}")


def _revision(folder: Path, doc: Mapping[str, Any] | None) -> int:
    if doc is None:
        return 0
    try:
        return int(doc.get("revision", 0))
    except (TypeError, ValueError) as exc:
        raise StateStoreError(f"{_where(folder)}: {STATE_FILE} is corrupt: {exc}") from exc


@contextlib.contextmanager
def _write_session(
    root: Path, folder: Path, ids: Ids, expected: int | None, fsync: bool
) -> Iterator[tuple[dict[str, Any] | None, int]]:
    """Hold the session's file lock with its revision checked: yields (state document or None, revision)."""
    _, user_id, session_id = ids
    try:
        if expected is not None and expected != 0 and _read_doc(folder) is None:
            raise _conflict(0, expected, user_id, session_id)  # leave no folder behind for a missing session
        fd_lock = _open_locked(folder, create=True)
        assert fd_lock is not None
        try:
            doc = _read_doc(folder)
            if doc is not None:
                _check_ids(folder, doc, ids)
            current = _revision(folder, doc)
            if expected is not None and current != expected:
                raise _conflict(current, expected, user_id, session_id)
            if doc is None:
                _remove_stray_files(folder, None)  # left by a crashed write or an interrupted delete
                _remove_runs(folder)
                if fsync:  # make the new folders themselves durable, up to the root
                    parent = folder.parent
                    while True:
                        _fsync_dir(parent)
                        if parent == root or parent == parent.parent:
                            break
                        parent = parent.parent
            yield doc, current
        finally:
            os.close(fd_lock)
    except OSError as exc:
        raise StateStoreError(f"cannot write {_where(folder)}: {exc}") from exc
    except UnicodeEncodeError as exc:  # lone surrogates in a field
        raise StateStoreError(f"cannot store text that is not valid Unicode: {exc.reason}") from None


def _append(
    root: Path,
    folder: Path,
    ids: Ids,
    payload: bytes,
    n_messages: int,
    changed: Mapping[str, Any],
    expected: int,
    fsync: bool,
) -> int:
    with _write_session(root, folder, ids, expected, fsync) as (doc, current):
        now = time.time()
        if doc is None:
            agent, user_id, session_id = ids
            doc = encode_state(
                AgentState(agent=agent, user_id=user_id, session_id=session_id, created_at=now),
                include_messages=False,
            )
            count, nbytes, name = 0, 0, FIRST_MESSAGES_FILE
        else:
            count, nbytes, name = _commit_info(folder, doc)
        if payload:
            nbytes = _append_lines(folder / name, nbytes, payload, fsync)
        doc = {
            **doc,
            **changed,
            "revision": current + 1,
            "updated_at": now,
            "message_count": count + n_messages,
            "messages_bytes": nbytes,
            "messages_file": name,
        }
        _write_doc(folder, doc, fsync)  # the commit point
        return current + 1


def _append_lines(path: Path, committed: int, payload: bytes, fsync: bool) -> int:
    """Write `payload` right after the committed bytes (dropping uncommitted leftovers); the new length."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if committed < 0:  # a state file without "messages_bytes": trust the file's end
            committed = size
        if size < committed:
            raise StateStoreError(f"{path.name} is shorter than its committed {committed} bytes")
        if size > committed:
            os.ftruncate(fd, committed)  # lines of a write that crashed before its commit
        os.lseek(fd, committed, os.SEEK_SET)
        _write_all(fd, payload)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    return committed + len(payload)


def _save(
    root: Path,
    folder: Path,
    doc: dict[str, Any],
    payload: bytes,
    n_messages: int,
    expected: int | None,
    fsync: bool,
) -> int:
    ids = (doc["agent"], doc["user_id"], doc["session_id"])
    with _write_session(root, folder, ids, expected, fsync) as (_, current):
        revision = current + 1
        name = f"messages.{revision}.jsonl"  # a new file: readers of the previous state keep theirs
        fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, payload)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        now = time.time()
        new = {
            **doc,
            "revision": revision,
            "created_at": float(doc.get("created_at") or now),
            "updated_at": now,
            "message_count": n_messages,
            "messages_bytes": len(payload),
            "messages_file": name,
        }
        _write_doc(folder, new, fsync)  # the commit point
        _remove_stray_files(folder, name)
        return revision


def _delete(folder: Path, fsync: bool, cutoff: float | None = None) -> bool:
    """Delete a session folder (with `cutoff`: only if its state was last written before it)."""
    try:
        fd_lock = _open_locked(folder, create=False)
    except OSError as exc:
        raise StateStoreError(f"cannot delete {_where(folder)}: {exc}") from exc
    if fd_lock is None:
        return False
    try:
        if cutoff is not None and not _idle_doc(_read_doc(folder), cutoff):
            return False  # gone, or written since it was found idle
        try:
            (folder / STATE_FILE).unlink()  # the commit point: from here on the session does not exist
            existed = True
        except FileNotFoundError:
            existed = False
        if existed and fsync:
            _fsync_dir(folder)
        _remove_stray_files(folder, None)
        _remove_runs(folder)
        (folder / LOCK_FILE).unlink(missing_ok=True)  # waiters notice and lock a fresh file
    except OSError as exc:
        raise StateStoreError(f"cannot delete {_where(folder)}: {exc}") from exc
    finally:
        os.close(fd_lock)
    for path in (folder, folder.parent):
        try:
            path.rmdir()  # fails harmlessly if a concurrent writer already put files back
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT, errno.EBUSY):
                raise StateStoreError(f"cannot delete {_where(folder)}: {exc}") from exc
            break
    return existed


def _remove_runs(folder: Path) -> None:
    """Remove the session folder's run records (its session is gone, or being created anew)."""
    runs = folder / RUNS_DIR
    try:
        with os.scandir(runs) as entries:
            names = [entry.name for entry in entries]
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in names:
        (runs / name).unlink(missing_ok=True)
    with contextlib.suppress(FileNotFoundError):
        runs.rmdir()


def _replace_file(path: Path, data: bytes, fsync: bool) -> None:
    """Write `path` atomically (a temp file in the same folder, then `os.replace`)."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            _write_all(fd, data)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


def _read_runs_index(runs: Path) -> dict[str, Any]:
    try:
        index = _json.loads((runs / RUNS_INDEX).read_bytes())
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        raise StateStoreError(f"run index {str(runs / RUNS_INDEX)!r} is corrupt: {exc}") from exc
    return index if isinstance(index, dict) else {}


def _run_order(item: tuple[str, Any]) -> tuple[float, str]:
    reply_id, entry = item
    started = entry.get("started_at") if isinstance(entry, dict) else None
    return (float(started) if isinstance(started, int | float) else 0.0, reply_id)


def _save_run(
    folder: Path,
    ids: Ids,
    reply_id: str,
    entry: dict[str, Any],
    data: bytes,
    max_runs: int | None,
    cutoff: float | None,
    fsync: bool,
) -> bool:
    """Write one run record of an existing session (False if it does not exist); the index is the commit point."""
    try:
        fd_lock = _open_locked(folder, create=False)
        if fd_lock is None:
            return False
        try:
            doc = _read_doc(folder)
            if doc is None:
                return False
            _check_ids(folder, doc, ids)
            runs = folder / RUNS_DIR
            runs.mkdir(exist_ok=True)
            index = _read_runs_index(runs)
            name = encode_id(reply_id) + ".json"
            _replace_file(runs / name, data, fsync)
            index[reply_id] = {**entry, "file": name}
            others = sorted((item for item in index.items() if item[0] != reply_id), key=_run_order, reverse=True)
            doomed = [rid for rid, _ in others if cutoff is not None and _run_order((rid, index[rid]))[0] < cutoff]
            kept = [rid for rid, _ in others if rid not in doomed]
            if max_runs is not None:
                doomed += kept[max_runs - 1 :]
            files = [index.pop(rid).get("file") for rid in doomed]
            _replace_file(runs / RUNS_INDEX, _json.dumps_bytes(index), fsync)
            for file in files:
                if isinstance(file, str) and file != name and _SAFE_RUN_FILE.fullmatch(file):
                    (runs / file).unlink(missing_ok=True)
            if fsync:
                _fsync_dir(runs)
        finally:
            os.close(fd_lock)
    except OSError as exc:
        raise StateStoreError(f"cannot write a run record in {_where(folder)}: {exc}") from exc
    return True


_SAFE_RUN_FILE = re.compile(r"[a-z0-9_~-]{1,250}\.json")


def _session_there(folder: Path, ids: Ids) -> bool:
    doc = _read_doc(folder)
    if doc is None:
        return False
    _check_ids(folder, doc, ids)
    return True


def _get_run(folder: Path, ids: Ids, reply_id: str) -> StoredRun | None:
    try:
        if not _session_there(folder, ids):
            return None
        raw = (folder / RUNS_DIR / (encode_id(reply_id) + ".json")).read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise StateStoreError(f"cannot read a run record in {_where(folder)}: {exc}") from exc
    try:
        stored = _json.loads(raw)
        if not isinstance(stored, dict) or stored.get("reply_id") != reply_id:
            return None
        summary = stored.get("summary")
        return StoredRun(
            reply_id, float(stored["started_at"]), summary if isinstance(summary, dict) else {}, str(stored["body"])
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise StateStoreError(f"run record {reply_id!r} in {_where(folder)} is corrupt: {exc}") from exc


def _list_runs(folder: Path, ids: Ids) -> list[RunInfo]:
    try:
        if not _session_there(folder, ids):
            return []
        index = _read_runs_index(folder / RUNS_DIR)
    except NotADirectoryError:
        return []
    except OSError as exc:
        raise StateStoreError(f"cannot read the run records in {_where(folder)}: {exc}") from exc
    infos = []
    for reply_id, entry in sorted(index.items(), key=_run_order, reverse=True):
        summary = entry.get("summary") if isinstance(entry, dict) else None
        infos.append(RunInfo(reply_id, _run_order((reply_id, entry))[0], summary if isinstance(summary, dict) else {}))
    return infos


def _remove_user_leftovers(root: Path, user_dir: str) -> None:
    """Remove the user's session folders that hold no session (files of writes that crashed before committing)."""
    for user_folder in [root / user_dir, *(root / name / user_dir for name in _agent_folders(root))]:
        for folder in _subfolders(user_folder):
            try:
                fd_lock = _open_locked(folder, create=False)
            except (OSError, StateStoreError):
                continue
            if fd_lock is None:
                continue
            try:
                if (folder / STATE_FILE).exists():
                    continue  # a session (written meanwhile)
                _remove_stray_files(folder, None)
                _remove_runs(folder)
                (folder / LOCK_FILE).unlink(missing_ok=True)
            except OSError as exc:
                raise StateStoreError(f"cannot delete {_where(folder)}: {exc}") from exc
            finally:
                os.close(fd_lock)
            with contextlib.suppress(OSError):
                folder.rmdir()
        with contextlib.suppress(OSError):
            user_folder.rmdir()  # only when empty


def _idle_doc(doc: Mapping[str, Any] | None, cutoff: float) -> bool:
    """Whether a state document was last written before `cutoff` (False for no document)."""
    if doc is None:
        return False
    try:
        return float(doc.get("updated_at") or 0.0) < cutoff
    except (TypeError, ValueError):
        return False


def _all_sessions(root: Path, agent: str | None) -> list[SessionInfo]:
    """Every session stored under `root` (only `agent`'s when given), from their state files.

    Folders that are not sessions of this layout (no state file, a document naming ids that do
    not encode to its folders) are passed over with a warning, not deleted.
    """
    if agent is None:
        places = [(root, True), *((root / name, False) for name in _agent_folders(root))]
    elif agent == "":
        places = [(root, True)]
    else:
        places = [(root / (AGENT_MARK + encode_id(_valid_id(agent, "agent"))), False)]
    infos: list[SessionInfo] = []
    for place, legacy in places:
        users = list(_legacy_user_folders(place)) if legacy else _subfolders(place)
        for user_folder in users:
            for folder in _subfolders(user_folder):
                info = _folder_session(folder, legacy)
                if info is not None:
                    infos.append(info)
    return infos


def _subfolders(path: Path) -> list[Path]:
    try:
        with os.scandir(path) as it:
            return [Path(e.path) for e in it if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise StateStoreError(f"cannot list {str(path)!r}: {exc}") from exc


def _folder_session(folder: Path, legacy: bool) -> SessionInfo | None:
    """The listing of the session in `folder`, or None (no session, or not one of this layout)."""
    try:
        doc = _read_doc(folder)
    except OSError as exc:
        raise StateStoreError(f"cannot read {_where(folder)}: {exc}") from exc
    if doc is None:
        return None
    user_id, session_id, owner = doc.get("user_id"), doc.get("session_id"), doc.get("agent") or ""
    if (
        not isinstance(user_id, str)
        or not isinstance(session_id, str)
        or not isinstance(owner, str)
        or encode_id(session_id) != folder.name
        or encode_id(user_id) != folder.parent.name
        or (legacy and owner)
        or (not legacy and (not owner or AGENT_MARK + encode_id(owner) != folder.parent.parent.name))
    ):
        logger.warning("%s does not hold a session of its own address: left alone", _where(folder))
        return None
    count, _, _ = _commit_info(folder, doc)
    try:
        return SessionInfo(
            agent=owner,
            user_id=user_id,
            session_id=session_id,
            message_count=count,
            revision=int(doc.get("revision", 0)),
            updated_at=float(doc.get("updated_at") or 0.0),
        )
    except (TypeError, ValueError) as exc:
        raise StateStoreError(f"{_where(folder)}: {STATE_FILE} is corrupt: {exc}") from exc


def _list_sessions(user_folder: Path, user_id: str, agent: str | None) -> list[SessionInfo]:
    """The sessions in one user folder; `agent` None: take each session's agent from its document."""
    try:
        with os.scandir(user_folder) as it:
            names = [e.name for e in it if e.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise StateStoreError(f"cannot list sessions in {str(user_folder)!r}: {exc}") from exc
    infos: list[SessionInfo] = []
    for name in names:
        folder = user_folder / name
        try:
            doc = _read_doc(folder)
        except OSError as exc:
            raise StateStoreError(f"cannot read {_where(folder)}: {exc}") from exc
        if doc is None:
            continue  # being created, or left over from an interrupted delete
        session_id = doc.get("session_id")
        owner = doc.get("agent") or ""
        decoded = decode_id(name)
        if (
            doc.get("user_id") != user_id
            or not isinstance(session_id, str)
            or not isinstance(owner, str)
            or (agent is not None and owner != agent)
            or encode_id(session_id) != name
            or (decoded is not None and decoded != session_id)
        ):
            raise StateStoreError(f"{_where(folder)} does not belong to user {user_id!r} (holds {session_id!r})")
        count, _, _ = _commit_info(folder, doc)
        try:
            infos.append(
                SessionInfo(
                    agent=owner,
                    user_id=user_id,
                    session_id=session_id,
                    message_count=count,
                    revision=int(doc.get("revision", 0)),
                    updated_at=float(doc.get("updated_at") or 0.0),
                )
            )
        except (TypeError, ValueError) as exc:
            raise StateStoreError(f"{_where(folder)}: {STATE_FILE} is corrupt: {exc}") from exc
    infos.sort(key=lambda i: (-i.updated_at, i.session_id))
    return infos


def _agent_folders(root: Path) -> list[str]:
    try:
        with os.scandir(root) as it:
            return [e.name for e in it if e.name.startswith(AGENT_MARK) and e.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise StateStoreError(f"cannot list agents in {str(root)!r}: {exc}") from exc


def _list_all_sessions(root: Path, user_dir: str, user_id: str) -> list[SessionInfo]:
    """The user's sessions of every agent (legacy layout included)."""
    infos = _list_sessions(root / user_dir, user_id, "")
    for name in _agent_folders(root):
        found = _list_sessions(root / name / user_dir, user_id, None)
        for info in found:
            if not info.agent or AGENT_MARK + encode_id(info.agent) != name:
                raise StateStoreError(f"folder {str(root / name)!r} holds a session of agent {info.agent!r}")
        infos += found
    infos.sort(key=lambda i: (-i.updated_at, i.agent, i.session_id))
    return infos


def _legacy_user_folders(root: Path) -> Iterator[Path]:
    try:
        with os.scandir(root) as it:
            entries = [e for e in it if not e.name.startswith((AGENT_MARK, ".")) and e.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        raise StateStoreError(f"cannot list {str(root)!r}: {exc}") from exc
    for entry in entries:
        yield Path(entry.path)


def _any_legacy(root: Path) -> bool:
    """Whether a user folder of the legacy layout holds a session folder (stops at the first)."""
    for user_folder in _legacy_user_folders(root):
        try:
            with os.scandir(user_folder) as it:
                if any((Path(e.path) / STATE_FILE).is_file() for e in it if e.is_dir(follow_symlinks=False)):
                    return True
        except OSError:
            continue
    return False


def _legacy_sessions(root: Path, user_id: str | None) -> list[tuple[str, str]]:
    """(user_id, session_id) of the sessions in the legacy layout, read from their state files."""
    if user_id is not None:
        folder = root / encode_id(_valid_id(user_id, "user id"))
        return [(user_id, info.session_id) for info in _list_sessions(folder, user_id, "")]
    found: list[tuple[str, str]] = []
    for user_folder in _legacy_user_folders(root):
        try:
            with os.scandir(user_folder) as it:
                names = [e.name for e in it if e.is_dir(follow_symlinks=False)]
        except OSError as exc:
            raise StateStoreError(f"cannot list sessions in {str(user_folder)!r}: {exc}") from exc
        for name in names:
            try:
                doc = _read_doc(user_folder / name)
            except OSError as exc:
                raise StateStoreError(f"cannot read {_where(user_folder / name)}: {exc}") from exc
            if doc is None:
                continue
            user, session = doc.get("user_id"), doc.get("session_id")
            if (
                isinstance(user, str)
                and isinstance(session, str)
                and not doc.get("agent")
                and encode_id(user) == user_folder.name
                and encode_id(session) == name
            ):
                found.append((user, session))
    return found
