"""Run records: the timeline of one reply, kept with its session (docs/server.md, "Run timelines").

A *run* is one reply of an agent: the call that started it and, when it paused for an approval or
an external result, the calls that resumed it. Its record (written by
`agentrt.middleware.timeline.RunRecorder`) holds the timed steps of the run: model calls, tool
executions, approval waits, retries, fallbacks and compressions. Stores keep one record per run
with the session, addressed by the run's first reply id, bounded in number per session and in
age (`RunRetention`); deleting, pruning or expiring a session deletes its records with it.

Stores see a record as a `StoredRun`: the reply id, the start time (wall clock), a small summary
(totals, status, the reply ids of its calls) and the JSON text of the whole record. They never
look inside the JSON.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agentrt import _json
from agentrt.errors import InvalidTypeError, InvalidValueError

__all__ = [
    "DEFAULT_MAX_AGE",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_FIELD_CHARS",
    "DEFAULT_MAX_MESSAGES",
    "DEFAULT_MAX_RUNS",
    "MAX_REPLY_ID_CHARS",
    "MIN_MAX_BYTES",
    "RUN_SCHEMA",
    "RunInfo",
    "RunRecordStore",
    "RunRetention",
    "StoredRun",
    "bound_record",
    "check_max_runs",
    "check_reply_id",
    "check_stored_run",
    "find_run",
    "limit_ids",
    "retention_cutoff",
    "supports_run_records",
]

RUN_SCHEMA = "agentrt.run/1"
"""The ``schema`` of a run record's JSON (see docs/server.md for its fields)."""

DEFAULT_MAX_RUNS = 100
"""Run records kept per session (the oldest go first)."""
DEFAULT_MAX_BYTES = 256 * 1024
"""Largest run record, as JSON bytes: details are cut (marked ``truncated``) to fit."""
DEFAULT_MAX_AGE = 30 * 24 * 3600.0
"""Seconds a run record is kept (30 days), counted from the run's start."""
DEFAULT_MAX_FIELD_CHARS = 4096
"""Longest tool argument value, tool result or message text in a record (longer ones are cut, marked)."""
DEFAULT_MAX_MESSAGES = 50
"""Messages of a model request a record lists (the newest; the count of the others is kept)."""
MIN_MAX_BYTES = 4096
"""Smallest `RunRetention.max_bytes` accepted: a record's summary always fits."""
MAX_REPLY_ID_CHARS = 255
"""Longest reply id a store accepts."""
_MAX_LISTED_IDS = 50
"""Reply ids (and message ids) a summary lists at most."""


