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
    open_page,
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
    with open_page(browser, live_server.url, live_server) as page:
        yield page
