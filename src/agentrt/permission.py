"""Permissions: modes, rules and the engine that decides allow / ask / deny for each tool call.

Precedence for one call: a matching **deny** rule denies; a matching **ask** rule asks; in
``BYPASS`` mode everything else is allowed; in ``EXPLORE`` mode a tool that is not read-only is
denied unless an allow rule names it; then the tool's own check (`check_permission`) decides if it
has an opinion; then a matching **allow** rule allows; otherwise the mode's default applies:

==============  =================================================================
DEFAULT         destructive tools and tools that require confirmation ask,
                everything else is allowed
ACCEPT_EDITS    as DEFAULT, but edit tools whose paths are inside the workspace run
EXPLORE         read-only tools are allowed, everything else is denied
BYPASS          everything is allowed (deny and ask rules, and a tool's own deny, still apply)
DONT_ASK        what would ask is denied
==============  =================================================================

Every ASK carries suggested rules: the exact call, and a generalisation (the same program and
subcommand without shell chaining, the same directory, or the whole tool) that the user can
accept with their answer. Path rules (``**``) judge normalised paths, so ``..`` cannot escape them.
"""

from __future__ import annotations

import enum
import fnmatch
import functools
import os
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentrt.errors import UserError
from agentrt.message import ToolUseBlock

if TYPE_CHECKING:
    from agentrt.context import RuntimeContext
    from agentrt.tool.base import Tool

__all__ = [
    "ConfirmResult",
    "Decision",
    "PermissionContext",
    "PermissionDecision",
    "PermissionEngine",
    "PermissionMode",
    "PermissionRule",
    "is_dangerous_path",
    "refuse_dangerous_path",
]


class PermissionMode(enum.StrEnum):
    """How tool calls are gated when no rule decides."""

    DEFAULT = "default"
    ACCEPT_EDITS = "accept_edits"
    EXPLORE = "explore"
    BYPASS = "bypass"
    DONT_ASK = "dont_ask"


class Decision(enum.StrEnum):
    """The outcome for one tool call."""

    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


