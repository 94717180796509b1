"""Plan tools: the model writes its plan to ``plans/<session>.md`` and asks the human to approve it.

``toolkit.register(PlanTools(root))`` adds two tools for plan mode (`PermissionMode.PLAN`, see
``agent.enter_plan_mode``):

- ``plan_write(content)`` writes the session's plan (the whole plan: it replaces the previous one) to
  ``plans/<session>.md`` under the workspace `root`. Its permission check allows it in every mode: it
  writes nothing else.
- ``plan_exit()`` asks the human to approve the plan through the ordinary approval flow (it requires
  confirmation; the approval's reason carries the plan text, so the web UI, ``agentrt chat`` and any
  `RequireUserConfirm` consumer show what is approved). Once approved it runs, and the agent takes the
  session out of plan mode; denied, the session stays in plan mode and the model reads the denial.
  Without a written plan it is denied (the model is told to call ``plan_write`` first).

The plan file is named after the session id: an id of lower-case letters, digits, ``.``, ``_`` and
``-`` (at most 80 characters, starting and ending with a letter or digit, not a device name) is used as
it is; any other id becomes a slug of its safe characters plus a hash of the whole id
(``team-alpha+3f2a9c0b1d4e5f60.md``), so no id can name a path outside ``plans/`` and two ids never share
a file. ``plans/`` and the file must not be symlinks. Writes are atomic and capped at
`DEFAULT_MAX_PLAN_BYTES`.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentrt.context import RuntimeContext
from agentrt.errors import ToolRetry, UserError
from agentrt.events import AgentEvent, register_event_type
from agentrt.permission import PermissionDecision, is_dangerous_path, workspace_root
from agentrt.permission.engine import PLAN_EXIT, PLAN_WRITE
from agentrt.tool.base import Tool, tool
from agentrt.tool.builtin.files import PathRefused, _atomic_write

__all__ = [
    "DEFAULT_MAX_PLAN_BYTES",
    "PLAN_EXIT",
    "PLAN_WRITE",
    "PlanModeChanged",
    "PlanTools",
    "is_plan_exit_tool",
    "plan_file_name",
]

DEFAULT_MAX_PLAN_BYTES = 64_000
"""Largest plan ``plan_write`` writes (and ``plan_exit`` shows for approval)."""

_PLAIN_ID = re.compile(r"[a-z0-9](?:[a-z0-9._-]{0,78}[a-z0-9])?")
_SLUG_JUNK = re.compile(r"[^a-z0-9]+")
# Names Windows reserves in any directory, with any extension.
_DEVICE_NAMES = frozenset(
    {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}
)


@register_event_type
@dataclass(frozen=True, slots=True, kw_only=True)
class PlanModeChanged(AgentEvent):
    """A session entered or left plan mode during a streamed call (type ``plan_mode_changed``).

    `active` is the session's plan mode now; `reason` says why: ``entered`` / ``exited``
    (``agent.enter_plan_mode`` / ``exit_plan_mode``) or ``plan_approved`` (the human approved
    ``plan_exit``).
    """

    active: bool
    reason: str = ""


def plan_file_name(session_id: str) -> str:
    """The file name of a session's plan: the id itself when it is plain, else a slug plus a hash.

    Never contains a path separator, never starts with a dot, never names a device; distinct ids give
    distinct names (a plain name has no ``+``, a hashed one always has).
    """
    if not isinstance(session_id, str) or not session_id:
        raise UserError(f"a session id must be a non-empty string, not {session_id!r}")
    if _PLAIN_ID.fullmatch(session_id) and session_id.split(".", 1)[0] not in _DEVICE_NAMES:
        return f"{session_id}.md"
    slug = _SLUG_JUNK.sub("-", session_id.lower()).strip("-")[:40].rstrip("-") or "session"
    digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{slug}+{digest}.md"


class PlanTools:
    """``plan_write`` and ``plan_exit`` for the workspace `root` (see the module docstring).

    Args:
        root: The workspace directory; it must exist and not be a protected directory.
        directory: Where plans go, relative to `root` (created on the first write).
        max_plan_bytes: Largest plan written (and shown for approval).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        directory: str = "plans",
        max_plan_bytes: int = DEFAULT_MAX_PLAN_BYTES,
    ) -> None:
        real = workspace_root(root, "PlanTools")
        folder = os.path.normpath(directory) if isinstance(directory, str) and directory.strip() else ""
        if not folder or "\x00" in folder or os.path.isabs(folder) or folder == "." or folder.startswith(".."):
            raise UserError(f"PlanTools directory must be a relative path inside the workspace, not {directory!r}")
        if is_dangerous_path(os.path.join(real, folder)):
            raise UserError(f"PlanTools directory {directory!r} is a protected path")
        if max_plan_bytes < 1:
            raise UserError("PlanTools max_plan_bytes must be positive")
        self.root = real
        self.directory = folder.replace(os.sep, "/")
        self.max_plan_bytes = max_plan_bytes
        checks = {PLAN_WRITE: self._check_write, PLAN_EXIT: self._check_exit}
        for name, check in checks.items():
            setattr(self, name, getattr(self, name).copy(check_permission=check, workspace=real))

    def __repr__(self) -> str:
        return f"PlanTools({self.root!r})"

    # -- where plans live -------------------------------------------------------------------------------
    def plan_path(self, session_id: str) -> str:
        """The absolute path of the plan of `session_id` (always directly inside the plans directory)."""
        return os.path.join(self.root, self.directory, plan_file_name(session_id))

    def _checked_path(self, session_id: str) -> tuple[str, str]:
        """``(absolute path, path relative to the root)``, or `PathRefused` if a symlink would redirect it."""
        path = self.plan_path(session_id)
        if os.path.realpath(path) != path:
            # Some part (the plans directory, the file) is a symlink: a write could land elsewhere.
            raise PathRefused(f"{self.directory}/ and the plan file must not be symlinks")
        if is_dangerous_path(path):
            raise PathRefused(f"{plan_file_name(session_id)!r} is a protected file name")
        return path, os.path.relpath(path, self.root).replace(os.sep, "/")

    def read_plan(self, session_id: str) -> str | None:
        """The plan of `session_id`, or None when none was written (blocking: small, capped read)."""
        path, rel = self._checked_path(session_id)
        try:
            with open(path, "rb") as f:
                data = f.read(self.max_plan_bytes + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ToolRetry(f"Cannot read {rel}: {exc.strerror or exc}.") from None
        text = data[: self.max_plan_bytes].decode("utf-8", errors="replace")
        return text + ("\n[... plan cut at the size limit]" if len(data) > self.max_plan_bytes else "")

    # -- the tools ---------------------------------------------------------------------------------------
    @tool(concurrency_safe=False)
    async def plan_write(self, content: str, ctx: RuntimeContext) -> str:
        """Write your plan for this task (Markdown); it replaces the plan written before.

        In plan mode you can read and search but not change anything: explore first, then write a plan
        a reviewer can approve (the goal, the files to change and how, the commands to run, how you
        will check the result), then call plan_exit to ask the user to approve it.

        Args:
            content: The whole plan, in Markdown.
            ctx: The call's context (injected: the plan file is named after its session).
        """
        return await asyncio.to_thread(self._write, ctx.key[1], content)

    @tool(requires_confirmation=True, concurrency_safe=False)
    async def plan_exit(self, ctx: RuntimeContext) -> str:
        """Ask the user to approve the plan you wrote with plan_write and leave plan mode.

        The user sees the plan. Once approved you may change files and run commands to carry it out;
        if the user denies it, you stay in plan mode: revise the plan (plan_write) and ask again.
        """
        session_id = ctx.key[1]
        if await asyncio.to_thread(self.read_plan, session_id) is None:
            raise ToolRetry(f"There is no plan to approve: write it with {PLAN_WRITE} first.")
        rel = self._checked_path(session_id)[1]
        return f"The plan in {rel} is approved; plan mode is over. Carry out the plan now."

    # -- bodies and permission checks ----------------------------------------------------------------
    def _write(self, session_id: str, content: str) -> str:
        data = content.encode("utf-8", errors="replace")
        if len(data) > self.max_plan_bytes:
            raise ToolRetry(f"The plan is {len(data)} bytes; the limit is {self.max_plan_bytes}. Write a shorter plan.")
        if not content.strip():
            raise ToolRetry("The plan is empty: write the whole plan.")
        path, rel = self._checked_path(session_id)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        except OSError as exc:
            raise ToolRetry(f"Cannot create {self.directory}/: {exc.strerror or exc}.") from None
        self._checked_path(session_id)  # the directory may have been created as (or swapped for) a symlink
        _atomic_write(path, data, rel)
        return (
            f"Plan saved to {rel} ({len(data)} bytes). When it is complete, call {PLAN_EXIT} to ask the user "
            "to approve it."
        )

    def _check_write(self, args: Mapping[str, Any], ctx: RuntimeContext) -> PermissionDecision:
        """Writing the session's own plan file is always allowed (it is confined and capped)."""
        try:
            rel = self._checked_path(ctx.key[1])[1]
        except PathRefused as exc:
            return PermissionDecision.deny(exc.reason)
        return PermissionDecision.allow(f"{PLAN_WRITE} writes only {rel}")

    def _check_exit(self, args: Mapping[str, Any], ctx: RuntimeContext) -> PermissionDecision:
        """Ask with the plan as the reason (the human sees what they approve); deny when there is none."""
        session_id = ctx.key[1]
        try:
            rel = self._checked_path(session_id)[1]
            plan = self.read_plan(session_id)
        except (PathRefused, ToolRetry) as exc:
            return PermissionDecision.deny(getattr(exc, "reason", None) or str(exc))
        if plan is None:
            return PermissionDecision.deny(f"there is no plan to approve: write it with {PLAN_WRITE} first")
        return PermissionDecision.ask(f"approve this plan ({rel}) and leave plan mode?\n\n{plan}")


def is_plan_exit_tool(candidate: Tool | None) -> bool:
    """Whether `candidate` is the ``plan_exit`` tool of a `PlanTools` (the agent leaves plan mode when it succeeds)."""
    if candidate is None or candidate.name != PLAN_EXIT:
        return False
    return isinstance(getattr(candidate.fn, "__self__", None), PlanTools)
