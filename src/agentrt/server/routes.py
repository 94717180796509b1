"""The native ``/v1`` REST routes (sessions, messages, approvals, questions, events, run timelines), service routes.

Service routes: ``/openapi.json``, ``/healthz``, ``/readyz``, ``/metrics`` (with the telemetry
extra) and the web UI.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from agentrt import _json
from agentrt.agent.base import AgentBase, AgentInput
from agentrt.errors import InvalidAnswerError, UserError
from agentrt.message import Msg, ToolResultBlock, block_from_dict
from agentrt.middleware.timeline import enable_run_records, timeline_view
from agentrt.permission import ConfirmResult
from agentrt.server._auth import Scope
from agentrt.server._errors import ApiError, InvalidParameterError, json_response
from agentrt.server._limits import header_safe, id_problem, parse_last_event_id, parse_uint
from agentrt.server._models import (
    AnswerRequest,
    ConfirmRequest,
    InterruptRequest,
    MessageRequest,
    ToolResultsRequest,
)
from agentrt.server._openapi import build_openapi
from agentrt.server._sse import EventStreamResponse
from agentrt.server.context import ServerContext, pending_calls
from agentrt.state.pending import CONFIRM, EXTERNAL, PendingCall
from agentrt.state.runs import MAX_REPLY_ID_CHARS, RunInfo, find_run, supports_run_records
from agentrt.tool.questions import ElicitationAnswer

__all__ = ["SessionRoutes", "service_routes", "session_routes"]

STATIC_DIR = Path(__file__).with_name("static")
"""The packaged web UI."""
_DELETE_LOCK_TIMEOUT = 5.0


def session_routes(server: ServerContext) -> list[BaseRoute]:
    """The native ``/v1`` routes; with ``server.run_records``, every served agent records its runs' timelines."""
    if server.run_records is not None:
        for agent in server.agents.values():
            enable_run_records(agent, server.run_records)
    api = SessionRoutes(server)
    session = "/v1/agents/{agent}/sessions/{session_id}"
    return [
        Route("/v1/agents", api.list_agents, methods=["GET"]),
        Route("/v1/agents/{agent}/sessions", api.list_sessions, methods=["GET"]),
        Route(session, api.get_session, methods=["GET"]),
        Route(session, api.delete_session, methods=["DELETE"]),
        Route(session + "/messages", api.post_message, methods=["POST"]),
        Route(session + "/confirm", api.post_confirm, methods=["POST"]),
        Route(session + "/tool-results", api.post_tool_results, methods=["POST"]),
        Route(session + "/interrupt", api.post_interrupt, methods=["POST"]),
        Route(session + "/questions", api.get_questions, methods=["GET"]),
        Route(session + "/answers", api.post_answer, methods=["POST"]),
        Route(session + "/events", api.get_events, methods=["GET"]),
        Route(session + "/runs", api.list_runs, methods=["GET"]),
        Route(session + "/runs/{reply_id}", api.get_run, methods=["GET"]),
    ]


def service_routes(
    server: ServerContext, extra_paths: dict[str, Any], static_dir: str | Path | None = None
) -> list[BaseRoute]:
    """``/openapi.json`` (with the facades' `extra_paths`), ``/healthz``, ``/readyz``, ``/metrics``, the web UI."""
    schema: dict[str, Any] | None = None

    async def openapi(request: Request) -> Response:
        nonlocal schema
        if schema is None:
            schema = build_openapi(list(server.agents), extra_paths=extra_paths)
        return json_response(schema)

    async def readyz(request: Request) -> Response:
        # Probes call it without a key: they get pass/fail only. The problems name the store's
        # host, port and database, so only a caller with a valid API key sees them.
        problems = await server.check_ready()
        status = "ready" if not problems else "shutting_down" if not server.runs.accepting else "unavailable"
        body: dict[str, Any] = {"status": status}
        if request.headers.get("authorization"):
            with contextlib.suppress(ApiError):
                await server.authenticate(request, scope=Scope.ADMIN)
                body["problems"] = problems
        return json_response(body, 503 if problems else 200)

    routes: list[BaseRoute] = [
        Route("/openapi.json", openapi, methods=["GET"], include_in_schema=False),
        Route("/healthz", _healthz, methods=["GET"], include_in_schema=False),
        Route("/readyz", readyz, methods=["GET"], include_in_schema=False),
    ]
    routes += _metrics_routes()
    routes += _static_routes(Path(static_dir) if static_dir is not None else STATIC_DIR)
    return routes


