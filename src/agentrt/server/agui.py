"""AG-UI facade: run an agent from an AG-UI client and stream AG-UI events back.

``POST /agui/{agent}`` takes an AG-UI ``RunAgentInput`` and answers with an SSE stream of AG-UI
events (the ``ag-ui-protocol`` package's models, encoded by its ``EventEncoder``). The thread id is
the agentrt session id, under the caller's user id, so an AG-UI thread is the same session the REST
API and the web UI show.

Tool approvals use AG-UI's interrupts: the run ends with a ``CUSTOM`` event
``agentrt.require_user_confirm`` and ``RUN_FINISHED`` whose outcome is ``interrupt`` (one interrupt
per pending call, its id being the tool call id). The client resumes with a new run on the same
thread whose ``resume`` entries (or ``forwardedProps.confirm_results``) answer them. Client-side
tools (``RunAgentInput.tools``) become external tools of the run: a call of one ends the run with
``pendingToolCallIds`` and the client answers with a ``tool`` message. See ``docs/protocols.md``.

Knowledge citations (an agent with ``knowledge=``): a reply that cites passages is followed, just
before ``RUN_FINISHED``, by a ``CUSTOM`` event ``agentrt.citations`` whose value is
``{"reply_id": ..., "citations": [{"chunk_id", "source", "title", "location"}, ...]}``; each
``search_knowledge`` result's ``TOOL_CALL_RESULT`` carries the citations of its passages in
``metadata.agentrt.citations``.
"""

from __future__ import annotations

import asyncio
import copy
import re
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ag_ui.core import (
    PROTOCOL_VERSION,
    AssistantMessage,
    AudioPart,
    BaseEvent,
    CustomEvent,
    DataSource,
    ImagePart,
    Interrupt,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    ResumeEntry,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentFinishedSuccessOutcome,
    SubagentFinishedSuspendedOutcome,
    SubagentStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TextPart,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UrlSource,
    UserMessage,
    VideoPart,
)
from ag_ui.core import Tool as AguiTool
from ag_ui.encoder import EventEncoder
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from agentrt import _json
from agentrt import events as ev
from agentrt.agent._knowledge import META_CITATIONS, citation_list
from agentrt.agent.base import AgentBase
from agentrt.agent.react import ReActAgent
from agentrt.context import RuntimeContext
from agentrt.errors import ToolDefinitionError
from agentrt.message import (
    META_CONFIRM_RESULTS,
    AudioBlock,
    Base64Source,
    ContentBlock,
    GenerateReason,
    ImageBlock,
    Msg,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    VideoBlock,
)
from agentrt.message import TokenUsage as AgentrtUsage
from agentrt.server._auth import Scope
from agentrt.server._errors import ApiError, protocol_message
from agentrt.server.context import ServerContext, citations_of, pending_calls
from agentrt.state.base import AgentState
from agentrt.state.pending import EXTERNAL
from agentrt.tool.base import Tool
from agentrt.tool.toolkit import Toolkit

__all__ = [
    "APPROVAL_RESPONSE_SCHEMA",
    "CUSTOM_CITATIONS",
    "CUSTOM_CONTEXT_COMPRESSED",
    "CUSTOM_IGNORED_TOOLS",
    "CUSTOM_REQUIRE_EXTERNAL_EXECUTION",
    "CUSTOM_REQUIRE_USER_CONFIRM",
    "CUSTOM_USAGE",
    "INTERRUPT_REASON",
    "EventTranslator",
    "build_input",
    "openapi_paths",
    "routes",
    "with_client_tools",
]

CUSTOM_REQUIRE_USER_CONFIRM = "agentrt.require_user_confirm"
"""``CUSTOM`` event: tool calls wait for the user's approval (value: reply id and the pending calls)."""
CUSTOM_REQUIRE_EXTERNAL_EXECUTION = "agentrt.require_external_execution"
"""``CUSTOM`` event: tool calls wait for the client to run them and send back ``tool`` messages."""
CUSTOM_USAGE = "agentrt.usage"
"""``CUSTOM`` event: tokens spent by one model call (the run's total is on ``RUN_FINISHED.usage``)."""
CUSTOM_CONTEXT_COMPRESSED = "agentrt.context_compressed"
"""``CUSTOM`` event: the session's prompt was compressed to fit the context window."""
CUSTOM_IGNORED_TOOLS = "agentrt.ignored_tools"
CUSTOM_CITATIONS = "agentrt.citations"
"""``CUSTOM`` event: the knowledge passages the run's reply cites (value: reply id and the citations)."""
"""``CUSTOM`` event: client tools of the input that this run could not offer to the model, and why."""
INTERRUPT_REASON = "tool_approval"
"""`Interrupt.reason` of an approval interrupt."""

