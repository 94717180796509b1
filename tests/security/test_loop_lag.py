"""No built-in tool blocks the event loop: hostile inputs through the real tools, with a loop-lag probe.

Each case runs one tool call through a real agent (permission check on the loop, the tool in its
worker thread) while a 10 ms ticker records the loop's longest stall. The inputs are the ones that
used to freeze the server or could: ReDoS patterns, huge files and lines, wide and deep trees, huge
powers, long commands with many paths and globs. A second group checks the other half of the
guarantee: a cancelled (timed out) file tool really stops working, though a thread cannot be killed.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st
from loop_lag_support import LAG_BUDGET, LoopLagProbe, run_calls

from agentrt import Toolkit, ToolUseBlock
from agentrt.errors import ToolRetry
from agentrt.tool.builtin import FileTools, ShellTool, WebTools, calculate, convert_units
from agentrt.tool.builtin import files as files_module
from agentrt.tool.builtin import web as web_module
from agentrt.tool.builtin.web import html_to_text

WIDE = 20_000
DEEP = 150


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lag_ws")
    (root / ".env").write_text("API_KEY=do-not-leak\n")
    with open(root / "big.log", "w") as f:  # 24 MB of short lines
        line = "2026-01-01 INFO request served in 12 ms, status 200\n"
        f.write(line * (24_000_000 // len(line)))
    (root / "medium.log").write_text("GET /index.html 200\n" * 150_000)  # 3 MB: under grep's size limit
    (root / "one_line.txt").write_text("a" * 20_000_000 + "\n")
    (root / "redos.txt").write_text(("a" * 27 + "!\n") + ("x" * 27 + "\n"))
    wide = root / "wide"
    wide.mkdir()
    for i in range(WIDE):
        (wide / f"f{i}.txt").touch()
    deep = root / "deep"
    deep.mkdir()
    os.makedirs(deep / "/".join(["d"] * DEEP))
    (deep / "/".join(["d"] * DEEP) / "bottom.txt").write_text("aaaaaaaaaaaaaaaaaaaaaaaaaaaa!\n")
    return root


def toolkit_for(root: Path) -> Toolkit:
    toolkit = Toolkit([calculate, convert_units])
    toolkit.register(FileTools(root))
    toolkit.register(ShellTool(root, timeout=20, auto_allow_read_only=True))
    return toolkit


CASES: list[tuple[str, dict[str, Any]]] = [
    ("grep_files", {"pattern": r"(a+)+$", "path": "redos.txt"}),
    ("grep_files", {"pattern": r"(x+x+)+y"}),
    ("grep_files", {"pattern": r"(.*a){20}", "path": "deep"}),
    ("grep_files", {"pattern": r"(a|aa)+$", "path": "wide"}),
    ("grep_files", {"pattern": r"(\w{1,200}a\w{1,200}b){5}$", "path": "one_line.txt"}),
    ("read_file", {"path": "big.log", "offset": 10**9}),
    ("read_file", {"path": "big.log", "limit": 5}),
    ("read_file", {"path": "one_line.txt"}),
    ("list_dir", {"path": "wide"}),
    ("glob_files", {"pattern": "**/*.nothing"}),
    ("glob_files", {"pattern": "**/f1*.txt"}),
    ("glob_files", {"pattern": "{a,b,c,d}{e,f,g,h}{i,j,k,l}/**/*{1,2}"}),
    ("calculate", {"expression": "9**9**9"}),
    ("calculate", {"expression": "(2**3000) ** (2**3000)"}),
    ("calculate", {"expression": "10**999 * 10**999"}),
    ("calculate", {"expression": "(" * 180 + "1" + ")" * 180}),
    ("calculate", {"expression": "-" * 499 + "1"}),
    ("convert_units", {"value": 1e308, "from_unit": "km", "to_unit": "mm"}),
    ("convert_units", {"value": 1.0, "from_unit": "m" * 1_000_000, "to_unit": "km"}),
    ("run_command", {"command": "ls wide/*/* deep/*/*/*/*/* */*/*"}),
    ("run_command", {"command": "cat " + " ".join(f"wide/f{i}.txt" for i in range(WIDE // 2))}),
    ("run_command", {"command": "ls -R wide"}),
    ("run_command", {"command": "cat > gen.py <<'EOF'\n" + "def f(x):\n    return x / 2  # ok\n" * 2500 + "EOF"}),
]


@pytest.mark.parametrize(("name", "args"), CASES, ids=lambda v: v if isinstance(v, str) else str(v)[:60])
async def test_hostile_inputs_never_stall_the_event_loop(ws: Path, name: str, args: dict[str, Any]) -> None:
    toolkit = toolkit_for(ws)
    async with LoopLagProbe() as probe:
        results = await run_calls(toolkit, [ToolUseBlock(id="c1", name=name, input=args)])
    assert probe.max_gap < LAG_BUDGET, f"{name} stalled the event loop for {probe.max_gap:.2f} s"
    output = str(results["c1"].output)
    assert "timed out" not in output, output[:300]
    assert "do-not-leak" not in output


async def test_parallel_hostile_calls_leave_the_loop_free(ws: Path) -> None:
    """One turn with several heavy read-only calls: they run in parallel worker threads."""
    calls = [ToolUseBlock(id=f"c{i}", name=name, input=args) for i, (name, args) in enumerate(CASES[:12])]
    async with LoopLagProbe() as probe:
        results = await run_calls(toolkit_for(ws), calls)
    assert probe.max_gap < LAG_BUDGET, f"stalled the event loop for {probe.max_gap:.2f} s"
    assert len(results) == len(calls)


# -- a cancelled call stops its worker thread -----------------------------------------------------------------
class Counting:
    """Wraps a function the worker thread calls per step, counts the calls and slows each by 2 ms."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.calls = 0
        self._pause = threading.Event()

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        self._pause.wait(0.002)  # blocks this worker thread only (never the loop)
        return self.fn(*args)


