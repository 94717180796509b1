"""``/v1/knowledge``: each user's knowledge bases over HTTP, sealed from the other users', uploads path-safe.

Two API keys (alice, bob) on one store: every route is checked for what the other user can see and
for what is still there afterwards. A per-user `Knowledge` served to both through a `ReActAgent`
only ever searches the caller's own documents (the tool result and the reply's citations).
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_agents import ALICE, BOB, KEYS

from agentrt import ReActAgent, ToolResultBlock, ToolUseBlock
from agentrt.knowledge import Knowledge, MemoryKnowledgeStore
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.server import create_app
from agentrt.server.knowledge_routes import safe_name
from agentrt.state import InMemoryStateStore

ALICE_DOC = "# Zanzibar plan\n\nThe zanzibar launch code is kept in the blue vault."
BOB_DOC = "# Gardening\n\nTomatoes need six hours of sun a day."


def planner(request: ModelRequest) -> Any:
    """Search the knowledge base for the user's words, then answer from the result."""
    if request.messages[-1].blocks(ToolResultBlock):
        return "Answered from the knowledge base [1]."
    return ToolUseBlock(name="search_knowledge", input={"query": request.last_user_text})


def make(store: MemoryKnowledgeStore, **options: Any) -> Any:
    agent = ReActAgent(
        "bot",
        "Answer from the documents.",
        model=ScriptedModel.from_function(planner, record=False),
        knowledge=Knowledge("docs", store=store, per_user=True),
        state_store=InMemoryStateStore(),
    )
    return create_app(
        {"bot": agent},
        api_keys=KEYS,
        knowledge=Knowledge("docs", store=store),
        facades=("openai",),
        disconnect_grace=0.0,
        **options,
    )


@pytest.fixture
def kb_store() -> MemoryKnowledgeStore:
    return MemoryKnowledgeStore()


@pytest.fixture
async def client(kb_store: MemoryKnowledgeStore) -> AsyncIterator[httpx.AsyncClient]:
    app = make(kb_store, max_upload_bytes=64 * 1024)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as c:
        yield c


async def add_text(client: httpx.AsyncClient, headers: dict[str, str], text: str, source: str, kb: str = "docs") -> Any:
    response = await client.post(
        f"/v1/knowledge/{kb}/documents", json={"text": text, "source": source}, headers=headers
    )
    assert response.status_code in (200, 201), response.text
    return response.json()


async def test_json_add_list_search_chunk_delete(client: httpx.AsyncClient) -> None:
    first = await add_text(client, ALICE, ALICE_DOC, "plan.md")
    assert first == {"kb": "docs", "added": ["plan.md"], "skipped": [], "failed": [], "chunks": 1}
    again = await client.post(
        "/v1/knowledge/docs/documents", json={"text": ALICE_DOC, "source": "plan.md"}, headers=ALICE
    )
    assert again.status_code == 200 and again.json()["skipped"] == ["plan.md"], "an unchanged document is a no-op"

    kbs = (await client.get("/v1/knowledge", headers=ALICE)).json()
    assert kbs == {"knowledge_bases": [{"name": "docs"}], "default": "docs"}
    docs = (await client.get("/v1/knowledge/docs/documents", headers=ALICE)).json()
    assert [(d["source"], d["title"], d["chunk_count"]) for d in docs["documents"]] == [("plan.md", "Zanzibar plan", 1)]

    found = (
        await client.get("/v1/knowledge/docs/search", params={"q": "zanzibar vault", "k": 3}, headers=ALICE)
    ).json()
    assert [p["source"] for p in found["passages"]] == ["plan.md"]
    passage = found["passages"][0]
    assert "blue vault" in passage["text"] and passage["location"] == "Zanzibar plan"

    chunk = await client.get(f"/v1/knowledge/docs/chunks/{passage['chunk_id']}", headers=ALICE)
    assert chunk.status_code == 200
    assert chunk.json() == {
        "kb": "docs",
        "chunk_id": passage["chunk_id"],
        "text": passage["text"],
        "source": "plan.md",
        "title": "Zanzibar plan",
        "location": "Zanzibar plan",
    }
    deleted = await client.delete("/v1/knowledge/docs/documents", params={"source": "plan.md"}, headers=ALICE)
    assert deleted.status_code == 204
    assert (await client.get("/v1/knowledge/docs/documents", headers=ALICE)).json()["documents"] == []
    gone = await client.get(f"/v1/knowledge/docs/chunks/{passage['chunk_id']}", headers=ALICE)
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "chunk_not_found"


