"""Durable runs: each accepted message is a job in a shared backend, run by any replica's worker.

``create_app(agents, store, jobs=DurableRuns(RedisJobs("redis://...")))`` (or ``agentrt serve
--jobs redis://...``): the replica that accepts a message records the run as a job and answers
with the job's event stream; a worker of any replica claims and runs it; a run whose worker dies
is taken over by another worker within the lease time, from its last checkpoint; a client
reconnects to any replica with ``Last-Event-ID`` and gets the rest of the run's events exactly
once. Without ``jobs`` a server runs calls in its own process, as a single process (SQLite) does.
See docs/deployment.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol

from agentrt import events as ev
from agentrt.agent.base import AgentBase
from agentrt.message import Msg, as_messages
from agentrt.server.jobs.base import (
    DEFAULT_LEASE_SECONDS,
    END_EVENT,
    EventLog,
    FencedError,
    Job,
    JobQueue,
    JobRunError,
    Lease,
    LoggedFrame,
    RunLimitError,
)
from agentrt.server.jobs.worker import EventEncoder, JobEventSource, JobWorker, worker_name

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "END_EVENT",
    "DurableRuns",
    "EventLog",
    "FencedError",
    "Job",
    "JobBackend",
    "JobEventSource",
    "JobQueue",
    "JobRunError",
    "JobWorker",
    "Lease",
    "LoggedFrame",
    "RunLimitError",
    "worker_name",
]

logger = logging.getLogger("agentrt.server")


class JobBackend(JobQueue, EventLog, Protocol):
    """A shared backend that is both the job queue and the event log (`RedisJobs`, `PostgresJobs`)."""

    async def job(self, job_id: str) -> Job | None:
        """The job's record (None: unknown or expired)."""
        ...

    async def active_jobs(self, user_id: str) -> list[Job]:
        """The user's jobs submitted and not yet completed (nor expired), oldest first."""
        ...

    async def publish_control(self, payload: bytes) -> None:
        """Send `payload` to the `on_control` callbacks of every process (best effort, at most once)."""
        ...

    def on_control(self, callback: Callable[[bytes], None]) -> None:
        """Call `callback` with each control payload published from now on, by any process."""
        ...

    async def close(self) -> None: ...


