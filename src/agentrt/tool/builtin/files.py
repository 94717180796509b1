"""Workspace file tools: read, list, glob, grep, write and edit files under one root directory.

``toolkit.register(FileTools("/path/to/workspace"))`` adds six tools: ``read_file``, ``list_dir``,
``glob_files`` and ``grep_files`` (read-only) and ``write_file`` and ``edit_file`` (destructive
edit tools: they ask for approval by default, and run without asking in ``ACCEPT_EDITS`` mode
when the agent's `PermissionContext.workspace` is this root).

Confinement. Every path the model sends is taken relative to the root (an absolute path must lie
inside it), resolved with `os.path.realpath` (so ``..`` and symlinks are followed to where they
really lead) and must still lie inside the root, checked with `os.path.commonpath`. Paths with NUL
bytes are refused. A symlink inside the workspace that points inside it works; one that points
out of it is refused, and directory walks (glob, grep) never follow directory symlinks.

Protected paths. Secrets and repository internals (``.env*``, ``.git/``, ``.ssh``, key and
credential files: `agentrt.permission.is_dangerous_path`) are refused through
`agentrt.permission.refuse_dangerous_path`, by the name the model used and by the resolved target.
The check runs twice: in each tool's ``check_permission`` (so the permission engine denies the call
before it runs, in every mode including ``BYPASS``) and again inside the tool when it runs (for
callers that skip the engine). Listings mark protected entries; glob and grep skip them.

The event loop is never blocked: all file I/O runs in worker threads. The read tools
(``read_file``, ``list_dir``, ``glob_files``, ``grep_files``) run under a time budget
(`SEARCH_SECONDS`) and a cancel flag that their work checks per line and per directory entry, since
a thread cannot be killed: when the budget runs out they return what they found with a note, and
when the call is cancelled (its timeout, an interrupt) the thread stops at the next check.
``grep_files`` matches with RE2 (``google-re2``), a linear-time engine that releases the GIL, so no
pattern can backtrack for seconds (``(a+)+$``) or freeze the loop; patterns RE2 cannot run
(backreferences, lookaround) get a `ToolRetry` saying what is unsupported.

Writes are atomic: the new content goes to a temporary file in the same directory, which then
replaces the target with `os.replace`. Files are read as UTF-8 (undecodable bytes shown as U+FFFD);
files with NUL bytes in their first 8 KiB count as binary and are refused.

Not a sandbox against a concurrent attacker on the same machine: a directory swapped for a symlink
between the check and the I/O is not detected. Run untrusted agents in a container.
"""

from __future__ import annotations

import asyncio
import fnmatch
import functools
import heapq
import importlib
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Annotated, Any, BinaryIO

from pydantic import Field

from agentrt.context import RuntimeContext
from agentrt.errors import ToolRetry, UserError
from agentrt.permission import PermissionDecision, is_dangerous_path, refuse_dangerous_path, workspace_root
from agentrt.tool.base import tool

__all__ = [
    "DEFAULT_MAX_READ_BYTES",
    "DEFAULT_MAX_WRITE_BYTES",
    "DEFAULT_READ_LINES",
    "DEFAULT_SKIP_DIRS",
    "FileTools",
    "PathRefused",
    "glob_match",
]

