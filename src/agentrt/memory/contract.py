"""The conformance suite every `LongTermMemory` backend passes (`agentrt.testing.check_long_term_memory`)."""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from agentrt.memory.long_term import LongTermMemory, MemoryItem

__all__ = ["FakeClock", "check_long_term_memory"]

MemoryFactory = Callable[..., "LongTermMemory | Awaitable[LongTermMemory]"]


class FakeClock:
    """A clock for tests: ``clock()`` returns `now`; `advance` moves it."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward."""
        self.now += seconds


async def _make(factory: MemoryFactory, **options: Any) -> LongTermMemory:
    memory = factory(**options)
    if inspect.isawaitable(memory):
        memory = await memory
    return memory


def _texts(items: list[MemoryItem]) -> list[str]:
    return [item.text for item in items]


def _user(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:8]}"


async def check_long_term_memory(factory: MemoryFactory, *, persistent: bool = False) -> None:
    """Run the long-term memory contract against memories made by ``factory(ttl=, cap=, clock=)``.

    `factory` (sync or async) must pass those keyword arguments to the backend. With
    ``persistent=True`` a second memory made by `factory` must see what the first one recorded.
    Raises AssertionError naming the first broken rule. Every check uses fresh random user ids.
    """
    clock = FakeClock()
    memory = await _make(factory, ttl=timedelta(days=30), cap=50, clock=clock)
    try:
        await _basics(memory, clock)
        await _ranking(memory)
        await _isolation(memory)
        await _concurrency(memory)
    finally:
        await memory.close()
    await _ttl(factory)
    await _cap(factory)
    await _delete_user(factory, persistent)
    if persistent:
        await _persistence(factory)


async def _basics(memory: LongTermMemory, clock: FakeClock) -> None:
    user = _user("basics")
    assert isinstance(memory, LongTermMemory), "the backend must implement the LongTermMemory protocol"
    assert await memory.list(user) == [], "a new user has no memories"
    assert await memory.retrieve(user, "anything at all") == [], "a new user retrieves nothing"
    items = await memory.record(user, ["The user's name is Ada Lovelace.", "  ", "Ada prefers tea over coffee"])
    assert _texts(items) == ["The user's name is Ada Lovelace.", "Ada prefers tea over coffee"], (
        f"record returns the recorded items in order, blank texts skipped: {items}"
    )
    for item in items:
        assert isinstance(item, MemoryItem) and item.id, "record returns MemoryItems with ids"
        assert item.created_at == item.last_used_at == clock.now, "record stamps items with the memory's clock"
    assert len({item.id for item in items}) == 2, "item ids are unique"
    assert await memory.record(user, []) == [], "recording nothing returns nothing"
    listed = await memory.list(user)
    assert _texts(listed) == _texts(items) and [i.id for i in listed] == [i.id for i in items], (
        f"list returns every item, oldest first: {listed}"
    )
    clock.advance(10)
    again = await memory.record(user, ["the user's name is   ada lovelace"])
    assert len(again) == 1 and again[0].id == items[0].id, "recording the same fact again keeps one item"
    assert again[0].last_used_at == clock.now and again[0].created_at == items[0].created_at, (
        "recording a fact again refreshes it without changing when it was created"
    )
    assert len(await memory.list(user)) == 2, "a repeated fact is not stored twice"
    unicode = await memory.record(user, ["用户住在上海\uff0c喜欢喝咖啡", "Пользователь говорит по-русски ☕"])
    assert _texts(unicode) == ["用户住在上海\uff0c喜欢喝咖啡", "Пользователь говорит по-русски ☕"], (
        "non-Latin text round-trips exactly"
    )
    assert await memory.forget(user, [items[1].id, "no-such-id"]) == 1, "forget counts the items it deleted"
    assert await memory.forget(user, [items[1].id]) == 0, "forgetting twice deletes nothing"
    assert await memory.forget(user, []) == 0, "forgetting nothing is a no-op"
    assert items[1].id not in {i.id for i in await memory.list(user)}, "a forgotten item is gone"
    assert items[1].id not in {i.id for i in await memory.retrieve(user, "tea coffee prefers")}, (
        "a forgotten item is never retrieved"
    )


