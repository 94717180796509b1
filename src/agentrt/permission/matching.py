"""How rules match calls: argument kinds, canonical values, command and path semantics.

Three kinds of argument (by name, see `is_command_key` and `is_path_key`):

- **shell commands** are parsed (`agentrt.permission.commands`). An allow pattern must match every
  simple command on its own (redirect targets count as paths that must be allowed too); its ``*`` never
  spans a shell metacharacter or anything the shell computes. A deny or ask pattern matches if it
  matches the whole line, any simple command, any tail of one (``sudo rm -rf /`` → ``rm -rf /``), or
  a script run through ``sh -c``/``eval``; a line that cannot be parsed is matched on its raw text.
- **paths** are resolved (`agentrt.permission.paths`). An allow pattern must match every spelling of
  the path (lexical and with symlinks resolved). A deny or ask pattern matches any spelling, also
  NFKC-casefolded, also everything below a matching directory, and applies to every path argument
  of the call whatever its name, to redirect targets and to the words of shell commands.
- **other values** are compared as text: strings as they are, other values in canonical JSON
  (sorted keys, ``1.0`` written ``1``); a pattern that is a JSON object or array is compared in that
  form too. Deny and ask patterns also match a string stripped, a numeric string by value (``"1.0"``,
  ``"+01"`` as ``1``), a string holding a JSON object or array in canonical form, and NFKC-casefolded
  text without invisible format characters.

Regular expressions (``re:``) are full matches with ``re.DOTALL``.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import math
import os
import posixpath
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from agentrt.permission.commands import (
    GUARD_CLASS,
    SHELL_META,
    ParsedCommand,
    Redirect,
    SimpleCommand,
    guard,
    parse_command,
    plain_text,
    suffix_texts,
)
from agentrt.permission.decision import Decision
from agentrt.permission.paths import (
    PathForms,
    collapse_path,
    fold,
    glob_escape,
    glob_literal,
    glob_tokens,
    may_contain,
    path_pattern,
    resolve_path,
)
from agentrt.permission.shellpaths import CommandPaths, command_paths, only_tilde, walk_reaches

if TYPE_CHECKING:
    from agentrt.permission.rules import PermissionRule

__all__ = [
    "COMMAND_KEYS",
    "PATH_KEYS",
    "CallView",
    "allow_covers",
    "canonical_json",
    "canonical_number",
    "deny_matches",
    "fold",
    "is_command_key",
    "is_path_key",
    "value_text",
]

COMMAND_KEYS = frozenset({"command", "cmd", "script", "shell_command", "bash_command", "command_line", "commandline"})
"""Argument names whose string values are shell command lines."""
PATH_KEYS = frozenset(
    {
        "path",
        "paths",
        "file",
        "files",
        "file_path",
        "filepath",
        "filename",
        "dir",
        "directory",
        "target",
        "dest",
        "destination",
        "cwd",
        "workdir",
        "working_dir",
        "working_directory",
    }
)
"""Argument names whose string (or list of strings) values are paths; also names ending in `_PATH_SUFFIXES`."""
_PATH_SUFFIXES = ("_path", "_paths", "_file", "_files", "_dir", "_dirs", "_directory")
_SAFE_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/stdin"})
_SCRIPT_TAKERS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "busybox", "su", "runuser"})
_SCRIPT_TAKERS |= frozenset({"flock", "script"})
_SCRIPT_FLAG = re.compile(r"-[A-Za-z]*c|--command(?:=.*)?", re.DOTALL)
_DIGITS = r"[0-9](?:_?[0-9])*"
_NUMBER = re.compile(rf"[+-]?(?:{_DIGITS}(?:\.(?:{_DIGITS})?)?|\.{_DIGITS})(?:[eE][+-]?[0-9]+)?")
"""A number as Python's `int` / `float` read it: sign, leading zeros, ``_`` between digits, ``1.``, ``.5``."""
_FRAGMENT_SPLIT = re.compile(r"[;&|\n\r()`]|\$\(|<\(|>\(")
_ANSI_C = re.compile(r"\$'((?:[^'\\]|\\.)*)'", re.DOTALL)
_MAX_SCRIPT_DEPTH = 6
_SCRIPT_LIKE = re.compile(r"[\s;&|()<>$`]")


