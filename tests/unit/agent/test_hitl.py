"""Human in the loop, external tools, permissions in the loop, subagent approvals."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentrt import GenerateReason, Msg, ReActAgent, RuntimeContext, Toolkit, ToolResultBlock, ToolUseBlock, tool
from agentrt import events as ev
from agentrt.errors import UserError
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.permission import ConfirmResult, PermissionContext, PermissionMode, PermissionRule
from agentrt.state import InMemoryStateStore

CTX = RuntimeContext(user_id="u", session_id="s")
ran: list[str] = []


@tool(destructive=True)
async def delete_file(path: str) -> str:
    """Delete a file."""
    ran.append(f"delete {path}")
    return f"deleted {path}"


@tool(read_only=True)
async def read_file(path: str) -> str:
    """Read a file."""
    ran.append(f"read {path}")
    return f"contents of {path}"


@tool(requires_confirmation=True)
async def run_command(command: str) -> str:
    """Run a shell command."""
    ran.append(f"run {command}")
    return f"ran {command}"


@tool(external=True)
async def ask_browser(url: str) -> str:
    """Open a URL in the user's browser (runs on the client)."""
    raise AssertionError("external tools never run in the agent")


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


def call(name: str, id: str, **args: Any) -> ToolUseBlock:
    return ToolUseBlock(id=id, name=name, input=args)


def agent_with(model: ScriptedModel, store: Any = None, **kwargs: Any) -> ReActAgent:
    toolkit = Toolkit([delete_file, read_file, run_command, ask_browser])
    return ReActAgent("bot", "sys", model=model, toolkit=toolkit, state_store=store or InMemoryStateStore(), **kwargs)


def last_results(model: ScriptedModel) -> dict[str, ToolResultBlock]:
    out: dict[str, ToolResultBlock] = {}
    for msg in model.requests[-1].messages:
        for block in msg.blocks(ToolResultBlock):
            out[block.id] = block
    return out


# -- pausing ------------------------------------------------------------------------------------------------
async def test_destructive_call_pauses_with_suggested_rules_while_allowed_calls_run(collect: Any) -> None:
    model = ScriptedModel(
        [[call("read_file", "r1", path="/tmp/a.txt"), call("delete_file", "d1", path="/tmp/a.txt")], "all done"]
    )
    agent = agent_with(model)
    events = await collect(agent.stream_events("clean up", CTX))
    assert ran == ["read /tmp/a.txt"]  # the allowed call of the same turn ran
    [confirm] = [e for e in events if isinstance(e, ev.RequireUserConfirm)]
    [pending] = confirm.tool_calls
    assert (pending.id, pending.name, dict(pending.input)) == ("d1", "delete_file", {"path": "/tmp/a.txt"})
    assert [r.to_dict() for r in pending.suggested_rules] == [
        {"tool": "delete_file", "decision": "allow", "source": "suggested", "args": {"path": "/tmp/a.txt"}},
        {"tool": "delete_file", "decision": "allow", "source": "suggested", "args": {"path": "/tmp/**"}},
    ]
    reply = events[-1].msg
    assert reply.generate_reason is GenerateReason.AWAITING_CONFIRMATION
    assert reply.id == confirm.reply_id == events[0].reply_id
    assert reply.metadata["pending_tool_calls"][0]["suggested_rules"][1]["args"] == {"path": "/tmp/**"}
    assert ev.reduce_events(events) == reply
    state = await agent.get_state("u", "s")
    assert state.pending is not None and [c.id for c in state.pending.calls] == ["d1"]
    assert [b.id for b in state.messages[-1].blocks(ToolResultBlock)] == ["r1"]  # allowed result is checkpointed


async def test_confirm_runs_the_call_and_the_model_continues() -> None:
    model = ScriptedModel([call("delete_file", "d1", path="/tmp/a"), "deleted it"])
    agent = agent_with(model)
    paused = await agent.call("delete /tmp/a", CTX)
    assert paused.generate_reason is GenerateReason.AWAITING_CONFIRMATION
    reply = await agent.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call="d1")]), CTX)
    assert reply.text == "deleted it"
    assert ran == ["delete /tmp/a"]
    assert last_results(model)["d1"].output == "deleted /tmp/a"
    state = await agent.get_state("u", "s")
    assert state.pending is None
    assert not any(m.metadata.get("confirm_results") for m in state.messages)  # the answer itself is not history


