"""A safe calculator tool: arithmetic over Python's `ast`, never `eval`.

Only number literals, the arithmetic operators, parentheses and a whitelist of math functions and
constants are accepted; everything else (names, attributes, calls of anything else, lambdas,
comprehensions, strings) is refused with a message the model can act on. Inputs and intermediate
results are bounded so no expression can eat the CPU or memory (``9**9**9`` is refused before it
is computed).
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any, TypeAlias

from agentrt.errors import ToolRetry
from agentrt.tool.base import tool

__all__ = [
    "CONSTANT_NAMES",
    "FUNCTION_NAMES",
    "MAX_EXPRESSION_LENGTH",
    "MAX_INT_DIGITS",
    "MAX_NODES",
    "calculate",
    "evaluate",
    "format_number",
]

Number: TypeAlias = int | float

MAX_EXPRESSION_LENGTH = 500
"""Longest expression accepted, in characters."""
MAX_NODES = 300
"""Most syntax-tree nodes an expression may have."""
MAX_INT_DIGITS = 1000
"""Most decimal digits an integer result (final or intermediate) may have."""

# log10(2): converts a bit length into a digit count without building the decimal string.
_LOG10_2 = math.log10(2)
_MAX_INT_BITS = int(MAX_INT_DIGITS / _LOG10_2) + 1
_MAX_ROUND_DIGITS = 100

_BIN_OPS: dict[type[ast.operator], tuple[str, Callable[[Any, Any], Any]]] = {
    ast.Add: ("+", operator.add),
    ast.Sub: ("-", operator.sub),
    ast.Mult: ("*", operator.mul),
    ast.Div: ("/", operator.truediv),
    ast.FloorDiv: ("//", operator.floordiv),
    ast.Mod: ("%", operator.mod),
    ast.Pow: ("**", operator.pow),
}
_UNARY_OPS: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}


def _round(x: Number, ndigits: Number | None = None) -> Number:
    if ndigits is None:
        return round(x)
    if not isinstance(ndigits, int) or abs(ndigits) > _MAX_ROUND_DIGITS:
        raise ToolRetry(
            f"round(x, ndigits) needs an integer ndigits between -{_MAX_ROUND_DIGITS} and {_MAX_ROUND_DIGITS}"
        )
    return round(x, ndigits)


def _log(x: Number, base: Number | None = None) -> float:
    return math.log(x) if base is None else math.log(x, base)


def _min(*args: Number) -> Number:
    return min(args)


def _max(*args: Number) -> Number:
    return max(args)


# name -> (function, least arguments, most arguments)
_FUNCTIONS: dict[str, tuple[Callable[..., Number], int, int]] = {
    "sqrt": (math.sqrt, 1, 1),
    "sin": (math.sin, 1, 1),
    "cos": (math.cos, 1, 1),
    "tan": (math.tan, 1, 1),
    "asin": (math.asin, 1, 1),
    "acos": (math.acos, 1, 1),
    "atan": (math.atan, 1, 1),
    "degrees": (math.degrees, 1, 1),
    "radians": (math.radians, 1, 1),
    "log": (_log, 1, 2),
    "log10": (math.log10, 1, 1),
    "log2": (math.log2, 1, 1),
    "exp": (math.exp, 1, 1),
    "abs": (abs, 1, 1),
    "round": (_round, 1, 2),
    "min": (_min, 1, 50),
    "max": (_max, 1, 50),
    "floor": (math.floor, 1, 1),
    "ceil": (math.ceil, 1, 1),
}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}
FUNCTION_NAMES = frozenset(_FUNCTIONS)
"""Functions an expression may call."""
CONSTANT_NAMES = frozenset(_CONSTANTS)
"""Constants an expression may name."""
_ALLOWED = ", ".join([*(f"{name}()" for name in _FUNCTIONS), *_CONSTANTS])

# Friendly names for the syntax people (and models) most often try.
_SYNTAX_NAMES: dict[type[ast.AST], str] = {
    ast.Lambda: "lambda expressions",
    ast.ListComp: "comprehensions",
    ast.SetComp: "comprehensions",
    ast.DictComp: "comprehensions",
    ast.GeneratorExp: "generator expressions",
    ast.Attribute: "attribute access",
    ast.Subscript: "indexing",
    ast.Compare: "comparisons",
    ast.BoolOp: "boolean operators",
    ast.IfExp: "conditional expressions",
    ast.NamedExpr: "assignment expressions",
    ast.Tuple: "tuples (commas; write 1000 instead of 1,000)",
    ast.List: "lists",
    ast.Dict: "dicts",
    ast.Set: "sets",
    ast.JoinedStr: "strings",
    ast.Starred: "star arguments",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield",
}


def evaluate(expression: str) -> Number:
    """Evaluate an arithmetic expression safely.

    Args:
        expression: The expression, e.g. ``"128 * 37 + 500"`` or ``"sqrt(2) * pi"``.

    Returns:
        The value: an `int` when every step stayed integral, else a `float`.

    Raises:
        ToolRetry: The expression is too long, malformed, uses something not allowed, or its
            value is undefined or too large; the message says which.
    """
    if not isinstance(expression, str):
        raise ToolRetry(f"expression must be a string, not {type(expression).__name__}")
    text = expression.strip()
    if not text:
        raise ToolRetry("The expression is empty. Send an arithmetic expression such as '2 * (3 + 4)'.")
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise ToolRetry(
            f"The expression is {len(text)} characters long; the limit is {MAX_EXPRESSION_LENGTH}. "
            "Split the computation into smaller steps."
        )
    # Typographic operators that models and people copy from prose.
    text = text.replace("×", "*").replace("÷", "/").replace("−", "-")  # noqa: RUF001 - on purpose
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError) as exc:  # ValueError: NUL bytes on Python 3.11
        reason = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        raise ToolRetry(
            f"Could not parse {expression!r}: {reason}. Use numbers, + - * / // % **, parentheses "
            f"and these functions/constants: {_ALLOWED}."
        ) from None
    count = sum(1 for _ in ast.walk(tree))
    if count > MAX_NODES:
        raise ToolRetry(
            f"The expression is too complex ({count} syntax nodes; the limit is {MAX_NODES}). "
            "Split the computation into smaller steps."
        )
    value = _Evaluator().visit(tree.body)
    _check_size(value)
    return value


def format_number(value: Number, significant: int = 15) -> str:
    """Format a number without float noise: ``5236`` for ``5236.0``, ``0.3`` for ``0.1 + 0.2``.

    Args:
        value: The number.
        significant: Significant digits kept for non-integral floats.

    Returns:
        The text form.
    """
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if math.isnan(value) or math.isinf(value):
        return repr(value)
    if value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    short = repr(value)
    trimmed = f"{value:.{significant}g}"
    return short if len(short) <= len(trimmed) else trimmed


@tool(read_only=True, idempotent=True)
def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression exactly and return the result.

    Supports numbers, + - * / // % ** (power), unary minus, parentheses, the functions sqrt, sin,
    cos, tan, asin, acos, atan, degrees, radians, log (natural, or log(x, base)), log10, log2, exp,
    abs, round, min, max, floor, ceil and the constants pi, e and tau. Angles are in radians.

    Args:
        expression: The arithmetic expression, e.g. "128 * 37 + 500" or "sqrt(2) * pi".
    """
    return format_number(evaluate(expression))


