"""HTTP fetch: the ``fetch_url`` tool, over aiohttp (imported when the tool first runs).

``toolkit.register(fetch_url)`` uses the default policy; ``toolkit.register(WebTools(allowed_hosts=
["docs.python.org"]))`` configures one. What the tool does:

- Only ``http`` and ``https`` URLs; ``GET`` only; no cookies kept between calls; proxies from the
  environment are ignored; URLs with credentials (``http://user@host/``) are refused.
- **One parse, the client's.** A URL is parsed once, with `yarl` (the parser aiohttp uses), and that
  parsed URL is what is requested, so the host checked is the host connected to. The host is
  normalised as the client uses it: IDNA 2008 with UTS-46 mapping (NFKC: fullwidth, circled and
  mathematical digits and letters, the full stops U+3002, U+FF0E, U+FF61 ...), lower case, trailing
  dots ignored. A host whose last label is a number is an IPv4 address in any spelling ``inet_aton``
  accepts (``127.1``, ``0x7f.1``, ``2130706433``, ``017700000001``) and is requested in dotted form;
  IPv6 literals are compared as addresses (``[0:0::1]`` is ``[::1]``; zone ids ignored). A host that
  cannot be normalised (invalid IDNA 2008 or bidi, percent-encoding or other stray characters, a
  number that is no IPv4 address) is refused with the reason.
- **SSRF guard** (``allow_private=True`` turns it off, for local services and tests): only globally
  routable addresses may be connected to. Refused: loopback, ``0.0.0.0/8``, RFC 1918, link-local
  (cloud metadata at 169.254.169.254), carrier-grade NAT, benchmarking, documentation, multicast
  and reserved ranges, unique-local and site-local IPv6, Teredo and local-use NAT64, and IPv6 forms
  that embed a refused IPv4 address (IPv4-mapped, -compatible and -translated, NAT64
  ``64:ff9b::/96``, 6to4). ``localhost`` names are refused by name.
- **At connect time.** Host names are looked up by a guarded resolver (DNS cache off) that refuses
  the whole answer if any address is refused, and every socket is checked, before it connects,
  against the very address it connects to (aiohttp's ``socket_factory``), IP literals included,
  which aiohttp does not send through the resolver. So DNS rebinding between check and connect
  cannot work, and `WebTools.connector` gives other aiohttp sessions the same guard.
- ``allowed_hosts`` (only these hosts and their subdomains; ``*`` globs allowed) and ``blocked_hosts``
  (never these) are normalised like URL hosts and compared on normalised names: a blocked
  ``localhost`` also blocks its fullwidth and upper-case spellings and ``localhost.``; an allowed
  ``example.org`` is not satisfied by a look-alike that normalises elsewhere. An IP entry (IPv6
  bracketed or not) matches every spelling of its address, and a glob over addresses (``10.*``)
  every address it covers; a blocked one also IPv6 forms embedding it, and the addresses host
  names resolve to (checked at connect time).
- The same check runs in ``check_permission``, so the permission engine denies a refused URL before
  the call runs (in every mode), and again on every redirect hop.
- Redirects: at most ``max_redirects`` hops. Limits: ``max_bytes`` of (decompressed) body, enforced
  while streaming, and ``timeout`` seconds for the whole fetch; the model may ask for less, or for
  more up to the tool's ``max_bytes_limit`` and ``max_timeout``.
- Content: HTML becomes readable text (scripts, styles and markup dropped; headings, list items and
  links kept as ``[text](url)``), JSON is pretty-printed, other text is returned as is, and other
  types get a one-line description instead of their bytes. A page is untrusted input: it is
  converted in a worker thread (never on the event loop), in time linear in its size whatever the
  markup, and the conversion stops when the fetch times out.
"""

from __future__ import annotations

import asyncio
import fnmatch
import inspect
import ipaddress
import json
import re
import socket
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from html import unescape
from typing import TYPE_CHECKING, Annotated, Any, TypeAlias
from urllib.parse import urljoin

from pydantic import Field

from agentrt.context import RuntimeContext
from agentrt.errors import ToolRetry, UserError
from agentrt.permission import PermissionDecision
from agentrt.tool.base import tool

