"""`Knowledge(per_user=True)`: the caller's user id is the namespace; no caller, no access. Also `add_text`, `chunk`."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrt.context import RuntimeContext
from agentrt.errors import InvalidTypeError, InvalidValueError
from agentrt.knowledge import Knowledge, MemoryKnowledgeStore, NoCallerError


async def test_per_user_reads_the_namespace_from_the_bound_context() -> None:
    store = MemoryKnowledgeStore()
    kb = Knowledge("docs", store=store, per_user=True)
    assert repr(kb) == "Knowledge('docs', per_user=True)"
    with RuntimeContext(user_id="alice").bind():
        report = await kb.add_text("Alice's ocelot notes.", source="a.md")
        assert report.added == ("a.md",)
        assert [p.source for p in await kb.search("ocelot")] == ["a.md"]
    with RuntimeContext(user_id="bob").bind():
        assert await kb.search("ocelot") == [], "bob never finds alice's passages"
        assert await kb.documents() == []
        assert await kb.delete("a.md") is False
        assert await kb.drop() == 0
        await kb.add_text("Bob's ocelot notes.", source="b.md")
    assert [d.source for d in await store.documents("alice", "docs")] == ["a.md"], "alice's document survived"
    assert [d.source for d in await store.documents("bob", "docs")] == ["b.md"]
    fixed = kb.for_namespace("alice")
    assert not fixed.per_user and [p.source for p in await fixed.search("ocelot")] == ["a.md"]
    assert kb.per_user, "for_namespace leaves the per-user object as it was"


@pytest.mark.parametrize("ctx", [None, RuntimeContext(), RuntimeContext(session_id="s")])
async def test_per_user_without_a_user_raises(ctx: RuntimeContext | None) -> None:
    kb = Knowledge("docs", store=MemoryKnowledgeStore(), per_user=True)

    async def every_operation() -> None:
        for operation in (
            kb.search("x"),
            kb.add_text("x"),
            kb.add("some text"),
            kb.documents(),
            kb.delete("a.md"),
            kb.drop(),
            kb.chunk("c"),
        ):
            with pytest.raises(NoCallerError, match="per user"):
                await operation

    if ctx is None:
        await every_operation()
    else:
        with ctx.bind():
            await every_operation()


async def test_a_user_id_that_is_no_namespace_is_refused() -> None:
    kb = Knowledge("docs", store=MemoryKnowledgeStore(), per_user=True)
    for user in ("alice smith", "a/b", "x" * 129, "é"):
        with RuntimeContext(user_id=user).bind(), pytest.raises(InvalidValueError, match="user id"):
            await kb.search("x")
    with pytest.raises(InvalidTypeError):
        Knowledge("docs", per_user="yes")  # type: ignore[arg-type]  # a wrong type on purpose


async def test_add_text_never_reads_a_path_and_chunk_finds_a_passage(tmp_path: Path) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("The wombat password is hunter2.")
    kb = Knowledge("docs", store=MemoryKnowledgeStore())
    report = await kb.add_text(str(secret))
    assert report.added and report.added[0].startswith("text:")
    assert await kb.search("wombat") == []
    assert (await kb.add_text("   ")).failed, "an empty text is reported, not indexed"
    await kb.add_text("# Title\n\nThe capybara swims.", source="c.md", metadata={"tags": ["zoo"]})
    (hit,) = await kb.search("capybara")
    got = await kb.chunk(hit.chunk_id)
    assert got is not None and (got.text, got.source, got.title) == (hit.text, "c.md", "Title")
    assert await kb.chunk("nope") is None and await kb.chunk("") is None
    assert await kb.for_kb("other").chunk(hit.chunk_id) is None, "another kb does not have it"
    with pytest.raises(InvalidValueError):
        await kb.add_text("x", source="")
    with pytest.raises(InvalidTypeError):
        await kb.add_text(b"bytes")  # type: ignore[arg-type]  # a wrong type on purpose
    with pytest.raises(InvalidTypeError):
        await kb.chunk(3)  # type: ignore[arg-type]  # a wrong type on purpose
    with pytest.raises(InvalidValueError):
        kb.for_kb("bad name")
