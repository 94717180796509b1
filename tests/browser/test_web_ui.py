"""End-to-end tests of the web UI in headless Debian chromium, against a real uvicorn server.

The server runs `agentrt.server.create_app` with one agent whose scripted model asks for a
destructive tool (so the run pauses for approval) and then answers from the tool result.
"""

from __future__ import annotations

import os
import re
from typing import Any

import pytest
from webui_support import API_KEY, ARTIFACTS, SLOW_WORDS, XSS, UiPage

try:
    from playwright.sync_api import expect
except ImportError:  # the fixtures skip (locally) or fail (CI) with the reason
    if os.environ.get("CI", "").lower() == "true":
        raise
    pytest.skip("the playwright package is not installed (pip install playwright)", allow_module_level=True)

pytestmark = pytest.mark.slow
expect.set_options(timeout=15_000)


# -- helpers --------------------------------------------------------------------------------------
# Tests wait for the state they need (an element's text or attribute, the UI's phase), never for
# time: `expect` retries until the state holds, the timeout above only bounds a failure.


def wait_idle(page: Any) -> None:
    """Until the UI is connected with nothing loading or running (app.js renders ``body[data-phase]``)."""
    expect(page.locator("body")).to_have_attribute("data-phase", "idle")


def connect(ui: UiPage) -> None:
    page = ui.page
    dialog = page.get_by_role("dialog", name="Connect")
    expect(dialog).to_be_visible()
    page.get_by_label("API key").fill(API_KEY)
    dialog.get_by_role("button", name="Connect").click()
    expect(dialog).to_be_hidden()
    # Connecting goes on after the dialog closes (sessions listed, one opened): let it finish, or
    # it would switch away from the session the test is about to create.
    wait_idle(page)


def new_session(page: Any) -> str:
    current = page.locator("#current-session")
    before = current.text_content()
    page.get_by_role("button", name="New session").click()
    expect(current).not_to_have_text(before or "")
    wait_idle(page)
    session_id: str | None = current.text_content()
    assert session_id and session_id.startswith("s-")
    expect(page.get_by_role("navigation", name="Sessions").locator('[aria-current="true"]')).to_contain_text(session_id)
    return session_id


def send(page: Any, text: str) -> None:
    page.get_by_label("Message").fill(text)
    page.get_by_role("button", name="Send").click()


def tool_card(page: Any, name: str) -> Any:
    return page.get_by_role("log").get_by_role("region", name=f"Tool call {name}")


def count_text_mutations(page: Any) -> None:
    """Count character-data changes in the log: streamed deltas each append to a text node."""
    page.evaluate(
        """() => {
            window.__textMutations = 0;
            new MutationObserver((records) => {
                for (const r of records) if (r.type === "characterData") window.__textMutations++;
            }).observe(document.getElementById("log"), {subtree: true, characterData: true, childList: true});
        }"""
    )


def assert_no_page_errors(ui: UiPage) -> None:
    assert ui.errors == [], ui.errors
    assert ui.dialogs == [], ui.dialogs


# -- tests ----------------------------------------------------------------------------------------


