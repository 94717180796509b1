"""`agentrt sessions list|show|export|delete` against a real SQLite store."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from typer.testing import CliRunner

from agentrt import Msg, ToolResultBlock, ToolUseBlock
from agentrt.cli import build_app
from agentrt.state import store_from_url


def _seed(url: str) -> None:
    async def go() -> None:
        store = store_from_url(url)
        call = ToolUseBlock(id="c1", name="lookup", input={"q": "[markup] stays literal"})
        msgs = [
            Msg.user("hello"),
            Msg(role="assistant", content=[call]),
            Msg(role="user", content=[ToolResultBlock(id="c1", name="lookup", output="found it")]),
            Msg.assistant("done"),
        ]
        await store.append("alice", "trip", msgs, fields={"summary": "a trip"}, expected_revision=0)
        await store.append("bob", "secret", [Msg.user("bob only")], expected_revision=0)
        await store.close()

    asyncio.run(go())


def test_sessions_commands(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    _seed(url)
    runner = CliRunner()
    app = build_app()

    listed = runner.invoke(app, ["sessions", "list", "--store", url, "--user", "alice"])
    assert listed.exit_code == 0, listed.output
    assert "trip" in listed.output and "secret" not in listed.output

    shown = runner.invoke(app, ["sessions", "show", "trip", "--store", url, "--user", "alice"])
    assert shown.exit_code == 0, shown.output
    for text in ("hello", "lookup", "[markup] stays literal", "found it", "done", "revision 1"):
        assert text in shown.output

    out = tmp_path / "trip.json"
    exported = runner.invoke(app, ["sessions", "export", "trip", "--store", url, "--user", "alice", "-o", str(out)])
    assert exported.exit_code == 0, exported.output
    doc = json.loads(out.read_text())
    assert doc["format"] == "agentrt.state" and doc["summary"] == "a trip" and len(doc["messages"]) == 4

    other_user = runner.invoke(app, ["sessions", "show", "secret", "--store", url, "--user", "alice"])
    assert other_user.exit_code == 1 and "no session" in other_user.output

    deleted = runner.invoke(app, ["sessions", "delete", "trip", "--store", url, "--user", "alice", "--yes"])
    assert deleted.exit_code == 0 and "deleted" in deleted.output
    again = runner.invoke(app, ["sessions", "list", "--store", url, "--user", "alice"])
    assert "no sessions" in again.output


def test_bad_store_url_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(build_app(), ["sessions", "list", "--store", "nonsense"])
    assert result.exit_code != 0
    assert "state store URL" in str(result.exception) or "state store URL" in result.output