def is_command_key(key: str) -> bool:
    """Whether an argument of this name holds a shell command line."""
    return key in COMMAND_KEYS


def is_path_key(key: str) -> bool:
    """Whether an argument of this name holds a path (or a list of paths)."""
    return key in PATH_KEYS or key.endswith(_PATH_SUFFIXES)


# -- canonical values ---------------------------------------------------------------------------------------
def canonical_number(value: Any) -> str | None:
    """A number (or a string holding one) in one spelling: ``1``, ``1.0``, ``"1e0"``, ``"+01"``, ``" 1 "`` → ``1``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    try:
        if isinstance(value, float):
            if not math.isfinite(value):
                return None
            d = Decimal(repr(value))
        elif isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
            d = Decimal(value.strip())
        else:
            return None
    except InvalidOperation:  # pragma: no cover - the regex admits only valid numbers
        return None
    d = d.normalize()
    text = str(d) if abs(d.adjusted()) > 400 else format(d, "f")
    return "0" if text == "-0" else text


def _canonical(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() and abs(value) < 1e300 else value
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    from agentrt import _json

    return _canonical(_json.jsonable(value))


def canonical_json(value: Any) -> str:
    """JSON with sorted keys, no spaces, integral floats as integers, non-ASCII kept."""
    return json.dumps(_canonical(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def value_text(value: Any) -> str:
    """The text a rule pattern is matched against for a non-command, non-path value."""
    if isinstance(value, str):
        return value
    number = canonical_number(value)
    return number if number is not None else canonical_json(value)


@functools.lru_cache(maxsize=1024)
def _regex(source: str, flags: int) -> re.Pattern[str]:
    return re.compile(source, flags)


# -- the call as rules see it -------------------------------------------------------------------------------
class CallView:
    """One call's arguments with commands parsed and paths resolved (lazily, once)."""

    __slots__ = ("_command_paths", "_commands", "_paths", "args", "literal_tilde", "root", "tool_name")

    def __init__(self, tool_name: str, args: Mapping[str, Any], root: str, literal_tilde: bool) -> None:
        self.tool_name = tool_name
        self.args = args
        self.root = root
        self.literal_tilde = literal_tilde
        self._commands: dict[str, ParsedCommand] = {}
        self._paths: dict[str, tuple[PathForms, ...] | None] = {}
        self._command_paths: CommandPaths | None = None

    @classmethod
    def build(cls, tool_name: str, args: Mapping[str, Any], root: str, *, literal_tilde: bool = False) -> CallView:
        """A view of a call whose relative paths are taken from `root`."""
        return cls(tool_name, args if isinstance(args, Mapping) else {}, root, literal_tilde)

    def command_keys(self) -> list[str]:
        """The arguments holding shell command lines."""
        return [k for k, v in self.args.items() if is_command_key(k) and isinstance(v, str)]

    def command(self, key: str) -> ParsedCommand:
        """The parsed command line of a command argument."""
        parsed = self._commands.get(key)
        if parsed is None:
            parsed = self._commands[key] = parse_command(self.args[key])
        return parsed

    def paths(self, key: str) -> tuple[PathForms, ...] | None:
        """The resolved paths of a path argument (None when the value is not a path or list of paths)."""
        if key in self._paths:
            return self._paths[key]
        value = self.args.get(key)
        out: tuple[PathForms, ...] | None = None
        if is_path_key(key):
            if isinstance(value, str):
                out = (self.resolve(value),)
            elif isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
                out = tuple(self.resolve(v) for v in value)
        self._paths[key] = out
        return out

    def resolve(self, value: str) -> PathForms:
        """Resolve one path against the call's root."""
        return resolve_path(value, self.root, literal_tilde=self.literal_tilde)

    def path_args(self) -> list[PathForms]:
        """Every resolved path argument."""
        out: list[PathForms] = []
        for key in self.args:
            found = self.paths(key)
            if found:
                out.extend(found)
        return out

    def command_paths(self) -> CommandPaths:
        """Paths named by the shell commands (words, redirect targets), and why some may be unknown."""
        if self._command_paths is None:
            found: list[PathForms] = []
            doubt: str | None = None
            commands: list[SimpleCommand] = []
            redirects: list[Redirect] = []
            for key in self.command_keys():
                parsed = self.command(key)
                if not parsed.ok:
                    doubt = doubt or f"the command cannot be parsed ({parsed.error})"
                    for token in re.split(r"[\s;&|()<>`'\"]+", _decode_ansi_c(parsed.source)):
                        if token and not token.startswith("-"):
                            found.append(resolve_path(token, self.root))
                    continue
                commands.extend(expand_commands(parsed))
                redirects.extend(parsed.redirects)
            named = command_paths(commands, redirects, self.root)
            self._command_paths = CommandPaths(paths=(*found, *named.paths), doubt=doubt or named.doubt)
        return self._command_paths