if TYPE_CHECKING:
    import aiohttp
    from aiohappyeyeballs import AddrInfoType
    from aiohttp.abc import AbstractResolver, ResolveResult
    from yarl import URL

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
_INSTALL_HINT = "pip install 'agentrt[web]'"
_GLOB_CHARS = frozenset("*?[")
_LOCAL_NAMES = frozenset(
    {"localhost", "localhost.localdomain", "localhost6", "localhost6.localdomain6", "ip6-localhost", "ip6-loopback"}
)

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address


class WebTools:
    """The ``fetch_url`` tool with a host policy and limits (see the module docstring).

    Args:
        allowed_hosts: If given, only these hosts (and their subdomains) may be fetched.
            Entries are host names or IP addresses, optionally with ``*`` globs (``"*.example.org"``).
        blocked_hosts: Hosts (and their subdomains) or IP addresses that may never be fetched.
        allow_private: Allow loopback, private and link-local addresses (off: SSRF guard).
        max_redirects: Most redirect hops followed.
        max_bytes_limit: Largest ``max_bytes`` the model may ask for.
        max_timeout: Largest ``timeout`` the model may ask for.
        user_agent: The ``User-Agent`` header sent.
        resolver: An aiohttp resolver to look host names up with (default: the system's, through
            ``aiohttp.ThreadedResolver``); its answers are checked like any other. Not closed here.
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
        resolver: AbstractResolver | None = None,
    ) -> None:
        if max_redirects < 0 or max_bytes_limit < 1 or max_timeout <= 0:
            raise UserError("WebTools needs max_redirects >= 0, max_bytes_limit >= 1 and max_timeout > 0")
        self._allowed = None if allowed_hosts is None else tuple(_pattern(h, "allowed_hosts") for h in allowed_hosts)
        self._blocked = tuple(_pattern(h, "blocked_hosts") for h in blocked_hosts)
        self.allowed_hosts = None if self._allowed is None else tuple(p.text for p in self._allowed)
        self.blocked_hosts = tuple(p.text for p in self._blocked)
        self.allow_private = allow_private
        self.max_redirects = max_redirects
        self.max_bytes_limit = max_bytes_limit
        self.max_timeout = max_timeout
        self.user_agent = user_agent
        self.resolver = resolver
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

        HTML is converted to readable text with links as ``[text](url)``; JSON is pretty-printed; other
        binary content is described, not returned. Private and local network addresses are refused.

        Args:
            url: The http:// or https:// URL.
            max_bytes: Most bytes of the body to read; longer bodies are cut.
            timeout: Seconds allowed for the whole fetch, redirects included.
        """
        return await self.fetch(url, max_bytes=max_bytes, timeout=timeout)

    # -- policy -------------------------------------------------------------------------------------------
    def check_permission(self, args: Mapping[str, Any], ctx: RuntimeContext) -> PermissionDecision | None:
        """Deny URLs the policy refuses without a network lookup (the same check `fetch` makes per hop)."""
        url = args.get("url")
        if not isinstance(url, str):
            return None
        reason = self.refusal(url)
        return PermissionDecision.deny(reason) if reason is not None else None

    def refusal(self, url: str) -> str | None:
        """Why the policy refuses `url` before any DNS lookup, or None (host names resolve later)."""
        try:
            self._target(url)
        except _Refused as exc:
            return str(exc)
        return None

    def _target(self, url: str, base: URL | None = None) -> URL:
        """The URL to request for `url` (relative to `base`), or `_Refused` with the reason."""
        target, host, spelled = _parse_url(url, base)
        reason = self._host_refusal(host, spelled)
        if reason is not None:
            raise _Refused(reason)
        return target

    def _host_refusal(self, host: _Host, spelled: str | None = None) -> str | None:
        """Why the policy refuses a (normalised) host, or None; IP literals get the address check."""
        shown = repr(host.name) if spelled is None or spelled == host.name else f"{spelled!r} ({host.name})"
        if any(_matches(host, p, embedded=True) for p in self._blocked):
            return f"the host {shown} is blocked"
        if self._allowed is not None and not any(_matches(host, p, embedded=False) for p in self._allowed):
            return f"the host {shown} is not in the allowed hosts"
        if host.ip is not None:
            what = self._address_refusal(host.ip)
            return None if what is None else f"{shown} is {what}"
        if not self.allow_private and (host.name in _LOCAL_NAMES or host.name.endswith(".localhost")):
            return f"{shown} is a local host name"
        return None

    def _address_refusal(self, ip: IPAddress) -> str | None:
        """What makes `ip` refused ("a blocked address", "a private ... address (...)"), or None."""
        if any(_matches(_Host(ip.compressed, ip), p, embedded=True) for p in self._blocked):
            return "a blocked address"
        if not self.allow_private:
            why = _non_public(ip)
            if why is not None:
                return f"a private, loopback or link-local address ({why})"
        return None

    def connector(self) -> aiohttp.TCPConnector:
        """An aiohttp connector that refuses, at connect time, every address this policy refuses.

        Host names go through a guarded resolver (no DNS cache; names and answers checked, host
        lists included) and every socket is checked against the address it is about to connect to
        (IP literals against the host lists too), so a session built on it cannot reach a refused
        address whatever URL it is given. Scheme, credentials and redirects are `fetch`'s business.
        """
        return _Guard(self).connector()

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
        guard = _Guard(self)
        text, base = url.strip(), None
        current = text
        try:
            async with (
                asyncio.timeout(timeout),
                aiohttp.ClientSession(
                    connector=guard.connector(),
                    headers=headers,
                    trust_env=False,
                    cookie_jar=aiohttp.DummyCookieJar(),
                ) as session,
            ):
                for _hop in range(self.max_redirects + 1):
                    try:
                        target = self._target(text, base)
                    except _Refused as exc:
                        prefix = "" if base is None else f"redirected to {_shown(text, base)}: "
                        raise ToolRetry(f"Refused to fetch: {prefix}{exc}.") from None
                    current = str(target)
                    async with session.get(target, allow_redirects=False) as resp:
                        location = resp.headers.get("Location")
                        if resp.status in _REDIRECTS and location:
                            text, base = location.strip(), resp.url
                            continue
                        return await _render(resp, max_bytes)
                raise ToolRetry(f"Too many redirects (more than {self.max_redirects}) fetching {url}.")
        except TimeoutError:
            raise ToolRetry(f"Fetching {url} timed out after {timeout:g} s.") from None
        except (aiohttp.ClientError, _BlockedAddressError) as exc:
            if guard.refusals:
                raise ToolRetry(f"Refused to fetch {current}: {guard.refusals[-1]}.") from None
            if isinstance(exc, aiohttp.ClientConnectorError):
                raise ToolRetry(f"Could not connect to {current}: {exc.os_error or exc}.") from None
            if isinstance(exc, aiohttp.InvalidURL):
                raise ToolRetry(f"Invalid URL {str(exc.url)!r}.") from None
            raise ToolRetry(f"Fetching {current} failed: {type(exc).__name__}: {exc}.") from None


