"""The agentrt exception hierarchy.

Errors are split by who has to act on them::

    AgentrtError
    ├── UserError                      the application developer misused the API
    │   ├── InvalidValueError          a bad value: a role, an id, a state (also a ValueError)
    │   ├── InvalidTypeError           a value of the wrong type (also a TypeError)
    │   ├── NotPendingError            an answer for a tool call that does not wait (stale,
    │   │                              already answered, interrupted, or never asked)
    │   ├── InvalidAnswerError         an answer to a question (MCP elicitation) that does not fit
    │   │                              it: its content fails the requested schema (also a ValueError)
    │   ├── SkillError                 a skill folder or its SKILL.md cannot be used (names the
    │   │                              file and line)
    │   └── ToolDefinitionError        a function cannot become a tool (also a ToolError)
    ├── ModelError                     the model or its provider failed
    │   ├── ModelAPIError              the provider answered with an error status
    │   │   ├── RateLimitError         429; carries retry_after
    │   │   ├── AuthenticationError    401 / 403
    │   │   └── ContextWindowExceededError
    │   ├── ModelTimeoutError
    │   ├── ModelConnectionError
    │   ├── ModelBehaviorError         the model produced something unusable (garbage chunks,
    │   │   │                          empty replies)
    │   │   └── StructuredOutputError  no answer matching the output schema within the retries
    │   └── UnexpectedModelCallError   a ScriptedModel ran out of steps
    ├── ToolError                      a tool could not be registered or found
    │   ├── ToolDefinitionError
    │   ├── DuplicateToolError
    │   ├── ToolArgumentsError         arguments failed validation (sent back to the model)
    │   └── McpError                   an MCP server failed or refused a request
    │       └── McpConnectionError     it could not be started or reached, or the connection died
    │           └── McpCallLostError   the connection died during a call that was not re-sent
    ├── UsageLimitExceeded             a call reached one of its `UsageLimits` (requests, tokens,
    │                                  tool calls, cost); its work so far is saved in the session
    └── StateStoreError                the state store failed
        ├── StateConflictError         a write raced another writer (stale revision)
        └── SessionBusyError           the session lock could not be acquired in time

`ToolRetry` and `ToolSuspended` are not errors of the runtime but signals a tool raises: the
first sends a message back to the model (the run continues), the second pauses the run until
the caller answers (an agent-as-tool waiting for approval). They sit outside the tree.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AgentrtError",
    "AuthenticationError",
    "ContextWindowExceededError",
    "DuplicateToolError",
    "FencedError",
    "InvalidAnswerError",
    "InvalidTypeError",
    "InvalidValueError",
    "MissingExtraError",
    "McpCallLostError",
    "McpConnectionError",
    "McpError",
    "NotPendingError",
    "ModelAPIError",
    "ModelBehaviorError",
    "ModelConnectionError",
    "ModelError",
    "ModelTimeoutError",
    "RateLimitError",
    "SessionBusyError",
    "RunLimitError",
    "SkillError",
    "StateConflictError",
    "StateStoreError",
    "StructuredOutputError",
    "ToolArgumentsError",
    "ToolDefinitionError",
    "ToolError",
    "ToolRetry",
    "ToolSuspended",
    "UnexpectedModelCallError",
    "UsageLimitExceeded",
    "UserError",
]


class AgentrtError(Exception):
    """Root of every error agentrt raises on purpose."""


class UserError(AgentrtError):
    """The application developer used the API in a way that cannot work; the message says how to fix it."""


class MissingExtraError(UserError, ImportError):
    """A feature needs a package of an extra that is not installed; the message names the extra.

    Also an `ImportError`, so code that probes for optional features with ``except ImportError``
    keeps working.
    """

    def __init__(self, feature: str, extra: str, missing: str | None = None) -> None:
        self.feature = feature
        self.extra = extra
        detail = f" (no module named {missing!r})" if missing else ""
        super().__init__(f"{feature} needs agentrt[{extra}]{detail}: pip install 'agentrt[{extra}]'")
        self.name = missing


class InvalidValueError(UserError, ValueError):
    """A value the API cannot accept (a role, an id, a block state); also a `ValueError`."""


class InvalidTypeError(UserError, TypeError):
    """A value of the wrong type (e.g. a non-block in `Msg.content`); also a `TypeError`."""


class NotPendingError(UserError):
    """An approval or a result for tool calls that do not wait for one in this session.

    Raised for a repeated or stale approval (the call was already answered, ended as interrupted,
    or never asked), so an approval is spent exactly once. `tool_call_ids` names the calls.
    """

    def __init__(self, message: str, tool_call_ids: list[str] | tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.tool_call_ids = tuple(tool_call_ids)


class InvalidAnswerError(UserError, ValueError):
    """An answer that does not fit the question it answers (an MCP server's form, a URL, an approval).

    Raised by ``agent.answer`` before anything reaches the asking tool or server; the question stays
    open for a corrected answer. `problems` lists ``{"field": name or "", "message": text}``, one per
    invalid field (``""`` for the answer as a whole).
    """

    def __init__(self, message: str, *, question_id: str = "", problems: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.question_id = question_id
        self.problems = problems or []


class SkillError(UserError):
    """A skill folder, its SKILL.md front matter or a file asked of it cannot be used.

    The message starts with ``file:line:`` when the problem has a place; `path` and `line` hold them
    (None when unknown).
    """

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        where = f"{path}:{line}: " if path and line else f"{path}: " if path else ""
        super().__init__(f"{where}{message}")
        self.path = path
        self.line = line


class UsageLimitExceeded(AgentrtError):  # noqa: N818 - the name the public API contract fixes
    """A call reached one of its usage limits (`agentrt.agent.usage.UsageLimits`) and was stopped.

    Raised to the caller after the call's work was checkpointed: the session holds the input and
    every completed step (a tool call that was not run gets a result saying so), and a later call on
    the session continues it.

    Attributes:
        limit: Which limit: ``"requests"``, ``"input_tokens"``, ``"output_tokens"``,
            ``"total_tokens"``, ``"tool_calls"`` or ``"cost_usd"``.
        limit_value: The limit that was set.
        used: What the call had used of it when it stopped: for ``requests`` and ``tool_calls``
            what the next step would have reached (it was not started), for tokens and cost what
            was spent.
        usage: Everything the call had spent (an `agentrt.agent.usage.RunUsage`).
        agent: The name of the agent whose limit it was (a parent's, when a subagent running
            inside its call spent the parent's budget).
    """

    def __init__(
        self,
        message: str,
        *,
        limit: str,
        limit_value: float,
        used: float,
        usage: Any = None,
        agent: str = "",
    ) -> None:
        super().__init__(message)
        self.limit = limit
        self.limit_value = limit_value
        self.used = used
        self.usage = usage
        self.agent = agent


class ModelError(AgentrtError):
    """A model call failed."""


class ModelAPIError(ModelError):
    """The provider answered with an error status."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        body: Any = None,
        model: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = body
        self.model = model
        self.retry_after = retry_after

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild_api_error,
            (type(self), str(self), self.status, self.body, self.model, self.retry_after),
        )


def _rebuild_api_error(
    cls: type[ModelAPIError],
    message: str,
    status: int | None,
    body: Any,
    model: str | None,
    retry_after: float | None,
) -> ModelAPIError:
    return cls(message, status=status, body=body, model=model, retry_after=retry_after)


class RateLimitError(ModelAPIError):
    """The provider rate-limited the request (HTTP 429)."""


class AuthenticationError(ModelAPIError):
    """The provider rejected the credentials (HTTP 401 or 403)."""


class ContextWindowExceededError(ModelAPIError):
    """The prompt does not fit the model's context window."""


class ModelTimeoutError(ModelError):
    """The model did not answer, or stopped streaming, within the timeout."""


class ModelConnectionError(ModelError):
    """The provider could not be reached."""


class ModelBehaviorError(ModelError):
    """The model produced output the runtime cannot use (malformed chunks, empty replies)."""


class StructuredOutputError(ModelBehaviorError):
    """The model did not produce output matching the requested schema within the allowed retries."""


class UnexpectedModelCallError(ModelError):
    """A `ScriptedModel` was called more times than it has steps."""


class ToolError(AgentrtError):
    """A tool could not be registered, found or described."""


class ToolDefinitionError(ToolError, UserError):
    """A function cannot be turned into a tool; the message names the offending parameter."""


class DuplicateToolError(ToolError, UserError):
    """A tool with this name is already registered."""


class ToolArgumentsError(ToolError):
    """Tool arguments failed validation; the message names each bad field and is shown to the model."""

    def __init__(self, message: str, *, errors: list[dict[str, object]] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or []


class McpError(ToolError):
    """An MCP server failed or refused a request; `server` names it."""

    def __init__(self, message: str, *, server: str = "") -> None:
        super().__init__(message)
        self.server = server


class McpConnectionError(McpError):
    """An MCP server could not be started or reached, or the connection to it was lost.

    `retryable` is False when trying again cannot help (command not found, bad URL);
    `restarted` tells, for a connection lost during a call, whether it has been re-established.
    """

    def __init__(self, message: str, *, server: str = "", retryable: bool = True, restarted: bool = False) -> None:
        super().__init__(message, server=server)
        self.retryable = retryable
        self.restarted = restarted


class McpCallLostError(McpConnectionError):
    """The connection died while a tool call not known to be idempotent was in flight.

    The call may or may not have run on the server; it was not sent again. `restarted` says
    whether a new connection is up; `tool` names the server's tool.
    """

    def __init__(self, message: str, *, server: str = "", tool: str = "", restarted: bool = False) -> None:
        super().__init__(message, server=server, restarted=restarted)
        self.tool = tool


class StateStoreError(AgentrtError):
    """The state store failed to load or save a session."""


class StateConflictError(StateStoreError):
    """A write carried a stale revision: another writer changed the session first."""


class FencedError(StateStoreError):
    """A write carried a fencing token older than the current one: its holder lost the lease.

    A process that held a session's lock (or a durable run's job) and was paused or cut off past
    its lease may not write when it wakes up: another holder took over. Never retried or merged.
    """


class SessionBusyError(StateStoreError):
    """The session lock could not be acquired within the wait timeout."""


class RunLimitError(UserError):
    """A user already has as many durable runs waiting or running as the deployment allows.

    Raised by `agentrt.server.jobs.DurableRuns.submit` before anything is recorded (the message
    is not stored and no worker sees it); the server answers HTTP 429 ``too_many_runs`` with a
    ``Retry-After``.

    Attributes:
        user_id: Whose runs.
        limit: The per-user limit (runs submitted and not yet finished, across the cluster).
    """

    def __init__(self, message: str, *, user_id: str, limit: int) -> None:
        super().__init__(message)
        self.user_id = user_id
        self.limit = limit


class ToolRetry(Exception):  # noqa: N818 - a signal, not an error of the runtime
    """Raised by a tool to send `message` back to the model as an error result; the run goes on."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ToolSuspended(Exception):  # noqa: N818 - a signal, not an error of the runtime
    """Raised by a tool whose result waits for the caller (e.g. a subagent paused for approval).

    `pending` lists the calls the caller must answer (dicts with ``id``, ``name``, ``input``,
    ``kind`` and ``suggested_rules``); `state` is whatever the tool needs to resume.
    """

    def __init__(self, pending: list[dict[str, Any]], state: Any = None) -> None:
        super().__init__(f"{len(pending)} call(s) wait for the caller")
        self.pending = pending
        self.state = state
