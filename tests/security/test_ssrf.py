# ruff: noqa: RUF001 - look-alike characters are what these tests are about
"""SSRF guard of the web fetch tool: every spelling of a refused address, checked by its side effect.

A loopback server counts the requests it gets, and the event loop's ``sock_connect`` is replaced by a
test network that records every connection attempt, lets loopback through (so a guard failure shows
up as a hit), routes a few public-looking addresses to local servers (a fake internet) and refuses
everything else (the real network is never reached).
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import idna
import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt.context import RuntimeContext
from agentrt.errors import ToolRetry, UserError
from agentrt.message import ToolUseBlock
from agentrt.permission import Decision, PermissionContext, PermissionEngine, PermissionMode
from agentrt.tool.builtin import WebTools

PUBLIC = "93.184.215.14"  # a public-looking address; the test network routes it to a local server
MODES = (PermissionMode.DEFAULT, PermissionMode.BYPASS, PermissionMode.EXPLORE, PermissionMode.DONT_ASK)


# -- test network -----------------------------------------------------------------------------------------
@dataclass
class Server:
    """A local HTTP server that counts the requests it gets, by path."""

    port: int
    hits: Counter[str] = field(default_factory=Counter)
    ipv6: bool = False  # also listening on ::1

    @property
    def total(self) -> int:
        return sum(self.hits.values())


@dataclass
class Net:
    """The test network: every connection attempt, and routes from (public address, port) to local ports."""

    attempts: list[tuple[str, int]] = field(default_factory=list)
    routes: dict[tuple[str, int], int] = field(default_factory=dict)


def _reaches_this_host(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_unspecified


@pytest.fixture
async def net(monkeypatch: pytest.MonkeyPatch) -> Net:
    loop = asyncio.get_running_loop()
    real = loop.sock_connect
    state = Net()

    async def sock_connect(sock: socket.socket, address: Any) -> None:
        host, port = str(address[0]), int(address[1])
        state.attempts.append((host, port))
        ip = ipaddress.ip_address(host.partition("%")[0])
        if (ip.compressed, port) in state.routes and sock.family == socket.AF_INET:
            return await real(sock, ("127.0.0.1", state.routes[ip.compressed, port]))
        if _reaches_this_host(ip):
            return await real(sock, address)
        raise ConnectionRefusedError(f"test network: {host} is not reachable")

    monkeypatch.setattr(loop, "sock_connect", sock_connect)
    return state


async def _serve(app: web.Application, server: Server, *, ipv6: bool) -> web.AppRunner:
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    server.port = int(runner.addresses[0][1])
    if ipv6:
        try:
            await web.TCPSite(runner, "::1", server.port).start()
            server.ipv6 = True
        except OSError:  # no IPv6 here: the IPv6 spellings are still refused, just not hit-tested
            pass
    return runner


def _counting_app(server: Server, routes: dict[str, Callable[[web.Request], web.StreamResponse]]) -> web.Application:
    async def handle(request: web.Request) -> web.StreamResponse:
        server.hits[request.path] += 1
        handler = routes.get(request.path)
        if handler is None:
            return web.Response(text="secret", content_type="text/plain")
        return handler(request)

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handle)
    return app


@pytest.fixture
async def secret() -> AsyncIterator[Server]:
    """The loopback server an SSRF would reach, on 127.0.0.1 and (if it can) ::1, same port."""
    server = Server(0)
    runner = await _serve(_counting_app(server, {}), server, ipv6=True)
    try:
        yield server
    finally:
        await runner.cleanup()


@pytest.fixture
async def public(net: Net, secret: Server) -> AsyncIterator[Server]:
    """A "public" server: ``PUBLIC`` on the secret server's port (and on its own port) routes here.

    ``/redirect?to=URL`` answers 302 to URL; ``/redirect-close?to=URL`` does too, and closes the
    connection, so the next hop to the same host needs a new connection (and a new lookup).
    """

    def redirect(request: web.Request) -> web.StreamResponse:
        return web.Response(status=302, headers={"Location": request.query["to"]})

    def redirect_close(request: web.Request) -> web.StreamResponse:
        resp = web.Response(status=302, headers={"Location": request.query["to"], "Connection": "close"})
        resp.force_close()
        return resp

    server = Server(0)
    app = _counting_app(server, {"/redirect": redirect, "/redirect-close": redirect_close})
    runner = await _serve(app, server, ipv6=False)
    net.routes[PUBLIC, secret.port] = server.port
    net.routes[PUBLIC, server.port] = server.port
    try:
        yield server
    finally:
        await runner.cleanup()


class MapResolver(AbstractResolver):
    """A resolver from a table (never the real DNS): a host's n-th lookup gets its n-th answer (the last repeats)."""

    def __init__(self, answers: dict[str, list[list[str]]]) -> None:
        self.answers = answers
        self.calls: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.calls.append(host)
        if host.rstrip(".") not in self.answers:
            raise OSError(f"test resolver: no such host {host!r}")
        sequence = self.answers[host.rstrip(".")]
        answer = sequence[min(self.calls.count(host) - 1, len(sequence) - 1)]
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for address in answer
        ]

    async def close(self) -> None:
        pass


