"""The public surface: what `import agentrt` exposes and what it must not import."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import agentrt

SRC = str(Path(__file__).parents[2] / "src")

DOCUMENTED = {
    "AudioBlock",
    "Base64Source",
    "ConfirmResult",
    "PermissionContext",
    "PermissionMode",
    "PermissionRule",
    "GenerateReason",
    "ImageBlock",
    "Middleware",
    "Msg",
    "ReActAgent",
    "RuntimeContext",
    "TextBlock",
    "ThinkingBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "Toolkit",
    "UserAgent",
    "VideoBlock",
    "tool",
}

HEAVY = (
    "openai",
    "anthropic",
    "google.genai",
    "mcp",
    "redis",
    "asyncpg",
    "asyncmy",
    "sqlalchemy",
    "aiohttp",
    "httpx",
    "starlette",
    "fastapi",
    "uvicorn",
    "rich",
    "typer",
    "pydantic",
    "opentelemetry",
    "prometheus_client",
)


def test_all_is_the_documented_surface() -> None:
    assert set(agentrt.__all__) >= DOCUMENTED
    for name in agentrt.__all__:
        assert hasattr(agentrt, name), name


def test_import_agentrt_loads_no_sdk_driver_or_server_library() -> None:
    code = (
        "import sys, json, agentrt, agentrt.model, agentrt.state, agentrt.events, agentrt.errors; "
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {list(HEAVY)!r} "
        "or m.startswith('google.genai'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONPATH": SRC}
    )
    assert json.loads(out.stdout) == []


def test_public_dataclasses_are_keyword_only() -> None:
    import dataclasses

    from agentrt import events, message

    for module in (message, events):
        for name in module.__all__:
            obj = getattr(module, name)
            if isinstance(obj, type) and dataclasses.is_dataclass(obj):
                for field in dataclasses.fields(obj):
                    assert field.kw_only, f"{name}.{field.name} must be keyword-only"
