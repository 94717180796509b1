"""Acting under permissions, pausing for the user or the caller, and resuming from the answer.

A turn's tool calls are sorted by the permission engine: denied calls get a denied result,
allowed calls run, calls that need approval and external calls wait. While something waits,
`AgentState.pending` holds the waiting calls (JSON, so another process sharing the store can
resume), the call returns a pause reply, and the next call on the session must answer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentrt import events as ev
from agentrt.agent._run import Run
from agentrt.errors import ToolSuspended, UserError
from agentrt.message import (
    META_CONFIRM_RESULTS,
    META_GENERATE_REASON,
    ContentBlock,
    GenerateReason,
    Msg,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from agentrt.permission import ConfirmResult, Decision, PermissionContext, PermissionEngine, PermissionRule
from agentrt.tool._execution import META_SUSPENDED, ToolExecutor, error_result, to_result

if TYPE_CHECKING:
    from agentrt.agent.react import ReActAgent

__all__ = ["META_PENDING", "act", "resume"]

CONFIRM = "confirm"
EXTERNAL = "external"
SUBAGENT = "subagent"
META_PENDING = "pending_tool_calls"
Runner = Callable[[ToolUseBlock], Awaitable[ToolResultBlock]]
OnResult = Callable[[ToolResultBlock, float], Awaitable[None]] | None


def _engine(agent: ReActAgent, run: Run) -> PermissionEngine:
    return PermissionEngine(PermissionContext.coerce(agent.permission), run.state.rules)


def _needs_engine(engine: PermissionEngine, tool: Any) -> bool:
    return not (
        engine.trivial and not tool.destructive and not tool.requires_confirmation and tool.check_permission is None
    )


def _entry(call: ToolUseBlock, kind: str, reason: str = "", rules: Sequence[PermissionRule] = ()) -> dict[str, Any]:
    return {
        "id": call.id,
        "name": call.name,
        "input": dict(call.input),
        "kind": kind,
        "reason": reason,
        "suggested_rules": [r.to_dict() for r in rules],
    }


def _suspended(result: ToolResultBlock) -> Mapping[str, Any] | None:
    meta = result.metadata
    if meta and META_SUSPENDED in meta:
        value: Mapping[str, Any] = meta[META_SUSPENDED]
        return value
    return None


def _subagent_entry(call: ToolUseBlock, payload: Mapping[str, Any]) -> dict[str, Any]:
    entry = _entry(call, SUBAGENT)
    entry["children"] = list(payload["pending"])
    entry["state"] = payload.get("state")
    return entry


def _denied(call: ToolUseBlock, text: str) -> ToolResultBlock:
    return ToolResultBlock(id=call.id, name=call.name, output=text, state="denied")


# -- acting -------------------------------------------------------------------------------------------------
async def act(
    agent: ReActAgent,
    run: Run,
    reply: Msg,
    calls: list[ToolUseBlock],
    executor: ToolExecutor,
    runner: Runner,
    on_result: OnResult,
) -> Msg | None:
    """Run one turn's calls under the permission engine; a pause reply if some must wait."""
    engine = _engine(agent, run)
    done: dict[str, ToolResultBlock] = {}
    pending: list[dict[str, Any]] = []
    to_run: list[ToolUseBlock] = []
    for call in calls:
        tool = executor.lookup(call.name)
        if tool is None:
            to_run.append(call)
            continue
        if _needs_engine(engine, tool):
            verdict = engine.check(tool, call, run.ctx)
            if verdict.decision is Decision.DENY:
                done[call.id] = _denied(call, f"Permission denied: {verdict.reason}.")
                if on_result is not None:
                    await on_result(done[call.id], 0.0)
                continue
            if verdict.decision is Decision.ASK:
                pending.append(_entry(call, CONFIRM, verdict.reason, verdict.suggested_rules))
                continue
        if tool.external:
            pending.append(_entry(call, EXTERNAL, "runs outside the agent"))
            continue
        to_run.append(call)
    if to_run:
        report = _skip_suspended(on_result)
        if len(to_run) > 1:
            report = _recording(run, reply.id, report)
        for result in await executor.execute_all(to_run, runner, report):
            payload = _suspended(result)
            if payload is not None:
                call = next(c for c in to_run if c.id == result.id)
                pending.append(_subagent_entry(call, payload))
            else:
                done[result.id] = result
    ordered = [done[c.id] for c in calls if c.id in done]
    return await _settle(agent, run, ordered, pending, reply.content)


