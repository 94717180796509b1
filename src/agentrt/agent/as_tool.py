"""Agent-as-tool: a subagent the model calls like any tool, with its own session and event stream.

The subagent runs in a session derived from the caller's (``<session>/<tool name>`` by default),
so its history is isolated but continues across calls from the same parent session. Its events
are forwarded into the parent's stream (keeping their own `source`), its usage (model calls, tokens,
cost, tool calls) counts in the parent's as it is spent, and against the parent's usage limits
(`agentrt.agent.usage`), and interrupting the parent cancels it (the child checkpoints what it has). When
the subagent pauses for approval, the tool suspends: the parent pauses too and surfaces the
subagent's pending calls; the answers are routed back to the subagent, which resumes.

Anything with the agent surface (``name``, ``call``, ``stream_events``) can be wrapped, so
pipeline composites (`agentrt.pipeline`) serve as tools too.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, Protocol, TypeAlias

from agentrt import _json
from agentrt.agent._run import Run, current_run
from agentrt.agent.usage import record_tokens
from agentrt.context import RuntimeContext
from agentrt.errors import ToolArgumentsError, ToolRetry, ToolSuspended, UsageLimitExceeded, UserError
from agentrt.events import AgentEvent, RunFinished
from agentrt.message import GenerateReason, Msg, TextBlock, TokenUsage, ToolResultBlock, new_id
from agentrt.permission import ConfirmResult
from agentrt.state.pending import META_PENDING
from agentrt.tool.base import Tool

__all__ = ["Delegate", "SessionStrategy", "agent_as_tool"]

SessionStrategy: TypeAlias = "Literal['isolated', 'per_call'] | Callable[[RuntimeContext], str]"
"""Where the subagent's history lives: ``"isolated"`` (``<session>/<tool>``, continued across
calls), ``"per_call"`` (a fresh session per call) or a function of the caller's context returning
a session id."""

_SAFE = re.compile(r"[^A-Za-z0-9_-]+")
_DEFAULT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"task": {"type": "string", "description": "What the agent should do, with all needed context."}},
    "required": ["task"],
    "additionalProperties": False,
}
_PAUSED = (GenerateReason.AWAITING_CONFIRMATION, GenerateReason.AWAITING_EXTERNAL_EXECUTION)


class Delegate(Protocol):
    """What `agent_as_tool` needs: an agent, or a pipeline composite (a ``description`` is used when present)."""

    @property
    def name(self) -> str: ...

    def call(self, input: Any = ..., ctx: RuntimeContext | None = ...) -> Awaitable[Any]: ...

    def stream_events(self, input: Any = ..., ctx: RuntimeContext | None = ...) -> AsyncIterator[AgentEvent]: ...


def agent_as_tool(
    agent: Delegate,
    *,
    name: str | None = None,
    description: str | None = None,
    input_schema: Mapping[str, Any] | type | None = None,
    timeout: float | None = None,
    session: SessionStrategy = "isolated",
) -> Tool:
    """Wrap `agent` as a `Tool` (see the module docstring).

    Args:
        agent: The subagent (an `AgentBase` or a pipeline composite).
        name: The tool name; default: the agent's name made safe for tool names.
        description: What the model reads; default: the agent's description.
        input_schema: The tool's arguments: a JSON Schema dict, or a pydantic model / dataclass /
            TypedDict class. Arguments are validated, then sent to the subagent as one JSON user
            message. Default: one ``task`` string, sent as the message text.
        timeout: Seconds before the call is abandoned (the subagent is cancelled); None: no limit.
        session: Where the subagent's history lives (see `SessionStrategy`).
    """
    tool_name = name or _SAFE.sub("_", agent.name).strip("_") or "subagent"
    text = (
        description
        or getattr(agent, "description", "")
        or f"Delegate a task to the {agent.name!r} agent and get its answer."
    )
    schema, validate = _input_spec(tool_name, input_schema)
    if not (session in ("isolated", "per_call") or callable(session)):
        raise UserError(f"session must be 'isolated', 'per_call' or a function of the context, not {session!r}")

    def child_ctx(ctx: RuntimeContext, session_id: str | None = None) -> RuntimeContext:
        if session_id is None:
            parent_session = ctx.key[1]
            if session == "isolated":
                session_id = f"{parent_session}/{tool_name}"
            elif session == "per_call":
                session_id = f"{parent_session}/{tool_name}/{new_id()[:12]}"
            elif callable(session):
                session_id = session(ctx)
                if not isinstance(session_id, str) or not session_id:
                    raise UserError(f"the session function of tool {tool_name!r} returned {session_id!r}, not a str")
        return ctx.child(session_id=session_id)

    async def handler(args: Mapping[str, Any], ctx: RuntimeContext) -> Any:
        if validate is None:
            task = args.get("task")
            if not isinstance(task, str) or not task.strip():
                raise ToolArgumentsError(f"Invalid arguments for tool {tool_name!r}: 'task' must be a non-empty string")
            message = Msg.user(task)
        else:
            message = Msg.user(_json.dumps(validate(args)))
        sub = child_ctx(ctx)
        return _outcome(await _run_child(agent, [message], sub), agent, sub)

    async def resume(state: Any, answers: Sequence[Any], ctx: RuntimeContext) -> Any:
        confirms = [a for a in answers if isinstance(a, ConfirmResult)]
        results = [a for a in answers if isinstance(a, ToolResultBlock)]
        messages: list[Msg] = []
        if confirms:
            messages.append(Msg.confirm(confirms))
        if results:
            messages.append(Msg(role="user", content=list(results)))
        session_id = state.get("session_id") if isinstance(state, Mapping) else None
        sub = child_ctx(ctx, session_id)
        return _outcome(await _run_child(agent, messages, sub), agent, sub)

    tool = Tool.from_handler(tool_name, text, schema, handler, timeout=timeout, concurrency_safe=True)
    tool.resume = resume
    return tool


def _input_spec(
    tool_name: str, input_schema: Mapping[str, Any] | type | None
) -> tuple[dict[str, Any], Callable[[Mapping[str, Any]], Any] | None]:
    """The JSON Schema shown to the model and a validator returning JSON-ready arguments."""
    if input_schema is None:
        return _DEFAULT_SCHEMA, None
    if isinstance(input_schema, Mapping):
        schema = dict(input_schema)
        try:
            import jsonschema

            validator = jsonschema.validators.validator_for(schema)(schema)
            validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise UserError(f"input_schema of tool {tool_name!r} is not a valid JSON Schema: {exc.message}") from None

        def check(args: Mapping[str, Any]) -> Any:
            errors = sorted(validator.iter_errors(dict(args)), key=lambda e: list(e.path))
            if errors:
                parts = [f"{'.'.join(map(str, e.path)) or 'arguments'!r}: {e.message}" for e in errors[:5]]
                raise ToolArgumentsError(f"Invalid arguments for tool {tool_name!r}: {'; '.join(parts)}")
            return dict(args)

        return schema, check
    if isinstance(input_schema, type):
        from pydantic import TypeAdapter, ValidationError

        try:
            adapter: TypeAdapter[Any] = TypeAdapter(input_schema)
            schema = adapter.json_schema()
        except Exception as exc:
            raise UserError(
                f"input_schema of tool {tool_name!r}: cannot build a JSON Schema from {input_schema.__name__}: {exc}"
            ) from None

        def parse(args: Mapping[str, Any]) -> Any:
            try:
                value = adapter.validate_python(dict(args))
            except ValidationError as exc:
                first = exc.errors(include_url=False)[:5]
                parts = [f"{'.'.join(map(str, e['loc'])) or 'arguments'!r}: {e['msg']}" for e in first]
                raise ToolArgumentsError(f"Invalid arguments for tool {tool_name!r}: {'; '.join(parts)}") from None
            return adapter.dump_python(value, mode="json")

        return schema, parse
    raise UserError(
        f"input_schema must be a JSON Schema dict or a pydantic model / dataclass, not {type(input_schema).__name__!r}"
    )


async def _run_child(agent: Delegate, messages: list[Msg], ctx: RuntimeContext) -> Msg:
    parent = current_run.get()
    counted = parent.requests if parent is not None else 0
    reply: Msg | None = None
    try:
        reply = await _child_reply(agent, messages, ctx, parent)
    except UsageLimitExceeded as exc:
        # The subagent stopped (its work saved in its session). The parent's model hears why; if the
        # limit was the parent's own, the parent stops too, before its next model call.
        raise ToolRetry(
            f"The {agent.name!r} agent stopped: usage limit {exc.limit}={exc.limit_value:g} of agent "
            f"{exc.agent!r} reached."
        ) from exc
    if parent is not None and reply.usage is not None and parent.requests == counted:
        # A delegate that is not an agent run (its model calls were not counted as they happened):
        # its tokens count for the parent, its running parents and any pipeline budget.
        record_tokens(parent, reply.usage)
    return reply


async def _child_reply(agent: Delegate, messages: list[Msg], ctx: RuntimeContext, parent: Run | None) -> Msg:
    reply: Msg | None = None
    if parent is None or not parent.streaming:
        reply = _as_reply(await agent.call(messages, ctx), agent)
    else:
        # aclosing: if the parent is interrupted (this task cancelled), the child's stream is closed
        # now, which cancels and checkpoints the child, instead of whenever the generator is collected.
        events = agent.stream_events(messages, ctx)
        last: AgentEvent | None = None
        try:
            async for event in events:
                parent.emit(event)
                last = event
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()
        if isinstance(last, RunFinished):
            reply = last.msg
    if reply is None:
        raise UserError(f"subagent {agent.name!r} ended without a reply")
    return reply


def _as_reply(result: Any, agent: Delegate) -> Msg:
    if isinstance(result, Msg):
        return result
    if isinstance(result, list) and all(isinstance(m, Msg) for m in result):
        # A fan-out without a gather step: one reply per member, joined for the model.
        usage: TokenUsage | None = None
        for m in result:
            if m.usage is not None:
                usage = m.usage if usage is None else usage + m.usage
        blocks = [TextBlock(text=f"{m.name}: {m.text}" if m.name else m.text) for m in result]
        return Msg(role="assistant", content=list(blocks), name=agent.name, usage=usage)
    raise UserError(f"subagent {agent.name!r} returned {type(result).__name__!r}, not a Msg")


def _outcome(reply: Msg, agent: Delegate, ctx: RuntimeContext) -> Any:
    reason = reply.generate_reason
    if reason in _PAUSED:
        pending = [dict(p) for p in reply.metadata.get(META_PENDING) or ()]
        raise ToolSuspended(pending, state={"session_id": ctx.key[1]})
    if reason is GenerateReason.INTERRUPTED:
        partial = f" Its partial answer: {reply.text}" if reply.text else ""
        raise ToolRetry(f"The {agent.name!r} agent was interrupted before it finished.{partial}")
    if reason is GenerateReason.STRUCTURED_OUTPUT:
        return reply.metadata.get("structured_output")
    return reply.text
