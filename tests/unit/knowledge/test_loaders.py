"""Loaders on real files written by the tests: Markdown, HTML, PDF (fpdf2), DOCX (python-docx), URLs."""

from __future__ import annotations

import io
import os
import socket
import threading
import time
import zipfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from agentrt.knowledge import Knowledge, MemoryKnowledgeStore, loaders
from agentrt.knowledge.loaders import (
    MAX_EXTRACTOR_HTML_BYTES,
    FileTooLargeError,
    LoadError,
    Target,
    expand,
    file_source,
    load,
    load_bytes,
    load_file,
    load_text,
    text_source,
)
from agentrt.tool.builtin import WebTools

HTML_PAGE = """<!doctype html>
<html><head><title>Widget manual | ACME</title></head>
<body>
<nav><a href="/">Home</a> | <a href="/products">Products</a> | <a href="/cart">Cart</a> navmenuword</nav>
<header><div class="banner">Subscribe to our newsletter bannerword</div></header>
<main><article>
<h1>Installing the widget</h1>
<p>The widget installs with one command on every supported Linux distribution, and the whole process
takes under a minute on a typical machine.</p>
<h2>On Debian</h2>
<p>Use apt to install the frobnicator package from the main repository, then restart the service so
that it picks up the new configuration file.</p>
</article></main>
<footer>Copyright 2024 ACME Corporation. All rights reserved. footerword Privacy policy.</footer>
</body></html>
"""


def make_pdf(pages: list[str]) -> bytes:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_title("Quarterly report")
    pdf.set_font("Helvetica", size=12)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 8, text)
    return bytes(pdf.output())


def make_docx(path: Path) -> None:
    import docx

    document = docx.Document()
    document.add_heading("Employee handbook", level=0)
    document.add_heading("Holidays", level=1)
    document.add_paragraph("Every employee has twenty-five days of paid holiday per year.")
    document.add_heading("Carry over", level=2)
    document.add_paragraph("Up to five unused days carry over to the next year.")
    document.add_paragraph("Ask your manager first", style="List Bullet")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text = "Region"
    table.cell(0, 1).text = "Days"
    table.cell(1, 0).text = "EU"
    table.cell(1, 1).text = "25"
    document.save(str(path))


def test_markdown_keeps_its_text_and_first_heading_as_title(tmp_path: Path) -> None:
    path = tmp_path / "guide.md"
    path.write_text("Preamble.\n\n# The guide\n\nBody text.\n", encoding="utf-8")
    loaded = load_file(path)
    assert loaded.kind == "markdown"
    assert loaded.title == "The guide"
    assert loaded.text == path.read_text(encoding="utf-8")
    assert loaded.source == path.resolve().as_posix()
    assert loaded.pages is None


def test_plain_text_and_unknown_text_files(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("just some notes", encoding="utf-8")
    (tmp_path / "data.weird").write_bytes("plain text with an odd suffix é".encode())
    assert load_file(tmp_path / "notes.txt").title == "notes"
    odd = load_file(tmp_path / "data.weird")
    assert odd.kind == "text" and "odd suffix é" in odd.text
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02binary")
    with pytest.raises(LoadError, match="binary"):
        load_file(tmp_path / "blob.bin")


def test_html_main_content_without_the_boilerplate(tmp_path: Path) -> None:
    path = tmp_path / "page.html"
    path.write_text(HTML_PAGE, encoding="utf-8")
    loaded = load_file(path)
    assert loaded.kind == "html"
    assert "frobnicator" in loaded.text and "one command" in loaded.text
    for boilerplate in ("navmenuword", "footerword", "bannerword"):
        assert boilerplate not in loaded.text, f"{boilerplate} is page chrome, not content"
    assert "# Installing the widget" in loaded.text and "## On Debian" in loaded.text, "headings stay Markdown"
    assert loaded.title in ("Installing the widget", "Widget manual | ACME")


def test_html_falls_back_to_the_builtin_converter_without_trafilatura(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    real = importlib.import_module

    def no_trafilatura(name: str, package: str | None = None) -> object:
        if name == "trafilatura":
            raise ImportError("no trafilatura here")
        return real(name, package)

    monkeypatch.setattr("agentrt.knowledge.loaders.importlib.import_module", no_trafilatura)
    loaded = load_bytes(HTML_PAGE.encode(), source="page", name="page.html")
    assert "frobnicator" in loaded.text
    assert loaded.title == "Widget manual | ACME"
    assert "<p>" not in loaded.text


def test_pdf_pages_keep_their_numbers(tmp_path: Path) -> None:
    path = tmp_path / "report.pdf"
    path.write_bytes(make_pdf(["Revenue grew in the first quarter.", "Costs fell sharply.", "Outlook is stable."]))
    loaded = load_file(path)
    assert loaded.kind == "pdf" and loaded.title == "Quarterly report"
    assert loaded.pages is not None and len(loaded.pages) == 3
    assert "Revenue" in loaded.pages[0] and "Costs" in loaded.pages[1] and "Outlook" in loaded.pages[2]
    assert loaded.metadata == {"pages": 3}


def test_broken_and_encrypted_pdfs_raise_load_errors(tmp_path: Path) -> None:
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.7\nthis is not really a pdf at all\n")
    with pytest.raises(LoadError):
        load_file(broken)
    import pypdf

    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(make_pdf(["Secret text."]))))
    writer.encrypt(user_password="hunter2", algorithm="RC4-128")
    locked = io.BytesIO()
    writer.write(locked)
    with pytest.raises(LoadError, match="encrypted"):
        load_bytes(locked.getvalue(), source="locked", name="locked.pdf")


