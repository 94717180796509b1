"""SIGKILL while an approved tool runs, on the SQLite and Redis stores: the approval is spent once.

A real process answers the approval and is killed inside the tool; a restarted process then
repeats the approval (refused), sends a new message, and the stored history stays valid. The tool's
log file is the side effect counted.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from history_rules import assert_valid_history

from agentrt import Msg, ToolResultBlock

WORKER = Path(__file__).with_name("approval_worker.py")
ROOT = Path(__file__).resolve().parents[2]
INTEGRATION = ROOT / "tests" / "integration"


def _run(
    url: str,
    session: str,
    log: Path,
    mode: str,
    call_ids: Sequence[str] = (),
    prefix: str | None = None,
    calls: int = 1,
) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "APPROVAL_CALLS": str(calls)}
    if prefix:
        env["APPROVAL_PREFIX"] = prefix
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), url, session, str(log), mode, *call_ids],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    if mode in ("approve", "approve-settle"):
        # Killed in the last approved tool ("approve") or when the results are being stored.
        starts, wanted = 0, len(call_ids)
        for line in proc.stdout:
            starts += line.strip() == "tool-start"
            if (mode == "approve" and starts == wanted) or line.strip() == "settling":
                proc.send_signal(signal.SIGKILL)
                break
        proc.wait(30)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        return "killed"
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    return out


@dataclass(frozen=True)
class Crash:
    """One way to die: how many calls the model makes, which are approved, where the process is killed."""

    calls: int
    approve: tuple[int, ...]
    kill: str  # "approve": inside the last approved tool; "approve-settle": storing the results


CRASHES = [
    Crash(calls=1, approve=(0,), kill="approve"),
    Crash(calls=1, approve=(0,), kill="approve-settle"),
    Crash(calls=2, approve=(0, 1), kill="approve"),
    Crash(calls=2, approve=(0,), kill="approve"),
]


def _scenario(url: str, tmp_path: Path, crash: Crash, prefix: str | None = None) -> None:
    session = f"approval-crash-{crash.calls}-{len(crash.approve)}-{crash.kill}"
    log = tmp_path / f"{session}.log"

    def run(mode: str, ids: Sequence[str] = ()) -> str:
        return _run(url, session, log, mode, ids, prefix, crash.calls)

    paused = run("ask")
    call_ids = paused.split("paused ", 1)[1].split()
    approved = [call_ids[i] for i in crash.approve]
    others = [c for c in call_ids if c not in approved]
    assert run(crash.kill, approved) == "killed"
    ran = log.read_text().splitlines()
    assert len(ran) == len(approved) and len(set(ran)) == len(ran), ran
    for call_id in approved:  # each approval is spent: repeating it (alone or with others) is refused
        assert "refused NotPendingError" in run("reapprove", [call_id])
    assert "refused NotPendingError" in run("reapprove", [*others, approved[0]])
    if others:  # the calls not answered before the crash still wait, and run once when approved
        assert "ran" in run("reapprove", others)
    assert "reply" in run("continue")
    for call_id in call_ids:
        assert "refused NotPendingError" in run("reapprove", [call_id])
    lines = log.read_text().splitlines()
    assert len(lines) == len(set(lines)) == len(call_ids), f"a tool ran twice: {lines}"
    history = run("history")
    messages = [Msg.from_json(line[4:]) for line in history.splitlines() if line.startswith("msg ")]
    pending = "pending True" in history
    last_calls = {c.id for c in messages[-1].tool_calls} if messages and messages[-1].role == "assistant" else set()
    assert_valid_history(messages, last_calls if pending else ())
    results = {b.id: b for m in messages for b in m.blocks(ToolResultBlock)}
    # The call the process died in (or whose result it died storing) ends interrupted, never re-run.
    assert results[approved[-1]].state == "interrupted"
    for call_id in approved[:-1]:  # a result recorded before the crash is kept
        assert results[call_id].state == "success", results[call_id]


@pytest.mark.parametrize("crash", CRASHES, ids=lambda c: f"{c.calls}calls-approve{len(c.approve)}-{c.kill}")
def test_sqlite_approval_crash(tmp_path: Path, crash: Crash) -> None:
    _scenario(f"sqlite:///{tmp_path / 'state.db'}", tmp_path, crash)


@pytest.mark.parametrize("crash", CRASHES, ids=lambda c: f"{c.calls}calls-approve{len(c.approve)}-{c.kill}")
def test_redis_approval_crash(tmp_path: Path, crash: Crash) -> None:
    sys.path.insert(0, str(INTEGRATION))
    from services import require_service

    require_service("redis")
    import uuid

    prefix = f"t-approval-{uuid.uuid4().hex[:8]}"
    try:
        _scenario("redis://127.0.0.1:6379/0", tmp_path, crash, prefix)
    finally:
        asyncio.run(_drop(prefix))


async def _drop(prefix: str) -> None:
    import redis.asyncio as aioredis

    client = aioredis.from_url("redis://127.0.0.1:6379/0")
    try:
        async for key in client.scan_iter(match=f"{prefix}*"):
            await client.delete(key)
    finally:
        await client.aclose()
