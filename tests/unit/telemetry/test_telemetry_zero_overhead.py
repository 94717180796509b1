"""Telemetry is opt-in: nothing of opentelemetry or prometheus-client loads until a middleware is built."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).parents[3] / "src")

_RUN = """
import asyncio, json, sys
import agentrt, agentrt.telemetry, agentrt.middleware.telemetry, agentrt.telemetry.logging
from agentrt import ReActAgent, Toolkit, ToolUseBlock, tool
from agentrt.model import ScriptedModel

@tool
def add(a: int, b: int) -> int:
    '''Add.'''
    return a + b

async def main():
    model = ScriptedModel([ToolUseBlock(name="add", input={"a": 1, "b": 2}), "3"])
    agent = ReActAgent("a", "", model, Toolkit([add]))
    assert (await agent.call("1+2")).text == "3"
    [_ async for _ in ReActAgent("b", "", ScriptedModel(["hi"])).stream_events("x")]

asyncio.run(main())
%s
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("opentelemetry", "prometheus_client"))))
"""


def loaded(extra: str = "") -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", _RUN % extra],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": SRC, "AGENTRT_STATE_URL": "memory://"},
    )
    result: list[str] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_a_plain_run_imports_no_telemetry_library() -> None:
    assert loaded() == []


def test_building_the_middlewares_is_what_imports_them() -> None:
    modules = loaded(
        "from agentrt.middleware.telemetry import TracingMiddleware, MetricsMiddleware\n"
        "TracingMiddleware(); MetricsMiddleware()"
    )
    assert "opentelemetry.trace" in modules
    assert "prometheus_client" in modules


def test_the_middleware_skips_hooks_it_does_not_override() -> None:
    from agentrt.middleware.telemetry import LoggingMiddleware, MetricsMiddleware, TracingMiddleware

    for cls in (TracingMiddleware, MetricsMiddleware, LoggingMiddleware):
        assert not cls.overrides(cls.__new__(cls), "on_system_prompt")
        assert not cls.overrides(cls.__new__(cls), "on_reasoning")
