"""MCP tools in an agent, offline: this file is also the MCP server it connects to.

``python examples/mcp_tools.py`` starts ``python examples/mcp_tools.py serve`` (an MCP server written
with the official SDK) over stdio, registers its tools in a toolkit, and lets a scripted model call
them, printing the tool results and the server's progress notifications from the event stream.

Run: .venv/bin/python examples/mcp_tools.py
"""

# No `from __future__ import annotations`: the SDK reads the tools' annotations at runtime.
import asyncio
import sys


def serve() -> None:
    """The MCP server: a tiny note store with three tools."""
    import anyio
    from mcp.server.mcpserver import Context, MCPServer
    from mcp_types import ToolAnnotations

    server = MCPServer("notes", log_level="WARNING")
    notes: list[str] = []

    @server.tool(description="Add a note.")
    def add_note(text: str) -> str:
        notes.append(text)
        return f"saved note #{len(notes)}"

    @server.tool(description="List all notes.", annotations=ToolAnnotations(read_only_hint=True))
    def list_notes() -> str:
        return "\n".join(f"{i}. {n}" for i, n in enumerate(notes, 1)) or "(no notes)"

    @server.tool(description="Index the notes (slow; reports progress).")
    async def reindex(ctx: Context) -> str:
        for step in range(1, 4):
            await ctx.report_progress(step, 3, f"indexing part {step}")
            await anyio.sleep(0.05)
        return f"indexed {len(notes)} notes"

    server.run("stdio")


async def main() -> None:
    # Imported here, so the server process (which needs only the MCP SDK) does not import agentrt.
    from agentrt import ReActAgent, Toolkit, ToolUseBlock
    from agentrt import events as ev
    from agentrt.mcp import McpClient, McpProgress
    from agentrt.model import ScriptedModel
    from agentrt.state import InMemoryStateStore

    toolkit = Toolkit()
    tools = await toolkit.register_mcp(McpClient.stdio(sys.executable, [__file__, "serve"]))
    print("registered:", ", ".join(f"{t.name}{' (read-only)' if t.read_only else ''}" for t in tools))

    model = ScriptedModel(
        [
            ToolUseBlock(name="mcp__notes__add_note", input={"text": "buy milk"}),
            ToolUseBlock(name="mcp__notes__add_note", input={"text": "call Ann"}),
            [ToolUseBlock(name="mcp__notes__reindex", input={}), ToolUseBlock(name="mcp__notes__list_notes")],
            "You have two notes: buy milk, call Ann.",
        ]
    )
    agent = ReActAgent("assistant", model=model, toolkit=toolkit, state_store=InMemoryStateStore())
    try:
        async for event in agent.stream_events("Note down milk and Ann, then show my notes."):
            if isinstance(event, McpProgress):
                print(f"  progress [{event.tool}] {event.progress:g}/{event.total:g}: {event.message}")
            elif isinstance(event, ev.ToolResult):
                print(f"  {event.result.name} -> {event.result.text!r}")
            elif isinstance(event, ev.RunFinished):
                print("answer:", event.msg.text)
    finally:
        await toolkit.aclose()  # stops the server process the toolkit started


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        serve()
    else:
        asyncio.run(main())
