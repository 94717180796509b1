"""Acting under permissions, pausing for the user or the caller, and resuming from the answer.

A turn's tool calls are sorted by the permission engine: denied calls get a denied result,
allowed calls run, calls that need approval and external calls wait. While something waits,
`AgentState.pending` holds the waiting calls (a `Pending`, stored as JSON, so another process
sharing the store can resume), the call returns a pause reply, and the next call on the session
must answer.

An approval is spent exactly once: the checkpoint that removes a call from `pending` is the one
that records it as started (in flight), so an interrupt, a closed stream or a crash while it runs
ends it as interrupted, and the same approval sent again gets `NotPendingError`. Edited arguments
are validated and decided again by the permission engine (a deny rule wins over the human).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentrt import events as ev
from agentrt.agent import _plan, _turns
from agentrt.agent._run import Run
from agentrt.agent.usage import check_tool_calls, record_tool_calls, snapshot
from agentrt.errors import (
    AgentrtError,
    InvalidAnswerError,
    NotPendingError,
    StateConflictError,
    ToolSuspended,
    UserError,
)
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
from agentrt.permission import (
    ConfirmResult,
    Decision,
    PermissionContext,
    PermissionEngine,
    PermissionRule,
    check_answer_rule,
)
from agentrt.state.pending import CONFIRM, EXTERNAL, META_PENDING, SUBAGENT, Pending, PendingCall, flatten_pending
from agentrt.tool._execution import META_SUSPENDED, ToolExecutor, error_result, suspended_result, to_result

if TYPE_CHECKING:
    from agentrt.agent.react import ReActAgent

__all__ = ["META_PENDING", "act", "engine_for", "recover", "resume"]

Runner = Callable[[ToolUseBlock], Awaitable[ToolResultBlock]]
OnResult = Callable[[ToolResultBlock, float], Awaitable[None]] | None


def engine_for(agent: ReActAgent, run: Run, extra_rules: Sequence[PermissionRule] = ()) -> PermissionEngine:
    """The permission engine of `agent` with the session's accepted rules (and `extra_rules`).

    Its context is the agent's, in ``PLAN`` mode while the session (or a call it runs inside) is in plan mode.
    """
    return PermissionEngine(_plan.permission_context(agent, run), [*run.state.rules, *extra_rules])


_engine = engine_for


def _needs_engine(engine: PermissionEngine, tool: Any) -> bool:
    return not (
        engine.trivial and not tool.destructive and not tool.requires_confirmation and tool.check_permission is None
    )


def _entry(call: ToolUseBlock, kind: str, reason: str = "", rules: Sequence[PermissionRule] = ()) -> PendingCall:
    return PendingCall(
        id=call.id,
        name=call.name,
        input=dict(call.input),
        kind=kind,
        reason=reason,
        suggested_rules=tuple(r.to_dict() for r in rules),
    )


def _suspended(result: ToolResultBlock) -> Mapping[str, Any] | None:
    meta = result.metadata
    if meta and META_SUSPENDED in meta:
        value: Mapping[str, Any] = meta[META_SUSPENDED]
        return value
    return None


def _subagent_entry(call: ToolUseBlock, payload: Mapping[str, Any]) -> PendingCall:
    return PendingCall(
        id=call.id,
        name=call.name,
        input=dict(call.input),
        kind=SUBAGENT,
        children=tuple(PendingCall.from_dict(c) for c in payload["pending"]),
        state=payload.get("state"),
    )


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
    runner = _plan.watch(run, executor, runner)
    done: dict[str, ToolResultBlock] = {}
    pending: list[PendingCall] = []
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
        check_tool_calls(run, len(to_run))  # a batch past the limit never starts
        record_tool_calls(run, len(to_run))
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
    return await _settle(agent, run, ordered, pending, reply.content, reply.id)


def _recording(run: Run, assistant_id: str, inner: OnResult) -> OnResult:
    """Checkpoint each result of a parallel batch as it lands, so a crash never re-runs a finished tool."""

    async def record(result: ToolResultBlock, elapsed: float) -> None:
        if inner is not None:
            await inner(result, elapsed)
        if _suspended(result) is not None:
            return
        async with run.lock:
            record = _turns.in_flight(run) or {}
            results = list(_turns.recorded_results(run, assistant_id).values())
            _turns.set_in_flight(run, assistant_id, list(record.get("calls") or ()), [*results, result])
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
    pending: list[PendingCall],
    step_content: Sequence[ContentBlock] | None,
    assistant_id: str,
    notes: Sequence[Msg] = (),
    *,
    answering: bool = False,
) -> Msg | None:
    """Record a turn's results; keep what still waits (with `notes` held back until the turn is complete).

    `answering`: the results answer pending calls, so the write is never merged over another writer's
    (see `_checkpoint_answers`).
    """
    if results:
        run.add_messages(Msg(role="user", content=list(results)))
    _turns.without_in_flight(run)
    if pending:
        entry = Pending(reply_id=run.reply_id, assistant_id=assistant_id, calls=tuple(pending), notes=tuple(notes))
        run.set_field("pending", entry)
        await (_checkpoint_answers(run, results) if answering else run.checkpoint())
        return _pause(agent, run, pending, step_content)
    if run.state.pending is not None:
        run.set_field("pending", None)
    if notes:  # text sent along with the answers joins the history after the turn's results
        run.add_messages(*notes)
    await (_checkpoint_answers(run, results) if answering else run.checkpoint())
    return None


async def _checkpoint_answers(run: Run, results: Sequence[ToolResultBlock]) -> None:
    """Store the results of answered calls and what still waits, only on the revision this call read.

    Merging after another writer (a process sharing a store without distributed locks) would put
    this call's stale `pending` back over theirs, so a call answered there could be approved and run
    again, and give a call two results. Refused instead: the session keeps the other writer's word.
    """
    try:
        await run.checkpoint(merge=False)
    except StateConflictError:
        ids = ", ".join(repr(r.id) for r in results) or "none"
        raise StateConflictError(
            f"session {run.session_id!r} was changed by another writer while its answered tool calls ran; their "
            f"results ({ids}) were not stored, and none of them runs again (the session records them as "
            "interrupted)"
        ) from None


def _pause(agent: ReActAgent, run: Run, pending: list[PendingCall], step_content: Sequence[ContentBlock] | None) -> Msg:
    leaves = flatten_pending(pending)
    confirm = [_pending_call(e) for e in leaves if e.kind == CONFIRM]
    external = [_pending_call(e) for e in leaves if e.kind == EXTERNAL]
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
        metadata={
            META_GENERATE_REASON: reason.value,
            META_PENDING: [e.to_dict() for e in leaves],
            "usage": snapshot(run).to_dict(),
        },
    )


def _pending_call(entry: PendingCall) -> ev.PendingToolCall:
    return ev.PendingToolCall(
        id=entry.id,
        name=entry.name,
        input=entry.input,
        suggested_rules=[PermissionRule.from_dict(r) for r in entry.suggested_rules],
        reason=entry.reason,
    )


def _as_call(entry: PendingCall) -> ToolUseBlock:
    return ToolUseBlock(id=entry.id, name=entry.name, input=dict(entry.input))


# -- resuming -----------------------------------------------------------------------------------------------
def _how_to(pending: Sequence[PendingCall]) -> str:
    leaves = flatten_pending(pending)
    confirm = [f"{e.name} ({e.id})" for e in leaves if e.kind == CONFIRM]
    external = [f"{e.name} ({e.id})" for e in leaves if e.kind == EXTERNAL]
    parts = []
    if confirm:
        parts.append(
            f"approve or deny {', '.join(confirm)} with Msg.confirm([ConfirmResult(confirmed=..., tool_call=...)])"
        )
    if external:
        parts.append(f"send the results of {', '.join(external)} with Msg.tool_results([ToolResultBlock(...)])")
    return "; ".join(parts)


def _collect(
    inputs: Sequence[Msg], pending: Sequence[PendingCall]
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
    pending: Sequence[PendingCall],
    confirms: Mapping[str, ConfirmResult],
    externals: Mapping[str, ToolResultBlock],
) -> None:
    kinds = {e.id: e.kind for e in flatten_pending(pending)}
    stale = [i for i in [*confirms, *externals] if i not in kinds]
    if stale:
        raise NotPendingError(
            f"tool call(s) {', '.join(repr(i) for i in stale)} do not wait for an answer in this session (stale or "
            "unknown id: already answered, ended as interrupted, or never asked); "
            + (_how_to(pending) or "nothing waits"),
            stale,
        )
    for call_id in confirms:
        if kinds[call_id] != CONFIRM:
            raise UserError(f"tool call {call_id!r} waits for its result, not for approval; " + _how_to(pending))
    for call_id in externals:
        if kinds[call_id] != EXTERNAL:
            raise UserError(f"tool call {call_id!r} waits for approval, not for a result; " + _how_to(pending))


def _accepted_rules(
    agent: ReActAgent,
    executor: ToolExecutor,
    entries: Sequence[PendingCall],
    confirms: Mapping[str, ConfirmResult],
) -> list[PermissionRule]:
    """The rules sent with approvals, vetted: an answer may narrow what runs, never widen it past the call."""
    mode = PermissionContext.coerce(agent.permission).mode
    names = {e.id: e.name for e in flatten_pending(entries)}
    accepted: list[PermissionRule] = []
    for answer in confirms.values():
        if not answer.confirmed or not answer.rules:
            continue
        tool = executor.lookup(names.get(answer.tool_call_id, ""))
        for raw in answer.rules:
            rule = PermissionRule.coerce(raw)
            refusal = check_answer_rule(rule, tool=tool, mode=mode)
            if refusal is not None:
                raise UserError(f"the rule sent with the approval of {answer.tool_call_id!r} is refused: {refusal}")
            accepted.append(PermissionRule(tool=rule.tool, decision=rule.decision, args=rule.args, source="session"))
    return accepted


def _check_edit(tool: Any, entry: PendingCall, answer: ConfirmResult) -> ToolUseBlock:
    """The call as the user edited it, refused (spending nothing) unless it is valid for the tool as sent.

    The edit is checked strictly against the schema the model sees (no unknown keys, no type
    coercion such as ``"3"`` or ``true`` for an integer), then by the tool's own validation, so the
    permission engine decides on exactly the values the tool will get.
    """
    edited = answer.tool_call
    assert isinstance(edited, ToolUseBlock)
    if edited.name and edited.name != entry.name:
        raise _bad_edit(entry, f"it names tool {edited.name!r}; an approval can change the arguments, not the tool")
    call = ToolUseBlock(id=entry.id, name=entry.name, input=dict(edited.input))
    if tool is None or call.input == dict(entry.input):
        return call  # not an edit: the call runs as the model asked (the executor reports bad arguments)
    unknown = _unknown_keys(tool.parameters, call.input)
    if unknown:
        raise _bad_edit(entry, f"unknown argument(s) {', '.join(repr(k) for k in unknown)}")
    import jsonschema

    try:
        jsonschema.validate(dict(call.input), tool.parameters)
        schema = getattr(tool, "_schema", None)
        if schema is not None:
            schema.validate(dict(call.input))
    except Exception as exc:
        raise _bad_edit(entry, getattr(exc, "message", None) or str(exc)) from None
    return call


def _unknown_keys(parameters: Mapping[str, Any], args: Mapping[str, Any]) -> list[str]:
    """Argument names the schema does not declare, unless it admits others explicitly.

    JSON Schema allows undeclared keys by default, and many schemas (MCP servers') leave that
    unsaid; an edit must not smuggle in an argument the model could not have sent as declared.
    """
    declared = parameters.get("properties")
    if not isinstance(declared, Mapping) or parameters.get("additionalProperties") or "patternProperties" in parameters:
        return []
    return sorted(k for k in args if k not in declared)


def _bad_edit(entry: PendingCall, detail: str) -> InvalidAnswerError:
    return InvalidAnswerError(
        f"the edited arguments of tool call {entry.id!r} ({entry.name}) are refused: {detail}",
        question_id=entry.id,
        problems=[{"field": "input", "message": detail}],
    )


_RUN, _DENY, _ASK = "run", "deny", "ask"
_Plan = tuple[str, ToolUseBlock, str]  # (action, the call as it would run, the reason to deny or ask)


def _decide(
    engine: PermissionEngine,
    executor: ToolExecutor,
    run: Run,
    entry: PendingCall,
    answer: ConfirmResult,
) -> _Plan:
    """What to do with an approved call: run it, deny it, or ask again (its arguments changed the question)."""
    call = _as_call(entry)
    tool = executor.lookup(call.name)
    effective = call if answer.edited_input is None else _check_edit(tool, entry, answer)
    if tool is None:
        return _RUN, effective, ""  # the executor reports the unknown tool to the model
    verdict = engine.check(tool, effective, run.ctx)
    if verdict.decision is Decision.DENY:
        return _DENY, effective, verdict.reason
    if (
        verdict.decision is Decision.ASK
        and dict(effective.input) != dict(call.input)
        and verdict.reason != entry.reason
    ):
        # The human approved another question than the one this call now raises.
        return _ASK, effective, verdict.reason
    return _RUN, effective, ""


async def resume(
    agent: ReActAgent, run: Run, executor: ToolExecutor, runner: Runner, on_result: OnResult
) -> Msg | None:
    """Apply the caller's answers to the pending calls. Returns a pause reply if some still wait."""
    state_pending = run.state.pending or Pending()
    runner = _plan.watch(run, executor, runner)
    entries = list(state_pending.calls)
    assistant_id = state_pending.assistant_id or _last_assistant_id(run)
    answers = _read_answers(agent, run, executor, entries)
    _record_answers(agent, run, state_pending, answers)
    held = list(state_pending.notes)
    results = await _dead_run_results(agent, run, executor, assistant_id)
    turn = _Resumption(
        run=run,
        executor=executor,
        runner=runner,
        on_result=on_result,
        state_pending=state_pending,
        assistant_id=assistant_id,
        answers=answers,
        results=results,
        waiting=list(entries),
    )
    for entry in entries:
        await turn.answer(entry)
    return await _settle(
        agent, run, turn.results, turn.still, None, assistant_id, [*held, *answers.notes], answering=True
    )


@dataclasses.dataclass(slots=True)
class _Answers:
    """The caller's answers to the pending calls, checked and decided before anything changes."""

    confirms: dict[str, ConfirmResult]
    externals: dict[str, ToolResultBlock]
    notes: list[Msg]
    accepted: list[PermissionRule]
    engine: PermissionEngine
    plans: dict[str, _Plan]


def _read_answers(agent: ReActAgent, run: Run, executor: ToolExecutor, entries: Sequence[PendingCall]) -> _Answers:
    """Collect, validate and decide the answers; raises (spending nothing) when one cannot be accepted."""
    confirms, externals, notes = _collect(run.input, entries)
    _turns.check_input(notes)
    _validate(entries, confirms, externals)
    accepted = _accepted_rules(agent, executor, entries, confirms)
    engine = _engine(agent, run, accepted)
    # Decide every approved call before anything changes: a refused answer must spend nothing.
    plans = {
        e.id: _decide(engine, executor, run, e, confirms[e.id])
        for e in entries
        if e.kind == CONFIRM and e.id in confirms and confirms[e.id].confirmed
    }
    return _Answers(confirms, externals, notes, accepted, engine, plans)


def _record_answers(agent: ReActAgent, run: Run, state_pending: Pending, answers: _Answers) -> None:
    """Keep the rules the user accepted and announce the external results the caller sent."""
    if answers.accepted:
        run.set_field("rules", [*run.state.rules, *(r.to_dict() for r in answers.accepted)])
    if answers.externals and run.streaming:
        # The result belongs to the call that asked for it (AgentScope: the request's reply id).
        asked_by = state_pending.reply_id or run.reply_id
        run.emit(
            ev.ExternalExecutionResult(
                reply_id=asked_by,
                session_id=run.session_id,
                source=agent.name,
                results=list(answers.externals.values()),
            )
        )


@dataclasses.dataclass(slots=True)
class _Resumption:
    """The pending calls answered one by one, in order: the results so far and what still waits.

    `waiting` holds the calls not reached yet, so that each checkpoint spending an answer keeps them
    (with `still`) in `pending`.
    """

    run: Run
    executor: ToolExecutor
    runner: Runner
    on_result: OnResult
    state_pending: Pending
    assistant_id: str
    answers: _Answers
    results: list[ToolResultBlock]
    waiting: list[PendingCall]
    still: list[PendingCall] = dataclasses.field(default_factory=list)

    async def answer(self, entry: PendingCall) -> None:
        """Apply the answer given for `entry`, if any; it keeps waiting otherwise."""
        self.waiting.remove(entry)
        answers = self.answers
        if entry.kind == CONFIRM and entry.id in answers.confirms:
            await self._confirmed(entry, answers.confirms[entry.id])
        elif entry.kind == EXTERNAL and entry.id in answers.externals:
            given = answers.externals[entry.id]
            # The event of a returned external result belongs to the call that asked for it.
            self.results.append(ToolResultBlock(id=entry.id, name=entry.name, output=given.output, state=given.state))
        elif entry.kind == SUBAGENT:
            await self._subagent(entry)
        else:
            self.still.append(entry)

    async def _confirmed(self, entry: PendingCall, answer: ConfirmResult) -> None:
        """A call the user approved or denied: deny it, ask again, hand it out, or spend the approval and run it."""
        call = _as_call(entry)
        if not answer.confirmed:
            text = "The user denied this tool call." + (f" Reason: {answer.reason}" if answer.reason else "")
            await self._report(_denied(call, text))
            return
        action, effective, reason = self.answers.plans[call.id]
        if action == _DENY:
            edited_note = " for the edited arguments" if dict(effective.input) != dict(call.input) else ""
            await self._report(_denied(call, f"Permission denied{edited_note}: {reason}."))
            return
        tool = self.executor.lookup(call.name)
        if action == _ASK:
            check = self.answers.engine.check
            suggested = check(tool, effective, self.run.ctx).suggested_rules if tool is not None else []
            self.still.append(_entry(effective, CONFIRM, reason, suggested))
        elif tool is not None and tool.external:
            self.still.append(_entry(effective, EXTERNAL, "approved; runs outside the agent"))
        else:
            await self._run_approved(call, effective, answer.edited_input)

    async def _run_approved(
        self, call: ToolUseBlock, effective: ToolUseBlock, edited: Mapping[str, Any] | None
    ) -> None:
        """Spend the approval, then run the call (noting edited arguments in the result for the model)."""
        await self._spend(effective.id)
        record_tool_calls(self.run, 1)  # counted; a call a human approved is not stopped by the limit
        [result] = await self.executor.execute_all([effective], self.runner, None)
        payload = _suspended(result)
        if payload is not None:
            self.still.append(_subagent_entry(effective, payload))
            return
        if edited is not None and dict(edited) != dict(call.input) and isinstance(result.output, str):
            from agentrt import _json

            result = dataclasses.replace(
                result, output=f"(The user changed the arguments to {_json.dumps(dict(edited))}.)\n{result.output}"
            )
        await self._report(result)

    async def _subagent(self, entry: PendingCall) -> None:
        """A subagent's paused call: resume it with the answers meant for its own pending calls."""
        child_ids = {c.id for c in flatten_pending(entry.children)}
        confirms, externals = self.answers.confirms, self.answers.externals
        answers: list[Any] = [confirms[i] for i in child_ids if i in confirms]
        answers += [externals[i] for i in child_ids if i in externals]
        if not answers:
            self.still.append(entry)
            return
        call = _as_call(entry)
        await self._spend(call.id)
        result = await _resume_subagent(self.executor, call, entry, answers, self.run)
        payload = _suspended(result)
        if payload is not None:
            self.still.append(_subagent_entry(call, payload))
            return
        await self._report(result)

    async def _spend(self, call_id: str) -> None:
        """Spend the answer: this checkpoint takes the call out of `pending` and records it started.

        It is written only on the revision this call read: another writer (a process sharing a store
        without distributed locks) may have spent the same approval meanwhile, so a conflict is never
        merged; the call is not run and the caller learns why.
        """
        _consume(self.run, self.state_pending, self.assistant_id, [*self.still, *self.waiting], [call_id], self.results)
        try:
            await self.run.checkpoint(merge=False)
        except StateConflictError:
            raise await _spend_refused(self.run, call_id) from None

    async def _report(self, result: ToolResultBlock) -> None:
        if self.on_result is not None:
            await self.on_result(result, 0.0)
        self.results.append(result)


def _consume(
    run: Run,
    state_pending: Pending,
    assistant_id: str,
    remaining: Sequence[PendingCall],
    started: Sequence[str],
    results: Sequence[ToolResultBlock],
) -> None:
    """Stage the checkpoint that spends approvals: `started` leave `pending` and are recorded in flight."""
    run.set_field("pending", dataclasses.replace(state_pending, assistant_id=assistant_id, calls=tuple(remaining)))
    _turns.set_in_flight(run, assistant_id, started, results, approved=True)


async def _spend_refused(run: Run, call_id: str) -> AgentrtError:
    """Why an approval could not be spent: the stored session changed since this call read it."""
    stored = await run.store.load(run.user_id, run.session_id, agent=run.agent_key)
    waiting = {e.id for e in flatten_pending(stored.pending if stored is not None else None)}
    if call_id not in waiting:
        return NotPendingError(
            f"tool call {call_id!r} no longer waits for an answer: another call on this session answered it "
            "meanwhile (it was not run again)",
            [call_id],
        )
    return StateConflictError(
        f"session {run.session_id!r} changed while the answer to tool call {call_id!r} was applied; it was not "
        "run: send the answer again"
    )


def _last_assistant_id(run: Run) -> str:
    msg = next((m for m in reversed(run.state.messages) if m.role == "assistant"), None)
    return msg.id if msg is not None else ""


async def _dead_run_results(
    agent: ReActAgent, run: Run, executor: ToolExecutor, assistant_id: str
) -> list[ToolResultBlock]:
    """Results for calls a dead run (crash, kill) had started while answering this turn."""
    if _turns.in_flight(run) is None:
        return []
    turn = _turns.open_turn(run.state.messages)
    if turn is None:
        _turns.without_in_flight(run)
        return []
    recorded = _turns.recorded_results(run, assistant_id)
    started = _turns.trusted_calls(run, assistant_id)
    return await recover(
        agent, run, executor, assistant_id, [c for c in turn[1] if c.id in recorded or c.id in started]
    )


async def recover(
    agent: ReActAgent, run: Run, executor: ToolExecutor, assistant_id: str, calls: Sequence[ToolUseBlock]
) -> list[ToolResultBlock]:
    """Results for `calls` of a turn a dead run left open, and the in-flight record dropped.

    What the dead run recorded is kept (a completed tool never runs twice). A call runs again only
    if the loop recorded it as made by this session's model, it was not started on a human's
    approval (a spent approval never runs a call twice, and its arguments may have been edited),
    its tool is idempotent and the permission engine allows it outright; the rest end as
    interrupted. Calls that came with a caller's input never run.
    """
    recorded = _turns.recorded_results(run, assistant_id)
    trusted = _turns.trusted_calls(run, assistant_id, calls) - _turns.approved_calls(run, assistant_id)
    _turns.without_in_flight(run)
    engine = engine_for(agent, run)
    out: list[ToolResultBlock] = []
    for call in calls:
        if call.id in recorded:
            out.append(recorded[call.id])
            continue
        tool = executor.lookup(call.name) if call.id in trusted else None
        if (
            tool is not None
            and tool.idempotent
            and not tool.external
            and engine.check(tool, call, run.ctx).decision is Decision.ALLOW
        ):
            out.append(await executor.execute(call))
        else:
            out.append(ToolResultBlock(id=call.id, name=call.name, output=_turns.DANGLING_RESULT, state="interrupted"))
    return out


async def _resume_subagent(
    executor: ToolExecutor, call: ToolUseBlock, entry: PendingCall, answers: list[Any], run: Run
) -> ToolResultBlock:
    tool = executor.lookup(call.name)
    resume_fn = getattr(tool, "resume", None) if tool is not None else None
    if resume_fn is None:
        return error_result(call, f"Tool {call.name!r} can no longer be resumed (it was removed or changed).")
    try:
        value = await resume_fn(entry.state, answers, run.ctx)
    except ToolSuspended as exc:
        return suspended_result(call, exc)
    except UserError:
        raise
    except Exception as exc:
        return error_result(call, f"Tool {call.name!r} failed: {type(exc).__name__}: {exc}")
    return to_result(call, value)
