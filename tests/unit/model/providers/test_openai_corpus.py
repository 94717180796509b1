"""The OpenAI-compatible adapter against a corpus of recorded-style replies from real servers.

Each file in ``openai_corpus/`` is one reply shape (OpenAI, Azure OpenAI, vLLM, Ollama, LM Studio,
DeepSeek, Gemini's OpenAI endpoint, OpenRouter, Together, Groq and quirks seen behind proxies) and
declares what the adapter must make of it: text, thinking, tool calls (name and parsed arguments),
finish reason, and where given usage, images or the typed error. ``.json`` files hold a whole
completion under ``body``; ``.sse`` files hold ``# key: value`` header lines, a ``---`` line, then
the stream as sent (``wire`` may ask for CRLF line ends, a BOM, or a plain body to a non-stream
request).

Every sample is served as bytes by a local aiohttp server and read through `OpenAIChatModel`, in its
own mode and in the other one (SSE folded from a plain body; a JSON body to a streaming request), and
the SSE samples are also cut at arbitrary byte boundaries (hypothesis) and served in those pieces:
the assembled `Msg` must not change.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import re
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt.errors import ModelAPIError, ModelBehaviorError
from agentrt.message import (
    Base64Source,
    ImageBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from agentrt.model._accumulate import META_ARGUMENTS_ERROR, ReplyAccumulator
from agentrt.model.providers._openai_format import StreamState, parse_chunk
from agentrt.model.providers._sse import SSEDecoder
from agentrt.model.providers.openai import OpenAIChatModel

CORPUS = Path(__file__).parent / "openai_corpus"
KEY = "sk-corpus-0123456789"
BOM = b"\xef\xbb\xbf"
GENERATED_ID = re.compile(r"call_[0-9a-f]{24}")
ERRORS = {"ModelAPIError": ModelAPIError, "ModelBehaviorError": ModelBehaviorError}


# --------------------------------------------------------------------------------------------------
# the corpus
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sample:
    name: str
    expect: dict[str, Any]
    body: bytes
    sse: bool
    """The body is SSE frames (else one JSON completion)."""
    stream_request: bool
    """The recorded reply answered a streaming request."""
    content_type: str


def load(path: Path) -> Sample:
    if path.suffix == ".json":
        doc = json.loads(path.read_text(encoding="utf-8"))
        wire = doc.get("wire", {})
        body = json.dumps(doc["body"], ensure_ascii=False).encode()
        sample = Sample(path.name, doc["expect"], body, False, False, "application/json")
    else:
        head, sep, stream = path.read_text(encoding="utf-8").partition("\n---\n")
        assert sep, f"{path.name}: no '---' line between header and stream"
        meta = dict(line[2:].partition(": ")[::2] for line in head.splitlines())
        wire = json.loads(meta.get("wire", "{}"))
        if wire.get("crlf"):
            stream = stream.replace("\n", "\r\n")
        sample = Sample(
            path.name,
            json.loads(meta["expect"]),
            stream.encode(),
            True,
            not wire.get("non_stream", False),
            wire.get("content_type", "text/event-stream"),
        )
    if wire.get("bom"):
        sample = replace(sample, body=BOM + sample.body)
    return sample


SAMPLES = {p.name: load(p) for p in sorted(CORPUS.iterdir()) if p.suffix in (".json", ".sse")}
SSE_SAMPLES = sorted(name for name, s in SAMPLES.items() if s.sse and "error" not in s.expect)
PROVIDERS = ("openai", "azure", "vllm", "ollama", "lmstudio", "deepseek", "gemini", "openrouter", "together", "groq")


def test_the_corpus_covers_every_provider_both_ways() -> None:
    for provider in PROVIDERS:
        kinds = {Path(n).suffix for n in SAMPLES if n.startswith(provider + "_")}
        assert kinds == {".json", ".sse"}, f"{provider}: {sorted(kinds)}"


# --------------------------------------------------------------------------------------------------
# the server: answers each request with the next scripted body, written in the given pieces
# --------------------------------------------------------------------------------------------------
@dataclass
class Raw:
    body: bytes
    content_type: str
    pieces: list[int] | None = None
    """Cut offsets: the body is written in these pieces (chunked), a pause between writes."""


class RawServer:
    def __init__(self) -> None:
        self.replies: deque[Raw] = deque()
        self.requests: list[dict[str, Any]] = []
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(await request.json())
        reply = self.replies.popleft()
        if reply.pieces is None:
            return web.Response(body=reply.body, headers={"Content-Type": reply.content_type})
        resp = web.StreamResponse(headers={"Content-Type": reply.content_type})
        await resp.prepare(request)
        bounds = [0, *reply.pieces, len(reply.body)]
        for start, end in itertools.pairwise(bounds):
            await resp.write(reply.body[start:end])
            await asyncio.sleep(0.001)  # let the client read this piece on its own
        await resp.write_eof()
        return resp


@contextlib.asynccontextmanager
async def raw_server() -> AsyncIterator[RawServer]:
    server = RawServer()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", server.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    try:
        yield server
    finally:
        await runner.cleanup()


@pytest.fixture
async def server() -> AsyncIterator[RawServer]:
    async with raw_server() as s:
        yield s


@contextlib.asynccontextmanager
async def model_for(server: RawServer, *, stream: bool) -> AsyncIterator[OpenAIChatModel]:
    model = OpenAIChatModel("corpus-model", base_url=server.url, api_key=KEY, stream=stream)
    try:
        yield model
    finally:
        await model.aclose()


async def fetch(server: RawServer, sample: Sample, *, stream: bool, pieces: list[int] | None = None) -> Msg:
    """Serve `sample` (as a streamed body when `stream` and it is SSE) and return the assembled reply."""
    chunked = stream and sample.sse
    content_type = sample.content_type if stream or not sample.sse else "application/json"
    server.replies.append(Raw(sample.body, content_type, (pieces or []) if chunked else None))
    async with model_for(server, stream=stream) as model:
        return await model.generate([Msg.user("What's the weather?")])


# --------------------------------------------------------------------------------------------------
# expectations
# --------------------------------------------------------------------------------------------------
def summary(msg: Msg) -> dict[str, Any]:
    """What a corpus file declares, read from the assembled message."""
    calls = msg.blocks(ToolUseBlock)
    for call in calls:
        assert not (call.metadata or {}).get(META_ARGUMENTS_ERROR), f"{call.name}: {call.metadata}"
    return {
        "text": msg.text,
        "thinking": "".join(b.thinking for b in msg.blocks(ThinkingBlock)),
        "tool_calls": [{"name": c.name, "args": dict(c.input)} for c in calls],
        "finish": msg.metadata.get("finish_reason"),
    }


def check(msg: Msg, expect: dict[str, Any]) -> None:
    assert summary(msg) == {k: expect[k] for k in ("text", "thinking", "tool_calls", "finish")}
    assert all(type(b) in (TextBlock, ThinkingBlock, ToolUseBlock, ImageBlock) for b in msg.content)
    if "usage" in expect:
        assert msg.usage is not None
        got = {
            "input": msg.usage.input_tokens,
            "output": msg.usage.output_tokens,
            "cache_read": msg.usage.cache_read_tokens,
            "reasoning": msg.usage.reasoning_tokens,
        }
        assert {k: got[k] for k in expect["usage"]} == expect["usage"]
    images = [b.source for b in msg.blocks(ImageBlock)]
    assert images == [Base64Source(**i) if isinstance(i, dict) else i for i in expect.get("images", [])]


def comparable(msg: Msg) -> tuple[Any, ...]:
    """A message without what differs between two reads of the same bytes (ids made up for id-less calls)."""
    content = [
        ToolUseBlock(id="<generated>", name=b.name, input=b.input, metadata=b.metadata)
        if type(b) is ToolUseBlock and GENERATED_ID.fullmatch(b.id)
        else b
        for b in msg.content
    ]
    return (content, msg.metadata, msg.usage)


# --------------------------------------------------------------------------------------------------
# every sample, in its own mode and in the other
# --------------------------------------------------------------------------------------------------
async def assert_sample(server: RawServer, sample: Sample, *, stream: bool) -> None:
    expect = sample.expect
    if "error" in expect:
        error = expect["error"]
        with pytest.raises(ERRORS[error["type"]], match=error["match"]) as info:
            await fetch(server, sample, stream=stream)
        if "status" in error:
            assert getattr(info.value, "status", None) == error["status"]
        assert KEY not in str(info.value)
    else:
        check(await fetch(server, sample, stream=stream), expect)


@pytest.mark.parametrize("name", sorted(SAMPLES))
async def test_sample_as_recorded(server: RawServer, name: str) -> None:
    sample = SAMPLES[name]
    await assert_sample(server, sample, stream=sample.stream_request)
    assert server.requests[-1].get("stream", False) is sample.stream_request


@pytest.mark.parametrize("name", sorted(SAMPLES))
async def test_sample_in_the_other_mode(server: RawServer, name: str) -> None:
    # SSE samples as a plain body to a non-stream request (folded as a stream); JSON samples as the
    # answer of a server that ignores "stream": true.
    sample = SAMPLES[name]
    await assert_sample(server, sample, stream=not sample.stream_request if sample.sse else True)


# --------------------------------------------------------------------------------------------------
# SSE cut at arbitrary byte boundaries
# --------------------------------------------------------------------------------------------------
def test_any_split_gives_the_same_message() -> None:
    with asyncio.Runner() as runner:
        ctx = raw_server()
        srv = runner.run(ctx.__aenter__())
        try:
            whole = {n: comparable(runner.run(fetch(srv, SAMPLES[n], stream=True))) for n in SSE_SAMPLES}

            @settings(
                max_examples=120,
                deadline=None,
                database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
            )
            @given(data=st.data())
            def served_in_pieces(data: st.DataObject) -> None:
                name = data.draw(st.sampled_from(SSE_SAMPLES), label="sample")
                size = len(SAMPLES[name].body)
                cuts = data.draw(st.sets(st.integers(1, size - 1), max_size=12).map(sorted), label="cuts")
                msg = runner.run(fetch(srv, SAMPLES[name], stream=True, pieces=cuts))
                assert comparable(msg) == whole[name]

            served_in_pieces()
        finally:
            runner.run(ctx.__aexit__(None, None, None))


def _decode(body: bytes, cuts: list[int]) -> tuple[Any, ...]:
    decoder = SSEDecoder()
    state = StreamState()
    acc = ReplyAccumulator()
    bounds = [0, *cuts, len(body)]
    events = [e for a, b in itertools.pairwise(bounds) for e in decoder.feed(body[a:b])]
    for _, payload in events + decoder.flush():
        if payload != b"[DONE]" and (chunk := parse_chunk(json.loads(payload), state)) is not None:
            acc.add(chunk)
    return comparable(acc.message(name=None))


@settings(max_examples=300, deadline=None, database=None)
@given(data=st.data())
def test_any_split_decodes_alike_without_the_network(data: st.DataObject) -> None:
    # The HTTP test above cannot force every cut to reach the client as its own read; this one feeds
    # the decoder the exact pieces (down to one byte, inside a BOM or a CRLF).
    name = data.draw(st.sampled_from(SSE_SAMPLES), label="sample")
    body = SAMPLES[name].body
    cuts = data.draw(st.sets(st.integers(1, len(body) - 1), max_size=40).map(sorted), label="cuts")
    assert _decode(body, cuts) == _decode(body, [])


# --------------------------------------------------------------------------------------------------
# targeted shapes
# --------------------------------------------------------------------------------------------------
def sse_body(*events: Any, done: bool = True) -> bytes:
    out = b"".join(e if isinstance(e, bytes) else b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return out + (b"data: [DONE]\n\n" if done else b"")


def delta(d: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d, "finish_reason": finish}]}


async def stream_reply(server: RawServer, body: bytes, *, stream: bool = True) -> Msg:
    server.replies.append(Raw(body, "text/event-stream" if stream else "application/json", [] if stream else None))
    async with model_for(server, stream=stream) as model:
        return await model.generate([Msg.user("x")])


async def test_gemini_thought_signature_goes_back_on_its_call(server: RawServer) -> None:
    reply = await fetch(server, SAMPLES["gemini_parallel_tool_calls.sse"], stream=True)
    first, second = reply.blocks(ToolUseBlock)
    assert first.metadata == {
        "extra_content": {"google": {"thought_signature": "CiQBVKhc7vB3dG9rZW4tc2lnbmF0dXJlLW9uZQ=="}}
    }
    assert second.metadata is None
    results = Msg(
        role="user",
        content=[ToolResultBlock(id=c.id, name=c.name, output="18°C", state="success") for c in (first, second)],
    )
    server.replies.append(Raw(sse_body(delta({"content": "Both mild."}, "stop")), "text/event-stream", []))
    async with model_for(server, stream=True) as model:
        await model.generate([Msg.user("Weather?"), reply, results])
    sent = server.requests[-1]["messages"][1]["tool_calls"]
    assert sent[0]["extra_content"] == first.metadata["extra_content"]
    assert sent[0]["id"] == "function-call-15533467712208233461"
    assert "extra_content" not in sent[1]


async def test_tool_call_index_rules(server: RawServer) -> None:
    calls = [
        # OpenAI style: ids once, then index only, interleaved.
        delta({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": '{"x":'}}]}),
        delta({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "g", "arguments": ""}}]}),
        delta({"tool_calls": [{"index": 0, "function": {"arguments": " 1}"}}]}),
        delta({"tool_calls": [{"index": 1, "function": {"arguments": '{"y": 2}'}}]}),
        # an id seen before, repeated on a later delta, continues its call
        delta({"tool_calls": [{"id": "b", "function": {"arguments": ""}}]}),
        # no index, a new id: a new call; no id and no index: the last call goes on
        delta({"tool_calls": [{"id": "c", "function": {"name": "h", "arguments": '{"z"'}}]}),
        delta({"tool_calls": [{"function": {"arguments": ": 3}"}}]}),
        # an id that arrives after its call began at an index joins that call
        delta({"tool_calls": [{"index": 5, "function": {"name": "k", "arguments": "{"}}]}),
        delta({"tool_calls": [{"index": 5, "id": "late", "function": {"arguments": "}"}}]}),
        delta({}, "tool_calls"),
    ]
    msg = await stream_reply(server, sse_body(*calls))
    assert [(c.name, c.input) for c in msg.blocks(ToolUseBlock)] == [
        ("f", {"x": 1}),
        ("g", {"y": 2}),
        ("h", {"z": 3}),
        ("k", {}),
    ]
    assert [c.id for c in msg.blocks(ToolUseBlock)][:3] == ["a", "b", "c"]


async def test_unknown_content_parts_are_skipped_with_a_debug_log(
    server: RawServer, caplog: pytest.LogCaptureFixture
) -> None:
    body = sse_body(delta({"content": [{"type": "hologram", "data": "?"}, {"type": "text", "text": "ok"}]}, "stop"))
    with caplog.at_level(logging.DEBUG, logger="agentrt.model"):
        msg = await stream_reply(server, body)
    assert msg.content == [TextBlock(text="ok")]
    assert any("hologram" in r.getMessage() for r in caplog.records)


async def test_image_and_refusal_parts(server: RawServer) -> None:
    parts = [
        {"type": "text", "text": "Look:"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        {"type": "output_image", "image_url": "data:image/webp;base64,UklGRg=="},
    ]
    msg = await stream_reply(server, sse_body(delta({"content": parts}, "stop")))
    assert msg.content == [
        TextBlock(text="Look:"),
        ImageBlock(source="https://example.com/cat.png"),
        ImageBlock(source=Base64Source(media_type="image/webp", data="UklGRg==")),
    ]
    refusal = sse_body(delta({"content": [{"type": "refusal", "refusal": "No."}]}), delta({}, "stop"))
    msg = await stream_reply(server, refusal)
    assert (msg.text, msg.metadata) == ("No.", {"finish_reason": "content_filter"})


async def test_thinking_part_with_a_signature(server: RawServer) -> None:
    part = {"type": "thinking", "thinking": "Hmm.", "signature": "sig-1"}
    body = json.dumps({"choices": [{"message": {"content": [part, {"type": "text", "text": "Yes."}]}}]}).encode()
    msg = await stream_reply(server, body, stream=False)
    assert msg.content == [ThinkingBlock(thinking="Hmm.", signature="sig-1"), TextBlock(text="Yes.")]


async def test_heartbeats_and_null_errors_are_no_errors(server: RawServer) -> None:
    body = sse_body(
        b"data:\n\n",
        b"data: \r\n\r\n",
        {**delta({"content": "fine"}), "error": None},
        b"event: ping\ndata: {}\n\n",
        delta({}, "stop"),
        b"data:  [DONE] \n\n",
        done=False,
    )
    msg = await stream_reply(server, body)
    assert (msg.text, msg.metadata) == ("fine", {"finish_reason": "stop"})


@pytest.mark.parametrize(
    ("wire", "finish"),
    [
        ("eos", "stop"),
        ("STOP", "stop"),
        ("MAX_TOKENS", "length"),
        ("model_length", "length"),
        ("end_turn", "stop"),
        ("insufficient_system_resource", "insufficient_system_resource"),
    ],
)
async def test_finish_reason_spellings(server: RawServer, wire: str, finish: str) -> None:
    msg = await stream_reply(server, sse_body(delta({"content": "x"}), delta({}, wire)))
    assert msg.metadata == {"finish_reason": finish}


async def test_error_event_with_plain_text_data(server: RawServer) -> None:
    body = sse_body(delta({"content": "Hel"}), b"event: error\ndata: upstream overloaded\n\n", done=False)
    with pytest.raises(ModelAPIError, match="upstream overloaded") as info:
        await stream_reply(server, body)
    assert info.value.status is None


async def test_vllm_error_body_with_status_200(server: RawServer) -> None:
    body = {"object": "error", "message": "max_tokens is too large", "type": "BadRequestError", "code": 400}
    with pytest.raises(ModelAPIError, match="max_tokens is too large") as info:
        await stream_reply(server, json.dumps(body).encode(), stream=False)
    assert info.value.status == 400


async def test_json_body_with_a_bom(server: RawServer) -> None:
    body = BOM + json.dumps({"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]}).encode()
    assert (await stream_reply(server, body, stream=False)).text == "ok"


@pytest.mark.parametrize(
    "chunk",
    [
        {"choices": "oops"},
        {"choices": [{"index": 0, "delta": ["content"]}]},
        {"choices": [{"index": 0, "delta": {"content": "a", "tool_calls": 5}}]},
    ],
)
async def test_odd_shapes_are_typed_errors_never_raw_ones(server: RawServer, chunk: dict[str, Any]) -> None:
    with contextlib.suppress(ModelBehaviorError):  # a typed error is fine; a TypeError or KeyError is not
        await stream_reply(server, sse_body(chunk, delta({}, "stop")))


async def test_unreadable_chunk_is_a_behavior_error(server: RawServer) -> None:
    with pytest.raises(ModelBehaviorError, match="unreadable stream chunk"):
        await stream_reply(server, sse_body(b"data: {not json\n\n"))


def test_decoder_drops_a_bom_split_over_reads() -> None:
    for cut in range(1, 5):
        decoder = SSEDecoder()
        stream = BOM + b'data: {"a": 1}\n\n'
        events = decoder.feed(stream[:cut]) + decoder.feed(stream[cut:]) + decoder.flush()
        assert events == [("message", b'{"a": 1}')], cut
    decoder = SSEDecoder()
    assert decoder.feed(b"\xef") == [] and decoder.feed(b"\xbb") == []
    assert decoder.feed(b"\xbf: hi\n\ndata: x\n\n") == [("message", b"x")]


def test_without_a_stream_state_a_chunk_keeps_its_wire_index() -> None:
    chunk = parse_chunk(delta({"tool_calls": [{"index": 3, "function": {"arguments": "{}"}}]}))
    assert chunk is not None and chunk.tool_calls[0].index == 3
