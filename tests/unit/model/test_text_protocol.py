"""The text tool protocol: the tolerant parser (over a corpus of real-world-style replies) and the wrapper."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from text_protocol_corpus import CORPUS, TOOLS

from agentrt import Msg, ReActAgent, TextBlock, ThinkingBlock, Toolkit, ToolResultBlock, ToolUseBlock, tool
from agentrt import events as ev
from agentrt.errors import UserError
from agentrt.message import ImageBlock, TokenUsage
from agentrt.model import ChatModel, ModelRequest, ScriptedModel
from agentrt.model.base import ChatResponse, GenerateOptions, ToolSchema
from agentrt.model.text_protocol import (
    ReactParse,
    TextProtocolModel,
    ensure_tool_calling,
    parse_react,
    render_tool_prompt,
)
from agentrt.state import InMemoryStateStore

WEATHER = TOOLS[0]


# ==================================================================================================
# the corpus
# ==================================================================================================
def test_corpus_is_large_and_varied() -> None:
    assert len(CORPUS) >= 40
    assert len({s["id"] for s in CORPUS}) == len(CORPUS), "sample ids must be unique"
    styles = " ".join(s["style"] for s in CORPUS).lower()
    for family in ("qwen", "llama", "deepseek", "gpt-3.5", "mistral", "langchain"):
        assert family in styles
    assert sum(1 for s in CORPUS if any("\u4e00" <= ch <= "\u9fff" for ch in s["text"])) >= 8
    assert sum(1 for s in CORPUS if s.get("error")) >= 5


@pytest.mark.parametrize("sample", CORPUS, ids=[s["id"] for s in CORPUS])
def test_corpus_sample(sample: dict[str, Any]) -> None:
    parsed = parse_react(sample["text"], TOOLS)
    assert isinstance(parsed, ReactParse)
    if sample.get("error"):
        assert parsed.error is not None, parsed
        assert not parsed.ok
    else:
        assert parsed.error is None, parsed
        assert parsed.actions == [tuple(a) for a in sample.get("actions", [])]
        assert parsed.final_answer == sample.get("final")
        # exactly one outcome
        assert bool(parsed.actions) != (parsed.final_answer is not None)
    if "thought" in sample:
        assert parsed.thought == sample["thought"]
    if "thought_has" in sample:
        assert sample["thought_has"] in parsed.thought


@pytest.mark.parametrize("sample", CORPUS, ids=[s["id"] for s in CORPUS])
def test_every_prefix_of_a_sample_parses_without_raising(sample: dict[str, Any]) -> None:
    # The wrapper parses growing prefixes while streaming; a cut anywhere must be harmless.
    text = sample["text"]
    for end in range(0, len(text) + 1, max(1, len(text) // 40)):
        assert isinstance(parse_react(text[:end], TOOLS), ReactParse)
        assert isinstance(parse_react(text[:end]), ReactParse)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(max_size=12),
            st.sampled_from(
                [
                    "Thought:",
                    "Action:",
                    "Action Input:",
                    "Final Answer:",
                    "Observation:",
                    "行动：",  # noqa: RUF001
                    "最终答案：",  # noqa: RUF001
                    "{",
                    "}",
                    "[",
                    "]",
                    "(",
                    "```",
                    '"',
                    "'",
                    "“",
                    "\n",
                    "<think>",
                    "</think>",
                    "<tool_call>",
                    "get_weather",
                    "//",
                    "/*",
                ]
            ),
        ),
        max_size=25,
    )
)
def test_parser_never_raises(pieces: list[str]) -> None:
    parsed = parse_react("".join(pieces), TOOLS)
    assert parsed.error is not None or parsed.actions or parsed.final_answer is not None
    for name, args in parsed.actions:
        assert isinstance(name, str) and name
        assert isinstance(args, dict)


# ==================================================================================================
# parser details beyond the corpus
# ==================================================================================================
def test_bare_string_without_schemas_goes_under_input() -> None:
    parsed = parse_react("Thought: x\nAction: lookup\nAction Input: some words")
    assert parsed.actions == [("lookup", {"input": "some words"})]


def test_tools_as_mapping_and_case_is_fixed() -> None:
    parsed = parse_react('Action: GET_WEATHER\nAction Input: {"city": "Oslo"}', {"get_weather": WEATHER})
    assert parsed.actions == [("get_weather", {"city": "Oslo"})]


def test_tool_named_finish_is_a_tool_call() -> None:
    finish = ToolSchema(name="finish", description="", parameters={"type": "object", "properties": {}})
    parsed = parse_react("Thought: done\nAction: finish\nAction Input: {}", [finish])
    assert parsed.actions == [("finish", {})]
    assert parse_react("Thought: done\nAction: finish\nAction Input: all done").final_answer == "all done"


def test_final_answer_first_wins_over_later_action() -> None:
    parsed = parse_react("Final Answer: use it like this\nAction: search\nAction Input: {}", TOOLS)
    assert parsed.final_answer == "use it like this\nAction: search\nAction Input: {}"
    assert parsed.actions == []


def test_plain_reasoning_label_alone_is_an_answer_not_a_format_error() -> None:
    parsed = parse_react("Reasoning: the sky scatters blue light.")
    assert parsed.error is None
    assert parsed.final_answer == "Reasoning: the sky scatters blue light."


def test_lowercase_label_mid_sentence_is_not_a_label() -> None:
    parsed = parse_react("Thought: the next action: unclear. I will just answer.\nFinal Answer: 7")
    assert parsed.final_answer == "7"
    assert "action: unclear" in parsed.thought


def test_python_call_positional_argument_maps_to_the_parameter() -> None:
    parsed = parse_react('Action: search("rust async")', TOOLS)
    assert parsed.actions == [("search", {"query": "rust async"})]
    parsed = parse_react('Action: send_email("a@b.c", "Hi", "Body")', TOOLS)
    assert parsed.actions == [("send_email", {"to": "a@b.c", "subject": "Hi", "body": "Body"})]


def test_error_messages_say_what_is_wrong() -> None:
    assert "send_email" in (parse_react("Action: send_email\nAction Input: hi", TOOLS).error or "")
    assert "Action Input" in (parse_react("Action: search\nAction Input: {]]]]", TOOLS).error or "")
    assert parse_react("").error == "the reply is empty"


# ==================================================================================================
# prompt rendering
# ==================================================================================================
def test_render_tool_prompt_lists_tools_compactly_with_an_example() -> None:
    schema = {
        "type": "object",
        "title": "Args",
        "properties": {"city": {"type": "string", "title": "City", "description": "City name."}},
        "required": ["city"],
        "additionalProperties": False,
    }
    prompt = render_tool_prompt([ToolSchema(name="get_weather", description="Get the\n  weather.", parameters=schema)])
    assert "## get_weather\nGet the weather.\n" in prompt
    assert 'Arguments: {"type":"object","properties":{"city":{"type":"string","description":"City name."}}' in prompt
    assert "title" not in prompt and "additionalProperties" not in prompt
    for label in ("Thought:", "Action:", "Action Input:", "Final Answer:", "Observation"):
        assert label in prompt
    assert 'Action: get_weather\nAction Input: {"city": "<city>"}' in prompt
    assert "several Action / Action Input pairs" in prompt


def test_render_tool_prompt_choice_and_parallel() -> None:
    assert "must call at least one tool" in render_tool_prompt(TOOLS, tool_choice="required")
    assert "Do not call any tool" in render_tool_prompt(TOOLS, tool_choice="none")
    forced = render_tool_prompt(TOOLS, tool_choice={"name": "calculator"})
    assert "must call the tool calculator" in forced
    assert "Action: calculator\n" in forced  # the example uses the forced tool
    assert "at most one tool per reply" in render_tool_prompt(TOOLS, parallel_tool_calls=False)
    custom = render_tool_prompt(TOOLS[:1], template="T={tool_names}")
    assert custom == "T=get_weather"


def test_example_values_follow_the_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "mode": {"type": "string", "enum": ["fast", "slow"]},
            "flag": {"type": "boolean"},
            "when": {"anyOf": [{"type": "null"}, {"type": "number"}]},
        },
        "required": ["n", "mode", "flag", "when"],
    }
    prompt = render_tool_prompt([ToolSchema(name="t", description="d", parameters=schema)])
    assert 'Action Input: {"n": 1, "mode": "fast", "flag": true, "when": 1.5}' in prompt


# ==================================================================================================
# the wrapper
# ==================================================================================================
async def collect(model: ChatModel, messages: list[Msg], tools: list[ToolSchema], **kw: Any) -> list[ChatResponse]:
    return [c async for c in model.stream(messages, tools, **kw)]


PROMPT = [Msg.system("You are a weather bot."), Msg.user("Weather in Paris?")]
ACTION_REPLY = 'Thought: I need the weather.\nAction: get_weather\nAction Input: {"city": "Paris"}'


async def test_system_prompt_gets_tools_and_protocol_and_inner_gets_no_tools() -> None:
    inner = ScriptedModel([ACTION_REPLY])
    model = TextProtocolModel(inner)
    await collect(model, PROMPT, TOOLS, options=GenerateOptions(tool_choice="auto", parallel_tool_calls=True))
    request = inner.requests[0]
    assert request.tools == []
    system = request.messages[0]
    assert system.role == "system"
    assert system.text.startswith("You are a weather bot.\n\n# Tools")
    for t in TOOLS:
        assert f"## {t.name}\n" in system.text
    assert "Action Input:" in system.text and "Final Answer:" in system.text
    assert request.messages[1:] == PROMPT[1:]
    # native-only options are not sent to a model that was given no tools
    assert request.options.tool_choice is None
    assert request.options.parallel_tool_calls is None
    assert list(request.options.stop or ()) == ["\nObservation:"]


async def test_system_message_is_added_when_missing_and_stop_is_merged() -> None:
    inner = ScriptedModel([ACTION_REPLY])
    await collect(TextProtocolModel(inner), [Msg.user("hi")], TOOLS, options=GenerateOptions(stop=["END"]))
    messages = inner.requests[0].messages
    assert [m.role for m in messages] == ["system", "user"]
    assert messages[0].text.startswith("# Tools")
    assert list(inner.requests[0].options.stop or ()) == ["END", "\nObservation:"]
    inner2 = ScriptedModel([ACTION_REPLY])
    await collect(TextProtocolModel(inner2, stop_at_observation=False), [Msg.user("hi")], TOOLS)
    assert inner2.requests[0].options.stop is None


async def test_action_reply_becomes_thinking_and_tool_call_chunks() -> None:
    chunks = await collect(TextProtocolModel(ScriptedModel([ACTION_REPLY])), PROMPT, TOOLS)
    assert [c.thinking for c in chunks if c.thinking] == ["I need the weather."]
    calls = [tc for c in chunks for tc in c.tool_calls]
    assert len(calls) == 1
    assert calls[0].index == 0 and calls[0].name == "get_weather"
    assert calls[0].input == {"city": "Paris"}
    assert calls[0].id and calls[0].id.startswith("call_")
    assert not any(c.text for c in chunks)
    assert chunks[-1].finish_reason == "tool_calls"


async def test_generate_builds_the_same_message_as_a_native_model() -> None:
    reply = (
        "Thought: both cities\n"
        'Action: get_weather\nAction Input: {"city": "Paris"}\n'
        'Action: get_weather\nAction Input: {"city": "Rome"}'
    )
    msg = await TextProtocolModel(ScriptedModel([reply])).generate(PROMPT, TOOLS)
    assert isinstance(msg.content[0], ThinkingBlock) and msg.content[0].thinking == "both cities"
    assert [(c.name, dict(c.input)) for c in msg.tool_calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_weather", {"city": "Rome"}),
    ]
    assert len({c.id for c in msg.tool_calls}) == 2
    assert msg.metadata["finish_reason"] == "tool_calls"


async def test_parallel_tool_calls_false_keeps_the_first_action() -> None:
    reply = 'Action: search\nAction Input: {"query": "a"}\nAction: search\nAction Input: {"query": "b"}'
    inner = ScriptedModel([reply])
    msg = await TextProtocolModel(inner).generate(PROMPT, TOOLS, GenerateOptions(parallel_tool_calls=False))
    assert [dict(c.input) for c in msg.tool_calls] == [{"query": "a"}]
    assert "at most one tool per reply" in inner.requests[0].messages[0].text


async def test_final_answer_is_streamed_as_it_arrives() -> None:
    answer = "It is sunny and 22 degrees in Paris today, with a light breeze from the west."
    chunks = await collect(
        TextProtocolModel(ScriptedModel([f"Thought: I know.\nFinal Answer: {answer}"])), PROMPT, TOOLS
    )
    texts = [c.text for c in chunks if c.text]
    assert len(texts) > 5, "the answer should arrive in pieces, not at the end"
    assert "".join(texts) == answer
    assert [c.thinking for c in chunks if c.thinking] == ["I know."]
    assert not any(c.restart for c in chunks)
    assert chunks[-1].finish_reason == "stop"


async def test_streamed_answer_keeps_code_blocks_and_drops_a_wrapping_fence() -> None:
    answer = "Use this:\n```python\nprint('hi')\n```"
    msg = await TextProtocolModel(ScriptedModel([f"Thought: easy\nFinal Answer: {answer}"])).generate(PROMPT, TOOLS)
    assert msg.text == answer
    fenced = "Sure:\n```\nThought: easy\nFinal Answer: 42\n```"
    msg = await TextProtocolModel(ScriptedModel([fenced])).generate(PROMPT, TOOLS)
    assert msg.text == "42"


async def test_answer_streaming_can_be_turned_off() -> None:
    model = TextProtocolModel(
        ScriptedModel(["Thought: x\nFinal Answer: one two three four"]), stream_final_answer=False
    )
    chunks = await collect(model, PROMPT, TOOLS)
    assert [c.text for c in chunks if c.text] == ["one two three four"]


async def test_plain_text_reply_is_the_final_answer() -> None:
    msg = await TextProtocolModel(ScriptedModel(["Paris is sunny."])).generate(PROMPT, TOOLS)
    assert msg.content == [TextBlock(text="Paris is sunny.")]


async def test_unreadable_reply_triggers_a_correction_round() -> None:
    inner = ScriptedModel(["Thought: I will look it up.\nAction: I will look it up for you", ACTION_REPLY])
    msg = await TextProtocolModel(inner).generate(PROMPT, TOOLS)
    assert [c.name for c in msg.tool_calls] == ["get_weather"]
    assert len(inner.requests) == 2
    second = inner.requests[1].messages
    assert second[-2].role == "assistant"
    assert second[-2].text == "Thought: I will look it up.\nAction: I will look it up for you"
    assert second[-1].role == "user"
    correction = second[-1].text
    assert "could not be used" in correction
    assert "Action Input" in correction and "Final Answer" in correction
    assert "get_weather" in correction  # it names the tools
    assert inner.requests[1].tools == []


async def test_after_the_last_retry_the_text_is_the_answer() -> None:
    bad = "Thought: hmm\nAction: ??? !!!"
    inner = ScriptedModel([bad, bad, bad])
    chunks = await collect(TextProtocolModel(inner, max_format_retries=2), PROMPT, TOOLS)
    assert len(inner.requests) == 3
    assert "".join(c.text for c in chunks) == bad
    assert chunks[-1].finish_reason == "stop"
    inner.assert_complete()


async def test_thought_only_reply_falls_back_to_the_thought_as_answer() -> None:
    inner = ScriptedModel(["Thought: The answer is 4."])
    msg = await TextProtocolModel(inner, max_format_retries=0).generate(PROMPT, TOOLS)
    assert len(inner.requests) == 1
    assert msg.text == "The answer is 4."


async def test_empty_reply_is_not_retried() -> None:
    inner = ScriptedModel([""])
    msg = await TextProtocolModel(inner).generate(PROMPT, TOOLS)
    assert msg.content == []  # the agent loop nudges empty replies itself
    assert len(inner.requests) == 1


async def test_retry_after_streamed_output_restarts_the_reply() -> None:
    first = [
        ChatResponse(thinking="native reasoning"),
        ChatResponse(text="Action: ???"),
        ChatResponse(finish_reason="stop"),
    ]
    inner = ScriptedModel([first, ACTION_REPLY])
    chunks = await collect(TextProtocolModel(inner), PROMPT, TOOLS)
    assert chunks[0].thinking == "native reasoning"
    restarts = [i for i, c in enumerate(chunks) if c.restart]
    assert len(restarts) == 1 and restarts[0] > 0
    msg = await TextProtocolModel(ScriptedModel([first, ACTION_REPLY])).generate(PROMPT, TOOLS)
    assert [b.thinking for b in msg.blocks(ThinkingBlock)] == ["I need the weather."]
    assert msg.tool_calls[0].input == {"city": "Paris"}


async def test_usage_of_every_attempt_is_reported_once() -> None:
    inner = ScriptedModel(["Action: ???", ACTION_REPLY], usage=TokenUsage(input_tokens=100, output_tokens=10))
    chunks = await collect(TextProtocolModel(inner), PROMPT, TOOLS)
    usages = [c.usage for c in chunks if c.usage is not None]
    assert usages == [TokenUsage(input_tokens=200, output_tokens=20)]


async def test_inner_thinking_is_passed_through() -> None:
    reply = [
        ChatResponse(thinking="deep thoughts"),
        ChatResponse(text="Final Answer: 42"),
        ChatResponse(finish_reason="stop"),
    ]
    msg = await TextProtocolModel(ScriptedModel([reply])).generate(PROMPT, TOOLS)
    assert msg.blocks(ThinkingBlock)[0].thinking.startswith("deep thoughts")
    assert msg.text == "42"


async def test_without_tools_calls_pass_straight_through() -> None:
    inner = ScriptedModel(["Thought: not a protocol reply"])
    prompt = [Msg.user("hi")]
    msg = await TextProtocolModel(inner).generate(prompt, [])
    assert msg.text == "Thought: not a protocol reply"
    assert inner.requests[0].messages == prompt
    assert inner.requests[0].options.stop is None


async def test_history_is_converted_to_protocol_text() -> None:
    history = [
        Msg.system("sys"),
        Msg.user("Weather in Paris and Rome?"),
        Msg(
            role="assistant",
            content=[
                ThinkingBlock(thinking="I need both."),
                ToolUseBlock(id="c1", name="get_weather", input={"city": "Paris"}),
                ToolUseBlock(id="c2", name="get_weather", input={"city": "罗马"}),
            ],
        ),
        Msg(
            role="user",
            content=[
                ToolResultBlock(id="c1", name="get_weather", output="Sunny"),
                ToolResultBlock(id="c2", name="get_weather", output="boom", state="error"),
            ],
        ),
        Msg(role="assistant", content=[ThinkingBlock(thinking="Rome failed."), TextBlock(text="Paris is sunny.")]),
        Msg.user("And Oslo?"),
        Msg(role="assistant", content=[ToolUseBlock(id="c3", name="get_weather", input={"city": "Oslo"})]),
        Msg(
            role="user",
            content=[
                ToolResultBlock(
                    id="c3",
                    name="get_weather",
                    output=[TextBlock(text="Snow"), ImageBlock(source="https://example.com/radar.png")],
                )
            ],
        ),
    ]
    inner = ScriptedModel(["Final Answer: Snow in Oslo."])
    await collect(TextProtocolModel(inner), history, TOOLS)
    sent = inner.requests[0].messages
    assert len(sent) == len(history)
    for msg in sent:
        assert not msg.has(ToolUseBlock) and not msg.has(ToolResultBlock) and not msg.has(ThinkingBlock)
    assert sent[2].role == "assistant"
    assert sent[2].text == (
        "Thought: I need both.\n"
        'Action: get_weather\nAction Input: {"city": "Paris"}\n'
        'Action: get_weather\nAction Input: {"city": "罗马"}'
    )
    assert sent[3].role == "user"
    assert sent[3].text == "Observation 1 (get_weather): Sunny\nObservation 2 (get_weather): [error] boom"
    assert sent[4].text == "Thought: Rome failed.\nFinal Answer: Paris is sunny."
    assert sent[6].text == 'Action: get_weather\nAction Input: {"city": "Oslo"}'
    assert sent[7].text == "Observation: Snow"
    assert sent[7].blocks(ImageBlock) == [ImageBlock(source="https://example.com/radar.png")]
    assert sent[1] is history[1] and sent[5] is history[5]  # untouched messages are not copied


async def test_history_with_tool_blocks_is_converted_even_without_tools() -> None:
    # The wrap-up step after max_iters may offer no tools; the transcript must still be text.
    history = [
        Msg.user("q"),
        Msg(role="assistant", content=[ToolUseBlock(id="c1", name="search", input={"query": "x"})]),
        Msg(role="user", content=[ToolResultBlock(id="c1", name="search", output="found")]),
    ]
    inner = ScriptedModel(["Thought: done\nFinal Answer: found it"])
    msg = await TextProtocolModel(inner).generate(history, [])
    assert msg.text == "found it"
    assert inner.requests[0].messages[2].text == "Observation: found"


async def test_tool_choice_none_is_rendered() -> None:
    inner = ScriptedModel(["Final Answer: ok"])
    await collect(TextProtocolModel(inner), PROMPT, TOOLS, options=GenerateOptions(tool_choice="none"))
    assert "Do not call any tool" in inner.requests[0].messages[0].text


async def test_tool_choice_is_enforced_with_a_correction() -> None:
    inner = ScriptedModel(["Final Answer: I would rather not.", ACTION_REPLY])
    opts = GenerateOptions(tool_choice={"name": "get_weather"})
    chunks = await collect(TextProtocolModel(inner), PROMPT, TOOLS, options=opts)
    assert "must call the tool get_weather" in inner.requests[1].messages[-1].text
    assert not any(c.text for c in chunks) and not any(c.restart for c in chunks)  # the refusal was not streamed
    assert [tc.name for c in chunks for tc in c.tool_calls] == ["get_weather"]

    inner = ScriptedModel([ACTION_REPLY, "Final Answer: fine."])
    msg = await TextProtocolModel(inner).generate(PROMPT, TOOLS, GenerateOptions(tool_choice="none"))
    assert "no tool may be called" in inner.requests[1].messages[-1].text
    assert msg.text == "fine." and not msg.tool_calls

    inner = ScriptedModel(["Final Answer: no.", "Final Answer: still no."])
    msg = await TextProtocolModel(inner, max_format_retries=1).generate(
        PROMPT, TOOLS, GenerateOptions(tool_choice="required")
    )
    assert msg.text == "still no."  # out of retries: the reply stands, as a native model's would


async def test_prompt_is_cached_for_the_same_tools() -> None:
    model = TextProtocolModel(ScriptedModel([]))
    options = GenerateOptions()
    first = model._protocol_text(TOOLS, options)
    assert model._protocol_text(list(TOOLS), options) is first  # same schema objects: no re-render
    assert model._protocol_text(TOOLS, GenerateOptions(tool_choice="none")) is not first
    fewer = model.build_prompt(PROMPT, TOOLS[:1])[0].text
    assert "## get_weather" in fewer and "## search" not in fewer


async def test_inner_restart_discards_the_partial_reply() -> None:
    # e.g. a FallbackModel inside: the primary died mid-stream and the fallback starts over
    chunks_in = [
        ChatResponse(thinking="primary thinking"),
        ChatResponse(text="Thought: half a rep"),
        ChatResponse(restart="fallback"),
        ChatResponse(text=ACTION_REPLY),
        ChatResponse(finish_reason="stop"),
    ]
    chunks = await collect(TextProtocolModel(ScriptedModel([chunks_in])), PROMPT, TOOLS)
    assert [c.restart for c in chunks if c.restart] == ["fallback"]
    msg = await TextProtocolModel(ScriptedModel([chunks_in])).generate(PROMPT, TOOLS)
    assert [b.thinking for b in msg.blocks(ThinkingBlock)] == ["I need the weather."]
    assert msg.tool_calls[0].input == {"city": "Paris"}


async def test_identity_capabilities_and_close_are_forwarded() -> None:
    class TextOnly(ScriptedModel):
        provider = "textonly"
        supports_native_tools = False
        supports_vision = False

    closed: list[bool] = []

    class Closing(TextOnly):
        async def aclose(self) -> None:
            closed.append(True)

    inner = Closing([], name="tiny-llm")
    model = TextProtocolModel(inner)
    assert model.provider == "textonly"
    assert model.model_name == "tiny-llm"
    assert model.id == "textonly:tiny-llm"
    assert type(model).supports_native_tools is True
    assert model.supports_native_tools is True
    assert model.supports_vision is False
    assert model.supports_thinking is True  # ScriptedModel's
    await model.aclose()
    assert closed == [True]
    assert "TextProtocolModel" in repr(model)


def test_constructor_validates() -> None:
    with pytest.raises(UserError):
        TextProtocolModel("openai:gpt-4o")  # type: ignore[arg-type]
    with pytest.raises(UserError):
        TextProtocolModel(ScriptedModel([]), max_format_retries=-1)


def test_ensure_tool_calling() -> None:
    class TextOnly(ScriptedModel):
        supports_native_tools = False

    native = ScriptedModel([])
    text_only = TextOnly([])
    assert ensure_tool_calling(native, "native") is native
    assert ensure_tool_calling(text_only, "native") is text_only
    assert ensure_tool_calling(native, "auto") is native
    wrapped = ensure_tool_calling(text_only, "auto")
    assert isinstance(wrapped, TextProtocolModel) and wrapped.inner is text_only
    forced = ensure_tool_calling(native, "text")
    assert isinstance(forced, TextProtocolModel) and forced.inner is native
    assert ensure_tool_calling(forced, "text") is forced
    assert ensure_tool_calling(forced, "auto") is forced
    with pytest.raises(UserError):
        ensure_tool_calling(native, "sometimes")  # type: ignore[arg-type]


# ==================================================================================================
# end to end with the real agent
# ==================================================================================================
@tool(read_only=True)
async def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: City name.
    """
    return f"Sunny, 22 C in {city}."


