"""Conversion of MCP content (tool results, resources, prompts, sampling messages) into agentrt blocks."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator, Sequence
from typing import Any

import mcp_types

from agentrt import _json
from agentrt.message import AudioBlock, Base64Source, ContentBlock, ImageBlock, Msg, TextBlock, ToolResultBlock

__all__ = [
    "block_output",
    "content_blocks",
    "listing_text",
    "prompt_messages",
    "read_result_blocks",
    "resource_contents_blocks",
    "result_to_block",
    "sampling_messages",
]

_TEXT_MIME = ("text/", "application/json", "application/xml", "application/yaml", "application/javascript")
_MAX_LISTED = 200


def result_to_block(result: mcp_types.CallToolResult, tool_name: str = "", *, server: str = "") -> ToolResultBlock:
    """Turn an MCP ``CallToolResult`` into a `ToolResultBlock` (ids are filled in by the executor).

    Text becomes `TextBlock`s, images and audio inline blocks, embedded resources text (or
    media for image/audio blobs) with their URI noted, resource links a line of text, and
    structured content JSON text when the result has no text. ``is_error`` gives an error result.
    """
    blocks: list[ContentBlock] = []
    for item in result.content:
        blocks.extend(content_blocks(item))
    structured = result.structured_content
    if structured is not None and not any(isinstance(b, TextBlock) for b in blocks):
        blocks.append(TextBlock(text=_json.dumps(_json.jsonable(structured))))
    if result.is_error:
        text = "\n".join(b.text for b in blocks if isinstance(b, TextBlock)).strip()
        where = f" on MCP server {server!r}" if server else ""
        return ToolResultBlock(
            id="", name=tool_name, output=text or f"Tool {tool_name!r}{where} reported an error.", state="error"
        )
    return ToolResultBlock(id="", name=tool_name, output=block_output(blocks), state="success")


def block_output(blocks: list[ContentBlock]) -> str | list[ContentBlock]:
    """A tool output: plain text when all blocks are text, else the blocks ("Done." for none)."""
    if not blocks:
        return "Done."
    if all(isinstance(b, TextBlock) for b in blocks):
        return "\n".join(b.text for b in blocks if isinstance(b, TextBlock))
    return blocks


def content_blocks(item: Any) -> Iterator[ContentBlock]:
    """The agentrt blocks for one MCP content item (text, image, audio, embedded resource, resource link)."""
    if isinstance(item, mcp_types.TextContent):
        yield TextBlock(text=item.text)
    elif isinstance(item, mcp_types.ImageContent):
        yield ImageBlock(source=Base64Source(media_type=item.mime_type, data=item.data))
    elif isinstance(item, mcp_types.AudioContent):
        yield AudioBlock(source=Base64Source(media_type=item.mime_type, data=item.data))
    elif isinstance(item, mcp_types.EmbeddedResource):
        yield from resource_contents_blocks(item.resource)
    elif isinstance(item, mcp_types.ResourceLink):
        about = f": {item.description}" if item.description else ""
        yield TextBlock(text=f"[resource link {item.name} {item.uri}{about}]")
    else:  # a content type newer than this code (or tool use / result content in sampling)
        dump = getattr(item, "model_dump", None)
        data = dump(mode="json", by_alias=True, exclude_none=True) if callable(dump) else str(item)
        yield TextBlock(text=_json.dumps(_json.jsonable(data)))


def resource_contents_blocks(res: Any) -> Iterator[ContentBlock]:
    """Blocks for one resource's contents, headed by its URI (text-like blobs are decoded)."""
    if isinstance(res, mcp_types.TextResourceContents):
        yield TextBlock(text=f"[resource {res.uri}]\n{res.text}")
        return
    mime = res.mime_type or "application/octet-stream"
    if mime.startswith("image/"):
        yield TextBlock(text=f"[resource {res.uri} ({mime})]")
        yield ImageBlock(source=Base64Source(media_type=mime, data=res.blob))
    elif mime.startswith("audio/"):
        yield TextBlock(text=f"[resource {res.uri} ({mime})]")
        yield AudioBlock(source=Base64Source(media_type=mime, data=res.blob))
    else:
        text = _decoded_text(res.blob) if mime.startswith(_TEXT_MIME) else None
        if text is not None:
            yield TextBlock(text=f"[resource {res.uri} ({mime})]\n{text}")
        else:
            size = len(res.blob) * 3 // 4
            yield TextBlock(text=f"[resource {res.uri} ({mime}, about {size} bytes of binary data, not shown)]")


def _decoded_text(blob: str) -> str | None:
    try:
        return base64.b64decode(blob, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None


def read_result_blocks(result: mcp_types.ReadResourceResult) -> list[ContentBlock]:
    """The blocks of a ``resources/read`` result."""
    return [b for res in result.contents for b in resource_contents_blocks(res)]


def prompt_messages(result: mcp_types.GetPromptResult) -> list[Msg]:
    """A ``prompts/get`` result as agentrt messages, one per prompt message."""
    return [Msg(role=m.role, content=list(content_blocks(m.content))) for m in result.messages]


def listing_text(
    server: str, resources: Sequence[mcp_types.Resource], templates: Sequence[mcp_types.ResourceTemplate]
) -> str:
    """The answer of the ``list_resources`` tool."""
    lines: list[str] = []
    for r in resources[:_MAX_LISTED]:
        lines.append(f"- {r.uri}" + _about(r.name, r.mime_type, r.description))
    if len(resources) > _MAX_LISTED:
        lines.append(f"... and {len(resources) - _MAX_LISTED} more resources")
    if templates:
        lines.append("Templates (fill in the {placeholders} to get a URI):")
        for t in templates[:_MAX_LISTED]:
            lines.append(f"- {t.uri_template}" + _about(t.name, t.mime_type, t.description))
    if not lines:
        return f"MCP server {server!r} lists no resources."
    return "\n".join(lines)


def _about(name: str, mime: str | None, description: str | None) -> str:
    label = ", ".join(x for x in (name, mime) if x)
    text = f" ({label})" if label else ""
    return f"{text}: {description.strip()}" if description else text


def sampling_messages(params: mcp_types.CreateMessageRequestParams) -> list[Msg]:
    """The conversation of a sampling request as agentrt messages (without the system prompt)."""
    msgs: list[Msg] = []
    for m in params.messages:
        items = m.content if isinstance(m.content, list) else [m.content]
        blocks = [b for item in items for b in content_blocks(item)]
        msgs.append(Msg(role=m.role, content=blocks))
    return msgs
