"""Structured logs: JSON lines (or text) with request, user and session ids, no contents, no secrets.

``configure_logging(json=True)`` installs one handler (standard error by default) on the root
logger. Every record it writes carries the ids of the agent call that logged it, read from
`RuntimeContext.current()` (``user_id``, ``session_id``, ``request_id`` when the context has
that attribute) and from the running call (``reply_id``, ``agent``); outside a call,
`bind_request_id` sets the request id (an HTTP server does it per request).

Contents stay out: values of the extra fields named in `CONTENT_FIELDS` (``content``,
``messages``, ``prompt``, ``arguments``, ``result`` ...) are dropped unless
``debug_content=True``; agentrt passes message text to loggers only through those fields.
Secrets stay out in every mode: the value of any environment variable whose name ends with
``_API_KEY`` (or ``_TOKEN``, ``_SECRET``, ``_PASSWORD``), ``NAME_API_KEY=...`` pairs, bearer
tokens, ``Authorization`` headers and well-known key shapes (``sk-...``) are replaced by
``[REDACTED]`` in the message, the extra fields and exception text.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import json as _json
import logging
import os
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import IO, Any

from agentrt.context import RuntimeContext

__all__ = [
    "CONTENT_FIELDS",
    "REDACTED",
    "ContextFilter",
    "JsonFormatter",
    "TextFormatter",
    "bind_request_id",
    "configure_logging",
    "redact",
]

REDACTED = "[REDACTED]"

CONTENT_FIELDS = frozenset(
    {
        "content",
        "contents",
        "text",
        "messages",
        "message_text",
        "prompt",
        "completion",
        "input",
        "output",
        "arguments",
        "tool_input",
        "tool_output",
        "result",
        "delta",
        "thinking",
        "body",
    }
)
"""Extra fields that carry conversation content: dropped unless ``debug_content=True``."""

_ID_FIELDS = ("request_id", "user_id", "session_id", "reply_id", "agent")

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_RECORD_ATTRS = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "taskName",
    *_ID_FIELDS,
}

_SECRET_ENV_SUFFIXES = ("_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_ACCESS_KEY")
_SECRET_NAME = re.compile(r"(?:api[_-]?key|authorization|password|passwd|secret|token|x-api-key)$", re.IGNORECASE)
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # NAME_API_KEY=value, "OPENAI_API_KEY": "value"
    (
        re.compile(
            r"""(\b[A-Z0-9_]*(?:API_KEY|_TOKEN|_SECRET|_PASSWORD)\b["']?\s*[:=]\s*["']?)[^\s"',;}]+""",
            re.IGNORECASE,
        ),
        r"\1" + REDACTED,
    ),
    # Authorization: Bearer xyz / "authorization": "Basic xyz"
    (re.compile(r"""(\bauthorization\b["']?\s*[:=]\s*["']?)[^"'\n,}]+""", re.IGNORECASE), r"\1" + REDACTED),
    (re.compile(r"\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{6,}"), r"\1 " + REDACTED),
    # Well-known key shapes: OpenAI/Anthropic (sk-...), Google (AIza...), GitHub, Slack, AWS access key ids.
    (re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{16,}"), REDACTED),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{30,}"), REDACTED),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"), REDACTED),
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"), REDACTED),
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), REDACTED),
)

_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("agentrt_request_id", default=None)


@contextmanager
def bind_request_id(request_id: str | None) -> Iterator[None]:
    """Attach `request_id` to every record logged inside the ``with`` block (and tasks started in it)."""
    token = _request_id.set(request_id)
    try:
        yield
    finally:
        _request_id.reset(token)


def _env_secrets() -> tuple[str, ...]:
    values = {
        value for name, value in os.environ.items() if name.upper().endswith(_SECRET_ENV_SUFFIXES) and len(value) >= 6
    }
    # Longest first, so a secret containing another is replaced whole.
    return tuple(sorted(values, key=len, reverse=True))


def redact(text: str, secrets: tuple[str, ...] | None = None) -> str:
    """`text` with secrets replaced by ``[REDACTED]``.

    Args:
        text: Any text.
        secrets: Literal values to hide; the current values of ``*_API_KEY`` (and similar)
            environment variables when None.
    """
    for value in _env_secrets() if secrets is None else secrets:
        if value in text:
            text = text.replace(value, REDACTED)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def _redact_value(value: Any, secrets: tuple[str, ...], depth: int = 0) -> Any:
    if isinstance(value, str):
        return redact(value, secrets)
    if depth > 6:
        return redact(repr(value), secrets)
    if isinstance(value, Mapping):
        return {
            str(k): REDACTED if _SECRET_NAME.search(str(k)) else _redact_value(v, secrets, depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_redact_value(v, secrets, depth + 1) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return redact(str(value), secrets)


class ContextFilter(logging.Filter):
    """Stamps records with the ids of the current agent call; never drops a record.

    Sets ``request_id``, ``user_id``, ``session_id``, ``reply_id`` and ``agent`` (None when
    unknown) unless the record already has them (from ``extra=``).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = RuntimeContext.current()
        run = _current_run()
        values: dict[str, Any] = {
            "request_id": _request_id.get(),
            "user_id": None,
            "session_id": None,
            "reply_id": None,
            "agent": None,
        }
        if ctx is not None:
            values["user_id"] = ctx.user_id
            values["session_id"] = ctx.session_id
            rid = ctx.get("request_id")
            if rid is not None:
                values["request_id"] = str(rid)
        if run is not None:
            values["user_id"] = values["user_id"] or run.user_id
            values["session_id"] = values["session_id"] or run.session_id
            values["reply_id"] = run.reply_id or None
            values["agent"] = run.agent.name
        for name, value in values.items():
            if getattr(record, name, None) is None:
                setattr(record, name, value)
        return True


