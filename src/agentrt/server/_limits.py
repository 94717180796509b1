"""Request limits: body size (checked on Content-Length and while streaming) and id validation."""

from __future__ import annotations

import re

from starlette.requests import Request

__all__ = ["DEFAULT_MAX_BODY_BYTES", "MAX_ID_LENGTH", "BodyTooLargeError", "header_safe", "id_problem", "read_body"]

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
"""Request bodies above this (1 MiB) are refused with 413."""
MAX_ID_LENGTH = 200
_PRINTABLE_ASCII = re.compile(r"[\x20-\x7e]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


class BodyTooLargeError(Exception):
    """The request body is over the limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body is larger than {limit} bytes")
        self.limit = limit


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, refusing (`BodyTooLargeError`) as soon as it is known to exceed `limit` bytes.

    A declared Content-Length over the limit is refused before reading anything; a chunked or
    lying body is cut off while it streams, so memory never holds more than `limit` bytes.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise BodyTooLargeError(limit)
        except ValueError:
            pass  # the server rejects a malformed length itself; read and count
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError(limit)
        if chunk:
            chunks.append(chunk)
    return b"".join(chunks)


def id_problem(label: str, value: str) -> str | None:
    """Why `value` is not acceptable as a session id (or similar), or None when it is."""
    if not value:
        return f"{label} must not be empty"
    if len(value) > MAX_ID_LENGTH:
        return f"{label} must be at most {MAX_ID_LENGTH} characters (got {len(value)})"
    if _CONTROL.search(value):
        return f"{label} must not contain control characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return f"{label} must be valid UTF-8"
    return None


def header_safe(value: str) -> str:
    """`value` for an HTTP header: as is when printable ASCII, else percent-encoded (UTF-8)."""
    if _PRINTABLE_ASCII.fullmatch(value):
        return value
    from urllib.parse import quote

    return quote(value, safe="")
