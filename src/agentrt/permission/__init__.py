"""Permissions: modes, rules and the engine that decides allow / ask / deny for each tool call.

Precedence for one call: a matching **deny** rule denies; a matching **ask** rule asks; a call the deny
and ask rules cannot judge asks; in ``BYPASS`` mode everything else is allowed; in ``EXPLORE`` mode a
tool that is not read-only is denied unless an allow rule covers the call; in ``PLAN`` mode one that is
neither read-only nor a plan tool is denied; then the tool's own check
(`check_permission`) decides if it has an opinion; then allow rules; otherwise the mode's default:

==============  =================================================================
DEFAULT         tools that are destructive or require confirmation ask; other tools
                that are not read-only ask too, except for an agent created without
                a ``permission`` argument (the implicit context), where they run
ACCEPT_EDITS    as DEFAULT, but edit tools whose paths are inside the workspace run
EXPLORE         read-only tools are allowed, everything else is denied
BYPASS          everything is allowed (deny and ask rules, and a tool's own deny, still apply)
DONT_ASK        what would ask is denied
PLAN            read-only tools and the plan tools (``plan_write``, ``todo_write``,
                ``plan_exit``, which asks) run, everything else is denied; a session
                enters and leaves it with ``agent.enter_plan_mode`` / ``exit_plan_mode``
==============  =================================================================

Rules match on normalised arguments: shell commands parsed (an allow rule must match every command
of a chained line), paths resolved (``..``, ``//``, ``~`` and symlinks cannot dodge a rule), other
values in canonical JSON. See docs/permissions.md for the exact semantics.
"""

from agentrt.permission.config import ConfirmResult, PermissionContext
from agentrt.permission.engine import PermissionEngine, unmatched_rules
from agentrt.permission.matching import COMMAND_KEYS, PATH_KEYS, is_command_key, is_path_key
from agentrt.permission.paths import is_dangerous_path, refuse_dangerous_path, workspace_root
from agentrt.permission.rules import Decision, PermissionDecision, PermissionMode, PermissionRule
from agentrt.permission.suggest import check_answer_rule, suggest_rules

__all__ = [
    "COMMAND_KEYS",
    "PATH_KEYS",
    "ConfirmResult",
    "Decision",
    "PermissionContext",
    "PermissionDecision",
    "PermissionEngine",
    "PermissionMode",
    "PermissionRule",
    "check_answer_rule",
    "is_command_key",
    "is_dangerous_path",
    "is_path_key",
    "refuse_dangerous_path",
    "suggest_rules",
    "unmatched_rules",
    "workspace_root",
]
