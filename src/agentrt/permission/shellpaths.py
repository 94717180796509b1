"""The paths a shell command line names, as deny and ask path rules see them.

A word names a path when the shell would pass it as one: a static word (quotes removed), the value
after ``=`` in ``--opt=value`` or ``X=value``, a leading ``~`` expanded; a glob or brace word (``secre?``,
``s*/x``, ``{a,secret}``) is expanded in the file system, in bounded time (too big to expand is a
doubt). Relative words are taken from the workspace and from every directory a static ``cd`` or
``pushd`` of the line moves to (``cd pub && cat ../secret/x``). A word the shell computes when it runs
(``$VAR``, ``$(...)``, backticks, ``~+``, a brace sequence) cannot be judged before it runs:
`CommandPaths.doubt` says so, and the engine asks.

This judges the command line, not the programs: a program that reads its working directory by itself
(``grep -r KEY`` without a path, ``find`` without one) or a file named inside its input is not seen.
"""

from __future__ import annotations

import fnmatch
import itertools
import os
import posixpath
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from agentrt.permission.commands import Redirect, SimpleCommand, Word
from agentrt.permission.paths import PathForms, resolve_path

__all__ = ["CommandPaths", "command_paths", "only_tilde", "walk_reaches"]

_GLOB = frozenset("*?[]")
_BRACES = frozenset("{}")
_MAX_BASES = 16
_MAX_ALTERNATIVES = 256
_MAX_ENTRIES = 5_000
_MAX_SECONDS = 0.03
_CHANGE_DIR = frozenset({"cd", "pushd"})

_Token = tuple[str, bool]
"""One character of a word and whether the shell treats it as syntax (an unquoted glob or brace)."""


@dataclass(frozen=True, slots=True)
class CommandPaths:
    """The resolved paths a command line names, and why some may be missing (a computed word), if so."""

    paths: tuple[PathForms, ...] = ()
    doubt: str | None = None


@dataclass(slots=True)
class _Walk:
    """What expanding globs may still cost: directory entries read and time (it runs on the event loop).

    Time is this thread's CPU time, not the wall clock: a busy machine that descheduled the thread
    must not turn the same command's verdict from "allowed" into "asks".
    """

    entries: int = _MAX_ENTRIES
    deadline: float = field(default_factory=lambda: time.thread_time() + _MAX_SECONDS)

    def spend(self) -> bool:
        """Take one entry; False once the budget is spent."""
        self.entries -= 1
        return self.entries >= 0 and time.thread_time() <= self.deadline


def only_tilde(word: Word) -> bool:
    """Whether the word's only computed part is a leading bare ``~`` (``~`` or ``~/x``: the home directory)."""
    return _home_tilde(word) and all(lit for _, lit in word.parts[1:])


def _home_tilde(word: Word) -> bool:
    """Whether the word starts with a ``~`` the shell replaces by the home directory (not ``~user``, ``~+``)."""
    if not word.parts or word.parts[0] != ("~", False):
        return False
    rest = word.parts[1:]
    return not rest or (rest[0][1] and rest[0][0].startswith("/"))


def command_paths(commands: Sequence[SimpleCommand], redirects: Iterable[Redirect], root: str) -> CommandPaths:
    """The paths named by `commands` (their words and assignments) and `redirects`, taken from `root`."""
    bases, doubt = _bases(commands, root)
    walk = _Walk()
    texts: list[str] = []
    words = [w for cmd in commands for w in (*cmd.assignments, *cmd.words)]
    words += [r.target for r in redirects if r.kind in ("read", "write") and r.target is not None]
    for word in words:
        why = _word_texts(word, bases, walk, texts)
        doubt = doubt or why
    out: dict[str, PathForms] = {}
    for text in dict.fromkeys(texts):
        for base in bases if not posixpath.isabs(os.path.expanduser(text)) else bases[:1]:
            forms = resolve_path(text, base)
            out.setdefault(f"{forms.lexical}\0{forms.real}", forms)
    return CommandPaths(paths=tuple(out.values()), doubt=doubt)


def _bases(commands: Sequence[SimpleCommand], root: str) -> tuple[list[str], str | None]:
    """The directories relative words may be taken from: `root` and where static ``cd``/``pushd`` go."""
    bases = [root]
    for cmd in commands:
        if not cmd.words or not cmd.words[0].static or cmd.words[0].value not in _CHANGE_DIR:
            continue
        operands = [w for w in cmd.words[1:] if not (w.static and w.value.startswith("-") and w.value != "-")]
        if operands and not (operands[0].static or only_tilde(operands[0])):
            continue  # a computed target: the word itself is a doubt
        target = operands[0].value if operands else "~"
        if target == "-":
            continue  # back to a directory already listed
        for base in list(bases):
            forms = resolve_path(target, base)
            for directory in (forms.lexical, forms.real):
                if directory not in bases:
                    bases.append(directory)
        if len(bases) > _MAX_BASES:
            return bases[:_MAX_BASES], "the command changes directory too often to follow"
    return bases, None