def _decode_ansi_c(text: str) -> str:
    def decode(m: re.Match[str]) -> str:
        try:
            return m.group(1).encode("latin-1", "backslashreplace").decode("unicode_escape")
        except (UnicodeDecodeError, UnicodeEncodeError):
            return m.group(1)

    return _ANSI_C.sub(decode, text)


# -- commands: scripts inside commands ----------------------------------------------------------------------
def inner_scripts(cmd: SimpleCommand) -> list[str | None]:
    """Scripts a command runs through a shell: ``sh -c S``, ``eval S``, ``watch S`` (None: computed)."""
    out: list[str | None] = []
    words = cmd.words
    taker = False
    for i, word in enumerate(words):
        value = word.value if word.static else ""
        name = posixpath.basename(value)
        if name in ("eval", "watch") and word.static:
            rest = [w for w in words[i + 1 :] if not (name == "watch" and w.static and w.value.startswith("-"))]
            out.append(" ".join(w.value for w in rest) if all(w.static for w in rest) else None)
            break
        if name in _SCRIPT_TAKERS:
            taker = True
            continue
        if taker and word.static and _SCRIPT_FLAG.fullmatch(value):
            if value.startswith("--command="):
                out.append(value.split("=", 1)[1])
            elif i + 1 < len(words):
                nxt = words[i + 1]
                out.append(nxt.value if nxt.static else None)
            break
    return out


def expand_commands(parsed: ParsedCommand, depth: int = 0) -> Iterator[SimpleCommand]:
    """The simple commands of a line and, recursively, of the scripts they run through a shell."""
    for cmd in parsed.commands:
        yield cmd
        if depth >= _MAX_SCRIPT_DEPTH:
            continue
        for script in inner_scripts(cmd):
            if script is not None:
                inner = parse_command(script)
                if inner.ok:
                    yield from expand_commands(inner, depth + 1)


def command_doubt(parsed: ParsedCommand) -> str | None:
    """Why deny rules cannot judge this line (unparseable, a computed program or script), or None."""
    return _command_doubt(parsed.source, 0)


@functools.lru_cache(maxsize=512)
def _command_doubt(source: str, depth: int) -> str | None:
    parsed = parse_command(source)
    if not parsed.ok:
        return f"the command cannot be parsed ({parsed.error})"
    for cmd in parsed.commands:
        if cmd.words and not cmd.words[0].static:
            return f"the program of {cmd.source!r} is computed when it runs"
        for script in inner_scripts(cmd):
            if script is None:
                return f"{cmd.source!r} runs a script computed when it runs"
            if depth < _MAX_SCRIPT_DEPTH:
                why = _command_doubt(script, depth + 1)
                if why is not None:
                    return why
    return None


def deny_texts(parsed: ParsedCommand) -> frozenset[str]:
    """Every text a deny or ask command pattern is tried on."""
    return _deny_texts(parsed.source)


