"""The permission engine: allow / ask / deny for one tool call.

Precedence: a matching **deny** rule denies; a matching **ask** rule asks; a call the deny and ask rules
cannot judge (a command that cannot be parsed or runs a computed program, a directory argument that may
hold denied paths) asks; in ``BYPASS`` mode everything else is allowed (a tool's own refusal still
holds); in ``EXPLORE`` mode a tool that is not read-only is denied unless allow rules cover the call;
in ``PLAN`` mode a tool that is neither read-only nor a plan tool (`PLAN_MODE_TOOLS`) is denied;
the tool's own check (`check_permission`) decides if it has an opinion; allow rules that cover the
call allow it; then the mode's default (see `PermissionEngine.check`).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from agentrt.errors import UserError
from agentrt.permission.config import PermissionContext
from agentrt.permission.matching import (
    CallView,
    allow_covers,
    command_doubt,
    deny_matches,
    is_path_key,
    path_doubt,
)
from agentrt.permission.paths import is_dangerous_path
from agentrt.permission.rules import Decision, PermissionDecision, PermissionMode, PermissionRule
from agentrt.permission.suggest import suggest_rules

if TYPE_CHECKING:
    from agentrt.context import RuntimeContext
    from agentrt.message import ToolUseBlock
    from agentrt.permission.subject import ToolTraits

__all__ = ["PLAN_EXIT", "PLAN_MODE_TOOLS", "PLAN_WRITE", "PermissionEngine", "unmatched_rules"]

PLAN_WRITE = "plan_write"
"""The tool that writes the session's plan (`agentrt.tool.builtin.PlanTools`)."""
PLAN_EXIT = "plan_exit"
"""The tool that asks the human to approve the plan and leave plan mode."""
PLAN_MODE_TOOLS = frozenset({PLAN_WRITE, PLAN_EXIT, "todo_write"})
"""The tools ``PLAN`` mode runs besides read-only ones (``todo_write`` is the agent's task list)."""


class PermissionEngine:
    """Decides allow / ask / deny for tool calls from a `PermissionContext` and session rules."""

    __slots__ = ("context", "session_rules")

    def __init__(self, context: PermissionContext, session_rules: Iterable[PermissionRule | Mapping[str, Any]] = ()):
        self.context = context
        self.session_rules = [PermissionRule.coerce(r) for r in session_rules]

    @property
    def trivial(self) -> bool:
        """True only for the implicit context (no ``permission`` given) without session rules: the fast path."""
        return (
            self.context.implicit
            and not self.session_rules
            and not self.context.rules
            and self.context.mode is PermissionMode.DEFAULT
        )

    def _rules(self, decision: Decision) -> Iterable[PermissionRule]:
        for rule in self.session_rules:
            if rule.decision is decision:
                yield rule
        for rule in self.context.rules:
            if rule.decision is decision:
                yield rule

    def workspace_for(self, tool: ToolTraits) -> str:
        """Where the tool's relative paths are taken from: its workspace, the context's, or the cwd."""
        return getattr(tool, "workspace", None) or self.context.workspace or os.getcwd()

    def check(self, tool: ToolTraits | None, call: ToolUseBlock, ctx: RuntimeContext) -> PermissionDecision:
        """The decision for one call (`tool` None: unknown tool, allowed so the executor reports it).

        After the rules, the mode decides: ``DEFAULT`` asks for tools that require confirmation or are
        destructive and, unless the context is implicit, for every tool that is not read-only;
        ``ACCEPT_EDITS`` is ``DEFAULT`` but runs edit tools whose paths stay inside the workspace;
        ``DONT_ASK`` denies what would ask; ``PLAN`` runs read-only tools and the plan tools (a tool
        that requires confirmation, such as ``plan_exit``, still asks).
        """
        if tool is None:
            return PermissionDecision.allow("unknown tool: the executor reports it to the model")
        mode = self.context.mode
        view = CallView.build(
            tool.name,
            with_path_defaults(tool, call.input),
            self.workspace_for(tool),
            literal_tilde=bool(getattr(tool, "workspace", None)),
        )
        stopped = self._deny_or_ask(tool, call, view)
        if stopped is not None:
            return stopped
        if mode is PermissionMode.BYPASS:
            return self._bypass(tool, call, ctx)
        allowed = allow_covers(self._rules(Decision.ALLOW), view)
        gated = _mode_gate(tool, mode, allowed)
        if gated is not None:
            return gated
        own = self._tool_check(tool, call, ctx)
        if own is not None:
            if own.decision is Decision.ASK:
                return self._ask(tool, call, view, own.reason or f"tool {tool.name!r} asks for approval")
            return own
        if allowed:
            return PermissionDecision.allow("allowed by rule")
        return self._mode_default(tool, call, view, mode)

    def _deny_or_ask(self, tool: ToolTraits, call: ToolUseBlock, view: CallView) -> PermissionDecision | None:
        """What the deny and ask rules decide, whatever the mode: a matching deny, then ask, then a doubt."""
        for rule in self._rules(Decision.DENY):
            if deny_matches(rule, view):
                return PermissionDecision.deny(f"denied by rule {describe(rule)}")
        for rule in self._rules(Decision.ASK):
            if deny_matches(rule, view):
                return self._ask(tool, call, view, f"rule {describe(rule)} asks for approval")
        doubt = self._doubt(view)
        if doubt is not None:
            return self._ask(tool, call, view, doubt)
        return None

    def _bypass(self, tool: ToolTraits, call: ToolUseBlock, ctx: RuntimeContext) -> PermissionDecision:
        """``BYPASS`` mode: allowed, unless the tool's own check denies."""
        # Bypass skips approvals, not a tool's own safety refusals (e.g. protected paths).
        own = self._tool_check(tool, call, ctx)
        if own is not None and own.decision is Decision.DENY:
            return own
        return PermissionDecision.allow("bypass mode")

    def _mode_default(
        self, tool: ToolTraits, call: ToolUseBlock, view: CallView, mode: PermissionMode
    ) -> PermissionDecision:
        """The decision when no rule and no tool check had one: the mode's default (see `check`)."""
        if tool.requires_confirmation:
            return self._ask(tool, call, view, f"{tool.name!r} requires confirmation")
        if mode is PermissionMode.ACCEPT_EDITS and getattr(tool, "edit", False) and self._inside_workspace(view):
            return PermissionDecision.allow("edit inside the workspace (accept-edits mode)")
        if tool.destructive:
            return self._ask(tool, call, view, f"{tool.name!r} is destructive")
        if not tool.read_only and not self.context.implicit and mode not in _GATED_MODES:
            return self._ask(
                tool, call, view, f"{tool.name!r} is not read-only and no rule allows it ({mode.value} mode)"
            )
        return PermissionDecision.allow()

    def _doubt(self, view: CallView) -> str | None:
        """Why the deny and ask rules cannot judge this call, or None."""
        for rule in (*self._rules(Decision.DENY), *self._rules(Decision.ASK)):
            if not rule.args or not fnmatch.fnmatchcase(view.tool_name, rule.tool):
                continue
            for key in view.command_keys():
                if key in rule.args:
                    why = command_doubt(view.command(key))
                    if why is not None:
                        return f"{why}, so rule {describe(rule)} cannot be checked"
            why = path_doubt(rule, view)
            if why is not None:
                return (
                    f"{why}, which rule {describe(rule)} {'denies' if rule.decision is Decision.DENY else 'asks about'}"
                )
        return None

    def _tool_check(self, tool: ToolTraits, call: ToolUseBlock, ctx: RuntimeContext) -> PermissionDecision | None:
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

    def _ask(self, tool: ToolTraits, call: ToolUseBlock, view: CallView, reason: str) -> PermissionDecision:
        if self.context.mode is PermissionMode.DONT_ASK:
            return PermissionDecision.deny(f"{reason}; don't-ask mode denies instead")
        return PermissionDecision(
            decision=Decision.ASK,
            reason=reason,
            suggested_rules=suggest_rules(
                tool.name, call.input, workspace=getattr(tool, "workspace", None) or self.context.workspace
            ),
        )

    def _inside_workspace(self, view: CallView) -> bool:
        root = self.context.workspace
        if not root:
            return False
        root_real = os.path.realpath(root)
        root_abs = os.path.abspath(root)
        paths = view.path_args()
        if not paths:
            return False
        for forms in paths:
            if not _inside(forms.real, root_real):
                return False
            if not (_inside(forms.lexical, root_real) or _inside(forms.lexical, root_abs)):
                return False
            if is_dangerous_path(forms.lexical) or is_dangerous_path(forms.real):
                return False
        return True


