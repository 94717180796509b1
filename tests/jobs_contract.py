"""What every job backend of durable runs must do (`RedisJobs`, `PostgresJobs`), as reusable checks.

Each ``check_*`` takes `make`, a factory of fresh backend objects of one test: objects made with
the same `space` share the backend's data (two of them stand for two replicas), another `space`
is an empty deployment of its own. The checks close what they open; the caller's fixture deletes
the data. Side effects are asserted through another replica's reads (the log's frames, the queue's
depth, a user's count), not only through return values.

    @pytest.mark.parametrize("check", jobs_contract.CHECKS, ids=jobs_contract.check_id)
    async def test_contract(make: jobs_contract.MakeBackend, check: jobs_contract.Check) -> None:
        await check(make)

`check_interleaving` is a hypothesis property over `STEPS`; the test file declares the ``@given``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

import pytest
from hypothesis import strategies as st

from agentrt.errors import FencedError, RunLimitError
from agentrt.server.jobs import END_EVENT, DurableRuns, Job, JobBackend, JobEventSource, JobWorker, Lease

__all__ = ["CHECKS", "STEPS", "Backend", "Check", "MakeBackend", "check_id", "check_interleaving", "new_job"]


class Backend(JobBackend, Protocol):
    """A job backend as the contract drives it: `JobBackend` plus the job's current token."""

    async def token(self, job_id: str) -> int:
        """The job's fencing token (0: never claimed, -1: unknown or expired)."""
        ...


class MakeBackend(Protocol):
    """A new backend object; the same `space` means the same data (another replica)."""

    def __call__(self, *, lease_seconds: float = 10.0, log_ttl: float = 3600.0, space: str = "") -> Backend: ...


Check = Callable[[MakeBackend], Awaitable[None]]


def new_job(user: str = "u", n: int = 0) -> Job:
    return Job(id=uuid.uuid4().hex, agent="a", user_id=user, session_id=f"s{n}", input=({"role": "user"},))


@contextlib.asynccontextmanager
async def _opened(*backends: Backend) -> AsyncIterator[None]:
    try:
        yield
    finally:
        for backend in backends:
            await backend.close()


async def _log(jobs: Backend, job_id: str) -> list[tuple[int, str, bytes]] | None:
    frames = await jobs.read(job_id, 0, block=0)
    return None if frames is None else [(f.seq, f.event_type, f.data) for f in frames]


# -- claims, leases, fencing ----------------------------------------------------------------------
async def check_claim_heartbeat_takeover_and_fencing(make: MakeBackend) -> None:
    jobs = make(lease_seconds=0.3)
    other = make(lease_seconds=0.3)
    async with _opened(jobs, other):
        job = new_job()
        await jobs.submit(job)
        assert await other.depth() == 1 and await other.token(job.id) == 0
        first = await jobs.claim("A", block=0.1)
        assert first is not None and (first.job, first.token, first.taken_over) == (job, 1, False)
        assert await other.claim("B", block=0.1) is None, "a held job is not handed out twice"
        assert await jobs.append(job.id, first.token, [("e", b"1"), ("e", b"2")]) == 2
        for _ in range(3):  # heartbeats keep it past several lease times
            await asyncio.sleep(0.15)
            assert await jobs.renew(first)
        assert await other.claim("B", block=0.05) is None
        await asyncio.sleep(0.4)  # A stops heartbeating: its lease runs out
        second = await other.claim("B", block=0.5)
        assert second is not None and second.job == job and second.token == 2 and second.taken_over
        assert await jobs.token(job.id) == 2
        with pytest.raises(FencedError):
            await jobs.append(job.id, first.token, [("e", b"stale")])
        assert await _log(other, job.id) == [(1, "e", b"1"), (2, "e", b"2")], "the stale append wrote nothing"
        assert not await jobs.renew(first) and not await jobs.complete(first)
        assert await other.append(job.id, second.token, [("e", b"3"), (END_EVENT, b"{}")]) == 4
        assert await _log(jobs, job.id) == [(1, "e", b"1"), (2, "e", b"2"), (3, "e", b"3"), (4, END_EVENT, b"{}")]
        assert await other.complete(second) and await jobs.depth() == 0
        assert await jobs.claim("C", block=0.05) is None


