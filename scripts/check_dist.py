#!/usr/bin/env python3
"""Build agentrt's wheel and sdist, check them, and install the wheel into brand-new virtualenvs.

One implementation for `make dist` and for tests/packaging (which `make test`, and so CI, runs)::

    python scripts/check_dist.py                      # build into dist/ and check (what `make dist` runs)
    python scripts/check_dist.py --extras             # ... then one fresh venv per extra
    python scripts/check_dist.py --wheel dist/agentrt-X-py3-none-any.whl --extras redis,server

The steps:

1. ``python -m build``: the sdist, then the wheel built *from the sdist* (so the sdist holds what a
   build needs), into ``--outdir`` (old ``agentrt-*`` files there are removed first).
2. The wheel holds every file of ``src/agentrt`` (modules, ``py.typed``, the web UI's static files,
   any vendored schema or data file) and nothing else: no tests, no ``__pycache__``; its metadata
   carries the LICENSE. The sdist holds ``pyproject.toml``, README, LICENSE and all of ``src/agentrt``,
   and no cache, virtualenv or ``node_modules``.
3. ``twine check --strict`` on both.
4. A fresh virtualenv (uv) in a temporary folder, the wheel installed into it (no extras), then,
   from that folder with ``HOME`` in it and no ``PYTHONPATH``: ``agentrt --version`` (the pyproject
   version), ``agentrt`` imported from the venv, ``agentrt demo`` (the default SQLite store, written
   under that ``HOME``).
5. With ``--extras``: for each extra, a fresh venv with ``agentrt[EXTRA]`` installed from the wheel
   (its dependencies from PyPI, through uv's cache), in which this same file runs ``--probe``: the
   modules the extra enables import and their main classes are built (no network), and every
   feature whose extra is *not* installed there fails with agentrt's typed error naming that extra.

uv (the ``dev`` extra) makes the venvs: installs come from its cache after the first run.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import tomllib
import zipfile
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIR = ROOT / "src" / "agentrt"

TOOLING_EXTRAS = frozenset({"dev", "bench"})
"""Extras for working on agentrt (tests, linters, benchmark charts), not features of the package."""

CACHE_PARTS = frozenset(
    {
        "__pycache__",
        ".pytest_cache",
        ".mypy_cache",
        ".ruff_cache",
        ".import_linter_cache",
        ".hypothesis",
        "node_modules",
    }
)
CACHE_SUFFIXES = (".pyc", ".pyo")
SDIST_FORBIDDEN_TOP = frozenset({".git", ".venv", "dist", "build", "site", "test-artifacts", ".bench", "htmlcov"})
"""Build outputs and local folders (``site``: `make docs`) that an sdist must not carry."""


# -------------------------------------------------------------------------------------------------
# what the distributions must hold
# -------------------------------------------------------------------------------------------------
def _is_cache(path: str) -> bool:
    parts = path.split("/")
    return any(p in CACHE_PARTS or p.startswith((".coverage", ".venv-")) for p in parts) or path.endswith(
        CACHE_SUFFIXES
    )


def package_files() -> set[str]:
    """Every file of ``src/agentrt`` as ``agentrt/...`` (what the wheel must hold), caches left out."""
    found = set()
    for path in PACKAGE_DIR.rglob("*"):
        rel = "agentrt/" + path.relative_to(PACKAGE_DIR).as_posix()
        if path.is_file() and not _is_cache(rel):
            found.add(rel)
    return found


def project() -> dict[str, Any]:
    """The ``[project]`` table of pyproject.toml."""
    with (ROOT / "pyproject.toml").open("rb") as file:
        table: dict[str, Any] = tomllib.load(file)["project"]
    return table


def feature_extras() -> list[str]:
    """The extras that enable features of the package (pyproject order; ``dev``/``bench`` left out)."""
    return [name for name in project()["optional-dependencies"] if name not in TOOLING_EXTRAS]


def extra_members(extra: str) -> list[str]:
    """The feature extras `extra` installs: itself, or for ``all`` the extras it names."""
    members: list[str] = []
    for requirement in project()["optional-dependencies"][extra]:
        if requirement.startswith("agentrt["):
            members += [m.strip() for m in requirement[len("agentrt[") : requirement.index("]")].split(",")]
    return members or [extra]


def wheel_problems(wheel: Path) -> list[str]:
    """What is wrong with the wheel's contents (empty: nothing)."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = next((n for n in names if n.endswith(".dist-info/METADATA")), None)
        text = archive.read(metadata).decode() if metadata else ""
    dist_info = {n for n in names if n.split("/", 1)[0].endswith(".dist-info")}
    content = names - dist_info
    expected = package_files()
    problems = [f"missing from the wheel: {n}" for n in sorted(expected - content)]
    problems += [f"unexpected in the wheel: {n}" for n in sorted(content - expected)]
    problems += [f"a test or cache file in the wheel: {n}" for n in sorted(names) if _is_cache(n) or "tests/" in n]
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in dist_info):
        problems.append("the wheel's metadata has no licenses/LICENSE")
    for extra in feature_extras():
        if f"Provides-Extra: {extra}" not in text:
            problems.append(f"the wheel's METADATA does not provide the extra {extra!r}")
    return problems


