"""`check_filters`: the one reading of `SearchFilters` every knowledge store and `Knowledge.search` share.

Filters come from callers, and through ``search_knowledge`` from the model: they are checked and
normalised once, so each backend binds the same values and a bad one is a typed error
(`InvalidTypeError` / `InvalidValueError`) instead of whatever a database driver raises.

* ``source``: a string or a list of at most `MAX_SOURCES` strings (exact sources; ``[]`` matches nothing).
* ``tags``: a list of at most `MAX_TAGS` strings (a document must carry every one; a single string
  is one tag).
* ``since`` / ``until``: a `date`, a `datetime` or an ISO 8601 string (any spelling
  `date.fromisoformat` / `datetime.fromisoformat` read, e.g. ``2024-01-31``, ``20240131``,
  ``2024-W05-3``, ``2024-01-31T09:30:00+02:00``). Each is normalised to its canonical text:
  ``YYYY-MM-DD`` for a date (it compares whole days), ``YYYY-MM-DDTHH:MM:SS[.ffffff]`` in UTC,
  without offset, for a date and time.
* ``source``, ``tags``, ``since`` or ``until`` set to None: no filter.
* Any other key: the document's top-level metadata value equals the filter's, as JSON: types are
  compared (``true`` is not ``1``, ``"3"`` is not ``3``; ``3`` equals ``3.0``), and None matches a
  document whose value is JSON ``null`` (not one without the key). Values are JSON: strings, bools,
  ints within 64 bits, finite floats, None, and lists / objects of them (bounded in size and depth).

Strings must be valid Unicode (no lone surrogates); keys are strings of at most `MAX_KEY` characters,
at most `MAX_FILTER_KEYS` of them.

`check_untrusted_filters` reads filters from an untrusted caller (the model's ``search_knowledge``
arguments, and what a request sends): `check_filters` plus stricter bounds and shapes (no null,
list or object values, no empty lists, at most `MAX_UNTRUSTED_KEYS` keys, ...). The agent's tool
uses it, so the model's filters and every other caller's meet the same checks.

The implementation is `agentrt.memory._search_filters`, below the agent layer so that the agent's
tool can use it (the layering keeps the agent from importing `agentrt.knowledge`); this module is
its public name.
"""

from __future__ import annotations

from agentrt.memory._search_filters import (
    MAX_FILTER_KEYS,
    MAX_KEY,
    MAX_SOURCES,
    MAX_TAGS,
    MAX_UNTRUSTED_KEY,
    MAX_UNTRUSTED_KEYS,
    MAX_UNTRUSTED_LIST,
    MAX_UNTRUSTED_TEXT,
    RESERVED,
    canonical_date,
    check_filters,
    check_untrusted_filters,
    finite_unit,
    json_equal,
)

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