def decide(tools: WebTools, url: str, mode: PermissionMode) -> Decision:
    engine = PermissionEngine(PermissionContext(mode=mode))
    call = ToolUseBlock(id="call_1", name="fetch_url", input={"url": url})
    return engine.check(tools.fetch_url, call, RuntimeContext()).decision


async def assert_refused(tools: WebTools, url: str, secret: Server, net: Net) -> None:
    """`url` is refused by the permission check and by `fetch`, and nothing was connected to."""
    assert tools.refusal(url) is not None, url
    for mode in MODES:
        assert decide(tools, url, mode) is Decision.DENY, (url, mode)
    with pytest.raises(ToolRetry, match="Refused to fetch"):
        await tools.fetch(url)
    assert secret.total == 0, url
    assert net.attempts == [], url


# -- spellings of refused addresses ------------------------------------------------------------------------
def _loopback_spellings(port: int) -> list[str]:
    p = port
    return [
        # Unicode that IDNA (UTS-46, NFKC) maps to ASCII
        f"http://１２７.０.０.１:{p}/",
        f"http://127。0。0。1:{p}/",
        f"http://127．0．0．1:{p}/",
        f"http://127｡0｡0｡1:{p}/",
        f"http://①②⑦.⓪.⓪.①:{p}/",
        f"http://𝟏𝟐𝟕.𝟎.𝟎.𝟏:{p}/",
        f"http://𝟙𝟚𝟟.𝟘.𝟘.𝟙:{p}/",
        f"http://１２７。１:{p}/",
        f"http://０ｘ７ｆ.１:{p}/",
        f"http://０Ｘ７Ｆ．０．０．１:{p}/",
        f"http://ｌｏｃａｌｈｏｓｔ:{p}/",
        f"http://ＬＯＣＡＬＨＯＳＴ。:{p}/",
        # inet_aton spellings
        f"http://127.1:{p}/",
        f"http://127.0.1:{p}/",
        f"http://0x7f.1:{p}/",
        f"http://0X7F.0.0.1:{p}/",
        f"http://0x7f000001:{p}/",
        f"http://2130706433:{p}/",
        f"http://017700000001:{p}/",
        f"http://0177.0.0.01:{p}/",
        f"http://00177.0x0.0.1:{p}/",
        f"http://0:{p}/",
        f"http://0.0.0.0:{p}/",
        f"http://0x0:{p}/",
        # trailing dots, case
        f"http://127.0.0.1.:{p}/",
        f"http://127.1..:{p}/",
        f"http://LOCALHOST.:{p}/",
        f"http://localhost..:{p}/",
        f"http://LocalHost:{p}/",
        f"http://api.LOCALHOST:{p}/",
        f"HTTP://127.0.0.1:{p}/",
        # IPv6 literals
        f"http://[::1]:{p}/",
        f"http://[0:0:0:0:0:0:0:1]:{p}/",
        f"http://[0000:0000:0000:0000:0000:0000:0000:0001]:{p}/",
        f"http://[::]:{p}/",
        f"http://[::ffff:127.0.0.1]:{p}/",
        f"http://[::FFFF:7F00:1]:{p}/",
        f"http://[0:0:0:0:0:ffff:127.0.0.1]:{p}/",
        f"http://[::ffff:0.0.0.0]:{p}/",
        f"http://[::127.0.0.1]:{p}/",
        f"http://[::ffff:0:127.0.0.1]:{p}/",
        f"http://[64:ff9b::127.0.0.1]:{p}/",
        f"http://[2002:7f00:1::]:{p}/",
        f"http://[::1%25lo]:{p}/",
        f"http://[fe80::1%25lo]:{p}/",
        # syntax tricks
        f"http://%31%32%37.0.0.1:{p}/",
        f"http://127.0.0.1%2e:{p}/",
        f"http://example.org@127.0.0.1:{p}/",
        f"http://example.org:80@127.0.0.1:{p}/",
        f"http://127.0.0.1:{p}\\@example.org/",
        f"http://127.0.0.1\\@example.org:{p}/",
        f"http://[v1.127.0.0.1]:{p}/",
        f"http://127.0.0.1\u200b:{p}/",
        f"http://127.0.0.1.5:{p}/",
        f"http://256.0.0.1:{p}/",
    ]