fetch_url = WebTools().fetch_url
"""``fetch_url`` with the default policy (public addresses only, no host lists)."""


# -- hosts ----------------------------------------------------------------------------------------------------
class _Refused(Exception):  # noqa: N818 - a refusal, with its reason as the message
    """A URL or host the policy refuses; the message says why."""


@dataclass(frozen=True, slots=True)
class _Host:
    """A host as the client connects to it: an IP address, or a lower-case ASCII name without trailing dots."""

    name: str
    ip: IPAddress | None = None


@dataclass(frozen=True, slots=True)
class _Pattern:
    """An ``allowed_hosts`` / ``blocked_hosts`` entry: a normalised host, or a glob over normalised names."""

    text: str
    host: _Host | None = None


_NUMBER_LABEL = re.compile(r"0x[0-9a-f]*|[0-9]+", re.IGNORECASE | re.ASCII)
_IPV4_PART = re.compile(r"0x[0-9a-f]*|0[0-7]*|[1-9][0-9]*", re.IGNORECASE | re.ASCII)
_LABEL = re.compile(r"[a-z0-9_-]{1,63}", re.ASCII)


def _parse_url(url: str, base: URL | None = None) -> tuple[URL, _Host, str]:
    """Parse `url` as aiohttp will (relative to `base`): the URL to request, its host, the host as spelled.

    Raises `_Refused` for what cannot be fetched: not http(s), no host, credentials, a host that
    does not normalise. A legacy IPv4 spelling is rewritten to dotted form, so the client connects
    to the address checked whatever its own parser makes of the spelling.
    """
    URL = _yarl_url()  # noqa: N806 - the class
    try:
        parsed = URL(url)
        original = URL(url, encoded=True)  # the host as written, before IDNA
        spelled = original.raw_host
        if base is not None:
            parsed = base.join(parsed)
    except UnicodeError as exc:  # before ValueError, its base class: IDNA failed both ways
        raise _Refused(f"{url!r} has a host that is not a valid internationalised domain name ({exc})") from None
    except (ValueError, TypeError) as exc:
        raise _Refused(f"{url!r} is not a valid URL ({exc})") from None
    if parsed.scheme not in ("http", "https"):
        scheme = parsed.scheme or "a URL without scheme"
        raise _Refused(f"only http and https URLs may be fetched, not {scheme!r}")
    raw = parsed.raw_host
    if not raw:
        raise _Refused(f"{url!r} has no host")
    authority = (parsed.raw_authority or "") + (original.raw_authority or "")
    if "@" in authority:
        raise _Refused(f"{url!r} has credentials (user@host) in it; they are not allowed")
    if "[" in (original.raw_authority or "") and ":" not in raw:
        raise _Refused(f"{url!r} has a bracketed host that is not an IPv6 address")
    if spelled is not None and not spelled.isascii():
        _check_idna(spelled, raw)
    host = _canonical_host(raw)
    if host.ip is not None and host.ip.version == 4 and raw != host.name:
        parsed = parsed.with_host(host.name)
    return parsed, host, spelled if spelled is not None else raw


