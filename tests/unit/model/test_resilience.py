"""`RetryModel` and `FallbackModel` against in-memory models (the HTTP fault paths are in
tests/unit/model/providers/test_openai_http.py)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Sequence
from typing import Any, ClassVar

import pytest

from agentrt import ReActAgent, RuntimeContext
from agentrt.errors import (
    AuthenticationError,
    ContextWindowExceededError,
    ModelAPIError,
    ModelBehaviorError,
    ModelConnectionError,
    ModelError,
    ModelTimeoutError,
    RateLimitError,
    UserError,
)
from agentrt.events import RunFinished
from agentrt.message import Msg
from agentrt.model import ChatModel, ChatResponse, FallbackModel, GenerateOptions, RetryModel, ScriptedModel, ToolSchema
from agentrt.model import resilience as resilience_module
from agentrt.model.resilience import is_retryable

Step = ChatResponse | float | BaseException


class FakeModel(ChatModel):
    """Each call plays the next attempt: chunks are yielded, floats are sleeps, exceptions are raised."""

    provider: ClassVar[str] = "fake"
    supports_vision: ClassVar[bool] = True
    supports_thinking: ClassVar[bool] = True

    def __init__(self, *attempts: list[Step], name: str = "m") -> None:
        self.model_name = name
        self.attempts = list(attempts)
        self.calls = 0
        self.finished = 0  # streams whose generator was closed or completed
        self.closed = False

    async def stream(
        self, messages: Sequence[Msg], tools: Sequence[ToolSchema] = (), options: GenerateOptions | None = None
    ) -> AsyncIterator[ChatResponse]:
        steps = self.attempts[self.calls]
        self.calls += 1
        try:
            for step in steps:
                if isinstance(step, BaseException):
                    raise step
                if isinstance(step, float):
                    await asyncio.sleep(step)
                else:
                    yield step
        finally:
            self.finished += 1

    async def aclose(self) -> None:
        self.closed = True


def text(*words: str) -> list[Step]:
    return [*(ChatResponse(text=w) for w in words), ChatResponse(finish_reason="stop")]


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    delays: list[float] = []

    async def fake_sleep(delay: float) -> None:
        delays.append(delay)

    monkeypatch.setattr(resilience_module, "_sleep", fake_sleep)
    return delays


async def chunks_of(model: ChatModel) -> list[ChatResponse]:
    return [c async for c in model.stream([Msg.user("x")])]


# --------------------------------------------------------------------------------------------------
# what is retried
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (RateLimitError("429", status=429), True),
        (RateLimitError("quota", status=429, body={"error": {"code": "insufficient_quota"}}), False),
        (ModelAPIError("500", status=500), True),
        (ModelAPIError("503", status=503), True),
        (ModelAPIError("400", status=400), False),
        (ModelAPIError("404", status=404), False),
        (ModelAPIError("422", status=422), False),
        (ModelAPIError("in-stream, no status", status=None), False),
        (AuthenticationError("401", status=401), False),
        (AuthenticationError("403", status=403), False),
        (ContextWindowExceededError("too long", status=400), False),
        (ModelConnectionError("refused"), True),
        (ModelTimeoutError("slow"), True),
        (ModelBehaviorError("garbage"), False),
        (ValueError("not a model error"), False),
    ],
)
def test_is_retryable(exc: BaseException, expected: bool) -> None:
    assert is_retryable(exc) is expected


def test_backoff_is_full_jitter_with_a_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    bounds: list[tuple[float, float]] = []

    def uniform(a: float, b: float) -> float:
        bounds.append((a, b))
        return b

    monkeypatch.setattr(random, "uniform", uniform)
    model = RetryModel(ScriptedModel(), backoff=0.5, max_backoff=3.0)
    err = ModelConnectionError("x")
    assert [model.delay(n, err) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 3.0]
    assert bounds == [(0.0, 0.5), (0.0, 1.0), (0.0, 2.0), (0.0, 3.0)]
    assert model.delay(1, RateLimitError("x", retry_after=7.5)) == 7.5
    assert RetryModel(ScriptedModel(), max_retry_after=2).delay(1, RateLimitError("x", retry_after=60)) == 2


# --------------------------------------------------------------------------------------------------
# RetryModel
# --------------------------------------------------------------------------------------------------
async def test_retries_before_the_first_chunk(sleeps: list[float]) -> None:
    inner = FakeModel([ModelConnectionError("reset")], [ModelAPIError("boom", status=502)], text("ok"))
    chunks = await chunks_of(RetryModel(inner, max_retries=2))
    assert [c.text for c in chunks if c.text] == ["ok"]
    assert not any(c.restart for c in chunks)
    assert inner.calls == 3
    assert inner.finished == 3
    assert len(sleeps) == 2


async def test_no_retry_for_client_errors(sleeps: list[float]) -> None:
    inner = FakeModel([ModelAPIError("bad request", status=400)], text("never"))
    with pytest.raises(ModelAPIError, match="bad request"):
        await chunks_of(RetryModel(inner, max_retries=5))
    assert inner.calls == 1
    assert sleeps == []


async def test_max_retries_zero(sleeps: list[float]) -> None:
    inner = FakeModel([ModelConnectionError("reset")], text("never"))
    with pytest.raises(ModelConnectionError):
        await chunks_of(RetryModel(inner, max_retries=0))
    assert inner.calls == 1


async def test_midstream_failure_restarts_the_reply(sleeps: list[float]) -> None:
    inner = FakeModel([ChatResponse(text="Hal"), ModelConnectionError("reset")], text("Hello"))
    chunks = await chunks_of(RetryModel(inner, max_retries=1))
    assert chunks[0].text == "Hal"
    assert (
        chunks[1].restart is not None and "fake:m failed mid-stream (ModelConnectionError: reset)" in chunks[1].restart
    )
    assert [c.text for c in chunks[2:] if c.text] == ["Hello"]
    # generate() (and the agent) discard the partial reply.
    inner = FakeModel([ChatResponse(text="Hal"), ModelConnectionError("reset")], text("Hello"))
    assert (await RetryModel(inner, max_retries=1).generate([Msg.user("x")])).text == "Hello"


async def test_midstream_failure_is_raised_without_restart(sleeps: list[float]) -> None:
    inner = FakeModel([ChatResponse(text="Hal"), ModelConnectionError("reset")], text("Hello"))
    with pytest.raises(ModelConnectionError):
        await chunks_of(RetryModel(inner, max_retries=3, restart_midstream=False))
    assert inner.calls == 1


async def test_idle_timeout_between_chunks() -> None:
    inner = FakeModel([ChatResponse(text="a"), 5.0, ChatResponse(text="b")])
    seen: list[str] = []
    with pytest.raises(ModelTimeoutError, match=r"fake:m.*next chunk \(idle_timeout=0.1 s\)"):
        async for c in RetryModel(inner, max_retries=0, idle_timeout=0.1).stream([Msg.user("x")]):
            seen.append(c.text)
    assert seen == ["a"]
    assert inner.finished == 1  # the stalled stream was closed
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_first_chunk_timeout() -> None:
    inner = FakeModel([5.0, ChatResponse(text="late")])
    with pytest.raises(ModelTimeoutError, match=r"first chunk \(timeout=0.1 s\)"):
        await chunks_of(RetryModel(inner, max_retries=0, timeout=0.1, idle_timeout=None))


async def test_first_chunk_and_idle_limits_differ() -> None:
    # A long first-chunk limit must not delay the (shorter) idle limit that follows it.
    inner = FakeModel([0.01, ChatResponse(text="a"), 5.0, ChatResponse(text="b")])
    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(ModelTimeoutError, match="idle_timeout"):
        await chunks_of(RetryModel(inner, max_retries=0, timeout=30, idle_timeout=0.1))
    assert loop.time() - start < 25  # not the 30 s first-chunk limit (a correctness bound, not a speed one)


async def test_total_timeout() -> None:
    inner = FakeModel([ChatResponse(text="a"), 0.05, ChatResponse(text="b"), 0.05, ChatResponse(text="c"), 5.0])
    with pytest.raises(ModelTimeoutError, match="total_timeout"):
        await chunks_of(RetryModel(inner, max_retries=0, idle_timeout=1, total_timeout=0.2))


async def test_timeouts_are_retried(sleeps: list[float]) -> None:
    inner = FakeModel([5.0], text("ok"))
    chunks = await chunks_of(RetryModel(inner, max_retries=1, timeout=0.05))
    assert [c.text for c in chunks if c.text] == ["ok"]
    assert len(sleeps) == 1


async def test_a_slow_consumer_is_not_a_stalled_model() -> None:
    inner = FakeModel(text("a", "b", "c"))
    seen = []
    async for c in RetryModel(inner, max_retries=0, idle_timeout=0.05).stream([Msg.user("x")]):
        seen.append(c.text)
        await asyncio.sleep(0.1)  # longer than the idle timeout, but spent outside the model
    assert seen == ["a", "b", "c", ""]


async def test_outside_cancellation_is_not_a_timeout() -> None:
    inner = FakeModel([ChatResponse(text="a"), 5.0])
    model = RetryModel(inner, max_retries=3, idle_timeout=10)
    started = asyncio.Event()

    async def consume() -> None:
        async for _ in model.stream([Msg.user("x")]):
            started.set()

    task = asyncio.create_task(consume())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert inner.calls == 1  # not retried
    assert inner.finished == 1


class SwallowingModel(FakeModel):
    """A badly behaved model that turns cancellation into its own error."""

    async def stream(
        self, messages: Sequence[Msg], tools: Sequence[ToolSchema] = (), options: GenerateOptions | None = None
    ) -> AsyncIterator[ChatResponse]:
        yield ChatResponse(text="a")
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            raise ModelConnectionError("cancelled, says the SDK") from None
        yield ChatResponse(text="never")


async def test_timeout_even_when_the_model_swallows_cancellation() -> None:
    with pytest.raises(ModelTimeoutError):
        await chunks_of(RetryModel(SwallowingModel(), max_retries=0, idle_timeout=0.05))
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_early_exit_closes_the_inner_stream() -> None:
    inner = FakeModel(text("a", "b", "c"))
    stream = RetryModel(inner, idle_timeout=1).stream([Msg.user("x")])
    async for _ in stream:
        break
    await stream.aclose()  # type: ignore[attr-defined]
    assert inner.finished == 1


# --------------------------------------------------------------------------------------------------
# whole replies (a call nobody streams): a coroutine per layer, the same retries and timeouts
# --------------------------------------------------------------------------------------------------
class WholeModel(FakeModel):
    """A `FakeModel` that answers whole when not streamed: each attempt's chunks in one list."""

    def streams(self, options: GenerateOptions | None = None) -> bool:
        return False

    async def whole_reply(
        self, messages: Sequence[Msg], tools: Sequence[ToolSchema] = (), options: GenerateOptions | None = None
    ) -> list[ChatResponse]:
        return [chunk async for chunk in self.stream(messages, tools, options)]


