"""Subagents on demand: agent_spawn in the foreground and background, task_output / task_cancel /
task_list, records in the parent session, crash recovery, limits, approvals, isolated workspaces."""

from __future__ import annotations

import asyncio
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentrt import (
    ConfirmResult,
    GenerateReason,
    Msg,
    PermissionMode,
    ReActAgent,
    RuntimeContext,
    Toolkit,
    ToolResultBlock,
    ToolUseBlock,
    tool,
)
from agentrt import events as ev
from agentrt.harness import SubagentLimits, SubagentSpec, SubagentTask, SubagentTools
from agentrt.harness import subagents as subagent_module
from agentrt.message import TokenUsage
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.state import AgentStateStore, InMemoryStateStore, SqliteStateStore
from agentrt.tool.builtin import FileTools

CTX = RuntimeContext(user_id="u", session_id="s")
TASK_ID = re.compile(r"task-[0-9a-f]{12}")


def results(request: ModelRequest) -> list[ToolResultBlock]:
    return [b for m in request.messages for b in m.blocks(ToolResultBlock)]


def last_result(request: ModelRequest) -> ToolResultBlock:
    return results(request)[-1]


def task_id_in(request: ModelRequest) -> str:
    """The task id agent_spawn reported (the newest one the parent saw)."""
    found = [m.group(0) for r in results(request) for m in [TASK_ID.search(r.text)] if m]
    assert found, "no task id in the tool results"
    return found[-1]


def call(tool_name: str, /, **args: Any) -> Callable[[ModelRequest], ToolUseBlock]:
    """A scripted step calling `tool_name`; ``task_id=TASK`` is replaced by the id seen so far."""

    def step(request: ModelRequest) -> ToolUseBlock:
        given = {k: (task_id_in(request) if v is TASK else v) for k, v in args.items()}
        return ToolUseBlock(id=f"{tool_name}-{len(request.messages)}", name=tool_name, input=given)

    return step


def answer(prefix: str) -> Callable[[ModelRequest], str]:
    """A scripted step answering with `prefix` and the last tool result."""
    return lambda request: f"{prefix}: {last_result(request).text}"


TASK: Any = object()


def spec(name: str, model: Any, **kwargs: Any) -> SubagentSpec:
    return SubagentSpec(name=name, description=f"The {name}.", prompt=f"You are the {name}.", model=model, **kwargs)


def parent(
    steps: list[Any], subagents: SubagentTools, *extra: Any, store: AgentStateStore | None = None, **kwargs: Any
) -> ReActAgent:
    return ReActAgent(
        "boss",
        "You delegate.",
        model=ScriptedModel(steps),
        toolkit=Toolkit([subagents, *extra]),
        state_store=store or InMemoryStateStore(),
        **kwargs,
    )


async def stored_tasks(agent: ReActAgent, ctx: RuntimeContext = CTX) -> dict[str, Any]:
    state = await agent.get_state(*ctx.key)
    tasks: dict[str, Any] = state.tool_state["subagents"]["tasks"]
    return tasks


# -- foreground --------------------------------------------------------------------------------------------
async def test_a_foreground_subagent_streams_into_the_parent_with_its_source() -> None:
    sub_model = ScriptedModel(["Paris has 2.1 million inhabitants."], usage=TokenUsage(input_tokens=7, output_tokens=3))
    subagents = SubagentTools([spec("researcher", sub_model)])
    boss = parent(
        [call("agent_spawn", task="Population of Paris?", name="researcher"), answer("boss")],
        subagents,
    )
    events = [e async for e in boss.stream_events("go", CTX)]
    sub_events = [e for e in events if e.source == "researcher"]
    assert isinstance(sub_events[0], ev.RunStarted) and isinstance(sub_events[-1], ev.RunFinished)
    assert any(isinstance(e, ev.TextDelta) for e in sub_events)
    [started] = [e for e in events if isinstance(e, ev.SubagentTaskStarted)]
    [finished] = [e for e in events if isinstance(e, ev.SubagentTaskFinished)]
    assert started.source == finished.source == "boss" and not started.background
    assert {e.session_id for e in sub_events} == {f"s/tasks/{started.task_id}"} == {started.subagent_session_id}
    assert finished.status == "completed" and finished.tokens == 10
    reply = events[-1]
    assert isinstance(reply, ev.RunFinished) and reply.source == "boss"
    assert reply.msg.text == "boss: Paris has 2.1 million inhabitants."
    # The subagent saw only its system prompt and the task.
    [request] = sub_model.requests
    assert [m.text for m in request.messages] == ["You are the researcher.", "Population of Paris?"]
    # Its history lives in its own session; the parent's has none of it.
    sub_state = await ReActAgent("researcher", model=sub_model, state_store=boss.state_store).get_state(
        "u", started.subagent_session_id
    )
    assert [m.text for m in sub_state.messages] == ["Population of Paris?", "Paris has 2.1 million inhabitants."]
    assert all(m.name != "researcher" for m in (await boss.get_state("u", "s")).messages)
    # Foreground tokens count toward the session's budget (no task record: the result came back at once).
    state = await boss.get_state("u", "s")
    assert state.tool_state["subagents"] == {"tasks": {}, "tokens": 10}


