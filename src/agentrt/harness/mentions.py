"""``@path`` mentions: files of the workspace attached to the user's message.

In a user message, ``@notes.txt`` or ``@"docs/a b.md"`` (an ``@`` at the start of the text or
after whitespace, so ``bob@example.com`` is left alone) names a file of the workspace. The
message keeps its text as typed; the runtime appends one more text block holding, for each
mentioned file, its content in a fenced block headed by its path (or a one-line note saying why
it was not attached). The model therefore sees the file at the moment the user referred to it,
and the session's history keeps what it saw.

Each mention is checked exactly as a ``read_file`` call of `agentrt.tool.builtin.FileTools` on
the root would be:

- confinement: the path is taken from the root, resolved with symlinks followed, and must stay
  inside it (``@../x``, ``@/etc/passwd``, a link out of the workspace are refused); protected paths
  (``.env*``, ``.git/``, keys: `agentrt.permission.is_dangerous_path`) are refused by the name
  typed and by the target;
- the permission engine with the agent's `PermissionContext` and the session's accepted rules:
  a deny rule on the path refuses the attachment, and so does an ask rule (nobody is asked; the
  note says to let the agent read the file instead, where the approval can be given);
- size: each file is cut at `max_bytes` (with a note), and once a message's attachments reach
  `max_total_bytes` further files are refused; binary files (a NUL byte in the first 8 KiB) and
  anything but regular files are refused.

A refusal is stated in the attachment block, never silent; only an unquoted token naming nothing
that exists and not shaped like a path (no ``/`` and no ``.ext``, or holding code characters such
as parentheses: ``@alice``, ``@pytest.mark.parametrize(...)``) is left as text. A path outside
the workspace is refused whether or not it exists, and nothing outside is ever opened.

Two ways to use it: the `FileMentions` middleware expands the user messages of every call of an
agent (``ReActAgent(..., middlewares=[FileMentions(root)])``; `WorkspaceAgent` has it), and
`expand_mentions` does the same for a piece of text, for applications that build their own
messages.
"""

from __future__ import annotations

import asyncio
import os
import re
import stat
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentrt.context import RuntimeContext
from agentrt.errors import UserError
from agentrt.events import AgentEvent, register_event_type
from agentrt.harness.instructions import _cut
from agentrt.message import META_CONFIRM_RESULTS, Msg, TextBlock, ToolResultBlock, ToolUseBlock
from agentrt.middleware.base import Middleware
from agentrt.permission import (
    Decision,
    PermissionContext,
    PermissionEngine,
    PermissionMode,
    PermissionRule,
)
from agentrt.tool.builtin.files import FileTools, PathRefused

if TYPE_CHECKING:
    from agentrt.agent._run import Run

__all__ = [
    "DEFAULT_MENTION_BYTES",
    "DEFAULT_MENTIONS_TOTAL_BYTES",
    "META_MENTIONS",
    "FileMentions",
    "Mention",
    "MentionExpansion",
    "MentionRef",
    "MentionsExpanded",
    "expand_mentions",
    "find_mentions",
]

DEFAULT_MENTION_BYTES = 64 * 1024
"""Most bytes of one mentioned file attached; the rest is cut with a note."""
DEFAULT_MENTIONS_TOTAL_BYTES = 256 * 1024
"""Most bytes attached to one message; files beyond it are refused with a note."""
DEFAULT_MAX_MENTIONS = 20
"""Most files attached to one message."""
META_MENTIONS = "mentions"
"""`Msg.metadata` key listing the message's mentions (their JSON form) once expanded."""

# `@` at the start of the text or after whitespace; then a quoted path or a run of non-space.
_MENTION = re.compile(r"(?<!\S)@(?:\"([^\"\n]+)\"|'([^'\n]+)'|([^\s\"'`][^\s]*))")
_TRAILING = ".,;:!?)]}>'\"`"
_SNIFF_BYTES = 8192
_CODE_CHARS = re.compile(r"[()\[\]{}<>=,;'\"`$|&*?]")
_EXTENSION = re.compile(r"[^./]\.[A-Za-z0-9_-]{1,12}$")