async def check_takeovers_come_before_new_jobs(make: MakeBackend) -> None:
    jobs = make(lease_seconds=0.3)
    async with _opened(jobs):
        stalled, waiting = new_job(n=1), new_job(n=2)
        await jobs.submit(stalled)
        held = await jobs.claim("A", block=0.1)
        assert held is not None and held.job == stalled
        await jobs.submit(waiting)
        await asyncio.sleep(0.45)
        resumed = await jobs.claim("B", block=0.5)
        fresh = await jobs.claim("C", block=0.5)
        assert resumed is not None and (resumed.job, resumed.token) == (stalled, 2)
        assert fresh is not None and (fresh.job, fresh.token) == (waiting, 1)


async def check_a_released_job_is_claimed_at_once_and_its_holder_fenced(make: MakeBackend) -> None:
    jobs = make(lease_seconds=30)
    other = make(lease_seconds=30)
    async with _opened(jobs, other):
        job = new_job()
        await jobs.submit(job)
        held = await jobs.claim("A", block=0.1)
        assert held is not None
        await jobs.release(held)
        assert await other.depth() == 1, "a handed-back job is still queued"
        started = time.monotonic()
        again = await other.claim("B", block=2.0)  # long before the 30 s lease
        assert time.monotonic() - started < 1.0
        assert again is not None and again.job == job and again.token > held.token and again.taken_over
        assert await jobs.token(job.id) == again.token
        with pytest.raises(FencedError):
            await jobs.append(job.id, held.token, [("e", b"x")])
        assert not await jobs.renew(held) and not await jobs.complete(held)
        assert await _log(other, job.id) == [], "the handed-back holder wrote nothing"
        await jobs.release(held)  # a stale hand-back changes nothing
        assert await other.token(job.id) == again.token and await other.renew(again)


async def check_complete_drops_the_job_and_keeps_its_log(make: MakeBackend) -> None:
    jobs = make()
    other = make()
    async with _opened(jobs, other):
        job = new_job(user="carol")
        await jobs.submit(job)
        assert await other.depth() == 1 and await other.active("carol") == 1
        lease = await jobs.claim("A", block=0.1)
        assert lease is not None
        await jobs.append(job.id, lease.token, [("run_finished", b"{}"), (END_EVENT, b"{}")])
        assert await jobs.complete(lease)
        assert await other.depth() == 0 and await other.active("carol") == 0
        assert await other.claim("B", block=0.05) is None, "a completed job is never claimed again"
        assert await _log(other, job.id) == [(1, "run_finished", b"{}"), (2, END_EVENT, b"{}")]
        assert await other.job(job.id) == job, "the record stays readable until it expires"


# -- waking up ------------------------------------------------------------------------------------
async def check_claim_wakes_on_a_submit_elsewhere(make: MakeBackend) -> None:
    worker, server = make(), make()
    async with _opened(worker, server):
        job = new_job()
        waiting = asyncio.ensure_future(worker.claim("A", block=5.0))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        started = time.monotonic()
        await server.submit(job)
        lease = await asyncio.wait_for(waiting, 5.0)
        assert lease is not None and lease.job == job
        assert time.monotonic() - started < 1.0, "the claim woke on the submission, not at its timeout"


async def check_read_wakes_on_an_append_elsewhere(make: MakeBackend) -> None:
    reader, writer = make(), make()  # two replicas: the one streaming to clients, the worker's
    async with _opened(reader, writer):
        job, quiet = new_job(n=1), new_job(n=2)
        await reader.submit(job)
        await reader.submit(quiet)
        lease = await writer.claim("W", block=0.5)
        assert lease is not None and lease.job == job
        loop = asyncio.get_running_loop()
        started = loop.time()
        readers = [asyncio.ensure_future(reader.read(job.id, 0, block=5.0)) for _ in range(3)]
        idle = asyncio.ensure_future(reader.read(quiet.id, 0, block=0.8))
        await asyncio.sleep(0.3)
        assert not any(r.done() for r in readers), "the readers wait for events"
        appended = loop.time()
        await writer.append(job.id, lease.token, [("e", b"1"), ("e", b"2")])
        for frames in await asyncio.wait_for(asyncio.gather(*readers), 5.0):
            assert frames is not None and [(f.seq, f.data) for f in frames] == [(1, b"1"), (2, b"2")]
        assert loop.time() - appended < 1.0, "every reader woke on the append"
        assert await idle == [], "a reader of another run is not woken by it"
        assert loop.time() - started >= 0.7
        later = await reader.read(job.id, 2, block=0.1)
        assert later == []