async def test_a_whole_reply_is_retried_like_a_stream(sleeps: list[float]) -> None:
    inner = WholeModel([ModelConnectionError("reset")], [ModelAPIError("503", status=503)], text("ok"))
    chunks = await RetryModel(inner, max_retries=2).whole_reply([Msg.user("x")])
    assert chunks is not None and [c.text for c in chunks] == ["ok", ""]
    assert inner.calls == 3 and len(sleeps) == 2
    assert not any(c.restart for c in chunks), "nothing went out before a whole reply failed: no restart"


async def test_a_whole_reply_past_whole_timeout_is_a_timeout() -> None:
    model = RetryModel(WholeModel([5.0]), max_retries=0, whole_timeout=0.05)
    with pytest.raises(ModelTimeoutError, match="whole_timeout"):
        await model.whole_reply([Msg.user("x")])
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_a_whole_reply_times_out_when_the_model_swallows_cancellation() -> None:
    class Swallowing(WholeModel):
        async def whole_reply(
            self, messages: Sequence[Msg], tools: Sequence[ToolSchema] = (), options: GenerateOptions | None = None
        ) -> list[ChatResponse]:
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                raise ModelConnectionError("cancelled, says the SDK") from None
            return []

    with pytest.raises(ModelTimeoutError):
        await RetryModel(Swallowing(), max_retries=0, whole_timeout=0.05).whole_reply([Msg.user("x")])