APPROVAL_RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "confirmed": {"type": "boolean", "description": "Approve (true) or deny (false) the call."},
        "input": {"type": "object", "description": "Run the call with these arguments instead."},
        "rules": {
            "type": "array",
            "description": "Permission rules to remember for the thread (e.g. one of the suggested rules).",
            "items": {"type": "object"},
        },
        "reason": {"type": "string", "description": "Why the call was denied (shown to the model)."},
    },
    "required": ["confirmed"],
}
"""`Interrupt.response_schema` of an approval: the payload of the ``resume`` entry that answers it."""

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


# ==================================================================================================
# HTTP
# ==================================================================================================
def routes(server: ServerContext) -> list[BaseRoute]:
    """The AG-UI routes of the app: ``POST /agui/{agent}``."""

    async def run_agent(request: Request) -> Response:
        user_id = await server.authenticate(request, scope=Scope.MESSAGES_WRITE)
        name = request.path_params["agent"]
        agent = server.get_agent(name)
        run_input = server.validate(await server.parse_json(request), RunAgentInput)
        thread_id = server.check_session_id(run_input.thread_id)
        if not run_input.run_id:
            raise ApiError(422, "runId must not be empty", code="validation_error", param="runId")
        server.ensure_accepting()
        ctx = server.context_for(user_id, name, thread_id)
        ctx["agui_thread_id"] = thread_id
        ctx["agui_run_id"] = run_input.run_id
        ctx["agui_state"] = run_input.state
        ctx["agui_forwarded_props"] = run_input.forwarded_props
        ctx.put(RunAgentInput, run_input)
        state = await agent.get_state(*ctx.key)
        agent_input = build_input(run_input, state)
        runner, ignored = with_client_tools(agent, run_input.tools or ())
        translator = EventTranslator(thread_id, run_input.run_id, agent.name)
        encoder = EventEncoder(accept=request.headers.get("accept", "text/event-stream"))

        def on_error(exc: BaseException) -> str | None:
            return "".join(encoder.encode(e) for e in translator.fail(exc)) or None

        events = _events(server, runner, agent_input, ctx, translator, ignored)
        return server.sse_response(events, request, encode=encoder.encode, on_error=on_error)

    return [Route("/agui/{agent}", run_agent, methods=["POST"], name="agui_run")]


def openapi_paths(server: ServerContext) -> dict[str, Any]:
    """The OpenAPI description of the AG-UI route."""
    return {
        "/agui/{agent}": {
            "post": {
                "operationId": "aguiRunAgent",
                "summary": "Run an agent with the AG-UI protocol",
                "description": "Takes an AG-UI `RunAgentInput` (the thread id is the session id) and streams AG-UI "
                "events as SSE. Approvals end the run with an `interrupt` outcome; answer them with `resume` "
                "entries on the next run of the thread. See docs/protocols.md.",
                "parameters": [
                    {
                        "name": "agent",
                        "in": "path",
                        "required": True,
                        "description": "The agent's name.",
                        "schema": {"type": "string", "enum": list(server.agents)},
                    }
                ],
                "requestBody": {"required": True, "content": {"application/json": {"schema": _RUN_INPUT_SCHEMA}}},
                "responses": {
                    "200": {"description": "AG-UI events.", "content": {"text/event-stream": {}}},
                    **{
                        str(code): {"description": text}
                        for code, text in (
                            (400, "Not JSON."),
                            (401, "Missing or unknown API key."),
                            (404, "No such agent."),
                            (409, "The input does not fit the thread's state."),
                            (413, "Body too large."),
                            (422, "Invalid RunAgentInput."),
                            (429, "Rate limited."),
                            (503, "Shutting down."),
                        )
                    },
                },
            }
        }
    }


_RUN_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["threadId", "runId", "messages"],
    "properties": {
        "threadId": {"type": "string", "description": "The session id."},
        "runId": {"type": "string"},
        "messages": {"type": "array", "items": {"type": "object"}},
        "tools": {"type": "array", "items": {"type": "object"}},
        "context": {"type": "array", "items": {"type": "object"}},
        "state": {},
        "forwardedProps": {},
        "resume": {"type": "array", "items": {"type": "object"}},
    },
}