async def test_control_the_secret_server_is_reachable(secret: Server, net: Net) -> None:
    """The hit counter works, and the client does map these spellings to loopback."""
    local = WebTools(allow_private=True)
    for n, url in enumerate(
        [
            f"http://127.0.0.1:{secret.port}/",
            f"http://１２７.０.０.１:{secret.port}/",
            f"http://①②⑦.0.0.1:{secret.port}/",
            f"http://0x7f.1:{secret.port}/",
            f"http://0:{secret.port}/",
            f"http://[::ffff:127.0.0.1]:{secret.port}/",
        ],
        start=1,
    ):
        assert "secret" in await local.fetch(url)
        assert secret.total == n, url


@pytest.mark.parametrize("index", range(len(_loopback_spellings(1))))
async def test_loopback_spellings_are_refused(index: int, secret: Server, net: Net) -> None:
    url = _loopback_spellings(secret.port)[index]
    await assert_refused(WebTools(), url, secret, net)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://☃.net/", "not a valid internationalised domain name"),
        ("http://xn--zz.com/", "not a valid internationalised domain name"),
        ("http://xn--n3h.net/", "not a valid internationalised domain name"),
        ("http://a\u05d0.com/", "not a valid internationalised domain name"),  # bidi: LTR and RTL in a label
        ("http://\u05d0\u0661\u06f1.com/", "not a valid internationalised domain name"),  # mixed digit kinds
        ("http://%65xample.org/", "percent-encoded"),
        ("http://1.2.3.4.5/", "not a valid one"),
        ("http://example.0x1/", "not a valid one"),
        ("http://exa_mple!.org/", "not a valid host name"),
        ("http://exa mple.org/", "not a valid"),
        ("http://user:pw@example.org/", "credentials"),
        ("http://[::ffff:0177.0.0.1]/", "not a valid IPv6 address"),
    ],
)
def test_hosts_that_do_not_normalise_are_refused_with_a_reason(url: str, reason: str) -> None:
    for tools in (WebTools(), WebTools(allow_private=True)):
        assert reason in (tools.refusal(url) or ""), url
        assert decide(tools, url, PermissionMode.BYPASS) is Decision.DENY


