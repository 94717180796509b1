"""Test kit for applications built on agentrt: the scripted model and conformance suites."""

from agentrt.model.base import ModelRequest
from agentrt.model.scripted import ScriptedModel
from agentrt.state._contract import check_state_store

__all__ = ["ModelRequest", "ScriptedModel", "check_state_store"]
