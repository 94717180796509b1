"""HTTP fetch: the ``fetch_url`` tool, over aiohttp (imported when the tool first runs).

``toolkit.register(fetch_url)`` uses the default policy; ``toolkit.register(WebTools(allowed_hosts=
["docs.python.org"]))`` configures one. What the tool does:

- Only ``http`` and ``https`` URLs; ``GET`` only; no cookies kept between calls; proxies from the
  environment are ignored.
- **SSRF guard**: the host is resolved first, and if it (or an IP literal in the URL) is not a
  public address (loopback, private, link-local, carrier-grade NAT, multicast, reserved, cloud
  metadata at 169.254.169.254 ...) the fetch is refused. The check runs inside aiohttp's resolver, so
  the connection goes to the very addresses that were checked (no DNS-rebinding window), and again on
  every redirect hop. ``allow_private=True`` turns it off (local services, tests).
- ``allowed_hosts`` (only these hosts and their subdomains; ``*`` globs allowed) and ``blocked_hosts``
  (never these) are checked on every hop too, and by the permission engine before the call runs.
- Redirects: at most ``max_redirects`` hops. Limits: ``max_bytes`` of (decompressed) body, enforced
  while streaming, and ``timeout`` seconds for the whole fetch; the model may ask for less, or for
  more up to the tool's ``max_bytes_limit`` and ``max_timeout``.
- Content: HTML becomes readable text (scripts, styles and markup dropped; headings, list items and
  links kept as ``[text](url)``), JSON is pretty-printed, other text is returned as is, and other
  types get a one-line description instead of their bytes.
"""

from __future__ import annotations

import asyncio
import fnmatch
import ipaddress
import json
import re
import socket
from collections.abc import Iterable, Mapping
from html.parser import HTMLParser
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urljoin, urlsplit

from pydantic import Field

from agentrt.context import RuntimeContext
from agentrt.errors import ToolRetry, UserError
from agentrt.permission import PermissionDecision
from agentrt.tool.base import tool

if TYPE_CHECKING:
    import aiohttp

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_TIMEOUT",
    "WebTools",
    "fetch_url",
    "html_to_text",
    "is_public_address",
]

DEFAULT_MAX_BYTES = 1_000_000
DEFAULT_TIMEOUT = 20.0
DEFAULT_USER_AGENT = "agentrt-fetch/0.1 (+https://github.com/agentrt/agentrt)"
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CHUNK = 65_536
_LEGACY_IPV4 = re.compile(r"(?:0x[0-9a-f]+|[0-9]+)(?:\.(?:0x[0-9a-f]+|[0-9]+)){0,3}", re.IGNORECASE)
_PRIVATE_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


