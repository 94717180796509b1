"""Fixtures for the web UI tests: a live server, headless Debian chromium, a fresh page per test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from webui_support import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    LiveServer,
    Recorder,
    UiPage,
    build_agent,
    find_chromium,
    make_app,
    serve,
    unavailable,
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright package is not installed (pip install playwright)")
    executable = find_chromium()
    if executable is None:
        unavailable(f"chromium is not at {CHROMIUM} and could not be installed (scripts/install-browser.sh)")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def live_server(browser: Any) -> Iterator[LiveServer]:
    # Depends on `browser` so that a missing browser skips before any server starts.
    recorder = Recorder()
    with serve(make_app(build_agent(recorder))) as url:
        yield LiveServer(url=url, recorder=recorder)


@pytest.fixture
def ui(browser: Any, live_server: LiveServer) -> Iterator[UiPage]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    dialogs: list[str] = []
    errors: list[str] = []

    def on_dialog(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on(
        "response", lambda r: errors.append(f"HTTP {r.status} {r.request.method} {r.url}") if r.status >= 400 else None
    )
    page.goto(live_server.url)
    try:
        yield UiPage(page=page, server=live_server, dialogs=dialogs, errors=errors)
    finally:
        context.close()
