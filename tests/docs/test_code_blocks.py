"""Every ```python block of README.md and docs/**/*.md runs as written, each in a fresh interpreter.

A reader copies one block into a file and runs it: so does this test. Each block runs alone (no
block sees what another defined) with ``python`` in a temporary working directory, with a temporary
``HOME`` (the default store, ``~/.agentrt/state.db``, is not the user's), no network beyond loopback,
and a fake OpenAI-compatible server (fake_openai_server.py, the recipe of docs/getting-started.md)
behind ``OPENAI_BASE_URL`` and the other OpenAI-compatible providers' ``*_BASE_URL``: a block using
``"openai:gpt-4o-mini"`` really calls a model, over HTTP, as it would with a key. Anthropic and
Gemini keys are placeholders: their models can be built, not called. A block fails when it exits
non-zero or runs longer than ``BLOCK_TIMEOUT``; the blocks run in parallel subprocesses.

A block that cannot run so is marked in the Markdown, on the line(s) just before its fence (HTML
comments do not render)::

    <!-- docs-test: skip (needs `agentrt serve` listening on localhost:8000) -->

    <!-- docs-test: setup
    from pathlib import Path
    Path("notes.md").write_text("The launch is on 3 June.")
    -->

    <!-- docs-test: peer (pydantic_ai) -->

``skip`` needs a reason. ``setup`` is hidden Python run before the block in the same interpreter but
in a namespace of its own: it prepares what the reader's machine would have (a file the page shows,
a folder), never a name the block uses, and it may not import agentrt (so it cannot swap a model or
build an agent the block takes for granted). ``peer`` marks another framework's code (the "coming
from" pages), named by the package it imports: not run (the peers are not installed), and the block
must import that package and not agentrt. Skips are counted and capped; peer blocks are listed
apart. CONTRIBUTING.md describes the convention.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from fake_openai_server import Handler

ROOT = Path(__file__).parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RECIPE = Path(__file__).with_name("fake_openai_server.py")
BLOCK_TIMEOUT = 45.0  # seconds for one block, interpreter start included
WORKERS = 3  # blocks wait on I/O (the fake server, SQLite) about as much as they compute
# Skips are for what cannot run here (a real Anthropic key, a cluster, a server on a fixed port):
# more than this share of the blocks means the docs drift into untested code.
MAX_SKIPPED_SHARE = 0.15

pytestmark = pytest.mark.timeout(BLOCK_TIMEOUT * 4)

# Placeholder credentials: OpenAI-compatible providers reach the fake server; the SDK providers
# (Anthropic, Gemini) can build their models, and fail at once if a block calls them (no network).
KEYS = (
    "OPENAI_API_KEY",
    "DEEPSEEK_API_KEY",
    "DASHSCOPE_API_KEY",
    "OPENROUTER_API_KEY",
    "VLLM_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
)
OPENAI_COMPATIBLE_URLS = (
    "OPENAI_BASE_URL",
    "DEEPSEEK_BASE_URL",
    "DASHSCOPE_BASE_URL",
    "OPENROUTER_BASE_URL",
    "VLLM_BASE_URL",
    "LMSTUDIO_BASE_URL",
)
CLEARED = ("AGENTRT_STATE_URL", "AGENTRT_CONFIG", "AGENTRT_API_KEYS", "OLLAMA_BASE_URL", "ANTHROPIC_BASE_URL")

# Run by the fresh interpreter: the no-network guard, the setup in a namespace of its own, then the
# block as __main__ (compiled under the Markdown file's name, so tracebacks name its lines).
BOOTSTRAP = """\
import ipaddress, socket, sys, types

def _loopback(host):
    if isinstance(host, bytes):
        host = host.decode()
    if host in (None, "", "localhost"):
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False

_getaddrinfo, _connect = socket.getaddrinfo, socket.socket.connect

def getaddrinfo(host, *args, **kwargs):
    if not _loopback(host):
        raise OSError(f"docs test: no network (lookup of {host!r})")
    return _getaddrinfo(host, *args, **kwargs)

