"""Knowledge in agent runs: the search_knowledge tool, passages in the prompt, citations on the reply."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt import GenerateReason, Msg, ReActAgent, RuntimeContext, Toolkit, ToolResultBlock, ToolUseBlock, tool
from agentrt.agent.options import KnowledgeOptions
from agentrt.errors import InvalidTypeError, InvalidValueError, ModelError, UserError
from agentrt.memory.retrieval import Passage, Retriever
from agentrt.model import ModelRequest, ScriptedModel
from agentrt.permission import ConfirmResult, PermissionMode
from agentrt.state import InMemoryStateStore

CTX = RuntimeContext(user_id="alice", session_id="s1")
SECRET = "postgresql://kb:hunter2@db.internal/kb"

HANDBOOK = [
    Passage("c1", "Employees get 25 vacation days a year.", "handbook.md", "Handbook", "Leave > Vacation", 3.0),
    Passage("c2", "Sick days need a doctor's note after 3 days.", "handbook.md", "Handbook", "Leave > Sick", 2.0),
    Passage("c3", "Expenses are reimbursed within a month.", "https://intra.example/expenses", "Expenses", None, 1.0),
]


class Library:
    """A deterministic in-memory retriever: the passages sharing a word with the query, in corpus order."""

    def __init__(self, passages: Sequence[Passage] = HANDBOOK, *, fail: BaseException | None = None) -> None:
        self.passages = list(passages)
        self.fail = fail
        self.calls: list[tuple[str, int, Mapping[str, Any] | None]] = []

    async def search(self, query: str, k: int = 5, filters: Mapping[str, Any] | None = None) -> list[Passage]:
        self.calls.append((query, k, filters))
        if self.fail is not None:
            raise self.fail
        words = {w.strip("?.,!").lower() for w in query.split()}
        hits = [p for p in self.passages if words & {w.strip("?.,!'").lower() for w in p.text.split()}]
        return hits[:k]


class Scripted:
    """A retriever answering each query with its own scripted passages (for the property test)."""

    def __init__(self, results: Mapping[str, list[Passage]]) -> None:
        self.results = results

    async def search(self, query: str, k: int = 5, filters: Mapping[str, Any] | None = None) -> list[Passage]:
        return self.results[query][:k]


def search(query: str, id: str = "k1", **args: Any) -> ToolUseBlock:
    return ToolUseBlock(id=id, name="search_knowledge", input={"query": query, **args})


def agent_with(model: ScriptedModel, knowledge: Any, store: Any = None, **options: Any) -> ReActAgent:
    return ReActAgent(
        "bot",
        "You answer from the handbook.",
        model=model,
        state_store=store if store is not None else InMemoryStateStore(),
        knowledge=knowledge,
        **options,
    )


def cited(*passages: Passage) -> list[dict[str, str | None]]:
    return [p.citation.to_dict() for p in passages]


def results_in(request: ModelRequest) -> list[ToolResultBlock]:
    return [b for m in request.messages for b in m.blocks(ToolResultBlock)]


# -- options ----------------------------------------------------------------------------------------------
def test_the_library_is_a_retriever() -> None:
    assert isinstance(Library(), Retriever)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"knowledge": object()}, InvalidTypeError, "knowledge must implement agentrt.memory.retrieval.Retriever"),
        ({"knowledge": "kb.db"}, InvalidTypeError, "not 'str'"),
        ({"knowledge": Library(), "knowledge_mode": "sometimes"}, InvalidValueError, "knowledge_mode must be 'tool'"),
        ({"knowledge": Library(), "knowledge_k": 0}, InvalidValueError, "knowledge_k must be an integer from 1 to 20"),
        ({"knowledge": Library(), "knowledge_k": 21}, InvalidValueError, "not 21"),
        ({"knowledge": Library(), "knowledge_k": True}, InvalidTypeError, "knowledge_k must be an integer"),
    ],
)
def test_bad_knowledge_options_are_refused_with_typed_errors(
    options: dict[str, Any], error: type[UserError], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)) as info:
        ReActAgent("bot", model=ScriptedModel([]), **options)
    assert isinstance(info.value, UserError)


def test_the_option_group_checks_itself_too() -> None:
    with pytest.raises(InvalidValueError, match=r"KnowledgeOptions\.mode must be"):
        KnowledgeOptions(knowledge=Library(), mode="always")  # type: ignore[arg-type]  # refused on purpose
    with pytest.raises(InvalidTypeError, match=r"KnowledgeOptions\.knowledge must implement"):
        KnowledgeOptions(knowledge=42)  # type: ignore[arg-type]  # refused on purpose


def test_knowledge_defaults_to_tool_mode_and_the_tool_is_read_only() -> None:
    library = Library()
    agent = ReActAgent("bot", model=ScriptedModel([]), knowledge=library)
    assert agent.knowledge is library and agent.knowledge_mode == "tool" and agent.knowledge_k == 4
    assert agent._session_tools is not None
    search_tool = agent._session_tools["search_knowledge"]
    assert search_tool.read_only
    assert set(search_tool.parameters["properties"]) == {"query", "k", "filters"}
    static = ReActAgent("bot", model=ScriptedModel([]), knowledge=library, knowledge_mode="static")
    assert static._session_tools is None


# -- tool mode ------------------------------------------------------------------------------------------------
async def test_tool_mode_cites_the_passages_the_search_returned_and_stores_them() -> None:
    store = InMemoryStateStore()
    library = Library()
    model = ScriptedModel([search("vacation days"), "You get 25 vacation days a year [1]."])
    agent = agent_with(model, library, store)
    reply = await agent.call("How many vacation days do I get?", CTX)

    assert reply.text == "You get 25 vacation days a year [1]."
    assert reply.metadata["citations"] == cited(HANDBOOK[0], HANDBOOK[1])  # "days" matches the sick-days passage
    assert library.calls == [("vacation days", 5, None)]
    assert "search_knowledge" in [t.name for t in model.requests[0].tools]
    [result] = results_in(model.requests[1])
    assert result.state == "success"
    assert "[1] Handbook — Leave > Vacation (source: handbook.md, id: c1)" in result.text
    assert "Employees get 25 vacation days a year." in result.text and "[2] Handbook — Leave > Sick" in result.text
    # The reply, with its citations, is what the store holds (read back from the store itself).
    state = await store.load("alice", "s1", agent="bot")
    assert state is not None
    assert state.messages[-1].id == reply.id
    assert state.messages[-1].metadata["citations"] == cited(HANDBOOK[0], HANDBOOK[1])
    assert Msg.from_dict(state.messages[-1].to_dict()).metadata["citations"] == reply.metadata["citations"]


async def test_tool_mode_reply_without_a_search_has_no_citations() -> None:
    model = ScriptedModel(["Hello!"])
    reply = await agent_with(model, Library()).call("hi", CTX)
    assert reply.metadata["citations"] == []


async def test_a_search_without_hits_cites_nothing() -> None:
    model = ScriptedModel([search("parking"), "I found nothing about parking."])
    reply = await agent_with(model, Library()).call("Where do I park?", CTX)
    [result] = results_in(model.requests[1])
    assert result.state == "success" and result.text == "No passages of the knowledge base match that query."
    assert reply.metadata["citations"] == []


async def test_citations_belong_to_their_turn_only() -> None:
    model = ScriptedModel([search("vacation"), "25 days [1].", search("expenses"), "Within 30 days [1]."])
    agent = agent_with(model, Library())
    first = await agent.call("vacation?", CTX)
    second = await agent.call("expenses?", CTX)
    assert first.metadata["citations"] == cited(HANDBOOK[0])
    assert second.metadata["citations"] == cited(HANDBOOK[2])


async def test_several_searches_are_deduplicated_in_first_use_order() -> None:
    model = ScriptedModel(
        [
            [search("expenses", "k1"), search("vacation", "k2")],
            search("sick vacation", "k3"),
            "Done.",
        ]
    )
    reply = await agent_with(model, Library()).call("tell me everything", CTX)
    assert reply.metadata["citations"] == cited(HANDBOOK[2], HANDBOOK[0], HANDBOOK[1])


@pytest.mark.parametrize("mode", [PermissionMode.DEFAULT, PermissionMode.EXPLORE, PermissionMode.PLAN])
async def test_the_search_is_read_only_so_it_never_asks_and_runs_in_every_mode(mode: PermissionMode) -> None:
    # With a permission mode set, a tool that is not read-only would ask (DEFAULT) or be denied (EXPLORE, PLAN).
    library = Library()
    model = ScriptedModel([search("vacation"), "25 days."])
    agent = agent_with(model, library, permission=mode)
    reply = await agent.call("vacation?", CTX)
    assert reply.generate_reason is GenerateReason.STOP
    assert len(library.calls) == 1 and results_in(model.requests[1])[0].state == "success"
    assert reply.metadata["citations"] == cited(HANDBOOK[0])


@pytest.mark.parametrize(
    ("k", "sent"),
    [(3, 3), (50, 20), (0, 1), (2.0, 2), (None, 5)],
)
async def test_k_is_clamped_to_the_allowed_range(k: Any, sent: int) -> None:
    library = Library()
    model = ScriptedModel([search("vacation", k=k), "ok"])
    await agent_with(model, library).call("vacation?", CTX)
    assert library.calls == [("vacation", sent, None)]


async def test_valid_filters_reach_the_retriever_in_their_documented_shapes() -> None:
    library = Library()
    filters = {"source": ["handbook.md"], "tags": "hr", "since": "2024-01-31", "until": "2025-01-01T00:00:00Z"}
    model = ScriptedModel([search("vacation", filters={**filters, "lang": "en", "version": 2}), "ok"])
    await agent_with(model, library).call("vacation?", CTX)
    assert library.calls == [
        (
            "vacation",
            5,
            {
                "source": ["handbook.md"],
                "tags": ["hr"],
                "since": "2024-01-31",
                "until": "2025-01-01T00:00:00Z",
                "lang": "en",
                "version": 2,
            },
        )
    ]


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        ({"filters": "handbook.md"}, "'filters' must be an object"),
        ({"filters": {"tags": 3}}, "filter 'tags' must be a non-empty string or a non-empty list"),
        ({"filters": {"source": []}}, "filter 'source' must be"),
        ({"filters": {"source": ["a", 1]}}, "filter 'source' must be"),
        ({"filters": {"since": "last week"}}, "filter 'since' must be an ISO date"),
        ({"filters": {"until": 20240101}}, "filter 'until' must be an ISO date"),
        ({"filters": {"team": {"$ne": "x"}}}, "filter 'team' must be a string, a number or a boolean"),
        ({"filters": {"team": None}}, "filter 'team' must be a string"),
        ({"filters": {f"key{i}": i for i in range(17)}}, "at most 16 keys"),
        ({"k": "many"}, "'k' must be an integer from 1 to 20"),
        ({"k": True}, "'k' must be an integer"),
        ({"query": "  "}, "'query' must be a non-empty string"),
    ],
)
async def test_bad_arguments_are_a_tool_error_the_model_sees(args: dict[str, Any], complaint: str) -> None:
    library = Library()
    call = ToolUseBlock(id="k1", name="search_knowledge", input={"query": "vacation", **args})
    model = ScriptedModel([call, "Sorry."])
    reply = await agent_with(model, library).call("vacation?", CTX)
    [result] = results_in(model.requests[1])
    assert result.state == "error" and complaint in result.text
    assert library.calls == [], "nothing reached the knowledge base"
    assert reply.text == "Sorry." and reply.metadata["citations"] == []


async def test_a_failing_knowledge_base_is_a_tool_error_and_the_run_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    library = Library(fail=ConnectionError(f"could not connect to {SECRET}"))
    model = ScriptedModel([search("vacation"), "The knowledge base is down; I cannot check."])
    with caplog.at_level(logging.WARNING, logger="agentrt.agent"):
        reply = await agent_with(model, library).call("vacation?", CTX)
    [result] = results_in(model.requests[1])
    assert result.state == "error" and "The knowledge search failed" in result.text
    assert SECRET not in result.text and "hunter2" not in result.text
    assert reply.text.startswith("The knowledge base is down") and reply.metadata["citations"] == []
    assert "knowledge search failed (builtins.ConnectionError)" in caplog.text
    assert "hunter2" not in caplog.text


async def test_a_retriever_returning_garbage_is_a_tool_error() -> None:
    class Broken:
        async def search(self, query: str, k: int = 5, filters: Any = None) -> Any:
            return [{"chunk_id": "x"}]

    model = ScriptedModel([search("vacation"), "ok"])
    await agent_with(model, Broken()).call("vacation?", CTX)
    [result] = results_in(model.requests[1])
    assert result.state == "error"


async def test_a_retriever_raising_a_user_error_does_not_crash_the_run() -> None:
    model = ScriptedModel([search("vacation"), "ok"])
    reply = await agent_with(model, Library(fail=UserError("misconfigured"))).call("vacation?", CTX)
    assert reply.text == "ok"
    [result] = results_in(model.requests[1])
    assert result.state == "error"


# -- static mode ------------------------------------------------------------------------------------------------
async def test_static_mode_puts_the_passages_into_the_system_prompt_not_the_transcript() -> None:
    store = InMemoryStateStore()
    library = Library()
    model = ScriptedModel(["Employees get 25 vacation days [1]."])
    agent = agent_with(model, library, store, knowledge_mode="static", knowledge_k=2)
    reply = await agent.call("How many vacation days?", CTX)

    assert library.calls == [("How many vacation days?", 2, None)]
    [request] = model.requests
    assert [t.name for t in request.tools] == []  # no search tool in static mode
    system = request.messages[0]
    assert system.role == "system"
    assert system.text.startswith("You answer from the handbook.\n\n<knowledge>\n")
    assert system.text.endswith("</knowledge>")
    assert "[1] Handbook — Leave > Vacation (source: handbook.md, id: c1)" in system.text
    assert "Employees get 25 vacation days a year." in system.text
    assert reply.metadata["citations"] == cited(HANDBOOK[0], HANDBOOK[1])

    state = await store.load("alice", "s1", agent="bot")
    assert state is not None
    assert [m.role for m in state.messages] == ["user", "assistant"]
    assert state.messages[0].text == "How many vacation days?"
    assert all("<knowledge>" not in m.text and "25 vacation days a year" not in m.text for m in state.messages)
    assert state.messages[-1].metadata["citations"] == cited(HANDBOOK[0], HANDBOOK[1])


async def test_static_mode_passages_are_in_every_model_call_of_the_turn() -> None:
    @tool(read_only=True)
    async def today() -> str:
        """Today's date."""
        return "2025-06-01"

    library = Library()
    model = ScriptedModel([ToolUseBlock(id="t1", name="today", input={}), "It is June; 25 vacation days."])
    agent = ReActAgent(
        "bot",
        "sys",
        model=model,
        toolkit=Toolkit([today]),
        state_store=InMemoryStateStore(),
        knowledge=library,
        knowledge_mode="static",
    )
    await agent.call("vacation days left?", CTX)
    assert len(model.requests) == 2
    assert all("<knowledge>" in r.messages[0].text for r in model.requests)
    assert model.requests[0].messages[0].text == model.requests[1].messages[0].text  # one prefix: cache-friendly
    assert len(library.calls) == 1, "the request is searched once per call"


