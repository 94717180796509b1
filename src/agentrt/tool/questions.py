"""Questions for the human of a run, asked in the middle of a tool call (MCP elicitation).

A tool that needs the user (an MCP server's ``elicitation/create`` through `McpClient`, or any
tool) asks with ``await ToolCallScope.current().ask_user(UserQuestion(...))`` and gets an
`ElicitationAnswer`. The agent running the call puts the question to its human: it gives the
question an id, announces it with an `McpElicitation` event, lists it in ``agent.questions(ctx)``
and waits for ``agent.answer(ctx, question_id, answer)``; `McpElicitationClosed` tells when it is
settled (answered, expired, interrupted or withdrawn). A run nobody streams has no way to ask:
its questions are declined.

The question comes from a party agentrt does not trust (an MCP server): `schema_problem` and
`url_problem` refuse schemas and URLs a client cannot render safely, and `check_answer` validates
an answer before anything is sent back (`InvalidAnswerError` otherwise; the question stays open).
Forms follow the MCP spec's restricted schema: a flat object whose properties are strings (with
``minLength``, ``maxLength``, ``format`` email / uri / date / date-time), numbers or integers
(``minimum``, ``maximum``), booleans, single-choice enums (``enum``, ``oneOf`` of ``const`` /
``title``, legacy ``enumNames``) or multiple-choice enums (``type: array`` with ``items.enum`` or
``items.anyOf``, ``minItems``, ``maxItems``).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias
from urllib.parse import urlsplit

from agentrt.errors import InvalidAnswerError
from agentrt.events import AgentEvent, register_event_type

__all__ = [
    "ANSWER_ACTIONS",
    "SAMPLING_SCHEMA",
    "AskUser",
    "ElicitationAnswer",
    "McpElicitation",
    "McpElicitationClosed",
    "QuestionMode",
    "QuestionPolicy",
    "UserQuestion",
    "check_answer",
    "schema_problem",
    "url_problem",
]

QuestionMode: TypeAlias = Literal["form", "url", "sampling"]
"""``form``: fill `UserQuestion.requested_schema`; ``url``: agree to visit `UserQuestion.url`;
``sampling``: allow an MCP server to have the model answer a prompt."""
AnswerAction: TypeAlias = Literal["accept", "decline", "cancel"]
ANSWER_ACTIONS: tuple[AnswerAction, ...] = ("accept", "decline", "cancel")

SAMPLING_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Approve", "default": True}},
    "required": ["approve"],
}
"""The form of a sampling approval: accepting approves, unless the content says ``{"approve": false}``."""

_FORMATS = frozenset(("email", "uri", "date", "date-time"))
_SCALAR_TYPES = frozenset(("string", "number", "integer", "boolean"))
_MAX_PROPERTIES = 100
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[Zz]|[+-]\d{2}:\d{2})")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


# --------------------------------------------------------------------------------------------------
# questions and answers
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ElicitationAnswer:
    """The user's answer: ``accept`` (with `content` for forms), ``decline`` or ``cancel``.

    The JSON form is ``{"action": ..., "content": {...} | null}`` (`to_dict`, `coerce`).
    """

    action: AnswerAction
    content: Mapping[str, Any] | None = None

    @classmethod
    def accept(cls, content: Mapping[str, Any] | None = None) -> ElicitationAnswer:
        """Accept; `content` holds a form's values."""
        return cls("accept", content)

    @classmethod
    def decline(cls) -> ElicitationAnswer:
        """Refuse explicitly."""
        return cls("decline")

    @classmethod
    def cancel(cls) -> ElicitationAnswer:
        """Dismiss without choosing (also what an expired or interrupted question gets)."""
        return cls("cancel")

    @classmethod
    def coerce(cls, value: ElicitationAnswer | Mapping[str, Any]) -> ElicitationAnswer:
        """An answer from itself or its JSON form ``{"action", "content"}`` (`InvalidAnswerError` if neither)."""
        if isinstance(value, ElicitationAnswer):
            answer = value
        elif isinstance(value, Mapping):
            extra = sorted(str(k) for k in value if k not in ("action", "content"))
            if extra:
                raise _invalid(f"an answer has only 'action' and 'content', not {', '.join(map(repr, extra))}")
            answer = cls(value.get("action"), value.get("content"))  # type: ignore[arg-type]
        else:
            raise _invalid(f"an answer is an ElicitationAnswer or {{'action', 'content'}}, not {type(value).__name__}")
        if answer.action not in ANSWER_ACTIONS:
            raise _invalid(f"the action must be 'accept', 'decline' or 'cancel', not {answer.action!r}")
        if answer.content is not None and not isinstance(answer.content, Mapping):
            raise _invalid(f"the content must be an object, not {type(answer.content).__name__}")
        return answer

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {"action": self.action, "content": dict(self.content) if self.content is not None else None}


