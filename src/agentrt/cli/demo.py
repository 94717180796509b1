"""The offline demo behind ``agentrt demo``: a scripted "planner" model, real tools, a live ReAct trace.

The model is a `ScriptedModel` driven by `plan`, a few rules that read the request the way a
small model would: a fresh question gets a short thought and a call of the right built-in tool
(calculator, clock or unit conversion); a tool result gets a final answer built from the
observation. Everything else is the real runtime: the `ReActAgent` loop, tool validation and
execution, state checkpoints and the event stream, which `TraceRenderer` prints with rich.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentrt.agent.react import ReActAgent
from agentrt.context import RuntimeContext
from agentrt.events import (
    AgentEvent,
    Interrupted,
    ModelCallFinished,
    ModelCallStarted,
    RequireExternalExecution,
    RequireUserConfirm,
    RunError,
    RunFinished,
    TextDelta,
    ThinkingDelta,
    ToolResult,
)
from agentrt.message import (
    ContentBlock,
    GenerateReason,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    new_id,
)
from agentrt.model.base import ModelRequest
from agentrt.model.scripted import ScriptedModel
from agentrt.state.base import AgentStateStore
from agentrt.tool.builtin import calculate, convert_units, current_time
from agentrt.tool.builtin.calculator import CONSTANT_NAMES, FUNCTION_NAMES
from agentrt.tool.builtin.units import find_unit
from agentrt.tool.toolkit import Toolkit

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["DEFAULT_QUESTION", "TraceRenderer", "build_demo_agent", "plan", "plan_tool_call", "run_demo"]

DEFAULT_QUESTION = "What is 128 * 37 + 500?"

SYS_PROMPT = (
    "You are the agentrt demo assistant. Use the calculate tool for arithmetic, current_time for the date "
    "and time, and convert_units for unit conversions. Answer briefly, quoting the tool's result."
)

HELP_ANSWER = (
    "I'm the offline agentrt demo: my 'model' is a small scripted planner, not a language model, so I can "
    'only handle three kinds of questions, each with a real tool: arithmetic ("What is 128 * 37 + 500?"), '
    'the current time ("What time is it in Tokyo?") and unit conversions ("How many km in 5 miles?"). '
    "Try one of those!"
)

# A few city names people ask about, mapped to IANA zones (the clock tool also resolves the city part
# of any IANA name by itself, e.g. "Lisbon").
CITY_ZONES: dict[str, str] = {
    "utc": "UTC",
    "gmt": "UTC",
    "tokyo": "Asia/Tokyo",
    "japan": "Asia/Tokyo",
    "london": "Europe/London",
    "uk": "Europe/London",
    "paris": "Europe/Paris",
    "france": "Europe/Paris",
    "berlin": "Europe/Berlin",
    "germany": "Europe/Berlin",
    "madrid": "Europe/Madrid",
    "rome": "Europe/Rome",
    "moscow": "Europe/Moscow",
    "new york": "America/New_York",
    "new york city": "America/New_York",
    "nyc": "America/New_York",
    "boston": "America/New_York",
    "chicago": "America/Chicago",
    "denver": "America/Denver",
    "san francisco": "America/Los_Angeles",
    "los angeles": "America/Los_Angeles",
    "la": "America/Los_Angeles",
    "seattle": "America/Los_Angeles",
    "toronto": "America/Toronto",
    "sao paulo": "America/Sao_Paulo",
    "são paulo": "America/Sao_Paulo",
    "sydney": "Australia/Sydney",
    "melbourne": "Australia/Melbourne",
    "beijing": "Asia/Shanghai",
    "shanghai": "Asia/Shanghai",
    "china": "Asia/Shanghai",
    "hong kong": "Asia/Hong_Kong",
    "singapore": "Asia/Singapore",
    "seoul": "Asia/Seoul",
    "delhi": "Asia/Kolkata",
    "new delhi": "Asia/Kolkata",
    "mumbai": "Asia/Kolkata",
    "bangalore": "Asia/Kolkata",
    "india": "Asia/Kolkata",
    "dubai": "Asia/Dubai",
    "cairo": "Africa/Cairo",
    "johannesburg": "Africa/Johannesburg",
    "auckland": "Pacific/Auckland",
}

_NUMBER = r"-?(?:\d[\d,]*(?:\.\d+)?|\.\d+)"
_TAIL = r"\s*(?:please|for me|right now|now|today)?\s*[?.!]*\s*$"
_HOW_MANY = re.compile(
    rf"how\s+many\s+(?P<to>.+?)\s+(?:are\s+)?(?:there\s+)?(?:in|is|are|make|equals?)\s+"
    rf"(?:(?:a|an|one)\s+)?(?P<value>{_NUMBER})?\s*(?P<src>.+?){_TAIL}",
    re.IGNORECASE,
)
_CONVERT = re.compile(
    rf"(?P<convert>convert\s+)?(?P<value>{_NUMBER})\s*(?P<src>[^\d?!]+?)\s+(?:to|into|in|as)\s+(?P<to>.+?){_TAIL}",
    re.IGNORECASE,
)
_TIME = re.compile(
    r"\b(?:what\s+time|the\s+time|current\s+time|local\s+time|time\s+is\s+it|time\s+now|clock|what\s+day|"
    r"today'?s?|the\s+date|what\s+date|current\s+date)\b",
    re.IGNORECASE,
)
_IANA = re.compile(r"\b([A-Za-z]+(?:/[A-Za-z_+\-0-9]+)+)")
_PLACE = re.compile(r"\b(?:in|at|for)\s+(?:the\s+)?([A-Za-zÀ-ÿ][A-Za-zÀ-ÿ .'\-]*?)" + _TAIL, re.IGNORECASE)
_LEAD = re.compile(
    r"^\s*(?:(?:please|hey|hi|ok|so)[,!]?\s+)*(?:can\s+you\s+|could\s+you\s+)?(?:tell\s+me\s+)?"
    r"(?:what(?:'s|\s+is|\s+are)|how\s+much\s+is|calculate|compute|evaluate|solve|work\s+out)\s+",
    re.IGNORECASE,
)
_WORD_OPS = [
    (re.compile(r"\bto\s+the\s+power\s+of\b", re.IGNORECASE), "**"),
    (re.compile(r"\bmultiplied\s+by\b", re.IGNORECASE), "*"),
    (re.compile(r"\bdivided\s+by\b", re.IGNORECASE), "/"),
    (re.compile(r"\btimes\b", re.IGNORECASE), "*"),
    (re.compile(r"\bplus\b", re.IGNORECASE), "+"),
    (re.compile(r"\bminus\b", re.IGNORECASE), "-"),
    (re.compile(r"\bmod(?:ulo)?\b", re.IGNORECASE), "%"),
    (re.compile(r"\bsquared\b", re.IGNORECASE), "** 2"),
    (re.compile(r"\bcubed\b", re.IGNORECASE), "** 3"),
    (re.compile(r"(?<=\d)\s*[xX]\s*(?=[\d(])"), " * "),
    (re.compile(r"\^"), "**"),
]
_MATH_CHARS = re.compile(r"[\d\s.+\-*/%()a-z_,×÷−]+", re.IGNORECASE)  # noqa: RUF001 - on purpose
_MATH_RUN = re.compile(r"[\d(][\d\s.+\-*/%()×÷−]*[\d)]")  # noqa: RUF001 - on purpose
_OPERATOR_BETWEEN = re.compile(r"[\d)]\s*(?:\*\*|//|[+\-*/%×÷−])\s*[-+]?\s*[\d(.]")  # noqa: RUF001 - on purpose
_WORDS = re.compile(r"[a-z_][a-z_0-9]*", re.IGNORECASE)


# --------------------------------------------------------------------------------------------------
# the planner
# --------------------------------------------------------------------------------------------------
def plan_tool_call(question: str) -> tuple[str, ToolUseBlock] | None:
    """Pick the tool for a question, the way the demo's planner does.

    Unit conversions are tried first (both units must be known, unless the question says
    "convert"), then date and time questions, then arithmetic.

    Args:
        question: The user's question.

    Returns:
        A short thought and the tool call, or None when no tool fits.
    """
    return _plan_conversion(question) or _plan_time(question) or _plan_math(question)


def _number(text: str) -> float | int:
    value = float(text.replace(",", ""))
    return int(value) if value.is_integer() and abs(value) < 1e15 else value


def _plan_conversion(question: str) -> tuple[str, ToolUseBlock] | None:
    found = _HOW_MANY.search(question)
    if found is not None:
        src, to = found["src"].strip(), found["to"].strip()
        value = _number(found["value"]) if found["value"] else 1
        if find_unit(src) is not None and find_unit(to) is not None:
            return _conversion_call(value, src, to)
    found = _CONVERT.search(question)
    if found is not None:
        src, to = found["src"].strip(), found["to"].strip()
        if found["convert"] or (find_unit(src) is not None and find_unit(to) is not None):
            return _conversion_call(_number(found["value"]), src, to)
    return None


def _conversion_call(value: float | int, src: str, to: str) -> tuple[str, ToolUseBlock]:
    thought = f"This is a unit conversion from {src} to {to}; convert_units does it exactly."
    return thought, ToolUseBlock(name="convert_units", input={"value": value, "from_unit": src, "to_unit": to})


def _plan_time(question: str) -> tuple[str, ToolUseBlock] | None:
    if _TIME.search(question) is None:
        return None
    zone = "UTC"
    iana = _IANA.search(question)
    place = _PLACE.search(question)
    if iana is not None:
        zone = iana[1]
    elif place is not None:
        name = " ".join(place[1].split())
        zone = CITY_ZONES.get(name.lower(), name)
    thought = f"The user wants the current date and time in {zone}; the current_time tool knows it."
    return thought, ToolUseBlock(name="current_time", input={"timezone": zone})


def _is_math(candidate: str) -> bool:
    if not candidate or _MATH_CHARS.fullmatch(candidate) is None:
        return False
    words = set(_WORDS.findall(candidate))
    if not words <= (FUNCTION_NAMES | CONSTANT_NAMES):
        return False
    has_call = any(re.search(rf"\b{w}\s*\(", candidate) for w in words & FUNCTION_NAMES)
    return bool(has_call or _OPERATOR_BETWEEN.search(candidate) or candidate.strip() in CONSTANT_NAMES)


def _plan_math(question: str) -> tuple[str, ToolUseBlock] | None:
    text = _LEAD.sub("", question.strip(), count=1)
    text = re.sub(_TAIL, "", text, flags=re.IGNORECASE).strip()
    for pattern, replacement in _WORD_OPS:
        text = pattern.sub(replacement, text)
    text = " ".join(text.split())
    expression: str | None = text if _is_math(text) else None
    if expression is None:
        # The longest arithmetic-looking run inside a wordier question.
        runs = [r.strip() for r in _MATH_RUN.findall(text) if _OPERATOR_BETWEEN.search(r)]
        expression = max(runs, key=len) if runs else None
    if expression is None:
        return None
    thought = f"This is arithmetic: I'll evaluate `{expression}` with the calculate tool instead of guessing."
    return thought, ToolUseBlock(name="calculate", input={"expression": expression})


def plan(request: ModelRequest) -> list[ContentBlock]:
    """The demo model: reply to one request with a thought plus a tool call, or with an answer.

    Args:
        request: The model request (prompt messages, tool schemas, options).

    Returns:
        The reply's content blocks.
    """
    last = request.messages[-1] if request.messages else None
    if last is not None and last.role == "user" and last.has(ToolResultBlock):
        return _final_answer(request.messages, last.blocks(ToolResultBlock))
    if last is None or last.role != "user" or not last.text.strip():
        return [TextBlock(text=HELP_ANSWER)]
    planned = plan_tool_call(last.text)
    if planned is None:
        return [
            ThinkingBlock(thinking="None of my tools fits this question; I'll explain what the demo can do."),
            TextBlock(text=HELP_ANSWER),
        ]
    thought, call = planned
    available = {schema.name for schema in request.tools}
    if call.name not in available:
        return [TextBlock(text=f"I would need the {call.name} tool for that, but it is not available to me.")]
    return [ThinkingBlock(thinking=thought), call]


def _find_call(messages: Sequence[Msg], call_id: str) -> ToolUseBlock | None:
    for msg in reversed(messages):
        if msg.role == "assistant":
            for call in msg.tool_calls:
                if call.id == call_id:
                    return call
    return None


def _final_answer(messages: Sequence[Msg], results: list[ToolResultBlock]) -> list[ContentBlock]:
    lines: list[str] = []
    failed = False
    for result in results:
        call = _find_call(messages, result.id)
        args = dict(call.input) if call is not None else {}
        lines.append(_answer_line(result, args))
        failed = failed or result.is_error
    thought = (
        "The tool reported a problem, so I can't give a reliable answer; I'll say what went wrong."
        if failed
        else "I have the tool's result; I can answer now."
    )
    return [ThinkingBlock(thinking=thought), TextBlock(text="\n".join(lines))]


def _answer_line(result: ToolResultBlock, args: dict[str, object]) -> str:
    output = result.text.strip()
    if result.is_error:
        what = "reported an error" if result.state == "error" else f"did not run ({result.state})"
        return f"I couldn't answer that: the {result.name} tool {what}: {output}"
    if result.name == "calculate":
        return f"{args.get('expression', 'The result')} = {output}."
    if result.name == "current_time":
        zone = str(args.get("timezone", "UTC"))
        try:
            moment = _dt.datetime.fromisoformat(output)
        except ValueError:
            return f"The current time in {zone} is {output}."
        return f"The current time in {zone} is {moment:%H:%M} on {moment:%A}, {moment.day} {moment:%B %Y} ({output})."
    if result.name == "convert_units":
        return f"{output}."
    return f"The {result.name} tool says: {output}"


# --------------------------------------------------------------------------------------------------
# the agent
# --------------------------------------------------------------------------------------------------
def build_demo_agent(
    state_store: AgentStateStore | None = None, *, name: str = "demo", max_iters: int = 4
) -> ReActAgent:
    """The demo agent: the planner model, the three built-in tools and a state store.

    Args:
        state_store: Where sessions are kept; None uses agentrt's default store (SQLite at
            ``~/.agentrt/state.db`` unless ``AGENTRT_STATE_URL`` says otherwise).
        name: The agent's name.
        max_iters: Most reasoning steps per call.

    Returns:
        The agent.
    """
    model = ScriptedModel.from_function(plan, name="demo-planner")
    toolkit = Toolkit([calculate, current_time, convert_units])
    return ReActAgent(name, SYS_PROMPT, model, toolkit, state_store=state_store, max_iters=max_iters)


class TraceRenderer:
    """Prints an agent's event stream as a ReAct trace: Thought, Action, Observation, Final answer.

    Feed it every event of one call with `feed`; thinking and answer text appear as they stream.
    """

    def __init__(self, console: Console) -> None:
        self.console = console
        self.steps = 0
        self.tool_calls = 0
        self._open_block: str | None = None
        self._started = time.perf_counter()

    def header(self, question: str) -> None:
        """Print the title and the question."""
        from rich.text import Text

        self.console.rule(Text("agentrt demo", style="bold"))
        self.console.print(Text.assemble(("Question: ", "bold"), question))
        self._started = time.perf_counter()

    def _close_line(self) -> None:
        if self._open_block is not None:
            self.console.print()
            self._open_block = None

    def _stream(self, block_id: str, label: str, label_style: str, delta: str, style: str) -> None:
        from rich.text import Text

        if self._open_block != block_id:
            self._close_line()
            self.console.print(Text(f"{label}: ", style=label_style), end="")
            self._open_block = block_id
        self.console.print(Text(delta, style=style), end="", soft_wrap=True)

    def _line(self, label: str, label_style: str, body: str, style: str = "") -> None:
        from rich.text import Text

        self._close_line()
        self.console.print(Text.assemble((f"{label}: ", label_style), (body, style)), soft_wrap=True)

    def feed(self, event: AgentEvent) -> None:
        """Print one event."""
        from rich.text import Text

        if isinstance(event, ModelCallStarted):
            self._close_line()
            self.steps = max(self.steps, event.step)
            self.console.print(Text(f"Step {event.step}", style="dim"))
        elif isinstance(event, ThinkingDelta):
            self._stream("k" + event.block_id, "Thought", "bold cyan", event.delta, "dim italic")
        elif isinstance(event, TextDelta):
            self._stream("t" + event.block_id, "Final answer", "bold green", event.delta, "")
        elif isinstance(event, ModelCallFinished):
            for call in event.msg.tool_calls:
                self.tool_calls += 1
                args = json.dumps(dict(call.input), ensure_ascii=False)
                self._line("Action", "bold magenta", f"{call.name} {args}")
        elif isinstance(event, ToolResult):
            result = event.result
            failed = result.state != "success"
            body = result.text if not failed else f"[{result.state}] {result.text}"
            self._line("Observation", "bold yellow", body, "red" if failed else "")
        elif isinstance(event, (RequireUserConfirm, RequireExternalExecution)):
            names = ", ".join(call.name for call in event.tool_calls)
            self._line("Paused", "bold yellow", f"waiting for the caller ({names})")
        elif isinstance(event, Interrupted):
            self._line("Interrupted", "bold red", event.message or "the call was interrupted")
        elif isinstance(event, RunError):
            self._line("Error", "bold red", f"{event.error_type}: {event.error}", "red")
        elif isinstance(event, RunFinished):
            self.finish(event.msg)

    def finish(self, reply: Msg) -> None:
        """Print the closing line: steps, tool calls, elapsed time (and the stop reason if unusual)."""
        self._close_line()
        elapsed_ms = (time.perf_counter() - self._started) * 1000
        parts = [
            f"{self.steps} step{'s' if self.steps != 1 else ''}",
            f"{self.tool_calls} tool call{'s' if self.tool_calls != 1 else ''}",
            f"{elapsed_ms:.1f} ms",
        ]
        if reply.generate_reason is not GenerateReason.STOP:
            parts.append(f"stopped: {reply.generate_reason.value}")
        self.console.rule(", ".join(parts), style="dim")


async def run_demo(
    question: str = DEFAULT_QUESTION,
    console: Console | None = None,
    *,
    agent: ReActAgent | None = None,
    ctx: RuntimeContext | None = None,
) -> Msg:
    """Ask the demo agent one question, printing the live ReAct trace.

    Args:
        question: The question.
        console: Where the trace goes (a rich `Console`); standard output when None.
        agent: The agent to run; `build_demo_agent()` when None.
        ctx: The call's context; a fresh demo session when None.

    Returns:
        The agent's reply.
    """
    if console is None:
        from rich.console import Console

        console = Console()
    agent = agent if agent is not None else build_demo_agent()
    ctx = ctx if ctx is not None else RuntimeContext(user_id="demo", session_id=f"demo-{new_id()[:12]}")
    renderer = TraceRenderer(console)
    renderer.header(question)
    reply: Msg | None = None
    async for event in agent.stream_events(question, ctx):
        renderer.feed(event)
        if isinstance(event, RunFinished):
            reply = event.msg
    if reply is None:  # pragma: no cover - stream_events always ends with RunFinished or raises
        raise RuntimeError("the demo run ended without a reply")
    return reply
