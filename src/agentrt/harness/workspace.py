"""`WorkspaceAgent`: a `ReActAgent` preset that turns every workspace piece on for one folder.

``WorkspaceAgent(path, model)`` is a `ReActAgent` with:

- `FileTools` and `ShellTool` on the folder (the shell in a bubblewrap sandbox where one can run);
- the folder's ``AGENTS.md`` and ``~/.agentrt/AGENTS.md`` in the system prompt (`WorkspaceInstructions`);
- ``@path`` mentions in user messages attached (`FileMentions`);
- skills from ``<path>/skills`` and ``<path>/.agentrt/skills`` when present;
- plan mode: `PlanTools` writing plans to ``<path>/plans/<session>.md`` (``agent.enter_plan_mode(ctx)``);
- subagents (`SubagentTools`): those declared in ``<path>/subagents/<name>.md`` and ones the model
  defines for a task, following the folder's ``AGENTS.md`` too;
- sessions in SQLite at ``<path>/.agentrt/state.db``;
- permissions in ``DEFAULT`` mode with the folder as the workspace, so edits and commands ask for
  approval (``permission=PermissionMode.ACCEPT_EDITS`` lets file edits inside it run).

Each piece can be switched off (``shell=False``, ``skills=False`` ...) and each is also usable on
its own with a plain `ReActAgent`; docs/harness.md shows both.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentrt.agent.react import ReActAgent
from agentrt.harness.instructions import WorkspaceInstructions
from agentrt.harness.mentions import FileMentions
from agentrt.harness.subagents import SubagentTools, load_subagent_specs
from agentrt.permission import (
    Decision,
    PermissionContext,
    PermissionMode,
    PermissionRule,
    workspace_root,
)
from agentrt.tool.builtin.files import FileTools
from agentrt.tool.builtin.shell import ShellTool
from agentrt.tool.toolkit import Toolkit

if TYPE_CHECKING:
    from agentrt.middleware.base import Middleware
    from agentrt.model.base import ChatModel
    from agentrt.state.base import AgentStateStore
    from agentrt.tool.builtin.plan import PlanTools

__all__ = ["WORKSPACE_PROMPT", "WorkspaceAgent"]

STATE_DIR = ".agentrt"
"""The folder inside the workspace holding the agent's own files (session state, workspace skills)."""

WORKSPACE_PROMPT = """\
You are a careful software and operations agent working in the folder {root}.

- Work with the tools: {tools}. File paths are relative to that folder.
- Look before you change anything: read the files involved first, then make small, precise edits \
(edit_file rather than rewriting whole files).
- After a change, check that it works (run the tests or the command that shows it) when you can.
- Some calls need the user's approval. When one is refused, do not try to get around it: ask, or take \
another way.
- Files the user mentions as @path are attached to their message.
- End with a short summary of what you did and what is left to do."""
"""The default system prompt (``{root}``: the folder; ``{tools}``: how to reach files and commands)."""


def _root(path: str | os.PathLike[str]) -> str:
    return workspace_root(path, "WorkspaceAgent", expand_user=True)


def _permission(permission: PermissionContext | PermissionMode | str | None, root: str, own_store: bool) -> Any:
    """The agent's permission context: the folder as its workspace, the session store out of the tools' reach."""
    # None is DEFAULT here (explicit): tools that are not read-only ask, as for any configured agent.
    context = PermissionContext.coerce(permission if permission is not None else PermissionMode.DEFAULT)
    if not context.workspace:
        context = dataclasses.replace(context, workspace=root)
    if not own_store:
        return context
    # The sessions' store lives in the folder: no file tool may touch it (accepted rules live there).
    guard = PermissionRule(tool="*", decision=Decision.DENY, args={"path": f"{root}/{STATE_DIR}/state.db*"})
    return dataclasses.replace(context, rules=(*context.rules, guard))


def _skill_folders(root: str, skills: bool | Sequence[str | os.PathLike[str]]) -> list[str]:
    if skills is True:
        candidates = [os.path.join(root, "skills"), os.path.join(root, STATE_DIR, "skills")]
        return [c for c in candidates if os.path.isdir(c)]
    if skills is False:
        return []
    return [os.fspath(s) for s in skills]