async def test_an_inline_spec_gets_only_the_tools_it_lists() -> None:
    @tool(read_only=True)
    def lookup(word: str) -> str:
        """Look a word up."""
        return f"{word}: a small bee"

    @tool(read_only=True)
    def secret() -> str:
        """Something the subagent must not get."""
        raise AssertionError("never offered")

    def helper(request: ModelRequest) -> Any:
        if not results(request):
            assert {t.name for t in request.tools} == {"lookup"}
            return ToolUseBlock(id="l1", name="lookup", input={"word": "apis"})
        return f"found {last_result(request).text}"

    sub_model = ScriptedModel.from_function(helper)
    subagents = SubagentTools(model=sub_model)
    inline = {"name": "linguist", "prompt": "You look words up.", "tools": ["lookup"]}
    boss = parent([call("agent_spawn", task="What is apis?", spec=inline), answer("boss")], subagents, lookup, secret)
    reply = await boss.call("go", CTX)
    assert reply.text == "boss: found apis: a small bee"
    assert sub_model.requests[0].messages[0].text == "You look words up."

    # A tool the parent does not have is refused, and nothing runs.
    bad = {"prompt": "x", "tools": ["rm_rf"]}
    other = ScriptedModel.from_function(helper)
    boss = parent([call("agent_spawn", task="t", spec=bad), answer("boss")], SubagentTools(model=other), lookup)
    reply = await boss.call("go", CTX)
    assert "'rm_rf'" in reply.text and "not available" in reply.text
    assert other.requests == []


async def test_an_approval_inside_a_foreground_subagent_pauses_the_parent_and_resumes() -> None:
    wiped: list[str] = []

    @tool(destructive=True)
    async def wipe(path: str) -> str:
        """Delete a path."""
        wiped.append(path)
        return f"wiped {path}"

    def cleaner(request: ModelRequest) -> Any:
        if not results(request):
            return ToolUseBlock(id="w1", name="wipe", input={"path": "/tmp/x"})
        return f"cleaner: {last_result(request).text}"

    cleaner_model = ScriptedModel.from_function(cleaner)
    subagents = SubagentTools([spec("cleaner", cleaner_model, tools=("wipe",))])
    boss = parent([call("agent_spawn", task="Clean up", name="cleaner"), answer("boss")], subagents, wipe)
    paused = await boss.call("go", CTX)
    assert paused.generate_reason is GenerateReason.AWAITING_CONFIRMATION
    assert [p["id"] for p in paused.metadata["pending_tool_calls"]] == ["w1"]
    assert wiped == []
    reply = await boss.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call="w1")]), CTX)
    assert wiped == ["/tmp/x"]
    assert reply.text == "boss: cleaner: wiped /tmp/x"
    assert len(cleaner_model.requests) == 2