async def check_unknown_logs_read_as_none(make: MakeBackend) -> None:
    jobs = make()
    async with _opened(jobs):
        started = time.monotonic()
        assert await jobs.read("no-such-job", 0, block=2.0) is None
        assert time.monotonic() - started < 1.0, "an unknown log is None at once, not after waiting"
        assert await jobs.job("no-such-job") is None and await jobs.token("no-such-job") == -1
        with pytest.raises(FencedError):
            await jobs.append("no-such-job", 1, [("e", b"x")])
        assert await jobs.read("no-such-job", 0, block=0) is None, "a refused append created no log"
        assert await JobEventSource(jobs, "no-such-job").next_frames(0.05) is None


async def check_logs_expire(make: MakeBackend) -> None:
    jobs = make(lease_seconds=0.3, log_ttl=0.6)
    async with _opened(jobs):
        job = new_job(user="dave")
        await jobs.submit(job)
        lease = await jobs.claim("A", block=0.1)
        assert lease is not None
        await jobs.append(job.id, lease.token, [("e", b"1")])
        assert await _log(jobs, job.id) == [(1, "e", b"1")] and await jobs.active("dave") == 1
        await asyncio.sleep(1.0)  # the worker died long ago: nothing wrote for log_ttl
        assert await jobs.read(job.id, 0, block=0.1) is None, "an expired log is gone"
        assert await jobs.job(job.id) is None and await jobs.token(job.id) == -1
        assert await jobs.active("dave") == 0, "an expired job stops counting against its user"
        with pytest.raises(FencedError):
            await jobs.append(job.id, lease.token, [("e", b"late")])
        assert await jobs.claim("B", block=0.1) is None, "an expired job is never claimed"
        assert await jobs.read(job.id, 0, block=0) is None


# -- per-user limit -------------------------------------------------------------------------------
async def check_user_limit_is_atomic_across_replicas(make: MakeBackend) -> None:
    a, b = make(), make()
    async with _opened(a, b):
        tries = [new_job(user="erin", n=i) for i in range(8)]
        outcomes = await asyncio.gather(
            *((a if i % 2 else b).submit(job, user_limit=3) for i, job in enumerate(tries)), return_exceptions=True
        )
        accepted = [job for job, out in zip(tries, outcomes, strict=True) if out is None]
        refused = [(job, out) for job, out in zip(tries, outcomes, strict=True) if out is not None]
        assert len(accepted) == 3, outcomes
        for _, error in refused:
            assert isinstance(error, RunLimitError), error
            assert (error.user_id, error.limit) == ("erin", 3)
        assert await a.active("erin") == await b.active("erin") == 3
        assert await a.depth() == 3, "nothing was recorded for the refused jobs"
        for job, _ in refused:
            assert await b.job(job.id) is None and await b.read(job.id, 0, block=0) is None
        await b.submit(new_job(user="frank"), user_limit=3)  # another user's count is their own
        assert await a.active("frank") == 1
        lease = await a.claim("W", block=0.5)
        assert lease is not None and lease.job in accepted
        with pytest.raises(RunLimitError):
            await a.submit(new_job(user="erin"), user_limit=3)  # running jobs count too
        assert await a.complete(lease)
        assert await b.active("erin") == 2, "completing frees the slot"
        freed = new_job(user="erin", n=9)
        await b.submit(freed, user_limit=3)
        assert await a.job(freed.id) == freed and await a.active("erin") == 3
        await a.submit(new_job(user="erin"))  # no limit asked: always recorded
        assert await b.active("erin") == 4 and await b.depth() == 5


