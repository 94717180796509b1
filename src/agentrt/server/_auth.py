"""Who is calling: `Authenticator`s (API keys, OIDC bearer tokens), scopes, and rate limits per caller.

An `Authenticator` turns the ``Authorization`` header into a `Principal` (a user id and the
`Scope`s it holds) or raises `ApiError` 401. `ApiKeyAuth` holds static keys; `OidcAuth`
(``server/_oidc.py``) validates JWTs from an OpenID Connect provider; `CombinedAuth` tries several
in order; `DevAuth` lets everyone in as one local user (``agentrt serve --dev``, loopback only).
The server then checks the route's scope (403) and the caller's rate limit (429).

API keys are kept only as SHA-256 digests: a lookup hashes the presented key and compares digests
with `hmac.compare_digest`, so neither the comparison time nor a memory dump reveals a key, and no
key ever reaches a log line or a ``repr``.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import ipaddress
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from agentrt.errors import UserError
from agentrt.server._errors import ApiError

__all__ = [
    "ALL_SCOPES",
    "AUTH_HEADER",
    "DEFAULT_TOKEN_SCOPES",
    "ENV_API_KEYS",
    "DEV_USER",
    "ApiKeyAuth",
    "Authenticator",
    "CombinedAuth",
    "DevAuth",
    "OpenAccessHeader",
    "Principal",
    "RateLimit",
    "RateLimiter",
    "Scope",
    "authenticate",
    "bearer_credentials",
    "check_rate",
    "is_configured",
    "is_loopback",
    "parse_api_keys_env",
    "require_scope",
]

ENV_API_KEYS = "AGENTRT_API_KEYS"
"""Environment variable with ``key1=user1,key2=user2``."""

MAX_USER_ID = 200
"""Longest user id a credential may map to."""


class Scope(enum.StrEnum):
    """What a caller may do; each route needs one (`ADMIN` grants every one)."""

    SESSIONS_READ = "sessions:read"
    """List agents and sessions; read a session, its events and its open questions."""
    MESSAGES_WRITE = "messages:write"
    """Post messages, interrupt, answer questions, delete a session; the OpenAI, AG-UI and A2A run endpoints."""
    TOOLS_APPROVE = "tools:approve"
    """Approve or deny tool calls (``/confirm``) and send external tool results (``/tool-results``)."""
    KNOWLEDGE_READ = "knowledge:read"
    """List and search the caller's knowledge bases."""
    KNOWLEDGE_WRITE = "knowledge:write"
    """Add and delete documents, drop knowledge bases."""
    ADMIN = "admin"
    """Everything, and the store problems ``/readyz`` lists."""


ALL_SCOPES: frozenset[str] = frozenset(scope.value for scope in Scope)
"""Every scope: what an API key without explicit scopes holds."""
DEFAULT_TOKEN_SCOPES: frozenset[str] = ALL_SCOPES - {Scope.ADMIN.value}
"""What a token naming none of agentrt's scopes holds by default (`OidcAuth(default_scopes=...)`)."""


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller: its user id, its scopes, and the id of its rate-limit bucket."""

    user_id: str
    scopes: frozenset[str] = ALL_SCOPES
    rate_key: str = ""
    """The caller's token bucket (`RateLimiter`); empty: one per user id."""

    def allows(self, scope: str | None) -> bool:
        """Whether the caller holds `scope` (None: any authenticated caller; `Scope.ADMIN` holds every scope)."""
        return scope is None or scope in self.scopes or Scope.ADMIN in self.scopes

    def __repr__(self) -> str:
        return f"Principal(user_id={self.user_id!r}, scopes={sorted(self.scopes)!r})"


@runtime_checkable
class Authenticator(Protocol):
    """Turns an ``Authorization`` header into a `Principal`, or raises `ApiError` (401; 503 if it cannot tell)."""

    async def authenticate(self, authorization: str | None) -> Principal: ...


