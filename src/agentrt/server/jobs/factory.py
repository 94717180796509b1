"""The job backend a URL names: `RedisJobs` for Redis URLs, `PostgresJobs` for PostgreSQL ones."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentrt.errors import InvalidValueError
from agentrt.server.jobs.base import DEFAULT_LEASE_SECONDS, DEFAULT_LOG_TTL

if TYPE_CHECKING:
    from agentrt.server.jobs import JobBackend

__all__ = ["jobs_from_url"]

_REDIS = ("redis", "rediss", "unix")
_POSTGRES = ("postgresql", "postgres", "postgresql+asyncpg")


def jobs_from_url(
    url: str,
    *,
    prefix: str = "agentrt",
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    log_ttl: float = DEFAULT_LOG_TTL,
) -> JobBackend:
    """The shared job backend of durable runs at `url` (``agentrt serve --jobs`` / ``agentrt worker --jobs``).

    ``redis://``, ``rediss://`` and ``unix://`` URLs give `RedisJobs` (`prefix` prefixes its keys);
    ``postgresql://``, ``postgres://`` and ``postgresql+asyncpg://`` give `PostgresJobs` (`prefix`
    prefixes its table names, so it must be an SQL identifier). A run's job and event log expire
    `log_ttl` seconds after their last write (a client can resume a finished run's stream until then).

    Raises:
        InvalidValueError: Another scheme (the message never shows the URL: it may hold a password).
    """
    scheme = url.split("://", 1)[0].lower() if isinstance(url, str) and "://" in url else ""
    if scheme in _REDIS:
        from agentrt.server.jobs.redis import RedisJobs

        return RedisJobs(url, prefix=prefix, lease_seconds=lease_seconds, log_ttl=log_ttl)
    if scheme in _POSTGRES:
        from agentrt.server.jobs.postgres import PostgresJobs

        return PostgresJobs(url, prefix=prefix, lease_seconds=lease_seconds, log_ttl=log_ttl)
    accepted = ", ".join(f"{s}://" for s in (*_REDIS, *_POSTGRES))
    shown = f"{scheme}://..." if scheme else "a text without a scheme"
    raise InvalidValueError(f"the job backend URL must start with one of {accepted}, not {shown}")
