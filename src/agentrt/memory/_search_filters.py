"""The reading of `SearchFilters` (`agentrt.memory.retrieval`): one implementation for every caller.

Public as `agentrt.knowledge.filters`; it lives here, below the agent layer, so the agent's
``search_knowledge`` tool checks the model's filters with the same code as `Knowledge.search`,
every knowledge store and the server (the layering keeps the agent from importing
`agentrt.knowledge`).

What the filters mean and how each is checked: `agentrt.knowledge.filters`.

`check_untrusted_filters` reads filters from an untrusted caller (the model's ``search_knowledge``
arguments, a request): everything `check_filters` refuses, and more (see there). Nothing here
builds a path or SQL from a filter: stores bind the checked values as parameters.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from typing import Any

from agentrt.errors import InvalidTypeError, InvalidValueError

__all__ = [
    "MAX_FILTER_KEYS",
    "MAX_KEY",
    "MAX_SOURCES",
    "MAX_TAGS",
    "MAX_UNTRUSTED_KEY",
    "MAX_UNTRUSTED_KEYS",
    "MAX_UNTRUSTED_LIST",
    "MAX_UNTRUSTED_TEXT",
    "RESERVED",
    "canonical_date",
    "check_filters",
    "check_untrusted_filters",
    "finite_unit",
    "json_equal",
]

MAX_SOURCES = 100
MAX_TAGS = 50
MAX_FILTER_KEYS = 32
MAX_KEY = 256
MAX_DATE_TEXT = 64
_MAX_NODES = 1_000
_MAX_DEPTH = 16
_INT64 = (-(2**63), 2**63 - 1)
RESERVED = ("source", "tags", "since", "until")

MAX_UNTRUSTED_KEYS = 16
"""Keys an untrusted caller's filters may hold (`check_untrusted_filters`)."""
MAX_UNTRUSTED_KEY = 100
"""Characters of an untrusted caller's filter key."""
MAX_UNTRUSTED_LIST = 50
"""Values of an untrusted caller's ``source`` or ``tags`` list."""
MAX_UNTRUSTED_TEXT = 500
"""Characters of a string value in an untrusted caller's filters."""
_DATES = ("since", "until")


def check_filters(filters: object) -> dict[str, Any] | None:
    """`filters` checked and normalised (see the module docstring); None when nothing is filtered.

    Idempotent: checking an already checked mapping returns an equal one. ``source`` comes back as
    a list, ``tags`` as a list, ``since`` / ``until`` as canonical ISO text; reserved keys set to
    None are left out.
    """
    if filters is None:
        return None
    if not isinstance(filters, Mapping):
        raise InvalidTypeError(f"filters must be a mapping, not {type(filters).__name__}")
    if len(filters) > MAX_FILTER_KEYS:
        raise InvalidValueError(f"filters may hold at most {MAX_FILTER_KEYS} keys, not {len(filters)}")
    out: dict[str, Any] = {}
    for key, value in filters.items():
        if not isinstance(key, str):
            raise InvalidTypeError(f"a filter key must be a string, not {type(key).__name__}")
        if len(key) > MAX_KEY:
            raise InvalidValueError(f"a filter key may have at most {MAX_KEY} characters")
        _check_text(key, "a filter key")
        if key in RESERVED:
            if value is None:
                continue
            if key == "source":
                out[key] = _strings(value, key, MAX_SOURCES)
            elif key == "tags":
                out[key] = _strings(value, key, MAX_TAGS)
            else:
                out[key] = canonical_date(value, key)
        else:
            out[key] = _json_value(value, key, [0], 0)
    return out or None


def check_untrusted_filters(filters: object) -> dict[str, Any] | None:
    """Filters from an untrusted caller (the model's ``search_knowledge`` arguments), checked; None: no filter.

    Everything `check_filters` refuses is refused, with the same typed errors, and also (as the
    tool's schema tells the model):

    * more than `MAX_UNTRUSTED_KEYS` keys; a key that is blank or longer than `MAX_UNTRUSTED_KEY`;
    * ``source`` / ``tags`` other than a non-empty string or a non-empty list of at most
      `MAX_UNTRUSTED_LIST` non-empty strings of at most `MAX_UNTRUSTED_TEXT` characters (so no
      ``[]``, which `check_filters` reads as "matches nothing" / "any tags");
    * ``since`` / ``until`` other than an ISO date (or date and time) string;
    * any other key whose value is not a string (at most `MAX_UNTRUSTED_TEXT` characters), a
      number or a boolean: no null, list or object (JSON equality on those is for code, not models);
    * None for any key.

    Returns the filters in the shapes a `Retriever` reads: ``source`` and ``tags`` as lists, other
    values as `check_filters` reads them, ``since`` / ``until`` as the caller wrote them (stripped;
    `Knowledge.search` normalises them with `check_filters`). The messages are meant for the model
    to correct its call.

    Raises:
        InvalidTypeError: a value of the wrong type.
        InvalidValueError: a value out of range, or not in a form above.
    """
    if filters is None:
        return None
    if not isinstance(filters, Mapping):
        raise InvalidTypeError('\'filters\' must be an object such as {"source": "handbook.md", "tags": ["hr"]}')
    if len(filters) > MAX_UNTRUSTED_KEYS:
        raise InvalidValueError(f"'filters' may hold at most {MAX_UNTRUSTED_KEYS} keys")
    dates: dict[str, str] = {}
    for key, value in filters.items():
        if not isinstance(key, str) or not key.strip() or len(key) > MAX_UNTRUSTED_KEY:
            raise InvalidValueError(
                f"each filter key must be a non-empty name of at most {MAX_UNTRUSTED_KEY} characters"
            )
        if key in ("source", "tags"):
            _untrusted_strings(key, value)
        elif key in _DATES:
            dates[key] = _untrusted_date(key, value)
        elif isinstance(value, bool | int | float) or (isinstance(value, str) and len(value) <= MAX_UNTRUSTED_TEXT):
            continue
        else:
            raise InvalidTypeError(
                f"filter {key!r} must be a string, a number or a boolean (compared for equality; a string of at "
                f"most {MAX_UNTRUSTED_TEXT} characters)"
            )
    checked = check_filters(filters)  # the rules every caller shares: Unicode, finite numbers, 64-bit ints
    if checked is None:  # ``{}``
        return None
    checked.update(dates)
    return checked