async def test_static_mode_without_a_system_prompt_and_without_hits() -> None:
    model = ScriptedModel(["a", "b"])
    agent = ReActAgent(
        "bot", model=model, state_store=InMemoryStateStore(), knowledge=Library(), knowledge_mode="static"
    )
    reply = await agent.call("vacation?", CTX)
    assert model.requests[0].messages[0].text.startswith("<knowledge>\n")
    assert reply.metadata["citations"] == cited(HANDBOOK[0])
    reply = await agent.call("parking?", CTX)
    assert model.requests[1].messages[0].role == "user"  # nothing found: no system message at all
    assert reply.metadata["citations"] == []


async def test_static_mode_survives_a_failing_knowledge_base(caplog: pytest.LogCaptureFixture) -> None:
    library = Library(fail=RuntimeError(f"auth failed for {SECRET}"))
    model = ScriptedModel(["I could not check the handbook."])
    agent = agent_with(model, library, knowledge_mode="static")
    with caplog.at_level(logging.WARNING, logger="agentrt.agent"):
        reply = await agent.call("vacation?", CTX)
    assert reply.text == "I could not check the handbook." and reply.metadata["citations"] == []
    assert model.requests[0].messages[0].text == "You answer from the handbook."
    assert "knowledge search failed (builtins.RuntimeError)" in caplog.text
    assert "without knowledge passages" in caplog.text
    assert "hunter2" not in caplog.text


