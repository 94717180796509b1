"""The agentrt HTTP server: `create_app`, and the `ServerContext` that routes and facades share.

Sessions are namespaced twice. Per user: every call runs with
``RuntimeContext(user_id=<authenticated user>, session_id=...)``, so another user's session id is
just a session the caller does not have (404, never 403). Per agent: the store addresses sessions
by ``(agent.state_key, user_id, session_id)``, so agents sharing one store never see each other's
sessions. Sessions earlier versions stored as ``"<agent name>:<session id>"`` are moved under their
agent when the app starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import logging
import math
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from agentrt import _json
from agentrt import events as ev
from agentrt.agent.base import AgentBase, AgentInput
from agentrt.context import RuntimeContext
from agentrt.errors import AgentrtError, UserError
from agentrt.message import Msg, ToolResultBlock, block_from_dict
from agentrt.permission import ConfirmResult
from agentrt.server._auth import ApiKeyAuth, RateLimit, RateLimiter
from agentrt.server._errors import (
    ApiError,
    InvalidParameterError,
    error_for_exception,
    json_response,
    redact_secrets,
)
from agentrt.server._limits import (
    DEFAULT_MAX_BODY_BYTES,
    BodyTooLargeError,
    header_safe,
    id_problem,
    parse_last_event_id,
    parse_uint,
    read_body,
)
from agentrt.server._models import (
    ConfirmRequest,
    InterruptRequest,
    MessageRequest,
    ToolResultsRequest,
)
from agentrt.server._openapi import build_openapi
from agentrt.server._runs import RunRegistry, SessionAddress
from agentrt.server._sse import DEFAULT_HEARTBEAT, EventStreamResponse, IteratorSource, aclose, encode_frame
from agentrt.state.base import AgentState, AgentStateStore

__all__ = ["DEFAULT_FACADES", "ServerContext", "create_app", "pending_calls"]

logger = logging.getLogger("agentrt.server")

M = TypeVar("M", bound=BaseModel)

DEFAULT_FACADES = ("openai", "agui", "a2a")
_FACADE_MODULES = {
    "openai": "agentrt.server.openai_compat",
    "agui": "agentrt.server.agui",
    "a2a": "agentrt.server.a2a",
}
_STATIC = Path(__file__).with_name("static")
_READY_TIMEOUT = 2.0
_DELETE_LOCK_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerContext:
    """Everything a route needs: agents, auth, limits and the runs in flight, with helpers.

    Facades (``agentrt.server.agui``, ``agentrt.server.a2a``) receive it in ``routes(server)`` and
    reuse the helpers, so every protocol authenticates, limits, namespaces sessions and shuts down
    the same way. Helpers raise `ApiError`; the app turns it into a JSON error response.
    """

    agents: Mapping[str, AgentBase]
    store: AgentStateStore | None
    auth: ApiKeyAuth
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    rate_limiter: RateLimiter | None = None
    heartbeat: float = DEFAULT_HEARTBEAT
    shutdown_timeout: float = 10.0
    runs: RunRegistry = field(default_factory=RunRegistry)

    # -- requests ---------------------------------------------------------------------------------------------
    def authenticate(self, request: Request) -> str:
        """The user id of the request's ``Authorization: Bearer <key>`` (401 if missing or unknown, 429 if limited)."""
        header = request.headers.get("authorization")
        challenge = {"WWW-Authenticate": 'Bearer realm="agentrt"'}
        if not header:
            raise ApiError(
                401, "missing API key: send 'Authorization: Bearer <key>'", code="missing_api_key", headers=challenge
            )
        scheme, _, key = header.partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key:
            raise ApiError(
                401,
                "malformed Authorization header: expected 'Bearer <key>'",
                code="invalid_api_key",
                headers=challenge,
            )
        user_id = self.auth.user_for(key)
        if user_id is None:
            raise ApiError(401, "invalid API key", code="invalid_api_key", headers=challenge)
        if self.rate_limiter is not None:
            wait = self.rate_limiter.acquire(ApiKeyAuth.key_id(key))
            if wait > 0:
                seconds = max(1, math.ceil(wait))
                raise ApiError(
                    429,
                    f"rate limit exceeded for this API key; retry in {seconds} s",
                    code="rate_limit_exceeded",
                    headers={"Retry-After": str(seconds)},
                )
        request.state.user_id = user_id
        return user_id

    def get_agent(self, name: str) -> AgentBase:
        """The agent served as `name` (404 if none)."""
        agent = self.agents.get(name)
        if agent is None:
            shown = name if len(name) <= 100 else name[:100] + "..."
            raise ApiError(404, f"no agent named {shown!r}", code="agent_not_found", param="agent")
        return agent

    def check_session_id(self, session_id: str) -> str:
        """`session_id` if acceptable (at most 200 characters, no control characters), else 422."""
        problem = id_problem("session id", session_id)
        if problem is not None:
            raise ApiError(422, problem, code="invalid_session_id", param="session_id")
        return session_id

    def ensure_accepting(self) -> None:
        """503 once the server is shutting down (new runs are refused, running ones finish)."""
        if not self.runs.accepting:
            raise ApiError(503, "the server is shutting down", code="shutting_down", headers={"Retry-After": "1"})

    async def parse_json(self, request: Request, *, allow_empty: bool = False) -> Any:
        """The JSON body (413 over `max_body_bytes`, 400 if not JSON; None for an empty body if allowed)."""
        try:
            raw = await read_body(request, self.max_body_bytes)
        except BodyTooLargeError as exc:
            raise ApiError(413, str(exc), code="request_too_large") from None
        if not raw.strip():
            if allow_empty:
                return None
            raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
        try:
            return _json.loads(raw)
        except ValueError as exc:
            raise ApiError(400, f"the request body is not valid JSON: {exc}", code="invalid_json") from None

    def validate(self, data: Any, model: type[M]) -> M:
        """`data` validated into `model` (422 with every problem named)."""
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise validation_error(exc) from None

    async def parse_body(self, request: Request, model: type[M], *, allow_empty: bool = False) -> M:
        """The JSON body validated into `model` (413, 400, 422)."""
        data = await self.parse_json(request, allow_empty=allow_empty)
        return self.validate({} if data is None else data, model)

    # -- sessions -----------------------------------------------------------------------------------------------
    @staticmethod
    def state_key(agent: AgentBase) -> str:
        """The agent part of `agent`'s sessions in the store (its `state_key`; pipelines: their name)."""
        return getattr(agent, "state_key", None) or agent.name

    def session_address(self, user_id: str, agent_name: str, session_id: str) -> SessionAddress:
        """``(state key, user id, session id)``: the session as the store and the run registry name it."""
        return (self.state_key(self.get_agent(agent_name)), user_id, session_id)

    def context_for(self, user_id: str, agent_name: str, session_id: str) -> RuntimeContext:
        """The context of a call by `user_id` on `session_id` of the agent served as `agent_name`."""
        del agent_name  # the agent part of the address is the agent's state_key, added by the agent
        return RuntimeContext(user_id=user_id, session_id=session_id)

    async def ownership_check(self, user_id: str, agent_name: str, session_id: str) -> AgentState:
        """The caller's stored session, or 404: unknown and someone else's sessions look the same."""
        agent = self.get_agent(agent_name)
        state = await agent.state_store.load(user_id, session_id, agent=self.state_key(agent))
        if state is None:
            raise ApiError(404, "no such session", code="session_not_found", param="session_id")
        return state

    async def migrate_legacy_sessions(self) -> None:
        """Move the sessions earlier versions stored as ``"<served name>:<id>"`` under their agent.

        Runs at startup, once per (store, agent); a store that cannot be reached is logged and
        skipped (the agents still read such sessions on first use).
        """
        done: set[tuple[int, str, str]] = set()
        for name, agent in self.agents.items():
            store = agent.state_store
            key = self.state_key(agent)
            migrate = getattr(store, "migrate_legacy", None)
            if migrate is None or (id(store), key, name) in done:
                continue
            done.add((id(store), key, name))
            try:
                await store.load("__agentrt__", "__startup__")  # a first operation: has_legacy_sessions is known
                if not getattr(store, "has_legacy_sessions", False):
                    continue
                moved = await migrate(key, prefix=name)
            except Exception as exc:
                logger.warning(
                    "could not migrate the stored sessions of agent %r: %s: %s", name, type(exc).__name__, exc
                )
                continue
            if moved:
                logger.info("moved %d session(s) stored as '%s:<id>' under agent %r", moved, name, key)

    # -- running ------------------------------------------------------------------------------------------------
    async def call(self, agent: AgentBase, input: AgentInput, ctx: RuntimeContext) -> Msg:
        """``agent.call`` tracked for graceful shutdown (503 when shutting down)."""
        self.ensure_accepting()
        return await self.runs.call(agent, input, ctx)

    def stream_events(self, agent: AgentBase, ctx: RuntimeContext, input: AgentInput) -> AsyncIterator[ev.AgentEvent]:
        """``agent.stream_events`` tracked for graceful shutdown (503 at once when shutting down).

        For facades with their own framing: pass the result to `sse_response`. Closing it (a
        client disconnect does) stops the run and checkpoints it.
        """
        self.ensure_accepting()
        return self._tracked_events(agent, ctx, input)

    async def _tracked_events(
        self, agent: AgentBase, ctx: RuntimeContext, input: AgentInput
    ) -> AsyncIterator[ev.AgentEvent]:
        stream = agent.stream_events(input, ctx)
        task = asyncio.current_task()
        entry = self.runs.track(agent, ctx, task) if task is not None else None
        try:
            async for event in stream:
                if entry is not None and isinstance(event, ev.RunStarted) and event.source == agent.name:
                    entry.started = True
                yield event
        finally:
            if entry is not None:
                self.runs.untrack(entry)
            await aclose(stream)

    def event_json(self, agent_name: str, event: ev.AgentEvent) -> bytes:
        """An event's JSON (its session id is the caller's own: the store adds the agent part)."""
        del agent_name  # kept for facades: events of every agent are encoded the same way
        names = _FLAT_EVENTS.get(type(event))
        if names is not None:
            # The frequent small events (deltas) hold only JSON scalars: skip the generic walk.
            data = {"type": event.type}
            for name in names:
                data[name] = getattr(event, name)
        else:
            data = event.to_dict()
        return _json.dumps_bytes(data)

    def error_json(self, agent_name: str, session_id: str, exc: BaseException) -> bytes:
        """A ``run_error`` event for a call that failed before the agent could report it."""
        return _json.dumps_bytes(
            {
                "type": ev.RunError.type,
                "reply_id": "",
                "session_id": session_id,
                "source": agent_name,
                "error": str(exc) or type(exc).__name__,
                "error_type": type(exc).__name__,
            }
        )

    def stream_run(
        self, agent_name: str, agent: AgentBase, ctx: RuntimeContext, input: AgentInput
    ) -> EventStreamResponse:
        """Run the agent and answer with its events as SSE, each frame numbered for ``Last-Event-ID``.

        The run belongs to the server, not to the connection: a client that reconnects with
        ``GET .../sessions/{id}/events`` and ``Last-Event-ID`` continues where it left off; when no
        client reads it any more, the run is cancelled (and checkpointed) after the disconnect grace.
        """
        self.ensure_accepting()
        public = ctx.key[1]
        live = self.runs.start_live(
            agent,
            agent_name,
            ctx,
            input,
            lambda event: (event.type, self.event_json(agent_name, event)),
            lambda exc: (ev.RunError.type, self.error_json(agent_name, public, exc)),
        )
        return EventStreamResponse(
            live.reader(0),
            heartbeat=self.heartbeat,
            headers={"X-Session-Id": header_safe(public), "X-Run-Id": live.token},
        )

    def sse_response(
        self,
        events: AsyncIterator[Any],
        request: Request | None = None,
        *,
        encode: Callable[[Any], bytes | str | None] | None = None,
        on_error: Callable[[BaseException], bytes | str | None] | None = None,
        tail: bytes | str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> EventStreamResponse:
        """An SSE response over any async iterator, with heartbeats; a disconnect closes the iterator.

        By default items are agentrt events, framed as ``event: <type>`` + ``data: <json>``; pass
        `encode` (item -> the full frame text, None to skip) for another protocol's framing, and
        `tail` for a last frame (e.g. ``data: [DONE]``). Closing ``agent.stream_events`` stops the
        run and checkpoints it, so a client that goes away never leaves a run behind.
        """
        del request  # part of the signature so a facade can pass it; the response reads the ASGI scope itself
        if encode is None:
            source_encode: Callable[[Any], bytes | None] = _default_frame
        else:
            user_encode = encode

            def source_encode(item: Any) -> bytes | None:
                frame = user_encode(item)
                return frame.encode() if isinstance(frame, str) else frame

        error_encode: Callable[[BaseException], bytes | None] | None = None
        if on_error is not None:
            user_error = on_error

            def error_encode(exc: BaseException) -> bytes | None:
                frame = user_error(exc)
                return frame.encode() if isinstance(frame, str) else frame

        source = IteratorSource(
            events,
            source_encode,
            on_error=error_encode,
            tail=tail.encode() if isinstance(tail, str) else tail,
        )
        return EventStreamResponse(source, heartbeat=self.heartbeat, headers=headers)

    async def shutdown(self) -> None:
        """Refuse new runs (503), interrupt the running ones and wait for their checkpoints."""
        await self.runs.shutdown(self.shutdown_timeout)

    async def check_ready(self) -> list[str]:
        """Problems that make this replica unready (empty when it can serve); passwords are masked."""
        problems: list[str] = []
        if not self.runs.accepting:
            problems.append("shutting down")
            return problems
        stores: dict[int, AgentStateStore] = {}
        for agent in self.agents.values():
            stores.setdefault(id(agent.state_store), agent.state_store)
        for store in stores.values():
            try:
                await asyncio.wait_for(store.load("__agentrt__", "__readyz__"), _READY_TIMEOUT)
            except Exception as exc:
                problem = f"state store {type(store).__name__} unreachable: {type(exc).__name__}: {exc}"
                problems.append(redact_secrets(problem)[:500])
        return problems


_FLAT_EVENTS: dict[type[ev.AgentEvent], tuple[str, ...]] = {
    cls: tuple(f.name for f in dataclasses.fields(cls))
    for cls in (ev.TextDelta, ev.ThinkingDelta, ev.ToolCallStarted, ev.ToolCallDelta, ev.ModelCallStarted)
}


def _default_frame(item: Any) -> bytes | None:
    if isinstance(item, ev.AgentEvent):
        return encode_frame(item.type, item.to_json().encode())
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode()
    return None


def validation_error(exc: ValidationError) -> ApiError:
    """A 422 naming each invalid field."""
    details: list[dict[str, Any]] = []
    parts: list[str] = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(body)"
        details.append({"loc": [str(p) for p in err.get("loc", ())], "msg": err.get("msg", ""), "type": err["type"]})
        if len(parts) < 5:
            parts.append(f"{loc}: {err.get('msg', '')}")
    more = f" (and {len(details) - 5} more)" if len(details) > 5 else ""
    return ApiError(422, "invalid request body: " + "; ".join(parts) + more, code="validation_error", details=details)


def pending_calls(state: AgentState) -> list[dict[str, Any]]:
    """The tool calls a paused session waits for (approvals and external calls, subagents' included)."""
    pending = state.pending or {}
    out: list[dict[str, Any]] = []

    def walk(entries: Any) -> None:
        for entry in entries or ():
            if entry.get("kind") == "subagent":
                walk(entry.get("children"))
            elif entry.get("kind") in ("confirm", "external"):
                out.append(
                    {
                        "id": entry["id"],
                        "name": entry["name"],
                        "input": dict(entry.get("input") or {}),
                        "kind": entry["kind"],
                        "reason": entry.get("reason", ""),
                        "suggested_rules": list(entry.get("suggested_rules") or ()),
                    }
                )

    walk(pending.get("calls"))
    return out


# -- the routes -----------------------------------------------------------------------------------------------
class _Api:
    """The native ``/v1`` routes."""

    def __init__(self, server: ServerContext) -> None:
        self.server = server

    def _target(self, request: Request) -> tuple[str, str, AgentBase, str]:
        server = self.server
        user_id = server.authenticate(request)
        name = request.path_params["agent"]
        agent = server.get_agent(name)
        session_id = server.check_session_id(request.path_params["session_id"])
        return user_id, name, agent, session_id

    async def _answer(
        self, name: str, agent: AgentBase, user_id: str, session_id: str, input: AgentInput, stream: bool
    ) -> Response:
        server = self.server
        ctx = server.context_for(user_id, name, session_id)
        if stream:
            return server.stream_run(name, agent, ctx, input)
        reply = await server.call(agent, input, ctx)
        return json_response(
            {"message": reply.to_dict(), "session_id": session_id}, headers={"X-Session-Id": header_safe(session_id)}
        )

    async def post_message(self, request: Request) -> Response:
        user_id, name, agent, session_id = self._target(request)
        raw = await self.server.parse_json(request)
        body = self.server.validate(raw, MessageRequest)
        input: AgentInput
        if isinstance(body.input, str):
            input = body.input
        else:
            input = [_msg_from_json(item, f"input.{i}") for i, item in enumerate(raw["input"])]
        return await self._answer(name, agent, user_id, session_id, input, body.stream)

    async def post_confirm(self, request: Request) -> Response:
        user_id, name, agent, session_id = self._target(request)
        body = await self.server.parse_body(request, ConfirmRequest)
        waiting = await self._waiting(user_id, name, session_id, "confirm")
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
            data.setdefault("name", entry["name"])
            try:
                results.append(ConfirmResult.coerce(data))
            except (UserError, ValueError, TypeError) as exc:
                raise ApiError(422, f"results.{i}: {exc}", code="validation_error") from None
        msg = Msg.confirm(results, text=body.text)
        return await self._answer(name, agent, user_id, session_id, msg, body.stream)

    async def post_tool_results(self, request: Request) -> Response:
        user_id, name, agent, session_id = self._target(request)
        raw = await self.server.parse_json(request)
        body = self.server.validate(raw, ToolResultsRequest)
        waiting = await self._waiting(user_id, name, session_id, "external")
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
                ToolResultBlock(id=item.tool_call_id, name=item.name or entry["name"], output=output, state=item.state)
            )
        msg = Msg(role="user", content=list(blocks))
        return await self._answer(name, agent, user_id, session_id, msg, body.stream)

    async def _waiting(self, user_id: str, name: str, session_id: str, kind: str) -> dict[str, dict[str, Any]]:
        state = await self.server.ownership_check(user_id, name, session_id)
        waiting = {c["id"]: c for c in pending_calls(state) if c["kind"] == kind}
        if not waiting:
            what = "approval" if kind == "confirm" else "an external tool result"
            raise ApiError(409, f"nothing in this session waits for {what}", code="not_pending")
        return waiting

    async def post_interrupt(self, request: Request) -> Response:
        user_id, name, agent, session_id = self._target(request)
        body = await self.server.parse_body(request, InterruptRequest, allow_empty=True)
        ctx = self.server.context_for(user_id, name, session_id)
        if not self.server.runs.is_running(self.server.session_address(user_id, name, session_id)):
            await self.server.ownership_check(user_id, name, session_id)
        return json_response({"interrupted": agent.interrupt(ctx, msg=body.message)})

    async def get_session(self, request: Request) -> Response:
        user_id, name, _agent, session_id = self._target(request)
        limit = _int_query(request, "limit", default=None, low=0, high=1_000_000)
        state = await self.server.ownership_check(user_id, name, session_id)
        messages = state.messages if limit is None else state.messages[len(state.messages) - limit :] if limit else []
        calls = pending_calls(state)
        pending = None
        if state.pending is not None:
            pending = {"reply_id": (state.pending or {}).get("reply_id"), "tool_calls": calls}
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
            }
        )

    async def delete_session(self, request: Request) -> Response:
        user_id, name, agent, session_id = self._target(request)
        await self.server.ownership_check(user_id, name, session_id)
        key = self.server.state_key(agent)
        store = agent.state_store
        async with store.session_lock(user_id, session_id, timeout=_DELETE_LOCK_TIMEOUT, agent=key):
            existed = await store.delete(user_id, session_id, agent=key)
        if not existed:
            raise ApiError(404, "no such session", code="session_not_found", param="session_id")
        return Response(status_code=204)

    async def get_events(self, request: Request) -> Response:
        user_id, name, _agent, session_id = self._target(request)
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

    async def list_sessions(self, request: Request) -> Response:
        user_id = self.server.authenticate(request)
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
        self.server.authenticate(request)
        return json_response(
            {"agents": [{"name": name, "description": agent.description} for name, agent in self.server.agents.items()]}
        )


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