# -- background --------------------------------------------------------------------------------------------
async def test_a_background_subagent_runs_while_the_parent_answers_and_its_result_comes_later() -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def slow(request: ModelRequest) -> str:
        started.set()
        await release.wait()
        return "The hive holds 40,000 bees."

    sub_model = ScriptedModel.from_function(slow, usage=TokenUsage(input_tokens=5, output_tokens=5))
    subagents = SubagentTools([spec("counter", sub_model)])
    boss = parent(
        [
            call("agent_spawn", task="Count the bees", name="counter", background=True),
            answer("spawned"),
            call("task_output", task_id=TASK),
            answer("not yet"),
            call("task_output", task_id=TASK, wait=60),
            answer("done"),
        ],
        subagents,
    )
    first = await boss.call("Count the bees in the background", CTX)
    assert first.text.startswith("spawned: Started background task task-")
    await started.wait()
    # The parent answered while the subagent works; the record says so, in the store already.
    [task_id] = set(TASK_ID.findall(first.text))
    assert (await stored_tasks(boss))[task_id]["status"] == "running"

    second = await boss.call("Is it done?", CTX)
    assert "is running" in second.text

    release.set()
    third = await boss.call("Now?", CTX)
    assert "is completed" in third.text and "The hive holds 40,000 bees." in third.text
    await subagents.drain()
    record = (await stored_tasks(boss))[task_id]
    assert record["status"] == "completed" and record["result"] == "The hive holds 40,000 bees."
    assert record["tokens"] == 10 and record["session_id"] == f"s/tasks/{task_id}"
    [view] = await subagents.tasks(boss, CTX)
    assert view == SubagentTask.from_dict(record)
    # Nothing is left behind in the process registry once the record is written.
    assert task_id not in subagent_module._LIVE
    assert not [key for key in subagent_module._GROUPS if key[0] is boss.state_store]


async def test_background_events_reach_the_parent_stream_while_it_streams_and_are_dropped_otherwise() -> None:
    release = asyncio.Event()

    async def worker(request: ModelRequest) -> str:
        await release.wait()
        return f"worked on {request.last_user_text}"

    def release_and_wait(request: ModelRequest) -> ToolUseBlock:
        release.set()  # the parent is still streaming while the subagent works
        return call("task_output", task_id=TASK, wait=60)(request)

    subagents = SubagentTools([spec("worker", ScriptedModel.from_function(worker))])
    boss = parent(
        [
            call("agent_spawn", task="job one", name="worker", background=True),
            release_and_wait,
            answer("one"),
            call("agent_spawn", task="job two", name="worker", background=True),
            answer("spawned two"),
            "nothing else",
        ],
        subagents,
    )
    events = [e async for e in boss.stream_events("go", CTX)]
    worker_events = [e for e in events if e.source == "worker"]
    assert isinstance(worker_events[0], ev.RunStarted) and isinstance(worker_events[-1], ev.RunFinished)
    [finished] = [e for e in events if isinstance(e, ev.SubagentTaskFinished)]
    assert finished.background and finished.status == "completed" and finished.summary == "worked on job one"
    assert events[-1].msg.text.startswith("one: Task task-")  # type: ignore[attr-defined]

    # Job two runs between calls: nobody streams, so its events go nowhere and are not kept for later.
    release.clear()
    await boss.call("spawn two", CTX)
    release.set()
    await subagents.drain()
    later = [e async for e in boss.stream_events("anything?", CTX)]
    assert {e.source for e in later} == {"boss"}
    assert [t.status for t in await subagents.tasks(boss, CTX)] == ["completed", "completed"]


async def test_task_cancel_stops_the_subagent_and_its_side_effects() -> None:
    effects: list[str] = []
    working = asyncio.Event()
    cancelled = asyncio.Event()

    @tool(read_only=True, timeout=None)
    async def dig() -> str:
        """Dig for a long time."""
        effects.append("started")
        working.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        effects.append("finished")
        return "dug"

    digger = ScriptedModel([ToolUseBlock(id="d1", name="dig"), "dug a hole"])
    subagents = SubagentTools([spec("digger", digger, tools=("dig",))])
    boss = parent(
        [
            call("agent_spawn", task="Dig", name="digger", background=True),
            answer("spawned"),
            call("task_cancel", task_id=TASK),
            answer("cancel"),
            call("task_list"),
            answer("list"),
        ],
        subagents,
        dig,
    )
    await boss.call("dig", CTX)
    await working.wait()
    reply = await boss.call("stop it", CTX)
    assert reply.text.startswith("cancel: Task task-") and reply.text.endswith("is cancelled.")
    assert cancelled.is_set() and effects == ["started"]
    assert len(digger.requests) == 1  # the subagent's model was never called again
    listing = await boss.call("list", CTX)
    assert "[cancelled] digger: Dig" in listing.text
    await subagents.drain()
    [record] = (await stored_tasks(boss)).values()
    assert record["status"] == "cancelled"
    # The subagent checkpointed what it had: its tool call ends interrupted in its own session.
    sub_state = await ReActAgent("digger", model=digger, state_store=boss.state_store).get_state(
        "u", record["session_id"]
    )
    [dug] = sub_state.messages[-1].blocks(ToolResultBlock)
    assert dug.state == "interrupted"


