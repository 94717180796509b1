"""configure_logging: JSON lines with the call's ids, no contents, no secrets."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from agentrt import ReActAgent, RuntimeContext, Toolkit, ToolUseBlock, tool
from agentrt.middleware.telemetry import LoggingMiddleware
from agentrt.model import ScriptedModel
from agentrt.state import InMemoryStateStore
from agentrt.telemetry.logging import REDACTED, bind_request_id, configure_logging, redact

SECRET_QUESTION = "my diary entry: the launch code is 0000"
log = logging.getLogger("agentrt.test.tool")


@tool(read_only=True)
def lookup(term: str) -> str:
    """Look a term up."""
    log.info("looking up a term", extra={"content": term, "term_length": len(term)})
    return f"{term} means something"


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    buffer = io.StringIO()
    yield buffer
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_agentrt_handler", False):
            root.removeHandler(handler)
    root.setLevel(logging.WARNING)


def lines(buffer: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines() if line.strip()]


def make_agent() -> ReActAgent:
    model = ScriptedModel([ToolUseBlock(name="lookup", input={"term": "launch code"}), "It means something."])
    return ReActAgent(
        "helper",
        "",
        model,
        Toolkit([lookup]),
        middlewares=[LoggingMiddleware()],
        state_store=InMemoryStateStore(),
    )


async def test_json_lines_carry_ids_and_no_content(stream: io.StringIO) -> None:
    configure_logging(json=True, level="DEBUG", stream=stream)
    ctx = RuntimeContext("alice", "s-7", request_id="req-123")
    reply = await make_agent().call(SECRET_QUESTION, ctx)
    records = lines(stream)
    assert records, "nothing was logged"
    mine = [r for r in records if str(r["logger"]).startswith("agentrt.")]
    messages = [r["message"] for r in mine]
    assert "looking up a term" in messages
    assert "agent call finished: stop" in messages
    assert "tool call finished: lookup" in messages
    for record in mine:
        assert record["user_id"] == "alice"
        assert record["session_id"] == "s-7"
        assert record["request_id"] == "req-123"
        assert record["reply_id"] == reply.id
        assert record["agent"] == "helper"
        assert {"ts", "level", "logger", "message"} <= set(record)
    tool_line = next(r for r in mine if r["message"] == "looking up a term")
    assert tool_line["term_length"] == len("launch code")
    finished = next(r for r in mine if r["message"] == "agent call finished: stop")
    assert finished["steps"] == 2 and finished["generate_reason"] == "stop"
    text = stream.getvalue()
    for content in (SECRET_QUESTION, "launch code", "It means something", "means something"):
        assert content not in text


async def test_debug_content_keeps_contents(stream: io.StringIO) -> None:
    configure_logging(json=True, level=logging.DEBUG, debug_content=True, stream=stream)
    await make_agent().call(SECRET_QUESTION, RuntimeContext("alice", "s-8"))
    records = lines(stream)
    started = next(r for r in records if r["message"] == "agent call started")
    assert started["content"] == SECRET_QUESTION
    tool_done = next(r for r in records if r["message"] == "tool call finished: lookup")
    assert tool_done["arguments"] == {"term": "launch code"}
    assert tool_done["result"] == "launch code means something"


def test_secrets_are_redacted_in_every_mode(stream: io.StringIO, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-abcdefghijklmnopqrstuvwxyz")
    monkeypatch.setenv("ACME_API_KEY", "acme-5f3c9a7e")
    configure_logging(json=True, stream=stream, debug_content=True)
    logger = logging.getLogger("agentrt.test.secrets")
    logger.info("calling with key acme-5f3c9a7e and OPENAI_API_KEY=sk-test-abcdefghijklmnopqrstuvwxyz")
    logger.info(
        "request headers",
        extra={"headers": {"Authorization": "Bearer abc.def.ghi", "X-Api-Key": "k-123456", "Accept": "json"}},
    )
    logger.info("raw header line Authorization: Bearer zzzzzzzzzzzz")
    try:
        raise RuntimeError("provider said: invalid key sk-live-0123456789abcdefghij")
    except RuntimeError:
        logger.exception("call failed")
    text = stream.getvalue()
    for secret in ("acme-5f3c9a7e", "sk-test-abcdefghijklmnopqrstuvwxyz", "abc.def.ghi", "k-123456", "zzzzzzzzzzzz"):
        assert secret not in text
    assert "sk-live-0123456789abcdefghij" not in text
    records = lines(stream)
    assert records[0]["message"] == f"calling with key {REDACTED} and OPENAI_API_KEY={REDACTED}"
    assert records[1]["headers"] == {"Authorization": REDACTED, "X-Api-Key": REDACTED, "Accept": "json"}
    assert "Authorization: [REDACTED]" in str(records[2]["message"])
    assert "RuntimeError" in str(records[3]["exception"])


def test_redact_patterns() -> None:
    assert redact("ANTHROPIC_API_KEY=abc123xyz", ()) == f"ANTHROPIC_API_KEY={REDACTED}"
    assert redact('{"api_key": "hunter22"}', ()) == f'{{"api_key": "{REDACTED}"}}'
    assert redact("plain words, max_tokens=5", ()) == "plain words, max_tokens=5"


def test_bind_request_id_outside_a_call_and_text_format(stream: io.StringIO) -> None:
    configure_logging(json=False, stream=stream)
    logger = logging.getLogger("agentrt.test.text")
    with bind_request_id("req-9"):
        logger.warning("slow request", extra={"elapsed_ms": 1200, "content": "hidden text"})
    logger.warning("no ids here")
    first, second = stream.getvalue().splitlines()
    assert "WARNING" in first and "[request=req-9]" in first and "slow request" in first
    assert "elapsed_ms=1200" in first and "hidden text" not in first
    assert "[" not in second.split("agentrt.test.text", 1)[1]


def test_configure_logging_replaces_its_own_handler(stream: io.StringIO) -> None:
    root = logging.getLogger()
    configure_logging(stream=stream)
    configure_logging(stream=stream)
    assert sum(1 for h in root.handlers if getattr(h, "_agentrt_handler", False)) == 1
    logging.getLogger("agentrt.test.once").warning("once")
    assert len(lines(stream)) == 1