DEFAULT_MAX_READ_BYTES = 256_000
"""Most bytes of text one ``read_file`` call returns."""
DEFAULT_MAX_WRITE_BYTES = 1_000_000
"""Largest file ``write_file`` and ``edit_file`` write."""
DEFAULT_READ_LINES = 2000
"""Lines ``read_file`` returns when the model gives no limit."""
DEFAULT_SKIP_DIRS = frozenset(
    {".git", "node_modules", "__pycache__", ".venv", "venv", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox"}
)
"""Directories glob and grep do not descend into (unless the search starts inside one)."""

MAX_LINE_CHARS = 2000
"""Longer lines are cut in ``read_file`` output."""
MAX_LIST_ENTRIES = 1000
MAX_GLOB_RESULTS = 1000
MAX_GREP_MATCHES = 2000
GREP_LINE_CHARS = 300
MAX_GREP_FILE_BYTES = 4_000_000
"""Larger files are skipped by ``grep_files``."""
MAX_WALK_ENTRIES = 200_000
SEARCH_SECONDS = 20.0
"""Time budget of one read-only call (a walk, a grep, a long read); what was found so far is returned with a note."""
MAX_PATTERN_CHARS = 1000
MAX_REGEX_PROGRAM = 10_000
"""Largest compiled RE2 program ``grep_files`` runs (``.{1000}`` is about 8000 instructions)."""
_REGEX_WORK = 20_000_000
"""Program size x bytes one RE2 call may scan: well under a second even when RE2 falls back from its DFA
to its NFA (tens of ns per unit); longer lines are searched in overlapping windows of that size."""
_MIN_WINDOW = 2048
_SORT_IN_ONE_GO = 10_000
_SNIFF_BYTES = 8192
_COUNT_LINES_UP_TO = 20_000_000
_NEW_FILE_MODE = 0o644


class PathRefused(ToolRetry):
    """A path the workspace policy refuses (outside the root, protected, malformed)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"Permission denied: {reason}.")
        self.reason = reason


class FileTools:
    """File tools confined to the workspace `root` (see the module docstring).

    Args:
        root: The workspace directory; it must exist. Protected directories (``~/.ssh``, a
            ``.git`` directory ...) cannot be a workspace.
        max_read_bytes: Most bytes of text one ``read_file`` call returns.
        max_write_bytes: Largest file ``write_file`` and ``edit_file`` write (and ``edit_file`` edits).
        skip_dirs: Directory names glob and grep do not descend into.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        max_read_bytes: int = DEFAULT_MAX_READ_BYTES,
        max_write_bytes: int = DEFAULT_MAX_WRITE_BYTES,
        skip_dirs: Collection[str] = DEFAULT_SKIP_DIRS,
    ) -> None:
        real = workspace_root(root, "FileTools")
        if max_read_bytes < 1 or max_write_bytes < 1:
            raise UserError("FileTools max_read_bytes and max_write_bytes must be positive")
        self.root = real
        self.max_read_bytes = max_read_bytes
        self.max_write_bytes = max_write_bytes
        self.skip_dirs = frozenset(skip_dirs)
        # Each tool gets a permission check bound to this instance (the engine calls check(args, ctx)).
        for name in _TOOL_NAMES:
            bound = getattr(self, name)
            setattr(
                self, name, bound.copy(check_permission=functools.partial(self._check_permission, name), workspace=real)
            )

    def __repr__(self) -> str:
        return f"FileTools({self.root!r})"

    # -- the tools ------------------------------------------------------------------------------------
    @tool(read_only=True)
    async def read_file(
        self,
        path: str,
        offset: Annotated[int, Field(ge=0)] = 0,
        limit: Annotated[int, Field(ge=1)] = DEFAULT_READ_LINES,
    ) -> str:
        """Read a text file of the workspace; lines are numbered from 1, like `cat -n`.

        Long files are cut after `limit` lines (or the output size limit) with a note saying how to
        read on. Binary files are refused.

        Args:
            path: File path relative to the workspace root.
            offset: Lines to skip before the first line returned (0 starts at the top).
            limit: Most lines to return.
        """
        return await _off_loop(functools.partial(self._read_file, path, offset, limit))

    @tool(read_only=True)
    async def list_dir(self, path: str = ".") -> str:
        """List a directory of the workspace: subdirectories end with "/", symlinks with "@".

        Args:
            path: Directory path relative to the workspace root ("." for the root).
        """
        return await _off_loop(functools.partial(self._list_dir, path))

    @tool(read_only=True)
    async def glob_files(self, pattern: str, path: str = ".") -> str:
        """Find files and directories by glob pattern, e.g. "**/*.py" or "src/**/test_*.{py,txt}".

        `*` and `?` match inside one path segment, `**` matches any number of directories, `[abc]`
        and `{a,b}` are supported. Results are relative to the workspace root, sorted; directories
        end with "/". Protected paths and directories like .git and node_modules are skipped.

        Args:
            pattern: Glob pattern, relative to `path`.
            path: Directory to search from, relative to the workspace root.
        """
        return await _off_loop(functools.partial(self._glob_files, pattern, path))

    @tool(read_only=True)
    async def grep_files(
        self,
        pattern: str,
        path: str = ".",
        glob: str | None = None,
        max_matches: Annotated[int, Field(ge=1, le=MAX_GREP_MATCHES)] = 200,
        ignore_case: bool = False,
    ) -> str:
        r"""Search file contents with a regular expression, line by line.

        The syntax is RE2's: like Python `re` without backreferences, lookahead/lookbehind or
        possessive quantifiers (the engine runs in linear time). Prints "path:line: text" for each
        matching line. Binary files, very large files, protected paths and directories like .git
        and node_modules are skipped.

        Args:
            pattern: Regular expression to search for, e.g. "def \w+_handler" or "TODO|FIXME".
            path: File or directory to search, relative to the workspace root.
            glob: Only search files matching this glob, e.g. "*.py" (matched against the file
                name) or "src/**/*.ts" (matched against the path below `path`).
            max_matches: Stop after this many matching lines.
            ignore_case: Match letters in any case.
        """
        return await _off_loop(functools.partial(self._grep_files, pattern, path, glob, max_matches, ignore_case))

    # -- the tools' bodies (in a worker thread, checking `budget`) ---------------------------------------
    def _read_file(self, path: str, offset: int, limit: int, budget: _Budget) -> str:
        real, rel = self._resolve(path)
        self._require_file(real, rel)
        with open(real, "rb") as f:
            _refuse_binary(f, rel)
            out: list[str] = []
            size = 0
            line_no = 0
            stop: str | None = None
            for raw_line, cut in _lines(f, budget):
                line_no += 1
                if line_no <= offset:
                    continue
                if len(out) >= limit:
                    stop = "lines"
                    break
                text = raw_line.decode("utf-8", errors="replace").rstrip("\r\n")
                if cut or len(text) > MAX_LINE_CHARS:
                    text = text[:MAX_LINE_CHARS] + " [... line cut]"
                entry = f"{line_no:>6}\t{text}"
                if size + len(entry) + 1 > self.max_read_bytes and out:
                    stop = "size"
                    break
                out.append(entry)
                size += len(entry) + 1
            if stop is None and budget.expired:  # `_lines` ended early: the budget ran out
                if not out:
                    raise ToolRetry(
                        f"Stopped after {budget.seconds:g} s at line {line_no} of {rel} before reaching offset "
                        f"{offset}; the file is too large to read that far."
                    )
                stop = "time"
            if stop is None:
                if not out:
                    if line_no == 0:
                        return f"({rel} is empty)"
                    raise ToolRetry(f"offset {offset} is past the end of {rel}, which has {line_no} lines.")
                return "\n".join(out)
            # `line_no` counts the line that was read but not shown.
            total = (
                _count_rest(f, line_no, budget)
                if stop != "time" and os.fstat(f.fileno()).st_size <= _COUNT_LINES_UP_TO
                else None
            )
        last = offset + len(out)
        of_total = f" of {total}" if total is not None else ""
        why = {"lines": "", "size": " (output size limit)", "time": f" (stopped after {budget.seconds:g} s)"}[stop]
        out.append(
            f"[... truncated{why}: showed lines {offset + 1}-{last}{of_total}; "
            f"call read_file with offset={last} to read on]"
        )
        return "\n".join(out)

    def _list_dir(self, path: str, budget: _Budget) -> str:
        real, rel = self._resolve(path)
        if not os.path.isdir(real):
            raise ToolRetry(f"{rel} is not a directory." if os.path.exists(real) else f"{rel} does not exist.")
        count = 0
        stopped = False

        def counted(it: Iterator[os.DirEntry[str]]) -> Iterator[os.DirEntry[str]]:
            nonlocal count, stopped
            for entry in it:
                count += 1
                if count % 256 == 0 and budget.expired:
                    stopped = True
                    return
                yield entry

        try:
            with os.scandir(real) as it:
                # The first entries by name without sorting a huge directory in one C call (that holds the GIL).
                entries = heapq.nsmallest(MAX_LIST_ENTRIES, counted(it), key=lambda e: e.name)
        except OSError as exc:
            raise ToolRetry(f"Cannot list {rel}: {exc.strerror or exc}.") from None
        lines: list[str] = []
        for entry in entries:
            budget.check()
            lines.append(self._describe_entry(entry))
        counted_text = f"{count}+ entries, stopped after {budget.seconds:g} s" if stopped else f"{count} entries"
        header = f"{rel}/ ({counted_text})" if rel != "." else f"./ ({counted_text})"
        if not entries:
            return f"{header}: empty directory"
        if count > MAX_LIST_ENTRIES:
            lines.append(f"[... {count - MAX_LIST_ENTRIES} more entries not shown]")
        return header + "\n" + "\n".join(lines)

    def _glob_files(self, pattern: str, path: str, budget: _Budget) -> str:
        parts_list = _compile_glob(pattern)
        real, rel = self._resolve(path)
        if not os.path.isdir(real):
            raise ToolRetry(f"{rel} is not a directory." if os.path.exists(real) else f"{rel} does not exist.")
        found: list[str] = []
        more = False
        walk = _Walk(self, real, budget)
        for _full, entry_rel, is_dir in walk:
            below = os.path.relpath(os.path.join(self.root, entry_rel), real).replace(os.sep, "/")
            if any(glob_match(parts, below.split("/")) for parts in parts_list):
                if len(found) >= MAX_GLOB_RESULTS:
                    more = True
                    break
                found.append(entry_rel + ("/" if is_dir else ""))
        if not found:
            note = f" ({walk.stopped})" if walk.stopped else ""
            return f"No files match {pattern!r} under {rel}{note}."
        found.sort()
        if more:
            found.append(f"[... stopped at {MAX_GLOB_RESULTS} results; use a narrower pattern or path]")
        if walk.stopped:
            found.append(f"[... {walk.stopped}: results may be incomplete]")
        return "\n".join(found)

    def _grep_files(
        self, pattern: str, path: str, glob: str | None, max_matches: int, ignore_case: bool, budget: _Budget
    ) -> str:
        regex = _compile_regex(pattern, ignore_case)
        filters = _compile_glob(glob) if glob else None
        by_name = glob is not None and "/" not in glob
        real, rel = self._resolve(path)
        if not os.path.exists(real):
            raise ToolRetry(f"{rel} does not exist.")
        if not os.path.isdir(real) and not os.path.isfile(real):
            raise ToolRetry(f"{rel} is not a regular file.")
        matches: list[str] = []
        files_with_matches = 0
        walk: _Walk | None = None
        if os.path.isdir(real):
            walk = _Walk(self, real, budget)
            candidates: Iterator[tuple[str, str, bool]] = iter(walk)
        else:
            candidates = iter([(real, rel, False)])
        full_stop = False
        for full, entry_rel, is_dir in candidates:
            if is_dir:
                continue
            if filters is not None and walk is not None:
                below = os.path.relpath(os.path.join(self.root, entry_rel), real).replace(os.sep, "/")
                subject = [below.rsplit("/", 1)[-1]] if by_name else below.split("/")
                if not any(glob_match(parts, subject) for parts in filters):
                    continue
            found = _grep_file(full, entry_rel, regex, max_matches - len(matches), budget)
            if found:
                files_with_matches += 1
                matches.extend(found)
            if len(matches) >= max_matches:
                full_stop = True
                break
            if budget.expired:
                break
        notes: list[str] = []
        if full_stop:
            notes.append(f"[... stopped at {max_matches} matches; narrow the pattern, path or glob]")
        stopped = walk.stopped if walk is not None and walk.stopped else ""
        if not stopped and not full_stop and budget.expired:
            stopped = f"stopped after {budget.seconds:g} s"
        if stopped:
            notes.append(f"[... {stopped}: results may be incomplete]")
        if not matches:
            return f"No matches for {pattern!r} under {rel}." + ("\n" + "\n".join(notes) if notes else "")
        summary = f"{len(matches)} matching line(s) in {files_with_matches} file(s)"
        return "\n".join([*matches, *notes, summary])

    @tool(destructive=True, edit=True)
    def write_file(self, path: str, content: str) -> str:
        """Create a file, or replace a file's whole content (parent directories are created).

        To change part of an existing file, prefer edit_file.

        Args:
            path: File path relative to the workspace root.
            content: The complete new content of the file.
        """
        real, rel = self._resolve(path)
        data = content.encode("utf-8")
        if len(data) > self.max_write_bytes:
            raise ToolRetry(
                f"The content is {len(data)} bytes; the limit is {self.max_write_bytes}. Write smaller files."
            )
        if os.path.isdir(real):
            raise ToolRetry(f"{rel} is a directory.")
        existed = os.path.exists(real)
        try:
            os.makedirs(os.path.dirname(real), exist_ok=True)
        except OSError as exc:
            raise ToolRetry(f"Cannot create the directory of {rel}: {exc.strerror or exc}.") from None
        _atomic_write(real, data, rel)
        lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
        verb = "Overwrote" if existed else "Created"
        return f"{verb} {rel} ({len(data)} bytes, {lines} lines)."

    @tool(destructive=True, edit=True)
    def edit_file(self, path: str, old: str, new: str, replace_all: bool = False) -> str:
        """Replace exact text in a file. `old` must occur exactly once unless replace_all is true.

        Copy `old` from the file exactly, including indentation and line breaks, with enough
        surrounding lines to make it unique.

        Args:
            path: File path relative to the workspace root.
            old: The exact text to replace.
            new: The text to put in its place.
            replace_all: Replace every occurrence instead of requiring a unique one.
        """
        real, rel = self._resolve(path)
        if not old:
            raise ToolRetry("`old` is empty. To create a file or replace all its content, use write_file.")
        if old == new:
            raise ToolRetry("`old` and `new` are the same; nothing to change.")
        self._require_file(real, rel)
        if os.path.getsize(real) > self.max_write_bytes:
            raise ToolRetry(f"{rel} is larger than {self.max_write_bytes} bytes, the edit limit.")
        with open(real, "rb") as f:
            _refuse_binary(f, rel)
            f.seek(0)
            data = f.read()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolRetry(f"{rel} is not UTF-8 text; it cannot be edited with edit_file.") from None
        count = text.count(old)
        if count == 0 and "\r\n" in text and "\n" in old and "\r\n" not in old:
            # The model saw the file with plain newlines; the file uses CRLF.
            old, new = old.replace("\n", "\r\n"), new.replace("\r\n", "\n").replace("\n", "\r\n")
            count = text.count(old)
        if count == 0:
            raise ToolRetry(
                f"`old` was not found in {rel}. It must match the file exactly, including whitespace and "
                "indentation; read the file again and copy the text."
            )
        if count > 1 and not replace_all:
            where = _occurrence_lines(text, old)
            raise ToolRetry(
                f"`old` occurs {count} times in {rel} (lines {where}). Include more surrounding lines to make it "
                "unique, or set replace_all to true to replace every occurrence."
            )
        if replace_all and len(text) + count * (len(new) - len(old)) > self.max_write_bytes:
            # Checked before replacing: a short `old` with a long `new` could build a huge string.
            raise ToolRetry(
                f"Replacing all {count} occurrences would make the file larger than {self.max_write_bytes} bytes, "
                "the limit."
            )
        updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        encoded = updated.encode("utf-8")
        if len(encoded) > self.max_write_bytes:
            raise ToolRetry(f"The edited file would be {len(encoded)} bytes; the limit is {self.max_write_bytes}.")
        first_line = text.count("\n", 0, text.index(old)) + 1
        _atomic_write(real, encoded, rel)
        replaced = count if replace_all else 1
        return f"Edited {rel}: replaced {replaced} occurrence(s), first at line {first_line}."

    # -- path policy ----------------------------------------------------------------------------------
    def resolve(self, path: str) -> str:
        """The real absolute path `path` (relative to the root) refers to; `PathRefused` if not allowed."""
        return self._resolve(path)[0]

    def _resolve(self, path: str) -> tuple[str, str]:
        """``(real absolute path, path relative to the root for messages)``, or raise `PathRefused`."""
        if not isinstance(path, str):
            raise PathRefused(f"the path must be a string, not {type(path).__name__}")
        if "\x00" in path:
            raise PathRefused("the path contains a NUL byte")
        if not path.strip():
            raise PathRefused("the path is empty")
        lexical = os.path.normpath(os.path.join(self.root, path))
        real = os.path.realpath(lexical)
        if not _inside(self.root, real):
            raise PathRefused(f"{path!r} is outside the workspace")
        rel = _rel(self.root, real)
        # The name the model used and the resolved target: a symlink cannot hide either one.
        if refuse_dangerous_path(lexical) is not None or refuse_dangerous_path(real) is not None:
            shown = rel if rel == _rel(self.root, lexical) else f"{path} (-> {rel})"
            raise PathRefused(f"{shown!r} is a protected path (secrets or repository internals)")
        return real, rel

    def _check_permission(self, name: str, args: Mapping[str, Any], ctx: RuntimeContext) -> PermissionDecision | None:
        """Deny calls whose paths leave the workspace or touch protected paths; otherwise no opinion."""
        path = args.get("path", None if name in ("read_file", "write_file", "edit_file") else ".")
        if not isinstance(path, str):
            return None  # argument validation reports it
        try:
            self._resolve(path)
            if name == "glob_files" and isinstance(args.get("pattern"), str):
                _compile_glob(args["pattern"])
        except PathRefused as exc:
            return PermissionDecision.deny(exc.reason)
        except ToolRetry:
            return None  # a malformed pattern: the tool reports it to the model
        return None

    def _dangerous(self, full: str) -> bool:
        return is_dangerous_path(full)

    def _require_file(self, real: str, rel: str) -> None:
        if not os.path.exists(real):
            raise ToolRetry(f"{rel} does not exist. Use list_dir or glob_files to find the right path.")
        if os.path.isdir(real):
            raise ToolRetry(f"{rel} is a directory; use list_dir to see its entries.")
        if not os.path.isfile(real):
            raise ToolRetry(f"{rel} is not a regular file.")

    def _describe_entry(self, entry: os.DirEntry[str]) -> str:
        name = entry.name
        try:
            if entry.is_symlink():
                target = os.path.realpath(entry.path)
                inside = _inside(self.root, target)
                text = f"{name}@" + ("" if inside else " (points outside the workspace)")
                if inside and self._dangerous(target):
                    text += " (protected)"
                return text
            text = f"{name}/" if entry.is_dir() else f"{name}  ({_size(entry.stat().st_size)})"
        except OSError:
            return f"{name}  (unreadable)"
        if self._dangerous(entry.path):
            text += " (protected)"
        return text


