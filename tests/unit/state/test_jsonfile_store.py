"""JsonFileStateStore: the store contract plus path safety, crash safety, file locks and threading."""

from __future__ import annotations

import asyncio
import fcntl
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrt import _json
from agentrt.errors import StateConflictError, StateStoreError
from agentrt.message import Msg
from agentrt.state.base import AgentState
from agentrt.state.stores import jsonfile as jsonfile_module
from agentrt.state.stores.jsonfile import JsonFileStateStore, decode_id, encode_id
from agentrt.testing import check_state_store

NASTY_IDS = [
    "..",
    ".",
    "../x",
    "/etc/passwd",
    "a/../../b",
    "..\\..\\windows",
    "C:\\x",
    "\x00",
    "a\x00b",
    "",
    "~",
    "~~",
    "~abc",
    "A",
    "a",
    "Alice",
    "alice",
    "ALICE",
    "con",
    "NUL",
    "x" * 100,
    "x" * 101,
    "y" * 5000,
    "y" * 4999 + "z",
    "🙂" * 300,
    "名前",
    " spaced ",
    "tab\there",
    "new\nline",
]


def _inside(root: Path, path: Path) -> bool:
    return path.resolve().is_relative_to(root.resolve())


async def test_contract(tmp_path: Path) -> None:
    await check_state_store(lambda: JsonFileStateStore(tmp_path / "root"), persistent=True)


async def test_contract_without_fsync(tmp_path: Path) -> None:
    await check_state_store(lambda: JsonFileStateStore(tmp_path / "root", fsync=False), persistent=True)


@given(st.text(max_size=300))
def test_encode_id_round_trips_and_is_a_plain_lower_case_name(value: str) -> None:
    name = encode_id(value)
    assert name == name.lower(), "folder names must survive case-insensitive file systems"
    assert len(name) <= 200 and name not in (".", "..")
    assert set(name) <= set("abcdefghijklmnopqrstuvwxyz0123456789_-~")
    decoded = decode_id(name)
    assert decoded == value or (decoded is None and name.startswith("~~"))


def test_encode_id_keeps_safe_ids_and_separates_the_rest() -> None:
    assert encode_id("user-42_a") == "user-42_a"
    assert len({encode_id(i) for i in NASTY_IDS}) == len(NASTY_IDS), "distinct ids must get distinct names"
    assert len({encode_id(i).lower() for i in NASTY_IDS}) == len(NASTY_IDS), "even ignoring case"
    assert decode_id(encode_id("y" * 5000)) is None  # hashed: listed through state.json instead
    assert decode_id("Not~Ours") is None and decode_id("~!!") is None


async def test_nasty_ids_stay_inside_root_and_list_exactly(tmp_path: Path) -> None:
    root = tmp_path / "root"
    async with JsonFileStateStore(root) as store:
        for i, sid in enumerate(NASTY_IDS):
            await store.append("owner", sid, [Msg.user(f"session {i}")], expected_revision=0)
        for i, uid in enumerate(NASTY_IDS):
            await store.append(uid, "s", [Msg.user(f"user {i}")], expected_revision=0)
        for i, sid in enumerate(NASTY_IDS):
            state = await store.load("owner", sid)
            assert state is not None and state.messages[0].text == f"session {i}", repr(sid)
            assert (state.user_id, state.session_id) == ("owner", sid)
        for i, uid in enumerate(NASTY_IDS):
            state = await store.load(uid, "s")
            assert state is not None and state.messages[0].text == f"user {i}", repr(uid)
            assert [s.session_id for s in await store.list_sessions(uid)] == ["s"]
        listed = [s.session_id for s in await store.list_sessions("owner")]
        assert sorted(listed) == sorted(NASTY_IDS), "listed ids must be exactly the originals"

    assert [p.name for p in tmp_path.iterdir()] == ["root"], "nothing may be created outside the root"  # noqa: ASYNC240 - the test inspects the files on disk
    created = list(root.rglob("*"))
    assert len(created) > 4 * len(NASTY_IDS)
    for path in created:
        assert _inside(root, path), f"{path} escapes {root}"
        assert len(path.name.encode()) <= 255
    for name in {p.relative_to(root).parts[0] for p in created} | {
        p.relative_to(root).parts[1] for p in created if len(p.relative_to(root).parts) > 1
    }:
        assert name not in (".", "..") and "/" not in name and "\\" not in name and "\x00" not in name


