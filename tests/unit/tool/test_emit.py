"""Streaming tool output: `ToolEmitter` emissions become `ToolOutputDelta` events before the result."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentrt import ReActAgent, RuntimeContext, Toolkit, ToolUseBlock, tool
from agentrt import events as ev
from agentrt.model import ScriptedModel
from agentrt.permission import PermissionMode
from agentrt.tool._execution import ToolExecutor
from agentrt.tool.builtin import ShellTool
from agentrt.tool.emit import AUTO_EMITTER, ToolEmitter, ToolOutputDelta
from agentrt.tool.scope import ToolCallScope


@tool
async def countdown(n: int) -> str:
    """Count down, streaming each number."""
    emitter = ToolEmitter.current("countdown")
    for i in range(n, 0, -1):
        await emitter.emit(f"{i}\n")
        await asyncio.sleep(0)  # yield between pieces, as a real streaming tool would
    return "liftoff"


@tool
async def echo_parts(text: str, emitter: ToolEmitter = AUTO_EMITTER) -> str:
    """Stream the words of `text` through an injected emitter."""
    for word in text.split():
        await emitter.emit(word)
    return text.upper()


@tool
def sync_progress(steps: int) -> str:
    """A sync tool (runs in a worker thread) reporting progress."""
    emitter = ToolEmitter.current("sync_progress")
    for i in range(steps):
        emitter.emit_nowait(f"step {i + 1}/{steps}\n")
    return "finished"


def tool_events(events: list[ev.AgentEvent]) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    for e in events:
        if isinstance(e, ToolOutputDelta):
            out.append(("delta", e.tool_call_id, e.delta))
        elif isinstance(e, ev.ToolResult):
            out.append(("result", e.result.id, str(e.result.output)))
    return out


async def test_deltas_stream_in_order_before_the_result(collect: Any) -> None:
    model = ScriptedModel([[ToolUseBlock(id="c1", name="countdown", input={"n": 3})], "Done."])
    agent = ReActAgent("rocket", model=model, toolkit=Toolkit([countdown]))
    events = await collect(agent.stream_events("launch", RuntimeContext(session_id="emit-1")))
    assert tool_events(events) == [
        ("delta", "c1", "3\n"),
        ("delta", "c1", "2\n"),
        ("delta", "c1", "1\n"),
        ("result", "c1", "liftoff"),
    ]
    deltas = [e for e in events if isinstance(e, ToolOutputDelta)]
    assert all(d.name == "countdown" and d.source == "rocket" and d.reply_id == events[0].reply_id for d in deltas)
    assert events[-1].msg.text == "Done."
    # The streamed output is not part of the reply or the history: the result is.
    state = await agent.get_state(None, "emit-1")
    assert all("3\n" not in str(m.content) for m in state.messages if m.role == "assistant")


async def test_parallel_calls_stream_under_their_own_ids_in_order(collect: Any) -> None:
    model = ScriptedModel(
        [
            [
                ToolUseBlock(id="a", name="countdown", input={"n": 2}),
                ToolUseBlock(id="b", name="countdown", input={"n": 3}),
            ],
            "ok",
        ]
    )
    agent = ReActAgent("r", model=model, toolkit=Toolkit([countdown]))
    items = tool_events(await collect(agent.stream_events("go", RuntimeContext(session_id="emit-2"))))
    assert [d for kind, call, d in items if kind == "delta" and call == "a"] == ["2\n", "1\n"]
    assert [d for kind, call, d in items if kind == "delta" and call == "b"] == ["3\n", "2\n", "1\n"]
    for call in ("a", "b"):
        last_delta = max(i for i, (kind, c, _) in enumerate(items) if kind == "delta" and c == call)
        result = items.index(("result", call, "liftoff"))
        assert last_delta < result


async def test_parallel_calls_of_one_tool_get_their_own_ids(collect: Any) -> None:
    model = ScriptedModel(
        [
            [
                ToolUseBlock(id="a", name="countdown", input={"n": 1}),
                ToolUseBlock(id="b", name="countdown", input={"n": 1}),
            ],
            "ok",
        ]
    )
    agent = ReActAgent("r", model=model, toolkit=Toolkit([countdown]))
    deltas = [
        e
        for e in await collect(agent.stream_events("go", RuntimeContext(session_id="emit-3")))
        if isinstance(e, ToolOutputDelta)
    ]
    # the executor binds each running call, so parallel calls of one tool are told apart
    assert sorted((d.tool_call_id, d.name, d.delta) for d in deltas) == [
        ("a", "countdown", "1\n"),
        ("b", "countdown", "1\n"),
    ]


async def test_injected_emitter_parameter_is_hidden_from_the_model(collect: Any) -> None:
    assert set(echo_parts.parameters["properties"]) == {"text"}
    model = ScriptedModel([[ToolUseBlock(id="e1", name="echo_parts", input={"text": "a b c"})], "ok"])
    agent = ReActAgent("r", model=model, toolkit=Toolkit([echo_parts]))
    assert tool_events(await collect(agent.stream_events("go", RuntimeContext(session_id="emit-4")))) == [
        ("delta", "e1", "a"),
        ("delta", "e1", "b"),
        ("delta", "e1", "c"),
        ("result", "e1", "A B C"),
    ]


async def test_sync_tools_emit_from_their_worker_thread(collect: Any) -> None:
    model = ScriptedModel([[ToolUseBlock(id="s1", name="sync_progress", input={"steps": 3})], "ok"])
    agent = ReActAgent("r", model=model, toolkit=Toolkit([sync_progress]))
    assert tool_events(await collect(agent.stream_events("go", RuntimeContext(session_id="emit-5")))) == [
        ("delta", "s1", "step 1/3\n"),
        ("delta", "s1", "step 2/3\n"),
        ("delta", "s1", "step 3/3\n"),
        ("result", "s1", "finished"),
    ]


async def test_plain_call_and_no_agent_emit_nothing() -> None:
    model = ScriptedModel([[ToolUseBlock(id="c1", name="countdown", input={"n": 2})], "Done."])
    agent = ReActAgent("r", model=model, toolkit=Toolkit([countdown]))
    reply = await agent.call("go", RuntimeContext(session_id="emit-6"))
    assert reply.text == "Done."
    assert await countdown(2) == "liftoff"  # outside any agent: emitting is a no-op
    emitter = ToolEmitter.current("x")
    assert not emitter.active and emitter.tool_call_id == ""


async def test_sink_and_scope() -> None:
    seen: list[str] = []
    emitter = ToolEmitter(sink=seen.append)
    assert emitter.active
    await emitter.emit("a")
    emitter.emit_nowait("")  # empty emissions are dropped
    emitter.emit_nowait("b")
    assert seen == ["a", "b"]
    events: list[ev.AgentEvent] = []
    scope = ToolCallScope(call_id="x1", tool_name="t", ctx=RuntimeContext(), emit=events.append, reply_id="r1")
    assert ToolCallScope.current() is None
    with scope.bind():
        assert ToolCallScope.current() is scope
        ToolEmitter.current().emit_nowait("c")
    assert ToolCallScope.current() is None
    deltas = [e for e in events if isinstance(e, ToolOutputDelta)]
    assert [(e.tool_call_id, e.name, e.delta, e.reply_id) for e in deltas] == [("x1", "t", "c", "r1")]


@tool
async def twice(tag: str) -> str:
    """Stream two pieces, reporting the call id the tool itself sees."""
    scope = ToolCallScope.current()
    assert scope is not None
    emitter = ToolEmitter.current()
    await emitter.emit(f"{tag}-1")
    await asyncio.sleep(0)  # yield: the other call, already started, emits in between
    await emitter.emit(f"{tag}-2")
    return scope.call_id


@tool
def twice_sync(tag: str) -> str:
    """The same from a worker thread."""
    scope = ToolCallScope.current()
    assert scope is not None
    emitter = ToolEmitter.current()
    emitter.emit_nowait(f"{tag}-1")
    emitter.emit_nowait(f"{tag}-2")
    return scope.call_id


@pytest.mark.parametrize("fn", [twice, twice_sync], ids=["async", "sync"])
async def test_two_parallel_calls_of_one_tool_emit_under_their_own_call_ids(fn: object) -> None:
    toolkit = Toolkit([fn])
    name = toolkit.names()[0]
    events: list[ev.AgentEvent] = []
    executor = ToolExecutor(toolkit.tools, RuntimeContext(), toolkit.semaphore(), emit=events.append, source="me")
    calls = [ToolUseBlock(id=i, name=name, input={"tag": i}) for i in ("p", "q")]
    results = await executor.execute_all(calls)
    assert [r.output for r in results] == ["p", "q"]  # each call saw its own scope
    deltas = [e for e in events if isinstance(e, ToolOutputDelta)]
    assert sorted((d.tool_call_id, d.delta) for d in deltas) == [("p", "p-1"), ("p", "p-2"), ("q", "q-1"), ("q", "q-2")]
    assert {(d.name, d.source) for d in deltas} == {(name, "me")}


async def test_executor_without_a_sink_keeps_tools_silent() -> None:
    toolkit = Toolkit([twice])
    executor = ToolExecutor(toolkit.tools, RuntimeContext(), toolkit.semaphore())
    result = await executor.execute(ToolUseBlock(id="s", name="twice", input={"tag": "s"}))
    assert result.output == "s"


def test_event_round_trips_through_json() -> None:
    event = ToolOutputDelta(reply_id="r1", session_id="s", source="a", tool_call_id="c1", name="t", delta="x\n")
    assert event.type == "tool_output_delta"
    data = event.to_dict()
    assert data == {
        "type": "tool_output_delta",
        "reply_id": "r1",
        "session_id": "s",
        "source": "a",
        "tool_call_id": "c1",
        "name": "t",
        "delta": "x\n",
    }
    assert ev.event_from_dict(data) == event
    assert ev.reduce_events([event]).text == ""  # the reducer ignores tool output


@pytest.mark.skipif(not hasattr(__import__("os"), "killpg"), reason="POSIX")
async def test_shell_tool_streams_lines_inside_an_agent(tmp_path: Path, collect: Any) -> None:
    toolkit = Toolkit()
    toolkit.register(ShellTool(tmp_path))
    command = "for i in 1 2 3; do echo line$i; sleep 0.05; done"
    model = ScriptedModel([[ToolUseBlock(id="sh1", name="run_command", input={"command": command})], "ok"])
    agent = ReActAgent("dev", model=model, toolkit=toolkit, permission=PermissionMode.BYPASS)
    items = tool_events(await collect(agent.stream_events("run it", RuntimeContext(session_id="emit-7"))))
    deltas = [d for kind, call, d in items if kind == "delta" and call == "sh1"]
    assert "".join(deltas) == "line1\nline2\nline3\n" and len(deltas) >= 2
    assert items[-1] == ("result", "sh1", "line1\nline2\nline3\n[exit code 0]")
