"""API keys mapped to user ids, and per-key rate limits (token buckets).

Keys are kept only as SHA-256 digests: a lookup hashes the presented key and compares digests with
`hmac.compare_digest`, so neither the comparison time nor a memory dump reveals a key, and no key
ever reaches a log line or a ``repr``.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from agentrt.errors import UserError
from agentrt.server._errors import ApiError

__all__ = ["ENV_API_KEYS", "ApiKeyAuth", "RateLimit", "RateLimiter", "authenticate", "parse_api_keys_env"]

ENV_API_KEYS = "AGENTRT_API_KEYS"
"""Environment variable with ``key1=user1,key2=user2``."""


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


class ApiKeyAuth:
    """Bearer API keys mapped to user ids.

    ``ApiKeyAuth({"sk-alice": "alice"})``; `user_for(key)` returns the user id or None.
    """

    __slots__ = ("_users",)

    def __init__(self, api_keys: Mapping[str, str]) -> None:
        users: dict[bytes, str] = {}
        for key, user in api_keys.items():
            if not isinstance(key, str) or not key.strip():
                raise UserError("API keys must be non-empty strings")
            if not isinstance(user, str) or not user or len(user) > 200:
                raise UserError("every API key must map to a user id (a non-empty string of at most 200 characters)")
            users[_digest(key)] = user
        self._users = users

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ApiKeyAuth:
        """Keys from ``AGENTRT_API_KEYS`` (empty when unset)."""
        env = os.environ if environ is None else environ
        return cls(parse_api_keys_env(env.get(ENV_API_KEYS, "")))

    def __len__(self) -> int:
        return len(self._users)

    def user_for(self, key: str) -> str | None:
        """The user id of `key`, or None when it is unknown."""
        digest = _digest(key)
        found = self._users.get(digest)
        if found is None:
            return None
        # The dict lookup only ever sees digests; confirm in constant time all the same.
        for stored in self._users:
            if hmac.compare_digest(stored, digest):
                return found
        return None  # pragma: no cover - the lookup found it

    @staticmethod
    def key_id(key: str) -> str:
        """A short, non-reversible tag of a key (for rate-limit buckets and logs)."""
        return _digest(key)[:8].hex()

    def __repr__(self) -> str:
        return f"ApiKeyAuth({len(self._users)} key(s))"


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
    """One token bucket per API key (keys are identified by `ApiKeyAuth.key_id`).

    Only authenticated keys get a bucket, so memory is bounded by the number of configured keys.
    """

    __slots__ = ("_buckets", "_clock", "limit")

    def __init__(self, limit: RateLimit, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}

    def acquire(self, key_id: str) -> float:
        """Take one token; returns 0 when allowed, else the seconds until a token is available."""
        now = self._clock()
        rate, burst = self.limit.rate, float(self.limit.burst)
        tokens, last = self._buckets.get(key_id, (burst, now))
        tokens = min(burst, tokens + (now - last) * rate)
        if tokens >= 1.0:
            self._buckets[key_id] = (tokens - 1.0, now)
            return 0.0
        self._buckets[key_id] = (tokens, now)
        return (1.0 - tokens) / rate


_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="agentrt"'}


def authenticate(auth: ApiKeyAuth, authorization: str | None, rate_limiter: RateLimiter | None = None) -> str:
    """The user id of an ``Authorization: Bearer <key>`` header (`ApiError`: 401 missing or unknown, 429 limited)."""
    if not authorization:
        raise ApiError(
            401, "missing API key: send 'Authorization: Bearer <key>'", code="missing_api_key", headers=_CHALLENGE
        )
    scheme, _, key = authorization.partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        raise ApiError(
            401, "malformed Authorization header: expected 'Bearer <key>'", code="invalid_api_key", headers=_CHALLENGE
        )
    user_id = auth.user_for(key)
    if user_id is None:
        raise ApiError(401, "invalid API key", code="invalid_api_key", headers=_CHALLENGE)
    if rate_limiter is not None:
        wait = rate_limiter.acquire(ApiKeyAuth.key_id(key))
        if wait > 0:
            seconds = max(1, math.ceil(wait))
            raise ApiError(
                429,
                f"rate limit exceeded for this API key; retry in {seconds} s",
                code="rate_limit_exceeded",
                headers={"Retry-After": str(seconds)},
            )
    return user_id