async def _events(
    server: ServerContext,
    agent: AgentBase,
    agent_input: list[Msg],
    ctx: RuntimeContext,
    translator: EventTranslator,
    ignored: Sequence[tuple[str, str]],
) -> AsyncGenerator[BaseEvent, None]:
    for out in translator.start():
        yield out
    if ignored:
        value = {"tools": [{"name": name, "reason": why} for name, why in ignored]}
        yield CustomEvent(name=CUSTOM_IGNORED_TOOLS, value=value)
    task = asyncio.current_task()
    entry = server.runs.track(agent, ctx, task) if task is not None else None
    events = agent.stream_events(agent_input, ctx)
    try:
        async for event in events:
            if entry is not None and isinstance(event, ev.RunStarted) and event.source == agent.name:
                entry.started = True
            for out in translator.feed(event):
                yield out
    except Exception as exc:
        for out in translator.fail(exc):
            yield out
    finally:
        # Closing the stream (the client went away) stops the run; it is checkpointed first.
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()
        if entry is not None:
            server.runs.untrack(entry)
    for out in translator.finish():
        yield out


# ==================================================================================================
# Input: RunAgentInput -> agentrt messages
# ==================================================================================================
def build_input(run_input: RunAgentInput, state: AgentState) -> list[Msg]:
    """The messages to call the agent with, given the thread's stored state.

    * A paused thread: the ``resume`` entries, ``forwarded_props.confirm_results`` and the ``tool``
      messages answering pending external calls become one resume message.
    * A thread with history: the last user message (the server's history is authoritative).
    * A new thread: the earlier messages seed it, then the last user message.
    """
    confirms = _confirm_results(run_input)
    pending = pending_calls(state)
    messages = list(run_input.messages)
    if pending:
        external = {e.id: e.name for e in pending if e.kind == EXTERNAL}
        results = [
            ToolResultBlock(
                id=m.tool_call_id,
                name=external[m.tool_call_id],
                output=_tool_text(m),
                state="error" if m.error else "success",
            )
            for m in messages
            if isinstance(m, ToolMessage) and m.tool_call_id in external
        ]
        if confirms or results:
            metadata = {META_CONFIRM_RESULTS: confirms} if confirms else {}
            return [Msg(role="user", content=list(results), metadata=metadata)]
        # Nothing answers the pending calls: the runtime refuses the run with an explanation.
        plain = _last_user(messages)
        return [_user_msg(plain)] if plain is not None else [Msg(role="user", content=[])]
    if confirms:
        raise ApiError(
            409,
            "nothing in this thread is waiting for approval; resume entries cannot be applied",
            code="nothing_pending",
        )
    index = next((i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], UserMessage)), None)
    if index is None:
        raise ApiError(422, "RunAgentInput.messages holds no user message to answer", code="no_user_message")
    last = messages[index]
    if not isinstance(last, UserMessage):  # pragma: no cover - found by type above
        raise ApiError(422, "RunAgentInput.messages holds no user message to answer", code="no_user_message")
    if state.messages:
        if any(m.id == last.id for m in state.messages):
            raise ApiError(
                409,
                f"user message {last.id!r} was already answered in this thread; send a new one",
                code="already_answered",
            )
        return [_user_msg(last)]
    return [*_seed(messages[:index]), _user_msg(last)]


def _last_user(messages: Sequence[Any]) -> UserMessage | None:
    return next((m for m in reversed(messages) if isinstance(m, UserMessage)), None)


def _confirm_results(run_input: RunAgentInput) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [_from_resume_entry(entry) for entry in run_input.resume or ()]
    props = run_input.forwarded_props
    if isinstance(props, Mapping):
        raw = props.get("confirm_results", props.get("confirmResults"))
        if raw is not None:
            if not isinstance(raw, list) or not all(isinstance(r, Mapping) for r in raw):
                raise ApiError(422, "forwardedProps.confirm_results must be a list of objects", code="validation_error")
            out.extend(_snake_confirm(r) for r in raw)
    return out


def _snake_confirm(raw: Mapping[str, Any]) -> dict[str, Any]:
    d = dict(raw)
    if "toolCallId" in d and "tool_call_id" not in d:
        d["tool_call_id"] = d.pop("toolCallId")
    return d


def _from_resume_entry(entry: ResumeEntry) -> dict[str, Any]:
    if entry.status == "cancelled":
        d: dict[str, Any] = {"tool_call_id": entry.interrupt_id, "confirmed": False}
        if isinstance(entry.payload, Mapping) and isinstance(entry.payload.get("reason"), str):
            d["reason"] = entry.payload["reason"]
        return d
    payload = entry.payload
    if isinstance(payload, bool):
        return {"tool_call_id": entry.interrupt_id, "confirmed": payload}
    if not isinstance(payload, Mapping) or not isinstance(payload.get("confirmed"), bool):
        raise ApiError(
            422,
            f"resume entry for interrupt {entry.interrupt_id!r}: a resolved approval needs a payload "
            '{"confirmed": true|false, "input"?: {...}, "rules"?: [...], "reason"?: "..."}',
            code="validation_error",
        )
    d = {k: payload[k] for k in ("confirmed", "input", "rules", "reason") if k in payload}
    d["tool_call_id"] = entry.interrupt_id
    return d