def sdist_problems(sdist: Path) -> list[str]:
    """What is wrong with the sdist's contents (empty: nothing)."""
    with tarfile.open(sdist) as archive:
        names = {m.name.split("/", 1)[1] for m in archive.getmembers() if m.isfile() and "/" in m.name}
    required = {"pyproject.toml", "README.md", "LICENSE", "PKG-INFO"} | {"src/" + n for n in package_files()}
    problems = [f"missing from the sdist: {n}" for n in sorted(required - names)]
    caches = {n.rpartition("/")[0] + "/" for n in names if n.endswith("CACHEDIR.TAG")}  # any tool's cache folder
    problems += [
        f"a cache or local file in the sdist: {n}"
        for n in sorted(names)
        if _is_cache(n) or n.split("/", 1)[0] in SDIST_FORBIDDEN_TOP or any(n.startswith(c) for c in caches)
    ]
    return problems


# -------------------------------------------------------------------------------------------------
# commands
# -------------------------------------------------------------------------------------------------
class CheckFailedError(Exception):
    """A step failed; the message says which and why."""


def say(text: str) -> None:
    """Print a step's heading."""
    print(f"==> {text}", flush=True)


def run(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    log: list[str] | None = None,
) -> str:
    """Run `cmd`, echo its output (or add it to `log`), return its stdout; `CheckFailedError` on a non-zero exit."""
    shown = " ".join(str(c) for c in cmd)
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    output = (proc.stdout + proc.stderr).rstrip()
    if output and log is not None:
        log.append(output)
    elif output:
        print(output, flush=True)
    if proc.returncode != 0:
        raise CheckFailedError(f"`{shown}` exited with {proc.returncode}")
    return proc.stdout


def clean_env(home: Path) -> dict[str, str]:
    """The environment of the throwaway venvs: no source tree on the path, no agentrt settings, `home` as HOME."""
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "AGENTRT_", "COVERAGE_", "UV_PROJECT", "CONDA_PREFIX")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(HOME=str(home), TMPDIR=str(home), UV_PYTHON_DOWNLOADS="never", NO_COLOR="1", PYTHONDONTWRITEBYTECODE="1")
    env["UV_CACHE_DIR"] = uv_cache_dir()  # the user's cache, not one under the throwaway HOME
    return env


@functools.cache
def uv() -> str:
    """The uv binary (the ``dev`` extra installs it)."""
    try:
        from uv import find_uv_bin
    except ImportError:
        found = shutil.which("uv")
        if found is None:
            raise CheckFailedError("uv is not installed: pip install uv (it is in agentrt's dev extra)") from None
        return found
    return str(find_uv_bin())


@functools.cache
def uv_cache_dir() -> str:
    """The cache folder of uv for this user (``UV_CACHE_DIR``, else uv's default)."""
    return os.environ.get("UV_CACHE_DIR") or run([uv(), "cache", "dir"], log=[]).strip()


def make_venv(path: Path, requirement: str, env: dict[str, str], log: list[str] | None = None) -> Path:
    """A new venv at `path` with `requirement` installed; its python."""
    run([uv(), "venv", "--no-config", "--quiet", "--python", sys.executable, path], cwd=path.parent, env=env, log=log)
    python = path / "bin" / "python"
    run([uv(), "pip", "install", "--no-config", "--python", python, requirement], cwd=path.parent, env=env, log=log)
    return python