class SessionRoutes:
    """The handlers of the native ``/v1`` routes."""

    def __init__(self, server: ServerContext) -> None:
        self.server = server

    async def _target(self, request: Request, scope: Scope) -> tuple[str, str, AgentBase, str]:
        server = self.server
        user_id = await server.authenticate(request, scope=scope)
        name = request.path_params["agent"]
        agent = server.get_agent(name)
        session_id = server.check_session_id(request.path_params["session_id"])
        return user_id, name, agent, session_id

    async def _answer(
        self, name: str, agent: AgentBase, user_id: str, session_id: str, input: AgentInput, stream: bool
    ) -> Response:
        server = self.server
        if server.jobs is not None:  # a durable run: a job any replica's worker runs
            if stream:
                return await server.stream_job(name, user_id, session_id, input)
            reply = await server.call_job(name, user_id, session_id, input)
            return json_response(
                {"message": reply.to_dict(), "session_id": session_id},
                headers={"X-Session-Id": header_safe(session_id)},
            )
        ctx = server.context_for(user_id, name, session_id)
        if stream:
            return server.stream_run(name, agent, ctx, input)
        reply = await server.call(agent, input, ctx)
        return json_response(
            {"message": reply.to_dict(), "session_id": session_id}, headers={"X-Session-Id": header_safe(session_id)}
        )

    async def post_message(self, request: Request) -> Response:
        user_id, name, agent, session_id = await self._target(request, Scope.MESSAGES_WRITE)
        raw = await self.server.parse_json(request)
        body = self.server.validate(raw, MessageRequest)
        input: AgentInput
        if isinstance(body.input, str):
            input = body.input
        else:
            input = [_msg_from_json(item, f"input.{i}") for i, item in enumerate(raw["input"])]
        return await self._answer(name, agent, user_id, session_id, input, body.stream)

    async def post_confirm(self, request: Request) -> Response:
        user_id, name, agent, session_id = await self._target(request, Scope.TOOLS_APPROVE)
        body = await self.server.parse_body(request, ConfirmRequest)
        waiting = await self._waiting(user_id, name, session_id, CONFIRM)
        results: list[ConfirmResult] = []
        for i, item in enumerate(body.results):
            entry = waiting.get(item.tool_call_id)
            if entry is None:
                raise ApiError(
                    409,
                    f"tool call {item.tool_call_id!r} does not wait for approval in this session "
                    f"(waiting: {', '.join(sorted(waiting))})",
                    code="not_pending",
                    param=f"results.{i}.tool_call_id",
                )
            data = item.model_dump(exclude_none=True)
            data.setdefault("name", entry.name)
            try:
                results.append(ConfirmResult.coerce(data))
            except (UserError, ValueError, TypeError) as exc:
                raise ApiError(422, f"results.{i}: {exc}", code="validation_error") from None
        msg = Msg.confirm(results, text=body.text)
        return await self._answer(name, agent, user_id, session_id, msg, body.stream)

    async def post_tool_results(self, request: Request) -> Response:
        user_id, name, agent, session_id = await self._target(request, Scope.TOOLS_APPROVE)
        raw = await self.server.parse_json(request)
        body = self.server.validate(raw, ToolResultsRequest)
        waiting = await self._waiting(user_id, name, session_id, EXTERNAL)
        blocks: list[ToolResultBlock] = []
        for i, (item, item_raw) in enumerate(zip(body.results, raw["results"], strict=True)):
            entry = waiting.get(item.tool_call_id)
            if entry is None:
                raise ApiError(
                    409,
                    f"tool call {item.tool_call_id!r} does not wait for a result in this session "
                    f"(waiting: {', '.join(sorted(waiting))})",
                    code="not_pending",
                    param=f"results.{i}.tool_call_id",
                )
            output: Any = item_raw["output"]
            if not isinstance(output, str):
                try:
                    output = [block_from_dict(b) for b in output]
                except (ValueError, TypeError, KeyError) as exc:
                    raise ApiError(422, f"results.{i}.output: {exc}", code="validation_error") from None
            blocks.append(
                ToolResultBlock(id=item.tool_call_id, name=item.name or entry.name, output=output, state=item.state)
            )
        msg = Msg(role="user", content=list(blocks))
        return await self._answer(name, agent, user_id, session_id, msg, body.stream)

    async def _waiting(self, user_id: str, name: str, session_id: str, kind: str) -> dict[str, PendingCall]:
        state = await self.server.ownership_check(user_id, name, session_id)
        waiting = {c.id: c for c in pending_calls(state) if c.kind == kind}
        if not waiting:
            what = "approval" if kind == CONFIRM else "an external tool result"
            raise ApiError(409, f"nothing in this session waits for {what}", code="not_pending")
        return waiting

    async def post_interrupt(self, request: Request) -> Response:
        user_id, name, agent, session_id = await self._target(request, Scope.MESSAGES_WRITE)
        body = await self.server.parse_body(request, InterruptRequest, allow_empty=True)
        ctx = self.server.context_for(user_id, name, session_id)
        jobs = self.server.jobs
        if jobs is not None:  # durable runs: the run may be on any replica's worker
            interrupted = await jobs.interrupt(name, user_id, session_id, body.message)
            if not interrupted:
                await self.server.ownership_check(user_id, name, session_id)
            return json_response({"interrupted": interrupted})
        if not self.server.runs.is_running(self.server.session_address(user_id, name, session_id)):
            await self.server.ownership_check(user_id, name, session_id)
        return json_response({"interrupted": agent.interrupt(ctx, msg=body.message)})

    async def get_questions(self, request: Request) -> Response:
        user_id, name, agent, session_id = await self._target(request, Scope.SESSIONS_READ)
        ctx = self.server.context_for(user_id, name, session_id)
        questions = agent.questions(ctx)
        if not questions:
            await self._known(user_id, name, session_id)
        return json_response({"questions": [q.to_dict() for q in questions]})

    async def post_answer(self, request: Request) -> Response:
        """Deliver the human's answer to a question the running call waits for (in this process)."""
        user_id, name, agent, session_id = await self._target(request, Scope.MESSAGES_WRITE)
        body = await self.server.parse_body(request, AnswerRequest)
        ctx = self.server.context_for(user_id, name, session_id)
        waiting = [q.id for q in agent.questions(ctx)]
        if body.question_id not in waiting:
            await self._known(user_id, name, session_id)
            raise _not_open(body.question_id, waiting)
        try:
            answered = agent.answer(ctx, body.question_id, ElicitationAnswer(body.action, body.content))
        except InvalidAnswerError as exc:
            details = [
                {
                    "loc": ["content", p["field"]] if p.get("field") else ["content"],
                    "msg": p.get("message", ""),
                    "type": "invalid_answer",
                }
                for p in exc.problems
            ]
            raise ApiError(422, str(exc), code="invalid_answer", param="content", details=details) from None
        if not answered:  # settled meanwhile (expired, interrupted, withdrawn by the server)
            raise _not_open(body.question_id, [q.id for q in agent.questions(ctx)])
        return json_response({"answered": True, "question_id": body.question_id, "action": body.action})

    async def _known(self, user_id: str, name: str, session_id: str) -> None:
        """404 unless the caller has this session (running here, or stored)."""
        if not self.server.runs.is_running(self.server.session_address(user_id, name, session_id)):
            await self.server.ownership_check(user_id, name, session_id)

    async def get_session(self, request: Request) -> Response:
        user_id, name, agent, session_id = await self._target(request, Scope.SESSIONS_READ)
        limit = _int_query(request, "limit", default=None, low=0, high=1_000_000)
        state = await self.server.ownership_check(user_id, name, session_id)
        messages = state.messages if limit is None else state.messages[len(state.messages) - limit :] if limit else []
        pending = None
        if state.pending is not None:
            calls = [c.to_dict() for c in pending_calls(state)]
            pending = {"reply_id": state.pending.reply_id, "tool_calls": calls}
        return json_response(
            {
                "agent": name,
                "session_id": session_id,
                "messages": [m.to_dict() for m in messages],
                "message_count": len(state.messages),
                "summary": state.summary,
                "rules": _json.jsonable(list(state.rules)),
                "pending": pending,
                "active_groups": state.active_groups,
                "revision": state.revision,
                "created_at": state.created_at,
                "updated_at": state.updated_at,
                "running": self.server.runs.is_running(self.server.session_address(user_id, name, session_id)),
                "questions": [q.to_dict() for q in agent.questions(self.server.context_for(user_id, name, session_id))],
            }
        )

    async def delete_session(self, request: Request) -> Response:
        user_id, name, agent, session_id = await self._target(request, Scope.MESSAGES_WRITE)
        await self.server.ownership_check(user_id, name, session_id)
        key = self.server.state_key(agent)
        store = agent.state_store
        async with store.session_lock(user_id, session_id, timeout=_DELETE_LOCK_TIMEOUT, agent=key):
            existed = await store.delete(user_id, session_id, agent=key)
        if not existed:
            raise ApiError(404, "no such session", code="session_not_found", param="session_id")
        return Response(status_code=204)

    async def get_events(self, request: Request) -> Response:
        user_id, name, _agent, session_id = await self._target(request, Scope.SESSIONS_READ)
        server = self.server
        key = server.session_address(user_id, name, session_id)
        last, param = request.headers.get("last-event-id"), "Last-Event-ID"
        if not last:
            last, param = request.query_params.get("last_event_id"), "last_event_id"
        token: str | None = None
        after = 0
        if last:
            position = parse_last_event_id(last)
            if position is None:
                raise InvalidParameterError(
                    f"{param} must look like '<run id>:<sequence>' (visible ASCII, a sequence of at most 18 digits)",
                    code="invalid_last_event_id",
                    param=param,
                )
            token, after = position
            durable = await server.job_events(name, user_id, session_id, token, after)
            if durable is not None:  # a durable run, on whichever replica its worker is
                return durable
        live = server.runs.find_live(key, token)
        if live is None:
            await server.ownership_check(user_id, name, session_id)
            # No run of this session is going on this server: 204 tells an EventSource to stop
            # reconnecting; the outcome is in the session's state.
            return Response(status_code=204)
        if token is None:
            after = live.oldest_seq - 1  # no position: replay what is buffered
        elif after + 1 < live.oldest_seq:
            raise ApiError(
                409,
                f"events {after + 1}..{live.oldest_seq - 1} of this run are no longer buffered; read the session",
                code="events_expired",
            )
        return EventStreamResponse(
            live.reader(after),
            heartbeat=server.heartbeat,
            headers={"X-Session-Id": header_safe(session_id), "X-Run-Id": live.token},
        )

    # -- run timelines ---------------------------------------------------------------------------------
    def _fresh(self, started_at: float) -> bool:
        """Whether a run that started at `started_at` is within the retention age (older ones are not shown)."""
        retention = self.server.run_records
        return retention is None or retention.max_age is None or started_at >= time.time() - retention.max_age

    async def list_runs(self, request: Request) -> Response:
        """The runs of the caller's session, newest first, each with its total time, tokens and cost."""
        user_id, name, agent, session_id = await self._target(request, Scope.SESSIONS_READ)
        limit = _int_query(request, "limit", default=None, low=0, high=10_000)
        await self.server.ownership_check(user_id, name, session_id)
        store: Any = agent.state_store
        infos: list[RunInfo] = []
        if supports_run_records(store):
            infos = await store.list_runs(user_id, session_id, agent=self.server.state_key(agent), limit=limit)
        runs = [_run_item(info) for info in infos if self._fresh(info.started_at)]
        costs = [run["totals"].get("cost_usd") for run in runs]
        totals = {
            "runs": len(runs),
            "duration_ms": round(sum(float(run["duration_ms"] or 0) for run in runs), 3),
            "input_tokens": sum(int(run["totals"].get("input_tokens") or 0) for run in runs),
            "output_tokens": sum(int(run["totals"].get("output_tokens") or 0) for run in runs),
            "cost_usd": round(sum(c for c in costs if isinstance(c, int | float)), 12)
            if runs and all(isinstance(c, int | float) for c in costs)
            else None,
        }
        return json_response(
            {
                "agent": name,
                "session_id": session_id,
                "recording": self.server.run_records is not None and supports_run_records(store),
                "runs": runs,
                "totals": totals,
            }
        )

    async def get_run(self, request: Request) -> Response:
        """The timeline of one run (by the reply id of any of its calls): 404 unknown, too old or someone else's."""
        user_id, name, agent, session_id = await self._target(request, Scope.SESSIONS_READ)
        reply_id = request.path_params["reply_id"]
        state = await self.server.ownership_check(user_id, name, session_id)
        store: Any = agent.state_store
        stored = None
        if not id_problem("reply id", reply_id) and len(reply_id) <= MAX_REPLY_ID_CHARS and supports_run_records(store):
            stored = await find_run(store, user_id, session_id, reply_id, agent=self.server.state_key(agent))
        record = stored.record() if stored is not None and self._fresh(stored.started_at) else None
        if not record:
            raise ApiError(404, "no such run in this session", code="run_not_found", param="reply_id")
        return json_response(timeline_view(record, state.messages, self.server.run_records))

    async def list_sessions(self, request: Request) -> Response:
        user_id = await self.server.authenticate(request, scope=Scope.SESSIONS_READ)
        name = request.path_params["agent"]
        agent = self.server.get_agent(name)
        sessions = [
            {
                "session_id": info.session_id,
                "message_count": info.message_count,
                "revision": info.revision,
                "updated_at": info.updated_at,
            }
            for info in await agent.state_store.list_sessions(user_id, agent=self.server.state_key(agent))
        ]
        return json_response({"sessions": sessions})

    async def list_agents(self, request: Request) -> Response:
        await self.server.authenticate(request, scope=Scope.SESSIONS_READ)
        return json_response(
            {"agents": [{"name": name, "description": agent.description} for name, agent in self.server.agents.items()]}
        )


