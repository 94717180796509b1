"""Support for the web UI tests: the served agent, a uvicorn server in a thread, Debian chromium.

Chromium is the system one (``/usr/bin/chromium``, installed by ``scripts/install-browser.sh``);
Playwright only drives it through ``executable_path`` and never downloads a browser. Without
chromium or the ``playwright`` package the tests skip locally and fail under ``CI=true``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import pytest

from agentrt import ReActAgent, TextBlock, ThinkingBlock, Toolkit, ToolResultBlock, ToolUseBlock, tool
from agentrt.model import ScriptedModel
from agentrt.state import InMemoryStateStore

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
INSTALL_SCRIPT = ROOT / "scripts" / "install-browser.sh"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
AGENT = "janitor"
API_KEY = "test-key-alice"
USER_ID = "alice"
XSS = "<img src=x onerror=alert(1)>"
SLOW_WORDS = 3000
"""Words of the slow answer, streamed 10 ms apart: far longer than it takes to interrupt it."""


def unavailable(reason: str) -> NoReturn:
    """Skip locally; under CI a missing browser is a failure, not a skip."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"the browser tests cannot run: {reason}")
    pytest.skip(reason)


def find_chromium() -> str | None:
    """Debian's chromium, installed with scripts/install-browser.sh when missing and we are root."""
    if os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    if os.geteuid() == 0 and shutil.which("apt-get") and INSTALL_SCRIPT.exists():
        subprocess.run(["bash", str(INSTALL_SCRIPT)], check=False, timeout=900)
    return CHROMIUM if os.access(CHROMIUM, os.X_OK) else None


# -- the agent ------------------------------------------------------------------------------------


@dataclass
class Recorder:
    """What the tools were really called with (the server side of an approval round trip)."""

    deleted: list[str] = field(default_factory=list)


def planner(request: Any) -> Any:
    """The scripted model: asks for a tool, then answers from the tool's result."""
    results = request.messages[-1].blocks(ToolResultBlock)
    if results:
        if len(results) > 1:
            return "Results: " + "; ".join(f"{r.state}: {r.text}" for r in results)
        result = results[0]
        if result.state == "denied":
            return "Understood, I did not delete anything."
        return f"Done: {result.text}"
    text = request.last_user_text
    if "story" in text:
        return " ".join(f"word{i}" for i in range(SLOW_WORDS))
    if "inspect" in text:
        return [
            TextBlock(text=f"Fetching the page. {XSS} "),
            ToolUseBlock(name="fetch_page", input={"url": "https://example.test/"}),
        ]
    if text.startswith("Delete both"):
        first, second = text.split()[-2:]
        return [
            ToolUseBlock(name="delete_file", input={"path": first}),
            ToolUseBlock(name="delete_file", input={"path": second}),
        ]
    path = text.split()[-1]
    return [
        ThinkingBlock(thinking=f"The user wants {path} gone; deleting needs approval."),
        TextBlock(text=f"I will delete {path} for you."),
        ToolUseBlock(name="delete_file", input={"path": path}),
    ]


def build_agent(recorder: Recorder) -> ReActAgent:
    """One agent with a destructive tool (which asks for approval) and a read-only one (which runs at once)."""

    @tool(destructive=True)
    async def delete_file(path: str) -> str:
        """Delete a file.

        Args:
            path: The file to delete.
        """
        recorder.deleted.append(path)
        return f"deleted {path}"

    @tool(read_only=True)
    async def fetch_page(url: str) -> str:
        """Fetch a web page.

        Args:
            url: The page address.
        """
        return f"<html>{XSS}</html>"

    model = ScriptedModel.from_function(planner, name="planner")
    model.chunk_delay = 0.01  # stream word by word, slowly enough to see deltas and to interrupt
    return ReActAgent(AGENT, "You tidy up files.", model=model, toolkit=Toolkit([delete_file, fetch_page]))


def make_app(agent: ReActAgent) -> Any:
    """The app under test: `agentrt.server.create_app` serving the agent to one API key."""
    try:
        from agentrt.server import create_app
    except ImportError as exc:
        unavailable(f"agentrt.server.create_app is not available ({exc})")
    return create_app(agents={AGENT: agent}, store=InMemoryStateStore(), api_keys={API_KEY: USER_ID})


@dataclass
class LiveServer:
    """The running server and what its tools were called with."""

    url: str
    recorder: Recorder


@dataclass
class UiPage:
    """A fresh browser page on the UI, with the JS dialogs and console errors it produced."""

    page: Any
    server: LiveServer
    dialogs: list[str]
    errors: list[str]


@contextlib.contextmanager
def open_page(browser: Any, url: str, server: LiveServer | None, *, http_errors: bool = True) -> Iterator[UiPage]:
    """A fresh page on `url` that records JS dialogs (dismissed), page and console errors and, unless
    `http_errors` is False, every HTTP response >= 400 the page received."""
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
    if http_errors:
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.on(
            "response",
            lambda r: errors.append(f"HTTP {r.status} {r.request.method} {r.url}") if r.status >= 400 else None,
        )
    page.goto(url)
    try:
        yield UiPage(page=page, server=server, dialogs=dialogs, errors=errors)  # type: ignore[arg-type]
    finally:
        context.close()


# -- the server -----------------------------------------------------------------------------------


@contextlib.contextmanager
def serve(app: Any) -> Iterator[str]:
    """Run `app` under a real uvicorn server on a free loopback port (in a thread); yields its URL."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    ready = threading.Event()

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            ready.set()

    server = Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2))
    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(server.serve(sockets=[sock]))
        except BaseException as exc:  # reported by the caller
            failure.append(exc)
        finally:
            ready.set()  # started or failed: either way, stop waiting

    thread = threading.Thread(target=run, name="web-ui-uvicorn", daemon=True)
    thread.start()
    ready.wait(timeout=60)
    try:
        if not server.started:
            raise RuntimeError(f"uvicorn did not start: {failure!r}")
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()