@dataclass(frozen=True, slots=True)
class Dist:
    """The built files."""

    wheel: Path
    sdist: Path


def build(outdir: Path) -> Dist:
    """`python -m build` into `outdir` (sdist, then the wheel from the sdist)."""
    outdir.mkdir(parents=True, exist_ok=True)
    for old in outdir.glob("agentrt-*"):
        old.unlink()
    installer = ["--installer", "uv"] if _has_uv() else []
    run([sys.executable, "-m", "build", *installer, "--outdir", outdir, ROOT], cwd=ROOT)
    (wheel,) = outdir.glob("agentrt-*.whl")
    (sdist,) = outdir.glob("agentrt-*.tar.gz")
    return Dist(wheel, sdist)


def _has_uv() -> bool:
    try:
        uv()
    except CheckFailedError:
        return False
    return True


def check_contents(dist: Dist) -> None:
    """`wheel_problems` and `sdist_problems`, raised; the wheel's files other than modules, printed."""
    problems = wheel_problems(dist.wheel) + sdist_problems(dist.sdist)
    if problems:
        shown = problems[:30] + ([f"... and {len(problems) - 30} more"] if len(problems) > 30 else [])
        raise CheckFailedError("the distributions are not right:\n  " + "\n  ".join(shown))
    with zipfile.ZipFile(dist.wheel) as archive:
        shown = sorted(n for n in archive.namelist() if not n.endswith(".py"))
    print(f"{dist.wheel.name}: every file of src/agentrt, and: {', '.join(shown)}", flush=True)


def twine_check(dist: Dist) -> None:
    """``twine check --strict`` (metadata, and the README renders on PyPI)."""
    run([sys.executable, "-m", "twine", "--no-color", "check", "--strict", dist.wheel, dist.sdist])


def check_install(wheel: Path, work: Path) -> None:
    """The wheel alone in a fresh venv: ``agentrt --version`` and ``agentrt demo`` from outside the source tree."""
    home = work / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = clean_env(home)
    python = make_venv(work / "venv", str(wheel), env)
    bin_dir = python.parent
    expected = f"agentrt {project()['version']}"
    version = run([bin_dir / "agentrt", "--version"], cwd=home, env=env).strip()
    if version != expected:
        raise CheckFailedError(f"`agentrt --version` printed {version!r}, not {expected!r}")
    where = run([python, "-c", "import agentrt; print(agentrt.__file__)"], cwd=home, env=env).strip()
    if not Path(where).is_relative_to(work / "venv"):
        raise CheckFailedError(f"agentrt was imported from {where}, not from the fresh venv")
    output = run([bin_dir / "agentrt", "demo"], cwd=home, env=env)
    if "Final answer" not in output or "5236" not in output:
        raise CheckFailedError("`agentrt demo` did not print the final answer 5236")
    if not (home / ".agentrt" / "state.db").is_file():
        raise CheckFailedError("`agentrt demo` saved no session in ~/.agentrt/state.db")


def check_extra(wheel: Path, extra: str, work: Path, log: list[str] | None = None) -> None:
    """``agentrt[extra]`` from the wheel in a fresh venv, then ``--probe`` in it."""
    home = work / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = clean_env(home)
    python = make_venv(work / "venv", f"agentrt[{extra}] @ {wheel.resolve().as_uri()}", env, log)
    probe_args: list[str | os.PathLike[str]] = [python, Path(__file__).resolve(), "--probe"]
    probe_args.append(",".join(extra_members(extra)))
    run(probe_args, cwd=home, env=env, log=log)


def _timed(label: str, step: Callable[[], Any]) -> Any:
    say(label)
    start = time.perf_counter()
    result = step()
    print(f"    ({time.perf_counter() - start:.1f} s)", flush=True)
    return result


@dataclass(frozen=True, slots=True)
class ExtraResult:
    """How one extra's venv went."""

    extra: str
    ok: bool
    seconds: float
    log: str
    """uv's and the probe's output (the probe's lines: ``ok``, ``gap`` or ``FAIL``, one per check)."""
    error: str = ""