@dataclass(frozen=True, slots=True)
class RunRetention:
    """How run records are recorded and kept: the library-level setting of `RunRecorder` and the server.

    Args:
        max_runs: Records kept per session; saving one more drops the oldest (None: no limit).
        max_age: Seconds a record is kept after its run started (None: as long as its session).
            Older records of a session are dropped when a new one is saved there, and not shown.
        max_bytes: Largest record as JSON; its details are cut to fit (``"truncated": true``).
        max_field_chars: Longest tool argument value, tool result or message text kept in a record.
        max_messages: Messages of each model request a record lists (the newest ones).
        capture_messages: Keep what each model call saw and answered (redacted); False keeps only
            timings, names, token counts and costs (tool arguments and results are kept either way).
    """

    max_runs: int | None = DEFAULT_MAX_RUNS
    max_age: float | None = DEFAULT_MAX_AGE
    max_bytes: int = DEFAULT_MAX_BYTES
    max_field_chars: int = DEFAULT_MAX_FIELD_CHARS
    max_messages: int = DEFAULT_MAX_MESSAGES
    capture_messages: bool = True

    def __post_init__(self) -> None:
        check_max_runs(self.max_runs)
        if self.max_age is not None and (
            isinstance(self.max_age, bool)
            or not isinstance(self.max_age, int | float)
            or not math.isfinite(self.max_age)
            or self.max_age <= 0
        ):
            raise InvalidValueError(f"max_age must be a positive number of seconds or None, not {self.max_age!r}")
        _positive_int(self.max_bytes, "max_bytes", MIN_MAX_BYTES)
        _positive_int(self.max_field_chars, "max_field_chars", 64)
        _positive_int(self.max_messages, "max_messages", 1)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RunRetention | None:
        """The server's setting from the environment; None when ``AGENTRT_RUN_RECORDS`` is ``off``.

        ``AGENTRT_RUN_RECORDS`` (``on`` by default, or ``off``), ``AGENTRT_RUN_RECORDS_MAX_RUNS``,
        ``AGENTRT_RUN_RECORDS_MAX_AGE`` (seconds), ``AGENTRT_RUN_RECORDS_MAX_BYTES``,
        ``AGENTRT_RUN_RECORDS_CAPTURE_MESSAGES`` (``on`` / ``off``); ``0`` means no limit for the
        count and the age.
        """
        env = os.environ if environ is None else environ
        if env.get("AGENTRT_RUN_RECORDS", "on").strip().lower() in ("off", "0", "false", "no"):
            return None

        def number(name: str, default: float | None) -> float | None:
            raw = env.get(name, "").strip()
            if not raw:
                return default
            try:
                value = float(raw)
            except ValueError:
                raise InvalidValueError(f"{name} must be a number, not {raw!r}") from None
            return None if value == 0 else value

        runs = number("AGENTRT_RUN_RECORDS_MAX_RUNS", DEFAULT_MAX_RUNS)
        size = number("AGENTRT_RUN_RECORDS_MAX_BYTES", DEFAULT_MAX_BYTES)
        capture = env.get("AGENTRT_RUN_RECORDS_CAPTURE_MESSAGES", "on").strip().lower()
        return cls(
            max_runs=None if runs is None else int(runs),
            max_age=number("AGENTRT_RUN_RECORDS_MAX_AGE", DEFAULT_MAX_AGE),
            max_bytes=DEFAULT_MAX_BYTES if size is None else int(size),
            capture_messages=capture not in ("off", "0", "false", "no"),
        )


def _positive_int(value: object, what: str, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"{what} must be an int, not {value!r}")
    if value < low:
        raise InvalidValueError(f"{what} must be at least {low}, not {value}")


@dataclass(frozen=True, slots=True)
class RunInfo:
    """A run as a listing shows it: its id, when it started and its summary."""

    reply_id: str
    """The run's id: the reply id of the call that started it."""
    started_at: float
    """When the run started (seconds since the epoch)."""
    summary: dict[str, Any] = field(default_factory=dict)
    """Totals and status (see docs/server.md): small, read without the record."""

    @property
    def reply_ids(self) -> list[str]:
        """The reply ids of every call of the run (the first is `reply_id`)."""
        ids = self.summary.get("reply_ids")
        return [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else [self.reply_id]


@dataclass(frozen=True, slots=True)
class StoredRun(RunInfo):
    """A run record as stores keep it: `RunInfo` plus the record's JSON text (`body`)."""

    body: str = "{}"

    def record(self) -> dict[str, Any]:
        """The record, decoded (an empty dict when the stored text is not a JSON object)."""
        try:
            value = _json.loads(self.body)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}


@runtime_checkable
class RunRecordStore(Protocol):
    """The run-record operations of a state store (every built-in store has them natively).

    A record belongs to a session: it can only be saved while the session exists, and it goes
    when the session goes (`delete`, `prune`, `delete_user`, idle expiry). Run
    `agentrt.testing.check_state_store` to check a backend.
    """

    supports_run_records: bool

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
        """Store (or replace) the record of `run.reply_id`; False, storing nothing, if the session does not exist.

        In the same write, the session's other records beyond the newest ``max_runs - 1`` and
        those started more than `older_than` seconds ago are deleted (never `run` itself).
        """
        ...

    async def get_run(self, user_id: str, session_id: str, reply_id: str, *, agent: str = "") -> StoredRun | None:
        """The record stored under `reply_id` (the run's first reply id), or None."""
        ...

    async def list_runs(
        self, user_id: str, session_id: str, *, agent: str = "", limit: int | None = None
    ) -> list[RunInfo]:
        """The session's runs, newest first (by start, then reply id, descending): at most `limit`."""
        ...


