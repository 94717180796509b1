"""The worker side of durable runs: claim jobs, run the agents, log their events, hand back on drain.

A `JobWorker` runs up to `concurrency` jobs at once. For each lease it heartbeats the lease every
third of ``lease_seconds`` and appends the run's events to the job's log in order, fenced by the
lease's token. A lease that is a takeover resumes the run from the session's last checkpoint:

- the job's input is not in the session yet (the dead worker never saved it): the run starts anew;
- it is, and a reply follows it (the run finished, or paused for an approval that stays pending):
  nothing runs again, the log gets the run's end;
- it is, and the run was cut short: the agent continues the session without new input. A tool
  call left without a result is re-run only if its tool is idempotent (and allowed outright); any
  other ends as ``interrupted`` and the model is told (see `agentrt.agent._hitl.recover`).

`drain` stops claiming, lets running jobs finish within the grace period and hands the rest back
(their runs checkpoint when cancelled), so another worker resumes them at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from agentrt import events as ev
from agentrt.agent.base import AgentBase
from agentrt.context import RuntimeContext
from agentrt.message import Msg
from agentrt.server.jobs.base import END_EVENT, EventLog, FencedError, Job, JobQueue, Lease
from agentrt.tool.questions import QuestionPolicy

__all__ = ["JobEventSource", "JobWorker", "worker_name"]

logger = logging.getLogger("agentrt.server")

EventEncoder = Callable[[ev.AgentEvent], bytes]


def worker_name() -> str:
    """A worker id unique across replicas: host, process and a random part."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class _LogWriter:
    """Appends a run's frames to its log in order, batching what arrives while an append is in flight."""

    __slots__ = ("_failed", "_flusher", "_job", "_log", "_pending", "_token")

    def __init__(self, log: EventLog, job_id: str, token: int) -> None:
        self._log = log
        self._job = job_id
        self._token = token
        self._pending: list[tuple[str, bytes]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._failed: BaseException | None = None

    def push(self, event_type: str, data: bytes) -> None:
        self._pending.append((event_type, data))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        while self._pending and self._failed is None:
            batch, self._pending = self._pending, []
            try:
                await self._log.append(self._job, self._token, batch)
            except BaseException as exc:
                self._failed = exc
                raise

    async def drain(self) -> None:
        """Wait until every pushed frame is in the log (raises what an append raised)."""
        while True:
            flusher = self._flusher
            if flusher is not None:
                with contextlib.suppress(Exception):
                    await flusher
            if self._failed is not None:
                raise self._failed
            if not self._pending:
                return
            self._flusher = asyncio.get_running_loop().create_task(self._flush())


class JobWorker:
    """Claims jobs from `queue` and runs them on `agents`, logging their events to `log`.

    Args:
        agents: The agents by the name they are served under (a job names one).
        queue: Where jobs wait (`JobQueue`).
        log: Where the runs' events go (`EventLog`; often the same object as `queue`).
        encode: An event as the JSON the SSE stream carries (the server's ``event_json``).
        concurrency: Jobs run at once by this worker.
        name: This worker's id (default: host, pid and a random part).
    """

    def __init__(
        self,
        agents: Mapping[str, AgentBase],
        queue: JobQueue,
        log: EventLog,
        encode: EventEncoder,
        *,
        concurrency: int = 8,
        name: str | None = None,
        max_attempts: int = 5,
    ) -> None:
        if concurrency < 1 or max_attempts < 1:
            raise ValueError("concurrency must be at least 1")
        self.agents = agents
        self.queue = queue
        self.log = log
        self.encode = encode
        self.concurrency = concurrency
        self.max_attempts = max_attempts
        """Claims of one job after which it ends with an error (a run that kills its worker every time)."""
        self.name = name or worker_name()
        self.claiming = True
        self._running: dict[asyncio.Task[None], Lease] = {}
        self._slots = asyncio.Semaphore(concurrency)
        self.completed = 0
        """Jobs this worker finished (their run ended and the job was dropped)."""
        self.resumed = 0
        """Takeovers this worker resumed."""

    @property
    def running(self) -> int:
        """Jobs in progress here."""
        return len(self._running)

    async def run(self, *, poll: float = 1.0) -> None:
        """Claim and run jobs until `drain` (or cancellation)."""
        while self.claiming:
            await self._slots.acquire()
            if not self.claiming:
                self._slots.release()
                break
            try:
                lease = await self.queue.claim(self.name, block=poll)
            except asyncio.CancelledError:
                self._slots.release()
                raise
            except Exception as exc:
                self._slots.release()
                logger.warning("worker %s: claiming failed: %s: %s", self.name, type(exc).__name__, exc)
                await asyncio.sleep(min(poll, 1.0))
                continue
            if lease is None:
                self._slots.release()
                continue
            task = asyncio.get_running_loop().create_task(self._guarded(lease), name=f"agentrt-job {lease.job.id}")
            self._running[task] = lease

    def interrupt(self, agent: str, user_id: str, session_id: str, message: str | None = None) -> bool:
        """Interrupt this worker's run of the session (served as `agent`); True if one was running here."""
        for lease in list(self._running.values()):
            job = lease.job
            if (job.agent, job.user_id, job.session_id) == (agent, user_id, session_id):
                target = self.agents.get(agent)
                if target is not None and target.interrupt(
                    RuntimeContext(user_id=user_id, session_id=session_id), msg=message
                ):
                    return True
        return False

    async def drain(self, grace: float) -> None:
        """Stop claiming; wait up to `grace` s for the running jobs, then hand the rest back."""
        self.claiming = False
        tasks = list(self._running)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace)
            for task in pending:
                task.cancel()  # the run checkpoints; `_guarded` releases the lease
            if pending:
                await asyncio.wait(pending, timeout=max(1.0, grace / 2))

    async def _guarded(self, lease: Lease) -> None:
        try:
            await self._execute(lease)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.queue.release(lease))
            logger.info("worker %s: handed job %s back", self.name, lease.job.id)
        except FencedError:
            logger.warning("worker %s: job %s was taken over; stopped working on it", self.name, lease.job.id)
        except Exception:
            logger.exception("worker %s: job %s failed", self.name, lease.job.id)
        finally:
            self._running.pop(asyncio.current_task(), None)  # type: ignore[arg-type]
            self._slots.release()

    async def _execute(self, lease: Lease) -> None:
        job = lease.job
        writer = _LogWriter(self.log, job.id, lease.token)
        agent = self.agents.get(job.agent)
        heartbeat = asyncio.get_running_loop().create_task(self._heartbeat(lease, asyncio.current_task()))
        try:
            if agent is None:
                writer.push(ev.RunError.type, _error_json(job, f"no agent named {job.agent!r} on this worker"))
            elif lease.token > self.max_attempts:  # every earlier worker died on it: do not die too
                writer.push(
                    ev.RunError.type, _error_json(job, f"the run was claimed {lease.token} times; gave up", "JobError")
                )
            else:
                await self._run_agent(agent, lease, writer)
            writer.push(END_EVENT, b"{}")
            await writer.drain()
            if await self.queue.complete(lease):
                self.completed += 1
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat

    async def _run_agent(self, agent: AgentBase, lease: Lease, writer: _LogWriter) -> None:
        job = lease.job
        ctx = RuntimeContext(user_id=job.user_id, session_id=job.session_id)
        # Questions (MCP elicitations) need the asking process: a durable run declines them.
        ctx.put(QuestionPolicy, QuestionPolicy(ask=False))
        given = [Msg.from_dict(d) for d in job.input]
        input: list[Msg] | None = given
        if lease.taken_over:
            self.resumed += 1
            input, done = await _resumption(agent, job, given)
            if done is not None:
                writer.push(ev.RunFinished.type, self.encode(done))
                return
        encode = self.encode

        def on_event(event: ev.AgentEvent) -> None:
            writer.push(event.type, encode(event))

        try:
            await agent.run_with_events(input, ctx, on_event)
        except FencedError:
            raise
        except Exception as exc:
            if isinstance(exc.__cause__, FencedError):
                raise exc.__cause__ from None
            writer.push(ev.RunError.type, _error_json(job, str(exc) or type(exc).__name__, type(exc).__name__))

    async def _heartbeat(self, lease: Lease, task: asyncio.Task[Any] | None) -> None:
        interval = self.queue.lease_seconds / 3
        while True:
            await asyncio.sleep(interval)
            try:
                still_ours = await self.queue.renew(lease)
            except Exception as exc:
                logger.warning("worker %s: heartbeat of job %s failed: %s", self.name, lease.job.id, exc)
                continue
            if not still_ours:
                logger.warning("worker %s: lost job %s to another worker", self.name, lease.job.id)
                if task is not None:
                    task.cancel()
                return