def check_extras(wheel: Path, extras: Iterable[str], work: Path, jobs: int) -> list[ExtraResult]:
    """Each extra in its own venv, `jobs` at a time."""
    lock = threading.Lock()

    def one(extra: str) -> ExtraResult:
        start = time.perf_counter()
        log: list[str] = []
        error = ""
        try:
            check_extra(wheel, extra, work / f"extra-{extra}", log)
        except CheckFailedError as exc:
            error = str(exc)
        result = ExtraResult(extra, not error, round(time.perf_counter() - start, 1), "\n".join(log), error)
        with lock:  # one extra's output in one block
            say(f"agentrt[{extra}] ({result.seconds:.1f} s): {'ok' if result.ok else 'FAILED: ' + error}")
            print(result.log, flush=True)
        return result

    uv_cache_dir()  # found once, before the threads
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, extras))


# -------------------------------------------------------------------------------------------------
# the probe: runs inside a throwaway venv (``--probe``), never in the source tree's
# -------------------------------------------------------------------------------------------------
async def _asgi_get(app: Any, path: str) -> tuple[int, bytes]:
    """GET `path` from an ASGI app (no server, no socket)."""
    sent: list[dict[str, Any]] = []
    requested = False

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"localhost")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def _model(provider: str) -> str:
    from agentrt.model import model_from_id

    model = model_from_id(f"{provider}:some-model", api_key="check-dist-not-a-key")
    return f"model_from_id('{provider}:...') -> {type(model).__name__}"


async def _enabled_web() -> str:
    from agentrt.errors import ToolRetry
    from agentrt.tool.builtin.web import WebTools

    # A loopback URL: the SSRF guard refuses it before any connection, after the URL went through
    # yarl and idna; aiohttp is imported by the client that would have fetched it.
    try:
        result = await WebTools().fetch_url("http://127.0.0.1:9/")
    except ToolRetry as exc:  # the refusal, sent back to the model
        result = str(exc)
    assert "Refused" in str(result), result
    import aiohttp
    import idna
    import yarl

    del aiohttp, idna, yarl
    return f"fetch_url(loopback) refused: {str(result)[:60]!r}"


async def _enabled_mcp() -> str:
    from agentrt.mcp import McpClient
    from agentrt.mcp.server import __name__ as server_module

    client = McpClient.stdio(sys.executable, ["-c", "pass"])
    return f"McpClient.stdio -> {type(client).__name__}, {server_module} imported"


async def _enabled_redis() -> str:
    from agentrt.state import RedisStateStore, store_from_url

    store = store_from_url("redis://127.0.0.1:6379/15")
    assert isinstance(store, RedisStateStore), store
    await store.close()
    return "store_from_url('redis://...') -> RedisStateStore"


async def _enabled_sql() -> str:
    from agentrt.state import SqlStateStore, store_from_url

    built = []
    for url in (
        "postgresql+asyncpg://agentrt@127.0.0.1:5432/agentrt",
        "mysql+asyncmy://agentrt@127.0.0.1:3306/agentrt",
    ):
        store = store_from_url(url)
        assert isinstance(store, SqlStateStore), store
        await store.close()
        built.append(url.split("://", 1)[0])
    return f"store_from_url -> SqlStateStore for {', '.join(built)}"


async def _enabled_server() -> str:
    from agentrt.cli.demo import build_demo_agent
    from agentrt.server import create_app
    from agentrt.server.routes import STATIC_DIR
    from agentrt.state import InMemoryStateStore

    app = create_app(build_demo_agent(InMemoryStateStore()), api_keys={"check-dist-key": "someone"})
    static = sorted(p.name for p in STATIC_DIR.iterdir() if p.is_file())
    assert "index.html" in static, static
    async with app.router.lifespan_context(app):
        for path, needle in [("/healthz", b"ok"), ("/", b"<html"), *((f"/{name}", b"") for name in static)]:
            status, body = await _asgi_get(app, path)
            assert status == 200 and needle in body.lower(), (path, status, body[:200])
    return f"create_app(...) served /healthz, / and the web UI's {len(static)} files from the wheel"


