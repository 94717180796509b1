"""The run timeline (waterfall) of a reply in the web UI, measured from the DOM in headless chromium.

A scripted model asks for two read-only tools (run in parallel) and one destructive tool (which
waits for approval) in one step; the user approves in the UI; the model answers. The reply's
timeline shows the two tool bars overlapping in time on different rows, and the approval wait as
its own bar after them, all inside the time axis. Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import pytest
from webui_support import AGENT, API_KEY, ARTIFACTS, LiveServer, Recorder, UiPage, make_app, open_page, serve

from agentrt import ReActAgent, Toolkit, ToolResultBlock, ToolUseBlock, tool
from agentrt.message import TokenUsage
from agentrt.model import ModelRequest, ScriptedModel

try:
    from playwright.sync_api import expect
except ImportError:  # the fixtures skip (locally) or fail (CI) with the reason
    if os.environ.get("CI", "").lower() == "true":
        raise
    pytest.skip("the playwright package is not installed (pip install playwright)", allow_module_level=True)

pytestmark = pytest.mark.slow
expect.set_options(timeout=15_000)

TOOL_SECONDS = 0.4
"""How long each parallel tool runs: long enough for their bars to be wide and to overlap."""


def planner(request: ModelRequest) -> Any:
    results = request.messages[-1].blocks(ToolResultBlock)
    if results:
        return "All done: " + "; ".join(r.text for r in results)
    return [
        ToolUseBlock(name="read_inbox", input={"folder": "inbox"}),
        ToolUseBlock(name="read_calendar", input={"day": "today"}),
        ToolUseBlock(name="archive", input={"folder": "inbox"}),
    ]


def build_agent(recorder: Recorder) -> ReActAgent:
    @tool(read_only=True)
    async def read_inbox(folder: str) -> str:
        """Read a mail folder.

        Args:
            folder: The folder.
        """
        await asyncio.sleep(TOOL_SECONDS)
        return f"3 mails in {folder}"

    @tool(read_only=True)
    async def read_calendar(day: str) -> str:
        """Read the calendar.

        Args:
            day: The day.
        """
        await asyncio.sleep(TOOL_SECONDS)
        return f"2 meetings {day}"

    @tool(destructive=True)
    async def archive(folder: str) -> str:
        """Archive a mail folder (asks first).

        Args:
            folder: The folder.
        """
        recorder.deleted.append(folder)
        return f"archived {folder}"

    model = ScriptedModel.from_function(planner, name="planner", usage=TokenUsage(input_tokens=120, output_tokens=30))
    return ReActAgent(AGENT, "You tidy mail.", model=model, toolkit=Toolkit([read_inbox, read_calendar, archive]))


@pytest.fixture(scope="module")
def timeline_server(browser: Any) -> Iterator[LiveServer]:
    recorder = Recorder()
    with serve(make_app(build_agent(recorder))) as url:
        yield LiveServer(url=url, recorder=recorder)


@pytest.fixture
def timeline_ui(browser: Any, timeline_server: LiveServer) -> Iterator[UiPage]:
    with open_page(browser, timeline_server.url, timeline_server) as page:
        yield page


def box(locator: Any) -> dict[str, float]:
    found = locator.bounding_box()
    assert found is not None, f"{locator} is not rendered"
    return dict(found)


def test_a_reply_timeline_shows_parallel_tools_and_the_approval_wait(timeline_ui: UiPage) -> None:
    page = timeline_ui.page
    dialog = page.get_by_role("dialog", name="Connect")
    page.get_by_label("API key").fill(API_KEY)
    dialog.get_by_role("button", name="Connect").click()
    expect(dialog).to_be_hidden()
    expect(page.locator("body")).to_have_attribute("data-phase", "idle")
    page.get_by_role("button", name="New session").click()
    expect(page.locator("body")).to_have_attribute("data-phase", "idle")
    page.get_by_label("Message").fill("Tidy my inbox")
    page.get_by_role("button", name="Send").click()

    log = page.get_by_role("log")
    card = log.locator('section.tool-card[aria-label="Tool call archive"]')
    expect(card).to_have_attribute("data-state", "awaiting")
    page.wait_for_timeout(300)  # the approval wait is a bar of its own: give it some width
    card.get_by_role("button", name="Approve").click()
    expect(log).to_contain_text("All done:")
    expect(page.locator("body")).to_have_attribute("data-phase", "idle")
    assert timeline_ui.server.recorder.deleted == ["inbox"]

    # The resumed reply's timeline is the whole run: the paused call, the wait, the resuming call.
    reply = log.locator("article.msg.assistant").last
    reply.get_by_role("button", name="Show the timeline of this reply", exact=False).click()
    timeline = page.get_by_role("dialog", name="Timeline", exact=False)
    expect(timeline).to_be_visible()
    expect(page.locator("body")).to_have_attribute("data-timeline", "shown")
    chart = timeline.locator("#timeline-chart")
    inbox = chart.locator('.tl-row[data-kind="tool"]', has_text="read_inbox").locator(".tl-bar")
    calendar = chart.locator('.tl-row[data-kind="tool"]', has_text="read_calendar").locator(".tl-bar")
    approval = chart.locator('.tl-bar[data-kind="approval"]')
    expect(inbox).to_have_count(1)
    expect(calendar).to_have_count(1)
    expect(approval).to_have_count(1)
    expect(approval).to_have_attribute("data-state", "answered")
    page.screenshot(path=str(ARTIFACTS / "web-ui-timeline.png"))

    axis = box(chart.locator(".tl-axis"))
    a, b, wait = box(inbox), box(calendar), box(approval)
    left, right = axis["x"], axis["x"] + axis["width"]
    for name, bar in (("read_inbox", a), ("read_calendar", b), ("approval", wait)):
        assert bar["width"] > 2, f"the {name} bar has a width"
        assert left - 1 <= bar["x"] and bar["x"] + bar["width"] <= right + 1, f"the {name} bar is within the axis"
    # the two tools ran at the same time: their bars overlap horizontally, on rows of their own
    overlap = min(a["x"] + a["width"], b["x"] + b["width"]) - max(a["x"], b["x"])
    assert overlap > 0.5 * min(a["width"], b["width"]), f"parallel tools must overlap in time: {a}, {b}"
    assert abs(a["y"] - b["y"]) >= min(a["height"], b["height"]), f"parallel tools are on different rows: {a}, {b}"
    # the approval wait starts when the run paused: after both tools ended, on a row of its own
    tools_end = max(a["x"] + a["width"], b["x"] + b["width"])
    assert wait["x"] >= tools_end - 2, f"the approval wait starts after the tools: {wait} vs {tools_end}"
    assert wait["y"] > max(a["y"], b["y"]), "the approval wait is drawn below the tools it follows"
    # the approved tool ran after the wait ended
    approved = chart.locator('.tl-row[data-kind="tool"]', has_text="archive").locator(".tl-bar")
    # (a bar too short to see keeps a few pixels inside the axis: at its very end it may start that much earlier)
    assert box(approved)["x"] >= wait["x"] + wait["width"] - 4, "the approved call runs after the wait"

    # Clicking a bar shows its details: tokens, cost, what the model saw; a tool's arguments and result.
    detail = timeline.locator("#timeline-detail")
    chart.locator('.tl-bar[data-kind="model"]').first.click()
    expect(detail).to_contain_text("120 in · 30 out")
    expect(detail.locator('[data-field="request"]')).to_contain_text("Tidy my inbox")
    expect(detail.locator('[data-field="request"]')).to_contain_text("You tidy mail.")
    inbox.click()
    expect(detail).to_contain_text('"folder": "inbox"')
    expect(detail).to_contain_text("3 mails in inbox")
    approval.click()
    expect(detail).to_contain_text("approved")
    page.screenshot(path=str(ARTIFACTS / "web-ui-timeline-detail.png"))
    timeline.get_by_role("button", name="Close").click()
    expect(timeline).to_be_hidden()

    # The session view lists the run with its totals; it opens the same timeline after a reload.
    page.reload()
    expect(page.locator("body")).to_have_attribute("data-phase", "idle")
    runs = page.get_by_role("complementary", name="State").locator('[data-field="runs"]')
    expect(runs).to_contain_text("1 run")
    expect(runs).to_contain_text("240 in · 60 out tokens")
    runs.locator("button.run-open").first.click()
    expect(page.locator("body")).to_have_attribute("data-timeline", "shown")
    expect(timeline.locator('.tl-bar[data-kind="approval"]')).to_have_count(1)
    expect(timeline.locator('.tl-bar[data-kind="tool"]')).to_have_count(3)
    page.screenshot(path=str(ARTIFACTS / "web-ui-timeline-reloaded.png"))
    assert timeline_ui.errors == [] and timeline_ui.dialogs == []