def _check_size(value: Number) -> None:
    if isinstance(value, complex):
        raise ToolRetry(
            "The result is a complex number (e.g. a fractional power of a negative number), which is not supported."
        )
    if isinstance(value, float):
        if math.isnan(value):
            raise ToolRetry("The result is undefined (not a number).")
        if math.isinf(value):
            raise ToolRetry("The result is too large to represent (overflow).")
    elif value.bit_length() > _MAX_INT_BITS and _digits(value) > MAX_INT_DIGITS:
        raise ToolRetry(f"The result has more than {MAX_INT_DIGITS} digits; that is beyond this calculator.")


def _digits(value: int) -> int:
    return len(str(abs(value)))


class _Evaluator:
    """Walks the tree, allowing only whitelisted nodes."""

    def visit(self, node: ast.AST) -> Number:
        if isinstance(node, ast.Constant):
            return self._constant(node)
        if isinstance(node, ast.BinOp):
            return self._binop(node)
        if isinstance(node, ast.UnaryOp):
            op = _UNARY_OPS.get(type(node.op))
            if op is None:
                symbol = "not" if isinstance(node.op, ast.Not) else "~"
                raise ToolRetry(f"The operator {symbol!r} is not supported; use + - * / // % **.")
            result: Number = op(self.visit(node.operand))
            return result
        if isinstance(node, ast.Name):
            return self._name(node)
        if isinstance(node, ast.Call):
            return self._call(node)
        what = _SYNTAX_NAMES.get(type(node), type(node).__name__)
        raise ToolRetry(
            f"Not allowed in a calculation: {what}. Use numbers, + - * / // % **, parentheses and these "
            f"functions/constants: {_ALLOWED}."
        )

    def _constant(self, node: ast.Constant) -> Number:
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            kind = "complex numbers" if isinstance(value, complex) else f"{type(value).__name__} values"
            raise ToolRetry(f"Only real numbers are allowed, not {kind} ({value!r}).")
        if isinstance(value, float) and math.isinf(value):
            raise ToolRetry("A number in the expression is too large to represent.")
        return value

    def _name(self, node: ast.Name) -> Number:
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        if node.id in _FUNCTIONS:
            raise ToolRetry(f"{node.id} is a function; call it with parentheses, e.g. {node.id}(2).")
        raise ToolRetry(f"Unknown name {node.id!r}. Allowed functions and constants: {_ALLOWED}.")

    def _binop(self, node: ast.BinOp) -> Number:
        entry = _BIN_OPS.get(type(node.op))
        if entry is None:
            if isinstance(node.op, ast.BitXor):
                raise ToolRetry("'^' is bitwise XOR in this syntax; write powers with '**', e.g. 2 ** 10.")
            raise ToolRetry("Bitwise and matrix operators are not supported; use + - * / // % **.")
        symbol, fn = entry
        left = self.visit(node.left)
        right = self.visit(node.right)
        if isinstance(node.op, ast.Pow):
            _check_pow(left, right)
        elif (
            isinstance(node.op, ast.Mult)
            and isinstance(left, int)
            and isinstance(right, int)
            and left.bit_length() + right.bit_length() > _MAX_INT_BITS + 8
        ):
            raise ToolRetry(f"The product has more than {MAX_INT_DIGITS} digits; that is beyond this calculator.")
        try:
            result = fn(left, right)
        except ZeroDivisionError:
            raise ToolRetry(
                f"Division by zero in {format_number(left)} {symbol} {format_number(right)}; the result is undefined."
            ) from None
        except OverflowError:
            raise ToolRetry(f"The result of {symbol} is too large to represent (overflow).") from None
        _check_size(result)
        return result  # type: ignore[no-any-return]

    def _call(self, node: ast.Call) -> Number:
        if not isinstance(node.func, ast.Name):
            what = "Attribute access" if isinstance(node.func, ast.Attribute) else "Calling an expression"
            raise ToolRetry(f"{what} is not allowed. Allowed functions: {', '.join(_FUNCTIONS)}.")
        name = node.func.id
        entry = _FUNCTIONS.get(name)
        if entry is None:
            raise ToolRetry(f"Unknown function {name!r}. Allowed functions: {', '.join(_FUNCTIONS)}.")
        if node.keywords:
            raise ToolRetry(f"{name}() takes positional arguments only, e.g. round(3.14159, 2).")
        fn, least, most = entry
        if not least <= len(node.args) <= most:
            expected = str(least) if least == most else f"{least} to {most}"
            raise ToolRetry(f"{name}() takes {expected} argument(s), got {len(node.args)}.")
        args = [self.visit(arg) for arg in node.args]
        try:
            result = fn(*args)
        except ValueError as exc:
            shown = ", ".join(format_number(a) for a in args)
            raise ToolRetry(f"{name}({shown}) is undefined ({exc}).") from None
        except OverflowError:
            shown = ", ".join(format_number(a) for a in args)
            raise ToolRetry(f"{name}({shown}) is too large to represent (overflow).") from None
        except ZeroDivisionError:
            shown = ", ".join(format_number(a) for a in args)
            raise ToolRetry(f"{name}({shown}) is undefined (division by zero).") from None
        _check_size(result)
        return result


def _check_pow(base: Number, exponent: Number) -> None:
    """Refuse powers whose result would be huge, before computing them."""
    if isinstance(base, int) and isinstance(exponent, int):
        if exponent < 0 or abs(base) <= 1:
            return  # a float (possibly 0.0) or 0 / 1 / -1: cheap
        try:
            digits = exponent * math.log10(abs(base))
        except OverflowError:  # an exponent too large for a float: the result is hopeless anyway
            digits = math.inf
        if digits > MAX_INT_DIGITS:
            about = f"about {digits:.3g}" if math.isfinite(digits) else f"far more than {MAX_INT_DIGITS}"
            raise ToolRetry(
                f"{_brief(base)} ** {_brief(exponent)} would have {about} digits; the limit is {MAX_INT_DIGITS}. "
                f"Use a float base (e.g. {_brief(base)}.0 ** ...) for an approximate value if it fits, or rewrite the "
                "computation."
            )
    # Float powers overflow to OverflowError (handled by the caller) instead of running long.


def _brief(value: int) -> str:
    """An integer for a message: in full when short, else its first digits and its length."""
    text = str(value)
    return text if len(text) <= 30 else f"{text[:10]}...({len(text)} digits)"
