"""Usage limits of a call, and what a call spent.

``agent.call(..., usage_limits=UsageLimits(requests=5, cost_usd=0.10))`` (or a default for every
call with ``ReActAgent(usage_limits=...)``; a per-call value replaces the agent's) stops the call
with `agentrt.errors.UsageLimitExceeded` once it would go past a limit:

- ``requests`` is checked before each model call, and the call is counted in the same step (no
  await in between: a *reservation*): a call that would be one too many is never sent, however
  many subagents run in parallel inside the call;
- ``input_tokens``, ``output_tokens``, ``total_tokens`` and ``cost_usd`` after each model call
  (what a reply costs is known only once it is there), and before the next one: they cannot be
  reserved, so parallel model calls already sent when one of them goes past the limit may
  overshoot it by what they spend (at most the calls in flight at that moment);
- ``tool_calls`` before each batch of tool calls the model asked for: a batch that would go past
  the limit does not start (none of its calls runs).

Counts are per call, across all its model and tool calls, and include what subagents spend inside
it (an agent run as a tool, or any agent called from one of its tools): their model calls, tokens,
cost and tool calls count against the limits of every call they run inside while that call runs,
and each of them stops as soon as an enclosing call's limit is reached. A call run by a background
task that outlives its parent counts against the parent only while the parent runs.

The summary calls of context compression (`agentrt.memory.compression`) are model calls of the
call they compress for: they count (request, tokens, cost) and are checked like the others (see
`RunMeter`).

A pipeline call (`agentrt.pipeline`: ``sequential(...).call(..., usage_limits=...)``) has one
account for the whole call (`Budget`): every member's model calls, tokens, cost and tool calls
count against it (the members' own limits still apply to themselves), nested pipelines share it,
and the member that reaches it stops as a call at its own limit would.

A ``cost_usd`` limit is kept, never switched off: the priced calls' cost (a lower bound) is always
compared against it, a model with no known price is not called under it (a subagent's included),
and a call whose cost turns out unknown (no usage reported, or an unpriced fallback model answered)
stops the call right after it. Token counts are non-negative ints (`agentrt.message.TokenUsage`), and
a negative or non-finite cost counts as unknown.

The error comes after a checkpoint: the session holds the input and every completed step, a tool
call that was not run gets an ``interrupted`` result saying why, and the next call on the session
continues from there.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from agentrt.errors import InvalidTypeError, InvalidValueError, UsageLimitExceeded

if TYPE_CHECKING:
    from agentrt.agent._run import Run
    from agentrt.message import TokenUsage
    from agentrt.model.base import ChatModel

__all__ = ["Budget", "RunMeter", "RunUsage", "UsageLimits"]

logger = logging.getLogger("agentrt.agent")

_INT_LIMITS = ("requests", "input_tokens", "output_tokens", "total_tokens", "tool_calls")


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageLimits:
    """The most one call may spend; None: no limit on that count.

    Args:
        requests: Model calls (requests to the provider).
        input_tokens: Prompt tokens, summed over the model calls (cached ones included).
        output_tokens: Output tokens (reasoning included).
        total_tokens: Input plus output tokens.
        tool_calls: Tool calls run.
        cost_usd: Cost in US dollars (see `agentrt.model.pricing`); needs a model with a known price.
    """

    requests: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    tool_calls: int | None = None
    cost_usd: float | None = None

    def __post_init__(self) -> None:
        for name in _INT_LIMITS:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidTypeError(f"UsageLimits.{name} must be an int or None, not {value!r}")
            if value < 0:
                raise InvalidValueError(f"UsageLimits.{name} must be >= 0, not {value!r}")
        cost = self.cost_usd
        if cost is not None:
            if isinstance(cost, bool) or not isinstance(cost, (int, float)):
                raise InvalidTypeError(f"UsageLimits.cost_usd must be a number or None, not {cost!r}")
            if not math.isfinite(cost) or cost < 0:
                raise InvalidValueError(f"UsageLimits.cost_usd must be a finite number >= 0, not {cost!r}")

    @property
    def empty(self) -> bool:
        """Whether no limit is set."""
        return all(getattr(self, f.name) is None for f in fields(self))


@dataclass(frozen=True, slots=True, kw_only=True)
class RunUsage:
    """What one call spent: its model calls, their tokens and cost, and its tool calls (subagents included).

    `cost_usd` is None when a model call of it had no known price (see `agentrt.model.pricing`):
    a partial sum would understate it. Its JSON form (`to_dict`) is ``reply.metadata["usage"]``.
    """

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    tool_calls: int = 0
    cost_usd: float | None = None

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``total_tokens`` included)."""
        return {
            "requests": self.requests,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "tool_calls": self.tool_calls,
            "cost_usd": self.cost_usd,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunUsage:
        """Rebuild from `to_dict` output (missing counts are 0, a missing cost None)."""
        cost = d.get("cost_usd")
        return cls(
            requests=int(d.get("requests", 0)),
            input_tokens=int(d.get("input_tokens", 0)),
            output_tokens=int(d.get("output_tokens", 0)),
            cache_read_tokens=int(d.get("cache_read_tokens", 0)),
            cache_write_tokens=int(d.get("cache_write_tokens", 0)),
            reasoning_tokens=int(d.get("reasoning_tokens", 0)),
            tool_calls=int(d.get("tool_calls", 0)),
            cost_usd=float(cost) if cost is not None else None,
        )


def check_limits(value: Any) -> UsageLimits | None:
    """`value` as the limits of a call (None: none), or a typed error naming what to pass."""
    if value is None or isinstance(value, UsageLimits):
        return value
    raise InvalidTypeError(f"usage_limits must be an agentrt.UsageLimits or None, not {type(value).__name__!r}")


# --------------------------------------------------------------------------------------------------
# pipeline budgets: one account for a whole pipeline call
# --------------------------------------------------------------------------------------------------
class Budget:
    """The account of one pipeline call with usage limits (see `budget`).

    It counts what every agent call running inside the pipeline call spends (its members, and
    their subagents), as `Run` counts what a call and its subagents spend; its limits are checked
    with the calls' own.
    """

    __slots__ = (
        "cost_usd",
        "ended",
        "limits",
        "name",
        "parent",
        "reached",
        "requests",
        "tool_calls",
        "unpriced",
        "usage",
    )

    def __init__(self, name: str, limits: UsageLimits, parent: Budget | None) -> None:
        self.name = name
        """The pipeline's name (`UsageLimitExceeded.agent` when its limit stops a call)."""
        self.limits: UsageLimits | None = limits
        self.parent = parent
        """The budget of the pipeline call this one runs inside, if any."""
        self.requests = 0
        self.tool_calls = 0
        self.cost_usd = 0.0
        self.unpriced = 0
        self.usage: TokenUsage | None = None
        self.ended = False
        """Whether the pipeline call has returned or raised (work outliving it no longer counts)."""
        self.reached = False
        """Whether one of its limits stopped a call (the pipeline call then stops too)."""

    def __repr__(self) -> str:
        return f"Budget({self.name!r}, requests={self.requests}, tool_calls={self.tool_calls})"


_BUDGET: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("agentrt_usage_budget", default=None)
"""The budget of the innermost pipeline call with usage limits this code runs inside."""


@contextlib.contextmanager
def budget(name: str, limits: UsageLimits | None) -> Iterator[Budget | None]:
    """Count every agent call made inside the block against `limits` (a pipeline call's), as one account.

    None or empty limits open no budget (the enclosing pipeline's, if any, still counts). The block
    must start and end in one task (the budget is found through a context variable, which tasks
    created inside the block inherit).
    """
    if limits is None or limits.empty:
        yield None
        return
    account = Budget(name, limits, _BUDGET.get())
    token = _BUDGET.set(account)
    try:
        yield account
    finally:
        account.ended = True
        _BUDGET.reset(token)


def budget_reached() -> bool:
    """Whether a limit of a pipeline call this code runs inside has stopped a call."""
    return any(b.reached for b in _budgets())


def _budgets() -> Iterator[Budget]:
    """The budgets of the running pipeline calls this code runs inside, innermost first."""
    current = _BUDGET.get()
    while current is not None:
        if not current.ended:
            yield current
        current = current.parent


# --------------------------------------------------------------------------------------------------
# accounting and checks on runs (the loop calls these)
# --------------------------------------------------------------------------------------------------
def snapshot(run: Run | Budget) -> RunUsage:
    """What `run` (a call, or a pipeline call's budget) has spent so far."""
    tokens = run.usage
    return RunUsage(
        requests=run.requests,
        input_tokens=tokens.input_tokens if tokens else 0,
        output_tokens=tokens.output_tokens if tokens else 0,
        cache_read_tokens=tokens.cache_read_tokens if tokens else 0,
        cache_write_tokens=tokens.cache_write_tokens if tokens else 0,
        reasoning_tokens=tokens.reasoning_tokens if tokens else 0,
        tool_calls=run.tool_calls,
        cost_usd=None if run.unpriced else run.cost_usd,
    )


def _accounts(run: Run) -> Iterable[Run | Budget]:
    """`run`, each call it runs inside that is still running (a subagent's parents), then the pipeline budgets."""
    if run.parent is None and _BUDGET.get() is None:
        return (run,)  # the common case, several times per model call: no generators
    return _nested_accounts(run)


def _nested_accounts(run: Run) -> Iterator[Run | Budget]:
    current: Run | None = run
    while current is not None:
        yield current
        current = current.parent
        if current is not None and current.ended:
            break
    yield from _budgets()


def record_request(run: Run) -> None:
    """Count one model call about to be made (without checking: see `reserve_request`)."""
    for account in _accounts(run):
        account.requests += 1


def reserve_request(run: Run, model: ChatModel | None = None) -> None:
    """Check the limits for one more model call of `run` and count it, in one step; call it right before sending.

    Nothing awaits between the check and the count, so parallel subagents sharing a ``requests``
    limit can never together send more calls than it allows: each call is refused or counted
    before any other task runs. `model`: the model about to be called (default: the agent's),
    for the ``cost_usd`` price check. Raises `UsageLimitExceeded` (nothing counted) when refused.
    """
    check_before_request(run, model)
    record_request(run)


def record_spend(run: Run, cost: float | None) -> None:
    """Count the cost of one model call (its tokens go through `record_tokens`).

    None: the cost is unknown. A negative, NaN or infinite cost (or not a number at all) is never
    added, as it would lower the running total or make every limit comparison false: it counts as
    unknown too.
    """
    if cost is not None and (
        isinstance(cost, bool) or not isinstance(cost, (int, float)) or not math.isfinite(cost) or cost < 0
    ):
        logger.warning("agent %r: a model call has an invalid cost (%r); counted as unknown", run.agent.name, cost)
        cost = None
    for account in _accounts(run):
        if cost is None:
            account.unpriced += 1
        else:
            account.cost_usd += cost


def record_tokens(run: Run, usage: TokenUsage) -> None:
    """Count tokens spent in `run` (and in the calls and pipeline calls it runs inside)."""
    run.add_usage(usage)  # the call and its running parents
    for account in _budgets():
        account.usage = usage if account.usage is None else account.usage + usage


def record_reply(run: Run, model: ChatModel, usage: TokenUsage | None) -> float | None:
    """Count what one model call of `run` to `model` spent (tokens and cost); returns its cost (None: unknown)."""
    from agentrt.model.pricing import cost_of

    cost = cost_of(model, usage)
    record_spend(run, cost)
    if usage is not None:
        record_tokens(run, usage)
    return cost


def record_tool_calls(run: Run, n: int) -> None:
    """Count `n` tool calls about to run."""
    for account in _accounts(run):
        account.tool_calls += n


class RunMeter:
    """The accounting of model calls a call makes outside its loop (the context summaries of compression).

    `before` reserves the call (`reserve_request`: raises `UsageLimitExceeded` rather than send
    one past a limit), `after` counts what it spent. The compressor's ``meter``
    (`agentrt.memory.compression.SummaryMeter`).
    """

    __slots__ = ("run",)

    def __init__(self, run: Run) -> None:
        self.run = run

    def __call__(self, usage: TokenUsage) -> None:
        """Count tokens a tool reports spending for the run (a `UsageSink`: one object serves as both)."""
        record_tokens(self.run, usage)

    def before(self, model: ChatModel) -> None:
        """Check the limits for one call of `model` and count it (raises `UsageLimitExceeded` when refused)."""
        reserve_request(self.run, model)

    def after(self, model: ChatModel, usage: TokenUsage | None) -> None:
        """Count the tokens and cost of the call's reply (checked before the next model call).

        A streamed call also gets its `Usage` event, so the usage events of a call add up to its
        ``reply.metadata["usage"]`` whether or not it compressed.
        """
        cost = record_reply(self.run, model, usage)
        if usage is not None and self.run.streaming:
            from agentrt import events as ev

            self.run.event(ev.Usage, usage=usage, model=model.model_name, cost_usd=cost)


def _exceeded(account: Run | Budget, limit: str, limit_value: float, used: float, what: str) -> UsageLimitExceeded:
    if isinstance(account, Budget):
        account.reached = True
        owner, name = "pipeline", account.name
    else:
        owner, name = "agent", account.agent.name
    return UsageLimitExceeded(
        f"usage limit {limit}={limit_value:g} of {owner} {name!r} reached: {what}; the call's work so far is "
        "saved in the session, and a later call continues it",
        limit=limit,
        limit_value=limit_value,
        used=used,
        usage=snapshot(account),
        agent=name,
    )


def _spent_over(account: Run | Budget, limits: UsageLimits) -> UsageLimitExceeded | None:
    """The first token, cost or tool-call limit `account` has gone past, if any."""
    tokens = account.usage
    if tokens is not None:
        for name, used in (
            ("input_tokens", tokens.input_tokens),
            ("output_tokens", tokens.output_tokens),
            ("total_tokens", tokens.total_tokens),
        ):
            limit = getattr(limits, name)
            # not isfinite: a count no comparison can hold (TokenUsage makes them ints; defensive)
            if limit is not None and (used > limit or not math.isfinite(used)):
                return _exceeded(account, name, limit, used, f"{used} {name.replace('_', ' ')} spent")
    cost_limit = limits.cost_usd
    if cost_limit is not None:
        spent = account.cost_usd  # the priced calls' cost: a lower bound when some call is unpriced
        if spent > cost_limit or not math.isfinite(spent):
            return _exceeded(account, "cost_usd", cost_limit, spent, f"${spent:.6f} spent")
        if account.unpriced:
            # A call of unknown cost was made: the limit can no longer be shown to hold, so stop here
            # rather than go on unchecked.
            return _exceeded(
                account,
                "cost_usd",
                cost_limit,
                spent,
                f"${spent:.6f} spent, plus {account.unpriced} model call(s) of unknown cost (no usage reported, "
                "or a model with no known price), so the limit cannot be checked",
            )
    if limits.tool_calls is not None and account.tool_calls > limits.tool_calls:
        used = account.tool_calls
        return _exceeded(account, "tool_calls", limits.tool_calls, used, f"{used} tool calls run")
    return None


def check_before_request(run: Run, model: ChatModel | None = None) -> None:
    """Raise `UsageLimitExceeded` if the next model call would go past a limit (or one is already past).

    Under a ``cost_usd`` limit (the call's own or an enclosing call's), a model with no known price
    is not called at all: its cost could not be counted (a subagent on an unpriced model inside a
    call with a cost limit stops before its first model call). `model`: the model to be called
    (default: the agent's). This only checks; `reserve_request` checks and counts.
    """
    unpriced_model: str | None = None
    checked_price = False
    for account in _accounts(run):
        limits = account.limits
        if limits is None:
            continue
        if limits.requests is not None and account.requests + 1 > limits.requests:
            would = account.requests + 1
            raise _exceeded(account, "requests", limits.requests, would, f"model call {would} would go past it")
        over = _spent_over(account, limits)
        if over is not None:
            raise over
        if limits.cost_usd is not None:
            if not checked_price:
                checked_price = True
                unpriced_model = _unpriced_model(run, model)
            if unpriced_model is not None:
                raise _exceeded(
                    account,
                    "cost_usd",
                    limits.cost_usd,
                    account.cost_usd,
                    f"model {unpriced_model!r} of agent {run.agent.name!r} has no known price, so its calls "
                    "cannot be counted against the limit (give it one: model.price = ModelPrice(...))",
                )


def _unpriced_model(run: Run, model: Any = None) -> str | None:
    """The id of the model to be called (`model`, else `run`'s agent's) when it has no known price; None when priced."""
    from agentrt.model.base import ChatModel
    from agentrt.model.pricing import price_known

    if model is None:
        try:
            model = getattr(run.agent, "model", None)
        except Exception:  # an unresolvable model id: the call itself reports it
            return None
    if not isinstance(model, ChatModel) or price_known(model):
        return None
    return str(getattr(model, "id", model))


def check_after_request(run: Run) -> None:
    """Raise `UsageLimitExceeded` if the tokens or cost spent so far went past a limit."""
    for account in _accounts(run):
        limits = account.limits
        if limits is not None:
            over = _spent_over(account, limits)
            if over is not None:
                raise over


def check_tool_calls(run: Run, n: int) -> None:
    """Raise `UsageLimitExceeded` if running `n` more tool calls would go past a limit."""
    for account in _accounts(run):
        limits = account.limits
        if limits is None or limits.tool_calls is None:
            continue
        after = account.tool_calls + n
        if after > limits.tool_calls:
            raise _exceeded(
                account, "tool_calls", limits.tool_calls, after, f"{n} more tool call(s) would make {after}"
            )