# -- generated spellings ----------------------------------------------------------------------------------
def _equivalents(ascii_char: str) -> list[str]:
    """Characters UTS-46 maps to `ascii_char` (fullwidth, mathematical, circled, super/subscript ...)."""
    candidates = {ascii_char, ascii_char.upper()}
    if ascii_char.isdigit():
        d = int(ascii_char)
        starts: tuple[int, ...] = (0xFF10, 0x1D7CE, 0x1D7D8, 0x1D7E2, 0x1D7EC, 0x1D7F6, 0x2080, 0x2070, 0x1FBF0)
        candidates |= {chr(start + d) for start in starts}
        candidates |= {"⓪" if d == 0 else chr(0x2460 + d - 1), {1: "¹", 2: "²", 3: "³"}.get(d, "")}
    else:
        i = ord(ascii_char) - ord("a")
        starts = (0xFF41, 0xFF21, 0x1D41A, 0x1D400, 0x1D5BA, 0x1D68A, 0x24D0, 0x24B6)
        candidates |= {chr(start + i) for start in starts}
    out = []
    for c in sorted(candidates - {""}):
        try:
            if idna.uts46_remap(c, std3_rules=False, transitional=False) == ascii_char:
                out.append(c)
        except idna.IDNAError:
            pass
    return out


EQUIVALENTS = {c: _equivalents(c) for c in "0123456789abcdefx"}
DOTS = [".", "\u3002", "\uff0e", "\uff61"]
assert all(len(v) >= 4 for v in EQUIVALENTS.values()), EQUIVALENTS