def test_approval_round_trip(ui: UiPage) -> None:
    page = ui.page
    connect(ui)
    session_id = new_session(page)
    count_text_mutations(page)

    send(page, "Please delete /tmp/report.old")
    log = page.get_by_role("log")
    expect(log).to_contain_text("I will delete /tmp/report.old for you.")
    assert page.evaluate("window.__textMutations") > 3, "the answer text was not streamed delta by delta"

    # Thinking is shown, collapsed.
    thinking = log.locator("details.thinking")
    expect(thinking).to_have_count(1)
    expect(thinking.locator("summary")).to_have_text("Thinking")
    expect(thinking.locator(".thinking-text")).to_be_hidden()
    thinking.locator("summary").click()
    expect(thinking.locator(".thinking-text")).to_contain_text("deleting needs approval")

    # A tool card waits for approval, with its arguments and the three buttons.
    card = tool_card(page, "delete_file")
    expect(card).to_have_attribute("data-state", "awaiting")
    expect(card.locator(".tool-args")).to_contain_text('"path": "/tmp/report.old"')
    expect(card.get_by_role("button", name="Approve")).to_be_enabled()
    expect(card.get_by_role("button", name="Deny")).to_be_enabled()
    expect(card.get_by_role("button", name="Edit arguments")).to_be_enabled()
    expect(page.get_by_role("button", name="Send")).to_be_disabled()
    expect(page.locator("#status")).to_have_text("Waiting for your approval")
    inspector = page.get_by_role("complementary", name="State")
    expect(inspector.locator('[data-field="pending"]')).to_contain_text("delete_file")

    page.screenshot(path=str(ARTIFACTS / "web-ui-approval.png"))

    # Approve, accepting the broader suggested rule as "always allow".
    broader = card.get_by_role("radio", name="delete_file when path matches /tmp/**")
    broader.check()
    card.get_by_role("button", name="Approve").click()

    expect(log).to_contain_text("Done: deleted /tmp/report.old")
    expect(card).to_have_attribute("data-state", "success")
    expect(card.locator(".tool-result")).to_have_text("deleted /tmp/report.old")
    expect(card.locator(".approval")).to_be_hidden()
    assert ui.server.recorder.deleted[-1] == "/tmp/report.old"

    # The session is listed, the inspector shows the accepted rule and no pending call.
    sessions = page.get_by_role("navigation", name="Sessions")
    entry = sessions.get_by_role("button", name=re.compile("^" + re.escape(session_id)))
    expect(entry).to_be_visible()
    expect(entry).to_contain_text("messages")
    expect(entry).to_have_attribute("aria-current", "true")
    expect(inspector.locator('[data-field="rules"]')).to_contain_text("delete_file when path matches /tmp/**")
    expect(inspector.locator('[data-field="pending"]')).to_have_text("none")
    expect(inspector.locator('[data-field="messages"]')).not_to_have_text("0")
    expect(inspector.locator('[data-field="context"]')).to_contain_text("tokens")
    expect(page.get_by_role("button", name="Send")).to_be_enabled()

    # The accepted rule holds: the next deletion under /tmp runs without asking.
    send(page, "Now delete /tmp/notes.old")
    expect(log).to_contain_text("Done: deleted /tmp/notes.old")
    second = tool_card(page, "delete_file").nth(1)
    expect(second).to_have_attribute("data-state", "success")
    expect(second.locator(".approval")).to_be_hidden()

    expect(page.locator("#status")).to_have_text("Ready")
    expect(inspector.locator('[data-field="messages"]')).to_have_text("8")
    expect(log.locator(".msg-footer").first).to_have_text("Answered")
    page.screenshot(path=str(ARTIFACTS / "web-ui.png"))

    # Reloading keeps the key (sessionStorage) and restores the session and its history.
    page.reload()
    wait_idle(page)
    expect(page.get_by_role("dialog", name="Connect")).to_be_hidden()
    expect(page.locator("#current-session")).to_have_text(session_id)
    expect(log).to_contain_text("Done: deleted /tmp/report.old")
    expect(tool_card(page, "delete_file").first).to_have_attribute("data-state", "success")
    expect(inspector.locator('[data-field="rules"]')).to_contain_text("delete_file")
    assert_no_page_errors(ui)


def test_edit_arguments_before_approving(ui: UiPage) -> None:
    page = ui.page
    connect(ui)
    new_session(page)
    send(page, "Please delete /var/tmp/wrong.txt")
    card = tool_card(page, "delete_file")
    expect(card).to_have_attribute("data-state", "awaiting")

    card.get_by_role("button", name="Edit arguments").click()
    editor = card.get_by_label("Arguments (JSON object)")
    expect(editor).to_be_focused()
    expect(editor).to_have_value(re.compile(r'"path": "/var/tmp/wrong.txt"'))

    # Invalid JSON, and valid JSON that is not an object, are refused in the browser.
    editor.fill('{"path": ')
    card.get_by_role("button", name="Approve with edits").click()
    expect(card.get_by_role("alert")).to_contain_text("Not valid JSON")
    expect(editor).to_have_attribute("aria-invalid", "true")
    editor.fill('["/var/tmp/right.txt"]')
    card.get_by_role("button", name="Approve with edits").click()
    expect(card.get_by_role("alert")).to_contain_text("must be a JSON object")
    expect(card).to_have_attribute("data-state", "awaiting")
    assert "/var/tmp/right.txt" not in ui.server.recorder.deleted

    editor.fill('{"path": "/var/tmp/right.txt"}')
    card.get_by_role("button", name="Approve with edits").click()
    log = page.get_by_role("log")
    expect(log).to_contain_text("Done: (The user changed the arguments")
    expect(log).to_contain_text("deleted /var/tmp/right.txt")
    expect(card).to_have_attribute("data-state", "success")
    expect(card.locator(".tool-args")).to_contain_text('"path": "/var/tmp/right.txt"')
    assert "/var/tmp/right.txt" in ui.server.recorder.deleted
    assert "/var/tmp/wrong.txt" not in ui.server.recorder.deleted
    # No rule was chosen, so none was accepted.
    expect(page.get_by_role("complementary", name="State").locator('[data-field="rules"]')).to_have_text("none")
    assert_no_page_errors(ui)


