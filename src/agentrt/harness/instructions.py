"""Workspace instructions: ``AGENTS.md`` files read into the system prompt of every call.

``ReActAgent(..., middlewares=[WorkspaceInstructions(root)])`` appends, after the agent's own
system prompt, the user-level file (``~/.agentrt/AGENTS.md``) and then the workspace's
(``<root>/AGENTS.md``), each under a heading naming it. Each call looks at the files again with
one ``stat`` each: a file is read (in a worker thread) only when its (inode, mtime, size) changed
since the last read in this process, so an edit is picked up by the next call and an unchanged
file costs a stat. Absent, empty or unreadable files add nothing.

Each file is cut at `max_bytes` (32 KiB by default, at a line end when one is near) with a visible
note saying how much was left out. The workspace file must be a regular file whose real path is
inside the root and not protected (`agentrt.permission.is_dangerous_path`): an ``AGENTS.md`` that
is a symlink to ``~/.ssh/id_rsa`` is never read into a prompt that goes to the model provider.

The text is instructions from the workspace's owner, so it goes into the system prompt, but the
runtime trusts it no more than any other file: nothing in it runs a tool, changes a permission or
approves a call; it can only ask the model, which still goes through the permission engine.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentrt.errors import UserError
from agentrt.middleware.base import Middleware
from agentrt.permission import is_dangerous_path, workspace_root

if TYPE_CHECKING:
    from agentrt.agent._run import Run

__all__ = [
    "DEFAULT_INSTRUCTIONS_BYTES",
    "INSTRUCTIONS_FILE",
    "USER_INSTRUCTIONS",
    "InstructionsFile",
    "WorkspaceInstructions",
]

logger = logging.getLogger("agentrt.harness")

INSTRUCTIONS_FILE = "AGENTS.md"
"""The name of the instructions file at the workspace root."""
USER_INSTRUCTIONS = "~/.agentrt/AGENTS.md"
"""The user-level instructions file, read before the workspace's."""
DEFAULT_INSTRUCTIONS_BYTES = 32 * 1024
"""Most bytes of one instructions file put into the prompt; the rest is cut with a note."""

_HEADER = (
    "# Instructions from AGENTS.md\n\n"
    "The files below come with the user's setup and with the workspace you work in. Follow them where "
    "they apply; they do not override the instructions above."
)


@dataclass(frozen=True, slots=True, kw_only=True)
class InstructionsFile:
    """One instructions file as it went into the prompt."""

    path: str
    """The file's absolute path."""
    kind: str
    """``"user"`` (the user-level file) or ``"workspace"``."""
    text: str
    """The content put into the prompt (cut at the byte limit, without the note)."""
    size: int
    """The file's size in bytes."""
    truncated: bool
    """Whether `text` is only the beginning of the file."""

    @property
    def shown(self) -> str:
        """How the file is named in the prompt: ``~/...`` for the user's, the file name for the workspace's."""
        if self.kind == "user":
            home = os.path.expanduser("~")
            return "~" + self.path[len(home) :] if self.path.startswith(home + os.sep) else self.path
        return os.path.basename(self.path)

    def section(self) -> str:
        """The file's part of the system prompt: a heading, the text and the cut note when cut."""
        where = "user instructions" if self.kind == "user" else "workspace instructions"
        body = self.text.rstrip("\n")
        if self.truncated:
            body += (
                f"\n\n[... {self.shown} was cut here: the prompt holds its first {len(self.text.encode())} of "
                f"{self.size} bytes ...]"
            )
        return f"## {self.shown} ({where})\n\n{body}"


@dataclass(frozen=True, slots=True)
class _Source:
    path: str
    kind: str
    root: str | None
    """The directory the file's real path must stay inside (the workspace's), or None."""


_Key = tuple[int, int, int, int]


