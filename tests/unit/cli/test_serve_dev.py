"""`agentrt serve --dev`: no keys on loopback only, a loud banner; the startup summary of `serve` and `mcp serve`."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from agentrt import ReActAgent
from agentrt.cli import build_app
from agentrt.model import ScriptedModel
from agentrt.server import create_app
from agentrt.server._auth import DevAuth
from agentrt.server._serve import DevModeError, check_dev_host, startup_summary
from agentrt.state import InMemoryStateStore

ROOT = Path(__file__).parents[3]
AGENTS = """\
from agentrt import ReActAgent
from agentrt.model import ScriptedModel

agent = ReActAgent("bot", "Answer.", ScriptedModel(["hello from dev"] * 5, name="dev"))
"""
PASSWORD = "s3cret-pw"


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **extra}
    for name in [n for n in env if n.startswith(("AGENTRT_API_KEYS", "AGENTRT_OIDC"))]:
        env.pop(name)
    return env


def _lines(stream: Any) -> tuple[queue.Queue[str], threading.Thread]:
    """The lines of `stream`, read in a thread (so a test can wait for one with a timeout), and the thread."""
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line)

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return lines, thread


def _read_until(lines: queue.Queue[str], marker: str, timeout: float = 60) -> str:
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            continue
        seen.append(line)
        if marker in line:
            return "".join(seen)
    raise AssertionError(f"{marker!r} not printed in {timeout} s; got:\n{''.join(seen)}")


@pytest.fixture
def dev_server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A real ``agentrt serve --dev --port 0`` (from the folder of its agents module); yields (its output, base URL)."""
    (tmp_path / "dev_agents.py").write_text(AGENTS)
    cmd = [sys.executable, "-m", "agentrt.cli", "serve", "dev_agents:agent", "--dev", "--port", "0"]
    cmd += ["--store", f"sqlite:///{tmp_path / 'state.db'}", "--log-level", "warning"]
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    assert proc.stdout is not None
    lines, reader = _lines(proc.stdout)
    try:
        output = _read_until(lines, "OpenAPI:")
        [base] = [line.split()[-1].removesuffix("/") for line in output.splitlines() if "web UI:" in line]
        yield output, base
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        reader.join(timeout=30)  # it reads to the end of the output, then the pipe can close
        proc.stdout.close()


