"""The ```python blocks of README.md and docs/*.md run, page by page, like a notebook.

Each page gets one namespace shared by its blocks in order, one event loop (top-level ``await``
works; a block without one runs outside the loop, so ``asyncio.run(main())`` works too), a
temporary working directory and a temporary ``HOME`` (the default store, ``~/.agentrt/state.db``,
is not the user's). Placeholder provider keys let a block build ``"openai:..."`` models, but
nothing reaches the network: a lookup or connection to anything but loopback fails at once.

A block that cannot run here is marked in the Markdown, on the line(s) just before its fence
(HTML comments do not render on GitHub)::

    <!-- docs-test: skip (needs `agentrt serve` listening on localhost:8000) -->

    <!-- docs-test: setup
    from agentrt.model import ScriptedModel
    model = ScriptedModel(["Sunny."])
    -->

``skip`` needs a reason. ``setup`` is hidden Python run just before the block in the page's
namespace: it defines what the snippet takes for granted, or swaps a provider for a
`ScriptedModel`. What it assigns joins the page; what it imports does not, so it cannot hide an
import the visible block forgot. An unmarked block that fails fails its test, named
``page:line`` of its opening fence; the blocks after it on that page are skipped, naming it.
CONTRIBUTING.md describes the convention.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import ipaddress
import logging
import re
import socket
import sys
import textwrap
import types
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

import agentrt.agent.base as agent_base
from agentrt.model import registry

ROOT = Path(__file__).parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK_TIMEOUT = 30.0  # seconds for one block's top-level awaits

# Blocks of pages this test may not mark (another change owns them), skipped here with a reason
# until their page marks them itself: (page, a piece of the block's code) -> reason. An entry that
# matches no block or several, or a block its page already marks, fails `test_skip_table_is_current`.
SKIPPED_HERE: dict[tuple[str, str], str] = {
    ("docs/mcp.md", 'await toolkit.register_mcp(McpClient.stdio("uvx", ["mcp-server-git"]))'): (
        "starts MCP servers (uvx mcp-server-git) and connects to remote ones"
    ),
    ("docs/mcp.md", 'agent.stream_events("Index my notes", ctx)'): "streams an agent whose tools are on MCP servers",
    ("docs/mcp.md", 'async with McpClient.stdio("python", ["server.py"]) as client:'): (
        "connects to an MCP server script (server.py) the page does not provide"
    ),
    ("docs/mcp.md", "resources = await client.list_resources()"): "needs a connected MCP client",
    ("docs/mcp.md", "prompts = await client.list_prompts()"): "needs a connected MCP client",
    ("docs/mcp.md", "client = McpClient.http(url, sampling_model=model"): (
        "uses names no block defines before it (url, toolkit, ask_user)"
    ),
    ("docs/mcp.md", "serve_mcp(toolkit)"): "serves MCP on stdio (blocks) and over HTTP on port 8000",
    ("docs/mcp.md", 'async with Client("http://127.0.0.1:8000/mcp") as client:'): (
        "needs an MCP server listening on 127.0.0.1:8000"
    ),
}

# Placeholder credentials: enough to build a provider's model, never to call it (no network).
FAKE_KEYS = (
    "OPENAI_API_KEY",
    "DEEPSEEK_API_KEY",
    "DASHSCOPE_API_KEY",
    "OPENROUTER_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
)


# -- finding the blocks --------------------------------------------------------------------------
@dataclass(frozen=True)
class Block:
    page: str
    """The page, relative to the repository root."""
    line: int
    """The line of the opening fence (1-based)."""
    code: str
    setup: str = ""
    setup_line: int = 0
    """The line the setup code starts on (1-based)."""
    skip: str | None = None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


@dataclass(frozen=True)
class Directive:
    line: int
    """The line the comment starts on (1-based)."""
    end: int
    """The line the comment ends on (1-based)."""
    kind: str
    text: str
    """The reason of a skip, the code of a setup."""


# A backtick fence's info string holds no backtick (so ```` ``` ```` in a paragraph is no fence).
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}(?=[^`]*$)|~{3,})(?P<info>.*)$")


def _directives(lines: list[str]) -> Iterator[Directive]:
    i = 0
    while i < len(lines):
        if lines[i].lstrip().startswith("<!-- docs-test:"):
            start = i
            while "-->" not in lines[i] and i + 1 < len(lines):
                i += 1
            text = "\n".join(lines[start : i + 1]).strip()
            body = text.removeprefix("<!-- docs-test:").rpartition("-->")[0]
            head, _, rest = body.partition("\n")
            kind, _, arg = head.strip().partition(" ")
            if kind == "setup":
                yield Directive(start + 1, i + 1, kind, textwrap.dedent(rest))
            else:
                yield Directive(start + 1, i + 1, kind, f"{arg} {rest}".strip().removeprefix("(").removesuffix(")"))
        i += 1


def parse_page(path: Path, root: Path = ROOT) -> tuple[list[Block], list[str]]:
    """The page's python blocks with their markers, and what is wrong with its markers."""
    page = path.relative_to(root).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    directives = {d.end: d for d in _directives(lines)}
    used: set[int] = set()
    blocks: list[Block] = []
    problems: list[str] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence, indent, start = opening["fence"], len(opening["indent"]), i
        closing = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        i += 1
        while i < len(lines) and not closing.match(lines[i]):
            i += 1
        if opening["info"].strip().split(" ")[0] == "python":
            # Content lines lose up to the fence's indentation (a fence inside a list item).
            body = [line[min(indent, len(line) - len(line.lstrip(" "))) :] for line in lines[start + 1 : i]]
            block = Block(page, start + 1, "\n".join(body) + "\n")
            before = start - 1
            while before >= 0 and not lines[before].strip():
                before -= 1
            directive = directives.get(before + 1)
            if directive is not None:
                used.add(directive.end)
                if directive.kind == "skip":
                    if not directive.text:
                        problems.append(f"{block.id}: 'docs-test: skip' needs a reason: skip (why)")
                    block = replace(block, skip=directive.text or "no reason given")
                elif directive.kind == "setup":
                    block = replace(block, setup=directive.text, setup_line=directive.line + 1)
                else:
                    problems.append(f"{page}:{directive.line}: unknown docs-test directive {directive.kind!r}")
            blocks.append(block)
        i += 1
    for end, directive in directives.items():
        if end not in used:
            problems.append(f"{page}:{directive.line}: a docs-test comment must come just before a ```python fence")
    return blocks, problems


