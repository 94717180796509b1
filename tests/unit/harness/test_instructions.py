"""AGENTS.md instructions: read into the system prompt of each call, re-read when changed, capped."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from agentrt import ReActAgent, RuntimeContext
from agentrt.errors import UserError
from agentrt.harness.instructions import WorkspaceInstructions
from agentrt.model import ScriptedModel
from agentrt.state import InMemoryStateStore

BASE = "You are a test bot."


def system_text(model: ScriptedModel, index: int = -1) -> str:
    first = model.requests[index].messages[0]
    assert first.role == "system"
    return first.text


def agent_for(model: ScriptedModel, mw: WorkspaceInstructions, sys_prompt: str = BASE) -> ReActAgent:
    return ReActAgent("bot", sys_prompt, model=model, middlewares=[mw], state_store=InMemoryStateStore())


@pytest.fixture
def user_file(tmp_path: Path) -> Path:
    return tmp_path / "home" / ".agentrt" / "AGENTS.md"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


async def test_the_workspace_file_is_in_the_system_prompt(workspace: Path, user_file: Path) -> None:
    (workspace / "AGENTS.md").write_text("Run the tests with `make check`.\n")
    model = ScriptedModel(["ok"])
    agent = agent_for(model, WorkspaceInstructions(workspace, user_file=user_file))
    await agent.call("hi", RuntimeContext("u", "s"))
    text = system_text(model)
    assert text.startswith(BASE + "\n\n# Instructions from AGENTS.md")
    assert "## AGENTS.md (workspace instructions)\n\nRun the tests with `make check`." in text
    # The instructions live in the prompt only, never in the session's history.
    state = await agent.get_state("u", "s")
    assert all("make check" not in m.text for m in state.messages)


async def test_no_file_no_section(workspace: Path, user_file: Path) -> None:
    model = ScriptedModel(["ok", "ok"])
    agent = agent_for(model, WorkspaceInstructions(workspace, user_file=user_file))
    await agent.call("hi", RuntimeContext("u", "s"))
    assert system_text(model) == BASE
    (workspace / "AGENTS.md").write_text("   \n\n")  # blank counts as absent
    await agent.call("again", RuntimeContext("u", "s"))
    assert system_text(model) == BASE


async def test_a_plain_agent_without_prompt_gets_just_the_section(workspace: Path, user_file: Path) -> None:
    (workspace / "AGENTS.md").write_text("Be brief.")
    model = ScriptedModel(["ok"])
    agent = agent_for(model, WorkspaceInstructions(workspace, user_file=user_file), sys_prompt="")
    await agent.call("hi")
    assert system_text(model).startswith("# Instructions from AGENTS.md")


async def test_a_change_is_picked_up_by_the_next_call_and_unchanged_files_are_not_reread(
    workspace: Path, user_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = workspace / "AGENTS.md"
    path.write_text("version one")
    mw = WorkspaceInstructions(workspace, user_file=user_file)
    reads: list[str] = []
    original = mw._load

    def counting(source: object) -> object:
        reads.append(getattr(source, "path", ""))
        return original(source)  # type: ignore[arg-type]

    monkeypatch.setattr(mw, "_load", counting)
    model = ScriptedModel(["1", "2", "3", "4"])
    agent = agent_for(model, mw)
    ctx = RuntimeContext("u", "s")
    await agent.call("a", ctx)
    await agent.call("b", ctx)
    assert "version one" in system_text(model, 0) and "version one" in system_text(model, 1)
    assert reads == [str(path)]  # read once; the second call only looked at it
    path.write_text("version two, longer")
    await agent.call("c", ctx)
    assert "version two, longer" in system_text(model, 2) and "version one" not in system_text(model, 2)
    # Same size, new mtime: still seen.
    path.write_text("version 3, longer!!")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    await agent.call("d", ctx)
    assert "version 3, longer!!" in system_text(model, 3)
    assert len(reads) == 3


async def test_deleting_the_file_removes_the_section(workspace: Path, user_file: Path) -> None:
    path = workspace / "AGENTS.md"
    path.write_text("temporary rule")
    model = ScriptedModel(["1", "2"])
    agent = agent_for(model, WorkspaceInstructions(workspace, user_file=user_file))
    await agent.call("a")
    path.unlink()
    await agent.call("b")
    assert "temporary rule" in system_text(model, 0)
    assert system_text(model, 1) == BASE


async def test_a_big_file_is_cut_with_a_note(workspace: Path, user_file: Path) -> None:
    lines = [f"rule {i}: " + "x" * 90 for i in range(1000)]  # about 100 KB
    (workspace / "AGENTS.md").write_text("\n".join(lines) + "\nTHE LAST LINE\n")
    model = ScriptedModel(["ok"])
    agent = agent_for(model, WorkspaceInstructions(workspace, user_file=user_file, max_bytes=4096))
    await agent.call("hi")
    text = system_text(model)
    assert "rule 0:" in text and "THE LAST LINE" not in text
    assert "[... AGENTS.md was cut here: the prompt holds its first" in text
    size = (workspace / "AGENTS.md").stat().st_size
    assert f"of {size} bytes ...]" in text
    section = text.split("## AGENTS.md (workspace instructions)\n\n", 1)[1]
    shown = section.split("\n\n[... AGENTS.md was cut")[0]
    assert len(shown.encode()) <= 4096
    assert shown.splitlines()[-1] in lines  # cut at a line end


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path.resolve()


async def test_the_user_file_comes_first(workspace: Path, user_file: Path) -> None:
    write(user_file, "USER: answer in English.")
    workspace_file = write(workspace / "AGENTS.md", "WORKSPACE: use tabs.")
    model = ScriptedModel(["ok"])
    mw = WorkspaceInstructions(workspace, user_file=user_file)
    assert mw.paths == [str(user_file), str(workspace_file)]
    await agent_for(model, mw).call("hi")
    text = system_text(model)
    assert text.index("USER: answer in English.") < text.index("WORKSPACE: use tabs.")
    assert "user instructions)" in text and "(workspace instructions)" in text


async def test_the_default_user_file_is_under_home(
    tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home" / ".agentrt").mkdir(parents=True)
    (tmp_path / "home" / ".agentrt" / "AGENTS.md").write_text("from home")
    mw = WorkspaceInstructions(workspace)
    files = await mw.files()
    assert [(f.kind, f.shown, f.text) for f in files] == [("user", "~/.agentrt/AGENTS.md", "from home")]
    only_workspace = WorkspaceInstructions(workspace, user_file=None)
    assert await only_workspace.files() == []


async def test_a_link_out_of_the_workspace_is_not_read(tmp_path: Path, workspace: Path, user_file: Path) -> None:
    secret = tmp_path / "id_rsa_copy"
    secret.write_text("PRIVATE KEY MATERIAL")
    (workspace / "AGENTS.md").symlink_to(secret)
    model = ScriptedModel(["ok"])
    await agent_for(model, WorkspaceInstructions(workspace, user_file=user_file)).call("hi")
    assert "PRIVATE KEY" not in system_text(model)
    assert system_text(model) == BASE


async def test_a_link_to_a_protected_file_inside_is_not_read(workspace: Path, user_file: Path) -> None:
    (workspace / ".env").write_text("API_KEY=sk-secret")
    (workspace / "AGENTS.md").symlink_to(workspace / ".env")
    assert await WorkspaceInstructions(workspace, user_file=user_file).files() == []


async def test_a_directory_or_fifo_named_agents_md_is_ignored(workspace: Path, user_file: Path) -> None:
    (workspace / "AGENTS.md").mkdir()
    assert await WorkspaceInstructions(workspace, user_file=user_file).files() == []
    other = workspace / "sub"
    other.mkdir()
    os.mkfifo(other / "AGENTS.md")
    assert await WorkspaceInstructions(other, user_file=user_file).files() == []  # never blocks on the pipe


async def test_invalid_utf8_and_a_cut_inside_a_character(workspace: Path, user_file: Path) -> None:
    (workspace / "AGENTS.md").write_bytes(b"caf\xc3\xa9 " + "\u00e9".encode() * 10)
    files = await WorkspaceInstructions(workspace, user_file=user_file, max_bytes=8).files()
    assert files[0].truncated and files[0].text == "caf\u00e9 \u00e9"  # the split \u00e9 is dropped
    (workspace / "AGENTS.md").write_bytes(b"bad \xff byte")
    files = await WorkspaceInstructions(workspace, user_file=user_file).files()
    assert files[0].text == "bad \ufffd byte"


def test_bad_arguments(tmp_path: Path) -> None:
    make: Callable[..., WorkspaceInstructions] = WorkspaceInstructions
    with pytest.raises(UserError):
        make(tmp_path / "missing")
    with pytest.raises(UserError):
        make(tmp_path, max_bytes=0)
    with pytest.raises(UserError):
        make(tmp_path, filename="../AGENTS.md")
    assert repr(make(tmp_path)) == f"WorkspaceInstructions({str(tmp_path.resolve())!r})"
