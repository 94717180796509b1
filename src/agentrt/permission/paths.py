"""Paths as permission rules see them: resolution, path globs, and protected (dangerous) paths.

A path argument is resolved before any rule looks at it: taken relative to the tool's workspace (else
the permission context's workspace, else the process working directory), ``~`` expanded, ``.``,
``..`` and duplicate separators collapsed (`PathForms.lexical`), and symlinks resolved where the file or
its nearest existing parent exists (`PathForms.real`). Rule patterns written with relative paths are
resolved against the same root.
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from agentrt.errors import UserError
from agentrt.permission.decision import PermissionDecision

__all__ = [
    "PathForms",
    "PathPattern",
    "collapse_path",
    "is_dangerous_path",
    "refuse_dangerous_path",
    "resolve_path",
    "workspace_root",
]

_GLOB_CHARS = re.compile(r"[*?\[]")


def collapse_path(path: str) -> str:
    """`posixpath.normpath` without the POSIX special case that keeps a leading ``//``."""
    norm = posixpath.normpath(path)
    return "/" + norm.lstrip("/") if norm.startswith("//") else norm


_collapse = collapse_path


def _real(path: str) -> str:
    try:
        return _collapse(os.path.realpath(path))
    except (OSError, ValueError):
        return _collapse(path)


def _expand_home(path: str) -> str:
    return os.path.expanduser(path) if path.startswith("~") else path


@dataclass(frozen=True, slots=True)
class PathForms:
    """The spellings of one path argument a rule is matched against."""

    raw: str
    lexical: str
    """Absolute, with ``~``, ``.``, ``..`` and ``//`` resolved on the text."""
    real: str
    """`lexical` with symlinks resolved (where the path or a parent exists), ``..`` taken after them."""
    literal: tuple[str, ...] = ()
    """Other readings a tool may give the path: ``~`` taken literally by a workspace tool."""

    @property
    def forms(self) -> tuple[str, ...]:
        """Every distinct absolute spelling."""
        out = [self.lexical]
        for f in (self.real, *self.literal):
            if f not in out:
                out.append(f)
        return tuple(out)


def resolve_path(value: str, root: str, *, literal_tilde: bool = False) -> PathForms:
    """Resolve a path argument against `root` (see the module docstring)."""
    expanded = _expand_home(value)
    full = expanded if posixpath.isabs(expanded) else posixpath.join(root, expanded)
    lexical = _collapse(full)
    # The OS follows a symlink before "..": realpath of the joined text, not of the collapsed one.
    real = _real(full)
    literal: tuple[str, ...] = ()
    if literal_tilde and value.startswith("~"):
        joined = posixpath.join(root, value)
        literal = (_collapse(joined), _real(joined))
    return PathForms(raw=value, lexical=lexical, real=real, literal=literal)


# -- path globs -------------------------------------------------------------------------------------------
def glob_tokens(pattern: str) -> list[tuple[str, str, bool]]:
    """Glob tokens ``(kind, text, negated)``: ``lit``, ``star``, ``dstar``, ``any``, ``class``.

    A one-character class (``[*]``) is a literal: that is how `glob_escape` writes metacharacters.
    """
    out: list[tuple[str, str, bool]] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                out.append(("dstar", "", False))
                i += 2
                while i < n and pattern[i] == "*":
                    i += 1
            else:
                out.append(("star", "", False))
                i += 1
        elif c == "?":
            out.append(("any", "", False))
            i += 1
        elif c == "[":
            j = i + 1
            negated = j < n and pattern[j] in "!^"
            if negated:
                j += 1
            body_start = j
            if j < n and pattern[j] == "]":
                j += 1
            end = pattern.find("]", j)
            if end < 0:
                out.append(("lit", "[", False))
                i += 1
                continue
            body = pattern[body_start:end]
            if not negated and len(body) == 1:
                out.append(("lit", body, False))
            else:
                out.append(("class", body, negated))
            i = end + 1
        else:
            out.append(("lit", c, False))
            i += 1
    return out


@functools.lru_cache(maxsize=1024)
def glob_literal(pattern: str) -> str | None:
    """The text a wildcard-free glob stands for (escapes undone), or None if it has wildcards."""
    tokens = glob_tokens(pattern)
    if all(kind == "lit" for kind, _, _ in tokens):
        return "".join(text for _, text, _ in tokens)
    return None


