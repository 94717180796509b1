"""`ReActAgent`: reason with a model, act with tools, repeat until the model answers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from agentrt import events as ev
from agentrt.agent import _loop
from agentrt.agent._output import OutputMode
from agentrt.agent._run import Run
from agentrt.agent._skills import AgentSkills
from agentrt.agent.base import AgentBase
from agentrt.agent.options import (
    KnowledgeOptions,
    LoopOptions,
    MemoryMode,
    MemoryOptions,
    OutputOptions,
    resolve_options,
)
from agentrt.context import RuntimeContext
from agentrt.errors import UserError
from agentrt.message import GenerateReason, Msg, new_id
from agentrt.middleware.base import Middleware
from agentrt.model.base import DEFAULT_OPTIONS, ChatModel, GenerateOptions
from agentrt.state.base import AgentStateStore
from agentrt.tool.base import Tool
from agentrt.tool.toolkit import Toolkit

if TYPE_CHECKING:
    from agentrt.agent.base import AgentInput
    from agentrt.agent.usage import UsageLimits
    from agentrt.memory.compression import ContextCompressor, ContextConfig
    from agentrt.memory.long_term import LongTermMemory, MemoryItem
    from agentrt.memory.retrieval import KnowledgeMode, Retriever
    from agentrt.tool.skills import Skill, SkillSource

__all__ = ["MemoryMode", "ReActAgent"]

logger = logging.getLogger("agentrt.agent")

_PAUSED = frozenset(
    (GenerateReason.AWAITING_CONFIRMATION, GenerateReason.AWAITING_EXTERNAL_EXECUTION, GenerateReason.INTERRUPTED)
)


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
        context: A `agentrt.memory.ContextConfig`: count the prompt before each model call and
            compress the session's context view when it nears the window (the transcript is kept).
            None: no counting at all.
        long_term_memory: A `agentrt.memory.LongTermMemory` holding facts about each user across
            sessions.
        memory_mode: ``"static"``: the facts relevant to each call's input are put into the system
            prompt; ``"agent"``: the model gets ``remember`` / ``recall`` tools; ``"both"``.
        memory_top_k: Facts retrieved for the system prompt (static mode).
        summary_model: The (cheaper) model that writes context summaries and extracts memories; the
            agent's model when None.
        state_key: Which agent the sessions belong to in the store (default: `name`). Two agents
            share a conversation only when they are given the same `state_key` on purpose.
        memory_extraction: After each completed call, extract durable facts from it into long-term
            memory with a model call, in the background (see `drain`).
        loop: `LoopOptions` (``max_iters``, ``tool_calling``, ``conflict_policy``) as one object.
        output_options: `OutputOptions` (``mode``, ``retries``): ``output_mode`` and ``output_retries``
            as one object.
        memory: `MemoryOptions` (``long_term_memory``, ``mode``, ``top_k``, ``extraction``,
            ``summary_model``): the memory keywords as one object.
        skills: Agent Skills (SKILL.md folders): a skill folder, a folder of skill folders, or a list
            of these (later ones win on a name clash, and over the toolkit's skills). The system
            prompt lists each skill's name and description; the model loads one with ``load_skill``.
            See docs/harness.md.
        knowledge: A knowledge base to answer from with citations: an `agentrt.knowledge.Knowledge`, or
            any `agentrt.memory.retrieval.Retriever`. The reply's ``metadata["citations"]`` lists the
            passages its turn used (`Citation.to_dict`, deduplicated by chunk id, in first-use order).
        knowledge_mode: ``"tool"`` (the default): the model gets a read-only ``search_knowledge(query,
            k, filters)`` tool; ``"static"``: the top passages for the user's latest message go into the
            system prompt of each call; ``"both"``.
        knowledge_k: Passages put into the prompt in static mode (1 to 20, default 4).
        usage_limits: The default `UsageLimits` of each call (requests, tokens, tool calls, cost); a
            call's own ``usage_limits=`` replaces it. See `agentrt.agent.usage`.

    A group object and its flat keywords may be mixed only when they agree: a flat keyword left at
    its default defers to the object, one set to another value than the object's is a `UserError`.
    """

    __slots__ = (
        "_background",
        "_chains",
        "_context",
        "_knowledge",
        "_long_term_memory",
        "_manual_compressor",
        "_model",
        "_model_ready",
        "_session_tools",
        "_skills",
        "_summary_model",
        "_system_msg",
        "conflict_policy",
        "context_config",
        "knowledge_k",
        "knowledge_mode",
        "max_iters",
        "memory_extraction",
        "memory_mode",
        "memory_top_k",
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
        context: ContextConfig | None = None,
        long_term_memory: LongTermMemory | None = None,
        memory_mode: MemoryMode = "both",
        memory_top_k: int = 5,
        summary_model: ChatModel | str | None = None,
        memory_extraction: bool = False,
        state_key: str | None = None,
        loop: LoopOptions | None = None,
        output_options: OutputOptions | None = None,
        memory: MemoryOptions | None = None,
        skills: SkillSource | None = None,
        knowledge: Retriever | None = None,
        knowledge_mode: KnowledgeMode = "tool",
        knowledge_k: int = 4,
        usage_limits: UsageLimits | None = None,
    ) -> None:
        super().__init__(
            name,
            description=description,
            state_store=state_store,
            lock_timeout=lock_timeout,
            state_key=state_key,
            usage_limits=usage_limits,
        )
        model = _checked_parts(name, model, toolkit, middlewares)
        loop = resolve_options(
            "loop",
            loop,
            LoopOptions,
            {"max_iters": max_iters, "tool_calling": tool_calling, "conflict_policy": conflict_policy},
        )
        output_options = resolve_options(
            "output_options", output_options, OutputOptions, {"mode": output_mode, "retries": output_retries}
        )
        memory = resolve_options(
            "memory",
            memory,
            MemoryOptions,
            {
                "long_term_memory": long_term_memory,
                "mode": memory_mode,
                "top_k": memory_top_k,
                "extraction": memory_extraction,
                "summary_model": summary_model,
            },
        )
        knowledge_options = resolve_options(
            "knowledge", None, KnowledgeOptions, {"knowledge": knowledge, "mode": knowledge_mode, "top_k": knowledge_k}
        )
        self.sys_prompt = sys_prompt
        self._model = model
        self._model_ready = False
        # Its own (empty) toolkit when none is given: a shared one would hand a tool registered
        # through one agent's `toolkit` to every other agent built without one.
        self.toolkit = toolkit if toolkit is not None else Toolkit()
        self.middlewares = tuple(middlewares)
        self.permission = permission
        self.options = options if options is not None else DEFAULT_OPTIONS
        self.max_iters = loop.max_iters
        self.tool_calling = loop.tool_calling
        self.conflict_policy = loop.conflict_policy
        self.output_mode: OutputMode = output_options.mode
        self.output_retries = output_options.retries
        self._long_term_memory = memory.long_term_memory
        self.memory_mode: MemoryMode = memory.mode
        self.memory_top_k = memory.top_k
        self.memory_extraction = memory.extraction
        self._summary_model: ChatModel | str | None = memory.summary_model
        self._knowledge = knowledge_options.knowledge
        self.knowledge_mode: KnowledgeMode = knowledge_options.mode
        self.knowledge_k = knowledge_options.top_k
        self.context_config = context
        self._context = _compressor_for(context)
        self._manual_compressor: ContextCompressor | None = None
        self._background: set[asyncio.Task[Any]] | None = None
        self._session_tools = _extra_tools(
            self.toolkit, memory, knowledge_options, context, enable_meta_tool, enable_task_list
        )
        self._chains: _loop.Chains | None = None
        self._system_msg: Msg | None = None
        self._skills = AgentSkills(self, skills)
        # The tools the agent adds itself (task list, memory, compress_context, load_skill) count too.
        offered = [*self._skills.tools(self.toolkit.tools), *(self._session_tools or ())]
        _warn_unmatched_rules(name, permission, offered)

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

    @property
    def skills(self) -> Mapping[str, Skill]:
        """The skills the agent offers: its toolkit's, then its own (``skills=``), by name."""
        return self._skills.current()

    @property
    def long_term_memory(self) -> LongTermMemory | None:
        """The agent's long-term memory, if any."""
        return self._long_term_memory

    @property
    def knowledge(self) -> Retriever | None:
        """The agent's knowledge base, if any (``knowledge=``)."""
        return self._knowledge

    @property
    def summary_model(self) -> ChatModel:
        """The model that writes context summaries and extracts memories (the agent's model by default)."""
        return self._resolve_summary_model()

    def _resolve_summary_model(self) -> ChatModel:
        model = self._summary_model
        if model is None:
            return self.model
        if isinstance(model, str):
            from agentrt.model.registry import model_from_id

            model = self._summary_model = model_from_id(model)
        return model

    def _compressor(self) -> ContextCompressor:
        """The configured compressor, or a default one for explicit `compress` calls."""
        if self._context is not None:
            return self._context
        compressor = self._manual_compressor
        if compressor is None:
            from agentrt.memory.compression import ContextCompressor

            compressor = self._manual_compressor = ContextCompressor()
        return compressor

    # -- context and memory -------------------------------------------------------------------------
    async def compress(self, ctx: RuntimeContext) -> list[ev.ContextCompressed]:
        """Compress the context of the session of `ctx` now, whatever its size.

        Old tool results are cut in the prompt view and the rounds before the last
        ``keep_recent_rounds`` are summarised (dropped with a digest when no summary can be made).
        Runs under the session lock; the transcript itself is kept. Returns one event per tier
        applied (empty when there was nothing to compress).
        """
        user_id, session_id = ctx.key
        store = self.state_store
        async with store.session_lock(user_id, session_id, timeout=self.lock_timeout, agent=self.state_key):
            run = Run(self, ctx, [], store, new_id(), None)
            run.options = self.options
            await run.load()
            steps = await _loop.compress_run(self, run, "manual")
        return [
            ev.ContextCompressed(
                reply_id=run.reply_id,
                session_id=session_id,
                source=self.name,
                before_tokens=step.before_tokens,
                after_tokens=step.after_tokens,
                tier=step.tier,
            )
            for step in steps
        ]

    async def drain(self) -> None:
        """Wait for the background work started by earlier calls (memory extraction) to finish."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    def call_sync(
        self,
        input: AgentInput = None,
        ctx: RuntimeContext | None = None,
        *,
        output: Any = None,
        usage_limits: UsageLimits | None = None,
    ) -> Msg:
        """`call` for scripts without an event loop (waits for background memory extraction too)."""
        if not self.memory_extraction:
            return super().call_sync(input, ctx, output=output, usage_limits=usage_limits)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self._call_and_drain(input, ctx, output, usage_limits))
        # raises the "inside a running loop" error
        return super().call_sync(input, ctx, output=output, usage_limits=usage_limits)

    async def _call_and_drain(
        self, input: AgentInput, ctx: RuntimeContext | None, output: Any, usage_limits: UsageLimits | None
    ) -> Msg:
        try:
            return await self.call(input, ctx, output=output, usage_limits=usage_limits)
        finally:
            await self.drain()

    def _start_extraction(self, run: Run, reply: Msg) -> None:
        if reply.generate_reason in _PAUSED:
            return
        said = [m for m in run.input if m.role == "user" and m.text.strip()]
        if not said:
            return
        from agentrt.agent._extraction import extract_memories

        assert self._long_term_memory is not None
        task = asyncio.get_running_loop().create_task(
            extract_memories(self._long_term_memory, self._resolve_summary_model, run.user_id, said, reply),
            name=f"agentrt-memory-extraction-{run.reply_id}",
        )
        background = self._background
        if background is None:
            background = self._background = set()
        background.add(task)
        task.add_done_callback(background.discard)

    async def extract_memories(self, ctx: RuntimeContext, msgs: Sequence[Msg]) -> list[MemoryItem]:
        """Extract durable facts from `msgs` into the long-term memory of the user of `ctx` now."""
        if self._long_term_memory is None:
            raise UserError("extract_memories needs an agent with a long_term_memory")
        from agentrt.agent._extraction import extract_memories

        said = [m for m in msgs if m.role == "user" and m.text.strip()]
        replies = [m for m in msgs if m.role == "assistant" and m.text.strip()]
        return await extract_memories(
            self._long_term_memory,
            self._resolve_summary_model,
            ctx.key[0],
            said,
            replies[-1] if replies else None,
            raise_errors=True,
        )

    async def enter_plan_mode(self, ctx: RuntimeContext) -> bool:
        """Put the session of `ctx` in plan mode; True if it was not in plan mode before.

        In plan mode only read-only tools, ``plan_write``, ``todo_write`` and ``plan_exit`` run (deny
        rules still deny); every other call is denied with a reason telling the model to write its plan
        and call ``plan_exit``, which asks the human to approve it and, once approved, leaves plan mode.
        The mode is stored in the session (it survives restarts and other agent instances on the same
        store), and subagents of the session inherit it. Called from a tool of the running call on that
        session it applies to that call's next turn (never waits for its own lock); otherwise it takes
        the session lock and saves now. See docs/harness.md.
        """
        from agentrt.agent._plan import set_plan_mode

        return await set_plan_mode(self, ctx, True)

    async def exit_plan_mode(self, ctx: RuntimeContext) -> bool:
        """Take the session of `ctx` out of plan mode without an approval; True if it was in plan mode.

        The session's tool calls are judged by the agent's own permission mode again (``DEFAULT`` when
        that is ``PLAN``). See `enter_plan_mode`.
        """
        from agentrt.agent._plan import set_plan_mode

        return await set_plan_mode(self, ctx, False)

    async def in_plan_mode(self, ctx: RuntimeContext) -> bool:
        """Whether the session of `ctx` is in plan mode (see `enter_plan_mode`)."""
        from agentrt.agent._plan import plan_mode

        return await plan_mode(self, ctx)

    async def activate_group(self, ctx: RuntimeContext, name: str) -> list[str]:
        """Make a tool group available in the session of `ctx`; returns the session's active groups.

        Called from a tool of a running call on that session, it applies to that call at once (its
        next model call offers the group's tools) and is saved with the call's next checkpoint;
        otherwise it takes the session lock and saves now.

        Raises:
            UserError: `name` is not a group of the toolkit (at once).
            SessionBusyError: at once, from inside a call of another agent sharing this session
                (same `state_key`), whose lock would never be released while we wait.
        """
        return await self._change_groups(ctx, name, add=True)

    async def deactivate_group(self, ctx: RuntimeContext, name: str) -> list[str]:
        """Hide a tool group in the session of `ctx`; returns the session's active groups (see `activate_group`)."""
        return await self._change_groups(ctx, name, add=False)

    async def _change_groups(self, ctx: RuntimeContext, name: str, *, add: bool) -> list[str]:
        if not isinstance(ctx, RuntimeContext):
            raise UserError(f"ctx must be a RuntimeContext, not {type(ctx).__name__!r}")
        if name not in self.toolkit.groups:
            known = ", ".join(sorted(self.toolkit.groups)) or "(none)"
            raise UserError(f"unknown tool group {name!r}; groups: {known}")
        running = self._own_running_call(ctx)
        if running is not None:
            # Our own session lock is held by this very call: change its working state, never wait.
            return _apply_groups(running, self.toolkit.default_active_groups(), name, add)
        user_id, session_id = ctx.key
        store = self.state_store
        async with store.session_lock(user_id, session_id, timeout=self.lock_timeout, agent=self.state_key):
            run = Run(self, ctx, [], store, "", None)
            await run.load()
            active = _apply_groups(run, self.toolkit.default_active_groups(), name, add)
            await run.checkpoint()
            return active

    def _execute(self, run: Run) -> Awaitable[Msg]:
        # The loop's own awaitable unless there is work after it: no forwarding frame per call.
        if self.memory_extraction:
            return self._execute_and_extract(run)
        return _loop.run_call(self, run)

    async def _execute_and_extract(self, run: Run) -> Msg:
        reply = await _loop.run_call(self, run)
        self._start_extraction(run, reply)
        return reply


def _apply_groups(run: Run, defaults: frozenset[str], name: str, add: bool) -> list[str]:
    """Switch group `name` in `run`'s working state (saved at its next checkpoint) and in its executor."""
    current = run.state.active_groups
    active = set(current if current is not None else defaults)
    if add:
        active.add(name)
    else:
        active.discard(name)
    run.set_field("active_groups", sorted(active))
    if run.executor is not None:
        run.executor.set_active_groups(frozenset(active))
    return sorted(active)


def _checked_parts(
    name: str, model: ChatModel | str | None, toolkit: object, middlewares: Sequence[object]
) -> ChatModel | str:
    """The model, once it, the toolkit and the middlewares are known usable (else a `UserError` saying what to pass)."""
    if model is None:
        raise UserError(
            f"ReActAgent {name!r} needs a model: a ChatModel instance, an id like 'openai:gpt-4o-mini', "
            "or ScriptedModel([...]) for tests"
        )
    if not isinstance(model, (ChatModel, str)):
        raise UserError(f"model must be a ChatModel or a 'provider:model' string, not {type(model).__name__!r}")
    if toolkit is not None and not isinstance(toolkit, Toolkit):
        raise UserError(f"toolkit must be a Toolkit, not {type(toolkit).__name__!r}")
    for mw in middlewares:
        if not isinstance(mw, Middleware):
            raise UserError(f"middlewares must be Middleware instances, not {type(mw).__name__!r}")
    return model


def _compressor_for(context: ContextConfig | None) -> ContextCompressor | None:
    """The compressor of a configured context window (None: no token counting at all)."""
    if context is None:
        return None
    # Imported only when configured: `import agentrt` never loads the memory package.
    from agentrt.memory.compression import ContextCompressor, ContextConfig

    if not isinstance(context, ContextConfig):
        raise UserError(f"context must be an agentrt.memory.ContextConfig, not {type(context).__name__!r}")
    return ContextCompressor(context)


def _extra_tools(
    toolkit: Toolkit,
    memory: MemoryOptions,
    knowledge: KnowledgeOptions,
    context: ContextConfig | None,
    enable_meta_tool: bool,
    enable_task_list: bool,
) -> dict[str, Tool] | None:
    """The tools the agent adds to every session (meta tool, task list, memory, knowledge, compress), by name."""
    extra: list[Tool] = []
    if enable_meta_tool or enable_task_list:
        from agentrt.agent._session_tools import meta_tool, todo_tool

        if enable_meta_tool:
            extra.append(meta_tool(toolkit))
        if enable_task_list:
            extra.append(todo_tool())
    long_term_memory = memory.long_term_memory
    if long_term_memory is not None and memory.mode != "static":
        from agentrt.agent._memory_tools import recall_tool, remember_tool

        extra.extend((remember_tool(long_term_memory), recall_tool(long_term_memory)))
    if knowledge.knowledge is not None and knowledge.mode != "static":
        from agentrt.agent._knowledge import search_tool

        extra.append(search_tool(knowledge.knowledge))
    if context is not None and context.expose_tool:
        from agentrt.agent._memory_tools import compress_tool

        extra.append(compress_tool())
    return {t.name: t for t in extra} if extra else None


def _warn_unmatched_rules(agent_name: str, permission: Any, offered: Sequence[str]) -> None:
    """Report permission rules that name no registered tool (a typo makes a deny rule do nothing).

    A warning; a `UserError` when the `PermissionContext` is ``strict``.
    """
    rules = getattr(permission, "rules", None)
    if not rules:
        return
    from agentrt.permission import unmatched_rules

    unmatched = unmatched_rules(rules, offered)
    tools = ", ".join(sorted(offered)) or "none"
    if unmatched and getattr(permission, "strict", False):
        names = ", ".join(f"{r.decision.value} {r.tool!r}" for r in unmatched)
        raise UserError(f"agent {agent_name!r}: permission rule(s) {names} match no registered tool (tools: {tools})")
    for rule in unmatched:
        logger.warning(
            "agent %r: permission rule %s %r matches no registered tool (tools: %s); it will never apply",
            agent_name,
            rule.decision.value,
            rule.tool,
            tools,
        )
