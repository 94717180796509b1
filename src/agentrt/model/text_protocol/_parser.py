"""The tolerant ReAct parser: `parse_react` and `ReactParse`."""

from __future__ import annotations

import ast
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentrt import _json
from agentrt.model.base import ToolSchema

logger = logging.getLogger(__name__)

ToolCallingMode = Literal["native", "text", "auto"]
ToolsArg = Sequence[ToolSchema] | Mapping[str, ToolSchema] | None


# --------------------------------------------------------------------------------------------------
# labels
# --------------------------------------------------------------------------------------------------
# Strong labels may also appear mid-line ("Thought: ... Action: search"); weak ones only at the
# start of a line, because as ordinary words they are too common.
_SEP = r"[ \t_\-]?"
_STRONG = {
    "input": (
        rf"action{_SEP}inputs?|action{_SEP}args|action{_SEP}arguments|action{_SEP}parameters|tool{_SEP}input"
        r"|行动输入|动作输入|操作输入|工具输入|✿ARGS✿"
    ),
    "final": (
        rf"final{_SEP}answer|final{_SEP}response|final{_SEP}reply|finish"
        r"|最终答案|最终回答|最终回复|最后答案|最终结果|✿RETURN✿"
    ),
    "action": rf"action|tool{_SEP}call|行动|动作|✿FUNCTION✿",
    "thought": r"thought|思考|✿THOUGHT✿",
    "obs": r"observations?|观察结果|观察|✿RESULT✿",
}
_WEAK = {
    "winput": rf"inputs?|arguments|args|parameters|params|tool{_SEP}args|tool{_SEP}arguments|参数|输入|工具参数",
    "wfinal": r"answer|答案|回答",
    "waction": rf"tool{_SEP}name|tool|function|工具|操作|调用",
    "wthought": r"thinking|reasoning|思路|想法|推理",
}
_KIND = {
    "input": "input",
    "final": "final",
    "action": "action",
    "thought": "thought",
    "obs": "obs",
    "winput": "input",
    "wfinal": "final",
    "waction": "action",
    "wthought": "thought",
}
_LABELS = "|".join(f"(?P<{name}>{pattern})" for name, pattern in (*_STRONG.items(), *_WEAK.items()))
_MARKER = re.compile(
    r"(?<![\w])(?:\*\*|__)?(?:" + _LABELS + r")"
    r"(?:[ \t]*\d{1,3})?"  # "Action 2:" (the ReAct paper numbers its steps)
    r"(?:[ \t]*\([^()\n]{0,60}\))?"  # "Observation (get_weather):"
    r"(?:\*\*|__)?[ \t]*[:：](?:[ \t]*(?:\*\*|__)(?!\w))?",  # noqa: RUF001
    re.IGNORECASE,
)
_LINE_LEAD = re.compile(r"[ \t]*(?:(?:[-*+>#]+|\d{1,2}[.)])[ \t]*)*")
_FINAL_HINT = re.compile(
    r"(?:final[ \t_\-]?\w*|finish|answer|最终\w{0,2}|答案|回答|✿RETURN✿)[ \t]*(?:\*\*|__)?[ \t]*[:：]",  # noqa: RUF001
    re.I,
)

# Control tokens a misconfigured server lets through (ChatML, Llama 3, Mistral, Gemma, ...).
_END_TOKENS = re.compile(r"<\|(?:im_end|eot_id|eom_id|endoftext|end)\|>|<end_of_turn>|</s>")
_SPECIAL_TOKENS = re.compile(r"<\|[A-Za-z0-9_.\-]{1,32}\|>|\[TOOL_CALLS\]")
_THINK_TAGS = re.compile(r"<(think|thinking|reasoning|thought)>(.*?)(?:</\1>|\Z)", re.DOTALL | re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</(?:think|thinking|reasoning)>", re.IGNORECASE)
_TOOL_CALL_TAG = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|(?=<tool_call>)|\Z)", re.DOTALL)
_FUNCTION_TAG = re.compile(r"<function=([^>\s]+)>\s*(.*?)\s*(?:</function>|\Z)", re.DOTALL)
_NAME = re.compile(r"[ \t]*[`\"'*\[“‘]*[ \t]*([^\s`\"'*\[\](){}:：,;，；“”‘’]+)[`\"'*\]”’]*")  # noqa: RUF001
_IDENT = re.compile(r"[\w.\-/]+")
_FENCE_OPEN = re.compile(r"[ \t]*(?:```|~~~)[^\n`]*\n")

