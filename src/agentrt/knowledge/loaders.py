"""Reading sources into text: files (Markdown, text, HTML, PDF, DOCX), folders, URLs and raw texts.

Each loader returns a `Loaded`: the text as Markdown-ish prose (headings as ``#`` lines, so the
chunker can follow them), a title, and for paged formats (PDF) the text of each page. Files are
read and parsed in a worker thread, so a large PDF never blocks the event loop; a file over the
size cap, a broken or encrypted PDF, a binary file of an unknown kind raise `LoadError`, which
`Knowledge.add` reports per source without stopping the batch.

Documents are untrusted, so every loader is bounded by the byte cap (``max_bytes``, by default
`DEFAULT_MAX_BYTES`), not only the file it reads:

- Only regular files are read: a FIFO, socket or device is refused (a folder leaves it out; a file
  named directly raises `LoadError`), and the file is opened non-blocking and checked again once
  open, so a FIFO swapped in never blocks the worker. In a folder, a symlink to a file outside
  the folder is left out like a symlinked folder, and reported as skipped (by its own path).
- A DOCX (a zip) whose parts add up to more than the cap once decompressed, or with a part
  compressed more than `MAX_COMPRESSION_RATIO` to 1 (over 1 MiB), is refused before it is parsed.
- The text collected from a DOCX or PDF is capped too (PDFs are extracted page by page, at most
  `MAX_PDF_PAGES` pages, and pypdf's per-stream decompression limits are lowered to about the
  cap): pages sharing one compressed stream cannot turn a small file into gigabytes of text.
- HTML over `MAX_EXTRACTOR_HTML_BYTES` skips trafilatura (whose lxml tree takes about 100 to 300
  times the size of the markup in memory) for the builtin converter, which is linear in time and
  memory but keeps the page's navigation and footers.

URLs go through the SSRF-guarded client of the builtin ``fetch_url`` tool
(`agentrt.tool.builtin.web.WebTools`): its host policy is checked on every redirect hop and its
connector refuses private, loopback and link-local addresses at connect time (unless the policy
says ``allow_private=True``). The optional parsers are imported when first needed: ``trafilatura``
(HTML main content; without it, the tool's own HTML-to-text conversion), ``pypdf`` and
``python-docx`` (``pip install 'agentrt[knowledge]'``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib
import io
import os
import re
import stat
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from agentrt.errors import AgentrtError

if TYPE_CHECKING:
    from agentrt.tool.builtin.web import WebTools

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAX_COMPRESSION_RATIO",
    "MAX_EXTRACTOR_HTML_BYTES",
    "MAX_PDF_PAGES",
    "SUPPORTED_SUFFIXES",
    "FileTooLargeError",
    "LoadError",
    "Loaded",
    "Target",
    "expand",
    "file_source",
    "is_url",
    "load",
    "load_bytes",
    "load_file",
    "load_text",
    "load_url",
    "text_source",
]

DEFAULT_MAX_BYTES = 50 * 1024 * 1024
MAX_EXTRACTOR_HTML_BYTES = 1024 * 1024
"""HTML larger than this goes to the builtin linear converter instead of trafilatura (memory)."""
MAX_COMPRESSION_RATIO = 200
"""A DOCX part decompressing to over 1 MiB at more than this ratio is taken for a zip bomb."""
MAX_PDF_PAGES = 10_000
"""Most pages read from a PDF (a larger one is refused)."""
_RATIO_FLOOR = 1024 * 1024
_PDF_STREAM_FLOOR = 8 * 1024 * 1024
_INSTALL_HINT = "pip install 'agentrt[knowledge]'"
_MARKDOWN = frozenset({".md", ".markdown", ".mdx"})
_TEXT = frozenset({".txt", ".text", ".rst", ".log", ".csv", ".tsv", ".json", ".yaml", ".yml", ".toml", ".ini"})
_HTML = frozenset({".html", ".htm", ".xhtml"})
SUPPORTED_SUFFIXES = frozenset({*_MARKDOWN, *_TEXT, *_HTML, ".pdf", ".docx"})
"""What a folder is searched for; other files in it are reported as skipped."""
_URL = re.compile(r"https?://", re.IGNORECASE)
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_DOCX_MIME = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


class LoadError(AgentrtError):
    """A source could not be read or parsed (missing, broken, encrypted, unsupported, refused URL)."""


class FileTooLargeError(LoadError):
    """A file or download is larger than the configured cap."""


@dataclass(frozen=True, slots=True)
class Loaded:
    """The text of one source, ready to chunk."""

    source: str
    text: str
    title: str | None = None
    pages: tuple[str, ...] | None = None
    """The text of each page (PDF), when the format has pages; `text` is then the pages joined."""
    kind: str = "text"
    """``markdown``, ``text``, ``html``, ``pdf`` or ``docx``."""
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Target:
    """One thing to ingest: a file path, a URL or a raw text, with the source it is stored under."""

    kind: str
    """``file``, ``url`` or ``text``."""
    value: str
    source: str


def is_url(text: str) -> bool:
    """Whether `text` is an http(s) URL (what `Knowledge.add` fetches instead of reading a file)."""
    return bool(_URL.match(text.strip())) and not any(c.isspace() for c in text.strip())


def text_source(text: str) -> str:
    """The source a raw text is stored under: ``text:`` and 16 hex digits of its sha256."""
    return "text:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def file_source(path: Path) -> str:
    """The source a file is stored under: its absolute path (so every spelling names one document)."""
    return path.expanduser().resolve(strict=False).as_posix()


def expand(item: str | os.PathLike[str], source: str | None = None) -> tuple[list[Target], list[str]]:
    """The targets an item of `Knowledge.add` stands for, and the files of a folder that were skipped.

    A URL is fetched; a `Path`, or a string naming an existing file or folder, is read (a folder
    recursively, hidden entries and symlinked folders left out; unsupported files, files that are
    not regular files (FIFOs, sockets, devices) and symlinks pointing out of the folder reported as
    skipped, a symlink by its own path); a single word ending in a supported suffix is taken for a
    missing file (reported as failed, not indexed as text); any other string is a raw text.
    Blocking: call in a worker thread.
    """
    if isinstance(item, str):
        if is_url(item):
            return [Target("url", item.strip(), source or item.strip())], []
        if _looks_like_path(item):
            path = Path(item).expanduser()
            if _exists(path) or _has_supported_suffix(item):
                return _expand_path(path, source)
        return [Target("text", item, source or text_source(item))], []
    return _expand_path(Path(item).expanduser(), source)


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):  # a name too long for the file system is a text, not a path
        return False


def _looks_like_path(text: str) -> bool:
    return bool(text) and len(text) <= 4096 and "\n" not in text and "\x00" not in text


def _has_supported_suffix(text: str) -> bool:
    return not any(c.isspace() for c in text.strip()) and Path(text).suffix.lower() in SUPPORTED_SUFFIXES


def _expand_path(path: Path, source: str | None) -> tuple[list[Target], list[str]]:
    if not path.is_dir():
        return [Target("file", str(path), source or file_source(path))], []
    top = path.resolve()
    targets: list[Target] = []
    skipped: list[str] = []
    for root, dirs, files in os.walk(path, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith("."):
                continue
            child = Path(root) / name
            if not _readable_in(child, top):
                # its own path: resolving a symlink would report (and reveal) where it points
                skipped.append((Path(root).resolve() / name).as_posix())
            elif child.suffix.lower() in SUPPORTED_SUFFIXES:
                targets.append(Target("file", str(child), file_source(child)))
            else:
                skipped.append(file_source(child))
    return targets, skipped


def _readable_in(child: Path, top: Path) -> bool:
    """Whether a folder entry is a regular file inside `top`, directly or through symlinks that stay in it."""
    try:
        if child.is_symlink() and not child.resolve(strict=True).is_relative_to(top):
            return False
        return stat.S_ISREG(child.stat().st_mode)
    except (OSError, RuntimeError):  # a dangling link, a loop, a file gone meanwhile
        return False


async def load(target: Target, *, max_bytes: int = DEFAULT_MAX_BYTES, web: WebTools | None = None) -> Loaded:
    """Read and parse `target` (files and parsing in a worker thread); `LoadError` when it cannot be."""
    if target.kind == "url":
        return await load_url(target.value, source=target.source, max_bytes=max_bytes, web=web)
    if target.kind == "text":
        return load_text(target.value, source=target.source)
    return await asyncio.to_thread(load_file, Path(target.value), source=target.source, max_bytes=max_bytes)


def load_text(text: str, *, source: str | None = None, title: str | None = None) -> Loaded:
    """A raw text as a source (its first line, shortened, is the title)."""
    if not text.strip():
        raise LoadError("the text is empty")
    first = text.strip().splitlines()[0].lstrip("# ").strip()
    return Loaded(
        source=source or text_source(text),
        text=text,
        title=title or (first[:80] + ("…" if len(first) > 80 else "")),
        kind="markdown",
    )


def load_file(path: Path, *, source: str | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> Loaded:
    """Read and parse one file (blocking: run it in a worker thread).

    Only a regular file is read (a FIFO or device raises `LoadError`, never blocks): it is checked
    before it is opened, opened non-blocking, and checked again on the open descriptor.
    """
    try:
        _check_regular(path, os.stat(path), max_bytes)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as file:  # owns the descriptor from here on
            _check_regular(path, os.fstat(file.fileno()), max_bytes)  # what was opened, not what was stat'ed
            data = file.read(max_bytes + 1)
    except FileNotFoundError:
        raise LoadError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise LoadError(f"{path} is a folder") from None
    except OSError as exc:
        raise LoadError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:  # it grew after the stat
        raise FileTooLargeError(f"{path.name} is more than the {max_bytes} bytes allowed")
    return load_bytes(data, source=source or file_source(path), name=path.name, max_bytes=max_bytes)


def _check_regular(path: Path, info: os.stat_result, max_bytes: int) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise LoadError(f"{path} is a folder")
    if not stat.S_ISREG(info.st_mode):
        raise LoadError(f"{path} is not a regular file (a FIFO, socket or device is never read)")
    if info.st_size > max_bytes:
        raise FileTooLargeError(f"{path.name} is {info.st_size} bytes, more than the {max_bytes} allowed")


def load_bytes(
    data: bytes, *, source: str, name: str = "", mime: str = "", max_bytes: int = DEFAULT_MAX_BYTES
) -> Loaded:
    """Parse a file's bytes by its MIME type, else by the suffix of `name`, else as text if it decodes.

    `max_bytes` also caps what a compressed format (DOCX, PDF) may expand to: its decompressed parts
    and the text extracted (`FileTooLargeError` past it).
    """
    suffix = Path(name).suffix.lower()
    stem = Path(name).stem or None
    parser = _parser_for(mime, suffix, data)
    loaded = parser(data, source, stem, max_bytes)
    if not loaded.text.strip():
        raise LoadError(f"no text could be extracted from {name or source}")
    return loaded


def _parser_for(mime: str, suffix: str, data: bytes) -> Callable[[bytes, str, str | None, int], Loaded]:
    mime = mime.lower()
    if mime == "application/pdf" or suffix == ".pdf":
        return _pdf
    if mime == _DOCX_MIME or suffix == ".docx":
        return _docx
    if mime in ("text/html", "application/xhtml+xml") or suffix in _HTML:
        return _html
    if mime in ("text/markdown", "text/x-markdown") or suffix in _MARKDOWN:
        return _markdown
    if mime.startswith("text/") or mime in ("application/json", "application/xml") or suffix in _TEXT:
        return _plain
    if b"\x00" in data[:8192]:
        raise LoadError(f"unsupported binary file ({mime or suffix or 'unknown type'})")
    head = data[:2000].lower()
    return _html if b"<html" in head or b"<!doctype html" in head else _plain


def _decode(data: bytes) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        if b"\x00" in data[:8192]:
            raise LoadError("the file is binary, not text") from None
        return data.decode("latin-1")


def _markdown(data: bytes, source: str, stem: str | None, max_bytes: int) -> Loaded:
    text = _decode(data)
    title = next((m.group(1).strip() for m in re.finditer(r"(?m)^ {0,3}# +(.+?)\s*#*\s*$", text)), None)
    return Loaded(source, text, title or stem, kind="markdown")


def _plain(data: bytes, source: str, stem: str | None, max_bytes: int) -> Loaded:
    return Loaded(source, _decode(data), stem, kind="text")


def _html(data: bytes, source: str, stem: str | None, max_bytes: int) -> Loaded:
    html = _decode(data)
    trafilatura: Any = None
    if len(data) <= MAX_EXTRACTOR_HTML_BYTES:  # larger: the linear converter (trafilatura's tree is ~100x)
        try:
            trafilatura = importlib.import_module("trafilatura")
        except ImportError:
            pass
    if trafilatura is not None:
        doc = trafilatura.bare_extraction(
            html,
            output_format="python",
            with_metadata=True,
            include_formatting=True,
            include_comments=False,
            include_tables=True,
            favor_recall=True,
        )
        text = getattr(doc, "text", None) if doc is not None else None
        if text and text.strip():
            return Loaded(source, text, getattr(doc, "title", None) or _html_title(html) or stem, kind="html")
    from agentrt.tool.builtin.web import html_to_text

    text = html_to_text(html)
    title = None
    if text.startswith("Title: "):
        first, _, text = text.partition("\n")
        title = first.removeprefix("Title: ").strip() or None
    return Loaded(source, text.strip(), title or stem, kind="html")


def _html_title(html: str) -> str | None:
    m = re.search(r"<title[^>]*>([^<]{1,500})</title>", html[:100_000], re.IGNORECASE)
    return m.group(1).strip() or None if m else None


def _pdf(data: bytes, source: str, stem: str | None, max_bytes: int) -> Loaded:
    pypdf: Any = _optional("pypdf", "PDF")
    try:
        with _pdf_limits(pypdf, max_bytes):
            reader = pypdf.PdfReader(io.BytesIO(data))
            if reader.is_encrypted:
                try:
                    unlocked = reader.decrypt("")
                except Exception:  # an unsupported algorithm (needs cryptography) counts as locked
                    unlocked = 0
                if not unlocked:
                    raise LoadError("the PDF is encrypted")
            pages = _pdf_pages(reader, max_bytes)
            info = reader.metadata
            title = str(info.title).strip() if info is not None and info.title else None
    except LoadError:
        raise
    except getattr(pypdf.errors, "LimitReachedError", ()) as exc:
        raise FileTooLargeError(f"the PDF is past a size limit: {exc}") from None
    except Exception as exc:  # pypdf raises many kinds on a broken file
        raise LoadError(f"broken PDF: {type(exc).__name__}: {exc}") from None
    if not any(pages):
        raise LoadError("the PDF has no extractable text (scanned pages?)")
    return Loaded(source, "\n\n".join(pages), title or stem, pages=pages, kind="pdf", metadata={"pages": len(pages)})


def _pdf_limits(pypdf: Any, max_bytes: int) -> contextlib.AbstractContextManager[Any]:
    """Lower pypdf's per-stream decompression limits to about the cap, in this context only.

    Through ``pypdf.apply_configuration`` (a context variable, so other threads keep their limits;
    a limit set lower already stays); an older pypdf without it keeps its own limits (75 MB a stream).
    """
    configure = getattr(pypdf, "apply_configuration", None)
    current = getattr(pypdf, "get_configuration", None)
    if configure is None or current is None:
        return contextlib.nullcontext()
    settings = current()
    limit = max(max_bytes, _PDF_STREAM_FLOOR)
    names = (f"{kind}_maximum_output_length" for kind in ("zlib", "lzw", "run_length", "brotli", "jbig2"))
    lowered = {name: min(value, limit) for name in names if isinstance(value := getattr(settings, name, None), int)}
    return cast("contextlib.AbstractContextManager[Any]", configure(**lowered))


def _pdf_pages(reader: Any, max_bytes: int) -> tuple[str, ...]:
    """The text of each page, extracted one by one; `FileTooLargeError` once the text is past the cap."""
    count = len(reader.pages)
    if count > MAX_PDF_PAGES:
        raise FileTooLargeError(f"the PDF has {count} pages, more than the {MAX_PDF_PAGES} read")
    pages: list[str] = []
    total = 0
    for page in reader.pages:
        text = (page.extract_text() or "").strip()
        total += len(text)
        if total > max_bytes:
            raise FileTooLargeError(
                f"the PDF's text is more than the {max_bytes} characters allowed (at page {len(pages) + 1} of {count})"
            )
        pages.append(text)
    return tuple(pages)


def _check_zip(data: bytes, max_bytes: int, what: str) -> None:
    """Refuse a zip whose parts decompress past `max_bytes` together, or one part at a bomb's ratio.

    The sizes checked are the ones the zip declares; `zipfile` never inflates a part past its
    declared size (it stops there, and the CRC check then fails), so they bound what is read.
    """
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise LoadError(f"broken {what}: {type(exc).__name__}: {exc}") from None
    total = 0
    for entry in entries:
        total += entry.file_size
        if entry.file_size > _RATIO_FLOOR and entry.file_size > MAX_COMPRESSION_RATIO * max(entry.compress_size, 1):
            raise FileTooLargeError(
                f"the {what} is a decompression bomb: {entry.filename!r} inflates {entry.compress_size} bytes "
                f"to {entry.file_size}"
            )
    if total > max_bytes:
        raise FileTooLargeError(f"the {what} decompresses to {total} bytes, more than the {max_bytes} allowed")


class _TextBudget:
    """The characters a document's text may add up to (`FileTooLargeError` past them)."""

    def __init__(self, limit: int, what: str) -> None:
        self.left = limit
        self.limit = limit
        self.what = what

    def take(self, text: str) -> str:
        self.left -= len(text) + 1
        if self.left < 0:
            raise FileTooLargeError(f"the {self.what}'s text is more than the {self.limit} characters allowed")
        return text


