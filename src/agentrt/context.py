"""RuntimeContext: who is calling, in which session, and what the call carries for tools.

A context is bound (with `contextvars`) for the duration of an agent call, so tools, middleware
and nested agents read the same instance through `RuntimeContext.current()`.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, overload

from agentrt.errors import InvalidTypeError, InvalidValueError

__all__ = ["ANONYMOUS_USER", "DEFAULT_SESSION", "RuntimeContext"]

ANONYMOUS_USER = "__anonymous__"
"""The user id of calls made without one."""
DEFAULT_SESSION = "default"
"""The session id of calls made without one."""

T = TypeVar("T")
_MISSING: Any = object()
_current: contextvars.ContextVar[RuntimeContext | None] = contextvars.ContextVar("agentrt_context", default=None)


class RuntimeContext:
    """Per-call context: `user_id`, `session_id`, string attributes and typed attributes.

    ``ctx.put(Database, db)`` stores an object under its type; a tool parameter annotated
    ``Database`` then receives it, hidden from the model. String attributes are passed as keyword
    arguments (``RuntimeContext(user_id="u1", tenant="acme")``) and read with ``ctx["tenant"]``.
    """

    __slots__ = ("_attrs", "_typed", "session_id", "user_id")

    def __init__(self, user_id: str | None = None, session_id: str | None = None, **attrs: Any) -> None:
        for label, value in (("user_id", user_id), ("session_id", session_id)):
            if value is not None and (not isinstance(value, str) or not value):
                raise InvalidValueError(f"RuntimeContext.{label} must be a non-empty string or None, not {value!r}")
        self.user_id = user_id
        self.session_id = session_id
        self._attrs: dict[str, Any] = attrs
        self._typed: dict[type, Any] | None = None

    # -- identity -------------------------------------------------------------------------
    @property
    def key(self) -> tuple[str, str]:
        """``(user_id, session_id)`` with the anonymous user and default session filled in."""
        return (self.user_id or ANONYMOUS_USER, self.session_id or DEFAULT_SESSION)

    # -- typed attributes -------------------------------------------------------------------
    def put(self, kind: type[T], obj: T) -> RuntimeContext:
        """Store `obj` under its type `kind`; returns self for chaining."""
        if not isinstance(kind, type):
            raise InvalidTypeError(f"RuntimeContext.put expects a type as its first argument, not {kind!r}")
        if self._typed is None:
            self._typed = {}
        self._typed[kind] = obj
        return self

    @overload
    def get(self, kind: type[T]) -> T | None: ...
    @overload
    def get(self, kind: type[T], default: T) -> T: ...
    @overload
    def get(self, kind: str, default: Any = None) -> Any: ...
    def get(self, kind: type[T] | str, default: Any = None) -> Any:
        """The object stored under a type (or a string attribute by name), else `default`."""
        if isinstance(kind, str):
            return self._attrs.get(kind, default)
        if kind is RuntimeContext:
            return self
        if self._typed is None:
            return default
        found = self._typed.get(kind, _MISSING)
        if found is not _MISSING:
            return found
        for stored_type, obj in self._typed.items():  # a subclass instance satisfies its base
            if issubclass(stored_type, kind):
                return obj
        return default

    def has(self, kind: type) -> bool:
        """Whether an object is stored under `kind` (or a subclass of it)."""
        return kind is RuntimeContext or self.get(kind, _MISSING) is not _MISSING

    # -- string attributes ------------------------------------------------------------------
    def __getitem__(self, name: str) -> Any:
        return self._attrs[name]

    def __setitem__(self, name: str, value: Any) -> None:
        self._attrs[name] = value

    def __contains__(self, name: object) -> bool:
        return name in self._attrs

    @property
    def attrs(self) -> dict[str, Any]:
        """The string attributes (a live dict)."""
        return self._attrs

    def child(self, *, session_id: str | None = None, **attrs: Any) -> RuntimeContext:
        """A context for a nested call: same user and attributes, optionally another session."""
        ctx = RuntimeContext(self.user_id, session_id or self.session_id, **{**self._attrs, **attrs})
        if self._typed:
            ctx._typed = dict(self._typed)
        return ctx

    # -- binding ------------------------------------------------------------------------------
    @staticmethod
    def current() -> RuntimeContext | None:
        """The context bound to the running call, if any."""
        return _current.get()

    def _set(self) -> contextvars.Token[RuntimeContext | None]:
        return _current.set(self)

    @staticmethod
    def _reset(token: contextvars.Token[RuntimeContext | None]) -> None:
        _current.reset(token)

    @contextmanager
    def bind(self) -> Iterator[RuntimeContext]:
        """Bind this context for the duration of a ``with`` block."""
        token = _current.set(self)
        try:
            yield self
        finally:
            _current.reset(token)

    def __repr__(self) -> str:
        return f"RuntimeContext(user_id={self.user_id!r}, session_id={self.session_id!r})"