async def test_deny_reaches_the_model_and_the_run_continues() -> None:
    model = ScriptedModel([call("delete_file", "d1", path="/etc/passwd"), "ok, I won't"])
    agent = agent_with(model)
    await agent.call("delete it", CTX)
    reply = await agent.call(Msg.confirm([ConfirmResult(confirmed=False, tool_call="d1", reason="too risky")]), CTX)
    assert reply.text == "ok, I won't"
    assert ran == []
    result = last_results(model)["d1"]
    assert result.state == "denied" and "too risky" in result.output


async def test_edited_arguments_are_revalidated_and_used() -> None:
    model = ScriptedModel([call("delete_file", "d1", path="/important"), "done", "done again"])
    agent = agent_with(model)
    await agent.call("go", CTX)
    # an edit that breaks the schema is the caller's error, naming the field; nothing is spent
    bad = ToolUseBlock(id="d1", name="delete_file", input={"path": 42, "force": True})
    with pytest.raises(UserError, match="'force'"):
        await agent.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call=bad)]), CTX)
    assert ran == []
    assert (await agent.get_state("u", "s")).pending is not None
    assert len(model.requests) == 1
    # a valid edit runs with the new arguments and tells the model about the change
    model2 = ScriptedModel([call("delete_file", "d2", path="/important"), "done"])
    agent2 = agent_with(model2)
    await agent2.call("go", CTX)
    edited = ToolUseBlock(id="d2", name="delete_file", input={"path": "/tmp/scratch"})
    await agent2.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call=edited)]), CTX)
    assert ran == ["delete /tmp/scratch"]
    assert "changed the arguments" in last_results(model2)["d2"].output


async def test_accepted_rules_persist_and_apply_to_later_calls() -> None:
    model = ScriptedModel(
        [
            call("delete_file", "d1", path="/tmp/a"),
            "first done",
            call("delete_file", "d2", path="/tmp/b"),
            "second done",
            call("delete_file", "d3", path="/home/x"),
        ]
    )
    agent = agent_with(model)
    paused = await agent.call("delete a", CTX)
    general = PermissionRule.from_dict(paused.metadata["pending_tool_calls"][0]["suggested_rules"][1])
    await agent.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call="d1", rules=[general])]), CTX)
    state = await agent.get_state("u", "s")
    assert list(state.rules) == [
        {"tool": "delete_file", "decision": "allow", "source": "session", "args": {"path": "/tmp/**"}}
    ]
    # same directory: allowed without asking
    assert (await agent.call("delete b", CTX)).text == "second done"
    assert ran == ["delete /tmp/a", "delete /tmp/b"]
    # another directory still asks
    assert (await agent.call("delete x", CTX)).generate_reason is GenerateReason.AWAITING_CONFIRMATION


