"""Server-sent events: the response, frame sources, and live runs that a client can reconnect to.

`EventStreamResponse` is a small raw-ASGI response rather than sse-starlette's: it must cancel the
run the moment the client goes away (closing ``agent.stream_events`` checkpoints it), number the
frames of a run so ``Last-Event-ID`` can resume it, and leave shutdown to the server's own
interrupt-and-checkpoint sequence instead of a process-wide signal hook.

A frame is ``id: <run token>:<seq>`` (live runs only), ``event: <type>``, ``data: <json>`` and a
blank line; JSON is compact, so ``data`` is always one line. Heartbeats are ``: ping`` comments.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol

from starlette.background import BackgroundTask
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

__all__ = [
    "DEFAULT_HEARTBEAT",
    "EventStreamResponse",
    "FrameSource",
    "IteratorSource",
    "LiveRun",
    "LiveRunReader",
    "aclose",
    "encode_frame",
]

logger = logging.getLogger("agentrt.server")

DEFAULT_HEARTBEAT = 15.0
"""Seconds of silence after which a ``: ping`` comment keeps proxies from closing the stream."""
_PING = b": ping\n\n"


def encode_frame(event_type: str, data: bytes, event_id: str | None = None) -> bytes:
    """One SSE frame."""
    head = f"id: {event_id}\nevent: {event_type}\ndata: " if event_id else f"event: {event_type}\ndata: "
    return head.encode() + data + b"\n\n"


class FrameSource(Protocol):
    """What an `EventStreamResponse` sends: batches of encoded frames."""

    async def next_frames(self, timeout: float) -> list[bytes] | None:
        """Frames ready now or within `timeout` seconds ([] on timeout), None once the stream is over."""
        ...

    async def aclose(self) -> None:
        """The response is over (finished, or the client went away): release what the source holds."""
        ...

    @property
    def exhausted(self) -> bool:
        """True once every frame has been handed out and no more will come (the last batch ends the body)."""
        ...


_END: Any = object()


async def aclose(iterator: Any) -> None:
    """Close an async iterator if it can be closed (async generators can)."""
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


class IteratorSource:
    """Frames from an async iterator, encoded by `encode` (None skips an item).

    The iterator is consumed by a pump task, so waiting for the next item can time out for a
    heartbeat without cancelling the iterator mid-step. `aclose` cancels the pump, which closes
    the iterator (for ``agent.stream_events``: the run stops and is checkpointed) and waits for it.
    `on_error` turns an exception of the iterator into a last frame.
    """

    __slots__ = ("_encode", "_ended", "_iterator", "_on_error", "_pump", "_queue", "_tail")

    def __init__(
        self,
        iterator: AsyncIterator[Any],
        encode: Callable[[Any], bytes | None],
        *,
        on_error: Callable[[BaseException], bytes | None] | None = None,
        tail: bytes | None = None,
    ) -> None:
        self._iterator = iterator
        self._encode = encode
        self._on_error = on_error
        self._tail = tail
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._ended = False
        """The end marker is queued (it is the last item the pump puts)."""
        self._pump: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        put = self._queue.put_nowait
        try:
            async for item in self._iterator:
                frame = self._encode(item)
                if frame:
                    put(frame)
            if self._tail:
                put(self._tail)
        except Exception as exc:
            frame = self._on_error(exc) if self._on_error is not None else None
            if frame is None:
                logger.exception("event stream failed")
            else:
                logger.warning("event stream failed: %s: %s", type(exc).__name__, exc)
                put(frame)
        finally:
            put(_END)
            self._ended = True
            await aclose(self._iterator)

    async def next_frames(self, timeout: float) -> list[bytes] | None:
        if self._pump is None:
            self._pump = asyncio.get_running_loop().create_task(self._run())
        queue = self._queue
        if queue.empty():
            try:
                first = await asyncio.wait_for(queue.get(), timeout)
            except TimeoutError:
                return []
        else:
            first = queue.get_nowait()
        frames: list[bytes] = []
        item = first
        while True:
            if item is _END:
                queue.put_nowait(_END)  # stay finished
                return frames or None
            frames.append(item)
            if queue.empty():
                return frames
            item = queue.get_nowait()

    @property
    def exhausted(self) -> bool:
        # Only the end marker is left: it is the last item put, so one item left after it was put is it.
        return self._ended and self._queue.qsize() == 1

    async def aclose(self) -> None:
        pump = self._pump
        if pump is None:
            await aclose(self._iterator)
            return
        if not pump.done():
            pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pump


_TYPE_BYTES: dict[str, bytes] = {}
"""Event types as bytes, for `LiveRun.push` (a handful of names; bounded below)."""


def _type_bytes(event_type: str) -> bytes:
    encoded = event_type.encode()
    if len(_TYPE_BYTES) < 256:
        _TYPE_BYTES[event_type] = encoded
    return encoded


def _expire(waiter: asyncio.Future[bool]) -> None:
    """A reader's wait timed out (`LiveRun.read`)."""
    if not waiter.done():
        waiter.set_result(False)


