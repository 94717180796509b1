"""SQL session locks are leases with fencing tokens, on real PostgreSQL and MariaDB.

A holder that stops heartbeating (paused in process, or a real SIGSTOP) loses the lock after about
`lock_ttl`; when it wakes up its writes raise `FencedError` and the stored session is unchanged.
A live holder keeps its lock well past the ttl, and a SIGKILLed one frees it at once. The side
effects checked are the rows in the tables (sessions, messages, session_fences), read back with
plain SQL or a fresh store, never only the exceptions.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy.ext.asyncio import create_async_engine

from agentrt.errors import FencedError, SessionBusyError
from agentrt.message import Msg
from agentrt.state.base import AgentState
from agentrt.state.sql_lock import SqlSessionLock
from agentrt.state.stores.sql import SqlStateStore

pytestmark = pytest.mark.integration

SRC = Path(__file__).resolve().parents[2] / "src"
TTL = 1.0  # the shortest lease MySQL/MariaDB can express (wait_timeout is in whole seconds)
MARGIN = 1.0  # how late after the ttl the server may free a paused holder's lock


@pytest.fixture(params=["postgres", "mysql"])
def db_url(request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


@pytest.fixture
async def prefix(db_url: str, unique: str) -> AsyncIterator[str]:
    """A table prefix owned by the test; its tables are dropped at the end."""
    name = f"f_{unique}_"
    yield name
    async with SqlStateStore(db_url, table_prefix=name) as cleaner:
        await cleaner.drop_tables()


def _is_pg(url: str) -> bool:
    return url.startswith("postgresql")


def _text(value: Any) -> str:
    return bytes(value).decode() if isinstance(value, (bytes, bytearray, memoryview)) else str(value)


async def _sql(url: str, statement: str, **params: Any) -> list[tuple[Any, ...]]:
    engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            result = await conn.execute(sa.text(statement), params)
            return [tuple(row) for row in result.all()] if result.returns_rows else []
    finally:
        await engine.dispose()


async def _fences(url: str, prefix: str) -> dict[tuple[str, str, str], int]:
    """Every fence row: (user, agent, session) -> token."""
    rows = await _sql(url, f"SELECT user_id, agent, session_id, token FROM {prefix}session_fences")
    return {(_text(u), _text(a), _text(s)): int(t) for u, a, s, t in rows}


async def _rows(url: str, prefix: str, user: str, session: str, agent: str) -> tuple[int, int, list[str]]:
    """The session's stored revision and message count (its row), and its message texts (its message rows)."""
    key: dict[str, Any] = {"u": user, "s": session, "a": agent}
    if not _is_pg(url):
        key = {k: v.encode() for k, v in key.items()}  # VARBINARY keys
    where = "user_id = :u AND session_id = :s AND agent = :a"
    found = await _sql(url, f"SELECT revision, message_count FROM {prefix}sessions WHERE {where}", **key)
    bodies = await _sql(url, f"SELECT body FROM {prefix}messages WHERE {where} ORDER BY seq", **key)
    texts = [json.loads(_text(b))["content"][0]["text"] for (b,) in bodies]
    if not found:
        return 0, 0, texts
    return int(found[0][0]), int(found[0][1]), texts


async def _stop_heartbeat(hold: SqlSessionLock) -> None:
    """Simulate a paused process: its lock connection gets no more pings (the body goes on later)."""
    beat = hold._heartbeat
    assert beat is not None, "a held lease has a heartbeat"
    hold._stop.set()
    await asyncio.wait([beat])


async def _lease_runs_out(url: str, store: SqlStateStore, user: str, session: str, agent: str) -> None:
    """What the server does to a paused holder after the ttl, now: end the connection holding the lock."""
    name = store._lock_params(agent, user, session)["main"]
    if _is_pg(url):
        key = name & 0xFFFFFFFFFFFFFFFF
        pids = await _sql(
            url,
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND classid = :c AND objid = :o AND objsubid = 1",
            c=key >> 32,
            o=key & 0xFFFFFFFF,
        )
        assert pids == [(True,)], pids
    else:
        owner = (await _sql(url, "SELECT IS_USED_LOCK(:n)", n=name))[0][0]
        assert owner is not None
        await _sql(url, f"KILL {int(owner)}")