async def test_react_agent_runs_tools_through_the_text_protocol() -> None:
    def answer(request: ModelRequest) -> str:
        # a "text-only model": it sees only text and answers from the Observation it was shown
        assert request.tools == []
        last = request.messages[-1]
        assert not last.has(ToolResultBlock)
        observation = last.text.removeprefix("Observation: ")
        return f"Thought: I have the result.\nFinal Answer: {observation}"

    inner = ScriptedModel(
        [
            "I can help with that!\nThought: I need the weather for Paris. Action: get_weather\n"
            "Action Input: {'city': 'Paris', } // the capital",
            answer,
        ]
    )
    toolkit = Toolkit()
    toolkit.register(get_weather)
    agent = ReActAgent(
        "forecaster",
        "You answer weather questions.",
        model=TextProtocolModel(inner),
        toolkit=toolkit,
        state_store=InMemoryStateStore(),
    )
    events = [e async for e in agent.stream_events("What's the weather in Paris?")]
    results = [e.result for e in events if isinstance(e, ev.ToolResult)]
    assert [(r.name, r.output, r.state) for r in results] == [("get_weather", "Sunny, 22 C in Paris.", "success")]
    final = events[-1]
    assert isinstance(final, ev.RunFinished)
    assert final.msg.text == "Sunny, 22 C in Paris."
    assert any(isinstance(e, ev.ThinkingDelta) for e in events)
    assert "".join(e.delta for e in events if isinstance(e, ev.TextDelta)) == "Sunny, 22 C in Paris."
    inner.assert_complete()
    second_prompt = inner.requests[1].messages
    assert 'Action: get_weather\nAction Input: {"city": "Paris"}' in second_prompt[-2].text
    assert json.loads(second_prompt[-2].text.split("Action Input: ", 1)[1]) == {"city": "Paris"}


