"""Agent Skills: folders of instructions, references and scripts in the open ``SKILL.md`` format.

A skill is a folder holding a ``SKILL.md`` file: YAML front matter between two ``---`` lines,
then a Markdown body (the instructions)::

    release-notes/
      SKILL.md            ---
                          name: release-notes
                          description: Write release notes from a list of merged changes.
                          license: Apache-2.0                      # optional
                          compatibility: needs git                 # optional, at most 500 characters
                          allowed-tools: run_command read_file     # optional, informational
                          metadata:                                # optional, a string map
                            agentrt-tool-group: git                # groups `load_skill` activates
                          ---
                          # Release notes
                          ...
      references/...      files the instructions point to
      scripts/...         programs the instructions tell the agent to run (through the shell tool)
      assets/...

`load_skills` reads the front matter of every skill of some folders (each entry one skill folder or
a folder of skill folders; on a name clash the later folder wins) and validates it: ``name`` is 1-64
lowercase letters, digits and single hyphens and equals the folder's name, ``description`` is 1-1024
characters, ``metadata`` maps strings to strings. A problem raises `agentrt.errors.SkillError` naming
the file and line. The body is read only when asked for (`Skill.body`): progressive disclosure.

An agent lists each skill's name and description in its system prompt (`skills_prompt`) and gives the
model the ``load_skill(name, path=None)`` tool (`skill_tool`): it returns the instructions, or one
file of the skill folder, confined to that folder (no absolute paths, no ``..``, no symlink out of
it, no protected path), text only and size-capped. ``load_skill`` only reads: a skill's scripts run
only through the shell tool, under the permission engine like any other command.

Skill text is content from the folder, not from the developer or the user: load skills you trust,
the way you would install a package.
"""

from __future__ import annotations

import asyncio
import codecs
import os
import re
import stat
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeAlias

from agentrt.context import RuntimeContext
from agentrt.errors import SkillError, ToolRetry, UserError
from agentrt.permission import is_dangerous_path
from agentrt.tool.base import Tool

__all__ = [
    "GROUP_METADATA_KEY",
    "LOAD_SKILL",
    "MAX_RESOURCE_BYTES",
    "MAX_SKILL_FILE_BYTES",
    "SKILLS_STATE_KEY",
    "SKILL_FILE",
    "Skill",
    "SkillSource",
    "load_skills",
    "render_skill",
    "skill_tool",
    "skills_prompt",
]

SKILL_FILE = "SKILL.md"
LOAD_SKILL = "load_skill"
"""The name of the tool that loads a skill."""
GROUP_METADATA_KEY = "agentrt-tool-group"
"""``metadata`` key naming the tool group(s) loading the skill activates (comma or space separated)."""
SKILLS_STATE_KEY = "skills"
"""``AgentState.tool_state`` key: the names of the skills loaded in the session, in loading order."""
MAX_SKILL_FILE_BYTES = 1 << 20
"""The largest SKILL.md accepted."""
MAX_RESOURCE_BYTES = 100_000
"""Default cap on what one ``load_skill`` call returns (instructions or one file); the rest is cut with a note."""
MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_COMPATIBILITY = 500
_MAX_LISTED_FILES = 100
_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_SPLIT_LIST = re.compile(r"[\s,]+")