class DurableRuns:
    """The durable-run side of one server process: submitting jobs, reading their events, its workers.

    Args:
        backend: The shared job queue and event log (`agentrt.server.jobs.redis.RedisJobs`).
        workers: Worker loops in this process (0: submit only, e.g. with separate ``agentrt worker``
            processes).
        concurrency: Jobs each worker runs at once.
        max_runs_per_user: Runs one user may have waiting or running across the whole cluster
            (0: no limit); one more is refused with `RunLimitError` (HTTP 429) before anything is
            recorded, so one user's burst cannot fill the queue ahead of everyone else.
    """

    def __init__(
        self, backend: JobBackend, *, workers: int = 1, concurrency: int = 8, max_runs_per_user: int = 0
    ) -> None:
        if workers < 0 or concurrency < 1 or max_runs_per_user < 0:
            raise ValueError("workers and max_runs_per_user must be >= 0 and concurrency >= 1")
        self.backend = backend
        self.max_runs_per_user = max_runs_per_user
        self.workers_wanted = workers
        self.concurrency = concurrency
        self.workers: list[JobWorker] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.metrics_interval = 2.0
        """Seconds between two updates of the job gauges (``agentrt_jobs_queued``, ``..._running``)."""

    def start(self, agents: Mapping[str, AgentBase], encode: EventEncoder) -> None:
        """Start this process's workers (in the running event loop)."""
        loop = asyncio.get_running_loop()
        if self.workers_wanted:
            self.backend.on_control(self._on_control)
        for _ in range(self.workers_wanted):
            worker = JobWorker(agents, self.backend, self.backend, encode, concurrency=self.concurrency)
            self.workers.append(worker)
            self._tasks.append(loop.create_task(worker.run(), name=f"agentrt-worker {worker.name}"))
        try:
            from agentrt.telemetry.metrics import AgentMetrics
        except ImportError:  # prometheus-client is optional
            return
        self._tasks.append(loop.create_task(self._publish(AgentMetrics.get()), name="agentrt-job-metrics"))

    async def _publish(self, metrics: Any) -> None:
        """Keep the job gauges current (the queue depth is read from the shared backend)."""
        takeovers = 0
        while True:
            with contextlib.suppress(Exception):
                metrics.jobs_queued.set(await self.backend.depth())
            metrics.jobs_running.set(sum(w.running for w in self.workers))
            resumed = sum(w.resumed for w in self.workers)
            if resumed > takeovers:
                metrics.job_takeovers.inc(resumed - takeovers)
                takeovers = resumed
            await asyncio.sleep(self.metrics_interval)

    async def submit(self, agent_name: str, user_id: str, session_id: str, input: Any) -> Job:
        """Record a run of the agent served as `agent_name` on `input` (its messages get their ids now).

        Raises:
            RunLimitError: the user already has `max_runs_per_user` runs waiting or running.
        """
        messages = as_messages(input)
        job = Job(
            id=uuid.uuid4().hex,
            agent=agent_name,
            user_id=user_id,
            session_id=session_id,
            input=tuple(m.to_dict() for m in messages),
            submitted_at=time.time(),
        )
        await self.backend.submit(job, user_limit=self.max_runs_per_user)
        return job

    def events(self, job_id: str, after: int = 0) -> JobEventSource:
        """The job's events after sequence number `after`, as SSE frames."""
        return JobEventSource(self.backend, job_id, after)

    async def result(self, job: Job, *, poll: float = 5.0) -> Msg:
        """Wait for the job's run to end; its reply (the last ``run_finished`` before the log's end).

        Raises:
            JobRunError: the run failed (its error's type and message), or its log expired.
        """
        reply: Msg | None = None
        async for event in self.agent_events(job.id, poll=poll):
            if isinstance(event, ev.RunFinished):
                reply = event.msg
        if reply is None:
            raise JobRunError("the run ended without a reply")
        return reply

    async def agent_events(self, job_id: str, *, poll: float = 15.0) -> AsyncIterator[ev.AgentEvent]:
        """The run's events as objects, read back from its log, until its end.

        The run's own end is the last ``run_finished`` / ``run_error`` before the log's end (a
        subagent's come earlier; the served name may differ from the agent's `name`): when that is
        an error, `JobRunError` (its type and message) is raised after the events.
        """
        from agentrt import _json

        after = 0
        failed: ev.RunError | None = None
        while True:
            frames = await self.backend.read(job_id, after, block=poll)
            if frames is None:
                raise JobRunError(f"run {job_id} is unknown or expired")
            for frame in frames:
                after = frame.seq
                if frame.event_type == END_EVENT:
                    if failed is not None:
                        raise JobRunError(failed.error or "the run failed", error_type=failed.error_type)
                    return
                event = ev.event_from_dict(_json.loads(frame.data))
                if isinstance(event, ev.RunError):
                    failed = event
                elif isinstance(event, ev.RunFinished):
                    failed = None
                yield event

    async def interrupt(self, agent_name: str, user_id: str, session_id: str, message: str | None = None) -> bool:
        """Interrupt the user's running run of the session, on whichever replica's worker runs it.

        True when this process's worker was running it (and stopped it), or when the session has an
        unfinished job elsewhere, whose worker gets the request through the backend's control
        channel; a run still waiting in the queue is not affected. False: nothing to interrupt.
        """
        if any(w.interrupt(agent_name, user_id, session_id, message) for w in self.workers):
            return True
        jobs = await self.backend.active_jobs(user_id)
        if not any((j.agent, j.session_id) == (agent_name, session_id) for j in jobs):
            return False
        from agentrt import _json

        request = {"op": "interrupt", "agent": agent_name, "user_id": user_id, "session_id": session_id}
        if message is not None:
            request["message"] = message
        await self.backend.publish_control(_json.dumps_bytes(request))
        return True

    def _on_control(self, payload: bytes) -> None:
        """A control request from any replica: act on it if one of this process's workers runs the session."""
        from agentrt import _json

        try:
            request = _json.loads(payload)
            if request.get("op") != "interrupt":
                return
            agent, user, session = str(request["agent"]), str(request["user_id"]), str(request["session_id"])
            message = request.get("message")
        except Exception:  # another version's message, or garbage on the channel: not ours to act on
            logger.warning("ignored a malformed job control message")
            return
        for worker in self.workers:
            if worker.interrupt(agent, user, session, message if isinstance(message, str) else None):
                logger.info("interrupted the run of a session at another replica's request")
                return

    async def depth(self) -> int:
        """Jobs waiting or running in the whole deployment."""
        return await self.backend.depth()

    async def drain(self, grace: float) -> None:
        """Stop claiming; finish or hand back this process's jobs within `grace` seconds."""
        for worker in self.workers:
            worker.claiming = False
        await asyncio.gather(*(w.drain(grace) for w in self.workers), return_exceptions=True)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()

    async def close(self) -> None:
        await self.backend.close()
