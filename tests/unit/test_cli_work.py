"""`agentrt work`: its parts in-process, and the real command driven through a pseudo-terminal."""

from __future__ import annotations

import io
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pexpect  # type: ignore[import-untyped]
import pytest
from rich.console import Console
from terminal_driver import Terminal

from agentrt import Msg, RuntimeContext, TextBlock, ToolResultBlock, ToolUseBlock
from agentrt.cli.work import WorkRenderer, build_work_agent, register_work_models, workspace_plan
from agentrt.errors import UserError
from agentrt.harness.mentions import Mention, MentionsExpanded
from agentrt.model import ModelRequest, ToolSchema, model_from_id
from agentrt.state import InMemoryStateStore
from agentrt.tool.builtin.plan import PlanModeChanged

ROOT = Path(__file__).resolve().parents[2]
PROMPT = r"you (?:\(plan\) )?\u203a "
PLAN_PROMPT = "you (plan) \u203a "
ALLOW = r"allow\?"
SKILL = "---\nname: changelog\ndescription: Keep CHANGELOG.md tidy.\n---\nAdd one line per change.\n"


def request(
    *messages: Msg, tools: tuple[str, ...] = ("write_file", "edit_file", "read_file", "plan_write")
) -> ModelRequest:
    return ModelRequest(
        messages=list(messages), tools=[ToolSchema(name=n, description="", parameters={}) for n in tools]
    )


# -- parts ----------------------------------------------------------------------------------------------
def test_the_offline_workspace_model_turns_commands_into_tool_calls() -> None:
    def call(text: str) -> ToolUseBlock:
        [block] = workspace_plan(request(Msg.user(text)))
        assert isinstance(block, ToolUseBlock)
        return block

    assert call("write notes.md: hello there").input == {"path": "notes.md", "content": "hello there\n"}
    assert call("edit a.py: x = 1 -> x = 2").input == {"path": "a.py", "old": "x = 1", "new": "x = 2"}
    assert call("read a.py").input == {"path": "a.py"}
    assert call("plan: 1. look 2. change").name == "plan_write"
    [missing] = workspace_plan(request(Msg.user("run ls")))
    assert isinstance(missing, TextBlock) and "run_command, which I do not have" in missing.text
    [help_text] = workspace_plan(request(Msg.user("hello?")))
    assert isinstance(help_text, TextBlock) and "offline workspace model" in help_text.text


def test_the_offline_model_answers_results_and_asks_for_plan_approval() -> None:
    done = Msg.tool_results([ToolResultBlock(id="1", name="write_file", output="Created a.md (3 bytes).")])
    [text] = workspace_plan(request(done))
    assert isinstance(text, TextBlock) and text.text == "Done (write_file): Created a.md (3 bytes)."
    denied = Msg.tool_results([ToolResultBlock(id="1", name="write_file", output="no", state="denied")])
    [text] = workspace_plan(request(denied))
    assert isinstance(text, TextBlock) and text.text == "The write_file call ended as denied: no"
    planned = Msg.tool_results([ToolResultBlock(id="1", name="plan_write", output="Plan written.")])
    blocks = workspace_plan(request(planned, tools=("plan_write", "plan_exit")))
    assert isinstance(blocks[-1], ToolUseBlock) and blocks[-1].name == "plan_exit"


def test_the_offline_model_names_the_attached_files() -> None:
    msg = Msg(
        role="user",
        content=[
            TextBlock(text="look at @a.txt"),
            TextBlock(text="[Attached file a.txt (6 bytes), mentioned as @a.txt]\n```\nfirst\nsecond\n```"),
        ],
    )
    [text] = workspace_plan(request(msg))
    assert isinstance(text, TextBlock)
    assert text.text == "I see 1 attached file(s): a.txt: \u00abfirst\u00bb. You said: look at @a.txt"


