"""A debate in a `MsgHub`: two debaters hear each other, a judge hears everyone; offline.

Inside the ``async with`` block every participant speaks and listens in the hub's context: a plain
``await pro.call()`` runs there, and the others hear the reply (as a user message named after the
speaker) before the call returns. Each agent keeps its own state for that session. After the
block, calls are private again. The scripted models look at the conversation they have heard, so
the replies follow the debate.

Run: .venv/bin/python examples/debate_msghub.py
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from agentrt import Msg, ReActAgent, RuntimeContext
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.pipeline import MsgHub
from agentrt.state import InMemoryStateStore

MOTION = "Cities should ban cars from their centres."
ARGUMENTS = {  # side -> (topic, argument)
    "pro": [
        ("clean air", "Car-free centres cut air pollution and noise where most people walk."),
        ("trade", "Shops on pedestrian streets in Oslo and Ghent kept or grew their trade."),
    ],
    "con": [
        ("access", "A ban shuts out people who cannot walk far or carry goods by bike."),
        ("logistics", "Deliveries and emergency services still need the streets."),
    ],
}


def debater(side: str, opponent: str) -> Callable[[ModelRequest], str]:
    """Make the next point, answering the opponent's latest one (as heard through the hub)."""

    def plan(request: ModelRequest) -> str:
        said = sum(1 for m in request.messages if m.role == "assistant")
        _, point = ARGUMENTS[side][said % len(ARGUMENTS[side])]
        last = next((m for m in reversed(request.messages) if m.role == "user" and m.name == opponent), None)
        if last is None:
            return f"I argue {'for' if side == 'pro' else 'against'} the motion. {point}"
        topic = next((t for t, arg in ARGUMENTS[opponent] if arg in last.text), "their last point")
        return f"On {opponent}'s {topic} argument: {point}"

    return plan


def judge_plan(request: ModelRequest) -> str:
    """Weigh which topics each side raised and which of the other side's points it answered."""
    heard = [m for m in request.messages if m.role == "user" and m.name in ARGUMENTS]
    raised = {side: [t for t, arg in ARGUMENTS[side] if any(arg in m.text for m in heard)] for side in ARGUMENTS}
    answered = {
        side: sum(1 for m in heard if m.name == side and m.text.startswith(f"{side}: On ")) for side in ARGUMENTS
    }
    winner = max(ARGUMENTS, key=lambda side: (answered[side], len(raised[side])))
    return (
        f"Pro raised {' and '.join(raised['pro'])}; con raised {' and '.join(raised['con'])}. "
        f"Pro answered {answered['pro']} point(s), con {answered['con']}. The debate goes to {winner}."
    )


async def main() -> None:
    store = InMemoryStateStore()
    pro = ReActAgent(
        "pro", "You argue for the motion.", model=ScriptedModel.from_function(debater("pro", "con")), state_store=store
    )
    con = ReActAgent(
        "con", "You argue against it.", model=ScriptedModel.from_function(debater("con", "pro")), state_store=store
    )
    judge = ReActAgent("judge", "You judge debates.", model=ScriptedModel.from_function(judge_plan), state_store=store)
    ctx = RuntimeContext(user_id="club", session_id="debate-1")
    announcement = Msg.user(f"Motion: {MOTION} Pro opens, con answers; two rounds.", name="moderator")

    async with MsgHub([pro, con, judge], announcement=announcement, ctx=ctx) as hub:
        for n in (1, 2):
            print(f"-- round {n}")
            for speaker in (pro, con):
                reply = await speaker.call()  # no ctx: the hub's; con and the judge hear pro, and so on
                print(f"{reply.name}: {reply.text}")
        await hub.broadcast(Msg.user("Time is up. Judge, your verdict.", name="moderator"))
        verdict = await judge.call()
        print(f"-- verdict\n{verdict.name}: {verdict.text}")

    heard_before = len((await judge.get_state("club", "debate-1")).messages)
    await pro.call("One more thing!", ctx)  # after the block: pro's own history only
    state = await judge.get_state("club", "debate-1")
    assert len(state.messages) == heard_before
    speakers = sorted({m.name or m.role for m in state.messages})
    print(f"\nthe judge's state for the debate holds {len(state.messages)} messages, from {speakers}")
    print(f"pro's has {len((await pro.get_state('club', 'debate-1')).messages)} (it spoke once more, unheard)")


if __name__ == "__main__":
    asyncio.run(main())