_TOOL_NAMES = ("read_file", "list_dir", "glob_files", "grep_files", "write_file", "edit_file")


# -- helpers ------------------------------------------------------------------------------------------
def _inside(root: str, path: str) -> bool:
    try:
        return os.path.commonpath([root, path]) == root
    except ValueError:  # different drives (Windows) or a mix of absolute and relative
        return False


def _rel(root: str, path: str) -> str:
    return os.path.relpath(path, root).replace(os.sep, "/")


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover - the loop always returns


def _refuse_binary(f: BinaryIO, rel: str) -> None:
    head = f.read(_SNIFF_BYTES)
    f.seek(0)
    if b"\x00" in head:
        raise ToolRetry(f"{rel} is a binary file; read_file and edit_file handle text files only.")


def _lines(f: BinaryIO, budget: _Budget, cap: int = MAX_LINE_CHARS * 4) -> Iterator[tuple[bytes, bool]]:
    """Lines of `f` as ``(bytes, cut)``; a line longer than `cap` bytes is cut and the rest skipped.

    Ends early (silently) when `budget` expires: the caller checks `budget.expired`.
    """
    while not budget.expired:
        line = f.readline(cap)
        if not line:
            return
        if len(line) == cap and not line.endswith(b"\n"):
            while not budget.expired:  # skip the rest of the long line without holding it in memory
                rest = f.readline(cap)
                if not rest or rest.endswith(b"\n"):
                    break
            yield line, True
        else:
            yield line, False