async def test_static_mode_searches_with_the_latest_user_message_of_a_seeded_history() -> None:
    library = Library()
    model = ScriptedModel(["ok"])
    agent = agent_with(model, library, knowledge_mode="static")
    await agent.call([Msg.user("expenses?"), Msg.assistant("30 days."), Msg.user("and vacation?")], CTX)
    assert [c[0] for c in library.calls] == ["and vacation?"]


# -- both -----------------------------------------------------------------------------------------------------------
async def test_both_mode_cites_the_prompt_passages_first_then_the_searches() -> None:
    library = Library()
    model = ScriptedModel([search("expenses vacation"), "Both answered."])
    agent = agent_with(model, library, knowledge_mode="both", knowledge_k=1)
    reply = await agent.call("vacation?", CTX)
    assert "<knowledge>" in model.requests[0].messages[0].text
    assert "search_knowledge" in [t.name for t in model.requests[0].tools]
    # c1 was in the prompt; the search found c1 again (deduplicated) and c3.
    assert reply.metadata["citations"] == cited(HANDBOOK[0], HANDBOOK[2])


async def test_both_mode_with_a_failing_knowledge_base_still_answers() -> None:
    model = ScriptedModel([search("vacation"), "Down."])
    agent = agent_with(model, Library(fail=OSError("disk")), knowledge_mode="both")
    reply = await agent.call("vacation?", CTX)
    assert reply.text == "Down." and reply.metadata["citations"] == []
    assert results_in(model.requests[1])[0].state == "error"


