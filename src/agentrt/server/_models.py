"""Request and response bodies of the HTTP API, as pydantic models.

Requests are validated with them (a failure is a 422 that names the field); responses are built
from the runtime's own JSON forms and the models only document them in the OpenAPI schema. The
message models mirror `Msg.to_dict` exactly, so a client can send back what it received.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

__all__ = [
    "AgentInfo",
    "AgentList",
    "AnswerRequest",
    "AnswerResponse",
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatCompletionRequest",
    "ConfirmRequest",
    "ErrorResponse",
    "HealthResponse",
    "InterruptRequest",
    "InterruptResponse",
    "KnowledgeCitation",
    "MessageRequest",
    "MessageResponse",
    "MsgModel",
    "QuestionList",
    "QuestionModel",
    "SessionList",
    "SessionState",
    "ToolResultsRequest",
]

_REQUEST = ConfigDict(extra="forbid")
_LENIENT = ConfigDict(extra="allow")


# -- messages (the Msg JSON form) ---------------------------------------------------------------------
class Base64SourceModel(BaseModel):
    """Inline media."""

    media_type: str
    data: str


MediaSource = str | Base64SourceModel


class TextBlockModel(BaseModel):
    """A text block."""

    type: Literal["text"]
    text: str


class ThinkingBlockModel(BaseModel):
    """Model reasoning."""

    type: Literal["thinking"]
    thinking: str
    signature: str | None = None
    metadata: dict[str, Any] | None = None


class ImageBlockModel(BaseModel):
    """An image (URL or base64)."""

    type: Literal["image"]
    source: MediaSource


class AudioBlockModel(BaseModel):
    """Audio (URL or base64)."""

    type: Literal["audio"]
    source: MediaSource


class VideoBlockModel(BaseModel):
    """Video (URL or base64)."""

    type: Literal["video"]
    source: MediaSource


class ToolUseBlockModel(BaseModel):
    """A tool call."""

    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] | None = None


class ToolResultBlockModel(BaseModel):
    """The result of a tool call."""

    type: Literal["tool_result"]
    id: str
    name: str
    output: str | list[Block] = ""
    state: Literal["success", "error", "denied", "interrupted"] = "success"
    metadata: dict[str, Any] | None = None


Block = Annotated[
    TextBlockModel
    | ThinkingBlockModel
    | ImageBlockModel
    | AudioBlockModel
    | VideoBlockModel
    | ToolUseBlockModel
    | ToolResultBlockModel,
    Field(discriminator="type"),
]
ToolResultBlockModel.model_rebuild()


class UsageModel(BaseModel):
    """Tokens spent."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0


class MsgModel(BaseModel):
    """A message (`Msg.to_dict` form). `content` may be a plain string for one text block."""

    role: Literal["user", "assistant", "system"]
    content: str | list[Block] = Field(default_factory=list)
    name: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    id: str = Field(default="", description="Kept when given; a fresh id otherwise.")
    timestamp: float = Field(default=0.0, description="Seconds since the epoch; now when omitted.")
    usage: UsageModel | None = None


# -- requests -------------------------------------------------------------------------------------------------
class MessageRequest(BaseModel):
    """Send input to a session."""

    model_config = _REQUEST
    input: str | list[MsgModel] = Field(description="A user text, or a list of messages in `Msg` JSON form.")
    stream: StrictBool = Field(default=False, description="Answer with an SSE stream of the run's events.")


class PermissionRuleModel(BaseModel):
    """A permission rule to remember for the rest of the session."""

    model_config = _REQUEST
    tool: str = Field(min_length=1, description="Glob over tool names.")
    decision: Literal["allow", "ask", "deny"] = "allow"
    args: dict[str, str] | None = None
    source: str = "session"


class ConfirmItem(BaseModel):
    """The answer to one pending approval."""

    model_config = _REQUEST
    tool_call_id: str = Field(min_length=1)
    confirmed: StrictBool
    input: dict[str, Any] | None = Field(default=None, description="Edited arguments to run the call with.")
    rules: list[PermissionRuleModel] = Field(default_factory=list)
    reason: str = ""
    name: str | None = None