def _word_texts(word: Word, bases: Sequence[str], walk: _Walk, out: list[str]) -> str | None:
    """Add the path texts `word` may stand for to `out`; return why it cannot be known, if so."""
    if word.static or only_tilde(word):
        out.extend(_value_texts(word.value))
        return None
    tokens = _tokens(word)
    if tokens is None:
        return f"{word.source!r} is computed when the command runs"
    alternatives = _brace_expand(tokens)
    if alternatives is None:
        return f"{word.source!r} expands to too many words to check"
    for alternative in alternatives:
        text = "".join(ch for ch, _ in alternative)
        if not any(meta and ch in _GLOB for ch, meta in alternative):
            out.extend(_value_texts(text))
            continue
        # A literal "]" stays as it is: the parser marks only the "[" that opens a class as syntax.
        pattern = "".join(ch if meta or ch not in "*?[" else f"[{ch}]" for ch, meta in alternative)
        for candidate in (pattern, pattern.split("=", 1)[1] if "=" in pattern else ""):
            if not candidate or candidate.startswith("-"):
                continue
            matches = _expand_glob(candidate, bases, walk)
            if matches is None:
                return f"{word.source!r} matches too many files to check"
            out.extend(matches)
    return None


def _value_texts(value: str) -> Iterator[str]:
    """The texts of a word value that may name a path: the value, and what follows ``=``."""
    if not value or (value.startswith("-") and "=" not in value):
        return
    yield value
    if "=" in value:
        rest = value.split("=", 1)[1]
        if rest:
            yield rest


def _tokens(word: Word) -> list[_Token] | None:
    """The word as characters marked syntax or not; None when a part is computed (not a glob or brace)."""
    tokens: list[_Token] = []
    for index, (text, literal) in enumerate(word.parts):
        if literal:
            tokens.extend((ch, False) for ch in text)
        elif text in _GLOB or text in _BRACES:
            tokens.append((text, True))
        elif text == "~" and index == 0 and _home_tilde(word):
            tokens.extend((ch, False) for ch in os.path.expanduser("~"))
        else:
            return None
    return tokens


def _brace_expand(tokens: list[_Token]) -> list[list[_Token]] | None:
    """Bash brace expansion of a word (``a{b,c}d`` → ``abd``, ``acd``); None if a sequence or too many words."""
    done: list[list[_Token]] = []
    pending = [tokens]
    while pending:
        current = pending.pop()
        found = _first_brace(current)
        if found is None:
            done.append(current)
        elif isinstance(found, str):
            return None  # a sequence ({a..z}, {1..100}): not expanded here
        else:
            start, end, commas = found
            cuts = [start, *commas, end]
            for left, right in itertools.pairwise(cuts):
                pending.append(current[:start] + current[left + 1 : right] + current[end + 1 :])
        if len(done) + len(pending) > _MAX_ALTERNATIVES:
            return None
    return done


def _first_brace(tokens: list[_Token]) -> tuple[int, int, list[int]] | str | None:
    """The first ``{...}`` with a top-level comma: its bounds and commas; ``"sequence"`` for ``{a..b}``."""
    for start, (ch, meta) in enumerate(tokens):
        if not (meta and ch == "{"):
            continue
        depth = 0
        commas: list[int] = []
        for end in range(start, len(tokens)):
            c, m = tokens[end]
            if m and c == "{":
                depth += 1
            elif m and c == "}":
                depth -= 1
                if depth == 0:
                    if commas:
                        return start, end, commas
                    if ".." in "".join(t for t, _ in tokens[start + 1 : end]):
                        return "sequence"
                    break
            elif c == "," and depth == 1:
                commas.append(end)
    return None


def _expand_glob(pattern: str, bases: Sequence[str], walk: _Walk) -> list[str] | None:
    """Absolute paths matching glob `pattern` from each base (hidden files too); None past the budget."""
    found: list[str] = []
    absolute = pattern.startswith("/")
    for base in bases[:1] if absolute else bases:
        segments = [s for s in pattern.split("/") if s]
        current: list[str] | None = ["/" if absolute else base]
        for segment in segments:
            current = _expand_segment(current or [], segment, walk)
            if current is None:
                return None
            if not current:
                break
        found.extend(current or [])
    return found


def _expand_segment(directories: list[str], segment: str, walk: _Walk) -> list[str] | None:
    if not any(ch in _GLOB for ch in segment.replace("[*]", "").replace("[?]", "").replace("[[]", "")):
        literal = segment.replace("[*]", "*").replace("[?]", "?").replace("[[]", "[").replace("[]]", "]")
        return [posixpath.join(d, literal) for d in directories]
    matches: list[str] = []
    for directory in directories:
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    if not walk.spend():
                        return None
                    if fnmatch.fnmatchcase(entry.name, segment):
                        matches.append(entry.path)
        except OSError:
            continue
    return matches


def walk_reaches(top: str, test: Callable[[str], bool], *, links_only: bool = False) -> bool | None:
    """Whether some path below directory `top` passes `test` (None: the tree is too big to walk in time).

    Each entry is tested by its path and, for a symlink, by its target; symlinked directories are
    walked too (once each). With `links_only`, only symlinks are tested (the caller judged the rest).
    """
    walk = _Walk()
    seen = {top}
    pending = [top]
    while pending:
        directory = pending.pop()
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    if not walk.spend():
                        return None
                    link = entry.is_symlink()
                    target = os.path.realpath(entry.path) if link else entry.path
                    if (link or not links_only) and (test(entry.path) or test(target)):
                        return True
                    if entry.is_dir(follow_symlinks=True) and target not in seen:
                        seen.add(target)
                        pending.append(target if link else entry.path)
        except OSError:
            continue
    return False
