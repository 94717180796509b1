"""`agentrt.mcp`: the package, its typed tools, its errors, and the old import paths that re-export it."""

from __future__ import annotations

import pytest

pytest.importorskip("mcp")

import mcp_types

import agentrt.mcp as mcp_pkg
from agentrt import errors
from agentrt.mcp.client import McpClient
from agentrt.mcp.toolset import McpTool, _build_tools
from agentrt.tool import Tool


def test_old_import_paths_re_export_the_same_objects() -> None:
    from agentrt.mcp import server
    from agentrt.tool import _mcp_features, _mcp_server
    from agentrt.tool import mcp as old

    for name in old.__all__:
        assert getattr(old, name) is getattr(mcp_pkg, name, getattr(mcp_pkg.client, name, None)), name
    assert old.McpClient is mcp_pkg.McpClient is McpClient
    assert old.register_mcp is mcp_pkg.register_mcp
    assert old.McpProgress is mcp_pkg.McpProgress
    assert old.McpError is errors.McpError
    assert _mcp_features.McpElicitation is mcp_pkg.McpElicitation
    assert _mcp_features.result_to_block is mcp_pkg.result_to_block
    assert _mcp_server.mcp_server is server.mcp_server
    assert _mcp_server.load_target is server.load_target


def test_mcp_errors_and_structured_output_error_join_the_tree() -> None:
    from agentrt.agent._output import StructuredOutputError

    assert StructuredOutputError is errors.StructuredOutputError
    assert issubclass(StructuredOutputError, errors.ModelBehaviorError)
    assert issubclass(errors.McpCallLostError, errors.McpConnectionError)
    assert issubclass(errors.McpConnectionError, errors.McpError)
    assert issubclass(errors.McpError, errors.ToolError) and issubclass(errors.McpError, errors.AgentrtError)
    lost = errors.McpCallLostError("gone", server="s", tool="t", restarted=True)
    assert (lost.server, lost.tool, lost.restarted, lost.retryable) == ("s", "t", True, True)


def test_server_tools_become_typed_mcp_tools() -> None:
    client = McpClient.stdio("python", ["server.py"], name="notes", trust_annotations=True)
    spec = mcp_types.Tool(
        name="add_note",
        description="Add a note.",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
        annotations=mcp_types.ToolAnnotations(idempotent_hint=True),
    )
    [made, listing, reading] = _build_tools(
        client, [spec], group=None, prefix=None, include=None, exclude=None, timeout=5.0, resources=True
    )
    assert all(isinstance(t, McpTool) and isinstance(t, Tool) for t in (made, listing, reading))
    assert (made.name, made.mcp_client, made.mcp_tool, made.idempotent) == (
        "mcp__notes__add_note",
        client,
        "add_note",
        True,
    )
    assert (listing.name, listing.mcp_tool, listing.read_only) == ("mcp__notes__list_resources", None, True)
    assert reading.name == "mcp__notes__read_resource"
