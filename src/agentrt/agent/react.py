"""`ReActAgent`: reason with a model, act with tools, repeat until the model answers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from agentrt.agent import _loop
from agentrt.agent._output import OutputMode
from agentrt.agent._run import Run
from agentrt.agent.base import AgentBase
from agentrt.context import RuntimeContext
from agentrt.errors import UserError
from agentrt.message import Msg
from agentrt.middleware.base import Middleware
from agentrt.model.base import DEFAULT_OPTIONS, ChatModel, GenerateOptions
from agentrt.state.base import AgentStateStore
from agentrt.tool.base import Tool
from agentrt.tool.toolkit import Toolkit

__all__ = ["ReActAgent"]

_EMPTY_TOOLKIT = Toolkit()


class ReActAgent(AgentBase):
    """The reason-act agent.

    Each call loads the session's state, appends the input, then loops: call the model with the
    system prompt, the history and the tool schemas; if the reply asks for tools, run them
    (concurrency-safe calls of one turn in parallel) and loop again; otherwise the reply is the
    answer. State is checkpointed after every model reply and every batch of tool results. After
    `max_iters` model calls a final tool-free call asks the model to wrap up (reason
    `MAX_ITERS`).

    Args:
        name: The agent's name (also the `name` of its messages and the `source` of its events).
        sys_prompt: The system prompt.
        model: A `ChatModel`, or an id like ``"openai:gpt-4o-mini"`` resolved on first use.
        toolkit: The tools the agent may call.
        middlewares: Hooks around calls, steps, model calls and tool calls (first = outermost).
        state_store: Where sessions live; the process-wide default store when None.
        permission: A `PermissionMode` or `PermissionContext` gating tool calls.
        max_iters: Most reasoning steps (model calls) per call.
        options: Default `GenerateOptions` for every model call.
        description: What the agent does (used when it serves as a tool of another agent).
        lock_timeout: Seconds to wait for a busy session before `SessionBusyError`; None waits.
        conflict_policy: On a concurrent write to the session: ``"merge"`` re-reads and appends
            after the other writer, ``"fail"`` raises `StateConflictError`.
        output_mode: How `call(..., output=...)` gets structured output: ``"auto"``, ``"native"``,
            ``"tool"`` or ``"prompted"``.
        output_retries: Invalid structured answers sent back to the model before `StructuredOutputError`.
        tool_calling: ``"native"`` tool calls, ``"text"`` (the Thought / Action / Final Answer protocol
            for models without tool calling), or ``"auto"``: text when the model has no native tools.
        enable_meta_tool: Give the model a ``manage_tool_groups`` tool to list tool groups and switch
            them on or off for the session.
        enable_task_list: Give the model a ``todo_write`` task list kept in the session, with a
            reminder of open tasks before each reasoning step.
    """

    __slots__ = (
        "_chains",
        "_model",
        "_model_ready",
        "_session_tools",
        "_system_msg",
        "conflict_policy",
        "max_iters",
        "middlewares",
        "options",
        "output_mode",
        "output_retries",
        "permission",
        "sys_prompt",
        "tool_calling",
        "toolkit",
    )

    def __init__(
        self,
        name: str,
        sys_prompt: str = "",
        model: ChatModel | str | None = None,
        toolkit: Toolkit | None = None,
        middlewares: Sequence[Middleware] = (),
        state_store: AgentStateStore | None = None,
        permission: Any = None,
        max_iters: int = 10,
        *,
        options: GenerateOptions | None = None,
        description: str = "",
        lock_timeout: float | None = None,
        conflict_policy: Literal["merge", "fail"] = "merge",
        output_mode: OutputMode = "auto",
        output_retries: int = 2,
        tool_calling: Literal["auto", "native", "text"] = "auto",
        enable_meta_tool: bool = False,
        enable_task_list: bool = False,
    ) -> None:
        super().__init__(name, description=description, state_store=state_store, lock_timeout=lock_timeout)
        if model is None:
            raise UserError(
                f"ReActAgent {name!r} needs a model: a ChatModel instance, an id like 'openai:gpt-4o-mini', "
                "or ScriptedModel([...]) for tests"
            )
        if not isinstance(model, (ChatModel, str)):
            raise UserError(f"model must be a ChatModel or a 'provider:model' string, not {type(model).__name__!r}")
        if not isinstance(max_iters, int) or max_iters < 1:
            raise UserError(f"max_iters must be a positive integer, not {max_iters!r}")
        if toolkit is not None and not isinstance(toolkit, Toolkit):
            raise UserError(f"toolkit must be a Toolkit, not {type(toolkit).__name__!r}")
        if conflict_policy not in ("merge", "fail"):
            raise UserError(f"conflict_policy must be 'merge' or 'fail', not {conflict_policy!r}")
        for mw in middlewares:
            if not isinstance(mw, Middleware):
                raise UserError(f"middlewares must be Middleware instances, not {type(mw).__name__!r}")
        self.sys_prompt = sys_prompt
        self._model = model
        self.toolkit = toolkit if toolkit is not None else _EMPTY_TOOLKIT
        self.middlewares = tuple(middlewares)
        self.permission = permission
        self.max_iters = max_iters
        self.options = options if options is not None else DEFAULT_OPTIONS
        self.conflict_policy = conflict_policy
        self.output_mode: OutputMode = output_mode
        if output_retries < 0:
            raise UserError(f"output_retries must be >= 0, not {output_retries!r}")
        self.output_retries = output_retries
        if tool_calling not in ("auto", "native", "text"):
            raise UserError(f"tool_calling must be 'auto', 'native' or 'text', not {tool_calling!r}")
        self.tool_calling = tool_calling
        self._model_ready = False
        self._session_tools: dict[str, Tool] | None = None
        if enable_meta_tool or enable_task_list:
            from agentrt.agent._session_tools import meta_tool, todo_tool

            extra = [meta_tool(self.toolkit)] if enable_meta_tool else []
            if enable_task_list:
                extra.append(todo_tool())
            self._session_tools = {t.name: t for t in extra}
        self._chains: _loop.Chains | None = None
        self._system_msg: Msg | None = None

    @property
    def model(self) -> ChatModel:
        """The chat model, resolved once.

        An id given at construction is resolved here, and a model without native tool calling is
        wrapped in the text tool protocol (see `tool_calling`).
        """
        model = self._model
        if self._model_ready:
            return model  # type: ignore[return-value]
        if isinstance(model, str):
            from agentrt.model.registry import model_from_id

            model = model_from_id(model)
        if self.tool_calling == "text" or (self.tool_calling == "auto" and not model.supports_native_tools):
            from agentrt.model.text_protocol import ensure_tool_calling

            model = ensure_tool_calling(model, self.tool_calling)
        self._model = model
        self._model_ready = True
        return model

    @model.setter
    def model(self, model: ChatModel | str) -> None:
        self._model = model
        self._model_ready = False

    async def activate_group(self, ctx: RuntimeContext, name: str) -> list[str]:
        """Make a tool group available in the session of `ctx`; returns the session's active groups."""
        return await self._change_groups(ctx, name, add=True)

    async def deactivate_group(self, ctx: RuntimeContext, name: str) -> list[str]:
        """Hide a tool group in the session of `ctx`; returns the session's active groups."""
        return await self._change_groups(ctx, name, add=False)

    async def _change_groups(self, ctx: RuntimeContext, name: str, *, add: bool) -> list[str]:
        if name not in self.toolkit.groups:
            known = ", ".join(sorted(self.toolkit.groups)) or "(none)"
            raise UserError(f"unknown tool group {name!r}; groups: {known}")
        user_id, session_id = ctx.key
        store = self.state_store
        async with store.session_lock(user_id, session_id, timeout=self.lock_timeout):
            run = Run(self, ctx, [], store, "", None)
            await run.load()
            current = run.state.active_groups
            active = set(current if current is not None else self.toolkit.default_active_groups())
            if add:
                active.add(name)
            else:
                active.discard(name)
            run.set_field("active_groups", sorted(active))
            await run.checkpoint()
            return sorted(active)

    async def _execute(self, run: Run) -> Msg:
        return await _loop.run_call(self, run)