BLOCKS = [block for path in PAGES for block in parse_page(path)[0]]


def _matches(key: tuple[str, str], block: Block) -> bool:
    page, snippet = key
    return page == block.page and snippet in block.code


def _skip_reason(block: Block) -> str | None:
    if block.skip:
        return f"marked in the docs: {block.skip}"
    here = [reason for key, reason in SKIPPED_HERE.items() if _matches(key, block)]
    return f"skipped by the docs test: {here[0]}" if here else None


# -- running a page ------------------------------------------------------------------------------
@dataclass
class PageRun:
    """One page's notebook: its namespace, event loop, directories and process-wide settings."""

    page: str
    tmp: Path
    module: types.ModuleType
    factories: dict[str, Any]
    aliases: dict[str, str]
    runner: asyncio.Runner = field(default_factory=asyncio.Runner)
    default_store: Any = None
    done: set[int] = field(default_factory=set)
    failed: str | None = None

    @property
    def namespace(self) -> dict[str, Any]:
        return self.module.__dict__

    def close(self) -> None:
        """Close what the page opened: stores, memories and models it holds, its loop."""
        try:
            for value in [*self.namespace.values(), self.default_store]:
                method = getattr(value, "aclose", None) or getattr(value, "close", None)
                from_agentrt = type(value).__module__.startswith("agentrt.")
                if from_agentrt and inspect.iscoroutinefunction(method):
                    self.runner.run(method())
        finally:
            self.default_store = None
            self.runner.close()
            sys.modules.pop(self.module.__name__, None)
            self.namespace.clear()


class Pages:
    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._tmp_path_factory = tmp_path_factory
        self._runs: dict[str, PageRun] = {}

    def get(self, page: str) -> PageRun:
        run = self._runs.get(page)
        if run is None:
            registry.registered_providers()  # load the built-in providers before taking the page's copy
            slug = re.sub(r"\W", "_", page.removesuffix(".md"))
            module = types.ModuleType(f"docs_test_{slug}", f"The code blocks of {page}.")
            sys.modules[module.__name__] = module
            tmp = self._tmp_path_factory.mktemp(slug)
            (tmp / "home").mkdir()
            (tmp / "work").mkdir()
            run = self._runs[page] = PageRun(page, tmp, module, dict(registry._factories), dict(registry._aliases))
        return run

    def close(self, page: str) -> None:
        run = self._runs.pop(page, None)
        if run is not None:
            run.close()

    def close_all(self) -> None:
        while self._runs:
            self.close(next(iter(self._runs)))


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pages]:
    pages = Pages(tmp_path_factory)
    yield pages
    pages.close_all()