def _count_rest(f: BinaryIO, seen: int, budget: _Budget) -> int | None:
    count = seen
    for _ in _lines(f, budget):
        count += 1
    return None if budget.expired else count


def _atomic_write(real: str, data: bytes, rel: str) -> None:
    directory = os.path.dirname(real)
    try:
        mode = stat.S_IMODE(os.stat(real).st_mode)
    except FileNotFoundError:
        mode = _NEW_FILE_MODE
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(real) + ".", suffix=".tmp")
    except OSError as exc:
        raise ToolRetry(f"Cannot write {rel}: {exc.strerror or exc}.") from None
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, real)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise ToolRetry(f"Cannot write {rel}: {exc.strerror or exc}.") from None
        raise


def _occurrence_lines(text: str, old: str, most: int = 10) -> str:
    lines: list[str] = []
    start = 0
    while len(lines) < most:
        index = text.find(old, start)
        if index < 0:
            break
        lines.append(str(text.count("\n", 0, index) + 1))
        start = index + 1
    return ", ".join(lines)


# -- running off the loop -----------------------------------------------------------------------------
class _CancelledError(Exception):
    """The call that started the work was cancelled; the worker thread unwinds."""


class _Budget:
    """The time budget and cancel flag of work running in a worker thread.

    A thread cannot be killed, so the work itself checks `expired` (or `check`) often: per line,
    per directory entry, per regex window. Cancellation raises `_CancelledError` there; running out of
    time makes `expired` true so the work returns what it has.
    """

    __slots__ = ("_cancelled", "deadline", "seconds")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True

    def check(self) -> None:
        if self._cancelled:
            raise _CancelledError

    @property
    def expired(self) -> bool:
        if self._cancelled:
            raise _CancelledError
        return time.monotonic() > self.deadline