@dataclass(frozen=True, slots=True, kw_only=True)
class UserQuestion:
    """A question for the human of a run, asked by a tool call (MCP: an elicitation or a sampling approval).

    The tool fills in what to ask; the run fills in `id`, `asked_at`, `expires_at`, `source`
    and `session_id` when it puts the question to its human (``agent.questions(ctx)`` lists those).
    """

    mode: QuestionMode
    message: str
    requested_schema: dict[str, Any] | None = None
    """The form to fill (``form`` and ``sampling``): a flat JSON Schema object (see the module docs)."""
    url: str | None = None
    """The page the user is asked to visit (``url``); shown, never opened for them."""
    server: str = ""
    """The MCP server asking ("" for another tool)."""
    tool: str = ""
    """The tool (the server's name for it) whose call asks."""
    tool_call_id: str = ""
    timeout: float | None = None
    """Seconds to wait for the answer at most, then the question is cancelled (None: no limit)."""
    id: str = ""
    asked_at: float = 0.0
    """When the run asked (seconds since the epoch)."""
    expires_at: float | None = None
    """When the question is cancelled if still open (seconds since the epoch)."""
    source: str = ""
    """The agent whose run asked."""
    session_id: str = ""
    """The session of that run (a subagent's own session for its questions)."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (as the server lists open questions)."""
        return {
            "id": self.id,
            "mode": self.mode,
            "message": self.message,
            "requested_schema": self.requested_schema,
            "url": self.url,
            "server": self.server,
            "tool": self.tool,
            "tool_call_id": self.tool_call_id,
            "asked_at": self.asked_at,
            "expires_at": self.expires_at,
            "source": self.source,
            "session_id": self.session_id,
        }


AskUser: TypeAlias = Callable[[UserQuestion], Awaitable[ElicitationAnswer]]
"""``async (question) -> answer``: puts a question to the run's human and waits (set by the agent)."""


@dataclass(frozen=True, slots=True)
class QuestionPolicy:
    """Whether a streamed run may put questions to its human; a typed attribute of its `RuntimeContext`.

    A streamed run asks by default. A consumer of ``agent.stream_events`` that cannot answer (it
    does not show ``mcp_elicitation`` events, or cannot call ``agent.answer``) sets
    ``ctx.put(QuestionPolicy, QuestionPolicy(ask=False))``: the run's questions are then declined
    at once instead of waiting for their timeout. The HTTP server does this for the facades
    (OpenAI, AG-UI, A2A), whose clients cannot see the questions; its native SSE routes ask.
    """

    ask: bool = True


# --------------------------------------------------------------------------------------------------
# events
# --------------------------------------------------------------------------------------------------
@register_event_type
@dataclass(frozen=True, slots=True, kw_only=True)
class McpElicitation(AgentEvent):
    """An MCP server (or a tool) asks the user something during a tool call (type ``mcp_elicitation``).

    With a `question_id` the run waits for the answer: give it with ``agent.answer(ctx,
    question_id, answer)`` (the server: ``POST .../answers``) before `expires_at`. Without one the
    event is informational (the client's ``elicitation_handler`` answers, or nobody can).
    """

    tool_call_id: str = ""
    server: str = ""
    tool: str = ""
    mode: str = "form"
    """``form`` (fill `requested_schema`), ``url`` (visit `url`) or ``sampling`` (approve a sampling request)."""
    message: str = ""
    requested_schema: dict[str, Any] | None = None
    url: str | None = None
    question_id: str = ""
    expires_at: float | None = None
    """When the question is cancelled if unanswered (seconds since the epoch; None: no limit)."""


@register_event_type
@dataclass(frozen=True, slots=True, kw_only=True)
class McpElicitationClosed(AgentEvent):
    """A question of an `McpElicitation` is settled (type ``mcp_elicitation_closed``).

    `action` is what the asker got (``accept``, ``decline`` or ``cancel``); `reason` says why:
    ``answered``, ``expired`` (its timeout passed), ``interrupted`` (the run was interrupted) or
    ``withdrawn`` (the tool call or the server stopped waiting).
    """

    question_id: str = ""
    tool_call_id: str = ""
    action: str = "cancel"
    reason: str = "answered"


