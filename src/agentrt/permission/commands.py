"""A strict parser for the part of bash syntax that command rules judge.

`parse_command` splits a command line into the simple commands that would run (with the commands
inside ``$(...)``, backticks, ``<(...)``, ``>(...)``, subshells, ``{ ...; }`` groups, pipelines,
lists and unquoted here-documents) and the redirections. Words keep where each character came from:
literal text (quoted or plain) or dynamic shell syntax (parameter expansions, substitutions, unquoted
globs, braces, a leading ``~``), so a rule's ``*`` can be kept from spanning anything the shell would
compute. What the parser does not understand it refuses: unbalanced quotes or parentheses, control
characters, ANSI-C ``$'...'`` and locale ``$"..."`` quoting, arithmetic, ``${...}`` with operators,
compound commands (``if``, ``for``, ``while``, ``case``, ``[[ ]]``, ``(( ))``), function definitions.
A refused command never matches an allow rule.
"""

from __future__ import annotations

import functools
import posixpath
import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

__all__ = [
    "ParsedCommand",
    "Redirect",
    "SimpleCommand",
    "Word",
    "parse_command",
    "render_value",
]

MAX_DEPTH = 24
"""Deepest nesting of substitutions, subshells and ``-c`` scripts the parser follows."""
MAX_CHARS = 200_000
SHELL_META = frozenset(";&|<>()$`\\\n\r")
"""Characters a rule's wildcard never spans, even inside quotes."""
GUARD = 0xF0000
GUARD_CLASS = "\U000f0000-\U000ffffd"


def guard(ch: str) -> str:
    """`ch` moved to the private-use plane a wildcard does not span."""
    code = ord(ch)
    return chr(GUARD + code) if code < 0xFFFE else "\U000ffffd"


_WORD_END = frozenset(" \t\n;&|()<>")
_SAFE_WORD = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]*\])?\+?=")
_PARAM = re.compile(r"\$(?:\{(?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])\}|[A-Za-z_][A-Za-z0-9_]*|[0-9]|[@*#?$!-])")
_REDIRECT = re.compile(r"(?:[0-9]+(?=[<>]))?(<<<|<<-|<<|<>|<&|<|>>|>\||>&|>|&>>|&>)")
_COMPOUND_WORDS = frozenset(
    {"if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until", "do", "done"}
    | {"function", "coproc", "in", "[[", "]]", "))"}
)
_BAD_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"})


@dataclass(frozen=True, slots=True)
class Word:
    """One shell word as parts ``(text, literal)``: literal text, or dynamic syntax kept as its source."""

    parts: tuple[tuple[str, bool], ...]
    source: str
    value: str = field(init=False, compare=False)
    """The word after quote removal (dynamic parts as their source text)."""
    static: bool = field(init=False, compare=False)
    """Whether the value is known without running anything (no expansion, glob or substitution)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", "".join(text for text, _ in self.parts))
        object.__setattr__(self, "static", all(literal for _, literal in self.parts))


@dataclass(frozen=True, slots=True)
class Redirect:
    """A redirection: `kind` is ``read``, ``write``, ``dup`` (``2>&1``) or ``data`` (here-doc, here-string)."""

    op: str
    target: Word | None
    kind: str


@dataclass(frozen=True, slots=True)
class SimpleCommand:
    """One simple command: variable assignments, the words (program and arguments), redirections."""

    assignments: tuple[Word, ...]
    words: tuple[Word, ...]
    redirects: tuple[Redirect, ...]
    source: str
    text: str = field(init=False, compare=False, repr=False)
    """The canonical text (see `render`)."""
    guarded: str = field(init=False, compare=False, repr=False)
    """`text` with computed parts and shell metacharacters moved to a private-use plane, out of a
    rule wildcard's reach (see `agentrt.permission.matching.command_glob`)."""

    def __post_init__(self) -> None:
        text, mask = render(self)
        object.__setattr__(self, "text", text)
        object.__setattr__(
            self,
            "guarded",
            "".join(
                ch if literal and ch not in SHELL_META else guard(ch) for ch, literal in zip(text, mask, strict=True)
            ),
        )

    @property
    def argv(self) -> tuple[str, ...]:
        """The word values."""
        return tuple(w.value for w in self.words)

    @property
    def static(self) -> bool:
        """Whether every assignment and word is static."""
        return all(w.static for w in self.assignments) and all(w.static for w in self.words)


