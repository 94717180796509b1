"""Server-initiated requests for `McpClient`: sampling and elicitation, attributed to tool calls.

Server-initiated requests (``sampling/createMessage``, ``elicitation/create``) are answered by
`Inbound`, which the client hands to the SDK session. They are attributed to the tool call that
caused them: over streamable HTTP the SDK runs the callback in the caller's context (so
`current_mcp_call` is set); otherwise the single call in flight on the client, if there is one.

A question (an elicitation, or a sampling approval) goes to the application's
``elicitation_handler`` when there is one; otherwise to the human of the agent run that made the
call, through the call's `ToolCallScope.ask_user` (announced by an ``mcp_elicitation`` event,
answered with ``agent.answer``); with neither, it is declined. The server is untrusted: a form
whose schema is not the spec's flat object, or a URL that is not plain http(s), is declined
without asking, and answers are validated before they are sent.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import mcp_types

from agentrt.errors import UsageLimitExceeded, UserError
from agentrt.mcp._content import sampling_messages
from agentrt.message import Msg
from agentrt.tool.questions import (
    SAMPLING_SCHEMA,
    ElicitationAnswer,
    McpElicitation,
    McpElicitationClosed,
    UserQuestion,
    schema_problem,
    url_problem,
)

if TYPE_CHECKING:
    from agentrt.context import RuntimeContext
    from agentrt.model.base import ChatModel
    from agentrt.tool.scope import ToolCallScope

__all__ = [
    "DEFAULT_ELICITATION_TIMEOUT",
    "SAMPLING_SCHEMA",
    "ElicitationAnswer",
    "ElicitationHandler",
    "ElicitationRequest",
    "McpCall",
    "McpElicitation",
    "McpElicitationClosed",
    "SamplingApproval",
    "SamplingRequest",
    "current_mcp_call",
]

logger = logging.getLogger("agentrt.mcp")

USER_REJECTED = -1
"""The JSON-RPC error code the MCP spec suggests for a sampling request the user rejected."""
DEFAULT_ELICITATION_TIMEOUT = 600.0
"""Seconds a question put to the run's human waits for the answer before it is cancelled."""