def parse_scopes(value: Any, where: str) -> frozenset[str]:
    """Scope names from a list (or a space-separated string), each one of `Scope` (`UserError` otherwise)."""
    items = value.split() if isinstance(value, str) else value
    if not isinstance(items, Iterable) or isinstance(items, Mapping):
        raise UserError(f"{where} must be a list of scopes, not {type(value).__name__}")
    scopes: set[str] = set()
    for item in items:
        if not isinstance(item, str) or item not in ALL_SCOPES:
            raise UserError(f"{where}: unknown scope {item!r}; known: {', '.join(sorted(ALL_SCOPES))}")
        scopes.add(item)
    return frozenset(scopes)


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def parse_api_keys_env(value: str) -> dict[str, str]:
    """Parse ``key1=user1,key2=user2`` (whitespace around items is ignored)."""
    keys: dict[str, str] = {}
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, user = item.partition("=")
        key, user = key.strip(), user.strip()
        if not sep or not key or not user:
            # Never echo the item: it holds a key.
            raise UserError(f"{ENV_API_KEYS} must look like 'key1=user1,key2=user2'; an item has no '=' or is empty")
        keys[key] = user
    return keys


_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="agentrt"'}


def bearer_credentials(authorization: str | None, *, what: str = "API key", code: str = "invalid_api_key") -> str:
    """The credentials of an ``Authorization: Bearer <credentials>`` header (`ApiError` 401 if missing or malformed)."""
    if not authorization:
        missing = "missing_api_key" if code == "invalid_api_key" else "missing_token"
        raise ApiError(401, f"missing {what}: send 'Authorization: Bearer <{what}>'", code=missing, headers=_CHALLENGE)
    scheme, _, credentials = authorization.partition(" ")
    credentials = credentials.strip()
    if scheme.lower() != "bearer" or not credentials:
        raise ApiError(
            401, f"malformed Authorization header: expected 'Bearer <{what}>'", code=code, headers=_CHALLENGE
        )
    return credentials


class ApiKeyAuth:
    """Bearer API keys mapped to user ids (and, optionally, to scopes).

    ``ApiKeyAuth({"sk-alice": "alice"})``: the key's user holds every scope. A key limited to some
    scopes maps to ``{"user": "bob", "scopes": ["sessions:read"]}``. `user_for(key)` returns the
    user id or None.
    """

    __slots__ = ("_principals",)

    def __init__(self, api_keys: Mapping[str, str | Mapping[str, Any]]) -> None:
        principals: dict[bytes, Principal] = {}
        for key, grant in api_keys.items():
            if not isinstance(key, str) or not key.strip():
                raise UserError("API keys must be non-empty strings")
            scopes = ALL_SCOPES
            if isinstance(grant, Mapping):
                unknown = set(grant) - {"user", "scopes"}
                if unknown or "user" not in grant:
                    raise UserError("an API key maps to a user id, or to {'user': <user id>, 'scopes': [...]}")
                if "scopes" in grant:
                    scopes = parse_scopes(grant["scopes"], "an API key's scopes")
                user = grant["user"]
            else:
                user = grant
            if not isinstance(user, str) or not user or len(user) > MAX_USER_ID:
                raise UserError("every API key must map to a user id (a non-empty string of at most 200 characters)")
            digest = _digest(key)
            principals[digest] = Principal(user, scopes, "key:" + digest[:8].hex())
        self._principals = principals

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ApiKeyAuth:
        """Keys from ``AGENTRT_API_KEYS`` (empty when unset)."""
        env = os.environ if environ is None else environ
        return cls(parse_api_keys_env(env.get(ENV_API_KEYS, "")))

    def __len__(self) -> int:
        return len(self._principals)

    def principal_for(self, key: str) -> Principal | None:
        """The caller `key` authenticates, or None when it is unknown."""
        digest = _digest(key)
        found = self._principals.get(digest)
        if found is None:
            return None
        # The dict lookup only ever sees digests; confirm in constant time all the same.
        for stored in self._principals:
            if hmac.compare_digest(stored, digest):
                return found
        return None  # pragma: no cover - the lookup found it

    def user_for(self, key: str) -> str | None:
        """The user id of `key`, or None when it is unknown."""
        found = self.principal_for(key)
        return None if found is None else found.user_id

    async def authenticate(self, authorization: str | None) -> Principal:
        """The caller of ``Authorization: Bearer <key>`` (`ApiError` 401 when missing, malformed or unknown)."""
        found = self.principal_for(bearer_credentials(authorization))
        if found is None:
            raise ApiError(401, "invalid API key", code="invalid_api_key", headers=_CHALLENGE)
        return found

    @staticmethod
    def key_id(key: str) -> str:
        """A short, non-reversible tag of a key (for rate-limit buckets and logs)."""
        return _digest(key)[:8].hex()

    def __repr__(self) -> str:
        return f"ApiKeyAuth({len(self._principals)} key(s))"