_FINISH_NAMES = frozenset(
    (
        "final answer",
        "final_answer",
        "finalanswer",
        "final-answer",
        "finish",
        "final",
        "answer",
        "final response",
        "final_response",
        "最终答案",
        "答案",
    )
)
_NULL_NAMES = frozenset(
    ("", "none", "null", "n/a", "na", "nil", "no action", "no_action", "no tool", "nothing", "无", "没有", "不需要")
)
_EMPTY_INPUTS = frozenset(
    ("", "none", "null", "n/a", "na", "nil", "{}", "()", "[]", "no input", "nothing", "无", "空", "(none)", "{ }")
)
_NAME_KEYS = ("action", "name", "tool", "tool_name", "function", "action_name", "tool_call", "command")
_INPUT_KEYS = (
    "action_input",
    "arguments",
    "args",
    "parameters",
    "input",
    "tool_input",
    "params",
    "actionInput",
    "action_args",
    "kwargs",
)
_ANSWER_KEYS = ("answer", "final_answer", "response", "text", "output", "content", "result", "message")
_OPENERS = {"{": "}", "[": "]", "(": ")"}
_QUOTE_PAIRS = {'"': '"', "'": "'", "“": "”", "‘": "’", "「": "」", "『": "』"}  # noqa: RUF001


# --------------------------------------------------------------------------------------------------
# the parse result
# --------------------------------------------------------------------------------------------------
@dataclass(slots=True, kw_only=True)
class ReactParse:
    """What a text-protocol reply says.

    Exactly one outcome is meaningful: `actions` (tool calls to run), `final_answer` (the reply to
    the user) or `error` (the reply could not be read; the message says why, for the correction
    prompt). `thought` is the reasoning that came before, possibly empty.
    """

    thought: str = ""
    actions: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    final_answer: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the reply was read (actions or a final answer, no error)."""
        return self.error is None


# --------------------------------------------------------------------------------------------------
# lenient JSON
# --------------------------------------------------------------------------------------------------
def _label_line_follows(text: str, nl: int) -> bool:
    """Whether the line after the newline at `nl` starts with a strong label (a value never runs past one)."""
    lead = _LINE_LEAD.match(text, nl + 1)
    m = _MARKER.match(text, lead.end() if lead is not None else nl + 1)
    return m is not None and not (m.lastgroup or "w").startswith("w")


def _string_end(text: str, i: int) -> int:
    """Index just past the quoted string that starts at `i` (or -1 when it never closes)."""
    close = _QUOTE_PAIRS[text[i]]
    j = i + 1
    n = len(text)
    while j < n:
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if c == close:
            return j + 1
        if c == "\n" and (close in "'‘" or _label_line_follows(text, j)):  # noqa: RUF001
            return -1  # an apostrophe, or a string that never closed before the next label
        j += 1
    return -1


def _balanced_end(text: str, i: int) -> int:
    """Index just past the bracketed value starting at `i`, aware of strings and comments; -1 if open."""
    closers: list[str] = []
    j = i
    n = len(text)
    while j < n:
        c = text[j]
        if c in _OPENERS:
            closers.append(_OPENERS[c])
        elif c in "}])":
            if not closers or closers.pop() != c:
                return -1  # mismatched: let the line-based fallback decide
            if not closers:
                return j + 1
        elif c in _QUOTE_PAIRS:
            end = _string_end(text, j)
            if end < 0:
                if c in "'‘":  # noqa: RUF001 - a stray apostrophe: read on
                    j += 1
                    continue
                return -1
            j = end
            continue
        elif c == "/" and j + 1 < n and text[j + 1] in "/*":
            if text[j + 1] == "/":
                nl = text.find("\n", j)
                j = n if nl < 0 else nl
            else:
                close = text.find("*/", j + 2)
                j = n if close < 0 else close + 2
            continue
        elif c == "\n" and _label_line_follows(text, j):
            return -1  # unclosed: the next label ends it (keeps a truncated value from costing O(n) each)
        j += 1
    return -1


def _next_line_marker(text: str, i: int) -> int:
    """Start of the next line that begins with a label, or the end of the text."""
    for m in _MARKER.finditer(text, i):
        if _accepted(text, m, pending_action=True) and _at_line_start(text, m.start()):
            return m.start()
    return len(text)


def _value_end(text: str, i: int) -> int:
    """End of the structured value (JSON, call arguments, code fence) starting at or after `i`.

    Returns `i` when no structured value starts there. Unclosed values run to the next labelled
    line, so a truncated JSON object does not swallow the labels after it.
    """
    n = len(text)
    k = i
    while k < n and text[k] in " \t\r\n":
        k += 1
    if k >= n:
        return i
    fenced = False
    m = _FENCE_OPEN.match(text, k)
    if m is not None:
        fenced = True
        k = m.end()
        while k < n and text[k] in " \t\r\n":
            k += 1
        if k >= n:
            return n
    c = text[k]
    if c == "`" and not fenced:
        close = text.find("`", k + 1)
        return i if close < 0 else close + 1
    if c in "{[(":
        end = _balanced_end(text, k)
    elif c in _QUOTE_PAIRS and c not in "'‘":  # noqa: RUF001
        end = _string_end(text, k)
    elif fenced:
        close = text.find("```", k)
        return n if close < 0 else close + 3
    else:
        return i
    if end < 0:
        end = _next_line_marker(text, k)
        while end > k and text[end - 1] in " \t\r\n":
            end -= 1
    if fenced:
        j = end
        while j < n and text[j] in " \t\r\n":
            j += 1
        if text.startswith(("```", "~~~"), j):
            end = j + 3
    return end


def _strip_fences(s: str) -> str:
    s = s.strip()
    m = _FENCE_OPEN.match(s)
    if m is not None:
        s = s[m.end() :]
        if s.rstrip().endswith(("```", "~~~")):
            s = s.rstrip()[:-3]
        s = s.strip()
    elif s.startswith("`") and s.endswith("`") and len(s) > 1:
        s = s.strip("`").strip()
    return s


def _loads(s: str) -> tuple[Any, bool]:
    """Parse JSON however broken it is; returns (value, ok)."""
    s = _strip_fences(s)
    if not s:
        return None, False
    try:
        return _json.loads(s), True
    except ValueError:
        pass
    if s[0] in "{[" and ("'" in s or "True" in s or "None" in s or "False" in s):
        try:
            return ast.literal_eval(s), True
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            pass
    if len(s) > _REPAIR_LIMIT or _nesting(s) > _MAX_NESTING:
        return None, False  # pathological input: json-repair would recurse or crawl
    try:
        import json_repair
    except ImportError:  # pragma: no cover - json-repair is a core dependency
        return None, False
    try:
        value = json_repair.loads(s)
    except Exception:
        return None, False
    if value == "" and s not in ('""', "''"):
        return None, False
    if s[0] == "{" and (not isinstance(value, dict) or (not value and "".join(s.split()) != "{}")):
        return None, False
    if isinstance(value, list) and s[0] == "{" and value and all(isinstance(v, dict) for v in value):
        return value[0], True  # `{...} {...}`: json-repair reads two objects; take the first
    return value, True


_REPAIR_LIMIT = 200_000
_MAX_NESTING = 64
_BRACKETS = re.compile(r"[\[\]{}]")


def _nesting(s: str) -> int:
    """Deepest bracket nesting (strings ignored: an upper bound is all that is needed)."""
    depth = deepest = 0
    for ch in _BRACKETS.findall(s):
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth = max(0, depth - 1)
    return deepest


def _maybe_double_encoded(value: Any) -> Any:
    if isinstance(value, str):
        inner = value.strip()
        if inner.startswith("{") and inner.endswith("}"):
            parsed, ok = _loads(inner)
            if ok and isinstance(parsed, dict):
                return parsed
    return value


def _unquote(s: str) -> str:
    s = s.strip()
    if len(s) >= 2 and s[0] in _QUOTE_PAIRS and s[-1] == _QUOTE_PAIRS[s[0]]:
        return s[1:-1]
    if len(s) >= 2 and s[0] == "`" and s[-1] == "`":
        return s.strip("`")
    return s


# --------------------------------------------------------------------------------------------------
# the parser
# --------------------------------------------------------------------------------------------------
def _tool_index(tools: ToolsArg) -> dict[str, ToolSchema]:
    if not tools:
        return {}
    if isinstance(tools, Mapping):
        return dict(tools)
    return {t.name: t for t in tools}


def _at_line_start(text: str, start: int) -> bool:
    line_start = text.rfind("\n", 0, start) + 1
    return _LINE_LEAD.fullmatch(text, line_start, start) is not None


def _cut(text: str, start: int) -> int:
    """Where the section before a label ends: at the label's line start when only decoration precedes it."""
    line_start = text.rfind("\n", 0, start) + 1
    return line_start if _LINE_LEAD.fullmatch(text, line_start, start) is not None else start