# --------------------------------------------------------------------------------------------------
# public types
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingRequest:
    """A server's ``sampling/createMessage``, as agentrt messages (given to a sampling approval)."""

    server: str
    messages: list[Msg]
    system_prompt: str | None = None
    max_tokens: int = 0
    temperature: float | None = None
    stop_sequences: list[str] = field(default_factory=list)
    model_hints: list[str] = field(default_factory=list)
    tool: str = ""
    """The server's name of the tool whose call caused the request ("" when unknown)."""
    tool_call_id: str = ""
    ctx: RuntimeContext | None = None
    """The context of the agent run that called the tool, when known (route the question to its user)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ElicitationRequest:
    """A question for the user from an MCP server (given to the client's ``elicitation_handler``).

    `mode` is ``form`` (answer with content matching `requested_schema`), ``url`` (the user
    should open `url`; accept means they agreed to) or ``sampling`` (approve `sampling`: accept
    approves, unless the content says ``{"approve": false}``).
    """

    server: str
    mode: Literal["form", "url", "sampling"]
    message: str
    requested_schema: dict[str, Any] | None = None
    url: str | None = None
    elicitation_id: str | None = None
    sampling: SamplingRequest | None = None
    tool: str = ""
    tool_call_id: str = ""
    ctx: RuntimeContext | None = None


ElicitationHandler: TypeAlias = Callable[
    [ElicitationRequest], Awaitable["ElicitationAnswer | Mapping[str, Any] | bool | None"]
]
"""``async (request) -> answer``: an `ElicitationAnswer`, a mapping (accept with that content),
True (accept without content), False or None (decline)."""
SamplingApproval: TypeAlias = Callable[[SamplingRequest], Awaitable[bool]]
"""``async (request) -> bool``: whether the server may have the model answer this request."""


# --------------------------------------------------------------------------------------------------
# attribution of server requests to tool calls
# --------------------------------------------------------------------------------------------------
@dataclass(slots=True)
class McpCall:
    """A tool call in flight: the scope and call id it runs under (None / "" outside an executor)."""

    tool: str
    scope: ToolCallScope | None = None
    tool_call_id: str = ""
    asking: set[asyncio.Future[ElicitationAnswer]] = field(default_factory=set)
    """The questions of this call waiting for the run's human."""

    @property
    def ctx(self) -> RuntimeContext | None:
        return self.scope.ctx if self.scope is not None else None

    def withdraw(self) -> None:
        """The call ended: its questions still waiting are cancelled (the server is told "cancel")."""
        for waiting in list(self.asking):
            waiting.cancel()


current_mcp_call: contextvars.ContextVar[McpCall | None] = contextvars.ContextVar("agentrt_mcp_call", default=None)
"""The MCP tool call the current task makes (set by the registered tools' handler)."""


# --------------------------------------------------------------------------------------------------
# sampling and elicitation
# --------------------------------------------------------------------------------------------------
def _stop_reason(reply: Msg) -> str:
    reason = str(reply.metadata.get("finish_reason") or "")
    if reason in ("length", "max_tokens", "max_output_tokens", "MAX_TOKENS"):
        return "maxTokens"
    if reason in ("stop_sequence", "stopSequence"):
        return "stopSequence"
    return "endTurn"


class Inbound:
    """Answers a server's sampling and elicitation requests for one client."""

    __slots__ = ("_approval", "_elicitation", "_inflight", "_model", "_name", "_timeout")

    def __init__(
        self,
        name: Callable[[], str],
        inflight: Callable[[], Sequence[McpCall]],
        *,
        sampling_model: ChatModel | str | None,
        sampling_approval: bool | SamplingApproval,
        elicitation_handler: ElicitationHandler | None,
        elicitation_timeout: float | None = DEFAULT_ELICITATION_TIMEOUT,
    ) -> None:
        if elicitation_timeout is not None and (
            isinstance(elicitation_timeout, bool)
            or not isinstance(elicitation_timeout, (int, float))
            or not elicitation_timeout > 0
        ):
            raise UserError(
                f"McpClient elicitation_timeout must be positive seconds or None, not {elicitation_timeout!r}"
            )
        if sampling_approval not in (True, False) and not callable(sampling_approval):
            raise UserError(
                f"McpClient sampling_approval must be a bool or an async callable, not {sampling_approval!r}"
            )
        if elicitation_handler is not None and not callable(elicitation_handler):
            raise UserError(f"McpClient elicitation_handler must be an async callable, not {elicitation_handler!r}")
        self._name = name
        self._inflight = inflight
        self._model = sampling_model
        self._approval = sampling_approval
        self._elicitation = elicitation_handler
        self._timeout = float(elicitation_timeout) if elicitation_timeout is not None else None

    @property
    def timeout(self) -> float | None:
        """Seconds a question put to the run's human waits at most (None: no limit)."""
        return self._timeout

    @property
    def samples(self) -> bool:
        """Whether sampling is offered to servers (a model was given)."""
        return self._model is not None

    def _call(self) -> McpCall:
        call = current_mcp_call.get()
        if call is not None:
            return call
        inflight = self._inflight()
        return inflight[0] if len(inflight) == 1 else McpCall(tool="")

    def _model_instance(self) -> ChatModel:
        model = self._model
        if isinstance(model, str):
            from agentrt.model.registry import model_from_id

            model = self._model = model_from_id(model)
        assert model is not None
        return model

    async def sampling(
        self, context: Any, params: mcp_types.CreateMessageRequestParams
    ) -> mcp_types.CreateMessageResult | mcp_types.ErrorData:
        """The SDK's sampling callback: approval (if asked for), then the model."""
        from agentrt.model.base import GenerateOptions

        call = self._call()
        hints = [h.name for h in (params.model_preferences.hints or [])] if params.model_preferences else []
        request = SamplingRequest(
            server=self._name(),
            messages=sampling_messages(params),
            system_prompt=params.system_prompt,
            max_tokens=params.max_tokens,
            temperature=params.temperature,
            stop_sequences=list(params.stop_sequences or []),
            model_hints=[h for h in hints if h],
            tool=call.tool,
            tool_call_id=call.tool_call_id,
            ctx=call.ctx,
        )
        if self._approval is not False and not await self._approved(request, call):
            return mcp_types.ErrorData(code=USER_REJECTED, message="The user rejected the sampling request")
        scope = call.scope
        meter = scope.meter if scope is not None else None
        try:
            model = self._model_instance()
            if meter is not None:
                meter.before(model)  # the run's usage limits: refused rather than sent past them
        except UsageLimitExceeded as exc:
            logger.info("MCP server %r: sampling refused: %s", request.server, exc)
            return mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=f"Sampling refused: {exc}")
        except Exception as exc:
            logger.warning("MCP server %r: sampling failed: %s", request.server, _describe(exc))
            return mcp_types.ErrorData(code=mcp_types.INTERNAL_ERROR, message=f"Sampling failed: {_describe(exc)}")
        try:
            system = [Msg.system(params.system_prompt)] if params.system_prompt else []
            options = GenerateOptions(
                max_tokens=params.max_tokens, temperature=params.temperature, stop=params.stop_sequences or None
            )
            reply = await model.generate([*system, *request.messages], (), options)
        except Exception as exc:
            logger.warning("MCP server %r: sampling failed: %s", request.server, _describe(exc))
            return mcp_types.ErrorData(code=mcp_types.INTERNAL_ERROR, message=f"Sampling failed: {_describe(exc)}")
        if meter is not None:
            meter.after(model, reply.usage)  # tokens and cost, at the sampling model's price
        elif scope is not None and scope.add_usage is not None and reply.usage is not None:
            scope.add_usage(reply.usage)
        return mcp_types.CreateMessageResult(
            role="assistant",
            content=mcp_types.TextContent(type="text", text=reply.text),
            model=model.id,
            stop_reason=_stop_reason(reply),
        )

    async def _approved(self, request: SamplingRequest, call: McpCall) -> bool:
        try:
            if callable(self._approval):
                return bool(await self._approval(request))
            text = "\n".join(f"{m.role}: {m.text}" for m in request.messages)
            question = ElicitationRequest(
                server=request.server,
                mode="sampling",
                message=f"MCP server {request.server!r} asks the model to answer:\n{text}\nAllow?",
                requested_schema=SAMPLING_SCHEMA,
                sampling=request,
                tool=call.tool,
                tool_call_id=call.tool_call_id,
                ctx=call.ctx,
            )
            answer = await self._ask(question, call)
        except Exception as exc:
            logger.warning("MCP server %r: sampling approval failed: %s", request.server, _describe(exc))
            return False
        return answer.action == "accept" and (answer.content or {}).get("approve", True) is not False

    async def elicitation(
        self, context: Any, params: mcp_types.ElicitRequestFormParams | mcp_types.ElicitRequestURLParams
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        """The SDK's elicitation callback: the application's handler, the run's human, or decline."""
        call = self._call()
        if isinstance(params, mcp_types.ElicitRequestURLParams):
            question = ElicitationRequest(
                server=self._name(),
                mode="url",
                message=params.message,
                url=params.url,
                elicitation_id=params.elicitation_id,
                tool=call.tool,
                tool_call_id=call.tool_call_id,
                ctx=call.ctx,
            )
        else:
            question = ElicitationRequest(
                server=self._name(),
                mode="form",
                message=params.message,
                requested_schema=dict(params.requested_schema),
                tool=call.tool,
                tool_call_id=call.tool_call_id,
                ctx=call.ctx,
            )
        try:
            answer = await self._ask(question, call)
        except Exception as exc:
            logger.warning(
                "MCP server %r: elicitation handler failed: %s: %s", question.server, type(exc).__name__, exc
            )
            answer = ElicitationAnswer.cancel()
        content = dict(answer.content) if answer.action == "accept" and answer.content is not None else None
        if question.mode == "url":
            content = None  # URL mode answers carry no content
        try:
            return mcp_types.ElicitResult(action=answer.action, content=content)
        except ValueError as exc:  # pydantic: content values must be flat (str, number, bool, list of str)
            logger.warning("MCP server %r: unusable elicitation answer: %s", question.server, _describe(exc))
            return mcp_types.ElicitResult(action="cancel")

    async def _ask(self, question: ElicitationRequest, call: McpCall) -> ElicitationAnswer:
        """The answer of the application's handler, else of the run's human, else decline."""
        scope = call.scope
        if self._elicitation is not None:
            self._inform(question, call)
            return _as_answer(await self._elicitation(question))
        if scope is None or scope.ask is None:
            self._inform(question, call)  # nobody can answer: a UI still learns the run was asked
            return ElicitationAnswer.decline()
        problem = _question_problem(question)
        if problem is not None:
            logger.warning("MCP server %r: declined a question that cannot be shown: %s", question.server, problem)
            return ElicitationAnswer.decline()
        asked = UserQuestion(
            mode=question.mode,
            message=question.message,
            requested_schema=question.requested_schema,
            url=question.url,
            server=question.server,
            tool=call.tool,
            tool_call_id=call.tool_call_id,
            timeout=self._timeout,
        )
        waiting: asyncio.Future[ElicitationAnswer] = asyncio.ensure_future(scope.ask_user(asked))
        call.asking.add(waiting)
        try:
            return await waiting
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if waiting.cancelled() and (task is None or not task.cancelling()):
                return ElicitationAnswer.cancel()  # withdrawn because the tool call ended
            raise
        finally:
            call.asking.discard(waiting)

    def _inform(self, question: ElicitationRequest, call: McpCall) -> None:
        scope = call.scope
        if scope is not None:
            scope.event(
                McpElicitation,
                tool_call_id=call.tool_call_id,
                server=question.server,
                tool=call.tool,
                mode=question.mode,
                message=question.message,
                requested_schema=question.requested_schema,
                url=question.url,
            )


def _question_problem(question: ElicitationRequest) -> str | None:
    """Why a server's question cannot be put to a human safely (None when it can)."""
    if question.mode == "url":
        return url_problem(question.url)
    if question.mode == "form":
        return schema_problem(question.requested_schema)
    return None


def _as_answer(value: Any) -> ElicitationAnswer:
    if isinstance(value, ElicitationAnswer):
        return value
    if value is True:
        return ElicitationAnswer.accept()
    if value is None or value is False:
        return ElicitationAnswer.decline()
    if isinstance(value, Mapping):
        return ElicitationAnswer.accept(value)
    raise UserError(
        f"an elicitation_handler must return an ElicitationAnswer, a mapping, a bool or None, not {value!r}"
    )


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