SkillSource: TypeAlias = "str | os.PathLike[str] | Skill | Iterable[str | os.PathLike[str] | Skill]"
"""What `load_skills` takes: a skill folder, a folder of skill folders, a `Skill`, or several of these."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Skill:
    """One skill: its validated front matter and where it lives; the body is read on first use."""

    name: str
    description: str
    folder: Path
    """The skill folder (absolute)."""
    license: str | None = None
    compatibility: str | None = None
    allowed_tools: tuple[str, ...] = ()
    """Tools the skill expects (``allowed-tools``); informational: it grants no permission."""
    metadata: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    _body: list[str] = field(default_factory=list, init=False, repr=False, compare=False, hash=False)

    @classmethod
    def from_folder(cls, folder: str | os.PathLike[str]) -> Skill:
        """Read and validate the front matter of ``folder/SKILL.md``; `SkillError` (file and line) if invalid."""
        path = Path(os.path.abspath(os.fspath(folder)))
        text = _read_skill_file(path / SKILL_FILE)
        return _parse(text, path)

    @property
    def file(self) -> Path:
        """The skill's SKILL.md."""
        return self.folder / SKILL_FILE

    @property
    def tool_groups(self) -> tuple[str, ...]:
        """The tool groups loading this skill activates (``metadata["agentrt-tool-group"]``)."""
        value = self.metadata.get(GROUP_METADATA_KEY, "")
        return tuple(g for g in _SPLIT_LIST.split(value) if g)

    @property
    def body(self) -> str:
        """The Markdown instructions after the front matter (read from disk once, on first use)."""
        cached = self._body
        if not cached:
            text = _read_skill_file(self.file)
            _, _, body_start = _split_front_matter(text, self.file)
            cached.append(text[body_start:].lstrip("\r\n"))
        return cached[0]

    def read(self, path: str, *, max_bytes: int = MAX_RESOURCE_BYTES) -> str:
        """The text of file `path` of the skill folder (a listing for a directory), at most `max_bytes`.

        `path` is relative to the folder: absolute paths, ``..``, a symlink leading out of the folder,
        protected paths (``.env``, keys, ``.git/``) and binary files raise `SkillError`.
        """
        real, rel = self._resolve(path)
        if os.path.isdir(real):
            return self._listing(real, rel)
        return _read_text(real, rel, max_bytes)

    def files(self, limit: int = _MAX_LISTED_FILES) -> list[str]:
        """Paths of the files in the skill folder besides SKILL.md (sorted, at most `limit`; symlinks not followed)."""
        root = os.path.realpath(self.folder)
        found: list[str] = []
        for rel in _walk(root):
            if rel != SKILL_FILE:
                found.append(rel)
                if len(found) >= limit:
                    break
        return found

    def _resolve(self, path: str) -> tuple[str, str]:
        """``(real path, relative path)`` of `path` inside the folder, or `SkillError` saying why not."""
        if not isinstance(path, str) or not path.strip():
            raise SkillError("the path must be a non-empty string relative to the skill folder", path=str(self.folder))
        if "\x00" in path:
            raise SkillError("the path contains a NUL byte", path=str(self.folder))
        spelled = path.replace("\\", "/")
        if spelled.startswith("/") or re.match(r"[A-Za-z]:", spelled) or os.path.isabs(path):
            raise SkillError(f"{path!r} is absolute; give a path relative to the skill folder", path=str(self.folder))
        parts = [p for p in spelled.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise SkillError(f"{path!r} leaves the skill folder ('..' is not allowed)", path=str(self.folder))
        root = os.path.realpath(self.folder)
        rel = "/".join(parts) or "."
        real = os.path.realpath(os.path.join(root, *parts))
        if not _inside(root, real):
            raise SkillError(f"{path!r} leads out of the skill folder (a symlink)", path=str(self.folder))
        if _protected(rel) or _protected(os.path.relpath(real, root)):
            raise SkillError(f"{path!r} is a protected path (secrets or repository internals)", path=str(self.folder))
        if not os.path.exists(real):
            raise SkillError(f"{rel!r} does not exist in skill {self.name!r}", path=str(self.folder))
        return real, rel

    def _listing(self, real: str, rel: str) -> str:
        """The entries of folder `real` the skill would let be read (hidden, protected and escaping ones left out)."""
        root = os.path.realpath(self.folder)
        entries = []
        with os.scandir(real) as it:
            for entry in sorted(it, key=lambda e: e.name):
                if entry.name.startswith(".") or _protected(entry.name):
                    continue
                if entry.is_symlink() and not _inside(root, os.path.realpath(entry.path)):
                    continue
                entries.append(f"{entry.name}/" if entry.is_dir() else entry.name)
                if len(entries) >= _MAX_LISTED_FILES:
                    entries.append("...")
                    break
        return f"{rel}/ in skill {self.name!r}:\n" + ("\n".join(entries) if entries else "(empty)")


def load_skills(path_or_paths: SkillSource) -> dict[str, Skill]:
    """The skills of `path_or_paths` by name: each entry a skill folder, a folder of skill folders, or a `Skill`.

    In a folder of skill folders, every subfolder holding a SKILL.md is a skill (hidden ones are
    skipped). When two entries hold a skill of the same name, the later one wins. A folder that
    does not exist, or a skill whose front matter is invalid, raises `SkillError`.
    """
    found: dict[str, Skill] = {}
    for entry in _entries(path_or_paths):
        if isinstance(entry, Skill):
            found[entry.name] = entry
            continue
        for skill in _skills_in(Path(os.path.abspath(os.fspath(entry)))):
            found[skill.name] = skill
    return found


def skills_prompt(skills: Iterable[Skill]) -> str:
    """The system-prompt section listing each skill's name and description ("" when there are none)."""
    listed = sorted(skills, key=lambda s: s.name)
    if not listed:
        return ""
    lines = [
        "# Skills",
        f"Skills hold instructions, reference files and scripts for particular tasks. When a task matches a "
        f"skill's description, call {LOAD_SKILL} with the skill's name first and follow the instructions it "
        f"returns; {LOAD_SKILL}(name, path) reads one file of the skill. Scripts of a skill run only through "
        "the shell tool.",
        "<available_skills>",
    ]
    lines.extend(f'<skill name="{s.name}">{_escape(" ".join(s.description.split()))}</skill>' for s in listed)
    lines.append("</available_skills>")
    return "\n".join(lines)


OnLoad: TypeAlias = Callable[[Skill, RuntimeContext], Awaitable["str | None"]]
"""Called when ``load_skill`` loads a skill's instructions; may return a note for the model."""


def skill_tool(
    skills: Callable[[], Mapping[str, Skill]],
    *,
    on_load: OnLoad | None = None,
    max_bytes: int = MAX_RESOURCE_BYTES,
) -> Tool:
    """The read-only ``load_skill(name, path=None)`` tool over the skills `skills()` returns at each call.

    Without `path` it returns the skill's instructions (with its folder and files) and calls
    `on_load`; with `path`, one file of the skill folder (see `Skill.read`). Errors go back to the model.
    """
    if max_bytes < 1:
        raise UserError(f"max_bytes must be positive, not {max_bytes!r}")

    async def handler(args: Mapping[str, Any], ctx: RuntimeContext) -> str:
        name, path = args.get("name"), args.get("path")
        if not isinstance(name, str) or not name:
            raise ToolRetry("'name' must be the name of one of the listed skills")
        if path is not None and not isinstance(path, str):
            raise ToolRetry("'path' must be a path relative to the skill folder, or omitted")
        available = skills()
        skill = available.get(name)
        if skill is None:
            raise ToolRetry(f"unknown skill {name!r}; skills: {', '.join(sorted(available)) or '(none)'}")
        try:
            if path:
                return await asyncio.to_thread(skill.read, path, max_bytes=max_bytes)
            text = await asyncio.to_thread(render_skill, skill, max_bytes)
        except SkillError as exc:
            raise ToolRetry(str(exc)) from None
        note = await on_load(skill, ctx) if on_load is not None else None
        return f"{text}\n\n{note}" if note else text

    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "The skill's name, as listed."},
            "path": {
                "type": "string",
                "description": "A file of the skill folder to read instead of the instructions, relative to it "
                "(e.g. references/guide.md); a folder gives its listing.",
            },
        },
        "required": ["name"],
        "additionalProperties": False,
    }
    return Tool.from_handler(
        LOAD_SKILL,
        "Load a skill listed in the system prompt: returns its instructions, or with `path` one of its files. "
        "Call it before a task the skill covers.",
        schema,
        handler,
        read_only=True,
    )