async def _ranking(memory: LongTermMemory) -> None:
    user = _user("ranking")
    facts = [
        "The user lives in Lyon, France.",
        "The user is allergic to peanuts.",
        "The user's favourite programming language is Rust.",
        "The user prefers metric units.",
        "The user works at ACME Corp as a data engineer.",
        "用户喜欢喝绿茶\uff0c不喝咖啡",
        "ユーザーは東京に住んでいます",
    ]
    recorded = await memory.record(user, facts)
    by_text = {item.text: item for item in recorded}
    cases = [
        ("Which city does the user live in? Lyon?", facts[0]),
        ("any food allergies, e.g. peanuts", facts[1]),
        ("what programming languages does the user like", facts[2]),
        ("should I use metric or imperial units", facts[3]),
        ("where does the user work", facts[4]),
        ("绿茶", facts[5]),
        ("东京", None),
        ("東京", facts[6]),
    ]
    for query, expected in cases:
        found = await memory.retrieve(user, query, k=3)
        if expected is None:
            continue
        assert found and found[0].text == expected, f"retrieve({query!r}) should rank {expected!r} first: {found}"
        assert found[0].id == by_text[expected].id, "retrieve returns the stored item"
    top = await memory.retrieve(user, "the user", k=2)
    assert len(top) <= 2, "retrieve returns at most k items"
    assert await memory.retrieve(user, "the user", k=0) == [], "k=0 retrieves nothing"
    if getattr(memory, "embed", None) is None:  # with vectors, the nearest items always come back
        assert await memory.retrieve(user, "zebra xylophone quasar") == [], "nothing matches unrelated words"
    assert await memory.retrieve(user, "") == [], "an empty query retrieves nothing"
    assert await memory.retrieve(user, "lyon\" OR * AND (NEAR ) : '; DROP TABLE x; --") is not None, (
        "query syntax characters are treated as text"
    )


async def _isolation(memory: LongTermMemory) -> None:
    alice, bob = _user("alice"), _user("bob")
    (a,) = await memory.record(alice, ["Alice's secret project is called Nightingale"])
    assert await memory.retrieve(bob, "secret project Nightingale") == [], "a user never finds another's items"
    assert await memory.list(bob) == [], "a user never lists another's items"
    assert await memory.forget(bob, [a.id]) == 0, "a user cannot forget another's items"
    (b,) = await memory.record(bob, ["Alice's secret project is called Nightingale"])
    assert b.id != a.id, "the same text recorded by two users makes two items"
    assert [i.id for i in await memory.list(alice)] == [a.id], "another user's identical fact is separate"
    assert [i.id for i in await memory.retrieve(alice, "Nightingale")] == [a.id], "retrieval stays per user"
    odd = _user("user/with spaces:and\"quotes' 🙂")
    (o,) = await memory.record(odd, ["odd ids work"])
    assert [i.id for i in await memory.list(odd)] == [o.id], "user ids are opaque strings"


async def _concurrency(memory: LongTermMemory) -> None:
    user = _user("concurrent")
    batches = await asyncio.gather(*(memory.record(user, [f"fact number {i} about topic {i}"]) for i in range(20)))
    assert all(len(b) == 1 for b in batches), "concurrent records all succeed"
    assert len(await memory.list(user)) == 20, "no concurrent record is lost"
    found = await asyncio.gather(*(memory.retrieve(user, f"topic {i}", k=1) for i in range(5)))
    assert all(len(f) == 1 for f in found), "concurrent retrievals all answer"


async def _ttl(factory: MemoryFactory) -> None:
    clock = FakeClock()
    day = 86_400.0
    memory = await _make(factory, ttl=timedelta(days=30), cap=50, clock=clock)
    try:
        user = _user("ttl")
        used, unused = await memory.record(user, ["Used fact about gardening", "Unused fact about sailing"])
        clock.advance(20 * day)
        found = await memory.retrieve(user, "gardening", k=1)
        assert [i.id for i in found] == [used.id], "retrieve finds the live item"
        assert found[0].last_used_at == clock.now, "retrieving an item refreshes its last use"
        clock.advance(11 * day)  # 31 days after recording, 11 days after the last use of `used`
        assert [i.id for i in await memory.list(user)] == [used.id], (
            "an item unused for longer than the TTL expires; one used since lives on"
        )
        assert unused.id not in {i.id for i in await memory.retrieve(user, "sailing")}, (
            "an expired item is never retrieved"
        )
        clock.advance(30 * day)
        assert await memory.list(user) == [], "every item expires once unused for the TTL"
        (fresh,) = await memory.record(user, ["Unused fact about sailing"])
        assert fresh.created_at == clock.now, "recording an expired fact again creates a new item"
    finally:
        await memory.close()