@dataclass(frozen=True, slots=True)
class ParsedCommand:
    """A parsed command line; `error` says why it was refused (then `commands` is empty)."""

    source: str
    commands: tuple[SimpleCommand, ...] = ()
    redirects: tuple[Redirect, ...] = ()
    """Every redirection, including those of groups and subshells (also listed on their commands)."""
    group_redirects: tuple[Redirect, ...] = ()
    """Redirections of ``( ... )`` and ``{ ...; }`` (they belong to no single simple command)."""
    compound: bool = False
    """Whether the line has operators, substitutions, subshells or groups (more than one plain command)."""
    data: tuple[str, ...] = ()
    """Here-document bodies and here-string values (text fed to a program, which may run it)."""
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the line was understood."""
        return self.error is None


class _RefusedError(Exception):
    pass


@dataclass(slots=True)
class _Builder:
    start: int = -1
    end: int = -1
    assignments: list[Word] = field(default_factory=list)
    words: list[Word] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.assignments or self.words or self.redirects)


@dataclass(slots=True)
class _Sequence:
    """Where `_Parser.sequence` stands in the sequence it is reading."""

    closer: str | None
    """The character that ends the sequence (``)``), or None for the whole line."""
    cmd: _Builder = field(default_factory=_Builder)
    state: str = "start"
    """``start``: command position; ``words``: inside a simple command; ``closed``: after ``)`` or ``}``."""
    need: bool = False
    """An operator (``|``, ``&&``, ``||``), ``!`` or ``{`` needs a command after it."""
    groups: int = 0
    """``{`` groups open."""
    parsed_any: bool = False


@dataclass(slots=True)
class _WordParts:
    """The parts of a word being read: finished parts and the literal text not yet flushed."""

    parts: list[tuple[str, bool]] = field(default_factory=list)
    lit: list[str] = field(default_factory=list)

    def flush(self) -> None:
        if self.lit:
            self.parts.append(("".join(self.lit), True))
            self.lit.clear()

    def dynamic(self, text: str) -> None:
        self.flush()
        self.parts.append((text, False))


class _Parser:
    __slots__ = ("commands", "compound", "data", "group_redirects", "heredocs", "i", "level", "n", "redirects", "s")

    def __init__(self, text: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise _RefusedError("nested too deeply")
        self.s = text
        self.n = len(text)
        self.i = 0
        self.level = depth
        self.commands: list[SimpleCommand] = []
        self.redirects: list[Redirect] = []
        self.group_redirects: list[Redirect] = []
        self.heredocs: list[tuple[str, bool, bool]] = []
        self.data: list[str] = []
        self.compound = False

    # -- sequences ------------------------------------------------------------------------------------
    def parse(self) -> None:
        self.sequence(None)
        if self.heredocs:
            raise _RefusedError("here-document without its body")

    def sequence(self, closer: str | None) -> None:
        """Parse commands until the end (or `closer`, consumed)."""
        self.level += 1
        if self.level > MAX_DEPTH:
            raise _RefusedError("nested too deeply")
        try:
            self._sequence(closer)
        finally:
            self.level -= 1

    def _sequence(self, closer: str | None) -> None:
        seq = _Sequence(closer)
        while True:
            self.blanks()
            if self.i >= self.n:
                self.end_of_input(seq)
                return
            if self.s[self.i] == ")":
                self.close_paren(seq)
                return
            self.step(seq)

    def step(self, seq: _Sequence) -> None:
        """Consume one token at the current position (not the end, not ``)``): dispatch on its kind."""
        s, c = self.s, self.s[self.i]
        if c == "#":
            self.comment()
        elif c == "\n":
            self.newline(seq)
        elif c in "<>" and s.startswith("(", self.i + 1):
            self.leading_substitution(seq)
        elif (m := _REDIRECT.match(s, self.i)) is not None:
            self.redirect(None if seq.state == "closed" else seq.cmd, m)
        elif c in ";&|":
            self.list_operator(seq)
        elif c == "(":
            self.subshell(seq)
        else:
            self.command_word(seq)

    def end_of_input(self, seq: _Sequence) -> None:
        """The line ended: record the last command; refuse what is left open."""
        self.finish(seq.cmd)
        if seq.closer is not None:
            raise _RefusedError(f"unbalanced {seq.closer!r}")
        if seq.need:
            raise _RefusedError("a command is missing after an operator")
        if seq.groups:
            raise _RefusedError("unclosed '{' group")

    def close_paren(self, seq: _Sequence) -> None:
        """``)`` closing this sequence (a subshell or substitution); it must hold a complete command."""
        if seq.closer != ")":
            raise _RefusedError("unexpected ')'")
        seq.parsed_any |= self.finish(seq.cmd)
        if seq.need or seq.groups:
            raise _RefusedError("unbalanced parentheses")
        if not seq.parsed_any:
            raise _RefusedError("empty ( )")
        self.i += 1

    def comment(self) -> None:
        """Skip a ``#`` comment up to the end of the line."""
        end = self.s.find("\n", self.i)
        self.i = end if end >= 0 else self.n

    def newline(self, seq: _Sequence) -> None:
        """A newline ends the command (not a pending operator); pending here-document bodies follow it."""
        seq.parsed_any |= self.finish(seq.cmd)
        seq.state = "start"
        self.i = self.read_heredocs(self.i + 1)

    def leading_substitution(self, seq: _Sequence) -> None:
        """A word starting with ``<(`` or ``>(`` (process substitution), never a reserved word."""
        if seq.state == "closed":
            raise _RefusedError("a word after ')' or '}'")
        self.add_word(seq.cmd, self.word())
        seq.state, seq.need = "words", False

    def list_operator(self, seq: _Sequence) -> None:
        """``;``, ``&``, ``&&``, ``||``, ``|``, ``|&``: end the command; all but ``;`` and ``&`` need another."""
        op = self.operator()
        if seq.state == "start" and seq.cmd.empty():
            raise _RefusedError(f"{op!r} without a command before it")
        seq.parsed_any |= self.finish(seq.cmd)
        self.compound = True
        seq.need = op in ("&&", "||", "|", "|&")
        seq.state = "start"

    def subshell(self, seq: _Sequence) -> None:
        """``( ... )`` in command position; anywhere else ``(`` would be a function definition."""
        if seq.state != "start" or not seq.cmd.empty():
            raise _RefusedError("'(' inside a command (function definitions are not supported)")
        if self.s.startswith("((", self.i):
            raise _RefusedError("arithmetic (( )) is not supported")
        self.i += 1
        self.compound = True
        self.sequence(")")
        seq.parsed_any = True
        seq.state, seq.need = "closed", False

    def command_word(self, seq: _Sequence) -> None:
        """A word: a reserved word in command position, else part of the simple command."""
        if seq.state == "closed":
            raise _RefusedError("a word after ')' or '}'")
        start = self.i
        word = self.word()
        if seq.state == "start" and seq.cmd.empty() and self.reserved_word(seq, spliced(self.s[start : self.i])):
            return
        self.add_word(seq.cmd, word)
        seq.state, seq.need = "words", False

    def reserved_word(self, seq: _Sequence, src: str) -> bool:
        """Handle ``{``, ``}`` and ``!`` (True when `src` is one); refuse compound command words."""
        if src == "{":
            seq.groups += 1
            self.compound = True
            seq.need = True
            return True
        if src == "}":
            if not seq.groups or seq.need:
                raise _RefusedError("unexpected '}'")
            seq.groups -= 1
            seq.state = "closed"
            return True
        if src == "!":
            seq.need = True
            return True
        if src in _COMPOUND_WORDS or src.startswith("(("):
            raise _RefusedError(f"compound commands ({src!r}) are not supported")
        return False

    def add_word(self, cmd: _Builder, word: Word) -> None:
        if cmd.start < 0:
            cmd.start = self.i - len(word.source)
        if not cmd.words and _ASSIGNMENT.match(spliced(word.source)):
            cmd.assignments.append(word)
        else:
            cmd.words.append(word)
        cmd.end = self.i

    def finish(self, cmd: _Builder) -> bool:
        """Record the simple command being built, if any; reset the builder."""
        if cmd.empty():
            return False
        start = cmd.start if cmd.start >= 0 else 0
        source = self.s[start : max(cmd.end, start)].strip()
        self.commands.append(
            SimpleCommand(
                assignments=tuple(cmd.assignments),
                words=tuple(cmd.words),
                redirects=tuple(cmd.redirects),
                source=source,
            )
        )
        cmd.start, cmd.end = -1, -1
        cmd.assignments, cmd.words, cmd.redirects = [], [], []
        return True

    def operator(self) -> str:
        s, i = self.s, self.i
        for op in (";;&", ";;", ";&"):
            if s.startswith(op, i):
                raise _RefusedError(f"{op!r} (case) is not supported")
        for op in ("&&", "||", "|&", "|", "&", ";"):
            if s.startswith(op, i):
                self.i += len(op)
                return op
        raise _RefusedError(f"unexpected {s[i]!r}")  # pragma: no cover - callers check the character

    def redirect(self, cmd: _Builder | None, m: re.Match[str]) -> None:
        op = m.group(1)
        self.i = m.end()
        self.blanks()
        start = self.i
        if self.i >= self.n or self.s[self.i] in _WORD_END:
            raise _RefusedError(f"{op!r} without a target")
        if op in ("<&", ">&") and self.s[self.i] == "-":
            # bash reads the "-" of "<&-" / ">&-" as a token of its own: "<&-cmd" closes stdin, then runs cmd.
            self.i += 1
            word = Word(parts=(("-", True),), source="-")
        else:
            word = self.word()
        if self.i == start:
            raise _RefusedError(f"{op!r} without a target")
        self.compound = True
        if op in ("<<", "<<-"):
            if not word.static:
                raise _RefusedError("a here-document delimiter with expansions")
            quoted = any(ch in spliced(word.source) for ch in "'\"\\")
            self.heredocs.append((word.value, quoted, op == "<<-"))
            red = Redirect(op=op, target=None, kind="data")
        elif op == "<<<":
            red = Redirect(op=op, target=word, kind="data")
            self.data.append(word.value)
        elif op in ("<&", ">&"):
            if word.static and (word.value.isdigit() or word.value == "-"):
                red = Redirect(op=op, target=word, kind="dup")
            else:
                red = Redirect(op=op, target=word, kind="write" if op == ">&" else "read")
        else:
            red = Redirect(op=op, target=word, kind="read" if op == "<" else "write")
        self.redirects.append(red)
        if cmd is None:
            self.group_redirects.append(red)
            return
        if cmd.start < 0:
            cmd.start = m.start()
        cmd.end = self.i
        cmd.redirects.append(red)

    def read_heredocs(self, pos: int) -> int:
        """Consume the bodies of pending here-documents starting at `pos`; returns the position after them."""
        for delim, quoted, strip in self.heredocs:
            lines: list[str] = []
            while True:
                if pos >= self.n:
                    raise _RefusedError(f"here-document not terminated by {delim!r}")
                line, pos = self.heredoc_line(pos, splice=not quoted)
                if (line.lstrip("\t") if strip else line) == delim:
                    break
                lines.append(line)
            self.data.append("\n".join(lines))
            if not quoted:
                body = _Parser("\n".join(lines), self.level + 1)
                body.expansions_only()
                self.merge(body)
        self.heredocs = []
        return pos

    def heredoc_line(self, pos: int, *, splice: bool) -> tuple[str, int]:
        r"""One line of a here-document body from `pos` (without its newline), and the position after it.

        As bash reads an unquoted body (`splice`): a backslash-newline joins the next line before the
        line is compared with the delimiter (``EO\\<newline>F`` ends ``<<EOF``); a backslash followed by
        any other character keeps both, so ``\\\\<newline>`` ends the line.
        """
        s, n = self.s, self.n
        if not splice:
            j = s.find("\n", pos)
            return s[pos : j if j >= 0 else n], (j + 1 if j >= 0 else n)
        out: list[str] = []
        while pos < n:
            c = s[pos]
            if c == "\n":
                return "".join(out), pos + 1
            if c == "\\" and pos + 1 < n:
                if s[pos + 1] != "\n":
                    out.append(s[pos : pos + 2])
                pos += 2
                continue
            out.append(c)
            pos += 1
        return "".join(out), n

    def merge(self, other: _Parser) -> None:
        self.data.extend(other.data)
        self.commands.extend(other.commands)
        self.redirects.extend(other.redirects)
        self.group_redirects.extend(other.group_redirects)
        self.compound = True

    # -- words ----------------------------------------------------------------------------------------
    def blanks(self) -> None:
        s = self.s
        while self.i < self.n:
            c = s[self.i]
            if c in " \t":
                self.i += 1
            elif c == "\\" and s.startswith("\n", self.i + 1):
                self.i += 2
            else:
                return

    def word(self) -> Word:
        s = self.s
        start = self.i
        out = _WordParts()
        while self.i < self.n:
            c = s[self.i]
            if c in "<>" and s.startswith("(", self.i + 1):
                self.process_substitution(out)
            elif c in _WORD_END:
                break
            else:
                self.word_char(c, start, out)
        out.flush()
        return Word(parts=tuple(out.parts), source=s[start : self.i])

    def word_char(self, c: str, start: int, out: _WordParts) -> None:
        """Read what starts with `c` inside the word that began at `start`: dispatch on quoting and syntax."""
        if c == "\\":
            self.escaped(out.lit)
        elif c == "'":
            self.single_quoted(out.lit)
        elif c == '"':
            self.i += 1
            self.double_quoted(out.lit, out.dynamic, terminator='"')
        elif c == "$":
            self.dollar(out.lit, out.dynamic, in_quotes=False)
        elif c == "`":
            out.dynamic(self.backtick())
        elif c in "*?[{}" or (c == "~" and (self.i == start or self.s[self.i - 1] in "=:")):
            out.dynamic(c)
            self.i += 1
        else:
            out.lit.append(c)
            self.i += 1

    def process_substitution(self, out: _WordParts) -> None:
        """``<(...)`` or ``>(...)`` inside a word: its commands run, the word gets the dynamic source."""
        begin = self.i
        self.i += 2
        self.sequence(")")
        self.compound = True
        out.dynamic(self.s[begin : self.i])

    def escaped(self, lit: list[str]) -> None:
        """An unquoted backslash: the next character is literal; a backslash-newline is removed."""
        if self.i + 1 >= self.n:
            raise _RefusedError("a trailing backslash")
        if self.s[self.i + 1] != "\n":
            lit.append(self.s[self.i + 1])
        self.i += 2

    def single_quoted(self, lit: list[str]) -> None:
        """``'...'``: all literal."""
        end = self.s.find("'", self.i + 1)
        if end < 0:
            raise _RefusedError("an unterminated single quote")
        lit.append(self.s[self.i + 1 : end])
        self.i = end + 1

    def double_quoted(self, lit: list[str], dynamic: Callable[[str], None], *, terminator: str | None) -> None:
        """Read double-quoted text (or an unquoted here-document body when `terminator` is None)."""
        s = self.s
        escapable = '$`"\\\n' if terminator else "$`\\\n"
        while self.i < self.n:
            c = s[self.i]
            if terminator is not None and c == terminator:
                self.i += 1
                return
            if c == "\\" and self.i + 1 < self.n and s[self.i + 1] in escapable:
                if s[self.i + 1] != "\n":
                    lit.append(s[self.i + 1])
                self.i += 2
            elif c == "$":
                self.dollar(lit, dynamic, in_quotes=True)
            elif c == "`":
                dynamic(self.backtick())
            else:
                lit.append(c)
                self.i += 1
        if terminator is not None:
            raise _RefusedError("an unterminated double quote")

    def expansions_only(self) -> None:
        self.double_quoted([], lambda text: None, terminator=None)

    def dollar(self, lit: list[str], dynamic: Callable[[str], None], *, in_quotes: bool) -> None:
        s, i = self.s, self.i
        if s.startswith("\\\n", i + 1):
            raise _RefusedError("a line continuation after '$' is not supported")
        nxt = s[i + 1] if i + 1 < self.n else ""
        if nxt == "'" and not in_quotes:
            raise _RefusedError("ANSI-C $'...' quoting is not supported")
        if nxt == '"' and not in_quotes:
            raise _RefusedError('locale $"..." quoting is not supported')
        if nxt == "(":
            if s.startswith("((", i + 1):
                raise _RefusedError("arithmetic $((...)) is not supported")
            self.i = i + 2
            self.sequence(")")
            self.compound = True
            dynamic(s[i : self.i])
            return
        if nxt == "[":
            raise _RefusedError("arithmetic $[...] is not supported")
        m = _PARAM.match(s, i)
        if m is not None:
            self.i = m.end()
            dynamic(m.group(0))
            return
        if nxt == "{":
            raise _RefusedError("${...} with operators is not supported")
        lit.append("$")
        self.i = i + 1

    def backtick(self) -> str:
        s = self.s
        start = self.i
        self.i += 1
        inner: list[str] = []
        while self.i < self.n:
            c = s[self.i]
            if c == "\\" and self.i + 1 < self.n and s[self.i + 1] in "$`\\":
                inner.append(s[self.i + 1])
                self.i += 2
                continue
            if c == "`":
                self.i += 1
                sub = _Parser("".join(inner), self.level + 1)
                sub.parse()
                self.merge(sub)
                return s[start : self.i]
            inner.append(c)
            self.i += 1
        raise _RefusedError("an unterminated backtick")


