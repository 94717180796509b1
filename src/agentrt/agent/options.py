"""Option groups of `ReActAgent`: the loop, structured output, long-term memory and knowledge.

Each group is a small frozen dataclass that checks itself when built, so a bad value fails where
it is written. `ReActAgent` takes a group as one keyword (``loop=``, ``output_options=``,
``memory=``) or its fields as flat keywords (``max_iters=``, ``output_retries=``,
``memory_mode=``, ...); both spellings build the same agent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from agentrt.agent._output import OutputMode
from agentrt.errors import InvalidTypeError, InvalidValueError, UserError
from agentrt.model.base import ChatModel

if TYPE_CHECKING:
    from agentrt.memory.long_term import LongTermMemory
    from agentrt.memory.retrieval import KnowledgeMode, Retriever

__all__ = ["KnowledgeOptions", "LoopOptions", "MemoryMode", "MemoryOptions", "OutputOptions"]

MemoryMode = Literal["static", "agent", "both"]
_KEYWORD = "agentrt.keyword"  # field metadata: the flat `ReActAgent` keyword of the field
_MEMORY_METHODS = ("record", "retrieve", "forget", "list")


class _InvalidOptionError(UserError):
    """A value an option group refuses; keeps the field so `ReActAgent` can name its own keyword instead.

    `public` is the error class raised under the flat keyword (`UserError`, or the typed
    `InvalidTypeError` / `InvalidValueError`, which the group's own error also is).
    """

    public: type[UserError] = UserError

    def __init__(self, owner: str, field_name: str, complaint: str) -> None:
        super().__init__(f"{owner}.{field_name}{complaint}")
        self.field_name = field_name
        self.complaint = complaint


class _InvalidOptionTypeError(_InvalidOptionError, InvalidTypeError):
    public = InvalidTypeError


class _InvalidOptionValueError(_InvalidOptionError, InvalidValueError):
    public = InvalidValueError


_OPTION_ERRORS: dict[type[UserError], type[_InvalidOptionError]] = {
    UserError: _InvalidOptionError,
    InvalidTypeError: _InvalidOptionTypeError,
    InvalidValueError: _InvalidOptionValueError,
}


def _keyword(name: str) -> dict[str, str]:
    return {_KEYWORD: name}


def _is_positive_int(value: object) -> bool:
    return isinstance(value, int) and value >= 1


def _memory_complaint(memory: object) -> str | None:
    """Why `memory` is no `LongTermMemory` (checked by its methods: the protocol is not imported)."""
    for method in _MEMORY_METHODS:
        if not callable(getattr(memory, method, None)):
            return f" must implement agentrt.memory.LongTermMemory (no {method}() on {type(memory).__name__!r})"
    return None


class _Options:
    """Validation shared by the option groups: the first complaint is raised as a `UserError`."""

    __slots__ = ()

    def __post_init__(self) -> None:
        bad = next(self._complaints(), None)
        if bad is not None:
            name, complaint, *kind = bad
            error = _OPTION_ERRORS[kind[0] if kind else UserError]
            raise error(type(self).__name__, name, complaint)

    def _complaints(self) -> Iterator[tuple[str, str] | tuple[str, str, type[UserError]]]:
        """Each refused field with what is wrong with it (read after the field's name), in report order.

        A third item names the error class (`InvalidTypeError`, `InvalidValueError`); `UserError` without.
        """
        raise NotImplementedError


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopOptions(_Options):
    """How the reason-act loop runs.

    Args:
        max_iters: Most reasoning steps (model calls) per call; then one tool-free call wraps up.
        tool_calling: ``"native"`` tool calls, ``"text"`` (the Thought / Action / Final Answer protocol
            for models without tool calling), or ``"auto"``: text when the model has no native tools.
        conflict_policy: On a concurrent write to the session: ``"merge"`` re-reads and appends after
            the other writer, ``"fail"`` raises `StateConflictError`.
    """

    max_iters: int = field(default=10, metadata=_keyword("max_iters"))
    tool_calling: Literal["auto", "native", "text"] = field(default="auto", metadata=_keyword("tool_calling"))
    conflict_policy: Literal["merge", "fail"] = field(default="merge", metadata=_keyword("conflict_policy"))

    def _complaints(self) -> Iterator[tuple[str, str]]:
        if not _is_positive_int(self.max_iters):
            yield "max_iters", f" must be a positive integer, not {self.max_iters!r}"
        if self.conflict_policy not in ("merge", "fail"):
            yield "conflict_policy", f" must be 'merge' or 'fail', not {self.conflict_policy!r}"
        if self.tool_calling not in ("auto", "native", "text"):
            yield "tool_calling", f" must be 'auto', 'native' or 'text', not {self.tool_calling!r}"


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputOptions(_Options):
    """How `call(..., output=...)` gets structured output.

    Args:
        mode: ``"auto"``, ``"native"`` (the provider's JSON-schema mode), ``"tool"`` (a final-answer
            tool) or ``"prompted"`` (the schema in the prompt); checked when a call asks for output.
        retries: Invalid structured answers sent back to the model before `StructuredOutputError`.
    """

    mode: OutputMode = field(default="auto", metadata=_keyword("output_mode"))
    retries: int = field(default=2, metadata=_keyword("output_retries"))

    def _complaints(self) -> Iterator[tuple[str, str]]:
        if self.retries < 0:
            yield "retries", f" must be >= 0, not {self.retries!r}"


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryOptions(_Options):
    """Long-term memory of each user across sessions, and the model that writes summaries.

    Args:
        long_term_memory: A `agentrt.memory.LongTermMemory` holding facts about each user.
        mode: ``"static"``: the facts relevant to each call's input go into the system prompt;
            ``"agent"``: the model gets ``remember`` / ``recall`` tools; ``"both"``.
        top_k: Facts retrieved for the system prompt (static mode).
        extraction: After each completed call, extract durable facts from it into the long-term
            memory with a model call, in the background (see `ReActAgent.drain`).
        summary_model: The (cheaper) model that writes context summaries and extracts memories; the
            agent's model when None.
    """

    long_term_memory: LongTermMemory | None = field(default=None, metadata=_keyword("long_term_memory"))
    mode: MemoryMode = field(default="both", metadata=_keyword("memory_mode"))
    top_k: int = field(default=5, metadata=_keyword("memory_top_k"))
    extraction: bool = field(default=False, metadata=_keyword("memory_extraction"))
    summary_model: ChatModel | str | None = field(default=None, metadata=_keyword("summary_model"))

    def _complaints(self) -> Iterator[tuple[str, str]]:
        model = self.summary_model
        if model is not None and not isinstance(model, (ChatModel, str)):
            yield "summary_model", f" must be a ChatModel or a 'provider:model' string, not {type(model).__name__!r}"
        if self.mode not in ("static", "agent", "both"):
            yield "mode", f" must be 'static', 'agent' or 'both', not {self.mode!r}"
        if self.long_term_memory is not None:
            complaint = _memory_complaint(self.long_term_memory)
            if complaint is not None:
                yield "long_term_memory", complaint
        if self.extraction and self.long_term_memory is None:
            yield "extraction", "=True needs a long_term_memory to record into"
        if not _is_positive_int(self.top_k):
            yield "top_k", f" must be a positive integer, not {self.top_k!r}"


_KNOWLEDGE_MODES = ("tool", "static", "both")


def _is_retriever(knowledge: object) -> bool:
    # Imported only when configured: `import agentrt` never loads the memory package.
    from agentrt.memory.retrieval import Retriever

    return isinstance(knowledge, Retriever) and callable(knowledge.search)


MAX_KNOWLEDGE_K = 20
"""Most passages one search returns (`search_knowledge`'s ``k`` and ``knowledge_k``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class KnowledgeOptions(_Options):
    """A knowledge base the agent answers from, with citations (``ReActAgent(knowledge=...)``).

    Args:
        knowledge: A `agentrt.memory.retrieval.Retriever` (e.g. an `agentrt.knowledge.Knowledge`).
        mode: ``"tool"``: the model searches with ``search_knowledge``; ``"static"``: the top passages
            for the user's request go into the system prompt of each call; ``"both"``.
        top_k: Passages put into the prompt (static mode), 1 to 20.
    """

    knowledge: Retriever | None = field(default=None, metadata=_keyword("knowledge"))
    mode: KnowledgeMode = field(default="tool", metadata=_keyword("knowledge_mode"))
    top_k: int = field(default=4, metadata=_keyword("knowledge_k"))

    def _complaints(self) -> Iterator[tuple[str, str] | tuple[str, str, type[UserError]]]:
        knowledge = self.knowledge
        if knowledge is not None and not _is_retriever(knowledge):
            yield (
                "knowledge",
                " must implement agentrt.memory.retrieval.Retriever (an async search(query, k, filters)), "
                f"not {type(knowledge).__name__!r}",
                InvalidTypeError,
            )
        if self.mode not in _KNOWLEDGE_MODES:
            yield "mode", f" must be 'tool', 'static' or 'both', not {self.mode!r}", InvalidValueError
        top_k = self.top_k
        if not isinstance(top_k, int) or isinstance(top_k, bool):
            yield "top_k", f" must be an integer from 1 to {MAX_KNOWLEDGE_K}, not {top_k!r}", InvalidTypeError
        elif not 1 <= top_k <= MAX_KNOWLEDGE_K:
            yield "top_k", f" must be an integer from 1 to {MAX_KNOWLEDGE_K}, not {top_k!r}", InvalidValueError


_O = TypeVar("_O", LoopOptions, OutputOptions, MemoryOptions, KnowledgeOptions)
# Each group's default object (checked once) and its field defaults.
_DEFAULTS: dict[type[Any], tuple[Any, dict[str, Any]]] = {
    kind: (kind(), {f.name: f.default for f in dataclasses.fields(kind)})
    for kind in (LoopOptions, OutputOptions, MemoryOptions, KnowledgeOptions)
}


def resolve_options(parameter: str, given: _O | None, kind: type[_O], flat: Mapping[str, Any]) -> _O:
    """The option group a `ReActAgent` runs with: `given` (its ``parameter=``), else one built from `flat`.

    `flat` maps each field to the value of its flat keyword. A flat keyword left at its default
    defers to `given`; one set to another value than `given` holds is refused, so neither silently wins.
    """
    if given is None:
        shared, defaults = _DEFAULTS[kind]
        # Most agents leave a group alone: share one checked default object (construction stays cheap).
        if all(value is defaults[name] for name, value in flat.items()):
            return cast("_O", shared)
        return _from_keywords(kind, flat)
    if not isinstance(given, kind):
        raise UserError(f"{parameter} must be {kind.__name__}(...), not {type(given).__name__!r}")
    for spec in dataclasses.fields(kind):
        value, chosen = flat[spec.name], getattr(given, spec.name)
        if not _same(value, spec.default) and not _same(value, chosen):
            keyword = spec.metadata[_KEYWORD]
            raise UserError(
                f"{keyword}={value!r} conflicts with {parameter}={kind.__name__}({spec.name}={chosen!r}): "
                "set it in one place only"
            )
    return given


def _from_keywords(kind: type[_O], flat: Mapping[str, Any]) -> _O:
    """Build the group from the flat keywords; a refused value is reported under its keyword."""
    try:
        return kind(**flat)
    except _InvalidOptionError as exc:
        keyword = next(f.metadata[_KEYWORD] for f in dataclasses.fields(kind) if f.name == exc.field_name)
        raise exc.public(f"{keyword}{exc.complaint}") from None


def _same(a: object, b: object) -> bool:
    return a is b or bool(a == b)