@dataclass(frozen=True, slots=True, kw_only=True)
class MentionRef:
    """One ``@path`` token found in a text."""

    token: str
    """The token as typed (``@notes.txt``, ``@"a b.txt"``), without trailing punctuation."""
    path: str
    """The path it names (quotes removed; trailing punctuation of an unquoted token left out)."""
    quoted: bool
    start: int
    """Offset of the ``@`` in the text."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Mention:
    """What became of one mention: attached (with its size) or refused (with the reason)."""

    token: str
    path: str
    """The path as typed."""
    attached: bool
    rel: str | None = None
    """The file's path relative to the root, when it was resolved inside the workspace."""
    size: int = 0
    """The file's size in bytes (attached files)."""
    truncated: bool = False
    """Whether only the beginning of the file was attached."""
    reason: str = ""
    """Why it was not attached."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (kept in the message's metadata)."""
        d: dict[str, Any] = {"token": self.token, "path": self.path, "attached": self.attached}
        if self.rel is not None:
            d["rel"] = self.rel
        if self.attached:
            d["size"] = self.size
            if self.truncated:
                d["truncated"] = True
        else:
            d["reason"] = self.reason
        return d


@dataclass(frozen=True, slots=True, kw_only=True)
class MentionExpansion:
    """A text with its mentions expanded: the text as typed, the attachment block, and each mention's fate."""

    text: str
    """The text as typed."""
    attachments: str
    """The attachment block ("" when no mention was attached or refused)."""
    mentions: tuple[Mention, ...] = ()

    @property
    def expanded(self) -> str:
        """The text followed by the attachment block: what the model reads."""
        return f"{self.text}\n\n{self.attachments}" if self.attachments else self.text

    @property
    def attached(self) -> list[Mention]:
        """The mentions whose file was attached."""
        return [m for m in self.mentions if m.attached]

    @property
    def refused(self) -> list[Mention]:
        """The mentions that were refused, each with its reason."""
        return [m for m in self.mentions if not m.attached]


@dataclass(frozen=True, slots=True, kw_only=True)
class MentionsExpanded(AgentEvent):
    """The user's message named workspace files with ``@``: which were attached and which refused."""

    mentions: list[Mention] = field(default_factory=list)


register_event_type(MentionsExpanded)


def find_mentions(text: str) -> list[MentionRef]:
    """The ``@path`` tokens of `text`, in order (an ``@`` after a non-space character is not one)."""
    if "@" not in text:
        return []
    found: list[MentionRef] = []
    for match in _MENTION.finditer(text):
        quoted = match[1] if match[1] is not None else match[2]
        if quoted is not None:
            path, token = quoted, match[0]
        else:
            path = match[3].rstrip(_TRAILING)
            if not path:
                continue
            token = "@" + path
        found.append(MentionRef(token=token, path=path, quoted=quoted is not None, start=match.start()))
    return found