def _accepted(text: str, m: re.Match[str], *, pending_action: bool) -> bool:
    group = m.lastgroup or ""
    if group == "winput" and not pending_action:
        return False
    if _at_line_start(text, m.start()):
        return True
    if group.startswith("w"):
        return False
    label = m.group(group)
    first = label[0]
    if first.isascii() and first.isalpha():
        return first.isupper()  # "... Action: x" yes, "... the action: x" no
    return True


class _Section:
    __slots__ = ("end", "kind", "start", "weak")

    def __init__(self, kind: str, start: int, end: int, weak: bool = False) -> None:
        self.kind = kind
        self.start = start
        self.end = end
        self.weak = weak


def _action_value_start(text: str, i: int) -> int:
    """Where an inline value starts after the tool name in an ``Action:`` line."""
    n = len(text)
    k = i
    while k < n and text[k] in " \t":
        k += 1
    if k < n and (text[k] in "{[" or text.startswith(("```", "~~~"), k) or text[k] == "\n"):
        return i  # the value (a JSON blob) starts right away
    m = _NAME.match(text, k)
    if m is None:
        return i
    k = m.end()
    while k < n and text[k] in " \t:：,-":  # noqa: RUF001
        k += 1
    if k < n and text[k] == "\n":
        # the JSON may start on the next line (a model that left out "Action Input:")
        j = k + 1
        while j < n and text[j] in " \t\r\n":
            j += 1
        if j < n and (text[j] == "{" or text.startswith(("```", "~~~"), j)):
            return j
        return i
    return k


