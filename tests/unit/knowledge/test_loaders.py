"""Loaders on real files written by the tests: Markdown, HTML, PDF (fpdf2), DOCX (python-docx), URLs."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web

from agentrt.knowledge import Knowledge, MemoryKnowledgeStore
from agentrt.knowledge.loaders import (
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
