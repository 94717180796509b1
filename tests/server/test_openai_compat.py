"""``POST /v1/chat/completions`` in process (the official openai client against a real server process is in
tests/integration/test_interop_clients.py)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from server_agents import ALICE, CITATIONS, knowledge_agent, parse_sse

from agentrt import ToolResultBlock
from agentrt.server.app import pending_calls
from agentrt.state import InMemoryStateStore

URL = "/v1/chat/completions"


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


async def complete(client: httpx.AsyncClient, messages: list[Any], session: str | None = None, **extra: Any) -> Any:
    headers = {**ALICE, **({"X-Session-Id": session} if session else {})}
    r = await client.post(URL, json={"model": "bot", "messages": messages, **extra}, headers=headers)
    assert r.status_code == 200, r.text
    return r


async def test_completion_shape_matches_the_openai_types(client: httpx.AsyncClient) -> None:
    r = await complete(client, [user("hello")], "c1")
    completion = ChatCompletion.model_validate(r.json())
    assert completion.object == "chat.completion"
    assert completion.model == "bot"
    assert completion.choices[0].message.content == "echo: hello (turn 1)"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert r.headers["x-session-id"] == "c1"


async def test_streaming_chunks_and_done(client: httpx.AsyncClient) -> None:
    r = await complete(client, [user("add")], "c1", stream=True, stream_options={"include_usage": True})
    frames = parse_sse(r.text)
    assert frames[-1]["data"] == "[DONE]"
    chunks = [ChatCompletionChunk.model_validate(json.loads(f["data"])) for f in frames[:-1]]
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "done: add=5 [success]"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    # the same text without streaming
    r2 = await complete(client, [user("add")], "c2")
    assert r2.json()["choices"][0]["message"]["content"] == text


async def test_fresh_session_is_seeded_with_the_history(client: httpx.AsyncClient, store: InMemoryStateStore) -> None:
    messages = [{"role": "system", "content": "ignored"}, user("a"), assistant("x"), user("b")]
    r = await complete(client, messages)
    assert r.json()["choices"][0]["message"]["content"] == "echo: b (turn 2)"
    session = r.headers["x-session-id"]
    assert session.startswith("chat-")
    state = await store.load("alice", session, agent="bot")
    assert state is not None
    assert [m.text for m in state.messages] == ["a", "x", "b", "echo: b (turn 2)"]
    # continuing it: only the last user message is new input, the stored history is the context
    r = await complete(client, [*messages, assistant("whatever the client kept"), user("c")], session)
    assert r.json()["choices"][0]["message"]["content"] == "echo: c (turn 3)"


async def test_user_field_chooses_the_session(client: httpx.AsyncClient) -> None:
    await complete(client, [user("one")], user="end-user-7")
    r = await complete(client, [user("two")], user="end-user-7")
    assert r.json()["choices"][0]["message"]["content"] == "echo: two (turn 2)"
    assert r.headers["x-session-id"] == "end-user-7"
    state = await client.get("/v1/agents/bot/sessions/end-user-7", headers=ALICE)
    assert state.json()["message_count"] == 4


async def test_approval_as_tool_calls_answered_by_a_tool_message(client: httpx.AsyncClient) -> None:
    r = await complete(client, [user("danger prod")], "c1")
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    [call] = choice["message"]["tool_calls"]
    assert call["id"] == "call-danger"
    assert json.loads(call["function"]["arguments"]) == {"target": "prod"}
    assert "[approval needed]" in choice["message"]["content"]
    ChatCompletion.model_validate(r.json())
    history = [user("danger prod"), choice["message"]]
    r = await complete(client, [*history, {"role": "tool", "tool_call_id": "call-danger", "content": "approve"}], "c1")
    assert r.json()["choices"][0]["message"]["content"] == "done: danger=did prod [success]"


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("yes", "done: danger=did prod [success]"),
        ("Deny.", "done: danger=The user denied this tool call. [denied]"),
        ("use staging instead", "echo: use staging instead (turn 2)"),
    ],
)
async def test_approval_answered_by_a_user_message(client: httpx.AsyncClient, answer: str, expected: str) -> None:
    await complete(client, [user("danger prod")], "c1")
    r = await complete(client, [user(answer)], "c1")
    content = r.json()["choices"][0]["message"]["content"]
    if answer.startswith("use"):
        # refused, and the text reaches the agent after the denial
        state = (await client.get("/v1/agents/bot/sessions/c1", headers=ALICE)).json()
        texts = [b.get("output") or b.get("text") for m in state["messages"] for b in m["content"]]
        assert any("denied" in str(t) for t in texts)
        assert "use staging instead" in texts
    assert content.startswith(expected.split(" (")[0]) if answer.startswith("use") else content == expected


async def test_external_tool_answered_by_a_tool_message(client: httpx.AsyncClient) -> None:
    r = await complete(client, [user("external weather")], "c1", stream=True)
    frames = parse_sse(r.text)
    chunks = [json.loads(f["data"]) for f in frames[:-1]]
    calls = [c for chunk in chunks for c in chunk["choices"][0]["delta"].get("tool_calls", [])]
    assert [c["id"] for c in calls] == ["call-lookup"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    r = await client.post(
        URL,
        json={"model": "bot", "messages": [user("hi")]},
        headers={**ALICE, "X-Session-Id": "c1"},
    )
    assert r.status_code == 409  # the result is owed first
    r = await complete(client, [{"role": "tool", "tool_call_id": "call-lookup", "content": "rain"}], "c1")
    assert r.json()["choices"][0]["message"]["content"] == "done: lookup=rain [success]"


UNKNOWN_TOOL = '{"error": "Unknown tool name: \'danger\'. No tools available."}'


@pytest.mark.parametrize("answer", [UNKNOWN_TOOL, "This client cannot run tools."])
async def test_a_tool_message_that_is_not_an_approval_denies_the_call_with_its_text(
    client: httpx.AsyncClient, store: InMemoryStateStore, answer: str
) -> None:
    # What a generic framework (pydantic-ai) sends back for a tool call it does not know.
    paused = (await complete(client, [user("danger prod")], "c1")).json()["choices"][0]["message"]
    reply = {"role": "tool", "tool_call_id": "call-danger", "content": answer}
    r = await complete(client, [user("danger prod"), paused, reply], "c1")
    content = r.json()["choices"][0]["message"]["content"]
    assert content == f"done: danger=The user denied this tool call. Reason: {answer} [denied]"  # the model saw it
    state = await store.load("alice", "c1", agent="bot")
    assert state is not None and pending_calls(state) == []
    results = [b for m in state.messages for b in m.content if isinstance(b, ToolResultBlock)]
    assert [(b.id, b.state) for b in results] == [("call-danger", "denied")]  # the tool never ran
    r = await complete(client, [user("and now?")], "c1")  # the session takes new input again
    assert r.json()["choices"][0]["message"]["content"].startswith("echo: and now?")


async def test_a_malformed_json_approval_is_422_with_a_code(client: httpx.AsyncClient) -> None:
    await complete(client, [user("danger prod")], "c1")
    bad = {"role": "tool", "tool_call_id": "call-danger", "content": '{"confirmed": "maybe"}'}
    r = await client.post(URL, json={"model": "bot", "messages": [bad]}, headers={**ALICE, "X-Session-Id": "c1"})
    assert r.status_code == 422
    assert r.json()["error"]["code"] == "invalid_confirmation"
    assert r.json()["error"]["param"] == "messages.0.content"


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"model": "ghost", "messages": [{"role": "user", "content": "x"}]}, 404),
        ({"model": "bot", "messages": []}, 422),
        ({"model": "bot"}, 422),
        ({"model": "bot", "messages": [{"role": "wizard", "content": "x"}]}, 422),
        ({"model": "bot", "messages": [{"role": "assistant", "content": "x"}]}, 422),
        ({"model": "bot", "messages": [{"role": "user", "content": "x"}], "n": 2}, 422),
        ({"model": "bot", "messages": [{"role": "tool", "content": "x"}, {"role": "user", "content": "x"}]}, 422),
    ],
)
async def test_bad_requests(client: httpx.AsyncClient, body: Any, status: int) -> None:
    r = await client.post(URL, json=body, headers=ALICE)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) >= {"message", "type", "code", "param"}
    assert isinstance(error["code"], str) and error["code"]


async def test_sampling_fields_are_accepted(client: httpx.AsyncClient) -> None:
    r = await complete(client, [user("hi")], "c1", temperature=0.2, max_tokens=10, tools=[], seed=1)
    assert r.json()["choices"][0]["message"]["content"] == "echo: hi (turn 1)"


# -- knowledge citations -------------------------------------------------------------------------------------------
async def kb_client(make_app: Any) -> httpx.AsyncClient:
    app = make_app(agents={"kb": knowledge_agent("kb")})
    return httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test")


async def test_a_completion_carries_the_citations_of_its_reply(make_app: Any, store: InMemoryStateStore) -> None:
    async with await kb_client(make_app) as client:
        body = {"model": "kb", "messages": [user("How many vacation days?")]}
        r = await client.post(URL, json=body, headers={**ALICE, "X-Session-Id": "k1"})
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["citations"] == CITATIONS
    completion = ChatCompletion.model_validate(data)  # the extra field leaves the OpenAI shape intact
    assert completion.choices[0].message.content == "25 days [1]; expenses monthly [2]."
    assert completion.model_extra == {"citations": CITATIONS}
    state = await store.load("alice", "k1", agent="kb")
    assert state is not None and state.messages[-1].metadata["citations"] == CITATIONS


async def test_a_streamed_completion_carries_the_citations_on_its_finishing_chunk(make_app: Any) -> None:
    async with await kb_client(make_app) as client:
        body = {"model": "kb", "messages": [user("vacation?")], "stream": True}
        r = await client.post(URL, json=body, headers=ALICE)
    frames = parse_sse(r.text)
    assert frames[-1]["data"] == "[DONE]"
    raw = [json.loads(f["data"]) for f in frames[:-1]]
    chunks = [ChatCompletionChunk.model_validate(c) for c in raw]
    with_citations = [c for c in raw if "citations" in c]
    assert len(with_citations) == 1 and with_citations[0]["citations"] == CITATIONS
    assert with_citations[0]["choices"][0]["finish_reason"] == "stop"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "25 days [1]; expenses monthly [2]."


async def test_a_completion_without_citations_has_no_citations_field(client: httpx.AsyncClient) -> None:
    r = await complete(client, [user("hello")], "c1")
    assert "citations" not in r.json()
    r = await complete(client, [user("hello")], "c2", stream=True)
    assert all("citations" not in f["data"] for f in parse_sse(r.text))
