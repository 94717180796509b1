"""Agents for the server tests: a scripted planner with an approval tool, an external tool and a slow step."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

from agentrt import Msg, ReActAgent, TextBlock, Toolkit, ToolResultBlock, ToolUseBlock, tool
from agentrt.memory.retrieval import Passage
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.state import InMemoryStateStore

KEYS = {"key-alice": "alice", "key-bob": "bob"}
ALICE = {"Authorization": "Bearer key-alice"}
BOB = {"Authorization": "Bearer key-bob"}


@tool(requires_confirmation=True)
def danger(target: str) -> str:
    """Do something that needs the user's approval.

    Args:
        target: What to act on.
    """
    return f"did {target}"


@tool(external=True)
def lookup(query: str) -> str:
    """Look something up on the caller's side.

    Args:
        query: What to look up.
    """
    raise AssertionError("external tools run outside the agent")


@tool
async def nap(seconds: float) -> str:
    """Sleep (a long-running tool).

    Args:
        seconds: How long.
    """
    await asyncio.sleep(seconds)
    return "rested"


@tool(read_only=True)
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: First.
        b: Second.
    """
    return a + b


async def plan(request: ModelRequest) -> Any:
    """Deterministic replies keyed on the last message."""
    if not request.messages:
        return "(nothing to answer)"
    last: Msg = request.messages[-1]
    results = [b for b in last.content if isinstance(b, ToolResultBlock)]
    if last.role == "user" and results:
        return "done: " + "; ".join(f"{r.name}={r.text} [{r.state}]" for r in results)
    text = last.text
    if text.startswith("danger"):
        return ToolUseBlock(id="call-danger", name="danger", input={"target": text.partition(" ")[2] or "it"})
    if text.startswith("external"):
        return ToolUseBlock(id="call-lookup", name="lookup", input={"query": text.partition(" ")[2] or "x"})
    if text.startswith("add"):
        return ToolUseBlock(id="call-add", name="add", input={"a": 2, "b": 3})
    if text.startswith("nap"):
        return [TextBlock(text="Napping."), ToolUseBlock(id="call-nap", name="nap", input={"seconds": 60})]
    if text.startswith("slow"):
        await asyncio.sleep(60)
        return "slow answer"
    user_turns = sum(1 for m in request.messages if m.role == "user" and m.text)
    return f"echo: {text} (turn {user_turns})"


def make_agent(name: str = "bot", *, store: Any = None, description: str = "A test agent.") -> ReActAgent:
    """A fresh agent (its own scripted model) with the test tools."""
    return ReActAgent(
        name,
        "You are a test agent.",
        model=ScriptedModel.from_function(plan, record=False),
        toolkit=Toolkit([danger, lookup, add, nap]),
        state_store=store,
        description=description,
    )


PASSAGES = [
    Passage("kb-1", "Employees get 25 vacation days.", "handbook.md", "Handbook", "Leave > Vacation", 2.0),
    Passage("kb-2", "Expenses are paid monthly.", "https://intra.example/expenses", "Expenses", None, 1.0),
]
CITATIONS = [p.citation.to_dict() for p in PASSAGES]


class Handbook:
    """A tiny deterministic knowledge base: every query finds the same two passages."""

    async def search(self, query: str, k: int = 5, filters: Any = None) -> list[Passage]:
        return PASSAGES[:k]


async def answer_from_knowledge(request: ModelRequest) -> Any:
    """Search the knowledge base for the user's words, then answer citing the passages."""
    last: Msg = request.messages[-1]
    if last.role == "user" and last.blocks(ToolResultBlock):
        return "25 days [1]; expenses monthly [2]."
    return ToolUseBlock(id="call-kb", name="search_knowledge", input={"query": last.text})


def knowledge_agent(name: str = "kb", *, store: Any = None) -> ReActAgent:
    """An agent answering from `Handbook` with the search_knowledge tool (its replies cite `CITATIONS`)."""
    return ReActAgent(
        name,
        "You answer from the handbook.",
        model=ScriptedModel.from_function(answer_from_knowledge, record=False),
        state_store=store,
        knowledge=Handbook(),
    )


def parse_sse(text: str) -> list[dict[str, Any]]:
    """Frames of an SSE body: dicts with ``id``, ``event``, ``data`` (raw text) and ``comments``."""
    frames: list[dict[str, Any]] = []
    for chunk in text.replace("\r\n", "\n").split("\n\n"):
        if not chunk.strip():
            continue
        frame: dict[str, Any] = {"id": None, "event": None, "data": None, "comments": []}
        for line in chunk.split("\n"):
            if line.startswith(":"):
                frame["comments"].append(line[1:].strip())
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "data":
                frame["data"] = value if frame["data"] is None else frame["data"] + "\n" + value
            elif field in ("id", "event"):
                frame[field] = value
        frames.append(frame)
    return frames


def new_store() -> InMemoryStateStore:
    return InMemoryStateStore()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def live_server(app: Any) -> AsyncIterator[tuple[str, Any]]:
    """Serve `app` with a real uvicorn server on this event loop; yields (base URL, server)."""
    from agentrt.server._serve import graceful_server

    port = free_port()
    server = graceful_server(app, host="127.0.0.1", port=port, log_level="warning")
    task = asyncio.get_running_loop().create_task(server.serve())
    for _ in range(500):
        if server.started:
            break
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}", server
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 30)


@contextlib.contextmanager
def served_process(store_url: str = "memory://", *, keys: str = "key-alice=alice,key-bob=bob") -> Any:
    """`agentrt serve served:agents` in a separate process; yields (base URL, Popen)."""
    import os
    import subprocess
    import sys
    import tempfile
    import time
    import urllib.request
    from pathlib import Path

    root = Path(__file__).parents[2]
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root / "src"), str(Path(__file__).with_name("apps"))]),
        "AGENTRT_API_KEYS": keys,
    }
    cmd = [sys.executable, "-m", "agentrt.cli", "serve", "served:agents", "--port", str(port), "--store", store_url]
    log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in the finally below
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise AssertionError(f"server exited early:\n{log.read()}")
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)  # noqa: TID251 - sync helper, no event loop here
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