async def test_whole_replies_in_flight_share_one_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.get_running_loop()
    timers: list[float] = []
    call_at = loop.call_at

    def counting_call_at(when: float, callback: Any, *args: Any, context: Any = None) -> asyncio.TimerHandle:
        if isinstance(callback, resilience_module._Deadlines):
            timers.append(when)
        return call_at(when, callback, *args, context=context)

    monkeypatch.setattr(loop, "call_at", counting_call_at)
    model = RetryModel(WholeModel(*([0.02, *text("ok")] for _ in range(50))), whole_timeout=30)
    replies = await asyncio.gather(*(model.whole_reply([Msg.user("x")]) for _ in range(50)))
    assert all(r is not None and r[0].text == "ok" for r in replies)
    assert len(timers) == 1, "one timer for the deadlines of all the requests in flight, none per request"


@pytest.mark.parametrize("slow_first", [True, False])
async def test_the_shared_timer_cancels_only_the_late_wait(slow_first: bool) -> None:
    attempts = ([1.0], [0.01, *text("fast")]) if slow_first else ([0.01, *text("fast")], [1.0])
    model = RetryModel(WholeModel(*attempts), max_retries=0, whole_timeout=0.2)
    first = asyncio.ensure_future(model.whole_reply([Msg.user("x")]))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(model.whole_reply([Msg.user("x")]))
    slow, fast = (first, second) if slow_first else (second, first)
    reply = await fast
    assert reply is not None and reply[0].text == "fast"
    with pytest.raises(ModelTimeoutError):
        await slow  # also when the timer was set for the deadline of the wait that ended first


