"""Durable agent state: `AgentState`, the store protocol and the backends.

Backends are imported on first use, so `import agentrt.state` loads no database driver.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from agentrt.errors import MissingExtraError, UserError
from agentrt.state.base import AgentState, AgentStateStore, BaseStateStore, SessionInfo
from agentrt.state.pending import Pending, PendingCall, flatten_pending
from agentrt.state.stores.memory import InMemoryStateStore

if TYPE_CHECKING:
    from agentrt.state.stores.jsonfile import JsonFileStateStore
    from agentrt.state.stores.redis import RedisStateStore
    from agentrt.state.stores.sql import SqlStateStore
    from agentrt.state.stores.sqlite import SqliteStateStore

__all__ = [
    "DEFAULT_STATE_URL",
    "AgentState",
    "AgentStateStore",
    "BaseStateStore",
    "InMemoryStateStore",
    "JsonFileStateStore",
    "Pending",
    "PendingCall",
    "RedisStateStore",
    "SessionInfo",
    "SqlStateStore",
    "SqliteStateStore",
    "default_state_url",
    "flatten_pending",
    "store_from_url",
]

DEFAULT_STATE_URL = "sqlite:///~/.agentrt/state.db"
"""Where agents without a `state_store` keep sessions (override with ``AGENTRT_STATE_URL``)."""

_LAZY = {
    "SqliteStateStore": "agentrt.state.stores.sqlite",
    "JsonFileStateStore": "agentrt.state.stores.jsonfile",
    "RedisStateStore": "agentrt.state.stores.redis",
    "SqlStateStore": "agentrt.state.stores.sql",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agentrt.state' has no attribute {name!r}")
    import importlib

    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as exc:
        extra = {"RedisStateStore": "redis", "SqlStateStore": "sql"}.get(name)
        if extra is None:
            raise
        raise MissingExtraError(name, extra, exc.name) from exc


def default_state_url() -> str:
    """The store URL for agents built without one: ``AGENTRT_STATE_URL`` or `DEFAULT_STATE_URL`."""
    return os.environ.get("AGENTRT_STATE_URL") or DEFAULT_STATE_URL


def store_from_url(url: str, **options: Any) -> AgentStateStore:
    """A store from a URL.

    ``memory://``, ``sqlite:///relative/or/absolute.db`` (``sqlite:///~/x.db`` expands the home
    directory, ``sqlite://:memory:`` stays in memory), ``file:///dir`` (JSON files),
    ``redis://host:port/db`` (also ``rediss://``), and SQLAlchemy URLs
    ``postgresql+asyncpg://...`` / ``mysql+asyncmy://...``. Keyword options go to the store.
    """
    if not isinstance(url, str) or "://" not in url:
        raise UserError(
            f"state store URL must look like 'sqlite:///path.db', 'redis://host:6379/0', 'file:///dir', "
            f"'memory://' or 'postgresql+asyncpg://...', not {url!r}"
        )
    scheme = url.split("://", 1)[0].lower()
    if scheme == "memory":
        return InMemoryStateStore()
    if scheme == "sqlite":
        from agentrt.state.stores.sqlite import SqliteStateStore

        rest = url[len("sqlite://") :]
        if rest in (":memory:", "/:memory:"):
            return SqliteStateStore(":memory:", **options)
        path = unquote(rest[1:] if rest.startswith("/") and not rest.startswith("//") else rest)
        if rest.startswith("//"):  # sqlite:////abs/path
            path = unquote(rest[1:])
        if not path:
            raise UserError(f"sqlite URL {url!r} names no file; use sqlite:///path/to/state.db")
        return SqliteStateStore(os.path.expanduser(path), **options)
    if scheme == "file":
        from agentrt.state.stores.jsonfile import JsonFileStateStore

        parts = urlsplit(url)
        root = unquote(parts.path) if not parts.netloc else unquote(parts.netloc + parts.path)
        if not root:
            raise UserError(f"file URL {url!r} names no directory; use file:///path/to/dir")
        return JsonFileStateStore(os.path.expanduser(root), **options)
    if scheme in ("redis", "rediss", "unix"):
        store: AgentStateStore = __getattr__("RedisStateStore")(url, **options)  # names the extra when missing
        return store
    if scheme.startswith(("postgresql", "postgres", "mysql", "mariadb")):
        store = __getattr__("SqlStateStore")(url, **options)
        return store
    raise UserError(f"unknown state store URL scheme {scheme!r} in {url!r}")
