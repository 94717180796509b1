"""Declared subagents: ``subagents/<name>.md`` files, their front matter, and errors naming file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrt.errors import UserError
from agentrt.harness import SubagentLimits, SubagentSpec, SubagentSpecError, SubagentTools, load_subagent_specs
from agentrt.harness import parse_subagent_spec as parse
from agentrt.model import ScriptedModel

RESEARCHER = """\
---
description: Finds facts on the web and cites them.
model: inherit
tools: [fetch_url, "read_file"]
max_iters: 8
workspace: isolated   # its own folder
---
You are a careful researcher.

Cite every source.
"""


def test_a_declared_subagent_file_is_parsed(tmp_path: Path) -> None:
    folder = tmp_path / "subagents"
    folder.mkdir()
    (folder / "researcher.md").write_text(RESEARCHER)
    (folder / "reviewer.md").write_text(
        "---\n"
        "name: code-reviewer\n"
        "description: 'Reviews a diff; it''s strict.'\n"
        "model: openai:gpt-4o-mini\n"
        "tools:\n"
        "  - read_file\n"
        "  - grep_files\n"
        "---\n"
        "Review the change.\n"
    )
    (folder / "notes.txt").write_text("not a spec")
    specs = load_subagent_specs(folder)
    assert list(specs) == ["researcher", "code-reviewer"]  # in file name order
    researcher = specs["researcher"]
    assert researcher == SubagentSpec(
        name="researcher",
        description="Finds facts on the web and cites them.",
        prompt="You are a careful researcher.\n\nCite every source.",
        model=None,
        tools=("fetch_url", "read_file"),
        max_iters=8,
        workspace="isolated",
        path=str(folder / "researcher.md"),
    )
    reviewer = specs["code-reviewer"]
    assert reviewer.description == "Reviews a diff; it's strict."
    assert reviewer.model == "openai:gpt-4o-mini"
    assert reviewer.tools == ("read_file", "grep_files")
    assert reviewer.workspace == "shared" and reviewer.max_iters is None
    # A folder path works as SubagentTools' specs too, and its description lists them.
    tools = SubagentTools(folder)
    assert set(tools.specs) == {"code-reviewer", "researcher"}
    assert "- researcher: Finds facts on the web and cites them." in tools.agent_spawn.description
    assert tools.agent_spawn.parameters["properties"]["name"]["enum"] == ["code-reviewer", "researcher"]


def test_tools_forms() -> None:
    def tools_of(line: str) -> tuple[str, ...] | None:
        return parse(f"---\ndescription: d\n{line}\n---\nPrompt.\n", path="x.md").tools

    assert tools_of("tools: a, b") == ("a", "b")
    assert tools_of("tools: []") == ()
    assert tools_of("tools:") is None  # no items: like leaving it out (all the parent's tools)
    assert tools_of("model: inherit") is None


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("description: d\n---\nPrompt.\n", 1, "must start with a '---' line"),
        ("---\ndescription: d\nPrompt.\n", 1, "never closed"),
        ("---\ndescription: d\nmodle: x\n---\nPrompt.\n", 3, "unknown key 'modle'"),
        ("---\ndescription: d\nmax_iters: many\n---\nPrompt.\n", 3, "max_iters must be a positive integer"),
        ("---\ndescription: d\nmax_iters: 0\n---\nPrompt.\n", 3, "max_iters must be a positive integer"),
        ("---\ndescription: d\n\nworkspace: private\n---\nPrompt.\n", 4, "workspace must be 'isolated' or 'shared'"),
        ("---\nmodel: inherit\n---\nPrompt.\n", 1, "missing 'description'"),
        ("---\ndescription: ''\n---\nPrompt.\n", 2, "missing 'description'"),
        ("---\ndescription: d\n---\n\n", 3, "no system prompt"),
        ("---\ndescription: d\ndescription: e\n---\nPrompt.\n", 3, "given twice (first on line 2)"),
        ("---\ndescription: d\n- read_file\n---\nPrompt.\n", 3, "a list item must follow"),
        ('---\ndescription: "unclosed\n---\nPrompt.\n', 2, "is not closed"),
        ("---\ndescription: d\ntools: [a, b\n---\nPrompt.\n", 3, "must end with ']'"),
        ("---\ndescription: d\ntools:\n  - 'two words'\n---\nPrompt.\n", 4, "not a tool name"),
        ("---\ndescription: d\n  indented: x\n---\nPrompt.\n", 3, "expected 'key: value'"),
        ("---\ndescription: d\nname: no spaces\n---\nPrompt.\n", 3, "name 'no spaces' must be"),
    ],
)
def test_bad_front_matter_names_the_file_and_line(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = tmp_path / "subagents" / "helper.md"
    path.parent.mkdir()
    path.write_text(text)
    with pytest.raises(SubagentSpecError) as caught:
        load_subagent_specs(path.parent)
    assert caught.value.path == str(path) and caught.value.line == line
    assert str(caught.value).startswith(f"{path}:{line}: ") and message in str(caught.value)
    assert isinstance(caught.value, UserError)


def test_a_file_name_that_is_no_subagent_name_and_duplicates_are_refused(tmp_path: Path) -> None:
    folder = tmp_path / "subagents"
    folder.mkdir()
    (folder / "my helper.md").write_text("---\ndescription: d\n---\nPrompt.\n")
    with pytest.raises(SubagentSpecError, match=r"my helper\.md:1: .*from the file name"):
        load_subagent_specs(folder)
    (folder / "my helper.md").write_text("---\nname: helper\ndescription: d\n---\nPrompt.\n")
    (folder / "other.md").write_text("---\nname: helper\ndescription: d\n---\nPrompt.\n")
    with pytest.raises(SubagentSpecError, match=r"other\.md:1: subagent 'helper' is declared twice"):
        load_subagent_specs(folder)
    with pytest.raises(SubagentSpecError, match="not a folder"):
        load_subagent_specs(tmp_path / "missing")


def test_specs_and_limits_check_their_values() -> None:
    with pytest.raises(SubagentSpecError, match="max_iters must be a positive integer"):
        SubagentSpec(name="a", max_iters=0)
    with pytest.raises(SubagentSpecError, match="workspace must be"):
        SubagentSpec(name="a", workspace="everywhere")  # type: ignore[arg-type]  # a wrong value on purpose
    with pytest.raises(SubagentSpecError, match="subagent name"):
        SubagentSpec(name="../etc")
    assert SubagentSpec(name="a", model="inherit").model is None
    spec = SubagentSpec(name="a", description="d", prompt="p", tools=("x",), max_iters=3, workspace="isolated")
    assert SubagentSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(UserError, match="max_depth"):
        SubagentLimits(max_depth=0)
    with pytest.raises(UserError, match="max_total_tokens"):
        SubagentLimits(max_total_tokens=0)
    with pytest.raises(UserError, match="declared specs, or allow_dynamic"):
        SubagentTools(allow_dynamic=False)
    with pytest.raises(SubagentSpecError, match="declared twice"):
        SubagentTools([SubagentSpec(name="a"), SubagentSpec(name="a")])
    only_declared = SubagentTools([SubagentSpec(name="a", model=ScriptedModel([]))], allow_dynamic=False)
    assert "spec" not in only_declared.agent_spawn.parameters["properties"]
    dynamic_only = SubagentTools()
    assert "name" not in dynamic_only.agent_spawn.parameters["properties"]


def test_the_subagent_task_events_round_trip() -> None:
    from agentrt.events import SubagentTaskFinished, SubagentTaskStarted, event_from_dict

    started = SubagentTaskStarted(
        reply_id="r", session_id="s", source="boss", task_id="task-1", name="helper", task="t", background=True,
        subagent_session_id="s/tasks/task-1",
    )  # fmt: skip
    finished = SubagentTaskFinished(
        reply_id="r", session_id="s", source="boss", task_id="task-1", name="helper", status="completed",
        summary="done", tokens=12,
    )  # fmt: skip
    assert (started.type, finished.type) == ("subagent_task_started", "subagent_task_finished")
    for event in (started, finished):
        assert event_from_dict(event.to_dict()) == event