async def test_a_model_that_streams_gets_no_whole_reply() -> None:
    assert await RetryModel(FakeModel(text("a"))).whole_reply([Msg.user("x")]) is None  # streams() is True

    class OwnStream(RetryModel):
        async def stream(
            self, messages: Sequence[Msg], tools: Sequence[ToolSchema] = (), options: GenerateOptions | None = None
        ) -> AsyncIterator[ChatResponse]:
            yield ChatResponse(text="mine")

    assert await OwnStream(WholeModel(text("a"))).whole_reply([Msg.user("x")]) is None, "its own stream is used"


async def test_retry_model_forwards_identity_and_capabilities() -> None:
    inner = FakeModel(text("a"), name="big-model")
    model = RetryModel(inner)
    assert model.model is inner
    assert model.model_name == "big-model"
    assert model.provider == "fake"
    assert model.id == "fake:big-model"
    assert model.supports_vision is True
    assert model.supports_thinking is True
    assert model.supports_native_tools is True
    assert model.supports_structured_output is False
    await model.aclose()
    assert inner.closed


@pytest.mark.parametrize(
    "kwargs", [{"max_retries": -1}, {"timeout": 0}, {"idle_timeout": -1.0}, {"total_timeout": 0.0}]
)
def test_retry_model_rejects_bad_settings(kwargs: dict[str, Any]) -> None:
    with pytest.raises(UserError):
        RetryModel(ScriptedModel(), **kwargs)


def test_retry_model_wraps_only_models() -> None:
    with pytest.raises(UserError, match="wraps a ChatModel"):
        RetryModel("openai:gpt-4o")  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------
# FallbackModel
# --------------------------------------------------------------------------------------------------
async def test_fallback_before_the_first_chunk() -> None:
    primary = FakeModel([ModelAPIError("down", status=503)], name="p")
    backup = FakeModel(text("from", " backup"), name="b")
    chunks = await chunks_of(FallbackModel(primary, backup))
    assert "".join(c.text for c in chunks) == "from backup"
    assert not any(c.restart for c in chunks)


