"""``agentrt chat``: an interactive chat with an agent in the terminal.

Replies stream as they are generated (thinking dim), tool calls and their results show as they
happen, approvals are asked inline (yes / no / edit the arguments / always allow), questions an
MCP server asks during a tool call are put to the user field by field (the run waits meanwhile),
Ctrl-C interrupts the reply in progress and keeps the session, and the session lives in a state
store so a later ``agentrt chat --session ID`` continues it.

The prompt is read in the main thread between runs (so readline editing works and Ctrl-C at the
prompt is an ordinary `KeyboardInterrupt`); each run goes through one `asyncio.Runner` kept for
the whole chat, with a SIGINT handler installed only while the run streams.

Offline models for trying it out and for tests (``--model scripted:NAME``, registered here with
`agentrt.model.register_provider`): ``scripted:demo`` is the planner of ``agentrt demo``
(calculator, clock and unit tools), ``scripted:echo`` echoes each message (``sleep N`` makes it
wait N seconds, to try Ctrl-C). Other ``scripted:`` names give an empty `ScriptedModel`.
"""

# No `from __future__ import annotations`: typer reads the command signature at runtime.
import asyncio
import contextlib
import fnmatch
import functools
import importlib
import inspect
import json
import os
import pkgutil
import re
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any

from agentrt.state.pending import Pending, PendingCall, flatten_pending

if TYPE_CHECKING:
    from rich.console import Console

    from agentrt.agent.react import ReActAgent
    from agentrt.events import AgentEvent
    from agentrt.message import Msg, TokenUsage
    from agentrt.model.base import ChatModel, ChatResponse, ToolSchema
    from agentrt.permission import ConfirmResult, PermissionRule
    from agentrt.state.base import AgentStateStore
    from agentrt.tool.base import Tool

__all__ = [
    "ChatRenderer",
    "ChatSession",
    "PendingCall",
    "build_chat_command",
    "builtin_tools",
    "register_scripted_models",
    "resolve_tools",
]

ANGLE = "\u203a"
"""The prompt mark (a single right-pointing angle quotation mark)."""
PROMPT = f"[bold cyan]you {ANGLE}[/] "
APPROVAL_PROMPT = f"  [bold yellow]allow?[/] \\[y]es / \\[n]o / \\[e]dit / \\[a]lways {ANGLE} "
DEFAULT_SYSTEM = (
    "You are a helpful assistant in a terminal chat. Use the available tools when they help, and answer concisely."
)
HELP = """\
[bold]commands[/]
  /new [ID]     start a new session (a fresh id unless you give one)
  /sessions     list your sessions (* marks the current one)
  /state        the session's state: messages, revision, accepted rules, pending approvals
  /history      the conversation so far
  /help         this help
  /exit         quit (also /quit, Ctrl-D, or Ctrl-C twice at the prompt)
[bold]while a reply streams[/]
  Ctrl-C        interrupt it (the session keeps everything so far); twice: stop at once
[bold]approvals[/]
  y  run the tool   n  refuse it   e  edit its JSON arguments, then run   a  run it and always allow
  such calls in this session (the suggested rule)
[bold]questions from MCP servers[/] (the tool call waits for your answer)
  a form: answer y to fill it in field by field (Enter keeps a default or skips an optional field;
  choices by number or name, several separated by commas), n to decline, c to cancel
  a page to visit or leave to use the model: y / n / c; a URL is shown with its host, never opened
  Ctrl-C or Ctrl-D while answering cancels the question"""