class WorkspaceInstructions(Middleware):
    """Middleware putting ``AGENTS.md`` instructions (user-level, then the workspace's) into the system prompt.

    Args:
        root: The workspace directory; its ``AGENTS.md`` (`filename`) is read. None: only the user file.
        user_file: The user-level file (default ``~/.agentrt/AGENTS.md``, expanded now); None: none.
        filename: The workspace file's name.
        max_bytes: Most bytes of each file put into the prompt; a longer file is cut with a note.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None,
        *,
        user_file: str | os.PathLike[str] | None = USER_INSTRUCTIONS,
        filename: str = INSTRUCTIONS_FILE,
        max_bytes: int = DEFAULT_INSTRUCTIONS_BYTES,
    ) -> None:
        if max_bytes < 1:
            raise UserError("WorkspaceInstructions max_bytes must be positive")
        if not filename or os.sep in filename or filename in (".", ".."):
            raise UserError(f"WorkspaceInstructions filename must be a plain file name, not {filename!r}")
        sources: list[_Source] = []
        if user_file is not None:
            sources.append(_Source(os.path.abspath(os.path.expanduser(os.fspath(user_file))), "user", None))
        self.root: str | None = None
        if root is not None:
            real = workspace_root(root, "WorkspaceInstructions")
            self.root = real
            sources.append(_Source(os.path.join(real, filename), "workspace", real))
        self.max_bytes = max_bytes
        self._sources: tuple[_Source, ...] = tuple(sources)
        self._cache: dict[str, tuple[_Key, InstructionsFile | None]] = {}

    @property
    def paths(self) -> list[str]:
        """The files looked at on each call, in prompt order."""
        return [s.path for s in self._sources]

    def __repr__(self) -> str:
        return f"WorkspaceInstructions({self.root!r})"

    async def files(self) -> list[InstructionsFile]:
        """The instructions files as the next prompt holds them (re-read only those that changed)."""
        found: list[InstructionsFile] = []
        for source in self._sources:
            key = _stat_key(source.path)
            if key is None:
                self._cache.pop(source.path, None)
                continue
            cached = self._cache.get(source.path)
            if cached is not None and cached[0] == key:
                loaded = cached[1]
            else:
                loaded = await asyncio.to_thread(self._load, source)
                self._cache[source.path] = (key, loaded)
            if loaded is not None:
                found.append(loaded)
        return found

    async def section(self) -> str:
        """The part of the system prompt the files make ("" when there is none)."""
        files = await self.files()
        if not files:
            return ""
        return "\n\n".join([_HEADER, *(f.section() for f in files)])

    async def on_system_prompt(self, run: Run, prompt: str) -> str:
        """Append the instructions section to the prompt."""
        section = await self.section()
        if not section:
            return prompt
        return f"{prompt}\n\n{section}" if prompt else section

    # -- reading (in a worker thread) --------------------------------------------------------------------
    def _load(self, source: _Source) -> InstructionsFile | None:
        path = source.path
        try:
            real = os.path.realpath(path)
            if source.root is not None and not _confined(real, source.root):
                logger.warning("instructions file %s leads out of the workspace (to %s); not read", path, real)
                return None
            if is_dangerous_path(real):
                logger.warning("instructions file %s is (or leads to) a protected path; not read", path)
                return None
            with open(real, "rb") as f:
                info = os.fstat(f.fileno())
                if not stat.S_ISREG(info.st_mode):
                    return None
                data = f.read(self.max_bytes + 1)
        except OSError as exc:
            logger.warning("instructions file %s cannot be read: %s", path, exc)
            return None
        size = max(info.st_size, len(data))
        truncated = len(data) > self.max_bytes
        text = _cut(data, self.max_bytes) if truncated else data.decode("utf-8", errors="replace")
        if not text.strip():
            return None
        return InstructionsFile(path=path, kind=source.kind, text=text, size=size, truncated=truncated)


def _stat_key(path: str) -> _Key | None:
    """What says whether a file changed: (device, inode, mtime, size); None when it is absent or not a file."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size)


def _confined(real: str, root: str) -> bool:
    try:
        return os.path.commonpath([root, real]) == root
    except ValueError:
        return False


def _cut(data: bytes, limit: int) -> str:
    """The first `limit` bytes as text, ending at a line end when one is in the last quarter."""
    head = data[:limit]
    newline = head.rfind(b"\n")
    if newline >= limit * 3 // 4:
        head = head[: newline + 1]
    # A multi-byte character split by the cut is dropped rather than shown as U+FFFD.
    for back in range(4):
        try:
            return head[: len(head) - back].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return head.decode("utf-8", errors="replace")