def _scan(text: str) -> tuple[int, list[_Section]]:
    """Split `text` at its labels; returns the length of the unlabelled prefix and the sections."""
    sections: list[_Section] = []
    pos = 0
    prefix_end = -1
    kind: str | None = None
    weak = False
    start = 0
    seen_action = False
    while True:
        m = _MARKER.search(text, pos)
        while m is not None and not _accepted(text, m, pending_action=kind == "action"):
            m = _MARKER.search(text, m.start() + 1)
        end = len(text) if m is None else _cut(text, m.start())
        if kind is None:
            prefix_end = end
        else:
            sections.append(_Section(kind, start, end, weak))
        if m is None:
            break
        group = m.lastgroup or ""
        kind = _KIND[group]
        weak = group.startswith("w")
        start = m.end()
        if kind == "final":
            sections.append(_Section("final", start, len(text)))
            break
        if kind == "obs" and seen_action:
            break  # the model started to imagine the tool's result: nothing after it is real
        if kind == "action":
            seen_action = True
            value_start = _action_value_start(text, start)
            value_end = _value_end(text, value_start)
            pos = value_end if value_end > value_start else start
        elif kind == "input":
            pos = _value_end(text, start)
        else:
            pos = start
        pos = max(pos, start)
    return (len(text) if prefix_end < 0 else prefix_end), sections


def _resolve_name(raw: str, tools: dict[str, ToolSchema]) -> str:
    """The tool a model meant by `raw` (exact, then case- and separator-insensitive)."""
    if raw in tools or not tools:
        return raw
    folded = raw.casefold().replace("-", "_").replace(" ", "_")
    for name in tools:
        if name.casefold().replace("-", "_") == folded:
            return name
    return raw


def _name_from_phrase(phrase: str, tools: dict[str, ToolSchema]) -> str | None:
    """A tool named inside a sentence ("use the `search` tool"), when exactly one is."""
    if not tools:
        return None
    lowered = phrase.casefold()
    found = [n for n in tools if re.search(rf"(?<![\w.\-]){re.escape(n.casefold())}(?![\w\-])", lowered)]
    return found[0] if len(found) == 1 else None


def _coerce_input(name: str, value: Any, tools: dict[str, ToolSchema]) -> tuple[dict[str, Any], str | None]:
    """Arguments as a dict; a bare value goes to the tool's only parameter."""
    value = _maybe_double_encoded(value)
    if isinstance(value, dict):
        # {"name": "search", "arguments": {...}} inside Action Input: unwrap it
        keys = set(value)
        name_key = next((k for k in _NAME_KEYS if k in keys), None)
        input_key = next((k for k in _INPUT_KEYS if k in keys), None)
        if name_key and input_key and len(keys) == 2 and str(value[name_key]) == name:
            inner = _maybe_double_encoded(value[input_key])
            if isinstance(inner, dict):
                return inner, None
        return value, None
    schema = tools.get(name)
    if schema is None:
        return {"input": value}, None
    params = schema.parameters or {}
    props = params.get("properties") or {}
    required = list(params.get("required") or [])
    if len(required) == 1:
        return {required[0]: value}, None
    if len(props) == 1:
        return {next(iter(props)): value}, None
    if not props and value in ("", None):
        return {}, None
    wanted = ", ".join(props) or "none"
    return {}, f"the Action Input of {name!r} must be a JSON object with the keys it needs ({wanted})"


def _parse_call_args(name: str, inside: str, tools: dict[str, ToolSchema]) -> tuple[dict[str, Any], str | None]:
    """Arguments of a Python-style call ``tool(a=1, b="x")`` or ``tool("x")``."""
    inside = inside.strip()
    if not inside:
        return {}, None
    if inside.startswith("{"):
        value, ok = _loads(inside)
        if ok and isinstance(value, dict):
            return value, None
    try:
        call = ast.parse(f"f({inside})", mode="eval").body
    except SyntaxError:
        return _coerce_input(name, _unquote(inside), tools)
    if not isinstance(call, ast.Call):  # pragma: no cover - `f(...)` always parses to a call
        return {}, f"could not read the arguments of {name!r}"
    try:
        kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}
        positional = [ast.literal_eval(a) for a in call.args]
    except (ValueError, SyntaxError, TypeError):
        # Unquoted words are not literals (``search(latest news)``): take the text as it is.
        if not call.keywords and len(call.args) <= 1:
            return _coerce_input(name, inside, tools)
        return {}, f"could not read the arguments of {name!r}: write them as a JSON object"
    if positional:
        schema = tools.get(name)
        props = list((schema.parameters or {}).get("properties") or {}) if schema else []
        if len(positional) == 1 and not kwargs:
            return _coerce_input(name, positional[0], tools)
        if len(positional) > len(props):
            return {}, f"too many positional arguments for {name!r}: write the arguments as a JSON object"
        kwargs = {**dict(zip(props, positional, strict=False)), **kwargs}
    return kwargs, None


