"""Request limits: body size (checked on Content-Length and while streaming), id and header validation.

Numbers in headers and query parameters are parsed strictly: ASCII digits only and a bounded
length, never with a bare ``int()``, which accepts signs, spaces, underscores and non-ASCII digits
(Arabic-Indic ones, say) and raises on more than 4300 digits.
"""

from __future__ import annotations

import re

from starlette.requests import Request

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "MAX_ID_LENGTH",
    "MAX_LAST_EVENT_ID_LENGTH",
    "MAX_UINT_DIGITS",
    "BodyTooLargeError",
    "header_safe",
    "id_problem",
    "parse_last_event_id",
    "parse_uint",
    "read_body",
]

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
"""Request bodies above this (1 MiB) are refused with 413."""
MAX_ID_LENGTH = 200
MAX_UINT_DIGITS = 18
"""Longest number accepted in a header or query parameter (fits a signed 64-bit integer)."""
MAX_LAST_EVENT_ID_LENGTH = 256
_DIGITS = re.compile(r"[0-9]+")  # ASCII only: str patterns match [0-9] literally
_RUN_TOKEN = re.compile(r"[\x21-\x7e]+")  # visible ASCII
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
    # A malformed length is the ASGI server's to reject; here the body is read and counted anyway.
    if (
        declared is not None
        and _DIGITS.fullmatch(declared)
        and (len(declared) > MAX_UINT_DIGITS or int(declared) > limit)
    ):
        raise BodyTooLargeError(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError(limit)
        if chunk:
            chunks.append(chunk)
    return b"".join(chunks)


def parse_uint(value: str, *, max_digits: int = MAX_UINT_DIGITS) -> int | None:
    """`value` as a non-negative integer if it is 1 to `max_digits` ASCII digits, else None."""
    if not 0 < len(value) <= max_digits or not _DIGITS.fullmatch(value):
        return None
    return int(value)


def parse_last_event_id(value: str) -> tuple[str, int] | None:
    """A ``Last-Event-ID`` of ours, ``<run token>:<sequence>``, as (token, sequence); None if malformed."""
    if len(value) > MAX_LAST_EVENT_ID_LENGTH:
        return None
    token, sep, seq = value.rpartition(":")
    number = parse_uint(seq)
    if not sep or number is None or not _RUN_TOKEN.fullmatch(token):
        return None
    return token, number


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