# --------------------------------------------------------------------------------------------------
# what a question may ask
# --------------------------------------------------------------------------------------------------
def url_problem(url: Any) -> str | None:
    """Why `url` cannot be shown as a link to visit (None when it can: absolute http or https)."""
    if not isinstance(url, str) or not url.strip():
        return "the URL is empty"
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        return "the URL contains spaces or control characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        return f"the URL is malformed ({exc})"
    if parts.scheme.lower() not in ("http", "https"):
        return f"only http and https URLs are shown, not {parts.scheme or 'a relative URL'!r}"
    if not parts.hostname:
        return "the URL has no host"
    if parts.username is not None or parts.password is not None:
        return "the URL carries credentials (user@host), which can disguise its real host"
    return None


def schema_problem(schema: Any) -> str | None:
    """Why `schema` is not a form a client can render (None when it is the MCP spec's flat object)."""
    if not isinstance(schema, Mapping):
        return "the requested schema is not an object"
    if schema.get("type") != "object":
        return "the requested schema must have type 'object'"
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        return "'properties' must be an object"
    if len(properties) > _MAX_PROPERTIES:
        return f"the form has more than {_MAX_PROPERTIES} fields"
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        return "'required' must be a list of field names"
    missing = [r for r in required if r not in properties]
    if missing:
        return f"required field(s) {', '.join(map(repr, missing))} are not among the properties"
    for name, prop in properties.items():
        problem = _property_problem(prop)
        if problem is not None:
            return f"field {name!r}: {problem}"
    try:
        from jsonschema import Draft202012Validator, SchemaError

        Draft202012Validator.check_schema(dict(schema))
    except SchemaError as exc:
        return f"not a valid JSON Schema: {exc.message}"
    return None


def _property_problem(prop: Any) -> str | None:
    if not isinstance(prop, Mapping):
        return "its schema is not an object"
    kind = prop.get("type")
    if kind == "array":
        return _multi_select_problem(prop)
    if kind not in _SCALAR_TYPES:
        return f"type {kind!r} is not one of string, number, integer, boolean or array (multiple choice)"
    if kind == "string":
        if "enum" in prop and not _strings(prop["enum"]):
            return "'enum' must be a non-empty list of strings"
        if "oneOf" in prop and _options(prop["oneOf"]) is None:
            return "'oneOf' must be a non-empty list of {'const': string, 'title': string}"
        fmt = prop.get("format")
        if fmt is not None and fmt not in _FORMATS:
            return f"format {fmt!r} is not one of {', '.join(sorted(_FORMATS))}"
    for key in ("minLength", "maxLength", "minItems", "maxItems"):
        if key in prop and not _count(prop[key]):
            return f"{key!r} must be a non-negative integer"
    for key in ("minimum", "maximum"):
        if key in prop and not _number(prop[key]):
            return f"{key!r} must be a number"
    return None


def _multi_select_problem(prop: Mapping[str, Any]) -> str | None:
    items = prop.get("items")
    if not isinstance(items, Mapping):
        return "a multiple-choice field needs 'items' with its choices"
    choices = items.get("anyOf", items.get("oneOf"))
    if "enum" in items:
        if not _strings(items["enum"]):
            return "'items.enum' must be a non-empty list of strings"
    elif choices is None or _options(choices) is None:
        return "'items' must list its choices in 'enum' or 'anyOf' ({'const', 'title'})"
    for key in ("minItems", "maxItems"):
        if key in prop and not _count(prop[key]):
            return f"{key!r} must be a non-negative integer"
    return None


def _strings(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value)


def _options(value: Any) -> list[str] | None:
    if not isinstance(value, list) or not value:
        return None
    out: list[str] = []
    for option in value:
        if not isinstance(option, Mapping) or not isinstance(option.get("const"), str):
            return None
        out.append(option["const"])
    return out


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# --------------------------------------------------------------------------------------------------
# answers
# --------------------------------------------------------------------------------------------------
def check_answer(question: UserQuestion, answer: ElicitationAnswer | Mapping[str, Any]) -> ElicitationAnswer:
    """`answer` made fit for `question`, or `InvalidAnswerError` naming every problem.

    ``decline`` and ``cancel`` carry no content (any given is dropped); ``accept`` of a URL
    question carries none either. A form's accepted content must be an object with only the
    form's fields, each a string, number, boolean or list of strings valid for its schema, and
    every required field present. A sampling approval may say ``{"approve": false}``.
    """
    answer = ElicitationAnswer.coerce(answer)
    if answer.action != "accept" or question.mode == "url":
        if question.mode == "url" and answer.action == "accept" and answer.content:
            raise _invalid("accepting a URL question carries no content", question.id)
        return ElicitationAnswer(answer.action)
    schema = question.requested_schema
    content = answer.content
    if question.mode == "sampling" and content is None:
        return ElicitationAnswer.accept()
    if schema is None:
        if content:
            raise _invalid("this question asks for no content", question.id)
        return ElicitationAnswer.accept()
    problems = form_problems(schema, {} if content is None else content)
    if problems:
        shown = "; ".join(f"{p['field']}: {p['message']}" if p["field"] else p["message"] for p in problems[:5])
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise InvalidAnswerError(
            f"the answer does not fit the requested form: {shown}{more}", question_id=question.id, problems=problems
        )
    return ElicitationAnswer.accept(dict(content or {}))


