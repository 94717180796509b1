"""`Tool` and the `@tool` decorator."""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, Unpack, overload

from agentrt.context import RuntimeContext
from agentrt.errors import ToolDefinitionError, UserError
from agentrt.model.base import ToolSchema

if TYPE_CHECKING:
    from agentrt.tool._schema import FunctionSchema

__all__ = ["DEFAULT_TIMEOUT", "PermissionCheck", "Tool", "ToolOptions", "tool"]

DEFAULT_TIMEOUT = 30.0
F = TypeVar("F", bound=Callable[..., Any])

PermissionCheck = Callable[[Mapping[str, Any], RuntimeContext], Any]
"""``check(args, ctx)`` returning a permission decision (see `agentrt.permission`) or None to pass."""

Handler = Callable[[Mapping[str, Any], RuntimeContext], Awaitable[Any]]
"""A raw tool body: takes the model's arguments as a dict (used by MCP and schema-only tools)."""

_MISSING: Any = object()


_TOOL_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
"""What at least one provider accepts (OpenAI and Anthropic: letters, digits, '_', '-'; Gemini also '.', ':')."""


def _check_name(name: object) -> None:
    """Refuse a tool name no model provider accepts (a lambda's ``<lambda>``, spaces), saying how to fix it."""
    if isinstance(name, str) and _TOOL_NAME.fullmatch(name):
        return
    raise ToolDefinitionError(
        f"cannot name a tool {name!r}: providers accept letters, digits, '_' and '-' (Gemini also '.' and ':'), "
        "up to 64 characters for OpenAI and 128 at most; pass a name, e.g. tool(fn, name='lookup') or "
        "Tool.from_function(fn, name='lookup')"
    )


class ToolOptions(TypedDict, total=False):
    """The execution options `Tool`, `Tool.copy` and `@tool` take (documented on `tool`)."""

    timeout: float | None
    read_only: bool
    destructive: bool
    requires_confirmation: bool
    external: bool
    group: str | None
    max_calls: int | None
    concurrency_safe: bool | None
    idempotent: bool
    check_permission: PermissionCheck | None
    edit: bool


_DEFAULTS: ToolOptions = {
    "timeout": DEFAULT_TIMEOUT,
    "read_only": False,
    "destructive": False,
    "requires_confirmation": False,
    "external": False,
    "group": None,
    "max_calls": None,
    "concurrency_safe": None,
    "idempotent": False,
    "check_permission": None,
    "edit": False,
}


def _with_defaults(options: Mapping[str, Any], name: str | None) -> dict[str, Any]:
    """`options` completed with the defaults; an unknown option raises `ToolDefinitionError`."""
    unknown = sorted(options.keys() - _DEFAULTS.keys())
    if unknown:
        where = f"tool {name!r}" if name else "tool"
        raise ToolDefinitionError(
            f"{where}: unknown option(s) {', '.join(map(repr, unknown))}; the options are {', '.join(_DEFAULTS)}"
        )
    return {**_DEFAULTS, **options}


