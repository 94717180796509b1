"""The app `agentrt serve served:agents` runs in the server tests that need a separate process."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))

from server_agents import make_agent

agents = {"bot": make_agent("bot")}