async def test_react_agent_unknown_tool_goes_back_to_the_model() -> None:
    inner = ScriptedModel(
        [
            "Thought: try\nAction: teleport\nAction Input: {}",
            lambda req: f"Final Answer: {req.messages[-1].text}",
        ]
    )
    toolkit = Toolkit()
    toolkit.register(get_weather)
    agent = ReActAgent("bot", "", model=TextProtocolModel(inner), toolkit=toolkit, state_store=InMemoryStateStore())
    reply = await agent.call("go")
    assert reply.text.startswith("Observation: [error]")
    assert "teleport" in reply.text


def test_a_reply_that_is_only_a_code_block_keeps_its_fence() -> None:
    code = "```python\nprint('hello')\n```"
    assert parse_react(code, TOOLS).final_answer == code
    assert parse_react(code).final_answer == code


def test_json_data_is_not_mistaken_for_a_call_even_without_schemas() -> None:
    assert parse_react('{"name": "Alice", "age": 30}').final_answer == '{"name": "Alice", "age": 30}'
    assert parse_react('{"name": "lookup", "arguments": {"q": 1}}').actions == [("lookup", {"q": 1})]


@pytest.mark.parametrize(
    "text",
    [
        "{" * 5000,
        "Action: search\nAction Input: " + "[" * 5000,
        "Action: search\nAction Input: " + "{\n" * 2000,
        "Thought: x\n" + 'Action: search\nAction Input: {"query": "x"\n' * 100,
        "Action: f(" + "(" * 5000,
        "Thought: loop. " * 2000,
    ],
    ids=["braces", "deep-array", "brace-lines", "unclosed-loop", "parens", "long-thought"],
)
def test_degenerate_replies_do_not_raise(text: str) -> None:
    # Small models loop until max_tokens; json-repair recurses on deep nesting. Neither may crash a run.
    parsed = parse_react(text, TOOLS)
    assert parsed.error is not None or parsed.actions or parsed.final_answer is not None