@functools.lru_cache(maxsize=512)
def _deny_texts(source: str, depth: int = 0) -> frozenset[str]:
    parsed = parse_command(source)
    texts = {parsed.source, parsed.source.strip()}
    scripts: list[str] = []
    if parsed.ok:
        for cmd in expand_commands(parsed):
            texts.update(suffix_texts(cmd))
            texts.add(plain_text(cmd))
            texts.update(_collapsed_tails(cmd))
            texts.add(cmd.source)
            # A quoted argument may be a script some program runs (trap, sh < x, python -c "os.system(...)").
            scripts.extend(w.value for w in cmd.words[1:] if w.static and _SCRIPT_LIKE.search(w.value))
        scripts.extend(parsed.data)
    else:
        texts.update(_fragments(parsed.source))
    if depth < 2:
        for script in scripts[:64]:
            texts.update(_deny_texts(script, depth + 1))
    texts.discard("")
    return frozenset(texts)


def _collapsed_tails(cmd: SimpleCommand) -> Iterator[str]:
    """The command's word values with path words collapsed (``//``, ``/.``, ``a/..`` → ``/``), and their tails."""
    values = [w.value for w in cmd.words]
    if not any("/" in v for v in values):
        return
    words = [collapse_path(v) if "/" in v and not v.startswith("-") else v for v in values]
    for k in range(min(len(words), 64)):
        yield " ".join(words[k:])


def _fragments(source: str) -> set[str]:
    """Pieces of a line that cannot be parsed, between operators, with and without quotes, and their tails."""
    texts: set[str] = set()
    for raw in {source, _decode_ansi_c(source)}:
        for fragment in _FRAGMENT_SPLIT.split(raw):
            for variant in (fragment, re.sub(r"[\"'\\]", "", fragment)):
                words = variant.split()
                for k in range(min(len(words), 64)):
                    texts.add(" ".join(words[k:]))
                if words and "/" in words[0]:
                    texts.add(" ".join([posixpath.basename(words[0]), *words[1:]]))
    return texts


# -- command globs for allow rules --------------------------------------------------------------------------
def _lit_regex(ch: str) -> str:
    escaped = re.escape(ch)
    if ord(ch) < 0xFFFE:
        return "(?:" + escaped + "|" + re.escape(guard(ch)) + ")"
    return escaped


@functools.lru_cache(maxsize=1024)
def command_glob(pattern: str) -> re.Pattern[str]:
    """An allow pattern over guarded command text: wildcards skip guarded (computed or metacharacter) text.

    A trailing ``" *"`` also matches nothing (``git status *`` matches ``git status``).
    """
    tokens = glob_tokens(pattern)
    optional_tail = len(tokens) >= 2 and tokens[-1][0] in ("star", "dstar") and tokens[-2] == ("lit", " ", False)
    if optional_tail:
        tokens = tokens[:-2]
    out: list[str] = []
    for kind, text, negated in tokens:
        if kind in ("star", "dstar"):
            out.append(f"[^{GUARD_CLASS}]*")
        elif kind == "any":
            out.append(f"[^{GUARD_CLASS}]")
        elif kind == "class":
            out.append(_guarded_class(text, negated))
        else:
            out.append(_lit_regex(text))
    if optional_tail:
        out.append(f"(?: [^{GUARD_CLASS}]*)?")
    return re.compile("".join(out), re.DOTALL)


def _guarded_class(body: str, negated: bool) -> str:
    chars: list[str] = []
    i = 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            lo, hi = body[i], body[i + 2]
            chars.append(re.escape(lo) + "-" + re.escape(hi))
            if not negated and ord(hi) < 0xFFFE and ord(lo) <= ord(hi):
                chars.append(re.escape(guard(lo)) + "-" + re.escape(guard(hi)))
            i += 3
            continue
        chars.append(re.escape(body[i]))
        if not negated and ord(body[i]) < 0xFFFE:
            chars.append(re.escape(guard(body[i])))
        i += 1
    if negated:
        return "[^" + "".join(chars) + GUARD_CLASS + "]"
    return "[" + "".join(chars) + "]"


