"""The request context routes and facades share: `ServerContext`, and the session helpers.

Sessions are namespaced twice. Per user: every call runs with
``RuntimeContext(user_id=<authenticated user>, session_id=...)``, so another user's session id is
just a session the caller does not have (404, never 403). Per agent: the store addresses sessions
by ``(agent.state_key, user_id, session_id)``, so agents sharing one store never see each other's
sessions. Sessions earlier versions stored as ``"<agent name>:<session id>"`` are moved under their
agent when the app starts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from agentrt import _json
from agentrt import events as ev
from agentrt.agent.base import AgentBase, AgentInput
from agentrt.context import RuntimeContext
from agentrt.message import Msg
from agentrt.server._auth import Authenticator, RateLimiter, check_rate, require_scope
from agentrt.server._errors import ApiError, http_message, redact_secrets
from agentrt.server._limits import DEFAULT_MAX_BODY_BYTES, BodyTooLargeError, header_safe, id_problem, read_body
from agentrt.server._runs import RunRegistry, SessionAddress
from agentrt.server._sse import DEFAULT_HEARTBEAT, EventStreamResponse, IteratorSource, aclose, encode_frame
from agentrt.server.jobs import DurableRuns
from agentrt.state.base import AgentState, AgentStateStore
from agentrt.state.pending import CONFIRM, EXTERNAL, PendingCall, flatten_pending
from agentrt.state.runs import RunRetention
from agentrt.tool.questions import QuestionPolicy

__all__ = ["ServerContext", "citations_of", "encode_event", "pending_calls", "validation_error"]

logger = logging.getLogger("agentrt.server")

M = TypeVar("M", bound=BaseModel)

_READY_TIMEOUT = 2.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerContext:
    """Everything a route needs: agents, auth, limits and the runs in flight, with helpers.

    Facades (``agentrt.server.agui``, ``agentrt.server.a2a``) receive it in ``routes(server)`` and
    reuse the helpers, so every protocol authenticates, limits, namespaces sessions and shuts down
    the same way. Helpers raise `ApiError`; the app turns it into a JSON error response.
    """

    agents: Mapping[str, AgentBase]
    store: AgentStateStore | None
    auth: Authenticator
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    rate_limiter: RateLimiter | None = None
    heartbeat: float = DEFAULT_HEARTBEAT
    shutdown_timeout: float = 10.0
    runs: RunRegistry = field(default_factory=RunRegistry)
    jobs: DurableRuns | None = None
    """Durable runs (`agentrt.server.jobs`): messages become jobs any replica's worker runs; None: in process."""
    run_records: RunRetention | None = field(default_factory=lambda: RunRetention.from_env())
    """Run timelines (`agentrt.middleware.timeline`): recorded for every served agent with these bounds, and
    served by ``GET .../sessions/{id}/runs``; None: not recorded. Default: `RunRetention` from the environment
    (``AGENTRT_RUN_RECORDS=off`` turns recording off; see docs/server.md)."""

    # -- requests ---------------------------------------------------------------------------------------------
    async def authenticate(self, request: Request, *, scope: str | None = None) -> str:
        """The user id of the request's ``Authorization: Bearer <key or token>``.

        `ApiError` 401 if the credentials are missing, unknown or invalid, 429 if the caller is over
        its rate limit, 403 if it lacks `scope` (a `Scope`; None: any authenticated caller). The
        caller's `Principal` is left in ``request.state.principal``.
        """
        principal = await self.auth.authenticate(request.headers.get("authorization"))
        check_rate(self.rate_limiter, principal)
        require_scope(principal, scope)
        request.state.user_id = principal.user_id
        request.state.principal = principal
        return principal.user_id

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
        """The context of a call by `user_id` on `session_id` of the agent served as `agent_name`.

        Its run's questions (MCP elicitations) are declined at once: a facade's client cannot see
        them. `stream_run`, whose SSE client can answer with ``POST .../answers``, lets it ask.
        """
        del agent_name  # the agent part of the address is the agent's state_key, added by the agent
        return RuntimeContext(user_id=user_id, session_id=session_id).put(QuestionPolicy, QuestionPolicy(ask=False))

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
        return encode_event(event)

    def error_json(self, agent_name: str, session_id: str, exc: BaseException) -> bytes:
        """A ``run_error`` event for a call that failed before the agent could report it."""
        return _json.dumps_bytes(
            {
                "type": ev.RunError.type,
                "reply_id": "",
                "session_id": session_id,
                "source": agent_name,
                "error": http_message(str(exc), agent=agent_name, session_id=session_id) or type(exc).__name__,
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
        # The stream's client sees `mcp_elicitation` events and answers them with POST .../answers.
        ctx.put(QuestionPolicy, QuestionPolicy(ask=True))
        live = self.runs.start_live(
            agent,
            agent_name,
            ctx,
            input,
            self.event_bytes,
            functools.partial(self.error_json, agent_name, public),
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
        """Refuse new runs (503), interrupt the running ones and wait for their checkpoints.

        With durable runs, this process's workers stop claiming, finish their jobs within the
        shutdown timeout and hand the rest back, so other replicas resume them at once.
        """
        self.runs.accepting = False
        if self.jobs is not None:
            await self.jobs.drain(self.shutdown_timeout)
        await self.runs.shutdown(self.shutdown_timeout)

    # -- durable runs ----------------------------------------------------------------------------------------
    def event_bytes(self, event: ev.AgentEvent) -> bytes:
        """An event's JSON as the SSE stream carries it (the encoder of this server's job workers)."""
        return encode_event(event)

    async def stream_job(
        self, agent_name: str, user_id: str, session_id: str, input: AgentInput
    ) -> EventStreamResponse:
        """Record the run as a job and answer with its event stream (from the log, any replica's worker)."""
        self.ensure_accepting()
        assert self.jobs is not None
        job = await self.jobs.submit(agent_name, user_id, session_id, input)
        return EventStreamResponse(
            self.jobs.events(job.id),
            heartbeat=self.heartbeat,
            headers={"X-Session-Id": header_safe(session_id), "X-Run-Id": job.id},
        )

    async def call_job(self, agent_name: str, user_id: str, session_id: str, input: AgentInput) -> Msg:
        """Record the run as a job and wait for its reply (whichever worker runs it)."""
        self.ensure_accepting()
        assert self.jobs is not None
        job = await self.jobs.submit(agent_name, user_id, session_id, input)
        return await self.jobs.result(job)

    async def job_agent_events(
        self, agent_name: str, user_id: str, session_id: str, input: AgentInput
    ) -> AsyncIterator[ev.AgentEvent]:
        """Record the run as a job; its events as objects, read back from the log (for facades).

        The durable counterpart of `stream_events` for facades with their own framing: the run
        belongs to the job, so it goes on (and survives this replica) when the reader stops. A run
        that failed raises `JobRunError` (its error's type and message) after its ``run_error`` event.
        """
        self.ensure_accepting()
        assert self.jobs is not None
        job = await self.jobs.submit(agent_name, user_id, session_id, input)
        return self.jobs.agent_events(job.id)

    async def job_events(
        self, agent_name: str, user_id: str, session_id: str, job_id: str, after: int
    ) -> EventStreamResponse | None:
        """The events after `after` of the caller's own run `job_id`; None when there is no such run."""
        if self.jobs is None:
            return None
        job = await self.jobs.backend.job(job_id)
        if job is None or (job.agent, job.user_id, job.session_id) != (agent_name, user_id, session_id):
            return None  # unknown, expired, or someone else's: the same answer
        return EventStreamResponse(
            self.jobs.events(job_id, after),
            heartbeat=self.heartbeat,
            headers={"X-Session-Id": header_safe(session_id), "X-Run-Id": job_id},
        )

    async def check_ready(self) -> list[str]:
        """Problems that make this replica unready (empty when it can serve); passwords are masked."""
        problems: list[str] = []
        if not self.runs.accepting:
            problems.append("shutting down")
            return problems
        if self.jobs is not None:
            try:
                await asyncio.wait_for(self.jobs.depth(), _READY_TIMEOUT)
            except Exception as exc:
                problems.append(redact_secrets(f"job backend unreachable: {type(exc).__name__}: {exc}")[:500])
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


def encode_event(event: ev.AgentEvent) -> bytes:
    """An event as the JSON the SSE streams carry (the encoder of the server and its job workers)."""
    cls = type(event)
    names = _FLAT_EVENTS.get(cls)
    if names is not None:
        # The frequent small events (deltas) hold only JSON scalars: skip the generic walk.
        data = {"type": event.type}
        for name in names:
            data[name] = getattr(event, name)
        return _json.dumps_bytes(data)
    # `event.to_dict()` in JSON, with messages through their own `to_dict` and orjson walking the
    # rest (the same bytes as ``dumps_bytes(event.to_dict())``, without a Python walk of it).
    names = _EVENT_FIELDS.get(cls)
    if names is None:
        names = _EVENT_FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    data = {"type": event.type}
    for name in names:
        value = getattr(event, name)
        if name == "error" and cls is ev.RunError:
            # The runtime's message may say how to answer in Python (`Msg.confirm`): say it the HTTP way.
            value = http_message(value, agent=event.source or None, session_id=event.session_id or None)
        elif type(value) is Msg:
            value = value.to_dict()
        elif type(value) is list and value and all(type(m) is Msg for m in value):
            value = [m.to_dict() for m in value]
        data[name] = value
    return _json.dumps_jsonable_bytes(data)


_EVENT_FIELDS: dict[type[ev.AgentEvent], tuple[str, ...]] = {}
"""Field names per event class, for `ServerContext.event_json`."""

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


def pending_calls(state: AgentState) -> list[PendingCall]:
    """The tool calls a paused session waits for (approvals and external calls, subagents' included)."""
    return [c for c in flatten_pending(state.pending) if c.kind in (CONFIRM, EXTERNAL)]


def citations_of(reply: Msg) -> list[dict[str, str | None]]:
    """The knowledge citations of a reply (``metadata["citations"]``), in the `Citation.to_dict` shape.

    What the facades pass on; entries without that shape are left out, so a reply written by other
    code can never break a response.
    """
    from agentrt.agent._knowledge import CITATIONS, citation_list

    return citation_list(reply.metadata.get(CITATIONS)) if reply.metadata else []