async def test_a_user_never_sees_or_changes_another_users_knowledge(
    client: httpx.AsyncClient, kb_store: MemoryKnowledgeStore
) -> None:
    await add_text(client, ALICE, ALICE_DOC, "plan.md")
    await add_text(client, ALICE, "Second base.", "other.md", kb="private")
    found = (await client.get("/v1/knowledge/docs/search", params={"q": "zanzibar"}, headers=ALICE)).json()
    chunk_id = found["passages"][0]["chunk_id"]

    assert (await client.get("/v1/knowledge", headers=BOB)).json()["knowledge_bases"] == []
    assert (await client.get("/v1/knowledge/docs/documents", headers=BOB)).json()["documents"] == []
    search = await client.get("/v1/knowledge/docs/search", params={"q": "zanzibar launch code"}, headers=BOB)
    assert search.status_code == 200 and search.json()["passages"] == []
    chunk = await client.get(f"/v1/knowledge/docs/chunks/{chunk_id}", headers=BOB)
    assert chunk.status_code == 404
    delete = await client.delete("/v1/knowledge/docs/documents", params={"source": "plan.md"}, headers=BOB)
    assert delete.status_code == 404
    drop = await client.delete("/v1/knowledge/private", headers=BOB)
    assert drop.status_code == 404

    # Bob's own document of the same source name does not touch Alice's.
    await add_text(client, BOB, BOB_DOC, "plan.md")
    assert (
        await client.delete("/v1/knowledge/docs/documents", params={"source": "plan.md"}, headers=BOB)
    ).status_code == 204

    # Alice's data is all still there, in the store itself.
    assert [d.source for d in await kb_store.documents("alice", "docs")] == ["plan.md"]
    assert [d.source for d in await kb_store.documents("alice", "private")] == ["other.md"]
    assert await kb_store.documents("bob", "docs") == []
    mine = await client.get(f"/v1/knowledge/docs/chunks/{chunk_id}", headers=ALICE)
    assert mine.status_code == 200 and "blue vault" in mine.json()["text"]
    assert (await client.delete("/v1/knowledge/private", headers=ALICE)).status_code == 204
    assert await kb_store.kbs("alice") == ["docs"]


async def test_every_route_needs_an_api_key(client: httpx.AsyncClient) -> None:
    for method, path in [
        ("GET", "/v1/knowledge"),
        ("GET", "/v1/knowledge/docs/documents"),
        ("POST", "/v1/knowledge/docs/documents"),
        ("DELETE", "/v1/knowledge/docs/documents?source=a"),
        ("DELETE", "/v1/knowledge/docs"),
        ("GET", "/v1/knowledge/docs/search?q=x"),
        ("GET", "/v1/knowledge/docs/chunks/abc"),
    ]:
        response = await client.request(method, path)
        assert response.status_code == 401, (method, path)
        bad = await client.request(method, path, headers={"Authorization": "Bearer nope"})
        assert bad.status_code == 401, (method, path)


async def test_multipart_upload_is_path_safe(client: httpx.AsyncClient, tmp_path: Path) -> None:
    target = tmp_path / "pwned.md"
    files = {"file": (str(target), io.BytesIO(b"# Escape\n\nThe quokka smiles."), "text/markdown")}
    response = await client.post("/v1/knowledge/docs/documents", files=files, headers=ALICE)
    assert response.status_code == 201, response.text
    assert response.json()["added"] == ["pwned.md"], "the source is the file's name, no folder"
    assert not target.exists(), "the client's filename is never a path on the server"
    traversal = {"file": ("../../../../tmp/evil.txt", io.BytesIO(b"quokka again"), "text/plain")}
    response = await client.post(
        "/v1/knowledge/docs/documents", files=traversal, data={"metadata": '{"tags": ["t1"]}'}, headers=ALICE
    )
    assert response.status_code == 201 and response.json()["added"] == ["evil.txt"]
    docs = (await client.get("/v1/knowledge/docs/documents", headers=ALICE)).json()["documents"]
    assert {d["source"]: d["metadata"].get("tags") for d in docs} == {"pwned.md": None, "evil.txt": ["t1"]}
    found = (await client.get("/v1/knowledge/docs/search", params={"q": "quokka", "tag": "t1"}, headers=ALICE)).json()
    assert [p["source"] for p in found["passages"]] == ["evil.txt"]