def _is_loopback(host: object) -> bool:
    if isinstance(host, bytes):
        host = host.decode()
    if host in (None, "", "localhost"):
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    real_getaddrinfo, real_connect = socket.getaddrinfo, socket.socket.connect

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not _is_loopback(host):
            raise OSError(f"docs test: no network (lookup of {host!r})")
        return real_getaddrinfo(host, *args, **kwargs)

    def connect(sock: socket.socket, address: Any) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address[0]):
            raise OSError(f"docs test: no network (connection to {address!r})")
        real_connect(sock, address)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)


@contextlib.contextmanager
def _logging_restored() -> Iterator[None]:
    """Undo what a block does to logging (`configure_logging` installs a handler on the root logger)."""
    saved = [
        (logger, list(logger.handlers), logger.level) for logger in (logging.getLogger(), logging.getLogger("agentrt"))
    ]
    try:
        yield
    finally:
        for logger, handlers, level in saved:
            for handler in set(logger.handlers) - set(handlers):
                handler.close()
            logger.handlers[:] = handlers
            logger.setLevel(level)


def _compile(code: str, path: Path, first_line: int) -> types.CodeType:
    # Leading newlines keep tracebacks pointing at the Markdown file's own lines.
    compiled: types.CodeType = compile(
        "\n" * (first_line - 1) + code, str(path), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    )
    return compiled


def _execute(run: PageRun, code: types.CodeType, namespace: dict[str, Any]) -> None:
    if code.co_flags & inspect.CO_COROUTINE:
        coroutine = eval(code, namespace)  # top-level await: a coroutine to run on the page's loop
        run.runner.run(asyncio.wait_for(coroutine, BLOCK_TIMEOUT))
    else:
        exec(code, namespace)


