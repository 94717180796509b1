"""The OpenAPI 3.1 document of the HTTP API, built from the pydantic models of `_models`.

Hand-assembled rather than generated from docstrings: the request and response schemas are the
models that validate requests, so the document cannot drift from what the server accepts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from agentrt.server import _models as m
from agentrt.server._limits import MAX_ID_LENGTH

__all__ = ["SSE_EVENT", "build_openapi", "error_responses", "schema_ref"]

_REF = "#/components/schemas/{model}"
_MODELS: tuple[type[BaseModel], ...] = (
    m.MessageRequest,
    m.ConfirmRequest,
    m.ToolResultsRequest,
    m.InterruptRequest,
    m.AnswerRequest,
    m.MessageResponse,
    m.AnswerResponse,
    m.QuestionList,
    m.InterruptResponse,
    m.SessionState,
    m.SessionList,
    m.AgentList,
    m.HealthResponse,
    m.ErrorResponse,
    m.ChatCompletionRequest,
    m.ChatCompletion,
    m.ChatCompletionChunk,
)
_ERRORS = {
    400: "The body is not JSON.",
    401: "Missing or unknown API key.",
    404: "Unknown agent, or no such session for this user.",
    409: "The session's state does not allow this (e.g. nothing waits for approval, or it is busy).",
    413: "The body is larger than the limit (1 MiB by default).",
    422: "The body, a path parameter or a query parameter is invalid; the message names the field.",
    429: "Too many requests for this API key, or too many durable runs of this user at once; see Retry-After.",
    502: "The model provider failed.",
    503: "The server is shutting down, or the state store is unavailable.",
    504: "The model timed out.",
}


SSE_EVENT: dict[str, Any] = {
    "description": "One server-sent event (the schema of each event in the stream).",
    "type": "object",
    "required": ["event", "data"],
    "properties": {
        "id": {"type": "string", "description": "`<run id>:<sequence>`, for `Last-Event-ID`."},
        "event": {"type": "string", "description": "The event type, equal to `data.type`."},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {
                "type": "object",
                "required": ["type", "reply_id", "session_id", "source"],
                "properties": {
                    "type": {"type": "string"},
                    "reply_id": {"type": "string"},
                    "session_id": {"type": "string"},
                    "source": {"type": "string"},
                },
            },
        },
    },
}


_NUMBER_OR_NULL = {"type": ["number", "null"]}
_INT_OR_NULL = {"type": ["integer", "null"]}
_RUN_SCHEMAS: dict[str, Any] = {
    "RunTotals": {
        "type": "object",
        "description": "What a run spent: model and tool calls, tokens, cost (null when a call's price is "
        "unknown), time in its calls (`busy_ms`) and waiting for approvals or external results (`wait_ms`).",
        "properties": {
            "model_calls": {"type": "integer"},
            "tool_calls": {"type": "integer"},
            "input_tokens": {"type": "integer"},
            "output_tokens": {"type": "integer"},
            "cost_usd": _NUMBER_OR_NULL,
            "busy_ms": {"type": "number"},
            "wait_ms": {"type": "number"},
        },
    },
    "RunSpan": {
        "type": "object",
        "description": "One bar of the timeline. `kind`: `call` (one request of the run), `model` (a model call), "
        "`tool` (a tool execution), `approval` / `external` (a wait for the user's approval or an external "
        "result). Times are milliseconds from the run's start; `end_ms` is null while a wait is open.",
        "required": ["id", "kind", "reply_id", "start_ms"],
        "properties": {
            "id": {"type": "string", "description": "Also the `agentrt.timeline.span_id` of its OpenTelemetry span."},
            "kind": {"type": "string", "enum": ["call", "model", "tool", "approval", "external"]},
            "reply_id": {"type": "string", "description": "The call the bar belongs to."},
            "start_ms": {"type": "number"},
            "end_ms": _NUMBER_OR_NULL,
            "parent": {"type": "string", "description": "A tool's bar: the model call that asked for it."},
            "status": {"type": "string"},
            "input": {"type": "string"},
            "step": {"type": "integer"},
            "model": {"type": "string"},
            "served_by": {"type": "string", "description": "The model that answered (a fallback's, after one)."},
            "input_tokens": _INT_OR_NULL,
            "output_tokens": _INT_OR_NULL,
            "cost_usd": _NUMBER_OR_NULL,
            "finish_reason": {"type": ["string", "null"]},
            "tool_calls": {"type": "array", "items": {"type": "string"}},
            "retries": {"type": "integer"},
            "fallback": {"type": "boolean"},
            "request": {
                "type": "object",
                "description": "What the model saw: its messages (the newest; `omitted` older ones), tool names.",
            },
            "response": {"type": "object", "description": "What the model answered."},
            "name": {"type": "string"},
            "tool_call_id": {"type": "string"},
            "state": {"type": "string"},
            "arguments": {"description": "The tool's arguments (bounded, redacted)."},
            "result": {"type": "string", "description": "The tool's result as text (bounded, redacted)."},
            "decision": {"type": ["string", "null"], "description": "`approved`, `denied` or `result: <state>`."},
            "reason": {"type": "string"},
            "error": {"type": ["object", "null"]},
        },
    },
    "RunMark": {
        "type": "object",
        "description": "An instant of the timeline: `retry` and `fallback` (on the model call `span`), `compression`.",
        "required": ["kind", "at_ms"],
        "properties": {
            "kind": {"type": "string", "enum": ["retry", "fallback", "compression"]},
            "at_ms": {"type": "number"},
            "span": {"type": "string"},
            "reply_id": {"type": "string"},
        },
    },
    "RunTimeline": {
        "type": "object",
        "description": 'The timeline of one run (docs/server.md, "Run timelines").',
        "required": ["schema", "reply_id", "reply_ids", "started_at", "status", "totals", "spans", "marks"],
        "properties": {
            "schema": {"type": "string", "description": "`agentrt.run/1`."},
            "reply_id": {"type": "string", "description": "The run's id: the reply id of its first call."},
            "reply_ids": {"type": "array", "items": {"type": "string"}},
            "agent": {"type": "string"},
            "session_id": {"type": "string"},
            "started_at": {"type": "number", "description": "Seconds since the epoch."},
            "ended_at": {"type": "number"},
            "duration_ms": {"type": "number"},
            "status": {"type": "string"},
            "error": {"type": ["object", "null"]},
            "truncated": {"type": "boolean"},
            "dropped_spans": {"type": "integer"},
            "totals": {"$ref": "#/components/schemas/RunTotals"},
            "spans": {"type": "array", "items": {"$ref": "#/components/schemas/RunSpan"}},
            "marks": {"type": "array", "items": {"$ref": "#/components/schemas/RunMark"}},
            "message_ids": {"type": "array", "items": {"type": "string"}},
        },
    },
    "RunListItem": {
        "type": "object",
        "required": ["reply_id", "reply_ids", "started_at", "status", "totals"],
        "properties": {
            "reply_id": {"type": "string"},
            "reply_ids": {"type": "array", "items": {"type": "string"}},
            "message_ids": {"type": "array", "items": {"type": "string"}},
            "started_at": {"type": "number"},
            "ended_at": _NUMBER_OR_NULL,
            "duration_ms": _NUMBER_OR_NULL,
            "status": {"type": "string"},
            "title": {"type": "string"},
            "totals": {"$ref": "#/components/schemas/RunTotals"},
            "truncated": {"type": "boolean"},
        },
    },
    "RunList": {
        "type": "object",
        "required": ["agent", "session_id", "recording", "runs", "totals"],
        "properties": {
            "agent": {"type": "string"},
            "session_id": {"type": "string"},
            "recording": {"type": "boolean", "description": "Whether this server records the agent's runs."},
            "runs": {"type": "array", "items": {"$ref": "#/components/schemas/RunListItem"}},
            "totals": {
                "type": "object",
                "properties": {
                    "runs": {"type": "integer"},
                    "duration_ms": {"type": "number"},
                    "input_tokens": {"type": "integer"},
                    "output_tokens": {"type": "integer"},
                    "cost_usd": _NUMBER_OR_NULL,
                },
            },
        },
    },
}
"""The run-timeline responses (plain JSON Schema: the records are built by the recorder, not by models)."""


def _ok_schema(name: str, description: str) -> dict[str, Any]:
    return {"200": {"description": description, "content": {"application/json": {"schema": schema_ref(name)}}}}


def schema_ref(model: type[BaseModel] | str) -> dict[str, str]:
    """A ``$ref`` to a component schema."""
    name = model if isinstance(model, str) else model.__name__
    return {"$ref": _REF.format(model=name)}


def error_responses(*statuses: int) -> dict[str, Any]:
    """OpenAPI responses for error statuses, with the shared error body."""
    return {
        str(status): {
            "description": _ERRORS.get(status, "Error."),
            "content": {"application/json": {"schema": schema_ref(m.ErrorResponse)}},
        }
        for status in statuses
    }


def _json_body(model: type[BaseModel], *, required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": schema_ref(model)}}}


def _ok(model: type[BaseModel], description: str, *, sse: bool = False) -> dict[str, Any]:
    content: dict[str, Any] = {"application/json": {"schema": schema_ref(model)}}
    if sse:
        content["text/event-stream"] = {
            "schema": SSE_EVENT,
            "description": "With `stream: true`: frames `id: <run>:<seq>`, `event: <type>`, `data: <event JSON>`; "
            "the last is `run_finished` (or `run_error`). `: ping` comments keep the stream alive.",
        }
    return {"200": {"description": description, "content": content}}


def build_openapi(
    agent_names: Sequence[str], *, extra_paths: Mapping[str, Any] | None = None, title: str = "agentrt"
) -> dict[str, Any]:
    """The OpenAPI document of an app serving `agent_names` (facades add `extra_paths`)."""
    from agentrt import __version__

    _, top = models_json_schema([(model, "validation") for model in _MODELS], ref_template=_REF)
    schemas: dict[str, Any] = dict(top.get("$defs", {}))
    schemas.update(_RUN_SCHEMAS)
    agent_param = {
        "name": "agent",
        "in": "path",
        "required": True,
        "description": "The agent's name.",
        "schema": {"type": "string", "enum": list(agent_names)},
    }
    session_param = {
        "name": "session_id",
        "in": "path",
        "required": True,
        "description": "The caller's session id (sessions are private to each user).",
        "schema": {"type": "string", "minLength": 1, "maxLength": MAX_ID_LENGTH, "pattern": r"^[^\x00-\x1f\x7f/]+$"},
    }
    session_params = [agent_param, session_param]
    common = (401, 404, 422, 429)
    run_errors = (400, 401, 404, 409, 413, 422, 429, 502, 503, 504)

    def run_op(op_id: str, summary: str, body: type[BaseModel], description: str) -> dict[str, Any]:
        return {
            "post": {
                "operationId": op_id,
                "summary": summary,
                "description": description,
                "parameters": session_params,
                "requestBody": _json_body(body),
                "responses": {**_ok(m.MessageResponse, "The reply.", sse=True), **error_responses(*run_errors)},
            }
        }

    base = "/v1/agents/{agent}/sessions/{session_id}"
    paths: dict[str, Any] = {
        "/v1/agents": {
            "get": {
                "operationId": "listAgents",
                "summary": "List the agents",
                "responses": {**_ok(m.AgentList, "The agents."), **error_responses(401, 429)},
            }
        },
        "/v1/agents/{agent}/sessions": {
            "get": {
                "operationId": "listSessions",
                "summary": "List the caller's sessions with an agent",
                "parameters": [agent_param],
                "responses": {**_ok(m.SessionList, "The sessions."), **error_responses(*common, 503)},
            }
        },
        base: {
            "get": {
                "operationId": "getSession",
                "summary": "A session's state and history",
                "parameters": [
                    *session_params,
                    {
                        "name": "limit",
                        "in": "query",
                        "required": False,
                        "description": "Return only the last `limit` messages.",
                        "schema": {"type": "integer", "minimum": 0, "maximum": 1_000_000},
                    },
                ],
                "responses": {**_ok(m.SessionState, "The session."), **error_responses(*common, 503)},
            },
            "delete": {
                "operationId": "deleteSession",
                "summary": "Delete a session",
                "parameters": session_params,
                "responses": {"204": {"description": "Deleted."}, **error_responses(*common, 409, 503)},
            },
        },
        base + "/messages": run_op(
            "sendMessage",
            "Send input to a session",
            m.MessageRequest,
            "Runs the agent on the input and returns its reply, or streams its events with `stream: true`.",
        ),
        base + "/confirm": run_op(
            "confirmToolCalls",
            "Answer pending approvals",
            m.ConfirmRequest,
            "Approves or denies tool calls the session waits for (optionally with edited arguments and rules "
            "to remember) and resumes the run.",
        ),
        base + "/tool-results": run_op(
            "sendToolResults",
            "Send external tool results",
            m.ToolResultsRequest,
            "Delivers the results of tool calls that run outside the agent and resumes the run.",
        ),
        base + "/interrupt": {
            "post": {
                "operationId": "interruptSession",
                "summary": "Interrupt the running call",
                "parameters": session_params,
                "requestBody": _json_body(m.InterruptRequest, required=False),
                "responses": {
                    **_ok(m.InterruptResponse, "Whether a call was running on this server."),
                    **error_responses(400, *common, 413),
                },
            }
        },
        base + "/questions": {
            "get": {
                "operationId": "listQuestions",
                "summary": "Questions the running call waits for",
                "description": "The open questions (MCP elicitations, sampling approvals) of the call running on this "
                "session on this server; each was announced with an `mcp_elicitation` event. Empty when none.",
                "parameters": session_params,
                "responses": {**_ok(m.QuestionList, "The open questions."), **error_responses(*common, 503)},
            }
        },
        base + "/answers": {
            "post": {
                "operationId": "answerQuestion",
                "summary": "Answer a question of the running call",
                "description": "Delivers the human's answer to a question the running call waits for (an MCP "
                "server's elicitation); the tool call goes on. The answer must reach the server running the call "
                "(like an interrupt). 409 `question_not_open` when no such question waits here (unknown, settled, "
                "expired, or asked on another replica); 422 `invalid_answer` when the content does not fit the "
                "requested form (the question stays open; `details` names each field).",
                "parameters": session_params,
                "requestBody": _json_body(m.AnswerRequest),
                "responses": {
                    **_ok(m.AnswerResponse, "The answer was delivered."),
                    **error_responses(400, *common, 409, 413, 503),
                },
            }
        },
        base + "/runs": {
            "get": {
                "operationId": "listRuns",
                "summary": "The runs of a session, with their totals",
                "description": "Each reply of the session (a run: the call that started it and the calls that "
                "resumed it after approvals), newest first, with its total time, tokens and cost.",
                "parameters": [
                    *session_params,
                    {
                        "name": "limit",
                        "in": "query",
                        "required": False,
                        "description": "At most this many runs (the newest).",
                        "schema": {"type": "integer", "minimum": 0, "maximum": 10_000},
                    },
                ],
                "responses": {**_ok_schema("RunList", "The runs."), **error_responses(*common, 503)},
            }
        },
        base + "/runs/{reply_id}": {
            "get": {
                "operationId": "getRun",
                "summary": "The timeline of one reply",
                "description": "The run a reply belongs to (by the reply id of any of its calls): its model calls, "
                "tool executions and approval waits on one time axis, with tokens, costs, arguments, results and "
                "what each model call saw (redacted). 404 for an unknown or expired run.",
                "parameters": [
                    *session_params,
                    {
                        "name": "reply_id",
                        "in": "path",
                        "required": True,
                        "description": "The id of a reply (the `reply_id` of its events, the `id` of its message).",
                        "schema": {"type": "string", "minLength": 1, "maxLength": MAX_ID_LENGTH},
                    },
                ],
                "responses": {**_ok_schema("RunTimeline", "The run's timeline."), **error_responses(*common, 503)},
            }
        },
        base + "/events": {
            "get": {
                "operationId": "resumeEvents",
                "summary": "Reconnect to a streamed run",
                "description": "Continues the SSE stream of a run still going on this server after `Last-Event-ID` "
                "(header, or the `last_event_id` query parameter). 204 when no run is going.",
                "parameters": [
                    *session_params,
                    {
                        "name": "Last-Event-ID",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string", "pattern": r"^[0-9a-f]+:[0-9]+$"},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "The rest of the run's events.",
                        "content": {"text/event-stream": {"schema": SSE_EVENT}},
                    },
                    "204": {"description": "No run is going on this server for the session."},
                    **error_responses(*common, 409),
                },
            }
        },
    }
    paths.update(extra_paths or {})
    return {
        "openapi": "3.1.0",
        "info": {
            "title": title,
            "version": __version__,
            "description": "Agents served over HTTP: sessions, streaming events (SSE), approvals, external tools.",
        },
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "An API key."}},
        },
        "security": [{"bearer": []}],
    }