def render_skill(skill: Skill, max_bytes: int = MAX_RESOURCE_BYTES) -> str:
    """What ``load_skill(name)`` returns: the instructions, the folder and its files (blocking I/O)."""
    body = _cut(skill.body, max_bytes, "the instructions")
    files = skill.files()
    parts = [f'<skill name="{skill.name}" folder="{_escape(str(skill.folder))}">', body.rstrip(), "</skill>"]
    if files:
        shown = ", ".join(files) + (", ..." if len(files) >= _MAX_LISTED_FILES else "")
        parts.append(f"Files of this skill ({LOAD_SKILL}(name, path) reads one): {shown}")
    if any(f.startswith("scripts/") for f in files):
        parts.append(
            f"Its scripts run only through the shell tool, with their full path under {skill.folder}; "
            "each command is subject to the usual approvals."
        )
    return "\n".join(parts)


# -- discovery ------------------------------------------------------------------------------------------
def _entries(source: SkillSource) -> Iterator[str | os.PathLike[str] | Skill]:
    if isinstance(source, (str, os.PathLike, Skill)):
        yield source
        return
    if not isinstance(source, Iterable):
        raise UserError(f"skills must be folder paths or Skill objects, not {type(source).__name__!r}")
    for item in source:
        if not isinstance(item, (str, os.PathLike, Skill)):
            raise UserError(f"skills must be folder paths or Skill objects, not {type(item).__name__!r}")
        yield item