async def _enabled_otel() -> str:
    from agentrt.telemetry import MetricsMiddleware, TracingMiddleware, render_latest

    MetricsMiddleware()
    TracingMiddleware()
    _body, content_type = render_latest()
    return f"MetricsMiddleware, TracingMiddleware built; render_latest -> {content_type}"


async def _enabled_harness() -> str:
    from agentrt.harness import WorkspaceAgent
    from agentrt.tool.skills import load_skills

    skills = load_skills(_skill_folder())
    del WorkspaceAgent
    return f"load_skills -> {sorted(skills)}"


async def _enabled_evals() -> str:
    from agentrt.evals.loaders import load_file

    loaded = load_file(_yaml_dataset())
    return f"load_file(YAML) -> {len(loaded.cases)} case(s)"


async def _enabled_knowledge() -> str:
    import docx

    from agentrt.knowledge.loaders import load_bytes
    from agentrt.knowledge.stores.sqlite import SqliteKnowledgeStore

    document = docx.Document()
    document.add_heading("Packaging check", level=1)
    document.add_paragraph("The wheel installs the knowledge extra.")
    buffer = io.BytesIO()
    document.save(buffer)
    loaded = load_bytes(buffer.getvalue(), source="check.docx", name="check.docx")
    assert "knowledge extra" in loaded.text, loaded.text
    html = b"<html><head><title>T</title></head><body><article><p>" + b"Main content here. " * 20 + b"</p></article>"
    assert "Main content" in load_bytes(html, source="page.html", name="page.html").text
    store = SqliteKnowledgeStore(Path.cwd() / "knowledge.db", vectors=True)
    await store.kbs("check")
    engine = store.vector_engine
    await store.close()
    assert engine == "sqlite-vec", engine
    return f"DOCX and HTML loaded; SqliteKnowledgeStore(vectors=True) ranks with {engine}"


async def _enabled_cost() -> str:
    from agentrt.model.pricing import price_known
    from agentrt.model.scripted import ScriptedModel

    assert price_known(ScriptedModel([], name="openai:gpt-4o-mini"))
    return "price_known(openai:gpt-4o-mini) from the genai-prices table"


async def _enabled_ray() -> str:
    import ray

    from agentrt.evals.ray_executor import RayExecutor

    RayExecutor()
    return f"ray {ray.__version__}; RayExecutor built"


ENABLED: dict[str, Callable[[], Any]] = {
    "openai": lambda: _model("openai"),
    "web": _enabled_web,
    "anthropic": lambda: _model("anthropic"),
    "gemini": lambda: _model("gemini"),
    "mcp": _enabled_mcp,
    "redis": _enabled_redis,
    "sql": _enabled_sql,
    "server": _enabled_server,
    "otel": _enabled_otel,
    "harness": _enabled_harness,
    "knowledge": _enabled_knowledge,
    "cost": _enabled_cost,
    "evals": _enabled_evals,
    "ray": _enabled_ray,
}
"""What each extra enables, checked in a venv that has it: the modules import, the main classes are built."""


def _skill_folder() -> Path:
    folder = Path.cwd() / "skills" / "check-dist"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text("---\nname: check-dist\ndescription: A packaging check.\n---\nDo nothing.\n")
    return folder.parent


def _yaml_dataset() -> Path:
    path = Path.cwd() / "dataset.yaml"
    path.write_text("cases:\n  - name: one\n    input: What is 2 + 2?\n    expected_output: '4'\n")
    return path


@dataclass(frozen=True, slots=True)
class Missing:
    """What a user sees when an extra's feature is used without the extra."""

    needs: tuple[str, ...]
    """Distributions of the extra: the check runs where any of them is not installed."""
    attempt: Callable[[], Any]
    """Uses the feature; must raise an error that names ``agentrt[EXTRA]``."""
    errors: tuple[str, ...]
    """The error class names accepted: agentrt's typed errors, ImportError for a lazy import, LookupError
    for the cost extra (it only logs that calls have no cost: `_missing_cost` raises that log line)."""
    gap: str = ""
    """Non-empty: a known gap (the error does not name the extra yet); reported, not failed, until fixed."""