def _request(url: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, str], Any]:
    """A request without any credentials: (status, headers, JSON body)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, dict(response.headers), json.loads(response.read() or b"null")


def test_serve_dev_prints_the_banner_and_answers_requests_without_credentials(dev_server: tuple[str, str]) -> None:
    output, base = dev_server
    assert "DEVELOPMENT MODE (--dev): NO AUTHENTICATION" in output
    assert "never use --dev in production" in output
    assert "agentrt serve: 1 agent(s): bot" in output
    assert f"API:       {base}/v1" in output and f"OpenAPI:   {base}/openapi.json" in output
    assert base.startswith("http://127.0.0.1:") and not base.endswith(":0")  # the port really bound

    status, _, agents = _request(f"{base}/v1/agents")
    assert status == 200 and [a["name"] for a in agents["agents"]] == ["bot"]
    status, _, reply = _request(f"{base}/v1/agents/bot/sessions/s1/messages", {"input": "hi"})
    assert status == 200 and reply["message"]["content"][0]["text"] == "hello from dev"
    status, _, sessions = _request(f"{base}/v1/agents/bot/sessions")
    assert [s["session_id"] for s in sessions["sessions"]] == ["s1"]  # every request is the same local user
    status, headers, _ = _request(f"{base}/healthz")
    assert {k.lower(): v for k, v in headers.items()}["x-agentrt-auth"] == "none"  # what the web UI reads


def _invoke(args: list[str], monkeypatch: pytest.MonkeyPatch, **env: str) -> Any:
    for name in [n for n in os.environ if n.startswith(("AGENTRT_API_KEYS", "AGENTRT_OIDC"))]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return CliRunner().invoke(build_app(), args)


def test_dev_on_a_public_interface_fails_before_loading_or_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    def must_not_run(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("reached past the --dev checks")

    monkeypatch.setattr("agentrt.server._serve.run_server", must_not_run)
    monkeypatch.setattr("agentrt.server._serve.load_agents", must_not_run)
    for host in ("0.0.0.0", "::", "192.168.1.10", "my-laptop.example.com"):
        result = _invoke(["serve", "nowhere:agent", "--dev", "--host", host], monkeypatch)
        assert result.exit_code == 1, result.output
        assert (
            f"DevModeError: --dev serves without authentication, so it only listens on this machine: --host {host!r}"
            " is not a loopback address"
        ) in result.output
    for host in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"):
        check_dev_host(host)


def test_dev_refuses_configured_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("agentrt.server._serve.run_server", lambda *a, **k: pytest.fail("served"))
    result = _invoke(["serve", "x:y", "--dev"], monkeypatch, AGENTRT_API_KEYS="sk-1=alice")
    assert result.exit_code == 1
    assert "--dev serves without authentication and cannot be combined with API keys (AGENTRT_API_KEYS" in (
        result.output
    )
    result = _invoke(["serve", "x:y", "--dev", "--oidc-issuer", "https://id.example.com"], monkeypatch)
    assert result.exit_code == 1 and "cannot be combined with OIDC" in result.output
    config = tmp_path / "prod.toml"
    config.write_text('[api_keys]\n"sk-2" = "bob"\n')
    result = _invoke(["serve", "x:y", "--dev", "--config", str(config)], monkeypatch)
    assert result.exit_code == 1 and "DevModeError" in result.output


def test_startup_output_names_agents_store_without_password_and_urls(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`serve` (keys, no --dev) prints what it serves once it listens; a store URL's password is masked."""
    (tmp_path / "summary_agents.py").write_text(AGENTS)
    monkeypatch.chdir(tmp_path)
    printed: list[tuple[str, int]] = []

    def fake_run(app: Any, *, host: str, port: int, started: Any = None, **options: Any) -> None:
        printed.append((host, port))
        started(host, 8123)  # as uvicorn would once bound

    monkeypatch.setattr("agentrt.server._serve.run_server", fake_run)
    store = f"redis://:{PASSWORD}@127.0.0.1:1/0"
    args = ["serve", "summary_agents:agent", "--store", store, "--knowledge", "memory://"]
    result = _invoke(args, monkeypatch, AGENTRT_API_KEYS="sk-1=alice")
    sys.modules.pop("summary_agents", None)
    assert result.exit_code == 0, result.output
    assert printed == [("127.0.0.1", 8000)]
    assert PASSWORD not in result.output
    assert "agentrt serve: 1 agent(s): bot" in result.output
    assert "store:     redis://:***@127.0.0.1:1/0" in result.output
    assert "auth:      API keys (1)" in result.output
    assert "API:       http://127.0.0.1:8123/v1" in result.output
    assert "web UI:    http://127.0.0.1:8123/" in result.output
    assert "OpenAPI:   http://127.0.0.1:8123/openapi.json" in result.output
    assert "DEVELOPMENT MODE" not in result.output


def test_startup_summary_masks_every_password() -> None:
    agent = ReActAgent("own", "x", ScriptedModel([]), state_store=InMemoryStateStore())
    lines = startup_summary(
        {"own": agent},
        host="::1",
        port=9,
        store_url=f"postgresql+asyncpg://app:{PASSWORD}@db/agents?password={PASSWORD}",
        auth="API keys (1)",
        knowledge_url=f"postgresql://kb:{PASSWORD}@db/kb",
        jobs_url=f"redis://:{PASSWORD}@cache:6379/2",
    )
    text = "\n".join(lines)
    assert PASSWORD not in text
    assert "postgresql+asyncpg://app:***@db/agents?password=***" in text
    assert "own store: own (InMemoryStateStore)" in text
    assert "API:       http://[::1]:9/v1" in text


