"""Agents: the shared lifecycle (`AgentBase`), `ReActAgent`, its option groups and `UserAgent`."""

from agentrt.agent._run import Run
from agentrt.agent.base import AgentBase
from agentrt.agent.options import LoopOptions, MemoryOptions, OutputOptions
from agentrt.agent.react import ReActAgent
from agentrt.agent.usage import RunUsage, UsageLimits
from agentrt.agent.user import UserAgent

__all__ = [
    "AgentBase",
    "LoopOptions",
    "MemoryOptions",
    "OutputOptions",
    "ReActAgent",
    "Run",
    "RunUsage",
    "UsageLimits",
    "UserAgent",
]