async def _cap(factory: MemoryFactory) -> None:
    clock = FakeClock()
    memory = await _make(factory, ttl=None, cap=3, clock=clock)
    try:
        user, other = _user("cap"), _user("cap-other")
        first = await memory.record(user, ["alpha fact one", "beta fact two", "gamma fact three"])
        await memory.record(other, ["other user's fact"])
        clock.advance(1)
        assert [i.text for i in await memory.retrieve(user, "alpha", k=1)] == ["alpha fact one"]
        clock.advance(1)
        await memory.record(user, ["delta fact four"])
        texts = _texts(await memory.list(user))
        assert sorted(texts) == ["alpha fact one", "delta fact four", "gamma fact three"], (
            f"over the cap, the least recently used item is evicted first (beta): {texts}"
        )
        assert _texts(await memory.list(other)) == ["other user's fact"], "the cap is per user"
        clock.advance(1)
        await memory.record(user, ["gamma fact three"])  # used again: now alpha and delta are older
        clock.advance(1)
        await memory.record(user, ["epsilon fact five"])
        texts = _texts(await memory.list(user))
        assert sorted(texts) == ["delta fact four", "epsilon fact five", "gamma fact three"], (
            f"recording a fact again counts as use: {texts}"
        )
        clock.advance(1)
        many = await memory.record(user, [f"bulk fact {i}" for i in range(5)])
        assert _texts(many) == ["bulk fact 2", "bulk fact 3", "bulk fact 4"], (
            f"a batch larger than the cap keeps its last items: {many}"
        )
        assert sorted(_texts(await memory.list(user))) == ["bulk fact 2", "bulk fact 3", "bulk fact 4"]
        assert first[0].id not in {i.id for i in await memory.list(user)}
    finally:
        await memory.close()


async def _persistence(factory: MemoryFactory) -> None:
    clock = FakeClock()
    user = _user("persist")
    first = await _make(factory, ttl=timedelta(days=30), cap=50, clock=clock)
    try:
        (item,) = await first.record(user, ["persisted fact about volcanoes"])
    finally:
        await first.close()
    second = await _make(factory, ttl=timedelta(days=30), cap=50, clock=clock)
    try:
        assert await second.list(user) == [item], "a second memory on the same storage sees recorded items"
        assert [i.id for i in await second.retrieve(user, "volcanoes")] == [item.id]
    finally:
        await second.close()


async def _delete_user(factory: MemoryFactory, persistent: bool) -> None:
    """`delete_user` (optional: a data-protection request) forgets every item of the user and nothing else."""
    memory = await _make(factory, ttl=timedelta(days=30), cap=50, clock=FakeClock())
    try:
        delete_user = getattr(memory, "delete_user", None)
        if delete_user is None:
            return
        user, other = _user("erase"), _user("erase-other")
        longer = user + "x"
        await memory.record(user, ["The user's passport number is X123", "The user lives at 1 Elm Street"])
        await memory.record(other, ["The user's passport number is X123"])
        await memory.record(longer, ["The user lives at 1 Elm Street"])
        assert await delete_user(user) == 2, "delete_user returns how many items the user had"
        assert await memory.list(user) == [], "a deleted user has no items"
        assert await memory.retrieve(user, "passport number Elm Street") == [], "a deleted user retrieves nothing"
        assert _texts(await memory.list(other)) == ["The user's passport number is X123"], "others keep theirs"
        assert len(await memory.list(longer)) == 1, "a user whose id starts with the deleted one's keeps theirs"
        assert await delete_user(user) == 0, "deleting a user again deletes nothing"
        (again,) = await memory.record(user, ["The user's passport number is X123"])
        assert [i.id for i in await memory.list(user)] == [again.id], "a deleted user can start again"
        for who in (user, other, longer):
            await delete_user(who)
    finally:
        await memory.close()
    if persistent:
        second = await _make(factory, ttl=timedelta(days=30), cap=50, clock=FakeClock())
        try:
            assert await second.list(user) == [], "another memory on the same storage sees the user deleted"
        finally:
            await second.close()