def _tool_text(message: ToolMessage) -> str:
    content = message.content
    text = content if isinstance(content, str) else "\n".join(p.text for p in content if isinstance(p, TextPart))
    if message.error and not text:
        return message.error
    return text


def _user_msg(message: UserMessage) -> Msg:
    return Msg(role="user", content=_user_blocks(message.content), id=message.id, name=message.name)


def _user_blocks(content: Any) -> list[ContentBlock]:
    if isinstance(content, str):
        return [TextBlock(text=content)]
    blocks: list[ContentBlock] = []
    for part in content:
        if isinstance(part, TextPart):
            blocks.append(TextBlock(text=part.text))
        elif isinstance(part, (ImagePart, AudioPart, VideoPart)):
            source = part.source
            media: str | Base64Source | None = None
            if isinstance(source, UrlSource):
                media = source.value
            elif isinstance(source, DataSource):
                media = Base64Source(media_type=source.mime_type, data=source.value)
            if media is None:
                blocks.append(TextBlock(text=f"[{part.type} omitted: provider file handles are not supported]"))
            elif isinstance(part, ImagePart):
                blocks.append(ImageBlock(source=media))
            elif isinstance(part, AudioPart):
                blocks.append(AudioBlock(source=media))
            else:
                blocks.append(VideoBlock(source=media))
        else:
            other = getattr(part, "source", None)
            where = f": {other.value}" if isinstance(other, UrlSource) else ""
            blocks.append(TextBlock(text=f"[{getattr(part, 'type', 'attachment')} omitted{where}]"))
    return blocks


def _seed(messages: Sequence[Any]) -> list[Msg]:
    """Earlier messages of a new thread as agentrt history.

    System and developer messages are dropped (the agent's own system prompt governs); tool calls
    without a result are dropped (providers reject them); consecutive tool messages become one
    user message of tool results.
    """
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    names: dict[str, str] = {}
    out: list[Msg] = []
    results: list[ContentBlock] = []
    for m in messages:
        if not isinstance(m, ToolMessage) and results:
            out.append(Msg(role="user", content=results))
            results = []
        if isinstance(m, UserMessage):
            out.append(_user_msg(m))
        elif isinstance(m, AssistantMessage):
            blocks: list[ContentBlock] = [TextBlock(text=m.content)] if m.content else []
            for call in m.tool_calls or ():
                if call.id not in answered:
                    continue
                names[call.id] = call.function.name
                blocks.append(
                    ToolUseBlock(id=call.id, name=call.function.name, input=_arguments(call.function.arguments))
                )
            if blocks:
                out.append(Msg(role="assistant", content=blocks, id=m.id, name=m.name))
        elif isinstance(m, ToolMessage) and m.tool_call_id in names:
            results.append(
                ToolResultBlock(
                    id=m.tool_call_id,
                    name=names[m.tool_call_id],
                    output=_tool_text(m),
                    state="error" if m.error else "success",
                )
            )
    if results:
        out.append(Msg(role="user", content=results))
    return out


def _arguments(raw: str) -> dict[str, Any]:
    try:
        value = _json.loads(raw) if raw else {}
    except ValueError:
        return {"arguments": raw}
    return value if isinstance(value, dict) else {"arguments": value}


# ==================================================================================================
# Client tools
# ==================================================================================================
class _RunToolkit(Toolkit):
    """The agent's tools plus the client's, for one run; shares the agent toolkit's concurrency cap."""

    __slots__ = ("_base",)

    def __init__(self, base: Toolkit) -> None:
        super().__init__(max_concurrency=base.max_concurrency)
        self._base = base

    def semaphore(self) -> asyncio.Semaphore:
        return self._base.semaphore()