class LiveRun:
    """A streamed run in progress: a buffer of its frames, numbered from 1.

    Clients read from it (several may, e.g. after a reconnect with ``Last-Event-ID``). The buffer
    keeps the last `capacity` frames for reconnects, and never drops a frame an attached reader
    has not sent yet, so a slow client loses nothing. When the last reader leaves before the run
    ends, the run is cancelled after `grace` seconds unless a reader comes back; cancelling closes
    the agent's event stream, which checkpoints the session.
    """

    __slots__ = (
        "_capacity",
        "_closed",
        "_frames",
        "_grace_handle",
        "_next_seq",
        "_readers",
        "_token_bytes",
        "_waiters",
        "agent_name",
        "grace",
        "key",
        "task",
        "token",
    )

    def __init__(self, key: tuple[str, ...], agent_name: str, token: str, *, capacity: int, grace: float) -> None:
        self.key = key
        self.agent_name = agent_name
        self.token = token
        self._token_bytes = token.encode()
        self.grace = grace
        self.task: asyncio.Task[Any] | None = None
        self._capacity = max(1, capacity)
        self._frames: deque[tuple[int, bytes]] = deque()
        self._next_seq = 1
        self._closed = False
        self._waiters: list[asyncio.Future[bool]] = []
        """Readers waiting for a frame: each its own future (a cancelled reader cancels only its own)."""
        self._readers: set[LiveRunReader] = set()
        self._grace_handle: asyncio.TimerHandle | None = None

    # -- writing (the run's pump) -------------------------------------------------------------------
    def push(self, event_type: str, data: bytes) -> None:
        """Append one event as a numbered frame and wake the readers."""
        seq = self._next_seq
        self._next_seq = seq + 1
        kind = _TYPE_BYTES.get(event_type)
        if kind is None:
            kind = _type_bytes(event_type)
        # The same bytes as `encode_frame(event_type, data, f"{token}:{seq}")`, in one step.
        self._frames.append((seq, b"id: %s:%d\nevent: %s\ndata: %s\n\n" % (self._token_bytes, seq, kind, data)))
        if len(self._frames) > self._capacity:
            self._trim()
        if self._waiters:
            self._notify()

    def close(self) -> None:
        """No more frames will come."""
        self._closed = True
        self._cancel_grace()
        self._notify()

    def _notify(self) -> None:
        waiters = self._waiters
        if waiters:
            self._waiters = []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(True)

    @property
    def closed(self) -> bool:
        """Whether the run has ended."""
        return self._closed

    @property
    def oldest_seq(self) -> int:
        """The sequence number of the oldest frame still buffered (the next one if none is)."""
        return self._frames[0][0] if self._frames else self._next_seq

    @property
    def last_seq(self) -> int:
        """The sequence number of the newest frame (0 before the first)."""
        return self._next_seq - 1

    # -- reading ------------------------------------------------------------------------------------------
    def reader(self, after: int = 0) -> LiveRunReader:
        """A frame source for one client, starting after frame `after` (0: from the oldest buffered)."""
        reader = LiveRunReader(self, after)
        self._readers.add(reader)
        self._cancel_grace()
        return reader

    def _trim(self) -> None:
        frames = self._frames
        if len(frames) <= self._capacity:
            return
        keep_from = min((r.position for r in self._readers), default=self._next_seq) + 1
        while len(frames) > self._capacity and frames[0][0] < keep_from:
            frames.popleft()

    async def read(self, after: int, timeout: float) -> list[tuple[int, bytes]] | None:
        """Frames numbered after `after`, waiting up to `timeout` for some; None when the run is over."""
        while True:
            if self._next_seq - 1 > after:
                frames = self._frames
                # Sequence numbers are consecutive: skip to the first one after `after` by position.
                start = max(0, after + 1 - frames[0][0]) if frames else 0
                return list(itertools.islice(frames, start, None))
            if self._closed:
                return None
            # One future and one timer per wait (asyncio.wait_for would add a task per wait).
            loop = asyncio.get_running_loop()
            waiter: asyncio.Future[bool] = loop.create_future()
            self._waiters.append(waiter)
            timer = loop.call_later(timeout, _expire, waiter)
            try:
                woken = await waiter
            finally:
                timer.cancel()
                with contextlib.suppress(ValueError):  # timed out or cancelled: withdraw the wait
                    self._waiters.remove(waiter)
            if not woken:
                return []

    def _release(self, reader: LiveRunReader) -> None:
        self._readers.discard(reader)
        self._trim()
        if self._readers or self._closed:
            return
        if self.grace <= 0:
            self._cancel_run()
        else:
            self._grace_handle = asyncio.get_running_loop().call_later(self.grace, self._cancel_if_unread)

    def _cancel_if_unread(self) -> None:
        self._grace_handle = None
        if not self._readers and not self._closed:
            self._cancel_run()

    def _cancel_run(self) -> None:
        task = self.task
        if task is not None and not task.done():
            logger.info("client went away: stopping run %s", self.token)
            task.cancel()

    def _cancel_grace(self) -> None:
        if self._grace_handle is not None:
            self._grace_handle.cancel()
            self._grace_handle = None


