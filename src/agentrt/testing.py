"""Test kit for applications built on agentrt: the scripted model and conformance suites."""

from agentrt.knowledge.contract import check_knowledge_store
from agentrt.memory.contract import FakeClock, check_long_term_memory
from agentrt.model.base import ModelRequest
from agentrt.model.scripted import ScriptedModel
from agentrt.state.contract import check_state_store

__all__ = [
    "FakeClock",
    "ModelRequest",
    "ScriptedModel",
    "check_knowledge_store",
    "check_long_term_memory",
    "check_state_store",
]