async def test_an_approval_in_a_background_subagent_is_refused_and_it_goes_on() -> None:
    wiped: list[str] = []

    @tool(destructive=True)
    async def wipe(path: str) -> str:
        """Delete a path."""
        wiped.append(path)
        return "wiped"

    def cleaner(request: ModelRequest) -> Any:
        if not results(request):
            return ToolUseBlock(id="w1", name="wipe", input={"path": "/data"})
        return f"could not: {last_result(request).state}"

    subagents = SubagentTools([spec("cleaner", ScriptedModel.from_function(cleaner), tools=("wipe",))])
    boss = parent(
        [
            call("agent_spawn", task="Wipe", name="cleaner", background=True),
            call("task_output", task_id=TASK, wait=60),
            answer("boss"),
        ],
        subagents,
        wipe,
    )
    reply = await boss.call("go", CTX)
    assert "is completed" in reply.text and "could not: denied" in reply.text
    assert wiped == []
    await subagents.drain()


async def test_a_crash_mid_task_leaves_the_task_interrupted(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    script = textwrap.dedent(
        """
        import asyncio, os, sys
        from agentrt import ReActAgent, RuntimeContext, Toolkit, ToolUseBlock
        from agentrt.harness import SubagentSpec, SubagentTools
        from agentrt.model import ScriptedModel
        from agentrt.state import SqliteStateStore

        async def main() -> None:
            working = asyncio.Event()

            async def stuck(request):
                working.set()
                await asyncio.Event().wait()

            worker = SubagentSpec(name="worker", description="w", prompt="Work.",
                                  model=ScriptedModel.from_function(stuck))
            spawn = ToolUseBlock(id="c1", name="agent_spawn",
                                 input={"task": "long job", "name": "worker", "background": True})
            boss = ReActAgent("boss", model=ScriptedModel([spawn, "spawned"]),
                              toolkit=Toolkit([SubagentTools([worker])]),
                              state_store=SqliteStateStore(sys.argv[1]))
            await boss.call("go", RuntimeContext(user_id="u", session_id="s"))
            await working.wait()
            os._exit(0)  # the process dies mid-task: no cleanup, no final record

        asyncio.run(main())
        """
    )
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script, str(db))
    assert await asyncio.wait_for(proc.wait(), 60) == 0

    # A fresh process: a new store on the same file, a new agent and toolset, no live task.
    store = SqliteStateStore(db)
    try:
        never = ScriptedModel([])
        subagents = SubagentTools([spec("worker", never)])
        boss = parent([call("task_list"), answer("list")], subagents, store=store)
        [lost] = await subagents.tasks(boss, CTX)
        assert lost.status == "interrupted" and lost.task == "long job" and "stopped" in lost.error
        reply = await boss.call("what happened?", CTX)
        assert f"{lost.task_id} [interrupted] worker: long job" in reply.text
        record = (await stored_tasks(boss))[lost.task_id]
        assert record["status"] == "interrupted" and record["finished_at"] is not None
        assert never.requests == []
    finally:
        await store.close()


# -- limits --------------------------------------------------------------------------------------------------
async def test_the_depth_limit_refuses_a_subagent_spawning_too_deep() -> None:
    grandchild = ScriptedModel([])
    deeper = call("agent_spawn", task="deeper", spec={"name": "deep", "prompt": "x"})
    models = {"planner": ScriptedModel([deeper, answer("planner")]), "deep": grandchild}
    subagents = SubagentTools(
        [SubagentSpec(name="planner", description="p", prompt="Plan.", tools=("agent_spawn",))],
        model=lambda s: models[s.name],
        limits=SubagentLimits(max_depth=1),
    )
    boss = parent([call("agent_spawn", task="plan", name="planner"), answer("boss")], subagents)
    reply = await boss.call("go", CTX)
    assert "may nest 1 level(s) deep and this one would be level 2" in reply.text
    assert grandchild.requests == []

    # With room for two levels the same spawn runs.
    grandchild.add("deep answer")
    models["planner"] = ScriptedModel([deeper, answer("planner")])
    subagents = SubagentTools(
        [SubagentSpec(name="planner", description="p", prompt="Plan.", tools=("agent_spawn",))],
        model=lambda s: models[s.name],
        limits=SubagentLimits(max_depth=2),
    )
    boss = parent([call("agent_spawn", task="plan", name="planner"), answer("boss")], subagents)
    reply = await boss.call("go", RuntimeContext(user_id="u", session_id="deep"))
    assert reply.text == "boss: planner: deep answer"