@dataclass(frozen=True, slots=True, kw_only=True)
class PermissionRule:
    """Allow, ask or deny calls of tools matching `tool` (a glob) whose arguments match `args`.

    `args` maps an argument name to a glob (``"git status*"``, ``"/workspace/**"``) or, prefixed
    with ``re:``, a regular expression matched against the whole value. Non-string values are
    compared as their JSON text. A rule without `args` matches every call of the tool.
    """

    tool: str
    decision: Decision = Decision.ALLOW
    args: Mapping[str, str] | None = None
    source: str = "config"
    """Where the rule came from: ``config``, ``session`` (accepted by the user), ``suggested``."""

    def __post_init__(self) -> None:
        if not isinstance(self.tool, str) or not self.tool:
            raise UserError(f"PermissionRule.tool must be a non-empty glob, not {self.tool!r}")
        try:
            object.__setattr__(self, "decision", Decision(self.decision))
        except ValueError:
            raise UserError(
                f"PermissionRule.decision must be 'allow', 'ask' or 'deny', not {self.decision!r}"
            ) from None
        if self.args is not None:
            for key, pattern in self.args.items():
                if not isinstance(pattern, str):
                    raise UserError(f"PermissionRule.args[{key!r}] must be a glob or 're:' pattern, not {pattern!r}")
                if pattern.startswith("re:"):
                    try:
                        re.compile(pattern[3:])
                    except re.error as exc:
                        raise UserError(f"PermissionRule.args[{key!r}]: bad regular expression ({exc})") from None

    def matches(self, tool_name: str, args: Mapping[str, Any]) -> bool:
        """Whether this rule applies to a call of `tool_name` with `args`."""
        if not fnmatch.fnmatchcase(tool_name, self.tool):
            return False
        if not self.args:
            return True
        for key, pattern in self.args.items():
            if key not in args:
                return False
            if not _match_value(pattern, args[key]):
                return False
        return True

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (stored in `AgentState.rules`)."""
        d: dict[str, Any] = {"tool": self.tool, "decision": self.decision.value, "source": self.source}
        if self.args is not None:
            d["args"] = dict(self.args)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PermissionRule:
        """Rebuild a rule from its JSON form."""
        return cls(
            tool=d["tool"],
            decision=Decision(d.get("decision", "allow")),
            args=d.get("args"),
            source=d.get("source", "config"),
        )

    @classmethod
    def coerce(cls, value: PermissionRule | Mapping[str, Any]) -> PermissionRule:
        """A rule from a rule or its JSON form."""
        return value if isinstance(value, PermissionRule) else cls.from_dict(value)


def _match_value(pattern: str, value: Any) -> bool:
    text = value if isinstance(value, str) else _json_text(value)
    if pattern.startswith("re:"):
        return re.fullmatch(pattern[3:], text) is not None
    if "**" in pattern:
        if ".." in text.split("/"):
            # "/ws/../etc/passwd" must be judged as "/etc/passwd", not as something under /ws.
            text = posixpath.normpath(text)
        return _path_regex(pattern).fullmatch(text) is not None
    return fnmatch.fnmatchcase(text, pattern)


@functools.lru_cache(maxsize=512)
def _path_regex(pattern: str) -> re.Pattern[str]:
    """Glob with path semantics: ``**`` spans directories, ``*`` and ``?`` stay inside one, ``[...]`` classes."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("/**", i) and i + 3 == n:
            out.append("(?:/.*)?")  # "/a/**" matches "/a" itself and everything below it
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            end = pattern.find("]", i + 2 if pattern.startswith("[!", i) or pattern.startswith("[]", i) else i + 1)
            if end < 0:
                out.append(re.escape(c))
                i += 1
            else:
                body = pattern[i + 1 : end]
                if body.startswith("!"):
                    body = "^" + body[1:]
                negate = body.startswith("^")
                inner = body[1:] if negate else body
                inner = inner.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")
                out.append("[" + ("^" if negate else "") + inner + "]")
                i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out), re.DOTALL)


def _json_text(value: Any) -> str:
    from agentrt import _json

    return _json.dumps(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class PermissionDecision:
    """The engine's answer for one call, with the reason and (for ASK) suggested rules."""

    decision: Decision
    reason: str = ""
    suggested_rules: list[PermissionRule] = field(default_factory=list)

    @classmethod
    def allow(cls, reason: str = "") -> PermissionDecision:
        """Allow the call."""
        return cls(decision=Decision.ALLOW, reason=reason)

    @classmethod
    def ask(cls, reason: str = "") -> PermissionDecision:
        """Ask the user first."""
        return cls(decision=Decision.ASK, reason=reason)

    @classmethod
    def deny(cls, reason: str = "") -> PermissionDecision:
        """Refuse the call."""
        return cls(decision=Decision.DENY, reason=reason)


@dataclass(frozen=True, slots=True, kw_only=True)
class PermissionContext:
    """The permission configuration of an agent: a mode, rules, and the workspace for edit tools."""

    mode: PermissionMode = PermissionMode.DEFAULT
    rules: Sequence[PermissionRule] = ()
    workspace: str | None = None
    """Root directory that ``ACCEPT_EDITS`` trusts edit tools with."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", PermissionMode(self.mode))
        object.__setattr__(self, "rules", tuple(PermissionRule.coerce(r) for r in self.rules))

    @classmethod
    def coerce(cls, value: PermissionContext | PermissionMode | str | None) -> PermissionContext:
        """A context from a context, a mode (or its name), or None (DEFAULT)."""
        if value is None:
            return _DEFAULT_CONTEXT
        if isinstance(value, PermissionContext):
            return value
        try:
            return cls(mode=PermissionMode(value))
        except ValueError:
            raise UserError(
                f"permission must be a PermissionMode, a PermissionContext or None, not {value!r}"
            ) from None


_DEFAULT_CONTEXT = PermissionContext()


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfirmResult:
    """The user's answer to one pending tool call.

    `tool_call` is the pending `ToolUseBlock` (possibly with edited `input`) or just its id.
    `rules` are rules to remember for the rest of the session (e.g. one of the suggested rules).
    """

    confirmed: bool
    tool_call: ToolUseBlock | str
    rules: Sequence[PermissionRule] = ()
    reason: str = ""

    @property
    def tool_call_id(self) -> str:
        """The id of the answered call."""
        return self.tool_call if isinstance(self.tool_call, str) else self.tool_call.id

    @property
    def edited_input(self) -> Mapping[str, Any] | None:
        """The arguments the user changed the call to, if they sent a call."""
        return None if isinstance(self.tool_call, str) else self.tool_call.input

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        d: dict[str, Any] = {
            "confirmed": self.confirmed,
            "tool_call_id": self.tool_call_id,
            "rules": [PermissionRule.coerce(r).to_dict() for r in self.rules],
        }
        if not isinstance(self.tool_call, str):
            d["input"] = dict(self.tool_call.input)
            if self.tool_call.name:
                d["name"] = self.tool_call.name
        if self.reason:
            d["reason"] = self.reason
        return d

    @classmethod
    def coerce(cls, value: ConfirmResult | Mapping[str, Any]) -> ConfirmResult:
        """A result from a result or its JSON form (``tool_call_id``, ``confirmed``, ``input``?, ``rules``?)."""
        if isinstance(value, ConfirmResult):
            return value
        if not isinstance(value, Mapping):
            raise UserError(f"a confirm result must be a ConfirmResult or a dict, not {type(value).__name__!r}")
        if "confirmed" not in value or not isinstance(value["confirmed"], bool):
            raise UserError("a confirm result needs 'confirmed': true or false")
        raw_call = value.get("tool_call")
        call_id = value.get("tool_call_id")
        if isinstance(raw_call, Mapping):
            call_id = raw_call.get("id", call_id)
        elif isinstance(raw_call, str) and call_id is None:
            call_id = raw_call
        if not isinstance(call_id, str) or not call_id:
            raise UserError("a confirm result needs the 'tool_call_id' of the pending call it answers")
        edited = value.get("input")
        if edited is None and isinstance(raw_call, Mapping):
            edited = raw_call.get("input")
        if edited is not None and not isinstance(edited, Mapping):
            raise UserError(f"confirm result for {call_id!r}: 'input' must be an object")
        tool_call: ToolUseBlock | str = call_id
        if edited is not None:
            name = raw_call.get("name", "") if isinstance(raw_call, Mapping) else value.get("name", "")
            tool_call = ToolUseBlock(id=call_id, name=str(name), input=dict(edited))
        rules = [PermissionRule.coerce(r) for r in value.get("rules") or ()]
        return cls(confirmed=value["confirmed"], tool_call=tool_call, rules=rules, reason=str(value.get("reason", "")))


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


def refuse_dangerous_path(path: str | os.PathLike[str]) -> PermissionDecision | None:
    """A DENY decision for a dangerous path (for tools' `check_permission`), else None."""
    if is_dangerous_path(path):
        return PermissionDecision.deny(f"{os.fspath(path)!r} is a protected path (secrets or repository internals)")
    return None


# -- the engine ----------------------------------------------------------------------------------------
_PATH_KEYS = ("path", "file", "file_path", "filepath", "filename", "dir", "directory", "target", "dest", "destination")
_COMMAND_KEYS = ("command", "cmd", "script", "query", "url")


class PermissionEngine:
    """Decides allow / ask / deny for tool calls from a `PermissionContext` and session rules."""

    __slots__ = ("context", "session_rules")

    def __init__(self, context: PermissionContext, session_rules: Iterable[PermissionRule | Mapping[str, Any]] = ()):
        self.context = context
        self.session_rules = [PermissionRule.coerce(r) for r in session_rules]

    @property
    def trivial(self) -> bool:
        """True when no rule exists and the mode is DEFAULT (the fast path)."""
        return not self.session_rules and not self.context.rules and self.context.mode is PermissionMode.DEFAULT

    def _rules(self, decision: Decision) -> Iterable[PermissionRule]:
        for rule in self.session_rules:
            if rule.decision is decision:
                yield rule
        for rule in self.context.rules:
            if rule.decision is decision:
                yield rule

    def check(self, tool: Tool | None, call: ToolUseBlock, ctx: RuntimeContext) -> PermissionDecision:
        """The decision for one call (`tool` None: unknown tool, allowed so the executor reports it)."""
        if tool is None:
            return PermissionDecision.allow("unknown tool: the executor reports it to the model")
        mode = self.context.mode
        args = call.input
        for rule in self._rules(Decision.DENY):
            if rule.matches(tool.name, args):
                return PermissionDecision.deny(f"denied by rule {_describe(rule)}")
        for rule in self._rules(Decision.ASK):
            if rule.matches(tool.name, args):
                return self._ask(tool, call, f"rule {_describe(rule)} asks for approval")
        if mode is PermissionMode.BYPASS:
            # Bypass skips approvals, not a tool's own safety refusals (e.g. protected paths).
            own = self._tool_check(tool, call, ctx)
            if own is not None and own.decision is Decision.DENY:
                return own
            return PermissionDecision.allow("bypass mode")
        if (
            mode is PermissionMode.EXPLORE
            and not tool.read_only
            and not any(rule.matches(tool.name, args) for rule in self._rules(Decision.ALLOW))
        ):
            return PermissionDecision.deny(f"explore mode allows only read-only tools; {tool.name!r} is not read-only")
        own = self._tool_check(tool, call, ctx)
        if own is not None:
            if own.decision is Decision.ASK:
                return self._ask(tool, call, own.reason or f"tool {tool.name!r} asks for approval")
            return own
        for rule in self._rules(Decision.ALLOW):
            if rule.matches(tool.name, args):
                return PermissionDecision.allow(f"allowed by rule {_describe(rule)}")
        if tool.requires_confirmation:
            return self._ask(tool, call, f"{tool.name!r} requires confirmation")
        if tool.destructive:
            if mode is PermissionMode.ACCEPT_EDITS and getattr(tool, "edit", False) and self._inside_workspace(args):
                return PermissionDecision.allow("edit inside the workspace (accept-edits mode)")
            return self._ask(tool, call, f"{tool.name!r} is destructive")
        return PermissionDecision.allow()

    def _tool_check(self, tool: Tool, call: ToolUseBlock, ctx: RuntimeContext) -> PermissionDecision | None:
        if tool.check_permission is not None:
            verdict = tool.check_permission(call.input, ctx)
            if isinstance(verdict, PermissionDecision):
                return verdict
            if isinstance(verdict, (Decision, str)):
                try:
                    return PermissionDecision(decision=Decision(verdict))
                except ValueError:
                    raise UserError(
                        f"tool {tool.name!r}: check_permission returned {verdict!r}; use 'allow', 'ask' or 'deny'"
                    ) from None
            if verdict is not None:
                raise UserError(
                    f"tool {tool.name!r}: check_permission must return a PermissionDecision, a Decision or None, "
                    f"not {type(verdict).__name__!r}"
                )
        return None

    def _ask(self, tool: Tool, call: ToolUseBlock, reason: str) -> PermissionDecision:
        if self.context.mode is PermissionMode.DONT_ASK:
            return PermissionDecision.deny(f"{reason}; don't-ask mode denies instead")
        return PermissionDecision(
            decision=Decision.ASK, reason=reason, suggested_rules=suggest_rules(tool.name, call.input)
        )

    def _inside_workspace(self, args: Mapping[str, Any]) -> bool:
        root = self.context.workspace
        if not root:
            return False
        root_real = os.path.realpath(root)
        paths = [v for k, v in args.items() if k in _PATH_KEYS and isinstance(v, str)]
        if not paths:
            return False
        for p in paths:
            full = os.path.realpath(os.path.join(root_real, p))
            if os.path.commonpath([root_real, full]) != root_real:
                return False
            if is_dangerous_path(full):
                return False
        return True


def _describe(rule: PermissionRule) -> str:
    return f"{rule.decision.value} {rule.tool}" + (f" {dict(rule.args)}" if rule.args else "")


def _glob_escape(text: str) -> str:
    escaped = re.sub(r"([*?\[\]])", r"[\1]", text)
    return "[r]" + escaped[1:] if escaped.startswith("re:") else escaped


_SHELL_META = r"[^;&|`$<>()\n\r]"


def suggest_rules(tool_name: str, args: Mapping[str, Any]) -> list[PermissionRule]:
    """Rules a user may accept for this call: the exact call, then a generalisation."""
    exact_args = {k: _glob_escape(v if isinstance(v, str) else _json_text(v)) for k, v in args.items()}
    suggestions = [PermissionRule(tool=tool_name, args=exact_args or None, source="suggested")]
    general: PermissionRule | None = None
    for key in _COMMAND_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            # The program and its subcommand, taken from the raw text so the rule matches this very call;
            # later arguments may vary but no shell chaining (;, &&, |, $(...), redirects) is allowed.
            words = re.match(r"\s*(\S+)(?:(\s+)(\S+))?", value)
            if words is not None and words.group(1) and not re.search(r"[;&|`$<>()]", words.group(0)):
                prefix = words.group(1)
                if words.group(3) and not words.group(3).startswith("-"):
                    prefix = words.group(0).strip()
                pattern = "re:" + re.escape(prefix).replace("\\ ", " ") + rf"(?:\s{_SHELL_META}*)?"
                candidate = PermissionRule(tool=tool_name, args={key: pattern}, source="suggested")
                if candidate.matches(tool_name, args):
                    general = candidate
            # A command with shell chaining gets no generalisation: only the exact call.
            return suggestions + ([general] if general is not None else [])
    if general is None:
        for key in _PATH_KEYS:
            value = args.get(key)
            if isinstance(value, str) and value.strip():
                directory = posixpath.dirname(value.rstrip("/"))
                if directory:
                    candidate = PermissionRule(
                        tool=tool_name, args={key: _glob_escape(directory) + "/**"}, source="suggested"
                    )
                    if candidate.matches(tool_name, args):
                        general = candidate
                break
    if general is None and exact_args:
        general = PermissionRule(tool=tool_name, source="suggested")
    if general is not None and general != suggestions[0]:
        suggestions.append(general)
    return suggestions