def connect(sock, address):
    if sock.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address[0]):
        raise OSError(f"docs test: no network (connection to {address!r})")
    return _connect(sock, address)

socket.getaddrinfo, socket.socket.connect = getaddrinfo, connect
page, setup_path, setup_line, block_path, block_line = sys.argv[1:6]
sys.argv = [block_path]

def _compile(path, line):
    with open(path, encoding="utf-8") as file:
        return compile("\\n" * (int(line) - 1) + file.read(), page, "exec")

if setup_path:
    exec(_compile(setup_path, setup_line), {"__name__": "__docs_setup__"})
main = types.ModuleType("__main__")
main.__file__ = block_path
sys.modules["__main__"] = main
exec(_compile(block_path, block_line), main.__dict__)
"""


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
    peer: str | None = None
    """The other framework's package, for a ``peer`` block."""

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


# The info strings that make a fence Python (highlighted as such): all of them are run.
PYTHON_FENCES = frozenset({"python", "py", "python3", "py3"})
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
                reason = f"{arg} {rest}".strip().removeprefix("(").removesuffix(")").strip()
                yield Directive(start + 1, i + 1, kind, reason)
        i += 1


def _imported_packages(code: str) -> set[str] | None:
    """The top-level packages the code imports; None when it does not parse."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    packages: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            packages.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            packages.add(node.module.split(".")[0])
    return packages


def _setup_problem(code: str) -> str | None:
    packages = _imported_packages(code)
    if packages is None:
        return "its setup does not parse"
    if "agentrt" in packages:
        return "a setup prepares files and folders only: it may not import agentrt (show that code in the block)"
    return None


def _peer_problem(code: str, package: str) -> str | None:
    packages = _imported_packages(code)
    if packages is None:
        return "a peer block must be Python that parses"
    if not package or package not in packages:
        return f"a peer block must import the package it names ({package or 'none named'})"
    if "agentrt" in packages:
        return "a peer block shows another framework's code: agentrt code goes in a block that runs"
    return None


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
        if opening["info"].strip().split(" ")[0] in PYTHON_FENCES:
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
                elif directive.kind == "peer":
                    problem = _peer_problem(block.code, directive.text)
                    if problem:
                        problems.append(f"{block.id}: {problem}")
                    block = replace(block, peer=directive.text)
                elif directive.kind == "setup":
                    problem = _setup_problem(directive.text)
                    if problem:
                        problems.append(f"{page}:{directive.line}: {problem}")
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


# -- running the blocks --------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    returncode: int | None
    """None: stopped at the timeout."""
    output: str
    seconds: float


def _environment(base_url: str, home: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in CLEARED}
    env.update(dict.fromkeys(KEYS, "sk-docs-test-placeholder"))
    env.update(dict.fromkeys(OPENAI_COMPATIBLE_URLS, base_url))
    env.update(HOME=str(home), PYTHONUNBUFFERED="1", NO_COLOR="1", COLUMNS="100")
    return env


def run_block(block: Block, tmp: Path, base_url: str) -> Outcome:
    """Run one block as written, in a fresh interpreter whose working directory is ``tmp/work``."""
    (tmp / "home").mkdir(parents=True)
    (tmp / "work").mkdir()
    block_file = tmp / "block.py"
    block_file.write_text(block.code, encoding="utf-8")
    setup_file = tmp / "setup.py"
    if block.setup:
        setup_file.write_text(block.setup, encoding="utf-8")
    argv = [block.page, str(setup_file) if block.setup else "", str(block.setup_line), str(block_file)]
    command = [sys.executable, "-c", BOOTSTRAP, *argv, str(block.line + 1)]
    started = time.perf_counter()
    try:
        done = subprocess.run(
            command,
            cwd=tmp / "work",
            env=_environment(base_url, tmp / "home"),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT,
        )
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return Outcome(None, output, time.perf_counter() - started)
    return Outcome(done.returncode, done.stdout + done.stderr, time.perf_counter() - started)


class FakeOpenAI:
    """fake_openai_server.py on a free loopback port, in a thread of the test process."""

    def __init__(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, name="fake-openai", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def outcomes(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Future[Outcome]]]:
    """The selected blocks, started at once in parallel subprocesses: block id -> its outcome."""
    selected = {
        block.id
        for item in request.session.items
        if isinstance(item, pytest.Function) and item.module is request.module and hasattr(item, "callspec")
        for block in [item.callspec.params.get("block")]
        if isinstance(block, Block)
    }
    server = FakeOpenAI()
    pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="docs-block")
    try:
        futures = {
            block.id: pool.submit(run_block, block, tmp_path_factory.mktemp(re.sub(r"\W", "_", block.id)), server.url)
            for block in BLOCKS
            if block.id in selected and block.skip is None and block.peer is None
        }
        yield futures
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        server.close()


@pytest.mark.parametrize("block", BLOCKS, ids=[block.id for block in BLOCKS])
def test_block(block: Block, outcomes: dict[str, Future[Outcome]]) -> None:
    if block.skip is not None:
        pytest.skip(f"marked in the docs: {block.skip}")
    if block.peer is not None:
        pytest.skip(f"code of another framework ({block.peer}), not installed here")
    outcome = outcomes[block.id].result(timeout=BLOCK_TIMEOUT * 3)
    if outcome.returncode is None:
        pytest.fail(f"{block.id} ran longer than {BLOCK_TIMEOUT:.0f} s; its output:\n{outcome.output[-3000:]}")
    assert outcome.returncode == 0, f"{block.id} failed (exit {outcome.returncode}):\n{outcome.output[-4000:]}"


# -- the markers, the skips and the recipe -------------------------------------------------------
def test_markers_are_well_formed() -> None:
    problems = [problem for path in PAGES for problem in parse_page(path)[1]]
    assert not problems, "\n".join(problems)


def test_skips_are_few_and_say_why(capsys: pytest.CaptureFixture[str]) -> None:
    skipped = [block for block in BLOCKS if block.skip is not None]
    peers = [block for block in BLOCKS if block.peer is not None]
    ours = len(BLOCKS) - len(peers)
    with capsys.disabled():
        print(
            f"\ndocs code blocks: {len(BLOCKS)}: run {ours - len(skipped)}, skipped {len(skipped)}, "
            f"other frameworks' code {len(peers)}"
        )
        for block in skipped:
            print(f"  skipped {block.id}: {block.skip}")
    assert ours >= 50, "the pages hold fewer python blocks than expected: is the fence parser broken?"
    assert len(skipped) <= MAX_SKIPPED_SHARE * ours, f"{len(skipped)} of {ours} blocks are skipped"
    assert all(block.skip and block.skip != "no reason given" for block in skipped)


def test_the_recipe_is_the_server_the_test_runs() -> None:
    # docs/getting-started.md shows the fake server in full; this test runs that very file.
    recipes = [block for block in BLOCKS if "class Handler(BaseHTTPRequestHandler)" in block.code]
    assert [block.page for block in recipes] == ["docs/getting-started.md"]
    assert recipes[0].code == RECIPE.read_text(encoding="utf-8"), (
        "the fake server of docs/getting-started.md and tests/docs/fake_openai_server.py differ: make them equal"
    )


# -- the test's own machinery ----------------------------------------------------------------------
def test_the_parser_finds_blocks_and_markers(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        textwrap.dedent(
            """\
            Text with an inline ```` ``` ```` that is no fence.

            ```python
            x = 1
            ```

            <!-- docs-test: skip (needs an Anthropic key) -->
            ```python
            call_anthropic()
            ```

            ````markdown
            ```python
            not_a_block_of_this_page = True
            ```
            ````

            <!-- docs-test: setup
            open("notes.md", "w").write("hi")
            -->

            ```python
            print(open("notes.md").read())
            ```

            - a list item:

              ```python
              z = 3
              ```

            ```py
            w = 4
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
        ("page.md:8", "call_anthropic()\n", "needs an Anthropic key", "", 0),
        ("page.md:22", 'print(open("notes.md").read())\n', None, 'open("notes.md", "w").write("hi")\n', 19),
        ("page.md:28", "z = 3\n", None, "", 0),
        ("page.md:32", "w = 4\n", None, "", 0),
    ]