def _check_idna(spelled: str, encoded: str) -> None:
    """Refuse a Unicode host that strict IDNA 2008 (UTS-46) rejects or maps elsewhere than the client did."""
    idna = _idna()
    try:
        strict = idna.encode(spelled, uts46=True).decode("ascii")
    except UnicodeError as exc:
        raise _Refused(f"the host {spelled!r} is not a valid internationalised domain name ({exc})") from None
    if strict.lower() != encoded.lower():
        raise _Refused(f"the host {spelled!r} does not normalise unambiguously ({strict!r} or {encoded!r})")


def _canonical_host(raw: str) -> _Host:
    """The `_Host` for a host as the URL parser left it (already IDNA-encoded); `_Refused` if invalid."""
    raw = raw.lower()
    if ":" in raw:
        address = raw.partition("%")[0]
        try:
            ip6 = ipaddress.IPv6Address(address)
        except ValueError:
            raise _Refused(f"{raw!r} is not a valid IPv6 address") from None
        return _Host(ip6.compressed, ip6)
    if "%" in raw:
        raise _Refused(f"{raw!r} is percent-encoded; a host must be spelled out")
    name = raw.rstrip(".")
    if not name:
        raise _Refused(f"{raw!r} is not a host")
    if len(name) > 253:
        raise _Refused(f"the host {raw[:40]!r}... is too long")
    labels = name.split(".")
    if _NUMBER_LABEL.fullmatch(labels[-1]):
        ip4 = _parse_ipv4(name)
        if ip4 is None:
            raise _Refused(f"{raw!r} looks like an IPv4 address but is not a valid one")
        return _Host(str(ip4), ip4)
    for label in labels:
        if not _LABEL.fullmatch(label):
            raise _Refused(f"{raw!r} is not a valid host name")
        if label.startswith("xn--"):
            idna = _idna()
            try:
                valid = idna.encode(idna.decode(label)).decode("ascii") == label
            except UnicodeError:
                valid = False
            if not valid:
                raise _Refused(f"{raw!r} is not a valid internationalised domain name ({label!r})")
    return _Host(name)


def _parse_ipv4(text: str) -> ipaddress.IPv4Address | None:
    """The address ``inet_aton`` reads in `text` (1 to 4 decimal, octal or hex parts), or None."""
    parts = text.split(".")
    if len(parts) > 4 or not all(_IPV4_PART.fullmatch(part) for part in parts):
        return None
    numbers = [
        int(part[2:] or "0", 16) if part[:2].lower() == "0x" else int(part, 8) if part[0] == "0" else int(part)
        for part in parts
    ]
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (4 - len(head)):
        return None
    value = last
    for i, n in enumerate(head):
        value |= n << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