def test_scripted_models_resolve() -> None:
    register_work_models()
    assert model_from_id("scripted:workspace").model_name == "workspace"
    assert model_from_id("scripted:echo").model_name == "echo"  # the chat's models stay
    with pytest.raises(UserError):
        model_from_id("scripted:workspace", temperature=1)


async def test_the_renderer_shows_attachments_and_plan_mode() -> None:
    buffer = io.StringIO()
    renderer = WorkRenderer(Console(file=buffer, width=200, color_system=None), "workspace")
    renderer.feed(
        MentionsExpanded(
            reply_id="r",
            mentions=[
                Mention(token="@a.txt", path="a.txt", attached=True, rel="a.txt", size=6),
                Mention(token="@big.log", path="big.log", attached=True, rel="big.log", size=10**6, truncated=True),
                Mention(token="@../x", path="../x", attached=False, reason="'../x' is outside the workspace"),
            ],
        )
    )
    renderer.feed(PlanModeChanged(reply_id="r", active=True, reason="entered"))
    renderer.feed(PlanModeChanged(reply_id="r", active=False, reason="plan_approved"))
    out = buffer.getvalue()
    assert "+ attached a.txt (6 bytes)" in out and "+ attached big.log (1000000 bytes, cut)" in out
    assert "! @../x not attached: '../x' is outside the workspace" in out
    assert "plan mode on: the agent plans" in out and "plan mode off (plan approved)" in out


async def test_the_agent_of_the_command(tmp_path: Path) -> None:
    agent = build_work_agent(str(tmp_path), "scripted:workspace", store=InMemoryStateStore(), sandbox=False)
    assert agent.root == str(tmp_path) and agent.max_iters == 50
    reply = await agent.call("write a.md: hi", RuntimeContext("u", "s"))
    assert reply.generate_reason.value == "awaiting_confirmation"
    with pytest.raises(ValueError):
        build_work_agent(str(tmp_path), "scripted:workspace", permission="sometimes")


# -- the real command in a pseudo-terminal -------------------------------------------------------------------
@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "skills" / "changelog").mkdir(parents=True)
    (root / "skills" / "changelog" / "SKILL.md").write_text(SKILL)
    (root / "AGENTS.md").write_text("Answer in one line.\n")
    (root / "notes.txt").write_text("meeting at noon\n")
    (tmp_path / "secret.txt").write_text("TOP SECRET\n")
    return root


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path / "home"),
        "PYTHONPATH": str(ROOT / "src"),
        "TERM": "dumb",
        "PYTHONIOENCODING": "utf-8",
        "LANG": "C.UTF-8",
    }