def allow_simple(pattern: str, cmd: SimpleCommand) -> bool:
    """Whether an allow pattern matches one simple command."""
    if pattern.startswith("re:"):
        return cmd.static and _regex(pattern[3:], re.DOTALL).fullmatch(cmd.text) is not None
    return command_glob(pattern).fullmatch(cmd.guarded) is not None


def exact_line(pattern: str, parsed: ParsedCommand) -> bool:
    """Whether a wildcard-free pattern spells exactly this (parseable) command line."""
    if pattern.startswith("re:") or not parsed.ok:
        return False
    literal = glob_literal(pattern)
    return literal is not None and literal.strip() == parsed.source.strip()


# -- allow --------------------------------------------------------------------------------------------------
def allow_paths(pattern: str, paths: Sequence[PathForms], root: str) -> bool:
    """Whether an allow pattern matches every spelling of every path."""
    if not paths:
        return False
    if pattern.startswith("re:"):
        rx = _regex(pattern[3:], re.DOTALL)
        return all(rx.fullmatch(f) is not None for p in paths for f in p.forms)
    compiled = path_pattern(pattern, root, below=False)
    return all(compiled.matches(f) for p in paths for f in p.forms)


def allow_value(pattern: str, value: Any) -> bool:
    """Whether an allow pattern matches a plain (non-command, non-path) value."""
    text = value_text(value)
    if pattern.startswith("re:"):
        return _regex(pattern[3:], re.DOTALL).fullmatch(text) is not None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = canonical_number(pattern)
        if number is not None:
            return number == text
    return any(fnmatch.fnmatchcase(text, p) for p in _pattern_spellings(pattern))


@functools.lru_cache(maxsize=1024)
def _pattern_spellings(pattern: str) -> tuple[str, ...]:
    """The pattern, plus its canonical JSON form when it spells a JSON object (or a glob-escaped array)."""
    candidates = [pattern] if pattern.startswith(("{", "[")) else []
    literal = glob_literal(pattern)
    if literal is not None:
        candidates.append(literal)
    for text in candidates:
        try:
            loaded = json.loads(text)
        except ValueError:
            continue
        if isinstance(loaded, (dict, list)):
            return (pattern, glob_escape(canonical_json(loaded)))
    return (pattern,)


def _allow_arg(pattern: str, key: str, view: CallView) -> bool:
    paths = view.paths(key)
    if paths is not None:
        return allow_paths(pattern, paths, view.root)
    value = view.args[key]
    if is_command_key(key) and isinstance(value, str):
        parsed = view.command(key)
        if exact_line(pattern, parsed):
            return True
        return (
            parsed.ok
            and bool(parsed.commands)
            and not parsed.redirects
            and all(allow_simple(pattern, c) for c in parsed.commands)
        ) or (parsed.ok and not parsed.commands and not parsed.redirects and _allow_empty(pattern, parsed))
    return allow_value(pattern, value)


def _allow_empty(pattern: str, parsed: ParsedCommand) -> bool:
    text = "".join(guard(c) if c in SHELL_META else c for c in parsed.source.strip())
    if pattern.startswith("re:"):
        return _regex(pattern[3:], re.DOTALL).fullmatch(parsed.source.strip()) is not None
    return command_glob(pattern).fullmatch(text) is not None


def _others_match(rule: PermissionRule, key: str, view: CallView) -> bool:
    """Whether a rule's patterns other than the one for `key` match (absent path keys aim at redirects)."""
    for other, pattern in (rule.args or {}).items():
        if other == key:
            continue
        if other not in view.args:
            if is_path_key(other):
                continue
            return False
        if not _allow_arg(pattern, other, view):
            return False
    return True


def _redirect_rule(rule: PermissionRule, view: CallView) -> list[str]:
    return [p for k, p in (rule.args or {}).items() if k not in view.args and is_path_key(k)]


