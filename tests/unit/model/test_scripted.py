"""Tests for `agentrt.model.scripted.ScriptedModel`: every step kind, bookkeeping and errors."""

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrt.errors import ModelAPIError, ModelError, UnexpectedModelCallError
from agentrt.message import (
    AudioBlock,
    ContentBlock,
    ImageBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    TokenUsage,
    ToolResultBlock,
    ToolUseBlock,
    VideoBlock,
)
from agentrt.model import ScriptedModel
from agentrt.model.base import ChatResponse, GenerateOptions, ModelRequest, ToolCallChunk, ToolSchema

PROMPT = [Msg.user("hello")]
TOOLS = [ToolSchema(name="search", description="Search.", parameters={"type": "object", "properties": {}})]


# -- step kinds -----------------------------------------------------------------------------------


async def test_str_step_is_streamed_as_word_deltas(collect: Any) -> None:
    model = ScriptedModel(["The quick  brown fox jumps."])
    chunks = await collect(model.stream(PROMPT))
    deltas = [c.text for c in chunks if c.text]
    assert len(deltas) == 5
    assert deltas[0] == "The "
    assert "".join(deltas) == "The quick  brown fox jumps."
    assert chunks[-1].finish_reason == "stop"
    assert all(c.tool_calls == () for c in chunks)


@given(st.text())
async def test_word_deltas_concatenate_to_the_text(text: str) -> None:
    model = ScriptedModel([text])
    chunks = [c async for c in model.stream(PROMPT)]  # a hypothesis test: no function-scoped fixture
    assert "".join(c.text for c in chunks) == text
    assert all(c.text for c in chunks[:-1])  # no empty deltas
    reply = await ScriptedModel([text]).generate(PROMPT)
    assert reply.text == text
    if text:
        assert reply.content == [TextBlock(text=text)]


async def test_str_step_generate() -> None:
    reply = await ScriptedModel(["Hi there, friend"]).generate(PROMPT)
    assert isinstance(reply, Msg)
    assert reply.role == "assistant"
    assert reply.content == [TextBlock(text="Hi there, friend")]
    assert reply.metadata["finish_reason"] == "stop"
    assert reply.tool_calls == []


async def test_empty_str_step_gives_empty_reply() -> None:
    reply = await ScriptedModel([""]).generate(PROMPT)
    assert reply.content == []
    assert reply.role == "assistant"


async def test_tool_use_step(collect: Any) -> None:
    call = ToolUseBlock(id="call_1", name="search", input={"q": "weather", "opts": {"n": [1, 2]}})
    model = ScriptedModel([call])
    chunks = await collect(model.stream(PROMPT))
    calls = [tc for c in chunks for tc in c.tool_calls]
    assert len(calls) == 1
    assert calls[0].index == 0
    assert calls[0].id == "call_1"
    assert calls[0].name == "search"
    assert chunks[-1].finish_reason == "tool_calls"
    reply = await ScriptedModel([call]).generate(PROMPT)
    assert reply.tool_calls == [call]
    assert reply.metadata["finish_reason"] == "tool_calls"


async def test_tool_use_step_with_generated_id_and_metadata() -> None:
    call = ToolUseBlock(name="f", input={"x": 1}, metadata={"thought_signature": "abc"})
    reply = await ScriptedModel([call]).generate(PROMPT)
    assert reply.tool_calls == [call]
    assert reply.tool_calls[0].metadata == {"thought_signature": "abc"}


async def test_list_of_blocks_gives_several_tool_calls_with_indices(collect: Any) -> None:
    blocks: list[ContentBlock] = [
        TextBlock(text="Let me look."),
        ToolUseBlock(id="a", name="read", input={"path": "a"}),
        ToolUseBlock(id="b", name="read", input={"path": "b"}),
        ToolUseBlock(id="c", name="write", input={}),
    ]
    chunks = await collect(ScriptedModel([blocks]).stream(PROMPT))
    calls = [tc for c in chunks for tc in c.tool_calls]
    assert [(tc.index, tc.id, tc.name) for tc in calls] == [(0, "a", "read"), (1, "b", "read"), (2, "c", "write")]
    assert "".join(c.text for c in chunks) == "Let me look."
    assert chunks[-1].finish_reason == "tool_calls"
    reply = await ScriptedModel([blocks]).generate(PROMPT)
    assert reply.content == blocks


async def test_thinking_block_in_list() -> None:
    blocks: list[ContentBlock] = [ThinkingBlock(thinking="ponder", signature="sig"), TextBlock(text="answer")]
    reply = await ScriptedModel([blocks]).generate(PROMPT)
    assert reply.content == blocks