def supports_run_records(store: object) -> bool:
    """Whether `store` keeps run records (has the `RunRecordStore` operations and says it supports them)."""
    return bool(getattr(store, "supports_run_records", False)) and callable(getattr(store, "save_run", None))


def check_reply_id(value: object) -> str:
    """`value` if it can name a run (a non-empty str of at most 255 characters without NUL), else a typed error."""
    if not isinstance(value, str):
        raise InvalidTypeError(f"reply_id must be a str, not {type(value).__name__}")
    if not value or len(value) > MAX_REPLY_ID_CHARS or "\x00" in value:
        raise InvalidValueError(f"reply_id must be 1-{MAX_REPLY_ID_CHARS} characters without NUL, not {value[:80]!r}")
    return value


def check_max_runs(value: object) -> int | None:
    """`value` if it is None or an int >= 1 (records kept per session), else a typed error."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"max_runs must be an int >= 1 or None, not {value!r}")
    if value < 1:
        raise InvalidValueError(f"max_runs must be at least 1, not {value}")
    return int(value)


def check_stored_run(run: object) -> StoredRun:
    """`run` if it is a well-formed `StoredRun`, else a typed error (checked before any write)."""
    if not isinstance(run, StoredRun):
        raise InvalidTypeError(f"run must be a StoredRun, not {type(run).__name__}")
    check_reply_id(run.reply_id)
    started = run.started_at
    if isinstance(started, bool) or not isinstance(started, int | float) or not math.isfinite(started):
        raise InvalidValueError(f"started_at must be a finite number of seconds, not {started!r}")
    if not isinstance(run.summary, dict):
        raise InvalidTypeError(f"summary must be a dict, not {type(run.summary).__name__}")
    if not isinstance(run.body, str):
        raise InvalidTypeError(f"body must be a str (the record's JSON), not {type(run.body).__name__}")
    return run


def retention_cutoff(older_than: float | None) -> float | None:
    """The start time before which records are dropped, for `save_run`'s `older_than` (None: no cutoff)."""
    if older_than is None:
        return None
    if isinstance(older_than, bool) or not isinstance(older_than, int | float) or not math.isfinite(older_than):
        raise InvalidValueError(f"older_than must be a finite number of seconds or None, not {older_than!r}")
    return time.time() - max(0.0, float(older_than))


def limit_ids(ids: list[str]) -> list[str]:
    """At most the first and the latest ids of a list, for a summary of bounded size."""
    if len(ids) <= _MAX_LISTED_IDS:
        return ids
    return [ids[0], *ids[-(_MAX_LISTED_IDS - 1) :]]


async def find_run(store: Any, user_id: str, session_id: str, reply_id: str, *, agent: str = "") -> StoredRun | None:
    """The record of the run `reply_id` belongs to: stored under it, or a run one of whose calls it is.

    A run resumed after an approval is stored under its first reply id; the reply ids of the
    calls that resumed it are in its summary.
    """
    found: StoredRun | None = await store.get_run(user_id, session_id, reply_id, agent=agent)
    if found is not None:
        return found
    for info in await store.list_runs(user_id, session_id, agent=agent):
        if reply_id in info.reply_ids or reply_id in (info.summary.get("message_ids") or ()):
            got: StoredRun | None = await store.get_run(user_id, session_id, info.reply_id, agent=agent)
            return got
    return None


# -- bounding a record -----------------------------------------------------------------------------

_DETAIL_KEYS = ("request", "response")
_TOOL_KEYS = ("arguments", "result", "input")


