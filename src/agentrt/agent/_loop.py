"""The ReAct loop mechanics: prompt, model call, tool calls, checkpoints, interrupts."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentrt import _json
from agentrt import events as ev
from agentrt.agent import _hitl, _knowledge, _questions, _turns
from agentrt.agent._output import GENERATE_RESPONSE, OutputSpec, StructuredOutputError, output_spec
from agentrt.agent._run import Run
from agentrt.agent._session_tools import task_reminder
from agentrt.agent.usage import (
    RunMeter,
    check_after_request,
    check_before_request,
    record_spend,
    record_tokens,
    reserve_request,
    snapshot,
)
from agentrt.errors import (
    ContextWindowExceededError,
    InvalidValueError,
    ModelBehaviorError,
    NotPendingError,
    UsageLimitExceeded,
)
from agentrt.message import (
    META_CONFIRM_RESULTS,
    META_GENERATE_REASON,
    META_STRUCTURED,
    GenerateReason,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from agentrt.model._accumulate import ReplyAccumulator
from agentrt.model.base import ChatModel, GenerateOptions, ModelRequest, ToolSchema
from agentrt.model.pricing import cost_of, price_known
from agentrt.tool._execution import ToolExecutor

if TYPE_CHECKING:
    from agentrt.agent.react import ReActAgent
    from agentrt.memory.compression import Compression, ContextCompressor, Mode

__all__ = ["Chains", "compress_run", "run_call"]

logger = logging.getLogger("agentrt.agent")

NUDGE = "Your last reply was empty. Continue the task: either call one of the available tools or answer the user."
MAX_ITERS_PROMPT = (
    "You have used all {n} reasoning steps allowed for this request. Do not call any tool. Answer now with the "
    "best result you can give from what you have so far, and say briefly what remains undone."
)
_NONE_CHOICE = GenerateOptions(tool_choice="none")
_CALL_GENERATE = (
    f"Give your final answer by calling the {GENERATE_RESPONSE} tool with arguments matching its schema; "
    "do not answer in plain text."
)
_FIX_JSON = "Your reply did not match the required JSON Schema: {errors}. Reply again with only the corrected JSON."


@dataclass(slots=True)
class Chains:
    """Middlewares that override each hook, resolved once per agent."""

    call: tuple[Any, ...]
    reasoning: tuple[Any, ...]
    model_call: tuple[Any, ...]
    acting: tuple[Any, ...]
    system_prompt: tuple[Any, ...]


def _chains(agent: ReActAgent) -> Chains:
    chains = agent._chains
    if chains is None:
        mws = agent.middlewares
        chains = agent._chains = Chains(
            call=tuple(m for m in mws if m.overrides("on_call")),
            reasoning=tuple(m for m in mws if m.overrides("on_reasoning")),
            model_call=tuple(m for m in mws if m.overrides("on_model_call")),
            acting=tuple(m for m in mws if m.overrides("on_acting")),
            system_prompt=tuple(m for m in mws if m.overrides("on_system_prompt")),
        )
    return chains


class _Interrupt(Exception):  # noqa: N818 - internal control flow
    """Raised inside the loop when the interrupt flag is seen between awaits."""


class _Listener:
    """Turns accumulator progress into stream events with call-unique block ids."""

    __slots__ = ("ids", "run")

    def __init__(self, run: Run) -> None:
        self.run = run
        self.ids: dict[int, str] = {}

    def _id(self, index: int) -> str:
        block_id = self.ids.get(index)
        if block_id is None:
            block_id = self.ids[index] = self.run.new_block_id()
        return block_id

    def on_text(self, index: int, delta: str) -> None:
        self.run.event(ev.TextDelta, block_id=self._id(index), delta=delta)

    def on_thinking(self, index: int, delta: str, signature: str | None) -> None:
        self.run.event(ev.ThinkingDelta, block_id=self._id(index), delta=delta, signature=signature)

    def on_tool_call(self, index: int, call_id: str, name: str) -> None:
        self.run.event(ev.ToolCallStarted, block_id=self._id(index), tool_call_id=call_id, name=name)

    def on_tool_delta(self, index: int, call_id: str, delta: str) -> None:
        self.run.event(ev.ToolCallDelta, block_id=self._id(index), tool_call_id=call_id, delta=delta)

    def on_restart(self, reason: str) -> None:
        self.ids.clear()
        self.run.event(ev.ModelRestarted, step=self.run.step, reason=reason)


# --------------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------------
def run_call(agent: ReActAgent, run: Run) -> Awaitable[Msg]:
    """One agent call: middleware `on_call` chain around the loop.

    Returns the awaitable rather than awaiting it: every coroutine frame of the await chain stays
    alive (and GC-tracked) for the whole call, so the chain holds no frame that only forwards.
    """
    chains = _chains(agent)
    if not chains.call:
        return _call_core(agent, run)
    core: Callable[[], Awaitable[Msg]] = functools.partial(_call_core, agent, run)
    for mw in reversed(chains.call):
        core = functools.partial(mw.on_call, run, core)
    return core()


async def _call_core(agent: ReActAgent, run: Run) -> Msg:
    """The call: store the input, then reason and act until an answer or a pause.

    The loop runs in this frame rather than in a coroutine of its own: a call in flight holds one
    GC-tracked frame per level of its await chain for as long as it waits for the model.
    """
    try:
        system, paused = await _begin(agent, run)
        if paused is not None:
            return paused
        nudged = False
        extra: Sequence[Msg] = ()
        spec: OutputSpec | None = run.output
        failures = 0
        while True:
            if run.step >= agent.max_iters:
                return await _wrap_up(agent, run, system)
            if run.interrupt_requested:
                raise _Interrupt
            check_before_request(run)
            run.step += 1
            reply = _spent(run, _distinct_calls(run, await _reasoning(agent, run, system, extra, None)))
            extra = ()
            if spec is not None and (not _calls_tools(reply) or spec.mode == "tool") and not _is_empty(reply):
                outcome = await _structured(agent, run, spec, reply, reply.tool_calls)
                if isinstance(outcome, Msg):
                    return outcome
                if outcome is not None:
                    failures = _output_failed(agent, failures + 1, outcome)
                    continue
            if not _calls_tools(reply):
                if not _is_empty(reply):
                    return await _answer(run, reply)
                extra = _nudge(agent, nudged)
                nudged = True
                continue
            paused = await _act(agent, run, reply)
            if paused is not None:
                return paused
    except UsageLimitExceeded as exc:
        # Nothing is lost: what the call did is saved, calls it did not run are closed, then the caller hears.
        await asyncio.shield(_save_on_limit(run, exc))
        raise
    except (asyncio.CancelledError, _Interrupt):
        # Also covers an interrupt that lands while the state is still loading.
        if not run.interrupt_requested:
            # Cancelled from outside (a closed stream, a timeout): save what we have, then stop.
            await asyncio.shield(_save_on_cancel(run))
            raise
        return await _finish_interrupted(agent, run)


_QUIET = GenerateOptions(incremental=False)


_quiet_cache: dict[int, tuple[GenerateOptions, GenerateOptions]] = {}


def _quiet_options(options: GenerateOptions) -> GenerateOptions:
    """`options` for a call nobody streams: models in automatic mode may answer it whole (cheaper).

    Made once per options object (an agent's options live as long as the agent), not once per call.
    """
    if options.incremental is not None:
        return options
    hit = _quiet_cache.get(id(options))
    if hit is not None and hit[0] is options:  # the entry holds `options`, so its id cannot be reused
        return hit[1]
    quiet = options.merge(_QUIET)
    if len(_quiet_cache) >= 64:
        _quiet_cache.clear()
    _quiet_cache[id(options)] = (options, quiet)
    return quiet


async def _begin(agent: ReActAgent, run: Run) -> tuple[Msg | None, Msg | None]:
    """Load the session and store the input: ``(system message, pause reply of a resume that paused again)``.

    Awaited to its end before the loop starts, so its frame is not part of the loop's await chain.
    """
    run.options = agent.options if run.streaming else _quiet_options(agent.options)
    _check_cost_limit(agent, run)
    spec = None
    if run.output is not None:  # resolved before anything is saved: a bad output= changes nothing
        spec = run.output = output_spec(run.output, agent.model, agent.output_mode)
        if spec.mode == "native":
            run.options = run.options.merge(GenerateOptions(response_format=spec.response_format()))
    await run.load(context=True)  # the summarised messages stay unread (see Run.load)
    if agent._knowledge is not None:
        run.knowledge = _knowledge.TurnKnowledge()
    resuming = run.state.pending is not None and bool(run.state.pending.calls)
    if not resuming:
        _refuse_stray_answers(run)
        _turns.check_input(run.input)
        await _repair_dangling(agent, run)
        _add_input(run)
        await run.checkpoint()
    system = await _full_system_message(agent, run, spec)
    if run.interrupt_requested:
        raise _Interrupt
    if resuming:
        executor = _executor(agent, run)
        return system, await _hitl.resume(agent, run, executor, _runner(agent, run, executor), _on_result(run))
    return system, None


def _executor(agent: ReActAgent, run: Run) -> ToolExecutor:
    """The call's tool executor, made when the call first needs it (a call that runs no tool makes none).

    It takes its snapshot of the tools and the session's active groups then; group changes made
    before (`_apply_groups`) are in the state it reads.
    """
    executor: ToolExecutor | None = run.executor
    if executor is not None:
        return executor
    tools = agent.toolkit.tools
    if agent._session_tools:
        tools = {**tools, **agent._session_tools}
    tools = agent._skills.tools(tools)  # + load_skill when the agent has skills
    groups = run.state.active_groups
    active = frozenset(groups) if groups is not None else agent.toolkit.default_active_groups()
    meter = RunMeter(run)
    executor = run.executor = ToolExecutor(
        tools,
        run.ctx,
        agent.toolkit.semaphore(),
        active,
        emit=run.emit if run.streaming else None,
        reply_id=run.reply_id,
        session_id=run.session_id,
        source=agent.name,
        add_usage=meter,  # tokens a tool reports spending
        meter=meter,  # model calls a tool makes for the run (MCP sampling): reserved, priced
        ask=_questions.asker(run),
    )
    return executor


def _add_input(run: Run) -> None:
    """Append the call's input to the transcript (its tool calls closed as inert history)."""
    if not run.input:
        return
    added = _turns.inert_input(run.input)
    run.add_messages(*added)
    if run.knowledge is not None and added:
        run.knowledge.start_id = added[0].id  # this call starts a turn: its citations count from here


async def _full_system_message(agent: ReActAgent, run: Run, spec: OutputSpec | None) -> Msg | None:
    """The system prompt with what this call adds to it: memories, knowledge passages, the output schema."""
    system = await _system_message(agent, run)
    if agent._long_term_memory is not None and agent.memory_mode != "agent":
        system = await _with_memories(agent, run, system)
    if run.knowledge is not None and agent.knowledge_mode != "tool":
        block = await _knowledge.prompt_passages(agent, run, run.knowledge)
        if block is not None:
            system = Msg.system(f"{system.text}\n\n{block}" if system is not None else block)
    if spec is not None and spec.mode == "prompted":
        base = system.text + "\n\n" if system is not None else ""
        system = Msg.system(base + spec.prompt())
    return system


async def _save_on_cancel(run: Run) -> None:
    _turns.close_turn(run)
    await run.checkpoint()


async def _save_on_limit(run: Run, exc: UsageLimitExceeded) -> None:
    if not run.loaded:
        return  # stopped before the state was read: nothing of this call to save
    _turns.close_turn(run, f"Not run: the call stopped at its usage limit ({exc.limit}={exc.limit_value:g}).")
    await run.checkpoint()


def _check_cost_limit(agent: ReActAgent, run: Run) -> None:
    """A cost limit needs a model whose calls have a price: say so before anything is saved."""
    limits = run.limits
    if limits is not None and limits.cost_usd is not None and not price_known(agent.model):
        raise InvalidValueError(
            f"usage limit cost_usd={limits.cost_usd:g}: model {agent.model.id!r} has no known price (not in the "
            "genai-prices table, or genai-prices is not installed: pip install 'agentrt[cost]'); give it one with "
            "model.price = ModelPrice(input=..., output=...)"
        )


def usage_metadata(run: Run) -> dict[str, object]:
    """The ``metadata["usage"]`` of a call's reply: what the call spent so far (`RunUsage.to_dict`)."""
    return {"usage": snapshot(run).to_dict()}


def _refuse_stray_answers(run: Run) -> None:
    """Approvals sent to a session with nothing pending are a caller mistake (results: `_turns.check_input`)."""
    for msg in run.input:
        if msg.metadata and META_CONFIRM_RESULTS in msg.metadata:
            raw = msg.metadata[META_CONFIRM_RESULTS]
            ids = [_answer_id(r) for r in raw] if isinstance(raw, (list, tuple)) else []
            raise NotPendingError(
                f"this message answers tool approvals ({', '.join(repr(i) for i in ids) or 'none named'}), but nothing "
                "is waiting for approval in this session (already answered, ended as interrupted, or never asked)",
                ids,
            )


def _answer_id(raw: Any) -> str:
    """The call id an answer names, for the error message; never fails on a malformed answer."""
    if isinstance(raw, Mapping):
        call = raw.get("tool_call")
        found = raw.get("tool_call_id") or (call.get("id") if isinstance(call, Mapping) else call)
        return str(found)[:200] if found else "?"
    call_id = getattr(raw, "tool_call_id", None)
    return str(call_id)[:200] if call_id is not None else "?"


async def _repair_dangling(agent: ReActAgent, run: Run) -> None:
    """Give the calls a dead run left without results their results (see `_hitl.recover`)."""
    turn = _turns.open_turn(run.state.messages)
    if turn is not None:
        last, missing = turn
        results = await _hitl.recover(agent, run, _executor(agent, run), last.id, missing)
        run.add_messages(Msg(role="user", content=list(results)))
    _turns.without_in_flight(run)
    pending = run.state.pending
    if pending is not None:  # a dead run had spent the last approval: only held-back notes remain
        run.set_field("pending", None)
        run.add_messages(*pending.notes)


async def _system_message(agent: ReActAgent, run: Run) -> Msg | None:
    """The system prompt (after the middlewares), with the skills listing when the agent has skills."""
    return agent._skills.system(await _own_system_message(agent, run))


async def _own_system_message(agent: ReActAgent, run: Run) -> Msg | None:
    chain = _chains(agent).system_prompt
    if not chain:
        if not agent.sys_prompt:
            return None
        msg = agent._system_msg
        if msg is None or msg.text != agent.sys_prompt:
            msg = agent._system_msg = Msg.system(agent.sys_prompt)
        return msg
    prompt = agent.sys_prompt
    for mw in chain:
        prompt = await mw.on_system_prompt(run, prompt)
    return Msg.system(prompt) if prompt else None


async def _with_memories(agent: ReActAgent, run: Run, system: Msg | None) -> Msg | None:
    """The system prompt with the long-term memories relevant to this call's input (static memory mode)."""
    memory = agent._long_term_memory
    assert memory is not None
    query = "\n".join(m.text for m in run.input if m.role == "user" and m.text)
    if not query:  # a resume (approvals, external results): the request being worked on
        query = next((m.text for m in reversed(run.state.messages) if m.role == "user" and m.text), "")
    if not query.strip():
        return system
    try:
        items = await memory.retrieve(run.user_id, query, agent.memory_top_k)
    except Exception:
        # Memory is an aid: a failing backend must not fail the call.
        logger.warning("long-term memory retrieval failed for user %r", run.user_id, exc_info=True)
        return system
    if not items:
        return system
    from agentrt.memory.long_term import format_memories

    block = format_memories(items)
    base = system.text if system is not None else ""
    return Msg.system(f"{base}\n\n{block}" if base else block)


# --------------------------------------------------------------------------------------------------
# the loop's steps (the loop itself is in `_call_core`)
# --------------------------------------------------------------------------------------------------
def _output_failed(agent: ReActAgent, failures: int, errors: str) -> int:
    """`failures` invalid structured answers so far; `StructuredOutputError` past the agent's retries."""
    if failures > agent.output_retries:
        raise StructuredOutputError(
            f"model {agent.model.id!r} gave no valid structured output after {failures} attempt(s): {errors}"
        )
    return failures


def _nudge(agent: ReActAgent, nudged: bool) -> tuple[Msg]:
    """The extra prompt after an empty reply; `ModelBehaviorError` for a second one."""
    if nudged:
        raise ModelBehaviorError(
            f"model {agent.model.id!r} returned an empty reply twice (after a nudge); the input is saved in the "
            "session, so the call can be retried"
        )
    return (Msg.user(NUDGE),)


async def _answer(run: Run, reply: Msg) -> Msg:
    """The call's answer: `reply` with the call's id, usage and citations, saved."""
    final = _knowledge.cite(
        run,
        reply.replace(id=run.reply_id, usage=run.usage, metadata={**reply.metadata, **usage_metadata(run)}),
    )
    run.add_messages(final)
    await run.checkpoint()
    return final


async def _act(agent: ReActAgent, run: Run, reply: Msg) -> Msg | None:
    """Save `reply` and run its tool calls (a pause reply if some must wait for the user or the caller)."""
    executor = _executor(agent, run)
    calls = reply.tool_calls
    # Recorded with the reply: only calls this session's model made may ever run after a crash.
    _turns.set_in_flight(run, reply.id, [c.id for c in calls])
    run.add_messages(reply)
    await run.checkpoint()
    return await _hitl.act(agent, run, reply, calls, executor, _runner(agent, run, executor), _on_result(run))


def _spent(run: Run, reply: Msg) -> Msg:
    """`reply`, once the tokens and cost spent so far are within the limits.

    Past one, the reply (a completed step) joins the session before the call stops: its tool calls
    get "not run" results from `_save_on_limit`.
    """
    try:
        check_after_request(run)
    except UsageLimitExceeded:
        run.add_messages(reply)
        raise
    return reply


def _distinct_calls(run: Run, reply: Msg) -> Msg:
    """`reply` with call ids unique in the session, before anything reads its calls (see `_turns.unique_call_ids`)."""
    if not reply.tool_calls:
        return reply
    return _turns.unique_call_ids(reply, run.state.tool_call_ids())


async def _structured(
    agent: ReActAgent, run: Run, spec: OutputSpec, reply: Msg, calls: list[ToolUseBlock]
) -> Msg | str | None:
    """Finish with structured output, or say why the attempt failed.

    Returns the final Msg, a str (the errors, already fed back to the model), or None when this
    reply is an ordinary tool step.
    """
    if spec.mode == "tool":
        answer = next((c for c in calls if c.name == GENERATE_RESPONSE), None)
        if answer is None:
            if calls:
                return None
            run.add_messages(reply, Msg.user(_CALL_GENERATE, synthetic=True))
            await run.checkpoint()
            return "the model answered in text instead of calling generate_response"
        try:
            value = spec.validator(dict(answer.input))
        except ValueError as exc:
            results = [
                ToolResultBlock(
                    id=c.id,
                    name=c.name,
                    output=f"Invalid final answer: {exc}. Fix these fields and call {GENERATE_RESPONSE} again."
                    if c is answer
                    else f"Not run: {GENERATE_RESPONSE} was called in the same turn.",
                    state="error",
                )
                for c in calls
            ]
            run.add_messages(reply, Msg(role="user", content=list(results)))
            await run.checkpoint()
            return str(exc)
        results = [
            ToolResultBlock(
                id=c.id,
                name=c.name,
                output="Final answer recorded." if c is answer else "Not run: the final answer was given.",
                state="success" if c is answer else "error",
            )
            for c in calls
        ]
        run.add_messages(reply, Msg(role="user", content=list(results)))
        final = _knowledge.cite(run, _structured_reply(agent, run, value, None))
    else:
        try:
            value = spec.parse_text(reply.text)
        except ValueError as exc:
            run.add_messages(reply, Msg.user(_FIX_JSON.format(errors=exc), synthetic=True))
            await run.checkpoint()
            return str(exc)
        final = _knowledge.cite(run, _structured_reply(agent, run, value, reply))
    run.add_messages(final)
    await run.checkpoint()
    return final


def _structured_reply(agent: ReActAgent, run: Run, value: Any, reply: Msg | None) -> Msg:
    metadata = {
        **(reply.metadata if reply is not None else {}),
        META_GENERATE_REASON: GenerateReason.STRUCTURED_OUTPUT.value,
        META_STRUCTURED: value,
        **usage_metadata(run),
    }
    content: list[Any] = [b for b in reply.content if isinstance(b, ThinkingBlock)] if reply is not None else []
    content.append(TextBlock(text=_json.dumps(value)))
    return Msg(role="assistant", content=content, name=agent.name, id=run.reply_id, usage=run.usage, metadata=metadata)


def _calls_tools(msg: Msg) -> bool:
    """Whether `msg` holds a tool call (`Msg.tool_calls` without building the list)."""
    return any(type(block) is ToolUseBlock for block in msg.content)


def _is_empty(msg: Msg) -> bool:
    """No answer text and no tool call (thinking alone does not count)."""
    for block in msg.content:
        if isinstance(block, TextBlock):
            if block.text.strip():
                return False
        elif not isinstance(block, ThinkingBlock):
            return False
    return True


async def _wrap_up(agent: ReActAgent, run: Run, system: Msg | None) -> Msg:
    extra = [Msg.user(MAX_ITERS_PROMPT.format(n=agent.max_iters))]
    spec: OutputSpec | None = run.output
    choice = _NONE_CHOICE
    if spec is not None and spec.mode == "tool":
        choice = GenerateOptions(tool_choice={"name": GENERATE_RESPONSE})
    check_before_request(run)
    reply = _spent(run, _distinct_calls(run, await _reasoning(agent, run, system, extra, choice)))
    if spec is not None:
        outcome = await _structured(agent, run, spec, reply, reply.tool_calls)
        if isinstance(outcome, Msg):
            return outcome.with_metadata(max_iters_reached=True)
    content = [b for b in reply.content if not isinstance(b, ToolUseBlock)]
    final = reply.replace(
        id=run.reply_id,
        content=content,
        usage=run.usage,
        metadata={**reply.metadata, META_GENERATE_REASON: GenerateReason.MAX_ITERS.value, **usage_metadata(run)},
    )
    final = _knowledge.cite(run, final)
    run.add_messages(final)
    await run.checkpoint()
    return final


# --------------------------------------------------------------------------------------------------
# reasoning: prompt → model → assistant message
# --------------------------------------------------------------------------------------------------
def _prompt(run: Run, system: Msg | None, extra: Sequence[Msg]) -> list[Msg]:
    state = run.state
    history = state.messages
    if state.summary and state.summary_index:
        history = [Msg.user(f"<summary>\n{state.summary}\n</summary>"), *history[state.summary_index :]]
    prompt = [system, *history] if system is not None else list(history)
    if extra or state.tasks:
        prompt.extend(_tail(run, extra))
    return prompt


def _schemas(agent: ReActAgent, run: Run) -> list[ToolSchema]:
    groups = run.state.active_groups
    schemas = agent.toolkit.schemas(None if groups is None else groups)
    if agent._session_tools:
        schemas = [*schemas, *(t.schema() for t in agent._session_tools.values())]
    schemas = agent._skills.schemas(schemas)  # + load_skill when the agent has skills
    spec = run.output
    if spec is not None and spec.mode == "tool":
        schemas = [*schemas, spec.tool_schema()]
    return schemas


def _reasoning(
    agent: ReActAgent,
    run: Run,
    system: Msg | None,
    extra: Sequence[Msg],
    override: GenerateOptions | None,
) -> Awaitable[Msg]:
    """One reasoning step (returned to be awaited: no frame of its own in the await chain)."""
    chains = _chains(agent)
    if agent._context is not None:
        return _reasoning_managed(agent, agent._context, run, system, extra, override, chains)
    if not chains.reasoning and not chains.model_call:
        options = run.options.merge(override)
        return _model_call(agent, run, _prompt(run, system, extra), _schemas(agent, run), options)
    return _reasoning_with_middleware(agent, run, system, extra, override, chains)


async def _reasoning_with_middleware(
    agent: ReActAgent,
    run: Run,
    system: Msg | None,
    extra: Sequence[Msg],
    override: GenerateOptions | None,
    chains: Chains,
) -> Msg:
    # Kept apart from `_reasoning` so the closure's cell variables cost nothing without middleware.
    async def core() -> Msg:
        options = run.options.merge(override)
        request = ModelRequest(_prompt(run, system, extra), _schemas(agent, run), options)
        return await _model_handler(agent, run, chains)(request)

    return await _in_reasoning_mw(run, chains, core)


def _model_handler(agent: ReActAgent, run: Run, chains: Chains) -> Callable[[ModelRequest], Awaitable[Msg]]:
    """`_model_call` wrapped in the middlewares' `on_model_call` hooks."""

    def call(request: ModelRequest) -> Awaitable[Msg]:
        return _model_call(agent, run, request.messages, request.tools, request.options)

    handler: Callable[[ModelRequest], Awaitable[Msg]] = call
    for mw in reversed(chains.model_call):
        handler = _bind_model_mw(mw, run, handler)
    return handler


async def _in_reasoning_mw(run: Run, chains: Chains, core: Callable[[], Awaitable[Msg]]) -> Msg:
    """Run one reasoning step `core` inside the middlewares' `on_reasoning` hooks."""
    step = core
    for mw in reversed(chains.reasoning):
        step = functools.partial(mw.on_reasoning, run, step)
    return await step()


def _tail(run: Run, extra: Sequence[Msg]) -> list[Msg]:
    """What follows the history in the prompt: this step's extra messages and the task reminder."""
    tail = list(extra)
    if run.state.tasks:
        reminder = task_reminder(run.state.tasks)
        if reminder is not None:
            tail.append(Msg.user(reminder, synthetic=True))
    return tail


async def _reasoning_managed(
    agent: ReActAgent,
    compressor: ContextCompressor,
    run: Run,
    system: Msg | None,
    extra: Sequence[Msg],
    override: GenerateOptions | None,
    chains: Chains,
) -> Msg:
    """A reasoning step with context management: compress before the call, recover once from an overflow."""

    async def core() -> Msg:
        options = run.options.merge(override)
        model = agent.model
        head = [system] if system is not None else []
        tail = _tail(run, extra)
        tools = _schemas(agent, run)
        handler = _model_handler(agent, run, chains)
        summary_model = agent._resolve_summary_model
        meter = RunMeter(run)  # the summary calls count against the usage limits
        prompt, raw = await compressor.prepare(run, head, tail, tools, model, options, summary_model, meter=meter)
        try:
            msg = await handler(ModelRequest(prompt, tools, options))
        except ContextWindowExceededError:
            # Our count was too low for this provider: force a deeper compression and retry once.
            steps = await compressor.compress(
                run, head, tail, tools, model, options, summary_model, mode="overflow", meter=meter
            )
            if not steps:
                raise
            if run.streaming:
                run.event(ev.ModelRestarted, step=run.step, reason="context_window_exceeded")
            prompt, raw = await compressor.prepare(run, head, tail, tools, model, options, summary_model, meter=meter)
            check_before_request(run)
            msg = await handler(ModelRequest(prompt, tools, options))
        compressor.calibrate(raw, msg.usage, model)
        return msg

    return await _in_reasoning_mw(run, chains, core)


async def compress_run(agent: ReActAgent, run: Run, mode: Mode = "manual") -> list[Compression]:
    """Compress the context of the session `run` works on, now (for `agent.compress` and the tool)."""
    compressor = agent._compressor()
    system = await _system_message(agent, run)
    head = [system] if system is not None else []
    options = run.options if run.options is not None else agent.options
    tools = _schemas(agent, run)
    return await compressor.compress(
        run,
        head,
        _tail(run, []),
        tools,
        agent.model,
        options,
        agent._resolve_summary_model,
        mode=mode,
        meter=RunMeter(run),
    )


def _bind_model_mw(
    mw: Any, run: Run, nxt: Callable[[ModelRequest], Awaitable[Msg]]
) -> Callable[[ModelRequest], Awaitable[Msg]]:
    def handler(request: ModelRequest) -> Awaitable[Msg]:
        return mw.on_model_call(run, request, nxt)  # type: ignore[no-any-return]

    return handler


async def _model_call(
    agent: ReActAgent, run: Run, messages: list[Msg], tools: list[ToolSchema], options: GenerateOptions
) -> Msg:
    model = agent.model
    streaming = run.streaming
    # Checked and counted in one step, right before sending (no await in between): parallel
    # subagents sharing a `requests` limit can never together send more calls than it allows.
    reserve_request(run)
    # Nobody consumes the reply as it is generated: the model may hand it over whole (no generator).
    whole = None if streaming else await model.whole_reply(messages, tools, options)
    acc = ReplyAccumulator(_Listener(run) if streaming else None)
    if whole is not None:
        for chunk in whole:
            acc.add(chunk)
        if run.interrupt_requested:
            raise _Interrupt
    else:
        if streaming:
            run.event(ev.ModelCallStarted, step=run.step, model=model.model_name)
        async for chunk in model.stream(messages, tools, options):
            acc.add(chunk)
            if run.interrupt_requested:
                raise _Interrupt
    msg = acc.message(name=agent.name)
    usage = acc.usage
    # A wrapper choosing among models (FallbackModel) says which one served the reply: price that one.
    served = acc.served_by if isinstance(acc.served_by, ChatModel) else model
    cost = cost_of(served, usage)
    record_spend(run, cost)
    if usage is not None:
        record_tokens(run, usage)
        if streaming:
            run.event(ev.Usage, usage=usage, model=served.model_name, cost_usd=cost)
    if streaming:
        run.event(ev.ModelCallFinished, step=run.step, msg=msg, finish_reason=acc.finish_reason)
    return msg


# --------------------------------------------------------------------------------------------------
# acting: tool calls → results
# --------------------------------------------------------------------------------------------------
def _runner(
    agent: ReActAgent, run: Run, executor: ToolExecutor
) -> Callable[[ToolUseBlock], Awaitable[ToolResultBlock]]:
    """The executor wrapped in the middlewares' `on_acting` hooks."""
    runner: Callable[[ToolUseBlock], Awaitable[ToolResultBlock]] = executor.execute
    for mw in reversed(_chains(agent).acting):
        runner = _bind_acting_mw(mw, run, runner)
    return runner


def _on_result(run: Run) -> Callable[[ToolResultBlock, float], Awaitable[None]] | None:
    if not run.streaming:
        return None

    async def on_result(result: ToolResultBlock, elapsed: float) -> None:
        run.event(ev.ToolResult, result=result, elapsed=elapsed)

    return on_result


def _bind_acting_mw(
    mw: Any, run: Run, nxt: Callable[[ToolUseBlock], Awaitable[ToolResultBlock]]
) -> Callable[[ToolUseBlock], Awaitable[ToolResultBlock]]:
    def handler(call: ToolUseBlock) -> Awaitable[ToolResultBlock]:
        return mw.on_acting(run, call, nxt)  # type: ignore[no-any-return]

    return handler


# --------------------------------------------------------------------------------------------------
# interrupts
# --------------------------------------------------------------------------------------------------
async def _finish_interrupted(agent: ReActAgent, run: Run) -> Msg:
    task = run.task
    if task is not None:  # the interrupt's cancellation is handled here: the call goes on to save and reply
        while task.cancelling():
            task.uncancel()
    # Interrupted while the state was still loading: nothing of this call was written, and writing
    # now (blind to what is stored, e.g. calls waiting for approval) could break the history.
    loaded = run.loaded
    if loaded:
        _turns.close_turn(run)
    if run.streaming:
        run.event(ev.Interrupted, message=run.interrupt_message.text if run.interrupt_message else "")
    final = Msg(
        role="assistant",
        content=[TextBlock(text="(interrupted)")],
        name=agent.name,
        id=run.reply_id,
        usage=run.usage,
        metadata={META_GENERATE_REASON: GenerateReason.INTERRUPTED.value, **usage_metadata(run)},
    )
    if not loaded:
        return final
    run.add_messages(final)
    if run.interrupt_message is not None:
        run.add_messages(run.interrupt_message)
    await run.checkpoint()
    return final