# -- the SSE side and the worker ------------------------------------------------------------------
async def check_the_event_source_numbers_frames_and_stops_at_the_end(make: MakeBackend) -> None:
    jobs = make()
    async with _opened(jobs):
        job = new_job()
        await jobs.submit(job)
        lease = await jobs.claim("A", block=0.1)
        assert lease is not None
        source = JobEventSource(jobs, job.id)
        assert await source.next_frames(0.05) == []  # nothing yet: a heartbeat's worth of waiting
        await jobs.append(job.id, lease.token, [("run_started", b'{"a":1}'), ("run_finished", b"{}")])
        frames = await source.next_frames(1.0)
        assert frames == [
            f'id: {job.id}:1\nevent: run_started\ndata: {{"a":1}}\n\n'.encode(),
            f"id: {job.id}:2\nevent: run_finished\ndata: {{}}\n\n".encode(),
        ]
        await jobs.append(job.id, lease.token, [(END_EVENT, b"{}")])
        assert await source.next_frames(1.0) is None
        resumed = JobEventSource(jobs, job.id, after=1)  # a reconnect with Last-Event-ID <job>:1
        assert await resumed.next_frames(1.0) == [frames[1]]
        assert await JobEventSource(jobs, "no-such-job").next_frames(0.05) is None