async def test_dev_auth_app_lets_requests_in_and_says_so() -> None:
    agent = ReActAgent("bot", "x", ScriptedModel(["hi"]), state_store=InMemoryStateStore())
    dev = create_app(agent, auth=DevAuth())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(dev), base_url="http://127.0.0.1:8000") as client:
        response = await client.get("/v1/agents")
        assert response.status_code == 200
        response = await client.get("/v1/agents", headers={"Authorization": "Bearer anything"})
        assert response.status_code == 200
        assert (await client.get("/healthz")).headers["x-agentrt-auth"] == "none"
        page = {"Origin": "http://localhost:8000"}  # the web UI's own requests
        assert (await client.post("/v1/agents/bot/sessions/s1/messages", json={"input": "x"}, headers=page)).is_success
        # A page of another site, or a name of it rebound to 127.0.0.1, reaches nothing.
        for headers in ({"Origin": "https://evil.example"}, {"Host": "evil.example:8000"}):
            refused = await client.post("/v1/agents/bot/sessions/s2/messages", json={"input": "x"}, headers=headers)
            assert refused.status_code == 403 and refused.json()["error"]["code"] == "dev_mode_not_local"
        assert [s["session_id"] for s in (await client.get("/v1/agents/bot/sessions")).json()["sessions"]] == ["s1"]
    # A client on another machine is refused even when it names localhost in its Host header.
    remote = httpx.ASGITransport(dev, client=("203.0.113.7", 5555))
    async with httpx.AsyncClient(transport=remote, base_url="http://localhost:8000") as client:
        refused = await client.post("/v1/agents/bot/sessions/s3/messages", json={"input": "x"})
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "dev_mode_not_local"
    assert await agent.state_store.load("dev", "s3", agent="bot") is None, "nothing reached the agent"
    keyed = create_app(agent, api_keys={"sk-1": "alice"})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(keyed), base_url="http://t") as client:
        assert (await client.get("/v1/agents")).status_code == 401
        assert "x-agentrt-auth" not in (await client.get("/healthz")).headers


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node to run the web UI's api.js")
@pytest.mark.parametrize(("header", "stored", "expected"), [("none", "", "dev"), (None, "", ""), ("none", "k1", "k1")])
def test_web_ui_asks_for_no_key_when_the_server_needs_none(
    tmp_path: Path, header: str | None, stored: str, expected: str
) -> None:
    """The UI's api.js (in node, with a stub browser): a --dev server's `X-Agentrt-Auth: none` means no key dialog."""
    static = ROOT / "src" / "agentrt" / "server" / "static"
    harness = tmp_path / "harness.mjs"
    headers = {"x-agentrt-auth": header} if header else {}
    harness.write_text(
        f"""
const store = new Map({json.dumps([["agentrt.apiKey", stored]] if stored else [])});
globalThis.document = {{ baseURI: "http://127.0.0.1:1/" }};
globalThis.sessionStorage = {{
  getItem: (k) => (store.has(k) ? store.get(k) : null),
  setItem: (k, v) => store.set(k, v),
  removeItem: (k) => store.delete(k),
}};
const asked = [];
globalThis.fetch = async (url) => {{
  asked.push(String(url));
  const headers = new Map(Object.entries({json.dumps(headers)}));
  return {{ ok: true, status: 200, headers: {{ get: (name) => headers.get(name.toLowerCase()) ?? null }} }};
}};
const {{ apiKey }} = await import({json.dumps((static / "api.js").as_uri())});
console.log(JSON.stringify({{ key: apiKey.get(), asked }}));
"""
    )
    done = subprocess.run(["node", str(harness)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["key"] == expected
    assert result["asked"] == ([] if stored else ["http://127.0.0.1:1/healthz"])


def test_mcp_serve_prints_what_it_serves_on_stderr(tmp_path: Path) -> None:
    (tmp_path / "mcp_tools.py").write_text(
        "from agentrt import tool\n\n@tool\ndef shout(text: str) -> str:\n    '''Shout.'''\n    return text.upper()\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "agentrt.cli", "mcp", "serve", "mcp_tools:shout"],
        cwd=tmp_path,
        env=_env(),
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout == ""  # stdout is the protocol's
    assert "agentrt mcp serve: 1 tool(s): shout" in done.stderr
    assert "endpoint:  stdio" in done.stderr


def test_dev_mode_error_is_a_user_error() -> None:
    with pytest.raises(DevModeError, match="not a loopback address"):
        check_dev_host("0.0.0.0")
