"""fetch_url against a real local aiohttp server: content handling, limits, redirects and the SSRF guard."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
import socket
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from agentrt.context import RuntimeContext
from agentrt.errors import ToolRetry, UserError
from agentrt.message import ToolUseBlock
from agentrt.permission import Decision, PermissionContext, PermissionEngine, PermissionMode
from agentrt.tool import Toolkit
from agentrt.tool.builtin import WebTools, fetch_url
from agentrt.tool.builtin.web import html_to_text, is_public_address

PAGE = """<!doctype html>
<html><head><title>Test  page</title>
<style>body { color: red; }</style>
<script>var secret = "do not show";</script>
</head>
<body>
<nav><a href="/home">Home</a> | <a href="javascript:void(0)">Menu</a></nav>
<h1>Main   title</h1>
<p>Some <b>bold</b> text and a <a href="docs/intro.html">relative link</a>.</p>
<ul><li>first</li><li>second &amp; last</li></ul>
<pre>  keep
    spacing</pre>
<noscript>enable js</noscript>
<img src="x.png" alt="a chart">
</body></html>"""


@pytest.fixture
async def server() -> AsyncIterator[str]:
    async def html(_: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html")

    async def data(_: web.Request) -> web.Response:
        return web.json_response({"name": "agentrt", "tags": ["a", "b"], "nested": {"ok": True}})

    async def big(_: web.Request) -> web.Response:
        return web.Response(text="x" * 2_000_000, content_type="text/plain")

    async def endless(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        try:
            for _ in range(10_000):  # 640 MB if nobody stopped reading
                await resp.write(b"y" * 65_536)
        except (ConnectionResetError, ConnectionError):
            pass
        return resp

    async def slow(_: web.Request) -> web.Response:
        await asyncio.sleep(10)
        return web.Response(text="late")

    async def binary(_: web.Request) -> web.Response:
        return web.Response(body=b"\x89PNG\r\n\x1a\n" + bytes(1000), content_type="image/png")

    async def redirect(_: web.Request) -> web.Response:
        raise web.HTTPFound("/html")

    async def loop(_: web.Request) -> web.Response:
        raise web.HTTPFound("/loop")

    async def to_blocked(_: web.Request) -> web.Response:
        raise web.HTTPFound("http://blocked.invalid/")

    async def to_file(_: web.Request) -> web.Response:
        raise web.HTTPFound("file:///etc/passwd")

    async def missing(_: web.Request) -> web.Response:
        return web.Response(status=404, text="no such page", content_type="text/plain")

    app = web.Application()
    for path, handler in (
        ("/html", html),
        ("/json", data),
        ("/big", big),
        ("/endless", endless),
        ("/slow", slow),
        ("/png", binary),
        ("/redirect", redirect),
        ("/loop", loop),
        ("/to-blocked", to_blocked),
        ("/to-file", to_file),
        ("/missing", missing),
    ):
        app.router.add_get(path, handler)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.fixture
def local() -> WebTools:
    return WebTools(allow_private=True)


def decide(web_tools: WebTools, url: str, mode: PermissionMode = PermissionMode.DEFAULT) -> Decision:
    engine = PermissionEngine(PermissionContext(mode=mode))
    call = ToolUseBlock(id="call_1", name="fetch_url", input={"url": url})
    return engine.check(web_tools.fetch_url, call, RuntimeContext()).decision


# -- content ------------------------------------------------------------------------------------------------
async def test_html_becomes_readable_text(local: WebTools, server: str) -> None:
    out = await local.fetch(f"{server}/html")
    header, body = out.split("\n\n", 1)
    assert header.splitlines() == [f"URL: {server}/html", "Status: 200 OK", "Content-Type: text/html"]
    assert body.startswith("Title: Test page\n")
    assert "# Main title" in body
    assert "Some bold text and a [relative link](" + server + "/docs/intro.html)." in body
    assert f"[Home]({server}/home)" in body
    assert "- first" in body and "- second & last" in body
    assert "  keep\n    spacing" in body
    assert "[image: a chart]" in body
    for hidden in ("color: red", "do not show", "enable js", "javascript:", "<p>", "<b>"):
        assert hidden not in body


async def test_json_is_pretty_printed(local: WebTools, server: str) -> None:
    out = await local.fetch(f"{server}/json")
    body = out.split("\n\n", 1)[1]
    assert json.loads(body) == {"name": "agentrt", "tags": ["a", "b"], "nested": {"ok": True}}
    assert '\n  "tags": [\n    "a",' in body


async def test_binary_content_is_described_not_returned(local: WebTools, server: str) -> None:
    out = await local.fetch(f"{server}/png")
    assert out.endswith("(Binary content: image/png, 1008 bytes; not shown.)")
    assert "PNG" not in out.split("\n\n", 1)[1].replace("image/png", "")


async def test_error_status_is_reported(local: WebTools, server: str) -> None:
    out = await local.fetch(f"{server}/missing")
    assert "Status: 404 Not Found" in out and out.endswith("no such page")


async def test_through_the_tool_interface(local: WebTools, server: str) -> None:
    toolkit = Toolkit()
    toolkit.register(local)
    t = toolkit.get("fetch_url")
    assert t is not None and t.read_only and not t.destructive
    out = await t.invoke({"url": f"{server}/json"}, RuntimeContext())
    assert '"name": "agentrt"' in out


# -- limits ---------------------------------------------------------------------------------------------------
async def test_size_limit_is_enforced_while_streaming(local: WebTools, server: str) -> None:
    out = await local.fetch(f"{server}/big", max_bytes=1000)
    header, body = out.split("\n\n", 1)
    assert body == "x" * 1000
    assert "[body cut at 1000 bytes of 2000000]" in header
    out = await asyncio.wait_for(local.fetch(f"{server}/endless", max_bytes=200_000), 10)
    assert out.split("\n\n", 1)[1] == "y" * 200_000


async def test_model_cannot_exceed_the_configured_limits(server: str) -> None:
    capped = WebTools(allow_private=True, max_bytes_limit=500)
    out = await capped.fetch(f"{server}/big", max_bytes=10_000_000)
    assert out.split("\n\n", 1)[1] == "x" * 500


async def test_time_limit(local: WebTools, server: str) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(ToolRetry, match=r"timed out after 0\.5 s"):
        await local.fetch(f"{server}/slow", timeout=0.5)
    assert loop.time() - started < 3


async def test_redirects_are_followed_and_limited(local: WebTools, server: str) -> None:
    out = await local.fetch(f"{server}/redirect")
    assert out.startswith(f"URL: {server}/html\n")
    with pytest.raises(ToolRetry, match="Too many redirects"):
        await local.fetch(f"{server}/loop")
    with pytest.raises(ToolRetry, match="Too many redirects"):
        await WebTools(allow_private=True, max_redirects=0).fetch(f"{server}/redirect")


async def test_every_redirect_hop_is_checked(server: str) -> None:
    policy = WebTools(allow_private=True, blocked_hosts=["blocked.invalid"])
    with pytest.raises(
        ToolRetry, match=re.escape("redirected to http://blocked.invalid/: the host 'blocked.invalid' is blocked")
    ):
        await policy.fetch(f"{server}/to-blocked")
    with pytest.raises(ToolRetry, match="only http and https"):
        await policy.fetch(f"{server}/to-file")


# -- SSRF guard and policy --------------------------------------------------------------------------------------
async def test_private_addresses_are_refused_without_allow_private(server: str) -> None:
    with pytest.raises(ToolRetry, match="private, loopback or link-local"):
        await WebTools().fetch(f"{server}/html")
    with pytest.raises(ToolRetry, match="private, loopback or link-local"):
        await fetch_url.invoke({"url": f"{server}/html"}, RuntimeContext())
    port = server.rsplit(":", 1)[1]
    with pytest.raises(ToolRetry, match="local host name"):
        await WebTools().fetch(f"http://localhost:{port}/html")


async def test_names_resolving_to_private_addresses_are_refused(server: str) -> None:
    host = socket.gethostname()
    try:
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
    except OSError:
        pytest.skip("the host name does not resolve")
    if not any(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses):
        pytest.skip("the host name does not resolve to loopback here")
    port = server.rsplit(":", 1)[1]
    url = f"http://{host}:{port}/json"
    assert WebTools().refusal(url) is None  # nothing to see before DNS
    with pytest.raises(ToolRetry, match=r"resolves to .*private, loopback or link-local"):
        await WebTools().fetch(url)
    assert '"name": "agentrt"' in await WebTools(allow_private=True).fetch(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://10.0.0.1/",
        "http://192.168.1.1/admin",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]:8080/",
        "http://[::ffff:127.0.0.1]/",
        "http://[fe80::1]/",
        "http://0.0.0.0/",
        "http://100.64.0.1/",
        "http://127.1/",
        "http://2130706433/",
        "http://0x7f.0.0.1/",
        "http://localhost/",
        "http://api.localhost/",
    ],
)
@pytest.mark.parametrize("mode", [PermissionMode.DEFAULT, PermissionMode.BYPASS, PermissionMode.EXPLORE])
def test_engine_denies_private_literals_and_local_names(url: str, mode: PermissionMode) -> None:
    assert decide(WebTools(), url, mode) is Decision.DENY
    assert decide(WebTools(allow_private=True), url, mode) is Decision.ALLOW


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/x", "gopher://x", "example.com/page", ""])
async def test_non_http_schemes_are_refused(url: str) -> None:
    assert decide(WebTools(allow_private=True), url) is Decision.DENY
    with pytest.raises(ToolRetry, match="Refused to fetch"):
        await WebTools(allow_private=True).fetch(url)


def test_host_lists() -> None:
    policy = WebTools(allowed_hosts=["example.com", "*.python.org"], blocked_hosts=["bad.example.com"])
    assert policy.refusal("https://example.com/x") is None
    assert policy.refusal("https://docs.example.com/x") is None
    assert policy.refusal("https://EXAMPLE.com./x") is None
    assert policy.refusal("https://docs.python.org/3/") is None
    assert "not in the allowed hosts" in (policy.refusal("https://evil.com/") or "")
    assert "not in the allowed hosts" in (policy.refusal("https://example.com.evil.com/") or "")
    assert "blocked" in (policy.refusal("https://bad.example.com/") or "")
    assert "blocked" in (policy.refusal("https://x.bad.example.com/") or "")
    assert decide(policy, "https://evil.com/") is Decision.DENY
    assert decide(policy, "https://example.com/") is Decision.ALLOW


def test_is_public_address() -> None:
    assert is_public_address("93.184.216.34")
    assert is_public_address("2606:2800:220:1:248:1893:25c8:1946")
    for address in ("127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.0.1", "169.254.169.254", "0.0.0.0", "::1"):
        assert not is_public_address(address), address
    for address in ("fe80::1%eth0", "fc00::1", "::ffff:10.0.0.1", "2002:7f00:1::", "224.0.0.1", "not an ip"):
        assert not is_public_address(address), address


def test_configuration_errors() -> None:
    with pytest.raises(UserError):
        WebTools(max_redirects=-1)


def test_html_to_text_handles_broken_markup() -> None:
    text = html_to_text("<p>unclosed <b>bold<div>block</p><script>x()", base_url="https://a.test/")
    assert "unclosed bold" in text and "block" in text and "x()" not in text


def test_import_agentrt_does_not_import_aiohttp() -> None:
    code = "import sys, agentrt; from agentrt.tool import builtin; print('aiohttp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
