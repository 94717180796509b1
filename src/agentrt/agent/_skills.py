"""Agent Skills in a `ReActAgent`: the listing in the system prompt and the session's ``load_skill`` tool.

The skills an agent offers are its toolkit's (`Toolkit.register_skills`) and then its own
(``ReActAgent(skills=...)``, which win on a name clash). Nothing is added to a call when there are
none. Otherwise the system prompt gains one section listing each skill's name and description, and
the model gets ``load_skill``. Loading a skill is session state: its name is recorded in
``AgentState.tool_state["skills"]`` and the tool groups its metadata names are activated for the
session (applied to the running call at once, as the meta tool does), so later calls keep them.

Per call the cost is an identity check: the listing, the system message and the tool mapping are
rebuilt only when the skills, the system prompt or the tools change.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from agentrt.agent._run import current_run
from agentrt.context import RuntimeContext
from agentrt.message import Msg
from agentrt.model.base import ToolSchema
from agentrt.tool.base import Tool
from agentrt.tool.skills import LOAD_SKILL, SKILLS_STATE_KEY, Skill, SkillSource, load_skills, skill_tool, skills_prompt

if TYPE_CHECKING:
    from agentrt.agent.react import ReActAgent

__all__ = ["AgentSkills"]

logger = logging.getLogger("agentrt.agent")

_NONE: Mapping[str, Skill] = {}


class AgentSkills:
    """The skills of one agent, with what a call needs of them cached (see the module docstring)."""

    __slots__ = ("_agent", "_from", "_listing", "_merged", "_own", "_system", "_tool", "_tools")

    def __init__(self, agent: ReActAgent, skills: SkillSource | None) -> None:
        self._agent = agent
        self._own: Mapping[str, Skill] = load_skills(skills) if skills is not None else _NONE
        self._from: Mapping[str, Skill] | None = None
        self._merged: Mapping[str, Skill] = self._own
        self._listing = ""
        self._system: tuple[Msg | None, Msg | None] | None = None
        self._tool: Tool | None = None
        self._tools: tuple[Mapping[str, Tool], dict[str, Tool]] | None = None

    def current(self) -> Mapping[str, Skill]:
        """The skills offered now: the toolkit's, then the agent's own."""
        registered = self._agent.toolkit.skills
        if registered is not self._from:
            self._from = registered
            self._merged = {**registered, **self._own} if registered else self._own
            self._listing = skills_prompt(self._merged.values())
            self._system = None
        return self._merged

    def tools(self, tools: Mapping[str, Tool]) -> Mapping[str, Tool]:
        """`tools` plus ``load_skill`` (`tools` itself when there are no skills)."""
        if not self.current():
            return tools
        cached = self._tools
        if cached is not None and cached[0] is tools:
            return cached[1]
        merged = {**tools, LOAD_SKILL: self._load_tool()}
        self._tools = (tools, merged)
        return merged

    def schemas(self, schemas: list[ToolSchema]) -> list[ToolSchema]:
        """`schemas` plus the schema of ``load_skill`` (`schemas` itself when there are no skills)."""
        if not self.current():
            return schemas
        return [*schemas, self._load_tool().schema()]

    def system(self, system: Msg | None) -> Msg | None:
        """The system message with the skills listing appended (`system` itself when there are no skills)."""
        if not self.current():
            return system
        cached = self._system
        if cached is not None and cached[0] is system:
            return cached[1]
        listing = self._listing
        result = Msg.system(f"{system.text}\n\n{listing}" if system is not None and system.text else listing)
        self._system = (system, result)
        return result

    def _load_tool(self) -> Tool:
        tool = self._tool
        if tool is None:
            tool = self._tool = skill_tool(self.current, on_load=self._on_load)
        return tool

    async def _on_load(self, skill: Skill, ctx: RuntimeContext) -> str | None:
        """Record the skill in the session and activate its tool groups; a note for the model, if any."""
        run = current_run.get()  # the call running this tool (a tool runs inside its own agent's run)
        if run is None:  # called outside an agent call: there is no session to record it in
            return None
        state = run.state.tool_state
        loaded = state.get(SKILLS_STATE_KEY)
        names = [n for n in loaded if isinstance(n, str)] if isinstance(loaded, list) else []
        if skill.name not in names:
            run.set_field("tool_state", {**state, SKILLS_STATE_KEY: [*names, skill.name]})
        toolkit = self._agent.toolkit
        groups = [g for g in skill.tool_groups if g in toolkit.groups]
        for unknown in sorted(set(skill.tool_groups) - set(groups)):
            logger.warning(
                "skill %r names tool group %r, which the toolkit of agent %r does not declare; ignored",
                skill.name,
                unknown,
                self._agent.name,
            )
        if not groups:
            return None
        # As the meta tool does: the running call's working state (saved at its next checkpoint) and executor.
        current = run.state.active_groups
        active = set(current if current is not None else toolkit.default_active_groups())
        active.update(groups)
        run.set_field("active_groups", sorted(active))
        if run.executor is not None:
            run.executor.set_active_groups(frozenset(active))
        tools = sorted(t.name for t in toolkit.tools.values() if t.group in groups)
        return f"Tools now available for this skill: {', '.join(tools) or '(none yet)'}."