def _target_covered(
    red: Redirect, owner: SimpleCommand | None, key: str, usable: Sequence[PermissionRule], view: CallView
) -> bool:
    if red.kind in ("dup", "data"):
        return True
    if red.target is None or not (red.target.static or only_tilde(red.target)):
        return False
    forms = resolve_path(red.target.value, view.root)
    if all(f in _SAFE_TARGETS for f in forms.forms):
        return True
    for rule in usable:
        pats = _redirect_rule(rule, view)
        if not pats:
            continue
        command_pattern = (rule.args or {}).get(key)
        if command_pattern is not None and (owner is None or not allow_simple(command_pattern, owner)):
            continue
        if all(allow_paths(p, [forms], view.root) for p in pats):
            return True
    return False


def _key_covered(key: str, rules: Sequence[PermissionRule], view: CallView) -> bool:
    """Whether the rules together allow every part of the command line in argument `key`."""
    usable = [r for r in rules if _others_match(r, key, view)]
    if not usable:
        return False
    parsed = view.command(key)
    for rule in usable:
        args = rule.args or {}
        if key not in args and not _redirect_rule(rule, view):
            return True
        if key in args and exact_line(args[key], parsed):
            return True
    if not parsed.ok:
        return False
    patterns = [(r.args or {})[key] for r in usable if key in (r.args or {})]
    if not parsed.commands and not parsed.redirects:
        return any(_allow_empty(p, parsed) for p in patterns)
    for cmd in parsed.commands:
        if not any(allow_simple(p, cmd) for p in patterns):
            return False
        if not all(_target_covered(red, cmd, key, usable, view) for red in cmd.redirects):
            return False
    return all(_target_covered(red, None, key, usable, view) for red in parsed.group_redirects)


def allow_covers(rules: Iterable[PermissionRule], view: CallView) -> bool:
    """Whether the allow rules allow the call: one rule matching it all, or rules covering each command part."""
    applicable = [r for r in rules if r.decision is Decision.ALLOW and fnmatch.fnmatchcase(view.tool_name, r.tool)]
    if not applicable:
        return False
    command_keys = view.command_keys()
    for rule in applicable:
        if not rule.args:
            return True
        if all(
            k in view.args and (_key_covered(k, (rule,), view) if k in command_keys else _allow_arg(p, k, view))
            for k, p in rule.args.items()
        ):
            return True
    return bool(command_keys) and all(_key_covered(k, applicable, view) for k in command_keys)


# -- deny and ask ----------------------------------------------------------------------------------------------
def _deny_text(pattern: str, texts: Iterable[str]) -> bool:
    texts = list(texts)
    if pattern.startswith("re:"):
        rx = _regex(pattern[3:], re.DOTALL)
        rxi = _regex(pattern[3:], re.DOTALL | re.IGNORECASE)
        return any(rx.fullmatch(t) is not None or rxi.fullmatch(fold(t)) is not None for t in texts)
    spellings = set(_pattern_spellings(pattern))
    number = canonical_number(pattern)
    if number is not None:
        spellings.add(number)
    if len(pattern) >= 2 and pattern.endswith(" *"):
        spellings.add(pattern[:-2])
    spellings |= {fold(p) for p in spellings}
    return any(fnmatch.fnmatchcase(t, p) or fnmatch.fnmatchcase(fold(t), p) for t in texts for p in spellings)


def _deny_paths(pattern: str, paths: Iterable[PathForms], root: str) -> bool:
    test = _deny_path_test(pattern, root)
    return any(test(f) for p in paths for f in p.forms)


def _deny_path_test(pattern: str, root: str) -> Callable[[str], bool]:
    """Whether an absolute path matches a deny or ask path pattern (also below a matching directory)."""
    if pattern.startswith("re:"):
        rx = _regex(pattern[3:], re.DOTALL)
        rxi = _regex(pattern[3:], re.DOTALL | re.IGNORECASE)

        def regex_test(path: str) -> bool:
            return any(
                rx.fullmatch(p) is not None or rxi.fullmatch(fold(p)) is not None for p in _self_and_parents(path)
            )

        return regex_test
    compiled = path_pattern(_unanchor(pattern), root, below=True)
    return lambda path: compiled.matches(path) or compiled.matches_folded(fold(path))