_SUMMARY_CHARS = 160
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Control characters (ESC sequences can repaint the terminal) and bidirectional overrides (which
# can disguise text): shown as escapes when they come from an untrusted MCP server.
_UNSAFE_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_SKIP: Any = object()


# --------------------------------------------------------------------------------------------------
# offline models
# --------------------------------------------------------------------------------------------------
_SLEEP = re.compile(r"^\s*sleep\s+(\d+(?:\.\d+)?)\s*s?\s*$", re.IGNORECASE)


def _echo_model(name: str, options: Mapping[str, Any]) -> "ChatModel":
    from agentrt.model.base import ChatModel, ChatResponse, GenerateOptions

    chunk_delay = float(options.get("chunk_delay", 0.0))

    class EchoModel(ChatModel):
        """Echoes the last user message, numbered by how many user messages the prompt holds."""

        provider = "scripted"

        def __init__(self) -> None:
            self.model_name = name

        async def stream(
            self, messages: "Sequence[Msg]", tools: "Sequence[ToolSchema]" = (), options: GenerateOptions | None = None
        ) -> "AsyncIterator[ChatResponse]":
            users = [m for m in messages if m.role == "user" and m.text and not m.metadata.get("synthetic")]
            text = users[-1].text if users else ""
            number = len(users)
            slept = _SLEEP.match(text)
            if slept is not None:
                seconds = float(slept[1])
                yield ChatResponse(thinking=f"sleeping {seconds:g} s before answering")
                await asyncio.sleep(seconds)
                text = f"slept {seconds:g} s"
            for piece in re.findall(r"\s*\S+\s*|\s+", f"echo #{number}: {text}"):
                if chunk_delay:
                    await asyncio.sleep(chunk_delay)
                yield ChatResponse(text=piece)
            yield ChatResponse(finish_reason="stop")

    return EchoModel()


def _scripted_factory(
    name: str, *, base_url: str | None = None, api_key: str | None = None, **options: Any
) -> "ChatModel":
    from agentrt.errors import UserError
    from agentrt.model.scripted import ScriptedModel

    if name in ("demo", "echo"):
        unknown = set(options) - {"latency", "chunk_delay"}
        if unknown:
            raise UserError(f"scripted:{name} takes the options latency and chunk_delay, not {sorted(unknown)}")
    if name == "demo":
        from agentrt.cli.demo import plan

        model = ScriptedModel.from_function(plan, name="demo", latency=float(options.get("latency", 0.0)))
        model.chunk_delay = float(options.get("chunk_delay", 0.0))
        return model
    if name == "echo":
        return _echo_model(name, options)
    return ScriptedModel(name=name, **options)


def register_scripted_models() -> None:
    """Make ``scripted:demo`` and ``scripted:echo`` resolvable by `model_from_id` (idempotent)."""
    from agentrt.model.registry import register_provider

    register_provider("scripted", _scripted_factory)


# --------------------------------------------------------------------------------------------------
# tools
# --------------------------------------------------------------------------------------------------
def _instantiate(cls: type, workspace: str) -> Any:
    try:
        return cls(workspace)
    except TypeError:
        return cls()


def builtin_tools(workspace: str) -> "tuple[list[Tool], list[str]]":
    """Every tool the `agentrt.tool.builtin` package provides, and notes on modules that were skipped.

    Each module of the package is imported on its own (an optional dependency missing from one
    does not hide the others); module-level tools are taken as they are, and classes holding
    ``@tool`` methods (such as ``FileTools``) are built for `workspace`.
    """
    from agentrt.tool.base import Tool
    from agentrt.tool.toolkit import _tools_of

    # Not `import agentrt.tool.builtin as ...`: the name `agentrt.tool` is the @tool decorator.
    package = importlib.import_module("agentrt.tool.builtin")
    found: dict[str, Tool] = {}
    notes: list[str] = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        try:
            module = importlib.import_module(f"{package.__name__}.{info.name}")
        except Exception as exc:
            notes.append(f"{info.name}: {type(exc).__name__}: {exc}")
            continue
        names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
        for attr in names:
            obj = getattr(module, attr, None)
            if isinstance(obj, Tool):
                found.setdefault(obj.name, obj)
            elif (
                isinstance(obj, type)
                and obj.__module__ == module.__name__
                and any(isinstance(v, Tool) for v in vars(obj).values())
            ):
                try:
                    instance = _instantiate(obj, workspace)
                except Exception as exc:
                    notes.append(f"{info.name}.{attr}: {type(exc).__name__}: {exc}")
                    continue
                for bound in _tools_of(instance):
                    found.setdefault(bound.name, bound)
    return list(found.values()), notes


def _demo_tools() -> "list[Tool]":
    from agentrt.tool.builtin import calculate, convert_units, current_time

    return [calculate, current_time, convert_units]


_TOOLS_ACCEPTED = (
    "pass a Toolkit, a tool (an @tool function), a function, an object with @tool methods, or a list of them"
)


def _import_tools(spec: str) -> "list[Tool]":
    from agentrt._target import TargetError, describe_target, import_target
    from agentrt.errors import UserError
    from agentrt.tool.base import Tool
    from agentrt.tool.toolkit import Toolkit, _tools_of

    try:
        obj = import_target(spec, example="myapp.tools:toolkit")
    except UserError as exc:
        raise UserError(f"--tools {spec}: {exc}") from None
    if isinstance(obj, Toolkit):
        return list(obj)
    kit = Toolkit()
    items = obj if isinstance(obj, (list, tuple)) else [obj]
    for i, item in enumerate(items):
        usable = isinstance(item, Tool) or inspect.isroutine(item) or (not isinstance(item, type) and _tools_of(item))
        if not usable:
            where = spec if item is obj else f"{spec}[{i}]"
            found = describe_target(item)
            raise TargetError(f"--tools {where} is {found}, not a tool; {_TOOLS_ACCEPTED}", target=spec, found=found)
        kit.register(item)
    return list(kit)


def resolve_tools(specs: Sequence[str], workspace: str) -> "tuple[list[Tool], list[str]]":
    """The tools named by ``--tools`` values, and notes on what was skipped.

    A value is ``builtin`` (every built-in tool), ``demo`` (calculator, clock, unit conversion),
    ``none``, or ``module:attribute`` naming a `Toolkit`, a tool, a function, an object with
    ``@tool`` methods, or a list of those. Values may also be comma-separated.
    """
    from agentrt.errors import UserError

    tools: dict[str, Tool] = {}
    notes: list[str] = []
    for raw in specs:
        for spec in (s.strip() for s in raw.split(",")):
            if not spec or spec == "none":
                continue
            if spec == "builtin":
                found, skipped = builtin_tools(workspace)
                notes.extend(skipped)
            elif spec == "demo":
                found = _demo_tools()
            elif ":" in spec:
                found = _import_tools(spec)
            else:
                raise UserError(f"--tools {spec!r}: use 'builtin', 'demo', 'none' or 'module:attribute'")
            for item in found:
                tools.setdefault(item.name, item)
    return list(tools.values()), notes


# --------------------------------------------------------------------------------------------------
# rendering
# --------------------------------------------------------------------------------------------------
def _one_line(text: str, limit: int = _SUMMARY_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _args_json(args: Mapping[str, Any]) -> str:
    return json.dumps(dict(args), ensure_ascii=False, default=str)


def _safe(text: Any) -> str:
    """Untrusted text as printable text: control characters and direction overrides become escapes."""
    return _UNSAFE_CHARS.sub(lambda m: f"\\u{ord(m[0]):04x}", str(text))


def _url_host(url: Any) -> str:
    """The host a URL points at, as the user should check it (empty when it is not plain http or https)."""
    from agentrt.tool.questions import url_problem

    if url_problem(url) is not None:
        return ""
    from urllib.parse import urlsplit

    host = urlsplit(str(url)).hostname or ""
    try:
        return host.encode("idna").decode("ascii")  # xn--: a look-alike name shows as what it is
    except UnicodeError:
        return host


def describe_rule(rule: "PermissionRule") -> str:
    """A short human form of a permission rule: ``tool`` or ``tool key=pattern``."""
    if not rule.args:
        return f"every {rule.tool} call"
    return f"{rule.tool} " + " ".join(f"{k}={v}" for k, v in rule.args.items())


class ChatRenderer:
    """Prints one call's events: streamed thinking and text, tool calls and results, a footer."""

    def __init__(self, console: "Console", agent_name: str, *, show_thinking: bool = True) -> None:
        self.console = console
        self.agent_name = agent_name
        self.show_thinking = show_thinking
        self.steps = 0
        self.tool_calls = 0
        self.usage: TokenUsage | None = None
        self.failed = False
        self._open: str | None = None
        self._shown_calls: set[str] = set()
        self._args_shown: dict[str, int] = {}
        self._started = time.perf_counter()

    # -- low-level output ----------------------------------------------------------------------------
    def _close(self) -> None:
        if self._open is not None:
            self.console.print()
            self._open = None

    def _stream(self, key: str, label: str, label_style: str, delta: str, style: str) -> None:
        from rich.text import Text

        if self._open != key:
            self._close()
            self.console.print(Text(label, style=label_style), end="")
            self._open = key
        self.console.print(Text(delta, style=style), end="", soft_wrap=True, highlight=False)

    def line(self, body: str, style: str = "", *, prefix: str = "", prefix_style: str = "") -> None:
        """Print one full line (closing any streamed block first)."""
        from rich.text import Text

        self._close()
        self.console.print(Text.assemble((prefix, prefix_style), (body, style)), soft_wrap=True, highlight=False)

    def note(self, text: str) -> None:
        """A dim remark."""
        self.line(text, "dim")

    def error(self, exc: BaseException) -> None:
        """An error that ended the call."""
        self.line(f"{type(exc).__name__}: {exc}", "red", prefix="error: ", prefix_style="bold red")

    # -- events ----------------------------------------------------------------------------------------
    def _source(self, event: "AgentEvent") -> str:
        return "" if not event.source or event.source == self.agent_name else f"[{event.source}] "

    def feed(self, event: "AgentEvent") -> None:
        """Print one event (types this chat does not show are skipped)."""
        show = getattr(self, f"_on_{event.type}", None)
        if show is not None:
            show(event, self._source(event))

    def _on_model_call_started(self, event: Any, src: str) -> None:
        self._close()
        if not src:
            self.steps = max(self.steps, event.step)

    def _on_thinking_delta(self, event: Any, src: str) -> None:
        if self.show_thinking and event.delta:
            self._stream("k" + event.block_id, f"{src}thinking: ", "dim", event.delta, "dim italic")

    def _on_text_delta(self, event: Any, src: str) -> None:
        self._stream("t" + event.block_id, f"{src}{self.agent_name} {ANGLE} ", "bold green", event.delta, "")

    def _on_tool_call_started(self, event: Any, src: str) -> None:
        self._shown_calls.add(event.tool_call_id)
        self._args_shown[event.block_id] = 0
        if not src:
            self.tool_calls += 1
        self._stream("c" + event.block_id, f"{src}→ {event.name} ", "bold magenta", "", "")

    def _on_tool_call_delta(self, event: Any, src: str) -> None:
        shown = self._args_shown.get(event.block_id, 0)
        if shown < 300:
            piece = event.delta[: 300 - shown] + ("…" if shown + len(event.delta) > 300 else "")
            self._args_shown[event.block_id] = shown + len(event.delta)
            self._stream("c" + event.block_id, f"{src}→ ", "bold magenta", piece, "magenta")

    def _on_model_call_finished(self, event: Any, src: str) -> None:
        self._close()
        for call in event.msg.tool_calls:
            if call.id not in self._shown_calls:
                self._shown_calls.add(call.id)
                if not src:
                    self.tool_calls += 1
                self.line(_one_line(_args_json(call.input), 300), "magenta", prefix=f"{src}→ {call.name} ",
                          prefix_style="bold magenta")  # fmt: skip

    def _on_model_restarted(self, event: Any, src: str) -> None:
        self.note(f"{src}(the model stream restarted: {event.reason}; the partial reply above is discarded)")

    def _on_tool_result(self, event: Any, src: str) -> None:
        result = event.result
        ok = result.state == "success"
        mark = "✓" if ok else f"✗ {result.state}"
        took = f"  ({event.elapsed * 1000:.0f} ms)" if event.elapsed else ""
        self.line(
            _one_line(result.text) + took,
            "" if ok else "red",
            prefix=f"{src}← {result.name} {mark}: ",
            prefix_style="bold blue" if ok else "bold red",
        )

    def _on_require_external_execution(self, event: Any, src: str) -> None:
        names = ", ".join(c.name for c in event.tool_calls)
        self.note(f"{src}waiting for external tools: {names}")

    def _on_context_compressed(self, event: Any, src: str) -> None:
        self.note(f"(context compressed: {event.before_tokens} → {event.after_tokens} tokens, tier {event.tier})")

    def _on_usage(self, event: Any, src: str) -> None:
        if not src:
            self.usage = event.usage if self.usage is None else self.usage + event.usage

    def _on_interrupted(self, event: Any, src: str) -> None:
        self.line("the reply was interrupted; the session keeps everything so far", "yellow",
                  prefix=f"{src}⏹ ", prefix_style="bold yellow")  # fmt: skip

    def _on_run_error(self, event: Any, src: str) -> None:
        if not src:
            self.failed = True
            self.line(f"{event.error_type}: {event.error}", "red", prefix="error: ", prefix_style="bold red")

    def _on_run_finished(self, event: Any, src: str) -> None:
        if not src:
            self.finish(event.msg)

    def _on_mcp_elicitation(self, event: Any, src: str) -> None:
        # The server's text is untrusted: printed as plain Text (no markup), URLs shown, never opened.
        who = f"MCP server {_safe(event.server)!r}" if event.server else "a tool"
        if event.mode == "url":
            what = "asks you to visit a page"
        elif event.mode == "sampling":
            what = "asks to use the model"
        else:
            what = "asks you"
        self.line(f"{who} {what}" + ("" if event.question_id else " (answered by the application)"),
                  "bold yellow", prefix=f"{src}? ", prefix_style="bold yellow")  # fmt: skip
        for text in (event.message or "").splitlines() or [""]:
            self.line(_safe(text), prefix="  ")
        if event.mode == "url":
            self.line(_safe(event.url or ""), "underline", prefix="  url: ")
            host = _url_host(event.url)
            self.line(host or "(not an http or https address)", "bold", prefix="  host: ")

    def _on_mcp_elicitation_closed(self, event: Any, src: str) -> None:
        if event.reason != "answered":
            why = {"expired": "expired unanswered", "interrupted": "cancelled by the interrupt"}
            self.note(f"{src}the question was {why.get(event.reason, 'withdrawn by the server')}")

    def finish(self, reply: "Msg") -> None:
        """The dim footer: steps, tool calls, tokens, time (and the stop reason when unusual)."""
        from agentrt.message import GenerateReason

        self._close()
        parts = [f"{self.steps} step{'s' if self.steps != 1 else ''}"]
        if self.tool_calls:
            parts.append(f"{self.tool_calls} tool call{'s' if self.tool_calls != 1 else ''}")
        if self.usage is not None and self.usage.total_tokens:
            parts.append(f"{self.usage.input_tokens} in / {self.usage.output_tokens} out tokens")
        cost = _reply_cost(reply)
        if cost is not None:
            parts.append(_dollars(cost))
        elapsed = time.perf_counter() - self._started
        parts.append(f"{elapsed * 1000:.0f} ms" if elapsed < 1 else f"{elapsed:.1f} s")
        reason = reply.generate_reason
        if reason not in (GenerateReason.STOP, GenerateReason.INTERRUPTED):
            parts.append(reason.value.replace("_", " "))
        self.note("  " + " · ".join(parts))


def _reply_cost(reply: "Msg") -> float | None:
    """The call's cost in US dollars from ``reply.metadata["usage"]`` (subagents included); None: unknown."""
    usage = reply.metadata.get("usage") if reply.metadata else None
    cost = usage.get("cost_usd") if isinstance(usage, dict) else None
    return float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None


def _dollars(value: float) -> str:
    """A cost for the footer: cents for dollars, more digits for the fractions of a cent calls cost."""
    if value >= 1:
        return f"${value:,.2f}"
    if value >= 0.0001 or value == 0:
        return f"${value:.4f}"
    return "<$0.0001"


# --------------------------------------------------------------------------------------------------
# pending approvals
# --------------------------------------------------------------------------------------------------
def pending_calls(pending: Pending | Mapping[str, Any] | None) -> list[PendingCall]:
    """The calls the user must answer, from `AgentState.pending` (subagent entries flattened)."""
    return flatten_pending(Pending.coerce(pending))


# --------------------------------------------------------------------------------------------------
# form fields of MCP questions
# --------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _sigint_released(loop: asyncio.AbstractEventLoop, handler: "Callable[[], None] | None") -> "Iterator[None]":
    """Ctrl-C raises KeyboardInterrupt again for the block, instead of calling the run's interrupt `handler`.

    A question's prompt blocks the loop (the call waits on the answer anyway), so the loop could
    not run the handler: Ctrl-C there cancels the question, and the handler is back afterwards.
    """
    if handler is None:
        yield
        return
    loop.remove_signal_handler(signal.SIGINT)
    try:
        yield
    finally:
        loop.add_signal_handler(signal.SIGINT, handler)


def _field_choices(prop: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(value, label)`` of a choice field (single or multiple), else empty."""
    spec: Any = prop.get("items") if prop.get("type") == "array" else prop
    if not isinstance(spec, Mapping):
        return []
    options = spec.get("oneOf") or spec.get("anyOf")
    if isinstance(options, list):
        return [
            (o["const"], str(o.get("title") or o["const"]))
            for o in options
            if isinstance(o, Mapping) and isinstance(o.get("const"), str)
        ]
    values = spec.get("enum")
    if isinstance(values, list):
        raw_names = spec.get("enumNames")
        names: list[Any] = raw_names if isinstance(raw_names, list) else []
        return [(str(v), str(names[i]) if i < len(names) else str(v)) for i, v in enumerate(values)]
    return []


def _field_hint(prop: Mapping[str, Any], required: bool) -> str:
    kind = prop.get("type")
    parts = []
    if kind == "boolean":
        parts.append("y/n")
    elif kind in ("integer", "number"):
        bounds = [
            f">= {prop['minimum']}" if "minimum" in prop else "",
            f"<= {prop['maximum']}" if "maximum" in prop else "",
        ]
        parts.append(" ".join(["whole number" if kind == "integer" else "number", *[b for b in bounds if b]]))
    elif prop.get("format"):
        parts.append(
            {"date": "YYYY-MM-DD", "date-time": "YYYY-MM-DDTHH:MM:SS+00:00"}.get(prop["format"], prop["format"])
        )
    if "default" in prop:
        parts.append(f"default {_safe(json.dumps(prop['default'], ensure_ascii=False))}")
    elif not required:
        parts.append("optional")
    return f" ({', '.join(parts)})" if parts else ""


def field_value(name: str, prop: Mapping[str, Any], raw: str, required: bool) -> tuple[Any, str | None]:
    """What the user typed for one form field, converted: ``(value, None)`` or ``(None, problem)``.

    An empty answer keeps the field's default, or leaves an optional field out (`_SKIP`).
    Choices are taken by number or by name; several are separated by commas.
    """
    from agentrt.tool.questions import form_problems

    if not raw:
        if "default" in prop:
            return prop["default"], None
        return (_SKIP, None) if not required else (None, "this field is required")
    value, problem = _convert(prop, raw)
    if problem is not None:
        return None, problem
    problems = form_problems({"type": "object", "properties": {name: dict(prop)}}, {name: value})
    return (value, None) if not problems else (None, problems[0]["message"])


def _convert(prop: Mapping[str, Any], raw: str) -> tuple[Any, str | None]:
    kind = prop.get("type")
    choices = _field_choices(prop)
    if kind == "array":
        picked = [_pick(choices, part.strip()) for part in raw.split(",") if part.strip()]
        bad = [p for p in picked if p is None]
        return (None, "not one of the choices") if bad or not picked else (picked, None)
    if choices:
        value = _pick(choices, raw)
        return (value, None) if value is not None else (None, "not one of the choices")
    if kind == "boolean":
        lowered = raw.lower()
        if lowered in ("y", "yes", "true", "1"):
            return True, None
        if lowered in ("n", "no", "false", "0"):
            return False, None
        return None, "answer y or n"
    if kind == "integer":
        try:
            return int(raw), None
        except ValueError:
            return None, "must be a whole number"
    if kind == "number":
        try:
            number = float(raw)
        except ValueError:
            return None, "must be a number"
        return (number, None) if number == number and abs(number) != float("inf") else (None, "must be a number")
    return raw, None


def _pick(choices: list[tuple[str, str]], raw: str) -> str | None:
    if raw.isdigit() and 1 <= int(raw) <= len(choices):
        return choices[int(raw) - 1][0]
    for value, label in choices:
        if raw == value or raw.lower() == label.lower():
            return value
    return None


# --------------------------------------------------------------------------------------------------
# the chat
# --------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _interrupts_ignored(*, restore: bool = True) -> Iterator[None]:
    """SIGINT is ignored inside the block, and after it unless `restore` (main thread only)."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        if restore:
            signal.signal(signal.SIGINT, previous)


class ChatSession:
    """The read-eval-print loop of ``agentrt chat`` around one agent and one state store.

    ``agentrt work`` reuses it through a subclass: `title`, `renderer_class`, `prompt_text` and
    `resume_hint` are its hooks (and `_command` for more slash commands).
    """

    title = "agentrt chat"
    """The banner's heading."""
    renderer_class: "type[ChatRenderer]" = ChatRenderer
    """What prints each call's events."""
    ends_process = False
    """Set by the command line, whose process ends with the session: a Ctrl-C pressed while it quits
    is ignored to the end (instead of a traceback and exit status 130 after the goodbye)."""

    def __init__(
        self,
        console: "Console",
        agent: "ReActAgent",
        store: "AgentStateStore",
        *,
        user_id: str,
        session_id: str,
        model_id: str,
        store_url: str,
        tool_names: Sequence[str] = (),
        notes: Sequence[str] = (),
        show_thinking: bool = True,
        resume_command: "Callable[[str], Sequence[str]] | None" = None,
    ) -> None:
        from agentrt.context import RuntimeContext

        self.console = console
        self.agent = agent
        self.store = store
        self.user_id = user_id
        self.session_id = session_id
        self.ctx = RuntimeContext(user_id, session_id)
        self.model_id = model_id
        self.store_url = store_url
        self.tool_names = list(tool_names)
        self.notes = list(notes)
        self.show_thinking = show_thinking
        self.resume_command = resume_command
        """Session id -> the argv that continues it (the command line's own options); None: a minimal one."""
        self._runner: asyncio.Runner | None = None
        self._ctrl_c_at_prompt = False

    # -- plumbing ---------------------------------------------------------------------------------------
    def _run(self, make: "Callable[[], Any]") -> Any:
        """Run a coroutine on the chat's loop; a Ctrl-C outside a streamed reply raises KeyboardInterrupt."""
        assert self._runner is not None
        try:
            return self._runner.run(make())
        except asyncio.CancelledError:
            raise KeyboardInterrupt from None

    def _input(self, prompt: str) -> str:
        # The prompt goes to input() itself rather than being printed first (as Console.input does),
        # so readline knows it: line editing and redraws keep it, and the prompt appears only once
        # the terminal is ready to read.
        with self.console.capture() as captured:
            self.console.print(prompt, end="", highlight=False)
        text = captured.get()
        if "readline" in sys.modules:
            text = _ANSI.sub(lambda m: f"\001{m[0]}\002", text)  # invisible to readline's width count
        return input(text)

    def _set_session(self, session_id: str) -> None:
        from agentrt.context import RuntimeContext

        self.session_id = session_id
        self.ctx = RuntimeContext(self.user_id, session_id)

    # -- main loop ----------------------------------------------------------------------------------------
    def run(self) -> int:
        """Chat until /exit, Ctrl-D or two Ctrl-C at the prompt; returns the exit status."""
        with contextlib.suppress(ImportError):
            import readline  # noqa: F401 - line editing and history for input()
        with asyncio.Runner() as runner:
            self._runner = runner
            try:
                self._banner()
                self._settle_pending(announce=True)
                while True:
                    line = self._read()
                    if line is None:
                        break
                    try:
                        if line.startswith("/"):
                            if not self._command(line):
                                break
                        else:
                            self._send(line)
                    except KeyboardInterrupt:
                        self.console.print()
                        self.console.print("interrupted", style="yellow")
            finally:
                # Quitting: one more Ctrl-C (a third press) must not cut the goodbye or the close,
                # nor, when the command line ends the process next, the interpreter's exit.
                with _interrupts_ignored(restore=not self.ends_process):
                    if not self.store_url.startswith("memory:"):
                        self.console.print(
                            f"session {self.session_id} is saved; continue it with {self.resume_hint()}",
                            style="dim",
                            markup=False,
                            highlight=False,
                        )
                    with contextlib.suppress(Exception):
                        runner.run(self.store.close())
        return 0

    def prompt_text(self) -> str:
        """The input prompt (rich markup)."""
        return PROMPT

    def resume_hint(self) -> str:
        """The command that continues this session, printed on exit (quoted for a POSIX shell)."""
        from agentrt.cli._resume import command_line

        if self.resume_command is not None:
            return command_line(self.resume_command(self.session_id))
        return command_line(["agentrt", "chat", "--model", self.model_id, "--session", self.session_id])

    def _banner(self) -> None:
        from rich.markup import escape

        state = self._run(lambda: self.agent.get_state(self.user_id, self.session_id))
        tools = ", ".join(self.tool_names) if self.tool_names else "none"
        self.console.rule(f"[bold]{escape(self.title)}[/]")
        self.console.print(
            f"model [bold]{escape(self.model_id)}[/] · session [bold]{escape(self.session_id)}[/] · "
            f"user {escape(self.user_id)} · store {escape(self.store_url)}",
            highlight=False,
        )
        self.console.print(f"tools: {escape(tools)}", style="dim", highlight=False)
        for note in self.notes:
            self.console.print(f"(skipped {escape(note)})", style="dim", highlight=False)
        if state.messages:
            self.console.print(
                f"resumed session {escape(self.session_id)}: {len(state.messages)} messages (/history shows them)",
                style="dim",
                highlight=False,
            )
        self.console.print("/help for commands · Ctrl-C interrupts a reply · Ctrl-C twice or /exit quits", style="dim")

    def _read(self) -> str | None:
        while True:
            try:
                line = self._input(self.prompt_text())
            except EOFError:
                self.console.print()
                return None
            except KeyboardInterrupt:
                self.console.print()
                if self._ctrl_c_at_prompt:
                    return None
                self._ctrl_c_at_prompt = True
                self.console.print("(press Ctrl-C again, or type /exit, to quit)", style="dim")
                continue
            self._ctrl_c_at_prompt = False
            if line.strip():
                return line.strip()

    # -- commands -------------------------------------------------------------------------------------------
    def _command(self, line: str) -> bool:
        """Run a slash command; False means quit."""
        from rich.markup import escape

        name, _, arg = line.partition(" ")
        name = name.lower()
        arg = arg.strip()
        if name in ("/exit", "/quit", "/q"):
            return False
        if name in ("/help", "/?"):
            self.console.print(HELP, highlight=False)
        elif name == "/new":
            from agentrt.message import new_id

            self._set_session(arg or f"chat-{new_id()[:8]}")
            self.console.print(f"new session [bold]{escape(self.session_id)}[/]", highlight=False)
            self._settle_pending(announce=True)
        elif name == "/sessions":
            self._sessions()
        elif name == "/state":
            self._state()
        elif name == "/history":
            from agentrt.cli.sessions import render_messages

            state = self._run(lambda: self.agent.get_state(self.user_id, self.session_id))
            if state.messages:
                render_messages(self.console, state.messages)
            else:
                self.console.print("(no messages yet)", style="dim")
        else:
            self.console.print(f"unknown command {escape(name)}; /help lists the commands", style="red")
        return True

    def _sessions(self) -> None:
        import datetime as dt

        from rich.table import Table

        sessions = self._run(lambda: self.store.list_sessions(self.user_id, agent=self.agent.state_key))
        if not sessions:
            self.console.print(f"no saved sessions for user {self.user_id!r} yet", style="dim", highlight=False)
            return
        table = Table("", "session", "messages", "revision", "updated", box=None, pad_edge=False)
        for info in sessions:
            when = dt.datetime.fromtimestamp(info.updated_at).strftime("%Y-%m-%d %H:%M") if info.updated_at else "-"
            mark = "*" if info.session_id == self.session_id else ""
            table.add_row(mark, info.session_id, str(info.message_count), str(info.revision), when)
        self.console.print(table)

    def _state(self) -> None:
        from rich.markup import escape

        from agentrt.permission import PermissionRule

        state = self._run(lambda: self.agent.get_state(self.user_id, self.session_id))
        roles: dict[str, int] = {}
        for msg in state.messages:
            roles[msg.role] = roles.get(msg.role, 0) + 1
        by_role = ", ".join(f"{n} {role}" for role, n in roles.items())
        out = self.console.print
        out(
            f"session [bold]{escape(state.session_id)}[/] · user {escape(state.user_id)} · "
            f"revision {state.revision} · {len(state.messages)} messages" + (f" ({by_role})" if by_role else ""),
            highlight=False,
        )
        tokens = self._context_tokens(state.messages)
        if tokens is not None:
            out(f"context: ~{tokens} tokens", highlight=False)
        if state.summary:
            out(f"summary: {escape(_one_line(state.summary, 300))}", highlight=False)
        rules = [PermissionRule.coerce(r) for r in state.rules]
        if rules:
            out("rules:", highlight=False)
            for rule in rules:
                out(f"  {rule.decision.value} {escape(describe_rule(rule))} ({rule.source})", highlight=False)
        else:
            out("rules: none", highlight=False)
        calls = pending_calls(state.pending)
        if calls:
            out("pending:", highlight=False)
            for call in calls:
                what = "awaiting approval" if call.kind == "confirm" else "awaiting its result"
                out(f"  {escape(call.name)} {escape(_one_line(_args_json(call.input)))} — {what}", highlight=False)
        else:
            out("pending: none", highlight=False)
        if state.active_groups is not None:
            out(f"tool groups: {', '.join(state.active_groups) or 'none'}", highlight=False)

    def _context_tokens(self, messages: "list[Msg]") -> int | None:
        if not messages:
            return 0
        try:
            from agentrt.model.tokens import count_tokens

            return count_tokens(messages, self.agent.model)
        except Exception:
            return None

    # -- a message and its run ---------------------------------------------------------------------------------
    def _send(self, text: str) -> None:
        if not self._settle_pending(announce=True):
            return
        payload: Any = text
        while payload is not None:
            outcome = self._run(functools.partial(self._stream, payload))
            payload = None
            if outcome == "confirm":
                results = self._ask_approvals(self._pending())
                if results is None:
                    return
                from agentrt.message import Msg

                payload = Msg.confirm(results)
            elif outcome == "external":
                payload = self._refuse_external(self._pending())

    def _pending(self) -> list[PendingCall]:
        state = self._run(lambda: self.agent.get_state(self.user_id, self.session_id))
        return pending_calls(state.pending)

    def _settle_pending(self, *, announce: bool) -> bool:
        """Answer what the session still waits for; False if the user left it waiting."""
        from agentrt.message import Msg

        calls = self._pending()
        while calls:
            if announce:
                self.console.print(f"this session has {len(calls)} tool call(s) waiting for an answer", style="yellow")
            if any(c.kind == "confirm" for c in calls):
                results = self._ask_approvals(calls)
                if results is None:
                    return False
                payload: Msg | None = Msg.confirm(results)
            else:
                payload = self._refuse_external(calls)
            outcome = self._run(functools.partial(self._stream, payload))
            calls = self._pending()
            if outcome is None:
                return not calls
        return True

    def _refuse_external(self, calls: list[PendingCall]) -> "Msg | None":
        from agentrt.message import Msg, ToolResultBlock

        external = [c for c in calls if c.kind == "external"]
        if not external:
            return None
        self.console.print("the chat cannot run external tools; they are answered with an error", style="yellow")
        return Msg(
            role="user",
            content=[
                ToolResultBlock(
                    id=c.id,
                    name=c.name,
                    output="This tool runs outside the agent, and the terminal chat cannot run it.",
                    state="error",
                )
                for c in external
            ],
        )

    def _ask_approvals(self, calls: list[PendingCall]) -> "list[ConfirmResult] | None":
        """Ask about each call waiting for approval; None if the user pressed Ctrl-C or Ctrl-D."""
        from rich.markup import escape

        from agentrt.message import ToolUseBlock
        from agentrt.permission import ConfirmResult, PermissionRule

        results: list[ConfirmResult] = []
        for call in (c for c in calls if c.kind == "confirm"):
            # A multi-line reason (the plan `plan_exit` asks to approve) is shown below, line by line.
            reason, _, detail = call.reason.partition("\n")
            self.console.print(
                f"[bold yellow]⚠ approve[/] [bold]{escape(call.name)}[/] "
                f"[magenta]{escape(_one_line(_args_json(call.input), 400))}[/]"
                + (f" [dim]({escape(_safe(reason))})[/]" if reason else ""),
                highlight=False,
            )
            if detail.strip():
                for line in detail.strip("\n").splitlines():
                    self.console.print(f"  │ {escape(_safe(line))}", highlight=False)
            suggested = call.suggested_rules
            general = PermissionRule.coerce(suggested[-1]) if suggested else PermissionRule(tool=call.name)
            while True:
                try:
                    answer = self._input(APPROVAL_PROMPT).strip()
                except (KeyboardInterrupt, EOFError):
                    self.console.print()
                    self.console.print("left waiting; you will be asked again before your next message", style="yellow")
                    return None
                choice, _, rest = answer.partition(" ")
                choice = choice.lower()
                if choice in ("y", "yes"):
                    results.append(ConfirmResult(confirmed=True, tool_call=call.id))
                elif choice in ("n", "no"):
                    results.append(ConfirmResult(confirmed=False, tool_call=call.id, reason=rest.strip()))
                elif choice in ("a", "always"):
                    results.append(ConfirmResult(confirmed=True, tool_call=call.id, rules=[general]))
                    self.console.print(
                        f"  allowing {escape(describe_rule(general))} for the rest of this session",
                        style="dim",
                        highlight=False,
                    )
                elif choice in ("e", "edit"):
                    edited = self._edit_arguments(call)
                    if edited is None:
                        continue
                    results.append(
                        ConfirmResult(confirmed=True, tool_call=ToolUseBlock(id=call.id, name=call.name, input=edited))
                    )
                else:
                    self.console.print("  answer y, n, e or a (/help explains)", style="dim")
                    continue
                break
        return results

    def _edit_arguments(self, call: PendingCall) -> dict[str, Any] | None:
        from rich.markup import escape

        self.console.print(f"  current arguments: {escape(_args_json(call.input))}", highlight=False)
        while True:
            try:
                raw = self._input(f"  [bold]new arguments (JSON, empty keeps them)[/] {ANGLE} ").strip()
            except (KeyboardInterrupt, EOFError):
                self.console.print()
                return None
            if not raw:
                return dict(call.input)
            try:
                value = json.loads(raw)
            except ValueError as exc:
                self.console.print(f"  not JSON: {escape(str(exc))}", style="red", highlight=False)
                continue
            if not isinstance(value, dict):
                self.console.print("  the arguments must be a JSON object", style="red")
                continue
            return value

    # -- questions of the running call (MCP elicitation) ------------------------------------------------------
    def _answer_question(self, event: Any) -> None:
        """Put a question of the running call to the user and deliver the answer; the call waits meanwhile."""
        from agentrt.errors import InvalidAnswerError
        from agentrt.tool.questions import ElicitationAnswer

        question = next((q for q in self.agent.questions(self.ctx) if q.id == event.question_id), None)
        if question is None:
            self.console.print("  (the question is no longer open)", style="dim")
            return
        while True:
            try:
                answer = self._ask_question(question)
            except (KeyboardInterrupt, EOFError):
                self.console.print()
                answer = ElicitationAnswer.cancel()
            try:
                answered = self.agent.answer(self.ctx, question.id, answer)
            except InvalidAnswerError as exc:
                for problem in exc.problems:
                    where = f"{problem['field']}: " if problem.get("field") else ""
                    self.console.print(f"  {where}{problem['message']}", style="red", markup=False, highlight=False)
                continue
            break
        if answered:
            done = {"accept": "accepted", "decline": "declined", "cancel": "cancelled"}[answer.action]
            self.console.print(f"  {done}; the tool call goes on", style="dim")
        else:
            self.console.print(
                "  too late: the question closed before the answer (expired or withdrawn)", style="yellow"
            )

    def _ask_question(self, question: Any) -> Any:
        """The user's `ElicitationAnswer` to `question` (KeyboardInterrupt / EOFError: they gave up)."""
        from agentrt.tool.questions import ElicitationAnswer

        if question.mode == "url":
            choice = self._choose(f"  [bold yellow]visit it?[/] \\[y]es / \\[N]o / \\[c]ancel {ANGLE} ", default="n")
        elif question.mode == "sampling":
            choice = self._choose(f"  [bold yellow]allow?[/] \\[y]es / \\[N]o / \\[c]ancel {ANGLE} ", default="n")
        else:
            prompt = f"  [bold yellow]answer?[/] \\[Y]es, fill in the form / \\[n]o / \\[c]ancel {ANGLE} "
            choice = self._choose(prompt, default="y")
            if choice == "y":
                return ElicitationAnswer.accept(self._fill_form(question.requested_schema or {}))
        if choice == "y":
            return ElicitationAnswer.accept()
        return ElicitationAnswer.decline() if choice == "n" else ElicitationAnswer.cancel()

    def _choose(self, prompt: str, *, default: str) -> str:
        """``y``, ``n`` or ``c`` from the user (Enter: `default`)."""
        while True:
            raw = self._input(prompt).strip().lower() or default
            if raw in ("y", "yes", "n", "no", "c", "cancel"):
                return raw[0]
            self.console.print("  answer y, n or c", style="dim")

    def _fill_form(self, schema: Mapping[str, Any]) -> dict[str, Any]:
        """The form's content, asked field by field, each converted and validated as it is typed."""
        properties = schema.get("properties") or {}
        required = set(schema.get("required") or ())
        content: dict[str, Any] = {}
        for name, prop in properties.items():
            value = self._ask_field(str(name), prop if isinstance(prop, Mapping) else {}, name in required)
            if value is not _SKIP:
                content[str(name)] = value
        return content

    def _ask_field(self, name: str, prop: Mapping[str, Any], required: bool) -> Any:
        from rich.markup import escape

        title = _safe(prop.get("title") or name)
        if prop.get("description"):
            self.console.print(f"  {_safe(prop['description'])}", style="dim", markup=False, highlight=False)
        choices = _field_choices(prop)
        if choices:
            listed = "  ".join(f"{i}) {_safe(label)}" for i, (_, label) in enumerate(choices, 1))
            several = " (several: 1,3)" if prop.get("type") == "array" else ""
            self.console.print(f"  {listed}{several}", markup=False, highlight=False)
        hint = _field_hint(prop, required)
        prompt = f"  [bold]{escape(title)}[/]{' [red]*[/]' if required else ''}{escape(hint)} {ANGLE} "
        while True:
            value, problem = field_value(name, prop, self._input(prompt).strip(), required)
            if problem is None:
                return value
            self.console.print(f"  {problem}", style="red", markup=False, highlight=False)

    async def _stream(self, payload: Any) -> str | None:
        """Stream one call, Ctrl-C interrupting it; ``"confirm"``/``"external"`` when it paused."""
        from agentrt import events as ev
        from agentrt.message import GenerateReason
        from agentrt.tool.questions import McpElicitation

        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        renderer = self.renderer_class(self.console, self.agent.name, show_thinking=self.show_thinking)
        hits = 0
        streaming = True

        def on_sigint() -> None:
            nonlocal hits
            if not streaming:
                return
            hits += 1
            if hits == 1 and self.agent.interrupt(self.ctx):
                renderer.note("^C interrupting… (Ctrl-C again stops at once)")
            elif task is not None:
                task.cancel()

        installed = False
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGINT, on_sigint)
            installed = True
        reason: GenerateReason | None = None
        try:
            async for event in self.agent.stream_events(payload, self.ctx):
                renderer.feed(event)
                if isinstance(event, McpElicitation) and event.question_id:
                    with _sigint_released(loop, on_sigint if installed else None):
                        self._answer_question(event)
                elif isinstance(event, ev.RunFinished) and event.source == self.agent.name:
                    reason = event.msg.generate_reason
        except asyncio.CancelledError:
            if task is None or not hits:
                raise
            task.uncancel()
            renderer.line("stopped; the session keeps what was saved", "yellow", prefix="⏹ ", prefix_style="bold")
            return None
        except Exception as exc:
            if not renderer.failed:  # a failed run printed its RunError already
                renderer.error(exc)
            return None
        finally:
            streaming = False
            if installed:
                loop.remove_signal_handler(signal.SIGINT)
        if reason is GenerateReason.AWAITING_CONFIRMATION:
            return "confirm"
        if reason is GenerateReason.AWAITING_EXTERNAL_EXECUTION:
            return "external"
        return "done"


# --------------------------------------------------------------------------------------------------
# the command
# --------------------------------------------------------------------------------------------------
def _parse_options(pairs: Sequence[str]) -> dict[str, Any]:
    from agentrt.errors import UserError

    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--option {pair!r}: use KEY=VALUE, e.g. temperature=0.2")
        try:
            options[key.strip()] = json.loads(raw)
        except ValueError:
            options[key.strip()] = raw
    return options


def build_agent(
    model_id: str,
    *,
    store: "AgentStateStore",
    tools: Sequence[str] = (),
    system: str | None = None,
    confirm: Sequence[str] = (),
    permission: str = "default",
    model_options: Mapping[str, Any] | None = None,
    max_iters: int = 10,
    workspace: str | None = None,
) -> "tuple[ReActAgent, list[str]]":
    """The chat's agent (model, tools, permissions, store) and notes on skipped tools."""
    from agentrt.agent.react import ReActAgent
    from agentrt.model.registry import model_from_id
    from agentrt.permission import PermissionContext, PermissionMode
    from agentrt.tool.toolkit import Toolkit

    register_scripted_models()
    workspace = workspace or os.getcwd()
    model = model_from_id(model_id, **dict(model_options or {}))
    demo = model_id.split("?")[0] == "scripted:demo"
    specs = list(tools) or (["demo"] if demo else [])
    found, notes = resolve_tools(specs, workspace)
    toolkit = Toolkit()
    for item in found:
        if any(fnmatch.fnmatchcase(item.name, pattern) for pattern in confirm):
            item = item.copy(requires_confirmation=True)
        toolkit.register(item)
    if system is None:
        if demo:
            from agentrt.cli.demo import SYS_PROMPT

            system = SYS_PROMPT
        else:
            system = DEFAULT_SYSTEM
    agent = ReActAgent(
        "assistant",
        system,
        model,
        toolkit,
        state_store=store,
        permission=PermissionContext(mode=PermissionMode(permission), workspace=workspace),
        max_iters=max_iters,
    )
    return agent, notes


def build_chat_command() -> "Callable[..., None]":
    """The ``chat`` command function, for ``app.command("chat")(build_chat_command())``."""
    import typer

    from agentrt.context import ANONYMOUS_USER

    def chat(
        ctx: typer.Context,
        model: Annotated[
            str, typer.Option("--model", "-m", help="Model id, e.g. openai:gpt-4o-mini, or scripted:demo offline.")
        ],
        tools: Annotated[
            list[str] | None,
            typer.Option(
                "--tools",
                "-t",
                help="Tools: builtin, demo, none or module:attribute (repeatable). Default: none "
                "(the demo tools for scripted:demo).",
            ),
        ] = None,
        session: Annotated[
            str | None, typer.Option("--session", "-s", help="Session id to continue (default: a new one).")
        ] = None,
        user: Annotated[str, typer.Option("--user", "-u", help="User id owning the session.")] = ANONYMOUS_USER,
        store: Annotated[
            str | None,
            typer.Option("--store", help="State store URL (default: AGENTRT_STATE_URL or ~/.agentrt/state.db)."),
        ] = None,
        system: Annotated[str | None, typer.Option("--system", help="System prompt.")] = None,
        confirm: Annotated[
            list[str] | None,
            typer.Option("--confirm", "-c", help="Ask before running tools matching this glob (repeatable)."),
        ] = None,
        permission: Annotated[
            str,
            typer.Option("--permission", help="Permission mode: default, accept_edits, explore, bypass, dont_ask."),
        ] = "default",
        option: Annotated[
            list[str] | None,
            typer.Option("--option", "-o", help="Model option KEY=VALUE, e.g. temperature=0.2 (repeatable)."),
        ] = None,
        max_iters: Annotated[int, typer.Option("--max-iters", help="Most reasoning steps per message.")] = 10,
        thinking: Annotated[bool, typer.Option("--thinking/--no-thinking", help="Show the model's thinking.")] = True,
    ) -> None:
        """Chat with an agent: streaming replies, live tool calls, inline approvals, saved sessions."""
        from rich.console import Console

        from agentrt.cli._output import print_error
        from agentrt.cli._resume import resume_from_context
        from agentrt.errors import AgentrtError
        from agentrt.message import new_id
        from agentrt.state import default_state_url, store_from_url

        console = Console(soft_wrap=True)
        store_url = store or default_state_url()
        try:
            state_store = store_from_url(store_url)
            agent, notes = build_agent(
                model,
                store=state_store,
                tools=tools or (),
                system=system,
                confirm=confirm or (),
                permission=permission,
                model_options=_parse_options(option or ()),
                max_iters=max_iters,
            )
        except (AgentrtError, ValueError) as exc:
            print_error(exc)
            raise typer.Exit(2) from None
        chat_session = ChatSession(
            console,
            agent,
            state_store,
            user_id=user,
            session_id=session or f"chat-{new_id()[:8]}",
            model_id=model,
            store_url=store_url,
            tool_names=agent.toolkit.names(),
            notes=notes,
            show_thinking=thinking,
            resume_command=resume_from_context(ctx, ("agentrt", "chat")),
        )
        chat_session.ends_process = True
        code = chat_session.run()
        sys.stdout.flush()
        if code:
            raise typer.Exit(code)

    return chat
