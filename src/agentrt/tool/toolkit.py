"""Toolkit: the set of tools an agent may call, safe to change while agents run."""

from __future__ import annotations

import asyncio
import inspect
import weakref
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentrt.errors import DuplicateToolError, ToolDefinitionError, UserError
from agentrt.model.base import ToolSchema
from agentrt.tool.base import Tool

if TYPE_CHECKING:
    from agentrt.tool.skills import Skill, SkillSource

__all__ = ["ToolGroup", "Toolkit"]

DEFAULT_MAX_CONCURRENCY = 16
_NO_GROUPS: frozenset[str] = frozenset()  # one instance (an empty frozenset() is a new object each time)


@dataclass(frozen=True, slots=True)
class ToolGroup:
    """A named set of tools that can be switched on and off per session."""

    name: str
    description: str = ""
    active: bool = False
    """Whether sessions start with this group active."""


class Toolkit:
    """A registry of tools.

    Changes replace the internal mapping instead of mutating it, so a run that already took a
    snapshot keeps a consistent view while another task registers or removes tools. Tools in no
    group are always available; grouped tools only while their group is active in the session.
    """

    __slots__ = ("_cache", "_closers", "_groups", "_semaphores", "_skills", "_tools", "max_concurrency")

    def __init__(self, tools: Collection[Any] = (), *, max_concurrency: int = DEFAULT_MAX_CONCURRENCY) -> None:
        if max_concurrency < 1:
            raise UserError(f"Toolkit max_concurrency must be at least 1, not {max_concurrency!r}")
        self._tools: Mapping[str, Tool] = {}
        self._groups: Mapping[str, ToolGroup] | None = None
        self._cache: dict[frozenset[str] | None, list[ToolSchema]] | None = None
        self._closers: list[Callable[[], Any]] | None = None
        self._semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None
        self._skills: Mapping[str, Skill] = {}
        self.max_concurrency = max_concurrency
        for item in tools:
            self.register(item)

    # -- registration ---------------------------------------------------------------------------
    def register(
        self,
        obj: Any,
        *,
        name: str | None = None,
        group: str | None = None,
        replace: bool = False,
        **options: Any,
    ) -> Tool | list[Tool]:
        """Register a function, a `Tool`, or an object whose `@tool` methods become tools.

        Returns the registered tool (or tools, for an object). A name already taken raises
        `DuplicateToolError` unless ``replace=True``.
        """
        if isinstance(obj, Tool) or inspect.isfunction(obj) or inspect.ismethod(obj) or inspect.isbuiltin(obj):
            changes: dict[str, Any] = dict(options)
            if name is not None:
                changes["name"] = name
            if group is not None:
                changes["group"] = group
            tool = Tool.from_function(obj, **changes) if not isinstance(obj, Tool) else obj
            if isinstance(obj, Tool) and changes:
                tool = obj.copy(**changes)
            self._add([tool], replace=replace)
            return tool
        if name is not None:
            raise UserError("name= applies to a single function or Tool, not to an object holding several tools")
        tools = _tools_of(obj)
        if not tools:
            raise ToolDefinitionError(
                f"{type(obj).__name__!r} is not a function or Tool and has no @tool methods to register"
            )
        if group is not None or options:
            tools = [t.copy(**({"group": group} if group is not None else {}), **options) for t in tools]
        self._add(tools, replace=replace)
        return list(tools)

    def _add(self, tools: list[Tool], *, replace: bool) -> None:
        new = dict(self._tools)
        for tool in tools:
            if tool.name in new and not replace and new[tool.name] is not tool:
                raise DuplicateToolError(
                    f"a tool named {tool.name!r} is already registered; pass replace=True or choose another name"
                )
            if tool.group is not None and (self._groups is None or tool.group not in self._groups):
                self._groups = {**(self._groups or {}), tool.group: ToolGroup(tool.group)}
            new[tool.name] = tool
        self._tools = new
        self._cache = None

    def unregister(self, name: str) -> Tool:
        """Remove a tool by name and return it; `KeyError` with the known names if absent."""
        if name not in self._tools:
            raise KeyError(f"no tool named {name!r}; registered: {', '.join(sorted(self._tools)) or '(none)'}")
        new = dict(self._tools)
        removed = new.pop(name)
        self._tools = new
        self._cache = None
        return removed

    async def register_mcp(
        self,
        client: Any,
        *,
        group: str | None = None,
        prefix: str | None = None,
        include: str | Collection[str] | None = None,
        exclude: str | Collection[str] | None = None,
        timeout: float | None = None,
        resources: bool | None = None,
    ) -> list[Tool]:
        """Register the tools of an MCP server (an `agentrt.mcp.McpClient`); returns them.

        Connects the client if needed and lists its tools. Names are ``mcp__<server>__<tool>``, or
        ``f"{prefix}{tool}"``; `include` / `exclude` filter the server's tool names (globs).
        `timeout` overrides the client's per-call timeout (None: the client's). `resources` adds
        the read-only tools ``list_resources`` / ``read_resource`` (None: if the server has
        resources). A client this call connected is closed by `aclose`; one the caller connected
        (``async with client``) stays the caller's. See docs/mcp.md.
        """
        from agentrt.mcp.toolset import register_mcp  # the MCP layer builds on this one: import on use

        return await register_mcp(
            self,
            client,
            group=group,
            prefix=prefix,
            include=include,
            exclude=exclude,
            timeout=timeout,
            resources=resources,
        )

    def register_skills(self, path_or_paths: SkillSource) -> list[Skill]:
        """Load Agent Skills (SKILL.md folders) for the agents using this toolkit; returns them.

        Each entry is a skill folder, a folder of skill folders, or a `Skill`. A skill replaces an
        earlier one of the same name (later folders win). Front matter is validated now
        (`agentrt.errors.SkillError` names the file and line); bodies are read when the model loads
        a skill with ``load_skill``. See docs/harness.md.
        """
        from agentrt.tool.skills import load_skills  # the SKILL.md parser (PyYAML) loads on use

        loaded = load_skills(path_or_paths)
        self._skills = {**self._skills, **loaded}
        return list(loaded.values())

    @property
    def skills(self) -> Mapping[str, Skill]:
        """The registered skills by name (a snapshot: it does not change when the toolkit does)."""
        return self._skills

    def add_closer(self, closer: Callable[[], Any]) -> None:
        """Run `closer` (sync or async) on `aclose`: for resources the toolkit opened."""
        if self._closers is None:
            self._closers = []
        self._closers.append(closer)

    async def aclose(self) -> None:
        """Close what the toolkit opened (MCP clients), once."""
        closers, self._closers = self._closers or [], None
        for closer in reversed(closers):
            result = closer()
            if inspect.isawaitable(result):
                await result

    def semaphore(self) -> asyncio.Semaphore:
        """The toolkit-wide cap on concurrently running tool calls (one semaphore per event loop)."""
        loop = asyncio.get_running_loop()
        sems = self._semaphores
        if sems is None:
            sems = self._semaphores = weakref.WeakKeyDictionary()
        sem = sems.get(loop)
        if sem is None:
            sem = sems[loop] = asyncio.Semaphore(self.max_concurrency)
        return sem

    # -- groups -------------------------------------------------------------------------------------
    def create_group(self, name: str, description: str = "", *, active: bool = False) -> ToolGroup:
        """Declare a tool group (and whether sessions start with it active)."""
        if not name:
            raise UserError("tool group name must be non-empty")
        group = ToolGroup(name, description, active)
        self._groups = {**(self._groups or {}), name: group}
        self._cache = None
        return group

    @property
    def groups(self) -> Mapping[str, ToolGroup]:
        """The declared groups by name."""
        return self._groups or {}

    def default_active_groups(self) -> frozenset[str]:
        """Groups a new session starts with."""
        if not self._groups:
            return _NO_GROUPS
        return frozenset(g.name for g in self._groups.values() if g.active)

    # -- lookup -----------------------------------------------------------------------------------
    def get(self, name: str) -> Tool | None:
        """The tool with this name, or None."""
        return self._tools.get(name)

    @property
    def tools(self) -> Mapping[str, Tool]:
        """A snapshot of the registered tools by name (does not change when the toolkit does)."""
        return self._tools

    def names(self) -> list[str]:
        """Registered tool names, sorted."""
        return sorted(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(list(self._tools.values()))

    def available(self, name: str, active_groups: Collection[str] | None = None) -> Tool | None:
        """The tool if it exists and its group (if any) is active."""
        tool = self._tools.get(name)
        if tool is None or tool.group is None:
            return tool
        active = self.default_active_groups() if active_groups is None else active_groups
        return tool if tool.group in active else None

    def schemas(self, active_groups: Collection[str] | None = None) -> list[ToolSchema]:
        """Schemas of the available tools (ungrouped ones plus those in active groups).

        With `active_groups` None, the groups declared active by default apply.
        """
        key = None if active_groups is None else frozenset(active_groups)
        cache = self._cache
        if cache is not None:
            found = cache.get(key)
            if found is not None:
                return found
        else:
            cache = self._cache = {}
        active = self.default_active_groups() if key is None else key
        result = [t.schema() for t in self._tools.values() if t.group is None or t.group in active]
        if len(cache) < 64:
            cache[key] = result
        return result

    def __repr__(self) -> str:
        return f"Toolkit({', '.join(self._tools)})"


def _tools_of(obj: Any) -> list[Tool]:
    found: list[Tool] = []
    seen: set[str] = set()
    for klass in type(obj).__mro__:
        for attr, value in vars(klass).items():
            if attr in seen or not isinstance(value, Tool):
                continue
            seen.add(attr)
            bound = getattr(obj, attr)
            if isinstance(bound, Tool):
                found.append(bound)
    return found
