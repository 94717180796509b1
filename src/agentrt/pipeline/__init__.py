"""Multi-agent composition: pipelines of agents and conversations among them.

- `sequential([a, b, c])`: each agent works on the previous one's reply.
- `fanout([a, b], gather=...)`: the same input to all, in parallel (with a concurrency cap).
- `route(classifier, {label: agent}, default=None)`: one agent, chosen by a function or an agent.
- `loop(agent, until=...)`: an agent re-run on its own reply until a condition holds.
- `MsgHub([a, b, c], announcement=...)`: a conversation in which each reply is heard by the others.

Composites have the agent surface (`call`, `stream_events`, `call_sync`, `observe`, `interrupt`,
`as_tool`), so they nest anywhere an agent fits. Each member runs in its own session derived from
the caller's (``<session>/<member name>``).
"""

from .base import AgentLike, Composite, combine, handoff, is_paused, is_stopped
from .composites import FanOut, Loop, Router, RouteSelected, Sequential, fanout, loop, route, sequential
from .hub import MsgHub

__all__ = [
    "AgentLike",
    "Composite",
    "FanOut",
    "Loop",
    "MsgHub",
    "RouteSelected",
    "Router",
    "Sequential",
    "combine",
    "fanout",
    "handoff",
    "is_paused",
    "is_stopped",
    "loop",
    "route",
    "sequential",
]