def _docx(data: bytes, source: str, stem: str | None, max_bytes: int) -> Loaded:
    docx: Any = _optional("docx", "DOCX")
    _check_zip(data, max_bytes, "DOCX")
    budget = _TextBudget(max_bytes, "DOCX")
    try:
        document = docx.Document(io.BytesIO(data))
        lines: list[str] = []
        first_heading: str | None = None
        for block in document.iter_inner_content():
            if hasattr(block, "rows"):  # a table: one line per row
                lines.extend(_docx_row(row, block, budget) for row in block.rows)
                lines.append("")
                continue
            line, heading = _docx_paragraph(block)
            if heading and first_heading is None:
                first_heading = heading
            if line:
                lines.extend((budget.take(line), ""))
        title = (document.core_properties.title or "").strip() or None
    except FileTooLargeError:
        raise
    except Exception as exc:  # a zip that is no DOCX, a broken XML part
        raise LoadError(f"broken DOCX: {type(exc).__name__}: {exc}") from None
    return Loaded(source, "\n".join(lines).strip(), title or first_heading or stem, kind="docx")


def _docx_row(row: Any, table: Any, budget: _TextBudget) -> str:
    """A table row as ``a | b | c``: each cell once, in the order of its ``<w:tc>`` elements.

    Not python-docx's ``row.cells``: it repeats a cell once per grid column it spans (a
    ``gridSpan`` of a billion is a billion-item tuple), and finds the content of a vertically
    merged cell by walking up the rows (quadratic on a tall merge). A merged continuation is empty.
    """
    from docx.table import _Cell

    cells: list[str] = []
    for tc in row._tr.tc_lst:
        merged = tc.vMerge == "continue"
        cells.append("" if merged else budget.take(_Cell(tc, table).text.strip()))
    return " | ".join(cells)