def test_the_parser_reports_bad_markers(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- docs-test: skip -->\n```python\nx = 1\n```\n\n"
        "<!-- docs-test: sikp (typo) -->\n```python\ny = 1\n```\n\n"
        "<!-- docs-test: skip (a comment far from any block) -->\n\nSome text.\n\n"
        "<!-- docs-test: setup\nfrom agentrt.model import ScriptedModel\n-->\n```python\nz = 1\n```\n\n"
        "<!-- docs-test: peer (pydantic_ai) -->\n```python\nfrom agentrt import tool\n```\n\n"
        "<!-- docs-test: peer (agents) -->\n```python\nfrom agents import Agent\nimport agentrt\n```\n\n"
        "<!-- docs-test: peer (agents) -->\n```python\nfrom agents import Agent, Runner\n```\n"
    )
    blocks, problems = parse_page(page, tmp_path)
    assert problems == [
        "page.md:2: 'docs-test: skip' needs a reason: skip (why)",
        "page.md:6: unknown docs-test directive 'sikp'",
        "page.md:15: a setup prepares files and folders only: it may not import agentrt (show that code in the block)",
        "page.md:23: a peer block must import the package it names (pydantic_ai)",
        "page.md:28: a peer block shows another framework's code: agentrt code goes in a block that runs",
        "page.md:11: a docs-test comment must come just before a ```python fence",
    ]
    assert blocks[-1].peer == "agents" and blocks[-1].skip is None