V4_NETWORKS = [
    ipaddress.IPv4Network(n)
    for n in ("127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "100.64.0.0/10")
]
V6_NETWORKS = [ipaddress.IPv6Network(n) for n in ("::1/128", "fc00::/7", "fe80::/10")]


def _in(network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> st.SearchStrategy[Any]:
    return st.integers(0, network.num_addresses - 1).map(lambda i: network[i])


@st.composite
def _number(draw: st.DrawFn, n: int) -> str:
    """`n` in decimal, octal (leading zeros) or hex (either case)."""
    style = draw(st.sampled_from(["dec", "oct", "hex"]))
    if style == "dec":
        return str(n)
    if style == "oct":
        return "0" * draw(st.integers(1, 3)) + (f"{n:o}" if n else "")
    digits = "0" * draw(st.integers(0, 2)) + f"{n:x}"
    digits = "".join(c.upper() if draw(st.booleans()) else c for c in digits)
    return draw(st.sampled_from(["0x", "0X"])) + digits


@st.composite
def _unicode(draw: st.DrawFn, text: str) -> str:
    """`text` with some characters swapped for Unicode ones that normalise back to them."""
    if not draw(st.booleans()):
        return text
    return "".join(draw(st.sampled_from(EQUIVALENTS[c.lower()])) if c.lower() in EQUIVALENTS else c for c in text)


@st.composite
def ipv4_spellings(draw: st.DrawFn, address: ipaddress.IPv4Address) -> str:
    """A host ``inet_aton`` reads as `address`: 1 to 4 parts, each in any base, any dots, maybe a trailing one."""
    octets = list(address.packed)
    count = draw(st.integers(1, 4))
    numbers = [*octets[: count - 1], int.from_bytes(bytes(octets[count - 1 :]), "big")]
    parts = [draw(_number(n)) for n in numbers]
    text = parts[0]
    for part in parts[1:]:
        text += draw(st.sampled_from(DOTS)) + part
    text += draw(st.sampled_from(["", "", *DOTS]))
    return str(draw(_unicode(text)))


@st.composite
def ipv6_spellings(draw: st.DrawFn, address: ipaddress.IPv6Address) -> str:
    """`address` as a URL host: compressed, exploded or unpadded, dotted tail, any case, maybe a zone id."""
    hextets = address.exploded.split(":")
    style = draw(st.sampled_from(["compressed", "exploded", "unpadded", "dotted"]))
    if style == "compressed":
        text = address.compressed
    elif style == "exploded":
        text = address.exploded
    elif style == "unpadded":
        text = ":".join(h.lstrip("0") or "0" for h in hextets)
    else:
        text = ":".join(hextets[:6]) + ":" + str(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    text = "".join(c.upper() if draw(st.booleans()) else c for c in text)
    if address.is_link_local and draw(st.booleans()):
        text += "%25" + draw(st.sampled_from(["eth0", "lo", "1"]))
    return f"[{text}]"


@st.composite
def refused_hosts(draw: st.DrawFn) -> str:
    """A spelling of a loopback, private, link-local or CGNAT address, IPv4 or IPv6, plain or embedded in IPv6."""
    kind = draw(st.sampled_from(["v4", "v6", "embedded"]))
    if kind == "v4":
        return str(draw(ipv4_spellings(draw(st.sampled_from(V4_NETWORKS).flatmap(_in)))))
    if kind == "v6":
        return str(draw(ipv6_spellings(draw(st.sampled_from(V6_NETWORKS).flatmap(_in)))))
    v4 = int(draw(st.sampled_from(V4_NETWORKS).flatmap(_in)))
    wrapper = draw(st.sampled_from(["mapped", "nat64", "6to4"]))
    prefix = {"mapped": 0xFFFF << 32, "nat64": 0x64FF9B << 96, "6to4": 0x2002 << 112}[wrapper]
    value = prefix | (v4 << 80 if wrapper == "6to4" else v4)
    return str(draw(ipv6_spellings(ipaddress.IPv6Address(value))))


@settings(max_examples=200, deadline=None)
@given(host=refused_hosts(), port=st.sampled_from(["", ":80", ":8080"]), scheme=st.sampled_from(["http", "HTTPS"]))
def test_generated_spellings_are_denied_by_the_permission_check(host: str, port: str, scheme: str) -> None:
    url = f"{scheme}://{host}{port}/path"
    assert WebTools(allow_private=True).refusal(url) is None, url  # a valid spelling ...
    reason = WebTools().refusal(url)  # ... of an address the guard refuses
    assert reason is not None and "private, loopback or link-local" in reason, (url, reason)
    decision = WebTools().check_permission({"url": url}, RuntimeContext())
    assert decision is not None and decision.decision is Decision.DENY


LOOPBACK_TARGETS = [
    ipaddress.ip_address(a) for a in ("127.0.0.1", "0.0.0.0", "::1", "::", "::ffff:127.0.0.1", "::ffff:0.0.0.0")
]


@st.composite
def loopback_hosts(draw: st.DrawFn) -> str:
    address = draw(st.sampled_from(LOOPBACK_TARGETS))
    if isinstance(address, ipaddress.IPv4Address):
        return str(draw(ipv4_spellings(address)))
    return str(draw(ipv6_spellings(address)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(host=loopback_hosts())
async def test_generated_loopback_spellings_are_never_fetched(host: str, secret: Server, net: Net) -> None:
    url = f"http://{host}:{secret.port}/"
    before, attempts = secret.total, len(net.attempts)
    with pytest.raises(ToolRetry, match="Refused to fetch"):
        await WebTools().fetch(url)
    assert (secret.total, len(net.attempts)) == (before, attempts), url
    # Control: the same spelling does reach the server when private addresses are allowed.
    if secret.ipv6 or "::ffff:" in host.lower() or not host.startswith("["):
        assert "secret" in await WebTools(allow_private=True).fetch(url)
        assert secret.total == before + 1, url


# -- connect time: redirects, DNS rebinding, IP literals ----------------------------------------------------
def _via(public: Server, secret: Server, target: str, path: str = "/redirect") -> str:
    """A URL on the public host that redirects to `target`."""
    return f"http://public.example:{secret.port}{path}?to={target}"


async def test_control_the_public_host_is_reachable(public: Server, secret: Server, net: Net) -> None:
    resolver = MapResolver({"public.example": [[PUBLIC]]})
    out = await WebTools(resolver=resolver).fetch(f"http://public.example:{secret.port}/hello")
    assert "secret" in out and public.hits["/hello"] == 1
    assert net.attempts == [(PUBLIC, secret.port)] and secret.total == 0


@pytest.mark.parametrize(
    "target",
    [
        "http://０x7f.1:{port}/",
        "http://127。0。0。1:{port}/",
        "http://2130706433:{port}/",
        "http://[::ffff:7f00:1]:{port}/",
        "http://[::1]:{port}/",
        "http://0:{port}/",
        "http://ｌｏｃａｌｈｏｓｔ:{port}/",
        "http://loopback.example:{port}/",  # resolves to 127.0.0.1
        "//127.1:{port}/",
        "http://public.example@127.0.0.1:{port}/",
    ],
)
async def test_a_redirect_to_loopback_is_refused_at_the_hop(
    target: str, public: Server, secret: Server, net: Net
) -> None:
    resolver = MapResolver({"public.example": [[PUBLIC]], "loopback.example": [["127.0.0.1"]]})
    tools = WebTools(resolver=resolver)
    url = _via(public, secret, target.format(port=secret.port))
    assert tools.refusal(url) is None  # the first hop is fine
    # a literal is refused by the per-hop URL check, a name by the guarded resolver
    expected = "resolves to 127.0.0.1" if "loopback.example" in target else "Refused to fetch: redirected to "
    with pytest.raises(ToolRetry, match=re.escape(expected)):
        await tools.fetch(url)
    assert public.hits["/redirect"] == 1  # the first hop was made ...
    assert secret.total == 0  # ... the second never reached loopback
    assert all(host == PUBLIC for host, _ in net.attempts), net.attempts


async def test_dns_rebinding_between_connections_never_reaches_loopback(
    public: Server, secret: Server, net: Net
) -> None:
    """The first lookup says public, every later one loopback; a redirect forces a second connection."""
    resolver = MapResolver({"public.example": [[PUBLIC], ["127.0.0.1"]]})
    tools = WebTools(resolver=resolver)
    url = _via(public, secret, "/next", path="/redirect-close")
    with pytest.raises(ToolRetry, match=r"resolves to 127\.0\.0\.1"):
        await tools.fetch(url)
    assert public.hits["/redirect-close"] == 1 and secret.total == 0
    assert resolver.calls == ["public.example", "public.example"]  # one lookup per connection, each checked
    assert net.attempts == [(PUBLIC, secret.port)]
    with pytest.raises(ToolRetry, match="Refused to fetch"):  # and a later call is refused too
        await tools.fetch(f"http://public.example:{secret.port}/")
    assert secret.total == 0 and len(net.attempts) == 1


async def test_an_answer_with_any_refused_address_is_refused_whole(secret: Server, net: Net) -> None:
    resolver = MapResolver({"mixed.example": [[PUBLIC, "127.0.0.1"]], "v6.example": [["::ffff:127.0.0.1"]]})
    for host in ("mixed.example", "v6.example"):
        with pytest.raises(ToolRetry, match="resolves to"):
            await WebTools(resolver=resolver).fetch(f"http://{host}:{secret.port}/")
    assert secret.total == 0 and net.attempts == []


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/",
        "http://[::1]:{port}/",
        "http://[::ffff:127.0.0.1]:{port}/",
        "http://0.0.0.0:{port}/",
        "http://localhost:{port}/",
    ],
)
async def test_the_connector_refuses_at_connect_time_without_the_url_check(url: str, secret: Server, net: Net) -> None:
    """A plain aiohttp session on `WebTools.connector` (no URL check at all) cannot reach loopback either."""
    async with aiohttp.ClientSession(connector=WebTools().connector()) as session:
        with pytest.raises(aiohttp.ClientError):
            await session.get(url.format(port=secret.port))
    assert secret.total == 0 and net.attempts == []


# -- host lists ------------------------------------------------------------------------------------------
@st.composite
def localhost_spellings(draw: st.DrawFn) -> str:
    """``localhost`` with any case, fullwidth letters, and trailing (Unicode) dots."""
    text = "".join(
        chr(ord(c) - ord("a") + draw(st.sampled_from([ord("a"), ord("A"), 0xFF41, 0xFF21]))) for c in "localhost"
    )
    return text + draw(st.sampled_from(["", ".", "..", "\u3002", "\uff0e", "\uff61"]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(host=localhost_spellings())
async def test_blocked_localhost_blocks_every_spelling(host: str, secret: Server, net: Net) -> None:
    tools = WebTools(allow_private=True, blocked_hosts=["localhost"])
    url = f"http://{host}:{secret.port}/"
    reason = tools.refusal(url)
    assert reason is not None, url
    assert decide(tools, url, PermissionMode.BYPASS) is Decision.DENY
    with pytest.raises(ToolRetry, match="Refused to fetch"):
        await tools.fetch(url)
    assert secret.total == 0 and net.attempts == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(host=st.one_of(ipv4_spellings(ipaddress.IPv4Address("127.0.0.1")), st.just("[::ffff:7f00:1]")))
async def test_a_blocked_address_blocks_every_spelling(host: str, secret: Server, net: Net) -> None:
    tools = WebTools(allow_private=True, blocked_hosts=["127.0.0.1"])
    url = f"http://{host}:{secret.port}/"
    assert "blocked" in (tools.refusal(url) or ""), url
    with pytest.raises(ToolRetry, match="Refused to fetch"):
        await tools.fetch(url)
    assert secret.total == 0 and net.attempts == []


async def test_a_blocked_address_blocks_names_resolving_to_it(secret: Server, net: Net) -> None:
    resolver = MapResolver({"alias.example": [["127.0.0.1"]]})
    tools = WebTools(allow_private=True, blocked_hosts=["１２７.０.０.１"], resolver=resolver)
    with pytest.raises(ToolRetry, match="blocked"):
        await tools.fetch(f"http://alias.example:{secret.port}/")
    assert secret.total == 0 and net.attempts == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    host=st.one_of(
        ipv4_spellings(ipaddress.IPv4Address("127.0.0.1")),
        ipv6_spellings(ipaddress.IPv6Address("::ffff:127.0.0.1")),
        ipv6_spellings(ipaddress.IPv6Address("64:ff9b::127.0.0.1")),
    ),
    entry=st.sampled_from(["127.*", "127.0.0.*", "127.?.0.1", "１２７.*"]),
)
async def test_a_blocked_address_glob_blocks_every_spelling(host: str, entry: str, secret: Server, net: Net) -> None:
    """A glob over IPv4 addresses also covers the IPv6 forms embedding them, in URLs and in DNS answers."""
    resolver = MapResolver({"alias.example": [["::ffff:127.0.0.1"]]})
    tools = WebTools(allow_private=True, blocked_hosts=[entry], resolver=resolver)
    for url in (f"http://{host}:{secret.port}/", f"http://alias.example:{secret.port}/"):
        with pytest.raises(ToolRetry, match="blocked"):
            await tools.fetch(url)
    assert "blocked" in (tools.refusal(f"http://{host}/") or ""), host
    assert secret.total == 0 and net.attempts == []


@pytest.mark.parametrize("entry", ["[::1]", "[0:0:0:0:0:0:0:1]", " [::1] ", "::1"])
async def test_a_bracketed_ipv6_entry_is_an_address_not_a_glob(entry: str, secret: Server, net: Net) -> None:
    """``[::1]`` in a host list is the address ::1 (not the fnmatch class of ':' and '1')."""
    tools = WebTools(allow_private=True, blocked_hosts=[entry])
    assert tools.blocked_hosts == ("::1",)
    for host in ("[::1]", "[0::1]", "[0:0:0:0:0:0:0:1]"):
        with pytest.raises(ToolRetry, match="blocked"):
            await tools.fetch(f"http://{host}:{secret.port}/")
    assert secret.total == 0 and net.attempts == []
    allowed = WebTools(allow_private=True, allowed_hosts=[entry])
    assert allowed.refusal(f"http://[::1]:{secret.port}/") is None
    assert allowed.refusal(f"http://127.0.0.1:{secret.port}/") is not None


def test_blocked_and_allowed_hosts_compare_normalised_names() -> None:
    blocked = WebTools(blocked_hosts=["ＥＸＡＭＰＬＥ。org", "bücher.example"])
    assert blocked.blocked_hosts == ("example.org", "xn--bcher-kva.example")
    for url in (
        "https://example.org/",
        "https://EXAMPLE.ORG./",
        "https://ｅｘａｍｐｌｅ．ｏｒｇ/",
        "https://www.example.org/",
        "https://BÜCHER.example/",
        "https://xn--bcher-kva.example/",
    ):
        assert "blocked" in (blocked.refusal(url) or ""), url
    assert blocked.refusal("https://example.com/") is None

    allowed = WebTools(allowed_hosts=["example.org", "*.python.org"])
    for url in (
        "https://example.org/",
        "https://ＥＸＡＭＰＬＥ.org./",
        "https://docs.python.org/",
        "https://docs.ｐｙｔｈｏｎ.org/",
    ):
        assert allowed.refusal(url) is None, url
    for url in (
        "https://exаmple.org/",  # Cyrillic a: another name, normalised to xn--
        "https://examp1e.org/",
        "https://example.org.evil.com/",
        "https://evilexample.org/",
        "https://example.org@evil.com/",
        "https://evil.com#@example.org/",
        "https://evil.com\\@example.org/",
        "https://example.org\u3002evil.com/",
        "https://93.184.215.14/",
    ):
        assert allowed.refusal(url) is not None, url


def test_invalid_host_list_entries_are_configuration_errors() -> None:
    for entry in ("☃.net", "example.org:8080", "example.org/path", "user@example.org", "1.2.3.4.5"):
        with pytest.raises(UserError):
            WebTools(blocked_hosts=[entry])


# -- public hosts still pass ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "url",
    [
        "https://docs.python.org/3/",
        "http://bücher.example/",
        "https://EXAMPLE.com./x",
        "http://example.com:8080/a?b#c",
        "http://93.184.215.14/",
        "http://1572394766/",  # 93.184.215.14 as one number
        "http://[2606:2800:220:1:248:1893:25c8:1946]/",
        "http://[::ffff:93.184.215.14]/",
        "https://xn--bcher-kva.example/",
        "http://a_b.example.org/",
    ],
)
def test_public_hosts_pass_the_check(url: str) -> None:
    assert WebTools().refusal(url) is None
    assert decide(WebTools(), url, PermissionMode.DEFAULT) is not Decision.DENY


async def test_the_client_is_given_the_normalised_host(public: Server, secret: Server, net: Net) -> None:
    """``bücher.example`` is looked up as ``xn--bcher-kva.example``; a legacy IPv4 spelling is requested dotted."""
    resolver = MapResolver({"xn--bcher-kva.example": [[PUBLIC]]})
    out = await WebTools(resolver=resolver).fetch(f"http://BÜCHER.example:{secret.port}/hello")
    assert resolver.calls == ["xn--bcher-kva.example"] and public.hits["/hello"] == 1
    assert out.startswith(f"URL: http://xn--bcher-kva.example:{secret.port}/hello")
    out = await WebTools().fetch(f"http://1572394766:{secret.port}/hello")
    assert out.startswith(f"URL: http://{PUBLIC}:{secret.port}/hello") and public.hits["/hello"] == 2
    assert secret.total == 0