def _parse_input_text(raw: str) -> tuple[Any, bool, str | None]:
    """Read an Action Input: (value, given, error). Bare text is a string value."""
    s = raw.strip()
    if s.casefold() in _EMPTY_INPUTS:
        return {}, False, None
    if s[0] in "{[" or s.startswith(("```", "~~~", "`{", "`[")):
        end = _value_end(s, 0)
        value, ok = _loads(s[:end] if end > 0 else s)
        if not ok:
            return None, True, f"the Action Input is not valid JSON: {s[:120]!r}"
        return value, True, None
    if s[0] in _QUOTE_PAIRS or s[0] == "`":
        end = _value_end(s, 0)
        piece = s[:end] if end > 0 else s.split("\n", 1)[0]
        value, ok = _loads(piece)
        if ok and isinstance(value, (str, dict)):
            return value, True, None
        return _unquote(piece), True, None
    # A bare value: up to the first blank line (what follows is usually chatter).
    bare = s.split("\n\n", 1)[0].strip()
    try:
        scalar = json.loads(bare)
    except ValueError:
        return bare, True, None
    return scalar, True, None


def _blob_actions(
    value: Any, tools: dict[str, ToolSchema]
) -> tuple[list[tuple[str, dict[str, Any]]], str | None, str | None] | None:
    """Actions from a JSON blob (``{"action": ..., "action_input": ...}``, ``{"name", "arguments"}``).

    Returns (actions, final_answer, error), or None when the value is no tool-call blob.
    """
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(v, dict) for v in items):
        return None
    actions: list[tuple[str, dict[str, Any]]] = []
    for item in items:
        fn = item.get("function")
        if isinstance(fn, dict) and "name" in fn:  # OpenAI wire shape
            item = fn
        name_key = next((k for k in _NAME_KEYS if isinstance(item.get(k), str)), None)
        if name_key is None:
            return None
        name = item[name_key].strip()
        input_key = next((k for k in _INPUT_KEYS if k in item), None)
        if input_key is None and name_key == "name":
            return None  # {"name": "Alice", "age": 30} is data, not a call
        raw_input: Any = item[input_key] if input_key is not None else {}
        if isinstance(raw_input, str) and raw_input.strip().startswith("{"):
            raw_input = _maybe_double_encoded(raw_input)
        if name.casefold() in _FINISH_NAMES and name not in tools:
            return actions, _answer_from(raw_input), None
        if name.casefold() in _NULL_NAMES:
            continue
        resolved = _resolve_name(name, tools)
        args, error = _coerce_input(resolved, raw_input, tools)
        if error is not None:
            return actions, None, error
        actions.append((resolved, args))
    return actions, None, None


def _answer_from(value: Any) -> str:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, dict):
        for key in _ANSWER_KEYS:
            if isinstance(value.get(key), str):
                return str(value[key]).strip()
        if len(value) == 1:
            only = next(iter(value.values()))
            return only.strip() if isinstance(only, str) else json.dumps(only, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False)


def _clean_answer(s: str) -> str:
    s = s.strip()
    if s.endswith(("```", "~~~")) and (s.count("```") + s.count("~~~")) % 2 == 1:
        # the closing fence of a code block that wrapped the whole reply
        s = s[:-3].rstrip()
    return s


def _clean_thought(s: str) -> str:
    s = s.strip()
    if s.startswith(("```", "~~~")):
        nl = s.find("\n")
        s = "" if nl < 0 else s[nl + 1 :].strip()
    return s


def _strip_control_tokens(text: str) -> str:
    """Cut at a leaked end-of-turn token (what follows is the next turn); drop other control tokens."""
    if "<" not in text and "[TOOL_CALLS]" not in text:
        return text
    end = _END_TOKENS.search(text)
    if end is not None:
        text = text[: end.start()]
    return _SPECIAL_TOKENS.sub("\n", text)


def _split_reasoning(text: str) -> tuple[str, str]:
    """Pull ``<think>`` reasoning out of a reply: (reasoning, rest)."""
    parts: list[str] = []
    if "<" not in text:
        return "", text
    close = _THINK_CLOSE.search(text)
    if close is not None and not re.search(r"<(?:think|thinking|reasoning)>", text[: close.start()], re.I):
        # some servers strip the opening tag: everything before the closing one is reasoning
        parts.append(text[: close.start()].strip())
        text = text[close.end() :]

    def take(m: re.Match[str]) -> str:
        parts.append(m.group(2).strip())
        return ""

    text = _THINK_TAGS.sub(take, text)
    return "\n".join(p for p in parts if p), text