def _pattern(entry: str, what: str) -> _Pattern:
    """Normalise a host-list entry like a URL host (globs: label by label); `UserError` if it is not one."""
    text = entry.strip()
    ipv6_literal = text.startswith("[") and text.endswith("]") and ":" in text  # "[::1]" is no glob class
    if not ipv6_literal and any(c in _GLOB_CHARS for c in text):
        idna = _idna()
        try:
            mapped = idna.uts46_remap(text, std3_rules=False, transitional=False)
            labels = [
                label if label.isascii() else idna.alabel(label).decode("ascii")
                for label in mapped.rstrip(".").split(".")
            ]
        except UnicodeError as exc:
            raise UserError(f"{what} entry {entry!r} is not a valid host pattern ({exc})") from None
        return _Pattern(".".join(labels).lower())
    bracketed = f"[{text}]" if ":" in text and not text.startswith("[") else text
    try:
        parsed, host, _ = _parse_url(f"http://{bracketed}/")
    except _Refused as exc:
        raise UserError(f"{what} entry {entry!r} is not a host name or IP address: {exc}") from None
    if parsed.explicit_port is not None or parsed.raw_path != "/" or parsed.raw_query_string or parsed.raw_fragment:
        raise UserError(f"{what} entry {entry!r} must be a host name or IP address only (no port or path)")
    return _Pattern(host.name, host)


def _matches(host: _Host, pattern: _Pattern, *, embedded: bool) -> bool:
    """Whether `host` is `pattern`, a subdomain of it, or (IPs) the same address, `embedded` forms too.

    A glob is matched against the name, and for an IP against every address it stands for: a
    blocked ``10.*`` also blocks ``[::ffff:10.0.0.1]`` (and, `embedded`, ``[64:ff9b::a00:1]``).
    """
    if pattern.host is None:
        names = {host.name} if host.ip is None else {host.name, *(a.compressed for a in _aliases(host.ip, embedded))}
        return any(fnmatch.fnmatchcase(name, pattern.text) for name in names)
    if pattern.host.ip is not None:
        return host.ip is not None and bool(_aliases(host.ip, embedded) & _aliases(pattern.host.ip, False))
    return host.ip is None and (host.name == pattern.text or host.name.endswith("." + pattern.text))


def _shown(text: str, base: URL) -> str:
    """A redirect target for messages: absolute if it parses, as sent otherwise."""
    try:
        return str(base.join(_yarl_url()(text)))
    except (ValueError, TypeError, UnicodeError):
        return text


# -- addresses ----------------------------------------------------------------------------------------------
_V4_SPECIAL = tuple(
    (ipaddress.IPv4Network(net), what)
    for net, what in (
        ("0.0.0.0/8", "'this network', 0.0.0.0/8"),
        ("10.0.0.0/8", "private, 10.0.0.0/8"),
        ("100.64.0.0/10", "carrier-grade NAT, 100.64.0.0/10"),
        ("127.0.0.0/8", "loopback, 127.0.0.0/8"),
        ("169.254.0.0/16", "link-local, 169.254.0.0/16"),
        ("172.16.0.0/12", "private, 172.16.0.0/12"),
        ("192.0.0.0/24", "IETF protocol assignments, 192.0.0.0/24"),
        ("192.0.2.0/24", "documentation, 192.0.2.0/24"),
        ("192.88.99.0/24", "6to4 relay anycast, 192.88.99.0/24"),
        ("192.168.0.0/16", "private, 192.168.0.0/16"),
        ("198.18.0.0/15", "benchmarking, 198.18.0.0/15"),
        ("198.51.100.0/24", "documentation, 198.51.100.0/24"),
        ("203.0.113.0/24", "documentation, 203.0.113.0/24"),
        ("224.0.0.0/4", "multicast, 224.0.0.0/4"),
        ("240.0.0.0/4", "reserved, 240.0.0.0/4"),
    )
)
_V6_SPECIAL = tuple(
    (ipaddress.IPv6Network(net), what)
    for net, what in (
        ("::/128", "unspecified, ::"),
        ("::1/128", "loopback, ::1"),
        ("::/96", "IPv4-compatible, ::/96"),
        ("64:ff9b:1::/48", "local-use NAT64, 64:ff9b:1::/48"),
        ("100::/64", "discard-only, 100::/64"),
        ("2001::/23", "IETF protocol assignments (Teredo ...), 2001::/23"),
        ("2001:db8::/32", "documentation, 2001:db8::/32"),
        ("3fff::/20", "documentation, 3fff::/20"),
        ("5f00::/16", "segment routing, 5f00::/16"),
        ("fc00::/7", "unique-local, fc00::/7"),
        ("fe80::/10", "link-local, fe80::/10"),
        ("fec0::/10", "site-local, fec0::/10"),
        ("ff00::/8", "multicast, ff00::/8"),
    )
)
_SIIT = ipaddress.IPv6Network("::ffff:0:0:0/96")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_COMPATIBLE = ipaddress.IPv6Network("::/96")


