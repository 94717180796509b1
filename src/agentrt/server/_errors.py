"""`ApiError`: an HTTP error with a readable JSON body, and the mapping from runtime errors to statuses.

Every error body has one shape, the one OpenAI clients already parse::

    {"error": {"type": "invalid_request_error", "code": "session_not_found", "message": "...", "param": null}}

plus ``details`` (a list of ``{"loc", "msg", "type"}``) for validation errors.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from agentrt import _json
from agentrt.errors import (
    AgentrtError,
    InvalidAnswerError,
    InvalidTypeError,
    InvalidValueError,
    ModelError,
    ModelTimeoutError,
    NotPendingError,
    RateLimitError,
    RunLimitError,
    SessionBusyError,
    StateConflictError,
    StateStoreError,
    UserError,
)
from agentrt.server.jobs.base import JobRunError

__all__ = [
    "ApiError",
    "InvalidParameterError",
    "JSONResponse",
    "error_for_exception",
    "exception_handlers",
    "http_message",
    "json_response",
    "redact_secrets",
]

logger = logging.getLogger("agentrt.server")

_RUN_LIMIT_RETRY_AFTER = 2
"""Seconds a client over its run limit is asked to wait (runs end at their own pace: a hint)."""

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "conflict_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "model_error",
    503: "service_unavailable",
    504: "timeout_error",
}
_DEFAULT_CODES = {
    400: "invalid_request",
    401: "invalid_api_key",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "request_too_large",
    422: "validation_error",
    429: "rate_limit_exceeded",
    500: "internal_error",
    503: "service_unavailable",
}


class JSONResponse(Response):
    """A JSON response serialised with agentrt's fast JSON."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return _json.dumps_bytes(content)


def json_response(content: Any, status_code: int = 200, headers: Mapping[str, str] | None = None) -> JSONResponse:
    """`content` as a JSON response."""
    return JSONResponse(content, status_code=status_code, headers=dict(headers) if headers else None)


class ApiError(Exception):
    """Raise it from a route (or a helper) to answer with `status` and a JSON error body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
        details: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code or _DEFAULT_CODES.get(status, f"http_{status}")
        """Never empty: clients branch on it, so an error raised without one gets its status's default."""
        self.param = param
        self.headers = dict(headers) if headers else {}
        self.details = list(details) if details is not None else None

    def body(self) -> dict[str, Any]:
        """The JSON error body."""
        error: dict[str, Any] = {
            "type": _TYPES.get(self.status, "invalid_request_error" if self.status < 500 else "server_error"),
            "code": self.code,
            "message": self.message,
            "param": self.param,
        }
        if self.details is not None:
            error["details"] = self.details
        return {"error": error}

    def response(self) -> JSONResponse:
        """The error as a response."""
        return json_response(self.body(), self.status, self.headers)


class InvalidParameterError(ApiError):
    """A malformed header or query parameter: 422 naming it, so bad client input is never a 500."""

    def __init__(self, message: str, *, code: str, param: str) -> None:
        super().__init__(422, message, code=code, param=param)


_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/@\s:]*:)[^/\s]*@")
_KEYWORD_SECRET = re.compile(
    r"""(?i)\b(?P<head>(?:password|passwd|pwd|secret|token|api[_-]?key)\s*[=:]\s*)(?:'[^']*'|"[^"]*"|[^\s,;&]+)"""
)


def redact_secrets(text: str) -> str:
    """`text` with passwords in URLs (``scheme://user:***@host``) and ``password=...`` pairs masked.

    Store errors often quote their connection URL or DSN; operators may see the host, never the secret.
    """
    text = _URL_PASSWORD.sub(r"\g<head>***@", text)
    return _KEYWORD_SECRET.sub(r"\g<head>***", text)


