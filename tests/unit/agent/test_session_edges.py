"""Edges a user meets in the first hour: groups switched from a tool, external results, lambdas, Msg helpers."""

from __future__ import annotations

import asyncio

import pytest

from agentrt import GenerateReason, Msg, ReActAgent, RuntimeContext, Toolkit, ToolResultBlock, ToolUseBlock, tool
from agentrt import events as ev
from agentrt.errors import InvalidTypeError, SessionBusyError, ToolDefinitionError, UserError
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.permission import Decision
from agentrt.state import InMemoryStateStore

CTX = RuntimeContext(user_id="u", session_id="s")


def tool_names(request: ModelRequest) -> set[str]:
    return {t.name for t in request.tools}


# -- tool groups from inside a tool of the running session ---------------------------------------------------
async def test_a_tool_activates_a_group_for_its_own_running_call_without_waiting() -> None:
    holder: dict[str, ReActAgent] = {}

    @tool(read_only=True)
    async def unlock(ctx: RuntimeContext) -> str:
        """Unlock the extra tools."""
        active = await holder["agent"].activate_group(ctx, "extra")
        return f"active: {active}"

    @tool(read_only=True, group="extra")
    async def secret_tool() -> str:
        """Only offered once unlocked."""
        return "secret"

    toolkit = Toolkit([unlock])
    toolkit.create_group("extra", "extra tools")
    toolkit.register(secret_tool)
    model = ScriptedModel([ToolUseBlock(id="u1", name="unlock"), ToolUseBlock(id="s1", name="secret_tool"), "done"])
    agent = holder["agent"] = ReActAgent("bot", model=model, toolkit=toolkit, state_store=InMemoryStateStore())
    reply = await asyncio.wait_for(agent.call("go", CTX), 10)
    assert reply.text == "done"
    assert "secret_tool" not in tool_names(model.requests[0])
    assert "secret_tool" in tool_names(model.requests[1])  # the very next model call of this run
    results = {b.id: b for m in model.requests[2].messages for b in m.blocks(ToolResultBlock)}
    assert results["s1"].output == "secret" and results["s1"].state == "success"
    assert (await agent.get_state("u", "s")).active_groups == ["extra"]  # saved with the run


async def test_deactivate_from_a_tool_hides_the_group_for_the_rest_of_the_run() -> None:
    holder: dict[str, ReActAgent] = {}

    @tool(read_only=True)
    async def lock(ctx: RuntimeContext) -> str:
        """Lock the extra tools."""
        await holder["agent"].deactivate_group(ctx, "extra")
        return "locked"

    @tool(read_only=True, group="extra")
    async def secret_tool() -> str:
        """Only offered while unlocked."""
        return "secret"

    toolkit = Toolkit([lock])
    toolkit.create_group("extra", "extra tools", active=True)
    toolkit.register(secret_tool)
    model = ScriptedModel([ToolUseBlock(id="l1", name="lock"), "done"])
    agent = holder["agent"] = ReActAgent("bot", model=model, toolkit=toolkit, state_store=InMemoryStateStore())
    await asyncio.wait_for(agent.call("go", CTX), 10)
    assert "secret_tool" in tool_names(model.requests[0])
    assert "secret_tool" not in tool_names(model.requests[1])


async def test_outside_a_run_the_group_change_is_saved_and_unknown_groups_fail_at_once() -> None:
    toolkit = Toolkit()
    toolkit.create_group("extra", "extra tools")
    agent = ReActAgent("bot", model=ScriptedModel([]), toolkit=toolkit, state_store=InMemoryStateStore())
    assert await agent.activate_group(CTX, "extra") == ["extra"]
    assert (await agent.get_state("u", "s")).active_groups == ["extra"]
    with pytest.raises(UserError, match="unknown tool group"):
        await asyncio.wait_for(agent.activate_group(CTX, "nope"), 5)


def extra_toolkit(switch: object) -> Toolkit:
    """A toolkit with `switch` and a group "extra" holding `secret_tool` (inactive by default)."""

    @tool(read_only=True, group="extra")
    async def secret_tool() -> str:
        """Only offered once unlocked."""
        return "secret"

    toolkit = Toolkit([switch])
    toolkit.create_group("extra", "extra tools")
    toolkit.register(secret_tool)
    return toolkit


async def test_a_group_switched_by_a_task_that_outlives_its_tool_is_saved() -> None:
    holder: dict[str, ReActAgent] = {}
    later: list[asyncio.Task[list[str]]] = []

    @tool(read_only=True)
    async def unlock_later(ctx: RuntimeContext) -> str:
        """Unlock the extra tools in a moment."""

        async def switch() -> list[str]:
            await asyncio.sleep(0.05)  # the call has ended by now: its working state is gone
            return await holder["agent"].activate_group(ctx, "extra")

        later.append(asyncio.create_task(switch()))
        return "will do"

    model = ScriptedModel([ToolUseBlock(id="u1", name="unlock_later"), "done"])
    agent = holder["agent"] = ReActAgent(
        "bot", model=model, toolkit=extra_toolkit(unlock_later), state_store=InMemoryStateStore()
    )
    await asyncio.wait_for(agent.call("go", CTX), 10)
    assert agent.running_call(CTX) is None
    assert await asyncio.wait_for(later[0], 10) == ["extra"]
    assert (await agent.get_state("u", "s")).active_groups == ["extra"], "saved, not lost with the ended call"


