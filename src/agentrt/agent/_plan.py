"""Plan mode on the agent side: the session's mode, the effective permission context, leaving on approval.

A session's plan mode lives in its state, ``AgentState.tool_state["plan_mode"]`` (``True`` / ``False``;
absent: the agent's configured mode, i.e. on when ``permission`` is ``PermissionMode.PLAN``), never on
the agent: one agent serves many sessions. The permission engine of each turn sees the *effective*
context (`permission_context`): the agent's own, in ``PLAN`` mode when the session or any call it runs
inside (a subagent's parent, found through `Run.parent`) is in plan mode. So a subagent of a session
in plan mode is in plan mode too, whatever its own configuration, and cannot leave it on its own.

The session leaves plan mode when ``plan_exit`` of a `agentrt.tool.builtin.PlanTools` succeeds (which
in plan mode only happens after the human approved it: `watch` notices it), or when the application
calls ``agent.exit_plan_mode(ctx)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from agentrt.agent._run import Run
from agentrt.context import RuntimeContext
from agentrt.errors import InvalidTypeError
from agentrt.message import ToolResultBlock, ToolUseBlock
from agentrt.permission import PermissionContext, PermissionMode
from agentrt.permission.engine import PLAN_EXIT

if TYPE_CHECKING:
    from agentrt.agent.react import ReActAgent
    from agentrt.tool._execution import ToolExecutor

__all__ = ["PLAN_MODE_KEY", "permission_context", "session_plan_mode", "set_plan_mode", "watch"]

PLAN_MODE_KEY = "plan_mode"
"""`AgentState.tool_state` key of the session's plan mode (absent: the agent's configured mode)."""

Runner = Callable[[ToolUseBlock], Awaitable[ToolResultBlock]]


def _configured(agent: Any) -> PermissionContext:
    return PermissionContext.coerce(getattr(agent, "permission", None))


def session_plan_mode(run: Run) -> bool:
    """Whether the session of `run` itself is in plan mode (its stored flag, else the agent's configuration)."""
    flag = run.state.tool_state.get(PLAN_MODE_KEY) if run.loaded else None
    if isinstance(flag, bool):
        return flag
    return _configured(run.agent).mode is PermissionMode.PLAN


def inherited_plan_mode(run: Run) -> bool:
    """Whether a call `run` runs inside (a parent agent's, at any depth) is in plan mode."""
    parent = run.parent
    while parent is not None:
        if session_plan_mode(parent):
            return True
        parent = parent.parent
    return False


def permission_context(agent: Any, run: Run) -> PermissionContext:
    """The permission context for this turn of `run`: the agent's, with the session's plan mode applied.

    In plan mode (the session's or inherited) the mode is ``PLAN``, rules and workspace kept. Out of it,
    an agent configured with ``PLAN`` runs its session in ``DEFAULT`` mode once the session left plan mode.
    """
    context = _configured(agent)
    if session_plan_mode(run) or (run.parent is not None and inherited_plan_mode(run)):
        return (
            context if context.mode is PermissionMode.PLAN else dataclasses.replace(context, mode=PermissionMode.PLAN)
        )
    if context.mode is PermissionMode.PLAN:
        return dataclasses.replace(context, mode=PermissionMode.DEFAULT)
    return context


def _apply(run: Run, active: bool, reason: str) -> bool:
    """Set the session's plan mode in `run`'s working state (saved at its next checkpoint); True if it changed."""
    if session_plan_mode(run) is active:
        return False
    tool_state = dict(run.state.tool_state)
    if active is (_configured(run.agent).mode is PermissionMode.PLAN):
        tool_state.pop(PLAN_MODE_KEY, None)  # back to what the configuration says: nothing to store
    else:
        tool_state[PLAN_MODE_KEY] = active
    run.set_field("tool_state", tool_state)
    if run.streaming:
        from agentrt.tool.builtin.plan import PlanModeChanged

        run.event(PlanModeChanged, active=active, reason=reason)
    return True


async def set_plan_mode(agent: ReActAgent, ctx: RuntimeContext, active: bool) -> bool:
    """Put the session of `ctx` in or out of plan mode; True if its mode changed.

    From a tool of the running call on that session it changes the call's working state (its next
    turn is judged in the new mode; saved at the next checkpoint) and never waits for the session lock;
    otherwise it takes the lock, loads, changes and saves.
    """
    if not isinstance(ctx, RuntimeContext):
        raise InvalidTypeError(f"ctx must be a RuntimeContext, not {type(ctx).__name__!r}")
    reason = "entered" if active else "exited"
    running = agent._own_running_call(ctx)
    if running is not None:
        return _apply(running, active, reason)
    user_id, session_id = ctx.key
    store = agent.state_store
    async with store.session_lock(user_id, session_id, timeout=agent.lock_timeout, agent=agent.state_key):
        run = Run(agent, ctx, [], store, "", None)
        await run.load()
        changed = _apply(run, active, reason)
        await run.checkpoint()
        return changed


async def plan_mode(agent: ReActAgent, ctx: RuntimeContext) -> bool:
    """Whether the session of `ctx` is in plan mode (as stored; a running call's unsaved change included)."""
    if not isinstance(ctx, RuntimeContext):
        raise InvalidTypeError(f"ctx must be a RuntimeContext, not {type(ctx).__name__!r}")
    running = agent._own_running_call(ctx)
    if running is not None:
        return session_plan_mode(running) or inherited_plan_mode(running)
    run = Run(agent, ctx, [], agent.state_store, "", None)
    await run.load()
    return session_plan_mode(run)


def watch(run: Run, executor: ToolExecutor, runner: Runner) -> Runner:
    """`runner`, noticing a successful ``plan_exit`` of a `PlanTools`: the session leaves plan mode.

    In plan mode ``plan_exit`` asks, so it succeeds only once the human approved it (a denial never
    runs it). A session whose plan mode is inherited from a parent call stays in it, and the result
    says so.
    """
    if PLAN_EXIT not in executor.tools:
        return runner

    async def run_call(call: ToolUseBlock) -> ToolResultBlock:
        result = await runner(call)
        if call.name != PLAN_EXIT or result.state != "success":
            return result
        from agentrt.tool.builtin.plan import is_plan_exit_tool

        if not is_plan_exit_tool(executor.lookup(call.name)):
            return result
        _apply(run, False, "plan_approved")
        if inherited_plan_mode(run):
            return dataclasses.replace(
                result,
                output="The plan is approved, but this session stays in plan mode: the session that called "
                "you is in plan mode. Report your plan back as your answer.",
            )
        return result

    return run_call
