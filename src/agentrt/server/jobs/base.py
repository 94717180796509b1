"""Runs as durable jobs: what a job is, its lease, and the two protocols a shared backend provides.

When a replica accepts a message it records the run as a `Job` in the shared backend and answers
with the run's event stream; some worker (on any replica, or an ``agentrt worker`` process)
claims it with a `Lease`, runs the agent and appends the run's events to the job's event log. A
worker heartbeats its lease; one that stops (killed, partitioned, paused) loses it after
``lease_seconds`` and another worker claims the job again with a higher fencing `token`, then
resumes the run from its last checkpoint. Every write a worker makes is fenced: the backend
refuses an event append (and the state store a session write) carrying a token older than the
job's (or session's) current one, so a zombie that wakes up cannot write.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentrt.errors import AgentrtError, FencedError, RunLimitError

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_LOG_TTL",
    "END_EVENT",
    "EventLog",
    "FencedError",
    "Job",
    "JobQueue",
    "JobRunError",
    "Lease",
    "LoggedFrame",
    "RunLimitError",
]

DEFAULT_LEASE_SECONDS = 10.0
"""How long a worker that stopped heartbeating keeps a job before another may claim it."""

DEFAULT_LOG_TTL = 24 * 3600.0
"""Seconds a job and its event log are kept after their last write."""

END_EVENT = "agentrt_run_end"
"""The event type of the last entry of a run's event log (never sent to clients)."""


class JobRunError(AgentrtError, RuntimeError):
    """A durable run ended with an error on its worker: the error's type name and message.

    The exception itself stayed in the worker's process (possibly another replica); the run's
    ``run_error`` event carries what is known of it.
    """

    def __init__(self, message: str, *, error_type: str = "") -> None:
        super().__init__(message)
        self.error_type = error_type


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """One run to execute: an agent's answer to `input` in a user's session.

    `input` holds the messages as `Msg.to_dict` dicts with their ids fixed at submission, so a
    worker that takes the job over can tell whether the dead worker already saved them.
    """

    id: str
    agent: str
    """The name the agent is served under."""
    user_id: str
    session_id: str
    input: tuple[dict[str, Any], ...]
    submitted_at: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "agent": self.agent,
            "user_id": self.user_id,
            "session_id": self.session_id,
            "input": list(self.input),
            "submitted_at": self.submitted_at,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Job:
        return cls(
            id=str(data["id"]),
            agent=str(data["agent"]),
            user_id=str(data["user_id"]),
            session_id=str(data["session_id"]),
            input=tuple(data.get("input") or ()),
            submitted_at=float(data.get("submitted_at") or 0.0),
        )


@dataclass(frozen=True, slots=True)
class Lease:
    """A worker's claim on a job, valid while heartbeated; `token` fences its writes."""

    job: Job
    worker: str
    token: int
    """Strictly increases with every claim of the job: the first claim is 1, a takeover 2 and up."""
    handle: str = ""
    """The backend's reference to the queued entry (a stream entry id, a row id)."""

    @property
    def taken_over(self) -> bool:
        """Whether an earlier worker held the job (this claim resumes a run)."""
        return self.token > 1


@dataclass(frozen=True, slots=True)
class LoggedFrame:
    """One entry of a run's event log: its sequence number (from 1), event type and JSON data."""

    seq: int
    event_type: str
    data: bytes


class JobQueue(Protocol):
    """Jobs waiting for a worker, and the leases of the running ones."""

    lease_seconds: float

    async def submit(self, job: Job, *, user_limit: int = 0) -> None:
        """Record `job`; some worker will claim it.

        With ``user_limit > 0`` the check and the insert are one atomic step across the cluster:
        when the job's user already has `user_limit` jobs submitted and not completed, nothing is
        recorded and `RunLimitError` is raised. A job that is never completed (its log expired)
        stops counting when its record expires.
        """
        ...

    async def active(self, user_id: str) -> int:
        """The user's jobs submitted and not yet completed (what `user_limit` counts)."""
        ...

    async def claim(self, worker: str, *, block: float) -> Lease | None:
        """A job for `worker`: one whose holder stopped heartbeating first, else a new one (waits up to `block` s)."""
        ...

    async def renew(self, lease: Lease) -> bool:
        """Heartbeat: extend the lease; False when the job was taken over (stop working on it)."""
        ...

    async def complete(self, lease: Lease) -> bool:
        """The run ended: drop the job and free its user's slot (False when it was taken over meanwhile)."""
        ...

    async def release(self, lease: Lease) -> None:
        """Hand the job back at once (a draining worker): another worker claims it now, not after the lease."""
        ...

    async def depth(self) -> int:
        """Jobs submitted and not yet completed (waiting or running)."""
        ...


class EventLog(Protocol):
    """The event streams of runs, readable from any replica by sequence number."""

    async def append(self, job_id: str, token: int, frames: Sequence[tuple[str, bytes]]) -> int:
        """Append frames (event type, JSON) as the holder of `token`; the last sequence number.

        Raises:
            FencedError: the job was claimed since with a higher token.
        """
        ...

    async def read(self, job_id: str, after: int, *, block: float) -> list[LoggedFrame] | None:
        """Frames numbered after `after` (waiting up to `block` s for some: [] when none came).

        None when the log does not exist (never written, or expired).
        """
        ...
