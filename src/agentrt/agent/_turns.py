"""Bookkeeping of one assistant turn's tool calls: what is in flight, what is answered, closing the rest.

The invariants kept here hold for every provider and every interleaving of approvals, interrupts,
crashes and new messages:

- each tool call in the history has exactly one result, in the user messages that directly follow
  its assistant message (several such messages are fine: formatters merge consecutive turns);
- a call runs only if the model of this session made it: the loop records a turn's calls as *in
  flight* (``AgentState.tool_state["in_flight"]``) in the same checkpoint that stores the model's
  reply, and only calls recorded there may ever be run again after a crash; calls that arrive with
  the input (a client's seeded history) are inert history and never run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentrt.message import Msg, ToolResultBlock, ToolUseBlock, block_from_dict

if TYPE_CHECKING:
    from agentrt.agent._run import Run

__all__ = [
    "DANGLING_RESULT",
    "INTERRUPTED_RESULT",
    "IN_FLIGHT",
    "NOT_RUN_RESULT",
    "close_turn",
    "inert_input",
    "open_turn",
    "recorded_results",
    "set_in_flight",
    "trusted_calls",
    "unique_call_ids",
    "without_in_flight",
]

IN_FLIGHT = "in_flight"
"""`AgentState.tool_state` key: the calls of the current turn that the loop started, and results so far."""
INTERRUPTED_RESULT = "The tool call was interrupted before it finished."
DANGLING_RESULT = "The tool call did not complete: the previous run stopped before its result was recorded."
NOT_RUN_RESULT = "Not run: this tool call came with the input; it was not made by the model in this session."
WAITING_INTERRUPTED = "Not run: the run was interrupted while this tool call waited for an answer."


def in_flight(run: Run) -> Mapping[str, Any] | None:
    """The in-flight record of the session, if any."""
    tool_state = run.state.tool_state
    record = tool_state.get(IN_FLIGHT) if tool_state else None
    return record if isinstance(record, Mapping) else None


def set_in_flight(
    run: Run, assistant_id: str, call_ids: Sequence[str], results: Sequence[ToolResultBlock] = ()
) -> None:
    """Record (for the next checkpoint) that `call_ids` of `assistant_id` start now, with the results so far."""
    tool_state = dict(run.state.tool_state)
    tool_state[IN_FLIGHT] = {
        "assistant_id": assistant_id,
        "calls": list(call_ids),
        "results": [r.to_dict() for r in results],
    }
    run.set_field("tool_state", tool_state)


def without_in_flight(run: Run) -> None:
    """Drop the in-flight record (for the next checkpoint)."""
    if in_flight(run) is not None:
        run.set_field("tool_state", {k: v for k, v in run.state.tool_state.items() if k != IN_FLIGHT})


def recorded_results(run: Run, assistant_id: str) -> dict[str, ToolResultBlock]:
    """Results the in-flight record holds for the turn of `assistant_id`."""
    record = in_flight(run)
    out: dict[str, ToolResultBlock] = {}
    if record is None or record.get("assistant_id") != assistant_id:
        return out
    for raw in record.get("results") or ():
        block = block_from_dict(raw)
        if isinstance(block, ToolResultBlock):
            out[block.id] = block
    return out


def trusted_calls(run: Run, assistant_id: str, calls: Sequence[ToolUseBlock] = ()) -> frozenset[str]:
    """Ids of the calls of `assistant_id` that the loop recorded as made by the model and started.

    A record written before the loop listed its calls (it only held results) vouches for all of
    `calls`: only the loop writes ``tool_state``, never a caller.
    """
    record = in_flight(run)
    if record is None or record.get("assistant_id") != assistant_id:
        return frozenset()
    if "calls" not in record:
        return frozenset(c.id for c in calls)
    return frozenset(str(c) for c in record.get("calls") or ())


def open_turn(messages: Sequence[Msg]) -> tuple[Msg, list[ToolUseBlock]] | None:
    """The last assistant message and its calls that have no result yet (None if all are answered)."""
    answered: set[str] = set()
    for msg in reversed(messages):
        if msg.role == "assistant":
            missing = [c for c in msg.tool_calls if c.id not in answered]
            return (msg, missing) if missing else None
        for block in msg.content:
            if isinstance(block, ToolResultBlock):
                answered.add(block.id)
    return None


def close_turn(run: Run, text: str = INTERRUPTED_RESULT, state: str = "interrupted") -> None:
    """End the open turn: each unanswered call gets its recorded result or `state`; nothing waits any more.

    Used when a run stops (interrupt, cancelled stream): calls still waiting for approval end as
    interrupted too, so a later approval of them is refused instead of running them out of order.
    """
    pending = run.state.pending
    turn = open_turn(run.state.messages)
    if turn is not None:
        assistant, missing = turn
        recorded = recorded_results(run, assistant.id)
        waiting = {c.id for c in pending.calls} if pending is not None else set()
        results: list[ToolResultBlock] = []
        for call in missing:
            if call.id in recorded:
                results.append(recorded[call.id])
            else:
                note = WAITING_INTERRUPTED if call.id in waiting else text
                results.append(ToolResultBlock(id=call.id, name=call.name, output=note, state=state))  # type: ignore[arg-type]
        run.add_messages(Msg(role="user", content=list(results)))
    without_in_flight(run)
    if pending is not None:
        run.set_field("pending", None)
        if pending.notes:
            run.add_messages(*pending.notes)


def inert_input(messages: Sequence[Msg]) -> list[Msg]:
    """The input with each tool call that has no result in the input closed as "not run".

    Callers may seed a history (the OpenAI facade does); their tool calls are history, never work:
    closing them keeps the transcript valid for providers and leaves nothing for crash repair to run.
    """
    if not any(m.role == "assistant" and m.tool_calls for m in messages):
        return list(messages)
    answered = {b.id for m in messages for b in m.content if isinstance(b, ToolResultBlock)}
    out: list[Msg] = []
    for msg in messages:
        out.append(msg)
        if msg.role == "assistant":
            missing = [c for c in msg.tool_calls if c.id not in answered]
            if missing:
                out.append(
                    Msg(
                        role="user",
                        content=[
                            ToolResultBlock(id=c.id, name=c.name, output=NOT_RUN_RESULT, state="error") for c in missing
                        ],
                    )
                )
    return out


def unique_call_ids(reply: Msg) -> Msg:
    """The reply with duplicate tool-call ids made unique, so each call gets its own result.

    Some models and proxies repeat an id within one turn; the model's id is kept in the block's
    metadata (``provider_id``).
    """
    calls = reply.tool_calls
    if len(calls) < 2:
        return reply
    ids = [c.id for c in calls]
    if len(set(ids)) == len(ids):
        return reply
    seen: set[str] = set(ids)
    used: set[str] = set()
    content: list[Any] = []
    for block in reply.content:
        if isinstance(block, ToolUseBlock):
            if block.id in used:
                n = 2
                while f"{block.id}_{n}" in seen:
                    n += 1
                new_id = f"{block.id}_{n}"
                seen.add(new_id)
                meta = {**(block.metadata or {}), "provider_id": block.id}
                block = ToolUseBlock(id=new_id, name=block.name, input=block.input, metadata=meta)
            used.add(block.id)
        content.append(block)
    return reply.replace(content=content)
