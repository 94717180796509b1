"""A demo MCP server written with the official SDK, used by tests/integration/test_mcp.py.

Run as ``python demo_server.py stdio``, ``python demo_server.py http PORT`` (streamable HTTP at
``/mcp``) or ``python demo_server.py sse PORT`` (SSE at ``/sse``). Environment:
``DEMO_MARKER_DIR`` - where the slow tool writes ``cancelled-<tag>`` / ``done-<tag>`` files.
"""

from __future__ import annotations

import base64
import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import anyio
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import (
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)
from pydantic import BaseModel, Field

# A 1x1 transparent PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)

server = MCPServer("Demo Server!", version="1.0", instructions="A demo server for agentrt tests.", log_level="WARNING")
_calls = {"n": 0}


class Unit(StrEnum):
    celsius = "celsius"
    fahrenheit = "fahrenheit"


class Address(BaseModel):
    city: str
    country: str = Field(description="ISO country code")


class Person(BaseModel):
    name: str
    age: int = Field(ge=0)
    address: Address


@server.tool(description="Describe a person's local weather.", annotations=ToolAnnotations(read_only_hint=True))
def weather(person: Person, unit: Unit = Unit.celsius) -> str:
    temp = 21 if unit is Unit.celsius else 70
    return f"{person.name} ({person.age}) in {person.address.city}, {person.address.country}: {temp} {unit.value}"


@server.tool(description="Always fails.")
def explode(reason: str) -> str:
    raise ToolError(f"boom: {reason}")


@server.tool(description="A slow job that reports progress.", annotations=ToolAnnotations(idempotent_hint=True))
async def slow(ctx: Context, steps: int = 5, delay: float = 0.2, tag: str = "x") -> str:
    marker_dir = Path(os.environ.get("DEMO_MARKER_DIR", "."))
    try:
        for i in range(steps):
            await ctx.report_progress(i + 1, steps, f"step {i + 1} of {steps}")
            await anyio.sleep(delay)
    except anyio.get_cancelled_exc_class():
        (marker_dir / f"cancelled-{tag}").write_text("cancelled")
        raise
    (marker_dir / f"done-{tag}").write_text("done")
    return f"finished {steps} steps"


@server.tool(description="Return a tiny PNG image.", annotations=ToolAnnotations(read_only_hint=True))
def picture() -> Image:
    return Image(data=PNG, format="png")


@server.tool(
    description="Delete everything (it does not really).",
    annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True),
)
def wipe(confirm: bool = False) -> str:
    return "wiped" if confirm else "not confirmed"


@server.tool(description="Write a note (not read-only, no destructive hint).")
def note(text: Annotated[str, Field(description="The note")]) -> str:
    return f"noted: {text}"


@server.tool(description="Return embedded resources.")
def resources() -> CallToolResult:
    return CallToolResult(
        content=[
            TextContent(type="text", text="two resources"),
            EmbeddedResource(
                type="resource", resource=TextResourceContents(uri="file:///notes.txt", text="hello notes")
            ),
            EmbeddedResource(
                type="resource",
                resource=BlobResourceContents(
                    uri="file:///pixel.png", mime_type="image/png", blob=base64.b64encode(PNG).decode()
                ),
            ),
        ]
    )


@server.tool(description="Return structured content only.")
def stats() -> CallToolResult:
    return CallToolResult(content=[], structured_content={"count": 3, "items": ["a", "b", "c"]})


@server.tool(description="The server's process id and call count.", annotations=ToolAnnotations(read_only_hint=True))
def pid() -> str:
    _calls["n"] += 1
    return f"{os.getpid()}:{_calls['n']}"


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "stdio":
        server.run("stdio")
    elif mode == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    elif mode == "sse":
        server.run("sse", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
