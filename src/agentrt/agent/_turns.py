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

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentrt.errors import InvalidValueError, NotPendingError
from agentrt.message import Msg, ToolResultBlock, ToolUseBlock, block_from_dict, new_id

if TYPE_CHECKING:
    from agentrt.agent._run import Run

__all__ = [
    "DANGLING_RESULT",
    "INTERRUPTED_RESULT",
    "IN_FLIGHT",
    "NOT_RUN_RESULT",
    "approved_calls",
    "check_input",
    "close_turn",
    "inert_input",
    "observed",
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
    run: Run,
    assistant_id: str,
    call_ids: Sequence[str],
    results: Sequence[ToolResultBlock] = (),
    *,
    approved: bool = False,
) -> None:
    """Record (for the next checkpoint) that `call_ids` of `assistant_id` start now, with the results so far.

    `approved`: they start because a human approved them, so a dead run's repair never runs them
    again (an approval is spent once, and the arguments may have been edited).
    """
    tool_state = dict(run.state.tool_state)
    record: dict[str, Any] = {
        "assistant_id": assistant_id,
        "calls": list(call_ids),
        "results": [r.to_dict() for r in results],
    }
    if approved:
        record["approved"] = list(call_ids)
    tool_state[IN_FLIGHT] = record
    run.set_field("tool_state", tool_state)


def approved_calls(run: Run, assistant_id: str) -> frozenset[str]:
    """Ids of the calls of `assistant_id` a dead run had started on a human's approval."""
    record = in_flight(run)
    if record is None or record.get("assistant_id") != assistant_id:
        return frozenset()
    return frozenset(str(c) for c in record.get("approved") or ())


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


def check_input(messages: Sequence[Msg]) -> None:
    """Refuse input no provider would accept as history, before anything is stored.

    Tool calls belong in assistant messages (with distinct ids), and tool results in the user
    messages right after the call they answer, once each. Storing anything else would make every
    later call of the session fail (the OpenAI format refuses a user message holding a call, every
    provider a result that answers no call of the turn before it).
    """
    open_calls: set[str] = set()
    for i, msg in enumerate(messages):
        if msg.role == "assistant":
            ids = [c.id for c in msg.tool_calls]
            if len(set(ids)) != len(ids):
                raise InvalidValueError(f"input message {i} holds several tool calls with one id: {ids}")
            open_calls = set(ids)
        for block in msg.content:
            if isinstance(block, ToolUseBlock) and msg.role != "assistant":
                raise InvalidValueError(
                    f"input message {i} ({msg.role!r}) holds tool call {block.id!r} ({block.name}): tool calls "
                    "belong in assistant messages"
                )
            if isinstance(block, ToolResultBlock):
                if msg.role != "user":
                    raise InvalidValueError(
                        f"input message {i} ({msg.role!r}) holds the result of tool call {block.id!r}: tool results "
                        "belong in user messages"
                    )
                if block.id not in open_calls:
                    raise NotPendingError(
                        f"input message {i} holds a result for tool call {block.id!r}, which answers no tool call "
                        "of the assistant message right before it in the input (or was answered already), and no "
                        "tool call is waiting for a result",
                        [block.id],
                    )
                open_calls.discard(block.id)
        if msg.role != "assistant" and any(not isinstance(b, ToolResultBlock) for b in msg.content):
            open_calls = set()  # other content ends the turn: later results would be out of place


def observed(run: Run, messages: Sequence[Msg]) -> None:
    """Add messages heard from elsewhere (`AgentBase.observe`) without breaking the session's open turn.

    They are inert history (their tool calls closed as not run). While calls wait for an answer they
    are held back with the pending calls and join the history once the turn is complete; a turn a
    dead run left open is closed first (its recorded results kept, the rest interrupted: nothing runs).
    """
    check_input(messages)
    msgs = inert_input(messages)
    pending = run.state.pending
    if pending is not None and pending.calls:
        run.set_field("pending", dataclasses.replace(pending, notes=(*pending.notes, *msgs)))
        return
    close_turn(run, DANGLING_RESULT)
    run.add_messages(*msgs)


def inert_input(messages: Sequence[Msg]) -> list[Msg]:
    """The input (checked by `check_input`) with each tool call that has no result closed as "not run".

    Callers may seed a history (the OpenAI facade does); their tool calls are history, never work:
    closing them keeps the transcript valid for providers and leaves nothing for crash repair to run.
    A user message holding results and other content is split: the results first, in their own message.
    """
    out: list[Msg] = []
    missing: dict[str, ToolUseBlock] = {}
    for msg in messages:
        if msg.role == "assistant":
            _close(out, missing)
            out.append(msg)
            missing = {c.id: c for c in msg.tool_calls}
            continue
        results = [b for b in msg.content if isinstance(b, ToolResultBlock)]
        rest = [b for b in msg.content if not isinstance(b, ToolResultBlock)]
        if results:
            for block in results:
                missing.pop(block.id, None)
            out.append(msg if not rest else msg.replace(content=results, id=new_id()))
        if rest or not results:
            _close(out, missing)
            out.append(msg if not results else msg.replace(content=rest))  # the sender's id stays on their words
    _close(out, missing)
    return out


def _close(out: list[Msg], missing: dict[str, ToolUseBlock]) -> None:
    """Close the calls of the last seeded turn that got no result (they never run)."""
    if missing:
        closing = [
            ToolResultBlock(id=c.id, name=c.name, output=NOT_RUN_RESULT, state="error") for c in missing.values()
        ]
        out.append(Msg(role="user", content=list(closing)))
        missing.clear()


def unique_call_ids(reply: Msg, taken: Collection[str] = ()) -> Msg:
    """The reply with its tool-call ids made distinct from each other and from `taken`.

    Some models and proxies repeat an id within one turn, and some servers number calls afresh in
    every reply: each call must get its own result, and an approval (or a stale one sent again) must
    name one call only, so a repeated id is renamed ``<id>_<n>``. The model's id is kept in the
    block's metadata (``provider_id``). `taken`: the ids of the calls already in the session.
    """
    calls = reply.tool_calls
    if not calls:
        return reply
    ids = [c.id for c in calls]
    if len(set(ids)) == len(ids) and not any(i in taken for i in ids):
        return reply
    seen: set[str] = {*ids, *taken}
    used: set[str] = set(taken)
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
