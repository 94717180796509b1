"""Prometheus metrics: the metric families `MetricsMiddleware` records, `/metrics` rendering, lock timing.

Importing this module imports ``prometheus-client`` (``pip install 'agentrt[otel]'``);
`agentrt.middleware.telemetry.MetricsMiddleware` imports it when it is built, never before.

Metric families (prefix ``agentrt_`` by default):

========================================== ========= =============================================
name                                       type      labels
========================================== ========= =============================================
``agentrt_runs_total``                     counter   ``agent``, ``outcome`` (the generate reason:
                                                     stop, max_iters, awaiting_confirmation, ...;
                                                     ``error`` or ``cancelled``), ``error_type``
``agentrt_run_steps``                      histogram ``agent`` (reasoning steps per call)
``agentrt_run_duration_seconds``           histogram ``agent``
``agentrt_model_call_duration_seconds``    histogram ``model``, ``status`` (ok / error)
``agentrt_model_time_to_first_token_seconds`` histogram ``model`` (first text, thinking or tool-call chunk)
``agentrt_model_tokens_total``             counter   ``model``, ``type`` (input / output)
``agentrt_cost_usd_total``                 counter   ``model`` (US dollars, model calls with a known
                                                     price only: see `agentrt.model.pricing`)
``agentrt_tool_calls_total``               counter   ``tool``, ``status`` (success, error, denied,
                                                     interrupted)
``agentrt_tool_call_duration_seconds``     histogram ``tool``
``agentrt_active_sessions``                gauge     ``agent`` (sessions with a call in flight)
``agentrt_session_lock_wait_seconds``      histogram ``store`` (time to acquire a session lock)
``agentrt_session_lock_timeouts_total``    counter   ``store`` (`SessionBusyError`)
``agentrt_jobs_queued``                     gauge     durable-run jobs not yet completed (deployment-wide)
``agentrt_jobs_running``                    gauge     durable-run jobs running in this process
``agentrt_job_takeovers_total``             counter   jobs this process took over from a dead worker
========================================== ========= =============================================

The lock families are filled by a store wrapped with `instrument_store`: a session lock is taken
before any middleware hook runs, so no hook can time the wait.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar

from agentrt.errors import MissingExtraError, SessionBusyError
from agentrt.message import Msg
from agentrt.state.base import AgentState, AgentStateStore, SessionInfo

try:
    from prometheus_client import (
        CONTENT_TYPE_LATEST,
        REGISTRY,
        CollectorRegistry,
        Counter,
        Gauge,
        Histogram,
        generate_latest,
    )
except ImportError as exc:  # pragma: no cover - the packaging tests check it in a venv without the extra
    raise MissingExtraError("Prometheus metrics (MetricsMiddleware, /metrics)", "otel", exc.name) from exc

__all__ = [
    "DEFAULT_NAMESPACE",
    "AgentMetrics",
    "InstrumentedStateStore",
    "instrument_store",
    "render_latest",
]

DEFAULT_NAMESPACE = "agentrt"

_STEP_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50, 100)
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120)
_TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30)
_RUN_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
_TOOL_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_LOCK_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class AgentMetrics:
    """The agentrt metric families registered on one `CollectorRegistry` (one instance per registry).

    Use `AgentMetrics.get(registry)`: registering the same names twice on a registry is an error
    in prometheus-client, so middlewares and stores sharing a registry share this object.
    """

    _instances: ClassVar[weakref.WeakKeyDictionary[CollectorRegistry, dict[str, AgentMetrics]]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self, registry: CollectorRegistry, namespace: str = DEFAULT_NAMESPACE) -> None:
        self.registry = registry
        self.namespace = namespace
        ns = namespace
        self.runs = Counter(
            "runs", "Agent calls by outcome.", ["agent", "outcome", "error_type"], namespace=ns, registry=registry
        )
        self.run_steps = Histogram(
            "run_steps", "Reasoning steps (model calls) per agent call.", ["agent"], namespace=ns,
            registry=registry, buckets=_STEP_BUCKETS,
        )  # fmt: skip
        self.run_duration = Histogram(
            "run_duration_seconds", "Duration of agent calls (session lock held).", ["agent"], namespace=ns,
            registry=registry, buckets=_RUN_BUCKETS,
        )  # fmt: skip
        self.model_latency = Histogram(
            "model_call_duration_seconds", "Duration of model calls, first request byte to last chunk.",
            ["model", "status"], namespace=ns, registry=registry, buckets=_LATENCY_BUCKETS,
        )  # fmt: skip
        self.time_to_first_token = Histogram(
            "model_time_to_first_token_seconds", "Time from a model call's start to its first content chunk.",
            ["model"], namespace=ns, registry=registry, buckets=_TTFT_BUCKETS,
        )  # fmt: skip
        self.tokens = Counter(
            "model_tokens", "Tokens used by model calls.", ["model", "type"], namespace=ns, registry=registry
        )
        self.cost = Counter(
            "cost_usd", "Cost of model calls in US dollars (calls with a known price).", ["model"], namespace=ns,
            registry=registry,
        )  # fmt: skip
        self.tool_calls = Counter(
            "tool_calls", "Tool calls by tool and result state.", ["tool", "status"], namespace=ns, registry=registry
        )
        self.tool_duration = Histogram(
            "tool_call_duration_seconds", "Duration of executed tool calls.", ["tool"], namespace=ns,
            registry=registry, buckets=_TOOL_BUCKETS,
        )  # fmt: skip
        self.active_sessions = Gauge(
            "active_sessions", "Sessions with an agent call in flight.", ["agent"], namespace=ns, registry=registry
        )
        self.lock_wait = Histogram(
            "session_lock_wait_seconds", "Time spent waiting for a session lock.", ["store"], namespace=ns,
            registry=registry, buckets=_LOCK_BUCKETS,
        )  # fmt: skip
        self.lock_timeouts = Counter(
            "session_lock_timeouts", "Session locks not acquired in time (SessionBusyError).", ["store"],
            namespace=ns, registry=registry,
        )  # fmt: skip
        self.jobs_queued = Gauge(
            "jobs_queued", "Durable-run jobs submitted and not yet completed, in the whole deployment.",
            namespace=ns, registry=registry,
        )  # fmt: skip
        self.jobs_running = Gauge(
            "jobs_running", "Durable-run jobs this process's workers are running.", namespace=ns, registry=registry
        )
        self.job_takeovers = Counter(
            "job_takeovers", "Durable-run jobs this process took over from a worker that stopped heartbeating.",
            namespace=ns, registry=registry,
        )  # fmt: skip

    @classmethod
    def get(cls, registry: CollectorRegistry | None = None, namespace: str = DEFAULT_NAMESPACE) -> AgentMetrics:
        """The metrics of `registry` (prometheus-client's default `REGISTRY` when None), created once."""
        registry = registry if registry is not None else REGISTRY
        per_registry = cls._instances.get(registry)
        if per_registry is None:
            per_registry = cls._instances[registry] = {}
        metrics = per_registry.get(namespace)
        if metrics is None:
            metrics = per_registry[namespace] = cls(registry, namespace)
        return metrics


def render_latest(registry: CollectorRegistry | None = None) -> tuple[bytes, str]:
    """The Prometheus text exposition of `registry` (the default registry when None) and its content type.

    For a ``/metrics`` endpoint: ``body, content_type = render_latest()``.
    """
    return generate_latest(registry if registry is not None else REGISTRY), CONTENT_TYPE_LATEST


# --------------------------------------------------------------------------------------------------
# session-lock timing
# --------------------------------------------------------------------------------------------------
class _TimedHold:
    __slots__ = ("_inner", "_metrics", "_store")

    def __init__(self, inner: AbstractAsyncContextManager[Any], metrics: AgentMetrics, store: str) -> None:
        self._inner = inner
        self._metrics = metrics
        self._store = store

    async def __aenter__(self) -> Any:
        start = time.perf_counter()
        try:
            value = await self._inner.__aenter__()
        except SessionBusyError:
            self._metrics.lock_timeouts.labels(self._store).inc()
            self._metrics.lock_wait.labels(self._store).observe(time.perf_counter() - start)
            raise
        self._metrics.lock_wait.labels(self._store).observe(time.perf_counter() - start)
        return value

    async def __aexit__(self, *exc: Any) -> bool | None:
        return await self._inner.__aexit__(*exc)


class InstrumentedStateStore:
    """A state store whose `session_lock` waits are timed; everything else goes to the wrapped store.

    Build it with `instrument_store`. Other attributes of the wrapped store are reachable through
    this object as well.
    """

    def __init__(self, store: AgentStateStore, metrics: AgentMetrics, label: str | None = None) -> None:
        self.wrapped = store
        self.metrics = metrics
        self.label = label if label is not None else type(store).__name__

    async def load(self, user_id: str, session_id: str, *, agent: str = "") -> AgentState | None:
        return await self.wrapped.load(user_id, session_id, agent=agent)

    async def append(
        self,
        user_id: str,
        session_id: str,
        messages: Sequence[Msg],
        *,
        fields: Mapping[str, Any] | None = None,
        expected_revision: int,
        agent: str = "",
    ) -> int:
        return await self.wrapped.append(
            user_id, session_id, messages, fields=fields, expected_revision=expected_revision, agent=agent
        )

    async def save(self, state: AgentState, *, expected_revision: int | None = None) -> int:
        return await self.wrapped.save(state, expected_revision=expected_revision)

    async def delete(self, user_id: str, session_id: str, *, agent: str = "") -> bool:
        return await self.wrapped.delete(user_id, session_id, agent=agent)

    async def list_sessions(self, user_id: str, *, agent: str | None = None) -> list[SessionInfo]:
        return await self.wrapped.list_sessions(user_id, agent=agent)

    def session_lock(
        self, user_id: str, session_id: str, *, timeout: float | None = None, agent: str = ""
    ) -> AbstractAsyncContextManager[Any]:
        """The wrapped store's lock, with the wait until it is held recorded."""
        return _TimedHold(
            self.wrapped.session_lock(user_id, session_id, timeout=timeout, agent=agent), self.metrics, self.label
        )

    async def close(self) -> None:
        await self.wrapped.close()

    async def __aenter__(self) -> InstrumentedStateStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)

    def __repr__(self) -> str:
        return f"InstrumentedStateStore({self.wrapped!r})"


def instrument_store(
    store: AgentStateStore,
    registry: CollectorRegistry | None = None,
    *,
    label: str | None = None,
    namespace: str = DEFAULT_NAMESPACE,
) -> InstrumentedStateStore:
    """Wrap `store` so the time each call waits for its session lock lands in ``session_lock_wait_seconds``.

    Args:
        store: The state store the agents use.
        registry: The registry the metrics live in (the default registry when None).
        label: The ``store`` label (the store's class name when None).
        namespace: The metric name prefix.

    Returns:
        The wrapped store: give it to the agents (``ReActAgent(..., state_store=...)``).
    """
    return InstrumentedStateStore(store, AgentMetrics.get(registry, namespace), label)