# -- resumed turns ------------------------------------------------------------------------------------------------
@tool(destructive=True)
async def file_request(days: int) -> str:
    """File a vacation request."""
    return f"filed {days} days"


def approval_agent(model: ScriptedModel, store: Any, mode: str = "tool") -> ReActAgent:
    return ReActAgent(
        "bot",
        "sys",
        model=model,
        toolkit=Toolkit([file_request]),
        state_store=store,
        knowledge=Library(),
        knowledge_mode=mode,  # type: ignore[arg-type]
    )


async def test_a_turn_resumed_after_an_approval_keeps_the_citations_of_its_earlier_searches() -> None:
    store = InMemoryStateStore()
    model = ScriptedModel(
        [
            search("vacation"),
            [search("sick", "k2"), ToolUseBlock(id="f1", name="file_request", input={"days": 5})],
            "Filed 5 days [1].",
        ]
    )
    paused = await approval_agent(model, store).call("Book 5 vacation days", CTX)
    assert paused.generate_reason is GenerateReason.AWAITING_CONFIRMATION
    # Another agent instance (as another process would) resumes: the run's memory of the searches is gone.
    resumed = approval_agent(model, store)
    reply = await resumed.call(Msg.confirm([ConfirmResult(confirmed=True, tool_call="f1")], text="go ahead"), CTX)
    assert reply.text == "Filed 5 days [1]."
    assert reply.metadata["citations"] == cited(HANDBOOK[0], HANDBOOK[1])
    state = await store.load("alice", "s1", agent="bot")
    assert state is not None and state.messages[-1].metadata["citations"] == cited(HANDBOOK[0], HANDBOOK[1])


