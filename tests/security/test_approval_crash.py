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
from pathlib import Path

from history_rules import assert_valid_history

from agentrt import Msg, ToolResultBlock

WORKER = Path(__file__).with_name("approval_worker.py")
ROOT = Path(__file__).resolve().parents[2]
INTEGRATION = ROOT / "tests" / "integration"


def _run(url: str, session: str, log: Path, mode: str, call_id: str = "", prefix: str | None = None) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    if prefix:
        env["APPROVAL_PREFIX"] = prefix
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), url, session, str(log), mode, call_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    if mode == "approve":
        for line in proc.stdout:
            if line.strip() == "tool-start":
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


def _scenario(url: str, tmp_path: Path, prefix: str | None = None) -> None:
    session = "approval-crash"
    log = tmp_path / "tool.log"
    paused = _run(url, session, log, "ask", prefix=prefix)
    call_id = paused.split("paused ", 1)[1].split()[0]
    assert _run(url, session, log, "approve", call_id, prefix) == "killed"
    assert log.read_text().splitlines() == ["run t1"]
    again = _run(url, session, log, "reapprove", call_id, prefix)
    assert "refused NotPendingError" in again, again
    assert "reply" in _run(url, session, log, "continue", prefix=prefix)
    again = _run(url, session, log, "reapprove", call_id, prefix)
    assert "refused NotPendingError" in again, again
    assert log.read_text().splitlines() == ["run t1"], "the approved tool ran twice"
    history = _run(url, session, log, "history", prefix=prefix)
    messages = [Msg.from_json(line[4:]) for line in history.splitlines() if line.startswith("msg ")]
    pending = "pending True" in history
    last_calls = {c.id for c in messages[-1].tool_calls} if messages and messages[-1].role == "assistant" else set()
    assert_valid_history(messages, last_calls if pending else ())
    results = {b.id: b for m in messages for b in m.blocks(ToolResultBlock)}
    assert results[call_id].state == "interrupted"


def test_sqlite_approval_crash(tmp_path: Path) -> None:
    _scenario(f"sqlite:///{tmp_path / 'state.db'}", tmp_path)


def test_redis_approval_crash(tmp_path: Path) -> None:
    sys.path.insert(0, str(INTEGRATION))
    from services import require_service

    require_service("redis")
    import uuid

    prefix = f"t-approval-{uuid.uuid4().hex[:8]}"
    try:
        _scenario("redis://127.0.0.1:6379/0", tmp_path, prefix)
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
