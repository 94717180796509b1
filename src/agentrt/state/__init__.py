"""Durable agent state: `AgentState`, the store protocol and the backends."""

from agentrt.state.base import AgentState, AgentStateStore, BaseStateStore, SessionInfo
from agentrt.state.stores.memory import InMemoryStateStore

__all__ = ["AgentState", "AgentStateStore", "BaseStateStore", "InMemoryStateStore", "SessionInfo"]