def _skills_in(path: Path) -> list[Skill]:
    if path.name == SKILL_FILE and path.is_file():
        return [Skill.from_folder(path.parent)]
    if not path.is_dir():
        what = "is not a folder" if path.exists() else "does not exist"
        raise SkillError(f"the skills folder {what}", path=str(path))
    if (path / SKILL_FILE).is_file():
        return [Skill.from_folder(path)]
    children = sorted(
        (c for c in path.iterdir() if not c.name.startswith(".") and (c / SKILL_FILE).is_file()), key=lambda c: c.name
    )
    return [Skill.from_folder(c) for c in children]


def _walk(root: str) -> Iterator[str]:
    """Relative paths of the files under `root`, sorted, depth-first, not following directory symlinks."""
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            with os.scandir(os.path.join(root, rel_dir)) as it:
                entries = sorted(it, key=lambda e: e.name, reverse=True)
        except OSError:
            continue
        subdirs = []
        for entry in reversed(entries):
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if entry.name.startswith(".") or _protected(rel):
                continue
            if entry.is_symlink():
                target = os.path.realpath(entry.path)  # listed when it is a file inside the folder
                if _inside(root, target) and os.path.isfile(target):
                    yield rel
            elif entry.is_dir():
                subdirs.append(rel)
            else:
                yield rel
        stack.extend(reversed(subdirs))


# -- reading ----------------------------------------------------------------------------------------------
def _read_skill_file(file: Path) -> str:
    try:
        with open(file, "rb") as f:
            data = f.read(MAX_SKILL_FILE_BYTES + 1)
    except FileNotFoundError:
        raise SkillError(f"no {SKILL_FILE} in the skill folder", path=str(file)) from None
    except OSError as exc:
        raise SkillError(f"cannot read {SKILL_FILE}: {exc.strerror or exc}", path=str(file)) from None
    if len(data) > MAX_SKILL_FILE_BYTES:
        raise SkillError(f"{SKILL_FILE} is larger than {MAX_SKILL_FILE_BYTES} bytes", path=str(file))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SkillError(f"{SKILL_FILE} is not UTF-8 text (byte {exc.start})", path=str(file), line=line) from None
    return text.removeprefix("\ufeff")