async def test_a_resumed_static_turn_cites_the_passages_for_the_request_not_the_approval() -> None:
    store = InMemoryStateStore()
    model = ScriptedModel([ToolUseBlock(id="f1", name="file_request", input={"days": 2}), "Filed."])
    await approval_agent(model, store, "static").call("Book 2 vacation days", CTX)
    reply = await approval_agent(model, store, "static").call(
        Msg.confirm([ConfirmResult(confirmed=True, tool_call="f1")]), CTX
    )
    assert "<knowledge>" in model.requests[1].messages[0].text
    assert reply.metadata["citations"] == cited(HANDBOOK[0], HANDBOOK[1])


async def test_a_turn_continued_after_a_failed_call_keeps_the_citations_of_its_earlier_searches() -> None:
    store = InMemoryStateStore()

    def crash(request: ModelRequest) -> Any:
        raise ModelError("the provider went away")

    model = ScriptedModel([search("vacation"), crash, "25 days [1]."])
    agent = agent_with(model, Library(), store)
    with pytest.raises(ModelError):
        await agent.call("vacation?", CTX)
    # The search result is in the stored transcript; a fresh agent continues the turn without new input.
    reply = await agent_with(model, Library(), store).call(None, CTX)
    assert reply.text == "25 days [1]."
    assert reply.metadata["citations"] == cited(HANDBOOK[0])