async def test_single_text_and_thinking_block_steps() -> None:
    model = ScriptedModel([TextBlock(text="plain block"), ThinkingBlock(thinking="deep", signature="s")])
    assert (await model.generate(PROMPT)).content == [TextBlock(text="plain block")]
    assert (await model.generate(PROMPT)).content == [ThinkingBlock(thinking="deep", signature="s")]


async def test_msg_step() -> None:
    msg = Msg(
        role="assistant",
        content=[
            ThinkingBlock(thinking="t"),
            TextBlock(text="calling"),
            ToolUseBlock(id="x", name="f", input={"a": 1}),
            ImageBlock(source="http://img/x.png"),
        ],
    )
    reply = await ScriptedModel([msg]).generate(PROMPT)
    assert reply.content == msg.content
    assert reply.metadata["finish_reason"] == "tool_calls"


async def test_list_with_media_blocks() -> None:
    blocks: list[ContentBlock] = [ImageBlock(source="u1"), AudioBlock(source="u2"), VideoBlock(source="u3")]
    reply = await ScriptedModel([blocks]).generate(PROMPT)
    assert reply.content == blocks


@pytest.mark.parametrize(
    "block",
    [ImageBlock(source="http://x/a.png"), AudioBlock(source="http://x/a.wav"), VideoBlock(source="http://x/a.mp4")],
    ids=["image", "audio", "video"],
)
async def test_single_media_block_step(block: Any) -> None:
    reply = await ScriptedModel([block]).generate(PROMPT)
    assert reply.content == [block]


async def test_raw_chat_response_list_is_streamed_as_given(collect: Any) -> None:
    raw = [
        ChatResponse(thinking="hm"),
        ChatResponse(text="par"),
        ChatResponse(text="tial"),
        ChatResponse(tool_calls=(ToolCallChunk(index=0, id="c9", name="f", arguments='{"a"'),)),
        ChatResponse(tool_calls=(ToolCallChunk(index=0, arguments=": 2}"),)),
        ChatResponse(usage=TokenUsage(input_tokens=4, output_tokens=2), finish_reason="tool_calls"),
    ]
    chunks = await collect(ScriptedModel([raw]).stream(PROMPT))
    assert chunks == raw
    reply = await ScriptedModel([raw]).generate(PROMPT)
    assert reply.content == [
        ThinkingBlock(thinking="hm"),
        TextBlock(text="partial"),
        ToolUseBlock(id="c9", name="f", input={"a": 2}),
    ]
    assert reply.usage == TokenUsage(input_tokens=4, output_tokens=2)


async def test_single_chat_response_step(collect: Any) -> None:
    chunk = ChatResponse(text="one chunk", finish_reason="length")
    assert await collect(ScriptedModel([chunk]).stream(PROMPT)) == [chunk]
    reply = await ScriptedModel([chunk]).generate(PROMPT)
    assert reply.text == "one chunk"
    assert reply.metadata["finish_reason"] == "length"


async def test_exception_step_is_raised() -> None:
    error = ModelAPIError("provider exploded", status=500)
    model = ScriptedModel([error, "recovered"])
    with pytest.raises(ModelAPIError, match="provider exploded") as info:
        await model.generate(PROMPT)
    assert info.value is error
    assert (await model.generate(PROMPT)).text == "recovered"
    assert len(model.requests) == 2
    model.assert_complete()


async def test_sync_callable_step_gets_request() -> None:
    seen: list[ModelRequest] = []

    def step(request: ModelRequest) -> str:
        seen.append(request)
        return f"you said {request.last_user_text}"

    options = GenerateOptions(temperature=0.2, max_tokens=10)
    model = ScriptedModel([step])
    reply = await model.generate([Msg.system("sys"), Msg.user("ping")], TOOLS, options)
    assert reply.text == "you said ping"
    assert len(seen) == 1
    req = seen[0]
    assert isinstance(req, ModelRequest)
    assert [m.text for m in req.messages] == ["sys", "ping"]
    assert req.tools == TOOLS
    assert req.options is options
    assert model.requests == [req]


async def test_async_callable_step_returning_blocks() -> None:
    async def step(request: ModelRequest) -> list[Any]:
        return [ToolUseBlock(id=f"c{i}", name=t.name) for i, t in enumerate(request.tools)]

    reply = await ScriptedModel([step]).generate(PROMPT, TOOLS)
    assert reply.tool_calls == [ToolUseBlock(id="c0", name="search")]


async def test_callable_step_returning_exception_raises_it() -> None:
    reply_error = ModelError("from callable")
    model = ScriptedModel([lambda request: reply_error])
    with pytest.raises(ModelError, match="from callable"):
        await model.generate(PROMPT)


