"""``python -m agentrt.cli``: the ``agentrt`` command."""

from agentrt.cli import main

main()