def spliced(source: str) -> str:
    r"""Source text without backslash-newline pairs.

    Bash's reader removes them before it looks for reserved words, assignments and quoting
    (``X\<newline>=1 cmd`` assigns ``X``).
    """
    return source.replace("\\\n", "")


def _refusal(text: str) -> str | None:
    if len(text) > MAX_CHARS:
        return "the command is too long to check"
    for ch in text:
        if ch in "\t\n":
            continue
        if unicodedata.category(ch) in _BAD_CATEGORIES:
            return f"the command contains the control or invisible character U+{ord(ch):04X}"
    return None


@functools.lru_cache(maxsize=1024)
def parse_command(text: str, _depth: int = 0) -> ParsedCommand:
    """Parse a command line; a `ParsedCommand` whose `error` is set when it is refused."""
    why = _refusal(text)
    if why is not None:
        return ParsedCommand(source=text, error=why)
    parser = _Parser(text, _depth)
    try:
        parser.parse()
    except _RefusedError as exc:
        return ParsedCommand(source=text, error=str(exc))
    except RecursionError:
        return ParsedCommand(source=text, error="nested too deeply")
    return ParsedCommand(
        source=text,
        commands=tuple(parser.commands),
        redirects=tuple(parser.redirects),
        group_redirects=tuple(parser.group_redirects),
        data=tuple(parser.data),
        compound=parser.compound or len(parser.commands) > 1,
    )


