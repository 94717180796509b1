"""`LiveRun`, the frame buffer of a streamed run: readers, waits, timeouts, cancellation."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.server._sse import LiveRun


def _live(capacity: int = 8) -> LiveRun:
    return LiveRun(("u", "s"), "bot", "tok", capacity=capacity, grace=0.0)


async def test_a_waiting_reader_is_woken_by_a_frame_and_a_timeout_returns_nothing() -> None:
    live = _live()
    assert await live.read(0, 0.01) == []
    assert live._waiters == []  # the timed-out wait left nothing behind
    reading = asyncio.ensure_future(live.read(0, 5))
    await asyncio.sleep(0)
    live.push("text_delta", b"{}")
    got = await reading
    assert got is not None
    [(seq, frame)] = got
    assert seq == 1 and b"tok:1" in frame
    live.close()
    assert await live.read(1, 5) is None


async def test_a_cancelled_reader_does_not_disturb_the_others() -> None:
    live = _live()
    first = asyncio.ensure_future(live.read(0, 5))
    second = asyncio.ensure_future(live.read(0, 5))
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.sleep(0)
    assert len(live._waiters) == 1  # the cancelled reader's wait was withdrawn
    live.push("text_delta", b'{"delta":"x"}')
    woken = await second
    assert woken is not None and [seq for seq, _ in woken] == [1]
    assert first.cancelled()
    assert live._waiters == []


@settings(max_examples=60, deadline=None)
@given(count=st.integers(1, 40), capacity=st.integers(1, 16), positions=st.lists(st.integers(0, 45), max_size=8))
def test_a_read_returns_exactly_the_buffered_frames_after_its_position(
    count: int, capacity: int, positions: list[int]
) -> None:
    async def check() -> None:
        live = _live(capacity)
        for i in range(count):
            live.push("text_delta", f'{{"i":{i}}}'.encode())
        buffered = [seq for seq, _ in live._frames]
        for after in positions:
            if after >= count:
                assert await live.read(after, 0.001) == []
                continue
            frames = await live.read(after, 0.001)
            assert frames is not None
            assert [seq for seq, _ in frames] == [seq for seq in buffered if seq > after]
        assert live._waiters == []

    asyncio.run(check())
