"""Batch runs: every row of a JSONL file against an agent, each in its own session; resumable, ordered output.

``await run_batch(agent, rows, out="out.jsonl")`` / ``agentrt batch IN.jsonl --agent MODULE:ATTR --out OUT.jsonl``
(docs/evals.md, "Batch runs"). An output row is ``{"id", "output", "error", "usage", "latency_s"}`` (and
``"structured"`` when the agent returned structured output); ``error`` is None or ``{"type", "message"}``.

Crash safety: each finished row is appended to ``OUT.jsonl.partial`` (flushed at once, fsynced every
`_FSYNC_EVERY` rows and at the end); when every row is done the ordered output replaces ``OUT.jsonl``
atomically (a temporary file, fsync, `os.replace`) and the partial file is removed. A re-run reads
both files and runs only the rows without a finished line.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from agentrt import _json
from agentrt.context import RuntimeContext
from agentrt.errors import InvalidValueError
from agentrt.evals._agent import load_agent_async
from agentrt.evals.errors import DatasetError
from agentrt.evals.executor import Executor, LocalExecutor, RemoteWork
from agentrt.evals.runner import RemoteAgentRun, caller, execute, input_from_json, outcome_of
from agentrt.message import new_id

__all__ = ["BATCH_USER", "BatchInputError", "BatchProgress", "BatchReport", "BatchRow", "read_rows", "run_batch"]

BATCH_USER = "batch"
"""The user id of every batch row's run (each row has its own session id)."""

_FSYNC_EVERY = 64


class BatchInputError(DatasetError):
    """A batch input cannot be used: a malformed line, a row without an input, a bad or duplicate id.

    The message starts with ``file:line:`` (rows given in code: their 1-based position as the line).
    """


@dataclass(frozen=True, slots=True)
class BatchRow:
    """One input row: its `id` (a string or an integer), its `input` (JSON: text, a message or a list of them)."""

    id: str | int
    input: Any
    line: int


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchProgress:
    """What a progress callback gets after each finished row."""

    done: int
    total: int
    errors: int
    resumed: int
    """Rows skipped because an earlier run finished them (not counted in `done` and `total`)."""
    cost_usd: float | None
    row: Mapping[str, Any]