def test_deny(ui: UiPage) -> None:
    page = ui.page
    connect(ui)
    new_session(page)
    send(page, "Please delete /srv/keep.me")
    card = tool_card(page, "delete_file")
    card.get_by_role("button", name="Deny").click()
    expect(page.get_by_role("log")).to_contain_text("Understood, I did not delete anything.")
    expect(card).to_have_attribute("data-state", "denied")
    expect(card.locator(".tool-result")).to_contain_text("denied")
    assert "/srv/keep.me" not in ui.server.recorder.deleted
    assert_no_page_errors(ui)


def test_several_pending_calls_are_answered_together(ui: UiPage) -> None:
    page = ui.page
    connect(ui)
    new_session(page)
    send(page, "Delete both /opt/one.log /opt/two.log")
    cards = tool_card(page, "delete_file")
    expect(cards).to_have_count(2)
    first, second = cards.nth(0), cards.nth(1)
    expect(first).to_have_attribute("data-state", "awaiting")
    expect(second).to_have_attribute("data-state", "awaiting")

    # The first answer is held until every pending call has one.
    first.get_by_role("button", name="Approve").click()
    expect(first).to_have_attribute("data-state", "approved")
    expect(page.locator("#status")).to_have_text("1 more call to answer")
    expect(first.get_by_role("button", name="Approve")).to_be_disabled()
    assert ui.server.recorder.deleted.count("/opt/one.log") == 0

    second.get_by_role("button", name="Deny").click()
    log = page.get_by_role("log")
    expect(log).to_contain_text("Results: success: deleted /opt/one.log; denied:")
    expect(first).to_have_attribute("data-state", "success")
    expect(second).to_have_attribute("data-state", "denied")
    assert "/opt/one.log" in ui.server.recorder.deleted
    assert "/opt/two.log" not in ui.server.recorder.deleted
    assert_no_page_errors(ui)


HOLD_STREAM_END = """
(() => {
  // Hold the end of each run's event stream until the test releases it: the run has paused
  // (every event arrived) but its stream is still open, the window where the race was.
  const fetchOriginal = window.fetch;
  let release = () => {};
  window.__releaseStreams = () => release();
  window.fetch = async (input, init) => {
    const response = await fetchOriginal(input, init);
    const url = String(input instanceof Request ? input.url : input);
    if (!(init && init.method === "POST" && /\\/(messages|confirm)$/.test(url)) || !response.body) return response;
    const reader = response.body.getReader();
    const gate = new Promise((resolve) => { release = resolve; });
    const body = new ReadableStream({
      async pull(controller) {
        const { done, value } = await reader.read();
        if (!done) return controller.enqueue(value);
        const root = document.documentElement;
        root.dataset.heldStreams = String(Number(root.dataset.heldStreams || 0) + 1);
        await gate;
        controller.close();
      },
    });
    return new Response(body, { status: response.status, headers: response.headers });
  };
})();
"""


def test_an_answer_given_while_the_paused_run_still_streams_keeps_its_status(ui: UiPage) -> None:
    """The run-end handler must not overwrite the status an answer has just set (the old race, made certain)."""
    page = ui.page
    page.add_init_script(HOLD_STREAM_END)
    page.reload()
    connect(ui)
    new_session(page)
    send(page, "Delete both /opt/held-1.log /opt/held-2.log")
    cards = tool_card(page, "delete_file")
    expect(cards).to_have_count(2)
    first, second = cards.nth(0), cards.nth(1)
    expect(second).to_have_attribute("data-state", "awaiting")
    expect(page.locator("html")).to_have_attribute("data-held-streams", "1")  # every event in, the stream open
    expect(page.locator("body")).to_have_attribute("data-phase", "running")

    first.get_by_role("button", name="Approve").click()
    expect(page.locator("#status")).to_have_text("1 more call to answer")
    page.evaluate("() => window.__releaseStreams()")
    wait_idle(page)  # the run ended and the sessions and state were reloaded
    expect(page.locator("#status")).to_have_text("1 more call to answer")
    expect(first).to_have_attribute("data-state", "approved")
    expect(page.get_by_role("button", name="Send")).to_be_disabled()
    assert "/opt/held-1.log" not in ui.server.recorder.deleted

    second.get_by_role("button", name="Deny").click()
    expect(page.locator("html")).to_have_attribute("data-held-streams", "2")
    page.evaluate("() => window.__releaseStreams()")
    expect(page.get_by_role("log")).to_contain_text("Results: success: deleted /opt/held-1.log; denied:")
    wait_idle(page)
    expect(page.locator("#status")).to_have_text("Ready")
    assert "/opt/held-2.log" not in ui.server.recorder.deleted
    assert_no_page_errors(ui)