class ConfirmRequest(BaseModel):
    """Answer the session's pending approvals."""

    model_config = _REQUEST
    results: list[ConfirmItem] = Field(min_length=1)
    text: str = Field(default="", description="A note that joins the history after the results.")
    stream: StrictBool = False


class ToolResultItem(BaseModel):
    """The result of one externally executed tool call."""

    model_config = _REQUEST
    tool_call_id: str = Field(min_length=1)
    output: str | list[Block]
    state: Literal["success", "error"] = "success"
    name: str = ""


class ToolResultsRequest(BaseModel):
    """Send the results of the session's pending external tool calls."""

    model_config = _REQUEST
    results: list[ToolResultItem] = Field(min_length=1)
    stream: StrictBool = False


class InterruptRequest(BaseModel):
    """Interrupt the session's running call."""

    model_config = _REQUEST
    message: str | None = Field(default=None, description="A user message added to the history after the stop.")


class AnswerRequest(BaseModel):
    """The human's answer to a question the running call asked (an MCP server's elicitation)."""

    model_config = _REQUEST
    question_id: str = Field(
        min_length=1, max_length=200, description="The `question_id` of the `mcp_elicitation` event."
    )
    action: Literal["accept", "decline", "cancel"] = Field(
        description="`accept` (with `content` for a form; for a URL: the user agrees to visit it), `decline` or "
        "`cancel`."
    )
    content: dict[str, Any] | None = Field(
        default=None,
        description="The form's values when accepting: an object with only the requested fields, each a string, "
        "number, boolean or list of strings valid for its schema.",
    )


# -- responses ------------------------------------------------------------------------------------------------
class MessageResponse(BaseModel):
    """The reply of a call."""

    message: MsgModel
    session_id: str


class InterruptResponse(BaseModel):
    """Whether a call was running (on this server) and got interrupted."""

    interrupted: bool


class PendingCall(BaseModel):
    """A tool call waiting for the caller."""

    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)
    kind: Literal["confirm", "external"]
    reason: str = ""
    suggested_rules: list[dict[str, Any]] = Field(default_factory=list)


class PendingModel(BaseModel):
    """What a paused session waits for."""

    reply_id: str | None = None
    tool_calls: list[PendingCall]


class QuestionModel(BaseModel):
    """A question the running call waits for its human to answer (see the `mcp_elicitation` event)."""

    id: str
    mode: Literal["form", "url", "sampling"] = Field(
        description="`form`: fill `requested_schema`; `url`: agree to visit `url`; `sampling`: allow the MCP server "
        "to have the model answer a prompt."
    )
    message: str = Field(description="The question, as the (untrusted) MCP server wrote it: show it as text.")
    requested_schema: dict[str, Any] | None = None
    url: str | None = Field(default=None, description="Show it (with its host); never open it for the user.")
    server: str = ""
    tool: str = ""
    tool_call_id: str = ""
    asked_at: float
    expires_at: float | None = Field(default=None, description="When it is cancelled if unanswered (epoch seconds).")
    source: str = Field(default="", description="The agent whose run asks (a subagent's name for its questions).")
    session_id: str = ""


class QuestionList(BaseModel):
    """The open questions of a session's running call (on this server)."""

    questions: list[QuestionModel]


class AnswerResponse(BaseModel):
    """The answer was taken: the asking tool (the MCP server) has it."""

    answered: bool
    question_id: str
    action: Literal["accept", "decline", "cancel"]


class SessionState(BaseModel):
    """A session's stored state and history."""

    agent: str
    session_id: str
    messages: list[MsgModel]
    message_count: int
    summary: str | None = None
    rules: list[dict[str, Any]] = Field(default_factory=list)
    pending: PendingModel | None = None
    active_groups: list[str] | None = None
    revision: int
    created_at: float
    updated_at: float
    running: bool = Field(description="Whether a call on this session runs on this server now.")
    questions: list[QuestionModel] = Field(
        default_factory=list, description="Questions the running call waits for its human to answer (this server)."
    )