class _Expander:
    """Resolves, checks and reads the mentions of one text (runs in a worker thread)."""

    def __init__(self, files: FileTools, max_bytes: int, max_total_bytes: int, max_mentions: int) -> None:
        self.files = files
        self.max_bytes = max_bytes
        self.max_total_bytes = max_total_bytes
        self.max_mentions = max_mentions

    def expand(self, text: str, engine: PermissionEngine, ctx: RuntimeContext) -> MentionExpansion:
        refs = find_mentions(text)
        if not refs:
            return MentionExpansion(text=text, attachments="")
        parts: list[str] = []
        mentions: list[Mention] = []
        seen: set[str] = set()
        total = 0
        for ref in refs:
            mention, body = self._one(ref, engine, ctx, seen, total)
            if mention is None:
                continue
            mentions.append(mention)
            total += len(body.encode()) if mention.attached else 0
            parts.append(body)
        return MentionExpansion(text=text, attachments="\n\n".join(parts), mentions=tuple(mentions))

    def _one(
        self, ref: MentionRef, engine: PermissionEngine, ctx: RuntimeContext, seen: set[str], total: int
    ) -> tuple[Mention | None, str]:
        """The mention's outcome and its part of the attachment block; (None, "") to leave it as text."""
        try:
            real = self.files.resolve(ref.path)
        except PathRefused as exc:
            return self._refuse(ref, None, exc.reason)
        rel = os.path.relpath(real, self.files.root).replace(os.sep, "/")
        if real in seen:
            return None, ""
        try:
            info = os.stat(real)
        except OSError:
            if not (ref.quoted or _looks_like_path(ref.path)):
                return None, ""  # "@alice", "@pytest.mark.parametrize(": not meant as a file
            return self._refuse(ref, rel, "no such file in the workspace")
        seen.add(real)
        verdict = engine.check(
            self.files.read_file, ToolUseBlock(id="mention", name="read_file", input={"path": ref.path}), ctx
        )
        if verdict.decision is Decision.DENY:
            return self._refuse(ref, rel, f"reading it is denied ({verdict.reason})" if verdict.reason else "denied")
        if verdict.decision is Decision.ASK:
            return self._refuse(
                ref, rel, f"reading it needs approval ({verdict.reason}); ask the agent to read it with read_file"
            )
        if stat.S_ISDIR(info.st_mode):
            return self._refuse(ref, rel, "it is a directory; mention files, or ask the agent to list it")
        if not stat.S_ISREG(info.st_mode):
            return self._refuse(ref, rel, "it is not a regular file")
        if len(seen) > self.max_mentions:
            return self._refuse(ref, rel, f"a message attaches at most {self.max_mentions} files")
        room = min(self.max_bytes, self.max_total_bytes - total)
        if room <= 0:
            return self._refuse(ref, rel, f"the message's attachments reached the {self.max_total_bytes}-byte limit")
        return self._attach(ref, real, rel, room)

    def _attach(self, ref: MentionRef, real: str, rel: str, room: int) -> tuple[Mention, str]:
        try:
            data, size = _read_capped(real, room)
        except OSError as exc:
            return self._refuse(ref, rel, f"it cannot be read ({exc.strerror or exc})")
        if b"\x00" in data[:_SNIFF_BYTES]:
            return self._refuse(ref, rel, "it is a binary file")
        truncated = size > room
        text = _cut(data, room) if truncated else data.decode("utf-8", errors="replace")
        fence = _fence(text)
        body = f"[Attached file {rel} ({size} bytes), mentioned as {ref.token}]\n{fence}\n{text}"
        if not text.endswith("\n"):
            body += "\n"
        body += fence
        if truncated:
            body += (
                f"\n[... {rel} was cut: the first {len(text.encode())} of {size} bytes are attached; "
                "read_file can read the rest ...]"
            )
        return Mention(token=ref.token, path=ref.path, attached=True, rel=rel, size=size, truncated=truncated), body

    @staticmethod
    def _refuse(ref: MentionRef, rel: str | None, reason: str) -> tuple[Mention, str]:
        mention = Mention(token=ref.token, path=ref.path, attached=False, rel=rel, reason=reason)
        return mention, f"[{ref.token} was not attached: {reason}]"


def _looks_like_path(path: str) -> bool:
    """Whether an unquoted token that names nothing was meant as a file (worth a "no such file" note)."""
    return _CODE_CHARS.search(path) is None and ("/" in path or _EXTENSION.search(path) is not None)