def is_public_address(address: str) -> bool:
    """Whether an IP address is globally routable (not private, loopback, link-local, reserved, multicast).

    IPv6 forms that embed an IPv4 address (mapped, translated, NAT64, 6to4) are public only if that
    address is; the text must be a plain IP address (``fe80::1%eth0`` is accepted, ``127.1`` is not).
    """
    ip = _strict_ip(address)
    return ip is not None and _non_public(ip) is None


def _strict_ip(text: str) -> IPAddress | None:
    """`text` as a canonical numeric IP address (a zone id ignored), or None: nothing a resolver would look up."""
    try:
        return ipaddress.ip_address(text.partition("%")[0])
    except ValueError:
        return None


def _non_public(ip: IPAddress) -> str | None:
    """What makes `ip` not globally routable ("loopback, 127.0.0.0/8"), or None if it is."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:  # the same endpoint, reached over IPv4
            why = _non_public(ip.ipv4_mapped)
            return None if why is None else f"IPv4-mapped {ip.ipv4_mapped}: {why}"
        for embedded, how in _embedded_ipv4(ip):
            why = _non_public(embedded)
            if why is not None:
                return f"{how} {embedded}: {why}"
    special = _V4_SPECIAL if isinstance(ip, ipaddress.IPv4Address) else _V6_SPECIAL
    for network, what in special:
        if ip in network:
            return what
    if (
        not ip.is_global
        or ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
    ):
        return "not globally routable"
    return None


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[tuple[ipaddress.IPv4Address, str]]:
    """IPv4 addresses an IPv6 address carries (translated, NAT64, 6to4, Teredo, compatible), with how."""
    low32 = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    found: list[tuple[ipaddress.IPv4Address, str]] = []
    if ip in _SIIT:
        found.append((low32, "IPv4-translated"))
    if ip in _NAT64:
        found.append((low32, "NAT64"))
    if ip in _COMPATIBLE and int(ip) > 1:
        found.append((low32, "IPv4-compatible"))
    if ip.sixtofour is not None:
        found.append((ip.sixtofour, "6to4"))
    if ip.teredo is not None:
        found.extend((address, "Teredo") for address in ip.teredo)
    return found


def _aliases(ip: IPAddress, embedded: bool) -> set[IPAddress]:
    """`ip` and the IPv4 address it is mapped from; with `embedded`, every IPv4 address it carries."""
    out: set[IPAddress] = {ip}
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            out.add(ip.ipv4_mapped)
        if embedded:
            out.update(address for address, _ in _embedded_ipv4(ip))
    return out


# -- connect-time guard ---------------------------------------------------------------------------------------
class _BlockedAddressError(OSError):
    """Raised by the guarded resolver and socket factory; aiohttp wraps it in a `ClientConnectorError`."""


class _Guard:
    """The connect-time half of a policy: a resolver and a socket factory that refuse what it refuses.

    `refusals` records every refusal, so `fetch` reports the reason even when aiohttp merges errors.
    """

    def __init__(self, policy: WebTools) -> None:
        self.policy = policy
        self.refusals: list[str] = []
        self._resolved: set[IPAddress] = set()

    def _refuse(self, reason: str) -> _BlockedAddressError:
        self.refusals.append(reason)
        return _BlockedAddressError(reason)

    def connector(self) -> aiohttp.TCPConnector:
        client = _aiohttp()
        if "socket_factory" not in inspect.signature(client.TCPConnector.__init__).parameters:
            raise UserError(f"fetch_url needs aiohttp >= 3.12 (for its connect-time address check): {_INSTALL_HINT}")
        connector: aiohttp.TCPConnector = client.TCPConnector(
            resolver=_guarded_resolver(self),
            use_dns_cache=False,
            socket_factory=self.socket_factory,
        )
        return connector

    async def resolve(
        self, inner: AbstractResolver, host: str, port: int, family: socket.AddressFamily
    ) -> list[ResolveResult]:
        """Look `host` up with `inner`; refuse the name by policy, or the answer if any address is refused."""
        try:
            named = _canonical_host(host)
        except _Refused as exc:
            raise self._refuse(str(exc)) from None
        reason = self.policy._host_refusal(named)
        if reason is not None:
            raise self._refuse(reason)
        results = await inner.resolve(host, port, family)
        for result in results:
            ip = _strict_ip(result["host"])
            what = "not a numeric address" if ip is None else self.policy._address_refusal(ip)
            if what is not None:
                raise self._refuse(f"{host!r} resolves to {result['host']}, {what}")
        self._resolved.update(ip for result in results if (ip := _strict_ip(result["host"])) is not None)
        return results

    def socket_factory(self, addr_info: AddrInfoType) -> socket.socket:
        """A socket for `addr_info`, after checking the address it will connect to (IP literals included)."""
        family, type_, proto, _, sockaddr = addr_info
        ip = _strict_ip(str(sockaddr[0]))
        if ip is None:
            raise self._refuse(f"{sockaddr[0]!r} is not a numeric address")
        if ip in self._resolved:  # its name passed the host policy in `resolve`
            what = self.policy._address_refusal(ip)
            reason = None if what is None else f"{ip} is {what}"
        else:  # an IP literal: aiohttp did not ask the resolver
            reason = self.policy._host_refusal(_Host(ip.compressed, ip))
        if reason is not None:
            raise self._refuse(reason)
        return socket.socket(family=family, type=type_, proto=proto)


def _guarded_resolver(guard: _Guard) -> AbstractResolver:
    import aiohttp
    from aiohttp.abc import AbstractResolver

    class GuardedResolver(AbstractResolver):
        """Resolves with the policy's resolver (default: threaded), through `_Guard.resolve`."""

        def __init__(self) -> None:
            self._own = guard.policy.resolver is None
            self._inner = aiohttp.ThreadedResolver() if guard.policy.resolver is None else guard.policy.resolver

        async def resolve(
            self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
        ) -> list[ResolveResult]:
            return await guard.resolve(self._inner, host, port, family)

        async def close(self) -> None:
            if self._own:
                await self._inner.close()

    return GuardedResolver()