class LiveRunReader:
    """One client's position in a `LiveRun`."""

    __slots__ = ("_done", "_fresh", "_run", "position")

    def __init__(self, run: LiveRun, after: int) -> None:
        self._run = run
        self.position = after
        """The sequence number of the last frame handed out."""
        self._done = False
        self._fresh = True

    async def next_frames(self, timeout: float) -> list[bytes] | None:
        run = self._run
        if self._fresh:
            self._fresh = False
            if run._next_seq - 1 <= self.position and not run._closed:
                # A run just started is a task queued behind this one: let it take its first step
                # (it sends ``run_started`` before its first real wait) and come back in the same
                # pass of the event loop, rather than wait to be woken in the next one. Under a
                # burst of requests a pass is long: this halves the time to the first event.
                await asyncio.sleep(0)
        numbered = await run.read(self.position, timeout)
        if numbered is None:
            return None
        if numbered:
            self.position = numbered[-1][0]
            self._run._trim()
        return [frame for _, frame in numbered]

    @property
    def exhausted(self) -> bool:
        run = self._run
        return run._closed and self.position >= run._next_seq - 1

    async def aclose(self) -> None:
        if not self._done:
            self._done = True
            self._run._release(self)


class EventStreamResponse(Response):
    """A ``text/event-stream`` response fed by a `FrameSource`.

    Sends ``: ping`` after `heartbeat` seconds without a frame; a client disconnect (or a failed
    send) ends the response at once, and the source is closed in every case.
    """

    media_type = "text/event-stream"

    def __init__(
        self,
        source: FrameSource,
        *,
        heartbeat: float = DEFAULT_HEARTBEAT,
        headers: Mapping[str, str] | None = None,
        background: BackgroundTask | None = None,
    ) -> None:
        # Like StreamingResponse: no `body` attribute, so no Content-Length header.
        self.status_code = 200
        self.background = background
        self.init_headers({"Cache-Control": "no-store", "X-Accel-Buffering": "no", **(headers or {})})
        self.source = source
        self.heartbeat = heartbeat

    async def _send_frames(self, send: Send) -> None:
        source, heartbeat = self.source, self.heartbeat
        while True:
            frames = await source.next_frames(heartbeat)
            if frames is None:
                break
            if frames and source.exhausted:
                # The last frames end the body in the same write (no separate empty last chunk).
                await send({"type": "http.response.body", "body": b"".join(frames), "more_body": False})
                return
            body = b"".join(frames) if frames else _PING
            await send({"type": "http.response.body", "body": body, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The frames are sent from the request's own task; a watcher task waits for the client's
        # disconnect and cancels it (one task per response rather than a sender, a watcher and a
        # wait). Its cancellation is taken back the way `asyncio.timeout` does it, so one from
        # elsewhere (the server shutting down) still goes through.
        current = asyncio.current_task()
        assert current is not None
        base = current.cancelling()
        gone = sending = False

        async def watch() -> None:
            nonlocal gone
            while (await receive())["type"] != "http.disconnect":
                pass
            gone = True
            if sending:
                current.cancel()

        watcher: asyncio.Task[None] | None = None
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            watcher = asyncio.get_running_loop().create_task(watch())
            sending = True
            try:
                await self._send_frames(send)
            except asyncio.CancelledError:
                if not gone or current.uncancel() > base:
                    raise
            except OSError:
                pass  # a failed send: the client went away
            finally:
                sending = False  # no await since the frames ended: the watcher cannot cancel us past here
        finally:
            if watcher is not None:
                watcher.cancel()  # not awaited: it only reads `receive`, and a wait here could eat a shutdown's cancel
            await self.source.aclose()
        if self.background is not None:
            await self.background()
