"""A low-level SDK server whose tools/list is paginated (three pages of two tools), for test_mcp.py."""

from __future__ import annotations

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

PAGES = {None: ("a", "b", "1"), "1": ("c", "d", "2"), "2": ("e", "f", None)}


async def list_tools(ctx: object, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    cursor = params.cursor if params is not None else None
    first, second, next_cursor = PAGES[cursor]
    schema = {"type": "object", "properties": {}}
    tools = [types.Tool(name=f"tool.{n}", description=f"tool {n}", input_schema=schema) for n in (first, second)]
    return types.ListToolsResult(tools=tools, next_cursor=next_cursor)


async def call_tool(ctx: object, params: types.CallToolRequestParams) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=f"called {params.name}")])


server = Server("paged", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