class SessionInfoModel(BaseModel):
    """A session in a listing."""

    session_id: str
    message_count: int
    revision: int
    updated_at: float


class SessionList(BaseModel):
    """The caller's sessions with one agent, most recently updated first."""

    sessions: list[SessionInfoModel]


class AgentInfo(BaseModel):
    """An agent served by this app."""

    name: str
    description: str = ""


class AgentList(BaseModel):
    """The agents served by this app."""

    agents: list[AgentInfo]


class HealthResponse(BaseModel):
    """Health or readiness."""

    status: str
    problems: list[str] = Field(default_factory=list)


class ErrorBody(BaseModel):
    """An error."""

    type: str
    code: str = Field(min_length=1, description="Never null: a stable identifier clients can branch on.")
    message: str
    param: str | None
    details: list[dict[str, Any]] | None = None


class ErrorResponse(BaseModel):
    """The body of every error response."""

    error: ErrorBody


# -- OpenAI Chat Completions ------------------------------------------------------------------------------
class ImageUrl(BaseModel):
    """An image reference in a content part."""

    model_config = _LENIENT
    url: str


class ChatContentPart(BaseModel):
    """A part of a multi-part message content (text and image_url are understood)."""

    model_config = _LENIENT
    type: str
    text: str | None = None
    image_url: ImageUrl | None = None


class ChatFunctionCall(BaseModel):
    """The function of a tool call."""

    model_config = _LENIENT
    name: str
    arguments: str = ""


class ChatToolCall(BaseModel):
    """A tool call in an assistant message."""

    model_config = _LENIENT
    id: str
    type: str = "function"
    function: ChatFunctionCall


class ChatMessage(BaseModel):
    """A Chat Completions message."""

    model_config = _LENIENT
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ChatContentPart] | None = None
    name: str | None = None
    tool_calls: list[ChatToolCall] | None = None
    tool_call_id: str | None = None


class StreamOptions(BaseModel):
    """Streaming options."""

    model_config = _LENIENT
    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    """A Chat Completions request; `model` names the agent. Sampling fields are accepted and ignored."""

    model_config = _LENIENT
    model: str = Field(min_length=1, description="The agent's name.")
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = Field(default=None, description="Used as the session id when X-Session-Id is absent.")
    n: int | None = Field(default=None, ge=1, le=1, description="Only one choice is supported.")


class ChatResponseMessage(BaseModel):
    """The assistant message of a completion."""

    role: Literal["assistant"]
    content: str | None
    refusal: str | None = None
    tool_calls: list[ChatToolCall] | None = None


class ChatChoice(BaseModel):
    """One choice."""

    index: int
    message: ChatResponseMessage
    finish_reason: Literal["stop", "length", "tool_calls", "content_filter", "function_call"]
    logprobs: None = None


class ChatUsage(BaseModel):
    """Token usage."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class KnowledgeCitation(BaseModel):
    """A knowledge passage a reply cites (an entry of the reply's ``metadata["citations"]``)."""

    chunk_id: str
    source: str = Field(description="The document: a path, a URL or a name given when it was added.")
    title: str | None = None
    location: str | None = Field(default=None, description="Page, section (heading path) or both.")


_CITATIONS = (
    "agentrt extension: the knowledge passages the reply cites, when the agent has knowledge and used some "
    "(absent otherwise)."
)


class ChatCompletion(BaseModel):
    """A Chat Completions response."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: ChatUsage
    citations: list[KnowledgeCitation] | None = Field(default=None, description=_CITATIONS)


class ChatCompletionChunk(BaseModel):
    """One ``data:`` frame of a streamed completion (the stream ends with ``data: [DONE]``)."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[dict[str, Any]]
    usage: ChatUsage | None = None
    citations: list[KnowledgeCitation] | None = Field(
        default=None, description=_CITATIONS + " Only on the chunk carrying `finish_reason`."
    )
