"""Tests for `agentrt.context.RuntimeContext`: identity, typed and string attributes, binding."""

import asyncio
from typing import Any

import pytest

from agentrt.context import ANONYMOUS_USER, DEFAULT_SESSION, RuntimeContext


class Database:
    def __init__(self, url: str = "db://") -> None:
        self.url = url


class Postgres(Database):
    pass


class Cache:
    pass


# -- identity -------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["user_id", "session_id"])
def test_empty_user_or_session_raises_value_error(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        RuntimeContext(**{field: ""})


@pytest.mark.parametrize("field", ["user_id", "session_id"])
@pytest.mark.parametrize("bad", [0, 42, b"u1", ["u1"]])
def test_non_string_user_or_session_is_rejected(field: str, bad: Any) -> None:
    with pytest.raises((ValueError, TypeError), match=field):
        RuntimeContext(**{field: bad})


def test_key_defaults() -> None:
    ctx = RuntimeContext()
    assert ctx.user_id is None
    assert ctx.session_id is None
    assert ctx.key == (ANONYMOUS_USER, DEFAULT_SESSION)
    assert ANONYMOUS_USER == "__anonymous__"
    assert DEFAULT_SESSION == "default"
    assert RuntimeContext(user_id="u1").key == ("u1", "default")
    assert RuntimeContext(session_id="s1").key == ("__anonymous__", "s1")
    assert RuntimeContext("u1", "s1").key == ("u1", "s1")


def test_repr_names_user_and_session() -> None:
    assert repr(RuntimeContext("u1", "s1")) == "RuntimeContext(user_id='u1', session_id='s1')"


# -- typed attributes -----------------------------------------------------------------------------


def test_put_get_typed() -> None:
    db = Database()
    ctx = RuntimeContext("u")
    assert ctx.put(Database, db) is ctx  # chaining
    assert ctx.get(Database) is db
    assert ctx.has(Database)
    assert ctx.get(Cache) is None
    sentinel = Cache()
    assert ctx.get(Cache, sentinel) is sentinel
    assert not ctx.has(Cache)


def test_get_on_fresh_context_returns_default() -> None:
    ctx = RuntimeContext()
    assert ctx.get(Database) is None
    default = Database("x")
    assert ctx.get(Database, default) is default
    assert not ctx.has(Database)


def test_put_replaces_previous_object() -> None:
    a, b = Database("a"), Database("b")
    ctx = RuntimeContext().put(Database, a).put(Database, b)
    assert ctx.get(Database) is b


def test_subclass_lookup() -> None:
    pg = Postgres("pg://")
    ctx = RuntimeContext().put(Postgres, pg)
    assert ctx.get(Postgres) is pg
    assert ctx.get(Database) is pg  # a subclass satisfies its base
    assert ctx.has(Database)
    # ...but a base does not satisfy a subclass request.
    ctx2 = RuntimeContext().put(Database, Database())
    assert ctx2.get(Postgres) is None
    assert not ctx2.has(Postgres)


def test_exact_type_wins_over_subclass() -> None:
    pg, base = Postgres("pg"), Database("base")
    ctx = RuntimeContext().put(Postgres, pg).put(Database, base)
    assert ctx.get(Database) is base
    assert ctx.get(Postgres) is pg


def test_get_runtime_context_returns_self() -> None:
    ctx = RuntimeContext("u")
    assert ctx.get(RuntimeContext) is ctx
    assert ctx.has(RuntimeContext)


def test_put_requires_a_type() -> None:
    with pytest.raises(TypeError, match="expects a type"):
        RuntimeContext().put("Database", Database())  # type: ignore[arg-type]


# -- string attributes ----------------------------------------------------------------------------


def test_string_attributes() -> None:
    ctx = RuntimeContext("u", tenant="acme", limit=3)
    assert ctx["tenant"] == "acme"
    assert ctx["limit"] == 3
    assert "tenant" in ctx
    assert "missing" not in ctx
    assert ctx.get("tenant") == "acme"
    assert ctx.get("missing") is None
    assert ctx.get("missing", "dflt") == "dflt"
    with pytest.raises(KeyError):
        ctx["missing"]
    ctx["new"] = 1
    assert ctx["new"] == 1
    assert ctx.attrs == {"tenant": "acme", "limit": 3, "new": 1}


def test_string_and_typed_attributes_are_separate() -> None:
    ctx = RuntimeContext(Database="by-name").put(Database, Database("typed"))
    assert ctx["Database"] == "by-name"
    assert ctx.get("Database") == "by-name"
    db = ctx.get(Database)
    assert db is not None and db.url == "typed"


# -- child --------------------------------------------------------------------------------------


def test_child_copies_user_session_and_attributes() -> None:
    db = Database()
    parent = RuntimeContext("u1", "s1", tenant="acme").put(Database, db)
    child = parent.child()
    assert child is not parent
    assert child.key == ("u1", "s1")
    assert child["tenant"] == "acme"
    assert child.get(Database) is db

    other = parent.child(session_id="s2", extra=True, tenant="other")
    assert other.key == ("u1", "s2")
    assert other["tenant"] == "other"
    assert other["extra"] is True
    # The parent is untouched.
    assert parent["tenant"] == "acme"
    assert "extra" not in parent


def test_child_is_independent_of_parent() -> None:
    parent = RuntimeContext("u1", tenant="acme")
    child = parent.child()
    child["tenant"] = "changed"
    child.put(Cache, Cache())
    assert parent["tenant"] == "acme"
    assert parent.get(Cache) is None

    parent.put(Database, Database())
    child2 = parent.child()
    child2.put(Database, Database("other"))
    db = parent.get(Database)
    assert db is not None and db.url == "db://"


# -- binding --------------------------------------------------------------------------------------


def test_bind_and_current_nesting() -> None:
    assert RuntimeContext.current() is None
    outer = RuntimeContext("outer")
    inner = RuntimeContext("inner")
    with outer.bind() as bound:
        assert bound is outer
        assert RuntimeContext.current() is outer
        with inner.bind():
            assert RuntimeContext.current() is inner
        assert RuntimeContext.current() is outer
    assert RuntimeContext.current() is None


def test_bind_resets_on_exception() -> None:
    ctx = RuntimeContext("u")
    with pytest.raises(RuntimeError, match="boom"), ctx.bind():
        assert RuntimeContext.current() is ctx
        raise RuntimeError("boom")
    assert RuntimeContext.current() is None


async def test_binding_is_isolated_across_concurrent_tasks() -> None:
    a_bound = asyncio.Event()
    b_bound = asyncio.Event()
    seen: dict[str, list[str | None]] = {"a": [], "b": []}

    async def worker(label: str, mine: asyncio.Event, other: asyncio.Event) -> None:
        ctx = RuntimeContext(user_id=label)
        with ctx.bind():
            mine.set()
            await other.wait()  # both tasks are now inside their own `with` block
            current = RuntimeContext.current()
            seen[label].append(current.user_id if current else None)
            await asyncio.sleep(0)
            current = RuntimeContext.current()
            seen[label].append(current.user_id if current else None)
        current = RuntimeContext.current()
        seen[label].append(current.user_id if current else None)

    outer = RuntimeContext("outer")
    with outer.bind():
        await asyncio.gather(worker("a", a_bound, b_bound), worker("b", b_bound, a_bound))
        assert RuntimeContext.current() is outer
    assert seen == {"a": ["a", "a", "outer"], "b": ["b", "b", "outer"]}
    assert RuntimeContext.current() is None


async def test_task_inherits_binding_of_its_creator() -> None:
    ctx = RuntimeContext("u1")

    async def read() -> RuntimeContext | None:
        return RuntimeContext.current()

    with ctx.bind():
        task = asyncio.create_task(read())
    assert RuntimeContext.current() is None
    assert await task is ctx