def _unwrap_fence(text: str) -> str:
    """Drop a code fence that wraps the whole reply."""
    s = text.strip()
    m = _FENCE_OPEN.match(s)
    if m is None or not s.endswith(("```", "~~~")) or len(s) < m.end() + 3:
        return text
    inner = s[m.end() : -3]
    if inner.lstrip().startswith("{") or _MARKER.search(inner) is None:
        return text  # a fenced JSON blob (the blob reader handles it), or an answer that is a code block
    return inner


def parse_react(text: str, tools: ToolsArg = None) -> ReactParse:
    """Read a ReAct-format reply. Never raises.

    Args:
        text: The model's reply.
        tools: The tools offered (schemas, or a name → schema mapping). Optional; with them the
            parser maps a bare-string ``Action Input`` to a one-parameter tool's parameter, fixes
            the case of tool names, and refuses to read a JSON blob naming no known tool as a call.

    Returns:
        The thought, and either the actions, the final answer or an error. The first decisive
        label wins: actions before a ``Final Answer`` are the reply (the answer is ignored), and
        everything after a ``Final Answer`` label is the answer. A reply with no label at all is
        the final answer. An ``Observation`` after an action ends the reply (the model began to
        imagine the result).
    """
    index = _tool_index(tools)
    text = text.replace("\r\n", "\n").lstrip("\ufeff")
    text = _strip_control_tokens(text)
    reasoning, body = _split_reasoning(text)
    body = _unwrap_fence(body)
    if not body.strip():
        return ReactParse(thought=reasoning, error="the reply is empty" if not reasoning else _NO_DECISION)
    prefix_end, sections = _scan(body)
    thoughts = [reasoning] if reasoning else []
    if all(sec.weak and sec.kind in ("thought", "obs") for sec in sections):
        # "Reasoning: ..." alone is how some answers are written, not a half-followed protocol
        sections = []
    if not sections:
        special = _parse_special(body, index)
        if special is not None:
            if reasoning:
                special.thought = "\n".join(p for p in (reasoning, special.thought) if p)
            return special
        return ReactParse(thought=reasoning, final_answer=_clean_answer(body))
    prefix = _clean_thought(body[:prefix_end])
    if prefix:
        thoughts.append(prefix)
    return _interpret(body, sections, thoughts, index)


_NO_DECISION = "the reply has neither an Action nor a Final Answer"


def _interpret(text: str, sections: list[_Section], thoughts: list[str], tools: dict[str, ToolSchema]) -> ReactParse:
    reading = _Reading(thoughts, tools)
    for sec in sections:
        if _SECTION_READERS[sec.kind](reading, text[sec.start : sec.end]):
            break
    return reading.result()


class _Reading:
    """`_interpret`'s state while it walks the sections; each section reader returns True to stop there."""

    __slots__ = ("actions", "error", "final", "orphan_input", "pending", "thoughts", "tools")

    def __init__(self, thoughts: list[str], tools: dict[str, ToolSchema]) -> None:
        self.thoughts = thoughts
        self.tools = tools
        self.actions: list[tuple[str, dict[str, Any]]] = []
        self.pending: _ActionRead | None = None  # an Action still waiting for its Action Input
        self.final: str | None = None
        self.error: str | None = None
        self.orphan_input = False

    def thought(self, content: str) -> bool:
        """A ``Thought:`` section: kept for the parse's thought."""
        cleaned = _clean_thought(content)
        if cleaned:
            self.thoughts.append(cleaned)
        return False

    def observation(self, content: str) -> bool:
        """An ``Observation:`` section: skipped."""
        return False  # only seen before any action: the scanner stops at one after an action

    def final_answer(self, content: str) -> bool:
        """A ``Final Answer:`` section: the answer, unless an action came first."""
        pending = self.pending
        if self.actions or (pending is not None and pending.name is not None and not pending.finish):
            return True  # an action came first: it is the reply
        self.final = _clean_answer(content)
        self.pending = None
        return True

    def action(self, content: str) -> bool:
        """An ``Action:`` section: a call, a JSON blob of calls, or a tool waiting for its Action Input."""
        pending = self.pending
        if pending is not None:
            if pending.finish:
                return True  # "Action: Final Answer" with no input, then another action: stop here
            if pending.name is not None:
                self.actions.append((pending.name, {}))
            self.pending = None
        result = _read_action(content, self.tools)
        if isinstance(result, str):
            self.error = result
            return True
        if isinstance(result, tuple):  # a JSON blob with one or more calls
            blob_actions, blob_final = result
            self.actions.extend(blob_actions)
            if blob_final is not None and not self.actions:
                self.final = blob_final
                return True
            return False
        if result.finish and result.args is not None:
            if self.actions:
                return True  # the actions before it are the reply
            self.final = result.args
            return True
        if result.name is not None and not result.finish and result.args is not None:
            self.actions.append((result.name, result.args))
        else:
            self.pending = result
        return False

    def action_input(self, content: str) -> bool:
        """An ``Action Input:`` section: the arguments of the pending action (or the finish action's answer)."""
        pending = self.pending
        if pending is None:
            if not self.actions:
                self.orphan_input = True
            return False
        value, given, err = _parse_input_text(content) if content.strip() else ({}, False, None)
        if err is not None:
            self.error = err
            return True
        if pending.finish:
            if self.actions:
                return True  # the actions before it are the reply
            self.final = _answer_from(value) if given else ""
            self.pending = None
            return True
        if pending.name is not None:
            args, err = _coerce_input(pending.name, value, self.tools)
            if err is not None:
                self.error = err
                return True
            self.actions.append((pending.name, args))
        self.pending = None
        return False

    def result(self) -> ReactParse:
        """What the sections read say (an Action left without its input runs with no arguments)."""
        pending = self.pending
        actions = self.actions
        if self.error is None and pending is not None and pending.name is not None and not pending.finish:
            actions.append((pending.name, {}))
        thought = "\n".join(t for t in self.thoughts if t)
        if self.error is not None:
            return ReactParse(thought=thought, actions=actions, error=self.error)
        if actions:
            return ReactParse(thought=thought, actions=actions)
        if self.final is not None:
            return ReactParse(thought=thought, final_answer=self.final)
        if self.orphan_input:
            return ReactParse(thought=thought, error="an Action Input came without an Action naming the tool")
        return ReactParse(thought=thought, error=_NO_DECISION)