@pytest.mark.parametrize(
    ("name", "args", "step"),
    [
        ("glob_files", {"pattern": "**/*.py", "path": "wide"}, "glob_match"),
        ("grep_files", {"pattern": "never-there", "path": "medium.log"}, "matches"),
        ("read_file", {"path": "big.log", "offset": 10**9}, "lines"),
    ],
)
async def test_a_timed_out_file_tool_stops_its_worker_thread(
    ws: Path, monkeypatch: pytest.MonkeyPatch, name: str, args: dict[str, Any], step: str
) -> None:
    counter: Counting
    if step == "glob_match":
        counter = Counting(files_module.glob_match)
        monkeypatch.setattr(files_module, "glob_match", counter)
    elif step == "matches":
        counter = Counting(files_module._Regex.matches)
        monkeypatch.setattr(files_module._Regex, "matches", lambda self, line, budget: counter(self, line, budget))
    else:
        original = files_module._lines

        def slow_lines(f: Any, budget: Any, *rest: Any) -> Any:
            for item in original(f, budget, *rest):
                counter(None)
                yield item

        counter = Counting(lambda _: None)
        monkeypatch.setattr(files_module, "_lines", slow_lines)
    tools = FileTools(ws)
    setattr(tools, name, getattr(tools, name).copy(timeout=0.5))  # the executor cancels the call after 0.5 s
    toolkit = Toolkit()
    toolkit.register(tools)
    results = await run_calls(toolkit, [ToolUseBlock(id="c1", name=name, input=args)])
    assert "timed out after 0.5 s" in str(results["c1"].output)
    assert counter.calls > 0  # the work had started
    # The worker checks its cancel flag at every step: it stops within a step or two.
    await asyncio.sleep(0.3)
    stopped_at = counter.calls
    await asyncio.sleep(0.5)
    assert counter.calls == stopped_at, (
        f"the worker thread went on after the timeout ({counter.calls - stopped_at} steps)"
    )