@pytest.fixture(scope="module")
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    yield server
    server.close()


def _run(tmp: Path, code: str, fake: FakeOpenAI, setup: str = "", line: int = 10) -> Outcome:
    return run_block(Block("docs/page.md", line, code, setup=setup, setup_line=2 if setup else 0), tmp, fake.url)


def test_a_block_runs_alone_in_its_own_folder_and_home(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    code = "import os, pathlib\nprint(pathlib.Path.cwd().name, pathlib.Path.home().name, __name__)\n"
    outcome = _run(tmp_path, code, fake_openai)
    assert (outcome.returncode, outcome.output.split()) == (0, ["work", "home", "__main__"])


def test_an_openai_model_calls_the_fake_server(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    code = textwrap.dedent(
        """\
        import asyncio
        from agentrt import ReActAgent

        async def main():
            reply = await ReActAgent("a", model="openai:gpt-4o-mini").call("Hello there")
            print(reply.text)

        asyncio.run(main())
        """
    )
    outcome = _run(tmp_path, code, fake_openai)
    assert outcome.returncode == 0, outcome.output
    assert outcome.output.strip() == "(fake model) You said: Hello there"


def test_a_failing_block_names_its_markdown_line(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    outcome = _run(tmp_path, "x = 1\nraise RuntimeError('boom')\n", fake_openai, line=10)
    assert outcome.returncode == 1
    assert 'File "docs/page.md", line 12' in outcome.output and "RuntimeError: boom" in outcome.output


def test_a_setup_prepares_files_but_defines_no_name(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    setup = "from pathlib import Path\nPath('notes.md').write_text('hi')\nhelper = 1\n"
    outcome = _run(tmp_path, "print(open('notes.md').read())\nprint('helper' in globals())\n", fake_openai, setup)
    assert (outcome.returncode, outcome.output.split()) == (0, ["hi", "False"])


def test_blocks_reach_no_network(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    code = "import socket\nsocket.create_connection(('example.com', 443), timeout=5)\n"
    outcome = _run(tmp_path, code, fake_openai)
    assert outcome.returncode == 1 and "docs test: no network" in outcome.output