async def _resumption(agent: AgentBase, job: Job, input: list[Msg]) -> tuple[list[Msg] | None, ev.RunFinished | None]:
    """How to resume `job` on `agent`: (input to run with, or None to continue; the run's end if it had ended)."""
    state_key = getattr(agent, "state_key", None) or agent.name
    state = await agent.state_store.load(job.user_id, job.session_id, agent=state_key)
    ids = {m.id for m in input}
    if state is None or not ids:
        return input, None
    positions = [i for i, m in enumerate(state.messages) if m.id in ids]
    if not positions:
        return input, None  # the dead worker never saved the input: run it
    after = state.messages[positions[-1] + 1 :]
    last = after[-1] if after else None
    paused = state.pending is not None and bool(state.pending.calls)
    if last is not None and last.role == "assistant" and (paused or not last.tool_calls):
        # The run had ended (or paused for approval, which stays pending): nothing to run again.
        finished = ev.RunFinished(msg=last, reply_id=last.id, session_id=job.session_id, source=agent.name)
        return None, finished
    return None, None


def _error_json(job: Job, message: str, error_type: str = "JobError") -> bytes:
    from agentrt import _json

    return _json.dumps_bytes(
        {
            "type": ev.RunError.type,
            "reply_id": "",
            "session_id": job.session_id,
            "source": job.agent,
            "error": message,
            "error_type": error_type,
        }
    )


class JobEventSource:
    """A run's events from its log, as SSE frames numbered ``<job id>:<seq>`` (a `FrameSource`)."""

    __slots__ = ("_after", "_done", "_job", "_log", "_missing_grace")

    def __init__(self, log: EventLog, job_id: str, after: int = 0, *, missing_grace: float = 30.0) -> None:
        self._log = log
        self._job = job_id
        self._after = after
        self._done = False
        self._missing_grace = missing_grace

    async def next_frames(self, timeout: float) -> list[bytes] | None:
        from agentrt.server._sse import encode_frame

        if self._done:
            return None
        read = await self._log.read(self._job, self._after, block=timeout)
        if read is None:
            self._done = True  # no such run (or expired)
            return None
        frames: list[bytes] = []
        for frame in read:
            self._after = frame.seq
            if frame.event_type == END_EVENT:
                self._done = True
                break
            frames.append(encode_frame(frame.event_type, frame.data, f"{self._job}:{frame.seq}"))
        if self._done and not frames:
            return None
        return frames

    @property
    def exhausted(self) -> bool:
        """The log's end marker came with the frames just handed out."""
        return self._done

    async def aclose(self) -> None:
        self._done = True
