"""The app class: Starlette, with a direct path to the session routes.

Every request through a Starlette app crosses two middlewares, the router's linear match and the
route's own exception wrapper: four coroutine frames, three ``send`` wrappers, two `Request`
objects and a dozen closures before the endpoint runs, and again for every frame the response
sends. Under a burst of streamed runs those objects outlive the request (a run streams for the
model's whole latency), so they also feed the garbage collector. `AgentrtApp` answers the
``/v1/agents/{agent}/sessions/{session_id}/…`` routes with one frame instead: the same endpoint,
the same exception handlers (looked up exactly as Starlette's middlewares do), the same scope
keys. Anything it cannot vouch for takes Starlette's way: middleware a user added, debug mode,
a mount point (``root_path``), another route listed before a session route that could answer the
same path, a method the route does not allow.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import Message, Receive, Scope, Send

__all__ = ["AgentrtApp", "SESSION_PREFIX"]

logger = logging.getLogger("agentrt.server")

SESSION_PREFIX = "/v1/agents/{agent}/sessions/{session_id}"
_SHAPE = ("", "v1", "agents", None, "sessions", None)
Endpoint = Callable[[Request], Awaitable[Response]]


class AgentrtApp(Starlette):
    """The agentrt server app (a `Starlette` app; see the module docstring for its direct path)."""

    _fast_routes: dict[tuple[str, str], Route]
    _fast_known: frozenset[int]
    _fast_checked: tuple[int, ...] | None
    _fast_safe: bool

    def enable_direct_routes(self, routes: Sequence[BaseRoute]) -> None:
        """Answer the session routes among `routes` without the middleware stack.

        `routes` are the app's own native routes: those under `SESSION_PREFIX` with at most one
        literal segment after it are answered directly; the others are known not to overlap them.
        """
        table: dict[tuple[str, str], Route] = {}
        for route in routes:
            if not isinstance(route, Route) or not route.path.startswith(SESSION_PREFIX):
                continue
            tail = route.path[len(SESSION_PREFIX) :].lstrip("/")
            if "/" in tail or "{" in tail or not inspect.iscoroutinefunction(route.endpoint):
                continue
            for method in route.methods or ():
                table[(method, tail)] = route
        self._fast_routes = table
        self._fast_known = frozenset(map(id, routes))
        self._fast_checked = None
        self._fast_safe = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            route = self._direct_route(scope)
            if route is not None:
                await self._answer(route, scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    # -- matching -------------------------------------------------------------------------------------------
    def _direct_route(self, scope: Scope) -> Route | None:
        table: dict[tuple[str, str], Route] | None = getattr(self, "_fast_routes", None)
        if not table or scope.get("root_path") or self.debug or self.user_middleware:
            return None
        if getattr(self, "max_body_size", None) is not None:
            return None
        parts = scope["path"].split("/")
        n = len(parts)
        if n == 6:
            tail = ""
        elif n == 7 and parts[6]:  # a trailing slash is Starlette's (a redirect)
            tail = parts[6]
        else:
            return None
        if parts[0] or parts[1] != "v1" or parts[2] != "agents" or parts[4] != "sessions":
            return None
        if not parts[3] or not parts[5]:
            return None
        route = table.get((scope["method"], tail))
        if route is None or not self._routes_safe():
            return None
        scope["path_params"] = {"agent": parts[3], "session_id": parts[5]}
        return route

    def _routes_safe(self) -> bool:
        """Whether Starlette's router would pick the same routes (checked again when the list changes)."""
        routes = self.router.routes
        signature = tuple(map(id, routes))
        if signature != self._fast_checked:
            self._fast_checked = signature
            self._fast_safe = _no_route_shadows(routes, set(map(id, self._fast_routes.values())), self._fast_known)
        return self._fast_safe

    # -- answering ------------------------------------------------------------------------------------------
    async def _answer(self, route: Route, scope: Scope, receive: Receive, send: Send) -> None:
        scope["app"] = self
        scope["router"] = self.router
        scope["route"] = route
        scope["endpoint"] = route.endpoint
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        request = Request(scope, receive, tracked)
        try:
            endpoint: Endpoint = route.endpoint
            response = await endpoint(request)
            await response(scope, receive, tracked)
        except Exception as exc:
            if started:
                raise
            handler, server_error = self._handler_for(exc)
            response = await handler(request, exc)
            await response(scope, receive, send)
            if server_error:
                raise  # as Starlette's ServerErrorMiddleware does: the server logs the failure too

    def _handler_for(self, exc: Exception) -> tuple[Callable[[Request, Exception], Awaitable[Response]], bool]:
        """The handler Starlette's middlewares would pick, and whether it is the 500 handler."""
        handlers = self.exception_handlers
        if isinstance(exc, HTTPException):
            by_status = handlers.get(exc.status_code)
            if by_status is not None and exc.status_code != 500:
                return by_status, False
        for cls in type(exc).__mro__:
            if cls is Exception:
                break
            handler = handlers.get(cls)
            if handler is not None:
                return handler, False
        fallback = handlers.get(Exception) or handlers.get(500)
        if fallback is None:
            return _plain_server_error, True
        return fallback, True


async def _plain_server_error(request: Request, exc: Exception) -> Response:
    return Response("Internal Server Error", status_code=500, media_type="text/plain")


def _no_route_shadows(routes: Sequence[BaseRoute], direct: set[int], known: frozenset[int]) -> bool:
    """True when nothing listed before the direct routes could answer one of their paths.

    The app's own native routes may come first (their paths are known not to overlap), and so may
    routes with a literal path of another shape (a stats or health route); any other route (with
    parameters, a mount, a host route) may match anything and turns the direct path off.
    """
    remaining = set(direct)
    for route in routes:
        if not remaining:
            return True
        key = id(route)
        if key in known:
            remaining.discard(key)
            continue
        if isinstance(route, Route) and "{" not in route.path:
            parts = route.path.split("/")
            if len(parts) in (6, 7) and all(
                want is None or want == got for want, got in zip(_SHAPE, parts, strict=False)
            ):
                return False
            continue
        return False
    return not remaining