def glob_escape(text: str) -> str:
    """A glob matching exactly `text` (also safe from the ``re:`` prefix)."""
    escaped = re.sub(r"([*?\[\]])", r"[\1]", text)
    return "[r]" + escaped[1:] if escaped.startswith("re:") else escaped


def class_regex(body: str, negated: bool) -> str:
    """A regex character class for a glob class body (``a-z``, ``!``-negation handled by the caller)."""
    inner = body.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]").replace("^", "\\^")
    return "[" + ("^" if negated else "") + inner + "]"


def _path_regex_text(pattern: str, *, below: bool) -> str:
    """Regex text for a path glob: ``**`` spans directories (``**/`` also none), ``*`` and ``?`` stay in one."""
    out: list[str] = []
    tokens = glob_tokens(pattern)
    i = 0
    while i < len(tokens):
        kind, text, negated = tokens[i]
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        prev = tokens[i - 1] if i else None
        if kind == "dstar":
            at_start = prev is None or prev == ("lit", "/", False)
            if at_start and nxt == ("lit", "/", False):
                out.append("(?:.*/)?")  # "a/**/b" also matches "a/b"
                i += 2
                continue
            if prev == ("lit", "/", False) and nxt is None:
                out[-1] = "(?:/.*)?"  # "/a/**" matches "/a" itself and everything below it
                i += 1
                continue
            out.append(".*")
        elif kind == "star":
            out.append("[^/]*")
        elif kind == "any":
            out.append("[^/]")
        elif kind == "class":
            out.append(class_regex(text, negated))
        else:
            out.append(re.escape(text))
        i += 1
    if below and not (out and out[-1] == "(?:/.*)?"):
        out.append("(?:/.*)?")
    return "".join(out)


@dataclass(frozen=True, slots=True)
class PathPattern:
    """A path rule pattern resolved against a root: regexes for its lexical and real spellings."""

    text: str
    lexical: str
    real: str
    regexes: tuple[re.Pattern[str], ...]
    folded: tuple[re.Pattern[str], ...]

    def matches(self, path: str) -> bool:
        """Whether an absolute path matches."""
        return any(r.fullmatch(path) is not None for r in self.regexes)

    def matches_folded(self, path: str) -> bool:
        """Whether an NFKC-casefolded absolute path matches the folded pattern."""
        return any(r.fullmatch(path) is not None for r in self.folded)

    def segments(self) -> Iterator[list[str]]:
        """The pattern's spellings as path segments (``**`` kept as a segment)."""
        for text in {self.lexical, self.real}:
            yield [seg for seg in text.split("/") if seg]


def _resolve_pattern_text(pattern: str, root: str, *, anchored: bool) -> tuple[str, str]:
    text = _expand_home(pattern)
    if text.startswith("**") and not anchored:
        return text, text
    if not posixpath.isabs(text):
        text = posixpath.join(root, text)
    lexical = _collapse(text)
    segs = lexical.split("/")
    literal = 1
    while literal < len(segs) and not _GLOB_CHARS.search(segs[literal]):
        literal += 1
    prefix = "/".join(segs[:literal]) or "/"
    real_prefix = _real(prefix)
    rest = "/".join(segs[literal:])
    real = real_prefix if not rest else (real_prefix.rstrip("/") + "/" + rest)
    return lexical, real


@functools.lru_cache(maxsize=4096)
def fold(text: str) -> str:
    """NFKC-normalised, case-folded text without format characters: the wider form deny and ask rules see.

    Format characters (zero-width spaces, joiners, bidi marks, soft hyphens) are invisible.
    """
    folded = unicodedata.normalize("NFKC", text).casefold()
    if folded.isascii():
        return folded
    return "".join(ch for ch in folded if unicodedata.category(ch) != "Cf")


@functools.lru_cache(maxsize=1024)
def path_pattern(pattern: str, root: str, *, below: bool) -> PathPattern:
    """Compile a path rule for matching under `root`.

    `below` (deny and ask rules): also match everything below a matching path, and leave a leading
    ``**`` unanchored (``**/*.pem`` matches anywhere). Allow rules anchor a leading ``**`` at `root`.
    """
    lexical, real = _resolve_pattern_text(pattern, root, anchored=not below)
    texts = [lexical] if real == lexical else [lexical, real]
    regexes: list[re.Pattern[str]] = []
    folded: list[re.Pattern[str]] = []
    for text in texts:
        if text.startswith("**"):
            text = "/" + text
        regexes.append(re.compile(_path_regex_text(text, below=below), re.DOTALL))
        folded.append(re.compile(_path_regex_text(fold(text), below=below), re.DOTALL))
    return PathPattern(text=pattern, lexical=lexical, real=real, regexes=tuple(regexes), folded=tuple(folded))