_SECTION_READERS: dict[str, Callable[[_Reading, str], bool]] = {
    "thought": _Reading.thought,
    "obs": _Reading.observation,
    "final": _Reading.final_answer,
    "action": _Reading.action,
    "input": _Reading.action_input,
}


class _ActionRead:
    """One ``Action:`` line read: the tool (None for "Action: None"), and inline arguments if given."""

    __slots__ = ("args", "finish", "name")

    def __init__(self, name: str | None, args: Any = None, *, finish: bool = False) -> None:
        self.name = name
        self.args = args  # dict of inline arguments; for a finish action the answer text; None if absent
        self.finish = finish


_BlobRead = tuple[list[tuple[str, dict[str, Any]]], str | None]
"""A JSON blob's calls and final answer (the answer, when it names the finish action)."""


def _read_action(content: str, tools: dict[str, ToolSchema]) -> _ActionRead | _BlobRead | str:
    """One ``Action:`` section: a tool name (maybe with inline arguments), a JSON blob, or an error."""
    c = content.strip()
    if not c:
        return _ActionRead(None)
    if c[0] == "{" or c.startswith(("```", "~~~")) or (c[0] == "[" and c[1:].lstrip().startswith("{")):
        return _read_blob_action(c, tools)
    m = _NAME.match(c)
    if m is None:  # pragma: no cover - _NAME matches any non-blank start
        return f"could not read the tool name in {c[:80]!r}"
    raw_name = m.group(1).rstrip(".")
    rest = c[m.end() :]
    first_line, _, more = rest.partition("\n")
    first_line = first_line.strip(" \t:：,-")  # noqa: RUF001
    inline = rest.lstrip(" \t:：,-")  # noqa: RUF001
    folded = raw_name.casefold()
    finish_name = folded in _FINISH_NAMES and raw_name not in tools
    if inline.startswith(("[", "(")):
        return _read_bracketed_action(raw_name, inline, finish_name, tools)
    phrase = f"{raw_name} {first_line}".strip().casefold().rstrip(".")
    if (phrase in _FINISH_NAMES or finish_name) and raw_name not in tools:
        return _ActionRead("finish", finish=True)
    if phrase in _NULL_NAMES or (folded in _NULL_NAMES and not first_line):
        return _ActionRead(None)
    if first_line and not (first_line[0] in "{`" or first_line[0] in _QUOTE_PAIRS):
        # words after the name: "Action: search the web" or "Action: use the `search` tool"
        found = _name_from_phrase(f"{raw_name} {first_line}", tools)
        if found is None:
            return (
                f"the Action must be only the name of one tool, not {c.splitlines()[0][:80]!r}; "
                "put the arguments in Action Input"
            )
        return _ActionRead(found)
    if _IDENT.fullmatch(raw_name) is None:
        return f"{raw_name!r} is not a tool name"
    name = _resolve_name(raw_name, tools)
    if not first_line:
        following = more.lstrip()
        inline = following if following.startswith(("{", "```", "~~~")) else ""
    return _read_inline_arguments(name, inline, tools)


