"""Agents: the shared lifecycle (`AgentBase`), `ReActAgent` and `UserAgent`."""

from agentrt.agent._run import Run
from agentrt.agent.base import AgentBase
from agentrt.agent.react import ReActAgent
from agentrt.agent.user import UserAgent

__all__ = ["AgentBase", "ReActAgent", "Run", "UserAgent"]