# -- fetched pages: untrusted markup is converted off the loop, in linear time --------------------------------
HOSTILE_PAGES: dict[str, tuple[str, str]] = {
    # html.parser is quadratic on these: 30,000 unclosed "<a " took minutes on the event loop
    "unclosed-tags": ("<a " * 30_000, "text/html"),
    "unclosed-attrs": ('<a x="' * 30_000, "text/html"),
    "marked-sections": ("<![" * 30_000, "text/html"),  # html.parser raised AssertionError
    "nested-links": ("<a href=/x>y" * 30_000 + "</a>" * 30_000, "text/html"),
    "big-page": ("<p>hello <b>world</b> <a href='/x'>link</a></p>\n" * 20_000, "text/html"),
    "deep-json": ("[" * 200_000, "application/json"),  # json.loads raised RecursionError
}


@pytest.fixture
async def page_server() -> AsyncIterator[str]:
    async def page(request: web.Request) -> web.Response:
        body, mime = HOSTILE_PAGES[request.match_info["name"]]
        return web.Response(text=body, content_type=mime)

    app = web.Application()
    app.router.add_get("/{name}", page)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("name", list(HOSTILE_PAGES))
async def test_hostile_pages_never_stall_the_event_loop(page_server: str, name: str) -> None:
    toolkit = Toolkit()
    toolkit.register(WebTools(allow_private=True))
    call = ToolUseBlock(id="f1", name="fetch_url", input={"url": f"{page_server}/{name}", "timeout": 60})
    started = time.monotonic()
    async with LoopLagProbe() as probe:
        results = await run_calls(toolkit, [call])
    assert probe.max_gap < LAG_BUDGET, f"fetching {name} stalled the event loop for {probe.max_gap:.2f} s"
    assert time.monotonic() - started < 15, "the page took too long to convert"
    output = str(results["f1"].output)
    assert not results["f1"].is_error and output.startswith("URL: "), output[:300]


@pytest.mark.parametrize("name", [name for name, (_, mime) in HOSTILE_PAGES.items() if mime == "text/html"])
def test_html_to_text_is_linear_on_hostile_markup(name: str) -> None:
    """Ten times the markup costs about ten times as much (a quadratic parser: a hundred times)."""
    body = HOSTILE_PAGES[name][0]
    started = time.monotonic()
    html_to_text(body)
    small = time.monotonic() - started
    started = time.monotonic()
    html_to_text(body * 10)
    large = time.monotonic() - started
    assert large < max(1.0, 30 * small), f"{name}: {small:.3f} s, then {large:.3f} s for 10x the input"


async def test_a_timed_out_fetch_stops_converting_the_page(page_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page is converted in a worker thread; when the fetch times out, that thread stops too."""
    counter = Counting(web_module._Tokenizer._markup)  # 2 ms a tag: the page would take minutes
    monkeypatch.setattr(web_module._Tokenizer, "_markup", lambda self, lt: counter(self, lt))
    monkeypatch.setattr(web_module, "_CHECK_EVERY", 16)  # the cancel flag is read every 16 tags
    tools = WebTools(allow_private=True)
    with pytest.raises(ToolRetry, match="timed out"):
        await tools.fetch(f"{page_server}/big-page", timeout=1.0)
    assert counter.calls > 0  # the conversion had started
    await asyncio.sleep(0.3)
    stopped_at = counter.calls
    await asyncio.sleep(0.5)
    assert counter.calls - stopped_at <= 16, f"the worker thread went on after the timeout ({counter.calls} tags)"


MARKUP = [
    *("<", ">", "<a ", "<a href=", "<A", "</", "</a>", "<b/>", "/>", "<pre>", "<li>", "<script>", "</script"),
    *("<!--", "-->", "<!", "<![", "]]>", "<?", '"', "'", "=", "&", "&amp;", "&#", ";", "x", " ", "\n", "\x00", "é"),
]


@settings(max_examples=300, deadline=None)
@given(tokens=st.lists(st.sampled_from(MARKUP), max_size=300))
def test_html_to_text_takes_any_markup(tokens: list[str]) -> None:
    """Whatever a page holds, it converts: html.parser raised AssertionError on ``<![`` soups."""
    assert isinstance(html_to_text("".join(tokens), base_url="https://example.org/"), str)