class CombinedAuth:
    """Several authenticators tried in order: the first that accepts the credentials wins.

    ``CombinedAuth([ApiKeyAuth(keys), OidcAuth(...)])`` accepts static keys (a digest lookup, tried
    first) and tokens. A 401 from one moves on to the next; the last one's 401 is the answer. Any
    other error (503: the identity provider cannot be reached) is the answer at once.
    """

    __slots__ = ("authenticators",)

    def __init__(self, authenticators: Sequence[Authenticator]) -> None:
        members = tuple(authenticators)
        if not members:
            raise UserError("CombinedAuth needs at least one authenticator")
        for member in members:
            if not isinstance(member, Authenticator):
                raise UserError(f"{type(member).__name__} is not an authenticator (no async authenticate method)")
        self.authenticators = members

    async def authenticate(self, authorization: str | None) -> Principal:
        failure: ApiError | None = None
        for member in self.authenticators:
            try:
                return await member.authenticate(authorization)
            except ApiError as exc:
                if exc.status != 401:
                    raise
                failure = exc
        assert failure is not None  # the constructor refuses an empty list
        raise failure

    def __repr__(self) -> str:
        return f"CombinedAuth({', '.join(map(repr, self.authenticators))})"


DEV_USER = "dev"
"""The user every request is in `agentrt serve --dev` (`DevAuth`)."""


class DevAuth:
    """No authentication: every request is `user_id`, holding every scope (``agentrt serve --dev``).

    For local development only: the server refuses ``--dev`` on an interface other than loopback
    and together with API keys or OIDC. An ``Authorization`` header, if any, is ignored.
    """

    __slots__ = ("principal",)

    def __init__(self, user_id: str = DEV_USER) -> None:
        if not isinstance(user_id, str) or not user_id or len(user_id) > MAX_USER_ID:
            raise UserError("DevAuth needs a user id (a non-empty string of at most 200 characters)")
        self.principal = Principal(user_id, ALL_SCOPES, "dev:" + user_id)

    async def authenticate(self, authorization: str | None) -> Principal:
        return self.principal

    def __repr__(self) -> str:
        return f"DevAuth(user_id={self.principal.user_id!r})"


