"""Reachability of the real services used by integration tests (PostgreSQL, MariaDB, Redis)."""

from __future__ import annotations

import os
import socket

import pytest

SERVICES = {
    "postgres": ("127.0.0.1", 5432),
    "mysql": ("127.0.0.1", 3306),
    "redis": ("127.0.0.1", 6379),
}


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def require_service(name: str) -> None:
    """Skip (locally) or fail (CI=true) when a service is not reachable."""
    host, port = SERVICES[name]
    if _reachable(host, port):
        return
    message = f"{name} is not reachable on {host}:{port}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message}; CI must run the integration tests against real services")
    pytest.skip(message)