async def check_a_job_that_keeps_killing_its_workers_ends_with_an_error(make: MakeBackend) -> None:
    jobs = make(lease_seconds=30)
    runs = DurableRuns(jobs, workers=0)
    async with _opened(jobs):
        job = await runs.submit("helper", "alice", "s", "hi")
        for _ in range(2):  # two workers died on it
            lease = await jobs.claim("dead", block=0.1)
            assert lease is not None
            await jobs.release(lease)
        called: list[object] = []
        worker = JobWorker({"helper": called}, jobs, jobs, lambda e: b"{}", max_attempts=2)  # type: ignore[dict-item]
        task = asyncio.get_running_loop().create_task(worker.run(poll=0.1))
        with pytest.raises(RuntimeError, match="gave up"):
            await asyncio.wait_for(runs.result(job), 10)
        await worker.drain(1.0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert called == [] and await jobs.depth() == 0, "the agent never ran again and the job is gone"
        log = await _log(jobs, job.id)
        assert log is not None and [t for _, t, _ in log] == ["run_error", END_EVENT]


# -- what the control channel carries: interrupts of a run on another replica -------------------
async def check_active_jobs_and_control_messages_reach_every_replica(make: MakeBackend) -> None:
    a, b = make(), make()
    async with _opened(a, b):
        first, second, other = new_job(user="hana", n=1), new_job(user="hana", n=2), new_job(user="ivan")
        for job in (first, second, other):
            await a.submit(job)
        assert await b.active_jobs("hana") == [first, second] and await b.active_jobs("nobody") == []
        lease = await b.claim("W", block=0.5)
        assert lease is not None and lease.job == first
        assert await b.complete(lease)
        assert await a.active_jobs("hana") == [second], "a completed job is no longer active"
        got: dict[str, list[bytes]] = {"a": [], "b": []}
        a.on_control(got["a"].append)
        b.on_control(got["b"].append)
        deadline = time.monotonic() + 5
        while not (got["a"] and got["b"]):  # at most once: publish again until both listeners are up
            assert time.monotonic() < deadline, got
            await a.publish_control(b'{"op":"ping"}')
            await asyncio.sleep(0.1)
        assert set(got["a"]) == set(got["b"]) == {b'{"op":"ping"}'}


async def check_an_interrupt_reaches_the_run_on_another_replica(make: MakeBackend) -> None:
    from agentrt import ReActAgent, Toolkit, tool
    from agentrt.message import GenerateReason, ToolResultBlock, ToolUseBlock
    from agentrt.model import ModelRequest, ScriptedModel
    from agentrt.server.context import encode_event
    from agentrt.state import InMemoryStateStore

    started, finished = asyncio.Event(), asyncio.Event()

    @tool
    async def slow() -> str:
        """A long step."""
        started.set()
        await asyncio.sleep(30)
        finished.set()
        return "done"

    def plan(request: ModelRequest) -> str | ToolUseBlock:
        last = request.messages[-1]
        results = [b for b in last.content if isinstance(b, ToolResultBlock)]
        return f"result: {results[0].state}" if results else ToolUseBlock(id="c1", name="slow", input={})

    agent = ReActAgent(
        "helper", model=ScriptedModel.from_function(plan), toolkit=Toolkit([slow]), state_store=InMemoryStateStore()
    )
    runner_backend, front_backend = make(), make()
    runner = DurableRuns(runner_backend, workers=1)  # the replica whose worker runs the job
    front = DurableRuns(front_backend, workers=0)  # the replica the client talks to
    async with _opened(runner_backend, front_backend):
        runner.start({"helper": agent}, encode_event)
        try:
            assert not await front.interrupt("helper", "alice", "s1"), "nothing runs yet"
            job = await front.submit("helper", "alice", "s1", "go")
            await asyncio.wait_for(started.wait(), 10)
            assert not await front.interrupt("helper", "bob", "s1"), "another user's session is not theirs"
            assert not await front.interrupt("other", "alice", "s1")
            deadline = time.monotonic() + 10
            while not finished.is_set() and not runner.workers[0].completed:  # the channel is at most once
                assert await front.interrupt("helper", "alice", "s1", "stop, please")
                try:
                    reply = await asyncio.wait_for(front.result(job), 0.5)
                    break
                except TimeoutError:
                    assert time.monotonic() < deadline, "the interrupt never reached the worker"
            else:
                reply = await front.result(job)
            assert not finished.is_set(), "the tool was cancelled, not run to its end"
            state = await agent.state_store.load("alice", "s1", agent="helper")
            assert state is not None
            assert [m.text for m in state.messages if m.role == "user" and m.text] == ["go", "stop, please"]
            assert reply.generate_reason is GenerateReason.INTERRUPTED, reply.metadata
        finally:
            await runner.drain(1.0)


CHECKS: tuple[Check, ...] = (
    check_claim_heartbeat_takeover_and_fencing,
    check_takeovers_come_before_new_jobs,
    check_a_released_job_is_claimed_at_once_and_its_holder_fenced,
    check_complete_drops_the_job_and_keeps_its_log,
    check_claim_wakes_on_a_submit_elsewhere,
    check_read_wakes_on_an_append_elsewhere,
    check_unknown_logs_read_as_none,
    check_logs_expire,
    check_user_limit_is_atomic_across_replicas,
    check_the_event_source_numbers_frames_and_stops_at_the_end,
    check_a_job_that_keeps_killing_its_workers_ends_with_an_error,
    check_active_jobs_and_control_messages_reach_every_replica,
    check_an_interrupt_reaches_the_run_on_another_replica,
)


def check_id(check: Check) -> str:
    return getattr(check, "__name__", "check").removeprefix("check_")


# -- interleavings (hypothesis) -------------------------------------------------------------------
STEPS = st.lists(
    st.tuples(st.sampled_from(["claim", "renew", "append", "release", "lapse"]), st.integers(0, 2)),
    min_size=1,
    max_size=12,
)
"""Steps of workers 0-2 on one job: claim it, heartbeat, append, hand it back, or let leases run out."""

_LEASE = 0.15


async def check_interleaving(make: MakeBackend, steps: list[tuple[str, int]]) -> None:
    """Whatever the workers do, the log is 1..n with no gap, and only appends with the current token land."""
    jobs = make(lease_seconds=_LEASE, space=uuid.uuid4().hex[:8])  # each example on an empty deployment
    async with _opened(jobs):
        job = new_job()
        await jobs.submit(job)
        leases: dict[int, Lease] = {}
        current = 0  # the job's token as the backend must hold it
        free = True  # never claimed, or handed back: a claim must get it at once
        written: list[bytes] = []
        for action, worker in steps:
            lease = leases.get(worker)
            if action == "claim":
                got = await jobs.claim(f"w{worker}", block=0.01)
                assert got is not None or not free, "a free job was not handed out"
                if got is not None:
                    assert got.token == current + 1 and got.job == job
                    current, free = got.token, False
                    leases[worker] = got
            elif action == "lapse":
                await asyncio.sleep(_LEASE + 0.05)
            elif lease is None:
                continue
            elif action == "renew":
                assert await jobs.renew(lease) is (lease.token == current)
            elif action == "release":
                await jobs.release(lease)
                if lease.token == current:
                    current, free = current + 1, True
                assert await jobs.token(job.id) == current
            else:
                data = f"{worker}:{lease.token}:{len(written)}".encode()
                try:
                    seq = await jobs.append(job.id, lease.token, [("e", data)])
                except FencedError:
                    assert lease.token != current, "the current holder was refused"
                else:
                    assert lease.token == current, "a stale holder wrote"
                    written.append(data)
                    assert seq == len(written)
        frames = await jobs.read(job.id, 0, block=0)
        assert frames is not None
        assert [f.data for f in frames] == written
        assert [f.seq for f in frames] == list(range(1, len(written) + 1))
        assert await jobs.token(job.id) == current