def with_client_tools(agent: AgentBase, tools: Sequence[AguiTool]) -> tuple[AgentBase, list[tuple[str, str]]]:
    """The agent to run with the client's tools added as external tools, and the tools left out.

    Only a `ReActAgent` can take them: the run uses a shallow copy of it whose toolkit adds one
    external tool per client tool (the shared agent is never changed). A client tool whose name
    a server tool already has, or that is not a valid tool name, is left out.
    """
    if not tools:
        return agent, []
    if not isinstance(agent, ReActAgent):
        return agent, [(t.name, f"agent {agent.name!r} takes no client tools") for t in tools]
    base = agent.toolkit
    taken = set(base.tools) | set(agent._session_tools or ())
    kit = _RunToolkit(base)
    for group in base.groups.values():
        kit.create_group(group.name, group.description, active=group.active)
    for server_tool in base:
        kit.register(server_tool)
    ignored: list[tuple[str, str]] = []
    added = 0
    for t in tools:
        if t.name in taken:
            ignored.append((t.name, "a server tool has this name"))
            continue
        if not _TOOL_NAME.match(t.name):
            ignored.append((t.name, "tool names must match ^[A-Za-z0-9_-]{1,64}$"))
            continue
        params = t.parameters if isinstance(t.parameters, Mapping) else {"type": "object", "properties": {}}
        try:
            kit.register(Tool(name=t.name, description=t.description, parameters=params, external=True))
        except ToolDefinitionError as exc:
            ignored.append((t.name, str(exc)))
            continue
        taken.add(t.name)
        added += 1
    if not added:
        return agent, ignored
    if agent._running is None:
        agent._running = {}  # shared with the copy, so interrupting the agent reaches this run
    variant = copy.copy(agent)
    variant.toolkit = kit
    return variant, ignored


# ==================================================================================================
# Output: agentrt events -> AG-UI events
# ==================================================================================================
@dataclass(slots=True)
class _Call:
    name: str
    parent: str | None
    args: int = 0
    """Characters of argument JSON sent so far."""


@dataclass(slots=True)
class _Stream:
    """What is open in the event stream of one agent call (the run, or a subagent's call)."""

    subagent: str | None
    text: str | None = None
    reasoning: str | None = None
    step: str | None = None
    parent: str | None = None
    calls: dict[str, _Call] = field(default_factory=dict)
    seen_calls: set[str] = field(default_factory=set)

    @property
    def top(self) -> bool:
        """Whether this is the run's own stream (not a subagent's)."""
        return self.subagent is None


