"""Memory extraction: after a call, a model call picks durable facts out of it for long-term memory.

It runs in the background (the reply is already returned), so a failure is logged, never raised.
Facts are de-duplicated against what the user's memory already holds (equal or nearly equal texts)
and against each other before they are recorded.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from agentrt.message import Msg
from agentrt.model.base import ChatModel, GenerateOptions

if TYPE_CHECKING:
    from agentrt.memory.long_term import LongTermMemory, MemoryItem

__all__ = ["EXTRACTION_PROMPT", "extract_memories", "parse_facts"]

logger = logging.getLogger("agentrt.memory")

EXTRACTION_PROMPT = """\
You pick out durable facts worth remembering about the user for future conversations: who they are \
(name, role, employer, location, languages), their preferences and constraints, decisions they made, \
long-running goals, and anything they asked to be remembered. Skip details that only matter for the \
current task, small talk, and facts about the assistant. Write each fact as one short, self-contained \
sentence about "the user", in the language the user wrote in, keeping names, numbers and identifiers \
exactly. Do not repeat facts that are already known.

Reply with a JSON array of strings only, e.g. ["The user prefers metric units."], or [] when there is \
nothing new worth remembering."""

_REQUEST = """\
Already known about the user:
{known}

Conversation:
<conversation>
{conversation}
</conversation>"""

_MAX_FACTS = 10
_MAX_CHARS = 4000


_FENCED = re.compile(r"```(?:json)?[ \t]*\n?(.*?)\n?[ \t]*```", re.DOTALL | re.IGNORECASE)
_PREVIEW = 80


def _preview(text: str) -> str:
    """The start of a reply for a log line (replies echo the user's words: never log them whole)."""
    flat = " ".join(text.split())
    return repr(flat) if len(flat) <= _PREVIEW else f"{flat[:_PREVIEW]!r}... ({len(flat):,} characters)"


def parse_facts(text: str) -> list[str]:
    """The facts in an extraction reply: a JSON array of strings that is the whole reply or one fenced block.

    Anything else (prose, even around brackets; an object; items that are not strings; invalid JSON)
    yields no facts and is logged: guessing at an array inside prose stores prose as facts.
    """
    body = text.strip()
    fenced = _FENCED.fullmatch(body)
    if fenced is not None:
        body = fenced.group(1).strip()
    if not (body.startswith("[") and body.endswith("]")):
        logger.info("memory extraction stored nothing: the reply is not a JSON array: %s", _preview(text))
        return []
    try:
        data = json.loads(body)
    except ValueError as exc:
        logger.warning("memory extraction stored nothing: the reply is not valid JSON (%s): %s", exc, _preview(text))
        return []
    if not isinstance(data, list) or not all(isinstance(item, str) for item in data):
        logger.warning("memory extraction stored nothing: the reply is not an array of strings: %s", _preview(text))
        return []
    return [" ".join(item.split()) for item in data if item.strip()]


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_CHARS else text[: _MAX_CHARS // 2] + " [...] " + text[-_MAX_CHARS // 2 :]


async def extract_memories(
    memory: LongTermMemory,
    summary_model: Callable[[], ChatModel],
    user_id: str,
    said: Sequence[Msg],
    reply: Msg | None,
    *,
    raise_errors: bool = False,
) -> list[MemoryItem]:
    """Extract facts from what the user `said` (and the `reply`) and record the new ones; returns them."""
    from agentrt.memory._text import similar

    try:
        known = await memory.list(user_id)
        lines = [f"[user] {_clip(m.text)}" for m in said]
        if reply is not None and reply.text.strip():
            lines.append(f"[assistant] {_clip(reply.text)}")
        request = [
            Msg.system(EXTRACTION_PROMPT),
            Msg.user(
                _REQUEST.format(
                    known="\n".join(f"- {item.text}" for item in known) or "(nothing yet)",
                    conversation="\n".join(lines),
                )
            ),
        ]
        answer = await summary_model().generate(request, (), GenerateOptions(max_tokens=1024))
        facts: list[str] = []
        for fact in parse_facts(answer.text)[:_MAX_FACTS]:
            if any(similar(fact, item.text) for item in known) or any(similar(fact, f) for f in facts):
                continue
            facts.append(fact)
        if not facts:
            return []
        return await memory.record(user_id, facts)
    except Exception:
        if raise_errors:
            raise
        logger.exception("memory extraction failed for user %r", user_id)
        return []