def _imported_names(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def _run_setup(run: PageRun, block: Block) -> None:
    """Run a block's hidden setup: what it assigns joins the page, what it imports stays its own."""
    namespace = dict(run.namespace)
    _execute(run, _compile(block.setup, ROOT / block.page, block.setup_line), namespace)
    own = _imported_names(block.setup) | {"__builtins__"}
    for name, value in namespace.items():
        if name not in own and (name not in run.namespace or run.namespace[name] is not value):
            run.namespace[name] = value


def _run_block(run: PageRun, block: Block) -> None:
    with pytest.MonkeyPatch.context() as patch, _logging_restored():
        patch.setenv("HOME", str(run.tmp / "home"))
        patch.delenv("AGENTRT_STATE_URL", raising=False)  # the default store: SQLite under HOME
        for name in FAKE_KEYS:
            patch.setenv(name, "sk-docs-test-placeholder")
        patch.chdir(run.tmp / "work")
        patch.setattr(registry, "_factories", run.factories)
        patch.setattr(registry, "_aliases", run.aliases)
        patch.setattr(agent_base, "_default_store", run.default_store)
        _no_network(patch)
        try:
            if block.setup:
                _run_setup(run, block)
            _execute(run, _compile(block.code, ROOT / block.page, block.line + 1), run.namespace)
        finally:
            run.default_store = agent_base._default_store


@pytest.mark.parametrize("block", BLOCKS, ids=[block.id for block in BLOCKS])
def test_block(block: Block, pages: Pages) -> None:
    page_blocks = [b for b in BLOCKS if b.page == block.page]
    run = pages.get(block.page)
    try:
        # Selected alone (pytest -k), a block still gets what the blocks before it define.
        for earlier in page_blocks[: page_blocks.index(block)]:
            if earlier.line not in run.done and run.failed is None and _skip_reason(earlier) is None:
                try:
                    _run_block(run, earlier)
                except Exception:
                    run.failed = earlier.id
            run.done.add(earlier.line)
        reason = _skip_reason(block)
        if reason is not None:
            pytest.skip(reason)
        if run.failed is not None:
            pytest.skip(f"an earlier block of this page failed: {run.failed}")
        try:
            _run_block(run, block)
        except Exception:
            run.failed = block.id
            raise
    finally:
        run.done.add(block.line)
        if block is page_blocks[-1]:
            pages.close(block.page)


# -- the markers themselves ------------------------------------------------------------------------
def test_markers_are_well_formed() -> None:
    problems = [problem for path in PAGES for problem in parse_page(path)[1]]
    assert not problems, "\n".join(problems)


def test_skip_table_is_current() -> None:
    for key, reason in SKIPPED_HERE.items():
        matching = [block for block in BLOCKS if _matches(key, block)]
        assert len(matching) == 1, f"SKIPPED_HERE entry {key} matches {len(matching)} blocks, not 1"
        assert matching[0].skip is None, f"{matching[0].id} is marked in its page: remove SKIPPED_HERE entry {key}"
        assert reason.strip(), f"SKIPPED_HERE entry {key} needs a reason"


def test_the_parser_finds_blocks_and_markers(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        textwrap.dedent(
            """\
            Text with an inline ```` ``` ```` that is no fence.

            ```python
            x = 1
            ```

            <!-- docs-test: skip (needs an OpenAI key) -->
            ```python
            call_openai()
            ```

            ````markdown
            ```python
            not_a_block_of_this_page = True
            ```
            ````

            <!-- docs-test: setup
            y = 2
            -->

            ```python
            assert y == 2
            ```

            - a list item:

              ```python
              z = 3
              ```

            ```bash
            echo no
            ```
            """
        )
    )
    blocks, problems = parse_page(page, tmp_path)
    assert problems == []
    assert [(b.id, b.code, b.skip, b.setup, b.setup_line) for b in blocks] == [
        ("page.md:3", "x = 1\n", None, "", 0),
        ("page.md:8", "call_openai()\n", "needs an OpenAI key", "", 0),
        ("page.md:22", "assert y == 2\n", None, "y = 2\n", 19),
        ("page.md:28", "z = 3\n", None, "", 0),
    ]


def test_the_parser_reports_bad_markers(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- docs-test: skip -->\n```python\nx = 1\n```\n\n"
        "<!-- docs-test: sikp (typo) -->\n```python\ny = 1\n```\n\n"
        "<!-- docs-test: skip (a comment far from any block) -->\n\nSome text.\n"
    )
    assert parse_page(page, tmp_path)[1] == [
        "page.md:2: 'docs-test: skip' needs a reason: skip (why)",
        "page.md:6: unknown docs-test directive 'sikp'",
        "page.md:11: a docs-test comment must come just before a ```python fence",
    ]


def test_setup_imports_stay_out_of_the_page_namespace(pages: Pages) -> None:
    run = pages.get("<test of setup>")
    block = Block("<test of setup>", 2, "assert helper() == 2\n", setup="import math\nhelper = lambda: math.isqrt(4)\n")
    _run_block(run, block)
    assert "helper" in run.namespace and "math" not in run.namespace
    pages.close("<test of setup>")


def test_blocks_share_a_namespace_and_run_with_or_without_await(pages: Pages) -> None:
    run = pages.get("<test of a notebook>")
    first = Block(run.page, 1, "import asyncio\nasync def two():\n    return 2\nfirst = asyncio.run(two())\n")
    second = Block(run.page, 7, "await asyncio.sleep(0)\nsecond = first + await two()\n")
    _run_block(run, first)
    _run_block(run, second)
    assert run.namespace["second"] == 4
    pages.close(run.page)


def test_a_failing_block_raises_at_its_markdown_line(pages: Pages, tmp_path: Path) -> None:
    run = pages.get("<test of a failure>")
    block = Block(str(tmp_path / "page.md"), 5, "x = 1\nraise RuntimeError('boom')\n")
    with pytest.raises(RuntimeError, match="boom") as raised:
        _run_block(run, block)
    frame = raised.traceback[-1]
    assert (str(frame.path), frame.lineno + 1) == (block.page, 7)
    pages.close(run.page)


def test_blocks_reach_no_network(pages: Pages) -> None:
    run = pages.get("<test of the network>")
    block = Block(run.page, 1, "import socket\nsocket.create_connection(('example.com', 443), timeout=5)\n")
    with pytest.raises(OSError, match="docs test: no network"):
        _run_block(run, block)
    pages.close(run.page)
