"""HTTP error statuses → agentrt errors, the same way for every provider adapter.

And the words of those errors: the URL a request went to (`public_url`, `response_url`,
`exception_url`), why a connection failed (`connection_cause`: "connection refused", never an
aiohttp object's repr), and the ``/v1`` a base URL may be missing (`missing_version_hint`).
"""

from __future__ import annotations

import re
import socket
import ssl
from collections.abc import Container, Iterable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from agentrt.errors import AuthenticationError, ContextWindowExceededError, ModelAPIError, RateLimitError

__all__ = [
    "classify_api_error",
    "connection_cause",
    "exception_url",
    "missing_version_hint",
    "public_url",
    "request_target",
    "response_url",
]


def classify_api_error(
    status: int,
    body: Any,
    *,
    text: str,
    model: str,
    message: str = "",
    too_long: Iterable[str] = (),
    too_long_statuses: Container[int] = (400, 413, 422),
    retry_after: float | None = None,
    rate_limited: bool = False,
    auth_failed: bool = False,
    auth_hint: str = "",
    context_exceeded: bool = False,
) -> ModelAPIError:
    """The typed error for an error status.

    429 (or `rate_limited`) is a `RateLimitError`; 401, 403 (or `auth_failed`) an
    `AuthenticationError`, whose text gets `auth_hint`; a status in `too_long_statuses` whose
    provider `message` holds one of the `too_long` markers (or `context_exceeded`) a
    `ContextWindowExceededError`; anything else a `ModelAPIError`. `text` is the error's message.
    """
    cls: type[ModelAPIError] = ModelAPIError
    if status == 429 or rate_limited:
        cls = RateLimitError
    elif status in (401, 403) or auth_failed:
        cls = AuthenticationError
        text += auth_hint
    elif status in too_long_statuses and (context_exceeded or any(m in message.lower() for m in too_long)):
        cls = ContextWindowExceededError
    return cls(text, status=status, body=body, model=model, retry_after=retry_after)


# -- where a request went, and why it could not --------------------------------------------------------
_VERSION_SEGMENT = re.compile(r"/v\d+(?:(?:alpha|beta)\d*)?$", re.IGNORECASE)


def public_url(url: object) -> str:
    """`url` as it may be shown: without its query (some gateways take a key there) or credentials."""
    text = str(url)
    parts = urlsplit(text)
    if not parts.scheme or not parts.netloc:
        return text.split("?", 1)[0]
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def missing_version_hint(status: int, base_url: str) -> str:
    """For a 404 from a base URL without a version segment (``/v1``): the hint to add one ("" otherwise)."""
    if status != 404 or not base_url:
        return ""
    path = urlsplit(base_url).path.rstrip("/")
    if _VERSION_SEGMENT.search(path):
        return ""
    suggested = base_url.rstrip("/") + "/v1"
    return (
        f"; the base URL {public_url(base_url)} ends without a version segment: OpenAI-compatible servers "
        f"usually serve the API under /v1 (base_url={public_url(suggested)!r})"
    )


def response_url(response: object) -> str | None:
    """The URL an SDK's error response (httpx or aiohttp) answered, shown without query or credentials."""
    try:
        url = getattr(response, "url", None)
    except Exception:  # httpx raises when the response has no request
        return None
    return public_url(url) if url else None


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc`, its causes and contexts, and the OS errors transport exceptions carry, breadth first."""
    found: list[BaseException] = []
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo and len(found) < 20:
        item = todo.pop(0)
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        found.append(item)
        carried = [getattr(item, name, None) for name in ("os_error", "certificate_error")]
        todo += [c for c in carried if isinstance(c, BaseException)]
        todo += [a for a in item.args if isinstance(a, BaseException)]
        todo += [item.__cause__, item.__context__]
    return found


def _first(chain: list[BaseException], kind: type[BaseException]) -> BaseException | None:
    return next((e for e in chain if isinstance(e, kind)), None)


def connection_cause(exc: BaseException) -> str:
    """Why a connection failed, in plain words ("connection refused"...), never an object's repr."""
    chain = _chain(exc)
    if (cert := _first(chain, ssl.SSLCertVerificationError)) is not None:
        detail = getattr(cert, "verify_message", None) or getattr(cert, "reason", None) or cert
        return f"its TLS certificate could not be verified ({detail})"
    dns = _first(chain, socket.gaierror)
    if isinstance(dns, socket.gaierror):
        return f"the host name could not be resolved ({dns.strerror or dns})"
    if _first(chain, ConnectionRefusedError) is not None:
        return "connection refused (is the server running and listening on that port?)"
    if _first(chain, ConnectionResetError) is not None:
        return "the server reset the connection"
    if _first(chain, TimeoutError) is not None:
        return "the connection timed out"
    if (tls := _first(chain, ssl.SSLError)) is not None:
        return f"the TLS handshake failed ({getattr(tls, 'reason', None) or tls})"
    for item in chain:
        if isinstance(item, OSError) and item.strerror:
            return item.strerror[:1].lower() + item.strerror[1:]
    for item in chain:
        text = str(item).strip()
        if text:
            return f"{text} ({type(item).__name__})"
    return type(exc).__name__


def exception_url(exc: BaseException) -> str | None:
    """The URL (or ``host:port``) a transport exception says it was connecting to, if any."""
    for item in _chain(exc):
        try:
            request = getattr(item, "request", None)  # httpx and the SDKs built on it
            url = getattr(request, "url", None)
        except Exception:  # httpx raises when no request is attached
            url = None
        if url:
            return public_url(url)
        host, port = getattr(item, "host", None), getattr(item, "port", None)
        if isinstance(host, str) and host and isinstance(port, int):  # aiohttp's ClientConnectorError
            return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return None


def request_target(exc: BaseException, endpoint: str) -> str:
    """Where a failed request went: the URL the exception names, else the configured `endpoint`.

    An exception that names only ``host:port`` (aiohttp's) gives way to `endpoint` when that is on
    the same host (it says more: the scheme and the path).
    """
    found = exception_url(exc)
    if found is None:
        return public_url(endpoint)
    if "://" not in found:
        host = found.rsplit(":", 1)[0].strip("[]")
        if host and urlsplit(endpoint).hostname == host:
            return public_url(endpoint)
    return found