class WebTools:
    """The ``fetch_url`` tool with a host policy and limits (see the module docstring).

    Args:
        allowed_hosts: If given, only these hosts (and their subdomains) may be fetched.
            Entries are host names, optionally with ``*`` globs (``"*.example.org"``).
        blocked_hosts: Hosts (and their subdomains) that may never be fetched.
        allow_private: Allow loopback, private and link-local addresses (off: SSRF guard).
        max_redirects: Most redirect hops followed.
        max_bytes_limit: Largest ``max_bytes`` the model may ask for.
        max_timeout: Largest ``timeout`` the model may ask for.
        user_agent: The ``User-Agent`` header sent.
    """

    def __init__(
        self,
        *,
        allowed_hosts: Iterable[str] | None = None,
        blocked_hosts: Iterable[str] = (),
        allow_private: bool = False,
        max_redirects: int = 5,
        max_bytes_limit: int = 10_000_000,
        max_timeout: float = 120.0,
        user_agent: str = DEFAULT_USER_AGENT,
    ) -> None:
        if max_redirects < 0 or max_bytes_limit < 1 or max_timeout <= 0:
            raise UserError("WebTools needs max_redirects >= 0, max_bytes_limit >= 1 and max_timeout > 0")
        self.allowed_hosts = None if allowed_hosts is None else tuple(_norm_host(h) for h in allowed_hosts)
        self.blocked_hosts = tuple(_norm_host(h) for h in blocked_hosts)
        self.allow_private = allow_private
        self.max_redirects = max_redirects
        self.max_bytes_limit = max_bytes_limit
        self.max_timeout = max_timeout
        self.user_agent = user_agent
        bound = self.fetch_url
        self.fetch_url = bound.copy(check_permission=self.check_permission, timeout=max_timeout + 10)

    def __repr__(self) -> str:
        return f"WebTools(allowed_hosts={self.allowed_hosts!r}, allow_private={self.allow_private!r})"

    @tool(read_only=True, timeout=None)
    async def fetch_url(
        self,
        url: str,
        max_bytes: Annotated[int, Field(ge=1)] = DEFAULT_MAX_BYTES,
        timeout: Annotated[float, Field(gt=0)] = DEFAULT_TIMEOUT,
    ) -> str:
        """Fetch a web page or file over HTTP(S) and return its content as text.

        HTML is converted to readable text with links as [text](url); JSON is pretty-printed; other
        binary content is described, not returned. Private and local network addresses are refused.

        Args:
            url: The http:// or https:// URL.
            max_bytes: Most bytes of the body to read; longer bodies are cut.
            timeout: Seconds allowed for the whole fetch, redirects included.
        """
        return await self.fetch(url, max_bytes=max_bytes, timeout=timeout)

    # -- policy -------------------------------------------------------------------------------------------
    def check_permission(self, args: Mapping[str, Any], ctx: RuntimeContext) -> PermissionDecision | None:
        """Deny URLs the policy refuses without a network lookup (scheme, host lists, IP literals)."""
        url = args.get("url")
        if not isinstance(url, str):
            return None
        reason = self.refusal(url)
        return PermissionDecision.deny(reason) if reason is not None else None

    def refusal(self, url: str) -> str | None:
        """Why the policy refuses `url` before any DNS lookup, or None."""
        try:
            parts = urlsplit(url.strip())
            host = parts.hostname
            _ = parts.port  # raises ValueError for a bad port
        except ValueError as exc:
            return f"{url!r} is not a valid URL ({exc})"
        if parts.scheme.lower() not in ("http", "https"):
            return f"only http and https URLs may be fetched, not {parts.scheme or 'a URL without scheme'!r}"
        if not host:
            return f"{url!r} has no host"
        host = _norm_host(host)
        if any(_host_matches(host, pattern) for pattern in self.blocked_hosts):
            return f"the host {host!r} is blocked"
        if self.allowed_hosts is not None and not any(_host_matches(host, p) for p in self.allowed_hosts):
            return f"the host {host!r} is not in the allowed hosts"
        if not self.allow_private:
            literal = _ip_literal(host)
            if literal is not None and not is_public_address(literal):
                return f"{host!r} is a private, loopback or link-local address"
            if literal is None and (host in _PRIVATE_NAMES or host.endswith(".localhost")):
                return f"{host!r} is a local host name"
        return None

    # -- fetching -----------------------------------------------------------------------------------------
    async def fetch(self, url: str, *, max_bytes: int = DEFAULT_MAX_BYTES, timeout: float = DEFAULT_TIMEOUT) -> str:
        """Fetch `url` under this policy and return the text the tool returns (`ToolRetry` on failure)."""
        aiohttp = _aiohttp()
        max_bytes = min(max_bytes, self.max_bytes_limit)
        timeout = min(timeout, self.max_timeout)
        headers = {
            "User-Agent": self.user_agent,
            "Accept": "text/html,application/xhtml+xml,application/json;q=0.9,text/plain;q=0.8,*/*;q=0.5",
        }
        current = url.strip()
        try:
            async with (
                asyncio.timeout(timeout),
                aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(resolver=_guarded_resolver(self.allow_private), use_dns_cache=False),
                    headers=headers,
                    trust_env=False,
                    cookie_jar=aiohttp.DummyCookieJar(),
                ) as session,
            ):
                for hop in range(self.max_redirects + 1):
                    reason = self.refusal(current)
                    if reason is not None:
                        prefix = "" if hop == 0 else f"redirected to {current}: "
                        raise ToolRetry(f"Refused to fetch: {prefix}{reason}.")
                    async with session.get(current, allow_redirects=False) as resp:
                        location = resp.headers.get("Location")
                        if resp.status in _REDIRECTS and location:
                            current = urljoin(str(resp.url), location)
                            continue
                        return await _render(resp, max_bytes)
                raise ToolRetry(f"Too many redirects (more than {self.max_redirects}) fetching {url}.")
        except TimeoutError:
            raise ToolRetry(f"Fetching {url} timed out after {timeout:g} s.") from None
        except aiohttp.ClientConnectorError as exc:
            blocked = _blocked_cause(exc)
            if blocked is not None:
                raise ToolRetry(f"Refused to fetch {current}: {blocked}.") from None
            raise ToolRetry(f"Could not connect to {current}: {exc.os_error or exc}.") from None
        except aiohttp.InvalidURL as exc:
            raise ToolRetry(f"Invalid URL {str(exc.url)!r}.") from None
        except aiohttp.ClientError as exc:
            raise ToolRetry(f"Fetching {current} failed: {type(exc).__name__}: {exc}.") from None


