"""Suggested rules for an ASK, and the check on rules that come back with a user's answer.

Every suggestion list starts with the exact call. A generalisation follows only when it is safe:

- a shell command gets one when it is a single plain command (no operators, substitutions,
  redirections, expansions or globs) of a program known to only read its operands (an allow-list,
  `_GENERALISABLE`, plus everyday ``git`` subcommands): the same program (and subcommand), the options
  the call used, and any further non-option words (for ``git push|pull|fetch``: names only, no URL or
  refspec). Every other program (interpreters, wrappers, runners, clients, anything unknown), ``find``
  with actions, ``git`` with global options, and options that run a program or write a file get the
  exact command only (`never_generalised`);
- a path gets its directory (``/ws/src/main.py`` → ``/ws/src/**``), never ``/``, the home directory
  or one of its ancestors, an ancestor of the workspace or a protected directory;
- a tool with neither gets the whole tool.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agentrt.permission.commands import parse_command, render_value
from agentrt.permission.matching import (
    allow_simple,
    is_command_key,
    is_path_key,
    value_text,
)
from agentrt.permission.paths import glob_escape, glob_literal, glob_tokens, is_dangerous_path, path_pattern
from agentrt.permission.rules import Decision, PermissionMode, PermissionRule

if TYPE_CHECKING:
    from agentrt.permission.subject import ToolTraits

__all__ = ["check_answer_rule", "never_generalised", "suggest_rules"]

# fmt: off
_GENERALISABLE = frozenset({
    "ls", "cat", "head", "tail", "wc", "grep", "egrep", "fgrep", "rg", "echo", "printf", "pwd", "stat", "file", "du",
    "df", "tree", "diff", "cmp", "comm", "sort", "cut", "tr", "nl", "fold", "column", "paste", "join", "rev", "tac",
    "od", "hexdump", "strings", "basename", "dirname", "realpath", "readlink", "which", "whoami", "id", "uname", "seq",
    "sleep", "true", "false", "test", "[", "jq", "md5sum", "sha1sum", "sha256sum", "sha512sum", "b2sum", "cksum",
    "base64", "base32", "find", "git",
})
"""Programs that only read their operands and run nothing named by them: the only ones whose calls get a
general suggestion. Every other program (interpreters, wrappers, runners, package managers, clients,
database shells, editors, anything unknown) gets the exact command only."""
_FIND_ACTIONS = frozenset({
    "-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls",
})
_GIT_SUBCOMMANDS = frozenset({
    "status", "diff", "log", "show", "add", "commit", "push", "pull", "fetch", "branch", "switch", "merge", "tag",
    "rev-parse", "ls-files", "blame", "describe", "shortlog", "cherry-pick", "revert", "init",
})
"""Everyday git subcommands that get a general suggestion; the ones that discard work (``checkout .``,
``restore``, ``reset``, ``stash``, ``rm``, ``reflog delete``) or redirect it (``remote set-url``) do not."""
_GIT_REMOTE_SUBCOMMANDS = frozenset({"push", "pull", "fetch"})
_DANGEROUS_SHORT = {"git": frozenset("cCOx"), "sort": frozenset("o"), "tree": frozenset("o")}
"""Short options that run a program or write a file named by their value, per program."""
_DANGEROUS_LONG = (
    "--receive-pack", "--receivepack", "--upload-pack", "--uploadpack", "--exec", "--exec-path", "--config",
    "--config-env", "--output", "--ext-diff", "--textconv", "--open-files-in-pager", "--command", "--eval", "--run",
    "--pager", "--editor", "--to-command", "--checkpoint-action", "--use-compress-program", "--compress-program",
    "--rsh", "--rsync-path", "--template", "--filter", "--shell", "--init-file", "--rcfile", "--upload-archive",
    "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--remote", "--interpreter", "--preprocessor",
    "--post-hook", "--pre-hook", "--hostname-bin",
)
_NON_OPTION_WORDS = (r" [^\s'-][^\s']*", r" '[^'-][^']*'")
"""A bare word, or a single-quoted one, that does not start with ``-`` (not an option)."""
_REMOTE_NAME_WORDS = (r" [A-Za-z0-9_][A-Za-z0-9_./-]*",)
"""For ``git push|pull|fetch``: remote and branch names only (no URL, no ``+`` force or ``:`` refspec)."""
_SYSTEM_DIRS = frozenset({
    "/etc", "/usr", "/var", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/opt", "/root", "/home", "/boot", "/dev",
    "/proc", "/sys", "/run", "/srv", "/snap", "/mnt", "/media", "/Users", "/System", "/Library", "/private",
    "/Applications", "/Volumes",
})
# fmt: on


def never_generalised(argv: list[str]) -> bool:
    """Whether a command gets only exact suggestions.

    That is a program not known to only read its operands (`_GENERALISABLE`), one named by a path,
    ``find`` with an action, ``git`` with a global option or outside `_GIT_SUBCOMMANDS`, or an option
    that runs a program or writes a file.
    """
    program = argv[0]
    name = posixpath.basename(program)
    if "/" in program or name not in _GENERALISABLE:
        return True
    if name == "find" and any(a in _FIND_ACTIONS for a in argv[1:]):
        return True
    if name == "git" and (len(argv) < 2 or argv[1] not in _GIT_SUBCOMMANDS):
        return True
    return any(_dangerous_option(name, a) for a in argv[1:] if a.startswith("-"))


def _dangerous_option(program: str, option: str) -> bool:
    if option.startswith("--"):
        name = option.split("=", 1)[0]
        return len(name) > 2 and any(d.startswith(name) or name.startswith(d + "-") for d in _DANGEROUS_LONG)
    return any(c in _DANGEROUS_SHORT.get(program, ()) for c in option[1:])


def suggest_rules(tool_name: str, args: Mapping[str, Any], *, workspace: str | None = None) -> list[PermissionRule]:
    """Rules a user may accept for this call: the exact call, then a safe generalisation (if any).

    `workspace` is where relative paths are taken from (default: the working directory). A command
    that cannot be parsed gets no suggestion: no allow rule can match it.
    """
    root = workspace or os.getcwd()
    declared = workspace is not None
    exact: dict[str, str] = {}
    has_command = has_path = False
    for key, value in args.items():
        if is_command_key(key) and isinstance(value, str):
            if not parse_command(value).ok:
                return []
            has_command = True
        elif is_path_key(key) and isinstance(value, str):
            has_path = True
        exact[key] = glob_escape(value if isinstance(value, str) else value_text(value))
    suggestions = [PermissionRule(tool=tool_name, args=exact or None, source="suggested")]
    general: PermissionRule | None = None
    if has_command:
        keys = [k for k, v in args.items() if is_command_key(k) and isinstance(v, str)]
        if len(keys) == 1:
            general = _command_rule(tool_name, keys[0], args[keys[0]])
    elif has_path:
        key = next(k for k, v in args.items() if is_path_key(k) and isinstance(v, str))
        general = _path_rule(tool_name, key, args[key], root, declared=declared)
    elif exact:
        general = PermissionRule(tool=tool_name, source="suggested")
    if general is not None and general != suggestions[0] and general.matches(tool_name, args, workspace=root):
        suggestions.append(general)
    return suggestions


def _command_rule(tool_name: str, key: str, command: str) -> PermissionRule | None:
    parsed = parse_command(command)
    if not parsed.ok or parsed.compound or parsed.redirects or len(parsed.commands) != 1:
        return None
    cmd = parsed.commands[0]
    if cmd.assignments or not cmd.words or not cmd.static:
        return None
    argv = list(cmd.argv)
    if never_generalised(argv):
        return None
    prefix, rest = argv[:1], argv[1:]
    if rest and not rest[0].startswith("-"):
        prefix.append(rest.pop(0))
    options = sorted({a for a in rest if a.startswith("-")})
    remote = prefix[0] == "git" and len(prefix) > 1 and prefix[1] in _GIT_REMOTE_SUBCOMMANDS
    words = _REMOTE_NAME_WORDS if remote else _NON_OPTION_WORDS
    alternatives = [" " + re.escape(render_value(o)) for o in options] + list(words)
    pattern = "re:" + " ".join(re.escape(render_value(w)) for w in prefix) + "(?:" + "|".join(alternatives) + ")*"
    return PermissionRule(tool=tool_name, args={key: pattern}, source="suggested")


def _too_wide_dir(directory: str, root: str, *, declared: bool = True) -> bool:
    """Whether a directory is too wide to allow wholesale.

    That is ``/``, a system directory, a protected one, the home directory or one of its ancestors,
    or an ancestor of the workspace (when one is declared: the process's working directory is not a
    workspace, and suggestions must not depend on where the process was started).
    """
    if directory == "/" or directory in _SYSTEM_DIRS or is_dangerous_path(directory):
        return True
    home = os.path.realpath(os.path.expanduser("~"))
    workspace = os.path.realpath(root)
    below = directory.rstrip("/") + "/"
    return home == directory or home.startswith(below) or (declared and workspace.startswith(below))


def _path_rule(tool_name: str, key: str, value: str, root: str, *, declared: bool = True) -> PermissionRule | None:
    stripped = value.rstrip("/") or value
    directory = posixpath.dirname(stripped) or "."
    expanded = os.path.expanduser(directory) if directory.startswith("~") else directory
    full = posixpath.normpath(posixpath.join(root, expanded))
    real = os.path.realpath(full)
    if _too_wide_dir(real, root, declared=declared):
        return None
    shown = directory if real == full else real
    return PermissionRule(tool=tool_name, args={key: glob_escape(shown) + "/**"}, source="suggested")


# -- answers ----------------------------------------------------------------------------------------------
_TOOL_GLOB = re.compile(r"[*?\[\]]")
_PROBE_TAILS = (
    " -c core.sshCommand=x",
    " --receive-pack=x",
    " --upload-pack=x",
    " --exec=x",
    " -C /",
    " --output=x",
    " --config=x",
    " -exec x ;",
    " -delete",
    "x",
)


def check_answer_rule(rule: PermissionRule, *, tool: ToolTraits | None, mode: PermissionMode) -> str | None:
    """Why a rule sent with a user's answer must not be accepted, or None to accept it.

    `tool` is the answered call's tool (None if unknown: then the checks that need it are made
    conservatively). Deny and ask rules only narrow and are always accepted. An allow rule is refused
    when its tool pattern is a glob or names another tool than the answered one, in ``EXPLORE`` mode
    when the tool is not read-only, or when its argument patterns are wider than any rule the engine would suggest: no
    pattern for a command or path parameter, a command pattern whose program is a wildcard or an
    interpreter/wrapper or that lets options through, a path pattern over ``/``, the home directory, an
    ancestor of either or of the tool's workspace.
    """
    if rule.decision is not Decision.ALLOW:
        return None
    if _TOOL_GLOB.search(rule.tool):
        return f"an approval can only remember a rule for one tool, not the pattern {rule.tool!r}"
    if tool is not None and rule.tool != tool.name:
        return f"the rule names {rule.tool!r} but the answered call is to {tool.name!r}"
    if mode is PermissionMode.EXPLORE and (tool is None or not tool.read_only):
        return f"explore mode allows only read-only tools; {rule.tool!r} is not known to be read-only"
    args = dict(rule.args or {})
    params: set[str] = set()
    if tool is not None:
        properties = tool.parameters.get("properties") if isinstance(tool.parameters, Mapping) else None
        params = set(properties) if isinstance(properties, Mapping) else set()
    elif not args:
        return f"an allow rule for all calls of {rule.tool!r} needs the answered tool to be known"
    guarded = {k for k in params if is_command_key(k) or is_path_key(k)}
    for key in sorted(guarded - set(args)):
        return f"an allow rule for {rule.tool!r} must constrain its {key!r} argument"
    declared = tool.workspace if tool is not None else None
    root = declared or os.getcwd()
    for key, pattern in args.items():
        if is_command_key(key):
            why = _command_pattern_too_wide(pattern)
        elif is_path_key(key):
            why = _path_pattern_too_wide(pattern, root, declared=declared is not None)
        else:
            why = None
        if why is not None:
            return f"the {key!r} pattern {pattern!r} is too wide: {why}"
    return None


def _leading_words(pattern: str) -> tuple[list[str], bool]:
    """The literal words a pattern starts with, and whether the whole pattern is literal."""
    if pattern.startswith("re:"):
        src = pattern[3:]
        text: list[str] = []
        i = 0
        while i < len(src):
            c = src[i]
            if c == "\\" and i + 1 < len(src) and not src[i + 1].isalnum():
                text.append(src[i + 1])
                i += 2
            elif c.isalnum() or c in "_-/:@%=, ":
                text.append(c)
                i += 1
            else:
                break
        literal = i == len(src)
        joined = "".join(text)
        if not literal and re.match(r"\((?:\?:)?(?: |\\s)", src[i:]):
            joined += " "  # "prog sub(?: ...)": what follows starts a new word
    else:
        exact = glob_literal(pattern)
        if exact is not None:
            return exact.split(), True
        chars: list[str] = []
        for kind, value, _ in glob_tokens(pattern):
            if kind != "lit":
                break
            chars.append(value)
        joined = "".join(chars)
        literal = False
    if literal:
        return joined.split(), True
    # The last word is complete only if a space follows it.
    words = joined.split(" ")
    complete = words[:-1] if not joined.endswith(" ") else [w for w in words if w]
    return [w for w in complete if w], False


def _command_pattern_too_wide(pattern: str) -> str | None:
    words, literal = _leading_words(pattern)
    if literal:
        return None
    if not words:
        return "it does not start with a program name"
    if never_generalised(words):
        return f"{words[0]!r} runs code or commands; only exact commands can be allowed"
    for tail in _PROBE_TAILS:
        probe = parse_command(" ".join(words) + tail)
        if probe.ok and len(probe.commands) == 1 and allow_simple(pattern, probe.commands[0]):
            return f"it also allows {probe.source!r}"
    return None


def _path_pattern_too_wide(pattern: str, root: str, *, declared: bool = True) -> str | None:
    if pattern.startswith("re:"):
        return "path rules from an answer must be globs"
    compiled = path_pattern(pattern, root, below=False)
    segs = compiled.real.split("/")
    literal = [s for s in segs if s]
    prefix: list[str] = []
    for seg in literal:
        if _TOOL_GLOB.search(seg):
            break
        prefix.append(seg)
    directory = "/" + "/".join(prefix)
    if len(prefix) == len(literal):
        return None  # one exact path
    if _too_wide_dir(directory, root, declared=declared):
        return f"it covers {directory!r}"
    return None
