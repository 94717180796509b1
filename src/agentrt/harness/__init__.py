"""The workspace agent's pieces: instructions files, subagents and the rest (see docs/harness.md)."""

from agentrt.harness.instructions import InstructionsFile, WorkspaceInstructions
from agentrt.harness.mentions import (
    FileMentions,
    Mention,
    MentionExpansion,
    MentionRef,
    MentionsExpanded,
    expand_mentions,
    find_mentions,
)
from agentrt.harness.subagents import (
    SubagentLimits,
    SubagentSpec,
    SubagentSpecError,
    SubagentTask,
    SubagentTools,
    load_subagent_specs,
    parse_subagent_spec,
)
from agentrt.harness.workspace import WorkspaceAgent

__all__ = [
    "FileMentions",
    "InstructionsFile",
    "Mention",
    "MentionExpansion",
    "MentionRef",
    "MentionsExpanded",
    "SubagentLimits",
    "SubagentSpec",
    "SubagentSpecError",
    "SubagentTask",
    "SubagentTools",
    "WorkspaceAgent",
    "WorkspaceInstructions",
    "expand_mentions",
    "find_mentions",
    "load_subagent_specs",
    "parse_subagent_spec",
]