_SESSION_ROUTE = "/v1/agents/{agent}/sessions/{session_id}"
_CONFIRM_HINT = re.compile(
    r"with Msg\.confirm\(\[ConfirmResult\(confirmed=\.\.\., tool_call=\.\.\.\)\]\)"
    r"|with Msg\.confirm\(\[\.\.\.\]\)"
)
_RESULTS_HINT = re.compile(r"with Msg\.tool_results\(\[(?:ToolResultBlock\(\.\.\.\)|\.\.\.)\]\)")
_CONFIRM_METADATA = re.compile(r"Msg\.metadata\['confirm_results'\] must be a list of ConfirmResult")
_CALL_IDS = re.compile(r"\(([^()\s]+)\)")


def _route(agent: str | None, session_id: str | None) -> str:
    from urllib.parse import quote

    route = _SESSION_ROUTE
    if agent:
        route = route.replace("{agent}", quote(agent, safe=""))
    if session_id:
        route = route.replace("{session_id}", quote(session_id, safe=""))
    return route


def http_message(text: str, *, agent: str | None = None, session_id: str | None = None) -> str:
    """`text` (a runtime error's message) with its Python-API hints told the HTTP way.

    The runtime says how to answer a waiting tool call in Python (``Msg.confirm([...])``,
    ``Msg.tool_results([...])``); an HTTP client is told the route and body instead:
    ``POST /v1/agents/{agent}/sessions/{session_id}/confirm`` with ``{"results": [...]}``. The
    route names `agent` and `session_id` when they are known.
    """
    route = _route(agent, session_id)

    def example_id(match: re.Match[str]) -> str:
        before = text[: match.start()]
        clause = before[before.rfind(":") + 1 :]
        ids = _CALL_IDS.findall(clause)
        return ids[-1] if ids else "<tool call id>"

    def confirm(match: re.Match[str]) -> str:
        body = json.dumps({"results": [{"tool_call_id": example_id(match), "confirmed": True}]})
        return f"with POST {route}/confirm and the body {body} (false to deny, with an optional reason)"

    def results(match: re.Match[str]) -> str:
        body = json.dumps({"results": [{"tool_call_id": example_id(match), "output": "..."}]})
        return f"with POST {route}/tool-results and the body {body}"

    text = _CONFIRM_HINT.sub(confirm, text)
    text = _RESULTS_HINT.sub(results, text)
    return _CONFIRM_METADATA.sub(f'approvals go to POST {route}/confirm with {{"results": [...]}}', text)


def protocol_message(text: str, protocol: str) -> str:
    """`text` with its Python-API hints told the way a client of `protocol` answers (``agui``, ``a2a``).

    The native routes use `http_message`; the AG-UI and A2A facades take answers to waiting calls
    in their own messages, so their clients are told those instead of ``Msg.confirm(...)``.
    """
    if protocol == "agui":
        confirm = (
            "by resuming the thread: a resume entry per call, or forwardedProps.confirm_results = "
            '[{"tool_call_id": ..., "confirmed": true}] (false to deny)'
        )
        results = "by sending each call's result as a tool message in the next run of the thread"
    elif protocol == "a2a":
        confirm = (
            'by replying with a data part {"confirm_results": [{"tool_call_id": ..., "confirmed": true}]} '
            '(or the text "approve" / "deny")'
        )
        results = 'by replying with a data part {"tool_results": [{"tool_call_id": ..., "output": ...}]}'
    else:
        raise ValueError(f"unknown protocol {protocol!r}")
    text = _CONFIRM_HINT.sub(confirm, text)
    text = _RESULTS_HINT.sub(results, text)
    return _CONFIRM_METADATA.sub("approvals are a list of {tool_call_id, confirmed}", text)


def error_for_exception(
    exc: BaseException, *, agent: str | None = None, session_id: str | None = None
) -> ApiError | None:
    """The HTTP error for an exception raised by an agent call (None: an unexpected failure, a 500).

    Messages that tell a Python caller what to do say it the HTTP way (`http_message`), naming the
    routes of `agent` and `session_id` when given.
    """
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, UserError):
        return _user_error(exc, http_message(str(exc), agent=agent, session_id=session_id))
    return _runtime_error(exc)