class Work(Terminal):
    """One `agentrt work` process on a pseudo-terminal (normal or plan-mode prompt)."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        super().__init__(env, "work", *args, prompt_pattern=PROMPT)


@pytest.fixture
def works() -> Iterator[list[Work]]:
    opened: list[Work] = []
    yield opened
    for work in opened:
        work.close()


def start(works: list[Work], env: dict[str, str], *args: str) -> Work:
    work = Work(env, *args)
    works.append(work)
    return work


def test_mentions_approvals_and_a_file_edit(folder: Path, env: dict[str, str], works: list[Work]) -> None:
    work = start(works, env, str(folder), "--model", "scripted:workspace", "--session", "w1", "--no-sandbox")
    banner = work.prompt()
    assert "agentrt work" in banner and "session w1" in banner
    assert f"workspace {folder}" in banner
    assert "instructions: AGENTS.md (20 bytes)" in banner
    assert "skills: 1 (/skills lists them)" in banner
    assert f"store sqlite:///{folder}/.agentrt/state.db" in banner

    out = work.say("summarise @notes.txt and @../secret.txt")
    assert "+ attached notes.txt (16 bytes)" in out
    assert "! @../secret.txt not attached: '../secret.txt' is outside the workspace" in out
    assert "I see 1 attached file(s): notes.txt: \u00abmeeting at noon\u00bb" in out
    assert "TOP SECRET" not in out

    work.child.sendline("write todo.md: buy milk")
    before = work.expect(ALLOW)
    assert '\u26a0 approve write_file {"path": "todo.md", "content": "buy milk\\n"}' in before
    out = work.say("y")
    assert "\u2190 write_file \u2713: Created todo.md" in out
    assert (folder / "todo.md").read_text() == "buy milk\n"

    work.child.sendline("edit todo.md: milk -> bread")
    work.expect(ALLOW)
    out = work.say("n")
    assert "\u2717 denied" in out and (folder / "todo.md").read_text() == "buy milk\n"
    assert work.exit() == 0
    assert f"continue it with agentrt work {folder} --model scripted:workspace --session w1" in (
        work.transcript.getvalue()
    )


def test_plan_mode_by_command_and_by_shift_tab(folder: Path, env: dict[str, str], works: list[Work]) -> None:
    work = start(works, env, str(folder), "--model", "scripted:workspace", "--session", "p1", "--no-sandbox")
    work.prompt()
    assert work.last_prompt == "you \u203a "
    out = work.say("/plan")
    assert "plan mode on" in out and work.last_prompt == PLAN_PROMPT

    out = work.say("write x.md: nope")
    assert "\u2717 denied" in out and "plan mode" in out
    assert not (folder / "x.md").exists()

    # The plan goes through the inline approval; once approved, plan mode is over.
    work.child.sendline("plan: 1. write x.md")
    before = work.expect(ALLOW)
    assert "approve plan_exit" in before
    out = work.say("y")
    assert "plan mode off (plan approved)" in out
    assert work.last_prompt == "you \u203a "
    assert (folder / "plans" / "p1.md").read_text() == "1. write x.md\n"

    # Shift+Tab toggles too, and what was typed comes back on the prompt.
    # (A dumb terminal redraws the line, prompt included, when the key moves the cursor: wait for the
    # mode's message first.)
    work.child.send("write y.md: typed before")
    work.child.send("\x1b[Z")
    work.expect("plan mode on")
    work.prompt()
    assert work.last_prompt == PLAN_PROMPT
    work.child.send("\x1b[Z")  # and off again, with the refilled line
    work.expect("plan mode off")
    work.prompt()
    assert work.last_prompt == "you \u203a "
    work.child.send("\r")  # the refilled line is sent as it is
    work.expect(ALLOW)
    work.say("y")
    assert (folder / "y.md").read_text() == "typed before\n"
    out = work.say("/plan on")
    assert work.last_prompt == PLAN_PROMPT
    out = work.say("/plan off")
    assert work.last_prompt == "you \u203a "
    assert work.exit() == 0


def test_skills_help_and_continue(folder: Path, env: dict[str, str], works: list[Work]) -> None:
    first = start(works, env, str(folder), "--model", "scripted:workspace", "--session", "old", "--no-sandbox")
    first.prompt()
    skills = first.say("/skills")
    assert re.search(r"changelog\s+Keep CHANGELOG\.md tidy\.", skills)
    help_text = first.say("/help")
    assert "/plan [on|off]" in help_text and "/skills" in help_text and "/sessions" in help_text
    first.say("hello")
    assert first.exit() == 0

    second = start(works, env, str(folder), "--model", "scripted:workspace", "--continue", "--plan", "--no-sandbox")
    banner = second.prompt()
    assert "session old" in banner and "resumed session old: 2 messages" in banner
    assert "plan mode is ON" in banner and second.last_prompt == PLAN_PROMPT
    assert second.exit() == 0


def test_a_missing_folder_fails_fast(tmp_path: Path, env: dict[str, str]) -> None:
    child = pexpect.spawn(
        sys.executable,
        ["-m", "agentrt.cli", "work", str(tmp_path / "nope"), "--model", "scripted:workspace"],
        env=env,
        encoding="utf-8",
        timeout=30,
    )
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 2
    assert "is not an existing directory" in " ".join(str(child.before).split())  # rich wraps it