async def test_a_json_text_is_never_read_as_a_path(client: httpx.AsyncClient, tmp_path: Path) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("The wombat password is hunter2.")
    report = await add_text(client, ALICE, str(secret), "looks-like-a-path")
    assert report["added"] == ["looks-like-a-path"]
    found = (await client.get("/v1/knowledge/docs/search", params={"q": "wombat hunter2"}, headers=ALICE)).json()
    assert found["passages"] == [], "the server file's content was not indexed"


async def test_upload_limits_and_types(client: httpx.AsyncClient) -> None:
    big = {"file": ("big.txt", io.BytesIO(b"a " * 40 * 1024), "text/plain")}
    response = await client.post("/v1/knowledge/docs/documents", files=big, headers=ALICE)
    assert response.status_code == 413 and response.json()["error"]["code"] == "request_too_large"
    huge = {"file": ("huge.txt", io.BytesIO(b"a" * 200 * 1024), "text/plain")}
    response = await client.post("/v1/knowledge/docs/documents", files=huge, headers=ALICE)
    assert response.status_code == 413
    text = await client.post("/v1/knowledge/docs/documents", json={"text": "x " * 40_000}, headers=ALICE)
    assert text.status_code == 413
    for name in ("run.exe", "noext", "archive.tar.gz", "", ".."):
        bad = {"file": (name, io.BytesIO(b"data"), "application/octet-stream")}
        response = await client.post("/v1/knowledge/docs/documents", files=bad, headers=ALICE)
        assert response.status_code in (415, 422), (name, response.text)
    other = await client.post(
        "/v1/knowledge/docs/documents", content=b"hello", headers={**ALICE, "Content-Type": "text/plain"}
    )
    assert other.status_code == 415
    broken = {"file": ("broken.pdf", io.BytesIO(b"%PDF-1.7 not really a pdf"), "application/pdf")}
    response = await client.post("/v1/knowledge/docs/documents", files=broken, headers=ALICE)
    assert response.status_code == 422 and response.json()["error"]["code"] == "unreadable_document"
    assert "agentrt-upload" not in response.text, "the temporary path does not leak"
    assert (await client.get("/v1/knowledge/docs/documents", headers=ALICE)).json()["documents"] == []


async def test_bad_input_is_422_and_unknown_is_404(client: httpx.AsyncClient) -> None:
    await add_text(client, ALICE, ALICE_DOC, "plan.md")
    for path in ("/v1/knowledge/bad%20name/documents", "/v1/knowledge/" + "x" * 129 + "/documents"):
        response = await client.get(path, headers=ALICE)
        assert response.status_code == 422 and response.json()["error"]["code"] == "invalid_kb", path
    for params in (
        {"q": "x", "k": "0"},
        {"q": "x", "k": "101"},
        {"q": "x", "k": "-1"},
        {"q": "x", "k": "a"},
        {"q": ""},
        {},
    ):
        response = await client.get("/v1/knowledge/docs/search", params=params, headers=ALICE)
        assert response.status_code == 422, params
    # An end user's filters are held to the model's rules: no blank or oversized values, at most 50.
    bad_filters: tuple[dict[str, str | list[str]], ...] = (
        {"q": "x", "source": ""},
        {"q": "x", "tag": "t" * 501},
        {"q": "x", "source": [f"s{i}.md" for i in range(51)]},
    )
    for bad in bad_filters:
        response = await client.get("/v1/knowledge/docs/search", params=bad, headers=ALICE)
        assert response.status_code == 422 and response.json()["error"]["code"] == "invalid_query_parameter", bad
    fine = await client.get("/v1/knowledge/docs/search", params={"q": "x", "source": "plan.md"}, headers=ALICE)
    assert fine.status_code == 200
    assert (await client.get("/v1/knowledge/docs/chunks/nope", headers=ALICE)).status_code == 404
    assert (await client.delete("/v1/knowledge/docs/documents", headers=ALICE)).status_code == 422
    missing = await client.delete("/v1/knowledge/docs/documents", params={"source": "nope.md"}, headers=ALICE)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "document_not_found"
    for body in ({"text": ""}, {"text": 3}, {"text": "x", "metadata": [1]}, {"text": "x", "source": ""}):
        response = await client.post("/v1/knowledge/docs/documents", json=body, headers=ALICE)
        assert response.status_code == 422, body
    not_json = await client.post(
        "/v1/knowledge/docs/documents", content=b"{", headers={**ALICE, "Content-Type": "application/json"}
    )
    assert not_json.status_code == 400


