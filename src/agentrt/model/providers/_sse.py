"""An incremental Server-Sent Events decoder over raw bytes (no regex, no per-byte Python loop).

Lines are cut with `bytes.split` (C speed) and the common ``data: ...`` line takes one
`startswith` check. CR and CRLF line ends are accepted, also when a CRLF is split across two
network reads, and a UTF-8 byte order mark at the start of the stream is dropped (as the SSE spec
says), also when it arrives split across reads.
"""

from __future__ import annotations

__all__ = ["SSEDecoder", "SSEEvent"]

SSEEvent = tuple[str, bytes]
"""``(event type, data)``; the type is ``"message"`` unless the stream set an ``event:`` field."""

_DATA = b"data:"
_BOM = b"\xef\xbb\xbf"


class SSEDecoder:
    """Feed network reads with `feed`; each call returns the events those bytes completed."""

    __slots__ = ("_data", "_event", "_skip_lf", "_start", "_tail")

    def __init__(self) -> None:
        self._tail = b""
        self._data: list[bytes] = []
        self._event = ""
        self._skip_lf = False
        self._start = True  # nothing decided yet about a byte order mark

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Decode `chunk` (any slice of the byte stream) and return the completed events."""
        if self._start:
            # Before the first 3 bytes are known, a BOM may still be arriving: hold them back.
            head = self._tail + chunk
            if len(head) < 3 and _BOM.startswith(head):
                self._tail = head
                return []
            self._start = False
            self._tail = b""
            chunk = head[3:] if head.startswith(_BOM) else head
        if self._skip_lf:
            # The previous read ended in CR: a LF starting this one completes that CRLF.
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        buf = self._tail + chunk if self._tail else chunk
        if b"\r" in buf:
            self._skip_lf = buf[-1:] == b"\r"
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        self._tail = lines.pop()
        if not lines:
            return []
        return self._lines(lines)

    def flush(self) -> list[SSEEvent]:
        """End of stream: return an event left without its closing blank line (lenient, as browsers are not)."""
        self._start = False
        tail, self._tail = self._tail, b""
        events = self._lines([tail, b""]) if tail else []
        if self._data:
            events.extend(self._lines([b""]))
        return events

    def _lines(self, lines: list[bytes]) -> list[SSEEvent]:
        out: list[SSEEvent] = []
        data = self._data
        for line in lines:
            if not line:
                if data:
                    out.append((self._event or "message", data[0] if len(data) == 1 else b"\n".join(data)))
                    data.clear()
                self._event = ""
            elif line.startswith(_DATA):
                value = line[5:]
                data.append(value[1:] if value[:1] == b" " else value)
            elif line[0] == 58:  # ":" starts a comment (keep-alive pings)
                continue
            else:
                name, sep, value = line.partition(b":")
                if sep and value[:1] == b" ":
                    value = value[1:]
                if name == b"event":
                    self._event = value.decode("utf-8", "replace")
                elif name == b"data":  # "data" without a colon: an empty data line
                    data.append(b"")
                # "id" and "retry" matter for browser reconnects only; other fields are ignored by the spec.
        return out