async def test_ids_differing_only_in_case_stay_apart(tmp_path: Path) -> None:
    async with JsonFileStateStore(tmp_path / "root") as store:
        for sid in ("Session", "session", "SESSION"):
            await store.append("u", sid, [Msg.user(sid)], expected_revision=0)
        for sid in ("Session", "session", "SESSION"):
            state = await store.load("u", sid)
            assert state is not None and state.messages[0].text == sid
    names = [p.name for p in (tmp_path / "root" / "u").iterdir()]
    assert len({n.lower() for n in names}) == 3


async def test_a_folder_holding_another_session_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    async with JsonFileStateStore(root) as store:
        await store.append("u", "a", [Msg.user("a")], expected_revision=0)
        (root / "u" / "a").rename(root / "u" / "b")  # as if two ids hashed to one folder
        with pytest.raises(StateStoreError, match="holds session"):
            await store.load("u", "b")
        with pytest.raises(StateStoreError, match="holds session"):
            await store.append("u", "b", [Msg.user("b")], expected_revision=1)
        with pytest.raises(StateStoreError):
            await store.list_sessions("u")


async def test_uncommitted_lines_are_invisible_and_overwritten(tmp_path: Path) -> None:
    root = tmp_path / "root"
    async with JsonFileStateStore(root) as store:
        rev = await store.append("u", "s", [Msg.user("one"), Msg.assistant("two")], expected_revision=0)
        folder = store.session_path("u", "s")
        log = folder / "messages.jsonl"
        # a crash after writing lines but before replacing state.json: a whole line and a torn one
        with open(log, "ab") as f:  # noqa: ASYNC230 - simulates a crash's torn write
            f.write(Msg.user("uncommitted").to_json().encode() + b"\n")
            f.write(Msg.user("torn").to_json().encode()[:17])
        state = await store.load("u", "s")
        assert state is not None and [m.text for m in state.messages] == ["one", "two"] and state.revision == rev
        [info] = await store.list_sessions("u")
        assert info.message_count == 2
        rev = await store.append("u", "s", [Msg.user("three")], expected_revision=rev)
        state = await store.load("u", "s")
        assert state is not None and [m.text for m in state.messages] == ["one", "two", "three"]
        lines = log.read_bytes().split(b"\n")
        assert lines[-1] == b"" and len(lines) == 4, "the leftovers must be replaced, not kept"
        assert [Msg.from_json(line).text for line in lines[:-1]] == ["one", "two", "three"]


async def test_a_crashed_save_leaves_the_previous_state(tmp_path: Path) -> None:
    async with JsonFileStateStore(tmp_path / "root") as store:
        rev = await store.append("u", "s", [Msg.user("one")], expected_revision=0)
        folder = store.session_path("u", "s")
        # a save that died before its commit: a new messages file and a temp state file
        (folder / "messages.2.jsonl").write_bytes(Msg.user("new").to_json().encode() + b"\n")
        (folder / ".state.json.deadbeef.tmp").write_bytes(b'{"revision": 2')
        state = await store.load("u", "s")
        assert state is not None and [m.text for m in state.messages] == ["one"]
        rev = await store.save(
            AgentState(user_id="u", session_id="s", messages=[Msg.user("saved")]), expected_revision=rev
        )
        state = await store.load("u", "s")
        assert state is not None and [m.text for m in state.messages] == ["saved"] and state.revision == rev
        assert sorted(p.name for p in folder.iterdir()) == [".lock", "messages.2.jsonl", "state.json"]
        rev = await store.append("u", "s", [Msg.user("after")], expected_revision=rev)
        state = await store.load("u", "s")
        assert state is not None and [m.text for m in state.messages] == ["saved", "after"]