@dataclass(slots=True, kw_only=True)
class BatchReport:
    """The output rows in input order (resumed ones included) and how many came from an earlier run."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    resumed: int = 0

    @property
    def errors(self) -> int:
        return sum(row.get("error") is not None for row in self.rows)


def _key(row_id: Any) -> str:
    return _json.dumps(row_id)


def read_rows(path: str | Path, *, id_field: str = "id", input_field: str = "input") -> list[BatchRow]:
    """The rows of a JSONL file (blank lines skipped); `BatchInputError` names the file and line of a bad one."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BatchInputError(f"cannot read the batch input: {exc}", path=where) from None
    numbered: list[tuple[int, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            numbered.append((number, _json.loads(line)))
        except ValueError as exc:
            raise BatchInputError(f"not a JSON object: {exc}", path=where, line=number) from None
    return _rows(numbered, id_field, input_field, where)


def _rows(numbered: Iterable[tuple[int, Any]], id_field: str, input_field: str, where: str | None) -> list[BatchRow]:
    rows: list[BatchRow] = []
    seen: dict[str, int] = {}
    for number, data in numbered:
        row = data if isinstance(data, BatchRow) else _row(data, number, id_field, input_field, where)
        first = seen.setdefault(_key(row.id), row.line)
        if first != row.line:
            raise BatchInputError(
                f"duplicate id {row.id!r} (first on line {first})", path=where or "rows", line=row.line
            )
        rows.append(row)
    return rows


def _row(data: Any, number: int, id_field: str, input_field: str, where: str | None) -> BatchRow:
    def fail(message: str) -> BatchInputError:
        return BatchInputError(message, path=where or "rows", line=number)

    if not isinstance(data, Mapping):
        raise fail(f"a row must be a JSON object, not {type(data).__name__}")
    row_id = data.get(id_field, number)
    if isinstance(row_id, bool) or not isinstance(row_id, (str, int)) or row_id == "":
        raise fail(f"the id ({id_field!r}) must be a non-empty string or an integer, not {row_id!r}")
    if input_field not in data:
        raise fail(f"the row has no {input_field!r} field")
    value = data[input_field]
    try:
        if isinstance(value, (str, Mapping)) or (isinstance(value, list) and value):
            input_from_json(value)
        else:
            raise InvalidValueError(f"not {type(value).__name__}")
    except Exception as exc:
        raise fail(f"the input must be text, a message or a non-empty list of messages ({exc})") from None
    return BatchRow(row_id, value, number)


def _finished(out: Path, retry_errors: bool) -> dict[str, dict[str, Any]]:
    """The finished rows of an earlier run: the final file's, then the partial file's (newer), by id key."""
    done: dict[str, dict[str, Any]] = {}
    for path in (out, _partial(out)):
        try:
            lines = path.read_bytes().splitlines()
        except FileNotFoundError:
            continue
        for line in lines:
            try:
                row = _json.loads(line)
            except ValueError:  # a line torn by a crash: that row runs again
                continue
            if isinstance(row, dict) and "id" in row and (not retry_errors or row.get("error") is None):
                done[_key(row["id"])] = row
    return done


def _partial(out: Path) -> Path:
    return out.with_name(out.name + ".partial")


class _Writer:
    """Appends finished rows to the partial file: flushed per row, fsynced every `_FSYNC_EVERY` rows."""

    def __init__(self, out: Path | None) -> None:
        self._file: IO[bytes] | None = None
        self._unsynced = 0
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            self._file = _partial(out).open("ab")

    def write(self, row: Mapping[str, Any]) -> None:
        if self._file is None:
            return
        self._file.write(_json.dumps_bytes(row) + b"\n")
        self._file.flush()
        self._unsynced += 1
        if self._unsynced >= _FSYNC_EVERY:
            self.sync()

    def sync(self) -> None:
        if self._file is not None and self._unsynced:
            os.fsync(self._file.fileno())
            self._unsynced = 0

    def close(self) -> None:
        if self._file is not None:
            self.sync()
            self._file.close()
            self._file = None


def _replace(out: Path, rows: list[dict[str, Any]]) -> None:
    temp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    with temp.open("wb") as file:
        for row in rows:
            file.write(_json.dumps_bytes(row) + b"\n")
        file.flush()
        os.fsync(file.fileno())
    os.replace(temp, out)
    _partial(out).unlink(missing_ok=True)


class _Job:
    __slots__ = ("row", "session_id")

    def __init__(self, row: BatchRow, session_id: str) -> None:
        self.row = row
        self.session_id = session_id


class _BatchWork:
    """The batch's job function: one row here, or split (`remote`) to run in another process."""

    __slots__ = ("call", "remote", "timeout")

    def __init__(self, call: Any, timeout: float | None, target: str | None, usage_limits: Any) -> None:
        self.call = call
        self.timeout = timeout
        run = RemoteAgentRun(target, usage_limits, timeout, BATCH_USER, full=False) if target is not None else None
        self.remote = None if run is None else RemoteWork(run, self._payload, self._finish)

    async def __call__(self, job: _Job) -> dict[str, Any]:
        ctx = RuntimeContext(BATCH_USER, job.session_id)
        reply, events, error, latency = await execute(self.call, input_from_json(job.row.input), ctx, self.timeout)
        return await self._finish(job, outcome_of(reply, events, error, latency, full=False))

    @staticmethod
    def _payload(job: _Job) -> dict[str, Any]:
        return {"input": job.row.input, "session_id": job.session_id}

    @staticmethod
    async def _finish(job: _Job, outcome: Mapping[str, Any]) -> dict[str, Any]:
        error = outcome.get("error")
        row: dict[str, Any] = {
            "id": job.row.id,
            "output": outcome.get("output") or "",
            "error": None if error is None else {"type": outcome.get("error_type") or "Exception", "message": error},
            "usage": outcome.get("usage"),
            "latency_s": round(float(outcome.get("latency") or 0.0), 6),
        }
        if outcome.get("structured") is not None:
            row["structured"] = outcome["structured"]
        return row


async def run_batch(
    agent: Any,
    rows: str | Path | Iterable[Mapping[str, Any] | BatchRow],
    *,
    out: str | Path | None = None,
    concurrency: int = 8,
    usage_limits: Any = None,
    timeout: float | None = None,
    id_field: str = "id",
    input_field: str = "input",
    retry_errors: bool = True,
    progress: bool | Callable[[BatchProgress], None] | None = None,
    executor: Executor | None = None,
) -> BatchReport:
    """Run every row against `agent`, each in its own session; a row's failure is its ``error``, never the end.

    Args:
        agent: An agent, or the ``"MODULE:ATTR"`` naming one (or a factory of one); `RayExecutor`
            needs that form, to build the agent on its workers.
        rows: A JSONL path (`read_rows`), or mappings with `id_field` and `input_field` (a row
            without an id gets its line number, or its 1-based position for rows given in code).
        id_field: The field holding a row's id.
        input_field: The field holding a row's input.
        out: The output JSONL: rows in input order, written atomically at the end; finished rows go
            to ``OUT.partial`` as they finish, and a re-run skips the rows either file finished.
        concurrency: Rows in flight at once (`executor` replaces the default `LocalExecutor`).
        usage_limits: `agentrt.UsageLimits` for each row's call (exceeding them is that row's error).
        timeout: Seconds before one row's run is stopped (its error).
        retry_errors: A re-run runs again the rows an earlier run recorded with an error (False:
            keeps them).
        executor: Runs the rows (default: a `LocalExecutor` of `concurrency`; `RayExecutor`).
        progress: True shows a bar on stderr, a callable gets a `BatchProgress` after each row,
            None shows the bar when stderr is a terminal.
    """
    if timeout is not None and (not isinstance(timeout, (int, float)) or timeout <= 0):
        raise InvalidValueError(f"timeout must be a number of seconds > 0 or None, not {timeout!r}")
    if isinstance(rows, (str, Path)):
        parsed = read_rows(rows, id_field=id_field, input_field=input_field)
    else:
        parsed = _rows(enumerate(rows, start=1), id_field, input_field, None)
    executor = executor if executor is not None else LocalExecutor(concurrency)
    target = agent if isinstance(agent, str) else None
    if target is not None:
        agent = await load_agent_async(target)
    out_path = Path(out) if out is not None else None
    done = _finished(out_path, retry_errors) if out_path is not None else {}
    run_id = new_id()[:12]
    jobs = [_Job(row, f"batch-{run_id}-{row.line}") for row in parsed if _key(row.id) not in done]
    work = _BatchWork(caller(agent, usage_limits), timeout, target, usage_limits)
    resumed = len(parsed) - len(jobs)
    tracker = _Tracker(len(jobs), resumed, progress)
    writer = _Writer(out_path if jobs else None)
    try:

        def finished(row: dict[str, Any]) -> None:
            writer.write(row)
            tracker.update(row)

        results = await executor.map(work, jobs, finished)
    finally:
        writer.close()
        tracker.close()
    for job, row in zip(jobs, results, strict=True):
        done[_key(job.row.id)] = row
    report = BatchReport(rows=[done[_key(row.id)] for row in parsed], resumed=resumed)
    if out_path is not None:
        _replace(out_path, report.rows)
    return report


class _Tracker:
    """Counts finished rows; a rich bar on stderr and/or a callback."""

    def __init__(self, total: int, resumed: int, progress: bool | Callable[[BatchProgress], None] | None) -> None:
        self.total = total
        self.resumed = resumed
        self.done = self.errors = 0
        self.cost: float | None = None
        self.callback = progress if callable(progress) else None
        self._bar: Any = None
        self._task: Any = None
        self._started = time.perf_counter()
        if total and (progress is True or (progress is None and sys.stderr.isatty())):
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn("[bold]batch"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[stats]}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
            )
            self._task = self._bar.add_task("batch", total=total, stats=f"resumed {resumed}" if resumed else "")
            self._bar.start()

    def update(self, row: Mapping[str, Any]) -> None:
        self.done += 1
        self.errors += row.get("error") is not None
        cost = (row.get("usage") or {}).get("cost_usd")
        if isinstance(cost, (int, float)) and not isinstance(cost, bool):
            self.cost = (self.cost or 0.0) + cost
        if self._bar is not None:
            spent = "cost ?" if self.cost is None else f"${self.cost:.4f}"
            self._bar.update(self._task, advance=1, stats=f"errors {self.errors} · {spent}")
        if self.callback is not None:
            self.callback(
                BatchProgress(
                    done=self.done,
                    total=self.total,
                    errors=self.errors,
                    resumed=self.resumed,
                    cost_usd=self.cost,
                    row=row,
                )
            )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