def _user_error(exc: UserError, message: str) -> ApiError:
    """The 409/422/429 of a mistake in the request (or in the session's state)."""
    if isinstance(exc, NotPendingError):  # a stale or repeated answer (e.g. two approvals of one call at once)
        return ApiError(409, message, code="not_pending")
    if isinstance(exc, InvalidAnswerError):  # e.g. edited approval arguments the tool does not accept
        return ApiError(422, message, code="invalid_answer")
    if isinstance(exc, (InvalidValueError, InvalidTypeError)):  # e.g. a tool call in a user message
        return ApiError(422, message, code="invalid_input")
    if isinstance(exc, RunLimitError):  # the user's runs across the cluster (durable runs)
        return ApiError(429, message, code="too_many_runs", headers={"Retry-After": str(_RUN_LIMIT_RETRY_AFTER)})
    return ApiError(409, message, code="invalid_session_state")


def _runtime_error(exc: BaseException) -> ApiError | None:
    if isinstance(exc, SessionBusyError):
        return ApiError(409, f"the session is busy: {exc}", code="session_busy")
    if isinstance(exc, StateConflictError):
        return ApiError(409, str(exc), code="state_conflict")
    if isinstance(exc, StateStoreError):
        return ApiError(503, f"the state store is unavailable: {exc}", code="store_unavailable")
    if isinstance(exc, JobRunError):  # a durable run failed on its worker: only the error's name came back
        return _job_error(exc)
    if isinstance(exc, RateLimitError):
        retry = getattr(exc, "retry_after", None)
        headers = {"Retry-After": str(max(1, math.ceil(retry)))} if isinstance(retry, (int, float)) else None
        return ApiError(503, f"the model provider is rate limiting: {exc}", code="model_rate_limited", headers=headers)
    if isinstance(exc, ModelTimeoutError):
        return ApiError(504, f"the model timed out: {exc}", code="model_timeout")
    if isinstance(exc, ModelError):
        return ApiError(502, f"the model failed: {type(exc).__name__}: {exc}", code="model_error")
    return None


def _model_error_names() -> frozenset[str]:
    names: set[str] = set()
    todo: list[type] = [ModelError]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo += cls.__subclasses__()
    return frozenset(names)


def _job_error(exc: JobRunError) -> ApiError:
    """The status an in-process run would have answered, from the failed run's error type."""
    if exc.error_type == ModelTimeoutError.__name__:
        return ApiError(504, f"the model timed out: {exc}", code="model_timeout")
    if exc.error_type in _model_error_names():
        return ApiError(502, f"the model failed: {exc.error_type}: {exc}", code="model_error")
    return ApiError(500, str(exc), code="run_failed")


def exception_handlers() -> dict[Any, Callable[[Request, Exception], Awaitable[Response]]]:
    """The app's exception handlers: every error becomes the JSON error body above."""
    return {
        ApiError: _api_error,
        HTTPException: _http_error,
        ClientDisconnect: _client_disconnected,
        AgentrtError: _agentrt_error,
        Exception: _server_error,
    }


async def _client_disconnected(request: Request, exc: Exception) -> Response:
    # Not a server failure: log it once, quietly (the Exception handler would log an ERROR and
    # re-raise, and uvicorn would log the traceback again). Nobody is left to read the answer.
    logger.info("%s %s: the client disconnected before sending the whole request", request.method, request.url.path)
    return ApiError(400, "the client disconnected mid-request", code="client_disconnected").response()


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    messages = {404: "not found", 405: "method not allowed"}
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
    message = exc.detail if exc.detail and exc.detail not in ("Not Found", "Method Not Allowed") else ""
    error = ApiError(
        exc.status_code,
        message or messages.get(exc.status_code, "request failed"),
        code=code,
        headers=dict(exc.headers or {}),
    )
    if exc.status_code in (204, 304):
        return Response(status_code=exc.status_code, headers=error.headers)
    return error.response()


async def _agentrt_error(request: Request, exc: Exception) -> Response:
    params = request.path_params
    error = error_for_exception(exc, agent=params.get("agent"), session_id=params.get("session_id"))
    if error is None:
        return await _server_error(request, exc)
    if error.status >= 500:
        logger.warning("%s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
    return error.response()


async def _server_error(request: Request, exc: Exception) -> Response:
    logger.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return ApiError(500, "internal server error", code="internal_error").response()