def form_problems(schema: Mapping[str, Any], content: Any) -> list[dict[str, str]]:
    """Each way `content` fails the flat form `schema` (empty when it fits)."""
    if not isinstance(content, Mapping):
        return [{"field": "", "message": f"the content must be an object, not {type(content).__name__}"}]
    properties: Mapping[str, Any] = schema.get("properties") or {}
    problems: list[dict[str, str]] = []
    for key, value in content.items():
        if not isinstance(key, str) or key not in properties:
            problems.append({"field": str(key), "message": "the form has no such field"})
        elif not _flat(value):
            problems.append({"field": key, "message": "must be a string, a number, a boolean or a list of strings"})
    if problems:
        return problems
    from jsonschema import Draft202012Validator, FormatChecker

    validator = Draft202012Validator(dict(schema), format_checker=_format_checker(FormatChecker))
    named: set[str] = set()
    # One problem per field, the most telling first: its type, then its bounds or choices.
    errors = sorted(
        validator.iter_errors(dict(content)), key=lambda e: (str(e.path[0]) if e.path else "", e.validator != "type")
    )
    for error in errors:
        field = str(error.path[0]) if error.path else ""
        message = _message(error)
        if not field and error.validator == "required":
            # "'x' is a required property": name the field itself.
            match = re.match(r"'(.+)' is a required property", error.message)
            field = match.group(1) if match else ""
            message = "this field is required"
        if field in named:
            continue
        named.add(field)
        problems.append({"field": field, "message": message})
    for key, value in content.items():
        prop = properties[key]
        duplicated = isinstance(value, list) and prop.get("type") == "array" and len(set(value)) != len(value)
        if duplicated and key not in named:
            problems.append({"field": key, "message": "a choice is listed more than once"})
    return problems


def _flat(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (str, int)):  # bool is an int
        return True
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _message(error: Any) -> str:
    kind = error.validator
    if kind == "format":
        return f"not a valid {error.validator_value}"
    if kind == "type":
        return f"must be {'an' if error.validator_value == 'integer' else 'a'} {error.validator_value}"
    if kind in ("enum", "const", "oneOf", "anyOf"):
        return "not one of the choices"
    if kind == "minLength":
        return f"must have at least {error.validator_value} character(s)"
    if kind == "maxLength":
        return f"must have at most {error.validator_value} character(s)"
    if kind == "minimum":
        return f"must be at least {error.validator_value}"
    if kind == "maximum":
        return f"must be at most {error.validator_value}"
    if kind == "minItems":
        return f"choose at least {error.validator_value}"
    if kind == "maxItems":
        return f"choose at most {error.validator_value}"
    return str(error.message)[:200]


def _format_checker(cls: Any) -> Any:
    """A jsonschema format checker for the four formats of the MCP spec, checked here (no extra packages)."""
    checker = cls(formats=())
    for name, check in _FORMAT_CHECKS.items():
        checker.checks(name)(check)
    return checker


def _is_email(value: Any) -> bool:
    return not isinstance(value, str) or _EMAIL.fullmatch(value) is not None


def _is_uri(value: Any) -> bool:
    if not isinstance(value, str):
        return True
    if any(c.isspace() for c in value):
        return False
    scheme, sep, rest = value.partition(":")
    return bool(sep and rest and _SCHEME.fullmatch(scheme))


def _is_date(value: Any) -> bool:
    if not isinstance(value, str):
        return True
    if _DATE.fullmatch(value) is None:
        return False
    try:
        dt.date.fromisoformat(value)
    except ValueError:
        return False
    return True


def _is_date_time(value: Any) -> bool:
    if not isinstance(value, str):
        return True
    if _DATE_TIME.fullmatch(value) is None:
        return False
    try:
        dt.datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


_FORMAT_CHECKS: dict[str, Callable[[Any], bool]] = {
    "email": _is_email,
    "uri": _is_uri,
    "date": _is_date,
    "date-time": _is_date_time,
}


def _invalid(message: str, question_id: str = "") -> InvalidAnswerError:
    return InvalidAnswerError(message, question_id=question_id, problems=[{"field": "", "message": message}])