def _recording(run: Run, assistant_id: str, inner: OnResult) -> OnResult:
    """Checkpoint each result of a parallel batch as it lands, so a crash never re-runs a finished tool."""
    from agentrt.agent._loop import IN_FLIGHT

    async def record(result: ToolResultBlock, elapsed: float) -> None:
        if inner is not None:
            await inner(result, elapsed)
        if _suspended(result) is not None:
            return
        async with run.lock:
            tool_state = dict(run.state.tool_state)
            in_flight = dict(tool_state.get(IN_FLIGHT) or {"assistant_id": assistant_id, "results": []})
            in_flight["results"] = [*in_flight.get("results", ()), result.to_dict()]
            tool_state[IN_FLIGHT] = in_flight
            run.set_field("tool_state", tool_state)
            await run.checkpoint()

    return record


def _skip_suspended(on_result: OnResult) -> OnResult:
    if on_result is None:
        return None
    inner = on_result

    async def forward(result: ToolResultBlock, elapsed: float) -> None:
        if _suspended(result) is None:
            await inner(result, elapsed)

    return forward


async def _settle(
    agent: ReActAgent,
    run: Run,
    results: list[ToolResultBlock],
    pending: list[dict[str, Any]],
    step_content: Sequence[ContentBlock] | None,
) -> Msg | None:
    if results:
        run.add_messages(Msg(role="user", content=list(results)))
    if run.state.tool_state and "in_flight" in run.state.tool_state:
        run.set_field("tool_state", {k: v for k, v in run.state.tool_state.items() if k != "in_flight"})
    if pending:
        run.set_field("pending", {"reply_id": run.reply_id, "calls": pending})
        await run.checkpoint()
        return _pause(agent, run, pending, step_content)
    if run.state.pending is not None:
        run.set_field("pending", None)
    await run.checkpoint()
    return None