async def test_fallback_midstream_signals_a_restart() -> None:
    primary = FakeModel([ChatResponse(text="partial"), ModelConnectionError("cut")], name="p")
    backup = FakeModel(text("full"), name="b")
    model = FallbackModel(primary, backup)
    chunks = await chunks_of(model)
    assert chunks[0].text == "partial"
    assert chunks[1].restart == "primary fake:p failed: ModelConnectionError: cut; continuing with fake:b"
    assert "".join(c.text for c in chunks[2:]) == "full"
    assert primary.finished == 1
    primary2 = FakeModel([ChatResponse(text="partial"), ModelConnectionError("cut")], name="p")
    reply = await FallbackModel(primary2, FakeModel(text("full"), name="b")).generate([Msg.user("x")])
    assert reply.text == "full"


async def test_fallback_chain_and_last_error_with_notes() -> None:
    a = FakeModel([ModelConnectionError("a is down")], name="a")
    b = FakeModel([ModelTimeoutError("b is slow")], name="b")
    c = FakeModel([ModelAPIError("c is broken", status=500)], name="c")
    with pytest.raises(ModelAPIError, match="c is broken") as info:
        await chunks_of(FallbackModel(a, b, c))
    assert info.value.__notes__ == [
        "primary fake:a failed: ModelConnectionError: a is down",
        "fallback fake:b failed: ModelTimeoutError: b is slow",
    ]


async def test_fallback_on_limits_what_switches() -> None:
    primary = FakeModel([AuthenticationError("bad key", status=401)], name="p")
    backup = FakeModel(text("never"), name="b")
    with pytest.raises(AuthenticationError):
        await chunks_of(FallbackModel(primary, backup, fallback_on=(ModelConnectionError, ModelTimeoutError)))
    assert backup.calls == 0
    # Errors that are not ModelErrors (bugs, misuse) never switch by default.
    primary = FakeModel([UserError("misuse")], name="p")
    with pytest.raises(UserError):
        await chunks_of(FallbackModel(primary, FakeModel(text("never"))))


async def test_fallback_identity_capabilities_and_aclose() -> None:
    class Blind(FakeModel):
        supports_vision: ClassVar[bool] = False
        supports_thinking: ClassVar[bool] = False

    primary = FakeModel(text("a"), name="p")
    backup = Blind(text("b"), name="b")
    model = FallbackModel(primary, backup)
    assert model.id == "fake:p"
    assert model.model_name == "p"
    assert model.supports_vision is False  # every model must have it
    assert model.supports_thinking is True  # any model may produce it
    assert model.supports_native_tools is True
    await model.aclose()
    assert primary.closed and backup.closed


def test_fallback_model_validation() -> None:
    with pytest.raises(UserError, match="at least one fallback"):
        FallbackModel(ScriptedModel())
    with pytest.raises(UserError, match="Exception subclasses"):
        FallbackModel(ScriptedModel(), ScriptedModel(), fallback_on=(KeyboardInterrupt,))
    with pytest.raises(UserError, match="takes ChatModels"):
        FallbackModel(ScriptedModel(), "openai:gpt-4o")  # type: ignore[arg-type]


async def test_fallback_with_retry_inside(sleeps: list[float]) -> None:
    primary = FakeModel([ModelConnectionError("x")], [ModelConnectionError("y")], name="p")
    backup = FakeModel(text("ok"), name="b")
    chunks = await chunks_of(FallbackModel(RetryModel(primary, max_retries=1), backup))
    assert "".join(c.text for c in chunks) == "ok"
    assert primary.calls == 2
    assert len(sleeps) == 1


async def test_agent_discards_the_failed_partial_reply() -> None:
    primary = FakeModel([ChatResponse(text="I think the ans"), ModelConnectionError("cut")], name="p")
    backup = ScriptedModel(["The answer is 42."], name="b")
    agent = ReActAgent(name="a", sys_prompt="", model=FallbackModel(primary, backup))
    events = [e async for e in agent.stream_events("question", RuntimeContext(user_id="u", session_id="s"))]
    assert [e.type for e in events if e.type == "model_restarted"] == ["model_restarted"]
    final = events[-1]
    assert final.type == "run_finished"
    assert isinstance(final, RunFinished)
    assert final.msg.text == "The answer is 42."


def test_exports() -> None:
    import agentrt.model

    assert agentrt.model.FallbackModel is FallbackModel
    assert agentrt.model.RetryModel is RetryModel
    assert issubclass(ModelTimeoutError, ModelError)