async def test_switching_a_group_through_another_agent_holding_the_same_session_fails_at_once() -> None:
    store = InMemoryStateStore()
    holder: dict[str, ReActAgent] = {}
    outcome: list[BaseException] = []

    @tool(read_only=True)
    async def unlock(ctx: RuntimeContext) -> str:
        """Unlock through the twin (another instance with the same state_key)."""
        try:
            await asyncio.wait_for(holder["twin"].deactivate_group(ctx, "extra"), 5)
        except (SessionBusyError, TimeoutError) as exc:
            outcome.append(exc)
        return "tried"

    model = ScriptedModel([ToolUseBlock(id="u1", name="unlock"), "done"])
    agent = ReActAgent("bot", model=model, toolkit=extra_toolkit(unlock), state_store=store, state_key="shared")
    holder["twin"] = ReActAgent(
        "twin", model=ScriptedModel([]), toolkit=extra_toolkit(unlock), state_store=store, state_key="shared"
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(agent.call("go", CTX), 10)
    [error] = outcome
    assert isinstance(error, SessionBusyError) and "'bot'" in str(error), error  # not a timeout: at once
    assert loop.time() - started < 2
    assert await holder["twin"].activate_group(CTX, "extra") == ["extra"], "from outside the call it works"


# -- external tools ---------------------------------------------------------------------------------------
async def test_external_result_event_carries_the_reply_id_of_the_call_that_asked() -> None:
    @tool(external=True)
    async def open_browser(url: str) -> str:
        """Runs on the client."""
        raise AssertionError("never runs here")

    model = ScriptedModel([ToolUseBlock(id="b1", name="open_browser", input={"url": "https://x.test"}), "thanks"])
    agent = ReActAgent("bot", model=model, toolkit=Toolkit([open_browser]), state_store=InMemoryStateStore())
    first = [e async for e in agent.stream_events("open it", CTX)]
    asked = next(e for e in first if isinstance(e, ev.RequireExternalExecution))
    result = ToolResultBlock(id="b1", name="open_browser", output="opened")
    second = [e async for e in agent.stream_events(Msg.tool_results([result]), CTX)]
    returned = next(e for e in second if isinstance(e, ev.ExternalExecutionResult))
    assert returned.reply_id == asked.reply_id
    assert second[-1].reply_id != asked.reply_id  # the resuming call has its own id
    assert isinstance(second[-1], ev.RunFinished) and second[-1].msg.generate_reason is GenerateReason.STOP


async def test_results_returned_one_resume_at_a_time_carry_the_reply_id_of_the_request_that_listed_them() -> None:
    """Two external calls answered in two resumes (with a local call run at once): each result event carries
    the reply id of the latest request event that listed its call, never the resuming call's own id."""

    @tool(external=True)
    async def pick_file(kind: str) -> str:
        """Runs on the client."""
        raise AssertionError("never runs here")

    @tool(read_only=True)
    async def now() -> str:
        """The time."""
        return "noon"

    calls = [
        ToolUseBlock(id="x1", name="pick_file", input={"kind": "a"}),
        ToolUseBlock(id="x2", name="pick_file", input={"kind": "b"}),
        ToolUseBlock(id="t1", name="now"),
    ]
    model = ScriptedModel([calls, "got both"])
    agent = ReActAgent("bot", model=model, toolkit=Toolkit([pick_file, now]), state_store=InMemoryStateStore())

    def requested(events: list[ev.AgentEvent]) -> dict[str, str]:
        return {c.id: e.reply_id for e in events if isinstance(e, ev.RequireExternalExecution) for c in e.tool_calls}

    def returned(events: list[ev.AgentEvent]) -> ev.ExternalExecutionResult:
        [result] = [e for e in events if isinstance(e, ev.ExternalExecutionResult)]
        return result

    first = [e async for e in agent.stream_events("pick two", CTX)]
    asked = requested(first)
    assert sorted(asked) == ["x1", "x2"]
    second = [
        e
        async for e in agent.stream_events(
            Msg.tool_results(ToolResultBlock(id="x1", name="pick_file", output="A")), CTX
        )
    ]
    assert returned(second).reply_id == asked["x1"] != second[0].reply_id
    asked.update(requested(second))  # x2 is listed again by the call that paused once more
    last = [
        e
        async for e in agent.stream_events(
            Msg.tool_results([ToolResultBlock(id="x2", name="pick_file", output="B")]), CTX
        )
    ]
    assert returned(last).reply_id == asked["x2"] != last[0].reply_id
    assert isinstance(last[-1], ev.RunFinished) and last[-1].msg.text == "got both"


def test_msg_tool_results_and_msg_user_refuse_non_text_content() -> None:
    block = ToolResultBlock(id="c1", name="t", output="x")
    msg = Msg.tool_results([block])
    assert msg.role == "user" and msg.content == [block]
    with pytest.raises(InvalidTypeError, match=r"Msg\.tool_results"):
        Msg.user([block])  # type: ignore[list-item]
    with pytest.raises(InvalidTypeError):
        Msg.tool_results(["not a block"])  # type: ignore[list-item]
    with pytest.raises(UserError):
        Msg.tool_results([])


# -- lambdas ---------------------------------------------------------------------------------------------
def test_a_lambda_needs_a_name_and_registers_nothing_without_one() -> None:
    toolkit = Toolkit()
    with pytest.raises(ToolDefinitionError, match="name"):
        toolkit.register(lambda q: q)
    assert toolkit.schemas() == []
    named = tool(name="echo")(lambda q: q)
    toolkit.register(named)
    assert [s.name for s in toolkit.schemas()] == ["echo"]


# -- rules naming tools that do not exist --------------------------------------------------------------
def test_a_rule_naming_no_registered_tool_is_reported_at_construction(caplog: pytest.LogCaptureFixture) -> None:
    from agentrt.permission import PermissionContext, PermissionRule

    @tool(destructive=True)
    async def run_command(command: str) -> str:
        """Run a command."""
        return command

    rules = [
        PermissionRule(tool="shell", decision=Decision.DENY, args={"command": "rm -rf*"}),
        PermissionRule(tool="run_command", decision=Decision.DENY, args={"command": "rm -rf*"}),
    ]
    with caplog.at_level("WARNING", logger="agentrt.agent"):
        ReActAgent(
            "bot", model=ScriptedModel([]), toolkit=Toolkit([run_command]), permission=PermissionContext(rules=rules)
        )
    warned = [r.getMessage() for r in caplog.records if "matches no registered tool" in r.getMessage()]
    assert len(warned) == 1 and "'shell'" in warned[0] and "run_command" in warned[0]


def test_rules_naming_the_tools_the_agent_adds_itself_are_not_reported() -> None:
    """The task list, compress_context and the meta tool are offered by the agent, not the toolkit: rules on
    them apply, so strict mode builds and nothing is logged."""
    from agentrt.memory import ContextConfig
    from agentrt.permission import PermissionContext, PermissionRule

    rules = [
        PermissionRule(tool="todo_write", decision=Decision.DENY),
        PermissionRule(tool="compress_context", decision=Decision.ASK),
        PermissionRule(tool="manage_*", decision=Decision.ASK),
    ]
    ReActAgent(
        "bot",
        model=ScriptedModel([]),
        permission=PermissionContext(rules=rules, strict=True),
        enable_task_list=True,
        enable_meta_tool=True,
        context=ContextConfig(expose_tool=True),
    )
    with pytest.raises(UserError, match="'todo_write'"):
        ReActAgent("bot", model=ScriptedModel([]), permission=PermissionContext(rules=rules[:1], strict=True))


def test_strict_permissions_refuse_a_rule_naming_no_registered_tool() -> None:
    from agentrt.permission import PermissionContext, PermissionRule

    rules = [PermissionRule(tool="shell", decision=Decision.DENY, args={"command": "rm -rf*"})]
    with pytest.raises(UserError, match="'shell'"):
        ReActAgent("bot", model=ScriptedModel([]), permission=PermissionContext(rules=rules, strict=True))


async def test_observe_from_a_tool_of_its_own_running_call_fails_at_once() -> None:
    holder: dict[str, ReActAgent] = {}
    outcome: list[BaseException] = []

    @tool(read_only=True)
    async def note(ctx: RuntimeContext) -> str:
        """Try to add a note to this very session while its call runs."""
        try:
            await asyncio.wait_for(holder["agent"].observe("a note", ctx), 5)
        except (SessionBusyError, TimeoutError) as exc:
            outcome.append(exc)
        return "tried"

    model = ScriptedModel([ToolUseBlock(id="n1", name="note"), "done"])
    agent = holder["agent"] = ReActAgent("bot", model=model, toolkit=Toolkit([note]), state_store=InMemoryStateStore())
    await asyncio.wait_for(agent.call("go", CTX), 10)
    [error] = outcome
    assert isinstance(error, SessionBusyError) and "own running call" in str(error)
    texts = [m.text for m in (await agent.get_state("u", "s")).messages]
    assert "a note" not in texts, "nothing was added behind the running call's back"
    await agent.observe("after the call", CTX)  # outside the call it works as before
    assert (await agent.get_state("u", "s")).messages[-1].text == "after the call"