async def test_partial_answers_keep_the_rest_pending(collect: Any) -> None:
    model = ScriptedModel(
        [[call("delete_file", "d1", path="/a"), call("run_command", "c1", command="ls -la")], "both handled"]
    )
    agent = agent_with(model)
    first = await agent.call("go", CTX)
    assert {p["id"] for p in first.metadata["pending_tool_calls"]} == {"d1", "c1"}
    events = await collect(agent.stream_events(Msg.confirm([ConfirmResult(confirmed=True, tool_call="c1")]), CTX))
    assert len(model.requests) == 1  # no model call while approvals remain
    still = events[-1].msg
    assert still.generate_reason is GenerateReason.AWAITING_CONFIRMATION
    assert [p["id"] for p in still.metadata["pending_tool_calls"]] == ["d1"]
    assert ev.reduce_events(events) == still
    assert ran == ["run ls -la"]
    reply = await agent.call(Msg.confirm([ConfirmResult(confirmed=False, tool_call="d1")]), CTX)
    assert reply.text == "both handled"
    results = last_results(model)
    assert results["c1"].state == "success" and results["d1"].state == "denied"
    # every tool call in the history has exactly one result
    state = await agent.get_state("u", "s")
    calls = [c.id for m in state.messages for c in m.tool_calls]
    answered = [b.id for m in state.messages for b in m.blocks(ToolResultBlock)]
    assert sorted(calls) == sorted(answered) == ["c1", "d1"]


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (Msg.user("just keep going"), "plain message cannot be accepted"),
        (Msg.confirm([ConfirmResult(confirmed=True, tool_call="nope")]), "stale or unknown id"),
        (
            Msg.confirm(
                [ConfirmResult(confirmed=True, tool_call="d1"), ConfirmResult(confirmed=False, tool_call="d1")]
            ),
            "answered twice",
        ),
        (Msg(role="user", content=[ToolResultBlock(id="d1", name="delete_file", output="x")]), "waits for approval"),
        (
            Msg(role="user", content=[], metadata={"confirm_results": [{"confirmed": "yes", "tool_call_id": "d1"}]}),
            "true or false",
        ),
    ],
)
async def test_bad_answers_are_user_errors_and_leave_pending_untouched(answer: Msg, message: str) -> None:
    model = ScriptedModel([call("delete_file", "d1", path="/a"), "done"])
    agent = agent_with(model)
    await agent.call("go", CTX)
    before = await agent.get_state("u", "s")
    with pytest.raises(UserError, match=message):
        await agent.call(answer, CTX)
    after = await agent.get_state("u", "s")
    assert after.pending == before.pending and after.revision == before.revision
    assert after.messages == before.messages
    assert ran == []
    # the session still resumes correctly afterwards
    assert (await agent.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call="d1")]), CTX)).text == "done"


async def test_confirm_results_as_plain_dicts_work_like_the_server_sends_them() -> None:
    model = ScriptedModel([call("delete_file", "d1", path="/a"), "done"])
    agent = agent_with(model)
    await agent.call("go", CTX)
    answer = Msg(role="user", content=[], metadata={"confirm_results": [{"tool_call_id": "d1", "confirmed": True}]})
    assert (await agent.call(Msg.from_json(answer.to_json()), CTX)).text == "done"


async def test_approvals_across_several_turns() -> None:
    model = ScriptedModel([call("delete_file", "d1", path="/a"), call("run_command", "c1", command="make"), "finished"])
    agent = agent_with(model)
    assert (await agent.call("go", CTX)).generate_reason is GenerateReason.AWAITING_CONFIRMATION
    second = await agent.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call="d1")]), CTX)
    assert second.generate_reason is GenerateReason.AWAITING_CONFIRMATION
    assert [p["id"] for p in second.metadata["pending_tool_calls"]] == ["c1"]
    third = await agent.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call="c1")]), CTX)
    assert third.text == "finished" and ran == ["delete /a", "run make"]


async def test_resume_on_a_second_agent_instance_sharing_the_store() -> None:
    store = InMemoryStateStore()
    first = agent_with(ScriptedModel([call("delete_file", "d1", path="/a")]), store)
    assert (await first.call("go", CTX)).generate_reason is GenerateReason.AWAITING_CONFIRMATION
    # "another process": a fresh agent object with its own model, same store
    model = ScriptedModel(["resumed elsewhere"])
    second = agent_with(model, store)
    reply = await second.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call="d1")]), CTX)
    assert reply.text == "resumed elsewhere" and ran == ["delete /a"]
    assert last_results(model)["d1"].output == "deleted /a"


# -- permission modes and rules in the loop ----------------------------------------------------------------
async def test_deny_rule_and_explore_mode_produce_denied_results() -> None:
    model = ScriptedModel([call("delete_file", "d1", path="/a"), "ok"])
    rules = PermissionContext(rules=[PermissionRule(tool="delete_*", decision="deny")])  # type: ignore[arg-type]
    agent = agent_with(model, permission=rules)
    assert (await agent.call("go", CTX)).text == "ok"
    assert last_results(model)["d1"].state == "denied" and "delete_*" in last_results(model)["d1"].output

    model = ScriptedModel([[call("read_file", "r1", path="/a"), call("run_command", "c1", command="rm -rf /")], "ok"])
    agent = agent_with(model, permission=PermissionMode.EXPLORE)
    assert (await agent.call("go", RuntimeContext(session_id="x"))).text == "ok"
    results = last_results(model)
    assert results["r1"].state == "success" and results["c1"].state == "denied"