def _read_text(real: str, rel: str, max_bytes: int) -> str:
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(real, flags)
    except OSError as exc:
        raise SkillError(f"cannot read {rel!r}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise SkillError(f"{rel!r} is not a regular file")
        data = f.read(max_bytes + 4)
    if b"\x00" in data[:8192]:
        raise SkillError(f"{rel!r} is a binary file; only text files can be read (use the shell tool for others)")
    if info.st_size <= max_bytes and len(data) <= max_bytes:
        return data.decode("utf-8", errors="replace")
    # Cut at a character boundary: a sequence split by the cap is left out, not shown as U+FFFD.
    text = codecs.getincrementaldecoder("utf-8")(errors="replace").decode(data[:max_bytes], final=False)
    return f"{text}\n[cut: {rel} has {info.st_size} bytes; only the first {max_bytes} are shown]"


def _cut(text: str, max_bytes: int, what: str) -> str:
    encoded = text.encode("utf-8")
    if len(encoded) <= max_bytes:
        return text
    kept = codecs.getincrementaldecoder("utf-8")().decode(encoded[:max_bytes], final=False)
    return f"{kept}\n[cut: {what} have {len(encoded)} bytes; only the first {max_bytes} are shown]"


def _protected(rel: str) -> bool:
    """Whether a path relative to the skill folder names secrets or repository internals.

    Judged on its own parts: as an absolute path, so neither the process's working directory nor
    where the skill folder lives plays a part.
    """
    return is_dangerous_path("/" + rel.replace(os.sep, "/").lstrip("/"))


def _inside(root: str, path: str) -> bool:
    try:
        return os.path.commonpath([root, path]) == root
    except ValueError:
        return False


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


# -- the front matter -------------------------------------------------------------------------------------
def _split_front_matter(text: str, file: Path) -> tuple[str, int, int]:
    """``(YAML text, line of the closing ---, offset where the body starts)``; `SkillError` if malformed."""
    lines = text.split("\n")
    if lines[0].rstrip() != "---":
        raise SkillError(
            f"{SKILL_FILE} must start with YAML front matter: a '---' line, the fields (name, description, ...) "
            "and a closing '---' line",
            path=str(file),
            line=1,
        )
    offset = len(lines[0]) + 1
    for number, line in enumerate(lines[1:], start=2):
        if line.rstrip() == "---":
            yaml_text = text[len(lines[0]) + 1 : offset]
            return yaml_text, number, offset + len(line) + 1
        offset += len(line) + 1
    raise SkillError("the front matter opened on line 1 is never closed by a '---' line", path=str(file), line=1)


class _FrontMatter:
    """The front matter's fields as YAML nodes, with the file line of each (for error messages)."""

    def __init__(self, yaml_text: str, file: Path, closing_line: int) -> None:
        self.yaml_text = yaml_text
        self.file = file
        self.nodes: dict[str, tuple[Any, int]] = {}
        yaml = _yaml()
        loader = None
        try:
            loader = yaml.SafeLoader(yaml_text)  # checks the characters first
            root = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            raise self._yaml_error(exc) from None
        except yaml.reader.ReaderError as exc:
            raise self.error(f"invalid character in the front matter: {exc.reason}", self.line(exc.position)) from None
        except yaml.YAMLError as exc:  # pragma: no cover - every parser error carries a mark
            raise self.error(f"invalid YAML in the front matter: {exc}", 1) from None
        except RecursionError:
            raise self.error("the front matter nests too deeply", 2) from None
        finally:
            if loader is not None:
                loader.dispose()
        if root is None:
            raise self.error(f"the front matter (lines 1-{closing_line}) is empty: it needs name and description", 1)
        if not isinstance(root, yaml.MappingNode):
            raise self.error(
                "the front matter must be a mapping of fields (name: ..., description: ...)", self.at(root)
            )
        for key, value in root.value:
            if not isinstance(key, yaml.ScalarNode) or _is_null(key):
                raise self.error("front matter keys must be plain names", self.at(key))
            if key.value in self.nodes:
                first = self.nodes[key.value][1]
                raise self.error(f"field {key.value!r} is given twice (first on line {first})", self.at(key))
            self.nodes[key.value] = (value, self.at(key))

    def _yaml_error(self, exc: Any) -> SkillError:
        """A parser error at its line: where the construct began when the text ended inside it."""
        problem, context = exc.problem or "", exc.context or ""
        mark = exc.problem_mark
        if context and exc.context_mark is not None and (mark is None or mark.index >= len(self.yaml_text.rstrip())):
            mark = exc.context_mark  # "found unexpected end of stream" (an unclosed quote or bracket)
        text = f"{problem} {context}".strip() if problem else context or "invalid YAML"
        return self.error(f"invalid YAML in the front matter: {text}", self.line_at(mark or exc.context_mark))

    def line(self, index: int) -> int:
        """The file line of character `index` of the YAML text (which starts on line 2)."""
        return 2 + self.yaml_text.count("\n", 0, max(0, min(index, len(self.yaml_text))))

    def line_at(self, mark: Any) -> int:
        return self.line(mark.index) if mark is not None else 1

    def at(self, node: Any) -> int:
        return self.line_at(node.start_mark)

    def error(self, message: str, line: int) -> SkillError:
        return SkillError(message, path=str(self.file), line=line)

    def text(self, key: str, *, required: bool = False, most: int | None = None) -> str | None:
        """Field `key` as text (a YAML scalar), or None when absent or null."""
        found = self.nodes.get(key)
        if found is None:
            if required:
                raise self.error(f"the front matter has no {key!r} field (it is required)", 1)
            return None
        node, line = found
        yaml = _yaml()
        if not isinstance(node, yaml.ScalarNode):
            kind = "list" if isinstance(node, yaml.SequenceNode) else "mapping"
            raise self.error(f"{key!r} must be text, not a {kind}", line)
        value = None if _is_null(node) else str(node.value).strip()
        if not value:
            if required:
                raise self.error(f"{key!r} is empty", line)
            return None
        if most is not None and len(value) > most:
            raise self.error(f"{key!r} has {len(value)} characters; at most {most} are allowed", line)
        return value

    def allowed_tools(self) -> tuple[str, ...]:
        found = self.nodes.get("allowed-tools")
        if found is None or _is_null(found[0]):
            return ()
        node, line = found
        yaml = _yaml()
        if isinstance(node, yaml.ScalarNode):
            return tuple(_split_tools(str(node.value)))
        if isinstance(node, yaml.SequenceNode):
            tools = []
            for item in node.value:
                if not isinstance(item, yaml.ScalarNode) or _is_null(item):
                    raise self.error("each entry of 'allowed-tools' must be a tool name", self.at(item))
                tools.append(str(item.value).strip())
            return tuple(t for t in tools if t)
        raise self.error("'allowed-tools' must be a space-separated string or a list of tool names", line)

    def metadata(self) -> Mapping[str, str]:
        found = self.nodes.get("metadata")
        if found is None or _is_null(found[0]):
            return MappingProxyType({})
        node, line = found
        yaml = _yaml()
        if not isinstance(node, yaml.MappingNode):
            raise self.error("'metadata' must be a mapping of string keys to string values", line)
        result: dict[str, str] = {}
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode) or _is_null(key):
                raise self.error("'metadata' keys must be strings", self.at(key))
            if not isinstance(value, yaml.ScalarNode):
                raise self.error(f"metadata {key.value!r} must be a string, not a nested value", self.at(key))
            if key.value in result:
                raise self.error(f"metadata {key.value!r} is given twice", self.at(key))
            result[str(key.value)] = "" if _is_null(value) else str(value.value)
        return MappingProxyType(result)