AUTH_HEADER = "x-agentrt-auth"
"""Response header of an app that needs no credentials (value ``none``): the web UI asks for no key."""

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost", "ip6-loopback"})


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address, IPv6 in brackets or not) is this machine only.

    ``127.0.0.0/8``, ``::1`` and ``localhost`` are.
    """
    name = host.strip().strip("[]").lower()
    if name in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _header_host(value: str) -> str:
    """The host name of a ``Host`` header or an ``Origin`` (``http://[::1]:8000`` -> ``::1``)."""
    value = value.strip().lower()
    if "://" in value:
        value = value.split("://", 1)[1].split("/", 1)[0]
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class OpenAccessHeader:
    """ASGI middleware of a `DevAuth` app: only this machine's pages and programs, and it says so.

    Every HTTP response carries ``X-Agentrt-Auth: none`` (the web UI reads it on ``/healthz`` to
    skip its API-key dialog). A request from another machine (the peer address is not loopback, in
    case the app was bound to a public interface by other means than ``agentrt serve --dev``), whose
    ``Host`` is not a loopback name (DNS rebinding: a web page whose own name resolves to
    127.0.0.1), or that a page of another site sends (its ``Origin`` is not loopback), is refused
    with 403 before it reaches a route.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope.get("headers", ())}
        host, origin = headers.get("host", ""), headers.get("origin")
        client = scope.get("client")  # None on a Unix socket: only this machine's programs reach it
        remote = client is not None and not is_loopback(str(client[0]))
        foreign_page = origin is not None and not is_loopback(_header_host(origin))
        if remote or foreign_page or not is_loopback(_header_host(host)):
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            refused = ApiError(
                403,
                "this server runs with --dev (no authentication) and only answers pages and programs of this "
                "machine, addressed as localhost or a loopback address",
                code="dev_mode_not_local",
            )
            await refused.response()(scope, receive, send)
            return

        async def send_with_header(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), (AUTH_HEADER.encode(), b"none")]}
            await send(message)

        await self.app(scope, receive, send_with_header)


def is_configured(auth: Authenticator) -> bool:
    """False for an authenticator that can accept no one: an `ApiKeyAuth` without keys (or only such ones)."""
    if isinstance(auth, ApiKeyAuth):
        return len(auth) > 0
    if isinstance(auth, CombinedAuth):
        return any(is_configured(member) for member in auth.authenticators)
    return True


def require_scope(principal: Principal, scope: str | None) -> None:
    """`ApiError` 403 unless `principal` holds `scope` (the caller is known; the route is not theirs to use)."""
    if principal.allows(scope):
        return
    raise ApiError(
        403,
        f"these credentials do not grant the scope {scope!r} this route needs",
        code="insufficient_scope",
        headers={"WWW-Authenticate": f'Bearer realm="agentrt", error="insufficient_scope", scope="{scope}"'},
    )


@dataclass(frozen=True, slots=True)
class RateLimit:
    """A token bucket: `rate` requests per second on average, bursts of up to `burst`."""

    rate: float
    burst: int

    def __post_init__(self) -> None:
        if not self.rate > 0 or not math.isfinite(self.rate):
            raise UserError(f"RateLimit.rate must be a positive number of requests per second, not {self.rate!r}")
        if not isinstance(self.burst, int) or self.burst < 1:
            raise UserError(f"RateLimit.burst must be a positive integer, not {self.burst!r}")


class RateLimiter:
    """One token bucket per caller (`Principal.rate_key`: per API key, per token user).

    Only authenticated callers get a bucket. Token users are not known in advance, so at most
    `max_buckets` are kept: the least recently used one goes first (it is the likeliest to be full
    again, so dropping it changes nothing).
    """

    __slots__ = ("_buckets", "_clock", "limit", "max_buckets")

    def __init__(
        self, limit: RateLimit, *, clock: Callable[[], float] = time.monotonic, max_buckets: int = 100_000
    ) -> None:
        self.limit = limit
        self.max_buckets = max_buckets
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}

    def acquire(self, key_id: str) -> float:
        """Take one token; returns 0 when allowed, else the seconds until a token is available."""
        now = self._clock()
        rate, burst = self.limit.rate, float(self.limit.burst)
        tokens, last = self._buckets.pop(key_id, (burst, now))  # re-inserted last: the dict is in LRU order
        tokens = min(burst, tokens + (now - last) * rate)
        allowed = tokens >= 1.0
        self._buckets[key_id] = (tokens - 1.0 if allowed else tokens, now)
        while len(self._buckets) > self.max_buckets:
            del self._buckets[next(iter(self._buckets))]
        return 0.0 if allowed else (1.0 - tokens) / rate


def check_rate(rate_limiter: RateLimiter | None, principal: Principal) -> None:
    """`ApiError` 429 (with ``Retry-After``) when `principal` has used up its requests."""
    if rate_limiter is None:
        return
    wait = rate_limiter.acquire(principal.rate_key or "user:" + principal.user_id)
    if wait > 0:
        seconds = max(1, math.ceil(wait))
        raise ApiError(
            429,
            f"rate limit exceeded for these credentials; retry in {seconds} s",
            code="rate_limit_exceeded",
            headers={"Retry-After": str(seconds)},
        )


def authenticate(auth: ApiKeyAuth, authorization: str | None, rate_limiter: RateLimiter | None = None) -> str:
    """The user id of an ``Authorization: Bearer <key>`` header (`ApiError`: 401 missing or unknown, 429 limited).

    The synchronous API-key check of earlier versions; the server itself awaits
    `Authenticator.authenticate` (``ServerContext.authenticate``).
    """
    principal = auth.principal_for(bearer_credentials(authorization))
    if principal is None:
        raise ApiError(401, "invalid API key", code="invalid_api_key", headers=_CHALLENGE)
    check_rate(rate_limiter, principal)
    return principal.user_id
