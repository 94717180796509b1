"""Headers and query parameters the server parses: malformed input is a 422 with a code, never a 500.

Python's ``int()`` accepts signs, spaces, underscores and non-ASCII digits (``"\\u0661"``), raises
on more than 4300 digits, and ``str.isdigit()`` is true for ``"²"``, which ``int()`` refuses: the
server parses numbers itself, ASCII digits only, with a bounded length.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, MutableMapping
from typing import Any

import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentrt import ReActAgent
from agentrt.model import ScriptedModel
from agentrt.server import create_app
from agentrt.state import InMemoryStateStore

ALICE = {"Authorization": "Bearer key-alice"}
SESSION = "/v1/agents/bot/sessions/s1"
EXAMPLES = [
    "a:%C2%B2",
    "a:" + "1" * 5000,
    "a:²",
    "a:-1",
    "a:1e3",
    "a: 1",
    "a:1 ",
    "a:+1",
    "a:1_000",
    "a:\u0661",  # ARABIC-INDIC DIGIT ONE: int() takes it
    "é:1",
    ":1",
    "a:",
    "a",
    "a:1" + "0" * 18,
    "x" * 50_000 + ":1",  # httpx refuses URLs over 64 KiB
]


class Client:
    """An in-process client whose event loop lives as long as the test (hypothesis calls are sync)."""

    def __init__(self, runner: asyncio.Runner) -> None:
        agent = ReActAgent("bot", "You answer.", model=ScriptedModel(["hello"] * 5))
        app = create_app({"bot": agent}, store=InMemoryStateStore(), api_keys={"key-alice": "alice"})
        self._runner = runner
        self._client = httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t")

    def request(self, method: str, url: str, **options: Any) -> httpx.Response:
        return self._runner.run(self._client.request(method, url, **options))

    def close(self) -> None:
        self._runner.run(self._client.aclose())


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with asyncio.Runner() as runner:
        c = Client(runner)
        r = c.request("POST", f"{SESSION}/messages", json={"input": "hi"}, headers=ALICE)
        assert r.status_code == 200, r.text
        try:
            yield c
        finally:
            c.close()


def assert_accepted_or_422(r: httpx.Response, ok: int, code: str, param: str) -> None:
    assert r.status_code in (ok, 422), (r.status_code, r.text[:300])
    if r.status_code == 422:
        error = r.json()["error"]
        assert error["code"] == code
        assert error["param"] == param
        assert error["type"] == "invalid_request_error"
        assert len(error["message"]) < 500


# -- Last-Event-ID --------------------------------------------------------------------------------


@pytest.mark.parametrize("value", EXAMPLES, ids=lambda v: ascii(v[:20]))
def test_malformed_last_event_id_header_is_422(client: Client, value: str) -> None:
    r = client.request("GET", f"{SESSION}/events", headers={**ALICE, "Last-Event-ID": value.encode()})
    assert r.status_code == 422, r.text[:300]
    assert r.json()["error"]["code"] == "invalid_last_event_id"
    assert r.json()["error"]["param"] == "Last-Event-ID"


@pytest.mark.parametrize("value", EXAMPLES, ids=lambda v: ascii(v[:20]))
def test_malformed_last_event_id_query_is_422(client: Client, value: str) -> None:
    # Sent as written: "a:%C2%B2" arrives percent-decoded, as "a:²".
    r = client.request("GET", f"{SESSION}/events?last_event_id={value}", headers=ALICE)
    assert r.status_code == 422, r.text[:300]
    assert r.json()["error"]["code"] == "invalid_last_event_id"
    assert r.json()["error"]["param"] == "last_event_id"


def test_well_formed_last_event_id_of_no_live_run_is_204(client: Client) -> None:
    for last in ("0123abcd:1", "a:b:0", "run:" + "9" * 18):
        r = client.request("GET", f"{SESSION}/events", headers={**ALICE, "Last-Event-ID": last})
        assert r.status_code == 204, (last, r.text)
        r = client.request("GET", f"{SESSION}/events", params={"last_event_id": last}, headers=ALICE)
        assert r.status_code == 204, (last, r.text)


@settings(max_examples=300, deadline=None)
@given(value=st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode)))
@example(value=b"a:\xb2")  # latin-1 superscript two, as a header byte
@example(value="a:²".encode())
@example(value=b"a:" + b"7" * 5000)
def test_any_last_event_id_header_is_answered_without_a_server_error(client: Client, value: bytes) -> None:
    r = client.request("GET", f"{SESSION}/events", headers={**ALICE, "Last-Event-ID": value})
    assert_accepted_or_422(r, 204, "invalid_last_event_id", "Last-Event-ID")


@settings(max_examples=300, deadline=None)
@given(value=st.text(max_size=300))
@example(value="a:²")
@example(value="a:" + "7" * 5000)
def test_any_last_event_id_query_is_answered_without_a_server_error(client: Client, value: str) -> None:
    r = client.request("GET", f"{SESSION}/events", params={"last_event_id": value}, headers=ALICE)
    if r.status_code == 204:
        assert value == "" or ":" in value
    assert_accepted_or_422(r, 204, "invalid_last_event_id", "last_event_id")


# -- other numbers: ?limit and Content-Length -----------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(value=st.one_of(st.text(max_size=50), st.integers(min_value=-10, max_value=10**30).map(str)))
@example(value="\u0661")
@example(value=" 1")
@example(value="1_0")
@example(value="9" * 5000)
def test_any_limit_query_is_answered_without_a_server_error(client: Client, value: str) -> None:
    r = client.request("GET", SESSION, params={"limit": value}, headers=ALICE)
    assert_accepted_or_422(r, 200, "invalid_query_parameter", "limit")
    if r.status_code == 200:
        assert value.isascii() and value.isdigit()
        assert len(r.json()["messages"]) <= int(value)


@pytest.mark.parametrize("length", ["\u0661", "9" * 5000, "1" + "0" * 30, "-1", " 2", "1_0"])
def test_odd_content_length_is_never_a_server_error(length: str) -> None:
    """The ASGI server validates Content-Length on the wire; the app must not trip over one it passes on."""
    agent = ReActAgent("bot", "You answer.", model=ScriptedModel(["hello"]))
    app = create_app({"bot": agent}, store=InMemoryStateStore(), api_keys={"key-alice": "alice"})
    sent: list[MutableMapping[str, Any]] = []
    body = b'{"input": "hi"}'
    received = False

    async def receive() -> dict[str, Any]:
        nonlocal received
        if received:
            return {"type": "http.disconnect"}
        received = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": f"{SESSION}/messages",
        "raw_path": f"{SESSION}/messages".encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"authorization", b"Bearer key-alice"),
            (b"content-type", b"application/json"),
            (b"content-length", length.encode()),
        ],
        "client": ("127.0.0.1", 1234),
        "server": ("t", 80),
    }
    asyncio.run(app(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    # An all-digit length over the limit is refused up front; anything else is read and counted.
    assert status == (413 if length.isascii() and length.isdigit() else 200)