_GATED_MODES = (PermissionMode.EXPLORE, PermissionMode.PLAN)
"""Modes whose gate (`_mode_gate`) already refused what the default would ask about."""


def _mode_gate(tool: ToolTraits, mode: PermissionMode, allowed: bool) -> PermissionDecision | None:
    """What ``EXPLORE`` and ``PLAN`` refuse before the tool's own check and the allow rules, or None.

    ``EXPLORE`` lets allow rules open a tool that is not read-only; ``PLAN`` does not: rules the user
    accepted earlier in the session must not let a change through before the plan is approved.
    """
    if tool.read_only:
        return None
    if mode is PermissionMode.EXPLORE and not allowed:
        return PermissionDecision.deny(f"explore mode allows only read-only tools; {tool.name!r} is not read-only")
    if mode is PermissionMode.PLAN and tool.name not in PLAN_MODE_TOOLS:
        return PermissionDecision.deny(
            f"the session is in plan mode, where only read-only tools and {PLAN_WRITE} / todo_write run; "
            f"{tool.name!r} changes things. Finish exploring, write your plan with {PLAN_WRITE}, then call "
            f"{PLAN_EXIT} to ask the user to approve it; once approved, this tool can run"
        )
    return None


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([root, path]) == root


def with_path_defaults(tool: ToolTraits, args: Mapping[str, Any]) -> Mapping[str, Any]:
    """The call's arguments plus the schema defaults of path parameters it left out.

    ``grep_files(pattern=...)`` searches ``path="."``: rules must judge that path too.
    """
    parameters = tool.parameters if isinstance(tool.parameters, Mapping) else {}
    properties = parameters.get("properties")
    if not isinstance(properties, Mapping):
        return args
    extra: dict[str, Any] = {}
    for key, spec in properties.items():
        if key in args or not is_path_key(key) or not isinstance(spec, Mapping):
            continue
        default = spec.get("default")
        if isinstance(default, str) or (
            isinstance(default, list) and default and all(isinstance(d, str) for d in default)
        ):
            extra[key] = default
    return {**args, **extra} if extra else args


def describe(rule: PermissionRule) -> str:
    """A rule in words for reasons and logs."""
    return f"{rule.decision.value} {rule.tool}" + (f" {dict(rule.args)}" if rule.args else "")


def unmatched_rules(rules: Iterable[PermissionRule], tool_names: Iterable[str]) -> list[PermissionRule]:
    """The rules whose tool pattern matches none of `tool_names` (likely a typo or a wrong tool name)."""
    names = list(tool_names)
    return [r for r in rules if not any(fnmatch.fnmatchcase(n, r.tool) for n in names)]