def test_docx_headings_become_markdown_headings(tmp_path: Path) -> None:
    path = tmp_path / "handbook.docx"
    make_docx(path)
    loaded = load_file(path)
    assert loaded.kind == "docx"
    assert loaded.title == "Employee handbook"
    assert "# Employee handbook" in loaded.text
    assert "\n# Holidays\n" in loaded.text and "\n## Carry over\n" in loaded.text
    assert "- Ask your manager first" in loaded.text
    assert "Region | Days" in loaded.text and "EU | 25" in loaded.text
    (tmp_path / "fake.docx").write_bytes(b"PK\x03\x04 not a real docx")
    with pytest.raises(LoadError, match="DOCX"):
        load_file(tmp_path / "fake.docx")


def test_file_size_cap(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    path.write_text("x" * 2000, encoding="utf-8")
    with pytest.raises(FileTooLargeError):
        load_file(path, max_bytes=1000)
    assert load_file(path, max_bytes=2000).text == "x" * 2000


def test_missing_file_and_empty_text(tmp_path: Path) -> None:
    with pytest.raises(LoadError, match="no such file"):
        load_file(tmp_path / "absent.md")
    (tmp_path / "empty.md").write_text("  \n", encoding="utf-8")
    with pytest.raises(LoadError, match="no text"):
        load_file(tmp_path / "empty.md")
    with pytest.raises(LoadError, match="empty"):
        load_text("   ")


def test_expand_walks_folders_skipping_hidden_and_unsupported(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("a", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("b", encoding="utf-8")
    (tmp_path / "sub" / "image.png").write_bytes(b"\x89PNG")
    (tmp_path / ".hidden.md").write_text("h", encoding="utf-8")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config.txt").write_text("g", encoding="utf-8")
    targets, skipped = expand(tmp_path)
    assert [t.source for t in targets] == [file_source(tmp_path / "a.md"), file_source(tmp_path / "sub" / "b.txt")]
    assert skipped == [file_source(tmp_path / "sub" / "image.png")]


def test_expand_tells_paths_urls_and_texts_apart(tmp_path: Path) -> None:
    (tmp_path / "doc.md").write_text("x", encoding="utf-8")
    assert expand(str(tmp_path / "doc.md"))[0] == [
        Target("file", str(tmp_path / "doc.md"), file_source(tmp_path / "doc.md"))
    ]
    assert expand("https://example.org/a.html")[0] == [
        Target("url", "https://example.org/a.html", "https://example.org/a.html")
    ]
    text = "Some words that are not a path."
    assert expand(text)[0] == [Target("text", text, text_source(text))]
    assert expand(text, "my-note")[0] == [Target("text", text, "my-note")]
    missing = expand(str(tmp_path / "typo.md"))[0]
    assert missing[0].kind == "file", "a single word with a document suffix is a missing file, not a text"
    assert text_source(text).startswith("text:") and len(text_source(text)) == 5 + 16
    long_word = "y" * 300  # too long for a file name: a text, not an error
    assert expand(long_word)[0] == [Target("text", long_word, text_source(long_word))]


async def test_a_broken_pdf_is_reported_and_the_rest_of_the_batch_goes_in(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "guide.md").write_text("# Guide\n\nThe guide explains the frobnicator.\n", encoding="utf-8")
    (folder / "page.html").write_text(HTML_PAGE, encoding="utf-8")
    (folder / "report.pdf").write_bytes(make_pdf(["Page one about apples.", "Page two about pears.", "Three."]))
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4 garbage without any objects")
    make_docx(folder / "handbook.docx")
    (folder / "photo.jpg").write_bytes(b"\xff\xd8\xff")
    store = MemoryKnowledgeStore()
    seen: list[tuple[int, int, str]] = []
    async with Knowledge("docs", store=store) as kb:
        report = await kb.add(folder, progress=lambda done, total, source: seen.append((done, total, source)))
        assert [source for source, _ in report.failed] == [file_source(folder / "broken.pdf")]
        assert {Path(s).name for s in report.added} == {"guide.md", "page.html", "report.pdf", "handbook.docx"}
        assert report.skipped == (file_source(folder / "photo.jpg"),)
        assert [done for done, _, _ in seen] == [1, 2, 3, 4, 5] and {total for _, total, _ in seen} == {5}
        hits = await kb.search("pears")
        assert hits and hits[0].location == "page 2" and hits[0].title == "Quarterly report"
        hits = await kb.search("unused days carry over")
        assert hits and hits[0].location == "Holidays > Carry over"
        assert len(await kb.documents()) == 4


def test_a_symlink_out_of_a_folder_is_skipped_by_its_own_path(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "a.md").write_text("# A", encoding="utf-8")
    (tmp_path / "secret.md").write_text("secret", encoding="utf-8")
    os.symlink(tmp_path / "secret.md", docs / "out.md")
    os.symlink("../a.md", docs / "sub" / "in.md")  # stays in the folder: read
    os.symlink(tmp_path / "absent.md", docs / "dangling.md")
    targets, skipped = expand(docs)
    # the link inside the folder is read, under the source of the file it names
    assert [t.source for t in targets] == [file_source(docs / "a.md"), file_source(docs / "a.md")]
    assert sorted(skipped) == [
        (docs.resolve() / "dangling.md").as_posix(),
        (docs.resolve() / "out.md").as_posix(),
    ]
    assert all("secret" not in s for s in skipped), "the link's target is not reported"


def test_fifos_sockets_and_devices_in_a_folder_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A", encoding="utf-8")
    os.mkfifo(tmp_path / "pipe.md")
    os.symlink("/dev/zero", tmp_path / "zero.txt")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "sock.txt"))
        targets, skipped = expand(tmp_path)
    assert [t.source for t in targets] == [file_source(tmp_path / "a.md")]
    assert sorted(Path(s).name for s in skipped) == ["pipe.md", "sock.txt", "zero.txt"]


def _without_blocking(call: object) -> BaseException | None:
    """Run `call` in a daemon thread: what it raised, failing the test if it blocks."""
    raised: list[BaseException | None] = []

    def run() -> None:
        try:
            call()  # type: ignore[operator]
        except BaseException as exc:
            raised.append(exc)
        else:
            raised.append(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(5)
    assert raised, "blocked"
    return raised[0]


def test_a_fifo_named_directly_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "notes.txt")
    raised = _without_blocking(lambda: load_file(tmp_path / "notes.txt"))
    assert isinstance(raised, LoadError) and "not a regular file" in str(raised)


def test_a_fifo_swapped_in_after_the_check_is_refused_once_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the stat and the open the file became a FIFO: opened non-blocking, refused on the descriptor."""
    regular = os.stat(tmp_path)  # any stat result; made to look like a small regular file
    os.mkfifo(tmp_path / "notes.txt")
    real_stat = os.stat

    def stale(path: object, *args: object, **kwargs: object) -> os.stat_result:
        if Path(str(path)).name == "notes.txt":
            fields = list(regular)
            fields[0] = 0o100644
            fields[6] = 10
            return os.stat_result(fields)
        return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("agentrt.knowledge.loaders.os.stat", stale)
    raised = _without_blocking(lambda: load_file(tmp_path / "notes.txt"))
    assert isinstance(raised, LoadError) and "not a regular file" in str(raised)


def _zip_with(parts: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, data in parts.items():
            archive.writestr(name, data)
    return out.getvalue()


def _docx_with_document(tmp_path: Path, transform: object) -> bytes:
    """A real DOCX whose word/document.xml went through `transform`."""
    make_docx(tmp_path / "base.docx")
    parts = {}
    with zipfile.ZipFile(tmp_path / "base.docx") as archive:
        for name in archive.namelist():
            data = archive.read(name)
            parts[name] = transform(data) if name == "word/document.xml" else data  # type: ignore[operator]
    return _zip_with(parts)


def test_a_docx_part_at_a_bomb_ratio_is_refused_before_parsing(tmp_path: Path) -> None:
    def pad(xml: bytes) -> bytes:  # 20 MB of one repeated paragraph: deflate makes it ~1000:1
        i = xml.index(b"<w:body>") + len(b"<w:body>")
        return xml[:i] + b"<w:p><w:r><w:t>" + b"A" * 20_000_000 + b"</w:t></w:r></w:p>" + xml[i:]

    bomb = _docx_with_document(tmp_path, pad)
    assert len(bomb) < 100_000
    started = time.perf_counter()
    with pytest.raises(FileTooLargeError, match="decompression bomb"):
        load_bytes(bomb, source="bomb", name="bomb.docx", max_bytes=1_000_000_000)
    assert time.perf_counter() - started < 1, "refused from the zip's directory, not by inflating it"


def test_a_docx_decompressing_past_the_cap_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "handbook.docx"
    make_docx(path)
    with zipfile.ZipFile(path) as archive:
        inflated = sum(info.file_size for info in archive.infolist())
    assert inflated > 10 * path.stat().st_size, "python-docx's template parts compress well"
    assert load_file(path, max_bytes=inflated).kind == "docx"
    with pytest.raises(FileTooLargeError, match=f"decompresses to {inflated} bytes"):
        load_file(path, max_bytes=inflated - 1)


def test_a_docx_cell_spanning_a_billion_columns_is_read_once(tmp_path: Path) -> None:
    def span(xml: bytes) -> bytes:
        return xml.replace(b"<w:tc><w:tcPr>", b'<w:tc><w:tcPr><w:gridSpan w:val="1000000000"/>', 1)

    path = tmp_path / "span.docx"
    path.write_bytes(_docx_with_document(tmp_path, span))
    started = time.perf_counter()
    loaded = load_file(path)
    assert time.perf_counter() - started < 5
    assert "Region | Days" in loaded.text and "EU | 25" in loaded.text


def test_docx_text_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "handbook.docx"
    make_docx(path)
    monkeypatch.setattr(loaders, "_check_zip", lambda data, max_bytes, what: None)  # the text cap alone
    assert len(loaders._docx(path.read_bytes(), "s", None, 1000).text) < 1000
    with pytest.raises(FileTooLargeError, match="text is more than the 40 characters"):
        loaders._docx(path.read_bytes(), "s", None, 40)


def test_pdf_text_and_pages_are_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = make_pdf(["Revenue grew in the first quarter.", "Costs fell sharply.", "Outlook is stable."])
    assert load_bytes(data, source="r", name="r.pdf", max_bytes=len(data)).pages is not None
    with pytest.raises(FileTooLargeError, match="text"):
        loaders._pdf(data, "r", None, 40)  # the second page takes the text past 40 characters
    monkeypatch.setattr(loaders, "MAX_PDF_PAGES", 2)
    with pytest.raises(FileTooLargeError, match="3 pages"):
        load_bytes(data, source="r", name="r.pdf")


def test_large_html_goes_to_the_linear_converter(tmp_path: Path) -> None:
    """Over the threshold trafilatura is not used: the page chrome it removes stays in."""
    filler = "<!-- " + "x" * MAX_EXTRACTOR_HTML_BYTES + " -->"
    path = tmp_path / "big.html"
    path.write_text(HTML_PAGE.replace("<body>", "<body>" + filler), encoding="utf-8")
    loaded = load_file(path)
    assert loaded.kind == "html" and loaded.title == "Widget manual | ACME"
    assert "frobnicator" in loaded.text and "navmenuword" in loaded.text and "footerword" in loaded.text
    assert "xxxx" not in loaded.text
    small = load_bytes(HTML_PAGE.encode(), source="page", name="page.html")
    assert "navmenuword" not in small.text, "under the threshold, trafilatura keeps the main content only"


# -- URLs ----------------------------------------------------------------------------------------------------
@dataclass
class Server:
    url: str
    hits: list[str] = field(default_factory=list)


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    state = Server("")

    async def page(request: web.Request) -> web.Response:
        state.hits.append(request.path)
        return web.Response(text=HTML_PAGE, content_type="text/html")

    async def report(request: web.Request) -> web.Response:
        state.hits.append(request.path)
        return web.Response(body=make_pdf(["one", "two", "three"]), content_type="application/pdf")

    async def moved(request: web.Request) -> web.Response:
        state.hits.append(request.path)
        raise web.HTTPFound("/page")

    async def big(request: web.Request) -> web.Response:
        state.hits.append(request.path)
        return web.Response(text="y" * 5000, content_type="text/plain")

    async def missing(request: web.Request) -> web.Response:
        state.hits.append(request.path)
        return web.Response(status=404, text="nope")

    app = web.Application()
    app.router.add_get("/page", page)
    app.router.add_get("/report", report)
    app.router.add_get("/moved", moved)
    app.router.add_get("/big", big)
    app.router.add_get("/missing", missing)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    state.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield state
    finally:
        await runner.cleanup()


async def test_a_local_url_is_refused_by_the_ssrf_guard(server: Server) -> None:
    kb = Knowledge("web", store=MemoryKnowledgeStore())
    report = await kb.add(f"{server.url}/page")
    assert report.added == ()
    ((source, reason),) = report.failed
    assert source == f"{server.url}/page" and "refused" in reason and "loopback" in reason
    assert server.hits == [], "the guard refused before any request reached the server"
    assert await kb.documents() == []


async def test_a_localhost_name_and_a_redirect_to_it_are_refused(server: Server) -> None:
    port = server.url.rsplit(":", 1)[1]
    with pytest.raises(LoadError, match="refused"):
        await load(Target("url", f"http://localhost:{port}/page", "x"))
    with pytest.raises(LoadError, match="refused"):
        await load(Target("url", f"http://[::ffff:127.0.0.1]:{port}/page", "x"))
    assert server.hits == []


async def test_urls_load_when_the_policy_allows_private_addresses(server: Server) -> None:
    web_policy = WebTools(allow_private=True)
    kb = Knowledge("web", store=MemoryKnowledgeStore(), web=web_policy)
    report = await kb.add([f"{server.url}/moved", f"{server.url}/report", f"{server.url}/missing"])
    assert report.added == (f"{server.url}/moved", f"{server.url}/report")
    assert [(s, "404" in reason) for s, reason in report.failed] == [(f"{server.url}/missing", True)]
    assert server.hits == ["/moved", "/page", "/report", "/missing"], "the redirect was followed"
    docs = {d.source: d for d in await kb.documents()}
    assert docs[f"{server.url}/moved"].metadata["url"] == f"{server.url}/page"
    assert docs[f"{server.url}/moved"].metadata["kind"] == "html"
    assert docs[f"{server.url}/report"].metadata["kind"] == "pdf"
    hits = await kb.search("frobnicator package")
    assert hits and hits[0].source == f"{server.url}/moved"


async def test_downloads_are_size_limited(server: Server) -> None:
    with pytest.raises(FileTooLargeError):
        await load(Target("url", f"{server.url}/big", "big"), max_bytes=1000, web=WebTools(allow_private=True))
    loaded = await load(Target("url", f"{server.url}/big", "big"), max_bytes=5000, web=WebTools(allow_private=True))
    assert loaded.text == "y" * 5000


async def test_other_schemes_are_not_fetched_and_host_lists_apply(server: Server) -> None:
    kb = Knowledge("web", store=MemoryKnowledgeStore(), web=WebTools(allow_private=True, blocked_hosts=["127.0.0.1"]))
    report = await kb.add(f"{server.url}/page")
    assert "blocked" in report.failed[0][1]
    assert server.hits == []


class LoopbackResolver(AbstractResolver):
    """Resolves every name to 127.0.0.1 (a public name whose DNS answer is a loopback address)."""

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [ResolveResult(hostname=host, host="127.0.0.1", port=port, family=socket.AF_INET, proto=0, flags=0)]

    async def close(self) -> None:
        return None


async def test_a_name_refused_by_the_connect_time_guard_reports_the_guards_reason(server: Server) -> None:
    port = server.url.rsplit(":", 1)[1]
    url = f"http://rebound.example:{port}/page"
    with pytest.raises(LoadError) as caught:
        await load(Target("url", url, url), web=WebTools(resolver=LoopbackResolver()))
    message = str(caught.value)
    assert message.startswith(f"refused to fetch {url}: ")
    assert "'rebound.example' resolves to 127.0.0.1, a private, loopback or link-local address" in message
    assert "Cannot connect" not in message
    assert server.hits == []


async def test_the_normalised_url_is_the_one_requested(server: Server) -> None:
    port = server.url.rsplit(":", 1)[1]
    loaded = await load(Target("url", f"http://0x7f.1:{port}/page", "p"), web=WebTools(allow_private=True))
    assert loaded.metadata["url"] == f"http://127.0.0.1:{port}/page", "the legacy IPv4 spelling, rewritten"
    assert server.hits == ["/page"]