async def test_bypass_runs_destructive_tools_but_ask_rules_still_ask() -> None:
    model = ScriptedModel([call("delete_file", "d1", path="/a"), "ok"])
    agent = agent_with(model, permission=PermissionMode.BYPASS)
    assert (await agent.call("go", CTX)).text == "ok" and ran == ["delete /a"]
    ctx = PermissionContext(mode=PermissionMode.BYPASS, rules=[PermissionRule(tool="delete_file", decision="ask")])  # type: ignore[arg-type]
    agent = agent_with(ScriptedModel([call("delete_file", "d2", path="/b")]), permission=ctx)
    assert (
        await agent.call("go", RuntimeContext(session_id="y"))
    ).generate_reason is GenerateReason.AWAITING_CONFIRMATION


async def test_dont_ask_denies_what_would_ask() -> None:
    model = ScriptedModel([call("delete_file", "d1", path="/a"), "fine"])
    agent = agent_with(model, permission=PermissionMode.DONT_ASK)
    assert (await agent.call("go", CTX)).text == "fine"
    assert last_results(model)["d1"].state == "denied"


async def test_argument_rules_allow_matching_commands_only() -> None:
    ctx = PermissionContext(rules=[PermissionRule(tool="run_command", args={"command": "git status*"})])
    model = ScriptedModel([call("run_command", "c1", command="git status --short"), "clean"])
    agent = agent_with(model, permission=ctx)
    assert (await agent.call("status?", CTX)).text == "clean"
    agent = agent_with(ScriptedModel([call("run_command", "c2", command="git push --force")]), permission=ctx)
    # the rule covers only matching commands: anything else still asks
    assert (
        await agent.call("push", RuntimeContext(session_id="p"))
    ).generate_reason is GenerateReason.AWAITING_CONFIRMATION


# -- external tools ---------------------------------------------------------------------------------------
async def test_external_tool_pauses_and_resumes_with_results(collect: Any) -> None:
    model = ScriptedModel([call("ask_browser", "b1", url="https://example.com"), "the page says hello"])
    agent = agent_with(model)
    events = await collect(agent.stream_events("open it", CTX))
    [request] = [e for e in events if isinstance(e, ev.RequireExternalExecution)]
    assert [c.id for c in request.tool_calls] == ["b1"]
    assert events[-1].msg.generate_reason is GenerateReason.AWAITING_EXTERNAL_EXECUTION
    result = ToolResultBlock(id="b1", name="ask_browser", output="<h1>hello</h1>")
    events = await collect(agent.stream_events(Msg(role="user", content=[result]), CTX))
    assert any(isinstance(e, ev.ExternalExecutionResult) and e.results[0].output == "<h1>hello</h1>" for e in events)
    assert events[-1].msg.text == "the page says hello"
    assert last_results(model)["b1"].output == "<h1>hello</h1>"


async def test_external_result_with_unknown_id_is_refused() -> None:
    agent = agent_with(ScriptedModel([call("ask_browser", "b1", url="u")]))
    await agent.call("open", CTX)
    with pytest.raises(UserError, match="stale or unknown id"):
        await agent.call(Msg(role="user", content=[ToolResultBlock(id="zzz", name="ask_browser", output="x")]), CTX)


# -- subagent approvals -----------------------------------------------------------------------------------
async def test_subagent_approval_pauses_the_parent_and_the_answer_resumes_both(collect: Any) -> None:
    child_model = ScriptedModel([call("delete_file", "child-d1", path="/tmp/old"), "child: deleted /tmp/old"])
    child = agent_with(child_model)
    child.name = "cleaner"
    parent_model = ScriptedModel(
        [ToolUseBlock(id="p1", name="cleaner", input={"task": "remove /tmp/old"}), "parent: the cleaner finished"]
    )
    parent = ReActAgent(
        "boss", "sys", model=parent_model, toolkit=Toolkit([child.as_tool()]), state_store=InMemoryStateStore()
    )
    events = await collect(parent.stream_events("tidy up", CTX))
    [confirm] = [e for e in events if isinstance(e, ev.RequireUserConfirm) and e.source == "boss"]
    assert [c.id for c in confirm.tool_calls] == ["child-d1"]  # the child's call surfaces in the parent
    assert any(e.source == "cleaner" for e in events)  # the child's events are forwarded
    paused = events[-1].msg
    assert paused.generate_reason is GenerateReason.AWAITING_CONFIRMATION
    assert ran == []
    reply = await parent.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call="child-d1")]), CTX)
    assert reply.text == "parent: the cleaner finished"
    assert ran == ["delete /tmp/old"]
    assert last_results(parent_model)["p1"].output == "child: deleted /tmp/old"
    child_state = await child.get_state("u", "s/cleaner")
    assert child_state.pending is None and child_state.messages[-1].text == "child: deleted /tmp/old"