def test_untrusted_content_renders_as_text(ui: UiPage) -> None:
    page = ui.page
    connect(ui)
    new_session(page)
    send(page, "inspect the page")
    log = page.get_by_role("log")
    card = tool_card(page, "fetch_page")
    expect(card).to_have_attribute("data-state", "success")
    expect(card.locator(".tool-result")).to_have_text(f"<html>{XSS}</html>")
    expect(log).to_contain_text(f"Fetching the page. {XSS}")
    expect(log).to_contain_text(f"Done: <html>{XSS}</html>")
    assert page.locator("img").count() == 0
    assert page.locator("html").evaluate("el => el.querySelectorAll('[onerror]').length") == 0
    assert "&lt;img src=x onerror=alert(1)&gt;" in log.inner_html()
    page.screenshot(path=str(ARTIFACTS / "web-ui-xss.png"))
    # Also after a reload, when the history is rendered from the stored state.
    page.reload()
    wait_idle(page)
    expect(tool_card(page, "fetch_page").locator(".tool-result")).to_have_text(f"<html>{XSS}</html>")
    assert page.locator("img").count() == 0
    assert_no_page_errors(ui)


def test_interrupt_a_slow_run(ui: UiPage) -> None:
    page = ui.page
    connect(ui)
    new_session(page)
    send(page, "tell me a long story")
    log = page.get_by_role("log")
    expect(log).to_contain_text("word20")
    interrupt = page.get_by_role("button", name="Interrupt")
    expect(interrupt).to_be_visible()
    expect(page.get_by_role("button", name="Send")).to_be_disabled()
    interrupt.click()

    expect(log.locator(".msg-footer")).to_contain_text("Interrupted")
    expect(interrupt).to_be_hidden()
    expect(page.get_by_role("button", name="Send")).to_be_enabled()
    assert f"word{SLOW_WORDS - 1}" not in log.inner_text()

    # The session is usable afterwards.
    send(page, "Please delete /tmp/after.interrupt")
    expect(tool_card(page, "delete_file")).to_have_attribute("data-state", "awaiting")
    assert_no_page_errors(ui)


def test_wrong_key_is_refused_and_all_requests_carry_the_key(ui: UiPage) -> None:
    page = ui.page
    auth_headers: list[str | None] = []
    page.on(
        "request",
        lambda request: auth_headers.append(request.headers.get("authorization")) if "/v1/" in request.url else None,
    )
    dialog = page.get_by_role("dialog", name="Connect")
    page.get_by_label("API key").fill("not-the-key")
    dialog.get_by_role("button", name="Connect").click()
    expect(dialog.get_by_role("alert")).to_have_text("That key was not accepted.")
    expect(dialog).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('agentrt.apiKey')") is None

    page.get_by_label("API key").fill(API_KEY)
    dialog.get_by_role("button", name="Connect").click()
    expect(dialog).to_be_hidden()
    assert page.evaluate("sessionStorage.getItem('agentrt.apiKey')") == API_KEY
    assert auth_headers[0] == "Bearer not-the-key"
    assert set(auth_headers[1:]) == {f"Bearer {API_KEY}"}

    # "Change API key" forgets it and asks again (once connecting is over: no request in flight).
    wait_idle(page)
    page.get_by_role("button", name="Change API key").click()
    expect(dialog).to_be_visible()
    expect(page.locator("body")).to_have_attribute("data-phase", "disconnected")
    assert page.evaluate("sessionStorage.getItem('agentrt.apiKey')") is None
    assert ui.dialogs == []
    assert all("401" in e for e in ui.errors), ui.errors


def test_sse_parser_handles_arbitrary_chunking(ui: UiPage) -> None:
    events = ui.page.evaluate(
        """async () => {
            const { SseParser } = await import(new URL("sse.js", document.baseURI));
            const wire = ": heartbeat\\r\\nevent: text_delta\\r\\ndata: {\\"a\\":\\r\\ndata: 1}\\r\\n\\r\\n"
                + "id: 7\\nevent: x\\ndata:é\\n\\n" + "retry: 10\\n\\n" + "data: last\\r\\r" + "data: cut off";
            const runs = [];
            for (const size of [1, 2, 3, 7, wire.length]) {
                const out = [];
                const parser = new SseParser((ev) => out.push(ev));
                for (let i = 0; i < wire.length; i += size) parser.feed(wire.slice(i, i + size));
                parser.end();
                runs.push(out);
            }
            return runs;
        }"""
    )
    expected = [
        {"event": "text_delta", "data": '{"a":\n1}', "id": None},
        {"event": "x", "data": "é", "id": "7"},
        {"event": "message", "data": "last", "id": "7"},
    ]
    for run in events:
        assert run == expected