class EventTranslator:
    """Turns one agent call's `AgentEvent` stream into AG-UI events.

    `start()` opens the run, `feed(event)` translates each event, `fail(exc)` ends the run with
    ``RUN_ERROR`` and `finish()` returns whatever must still close it (nothing after an error).
    """

    __slots__ = (
        "_cost",
        "_done",
        "_external",
        "_interrupts",
        "_outcome",
        "_reply_id",
        "_streams",
        "_usage",
        "agent_name",
        "run_id",
        "thread_id",
    )

    def __init__(self, thread_id: str, run_id: str, agent_name: str) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.agent_name = agent_name
        self._reply_id: str | None = None
        self._streams: dict[str, _Stream] = {}
        self._interrupts: list[Interrupt] = []
        self._external: list[str] = []
        self._usage: dict[str, AgentrtUsage] = {}
        self._cost: dict[str, float | None] = {}
        self._outcome: Any = None
        self._done = False

    # -- run -------------------------------------------------------------------------------------
    def start(self) -> list[BaseEvent]:
        """``RUN_STARTED``."""
        return [RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id, protocol_version=PROTOCOL_VERSION)]

    def fail(self, exc: BaseException) -> list[BaseEvent]:
        """Close what is open and end the run with ``RUN_ERROR``."""
        if self._done:
            return []
        out = self._close_everything()
        self._done = True
        message = protocol_message(str(exc), "agui") or type(exc).__name__
        out.append(RunErrorEvent(message=message, code=type(exc).__name__, usage=self._usage_list()))
        return out

    def finish(self) -> list[BaseEvent]:
        """Close what is open and end the run with ``RUN_FINISHED`` (nothing if it already ended)."""
        if self._done:
            return []
        out = self._close_everything()
        self._done = True
        outcome = self._outcome
        if outcome is None:
            if self._interrupts:
                outcome = RunFinishedInterruptOutcome(interrupts=list(self._interrupts))
            elif self._external:
                outcome = RunFinishedSuccessOutcome(pending_tool_call_ids=list(self._external))
        out.append(
            RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id, outcome=outcome, usage=self._usage_list())
        )
        return out

    # -- events ------------------------------------------------------------------------------------
    def feed(self, event: ev.AgentEvent) -> list[BaseEvent]:
        """The AG-UI events for one agentrt event."""
        if self._done:
            return []
        if self._reply_id is None:
            self._reply_id = event.reply_id
        stream = self._stream(event.reply_id)
        out: list[BaseEvent] = []
        handler = _handler(type(event))
        if handler is not None:
            handler(self, event, stream, out)
        return out

    def _stream(self, reply_id: str) -> _Stream:
        """The stream of the call `reply_id`, opened on its first event (a subagent's unless the run's)."""
        stream = self._streams.get(reply_id)
        if stream is None:
            top = reply_id == self._reply_id
            stream = self._streams[reply_id] = _Stream(subagent=None if top else reply_id)
        return stream

    def _on_text(self, event: ev.TextDelta, stream: _Stream, out: list[BaseEvent]) -> None:
        self._close_reasoning(stream, out)
        sub = stream.subagent
        if stream.text != event.block_id:
            self._close_text(stream, out)
            stream.text = stream.parent = event.block_id
            out.append(
                TextMessageStartEvent(
                    message_id=event.block_id, role="assistant", name=event.source or None, subagent_run_id=sub
                )
            )
        if event.delta:
            out.append(TextMessageContentEvent(message_id=event.block_id, delta=event.delta, subagent_run_id=sub))

    def _on_thinking(self, event: ev.ThinkingDelta, stream: _Stream, out: list[BaseEvent]) -> None:
        self._close_text(stream, out)
        sub = stream.subagent
        if stream.reasoning != event.block_id:
            self._close_reasoning(stream, out)
            stream.reasoning = event.block_id
            out.append(ReasoningStartEvent(message_id=_span(event.block_id), subagent_run_id=sub))
            out.append(ReasoningMessageStartEvent(message_id=event.block_id, subagent_run_id=sub))
        if event.delta:
            out.append(ReasoningMessageContentEvent(message_id=event.block_id, delta=event.delta, subagent_run_id=sub))

    def _on_tool_call_started(self, event: ev.ToolCallStarted, stream: _Stream, out: list[BaseEvent]) -> None:
        self._close_text(stream, out)
        self._close_reasoning(stream, out)
        self._start_call(stream, event.tool_call_id, event.name, out)

    def _on_tool_call_delta(self, event: ev.ToolCallDelta, stream: _Stream, out: list[BaseEvent]) -> None:
        call = stream.calls.get(event.tool_call_id)
        if call is not None and event.delta:
            call.args += len(event.delta)
            out.append(
                ToolCallArgsEvent(tool_call_id=event.tool_call_id, delta=event.delta, subagent_run_id=stream.subagent)
            )

    def _on_model_call_started(self, event: ev.ModelCallStarted, stream: _Stream, out: list[BaseEvent]) -> None:
        stream.parent = None
        stream.step = f"model_call:{event.step}"
        out.append(StepStartedEvent(step_name=stream.step, subagent_run_id=stream.subagent))

    def _on_model_call_finished(self, event: ev.ModelCallFinished, stream: _Stream, out: list[BaseEvent]) -> None:
        self._close_text(stream, out)
        self._close_reasoning(stream, out)
        sub = stream.subagent
        for block in event.msg.tool_calls:
            self._start_call(stream, block.id, block.name, out)
            call = stream.calls.pop(block.id)
            if call.args == 0:
                # Some providers send a call's arguments whole, never as deltas: send them here.
                args = _json.dumps(dict(block.input))
                out.append(ToolCallArgsEvent(tool_call_id=block.id, delta=args, subagent_run_id=sub))
            out.append(ToolCallEndEvent(tool_call_id=block.id, subagent_run_id=sub))
        self._close_calls(stream, out)
        if stream.step is not None:
            out.append(StepFinishedEvent(step_name=stream.step, subagent_run_id=sub))
            stream.step = None

    def _on_model_restarted(self, event: ev.ModelRestarted, stream: _Stream, out: list[BaseEvent]) -> None:
        # The step starts over: close what it opened (AG-UI cannot retract), the retry reopens.
        self._close_text(stream, out)
        self._close_reasoning(stream, out)
        self._close_calls(stream, out)

    def _on_tool_result(self, event: ev.ToolResult, stream: _Stream, out: list[BaseEvent]) -> None:
        result = event.result
        meta: dict[str, Any] = {"state": result.state, "name": result.name, "elapsed": event.elapsed}
        cited = citation_list(result.metadata.get(META_CITATIONS)) if result.metadata else []
        if cited:
            meta["citations"] = cited
        out.append(
            ToolCallResultEvent(
                message_id=f"result-{result.id}",
                tool_call_id=result.id,
                content=result.text,
                role="tool",
                subagent_run_id=stream.subagent,
                metadata={"agentrt": meta},
            )
        )

    def _on_pause(
        self, event: ev.RequireUserConfirm | ev.RequireExternalExecution, stream: _Stream, out: list[BaseEvent]
    ) -> None:
        # Only the run's own pause ends the AG-UI run with interrupts; a subagent's is not translated.
        if stream.top:
            self._pause(stream, event, out)

    def _on_usage(self, event: ev.Usage, stream: _Stream, out: list[BaseEvent]) -> None:
        self._add_usage(event)
        value = {"model": event.model, "source": event.source, **event.usage.to_dict(), "cost_usd": event.cost_usd}
        out.append(CustomEvent(name=CUSTOM_USAGE, value=value, subagent_run_id=stream.subagent))

    def _on_context_compressed(self, event: ev.ContextCompressed, stream: _Stream, out: list[BaseEvent]) -> None:
        value = {"before_tokens": event.before_tokens, "after_tokens": event.after_tokens, "tier": event.tier}
        out.append(CustomEvent(name=CUSTOM_CONTEXT_COMPRESSED, value=value, subagent_run_id=stream.subagent))

    def _on_run_started(self, event: ev.RunStarted, stream: _Stream, out: list[BaseEvent]) -> None:
        if not stream.top:
            out.append(SubagentStartedEvent(subagent_run_id=event.reply_id, name=event.source or "subagent"))

    def _on_run_finished(self, event: ev.RunFinished, stream: _Stream, out: list[BaseEvent]) -> None:
        self._close_stream(stream, out)
        reason = event.msg.generate_reason
        if not stream.top:
            suspended = reason in (GenerateReason.AWAITING_CONFIRMATION, GenerateReason.AWAITING_EXTERNAL_EXECUTION)
            outcome: Any = SubagentFinishedSuspendedOutcome() if suspended else SubagentFinishedSuccessOutcome()
            out.append(SubagentFinishedEvent(subagent_run_id=event.reply_id, outcome=outcome))
        elif reason is GenerateReason.INTERRUPTED:
            self._outcome = RunFinishedCancelledOutcome()
        else:
            citations = citations_of(event.msg)
            if citations:
                out.append(
                    CustomEvent(name=CUSTOM_CITATIONS, value={"reply_id": event.reply_id, "citations": citations})
                )

    def _on_run_error(self, event: ev.RunError, stream: _Stream, out: list[BaseEvent]) -> None:
        self._close_stream(stream, out)
        if not stream.top:
            out.append(SubagentErrorEvent(subagent_run_id=event.reply_id, message=event.error, code=event.error_type))

    # -- helpers -------------------------------------------------------------------------------------
    def _start_call(self, stream: _Stream, call_id: str, name: str, out: list[BaseEvent]) -> None:
        if call_id in stream.calls:
            return
        stream.calls[call_id] = _Call(name=name, parent=stream.parent)
        stream.seen_calls.add(call_id)
        out.append(
            ToolCallStartEvent(
                tool_call_id=call_id,
                tool_call_name=name,
                parent_message_id=stream.parent,
                subagent_run_id=stream.subagent,
            )
        )

    def _pause(
        self, stream: _Stream, event: ev.RequireUserConfirm | ev.RequireExternalExecution, out: list[BaseEvent]
    ) -> None:
        # A resumed run that pauses again (a subagent asking) never streamed these calls: send them now.
        for call in event.tool_calls:
            if call.id not in stream.seen_calls:
                self._start_call(stream, call.id, call.name, out)
                stream.calls.pop(call.id)
                args = _json.dumps(dict(call.input))
                out.append(ToolCallArgsEvent(tool_call_id=call.id, delta=args, subagent_run_id=stream.subagent))
                out.append(ToolCallEndEvent(tool_call_id=call.id, subagent_run_id=stream.subagent))
        calls = [c.to_dict() for c in event.tool_calls]
        if isinstance(event, ev.RequireUserConfirm):
            out.append(
                CustomEvent(name=CUSTOM_REQUIRE_USER_CONFIRM, value={"reply_id": event.reply_id, "tool_calls": calls})
            )
            for call, raw in zip(event.tool_calls, calls, strict=True):
                self._interrupts.append(
                    Interrupt(
                        id=call.id,
                        reason=INTERRUPT_REASON,
                        message=f"Approve {call.name}({_json.dumps(dict(call.input))})?"
                        + (f" {call.reason}" if call.reason else ""),
                        tool_call_id=call.id,
                        response_schema=APPROVAL_RESPONSE_SCHEMA,
                        metadata={"agentrt": raw},
                    )
                )
        else:
            out.append(
                CustomEvent(
                    name=CUSTOM_REQUIRE_EXTERNAL_EXECUTION, value={"reply_id": event.reply_id, "tool_calls": calls}
                )
            )
            self._external.extend(c.id for c in event.tool_calls)

    def _add_usage(self, event: ev.Usage) -> None:
        prev = self._usage.get(event.model)
        self._usage[event.model] = event.usage if prev is None else prev + event.usage
        # A model's cost is known only while every call of it had a price (never a partial sum).
        known = self._cost.get(event.model, 0.0) if prev is not None else 0.0
        self._cost[event.model] = None if known is None or event.cost_usd is None else known + event.cost_usd

    def _usage_list(self) -> list[TokenUsage] | None:
        # agentrt counts like AG-UI: input tokens are the whole prompt, cache reads and writes included.
        return [
            _with_cost(
                TokenUsage(
                    model=model or None,
                    input_tokens=u.input_tokens,
                    output_tokens=u.output_tokens,
                    total_tokens=u.total_tokens,
                    reasoning_tokens=u.reasoning_tokens,
                    cached_input_tokens=u.cache_read_tokens,
                    cache_write_input_tokens=u.cache_write_tokens,
                ),
                self._cost.get(model),
            )
            for model, u in self._usage.items()
        ] or None

    @staticmethod
    def _close_text(stream: _Stream, out: list[BaseEvent]) -> None:
        if stream.text is not None:
            out.append(TextMessageEndEvent(message_id=stream.text, subagent_run_id=stream.subagent))
            stream.text = None

    @staticmethod
    def _close_reasoning(stream: _Stream, out: list[BaseEvent]) -> None:
        if stream.reasoning is not None:
            out.append(ReasoningMessageEndEvent(message_id=stream.reasoning, subagent_run_id=stream.subagent))
            out.append(ReasoningEndEvent(message_id=_span(stream.reasoning), subagent_run_id=stream.subagent))
            stream.reasoning = None

    @staticmethod
    def _close_calls(stream: _Stream, out: list[BaseEvent]) -> None:
        for call_id in list(stream.calls):
            del stream.calls[call_id]
            out.append(ToolCallEndEvent(tool_call_id=call_id, subagent_run_id=stream.subagent))

    def _close_stream(self, stream: _Stream, out: list[BaseEvent]) -> None:
        self._close_text(stream, out)
        self._close_reasoning(stream, out)
        self._close_calls(stream, out)
        if stream.step is not None:
            out.append(StepFinishedEvent(step_name=stream.step, subagent_run_id=stream.subagent))
            stream.step = None

    def _close_everything(self) -> list[BaseEvent]:
        out: list[BaseEvent] = []
        for stream in self._streams.values():
            self._close_stream(stream, out)
        return out