async def test_a_folder_without_state_file_is_no_session(tmp_path: Path) -> None:
    async with JsonFileStateStore(tmp_path / "root") as store:
        folder = store.session_path("u", "s")
        folder.mkdir(parents=True)
        (folder / "messages.jsonl").write_bytes(b'{"half a line')  # an interrupted first write or delete
        assert await store.load("u", "s") is None
        assert await store.list_sessions("u") == []
        assert await store.append("u", "s", [Msg.user("fresh")], expected_revision=0) == 1
        state = await store.load("u", "s")
        assert state is not None and [m.text for m in state.messages] == ["fresh"]


@pytest.mark.parametrize(
    "damage",
    ["state not json", "state not object", "bad count", "bad messages file", "short log", "bad line", "partial line"],
)
async def test_corruption_raises_state_store_error(tmp_path: Path, damage: str) -> None:
    async with JsonFileStateStore(tmp_path / "root") as store:
        await store.append("u", "s", [Msg.user("one"), Msg.user("two")], expected_revision=0)
        folder = store.session_path("u", "s")
        state_file, log = folder / "state.json", folder / "messages.jsonl"
        doc = _json.loads(state_file.read_bytes())
        if damage == "state not json":
            state_file.write_text("{oops")
        elif damage == "state not object":
            state_file.write_text("[]")
        elif damage == "bad count":
            state_file.write_bytes(_json.dumps_bytes({**doc, "message_count": "many"}))
        elif damage == "bad messages file":
            state_file.write_bytes(_json.dumps_bytes({**doc, "messages_file": "../../../etc/passwd"}))
        elif damage == "short log":
            log.write_bytes(log.read_bytes()[:-5])
        elif damage == "bad line":
            first, second, _ = log.read_bytes().split(b"\n")
            log.write_bytes(b"x" * len(first) + b"\n" + second + b"\n")
        else:
            state_file.write_bytes(_json.dumps_bytes({**doc, "messages_bytes": doc["messages_bytes"] - 3}))
        with pytest.raises(StateStoreError):
            await store.load("u", "s")
        if damage.startswith(("state", "bad count")):
            with pytest.raises(StateStoreError):
                await store.list_sessions("u")
            with pytest.raises(StateStoreError):
                await store.append("u", "s", [Msg.user("three")], expected_revision=1)


async def test_conflicts_leave_no_trace(tmp_path: Path) -> None:
    root = tmp_path / "root"
    async with JsonFileStateStore(root) as store:
        with pytest.raises(StateConflictError):
            await store.append("u", "missing", [Msg.user("x")], expected_revision=3)
        assert not root.exists(), "a rejected write to a missing session must not create folders"
        rev = await store.append("u", "s", [Msg.user("one")], expected_revision=0)
        with pytest.raises(StateConflictError):
            await store.append("u", "s", [Msg.user("late")], fields={"summary": "x"}, expected_revision=0)
        with pytest.raises(StateConflictError):
            await store.save(AgentState(user_id="u", session_id="s"), expected_revision=0)
        state = await store.load("u", "s")
        assert state is not None and [m.text for m in state.messages] == ["one"]
        assert state.summary is None and state.revision == rev


async def test_delete_removes_the_folders(tmp_path: Path) -> None:
    root = tmp_path / "root"
    async with JsonFileStateStore(root) as store:
        await store.append("u", "a", [Msg.user("a")], expected_revision=0)
        await store.append("u", "b", [Msg.user("b")], expected_revision=0)
        assert await store.delete("u", "a") is True
        assert not store.session_path("u", "a").exists() and (root / "u").is_dir()
        assert await store.delete("u", "b") is True
        assert not (root / "u").exists(), "an empty user folder goes too"
        assert await store.delete("u", "b") is False
        assert await store.delete("nobody", "b") is False
        assert list(root.iterdir()) == []