def _current_run() -> Any:
    # Imported late: the agent package is loaded by then whenever a call is running.
    module = sys.modules.get("agentrt.agent._run")
    if module is None:
        return None
    return module.current_run.get()


class _BaseFormatter(logging.Formatter):
    def __init__(self, *, debug_content: bool = False) -> None:
        super().__init__()
        self.debug_content = debug_content

    def _extras(self, record: logging.LogRecord) -> dict[str, Any]:
        extras: dict[str, Any] = {}
        for name, value in record.__dict__.items():
            if name in _RECORD_ATTRS or name.startswith("_"):
                continue
            if name in CONTENT_FIELDS and not self.debug_content:
                continue
            extras[name] = value
        return extras

    def _exception(self, record: logging.LogRecord) -> str | None:
        if record.exc_info:
            return self.formatException(record.exc_info)
        if record.exc_text:
            return record.exc_text
        return None


class JsonFormatter(_BaseFormatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``message``, the ids, extra fields, ``exception``."""

    def format(self, record: logging.LogRecord) -> str:
        secrets = _env_secrets()
        ts = dt.datetime.fromtimestamp(record.created, tz=dt.UTC)
        out: dict[str, Any] = {
            "ts": ts.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(record.getMessage(), secrets),
        }
        for name in _ID_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                out[name] = value
        for name, value in self._extras(record).items():
            out[name] = _redact_value(value, secrets)
        exc = self._exception(record)
        if exc is not None:
            out["exception"] = redact(exc, secrets)
        if record.stack_info:
            out["stack"] = redact(record.stack_info, secrets)
        return _json.dumps(out, ensure_ascii=False, default=str)


class TextFormatter(_BaseFormatter):
    """``time level logger [request= user= session=] message key=value ...`` for humans."""

    def format(self, record: logging.LogRecord) -> str:
        secrets = _env_secrets()
        ts = dt.datetime.fromtimestamp(record.created, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        ids = " ".join(
            f"{label}={getattr(record, name)}"
            for name, label in (("request_id", "request"), ("user_id", "user"), ("session_id", "session"))
            if getattr(record, name, None) is not None
        )
        parts = [ts, f"{record.levelname:<7}", record.name]
        if ids:
            parts.append(f"[{ids}]")
        parts.append(redact(record.getMessage(), secrets))
        for name, value in self._extras(record).items():
            parts.append(f"{name}={_json.dumps(_redact_value(value, secrets), ensure_ascii=False, default=str)}")
        line = " ".join(parts)
        exc = self._exception(record)
        if exc is not None:
            line += "\n" + redact(exc, secrets)
        return line


def configure_logging(
    json: bool = True,
    level: int | str = logging.INFO,
    debug_content: bool = False,
    *,
    stream: IO[str] | None = None,
    logger: str | None = None,
) -> logging.Handler:
    """Send log records to `stream` as JSON lines (or text), stamped with the call's ids.

    Calling it again replaces the handler it installed before (other handlers stay).

    Args:
        json: JSON lines (True) or human-readable text (False).
        level: The level of the configured logger.
        debug_content: Keep message contents (the `CONTENT_FIELDS` extras) in the output. For
            debugging only: conversations may hold personal data. Secrets are redacted anyway.
        stream: Where lines go (standard error when None).
        logger: The logger to configure (the root logger when None; ``"agentrt"`` for only ours).

    Returns:
        The installed handler.
    """
    target = logging.getLogger(logger)
    for old in list(target.handlers):
        if getattr(old, "_agentrt_handler", False):
            target.removeHandler(old)
            old.close()
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(
        JsonFormatter(debug_content=debug_content) if json else TextFormatter(debug_content=debug_content)
    )
    handler.addFilter(ContextFilter())
    handler._agentrt_handler = True  # type: ignore[attr-defined]
    target.addHandler(handler)
    target.setLevel(level if isinstance(level, int) else level.upper())
    return handler