class Tool:
    """A callable the model can ask for, with its schema and execution policy.

    Build one with `@tool` from a function, or with `Tool.from_handler` from a JSON Schema and a
    handler taking the raw argument dict (MCP tools, remote tools). Calling the tool object
    directly calls the wrapped function, so decorated functions stay usable in plain code.
    """

    __slots__ = (
        "__dict__",
        "_bound_to",
        "_schema",
        "_tool_schema",
        "check_permission",
        "concurrency_safe",
        "description",
        "destructive",
        "edit",
        "external",
        "fn",
        "group",
        "handler",
        "idempotent",
        "is_async",
        "max_calls",
        "name",
        "parameters",
        "read_only",
        "requires_confirmation",
        "resume",
        "timeout",
        "workspace",
    )

    timeout: float | None
    read_only: bool
    destructive: bool
    requires_confirmation: bool
    external: bool
    group: str | None
    max_calls: int | None
    concurrency_safe: bool
    idempotent: bool
    check_permission: PermissionCheck | None
    edit: bool

    def __init__(
        self,
        *,
        name: str,
        description: str = "",
        parameters: Mapping[str, Any] | None = None,
        fn: Callable[..., Any] | None = None,
        handler: Handler | None = None,
        schema: FunctionSchema | None = None,
        workspace: str | None = None,
        **options: Unpack[ToolOptions],
    ) -> None:
        _check_name(name)
        opts = _with_defaults(options, name)
        timeout, max_calls = opts["timeout"], opts["max_calls"]
        if timeout is not None and timeout <= 0:
            raise ToolDefinitionError(f"tool {name!r}: timeout must be positive or None, not {timeout!r}")
        if max_calls is not None and max_calls < 1:
            raise ToolDefinitionError(f"tool {name!r}: max_calls must be at least 1, not {max_calls!r}")
        self.name = name
        self.description = description
        self.parameters: Mapping[str, Any] = (
            parameters
            if parameters is not None
            else (schema.parameters if schema is not None else {"type": "object", "properties": {}})
        )
        self.fn = fn
        self.handler = handler
        self._schema = schema
        self.is_async = fn is not None and _is_async_callable(fn)
        for key, value in opts.items():
            setattr(self, key, value)
        self.external = opts["external"] or (fn is None and handler is None)
        # Calls from one model turn run in parallel unless a tool says it must not overlap.
        if opts["concurrency_safe"] is None:
            self.concurrency_safe = not opts["destructive"]
        self.workspace = workspace
        """The directory relative path arguments are taken from (permission rules resolve paths there)."""
        self.resume: Callable[[Any, list[Any], RuntimeContext], Awaitable[Any]] | None = None
        """Continues a call that raised `ToolSuspended`, given the caller's answers (agent-as-tool)."""
        self._tool_schema: ToolSchema | None = None
        self._bound_to: Any = None
        if fn is not None:
            functools.update_wrapper(self, fn, updated=())

    # -- construction ---------------------------------------------------------------------------
    @classmethod
    def from_function(cls, fn: Callable[..., Any], **options: Any) -> Tool:
        """A tool from a plain (sync or async) function; see `@tool` for the options."""
        from agentrt.tool._schema import function_schema

        if isinstance(fn, Tool):
            return fn.copy(**options) if options else fn
        if not callable(fn):
            raise ToolDefinitionError(f"@tool needs a function, got {type(fn).__name__!r}")
        name = options.pop("name", None)
        description = options.pop("description", None)
        schema = function_schema(fn, name=name, description=description)
        return cls(name=schema.name, description=schema.description, fn=fn, schema=schema, **options)

    @classmethod
    def from_handler(
        cls, name: str, description: str, parameters: Mapping[str, Any], handler: Handler, **options: Any
    ) -> Tool:
        """A tool whose body takes the raw argument dict (the schema is not validated locally)."""
        return cls(name=name, description=description, parameters=parameters, handler=handler, **options)

    def copy(self, **changes: Any) -> Tool:
        """A copy with some options changed (``name=``, ``group=``, ``timeout=`` ...)."""
        fields: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "fn": self.fn,
            "handler": self.handler,
            "schema": self._schema,
            "workspace": self.workspace,
            **self._options(),
        }
        if self.fn is None and self.handler is None:
            fields["external"] = False  # a tool without a body is external anyway
        fields.update(changes)
        new = Tool(**fields)
        new._bound_to = self._bound_to
        return new

    # -- what the model sees ----------------------------------------------------------------------
    def schema(self) -> ToolSchema:
        """The schema sent to models."""
        if self._tool_schema is None:
            self._tool_schema = ToolSchema(name=self.name, description=self.description, parameters=self.parameters)
        return self._tool_schema

    # -- running ------------------------------------------------------------------------------------
    async def invoke(self, args: Mapping[str, Any], ctx: RuntimeContext) -> Any:
        """Validate `args`, inject context values and run the tool body; returns its raw result.

        Raises `ToolArgumentsError` for bad arguments; exceptions of the body propagate.
        """
        if self.handler is not None:
            return await self.handler(args, ctx)
        fn = self.fn
        schema = self._schema
        if fn is None or schema is None:
            raise UserError(f"tool {self.name!r} has no body: it is external and must be run by the caller")
        validated = schema.validate(args)
        injected: dict[str, Any] = {}
        if schema.injected:
            for param, kind in schema.injected.items():
                value = ctx.get(kind, _MISSING)
                if value is _MISSING:
                    # A type may build its own value for a call (e.g. ToolEmitter binds to the running call).
                    factory = getattr(kind, "__agentrt_inject__", None)
                    if factory is not None:
                        value = factory(ctx, self.name)
                if value is _MISSING:
                    value = schema.injected_defaults.get(param, _MISSING)
                    if value is _MISSING:
                        raise UserError(
                            f"tool {self.name!r} needs a {kind.__name__} in the RuntimeContext for parameter "
                            f"{param!r}: call ctx.put({kind.__name__}, obj) before running the agent"
                        )
                injected[param] = value
        call_args, call_kwargs = schema.bind(validated, injected)
        if self.is_async:
            return await fn(*call_args, **call_kwargs)
        # Sync tools run in a worker thread (context variables copied) so they never block the loop.
        return await asyncio.to_thread(fn, *call_args, **call_kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.fn is None:
            raise UserError(f"tool {self.name!r} has no Python body to call")
        return self.fn(*args, **kwargs)

    def _options(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in _DEFAULTS}

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"


def _is_async_callable(fn: Any) -> bool:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004


def _is_method_definition(fn: Callable[..., Any]) -> bool:
    if inspect.ismethod(fn):
        return False
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return False
    return bool(params) and params[0] in ("self", "cls") and "." in getattr(fn, "__qualname__", "")


class _MethodTool(Tool):
    """A `@tool` on a method inside a class body: its schema is built once bound to an instance."""

    __slots__ = ()

    def __get__(self, obj: Any, objtype: Any = None) -> Tool:
        if obj is None or self.fn is None:
            return self
        cache = getattr(obj, "__dict__", None)
        key = f"__agentrt_tool_{self.name}"
        if cache is not None and key in cache:
            return cache[key]  # type: ignore[no-any-return]
        bound_fn = self.fn.__get__(obj, objtype)
        bound = Tool.from_function(bound_fn, name=self.name, description=self.description or None, **self._options())
        bound._bound_to = obj
        if cache is not None:
            cache[key] = bound
        return bound


@overload
def tool(fn: F, /) -> Tool: ...
@overload
def tool(
    fn: Callable[..., Any],
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    **options: Unpack[ToolOptions],
) -> Tool: ...
@overload
def tool(
    fn: None = None, /, *, name: str | None = None, description: str | None = None, **options: Unpack[ToolOptions]
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    **options: Unpack[ToolOptions],
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a sync or async function into a `Tool`.

    The name, description and JSON Schema come from the signature, type hints and docstring
    (Google, NumPy or Sphinx parameter docs). Parameters typed `RuntimeContext`, or with a type
    stored in the context (``ctx.put(Db, db)``), are injected and hidden from the model.

    Args:
        fn: The function (``@tool`` without parentheses, or ``tool(fn, name="lookup")`` for a lambda).
        name: Tool name; defaults to the function name.
        description: Description; defaults to the docstring.
        **options: The `ToolOptions`, all keywords:

            - ``timeout``: Seconds before the call is cancelled and an error goes back to the model;
              None for no limit.
            - ``read_only``: The tool changes nothing (allowed in explore mode, never asks for approval).
            - ``destructive``: The tool changes or deletes things (asks for approval by default; runs alone).
            - ``requires_confirmation``: Always ask the user before running.
            - ``external``: The caller runs this tool; the run pauses for its result.
            - ``group``: Tool group the tool belongs to.
            - ``max_calls``: Most calls allowed per agent call; further calls are refused with a message
              to the model.
            - ``concurrency_safe``: May run in parallel with other calls of one turn (default: not
              destructive).
            - ``idempotent``: Safe to re-run after a crash interrupted it.
            - ``check_permission``: ``check(args, ctx)`` deciding allow / ask / deny for one call.
            - ``edit``: The tool edits files (``ACCEPT_EDITS`` mode runs it without asking inside the
              workspace).
    """
    opts = _with_defaults(options, name)

    def decorate(func: Callable[..., Any]) -> Tool:
        if isinstance(func, Tool):
            changes = {"name": name, "description": description, **opts}
            return func.copy(**{k: v for k, v in changes.items() if v is not None})
        if not callable(func):
            raise ToolDefinitionError(f"@tool needs a function, got {type(func).__name__!r}")
        if _is_method_definition(func):
            return _MethodTool(name=name or func.__name__, description=description or "", fn=func, **opts)
        return Tool.from_function(func, name=name, description=description, **opts)

    if fn is not None:
        return decorate(fn)
    return decorate