def _docx_paragraph(paragraph: Any) -> tuple[str, str | None]:
    """A DOCX paragraph as a Markdown line, and its text when it is a heading."""
    text = paragraph.text.strip()
    if not text:
        return "", None
    style = (getattr(paragraph.style, "name", "") or "").lower()
    if style == "title":
        return f"# {text}", text
    m = re.fullmatch(r"heading (\d)", style)
    if m:
        return f"{'#' * min(int(m.group(1)), 6)} {text}", text
    if "list" in style:
        return f"- {text}", None
    return text, None


def _optional(module: str, what: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise LoadError(f"reading {what} files needs {module}: {_INSTALL_HINT}") from None


async def load_url(
    url: str, *, source: str | None = None, max_bytes: int = DEFAULT_MAX_BYTES, web: WebTools | None = None
) -> Loaded:
    """Download `url` under the ``fetch_url`` policy `web` (default: public addresses only) and parse it."""
    from agentrt.tool.builtin.web import WebTools

    policy = web if web is not None else WebTools()
    data, mime, final = await _download(policy, url.strip(), max_bytes)
    name = final.rsplit("?", 1)[0].rsplit("#", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    loaded = await asyncio.to_thread(
        load_bytes, data, source=source or url.strip(), name=name, mime=mime, max_bytes=max_bytes
    )
    return Loaded(
        loaded.source,
        loaded.text,
        loaded.title,
        loaded.pages,
        loaded.kind,
        {**loaded.metadata, "url": final},
    )


async def _download(policy: WebTools, url: str, max_bytes: int) -> tuple[bytes, str, str]:
    """The body, MIME type and final URL of a GET, following redirects, each hop checked by `policy`.

    Like `WebTools.fetch`: each hop requests the URL as the policy normalised and checked it (a
    legacy IPv4 spelling rewritten to the address checked), and a refusal of the connect-time
    guard (a name resolving to a private address) is reported with the guard's reason.
    """
    try:
        import aiohttp
    except ImportError:  # pragma: no cover - depends on the environment
        raise LoadError("fetching URLs needs aiohttp: pip install 'agentrt[web]'") from None
    # the fetch tool's own per-hop check and connect-time guard (no public API gives their reasons)
    from agentrt.tool.builtin.web import _BlockedAddressError, _Guard, _Refused, _shown

    guard = _Guard(policy)
    text, base = url, None
    current = url
    timeout = aiohttp.ClientTimeout(total=policy.max_timeout)
    try:
        async with aiohttp.ClientSession(
            connector=guard.connector(),
            headers={"User-Agent": policy.user_agent},
            trust_env=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=timeout,
        ) as session:
            for _hop in range(policy.max_redirects + 1):
                try:
                    target = policy._target(text, base)
                except _Refused as exc:
                    shown = text if base is None else f"{_shown(text, base)} (redirected from {current})"
                    raise LoadError(f"refused to fetch {shown}: {exc}") from None
                current = str(target)
                async with session.get(target, allow_redirects=False) as resp:
                    location = resp.headers.get("Location")
                    if resp.status in _REDIRECTS and location:
                        text, base = location.strip(), resp.url
                        continue
                    if resp.status >= 400:
                        raise LoadError(f"{current} answered {resp.status} {resp.reason or ''}".rstrip())
                    return await _read_body(resp, max_bytes, current), (resp.content_type or "").lower(), current
            raise LoadError(f"too many redirects fetching {url}")
    except TimeoutError:
        raise LoadError(f"fetching {current} timed out") from None
    except (aiohttp.ClientError, _BlockedAddressError) as exc:
        if guard.refusals:
            raise LoadError(f"refused to fetch {current}: {guard.refusals[-1]}") from None
        raise LoadError(f"fetching {current} failed: {exc}") from None


async def _read_body(resp: Any, max_bytes: int, url: str) -> bytes:
    if resp.content_length is not None and resp.content_length > max_bytes:
        raise FileTooLargeError(f"{url} is {resp.content_length} bytes, more than the {max_bytes} allowed")
    body = bytearray()
    async for chunk in resp.content.iter_chunked(65_536):
        body += chunk
        if len(body) > max_bytes:
            raise FileTooLargeError(f"{url} is more than the {max_bytes} bytes allowed")
    return bytes(body)