async def test_the_openapi_document_describes_the_routes(client: httpx.AsyncClient) -> None:
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert {"/v1/knowledge", "/v1/knowledge/{kb}/documents", "/v1/knowledge/{kb}/search"} <= set(paths)
    assert set(paths["/v1/knowledge/{kb}/documents"]) == {"get", "post", "delete"}
    assert "/v1/knowledge/{kb}/chunks/{chunk_id}" in paths


async def test_without_knowledge_no_routes(make_app: Any) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(make_app()), base_url="http://test") as c:
        assert (await c.get("/v1/knowledge", headers=ALICE)).status_code == 404
        assert "/v1/knowledge" not in (await c.get("/openapi.json")).json()["paths"]


async def test_a_per_user_agent_searches_only_the_callers_knowledge(
    client: httpx.AsyncClient, kb_store: MemoryKnowledgeStore
) -> None:
    await add_text(client, ALICE, ALICE_DOC, "plan.md")
    await add_text(client, BOB, BOB_DOC, "garden.md")

    async def ask(headers: dict[str, str], session: str, question: str) -> tuple[str, list[dict[str, Any]]]:
        response = await client.post(
            f"/v1/agents/bot/sessions/{session}/messages", json={"input": question}, headers=headers
        )
        assert response.status_code == 200, response.text
        citations = response.json()["message"]["metadata"].get("citations", [])
        state = (await client.get(f"/v1/agents/bot/sessions/{session}", headers=headers)).json()
        results = [
            block
            for msg in state["messages"]
            for block in msg["content"]
            if block["type"] == "tool_result" and block["name"] == "search_knowledge"
        ]
        assert len(results) == 1
        output = results[0]["output"]
        text = output if isinstance(output, str) else " ".join(b.get("text", "") for b in output)
        return text, citations

    text, citations = await ask(BOB, "s1", "zanzibar launch code vault")
    assert "zanzibar" not in text.lower() and "vault" not in text
    assert text == "No passages of the knowledge base match that query."
    assert citations == []

    text, citations = await ask(BOB, "s2", "tomatoes sun")
    assert "six hours of sun" in text and "garden.md" in text
    assert [c["source"] for c in citations] == ["garden.md"]

    text, citations = await ask(ALICE, "s1", "zanzibar launch code vault")
    assert "blue vault" in text
    assert [c["source"] for c in citations] == ["plan.md"]
    chunk = await client.get(f"/v1/knowledge/docs/chunks/{citations[0]['chunk_id']}", headers=ALICE)
    assert chunk.status_code == 200, "a citation's chunk id opens the passage view"
    assert (await client.get(f"/v1/knowledge/docs/chunks/{citations[0]['chunk_id']}", headers=BOB)).status_code == 404
    assert [d.source for d in await kb_store.documents("alice", "docs")] == ["plan.md"]


def test_safe_name() -> None:
    assert safe_name("../../etc/passwd.md") == "passwd.md"
    assert safe_name("C:\\Users\\x\\report.PDF") == "report.PDF"
    assert safe_name("/abs/path/notes.txt") == "notes.txt"
    assert safe_name("..") is None
    assert safe_name("") is None and safe_name(None) is None
    assert safe_name("a\x00b\nc.md") == "abc.md"
    assert safe_name(".hidden.md") == "hidden.md"
    long = safe_name("x" * 500 + ".md")
    assert long is not None and len(long) == 200 and long.endswith(".md")