def bound_record(record: dict[str, Any], max_bytes: int) -> tuple[str, bool]:
    """The record as JSON text of at most `max_bytes` UTF-8 bytes, and whether anything was cut.

    Cut in this order until it fits: the request/response details of model calls (largest first),
    tool arguments and results (to 200 characters), then whole spans and marks (latest first; the
    call segments and approval waits stay), then everything but the summary fields. What was cut
    is said in the record: ``"truncated": true`` and ``"dropped_spans"``.
    """
    text = _json.dumps(record)
    if _fits(text, max_bytes):
        return text, False
    record = dict(record)
    record["truncated"] = True
    spans = [dict(s) for s in record.get("spans") or () if isinstance(s, dict)]
    record["spans"] = spans
    for shrink in (_drop_details, _shorten_tool_values, _drop_spans):
        text = shrink(record, spans, max_bytes)
        if _fits(text, max_bytes):
            return text, True
    return _minimal(record, max_bytes), True


def _fits(text: str, max_bytes: int) -> bool:
    return len(text) <= max_bytes // 4 or len(text.encode()) <= max_bytes


def _drop_details(record: dict[str, Any], spans: list[dict[str, Any]], max_bytes: int) -> str:
    """Drop the request/response details of model calls, largest first, until the record fits."""
    detailed = sorted(
        (s for s in spans if any(k in s for k in _DETAIL_KEYS)),
        key=lambda s: -len(_json.dumps([s.get(k) for k in _DETAIL_KEYS])),
    )
    text = _json.dumps(record)
    for span in detailed:
        for key in _DETAIL_KEYS:
            if key in span:
                span[key] = {"dropped": True}
        text = _json.dumps(record)
        if _fits(text, max_bytes):
            break
    return text


def _shorten_tool_values(record: dict[str, Any], spans: list[dict[str, Any]], max_bytes: int) -> str:
    """Cut every tool argument list and result to 200 characters."""
    for span in spans:
        for key in _TOOL_KEYS:
            if key in span:
                span[key] = _shorten(span[key], 200)
    return _json.dumps(record)


def _drop_spans(record: dict[str, Any], spans: list[dict[str, Any]], max_bytes: int) -> str:
    """Drop the marks, then spans from the latest on (call segments and approval waits stay)."""
    record["marks"] = []
    droppable = [i for i, span in enumerate(spans) if span.get("kind") not in ("call", "approval")]
    dropped = int(record.get("dropped_spans", 0))
    text = _json.dumps(record)
    while droppable and not _fits(text, max_bytes):
        # drop an eighth of what is left at a time: few re-encodings for a record of many spans
        count = max(1, len(droppable) // 8)
        doomed = set(droppable[-count:])
        droppable = droppable[:-count]
        # the largest indexes go: those of the spans still droppable stay valid
        spans[:] = [span for i, span in enumerate(spans) if i not in doomed]
        dropped += count
        record["dropped_spans"] = dropped
        text = _json.dumps(record)
    return text


def _minimal(record: dict[str, Any], max_bytes: int) -> str:
    """Only the summary fields of the record (the run's own id alone, if even its id list is too long)."""
    minimal = {key: record[key] for key in _SUMMARY_KEYS if key in record}
    minimal["truncated"] = True
    minimal["spans"] = []
    minimal["marks"] = []
    minimal["dropped_spans"] = len(record.get("spans") or ()) + int(record.get("dropped_spans", 0))
    text = _json.dumps(minimal)
    if not _fits(text, max_bytes):
        minimal["reply_ids"] = list(minimal.get("reply_ids") or [])[:1]
        minimal.pop("error", None)
        text = _json.dumps(minimal)
    return text


_SUMMARY_KEYS = (
    "schema",
    "reply_id",
    "reply_ids",
    "started_at",
    "ended_at",
    "duration_ms",
    "status",
    "totals",
    "error",
)


def _shorten(value: Any, chars: int) -> Any:
    """`value` as JSON text cut to `chars` characters (with a marker) when its JSON is longer."""
    text = value if isinstance(value, str) else _json.dumps(value)
    if len(text) <= chars:
        return value
    return text[:chars] + f"…[truncated {len(text) - chars} chars]"