async def test_the_task_count_limit_refuses_and_spawns_nothing() -> None:
    release = asyncio.Event()

    async def busy(request: ModelRequest) -> str:
        await release.wait()
        return "done"

    second = ScriptedModel([])
    subagents = SubagentTools(
        [spec("busy", ScriptedModel.from_function(busy)), spec("second", second)],
        limits=SubagentLimits(max_tasks=1),
    )
    boss = parent(
        [
            call("agent_spawn", task="one", name="busy", background=True),
            call("agent_spawn", task="two", name="second"),
            answer("boss"),
        ],
        subagents,
    )
    reply = await boss.call("go", CTX)
    assert "1 subagent task(s) already run for this conversation, the limit is 1" in reply.text
    assert second.requests == []
    release.set()
    await subagents.drain()


async def test_the_token_limit_refuses_once_the_subagents_spent_it() -> None:
    spender = ScriptedModel(["spent"], usage=TokenUsage(input_tokens=10, output_tokens=5))
    late = ScriptedModel([])
    subagents = SubagentTools(
        [spec("spender", spender), spec("late", late)], limits=SubagentLimits(max_total_tokens=12)
    )
    boss = parent(
        [
            call("agent_spawn", task="spend", name="spender"),
            call("agent_spawn", task="more", name="late"),
            answer("boss"),
            call("task_list"),
            answer("list"),
        ],
        subagents,
    )
    reply = await boss.call("go", CTX)
    assert "spent 15 tokens, their limit is 12" in reply.text
    assert late.requests == []
    # The budget is the session's: it holds in the next call too.
    listing = await boss.call("list", CTX)
    assert "tokens spent 15 of 12" in listing.text


async def test_a_running_subagent_stops_when_the_budget_runs_out() -> None:
    @tool(read_only=True)
    def step() -> str:
        """One more step."""
        return "ok"

    looping = ScriptedModel(
        [ToolUseBlock(id=f"s{i}", name="step") for i in range(10)], usage=TokenUsage(output_tokens=4)
    )
    subagents = SubagentTools([spec("looper", looping, tools=("step",))], limits=SubagentLimits(max_total_tokens=10))
    boss = parent([call("agent_spawn", task="loop", name="looper"), answer("boss")], subagents, step)
    reply = await boss.call("go", CTX)
    assert "stopped: the subagents of this conversation spent 12 tokens, their limit is 10" in reply.text
    assert len(looping.requests) == 3


# -- workspaces -------------------------------------------------------------------------------------------
async def test_an_isolated_subagent_writes_in_a_folder_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("parent file\n")

    def writer(request: ModelRequest) -> Any:
        if not results(request):
            return [
                ToolUseBlock(id="w", name="write_file", input={"path": "out.txt", "content": "hello\n"}),
                ToolUseBlock(id="l", name="list_dir", input={}),
            ]
        return "wrote; saw " + " | ".join(r.text for r in results(request)[-2:])

    files = FileTools(tmp_path)
    subagents = SubagentTools(
        [
            spec("writer", ScriptedModel.from_function(writer), tools=("write_file", "list_dir"), workspace="isolated"),
            spec("sharer", ScriptedModel.from_function(writer), tools=("write_file", "list_dir")),
        ]
    )
    boss = parent(
        [
            call("agent_spawn", task="write", name="writer"),
            answer("isolated"),
            call("agent_spawn", task="write", name="sharer"),
            answer("shared"),
        ],
        subagents,
        files,
        permission=PermissionMode.BYPASS,
    )
    reply = await boss.call("go", CTX)
    [task_id] = set(TASK_ID.findall(reply.text))
    assert (tmp_path / ".agentrt" / "tasks" / task_id / "out.txt").read_text() == "hello\n"
    assert not (tmp_path / "out.txt").exists()
    assert "notes.txt" not in reply.text  # it never saw the parent's files
    assert f"worked in the folder .agentrt/tasks/{task_id}/" in reply.text

    reply = await boss.call("again, shared", CTX)
    assert (tmp_path / "out.txt").read_text() == "hello\n"
    assert "notes.txt" in reply.text