# -- interrupts -------------------------------------------------------------------------------------------
async def test_interrupt_during_streaming_stops_the_model() -> None:
    model = ScriptedModel(["word " * 200, "next"])
    model.chunk_delay = 0.005
    agent = agent_with(model)
    deltas = 0
    reply: Msg | None = None
    async for event in agent.stream_events("talk", CTX):
        if isinstance(event, ev.TextDelta):
            deltas += 1
            if deltas == 3:
                assert agent.interrupt(CTX)
        if isinstance(event, ev.RunFinished):
            reply = event.msg
    assert reply is not None and reply.generate_reason is GenerateReason.INTERRUPTED
    assert deltas < 50
    assert (await agent.call("again", CTX)).text == "next"


async def test_sync_tool_is_abandoned_on_interrupt_and_its_late_result_ignored() -> None:
    import threading

    release = threading.Event()
    started = asyncio.Event()
    loop = asyncio.get_running_loop()

    @tool
    def blocking() -> str:
        """Blocks a worker thread."""
        loop.call_soon_threadsafe(started.set)
        release.wait(5)
        return "late"

    model = ScriptedModel([ToolUseBlock(id="b", name="blocking"), "after"])
    agent = ReActAgent("bot", model=model, toolkit=Toolkit([blocking]), state_store=InMemoryStateStore())
    task = asyncio.create_task(agent.call("go", CTX))
    await started.wait()
    agent.interrupt(CTX)
    reply = await task
    release.set()
    assert reply.generate_reason is GenerateReason.INTERRUPTED
    state = await agent.get_state("u", "s")
    [result] = state.messages[2].blocks(ToolResultBlock)
    assert result.state == "interrupted" and result.output != "late"


async def test_interrupt_of_a_parent_stops_its_subagent() -> None:
    started = asyncio.Event()

    @tool(read_only=True)
    async def slow() -> str:
        """Slow."""
        started.set()
        await asyncio.sleep(30)
        return "never"

    child = ReActAgent(
        "worker",
        model=ScriptedModel([ToolUseBlock(id="w", name="slow")]),
        toolkit=Toolkit([slow]),
        state_store=InMemoryStateStore(),
    )
    parent = ReActAgent(
        "boss",
        model=ScriptedModel([ToolUseBlock(id="p", name="worker", input={"task": "work"})]),
        toolkit=Toolkit([child.as_tool()]),
        state_store=InMemoryStateStore(),
    )
    task = asyncio.create_task(parent.call("go", CTX))
    await started.wait()
    parent.interrupt(CTX)
    assert (await task).generate_reason is GenerateReason.INTERRUPTED
    child_state = await child.get_state("u", "s/worker")
    [result] = child_state.messages[-1].blocks(ToolResultBlock)
    assert result.state == "interrupted"  # the child's run was cancelled and checkpointed


def _answer_after_results(request: ModelRequest) -> Any:
    return "unused"


async def test_answers_sent_when_nothing_is_pending_are_refused() -> None:
    model = ScriptedModel(["hello"])
    agent = agent_with(model)
    with pytest.raises(UserError, match="nothing is waiting for approval"):
        await agent.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call="x")]), CTX)
    with pytest.raises(UserError, match="no tool call is waiting"):
        await agent.call(Msg(role="user", content=[ToolResultBlock(id="x", name="t", output="o")]), CTX)
    assert (await agent.get_state("u", "s")).messages == []
    assert model.requests == []