def _cli(*args: str) -> None:
    """``agentrt ARGS`` in this process; a failed command raises its stderr as `CliError`."""
    import contextlib
    import io

    from agentrt.cli import main

    err = io.StringIO()
    argv, sys.argv = sys.argv, ["agentrt", *args]
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            main()
    except SystemExit as exc:
        if exc.code:
            raise CliError(f"exit {exc.code}: {err.getvalue().strip()[-400:]}") from None
    finally:
        sys.argv = argv


class CliError(Exception):
    """An ``agentrt`` command failed (its exit code and the end of its stderr)."""


def _missing_cost() -> None:
    import logging

    from agentrt.model.pricing import price_known
    from agentrt.model.scripted import ScriptedModel

    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logger = logging.getLogger("agentrt")
    logger.addHandler(Keep())
    logger.setLevel(logging.INFO)
    if price_known(ScriptedModel([], name="openai:gpt-4o-mini")):
        return
    raise LookupError("; ".join(records))  # the log line is the user-visible behaviour: calls have no cost


def _missing_knowledge() -> None:
    from agentrt.knowledge.loaders import load_bytes

    load_bytes(b"%PDF-1.4\n%%EOF\n", source="x.pdf", name="x.pdf")


def _missing_web() -> None:
    from agentrt.tool.builtin.web import WebTools

    asyncio.run(WebTools().fetch_url("https://example.com/"))


def _missing_harness() -> None:
    from agentrt.tool.skills import load_skills

    load_skills(_skill_folder())


def _missing_evals() -> None:
    from agentrt.evals.loaders import load_file

    load_file(_yaml_dataset())


def _missing_otel() -> None:
    from agentrt.telemetry import MetricsMiddleware, TracingMiddleware

    TracingMiddleware()
    MetricsMiddleware()


def _missing_mcp() -> None:
    from agentrt.tool.toolkit import Toolkit

    asyncio.run(Toolkit().register_mcp(object()))


def _missing_ray() -> None:
    from agentrt.evals.ray_executor import RayExecutor

    RayExecutor().start()


def _store(url: str) -> Callable[[], Any]:
    def attempt() -> Any:
        from agentrt.state import store_from_url

        return store_from_url(url)

    return attempt


MISSING: dict[str, Missing] = {
    "openai": Missing(("aiohttp",), lambda: _model("openai"), ("UserError",)),
    "web": Missing(("aiohttp", "yarl", "idna"), _missing_web, ("UserError",)),
    "anthropic": Missing(("anthropic",), lambda: _model("anthropic"), ("UserError",)),
    "gemini": Missing(("google-genai",), lambda: _model("gemini"), ("UserError",)),
    "mcp": Missing(("mcp",), _missing_mcp, ("MissingExtraError",)),
    "redis": Missing(("redis",), _store("redis://127.0.0.1:6379/0"), ("MissingExtraError",)),
    "sql": Missing(("sqlalchemy",), _store("postgresql+asyncpg://u@127.0.0.1/db"), ("MissingExtraError",)),
    "server": Missing(("starlette",), lambda: _cli("serve", "agentrt.cli.demo:build_demo_agent"), ("CliError",)),
    "otel": Missing(("opentelemetry-sdk", "prometheus-client"), _missing_otel, ("MissingExtraError",)),
    "harness": Missing(("pyyaml",), _missing_harness, ("UserError",)),
    "knowledge": Missing(("pypdf",), _missing_knowledge, ("LoadError",)),
    "cost": Missing(("genai-prices",), _missing_cost, ("LookupError",)),
    "evals": Missing(("pyyaml",), _missing_evals, ("DatasetError",)),
    "ray": Missing(("ray",), _missing_ray, ("UserError",)),
}
"""Each extra's feature used where the extra is not installed: the error must name ``agentrt[EXTRA]``."""


def _installed(distribution: str) -> bool:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import distribution as find

    try:
        find(distribution)
    except PackageNotFoundError:
        return False
    return True


def _call(check: Callable[[], Any]) -> Any:
    result = check()
    if asyncio.iscoroutine(result):
        result = asyncio.run(result)
    return result