def _untrusted_strings(key: str, value: object) -> None:
    items = [value] if isinstance(value, str) else value
    if (
        not isinstance(items, list | tuple)
        or not items
        or len(items) > MAX_UNTRUSTED_LIST
        or not all(isinstance(v, str) and v and len(v) <= MAX_UNTRUSTED_TEXT for v in items)
    ):
        raise InvalidValueError(
            f"filter {key!r} must be a non-empty string or a non-empty list of at most {MAX_UNTRUSTED_LIST} "
            f"non-empty strings (each at most {MAX_UNTRUSTED_TEXT} characters)"
        )


def _untrusted_date(key: str, value: object) -> str:
    """`value` stripped when it is an ISO date or date and time (read by `canonical_date`)."""
    if isinstance(value, str):
        try:
            canonical_date(value, key)
        except InvalidValueError:
            pass
        else:
            return value.strip()
    raise InvalidValueError(f"filter {key!r} must be an ISO date such as 2024-01-31 (or a date and time)")


def canonical_date(value: object, key: str = "date") -> str:
    """A ``since`` / ``until`` bound as canonical ISO text: ``YYYY-MM-DD``, or a UTC ``YYYY-MM-DDTHH:MM:SS[.f]``."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        return value.isoformat()
    elif isinstance(value, str):
        text = value.strip()
        if not text or len(text) > MAX_DATE_TEXT:
            raise InvalidValueError(f"filter {key!r} must be a date, a datetime or an ISO date, not {value[:80]!r}")
        try:
            return date.fromisoformat(text).isoformat()
        except ValueError:
            pass
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise InvalidValueError(
                f"filter {key!r} must be a date, a datetime or an ISO date, not {value[:80]!r}"
            ) from None
    else:
        raise InvalidValueError(
            f"filter {key!r} must be a date, a datetime or an ISO date string, not {type(value).__name__}"
        )
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return moment.isoformat()


def json_equal(a: Any, b: Any) -> bool:
    """Equality of two JSON values as the SQL backends compare them: bools are not numbers, 3 == 3.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) or isinstance(b, int | float):
        return isinstance(a, int | float) and isinstance(b, int | float) and a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return False


def _check_text(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidValueError(f"{what} is not valid Unicode (a lone surrogate)") from None


def _strings(value: object, key: str, limit: int) -> list[str]:
    if isinstance(value, str):
        items: list[Any] = [value]
    elif isinstance(value, list | tuple):
        items = list(value)
    elif isinstance(value, set | frozenset):
        items = sorted(value, key=repr)
    else:
        raise InvalidTypeError(f"filter {key!r} must be a string or a list of strings, not {type(value).__name__}")
    if len(items) > limit:
        raise InvalidValueError(f"filter {key!r} may list at most {limit} values, not {len(items)}")
    for item in items:
        if not isinstance(item, str):
            raise InvalidValueError(f"filter {key!r} must be a string or a list of strings, not {value!r:.80}")
        _check_text(item, f"a value of filter {key!r}")
    return items


def _json_value(value: object, key: str, nodes: list[int], depth: int) -> Any:
    """`value` if it is JSON (bounded), with tuples as lists; else a typed error naming `key`."""
    nodes[0] += 1
    if nodes[0] > _MAX_NODES or depth > _MAX_DEPTH:
        raise InvalidValueError(f"filter {key!r} is too large a value (at most {_MAX_NODES} items, depth {_MAX_DEPTH})")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not _INT64[0] <= value <= _INT64[1]:
            raise InvalidValueError(f"filter {key!r}: an integer must fit in 64 bits")
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidValueError(f"filter {key!r}: a number must be finite, not {value!r}")
        return float(value)
    if isinstance(value, str):
        _check_text(value, f"the value of filter {key!r}")
        return value
    if isinstance(value, list | tuple):
        return [_json_value(item, key, nodes, depth + 1) for item in value]
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for name, item in value.items():
            if not isinstance(name, str):
                raise InvalidTypeError(f"filter {key!r}: object keys must be strings, not {type(name).__name__}")
            _check_text(name, f"a key in filter {key!r}")
            out[name] = _json_value(item, key, nodes, depth + 1)
        return out
    raise InvalidTypeError(
        f"filter {key!r} must be a JSON value (string, number, bool, null, list, object), not {type(value).__name__}"
    )


def finite_unit(vector: Sequence[float]) -> list[float] | None:
    """`vector` scaled to length 1, or None when it has no direction: empty, zero, or not finite (NaN, inf).

    Scaled by its largest component first, so huge finite components do not overflow the norm.
    """
    values = [float(x) for x in vector]
    if not values or not all(math.isfinite(x) for x in values):
        return None
    largest = max(abs(x) for x in values)
    if largest == 0:
        return None
    scaled = [x / largest for x in values]
    norm = math.sqrt(sum(x * x for x in scaled))
    out = [x / norm for x in scaled]
    return out if all(math.isfinite(x) for x in out) else None