async def test_a_tool_that_cannot_move_is_refused_for_an_isolated_subagent(tmp_path: Path) -> None:
    class Rooted:
        @tool(read_only=True)
        def peek(self) -> str:
            """Peek."""
            return "peeked"

    rooted = Rooted()
    peek = rooted.peek.copy(workspace=str(tmp_path))
    never = ScriptedModel([])
    subagents = SubagentTools([spec("boxed", never, tools=("peek",), workspace="isolated")])
    boss = parent([call("agent_spawn", task="peek", name="boxed"), answer("boss")], subagents, peek)
    reply = await boss.call("go", CTX)
    assert "tool 'peek' works in the folder" in reply.text and "cannot move" in reply.text
    assert never.requests == []


async def test_tools_that_cannot_move_are_left_out_when_the_spec_takes_all_tools(tmp_path: Path) -> None:
    class Rooted:
        @tool(read_only=True)
        def peek(self) -> str:
            """Peek."""
            return "peeked"

    def boxed(request: ModelRequest) -> str:
        return "tools: " + ", ".join(sorted(t.name for t in request.tools))

    peek = Rooted().peek.copy(workspace=str(tmp_path))
    subagents = SubagentTools([spec("boxed", ScriptedModel.from_function(boxed), workspace="isolated")])
    boss = parent(
        [call("agent_spawn", task="look", name="boxed"), answer("boss")], subagents, FileTools(tmp_path), peek
    )
    reply = await boss.call("go", CTX)
    assert reply.text.startswith("boss: tools: edit_file, glob_files, grep_files, list_dir, read_file, write_file")
    assert "peek" not in reply.text and "agent_spawn" not in reply.text


async def test_aclose_cancels_the_running_background_tasks() -> None:
    working = asyncio.Event()

    async def stuck(request: ModelRequest) -> str:
        working.set()
        await asyncio.Event().wait()
        return "never"

    subagents = SubagentTools([spec("stuck", ScriptedModel.from_function(stuck))])
    boss = parent([call("agent_spawn", task="wait", name="stuck", background=True), answer("boss")], subagents)
    await boss.call("go", CTX)
    await working.wait()
    await subagents.aclose()
    [task] = await subagents.tasks(boss, CTX)
    assert task.status == "cancelled" and task.done
    assert (await stored_tasks(boss))[task.task_id]["status"] == "cancelled"


async def test_subagents_of_a_session_in_plan_mode_cannot_write(tmp_path: Path) -> None:
    def writer(request: ModelRequest) -> Any:
        if not results(request):
            return ToolUseBlock(id="w", name="write_file", input={"path": "plan-leak.txt", "content": "x"})
        return f"write: {last_result(request).state}"

    subagents = SubagentTools([spec("writer", ScriptedModel.from_function(writer), tools=("write_file",))])
    boss = parent(
        [
            call("agent_spawn", task="write", name="writer"),
            call("agent_spawn", task="write", name="writer", background=True),
            call("task_output", task_id=TASK, wait=60),
            answer("boss"),
        ],
        subagents,
        FileTools(tmp_path),
        permission=PermissionMode.BYPASS,
    )
    assert await boss.enter_plan_mode(CTX)
    reply = await boss.call("go", CTX)
    foreground = results(boss.model.requests[-1])[0]  # type: ignore[attr-defined]
    assert foreground.text == "write: denied"
    assert "is completed" in reply.text and "write: denied" in reply.text  # the background one too
    assert not (tmp_path / "plan-leak.txt").exists()
    await subagents.drain()


async def test_background_tasks_of_a_subagent_end_with_it() -> None:
    working = asyncio.Event()
    stopped = asyncio.Event()

    async def stuck(request: ModelRequest) -> str:
        working.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            stopped.set()
            raise
        return "never"

    async def planner(request: ModelRequest) -> Any:
        if not results(request):
            return call("agent_spawn", task="dig", spec={"name": "digger", "prompt": "Dig."}, background=True)(request)
        await working.wait()
        return "planned"

    models = {"planner": ScriptedModel.from_function(planner), "digger": ScriptedModel.from_function(stuck)}
    subagents = SubagentTools(
        [SubagentSpec(name="planner", description="p", prompt="Plan.", tools=("agent_spawn",))],
        model=lambda s: models[s.name],
    )
    boss = parent([call("agent_spawn", task="plan", name="planner"), answer("boss")], subagents)
    reply = await boss.call("go", CTX)
    assert reply.text == "boss: planned"
    await asyncio.wait_for(stopped.wait(), 30)
    await subagents.drain()
