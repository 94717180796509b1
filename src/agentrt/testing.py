"""Test kit for applications built on agentrt: the scripted model and conformance suites."""

from agentrt.model.base import ModelRequest
from agentrt.model.scripted import ScriptedModel

__all__ = ["ModelRequest", "ScriptedModel"]
