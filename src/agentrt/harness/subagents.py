"""Subagents on demand: helpers the model hands tasks to, declared in files or defined on the spot.

``toolkit.register(SubagentTools(specs, ...))`` gives the model four tools:

- ``agent_spawn(task, name=None, spec=None, background=False)``: run a subagent on `task`. `name`
  picks a declared subagent (`SubagentSpec`, usually read from ``subagents/<name>.md`` by
  `load_subagent_specs`); `spec` defines one inline (prompt, tools, ...). In the foreground the call
  runs like ``agent.as_tool()``: the subagent's events are forwarded into the parent's stream with
  their own `source`, its tokens count in the parent's usage, and an approval it waits for pauses
  the parent (a ``subagent`` pending entry) until the answer resumes both. With
  ``background=True`` the call returns a task id at once and the subagent runs in an asyncio task.
- ``task_output(task_id, wait=0)``: a background task's status (running, completed, failed,
  cancelled, interrupted) and its result once done, optionally waiting up to `wait` seconds.
- ``task_cancel(task_id)``: stop a running background task (its running tools are cancelled and it
  checkpoints what it has) and wait until it stopped.
- ``task_list()``: the session's background tasks.

Sessions. A subagent task runs in its own session, ``<parent session>/tasks/<task_id>``, under the
subagent's name (its `state_key`), with the parent's user, context attributes and state store.

Records. Each background task has a record in the parent session's state
(``AgentState.tool_state["subagents"]``): status, name, task, result (cut at
`SubagentLimits.max_result_chars`), error, tokens. The spawn writes it ``running`` through the
parent call's checkpoint; the end of the task writes it again, directly to the store under the
parent session's lock once no call of that session holds it (a running call may see the end
earlier, through ``task_output``, and checkpoints it itself). A record read as ``running`` with no
live task in this process (the process that ran it crashed or was stopped) is marked
``interrupted``: a task is never silently lost. In a deployment where several processes serve one
session, a task running in another process reads as interrupted here until it ends and its own
process writes the final record.

Events. While a call of the parent session is being streamed, a background task's events go into
that stream, with the subagent's `source`; when none is, they are dropped (never buffered).
`SubagentTaskStarted` / `SubagentTaskFinished` mark a task's start and end in the parent's stream.

Approvals. A foreground subagent asks through the parent. A background one cannot ask anybody:
a call of it that needs approval is denied (and an external tool gets an error result), with a
reason saying so, and the subagent goes on.

Limits (`SubagentLimits`), refused with an error result before anything is spawned: nesting depth
(a subagent spawning subagents), concurrent tasks per parent session (foreground and background),
and the tokens spent by all the subagents of a parent session (also checked before each model
call of a running subagent, which stops with an error once the budget is spent).

A subagent's own background tasks are cancelled when its task ends: nobody could collect them.

Workspaces. ``workspace: isolated`` roots the subagent's file tools at a fresh folder
``<workspace>/.agentrt/tasks/<task_id>/``; ``shared`` (the default) gives it the same tools.
`FileTools` move by themselves; another tool bound to a folder moves if its owner has a
``with_root(path)`` method returning a copy rooted there. One that cannot move is refused when the
spec lists it, and left out when the spec takes all the parent's tools.

Permissions. A subagent is judged by the parent's permission context as it applies at the spawn
(plan mode included), so spawning grants nothing the parent does not have; it gets only tools
the calling agent has (or, at the top level, those of the `toolkit` given to `SubagentTools`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import dataclasses
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from agentrt import events as ev
from agentrt.agent._run import Run, current_run
from agentrt.agent.as_tool import agent_as_tool
from agentrt.agent.base import AgentBase
from agentrt.agent.react import ReActAgent
from agentrt.context import RuntimeContext
from agentrt.errors import ToolRetry, ToolSuspended, UserError
from agentrt.message import GenerateReason, Msg, ToolResultBlock, new_id
from agentrt.middleware.base import Middleware
from agentrt.model.base import ChatModel
from agentrt.permission import ConfirmResult
from agentrt.state.pending import META_PENDING
from agentrt.tool.base import Tool, tool
from agentrt.tool.toolkit import Toolkit

__all__ = [
    "SUBAGENT_TOOLS",
    "TASKS_KEY",
    "ModelChoice",
    "SubagentLimits",
    "SubagentSpec",
    "SubagentSpecError",
    "SubagentTask",
    "SubagentTools",
    "TaskStatus",
    "WorkspaceMode",
    "load_subagent_specs",
    "parse_subagent_spec",
]

logger = logging.getLogger("agentrt.harness")

WorkspaceMode: TypeAlias = Literal["isolated", "shared"]
"""Where a subagent's file tools work: a fresh folder of its own, or the parent's."""
TaskStatus: TypeAlias = Literal["running", "completed", "failed", "cancelled", "interrupted"]
"""The status of a subagent task."""
ModelChoice: TypeAlias = "ChatModel | str | Callable[[SubagentSpec], ChatModel | str]"
"""The model of subagents whose spec names none: a model, an id, or a function of the spec."""

SUBAGENT_TOOLS = ("agent_spawn", "task_output", "task_cancel", "task_list")
"""The tools `SubagentTools` adds (a subagent gets them only when its spec lists them)."""
TASKS_KEY = "subagents"
"""`AgentState.tool_state` key of the parent session: ``{"tasks": {task_id: record}, "tokens": n}``."""

_KEYS = ("name", "description", "model", "tools", "max_iters", "workspace")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_TOOL_NAME = re.compile(r"^[^\s,\[\]'\"]{1,128}$")
_FINAL = ("completed", "failed", "cancelled", "interrupted")
_PAUSED = (GenerateReason.AWAITING_CONFIRMATION, GenerateReason.AWAITING_EXTERNAL_EXECUTION)
_NO_HUMAN = "a background subagent cannot ask for approval, so calls that need it are refused"
_LOST = "the process running this task stopped before it finished (its record said running)"
_MAX_UNATTENDED_ROUNDS = 20
_CANCEL_WAIT = 30.0
_DEPTH: contextvars.ContextVar[int] = contextvars.ContextVar("agentrt_subagent_depth", default=0)
"""How many subagent levels the current task runs under (0: not inside a subagent of ours)."""


# -- specs ---------------------------------------------------------------------------------------------
class SubagentSpecError(UserError):
    """A subagent spec (``subagents/<name>.md`` or a `SubagentSpec`) cannot be used.

    The message starts with ``file:line:`` when the problem has a place; `path` and `line` hold them
    (None when unknown).
    """

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        where = f"{path}:{line}: " if path and line else f"{path}: " if path else ""
        super().__init__(f"{where}{message}")
        self.path = path
        self.line = line


@dataclass(frozen=True, slots=True, kw_only=True)
class SubagentSpec:
    """What a subagent is: its name, when to use it, its system prompt, model, tools and limits.

    Attributes:
        name: The subagent's name (letters, digits, ``_`` and ``-``): the `source` of its events and
            the agent part of its sessions.
        description: When to use it (the model reads it in ``agent_spawn``'s description).
        prompt: The system prompt.
        model: A `ChatModel` or a model id; None (or ``"inherit"``): `SubagentTools`' model, else the
            calling agent's.
        tools: Names of the tools it may use, among the calling agent's; None: all of them except
            the subagent tools (list ``agent_spawn`` to let it spawn subagents in turn).
        max_iters: Most reasoning steps per task; None: the calling agent's.
        workspace: ``"isolated"`` (file tools rooted at a fresh folder) or ``"shared"``.
        path: The file it was read from, if any (named in errors).
    """

    name: str
    description: str = ""
    prompt: str = ""
    model: ChatModel | str | None = None
    tools: tuple[str, ...] | None = None
    max_iters: int | None = None
    workspace: WorkspaceMode = "shared"
    path: str | None = None

    def __post_init__(self) -> None:
        path = self.path
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise SubagentSpecError(
                f"subagent name {self.name!r} must be 1-64 letters, digits, '_' or '-' (a letter or digit first)",
                path=path,
            )
        if self.model == "inherit" or self.model == "":
            object.__setattr__(self, "model", None)
        elif self.model is not None and not isinstance(self.model, (ChatModel, str)):
            raise SubagentSpecError(f"subagent {self.name!r}: model must be a ChatModel or a model id", path=path)
        if self.tools is not None:
            if isinstance(self.tools, str) or not all(isinstance(t, str) and t for t in self.tools):
                raise SubagentSpecError(f"subagent {self.name!r}: tools must be a list of tool names", path=path)
            object.__setattr__(self, "tools", tuple(self.tools))
        if self.max_iters is not None and (
            isinstance(self.max_iters, bool) or not isinstance(self.max_iters, int) or self.max_iters < 1
        ):
            raise SubagentSpecError(f"subagent {self.name!r}: max_iters must be a positive integer", path=path)
        if self.workspace not in ("isolated", "shared"):
            raise SubagentSpecError(
                f"subagent {self.name!r}: workspace must be 'isolated' or 'shared', not {self.workspace!r}", path=path
            )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (a model object is left out: only ids and ``inherit`` survive a round trip)."""
        return {
            "name": self.name,
            "description": self.description,
            "prompt": self.prompt,
            "model": self.model if isinstance(self.model, str) else None,
            "tools": list(self.tools) if self.tools is not None else None,
            "max_iters": self.max_iters,
            "workspace": self.workspace,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SubagentSpec:
        """A spec from its JSON form."""
        tools = data.get("tools")
        return cls(
            name=str(data.get("name") or "subagent"),
            description=str(data.get("description") or ""),
            prompt=str(data.get("prompt") or ""),
            model=data.get("model"),
            tools=tuple(tools) if tools is not None else None,
            max_iters=data.get("max_iters"),
            workspace=data.get("workspace") or "shared",
        )


def load_subagent_specs(folder: str | os.PathLike[str]) -> dict[str, SubagentSpec]:
    """Read every ``*.md`` file of `folder` (usually ``<workspace>/subagents``) as a subagent spec, by name.

    Each file is Markdown with YAML-style front matter between ``---`` lines (keys ``name``,
    ``description``, ``model``, ``tools``, ``max_iters``, ``workspace``); the body is the system
    prompt; the name defaults to the file name without ``.md``. A bad file raises
    `SubagentSpecError` naming the file and the line. Reads files: call it at setup, not in a loop.
    """
    root = Path(folder)
    if not root.is_dir():
        raise SubagentSpecError("not a folder of subagent specs", path=str(root))
    specs: dict[str, SubagentSpec] = {}
    for file in sorted(root.glob("*.md")):
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SubagentSpecError(f"cannot read the file: {exc}", path=str(file)) from None
        spec = parse_subagent_spec(text, path=str(file))
        if spec.name in specs:
            raise SubagentSpecError(
                f"subagent {spec.name!r} is declared twice (also in {specs[spec.name].path})", path=str(file), line=1
            )
        specs[spec.name] = spec
    return specs


def parse_subagent_spec(text: str, *, path: str = "<string>", name: str | None = None) -> SubagentSpec:
    """Parse one subagent file (front matter + system prompt); `name` defaults to the file's stem.

    Raises `SubagentSpecError` with the file and line of the first problem.
    """
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        raise SubagentSpecError("the file must start with a '---' line opening the front matter", path=path, line=1)
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    if end is None:
        raise SubagentSpecError("the front matter opened here is never closed with a '---' line", path=path, line=1)
    fields = _front_matter(lines[1:end], path)
    body = "\n".join(lines[end + 1 :]).strip()
    if not body:
        raise SubagentSpecError(
            "no system prompt: write the subagent's instructions below the front matter", path=path, line=end + 1
        )
    description, description_line = fields.get("description", ("", 1))
    if not isinstance(description, str) or not description.strip():
        raise SubagentSpecError(
            "missing 'description': one line telling the model when to use this subagent",
            path=path,
            line=description_line,
        )
    given_name, name_line = fields.get("name", (name or Path(path).stem, 1))
    if not _NAME.match(given_name):
        raise SubagentSpecError(
            f"subagent name {given_name!r} (from the file name) must be 1-64 letters, digits, '_' or '-'; "
            "rename the file or add a 'name:' key",
            path=path,
            line=name_line,
        )
    values: dict[str, Any] = {"name": given_name, "description": description.strip(), "prompt": body, "path": path}
    for key in ("model", "tools", "max_iters", "workspace"):
        if key in fields:
            values[key] = fields[key][0]
    return SubagentSpec(**values)


def _front_matter(lines: Sequence[str], path: str) -> dict[str, tuple[Any, int]]:
    """The keys of a front matter block (its lines, the first being line 2 of the file) with their lines."""
    fields: dict[str, tuple[Any, int]] = {}
    list_key: str | None = None
    block_tools = False
    for offset, raw in enumerate(lines):
        lineno = offset + 2
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped == "-" or stripped.startswith("- "):
            if list_key is None:
                raise SubagentSpecError(
                    "a list item must follow a key with an empty value, e.g. 'tools:'", path=path, line=lineno
                )
            fields[list_key][0].append(_tool_name(_scalar(stripped[1:].strip(), path, lineno), path, lineno))
            continue
        match = re.match(r"^([A-Za-z_][A-Za-z0-9_-]*)\s*:(.*)$", raw)
        if match is None:
            raise SubagentSpecError(f"expected 'key: value', got {stripped[:60]!r}", path=path, line=lineno)
        key, value = match.group(1), match.group(2).strip()
        if key not in _KEYS:
            raise SubagentSpecError(f"unknown key {key!r}; the keys are {', '.join(_KEYS)}", path=path, line=lineno)
        if key in fields:
            raise SubagentSpecError(f"{key!r} is given twice (first on line {fields[key][1]})", path=path, line=lineno)
        list_key = None
        fields[key] = (_value(key, value, path, lineno), lineno)
        if key == "tools" and value == "":
            list_key = key
            block_tools = True
    if block_tools and not fields["tools"][0]:
        fields["tools"] = (None, fields["tools"][1])  # 'tools:' with no items: like leaving it out
    return fields


def _value(key: str, value: str, path: str, line: int) -> Any:
    """One front-matter value, converted and checked for its key."""
    if key == "tools":
        if value == "":
            return []
        if value.startswith("["):
            if not value.endswith("]"):
                raise SubagentSpecError("a '[' list must end with ']' on the same line", path=path, line=line)
            value = value[1:-1]
        return [_tool_name(_scalar(part.strip(), path, line), path, line) for part in value.split(",") if part.strip()]
    text = _scalar(value, path, line)
    if key == "max_iters":
        if not re.fullmatch(r"[0-9]+", text) or int(text) < 1:
            raise SubagentSpecError(f"max_iters must be a positive integer, not {text!r}", path=path, line=line)
        return int(text)
    if key == "workspace" and text not in ("isolated", "shared"):
        raise SubagentSpecError(f"workspace must be 'isolated' or 'shared', not {text!r}", path=path, line=line)
    if key == "name" and not _NAME.match(text):
        raise SubagentSpecError(
            f"name {text!r} must be 1-64 letters, digits, '_' or '-' (starting with a letter or digit)",
            path=path,
            line=line,
        )
    return text


def _scalar(value: str, path: str, line: int) -> str:
    """A YAML-style scalar: quoted (``'...'`` / ``"..."``) or plain (a `` #`` starts a comment)."""
    if value[:1] in ("'", '"'):
        quote = value[0]
        if len(value) < 2 or not value.endswith(quote):
            raise SubagentSpecError(f"the quoted value {value[:60]!r} is not closed", path=path, line=line)
        if quote == "'":
            return value[1:-1].replace("''", "'")
        try:
            decoded = json.loads(value)
        except ValueError:
            raise SubagentSpecError(f"bad escape in the quoted value {value[:60]!r}", path=path, line=line) from None
        return str(decoded)
    cut = value.find(" #")
    return (value[:cut] if cut >= 0 else value).strip()


def _tool_name(name: str, path: str, line: int) -> str:
    if not _TOOL_NAME.match(name):
        raise SubagentSpecError(f"{name!r} is not a tool name", path=path, line=line)
    return name


class InlineSubagent(BaseModel):
    """A subagent defined for one task."""

    model_config = ConfigDict(extra="forbid", title="SubagentSpec")

    prompt: Annotated[str, Field(min_length=1, description="Its system prompt: its role, how to work, what to return.")]
    name: Annotated[
        str,
        Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$", description="A short name for it (shown in the events)."),
    ] = "subagent"
    description: str = ""
    tools: Annotated[
        list[str] | None,
        Field(description="Names of your tools it may use; omit for all of them except the subagent tools."),
    ] = None
    max_iters: Annotated[int | None, Field(ge=1, le=100, description="Most reasoning steps.")] = None
    workspace: Annotated[
        Literal["isolated", "shared"],
        Field(description="'isolated': its file tools work in a fresh folder; 'shared': in yours."),
    ] = "shared"


# -- limits and task records ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class SubagentLimits:
    """What `SubagentTools` lets the model spawn.

    Attributes:
        max_depth: Subagent levels: 1 lets the agent spawn subagents that cannot spawn any, 2 lets
            those spawn one more level, and so on.
        max_tasks: Subagent tasks (foreground and background) running at once for one parent session.
        max_total_tokens: Tokens all the subagents of one parent session may spend (None: no limit).
        max_wait: Longest ``task_output`` wait, in seconds.
        max_result_chars: Longest result kept in a task's record (``task_output`` of a task that ran
            in this process returns all of it until the record is written).
        keep_finished: Finished task records kept per session (the oldest go first).
    """

    max_depth: int = 2
    max_tasks: int = 8
    max_total_tokens: int | None = None
    max_wait: float = 600.0
    max_result_chars: int = 20_000
    keep_finished: int = 100

    def __post_init__(self) -> None:
        if self.max_depth < 1 or self.max_tasks < 1 or self.keep_finished < 1 or self.max_result_chars < 1:
            raise UserError("SubagentLimits: max_depth, max_tasks, keep_finished and max_result_chars must be >= 1")
        if self.max_total_tokens is not None and self.max_total_tokens < 1:
            raise UserError("SubagentLimits: max_total_tokens must be positive or None")
        if self.max_wait < 0:
            raise UserError("SubagentLimits: max_wait must be >= 0")


@dataclass(frozen=True, slots=True, kw_only=True)
class SubagentTask:
    """A background subagent task as recorded in the parent session (see the module docstring)."""

    task_id: str
    name: str
    task: str
    status: TaskStatus
    result: str = ""
    error: str = ""
    tokens: int = 0
    session_id: str = ""
    """The subagent's own session (its full transcript)."""
    workspace: str | None = None
    """The task's folder, relative to the workspace, when it ran isolated."""
    created_at: float = 0.0
    finished_at: float | None = None

    @property
    def done(self) -> bool:
        """Whether the task ended (any status but running)."""
        return self.status != "running"

    def to_dict(self) -> dict[str, Any]:
        """The stored JSON form."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SubagentTask:
        """A task from its stored form (unknown keys ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        if values.get("status") not in ("running", *_FINAL):
            values["status"] = "interrupted"
        return cls(**values)


class _Live:
    """A subagent task running (or just finished) in this process."""

    __slots__ = (
        "background",
        "cancel_requested",
        "created_at",
        "done",
        "error",
        "finished_at",
        "group",
        "handle",
        "name",
        "result",
        "session_id",
        "status",
        "task",
        "task_id",
        "tokens",
        "workspace",
    )

    def __init__(self, *, task_id: str, name: str, task: str, background: bool, group: _Group, session_id: str) -> None:
        self.task_id = task_id
        self.name = name
        self.task = task
        self.background = background
        self.group = group
        self.session_id = session_id
        self.workspace: str | None = None
        self.status: TaskStatus = "running"
        self.result = ""
        self.error = ""
        self.tokens = 0
        self.created_at = time.time()
        self.finished_at: float | None = None
        self.done = asyncio.Event()
        self.handle: asyncio.Task[None] | None = None
        self.cancel_requested = False

    def finish(self, status: TaskStatus, *, result: str = "", error: str = "") -> None:
        if self.done.is_set():
            return
        self.status, self.result, self.error = status, result, error
        self.finished_at = time.time()
        self.done.set()

    def view(self, max_chars: int | None = None) -> SubagentTask:
        result = self.result
        if max_chars is not None and len(result) > max_chars:
            result = result[:max_chars] + f"\n[... cut: {len(self.result) - max_chars} more characters]"
        return SubagentTask(
            task_id=self.task_id,
            name=self.name,
            task=self.task,
            status=self.status,
            result=result,
            error=self.error,
            tokens=self.tokens,
            session_id=self.session_id,
            workspace=self.workspace,
            created_at=self.created_at,
            finished_at=self.finished_at,
        )


class _Group:
    """The subagent tasks of one parent session in this process, and the tokens they spent."""

    __slots__ = ("base_tokens", "key", "lives")

    def __init__(self, key: tuple[Any, str, str, str]) -> None:
        self.key = key
        self.lives: dict[str, _Live] = {}
        self.base_tokens = 0
        """Tokens of the session's subagents that are not live here (from the stored state)."""

    def running(self) -> int:
        return sum(1 for live in self.lives.values() if not live.done.is_set())

    def spent(self) -> int:
        return self.base_tokens + sum(live.tokens for live in self.lives.values())

    def add(self, live: _Live) -> None:
        _GROUPS.setdefault(self.key, self)  # registered while it has live tasks
        self.lives[live.task_id] = live
        _LIVE[live.task_id] = live

    def remove(self, live: _Live) -> None:
        if self.lives.pop(live.task_id, None) is not None:
            self.base_tokens += live.tokens
        _LIVE.pop(live.task_id, None)
        if not self.lives and _GROUPS.get(self.key) is self:
            del _GROUPS[self.key]


_GROUPS: dict[tuple[Any, str, str, str], _Group] = {}
"""The live task groups of this process, by parent session (store, agent key, user id, session id)."""
_LIVE: dict[str, _Live] = {}
"""Every live task of this process, by task id (a running record without one here was lost)."""


def _group_for(run: Run) -> _Group:
    """The live tasks of `run`'s session (a new, unregistered group when it has none)."""
    key = (run.store, run.agent_key, run.user_id, run.session_id)
    return _GROUPS.get(key) or _Group(key)


def _stored(tool_state: Mapping[str, Any] | None) -> tuple[dict[str, dict[str, Any]], int]:
    """The task records and the tokens of pruned and foreground tasks in a session's ``tool_state``."""
    raw = tool_state.get(TASKS_KEY) if tool_state else None
    if not isinstance(raw, Mapping):
        return {}, 0
    tasks = raw.get("tasks")
    tokens = raw.get("tokens")
    if not isinstance(tasks, Mapping):
        return {}, tokens if isinstance(tokens, int) else 0
    records = {str(k): dict(v) for k, v in tasks.items() if isinstance(v, Mapping)}
    return records, tokens if isinstance(tokens, int) else 0


def _write(run: Run, tasks: Iterable[SubagentTask], *, keep: int, add_tokens: int = 0) -> None:
    """Put task records (and foreground tokens) into `run`'s state, saved at its next checkpoint."""
    records, tokens = _stored(run.state.tool_state)
    for task in tasks:
        records[task.task_id] = task.to_dict()
    finished = sorted(
        (r.get("finished_at") or 0.0, task_id) for task_id, r in records.items() if r.get("status") != "running"
    )
    for _, task_id in finished[: max(0, len(finished) - keep)]:
        dropped = records.pop(task_id)
        tokens += int(dropped.get("tokens") or 0)  # the budget remembers what pruned tasks spent
    tool_state = dict(run.state.tool_state)
    tool_state[TASKS_KEY] = {"tasks": records, "tokens": tokens + add_tokens}
    run.set_field("tool_state", tool_state)


def _tasks_of(tool_state: Mapping[str, Any] | None, group: _Group | None) -> dict[str, SubagentTask]:
    """The session's tasks: records, with live ones (of this process) as they are now; lost ones interrupted."""
    records, _ = _stored(tool_state)
    tasks: dict[str, SubagentTask] = {}
    for task_id, record in records.items():
        task = SubagentTask.from_dict({**record, "task_id": task_id})
        if task.status == "running" and task_id not in _LIVE:
            task = dataclasses.replace(task, status="interrupted", error=_LOST, finished_at=time.time())
        tasks[task_id] = task
    if group is not None:
        for live in group.lives.values():
            if live.background:
                tasks[live.task_id] = live.view()
    return tasks


def _refresh(run: Run, group: _Group, keep: int) -> dict[str, SubagentTask]:
    """The tasks of `run`'s session; records found lost are saved as interrupted, the token base updated."""
    records, tokens = _stored(run.state.tool_state)
    tasks = _tasks_of(run.state.tool_state, group)
    lost = [t for task_id, t in tasks.items() if records.get(task_id, {}).get("status") == "running" and t.done]
    lost = [t for t in lost if t.task_id not in group.lives]
    if lost:
        _write(run, lost, keep=keep)
    group.base_tokens = tokens + sum(
        int(r.get("tokens") or 0) for task_id, r in records.items() if task_id not in group.lives
    )
    return tasks


# -- the toolset ----------------------------------------------------------------------------------------
class _Meter(Middleware):
    """Counts a subagent's tokens into its task and stops it once its session's budget is spent."""

    def __init__(self, live: _Live, limit: int | None) -> None:
        self.live = live
        self.limit = limit
        self._base = 0

    async def on_call(self, run: Run, next: Callable[[], Any]) -> Msg:
        self._base = self.live.tokens
        try:
            reply: Msg = await next()
        finally:
            self._count(run)
        return reply

    async def on_reasoning(self, run: Run, next: Callable[[], Any]) -> Msg:
        self._count(run)
        limit = self.limit
        if limit is not None:
            spent = self.live.group.spent()
            if spent >= limit:
                raise ToolRetry(
                    f"Subagent {self.live.name!r} stopped: the subagents of this conversation spent {spent} tokens, "
                    f"their limit is {limit}."
                )
        msg: Msg = await next()
        self._count(run)
        return msg

    def _count(self, run: Run) -> None:
        if run.usage is not None:
            self.live.tokens = self._base + run.usage.total_tokens


class SubagentTools:
    """The subagent tools (``agent_spawn``, ``task_output``, ``task_cancel``, ``task_list``) for a `Toolkit`.

    ``toolkit.register(SubagentTools(specs, ...))``; see the module docstring for what they do.

    Args:
        specs: Declared subagents: `SubagentSpec`s (a sequence or a mapping by name), or a folder of
            ``<name>.md`` files (`load_subagent_specs`).
        model: The model of subagents whose spec names none: a `ChatModel`, a model id, or a
            function of the `SubagentSpec`; None: the calling agent's model.
        toolkit: Where a top-level spawn takes the subagent's tools from; None: the calling agent's
            toolkit. A subagent spawning in turn always draws from its own tools.
        limits: Depth, concurrency and token limits (`SubagentLimits`).
        allow_dynamic: Let the model define subagents inline (``spec``) besides the declared ones.
        workspace: The folder isolated subagents get their folders under (``.agentrt/tasks/<id>``);
            None: the root of the first folder-bound tool they are given.
        middlewares: Middleware for every subagent (logging, tracing ...).
    """

    def __init__(
        self,
        specs: Iterable[SubagentSpec] | Mapping[str, SubagentSpec] | str | os.PathLike[str] = (),
        *,
        model: ModelChoice | None = None,
        toolkit: Toolkit | None = None,
        limits: SubagentLimits | None = None,
        allow_dynamic: bool = True,
        workspace: str | os.PathLike[str] | None = None,
        middlewares: Sequence[Middleware] = (),
    ) -> None:
        self.specs = _coerce_specs(specs)
        if not self.specs and not allow_dynamic:
            raise UserError("SubagentTools needs declared specs, or allow_dynamic=True")
        if toolkit is not None and not isinstance(toolkit, Toolkit):
            raise UserError(f"toolkit must be a Toolkit, not {type(toolkit).__name__!r}")
        self.model = model
        self.toolkit = toolkit
        self.limits = limits if limits is not None else SubagentLimits()
        self.allow_dynamic = allow_dynamic
        self.workspace = os.fspath(workspace) if workspace is not None else None
        self.middlewares = tuple(middlewares)
        self._background: dict[asyncio.Task[None], _Live] = {}
        self._models: dict[str, ChatModel] = {}
        spawn = self.agent_spawn.copy(description=self._spawn_description(), parameters=self._spawn_parameters())
        spawn.resume = self._resume
        self.agent_spawn = spawn

    def __repr__(self) -> str:
        return f"SubagentTools({', '.join(self.specs) or 'dynamic only'})"

    def _spawn_description(self) -> str:
        return _spawn_text(self.specs, self.allow_dynamic)

    def _spawn_parameters(self) -> Any:
        return _spawn_schema(self.agent_spawn.parameters, self.specs, self.allow_dynamic)

    # -- the tools -------------------------------------------------------------------------------------------
    @tool(read_only=True, timeout=None)
    async def agent_spawn(
        self, task: str, name: str | None = None, spec: InlineSubagent | None = None, background: bool = False
    ) -> Any:
        """Hand a task to a subagent.

        Args:
            task: What the subagent should do, with every detail it needs: it sees nothing else.
            name: A declared subagent (see the list above).
            spec: A subagent defined for this task, when no declared one fits.
            background: Return a task id at once and let the subagent work while you continue.
        """
        run = _current_run("agent_spawn")
        if not task.strip():
            raise ToolRetry("'task' must say what the subagent should do")
        chosen = self._choose(name, spec)
        depth = _DEPTH.get() + 1
        group = _group_for(run)
        _refresh(run, group, self.limits.keep_finished)
        self._check_limits(group, depth)
        task_id = f"task-{new_id()[:12]}"
        live = _Live(
            task_id=task_id,
            name=chosen.name,
            task=task,
            background=background,
            group=group,
            session_id=f"{run.session_id}/tasks/{task_id}",
        )
        group.add(live)  # counted from now on: parallel spawns of one turn see each other
        try:
            agent = await self._build(run, chosen, live)
        except BaseException:
            group.remove(live)
            raise
        run.event(
            ev.SubagentTaskStarted,
            task_id=task_id,
            name=chosen.name,
            task=task,
            background=background,
            subagent_session_id=live.session_id,
        )
        if background:
            return self._start(run, live, agent, depth)
        state = {"task_id": task_id, "depth": depth, "spec": self._spec_ref(chosen), "task": task}
        return await self._foreground(run, live, agent, state, lambda inner: inner.invoke({"task": task}, run.ctx))

    @tool(read_only=True, timeout=None)
    async def task_output(self, task_id: str, wait: Annotated[float, Field(ge=0)] = 0) -> str:
        """The status of a background subagent task, and its result once it is done.

        Args:
            task_id: The id agent_spawn returned.
            wait: Seconds to wait for the task to finish before answering (0: answer at once).
        """
        run = _current_run("task_output")
        group = _group_for(run)
        tasks = _refresh(run, group, self.limits.keep_finished)
        live = group.lives.get(task_id)
        if live is not None and live.background:
            if wait > 0 and not live.done.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(wait, self.limits.max_wait)):
                        await live.done.wait()
            if live.done.is_set():
                _write(run, [live.view(self.limits.max_result_chars)], keep=self.limits.keep_finished)
            return _describe(live.view())
        found = tasks.get(task_id)
        if found is None:
            raise ToolRetry(_unknown_task(task_id, tasks))
        return _describe(found)

    @tool(read_only=True, timeout=None)
    async def task_cancel(self, task_id: str) -> str:
        """Stop a running background subagent task.

        Args:
            task_id: The id agent_spawn returned.
        """
        run = _current_run("task_cancel")
        group = _group_for(run)
        tasks = _refresh(run, group, self.limits.keep_finished)
        live = group.lives.get(task_id)
        if live is None or not live.background:
            found = tasks.get(task_id)
            if found is None:
                raise ToolRetry(_unknown_task(task_id, tasks))
            return f"Task {task_id} is not running (status: {found.status}); nothing to cancel."
        if live.done.is_set():
            return f"Task {task_id} already ended (status: {live.status}); nothing to cancel."
        live.cancel_requested = True
        if live.handle is not None:
            live.handle.cancel(msg="agentrt-task-cancel")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_CANCEL_WAIT):
                await live.done.wait()
        if not live.done.is_set():
            return f"Task {task_id} was asked to stop; it has not stopped yet."
        _write(run, [live.view(self.limits.max_result_chars)], keep=self.limits.keep_finished)
        return f"Task {task_id} ({live.name}) is cancelled."

    @tool(read_only=True)
    async def task_list(self) -> str:
        """List the background subagent tasks of this conversation with their status."""
        run = _current_run("task_list")
        group = _group_for(run)
        tasks = sorted(_refresh(run, group, self.limits.keep_finished).values(), key=lambda t: t.created_at)
        limits = self.limits
        head = f"{group.running()} of at most {limits.max_tasks} subagent task(s) running; tokens spent {group.spent()}"
        if limits.max_total_tokens is not None:
            head += f" of {limits.max_total_tokens}"
        if not tasks:
            return head + ". There are no background tasks."
        lines = [f"- {t.task_id} [{t.status}] {t.name}: {_short(t.task, 100)} ({t.tokens} tokens)" for t in tasks]
        return head + ".\n" + "\n".join(lines)

    # -- for the application -------------------------------------------------------------------------------
    async def tasks(self, agent: AgentBase, ctx: RuntimeContext) -> list[SubagentTask]:
        """The background tasks of one session of `agent`, oldest first, as the model's tools see them.

        Tasks running in this process show their live status; a stored ``running`` task without a
        live one here reads ``interrupted`` (the next tool use in the session saves it so).
        """
        state = await agent.get_state(*ctx.key)
        key = (agent.state_store, state.agent or agent.state_key, *ctx.key)
        tasks = _tasks_of(state.tool_state, _GROUPS.get(key))
        return sorted(tasks.values(), key=lambda t: t.created_at)

    async def drain(self) -> None:
        """Wait until the background tasks started by this toolset ended and their records are written."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    async def aclose(self) -> None:
        """Cancel the background tasks started by this toolset and wait for them (at shutdown)."""
        for handle, live in list(self._background.items()):
            if not live.done.is_set():
                live.cancel_requested = True
                handle.cancel(msg="agentrt-task-cancel")
        await self.drain()

    # -- spawning -------------------------------------------------------------------------------------------
    def _choose(self, name: str | None, inline: InlineSubagent | None) -> SubagentSpec:
        if (name is None) == (inline is None):
            raise ToolRetry("give either 'name' (a declared subagent) or 'spec' (one defined for this task)")
        if name is not None:
            spec = self.specs.get(name)
            if spec is None:
                known = ", ".join(sorted(self.specs)) or "none"
                raise ToolRetry(f"no declared subagent is named {name!r}; the declared ones: {known}")
            return spec
        if not self.allow_dynamic:
            raise ToolRetry("subagents cannot be defined inline here; use 'name' with a declared one")
        assert inline is not None
        return SubagentSpec(
            name=inline.name,
            description=inline.description,
            prompt=inline.prompt,
            tools=tuple(inline.tools) if inline.tools is not None else None,
            max_iters=inline.max_iters,
            workspace=inline.workspace,
        )

    def _check_limits(self, group: _Group, depth: int) -> None:
        limits = self.limits
        if depth > limits.max_depth:
            raise ToolRetry(
                f"Cannot spawn a subagent here: subagents may nest {limits.max_depth} level(s) deep and this one "
                f"would be level {depth}. Do the task yourself."
            )
        running = group.running()
        if running >= limits.max_tasks:
            raise ToolRetry(
                f"Cannot spawn a subagent: {running} subagent task(s) already run for this conversation, the limit "
                f"is {limits.max_tasks}. Wait for one with task_output(task_id, wait=...) or stop one with task_cancel."
            )
        budget = limits.max_total_tokens
        if budget is not None and group.spent() >= budget:
            raise ToolRetry(
                f"Cannot spawn a subagent: the subagents of this conversation spent {group.spent()} tokens, "
                f"their limit is {budget}."
            )

    async def _build(self, run: Run, spec: SubagentSpec, live: _Live) -> ReActAgent:
        """The subagent for one task: its tools (moved to its own folder if isolated), model and limits."""
        caller = run.agent
        source = self.toolkit if self.toolkit is not None and _DEPTH.get() == 0 else getattr(caller, "toolkit", None)
        if not isinstance(source, Toolkit):
            source = Toolkit()
        names = list(spec.tools) if spec.tools is not None else [n for n in source.names() if n not in SUBAGENT_TOOLS]
        unknown = [n for n in names if n not in source]
        if unknown:
            where = f" ({spec.path})" if spec.path else ""
            raise ToolRetry(
                f"subagent {spec.name!r}{where} lists tool(s) {', '.join(map(repr, unknown))} that are not available; "
                f"available: {', '.join(source.names()) or 'none'}"
            )
        tools = [_ungrouped(t) for n in names if (t := source.get(n)) is not None]
        if spec.workspace == "isolated":
            tools, live.workspace = await self._isolate(tools, live.task_id, caller, listed=spec.tools is not None)
        agent = ReActAgent(
            spec.name,
            spec.prompt,
            model=self._model_for(spec, caller),
            toolkit=Toolkit(tools),
            middlewares=(*self.middlewares, _Meter(live, self.limits.max_total_tokens)),
            state_store=run.store,
            max_iters=spec.max_iters or int(getattr(caller, "max_iters", 10)),
            description=spec.description,
            lock_timeout=caller.lock_timeout,
            tool_calling=getattr(caller, "tool_calling", "auto"),
        )
        # Set after construction: the parent's rules name the parent's tools, most of which this
        # subagent lacks, and construction would warn about each (or refuse, if strict).
        agent.permission = _permission_of(caller, run)
        return agent

    def _model_for(self, spec: SubagentSpec, caller: AgentBase) -> ChatModel | str:
        choice: Any = spec.model if spec.model is not None else self.model
        if callable(choice) and not isinstance(choice, ChatModel):
            choice = choice(spec)
        if choice is None:
            choice = getattr(caller, "model", None)
        if isinstance(choice, str):
            model = self._models.get(choice)
            if model is None:
                from agentrt.model.registry import model_from_id

                model = self._models[choice] = model_from_id(choice)
            return model
        if not isinstance(choice, ChatModel):
            raise ToolRetry(f"subagent {spec.name!r} has no model (give SubagentTools a model=)")
        return choice

    async def _isolate(
        self, tools: list[Tool], task_id: str, caller: AgentBase, *, listed: bool
    ) -> tuple[list[Tool], str]:
        bound = [t.workspace for t in tools if t.workspace]
        permission = getattr(caller, "permission", None)
        base = self.workspace or (bound[0] if bound else None) or getattr(permission, "workspace", None)
        if not base:
            raise ToolRetry("an isolated subagent needs a workspace folder, and none is configured")
        relative = os.path.join(".agentrt", "tasks", task_id)
        folder = os.path.join(base, relative)
        moved = await asyncio.to_thread(_reroot_all, tools, folder, listed)
        return moved, relative

    def _start(self, run: Run, live: _Live, agent: ReActAgent, depth: int) -> str:
        _write(run, [live.view()], keep=self.limits.keep_finished)
        # A context of its own: the task outlives the call (no parent run, no tool scope, no hub).
        context = contextvars.Context()
        context.run(_DEPTH.set, depth)
        parent_ctx = RuntimeContext(run.user_id, run.session_id)
        sub_ctx = run.ctx.child(session_id=live.session_id)
        handle = asyncio.get_running_loop().create_task(
            self._run_background(live, agent, sub_ctx, run.agent, run.store, parent_ctx),
            name=f"agentrt-subagent-{live.task_id}",
            context=context,
        )
        live.handle = handle
        self._background[handle] = live
        handle.add_done_callback(lambda done: self._background.pop(done, None))
        where = f" It works in the folder {live.workspace}/." if live.workspace else ""
        return (
            f"Started background task {live.task_id} ({live.name}).{where} Continue with other work; collect its "
            f"result with task_output(task_id={live.task_id!r}) (wait=N waits up to N seconds), or stop it with "
            "task_cancel."
        )

    async def _foreground(
        self, run: Run, live: _Live, agent: ReActAgent, state: dict[str, Any], call: Callable[[Tool], Any]
    ) -> Any:
        """Run the subagent through agent-as-tool (forwarded events, usage, approvals through the parent)."""
        inner = agent_as_tool(agent, name="agent_spawn", session=lambda _ctx: live.session_id)
        token = _DEPTH.set(int(state["depth"]))
        status: TaskStatus = "failed"
        try:
            value = await call(inner)
        except ToolSuspended as exc:
            status = "running"
            raise ToolSuspended(exc.pending, state={**(exc.state or {}), "subagent": state}) from None
        except asyncio.CancelledError:
            status = "interrupted"
            raise
        except Exception as exc:
            live.error = exc.message if isinstance(exc, ToolRetry) else f"{type(exc).__name__}: {exc}"
            raise
        else:
            status = "completed"
            if live.workspace and isinstance(value, str):
                value = f"{value}\n\n(The subagent worked in the folder {live.workspace}/.)"
            live.result = value if isinstance(value, str) else json.dumps(value, default=str)
            return value
        finally:
            _DEPTH.reset(token)
            live.group.remove(live)
            if live.tokens:
                _write(run, [], keep=self.limits.keep_finished, add_tokens=live.tokens)
            if status != "running":
                live.finish(status, result=live.result, error=live.error)
                _cancel_orphans((run.store, agent.state_key, run.user_id, live.session_id))
                run.event(
                    ev.SubagentTaskFinished,
                    task_id=live.task_id,
                    name=live.name,
                    status=status,
                    summary=_short(live.result or live.error, 500),
                    tokens=live.tokens,
                )

    async def _resume(self, state: Any, answers: Sequence[Any], ctx: RuntimeContext) -> Any:
        """Resume a foreground subagent that paused for approval, with the parent's answers."""
        info = state.get("subagent") if isinstance(state, Mapping) else None
        if not isinstance(info, Mapping):
            raise ToolRetry("this subagent task can no longer be resumed (its state is missing)")
        run = _current_run("agent_spawn")
        spec = self._spec_from_ref(info.get("spec"))
        group = _group_for(run)
        task_id = str(info["task_id"])
        live = _Live(
            task_id=task_id,
            name=spec.name,
            task=str(info.get("task") or ""),
            background=False,
            group=group,
            session_id=f"{run.session_id}/tasks/{task_id}",
        )
        group.add(live)
        try:
            agent = await self._build(run, spec, live)
        except BaseException:
            group.remove(live)
            raise
        given = list(answers)

        def resume(inner: Tool) -> Any:
            assert inner.resume is not None  # agent-as-tool tools always resume
            return inner.resume(state, given, ctx)

        return await self._foreground(run, live, agent, dict(info), resume)

    def _spec_ref(self, spec: SubagentSpec) -> dict[str, Any]:
        if self.specs.get(spec.name) is spec:
            return {"declared": spec.name}
        return {"inline": spec.to_dict()}

    def _spec_from_ref(self, ref: Any) -> SubagentSpec:
        if isinstance(ref, Mapping) and isinstance(ref.get("declared"), str):
            spec = self.specs.get(ref["declared"])
            if spec is None:
                raise ToolRetry(f"subagent {ref['declared']!r} is no longer declared; its task cannot resume")
            return spec
        if isinstance(ref, Mapping) and isinstance(ref.get("inline"), Mapping):
            return SubagentSpec.from_dict(ref["inline"])
        raise ToolRetry("this subagent task can no longer be resumed (its spec is missing)")

    # -- background tasks ------------------------------------------------------------------------------------
    async def _run_background(
        self,
        live: _Live,
        agent: ReActAgent,
        ctx: RuntimeContext,
        parent: AgentBase,
        store: Any,
        parent_ctx: RuntimeContext,
    ) -> None:
        def forward(event: ev.AgentEvent) -> None:
            call = parent.running_call(parent_ctx)
            if call is not None and call.streaming:
                call.emit(event)

        try:
            reply = await _unattended(agent, [Msg.user(live.task)], ctx, forward)
        except asyncio.CancelledError:
            if not live.cancel_requested:
                live.finish("interrupted", error="the task was stopped before it finished (its event loop shut down)")
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()  # the cancel we asked for ends here: the record still gets written
            live.finish("cancelled", error="cancelled with task_cancel")
        except Exception as exc:
            live.finish("failed", error=f"{type(exc).__name__}: {exc}")
        else:
            status, result, error = _background_outcome(reply)
            if live.cancel_requested:
                # The subagent took the cancel as an interrupt and returned: it is still our cancel.
                task = asyncio.current_task()
                while task is not None and task.cancelling():
                    task.uncancel()
                status, error = "cancelled", "cancelled with task_cancel"
            live.finish(status, result=result, error=error)
        _cancel_orphans((store, agent.state_key, *ctx.key))
        call = parent.running_call(parent_ctx)
        if call is not None and call.streaming:
            call.event(
                ev.SubagentTaskFinished,
                task_id=live.task_id,
                name=live.name,
                status=live.status,
                background=True,
                summary=_short(live.result or live.error, 500),
                tokens=live.tokens,
            )
        await self._save(live, parent, store, parent_ctx)

    async def _save(self, live: _Live, parent: AgentBase, store: Any, ctx: RuntimeContext) -> None:
        """Write the final record under the parent session's lock (after any call holding it ended)."""
        user_id, session_id = ctx.key
        agent_key = getattr(parent, "state_key", None) or parent.name
        try:
            async with store.session_lock(user_id, session_id, timeout=parent.lock_timeout, agent=agent_key):
                run = Run(parent, ctx, [], store, new_id(), None)
                await run.load()
                _write(run, [live.view(self.limits.max_result_chars)], keep=self.limits.keep_finished)
                await run.checkpoint()
        except Exception:
            # Kept live, so this process still answers for it; another process will read it interrupted.
            logger.warning("subagent task %s: its final record could not be written", live.task_id, exc_info=True)
            return
        live.group.remove(live)


# -- helpers --------------------------------------------------------------------------------------------
def _coerce_specs(specs: Any) -> dict[str, SubagentSpec]:
    if isinstance(specs, (str, os.PathLike)):
        return load_subagent_specs(specs)
    items = list(specs.values()) if isinstance(specs, Mapping) else list(specs)
    out: dict[str, SubagentSpec] = {}
    for spec in items:
        if not isinstance(spec, SubagentSpec):
            raise UserError(f"specs must be SubagentSpec objects, not {type(spec).__name__!r}")
        if spec.name in out:
            raise SubagentSpecError(f"subagent {spec.name!r} is declared twice", path=spec.path)
        out[spec.name] = spec
    return out


def _cancel_orphans(key: tuple[Any, str, str, str]) -> None:
    """Cancel the background tasks a finished subagent left running: nobody could collect them."""
    group = _GROUPS.get(key)
    for live in list(group.lives.values()) if group is not None else ():
        if live.handle is not None and not live.done.is_set():
            live.cancel_requested = True
            live.handle.cancel(msg="agentrt-task-cancel")


def _current_run(tool_name: str) -> Run:
    run = current_run.get()
    if run is None:
        raise ToolRetry(f"{tool_name} works only inside an agent call")
    return run


def _permission_of(caller: AgentBase, run: Run) -> Any:
    """The caller's permission context as it applies now (plan mode included)."""
    if isinstance(caller, ReActAgent):
        from agentrt.agent._hitl import engine_for

        return engine_for(caller, run).context
    return getattr(caller, "permission", None)


def _ungrouped(t: Tool) -> Tool:
    """The tool outside any group: a subagent's session starts with no group active."""
    if t.group is None:
        return t
    copied = t.copy(group=None)
    copied.resume = t.resume
    return copied


def _reroot_all(tools: list[Tool], folder: str, listed: bool) -> list[Tool]:
    """The tools with each folder-bound one moved to `folder` (created); runs in a worker thread.

    A tool that cannot move is refused when the spec listed it, and left out when it came with
    "all the parent's tools".
    """
    os.makedirs(folder, exist_ok=True)
    moved: dict[int, Any] = {}
    out: list[Tool] = []
    for t in tools:
        if not t.workspace:
            out.append(t)
            continue
        owner = getattr(t, "_bound_to", None)
        new_owner = moved.get(id(owner))
        if new_owner is None:
            new_owner = moved[id(owner)] = _reroot(owner, folder)
        method = getattr(t.fn, "__name__", t.name)
        replacement = getattr(new_owner, method, None) if new_owner is not None else None
        if not isinstance(replacement, Tool):
            if not listed:
                continue
            raise ToolRetry(
                f"tool {t.name!r} works in the folder {t.workspace} and cannot move to an isolated workspace; "
                "use workspace 'shared' or leave the tool out"
            )
        if replacement.name != t.name or replacement.group is not None:
            replacement = replacement.copy(name=t.name, group=None)
        out.append(replacement)
    return out


def _reroot(owner: Any, folder: str) -> Any:
    """A copy of a folder-bound toolset rooted at `folder` (None: it cannot move)."""
    if owner is None:
        return None
    with_root = getattr(owner, "with_root", None)
    if callable(with_root):
        return with_root(folder)
    from agentrt.tool.builtin.files import FileTools

    if isinstance(owner, FileTools):
        return FileTools(
            folder,
            max_read_bytes=owner.max_read_bytes,
            max_write_bytes=owner.max_write_bytes,
            skip_dirs=owner.skip_dirs,
        )
    return None


async def _unattended(agent: ReActAgent, messages: list[Msg], ctx: RuntimeContext, forward: Any) -> Msg:
    """Run `agent` with nobody to answer: what it would ask is refused, and it goes on."""
    reply: Msg | None = None
    for _ in range(_MAX_UNATTENDED_ROUNDS):
        reply = None
        events = agent.stream_events(messages, ctx)
        try:
            async for event in events:
                forward(event)
                if isinstance(event, ev.RunFinished) and event.source == agent.name:
                    reply = event.msg
        finally:
            # Closed now (not when collected): a cancelled task stops the subagent, which checkpoints.
            await events.aclose()  # type: ignore[attr-defined]
        if reply is None:
            raise RuntimeError(f"subagent {agent.name!r} ended without a reply")
        if reply.generate_reason not in _PAUSED:
            return reply
        messages = _refusals(reply)
    assert reply is not None
    return reply


def _refusals(reply: Msg) -> list[Msg]:
    """The answers refusing every call a paused reply waits for."""
    confirms: list[ConfirmResult] = []
    results: list[ToolResultBlock] = []
    for call in reply.metadata.get(META_PENDING) or ():
        if call.get("kind") == "external":
            results.append(
                ToolResultBlock(
                    id=str(call["id"]), name=str(call.get("name", "")), output=f"Not run: {_NO_HUMAN}.", state="error"
                )
            )
        else:
            confirms.append(ConfirmResult(confirmed=False, tool_call=str(call["id"]), reason=_NO_HUMAN))
    messages: list[Msg] = []
    if confirms:
        messages.append(Msg.confirm(confirms))
    if results:
        messages.append(Msg(role="user", content=list(results)))
    return messages


def _background_outcome(reply: Msg) -> tuple[TaskStatus, str, str]:
    reason = reply.generate_reason
    if reason in _PAUSED:
        return "failed", reply.text, "it kept waiting for approvals, which a background task cannot get"
    if reason is GenerateReason.INTERRUPTED:
        return "interrupted", reply.text, "the subagent was interrupted"
    if reason is GenerateReason.STRUCTURED_OUTPUT:
        return "completed", json.dumps(reply.metadata.get("structured_output"), default=str), ""
    return "completed", reply.text, ""


def _describe(task: SubagentTask) -> str:
    head = f"Task {task.task_id} ({task.name}) is {task.status}; {task.tokens} tokens spent."
    if task.status == "running":
        return head + " Call task_output again later (wait=N waits up to N seconds for it)."
    parts = [head]
    if task.error:
        parts.append(f"Error: {task.error}")
    if task.workspace:
        parts.append(f"Its files are in the folder {task.workspace}/.")
    if task.result:
        parts.append(("Result:\n" if task.status == "completed" else "Partial result:\n") + task.result)
    return "\n".join(parts)


def _unknown_task(task_id: str, tasks: Mapping[str, SubagentTask]) -> str:
    known = ", ".join(sorted(tasks)) or "none"
    return f"no background task {task_id!r} in this conversation; its tasks: {known}"


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _spawn_text(specs: Mapping[str, SubagentSpec], allow_dynamic: bool) -> str:
    lines = [
        "Hand a task to a subagent: a helper agent with its own conversation, context window and tools, which "
        "returns its final answer. Use it for self-contained work (research, a focused change, a review) whose "
        "details you do not need in your own context. The task text is all the subagent knows: include every "
        "detail it needs. With background=true you get a task id at once and the subagent works while you go on; "
        "collect its answer with task_output, stop it with task_cancel, list tasks with task_list."
    ]
    if specs:
        lines.append("\nDeclared subagents (use 'name'):")
        lines.extend(f"- {s.name}: {s.description or '(no description)'}" for s in specs.values())
    if allow_dynamic:
        lines.append("\nOr define one for this task with 'spec' (a system prompt, and the tools it may use).")
    return "\n".join(lines)


def _spawn_schema(parameters: Mapping[str, Any], specs: Mapping[str, SubagentSpec], allow_dynamic: bool) -> Any:
    schema = copy.deepcopy(dict(parameters))
    properties = schema.get("properties", {})
    if specs and isinstance(properties.get("name"), dict):
        properties["name"] = {
            "type": "string",
            "enum": sorted(specs),
            "description": "A declared subagent (see the list above).",
        }
    elif not specs:
        properties.pop("name", None)
    if not allow_dynamic:
        properties.pop("spec", None)
        schema.pop("$defs", None)
    return schema