async def _off_loop(work: Callable[[_Budget], str], seconds: float | None = None) -> str:
    """Run `work(budget)` in a worker thread; cancelling the call tells the thread to stop."""
    budget = _Budget(SEARCH_SECONDS if seconds is None else seconds)
    try:
        return await asyncio.to_thread(work, budget)
    except asyncio.CancelledError:
        budget.cancel()
        raise


# -- grep -----------------------------------------------------------------------------------------------
_re2_module: Any = None


def _re2() -> Any:
    """The ``re2`` module (google-re2), imported on first use."""
    global _re2_module
    if _re2_module is None:
        try:
            _re2_module = importlib.import_module("re2")
        except ImportError:
            raise UserError("grep_files needs the google-re2 package: pip install google-re2") from None
    return _re2_module


class _Regex:
    """A compiled RE2 pattern that says whether a line matches, in bounded steps."""

    __slots__ = ("_search", "window")

    def __init__(self, compiled: Any, program_size: int) -> None:
        self._search = compiled.search
        # RE2 is linear in the text, but its slowest mode (NFA) costs about text x program size: a long
        # line is searched in overlapping windows so each call stays short and the budget is checked.
        # Exact for lines up to `window` bytes; on longer lines a match must fit in half a window.
        self.window = max(_MIN_WINDOW, _REGEX_WORK // max(program_size, 1))

    def matches(self, line: bytes, budget: _Budget) -> bool:
        size = len(line)
        if size <= self.window:
            return self._search(line) is not None
        step = self.window // 2
        for start in range(0, size, step):
            if budget.expired:
                return False
            # pos/endpos keep the whole line as context: ^, $ and \b only match where they really would.
            if self._search(line, start, min(size, start + self.window)) is not None:
                return True
            if start + self.window >= size:
                break
        return False


def _compile_regex(pattern: str, ignore_case: bool) -> _Regex:
    """Compile a model-supplied pattern with RE2; `ToolRetry` says what is wrong or unsupported."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ToolRetry(f"The pattern is longer than {MAX_PATTERN_CHARS} characters.")
    if any("\ud800" <= c <= "\udfff" for c in pattern):  # JSON can carry them; UTF-8 (and RE2) cannot
        raise ToolRetry(f"The pattern {pattern!r} is not valid Unicode (it has a lone surrogate such as \\ud800).")
    re2 = _re2()
    options = re2.Options()
    options.log_errors = False  # errors go to the model, not to stderr
    options.never_capture = True  # only "does the line match": lets RE2 use its fastest engines
    options.case_sensitive = not ignore_case
    translated, unsupported = _scan_pattern(pattern)
    if unsupported:  # refused even where RE2 would accept the text with another meaning
        raise ToolRetry(
            f"The pattern {pattern!r} uses {'; '.join(unsupported)}, which grep_files does not support: it "
            "matches with RE2, a linear-time engine without backtracking (so no pattern can hang the "
            "search). Rewrite the pattern without them, e.g. search for a simpler pattern and check the "
            "matching lines."
        )
    try:
        compiled = re2.compile(translated, options)
    except re2.error as exc:
        reason = _re2_error_text(exc)
        hint = ""
        if "repetition size" in reason:
            hint = " Counted repetitions like {n,m} are limited to 1000, nested ones multiplied."
        elif "too large" in reason:
            hint = " The pattern is too complex; simplify it."
        raise ToolRetry(
            f"Invalid regular expression {pattern!r}: {reason}.{hint} grep_files uses RE2 syntax (Python `re` "
            "syntax without backreferences, lookaround or possessive quantifiers)."
        ) from None
    regexp = getattr(compiled, "_regexp", None)
    size = int(regexp.ProgramSize()) if regexp is not None else MAX_REGEX_PROGRAM
    if size > MAX_REGEX_PROGRAM:
        raise ToolRetry(
            f"The pattern {pattern!r} is too complex (it compiles to {size} instructions; the limit is "
            f"{MAX_REGEX_PROGRAM}). Use smaller counted repetitions ({{n,m}}) or character classes."
        )
    return _Regex(compiled, size)


def _re2_error_text(exc: BaseException) -> str:
    arg = exc.args[0] if exc.args else ""
    text = arg.decode("utf-8", errors="replace") if isinstance(arg, bytes) else str(arg)
    return text.rstrip(".") or "syntax error"


_UNSUPPORTED_GROUPS = (
    ("(?P=", "named backreferences ((?P=name))"),
    ("(?=", "lookahead ((?=...))"),
    ("(?!", "negative lookahead ((?!...))"),
    ("(?<=", "lookbehind ((?<=...))"),
    ("(?<!", "negative lookbehind ((?<!...))"),
    ("(?>", "atomic groups ((?>...))"),
    ("(?(", "conditional groups ((?(1)...))"),
    ("(?#", "comments ((?#...))"),
)
_INLINE_FLAGS = re.compile(r"\(\?([a-zA-Z]+)[:)]")
_ESCAPED_DIGITS = re.compile(r"[0-9]{1,3}")
_OCTAL_ESCAPE = re.compile(r"[0-7]{3}")  # \123: an octal character code for Python and RE2 alike


def _backreference(pattern: str, start: int) -> str | None:
    r"""The group number of a backreference whose digits start at `start` (after a backslash), or None.

    Python reads ``\1`` to ``\99`` as group references and three octal digits (``\101``) as a
    character; RE2 has no references and reads ``\10`` as octal, so those are refused, not searched.
    """
    digits = _ESCAPED_DIGITS.match(pattern, start)
    if digits is None or digits.group().startswith("0") or _OCTAL_ESCAPE.fullmatch(digits.group()):
        return None
    return digits.group()


def _scan_pattern(pattern: str) -> tuple[str, list[str]]:
    r"""The pattern in RE2 spelling (Python's ``\Z`` is RE2's ``\z``) and the Python-only constructs it uses."""
    out: list[str] = []
    found: list[str] = []

    def note(what: str) -> None:
        if what not in found:
            found.append(what)

    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1 : i + 2]
            reference = None if in_class else _backreference(pattern, i + 1)
            if reference is not None:
                note(f"backreferences (\\{reference})")
            out.append("\\z" if nxt == "Z" and not in_class else c + nxt)
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            out.append(c)
            i += 1
            for lead in ("^", "]"):  # "[]...]" and "[^]...]": the first "]" is a literal
                if pattern.startswith(lead, i):
                    out.append(lead)
                    i += 1
            continue
        elif c == "(":
            for prefix, what in _UNSUPPORTED_GROUPS:
                if pattern.startswith(prefix, i):
                    note(what)
            flags = _INLINE_FLAGS.match(pattern, i)
            if flags is not None and set(flags.group(1)) - set("imsU-"):
                note(f"inline flags other than i, m and s ((?{flags.group(1)}))")
        elif c in "*+?}" and pattern.startswith("+", i + 1):
            note(f"possessive quantifiers ({c}+)")
        out.append(c)
        i += 1
    return "".join(out), found


def _grep_file(full: str, rel: str, regex: _Regex, budget: int, work: _Budget) -> list[str]:
    """The ``path:line: text`` entries of `full`'s matching lines (at most `budget`)."""
    try:
        # Non-blocking open: a FIFO (or a device) found by the walk must not hang the worker thread.
        with open(os.open(full, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_GREP_FILE_BYTES:
                return []
            data = f.read(MAX_GREP_FILE_BYTES + 1)
    except OSError:
        return []
    if b"\x00" in data[:_SNIFF_BYTES] or len(data) > MAX_GREP_FILE_BYTES:
        return []
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:  # matched as text: undecodable bytes become U+FFFD, as read_file shows them
        data = data.decode("utf-8", errors="replace").encode("utf-8")
    found: list[str] = []
    # Lines end at "\n" (a trailing "\r" is dropped), so the numbers agree with read_file.
    start, end_of_data, number = 0, len(data), 0
    while start < end_of_data:
        if work.expired:  # per line: with a pathological pattern one line may cost milliseconds
            break
        cut = data.find(b"\n", start)
        stop = end_of_data if cut < 0 else cut
        line = data[start:stop]
        start = stop + 1
        number += 1
        if line.endswith(b"\r"):
            line = line[:-1]
        if regex.matches(line, work):
            shown = line[: GREP_LINE_CHARS * 4].decode("utf-8", errors="ignore")  # never decode a huge line
            if len(shown) > GREP_LINE_CHARS or len(line) > GREP_LINE_CHARS * 4:
                shown = shown[:GREP_LINE_CHARS] + " [...]"
            found.append(f"{rel}:{number}: {shown}")
            if len(found) >= budget:
                break
    return found


class _Walk:
    """The entries below a directory, safe for the workspace: ``(real path, rel to root, is_dir)``.

    Skips `skip_dirs`, protected paths and symlinks that lead out of the workspace; never descends
    into directory symlinks; checks `budget` per entry and stops after `MAX_WALK_ENTRIES` entries or
    when the budget is spent, saying so in `stopped`.
    """

    def __init__(self, tools: FileTools, top: str, budget: _Budget) -> None:
        self.tools = tools
        self.top = top
        self.budget = budget
        self.stopped = ""
        self._seen = 0

    def __iter__(self) -> Iterator[tuple[str, str, bool]]:
        tools = self.tools
        root = tools.root
        pending = [self.top]
        while pending:
            directory = pending.pop()
            subdirs: list[str] = []
            for name, is_dir, is_link in self._entries(directory):
                if self.budget.expired:
                    self.stopped = f"stopped after {self.budget.seconds:g} s"
                    return
                full = os.path.join(directory, name)
                if is_link:
                    target = os.path.realpath(full)
                    if not _inside(root, target) or tools._dangerous(full) or tools._dangerous(target):
                        continue
                    if os.path.isdir(target):
                        if name not in tools.skip_dirs:
                            yield full, _rel(root, full), True  # listed, not descended into
                    elif os.path.isfile(target):
                        yield target, _rel(root, full), False
                    continue
                if is_dir:
                    if name in tools.skip_dirs or tools._dangerous(full):
                        continue
                    subdirs.append(full)
                    yield full, _rel(root, full), True
                    continue
                if tools._dangerous(full):
                    continue
                yield full, _rel(root, full), False
            if self.stopped:
                return
            pending.extend(reversed(subdirs))

    def _entries(self, directory: str) -> Iterator[tuple[str, bool, bool]]:
        """``(name, is_dir, is_symlink)`` of `directory`, by name."""
        found: list[tuple[str, bool, bool]] = []
        try:
            with os.scandir(directory) as it:
                for entry in it:
                    self._seen += 1
                    if self._seen > MAX_WALK_ENTRIES:
                        self.stopped = f"stopped after {MAX_WALK_ENTRIES} entries"
                        break
                    if self._seen % 256 == 0 and self.budget.expired:
                        self.stopped = f"stopped after {self.budget.seconds:g} s"
                        break
                    try:
                        is_link = entry.is_symlink()
                        is_dir = not is_link and entry.is_dir(follow_symlinks=False)
                    except OSError:
                        continue
                    found.append((entry.name, is_dir, is_link))
        except OSError:
            return iter(())
        return _in_order(found)


def _in_order(items: list[tuple[str, bool, bool]]) -> Iterator[tuple[str, bool, bool]]:
    """`items` sorted by name; a huge list is heap-sorted step by step (one C sort would hold the GIL)."""
    if len(items) <= _SORT_IN_ONE_GO:
        yield from sorted(items)
        return
    heapq.heapify(items)
    while items:
        yield heapq.heappop(items)


# -- glob ---------------------------------------------------------------------------------------------
def _compile_glob(pattern: str) -> list[list[str]]:
    """The pattern's alternatives (``{a,b}`` expanded), each split into path segments."""
    if not isinstance(pattern, str) or not pattern.strip():
        raise ToolRetry("The glob pattern is empty.")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ToolRetry(f"The glob pattern is longer than {MAX_PATTERN_CHARS} characters.")
    if "\x00" in pattern:
        raise PathRefused("the pattern contains a NUL byte")
    text = pattern.replace("\\", "/")
    if text.startswith("/") or re.match(r"^[A-Za-z]:/", text):
        raise PathRefused(f"the pattern {pattern!r} is absolute; patterns are relative to the search directory")
    alternatives: list[list[str]] = []
    for alternative in _expand_braces(text):
        parts = [p for p in alternative.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise PathRefused(f"the pattern {pattern!r} leaves the search directory ('..')")
        collapsed: list[str] = []
        for part in parts:
            if part == "**" and collapsed and collapsed[-1] == "**":
                continue
            collapsed.append(part)
        alternatives.append(collapsed or ["*"])
    return alternatives


_BRACES = re.compile(r"\{([^{}]*,[^{}]*)\}")


def _expand_braces(pattern: str, limit: int = 64) -> list[str]:
    match = _BRACES.search(pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    out: list[str] = []
    for choice in match.group(1).split(","):
        for expanded in _expand_braces(head + choice + tail, limit):
            out.append(expanded)
            if len(out) >= limit:
                raise ToolRetry(f"The pattern {pattern!r} expands to too many alternatives (more than {limit}).")
    return out


def glob_match(pattern: Sequence[str], parts: Sequence[str]) -> bool:
    """Whether path segments `parts` match glob segments `pattern` (``**`` spans any number of segments)."""
    memo: dict[tuple[int, int], bool] = {}

    def match(pi: int, si: int) -> bool:
        key = (pi, si)
        cached = memo.get(key)
        if cached is not None:
            return cached
        if pi == len(pattern):
            result = si == len(parts)
        elif pattern[pi] == "**":
            result = any(match(pi + 1, k) for k in range(si, len(parts) + 1))
        else:
            result = si < len(parts) and fnmatch.fnmatchcase(parts[si], pattern[pi]) and match(pi + 1, si + 1)
        memo[key] = result
        return result

    return match(0, 0)
