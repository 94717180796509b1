"""Real services for integration tests: PostgreSQL, MariaDB/MySQL and Redis on their loopback ports.

A test that needs a service skips when it is not reachable locally, and fails when CI=true (CI
must run them all). Each fixture hands out an isolated namespace (a fresh database schema, table
prefix or key prefix) so runs do not collide.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from services import require_service


@pytest.fixture
def unique() -> str:
    """A short random tag for names owned by one test."""
    return uuid.uuid4().hex[:10]


@pytest.fixture
def redis_url() -> Iterator[str]:
    require_service("redis")
    yield "redis://127.0.0.1:6379/0"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    require_service("postgres")
    yield "postgresql+asyncpg://postgres@127.0.0.1:5432/test"


@pytest.fixture
def mysql_url() -> Iterator[str]:
    require_service("mysql")
    yield "mysql+asyncmy://root@127.0.0.1:3306/test"
