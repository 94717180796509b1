"""A client that hangs up in the middle of its request body is not a server failure: one INFO line."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from server_agents import live_server


class Records(logging.Handler):
    """Every record of agentrt and uvicorn (whose loggers do not propagate to the root)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.agentrt_logged = asyncio.Event()
        self.loggers = [logging.getLogger(), logging.getLogger("uvicorn")]

    def attach(self) -> None:
        """Start recording (after uvicorn configured its loggers, which drops their handlers)."""
        for logger in self.loggers:
            logger.addHandler(self)

    def detach(self) -> None:
        for logger in self.loggers:
            logger.removeHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        if record.name.startswith("agentrt") and record.levelno >= logging.INFO:
            self.agentrt_logged.set()


@pytest.fixture
def records() -> Iterator[Records]:
    handler = Records()
    agentrt = logging.getLogger("agentrt.server")
    level = agentrt.level
    agentrt.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        agentrt.setLevel(level)
        handler.detach()


async def test_client_hanging_up_mid_body_logs_one_info_line(make_app: Callable[..., Any], records: Records) -> None:
    async with live_server(make_app()) as (url, server):
        records.attach()
        host, port = url.removeprefix("http://").split(":")
        _reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"POST /v1/agents/bot/sessions/s1/messages HTTP/1.1\r\n"
            b"Host: test\r\nAuthorization: Bearer key-alice\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n"
            b'{"input": "hel'
        )
        await writer.drain()
        writer.close()
        await writer.wait_closed()
        # The app logs when it notices; then let uvicorn finish the request (and log, if it would).
        await asyncio.wait_for(records.agentrt_logged.wait(), 30)
        await asyncio.gather(*server.server_state.tasks, return_exceptions=True)

    logged = [(r.name, r.levelname, r.getMessage()) for r in records.records if r.levelno >= logging.INFO]
    assert [r for r in logged if r[1] in ("ERROR", "CRITICAL")] == []
    assert len(logged) == 1, logged
    name, level, message = logged[0]
    assert (name, level) == ("agentrt.server", "INFO")
    assert "POST /v1/agents/bot/sessions/s1/messages" in message
    assert "disconnected" in message
    assert not any(r.exc_info for r in records.records)
