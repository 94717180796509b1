"""Built-in tools, all opt-in.

No network or credentials: a safe calculator, a clock and unit conversion; register them like any
tool: ``Toolkit([calculate, current_time, convert_units])``.

Workspace and network tools, each gated by the permission engine (read-only or destructive, with
their own checks refusing protected paths and private addresses):

- `FileTools` (``read_file``, ``list_dir``, ``glob_files``, ``grep_files``, ``write_file``,
  ``edit_file``) confined to a workspace root: ``toolkit.register(FileTools(root))``.
- `ShellTool` (``run_command``) in the workspace with a timeout and an output cap:
  ``toolkit.register(ShellTool(root))``; ``ShellTool(root, sandbox="bwrap")`` runs each command in
  a bubblewrap sandbox (`SandboxUnavailableError` where bwrap cannot run).
- `fetch_url` (HTTP GET with size and time limits and an SSRF guard), or `WebTools` to configure
  host lists: ``toolkit.register(fetch_url)``.
- `PlanTools` (``plan_write``, ``plan_exit``) for plan mode: the plan goes to
  ``plans/<session>.md`` under the workspace, and ``plan_exit`` asks the human to approve it:
  ``toolkit.register(PlanTools(root))``.
"""

from agentrt.tool.builtin.calculator import calculate
from agentrt.tool.builtin.clock import current_time
from agentrt.tool.builtin.files import FileTools
from agentrt.tool.builtin.plan import PlanTools
from agentrt.tool.builtin.sandbox import SandboxUnavailableError
from agentrt.tool.builtin.shell import ShellTool
from agentrt.tool.builtin.units import convert_units
from agentrt.tool.builtin.web import WebTools, fetch_url

__all__ = [
    "FileTools",
    "PlanTools",
    "SandboxUnavailableError",
    "ShellTool",
    "WebTools",
    "calculate",
    "convert_units",
    "current_time",
    "fetch_url",
]