# -- rendering --------------------------------------------------------------------------------------------
def render_value(value: str) -> str:
    r"""A word value as rules see it: bare when plain, else single-quoted (``'`` written ``'\''``)."""
    if _SAFE_WORD.fullmatch(value):
        return value
    return "'" + value.replace("'", "'\\''") + "'"


def render(cmd: SimpleCommand) -> tuple[str, tuple[bool, ...]]:
    """The canonical text of a simple command and, per character, whether it is literal text.

    Assignments and words are joined by single spaces; static words are rendered with `render_value`;
    dynamic parts keep their source text and are marked not literal.
    """
    chunks: list[str] = []
    mask: list[bool] = []
    for n, word in enumerate((*cmd.assignments, *cmd.words)):
        if n:
            chunks.append(" ")
            mask.append(True)
        if word.static:
            text = render_value(word.value)
            chunks.append(text)
            mask.extend([True] * len(text))
            continue
        for text, literal in word.parts:
            shown = render_value(text) if literal and text else text
            chunks.append(shown)
            mask.extend([literal] * len(shown))
    return "".join(chunks), tuple(mask)


def plain_text(cmd: SimpleCommand, start: int = 0) -> str:
    """Word values from `start` joined by spaces, without quoting (a wider form for deny rules)."""
    words = [w.value for w in cmd.assignments] if start == 0 else []
    words += [w.value for w in cmd.words[start:]]
    return " ".join(words)


def suffix_texts(cmd: SimpleCommand) -> Iterator[str]:
    """The canonical texts of the command and of each tail of its words (``sudo rm -rf x`` → ``rm -rf x``).

    A tail whose program is a path is also given with the bare program name (``/bin/rm`` → ``rm``).
    """
    yield cmd.text
    for k in range(min(len(cmd.words), 64)):
        words = cmd.words[k:]
        yield SimpleCommand(assignments=(), words=words, redirects=(), source="").text
        first = words[0]
        name = posixpath.basename(first.value) if first.static and "/" in first.value else ""
        if name:
            bare = Word(parts=((name, True),), source=name)
            yield SimpleCommand(assignments=(), words=(bare, *words[1:]), redirects=(), source="").text
