"""Retrieval quality: recall@5 of BM25 (SQLite FTS5, no embedder) on questions about the project's own docs.

How the labelled set is built: 30 sections of docs/*.md were picked by hand, each from a
different topic, such that a distinctive fact is stated in that one section only. For each, the
question takes that fact's own words (a phrase or sentence of the section) and turns it into a
question with minimal paraphrase: question words added, a few words reordered or dropped, no
synonyms invented. The label is the page and the section's heading (the last element of the
passage's heading path, compared without backticks).

The whole of docs/ is indexed with `Knowledge` on a temporary SQLite file, with the default chunking.
A question is a hit when a passage of the labelled section is among the top 5. The test asserts
recall@5 ≥ 0.9 and prints the figure; `benchmarks/knowledge.py` imports `QUESTIONS` and
`recall_at` from here and reports it too.
"""

from __future__ import annotations

from pathlib import Path

from agentrt.knowledge import Knowledge, Passage

DOCS = Path(__file__).parents[3] / "docs"

QUESTIONS: tuple[tuple[str, str, str], ...] = (
    # (page, section heading, question)
    (
        "builtin-tools.md",
        "Never blocking the event loop",
        "Do the read tools run under a 20 s time budget with a cancel flag checked per line?",
    ),
    ("builtin-tools.md", "Protected paths", "Is a harmless-looking symlink to .env refused on the resolved target?"),
    ("cli.md", "Offline models", "What does --model scripted:echo do? Does it echo each message, numbered?"),
    (
        "cli.md",
        "agentrt sessions",
        "Does sessions list show an agent column, with - for sessions written before sessions had an agent?",
    ),
    (
        "harness.md",
        "@path mentions",
        "Does @notes.md attach the file's content to the message without a read_file round trip?",
    ),
    (
        "harness.md",
        "Skills are session state",
        "Is a loaded skill's name appended to AgentState.tool_state skills for the session?",
    ),
    (
        "mcp.md",
        "Reconnects",
        "When the connection dies, does the client open a new one with the backoff in reconnect_delays?",
    ),
    ("mcp.md", "Sampling", "Can a server ask the client's model to generate text with sampling/createMessage?"),
    (
        "mcp.md",
        "Timeouts and cancellation",
        "When the tool's timeout expires, does the SDK send notifications/cancelled and the server stop the handler?",
    ),
    ("mcp.md", "Progress", "Are progress notifications forwarded as McpProgress events of type mcp_progress?"),
    (
        "memory.md",
        "Every prompt fits the window",
        "Is any request larger than max_tokens - reserve_output_tokens when the tiers are not enough?",
    ),
    (
        "memory.md",
        "Extraction",
        "Does memory_extraction pick durable facts as a JSON array of short sentences after each completed call?",
    ),
    (
        "models.md",
        "Why no SDK",
        "Why does the OpenAI-compatible adapter speak the wire format itself over aiohttp, without the official SDK?",
    ),
    (
        "models.md",
        "Resilience",
        "What are the RetryModel defaults for max_retries, idle_timeout and whole_timeout?",
    ),
    (
        "multi-agent.md",
        "MsgHub",
        "In a conversation in the AgentScope style, do agents call each other's call and everyone hears everyone?",
    ),
    (
        "permissions.md",
        "How rules match",
        "Is a rule's args pattern a glob, or a re: regular expression matched with re.DOTALL?",
    ),
    (
        "permissions.md",
        "Interrupts",
        "Do dangling tool calls get interrupted results so the history stays valid for every provider?",
    ),
    (
        "permissions.md",
        "External tools",
        "How is a run paused with RequireExternalExecution resumed with Msg.tool_results for the pending ids?",
    ),
    (
        "protocols.md",
        "Agent card",
        "Where is the A2A .well-known/agent-card.json card served, built with the SDK's types?",
    ),
    (
        "protocols.md",
        "Client tools",
        "When the model calls one of the RunAgentInput tools, does RUN_FINISHED carry pendingToolCallIds?",
    ),
    (
        "providers-anthropic-gemini.md",
        "Prompt caching and usage",
        "Does cache_system_prompt=True mark the system prompt with cache_control ephemeral?",
    ),
    ("providers-anthropic-gemini.md", "Thinking", "How is a redacted_thinking block kept as a ThinkingBlock?"),
    (
        "security.md",
        "Reporting a vulnerability",
        "How do I report security problems privately, and do you answer within a week?",
    ),
    ("server.md", "Graceful shutdown", "What does agentrt serve do on SIGTERM: does it stop accepting runs?"),
    (
        "state.md",
        "Durability of the SQLite store",
        "Does a committed checkpoint survive a crash of the process with PRAGMA synchronous NORMAL?",
    ),
    (
        "state.md",
        "Concurrency",
        "Do calls on one session run one after another, and calls on different sessions in parallel?",
    ),
    ("telemetry.md", "Logs", "What handler does configure_logging(json=True) install on the root logger?"),
    (
        "telemetry.md",
        "Metrics (Prometheus)",
        "Which families does MetricsMiddleware register, like the agentrt_runs_total counter?",
    ),
    (
        "text-protocol.md",
        "Unreadable replies",
        "What happens with an action that is not a tool name: is the reply sent back with a short correction?",
    ),
    (
        "web-ui.md",
        "Safety",
        "Does the page set a strict Content Security Policy with script-src 'self' and no innerHTML?",
    ),
)


def _plain(text: str) -> str:
    return text.replace("`", "").strip()


def is_hit(passage: Passage, page: str, heading: str) -> bool:
    """Whether `passage` is of the labelled section: its page, and the section as its innermost heading."""
    innermost = (passage.location or "").split(" > ")[-1]
    return Path(passage.source).name == page and _plain(innermost) == _plain(heading)


async def recall_at(kb: Knowledge, k: int = 5) -> tuple[float, list[str]]:
    """recall@k of `kb` (docs/ indexed) on `QUESTIONS`, and the questions missed."""
    missed: list[str] = []
    for page, heading, question in QUESTIONS:
        found = await kb.search(question, k)
        if not any(is_hit(p, page, heading) for p in found):
            missed.append(f"{page} / {heading}: {question}")
    return 1 - len(missed) / len(QUESTIONS), missed


async def test_bm25_recall_at_5_on_the_docs(tmp_path: Path) -> None:
    async with Knowledge("docs", store=f"sqlite:///{tmp_path / 'docs.db'}") as kb:
        report = await kb.add(DOCS)
        assert not report.failed, report.failed
        for page, heading, _ in QUESTIONS:
            assert (DOCS / page).is_file(), page
            text = _plain((DOCS / page).read_text())
            assert f" {_plain(heading)}\n" in text, f"the labelled section {page} / {heading} exists"
        recall, missed = await recall_at(kb, 5)
    print(f"\nBM25 recall@5 on {len(QUESTIONS)} questions about docs/: {recall:.3f}")
    for line in missed:
        print("  missed:", line)
    assert len(QUESTIONS) == 30
    assert recall >= 0.9, missed