def _self_and_parents(path: str) -> Iterator[str]:
    """``/a/b/c``, ``/a/b``, ``/a`` (a regex deny on a directory also covers what is below it)."""
    while path not in ("/", ""):
        yield path
        path = posixpath.dirname(path)


def _unanchor(pattern: str) -> str:
    """A bare name glob (no ``/``) in a deny or ask rule matches at any depth, like ``.gitignore``."""
    if "/" not in pattern and not pattern.startswith("~") and pattern not in (".", ".."):
        return "**/" + pattern
    return pattern


def deny_matches(rule: PermissionRule, view: CallView) -> bool:
    """Whether a deny or ask rule applies: each of its patterns matches some part of the call."""
    if not fnmatch.fnmatchcase(view.tool_name, rule.tool):
        return False
    for key, pattern in (rule.args or {}).items():
        if is_path_key(key):
            candidates = [*view.path_args(), *view.command_paths().paths]
            if _deny_paths(pattern, candidates, view.root):
                continue
            # The raw value too (stripped, folded, as a regex sees it): a tool may not read it as a path.
            if key in view.args and _deny_value(pattern, view.args[key]):
                continue
            return False
        if key not in view.args:
            return False
        value = view.args[key]
        if is_command_key(key) and isinstance(value, str):
            if not _deny_text(pattern, deny_texts(view.command(key))):
                return False
        elif not _deny_value(pattern, value):
            return False
    return True


def _deny_value(pattern: str, value: Any) -> bool:
    texts = [value_text(value)]
    if isinstance(value, str):
        texts.extend(_string_readings(value))
    return _deny_text(pattern, texts)


def _string_readings(value: str) -> list[str]:
    """Other texts a tool may read a string argument as: stripped, a number by value, JSON in canonical form."""
    out = [value.strip()]
    for text in (value, fold(value)):
        number = canonical_number(text)
        if number is not None:
            out.append(number)
    stripped = value.strip()
    if stripped[:1] in ("{", "["):
        try:
            loaded = json.loads(stripped)
        except ValueError:
            loaded = None
        if isinstance(loaded, (dict, list)):
            out.append(canonical_json(loaded))
    return out


def path_doubt(rule: PermissionRule, view: CallView) -> str | None:
    """Why a deny or ask rule's path patterns may apply without matching, or None.

    A directory argument may hold matching paths (a listing or search would reach them), or a redirect
    target is computed when the command runs.
    """
    patterns = [p for k, p in (rule.args or {}).items() if is_path_key(k)]
    if not patterns or not fnmatch.fnmatchcase(view.tool_name, rule.tool):
        return None
    named = view.command_paths()
    if named.doubt is not None:
        return f"a path in the command may be hidden ({named.doubt})"
    for forms in (*view.path_args(), *named.paths):
        if not os.path.isdir(forms.real):
            continue
        for pattern in patterns:
            if _directory_may_hold(pattern, forms, view.root):
                return f"{forms.raw!r} is a directory that may contain paths matching {pattern!r}"
    return None


def _directory_may_hold(pattern: str, forms: PathForms, root: str) -> bool:
    """Whether a listing or search of a directory could reach paths a deny or ask path pattern matches.

    A glob is judged on its text (`may_contain`), then by a bounded walk for symlinks leading to
    matching paths; a regular expression by a bounded walk of the tree (too big to walk: it may).
    """
    regex = pattern.startswith("re:")
    if not regex:
        compiled = path_pattern(_unanchor(pattern), root, below=True)
        if any(may_contain(compiled, f) for f in forms.forms):
            return True
    reached = walk_reaches(forms.real, _deny_path_test(pattern, root), links_only=not regex)
    return reached if reached is not None else regex