async def test_append_waits_for_the_file_lock_held_elsewhere(tmp_path: Path) -> None:
    async with JsonFileStateStore(tmp_path / "root") as store:
        await store.append("u", "s", [Msg.user("one")], expected_revision=0)
        # flock on a separate open file description conflicts exactly as another process would
        fd = os.open(store.session_path("u", "s") / ".lock", os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            task = asyncio.ensure_future(store.append("u", "s", [Msg.user("two")], expected_revision=1))
            await asyncio.sleep(0.2)
            assert not task.done(), "the write must wait for the lock"
            state = await store.load("u", "s")  # loads take no lock
            assert state is not None and len(state.messages) == 1
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        assert await task == 2


_WORKER = """
import asyncio, sys
from agentrt.errors import StateConflictError
from agentrt.message import Msg
from agentrt.state.stores.jsonfile import JsonFileStateStore

async def main(root, tag, n):
    store = JsonFileStateStore(root)
    done = 0
    while done < n:
        state = await store.load("u", "shared")
        try:
            await store.append("u", "shared", [Msg.user(f"{tag}-{done}")],
                               expected_revision=0 if state is None else state.revision)
        except StateConflictError:
            continue
        done += 1

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


async def test_two_processes_writing_one_session_lose_nothing(tmp_path: Path) -> None:
    root = tmp_path / "root"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    procs = [
        await asyncio.create_subprocess_exec(sys.executable, "-c", _WORKER, str(root), tag, "25", env=env)
        for tag in ("p", "q")
    ]
    codes = await asyncio.gather(*(p.wait() for p in procs))
    assert codes == [0, 0]
    async with JsonFileStateStore(root) as store:
        state = await store.load("u", "shared")
    assert state is not None and state.revision == 50 and len(state.messages) == 50
    texts = [m.text for m in state.messages]
    for tag in ("p", "q"):
        assert [t for t in texts if t.startswith(tag)] == [f"{tag}-{i}" for i in range(25)]


async def test_file_work_runs_in_worker_threads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[int] = []

    def spy(name: str) -> Any:
        original = getattr(jsonfile_module, name)

        def wrapper(*args: Any) -> Any:
            threads.append(threading.get_ident())
            return original(*args)

        return wrapper

    for name in ("_load", "_append", "_save", "_delete", "_list_sessions"):
        monkeypatch.setattr(jsonfile_module, name, spy(name))
    async with JsonFileStateStore(tmp_path / "root") as store:
        await store.append("u", "s", [Msg.user("hi")], expected_revision=0)
        await store.load("u", "s")
        await store.save(AgentState(user_id="u", session_id="s"))
        await store.list_sessions("u")
        await store.delete("u", "s")
    assert len(threads) == 5 and threading.get_ident() not in threads


async def test_text_that_is_not_unicode_is_refused(tmp_path: Path) -> None:
    async with JsonFileStateStore(tmp_path / "root") as store:
        with pytest.raises(StateStoreError, match="Unicode"):
            await store.append("u", "\ud800", [Msg.user("x")], expected_revision=0)
        with pytest.raises(StateStoreError, match="Unicode"):
            await store.list_sessions("\udfff")
        with pytest.raises(StateStoreError, match="Unicode"):
            await store.append("u", "s", [Msg.user("\ud800")], expected_revision=0)
        assert await store.load("u", "s") is None
    assert not (tmp_path / "root").exists()


async def test_closed_store_refuses_work(tmp_path: Path) -> None:
    store = JsonFileStateStore(tmp_path / "root")
    await store.close()
    await store.close()
    with pytest.raises(StateStoreError, match="closed"):
        await store.load("u", "s")


async def test_field_that_is_not_unicode_is_refused(tmp_path: Path) -> None:
    async with JsonFileStateStore(tmp_path / "root") as store:
        await store.append("u", "s", [Msg.user("one")], expected_revision=0)
        with pytest.raises(StateStoreError, match="Unicode"):
            await store.append("u", "s", [Msg.user("two")], fields={"summary": "\ud800"}, expected_revision=1)
        state = await store.load("u", "s")
        assert state is not None and [m.text for m in state.messages] == ["one"] and state.revision == 1


# -- the legacy layout (sessions without an agent) ------------------------------------------------


def _legacy_session(root: Path, user: str, session: str, texts: list[str]) -> Path:
    """A session folder as agentrt wrote it before sessions had an agent: <root>/<user>/<session>/."""
    folder = root / encode_id(user) / encode_id(session)
    folder.mkdir(parents=True)
    lines = b"".join(Msg.user(text).to_json().encode() + b"\n" for text in texts)
    (folder / "messages.jsonl").write_bytes(lines)
    doc = {
        "format": "agentrt.state",
        "version": 1,
        "user_id": user,
        "session_id": session,
        "revision": 2,
        "created_at": 1000.0,
        "updated_at": 2000.0,
        "summary": "old",
        "message_count": len(texts),
        "messages_bytes": len(lines),
        "messages_file": "messages.jsonl",
    }
    (folder / "state.json").write_bytes(_json.dumps_bytes(doc))
    return folder


async def test_legacy_layout_is_read_as_agent_empty_and_migrated(tmp_path: Path) -> None:
    root = tmp_path / "root"
    _legacy_session(root, "alice", "bot:s1", ["hello", "again"])
    _legacy_session(root, "alice", "plain", ["p"])
    _legacy_session(root, "Bob", "other:x", ["b"])
    async with JsonFileStateStore(root) as store:
        state = await store.load("alice", "bot:s1")
        assert state is not None and state.agent == "" and [m.text for m in state.messages] == ["hello", "again"]
        assert (state.revision, state.summary) == (2, "old")
        assert store.has_legacy_sessions is True
        assert await store.load("alice", "s1", agent="bot") is None
        assert {(i.agent, i.session_id) for i in await store.list_sessions("alice")} == {("", "bot:s1"), ("", "plain")}
        assert await store.migrate_legacy("bot") == 1
        assert store.has_legacy_sessions is True  # "plain" and Bob's session are left
    moved = root / "@bot" / "alice" / "s1"
    doc = _json.loads((moved / "state.json").read_bytes())
    assert (doc["agent"], doc["user_id"], doc["session_id"], doc["summary"]) == ("bot", "alice", "s1", "old")
    assert not (root / "alice" / encode_id("bot:s1")).exists(), "the legacy folder is gone"
    assert (root / "alice" / "plain" / "state.json").exists()
    async with JsonFileStateStore(root) as store:
        state = await store.load("alice", "s1", agent="bot")
        assert state is not None and [m.text for m in state.messages] == ["hello", "again"]
        await store.append("alice", "s1", [Msg.user("new")], expected_revision=state.revision, agent="bot")
        assert await store.migrate_legacy("other") == 1
        assert await store.migrate_legacy("bot", all_unprefixed=True) == 1
        assert store.has_legacy_sessions is False
        listed = {(i.agent, i.user_id, i.session_id) for i in await store.list_sessions("Bob")}
        assert listed == {("other", "Bob", "x")}
    assert sorted(p.name for p in root.iterdir()) == ["@bot", "@other"], "no legacy folders are left"


async def test_agents_get_a_folder_level_of_their_own(tmp_path: Path) -> None:
    root = tmp_path / "root"
    async with JsonFileStateStore(root) as store:
        await store.append("alice", "s1", [Msg.user("a")], expected_revision=0, agent="alpha")
        await store.append("alice", "s1", [Msg.user("b")], expected_revision=0, agent="../Beta")
        assert store.has_legacy_sessions is False
        for agent in ("alpha", "../Beta"):
            assert _inside(root, store.session_path("alice", "s1", agent=agent))
    assert (root / "@alpha" / "alice" / "s1" / "state.json").exists()
    beta = root / ("@" + encode_id("../Beta")) / "alice" / "s1" / "state.json"
    assert _json.loads(beta.read_bytes())["agent"] == "../Beta"
    assert sorted(p.name for p in root.iterdir()) == sorted(["@alpha", "@" + encode_id("../Beta")])
