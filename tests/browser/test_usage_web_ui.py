"""A reply's tokens and cost in the web UI footer: live from the usage events, and from the stored session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from webui_support import AGENT, API_KEY, LiveServer, Recorder, UiPage, make_app, open_page, serve

from agentrt import ReActAgent
from agentrt.message import TokenUsage
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


@pytest.fixture(scope="module")
def priced_server(browser: Any) -> Iterator[LiveServer]:
    # gpt-4o in the genai-prices table: 1000 input and 100 output tokens cost $0.0035.
    model = ScriptedModel.from_function(
        lambda request: "Hello there.", name="openai:gpt-4o", usage=TokenUsage(input_tokens=1000, output_tokens=100)
    )
    agent = ReActAgent(AGENT, "You greet.", model=model, state_store=InMemoryStateStore())
    with serve(make_app(agent)) as url:
        yield LiveServer(url=url, recorder=Recorder())


@pytest.fixture
def priced_ui(browser: Any, priced_server: LiveServer) -> Iterator[UiPage]:
    with open_page(browser, priced_server.url, priced_server) as page:
        yield page


def test_a_reply_footer_shows_its_tokens_and_cost(priced_ui: UiPage) -> None:
    page = priced_ui.page
    dialog = page.get_by_role("dialog", name="Connect")
    page.get_by_label("API key").fill(API_KEY)
    dialog.get_by_role("button", name="Connect").click()
    expect(dialog).to_be_hidden()
    page.get_by_role("button", name="New session").click()
    expect(page.locator("body")).to_have_attribute("data-phase", "idle")
    page.get_by_label("Message").fill("Hi")
    page.get_by_role("button", name="Send").click()
    footer = page.get_by_role("log").locator("article.msg.assistant .msg-footer").last
    expect(footer).to_contain_text("1000 in · 100 out tokens")
    expect(footer).to_contain_text("$0.0035")
    page.reload()  # the same from the stored session
    expect(page.locator("body")).to_have_attribute("data-phase", "idle")
    footer = page.get_by_role("log").locator("article.msg.assistant .msg-footer").last
    expect(footer).to_contain_text("$0.0035")
    assert priced_ui.errors == [] and priced_ui.dialogs == []
