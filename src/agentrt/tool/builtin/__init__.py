"""Built-in tools that need no network or credentials: a safe calculator, a clock and unit conversion.

Register them like any tool: ``Toolkit([calculate, current_time, convert_units])``.
"""

from agentrt.tool.builtin.calculator import calculate
from agentrt.tool.builtin.clock import current_time
from agentrt.tool.builtin.units import convert_units

__all__ = ["calculate", "convert_units", "current_time"]