async def test_leaked_control_tokens_are_never_streamed() -> None:
    reply = "Thought: simple.\nFinal Answer: 42 is the answer, and 3 < 5.<|im_end|>\n<|im_start|>user\nmore"
    chunks = await collect(TextProtocolModel(ScriptedModel([reply])), PROMPT, TOOLS)
    assert "".join(c.text for c in chunks) == "42 is the answer, and 3 < 5."
    assert not any(c.restart for c in chunks)


@pytest.mark.parametrize("size", [1, 4, 13])
@pytest.mark.parametrize("sample", CORPUS, ids=[s["id"] for s in CORPUS])
async def test_streamed_reply_equals_the_parse_however_it_is_chunked(sample: dict[str, Any], size: int) -> None:
    text = sample["text"]
    pieces = [ChatResponse(text=text[i : i + size]) for i in range(0, len(text), size)]
    model = TextProtocolModel(ScriptedModel([[*pieces, ChatResponse(finish_reason="stop")]]), max_format_retries=0)
    chunks = [c async for c in model.stream(PROMPT, TOOLS)]
    assert not any(c.restart for c in chunks), "streaming guessed wrong"
    msg = await TextProtocolModel(ScriptedModel([[*pieces]]), max_format_retries=0).generate(PROMPT, TOOLS)
    parsed = parse_react(text, TOOLS)
    if parsed.error is None:
        assert [(c.name, dict(c.input)) for c in msg.tool_calls] == parsed.actions
        assert msg.text == (parsed.final_answer if not parsed.actions else "")
        assert "".join(b.thinking for b in msg.blocks(ThinkingBlock)) == parsed.thought
    else:
        assert not msg.tool_calls  # fallback: the text is the answer
