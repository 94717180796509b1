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


def _seed_agents(url: str) -> None:
    async def go() -> None:
        store = store_from_url(url)
        await store.append("alice", "trip", [Msg.user("to the planner")], expected_revision=0, agent="planner")
        await store.append("alice", "trip", [Msg.user("to the critic")], expected_revision=0, agent="critic")
        await store.append("alice", "solo", [Msg.user("only the critic")], expected_revision=0, agent="critic")
        # written before sessions had an agent: the server's "<agent>:<id>" and a plain id
        await store.append("alice", "planner:old", [Msg.user("old server session")], expected_revision=0)
        await store.append("alice", "notes", [Msg.user("old plain session")], expected_revision=0)
        await store.append("alice", "served-as:q", [Msg.user("served under another name")], expected_revision=0)
        await store.close()

    asyncio.run(go())


def _stored(url: str) -> set[tuple[str, str, str]]:
    """(agent, session id, first message) of alice's sessions, read back through a fresh store."""

    async def go() -> set[tuple[str, str, str]]:
        store = store_from_url(url)
        found: set[tuple[str, str, str]] = set()
        try:
            for info in await store.list_sessions("alice"):
                state = await store.load("alice", info.session_id, agent=info.agent)
                assert state is not None
                found.add((info.agent, info.session_id, state.messages[0].text))
        finally:
            await store.close()
        return found

    return asyncio.run(go())


def test_sessions_of_several_agents(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    _seed_agents(url)
    runner = CliRunner()
    app = build_app()

    listed = runner.invoke(app, ["sessions", "list", "--db", url, "--user", "alice"], terminal_width=200)
    assert listed.exit_code == 0, listed.output
    for text in ("planner", "critic", "trip", "solo", "planner:old", "notes"):
        assert text in listed.output
    only = runner.invoke(app, ["sessions", "list", "--db", url, "-u", "alice", "--agent", "critic"], terminal_width=200)
    assert "solo" in only.output and "planner" not in only.output and "notes" not in only.output

    ambiguous = runner.invoke(app, ["sessions", "show", "trip", "--db", url, "-u", "alice"])
    assert ambiguous.exit_code == 1 and "several agents" in ambiguous.output and "--agent" in ambiguous.output
    shown = runner.invoke(app, ["sessions", "show", "trip", "--db", url, "-u", "alice", "--agent", "critic"])
    assert shown.exit_code == 0 and "to the critic" in shown.output and "to the planner" not in shown.output
    unique = runner.invoke(app, ["sessions", "show", "solo", "--db", url, "-u", "alice"])
    assert unique.exit_code == 0 and "only the critic" in unique.output, "one agent has it: no --agent needed"
    legacy = runner.invoke(app, ["sessions", "show", "notes", "--db", url, "-u", "alice", "--agent", ""])
    assert legacy.exit_code == 0 and "old plain session" in legacy.output
    wrong = runner.invoke(app, ["sessions", "show", "solo", "--db", url, "-u", "alice", "--agent", "planner"])
    assert wrong.exit_code == 1 and "no session" in wrong.output

    out = tmp_path / "trip.json"
    exported = runner.invoke(
        app, ["sessions", "export", "trip", "--db", url, "-u", "alice", "-a", "planner", "-o", str(out)]
    )
    assert exported.exit_code == 0, exported.output
    doc = json.loads(out.read_text())
    assert doc["agent"] == "planner" and doc["messages"][0]["content"][0]["text"] == "to the planner"

    deleted = runner.invoke(app, ["sessions", "delete", "trip", "--db", url, "-u", "alice", "-a", "planner", "--yes"])
    assert deleted.exit_code == 0 and "deleted" in deleted.output
    assert ("critic", "trip", "to the critic") in _stored(url), "the other agent's session stays"
    assert not any(agent == "planner" and sid == "trip" for agent, sid, _ in _stored(url))

    moved = runner.invoke(app, ["sessions", "migrate", "--agent", "planner", "--db", url])
    assert moved.exit_code == 0 and "moved 1 session to agent 'planner'" in moved.output, moved.output
    assert "left" in moved.output, "the plain legacy session is still there"
    assert ("planner", "old", "old server session") in _stored(url)
    moved = runner.invoke(app, ["sessions", "migrate", "-a", "critic", "--db", url, "--all-unprefixed", "-u", "alice"])
    assert moved.exit_code == 0 and "moved 1 session to agent 'critic'" in moved.output, moved.output
    moved = runner.invoke(app, ["sessions", "migrate", "-a", "critic", "--db", url, "--prefix", "served-as"])
    assert moved.exit_code == 0 and "moved 1 session to agent 'critic'" in moved.output, moved.output
    assert "left" not in moved.output, "no session without an agent is left"
    assert _stored(url) == {
        ("critic", "trip", "to the critic"),
        ("critic", "solo", "only the critic"),
        ("planner", "old", "old server session"),
        ("critic", "notes", "old plain session"),
        ("critic", "q", "served under another name"),
    }
    missing_agent = runner.invoke(app, ["sessions", "migrate", "--db", url])
    assert missing_agent.exit_code != 0


def test_delete_asks_first_and_keeps_the_session_when_declined(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    _seed(url)
    runner, app = CliRunner(), build_app()
    declined = runner.invoke(app, ["sessions", "delete", "trip", "--store", url, "--user", "alice"], input="n\n")
    assert declined.exit_code == 1 and "Delete" in declined.output
    still = runner.invoke(app, ["sessions", "show", "trip", "--store", url, "--user", "alice"])
    assert still.exit_code == 0 and "hello" in still.output, "a declined delete deletes nothing"
    confirmed = runner.invoke(app, ["sessions", "delete", "trip", "--store", url, "--user", "alice"], input="y\n")
    assert confirmed.exit_code == 0 and "deleted" in confirmed.output
    gone = runner.invoke(app, ["sessions", "delete", "trip", "--store", url, "--user", "alice", "--yes"])
    assert gone.exit_code == 1 and "no session" in gone.output
    export = tmp_path / "secret.json"
    theirs = runner.invoke(app, ["sessions", "export", "secret", "--store", url, "--user", "bob"])
    assert theirs.exit_code == 0 and '"bob only"' in theirs.output and not export.exists()
