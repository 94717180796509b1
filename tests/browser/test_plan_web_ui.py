"""The plan approval in the web UI: an ordinary approval card, with the plan shown as text, line by line.

The agent runs in plan mode (`PermissionMode.PLAN`): its scripted model writes a plan (with an HTML
payload in it) and calls ``plan_exit``; the card must show the plan, and approving it must end plan
mode, so the write the model then makes asks (the agent's mode after plan mode is DEFAULT) instead of
being denied, and runs once approved.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from webui_support import API_KEY, XSS, LiveServer, Recorder, UiPage, make_app, open_page, serve

from agentrt import PermissionContext, PermissionMode, ReActAgent, Toolkit, ToolResultBlock, ToolUseBlock
from agentrt.model import ScriptedModel
from agentrt.tool.builtin import FileTools, PlanTools

try:
    from playwright.sync_api import expect
except ImportError:  # the fixtures skip (locally) or fail (CI) with the reason
    if os.environ.get("CI", "").lower() == "true":
        raise
    pytest.skip("the playwright package is not installed (pip install playwright)", allow_module_level=True)

pytestmark = pytest.mark.slow
expect.set_options(timeout=15_000)

PLAN = f"# Plan\n1. Write notes.txt {XSS}\n2. Check it"


def planner(request: Any) -> Any:
    """Write the plan, ask to leave plan mode, then (approved) write the file and answer."""
    results = request.messages[-1].blocks(ToolResultBlock)
    if not results:
        return ToolUseBlock(name="plan_write", input={"content": PLAN})
    last = results[-1]
    if last.name == "plan_write":
        return ToolUseBlock(name="plan_exit", input={})
    if last.name == "plan_exit" and last.state == "success":
        return ToolUseBlock(name="write_file", input={"path": "notes.txt", "content": "notes\n"})
    return f"{last.name}: {last.state}"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("plan-ui")


@pytest.fixture(scope="module")
def plan_server(browser: Any, workspace: Path) -> Iterator[LiveServer]:
    toolkit = Toolkit()
    toolkit.register(FileTools(workspace))
    toolkit.register(PlanTools(workspace))
    agent = ReActAgent(
        "janitor",
        "You plan, then act.",
        model=ScriptedModel.from_function(planner, name="planner"),
        toolkit=toolkit,
        permission=PermissionContext(mode=PermissionMode.PLAN, workspace=str(workspace)),
    )
    with serve(make_app(agent)) as url:
        yield LiveServer(url=url, recorder=Recorder())


@pytest.fixture
def plan_ui(browser: Any, plan_server: LiveServer) -> Iterator[UiPage]:
    with open_page(browser, plan_server.url, plan_server, http_errors=False) as page:
        yield page


def test_the_plan_approval_shows_the_plan_and_approving_ends_plan_mode(plan_ui: UiPage, workspace: Path) -> None:
    page = plan_ui.page
    dialog = page.get_by_role("dialog", name="Connect")
    expect(dialog).to_be_visible()
    page.get_by_label("API key").fill(API_KEY)
    dialog.get_by_role("button", name="Connect").click()
    expect(dialog).to_be_hidden()
    expect(page.locator("body")).to_have_attribute("data-phase", "idle")
    page.get_by_role("button", name="New session").click()
    expect(page.locator("body")).to_have_attribute("data-phase", "idle")

    page.get_by_label("Message").fill("Add notes")
    page.get_by_role("button", name="Send").click()
    card = page.get_by_role("log").get_by_role("region", name="Tool call plan_exit")
    expect(card).to_have_attribute("data-state", "awaiting")
    expect(card.locator(".approval-reason")).to_contain_text("approve this plan (plans/")
    detail = card.locator(".approval-detail")
    expect(detail).to_have_text(PLAN)  # the whole plan, its lines kept, the HTML as text
    expect(card.locator(".approval-detail img")).to_have_count(0)
    assert not (workspace / "notes.txt").exists()

    card.get_by_role("button", name="Approve").click()
    expect(card).to_have_attribute("data-state", "success")
    # Out of plan mode the session runs in DEFAULT mode: the write asks now instead of being denied.
    write = page.get_by_role("log").get_by_role("region", name="Tool call write_file")
    expect(write).to_have_attribute("data-state", "awaiting")
    expect(write.locator(".approval-detail")).to_have_count(0)  # a one-line reason stays one line
    assert not (workspace / "notes.txt").exists()
    write.get_by_role("button", name="Approve").click()
    expect(page.get_by_role("log")).to_contain_text("write_file: success")
    assert (workspace / "notes.txt").read_text() == "notes\n"
    assert plan_ui.errors == [] and plan_ui.dialogs == []