def _aiohttp() -> Any:
    try:
        import aiohttp
    except ImportError:  # pragma: no cover - depends on the environment
        raise UserError(f"fetch_url needs aiohttp: {_INSTALL_HINT}") from None
    return aiohttp


def _yarl_url() -> type[URL]:
    try:
        from yarl import URL
    except ImportError:  # pragma: no cover - depends on the environment
        raise UserError(f"fetch_url needs aiohttp and yarl: {_INSTALL_HINT}") from None
    return URL


def _idna() -> Any:
    try:
        import idna
    except ImportError:  # pragma: no cover - depends on the environment
        raise UserError(f"fetch_url needs idna: {_INSTALL_HINT}") from None
    return idna


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
    cancelled = threading.Event()
    try:  # megabytes of markup take seconds of Python: never on the event loop
        text = await asyncio.to_thread(
            _body_text, bytes(body), resp.charset or "utf-8", mime, truncated, str(resp.url), cancelled
        )
    except asyncio.CancelledError:  # the fetch timed out or was interrupted: the worker stops early
        cancelled.set()
        raise
    header.append(f"Content-Type: {mime or 'unknown'}")
    if truncated:
        header.append(f"[body cut at {max_bytes} bytes" + (f" of {length}]" if length is not None else "]"))
    return "\n".join(header) + "\n\n" + text


def _body_text(body: bytes, charset: str, mime: str, truncated: bool, url: str, cancelled: threading.Event) -> str:
    """The text shown for a body: HTML converted, JSON pretty-printed, other text as is (in a worker thread)."""
    try:
        text = body.decode(charset, errors="replace")
    except LookupError:
        text = body.decode("utf-8", errors="replace")
    if mime in ("text/html", "application/xhtml+xml") or (mime == "" and "<html" in text[:2000].lower()):
        return _html_text(text, url, cancelled)
    if (mime == "application/json" or mime.endswith("+json")) and not truncated:
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except (ValueError, RecursionError):  # not JSON, or nested too deep to re-indent: shown as sent
            pass
    return text


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


