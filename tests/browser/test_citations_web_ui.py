"""A reply's knowledge citations in the web UI: a numbered list under the message, text only.

The agent answers from a tiny in-test knowledge base through ``search_knowledge``; its passages come
from "documents", so their titles are untrusted: one carries an HTML payload, one has a
``javascript:`` source. Only http(s) sources link out; every other citation links to the passage
view, a dialog that fetches the passage by chunk id from the caller's knowledge bases
(``GET /v1/knowledge/{kb}/chunks/{id}``) and shows it as text.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from webui_support import (
    AGENT,
    API_KEY,
    ARTIFACTS,
    USER_ID,
    XSS,
    LiveServer,
    Recorder,
    UiPage,
    make_app,
    open_page,
    serve,
)

from agentrt import ReActAgent, ToolResultBlock, ToolUseBlock
from agentrt.knowledge import Knowledge, MemoryKnowledgeStore
from agentrt.memory.retrieval import Passage
from agentrt.model import ScriptedModel
from agentrt.state import InMemoryStateStore

try:
    from playwright.sync_api import expect
except ImportError:  # the fixtures skip (locally) or fail (CI) with the reason
    if os.environ.get("CI", "").lower() == "true":
        raise
    pytest.skip("the playwright package is not installed (pip install playwright)", allow_module_level=True)

pytestmark = pytest.mark.slow
expect.set_options(timeout=15_000)

PASSAGES = [
    Passage("chunk-1", "25 vacation days.", "https://intra.example/handbook", f"Handbook {XSS}", "Leave > Vacation"),
    Passage("chunk-2", "Ask HR.", "docs/hr.md", "HR guide", None),
    Passage("chunk-3", "Click here.", "javascript:alert(1)", None, "page 2"),
]


class Handbook:
    """Every query finds the same three passages."""

    async def search(self, query: str, k: int = 5, filters: Any = None) -> list[Passage]:
        return PASSAGES[:k]


def planner(request: Any) -> Any:
    if request.messages[-1].blocks(ToolResultBlock):
        return "You get 25 vacation days [1]."
    return ToolUseBlock(name="search_knowledge", input={"query": request.last_user_text})


@pytest.fixture(scope="module")
def kb_server(browser: Any) -> Iterator[LiveServer]:
    agent = ReActAgent(
        "janitor",
        "You answer from the handbook.",
        model=ScriptedModel.from_function(planner, name="planner"),
        state_store=InMemoryStateStore(),
        knowledge=Handbook(),
    )
    with serve(make_app(agent)) as url:
        yield LiveServer(url=url, recorder=Recorder())


@pytest.fixture
def kb_ui(browser: Any, kb_server: LiveServer) -> Iterator[UiPage]:
    with open_page(browser, kb_server.url, kb_server) as page:
        yield page


def check_sources(page: Any) -> None:
    sources = page.get_by_role("log").get_by_role("navigation", name="Sources")
    expect(sources).to_have_count(1)
    items = sources.locator("ol > li")
    expect(items).to_have_count(3)
    first, second, third = items.nth(0), items.nth(1), items.nth(2)
    # An http(s) source is a link; the title with HTML in it is text.
    link = first.get_by_role("link")
    expect(link).to_have_text(f"Handbook {XSS} — Leave > Vacation")
    expect(link).to_have_attribute("href", "https://intra.example/handbook")
    expect(link).to_have_attribute("rel", "noopener noreferrer")
    expect(first.locator(".citation-id")).to_have_text("chunk-1")
    # A file source: title (a link to the passage view, inside the page), source and chunk id.
    expect(second.get_by_role("link")).to_have_attribute("href", "#passage-chunk-2")
    expect(second).to_contain_text("HR guide")
    expect(second.locator(".citation-source")).to_have_text("docs/hr.md")
    expect(second.locator(".citation-id")).to_have_text("chunk-2")
    # A javascript: source never becomes a link to it; without a title the source names the passage.
    expect(third.get_by_role("link")).to_have_attribute("href", "#passage-chunk-3")
    expect(third.locator(".citation-passage")).to_have_text("javascript:alert(1) — page 2")
    assert page.locator("img").count() == 0
    assert page.locator("html").evaluate("el => el.querySelectorAll('[onerror]').length") == 0
    assert "&lt;img src=x onerror=alert(1)&gt;" in sources.inner_html()


def test_a_reply_shows_its_citations_as_a_numbered_list_of_text(kb_ui: UiPage) -> None:
    page = kb_ui.page
    dialog = page.get_by_role("dialog", name="Connect")
    expect(dialog).to_be_visible()
    page.get_by_label("API key").fill(API_KEY)
    dialog.get_by_role("button", name="Connect").click()
    expect(dialog).to_be_hidden()
    expect(page.locator("body")).to_have_attribute("data-phase", "idle")
    page.get_by_role("button", name="New session").click()
    expect(page.locator("body")).to_have_attribute("data-phase", "idle")

    page.get_by_label("Message").fill("How many vacation days?")
    page.get_by_role("button", name="Send").click()
    expect(page.get_by_role("log")).to_contain_text("You get 25 vacation days [1].")
    check_sources(page)
    page.screenshot(path=str(ARTIFACTS / "web-ui-citations.png"))
    # The same list when the history is rendered from the stored session.
    page.reload()
    expect(page.locator("body")).to_have_attribute("data-phase", "idle")
    expect(page.get_by_role("log")).to_contain_text("You get 25 vacation days [1].")
    check_sources(page)
    assert kb_ui.errors == [] and kb_ui.dialogs == []


# -- the passage view over a real knowledge base -----------------------------------------------------------
PASSAGE_TEXT = f"Employees get 25 vacation days. {XSS} <script>alert(2)</script>"


@pytest.fixture(scope="module")
def real_kb_server(browser: Any) -> Iterator[LiveServer]:
    store = MemoryKnowledgeStore()
    view = Knowledge("handbook", store=store).for_namespace(USER_ID)
    # The sync playwright API runs a loop in this thread: ingest on a loop of another thread.
    with ThreadPoolExecutor(1) as pool:
        report = pool.submit(asyncio.run, view.add_text(f"# Leave\n\n{PASSAGE_TEXT}", source="hr/leave.md")).result()
    assert report.added == ("hr/leave.md",)
    agent = ReActAgent(
        AGENT,
        "You answer from the handbook.",
        model=ScriptedModel.from_function(planner, name="planner"),
        state_store=InMemoryStateStore(),
        knowledge=Knowledge("handbook", store=store, per_user=True),
    )
    from agentrt.server import create_app

    app = create_app(agents={AGENT: agent}, api_keys={API_KEY: USER_ID}, knowledge=Knowledge("handbook", store=store))
    with serve(app) as url:
        yield LiveServer(url=url, recorder=Recorder())


def test_a_citation_opens_its_passage_as_text(browser: Any, real_kb_server: LiveServer) -> None:
    with open_page(browser, real_kb_server.url, real_kb_server) as ui:
        page = ui.page
        dialog = page.get_by_role("dialog", name="Connect")
        page.get_by_label("API key").fill(API_KEY)
        dialog.get_by_role("button", name="Connect").click()
        expect(dialog).to_be_hidden()
        page.get_by_role("button", name="New session").click()
        expect(page.locator("body")).to_have_attribute("data-phase", "idle")
        page.get_by_label("Message").fill("vacation days")
        page.get_by_role("button", name="Send").click()
        sources = page.get_by_role("log").get_by_role("navigation", name="Sources")
        expect(sources.locator("ol > li")).to_have_count(1)
        link = sources.get_by_role("link")
        expect(link).to_have_text("Leave — Leave")
        link.click()
        view = page.get_by_role("dialog", name="Leave — Leave")
        expect(view).to_be_visible()
        expect(view.locator(".passage-text")).to_have_text(f"# Leave\n\n{PASSAGE_TEXT}")
        expect(view).to_contain_text("hr/leave.md")
        expect(view).to_contain_text("knowledge base handbook")
        assert page.locator("img").count() == 0 and page.locator("dialog script").count() == 0
        page.screenshot(path=str(ARTIFACTS / "web-ui-passage.png"))
        view.get_by_role("button", name="Close").click()
        expect(view).to_be_hidden()
        assert ui.errors == [] and ui.dialogs == []