def _not_open(question_id: str, waiting: list[str]) -> ApiError:
    shown = question_id if len(question_id) <= 100 else question_id[:100] + "..."
    open_now = f"open: {', '.join(waiting)}" if waiting else "none is open"
    return ApiError(
        409,
        f"question {shown!r} does not wait for an answer in this session on this server ({open_now}); an answer "
        "must reach the server running the call, before the question expires",
        code="question_not_open",
        param="question_id",
    )


def _run_item(info: RunInfo) -> dict[str, Any]:
    """One run of a session listing: its ids, times, status and totals (from its stored summary)."""
    summary = info.summary
    totals = summary.get("totals")
    return {
        "reply_id": info.reply_id,
        "reply_ids": info.reply_ids,
        "message_ids": [i for i in summary.get("message_ids") or () if isinstance(i, str)],
        "started_at": info.started_at,
        "ended_at": summary.get("ended_at"),
        "duration_ms": summary.get("duration_ms"),
        "status": str(summary.get("status") or ""),
        "title": str(summary.get("title") or ""),
        "totals": totals if isinstance(totals, dict) else {},
        "truncated": bool(summary.get("truncated")),
    }


def _msg_from_json(item: Any, where: str) -> Msg:
    try:
        return Msg.from_dict(item)
    except (ValueError, TypeError, KeyError) as exc:
        raise ApiError(422, f"{where}: not a valid message: {exc}", code="validation_error", param=where) from None


def _int_query(request: Request, name: str, *, default: int | None, low: int, high: int) -> int | None:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    value = parse_uint(raw)
    if value is None or not low <= value <= high:
        raise InvalidParameterError(
            f"query parameter {name!r} must be an integer from {low} to {high}",
            code="invalid_query_parameter",
            param=name,
        )
    return value


async def _healthz(request: Request) -> Response:
    return json_response({"status": "ok"})


def _metrics_routes() -> list[BaseRoute]:
    try:
        from agentrt.telemetry.metrics import render_latest  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return []

    async def metrics(request: Request) -> Response:
        body, content_type = render_latest()
        return Response(body, media_type=content_type)

    return [Route("/metrics", metrics, methods=["GET"], include_in_schema=False)]


def _static_routes(folder: Path) -> list[BaseRoute]:
    if not folder.is_dir():
        return []
    from starlette.staticfiles import StaticFiles

    index = folder / "index.html"

    async def index_page(request: Request) -> Response:
        if not index.is_file():
            raise ApiError(404, "the web UI is not installed", code="not_found")
        return FileResponse(index, media_type="text/html")

    return [
        Route("/", index_page, methods=["GET"], include_in_schema=False),
        Mount("/", app=StaticFiles(directory=folder), name="static"),
    ]
