"""The web UI answering an MCP server's questions, in headless Debian chromium against a real uvicorn server.

The served agent's tools come from an in-process MCP server (`tests/mcp_questions.py`) that asks
for a booking form, a URL visit or any form; the page shows the question card inside the tool
card, posts the answer to ``.../answers`` and shows the outcome, while the run streams.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from typing import Any

import pytest
from webui_support import API_KEY, ARTIFACTS, USER_ID, XSS, UiPage, open_page, serve

from agentrt import ReActAgent, Toolkit, ToolResultBlock, ToolUseBlock
from agentrt.mcp import McpClient
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.server import create_app
from agentrt.state import InMemoryStateStore
from mcp_questions import AUTH_URL, P, Received, question_server

try:
    from playwright.sync_api import expect
except ImportError:  # the fixtures skip (locally) or fail (CI) with the reason
    if os.environ.get("CI", "").lower() == "true":
        raise
    pytest.skip("the playwright package is not installed (pip install playwright)", allow_module_level=True)

pytestmark = pytest.mark.slow
expect.set_options(timeout=15_000)

XSS_FORM = {
    "type": "object",
    "properties": {
        "note": {"type": "string", "title": f"Note {XSS}", "description": f"Say {XSS}"},
        "when": {"type": "string", "format": "date"},
        "tools": {"type": "array", "title": "Tools", "items": {"enum": ["saw", f"{XSS}"]}, "minItems": 1},
    },
    "required": ["tools"],
}


def planner(request: ModelRequest) -> Any:
    """Call the tool the message names; then report its result."""
    results = request.messages[-1].blocks(ToolResultBlock)
    if results:
        return f"Done: {results[0].text}"
    text = request.last_user_text
    if text.startswith("book"):
        return ToolUseBlock(name=P + "book", input={"table": text.split()[-1]})
    if text.startswith("connect"):
        return ToolUseBlock(name=P + "authorize", input={"url": AUTH_URL})
    return ToolUseBlock(name=P + "ask", input={"schema": json.dumps(XSS_FORM), "message": f"Fill {XSS} in"})


@pytest.fixture(scope="module")
def questions_server(browser: Any) -> Iterator[tuple[str, Received]]:
    received = Received()
    toolkit = Toolkit()
    agent = ReActAgent("booker", "You book tables.", model=ScriptedModel.from_function(planner), toolkit=toolkit)
    app = create_app({"booker": agent}, store=InMemoryStateStore(), api_keys={API_KEY: USER_ID})

    async def with_mcp(scope: Any, receive: Any, send: Any) -> None:
        # The MCP connection belongs to the server's event loop: open it when the app starts.
        if scope["type"] == "lifespan":
            await toolkit.register_mcp(McpClient.memory(question_server(received), name="questions"))
            try:
                await app(scope, receive, send)
            finally:
                await toolkit.aclose()
            return
        await app(scope, receive, send)

    with serve(with_mcp) as url:
        yield url, received


@pytest.fixture
def page(browser: Any, questions_server: tuple[str, Received]) -> Iterator[UiPage]:
    with open_page(browser, questions_server[0], None) as tab:
        yield tab


def start(ui: UiPage, text: str) -> Any:
    """Connect, open a new session, send `text`; the question card of the run."""
    tab = ui.page
    dialog = tab.get_by_role("dialog", name="Connect")
    expect(dialog).to_be_visible()
    tab.get_by_label("API key").fill(API_KEY)
    dialog.get_by_role("button", name="Connect").click()
    expect(dialog).to_be_hidden()
    expect(tab.locator("body")).to_have_attribute("data-phase", "idle")
    current = tab.locator("#current-session")
    before = current.text_content() or ""
    tab.get_by_role("button", name="New session").click()
    expect(current).not_to_have_text(before)
    expect(tab.locator("body")).to_have_attribute("data-phase", "idle")
    tab.get_by_label("Message").fill(text)
    tab.get_by_role("button", name="Send").click()
    return tab.get_by_role("log").get_by_role("region", name="Question from questions")


def test_a_form_question_is_answered_in_the_page(page: UiPage, questions_server: tuple[str, Received]) -> None:
    tab, received = page.page, questions_server[1]
    card = start(page, "book T5")
    expect(card).to_have_attribute("data-state", "open")
    tool = tab.get_by_role("log").get_by_role("region", name=re.compile("^Tool call mcp__questions__book"))
    expect(tool).to_have_attribute("data-state", "asking")
    expect(card).to_contain_text("MCP server questions asks you")
    expect(card).to_contain_text("Book table T5: who and how many?")
    expect(tab.locator("#status")).to_have_text("Waiting for your answer")
    # The form comes from the requested schema: labels, help, defaults, required marks.
    expect(card.get_by_label("Name")).to_have_value("")
    expect(card).to_contain_text("Who the table is for")
    expect(card.get_by_label("Seats")).to_have_attribute("type", "number")
    expect(card.get_by_label("Seats")).to_have_attribute("max", "8")
    expect(card.get_by_label("Window")).not_to_be_checked()
    expect(card.get_by_label("Meal")).to_have_value("veg")
    tab.screenshot(path=str(ARTIFACTS / "web-ui-question.png"))

    # An answer the form refuses: the field says why, the question stays open, nothing was sent.
    card.get_by_label("Name").fill("Ann")
    card.get_by_label("Seats").fill("12")
    card.get_by_role("button", name="Submit").click()
    expect(card.locator('[data-field="seats"] .field-error')).to_have_text("must be at most 8")
    expect(card).to_have_attribute("data-state", "open")
    assert received.answers == []

    card.get_by_label("Seats").fill("3")
    card.get_by_label("Window").check()
    card.get_by_label("Meal").select_option("fish")
    card.get_by_role("button", name="Submit").click()
    expect(card).to_have_attribute("data-state", "accept")
    expect(card.locator(".question-status")).to_have_text("Accepted.")
    expect(card.get_by_role("button", name="Submit")).to_be_disabled()
    expect(tool).to_have_attribute("data-state", "success")
    expect(tab.get_by_role("log")).to_contain_text('Done: booked table T5: {"meal": "fish", "name": "Ann"')
    expect(tab.locator("#status")).to_have_text("Ready")
    assert received.answers[-1] == ("book", "accept", {"name": "Ann", "seats": 3, "window": True, "meal": "fish"})
    # The refused answer's 422 is the only error response (and the browser's console line for it).
    assert [e for e in page.errors if "422" not in e] == [], page.errors
    assert any(e.startswith("HTTP 422 POST") and e.endswith("/answers") for e in page.errors)
    assert page.dialogs == []


def test_a_url_question_shows_the_host_and_never_opens_it(page: UiPage, questions_server: tuple[str, Received]) -> None:
    tab, received = page.page, questions_server[1]
    card = start(page, "connect my account")
    expect(card).to_contain_text("asks you to visit a page")
    expect(card.locator(".url-host")).to_have_text("auth.example.com")
    link = card.get_by_role("link")
    expect(link).to_have_attribute("href", AUTH_URL)
    expect(link).to_have_attribute("rel", "noopener noreferrer nofollow")
    assert len(tab.context.pages) == 1  # shown, not opened
    card.get_by_role("button", name="Decline").click()
    expect(card).to_have_attribute("data-state", "decline")
    expect(tab.get_by_role("log")).to_contain_text("Done: authorization: decline")
    assert received.answers[-1] == ("authorize", "decline", None)
    assert len(tab.context.pages) == 1
    assert page.errors == [] and page.dialogs == []


def test_untrusted_question_text_renders_as_text(page: UiPage, questions_server: tuple[str, Received]) -> None:
    tab, received = page.page, questions_server[1]
    card = start(page, "ask me")
    expect(card).to_contain_text(f"Fill {XSS} in")
    expect(card).to_contain_text(f"Note {XSS}")
    expect(card).to_contain_text(f"Say {XSS}")
    assert tab.locator("img").count() == 0
    assert tab.locator("html").evaluate("el => el.querySelectorAll('[onerror]').length") == 0
    expect(card.get_by_label("When")).to_have_attribute("type", "date")
    card.get_by_role("checkbox", name=XSS, exact=True).check()  # a choice named with markup is just a label
    card.get_by_label("When").fill("2026-05-04")
    card.get_by_role("button", name="Submit").click()
    expect(card).to_have_attribute("data-state", "accept")
    assert received.answers[-1] == ("ask", "accept", {"tools": [XSS], "when": "2026-05-04"})
    tab.screenshot(path=str(ARTIFACTS / "web-ui-question-xss.png"))
    assert page.errors == [] and page.dialogs == []