async def _acquire_time(store: SqlStateStore, user: str, session: str, agent: str, timeout: float) -> float:
    """Seconds until `store` gets the session's lock (released again at once)."""
    start = time.monotonic()
    async with store.session_lock(user, session, agent=agent, timeout=timeout):
        return time.monotonic() - start


# -- in process ------------------------------------------------------------------------------------


async def test_a_paused_holder_loses_the_lock_after_the_ttl_and_cannot_write(
    db_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    # two "processes": separate stores, and separate tasks (each lock's fence is its task's context)
    zombie_store = SqlStateStore(db_url, table_prefix=prefix, lock_ttl=TTL)
    other_store = SqlStateStore(db_url, table_prefix=prefix, lock_ttl=TTL, lock_poll=0.02)
    paused = asyncio.Event()
    written = asyncio.Event()
    zombie_done = asyncio.Event()
    tokens: dict[str, int] = {}
    outcomes: list[str] = []

    async def zombie() -> None:
        async with zombie_store.session_lock("u", "s", agent="a") as hold:
            assert hold.fencing_token is not None
            tokens["zombie"] = hold.fencing_token
            assert await _fences(db_url, prefix) == {("u", "a", "s"): hold.fencing_token}
            await zombie_store.append("u", "s", [Msg.user("before")], expected_revision=0, agent="a")
            await _stop_heartbeat(hold)
            paused.set()
            await written.wait()  # wakes up after the lease ran out and another process wrote
            stale = AgentState(agent="a", user_id="u", session_id="s", messages=[Msg.user("overwrite")])
            attempts: list[Callable[[], Awaitable[object]]] = [
                lambda: zombie_store.append("u", "s", [Msg.user("stale")], expected_revision=2, agent="a"),
                lambda: zombie_store.save(stale, expected_revision=2),
                lambda: zombie_store.save(stale),  # unconditional saves too
                lambda: zombie_store.delete("u", "s", agent="a"),
            ]
            for attempt in attempts:
                try:
                    await attempt()
                    outcomes.append("written")
                except FencedError as exc:
                    assert "taken over" in str(exc)
                    outcomes.append("fenced")
        zombie_done.set()

    async def successor() -> None:
        await paused.wait()
        start = time.monotonic()
        async with other_store.session_lock("u", "s", agent="a", timeout=TTL + 5) as hold:
            waited = time.monotonic() - start
            # the zombie's lock connection was last used at most ttl/3 before the pause
            assert TTL / 2 <= waited <= TTL + MARGIN, waited
            assert hold.fencing_token is not None
            tokens["successor"] = hold.fencing_token
            assert await _fences(db_url, prefix) == {("u", "a", "s"): hold.fencing_token}
            await other_store.append("u", "s", [Msg.assistant("after")], expected_revision=1, agent="a")
            written.set()
            await zombie_done.wait()  # the zombie wrote (or not) while this process held the lock
            assert await _rows(db_url, prefix, "u", "s", "a") == (2, 2, ["before", "after"])

    try:
        with caplog.at_level(logging.WARNING, logger="agentrt.state"):
            async with zombie_store.session_lock("u", "s", agent="a") as first:
                with pytest.raises(SessionBusyError):
                    async with other_store.session_lock("u", "s", agent="a", timeout=0):
                        pass
                assert first.fencing_token is not None
                tokens["first"] = first.fencing_token
            await asyncio.wait_for(asyncio.gather(zombie(), successor()), 30)
            # the zombie's exit found its connection gone, and said so instead of failing
            assert any("session 's' of user 'u'" in r.getMessage() for r in caplog.records)
        assert outcomes == ["fenced"] * 4
        assert tokens["first"] < tokens["zombie"] < tokens["successor"]
        assert await _fences(db_url, prefix) == {("u", "a", "s"): tokens["successor"]}
        # nothing was written by the zombie: read back by a fresh store too
        async with SqlStateStore(db_url, table_prefix=prefix) as fresh:
            state = await fresh.load("u", "s", agent="a")
            assert state is not None and state.revision == 2
            assert [m.text for m in state.messages] == ["before", "after"]
            # writes outside any lock are not fenced
            assert await fresh.append("u", "s", [Msg.user("unlocked")], expected_revision=2, agent="a") == 3
        # the former zombie takes the lock again like anyone else, with a higher token
        async with zombie_store.session_lock("u", "s", agent="a", timeout=5) as again:
            assert again.fencing_token is not None and again.fencing_token > tokens["successor"]
            assert await zombie_store.append("u", "s", [Msg.user("back")], expected_revision=3, agent="a") == 4
        assert await _rows(db_url, prefix, "u", "s", "a") == (4, 4, ["before", "after", "unlocked", "back"])
    finally:
        await zombie_store.close()
        await other_store.close()


async def test_a_heartbeating_holder_keeps_its_lock_past_the_ttl(db_url: str, prefix: str) -> None:
    ttl = 2.0  # pings every 0.67 s: only a stall of over 1.3 s (a loaded machine) could lose it
    holder_store = SqlStateStore(db_url, table_prefix=prefix, lock_ttl=ttl)
    other_store = SqlStateStore(db_url, table_prefix=prefix, lock_ttl=ttl)
    try:
        async with holder_store.session_lock("u", "s") as hold:
            token = hold.fencing_token
            revision = 0
            start = time.monotonic()
            while time.monotonic() - start < 2.25 * ttl:
                await asyncio.sleep(ttl / 4)
                revision = await holder_store.append("u", "s", [Msg.user(f"m{revision}")], expected_revision=revision)
                with pytest.raises(SessionBusyError):
                    async with other_store.session_lock("u", "s", timeout=0):
                        pass
            assert not hold.lost and hold.held
            assert await _fences(db_url, prefix) == {("u", "", "s"): token}
        assert revision >= 8
        assert await _rows(db_url, prefix, "u", "s", "") == (revision, revision, [f"m{i}" for i in range(revision)])
        # Released at the exit, not when the lease runs out (ttl = 2 s): half the ttl tells the two
        # apart with room for a loaded machine (0.63 s was seen on MariaDB during a full suite run).
        assert await _acquire_time(other_store, "u", "s", "", 1) < ttl / 2
    finally:
        await holder_store.close()
        await other_store.close()


async def test_lock_ttl_none_is_no_lease_but_writes_stay_fenced(db_url: str, prefix: str) -> None:
    old = SqlStateStore(db_url, table_prefix=prefix, lock_ttl=None)
    other = SqlStateStore(db_url, table_prefix=prefix, lock_ttl=None, lock_poll=0.02)
    try:
        async with old.session_lock("u", "s") as hold:
            assert hold._heartbeat is None
            await asyncio.sleep(1.2)  # longer than any lease in these tests: still held
            with pytest.raises(SessionBusyError):
                async with other.session_lock("u", "s", timeout=0.1):
                    pass
            # a connection reset (the only way to lose it) lets the next process in, and fences this one
            await _lease_runs_out(db_url, old, "u", "s", "")
            async with other.session_lock("u", "s", timeout=5):
                await other.append("u", "s", [Msg.user("other")], expected_revision=0)
            with pytest.raises(FencedError):
                await old.append("u", "s", [Msg.user("stale")], expected_revision=1)
        assert await _rows(db_url, prefix, "u", "s", "") == (1, 1, ["other"])
    finally:
        await old.close()
        await other.close()


async def test_lock_ttl_is_validated(db_url: str) -> None:
    from agentrt.errors import UserError

    for bad in (0, 0.05, -1, float("inf"), "30", True):
        with pytest.raises(UserError, match="lock_ttl"):
            SqlStateStore(db_url, lock_ttl=bad)  # type: ignore[arg-type]
    assert SqlStateStore(db_url).lock_ttl == 30.0
    assert SqlStateStore(db_url, lock_ttl=None).lock_ttl is None


async def test_the_lease_setting_never_reaches_pooled_connections(db_url: str, prefix: str) -> None:
    """A lock connection goes back to its pool with the server's idle timeout: idle pooled ones live on."""
    engine = create_async_engine(db_url, pool_size=1, max_overflow=0)  # one connection: locks and data
    setting = "current_setting('idle_session_timeout')" if _is_pg(db_url) else "@@session.wait_timeout"
    try:
        async with engine.connect() as conn:
            before = (await conn.execute(sa.text(f"SELECT {setting}"))).scalar()
        async with SqlStateStore(engine=engine, table_prefix=prefix, lock_ttl=TTL) as store:
            await store.create_tables()
            async with store.session_lock("u", "s"):
                pass
            await asyncio.sleep(TTL + 0.6)  # the lease would have ended the connection by now
            async with engine.connect() as conn:
                assert (await conn.execute(sa.text(f"SELECT {setting}"))).scalar() == before
            assert await store.append("u", "s", [Msg.user("hi")], expected_revision=0) == 1
    finally:
        await engine.dispose()


# -- fence rows --------------------------------------------------------------------------------------


async def test_fence_rows_go_with_their_sessions_but_never_under_a_holder(db_url: str, prefix: str) -> None:
    long_user = "ü" * 300  # hashed in the key columns: its lock is named after the original id
    long_key = "sha256:" + hashlib.sha256(long_user.encode()).hexdigest()
    async with (
        SqlStateStore(db_url, table_prefix=prefix) as store,
        SqlStateStore(db_url, table_prefix=prefix) as other_process,
    ):
        tokens: dict[tuple[str, str], int] = {}
        for user, session in [("u", "s1"), ("u", "s2"), ("u", "s3"), ("u", "s4"), ("v", "s1"), (long_user, "s1")]:
            async with store.session_lock(user, session) as hold:
                await store.append(user, session, [Msg.user(session)], expected_revision=0)
                assert hold.fencing_token is not None
                tokens[(user, session)] = hold.fencing_token
        async with store.session_lock("u", "never-written"):
            pass
        assert len(await _fences(db_url, prefix)) == 7

        # delete: the session's fence goes with it
        assert await store.delete("u", "s1") is True
        assert ("u", "", "s1") not in await _fences(db_url, prefix)

        # ... unless the session is locked (here by another process): its holder keeps writing
        async with other_process.session_lock("u", "s2") as hold:
            assert await store.delete("u", "s2") is True
            assert ("u", "", "s2") in await _fences(db_url, prefix), "a held lock keeps its fence"
            assert await other_process.append("u", "s2", [Msg.user("again")], expected_revision=0) == 1
            # delete_user: every session goes, the fence of the locked one stays
            assert await store.delete_user("u") == 3
            fences = await _fences(db_url, prefix)
            assert sorted(k for k in fences if k[0] == "u") == [("u", "", "s2")], fences
            assert hold.fencing_token is not None
            second = hold.fencing_token
        assert second > tokens[("u", "s2")]
        assert await store.delete_user("u") == 0  # once free, a second call removes the leftover fence
        fences = await _fences(db_url, prefix)
        assert sorted(fences) == sorted([("v", "", "s1"), (long_key, "", "s1")]), fences

        # a fence left without a session (locked, never written) goes with prune, by its token's time
        async with store.session_lock("w", "lonely"):
            pass
        assert await store.prune(3600) == 0
        assert ("w", "", "lonely") in await _fences(db_url, prefix), "locked within the hour: kept"
        await asyncio.sleep(0.05)
        async with other_process.session_lock("w", "held"):
            assert await store.prune(0) == 2  # v/s1 and the long user's s1; the leftover w/lonely goes too
            assert sorted(await _fences(db_url, prefix)) == [("w", "", "held")], "only the held one is left"
        assert await store.prune(0) == 0
        assert await _fences(db_url, prefix) == {}

        # a fence created again after its row went still outgrows every token handed out before
        async with store.session_lock("u", "s2") as hold:
            assert hold.fencing_token is not None and hold.fencing_token > second


async def test_fence_table_is_added_to_existing_deployments(db_url: str, prefix: str) -> None:
    async with SqlStateStore(db_url, table_prefix=prefix, lock_ttl=None) as store:
        await store.append("u", "s", [Msg.user("old")], expected_revision=0)
    await _sql(db_url, f"DROP TABLE {prefix}session_fences")  # tables of the previous version
    async with SqlStateStore(db_url, table_prefix=prefix) as store:
        async with store.session_lock("u", "s") as hold:
            await store.append("u", "s", [Msg.user("new")], expected_revision=1)
        assert await _fences(db_url, prefix) == {("u", "", "s"): hold.fencing_token}
    assert await _rows(db_url, prefix, "u", "s", "") == (2, 2, ["old", "new"])


# -- other processes: SIGKILL, SIGSTOP ---------------------------------------------------------------

_HOLDER = """
import asyncio, json, sys
from agentrt.errors import FencedError
from agentrt.message import Msg
from agentrt.state.stores.sql import SqlStateStore

async def main(url, prefix, ttl):
    loop = asyncio.get_running_loop()
    async with SqlStateStore(url, table_prefix=prefix, lock_ttl=ttl) as store:
        async with store.session_lock("u", "s", agent="a", timeout=30) as hold:
            rev = await store.append("u", "s", [Msg.user("before")], expected_revision=0, agent="a")
            print(json.dumps({"token": hold.fencing_token, "revision": rev}), flush=True)
            await loop.run_in_executor(None, sys.stdin.readline)  # paused (or killed) around here
            await asyncio.sleep(ttl / 2)  # woken: the heartbeat finds its connection gone
            try:
                await store.append("u", "s", [Msg.user("stale")], expected_revision=2, agent="a")
                outcome = "written"
            except FencedError:
                outcome = "FencedError"
            print(json.dumps({"outcome": outcome, "lost": hold.lost}), flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
"""

_WAITER = """
import asyncio, sys
from agentrt.state.stores.sql import SqlStateStore

async def main(url, prefix, ttl):
    async with SqlStateStore(url, table_prefix=prefix, lock_ttl=ttl, lock_poll=0.01) as store:
        await store.create_tables()
        print("waiting", flush=True)
        async with store.session_lock("u", "s", agent="a", timeout=120):
            print("got it", flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
"""


async def _spawn(script: str, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )


async def _line(proc: asyncio.subprocess.Process) -> str:
    assert proc.stdout is not None and proc.stderr is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    if not line:
        raise AssertionError(f"the child exited: {(await proc.stderr.read()).decode()[-3000:]}")
    return line.decode().strip()


async def _reap(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        await proc.wait()


async def test_a_sigkilled_holder_frees_the_lock_at_once(db_url: str, prefix: str) -> None:
    ttl = 3.0
    proc = await _spawn(_HOLDER, db_url, prefix, str(ttl))
    try:
        held = json.loads(await _line(proc))
        async with SqlStateStore(db_url, table_prefix=prefix, lock_poll=0.01) as store:
            with pytest.raises(SessionBusyError):
                async with store.session_lock("u", "s", agent="a", timeout=0):
                    pass
            proc.kill()
            killed = time.monotonic()
            async with store.session_lock("u", "s", agent="a", timeout=ttl + 5) as hold:
                assert time.monotonic() - killed < ttl / 3, "the server frees a dead connection's lock at once"
                assert hold.fencing_token is not None and hold.fencing_token > held["token"]
                assert await _fences(db_url, prefix) == {("u", "a", "s"): hold.fencing_token}
        assert await _rows(db_url, prefix, "u", "s", "a") == (1, 1, ["before"])
    finally:
        await _reap(proc)


async def test_a_sigstopped_holder_loses_the_lock_and_is_fenced_when_it_wakes(db_url: str, prefix: str) -> None:
    proc = await _spawn(_HOLDER, db_url, prefix, str(TTL))
    try:
        held = json.loads(await _line(proc))
        assert held["revision"] == 1
        async with SqlStateStore(db_url, table_prefix=prefix, lock_poll=0.01) as store:
            proc.send_signal(signal.SIGSTOP)  # no heartbeat, but its TCP connections stay up
            stopped = time.monotonic()
            async with store.session_lock("u", "s", agent="a", timeout=TTL + 5) as hold:
                waited = time.monotonic() - stopped
                assert TTL / 2 <= waited <= TTL + MARGIN, waited
                assert hold.fencing_token is not None and hold.fencing_token > held["token"]
                await store.append("u", "s", [Msg.assistant("after")], expected_revision=1, agent="a")
                proc.send_signal(signal.SIGCONT)
                assert proc.stdin is not None
                proc.stdin.write(b"go\n")
                await proc.stdin.drain()
                woke = json.loads(await _line(proc))
                assert woke == {"outcome": "FencedError", "lost": True}, woke
                assert await _fences(db_url, prefix) == {("u", "a", "s"): hold.fencing_token}
        assert await asyncio.wait_for(proc.wait(), 30) == 0
        assert await _rows(db_url, prefix, "u", "s", "a") == (2, 2, ["before", "after"])
    finally:
        await _reap(proc)


async def test_a_sigstopped_waiter_in_line_does_not_block_the_session(db_url: str, prefix: str) -> None:
    """A waiter holds the session's "want" lock; paused, it loses that after the ttl too."""
    async with (
        SqlStateStore(db_url, table_prefix=prefix, lock_ttl=TTL) as holder_store,
        SqlStateStore(db_url, table_prefix=prefix, lock_ttl=TTL, lock_poll=0.01) as third,
    ):
        await holder_store.create_tables()
        want = holder_store._lock_params("a", "u", "s")["want"]
        proc = await _spawn(_WAITER, db_url, prefix, str(TTL))
        try:
            async with holder_store.session_lock("u", "s", agent="a"):
                assert await _line(proc) == "waiting"
                deadline = time.monotonic() + 20
                while not await _is_used(db_url, want):  # the waiter is in line
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.02)
                proc.send_signal(signal.SIGSTOP)
                stopped = time.monotonic()
            with pytest.raises(SessionBusyError):  # the paused waiter is first in line
                async with third.session_lock("u", "s", agent="a", timeout=0.2):
                    pass
            async with third.session_lock("u", "s", agent="a", timeout=TTL + 5):
                assert time.monotonic() - stopped <= TTL + MARGIN
                assert not await _is_used(db_url, want)
        finally:
            await _reap(proc)


async def _is_used(url: str, name: Any) -> bool:
    if _is_pg(url):
        key = name & 0xFFFFFFFFFFFFFFFF
        rows = await _sql(
            url,
            "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND classid = :c AND objid = :o AND objsubid = 1",
            c=key >> 32,
            o=key & 0xFFFFFFFF,
        )
        return bool(rows)
    return (await _sql(url, "SELECT IS_USED_LOCK(:n)", n=name))[0][0] is not None


# -- any interleaving ----------------------------------------------------------------------------------


class _Holder:
    """One process holding (or not) the session's lock: its own store, and a task inside ``async with``."""

    def __init__(self, index: int, store: SqlStateStore, session: str) -> None:
        self.index = index
        self.store = store
        self.session = session
        self.inbox: asyncio.Queue[tuple[str, asyncio.Future[str]]] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None
        self.hold: SqlSessionLock | None = None
        self.token = 0

    async def _run(self, entered: asyncio.Future[None]) -> None:
        async with self.store.session_lock("u", self.session, agent="a", timeout=10) as hold:
            self.hold = hold
            assert hold.fencing_token is not None
            self.token = hold.fencing_token
            entered.set_result(None)
            while True:
                command, reply = await self.inbox.get()
                if command == "release":
                    reply.set_result("released")
                    return
                state = await self.store.load("u", self.session, agent="a")
                text = f"by {self.index} at {self.token}"
                try:
                    await self.store.append(
                        "u",
                        self.session,
                        [Msg.user(text)],
                        expected_revision=0 if state is None else state.revision,
                        agent="a",
                    )
                    reply.set_result(text)
                except FencedError:
                    reply.set_result("fenced")

    async def acquire(self) -> None:
        entered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.task = asyncio.create_task(self._run(entered))
        await asyncio.wait([entered, self.task], return_when=asyncio.FIRST_COMPLETED)
        if not entered.done():
            await self.task  # raises what went wrong

    async def send(self, command: str) -> str:
        reply: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        await self.inbox.put((command, reply))
        return await asyncio.wait_for(reply, 10)

    async def release(self) -> None:
        await self.send("release")
        assert self.task is not None
        await asyncio.wait_for(self.task, 10)
        self.task = None
        self.hold = None


_STEPS = st.lists(
    st.tuples(st.sampled_from(["acquire", "pause", "resume", "write", "write", "release"]), st.integers(0, 5)),
    min_size=1,
    max_size=16,
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(holders=st.integers(min_value=2, max_value=3), steps=_STEPS)
@example(  # A pauses past its lease, B takes over and writes, A wakes up and tries to write
    holders=2,
    steps=[("acquire", 0), ("write", 0), ("pause", 0), ("acquire", 0), ("write", 0), ("resume", 0), ("write", 0)],
)
async def test_only_the_latest_holder_writes_in_any_interleaving(
    db_url: str, prefix: str, holders: int, steps: list[tuple[str, int]]
) -> None:
    """Processes acquire, pause past their lease, wake up and write in any order.

    Each step's number picks among the holders the action applies to (acquire: those not
    holding; pause, release: those holding and awake; resume: the paused; write: every holder,
    a paused one waking up for it). A write lands exactly when its holder has the highest token
    handed out so far (took the lock last), and the stored messages are exactly the writes that
    landed, in order.
    """
    session = uuid.uuid4().hex
    # the lease runs out when the test says (`_lease_runs_out`): a long ttl keeps a loaded machine out of it
    stores = [SqlStateStore(db_url, table_prefix=prefix, lock_poll=0.01) for _ in range(holders)]
    procs = [_Holder(i, store, session) for i, store in enumerate(stores)]
    holding: set[int] = set()  # inside their `async with`
    frozen: set[int] = set()  # paused: they do nothing until resumed
    lease_gone: set[int] = set()  # their lock connection was ended
    latest: int | None = None  # the holder with the highest token
    tokens: list[int] = []
    landed: list[str] = []
    try:
        for action, pick in steps:
            awake = sorted(holding - frozen)
            candidates = {
                "acquire": sorted(set(range(holders)) - holding),
                "resume": sorted(frozen),
                "write": sorted(holding),
            }.get(action, awake)
            if not candidates:
                continue
            i = candidates[pick % len(candidates)]
            if action == "acquire":
                if holding - lease_gone:  # someone else holds the lock: busy
                    with pytest.raises(SessionBusyError):
                        async with stores[i].session_lock("u", session, agent="a", timeout=0):
                            pass
                    continue
                await procs[i].acquire()
                assert not tokens or procs[i].token > tokens[-1], "tokens strictly increase"
                tokens.append(procs[i].token)
                holding.add(i)
                latest = i
            elif action == "pause":
                hold = procs[i].hold
                assert hold is not None
                await _stop_heartbeat(hold)
                frozen.add(i)
                if i not in lease_gone:
                    await _lease_runs_out(db_url, stores[i], "u", session, "a")
                    lease_gone.add(i)
            elif action == "resume":
                frozen.discard(i)
            elif action == "write":
                frozen.discard(i)  # wakes up, and writes at once
                outcome = await procs[i].send("write")
                if i == latest:  # written under the highest token handed out so far
                    assert outcome == f"by {i} at {tokens[-1]}", (i, outcome, tokens, steps)
                    landed.append(outcome)
                else:
                    assert outcome == "fenced", (i, outcome, tokens, steps)
            else:
                await procs[i].release()
                holding.discard(i)
                lease_gone.discard(i)
        for i in sorted(holding):
            await procs[i].release()
        revision, count, texts = await _rows(db_url, prefix, "u", session, "a")
        assert texts == landed and count == len(landed) and revision == len(landed)
        fences = await _fences(db_url, prefix)
        assert fences.get(("u", "a", session)) == (tokens[-1] if tokens else None)
    finally:
        for proc in procs:
            if proc.task is not None:
                proc.task.cancel()
                await asyncio.wait([proc.task])
        for store in stores:
            await store.close()