def _read_blob_action(c: str, tools: dict[str, ToolSchema]) -> _BlobRead | str:
    """An ``Action:`` that is a JSON blob (or a fenced one): its calls and final answer, or an error."""
    value, ok = _loads(c[: _value_end(c, 0)] or c)
    blob = _blob_actions(value, tools) if ok else None
    if blob is None:
        return f"could not read the Action {c[:80]!r}: give the tool name, then its arguments in Action Input"
    actions, final, error = blob
    if error is not None:
        return error
    return actions, final


def _read_bracketed_action(
    raw_name: str, inline: str, finish_name: bool, tools: dict[str, ToolSchema]
) -> _ActionRead | str:
    """``Search[query]`` or ``Finish[answer]`` (the ReAct paper), or a Python-style ``search(query='x')``."""
    end = _balanced_end(inline, 0)
    inside = inline[1 : end - 1] if end > 0 else inline[1:].rstrip(")]")
    if finish_name:  # ReAct paper: "Finish[answer]"
        return _ActionRead("finish", _answer_from(_unquote(inside)), finish=True)
    name = _resolve_name(raw_name, tools)
    if inline.startswith("["):  # ReAct paper: "Search[query]"
        value, _given, err = _parse_input_text(inside) if inside.strip() else ({}, False, None)
        if err is not None:
            return err
        args, err = _coerce_input(name, value, tools)
    else:  # Python style: "search(query='x')"
        args, err = _parse_call_args(name, inside, tools)
    if err is not None:
        return err
    return _ActionRead(name, args)


def _read_inline_arguments(name: str, inline: str, tools: dict[str, ToolSchema]) -> _ActionRead | str:
    """The call to `name` with the arguments written after it, if any ("Action: search {"q": "x"}")."""
    if inline.strip():  # "Action: search {"q": "x"}" or the JSON on the next line
        value, given, err = _parse_input_text(inline)
        if err is not None:
            return err
        if given:
            args, err = _coerce_input(name, value, tools)
            if err is not None:
                return err
            return _ActionRead(name, args)
    return _ActionRead(name)


def _parse_special(body: str, tools: dict[str, ToolSchema]) -> ReactParse | None:
    """Replies without ReAct labels that still call tools: tags and JSON blobs."""
    if "<tool_call>" in body or "<function=" in body:
        return _parse_call_tags(body, tools)
    return _parse_trailing_blob(body, tools)


def _parse_call_tags(body: str, tools: dict[str, ToolSchema]) -> ReactParse | None:
    """Calls in ``<tool_call>{json}</tool_call>`` and ``<function=name>arguments</function>`` tags."""
    first = min(i for i in (body.find("<tool_call>"), body.find("<function=")) if i >= 0)
    actions: list[tuple[str, dict[str, Any]]] = []
    for m in _TOOL_CALL_TAG.finditer(body):
        value, ok = _loads(m.group(1))
        blob = _blob_actions(value, tools) if ok else None
        if blob is None or blob[2] is not None:
            return ReactParse(
                thought=_clean_thought(body[:first]),
                error=blob[2] if blob else f"could not read the tool call {m.group(1)[:80]!r}",
            )
        actions.extend(blob[0])
        if blob[1] is not None and not actions:
            return ReactParse(thought=_clean_thought(body[:first]), final_answer=blob[1])
    for m in _FUNCTION_TAG.finditer(body):
        name = _resolve_name(m.group(1), tools)
        value, _given, err = _parse_input_text(m.group(2)) if m.group(2).strip() else ({}, False, None)
        args, err2 = _coerce_input(name, value, tools) if err is None else ({}, err)
        if err2 is not None:
            return ReactParse(thought=_clean_thought(body[:first]), error=err2)
        actions.append((name, args))
    if actions:
        return ReactParse(thought=_clean_thought(body[:first]), actions=actions)
    return None


def _parse_trailing_blob(body: str, tools: dict[str, ToolSchema]) -> ReactParse | None:
    """A JSON blob that ends the reply, possibly after some chatter."""
    stripped = body.rstrip()
    for m in re.finditer(r"(?m)^[ \t]*(?:```|~~~|\{|\[)", stripped):
        start = m.start()
        end = _value_end(stripped, start)
        if end <= start or stripped[end:].strip(" \t\n`~"):
            continue
        value, ok = _loads(stripped[start:end])
        if not ok:
            continue
        blob = _blob_actions(value, tools)
        if blob is None:
            continue
        found, final, error = blob
        names_known = not tools or all(n in tools for n, _ in found)
        if error is None and not found and final is None:
            continue
        if not names_known and final is None:
            continue  # JSON naming no known tool: an answer that shows JSON, not a call
        thought = _clean_thought(stripped[:start])
        if error is not None:
            return ReactParse(thought=thought, actions=found, error=error)
        if found:
            return ReactParse(thought=thought, actions=found)
        return ReactParse(thought=thought, final_answer=final)
    return None
