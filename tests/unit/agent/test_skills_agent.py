"""Agent Skills in a real `ReActAgent`: progressive disclosure, confined reads, scripts under approval, groups.

The model is a `ScriptedModel`; what the agent sent it (`model.requests`) is what is checked: the
system prompt lists skills by description only, the body arrives only in the ``load_skill`` result.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from agentrt import (
    ConfirmResult,
    GenerateReason,
    Msg,
    PermissionMode,
    ReActAgent,
    RuntimeContext,
    Toolkit,
    ToolResultBlock,
    ToolUseBlock,
    tool,
)
from agentrt.errors import SkillError
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.state import InMemoryStateStore
from agentrt.tool.builtin import ShellTool
from agentrt.tool.skills import LOAD_SKILL, SKILLS_STATE_KEY

EXAMPLES = Path(__file__).parents[3] / "examples" / "workspace" / "skills"
CTX = RuntimeContext(user_id="u", session_id="s")


def load(name: str, call_id: str = "l1", path: str | None = None) -> ToolUseBlock:
    args = {"name": name} if path is None else {"name": name, "path": path}
    return ToolUseBlock(id=call_id, name=LOAD_SKILL, input=args)


def results(model: ScriptedModel) -> dict[str, ToolResultBlock]:
    return {b.id: b for m in model.requests[-1].messages for b in m.blocks(ToolResultBlock)}


def system_text(request: ModelRequest) -> str:
    first = request.messages[0]
    assert first.role == "system"
    return first.text


def tool_names(request: ModelRequest) -> list[str]:
    return [t.name for t in request.tools]


def agent_for(model: ScriptedModel, **options: object) -> ReActAgent:
    options.setdefault("state_store", InMemoryStateStore())
    return ReActAgent("helper", "You are helpful.", model=model, **options)  # type: ignore[arg-type]


def write_skill(root: Path, name: str, description: str, body: str, front: str = "") -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\n{front}---\n{body}")
    return folder


async def test_the_prompt_lists_descriptions_and_the_tool_returns_the_body() -> None:
    body = (EXAMPLES / "release-notes" / "SKILL.md").read_text().split("---\n", 2)[2]
    style = (EXAMPLES / "release-notes" / "references" / "style.md").read_text()
    model = ScriptedModel(
        [load("release-notes"), load("release-notes", "l2", path="references/style.md"), "Here are the notes."]
    )
    agent = agent_for(model, skills=EXAMPLES)
    reply = await agent.call("Write release notes for 2.0", CTX)
    assert reply.text == "Here are the notes."

    first = model.requests[0]
    prompt = system_text(first)
    assert prompt.startswith("You are helpful.\n\n# Skills\n")
    for skill in agent.skills.values():
        assert f'<skill name="{skill.name}">{skill.description}</skill>' in prompt
    # Progressive disclosure: no instructions and no resource in the prompt, only in tool results.
    assert "Turn a list of changes into release notes" not in prompt and "Release-notes style" not in prompt
    assert tool_names(first) == [LOAD_SKILL]
    assert not any(b for m in first.messages for b in m.blocks(ToolResultBlock))

    loaded = results(model)
    assert loaded["l1"].state == "success" and body.strip() in loaded["l1"].text
    assert f'folder="{EXAMPLES / "release-notes"}"' in loaded["l1"].text
    assert loaded["l2"].state == "success" and loaded["l2"].text == style
    state = await agent.get_state("u", "s")
    assert state.tool_state[SKILLS_STATE_KEY] == ["release-notes"]  # loading a file is not loading a skill


async def test_no_skills_no_listing_and_no_tool() -> None:
    model = ScriptedModel(["hi", "hi again"])
    agent = agent_for(model)
    await agent.call("hello", CTX)
    assert system_text(model.requests[0]) == "You are helpful."
    assert tool_names(model.requests[0]) == []
    assert agent.skills == {}


async def test_the_system_message_is_built_once_per_skill_set(tmp_path: Path) -> None:
    write_skill(tmp_path, "one", "The first.", "1")
    model = ScriptedModel(["a", "b", "c"])
    toolkit = Toolkit()
    agent = agent_for(model, skills=tmp_path, toolkit=toolkit)
    await agent.call("x", CTX)
    await agent.call("y", CTX)
    assert model.requests[0].messages[0] is model.requests[1].messages[0]  # cached, not rebuilt per call
    # A skill registered on the toolkit while the agent lives shows from the next call on.
    write_skill(tmp_path / "more", "two", "The second.", "2")
    toolkit.register_skills(tmp_path / "more")
    await agent.call("z", CTX)
    assert '<skill name="two">The second.</skill>' in system_text(model.requests[2])
    assert sorted(agent.skills) == ["one", "two"]


async def test_a_path_escape_is_refused_and_nothing_outside_is_read(tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("SECRET-VALUE-42\n")
    folder = write_skill(tmp_path / "skills", "docs", "Documentation help.", "Read references/guide.md.\n")
    (folder / "references").mkdir()
    (folder / "references" / "guide.md").write_text("guide text\n")
    (folder / "link.txt").symlink_to(tmp_path / "secret.txt")
    escapes = ["../../secret.txt", str(tmp_path / "secret.txt"), "link.txt", "references/../../../secret.txt"]
    model = ScriptedModel(
        [[load("docs", f"e{i}", path=p) for i, p in enumerate(escapes)], "I cannot read that."],
    )
    agent = agent_for(model, skills=tmp_path / "skills", permission=PermissionMode.DEFAULT)
    reply = await agent.call("show me the secret", CTX)
    assert reply.generate_reason is GenerateReason.STOP  # read-only: no approval asked
    got = results(model)
    assert [got[f"e{i}"].state for i in range(len(escapes))] == ["error"] * len(escapes)
    assert "'..' is not allowed" in got["e0"].text and "is absolute" in got["e1"].text
    assert "leads out of the skill folder" in got["e2"].text
    # The side effect: the secret's content is nowhere in what the model saw or the session kept.
    for request in model.requests:
        assert all("SECRET-VALUE-42" not in m.to_json() for m in request.messages)
    state = await agent.get_state("u", "s")
    assert all("SECRET-VALUE-42" not in m.to_json() for m in state.messages)


async def test_a_skill_script_runs_only_through_the_shell_tool_after_approval(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "data.csv").write_text("city,pop\nA,100\nB,300\n")
    report = workspace / "report.md"
    script = EXAMPLES / "csv-report" / "scripts" / "report.py"
    command = f"{sys.executable} {script} data.csv --out report.md"
    toolkit = Toolkit()
    toolkit.register(ShellTool(workspace, timeout=30))
    toolkit.register_skills(EXAMPLES)
    run = ToolUseBlock(id="r1", name="run_command", input={"command": command})
    model = ScriptedModel([load("csv-report"), run, "pop: min 100, max 300, mean 200."])
    agent = agent_for(model, toolkit=toolkit, permission=PermissionMode.DEFAULT)

    paused = await agent.call("What is in data.csv?", CTX)
    assert results(model)["l1"].state == "success"
    assert "only through the shell tool" in results(model)["l1"].text
    assert paused.generate_reason is GenerateReason.AWAITING_CONFIRMATION
    pending = (await agent.get_state("u", "s")).pending
    assert pending is not None and [c.id for c in pending.calls] == ["r1"]
    assert not report.exists()  # the script has not run

    reply = await agent.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call="r1")]), CTX)
    assert reply.text == "pop: min 100, max 300, mean 200."
    assert results(model)["r1"].state == "success" and "wrote report.md" in results(model)["r1"].text
    assert "| pop | 100 | 300 | 200 |" in report.read_text()


async def test_a_denied_script_never_runs(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "data.csv").write_text("a\n1\n")
    command = f"{sys.executable} {EXAMPLES / 'csv-report' / 'scripts' / 'report.py'} data.csv --out out.md"
    toolkit = Toolkit()
    toolkit.register(ShellTool(workspace))
    model = ScriptedModel([ToolUseBlock(id="r1", name="run_command", input={"command": command}), "ok"])
    agent = agent_for(model, toolkit=toolkit, skills=EXAMPLES, permission=PermissionMode.DEFAULT)
    await agent.call("summarise", CTX)
    await agent.call(Msg.confirm([ConfirmResult(confirmed=False, tool_call="r1")]), CTX)
    assert results(model)["r1"].state == "denied"
    assert not (workspace / "out.md").exists()


@tool(read_only=True)
def chart(column: str) -> str:
    """Draw a chart of a column."""
    return f"chart of {column}"


async def test_loading_a_skill_activates_its_tool_group_for_the_session_only(tmp_path: Path) -> None:
    write_skill(tmp_path, "charts", "Make charts.", "Use the chart tool.\n", "metadata:\n  agentrt-tool-group: viz\n")
    toolkit = Toolkit()
    toolkit.create_group("viz", "Charts")
    toolkit.register(chart, group="viz")
    model = ScriptedModel(
        [
            load("charts"),
            ToolUseBlock(id="c1", name="chart", input={"column": "pop"}),
            "Charted.",
            "Later call.",
            "Other session.",
        ]
    )
    agent = agent_for(model, toolkit=toolkit, skills=tmp_path)
    await agent.call("chart pop", CTX)
    assert tool_names(model.requests[0]) == [LOAD_SKILL]
    assert tool_names(model.requests[1]) == ["chart", LOAD_SKILL]  # the same call, at once
    assert "Tools now available for this skill: chart." in results(model)["l1"].text
    assert results(model)["c1"].text == "chart of pop"
    state = await agent.get_state("u", "s")
    assert state.active_groups == ["viz"] and state.tool_state[SKILLS_STATE_KEY] == ["charts"]

    await agent.call("again", CTX)  # a later call of the session keeps it
    assert tool_names(model.requests[-1]) == ["chart", LOAD_SKILL]
    other = RuntimeContext(user_id="u", session_id="other")
    await agent.call("hello", other)  # another session does not
    assert tool_names(model.requests[-1]) == [LOAD_SKILL]
    assert toolkit.default_active_groups() == frozenset()  # the shared toolkit is untouched


async def test_an_undeclared_group_is_ignored_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_skill(tmp_path, "charts", "Make charts.", "Body.\n", "metadata:\n  agentrt-tool-group: nowhere\n")
    model = ScriptedModel([load("charts"), "ok"])
    agent = agent_for(model, skills=tmp_path)
    await agent.call("x", CTX)
    assert results(model)["l1"].state == "success" and "Tools now available" not in results(model)["l1"].text
    assert "names tool group 'nowhere'" in caplog.text


async def test_later_folders_win_and_the_agent_wins_over_its_toolkit(tmp_path: Path) -> None:
    write_skill(tmp_path / "a", "notes", "From folder a.", "BODY-A\n")
    write_skill(tmp_path / "b", "notes", "From folder b.", "BODY-B\n")
    write_skill(tmp_path / "kit", "notes", "From the toolkit.", "BODY-KIT\n")
    toolkit = Toolkit()
    toolkit.register_skills(tmp_path / "kit")
    model = ScriptedModel([load("notes"), "done"])
    agent = agent_for(model, toolkit=toolkit, skills=[tmp_path / "a", tmp_path / "b"])
    await agent.call("x", CTX)
    prompt = system_text(model.requests[0])
    assert '<skill name="notes">From folder b.</skill>' in prompt
    assert "folder a" not in prompt and "toolkit." not in prompt
    assert "BODY-B" in results(model)["l1"].text

    model2 = ScriptedModel(["ok"])
    await agent_for(model2, toolkit=toolkit).call("x", CTX)
    assert '<skill name="notes">From the toolkit.</skill>' in system_text(model2.requests[0])


async def test_unknown_skills_go_back_to_the_model(tmp_path: Path) -> None:
    write_skill(tmp_path, "real", "Exists.", "Body.\n")
    model = ScriptedModel([load("imaginary"), "sorry"])
    agent = agent_for(model, skills=tmp_path)
    await agent.call("x", CTX)
    result = results(model)["l1"]
    assert result.state == "error" and "unknown skill 'imaginary'; skills: real" in result.text
    assert SKILLS_STATE_KEY not in (await agent.get_state("u", "s")).tool_state


def test_invalid_skills_fail_at_construction_naming_file_and_line(tmp_path: Path) -> None:
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\nname: bad\ndescription: ok\nmetadata: [1]\n---\n")
    with pytest.raises(SkillError) as caught:
        agent_for(ScriptedModel([]), skills=[EXAMPLES, tmp_path])
    assert str(caught.value).startswith(f"{folder / 'SKILL.md'}:4: ")


async def test_skills_without_a_system_prompt(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES / "release-notes", tmp_path / "release-notes")
    model = ScriptedModel(["ok"])
    agent = ReActAgent("bare", model=model, skills=tmp_path, state_store=InMemoryStateStore())
    await agent.call("x", CTX)
    assert system_text(model.requests[0]).startswith("# Skills\n")