_Handler = Callable[[EventTranslator, Any, _Stream, list[BaseEvent]], None]
"""Translates one kind of agentrt event: appends the AG-UI events for it to the list."""

_HANDLERS: dict[type[ev.AgentEvent], _Handler] = {
    ev.TextDelta: EventTranslator._on_text,
    ev.ThinkingDelta: EventTranslator._on_thinking,
    ev.ToolCallStarted: EventTranslator._on_tool_call_started,
    ev.ToolCallDelta: EventTranslator._on_tool_call_delta,
    ev.ModelCallStarted: EventTranslator._on_model_call_started,
    ev.ModelCallFinished: EventTranslator._on_model_call_finished,
    ev.ModelRestarted: EventTranslator._on_model_restarted,
    ev.ToolResult: EventTranslator._on_tool_result,
    ev.RequireUserConfirm: EventTranslator._on_pause,
    ev.RequireExternalExecution: EventTranslator._on_pause,
    ev.Usage: EventTranslator._on_usage,
    ev.ContextCompressed: EventTranslator._on_context_compressed,
    ev.RunStarted: EventTranslator._on_run_started,
    ev.RunFinished: EventTranslator._on_run_finished,
    ev.RunError: EventTranslator._on_run_error,
}


def _handler(cls: type[ev.AgentEvent]) -> _Handler | None:
    """The handler of an event class, or of its nearest base class that has one (subclasses count as it)."""
    for klass in cls.__mro__:
        handler = _HANDLERS.get(klass)
        if handler is not None:
            return handler
    return None


def _span(block_id: str) -> str:
    return f"reasoning-{block_id}"


def _with_cost(usage: TokenUsage, cost: float | None) -> TokenUsage:
    """`usage` with the extension field ``costUsd`` (US dollars; AG-UI's usage admits extra fields) when known."""
    if cost is not None:
        setattr(usage, "costUsd", cost)  # noqa: B010 - an extra field of a pydantic model
    return usage