def probe(enabled: Sequence[str]) -> int:
    """Inside a throwaway venv: the features of `enabled` work, the others fail naming their extra."""
    os.chdir(tempfile.mkdtemp(prefix="agentrt-probe-"))  # the files the checks write go there
    import agentrt

    failures = 0
    venv = Path(sys.prefix)
    if not Path(agentrt.__file__).is_relative_to(venv):
        print(f"FAIL agentrt imported from {agentrt.__file__}, not from {venv}")
        return 1
    for extra in enabled:
        try:
            print(f"ok   agentrt[{extra}] enabled: {_call(ENABLED[extra])}", flush=True)
        except Exception as exc:
            failures += 1
            print(f"FAIL agentrt[{extra}] enabled: {type(exc).__name__}: {exc}", flush=True)
    checked = 0
    for extra, missing in MISSING.items():
        if extra in enabled or all(_installed(d) for d in missing.needs):
            continue
        checked += 1
        hint = f"agentrt[{extra}]"
        try:
            _call(missing.attempt)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            named = hint in str(exc) and any(c.__name__ in missing.errors for c in type(exc).__mro__)
        else:
            error, named = "no error", False
        if named and missing.gap:
            failures += 1
            print(f"FAIL {hint} missing: now names the extra ({error}); remove its known gap from MISSING", flush=True)
        elif named:
            print(f"ok   {hint} missing: {error[:200]}", flush=True)
        elif missing.gap:
            print(f"gap  {hint} missing: {missing.gap}", flush=True)
        else:
            failures += 1
            print(f"FAIL {hint} missing: expected an error naming {hint}, got {error[:300]}", flush=True)
    print(f"{len(enabled)} extra(s) checked installed, {checked} checked missing, {failures} failure(s)", flush=True)
    return 1 if failures else 0


# -------------------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring); the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--outdir", type=Path, default=ROOT / "dist", help="where to build (default: dist/)")
    parser.add_argument("--wheel", type=Path, help="check this wheel instead of building (skips steps 1-4)")
    parser.add_argument(
        "--extras",
        nargs="?",
        const="*",
        help="also install each extra in its own venv: a comma list, or every extra (feature extras, all, ray)",
    )
    parser.add_argument("--jobs", type=int, default=2, help="extras venvs made at a time (default 2)")
    parser.add_argument("--report", type=Path, help="write each extra's outcome and output to this JSON file")
    parser.add_argument("--keep", action="store_true", help="keep the temporary venvs (their folder is printed)")
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe is not None:
        return probe([e for e in args.probe.split(",") if e])

    extras: list[str] = []
    if args.extras == "*":
        extras = feature_extras()
    elif args.extras:
        extras = [e.strip() for e in args.extras.split(",") if e.strip()]
    known = set(project()["optional-dependencies"]) - TOOLING_EXTRAS
    unknown = sorted(set(extras) - known)
    if unknown:
        parser.error(f"unknown extra(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    unchecked = sorted(known - set(ENABLED) - {"all"})
    if unchecked:
        parser.error(f"no probe for the extra(s) {', '.join(unchecked)}: add them to ENABLED and MISSING")

    work = Path(tempfile.mkdtemp(prefix="agentrt-dist-"))
    try:
        if args.wheel is None:
            outdir = args.outdir.resolve()
            dist = _timed(f"building the sdist and wheel into {outdir}", lambda: build(outdir))
            _timed("checking their contents", lambda: check_contents(dist))
            _timed("twine check", lambda: twine_check(dist))
            _timed(
                f"installing {dist.wheel.name} into a fresh venv; agentrt --version; agentrt demo",
                lambda: check_install(dist.wheel, work / "base"),
            )
            wheel = dist.wheel
        else:
            wheel = args.wheel.resolve()
        if extras:
            results = _timed(
                f"one fresh venv per extra: {', '.join(extras)}", lambda: check_extras(wheel, extras, work, args.jobs)
            )
            if args.report is not None:
                args.report.write_text(json.dumps([dataclasses.asdict(r) for r in results], indent=1))
            failed = [f"agentrt[{r.extra}]: {r.error}" for r in results if not r.ok]
            if failed:
                raise CheckFailedError("extras failed:\n  " + "\n  ".join(failed))
    except CheckFailedError as exc:
        print(f"check_dist: FAILED: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    say("dist check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