def _parse(text: str, folder: Path) -> Skill:
    file = folder / SKILL_FILE
    yaml_text, closing, _ = _split_front_matter(text, file)
    fm = _FrontMatter(yaml_text, file, closing)
    name = fm.text("name", required=True)
    assert name is not None
    name_line = fm.nodes["name"][1]
    if len(name) > MAX_NAME or not _NAME.fullmatch(name):
        raise fm.error(
            f"name {name!r} must be 1-{MAX_NAME} lowercase letters, digits and hyphens (no hyphen at the start "
            "or end, no two in a row)",
            name_line,
        )
    if name != folder.name:
        raise fm.error(f"name {name!r} must equal the skill folder's name {folder.name!r}", name_line)
    description = fm.text("description", required=True, most=MAX_DESCRIPTION)
    assert description is not None
    return Skill(
        name=name,
        description=description,
        folder=folder,
        license=fm.text("license"),
        compatibility=fm.text("compatibility", most=MAX_COMPATIBILITY),
        allowed_tools=fm.allowed_tools(),
        metadata=fm.metadata(),
    )


def _split_tools(value: str) -> list[str]:
    """``"Bash(git add:*) Read"`` or ``"run_command, read_file"`` → the entries (spaces inside parentheses kept)."""
    entries: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in value:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        if depth == 0 and (ch == "," or ch.isspace()):
            if current:
                entries.append("".join(current))
                current = []
            continue
        current.append(ch)
    if current:
        entries.append("".join(current))
    return entries


def _is_null(node: Any) -> bool:
    return bool(getattr(node, "tag", "") == "tag:yaml.org,2002:null")


def _yaml() -> Any:
    try:
        import yaml
    except ImportError:
        raise UserError("reading SKILL.md front matter needs PyYAML: pip install 'agentrt[harness]'") from None
    return yaml