def _read_capped(real: str, limit: int) -> tuple[bytes, int]:
    """The first `limit` + 1 bytes of a file (enough to know it is longer) and its size."""
    with open(real, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        data = f.read(limit + 1)
    return data, max(size, len(data))


def _fence(text: str) -> str:
    """A backtick fence longer than any backtick run in `text`, so the content cannot close it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _engine(
    permission: PermissionContext | PermissionMode | str | None, rules: Sequence[PermissionRule | Mapping[str, Any]]
) -> PermissionEngine:
    return PermissionEngine(PermissionContext.coerce(permission), rules)


def _check_limits(max_bytes: int, max_total_bytes: int, max_mentions: int) -> None:
    if max_bytes < 1 or max_total_bytes < 1 or max_mentions < 1:
        raise UserError("max_bytes, max_total_bytes and max_mentions of file mentions must be positive")


async def expand_mentions(
    text: str,
    root: str | os.PathLike[str],
    *,
    permission: PermissionContext | PermissionMode | str | None = None,
    rules: Sequence[PermissionRule | Mapping[str, Any]] = (),
    ctx: RuntimeContext | None = None,
    max_bytes: int = DEFAULT_MENTION_BYTES,
    max_total_bytes: int = DEFAULT_MENTIONS_TOTAL_BYTES,
    max_mentions: int = DEFAULT_MAX_MENTIONS,
) -> MentionExpansion:
    """Expand the ``@path`` mentions of `text` against the workspace `root` (see the module docstring).

    `permission` and `rules` are what the permission engine judges each mention with, as a
    ``read_file`` call (an agent's ``permission`` and the session's accepted rules). The files are
    read in a worker thread. ``result.expanded`` is the text followed by the attachment block.
    """
    _check_limits(max_bytes, max_total_bytes, max_mentions)
    if not find_mentions(text):
        return MentionExpansion(text=text, attachments="")
    expander = _Expander(FileTools(root), max_bytes, max_total_bytes, max_mentions)
    return await asyncio.to_thread(expander.expand, text, _engine(permission, rules), ctx or RuntimeContext())


class FileMentions(Middleware):
    """Middleware expanding ``@path`` mentions in the user messages of each call (see the module docstring).

    The expanded message is what the session stores: the text as typed, then one text block with
    the attachments; its metadata lists the mentions under ``"mentions"``. A streamed call emits a
    `MentionsExpanded` event before the first model call. Messages answering approvals, carrying
    tool results, or already expanded are left alone.

    Args:
        root: The workspace directory (the root of the agent's `FileTools`).
        max_bytes: Most bytes attached per file (the rest is cut with a note).
        max_total_bytes: Most bytes attached per message.
        max_mentions: Most files attached per message.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        max_bytes: int = DEFAULT_MENTION_BYTES,
        max_total_bytes: int = DEFAULT_MENTIONS_TOTAL_BYTES,
        max_mentions: int = DEFAULT_MAX_MENTIONS,
    ) -> None:
        _check_limits(max_bytes, max_total_bytes, max_mentions)
        self._expander = _Expander(FileTools(root), max_bytes, max_total_bytes, max_mentions)
        self.root = self._expander.files.root

    def __repr__(self) -> str:
        return f"FileMentions({self.root!r})"

    async def on_call(self, run: Run, next: Callable[[], Awaitable[Msg]]) -> Msg:
        """Expand the mentions of the call's user messages, then run the call."""
        if any(_expandable(m) for m in run.input):
            await self._expand_input(run)
        return await next()

    async def _expand_input(self, run: Run) -> None:
        if not run.loaded:
            await run.load()  # the session's accepted rules count, as for a read_file call
        engine = _engine(getattr(run.agent, "permission", None), run.state.rules)
        messages: list[Msg] = []
        mentions: list[Mention] = []
        for msg in run.input:
            if _expandable(msg):
                msg, found = await asyncio.to_thread(self._expand_msg, msg, engine, run.ctx)
                mentions.extend(found)
            messages.append(msg)
        run.input = messages
        if mentions:
            run.event(MentionsExpanded, mentions=mentions)

    def _expand_msg(self, msg: Msg, engine: PermissionEngine, ctx: RuntimeContext) -> tuple[Msg, list[Mention]]:
        parts: list[str] = []
        mentions: list[Mention] = []
        for block in msg.content:
            if type(block) is TextBlock:
                result = self._expander.expand(block.text, engine, ctx)
                if result.attachments:
                    parts.append(result.attachments)
                mentions.extend(result.mentions)
        if not parts:
            return msg, mentions
        expanded = msg.replace(
            content=[*msg.content, TextBlock(text="\n\n".join(parts))],
            metadata={**msg.metadata, META_MENTIONS: [m.to_dict() for m in mentions]},
        )
        return expanded, mentions


def _expandable(msg: Msg) -> bool:
    """A user message with text that may hold mentions (not an answer, not tool results, not done already)."""
    if msg.role != "user" or (msg.metadata and (META_CONFIRM_RESULTS in msg.metadata or META_MENTIONS in msg.metadata)):
        return False
    if any(type(b) is ToolResultBlock for b in msg.content):
        return False
    return any(type(b) is TextBlock and find_mentions(b.text) for b in msg.content)