fetch_url = WebTools().fetch_url
"""``fetch_url`` with the default policy (public addresses only, no host lists)."""


# -- addresses ----------------------------------------------------------------------------------------------
def is_public_address(address: str) -> bool:
    """Whether an IP address is globally routable (not private, loopback, link-local, reserved, multicast)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        mapped = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if mapped is not None and not is_public_address(str(mapped)):
            return False
    return bool(ip.is_global) and not ip.is_multicast and not ip.is_reserved and not ip.is_unspecified


def _ip_literal(host: str) -> str | None:
    """The IP address a host names literally, legacy IPv4 forms included (``127.1``, ``2130706433``)."""
    bare = host.strip("[]").split("%", 1)[0]
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        pass
    if _LEGACY_IPV4.fullmatch(bare):
        try:
            return socket.inet_ntoa(socket.inet_aton(bare))
        except OSError:
            return None
    return None


def _norm_host(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


def _host_matches(host: str, pattern: str) -> bool:
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(host, pattern)
    return host == pattern or host.endswith("." + pattern)


class _BlockedAddressError(OSError):
    """Raised by the guarded resolver; aiohttp wraps it in a `ClientConnectorDNSError`."""


def _blocked_cause(exc: BaseException) -> str | None:
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return None
        if isinstance(seen, _BlockedAddressError):
            return str(seen)
        os_error = getattr(seen, "os_error", None)
        if isinstance(os_error, _BlockedAddressError):
            return str(os_error)
        seen = seen.__cause__
    return None


def _aiohttp() -> Any:
    try:
        import aiohttp
    except ImportError:  # pragma: no cover - depends on the environment
        raise UserError("fetch_url needs aiohttp: pip install 'agentrt[openai]' or pip install aiohttp") from None
    return aiohttp


def _guarded_resolver(allow_private: bool) -> aiohttp.abc.AbstractResolver:
    import aiohttp
    from aiohttp.abc import AbstractResolver, ResolveResult

    class GuardedResolver(AbstractResolver):
        """Resolves with the default resolver, then refuses non-public addresses."""

        def __init__(self) -> None:
            self._inner = aiohttp.ThreadedResolver()

        async def resolve(
            self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
        ) -> list[ResolveResult]:
            if not allow_private and (_norm_host(host) in _PRIVATE_NAMES or _norm_host(host).endswith(".localhost")):
                raise _BlockedAddressError(f"{host!r} is a local host name")
            results = await self._inner.resolve(host, port, family)
            if not allow_private:
                for result in results:
                    if not is_public_address(result["host"]):
                        raise _BlockedAddressError(
                            f"{host!r} resolves to {result['host']}, a private, loopback or link-local address"
                        )
            return results

        async def close(self) -> None:
            await self._inner.close()

    return GuardedResolver()


# -- content --------------------------------------------------------------------------------------------------
def _is_text(mime: str) -> bool:
    return (
        mime.startswith("text/")
        or mime in ("application/json", "application/xml", "application/javascript", "application/xhtml+xml", "")
        or mime.endswith(("+json", "+xml"))
    )


async def _render(resp: aiohttp.ClientResponse, max_bytes: int) -> str:
    mime = (resp.content_type or "").lower()
    header = [f"URL: {resp.url}", f"Status: {resp.status} {resp.reason or ''}".rstrip()]
    length = resp.content_length
    if not _is_text(mime) or mime == "application/octet-stream":
        size = f"{length} bytes" if length is not None else "unknown size"
        header.append(f"Content-Type: {mime}")
        return "\n".join(header) + f"\n\n(Binary content: {mime}, {size}; not shown.)"
    body = bytearray()
    truncated = False
    async for chunk in resp.content.iter_chunked(_CHUNK):
        room = max_bytes - len(body)
        if len(chunk) > room:
            body += chunk[:room]
            truncated = True
            break
        body += chunk
    charset = resp.charset or "utf-8"
    try:
        text = bytes(body).decode(charset, errors="replace")
    except LookupError:
        text = bytes(body).decode("utf-8", errors="replace")
    if mime in ("text/html", "application/xhtml+xml") or (mime == "" and "<html" in text[:2000].lower()):
        text = html_to_text(text, base_url=str(resp.url))
    elif (mime == "application/json" or mime.endswith("+json")) and not truncated:
        try:
            text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pass
    header.append(f"Content-Type: {mime or 'unknown'}")
    if truncated:
        header.append(f"[body cut at {max_bytes} bytes" + (f" of {length}]" if length is not None else "]"))
    return "\n".join(header) + "\n\n" + text


_SKIP_TAGS = frozenset({"script", "style", "noscript", "template", "svg", "iframe", "object", "canvas"})
_BLOCK_TAGS = frozenset(
    {
        "p",
        "div",
        "section",
        "article",
        "header",
        "footer",
        "nav",
        "main",
        "aside",
        "ul",
        "ol",
        "table",
        "tr",
        "br",
        "hr",
        "blockquote",
        "dl",
        "dt",
        "dd",
        "figure",
        "figcaption",
        "form",
        "pre",
        "address",
        "details",
        "summary",
    }
)
_VOID_TAGS = frozenset({"br", "hr", "img", "input", "meta", "link", "area", "base", "col", "embed", "source", "wbr"})


# Whitespace inside <pre> survives the clean-up as private-use characters, restored at the end.
_PROTECT = str.maketrans({" ": "\ue000", "\n": "\ue001", "\t": "\ue002"})
_RESTORE = str.maketrans({"\ue000": " ", "\ue001": "\n", "\ue002": "\t"})


class _TextExtractor(HTMLParser):
    def __init__(self, base_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base_url = base_url
        self.out: list[str] = []
        self.skip = 0
        self.pre = 0
        self.title: list[str] = []
        self.in_title = False
        self.links: list[tuple[str | None, int]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
            return
        if tag in _SKIP_TAGS:
            self.skip += 1
            return
        if self.skip:
            return
        if tag in _BLOCK_TAGS:
            self.out.append("\n")
        if tag == "pre":
            self.pre += 1
        elif tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self.out.append("\n\n" + "#" * int(tag[1]) + " ")
        elif tag == "li":
            self.out.append("\n- ")
        elif tag in ("td", "th"):
            self.out.append(" | ")
        elif tag == "a":
            href = dict(attrs).get("href")
            self.links.append((href, len(self.out)))
        elif tag == "img":
            alt = (dict(attrs).get("alt") or "").strip()
            if alt:
                self.out.append(f"[image: {alt}]")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in _VOID_TAGS:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
            return
        if tag in _SKIP_TAGS:
            if self.skip:
                self.skip -= 1
            return
        if self.skip:
            return
        if tag == "pre" and self.pre:
            self.pre -= 1
        if tag in _BLOCK_TAGS or tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self.out.append("\n")
        elif tag == "a" and self.links:
            href, start = self.links.pop()
            text = "".join(self.out[start:]).strip()
            target = _link_target(self.base_url, href)
            if target and text:
                del self.out[start:]
                self.out.append(f"[{' '.join(text.split())}]({target})")

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title.append(data)
            return
        if self.skip:
            return
        self.out.append(data.translate(_PROTECT) if self.pre else _collapse(data))

    def text(self) -> str:
        lines = [line.strip() for line in "".join(self.out).split("\n")]
        cleaned: list[str] = []
        for line in lines:
            if line or (cleaned and cleaned[-1]):
                cleaned.append(line)
        body = "\n".join(cleaned).strip().translate(_RESTORE)
        title = " ".join("".join(self.title).split())
        return f"Title: {title}\n\n{body}" if title else body


def _collapse(data: str) -> str:
    if not data:
        return data
    collapsed = " ".join(data.split())
    if not collapsed:
        return " "
    lead = " " if data[0].isspace() else ""
    trail = " " if data[-1].isspace() else ""
    return lead + collapsed + trail


def _link_target(base: str, href: str | None) -> str | None:
    if not href:
        return None
    href = href.strip()
    if href.startswith("#") or href.lower().startswith(("javascript:", "data:")):
        return None
    return urljoin(base, href)


def html_to_text(html: str, base_url: str = "") -> str:
    """Readable text from HTML: scripts, styles and tags dropped; headings, lists and links kept.

    Args:
        html: The document.
        base_url: Where it came from (relative links are made absolute against it).

    Returns:
        The text, with a ``Title:`` line first when the document has a title.
    """
    parser = _TextExtractor(base_url)
    parser.feed(html)
    parser.close()
    return parser.text()