def may_contain(pattern: PathPattern, directory: str) -> bool:
    """Whether something strictly below `directory` could match `pattern` (for directory walks)."""
    path = [seg for seg in directory.split("/") if seg]
    return any(_below(segs, path) for segs in pattern.segments())


def _below(pat: Sequence[str], path: Sequence[str]) -> bool:
    import fnmatch

    @functools.cache
    def go(pi: int, si: int) -> bool:
        if si == len(path):
            return pi < len(pat)
        if pi == len(pat):
            return False
        seg = pat[pi]
        if seg.startswith("**"):
            return go(pi + 1, si) or go(pi, si + 1)
        if fnmatch.fnmatchcase(path[si], seg):
            return go(pi + 1, si + 1)
        return False

    return go(0, 0)


# -- dangerous paths ----------------------------------------------------------------------------------
_DANGEROUS_NAMES = frozenset(
    {
        ".bashrc",
        ".bash_profile",
        ".zshrc",
        ".profile",
        ".gitconfig",
        ".git-credentials",
        ".netrc",
        ".npmrc",
        ".pypirc",
        "id_rsa",
        "id_ed25519",
        "id_ecdsa",
        "credentials",
        "credentials.json",
        "authorized_keys",
        "known_hosts",
    }
)
_DANGEROUS_DIRS = frozenset({".git", ".ssh", ".aws", ".kube", ".gnupg", ".docker", ".config/gcloud"})


def is_dangerous_path(path: str | os.PathLike[str]) -> bool:
    """Whether a path touches secrets or repository internals (``.ssh``, ``.env*``, ``.git/``, keys...).

    Symlinks are resolved first when the path exists, so a link cannot hide its target.
    """
    raw = os.fspath(path)
    candidates = {os.path.normpath(raw)}
    try:
        candidates.add(os.path.realpath(raw))
    except (OSError, ValueError):
        pass
    for candidate in candidates:
        parts = [p for p in candidate.replace("\\", "/").split("/") if p]
        for i, part in enumerate(parts):
            lowered = part.lower()
            if lowered in _DANGEROUS_NAMES or lowered.startswith(".env"):
                return True
            if lowered in _DANGEROUS_DIRS:
                return True
            if i + 1 < len(parts) and f"{lowered}/{parts[i + 1].lower()}" in _DANGEROUS_DIRS:
                return True
    return False


def workspace_root(root: object, owner: str, *, expand_user: bool = False) -> str:
    """The real path of the workspace folder `root` given to `owner`, or a `UserError` saying why not.

    One check for every tool and preset that confines itself to a folder: a path (str or
    path-like), no NUL byte, an existing directory, neither it nor its target a protected one
    (secrets or repository internals).
    """
    raw_any: Any = root
    if not isinstance(raw_any, (str, os.PathLike)):
        raise UserError(f"{owner} root must be a path, not {type(root).__name__!r}")
    raw = os.fspath(raw_any)
    if not isinstance(raw, str) or "\x00" in raw or not raw.strip():
        raise UserError(f"{owner} root must be a non-empty text path without NUL bytes, not {raw!r}")
    try:
        real = os.path.realpath(os.path.expanduser(raw) if expand_user else raw)
    except (OSError, ValueError) as exc:
        raise UserError(f"{owner} root {raw!r} cannot be resolved: {exc}") from None
    if not os.path.isdir(real):
        raise UserError(f"{owner} root {raw!r} is not an existing directory")
    if is_dangerous_path(raw) or is_dangerous_path(real):
        raise UserError(f"{owner} root {raw!r} is a protected directory (secrets or repository internals)")
    return real


def refuse_dangerous_path(path: str | os.PathLike[str]) -> PermissionDecision | None:
    """A DENY decision for a dangerous path (for tools' `check_permission`), else None."""
    if is_dangerous_path(path):
        return PermissionDecision.deny(f"{os.fspath(path)!r} is a protected path (secrets or repository internals)")
    return None