# -- the app --------------------------------------------------------------------------------------------------------
def _normalise_agents(agents: Mapping[str, AgentBase] | AgentBase | Sequence[AgentBase]) -> dict[str, AgentBase]:
    if isinstance(agents, AgentBase):
        named: dict[str, AgentBase] = {agents.name: agents}
    elif isinstance(agents, Mapping):
        named = dict(agents)
    elif isinstance(agents, Sequence) and not isinstance(agents, (str, bytes)):
        named = {}
        for agent in agents:
            if not isinstance(agent, AgentBase):
                raise UserError(f"agents must be agents, not {type(agent).__name__!r}")
            if agent.name in named:
                raise UserError(f"two agents are named {agent.name!r}; pass a dict to serve them under other names")
            named[agent.name] = agent
    else:
        raise UserError(f"agents must be a dict of name -> agent, an agent or a list of agents, not {agents!r}")
    if not named:
        raise UserError("create_app needs at least one agent")
    for name, agent in named.items():
        if not isinstance(agent, AgentBase):
            raise UserError(f"agents[{name!r}] is a {type(agent).__name__}, not an agent")
        if not isinstance(name, str) or id_problem("agent name", name) or ":" in name or "/" in name:
            raise UserError(f"agent name {name!r} cannot be served: use 1-200 characters without ':', '/' or controls")
    return named