class _TextExtractor:
    """Builds the readable text from the tags and text `_Tokenizer` reports."""

    def __init__(self, base_url: str) -> None:
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
            while self.links:  # links do not nest (as in browsers): a new one closes the open one
                self._close_link()
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
            self._close_link()

    def _close_link(self) -> None:
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

    Linear in the size of `html`, whatever the markup (`html.parser` is quadratic on some malformed
    input, such as many unclosed ``<a `` tags, and a fetched page is untrusted).

    Args:
        html: The document.
        base_url: Where it came from (relative links are made absolute against it).

    Returns:
        The text, with a ``Title:`` line first when the document has a title.
    """
    return _html_text(html, base_url, None)


def _html_text(html: str, base_url: str, cancelled: threading.Event | None) -> str:
    sink = _TextExtractor(base_url)
    _Tokenizer(html, sink, cancelled).run()
    return sink.text()


_TAG_NAME = re.compile(r"[a-zA-Z][^\s/<>]*")
_ATTRIBUTE = re.compile(r"""([^\s"'<>/=]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+)))?""")
_RAW_TEXT_END = {name: re.compile(f"</{name}", re.IGNORECASE | re.ASCII) for name in ("script", "style")}
_CHECK_EVERY = 1024


class _Tokenizer:
    """A forgiving HTML tokenizer that reads the document once, reporting tags and text to a `_TextExtractor`.

    Every search moves forward (the next ``>`` is remembered), so a document of unclosed tags,
    comments or quotes costs no more than a well-formed one. A tag ends at the next ``>`` (a ``>``
    inside a quoted attribute value ends it early); markup that never ends is dropped. `cancelled`
    is checked as it goes, so a fetch that timed out stops its worker thread.
    """

    def __init__(self, html: str, sink: _TextExtractor, cancelled: threading.Event | None) -> None:
        self.html = html
        self.sink = sink
        self.cancelled = cancelled
        self.pending: list[str] = []  # text since the last tag, unescaped as one piece (like convert_charrefs)
        self._gt = -2  # the next ">" at or after the last search (-1: none left, -2: not searched yet)

    def run(self) -> None:
        html, i, steps = self.html, 0, 0
        while i < len(html):
            steps += 1
            if steps % _CHECK_EVERY == 0 and self.cancelled is not None and self.cancelled.is_set():
                return
            lt = html.find("<", i)
            if lt < 0:
                self.pending.append(html[i:])
                break
            self.pending.append(html[i:lt])
            i = self._markup(lt)
        self._flush()

    def _next_gt(self, start: int) -> int:
        if self._gt == -2 or 0 <= self._gt < start:
            self._gt = self.html.find(">", start)
        return self._gt

    def _flush(self) -> None:
        if self.pending:
            text = unescape("".join(self.pending))
            self.pending.clear()
            if text:
                self.sink.handle_data(text)

    def _markup(self, lt: int) -> int:
        """Handle the markup starting with the ``<`` at `lt`; where to go on."""
        html = self.html
        after = html[lt + 1 : lt + 2]
        if html.startswith("<!--", lt):
            end = html.find("-->", lt + 4)
            return len(html) if end < 0 else end + 3
        closing = after == "/"
        named = _TAG_NAME.match(html, lt + 2 if closing else lt + 1)
        if named is None and after not in ("!", "?", "/"):
            self.pending.append("<")  # a lone "<" is text
            return lt + 1
        gt = self._next_gt(lt)
        if gt < 0:  # no tag ends anywhere after this one: the rest is unfinished markup
            return len(html)
        if named is None:  # <!doctype ...>, <?xml ...?>, </ ...>: nothing to show
            return gt + 1
        self._flush()
        name = named.group().lower()
        if closing:
            self.sink.handle_endtag(name)
            return gt + 1
        return self._start_tag(name, html[named.end() : gt], gt + 1)

    def _start_tag(self, name: str, rest: str, after: int) -> int:
        attrs = [
            (m.group(1).lower(), None if m.lastindex == 1 else unescape(m.group(m.lastindex or 1)))
            for m in _ATTRIBUTE.finditer(rest)
        ]
        if rest.rstrip().endswith("/"):
            self.sink.handle_startendtag(name, attrs)
            return after
        self.sink.handle_starttag(name, attrs)
        end_pattern = _RAW_TEXT_END.get(name)
        if end_pattern is None:
            return after
        end = end_pattern.search(self.html, after)  # script and style: raw text up to their end tag
        self.sink.handle_data(self.html[after : len(self.html) if end is None else end.start()])
        self.sink.handle_endtag(name)
        if end is None:
            return len(self.html)
        gt = self._next_gt(end.end())
        return len(self.html) if gt < 0 else gt + 1