async def test_from_function() -> None:
    calls: list[int] = []

    async def fn(request: ModelRequest) -> str:
        calls.append(len(request.messages))
        return f"n={len(request.messages)}"

    model = ScriptedModel.from_function(fn)
    assert (await model.generate(PROMPT)).text == "n=1"
    assert (await model.generate([*PROMPT, Msg.assistant("a"), Msg.user("b")])).text == "n=3"
    assert (await model.generate(PROMPT, TOOLS)).text == "n=1"
    assert calls == [1, 3, 1]
    assert len(model.requests) == 3
    assert model.requests[2].tools == TOOLS
    assert model.model_name == "function"
    model.assert_complete()  # a function never runs out


async def test_from_function_sync() -> None:
    model = ScriptedModel.from_function(lambda req: ToolUseBlock(id="z", name="f", input={"n": len(req.messages)}))
    reply = await model.generate(PROMPT)
    assert reply.tool_calls == [ToolUseBlock(id="z", name="f", input={"n": 1})]


# -- bookkeeping ----------------------------------------------------------------------------------


async def test_requests_are_recorded_with_default_options() -> None:
    model = ScriptedModel(["a", "b"])
    await model.generate([Msg.user("first")])
    await model.generate([Msg.user("first"), Msg.assistant("a"), Msg.user("second")], TOOLS)
    assert len(model.requests) == 2
    assert [m.text for m in model.requests[0].messages] == ["first"]
    assert model.requests[0].tools == []
    assert model.requests[0].options == GenerateOptions()
    assert model.requests[1].last_user_text == "second"
    assert model.requests[1].tools == TOOLS
    assert isinstance(model.requests[1].messages, list)


async def test_assert_complete() -> None:
    model = ScriptedModel(["one", "two"], name="m")
    with pytest.raises(AssertionError, match=r"'m' has 2 unused step\(s\) of 2"):
        model.assert_complete()
    assert model.remaining == 2
    await model.generate(PROMPT)
    with pytest.raises(AssertionError, match="1 unused step"):
        model.assert_complete()
    assert model.remaining == 1
    await model.generate(PROMPT)
    assert model.remaining == 0
    model.assert_complete()


async def test_add_appends_steps() -> None:
    model = ScriptedModel()
    model.add("x", "y")
    assert model.remaining == 2
    assert (await model.generate(PROMPT)).text == "x"
    assert (await model.generate(PROMPT)).text == "y"


async def test_extra_call_raises_unexpected_model_call_error() -> None:
    model = ScriptedModel(["only"], name="demo")
    await model.generate(PROMPT)
    with pytest.raises(UnexpectedModelCallError) as info:
        await model.generate([Msg.user("what now?")])
    message = str(info.value)
    assert "'demo'" in message
    assert "2 time(s)" in message
    assert "1 step(s)" in message
    assert "what now?" in message
    assert isinstance(info.value, ModelError)


async def test_empty_script_raises_on_first_call() -> None:
    with pytest.raises(UnexpectedModelCallError, match="0 step"):
        await ScriptedModel().generate(PROMPT)


async def test_repeat_cycles_the_script() -> None:
    model = ScriptedModel(["a", "b"], repeat=True)
    texts = [(await model.generate(PROMPT)).text for _ in range(5)]
    assert texts == ["a", "b", "a", "b", "a"]


async def test_latency_and_chunk_delay_are_awaited() -> None:
    model = ScriptedModel(["slow reply here"], latency=0.001, chunk_delay=0.001)
    reply = await model.generate(PROMPT)
    assert reply.text == "slow reply here"
    model.assert_complete()


async def test_usage_is_appended(collect: Any) -> None:
    usage = TokenUsage(input_tokens=11, output_tokens=3)
    model = ScriptedModel(["x", "y"], usage=usage)
    chunks = await collect(model.stream(PROMPT))
    assert chunks[-1] == ChatResponse(usage=usage)
    reply = await model.generate(PROMPT)
    assert reply.usage == usage


def test_identity() -> None:
    model = ScriptedModel(name="bot")
    assert model.model_name == "bot"
    assert model.id == "scripted:bot"
    assert model.provider == "scripted"
    assert repr(model) == "ScriptedModel('bot')"
    assert ScriptedModel().id == "scripted:scripted"


async def test_async_context_manager() -> None:
    async with ScriptedModel(["x"]) as model:
        assert (await model.generate(PROMPT)).text == "x"


async def test_tool_result_block_in_reply_passes_through() -> None:
    # Unusual but allowed: non-text blocks are delivered as complete blocks.
    block = ToolResultBlock(id="c", name="f", output="o")
    reply = await ScriptedModel([[block]]).generate(PROMPT)
    assert reply.content == [block]