def create_app(
    agents: Mapping[str, AgentBase] | AgentBase | Sequence[AgentBase],
    store: AgentStateStore | None = None,
    api_keys: Mapping[str, str] | ApiKeyAuth | None = None,
    *,
    auth: ApiKeyAuth | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    rate_limit: RateLimit | None = None,
    heartbeat: float = DEFAULT_HEARTBEAT,
    disconnect_grace: float = 2.0,
    event_buffer: int = 1024,
    shutdown_timeout: float = 10.0,
    facades: Sequence[str] = DEFAULT_FACADES,
    static_dir: str | Path | None = None,
    debug: bool = False,
) -> Starlette:
    """The ASGI app serving `agents` over HTTP (see docs/server.md).

    Args:
        agents: ``{"name": agent}`` (or one agent, or a list, served under their own names).
        store: The state store of every agent that has none of its own.
        api_keys: ``{"key": "user_id"}`` or an `ApiKeyAuth`; default: ``AGENTRT_API_KEYS``
            (``key1=user1,key2=user2``). At least one key is required.
        auth: Same as passing an `ApiKeyAuth` as `api_keys`.
        max_body_bytes: Larger request bodies get 413 (default 1 MiB).
        rate_limit: Token bucket per API key (429 with Retry-After); None: unlimited.
        heartbeat: Seconds between ``: ping`` comments on a quiet SSE stream.
        disconnect_grace: Seconds a streamed run survives without any client before it is
            cancelled (and checkpointed); a reconnect with ``Last-Event-ID`` within it resumes.
        event_buffer: Events kept per streamed run for reconnects.
        shutdown_timeout: Seconds to wait for interrupted runs to checkpoint at shutdown.
        facades: Protocol facades to mount when available (``openai``, ``agui``, ``a2a``, or a
            module path exposing ``routes(server)``); one whose module or SDK is missing is skipped.
        static_dir: The web UI's folder (default: the packaged one, served at ``/`` if present).
        debug: Starlette debug mode (tracebacks in 500 responses; never in production).
    """
    named = _normalise_agents(agents)
    if auth is None:
        if isinstance(api_keys, ApiKeyAuth):
            auth = api_keys
        elif api_keys is not None:
            auth = ApiKeyAuth(api_keys)
        else:
            auth = ApiKeyAuth.from_env()
    if len(auth) == 0:
        raise UserError(
            "no API keys configured: pass api_keys={'key': 'user_id'}, set AGENTRT_API_KEYS='key1=user1,...' "
            "or use `agentrt serve --config FILE`"
        )
    if not isinstance(max_body_bytes, int) or max_body_bytes < 1:
        raise UserError(f"max_body_bytes must be a positive integer, not {max_body_bytes!r}")
    if store is not None:
        for agent in named.values():
            if not agent.has_own_store:
                agent.state_store = store
    server = ServerContext(
        agents=named,
        store=store,
        auth=auth,
        max_body_bytes=max_body_bytes,
        rate_limiter=RateLimiter(rate_limit) if rate_limit is not None else None,
        heartbeat=heartbeat,
        shutdown_timeout=shutdown_timeout,
        runs=RunRegistry(buffer_size=event_buffer, disconnect_grace=disconnect_grace),
    )
    api = _Api(server)
    session = "/v1/agents/{agent}/sessions/{session_id}"
    routes: list[BaseRoute] = [
        Route("/v1/agents", api.list_agents, methods=["GET"]),
        Route("/v1/agents/{agent}/sessions", api.list_sessions, methods=["GET"]),
        Route(session, api.get_session, methods=["GET"]),
        Route(session, api.delete_session, methods=["DELETE"]),
        Route(session + "/messages", api.post_message, methods=["POST"]),
        Route(session + "/confirm", api.post_confirm, methods=["POST"]),
        Route(session + "/tool-results", api.post_tool_results, methods=["POST"]),
        Route(session + "/interrupt", api.post_interrupt, methods=["POST"]),
        Route(session + "/events", api.get_events, methods=["GET"]),
    ]
    extra_paths: dict[str, Any] = {}
    for facade in facades:
        routes.extend(_load_facade(facade, server, extra_paths))

    schema: dict[str, Any] | None = None

    async def openapi(request: Request) -> Response:
        nonlocal schema
        if schema is None:
            schema = build_openapi(list(named), extra_paths=extra_paths)
        return json_response(schema)

    async def readyz(request: Request) -> Response:
        # Probes call it without a key: they get pass/fail only. The problems name the store's
        # host, port and database, so only a caller with a valid API key sees them.
        problems = await server.check_ready()
        status = "ready" if not problems else "shutting_down" if not server.runs.accepting else "unavailable"
        body: dict[str, Any] = {"status": status}
        if request.headers.get("authorization"):
            with contextlib.suppress(ApiError):
                server.authenticate(request)
                body["problems"] = problems
        return json_response(body, 503 if problems else 200)

    routes += [
        Route("/openapi.json", openapi, methods=["GET"], include_in_schema=False),
        Route("/healthz", _healthz, methods=["GET"], include_in_schema=False),
        Route("/readyz", readyz, methods=["GET"], include_in_schema=False),
    ]
    routes += _metrics_routes()
    routes += _static_routes(Path(static_dir) if static_dir is not None else _STATIC)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        server.runs.accepting = True  # an app can be started again after a shutdown (tests do)
        await server.migrate_legacy_sessions()
        yield
        await server.shutdown()

    app = Starlette(
        debug=debug,
        routes=routes,
        lifespan=lifespan,
        exception_handlers={
            ApiError: _api_error,
            HTTPException: _http_error,
            ClientDisconnect: _client_disconnected,
            AgentrtError: _agentrt_error,
            Exception: _server_error,
        },
    )
    app.state.agentrt = server
    return app


def _load_facade(facade: str, server: ServerContext, extra_paths: dict[str, Any]) -> list[BaseRoute]:
    module_name = _FACADE_MODULES.get(facade, facade)
    try:
        module = importlib.import_module(module_name)
        routes: list[BaseRoute] = list(module.routes(server))
        paths = getattr(module, "openapi_paths", None)
        if callable(paths):
            extra_paths.update(paths(server))
    except ImportError as exc:
        logger.info("facade %r is not available (%s: %s); skipped", facade, type(exc).__name__, exc)
        return []
    return routes


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


# -- error handlers -------------------------------------------------------------------------------------------------
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
    error = error_for_exception(exc)
    if error is None:
        return await _server_error(request, exc)
    if error.status >= 500:
        logger.warning("%s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
    return error.response()


async def _server_error(request: Request, exc: Exception) -> Response:
    logger.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return ApiError(500, "internal server error", code="internal_error").response()