class WorkspaceAgent(ReActAgent):
    """A `ReActAgent` set up to work in one folder: files, shell, AGENTS.md, @path, skills, plan mode, subagents.

    Args:
        path: The folder to work in (it must exist).
        model: A `ChatModel` or a model id such as ``"openai:gpt-4o"``.
        name: The agent's name (and the agent part of its sessions' address).
        sys_prompt: The system prompt; default `WORKSPACE_PROMPT` filled in for the folder.
        tools: More tools (anything `Toolkit.register` takes) beside the workspace's.
        middlewares: More middlewares, after the instructions and mentions ones.
        permission: A `PermissionMode` or `PermissionContext` (default ``DEFAULT`` mode); its workspace
            is the folder unless the context names one.
        state_store: Where sessions live; default SQLite at ``<path>/.agentrt/state.db`` (then
            closed by `aclose`, and denied to the file tools).
        shell: Give the agent ``run_command`` in the folder.
        sandbox: The shell's sandbox, ``"bwrap"`` (default) or None.
        sandbox_fallback: Where the sandbox cannot run, log a warning and run commands unsandboxed
            (default) rather than fail.
        shell_timeout: Default seconds per command.
        instructions: Read ``AGENTS.md`` (the folder's and ``~/.agentrt/AGENTS.md``) into the prompt.
        mentions: Attach the files user messages mention as ``@path``.
        skills: True: the skill folders ``<path>/skills`` and ``<path>/.agentrt/skills`` that exist;
            a list: exactly these folders; False: none.
        plan: Give the agent the plan tools (plans under ``<path>/plans/``) for plan mode.
        subagents: Give the model the subagent tools (``agent_spawn`` ...) with the subagents declared
            in ``<path>/subagents/*.md``, and inline ones.
        max_iters: Most reasoning steps per call (a ``loop=LoopOptions(...)`` given instead decides).
        **options: Any other `ReActAgent` option (``options``, ``context``, ``enable_task_list`` ...).
    """

    __slots__ = ("_owned_store", "files", "instructions", "mentions", "plan_tools", "root", "shell", "subagents")

    def __init__(
        self,
        path: str | os.PathLike[str],
        model: ChatModel | str,
        *,
        name: str = "workspace",
        sys_prompt: str | None = None,
        tools: Sequence[Any] = (),
        middlewares: Sequence[Middleware] = (),
        permission: PermissionContext | PermissionMode | str | None = PermissionMode.DEFAULT,
        state_store: AgentStateStore | None = None,
        shell: bool = True,
        sandbox: str | None = "bwrap",
        sandbox_fallback: bool = True,
        shell_timeout: float = 120,
        instructions: bool = True,
        mentions: bool = True,
        skills: bool | Sequence[str | os.PathLike[str]] = True,
        plan: bool = True,
        subagents: bool = True,
        max_iters: int = 50,
        **options: Any,
    ) -> None:
        root = _root(path)
        self.root = root
        """The folder, as a real absolute path."""
        self.files = FileTools(root)
        self.shell: ShellTool | None = None
        if shell:
            self.shell = ShellTool(
                root,
                timeout=shell_timeout,
                sandbox=sandbox,  # type: ignore[arg-type]  # checked by ShellTool
                sandbox_fallback=sandbox_fallback,
            )
        self.plan_tools: PlanTools | None = None
        if plan:
            from agentrt.tool.builtin.plan import PlanTools

            self.plan_tools = PlanTools(root)
        self.instructions = WorkspaceInstructions(root) if instructions else None
        self.mentions = FileMentions(root) if mentions else None
        self.subagents = _subagents(root, self.instructions) if subagents else None
        toolkit = Toolkit()
        for item in (self.files, self.shell, self.plan_tools, self.subagents, *tools):
            if item is not None:
                toolkit.register(item)
        own = [m for m in (self.instructions, self.mentions) if m is not None]
        self._owned_store: AgentStateStore | None = None
        if state_store is None:
            from agentrt.state import SqliteStateStore

            state_store = self._owned_store = SqliteStateStore(os.path.join(root, STATE_DIR, "state.db"))
        folders = _skill_folders(root, skills)
        if options.get("loop") is None:
            options["max_iters"] = max_iters
        super().__init__(
            name,
            sys_prompt if sys_prompt is not None else _default_prompt(root, shell),
            model,
            toolkit,
            middlewares=[*own, *middlewares],
            state_store=state_store,
            permission=_permission(permission, root, self._owned_store is not None),
            skills=folders or None,
            **options,
        )

    def __repr__(self) -> str:
        return f"WorkspaceAgent({self.root!r})"

    async def aclose(self) -> None:
        """Close what the agent opened: its default state store and the toolkit's resources (MCP clients)."""
        await self.toolkit.aclose()
        if self._owned_store is not None:
            await self._owned_store.close()


def _default_prompt(root: str, shell: bool) -> str:
    tools = "read_file, list_dir, glob_files, grep_files, write_file and edit_file for files"
    if shell:
        tools += ", run_command for shell commands (run in the folder)"
    return WORKSPACE_PROMPT.format(root=root, tools=tools)


def _subagents(root: str, instructions: WorkspaceInstructions | None) -> SubagentTools:
    """The subagent tools: the specs declared in ``<root>/subagents/*.md`` (if any) and inline ones.

    Subagents work in the same folder, so they follow its ``AGENTS.md`` too; ``@path`` expansion is
    for the user's messages only (a subagent's task is written by the model).
    """
    folder = os.path.join(root, "subagents")
    specs = load_subagent_specs(folder) if os.path.isdir(folder) else {}
    return SubagentTools(specs, workspace=root, middlewares=[instructions] if instructions is not None else ())
