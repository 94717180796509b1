"""`agentrt serve`: config files, MODULE:ATTR loading, the command itself; and the event JSON fast path."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from server_agents import KEYS, make_agent

from agentrt import events as ev
from agentrt.errors import UserError
from agentrt.message import Msg
from agentrt.server import RateLimit, create_app
from agentrt.server._serve import load_agents, load_config


def test_toml_config(tmp_path: Path) -> None:
    path = tmp_path / "server.toml"
    path.write_text(
        """
store = "memory://"
max_body_bytes = 2048
shutdown_timeout = 3
facades = ["openai"]

[api_keys]
"sk-1" = "alice"

[rate_limit]
rate = 5
burst = 10
"""
    )
    config = load_config(path, environ={"AGENTRT_API_KEYS": "sk-2=bob"})
    assert config.api_keys == {"sk-1": "alice", "sk-2": "bob"}
    assert config.store == "memory://"
    assert config.max_body_bytes == 2048
    assert config.shutdown_timeout == 3.0
    assert config.rate_limit == RateLimit(rate=5.0, burst=10)
    assert config.facades == ("openai",)
    app = create_app(make_agent(), **config.app_options())
    assert app.state.agentrt.max_body_bytes == 2048


def test_json_config_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "server.json"
    path.write_text(json.dumps({"api_keys": {"k": "u"}, "heartbeat": 5}))
    assert load_config(path, environ={}).heartbeat == 5.0
    path.write_text(json.dumps({"api_keys": {"k": "u"}, "max_body": 5}))
    with pytest.raises(UserError, match="unknown setting"):
        load_config(path, environ={})
    path.write_text(json.dumps({"api_keys": {"k": 1}}))
    with pytest.raises(UserError, match="api_keys"):
        load_config(path, environ={})
    path.write_text("{nope")
    with pytest.raises(UserError, match="not valid JSON"):
        load_config(path, environ={})
    with pytest.raises(UserError, match="cannot read"):
        load_config(tmp_path / "missing.toml", environ={})
    assert load_config(None, environ={"AGENTRT_API_KEYS": "a=b"}).api_keys == {"a": "b"}


def test_load_agents_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    here = str(Path(__file__).parent)
    (tmp_path / "my_agents.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {here!r})\n"
        "from server_agents import make_agent\n"
        "one = make_agent('one')\n"
        "many = {'a': make_agent('a'), 'b': make_agent('b')}\n"
        "def factory():\n    return [make_agent('x')]\n"
        "not_an_agent = 42\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_agents("my_agents:one").name == "one"  # type: ignore[union-attr]
    assert set(load_agents("my_agents:many")) == {"a", "b"}  # type: ignore[arg-type]
    assert [a.name for a in load_agents("my_agents:factory")] == ["x"]  # type: ignore[union-attr]
    with pytest.raises(UserError, match="not an agent"):
        load_agents("my_agents:not_an_agent")
    with pytest.raises(UserError, match="no attribute"):
        load_agents("my_agents:nothing")
    with pytest.raises(UserError, match="cannot import"):
        load_agents("no_such_module_here:x")
    with pytest.raises(UserError, match="MODULE:ATTR"):
        load_agents("my_agents")
    sys.modules.pop("my_agents", None)


def test_serve_command_reports_config_errors(tmp_path: Path) -> None:
    import os
    import subprocess

    root = Path(__file__).parents[2]
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    env.pop("AGENTRT_API_KEYS", None)
    bad = tmp_path / "bad.toml"
    bad.write_text("colour = 'blue'\n")
    done = subprocess.run(
        [sys.executable, "-m", "agentrt.cli", "serve", "x:y", "--config", str(bad)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 1
    assert "unknown setting" in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "agentrt.cli", "serve", "--help"], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0
    assert "MODULE:ATTR" in done.stdout


@pytest.mark.parametrize(
    "event",
    [
        ev.TextDelta(reply_id="r", session_id="s1", source="bot", block_id="b", delta='hi "there"\n'),
        ev.ThinkingDelta(reply_id="r", session_id="s1", source="bot", block_id="b", delta="hm", signature="sig"),
        ev.ToolCallStarted(reply_id="r", session_id="s1", source="bot", block_id="b", tool_call_id="c", name="t"),
        ev.ToolCallDelta(reply_id="r", session_id="s1", source="bot", block_id="b", tool_call_id="c", delta="{"),
        ev.ModelCallStarted(reply_id="r", session_id="s1", source="bot", step=2, model="m"),
        ev.RunFinished(reply_id="r", session_id="s1/sub", source="sub", msg=Msg.assistant("done")),
    ],
)
def test_event_json_equals_the_event_dict_with_the_public_session(event: Any) -> None:
    server = create_app(make_agent(), api_keys=KEYS).state.agentrt
    assert json.loads(server.event_json("bot", event)) == event.to_dict()


def test_config_knowledge_and_upload_limit(tmp_path: Path) -> None:
    path = tmp_path / "server.toml"
    path.write_text('knowledge = "memory://"\nmax_upload_bytes = 4096\n')
    config = load_config(path, environ={})
    assert config.knowledge == "memory://" and config.max_upload_bytes == 4096
    path.write_text("knowledge = 5\n")
    with pytest.raises(UserError, match="'knowledge' must be a URL"):
        load_config(path, environ={})


def test_serve_knowledge_option_serves_each_users_own_knowledge_bases(tmp_path: Path) -> None:
    """A real ``agentrt serve --knowledge sqlite:///...``: a user's upload lands in the file, in their namespace."""
    import os
    import socket
    import sqlite3
    import subprocess
    import time
    import urllib.request

    root = Path(__file__).parents[2]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    db = tmp_path / "kb.db"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root / "src"), str(Path(__file__).parent)]),
        "AGENTRT_API_KEYS": "key-a=alice,key-b=bob",
    }
    cmd = [sys.executable, "-m", "agentrt.cli", "serve", "server_agents:make_agent", "--port", str(port)]
    cmd += ["--knowledge", f"sqlite:///{db}", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"

    def call(method: str, path: str, key: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {key}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, "agentrt serve exited"
            try:
                with urllib.request.urlopen(url + "/readyz", timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.05)  # noqa: TID251 - sync test code, no event loop
        status, _ = call("POST", "/v1/knowledge/handbook/documents", "key-a", {"text": "Vacation is 25 days a year."})
        assert status == 201
        status, found = call("GET", "/v1/knowledge/handbook/search?q=vacation", "key-a")
        assert status == 200 and "25 days" in json.dumps(found)
        status, found = call("GET", "/v1/knowledge/handbook/search?q=vacation", "key-b")
        assert status == 200 and "25 days" not in json.dumps(found)  # bob has no such knowledge base
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    with sqlite3.connect(db) as conn:  # the side effect: the document is in the file, under alice's namespace
        rows = conn.execute("SELECT namespace, kb FROM kb_documents").fetchall()
    assert rows == [("alice", "handbook")]