async def test_a_new_request_after_a_failed_turn_does_not_cite_the_old_searches() -> None:
    store = InMemoryStateStore()

    def crash(request: ModelRequest) -> Any:
        raise ModelError("the provider went away")

    model = ScriptedModel([search("vacation"), crash, "Within 30 days."])
    with pytest.raises(ModelError):
        await agent_with(model, Library(), store).call("vacation?", CTX)
    reply = await agent_with(model, Library(), store).call("expenses?", CTX)
    assert reply.metadata["citations"] == []


async def test_a_structured_reply_carries_citations() -> None:
    model = ScriptedModel([search("vacation"), '{"days": 25}'])
    agent = agent_with(model, Library(), output_mode="prompted")
    reply = await agent.call("vacation?", CTX, output={"type": "object", "properties": {"days": {"type": "integer"}}})
    assert reply.metadata["structured_output"] == {"days": 25}
    assert reply.metadata["citations"] == cited(HANDBOOK[0])


async def test_a_reply_at_the_step_limit_carries_citations() -> None:
    model = ScriptedModel([search("vacation"), "Out of steps: 25 days."])
    agent = agent_with(model, Library(), max_iters=1)
    reply = await agent.call("vacation?", CTX)
    assert reply.generate_reason is GenerateReason.MAX_ITERS
    assert reply.metadata["citations"] == cited(HANDBOOK[0])


async def test_an_agent_without_knowledge_adds_no_citations() -> None:
    agent = ReActAgent("bot", model=ScriptedModel(["hi"]), state_store=InMemoryStateStore())
    reply = await agent.call("hello", CTX)
    assert "citations" not in reply.metadata


# -- property --------------------------------------------------------------------------------------------------------
CHUNKS = [
    Passage(f"c{i}", f"passage {i}", f"doc{i % 3}.md", f"Doc {i % 3}", f"section {i}" if i % 2 else None)
    for i in range(8)
]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.lists(st.sampled_from(CHUNKS), max_size=5),
        min_size=1,
        max_size=4,
    ),
    st.integers(1, 3),
)
def test_citations_are_the_deduplicated_union_of_the_searches_in_first_use_order(
    searches: list[list[Passage]], per_step: int
) -> None:
    results = {f"q{i}": found for i, found in enumerate(searches)}
    calls = [search(f"q{i}", f"k{i}") for i in range(len(searches))]
    steps: list[Any] = [calls[i : i + per_step] for i in range(0, len(calls), per_step)]
    model = ScriptedModel([*steps, "done"])
    agent = agent_with(model, Scripted(results), max_iters=len(steps) + 1)

    reply = asyncio.run(agent.call("go", CTX))

    expected: list[dict[str, str | None]] = []
    for found in searches:
        for passage in found:
            if passage.citation.to_dict() not in expected:
                expected.append(passage.citation.to_dict())
    assert reply.metadata["citations"] == expected