def _leaves(entries: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The calls the caller must answer: subagent entries are replaced by their children."""
    out: list[Mapping[str, Any]] = []
    for entry in entries:
        if entry.get("kind") == SUBAGENT:
            out.extend(_leaves(entry.get("children") or ()))
        else:
            out.append(entry)
    return out


def _pause(
    agent: ReActAgent, run: Run, pending: list[dict[str, Any]], step_content: Sequence[ContentBlock] | None
) -> Msg:
    leaves = _leaves(pending)
    confirm = [_pending_call(e) for e in leaves if e.get("kind") == CONFIRM]
    external = [_pending_call(e) for e in leaves if e.get("kind") == EXTERNAL]
    if confirm:
        run.event(ev.RequireUserConfirm, tool_calls=confirm)
    if external:
        run.event(ev.RequireExternalExecution, tool_calls=external)
    reason = GenerateReason.AWAITING_CONFIRMATION if confirm else GenerateReason.AWAITING_EXTERNAL_EXECUTION
    content: list[ContentBlock] = list(step_content) if step_content else [_as_call(e) for e in leaves]
    return Msg(
        role="assistant",
        content=content,
        name=agent.name,
        id=run.reply_id,
        usage=run.usage,
        metadata={META_GENERATE_REASON: reason.value, META_PENDING: [dict(e) for e in leaves]},
    )


def _pending_call(entry: Mapping[str, Any]) -> ev.PendingToolCall:
    return ev.PendingToolCall(
        id=entry["id"],
        name=entry["name"],
        input=entry.get("input") or {},
        suggested_rules=[PermissionRule.from_dict(r) for r in entry.get("suggested_rules") or ()],
        reason=entry.get("reason", ""),
    )


def _as_call(entry: Mapping[str, Any]) -> ToolUseBlock:
    return ToolUseBlock(id=entry["id"], name=entry["name"], input=entry.get("input") or {})


# -- resuming -----------------------------------------------------------------------------------------------
def _how_to(pending: Sequence[Mapping[str, Any]]) -> str:
    leaves = _leaves(pending)
    confirm = [f"{e['name']} ({e['id']})" for e in leaves if e.get("kind") == CONFIRM]
    external = [f"{e['name']} ({e['id']})" for e in leaves if e.get("kind") == EXTERNAL]
    parts = []
    if confirm:
        parts.append(
            f"approve or deny {', '.join(confirm)} with Msg.confirm([ConfirmResult(confirmed=..., tool_call=...)])"
        )
    if external:
        parts.append(f"send the results of {', '.join(external)} as ToolResultBlocks in a user Msg")
    return "; ".join(parts)


def _collect(
    inputs: Sequence[Msg], pending: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, ConfirmResult], dict[str, ToolResultBlock], list[Msg]]:
    confirms: dict[str, ConfirmResult] = {}
    externals: dict[str, ToolResultBlock] = {}
    notes: list[Msg] = []
    for msg in inputs:
        raw = msg.metadata.get(META_CONFIRM_RESULTS) if msg.metadata else None
        results = [b for b in msg.content if isinstance(b, ToolResultBlock)]
        other = [
            b
            for b in msg.content
            if not isinstance(b, (ToolResultBlock, TextBlock)) or (isinstance(b, TextBlock) and b.text.strip())
        ]
        if raw is None and not results:
            raise UserError(
                "this session has tool calls waiting for an answer, so a plain message cannot be accepted: "
                + _how_to(pending)
            )
        if raw is not None:
            if not isinstance(raw, (list, tuple)):
                raise UserError("Msg.metadata['confirm_results'] must be a list of ConfirmResult")
            for item in raw:
                result = ConfirmResult.coerce(item)
                if result.tool_call_id in confirms:
                    raise UserError(f"tool call {result.tool_call_id!r} is answered twice")
                confirms[result.tool_call_id] = result
        for block in results:
            if block.id in externals:
                raise UserError(f"tool call {block.id!r} has two results")
            externals[block.id] = block
        if other:
            notes.append(
                Msg(role="user", content=[b for b in msg.content if not isinstance(b, ToolResultBlock)], name=msg.name)
            )
    return confirms, externals, notes


def _validate(
    pending: Sequence[Mapping[str, Any]],
    confirms: Mapping[str, ConfirmResult],
    externals: Mapping[str, ToolResultBlock],
) -> None:
    kinds = {e["id"]: e.get("kind") for e in _leaves(pending)}
    for call_id in confirms:
        kind = kinds.get(call_id)
        if kind is None:
            raise UserError(
                f"tool call {call_id!r} is not waiting for approval in this session (stale or unknown id); "
                + _how_to(pending)
            )
        if kind != CONFIRM:
            raise UserError(f"tool call {call_id!r} waits for its result, not for approval; " + _how_to(pending))
    for call_id in externals:
        kind = kinds.get(call_id)
        if kind is None:
            raise UserError(
                f"tool call {call_id!r} is not waiting for a result in this session (stale or unknown id); "
                + _how_to(pending)
            )
        if kind != EXTERNAL:
            raise UserError(f"tool call {call_id!r} waits for approval, not for a result; " + _how_to(pending))


async def resume(
    agent: ReActAgent, run: Run, executor: ToolExecutor, runner: Runner, on_result: OnResult
) -> Msg | None:
    """Apply the caller's answers to the pending calls. Returns a pause reply if some still wait."""
    state_pending = run.state.pending or {}
    entries: list[Mapping[str, Any]] = list(state_pending.get("calls") or ())
    confirms, externals, notes = _collect(run.input, entries)
    _validate(entries, confirms, externals)
    # Rules accepted with the answers apply from now on (also to the calls being confirmed).
    accepted = [
        PermissionRule(tool=r.tool, decision=r.decision, args=r.args, source="session")
        for c in confirms.values()
        if c.confirmed
        for r in c.rules
    ]
    if accepted:
        run.set_field("rules", [*run.state.rules, *(r.to_dict() for r in accepted)])
    if externals:
        run.event(ev.ExternalExecutionResult, results=list(externals.values()))
    results: list[ToolResultBlock] = []
    still: list[dict[str, Any]] = []
    for entry in entries:
        call = _as_call(entry)
        kind = entry.get("kind")
        if kind == CONFIRM and call.id in confirms:
            answer = confirms[call.id]
            if not answer.confirmed:
                text = "The user denied this tool call." + (f" Reason: {answer.reason}" if answer.reason else "")
                result = _denied(call, text)
                if on_result is not None:
                    await on_result(result, 0.0)
            else:
                edited = answer.edited_input
                effective = ToolUseBlock(id=call.id, name=call.name, input=dict(edited)) if edited is not None else call
                tool = executor.lookup(call.name)
                if tool is not None and tool.external:
                    still.append(_entry(effective, EXTERNAL, "approved; runs outside the agent"))
                    continue
                [result] = await executor.execute_all([effective], runner, None)
                payload = _suspended(result)
                if payload is not None:
                    still.append(_subagent_entry(effective, payload))
                    continue
                if edited is not None and dict(edited) != dict(call.input) and isinstance(result.output, str):
                    from agentrt import _json

                    result = dataclasses.replace(
                        result,
                        output=f"(The user changed the arguments to {_json.dumps(dict(edited))}.)\n{result.output}",
                    )
                if on_result is not None:
                    await on_result(result, 0.0)
            results.append(result)
        elif kind == EXTERNAL and call.id in externals:
            given = externals[call.id]
            results.append(ToolResultBlock(id=call.id, name=call.name, output=given.output, state=given.state))
        elif kind == SUBAGENT:
            child_ids = {c["id"] for c in _leaves(entry.get("children") or ())}
            answers: list[Any] = [confirms[i] for i in child_ids if i in confirms]
            answers += [externals[i] for i in child_ids if i in externals]
            if not answers:
                still.append(dict(entry))
                continue
            result = await _resume_subagent(executor, call, entry, answers, run)
            payload = _suspended(result)
            if payload is not None:
                still.append(_subagent_entry(call, payload))
                continue
            if on_result is not None:
                await on_result(result, 0.0)
            results.append(result)
        else:
            still.append(dict(entry))
    paused = await _settle(agent, run, results, still, None)
    if notes:  # text sent along with the answers joins the history after the results
        run.add_messages(*notes)
        await run.checkpoint()
    return paused


async def _resume_subagent(
    executor: ToolExecutor, call: ToolUseBlock, entry: Mapping[str, Any], answers: list[Any], run: Run
) -> ToolResultBlock:
    tool = executor.lookup(call.name)
    resume_fn = getattr(tool, "resume", None) if tool is not None else None
    if resume_fn is None:
        return error_result(call, f"Tool {call.name!r} can no longer be resumed (it was removed or changed).")
    try:
        value = await resume_fn(entry.get("state"), answers, run.ctx)
    except ToolSuspended as exc:
        return ToolResultBlock(
            id=call.id,
            name=call.name,
            output="(waiting for the caller)",
            metadata={META_SUSPENDED: {"pending": exc.pending, "state": exc.state}},
        )
    except UserError:
        raise
    except Exception as exc:
        return error_result(call, f"Tool {call.name!r} failed: {type(exc).__name__}: {exc}")
    return to_result(call, value)
