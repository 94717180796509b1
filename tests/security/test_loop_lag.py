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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from loop_lag_support import LAG_BUDGET, LoopLagProbe, run_calls

from agentrt import Toolkit, ToolUseBlock
from agentrt.tool.builtin import FileTools, ShellTool, calculate, convert_units
from agentrt.tool.builtin import files as files_module

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
