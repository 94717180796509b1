"""Hypothesis strategies for the MCP spec's flat forms: generated schemas, valid contents, broken contents.

A form is a flat object of string (lengths, formats), number / integer (ranges), boolean, single
choice (``enum``, ``oneOf``, legacy ``enumNames``) and multiple choice (``items.enum`` /
``items.anyOf``, ``minItems`` / ``maxItems``) fields, some required. `forms()` draws a schema with
one content that fits it and one that does not, naming the field the broken content gets wrong.
"""

from __future__ import annotations

import datetime as dt
import string
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

NAMES = st.text(alphabet=string.ascii_lowercase + "_", min_size=1, max_size=10)
WORDS = st.text(alphabet=string.ascii_letters + string.digits + " -", min_size=1, max_size=8)


@dataclass(frozen=True)
class Form:
    """A generated form, a content that fits it, and one that does not (failing on `bad_field`)."""

    schema: dict[str, Any]
    good: dict[str, Any]
    bad: dict[str, Any]
    bad_field: str


@st.composite
def field_schemas(draw: st.DrawFn) -> dict[str, Any]:
    """One property schema of the spec's restricted kinds (titles, descriptions, defaults left out)."""
    kind = draw(st.sampled_from(["string", "format", "integer", "number", "boolean", "enum", "multi"]))
    prop: dict[str, Any]
    if kind == "string":
        prop = {"type": "string"}
        low = draw(st.none() | st.integers(0, 5))
        high = draw(st.none() | st.integers(low or 0, 12))
        if low is not None:
            prop["minLength"] = low
        if high is not None:
            prop["maxLength"] = high
    elif kind == "format":
        prop = {"type": "string", "format": draw(st.sampled_from(["email", "uri", "date", "date-time"]))}
    elif kind in ("integer", "number"):
        prop = {"type": kind}
        low = draw(st.none() | st.integers(-1000, 1000))
        high = draw(st.none() | st.integers(low if low is not None else -1000, 2000))
        if low is not None:
            prop["minimum"] = low
        if high is not None:
            prop["maximum"] = high
    elif kind == "boolean":
        prop = {"type": "boolean"}
    elif kind == "enum":
        values = draw(st.lists(WORDS, min_size=1, max_size=5, unique=True))
        style = draw(st.sampled_from(["enum", "oneOf", "legacy"]))
        if style == "oneOf":
            prop = {"type": "string", "oneOf": [{"const": v, "title": v.upper()} for v in values]}
        else:
            prop = {"type": "string", "enum": values}
            if style == "legacy":
                prop["enumNames"] = [v.title() for v in values]
    else:
        values = draw(st.lists(WORDS, min_size=1, max_size=5, unique=True))
        items: dict[str, Any] = (
            {"type": "string", "enum": values}
            if draw(st.booleans())
            else {"anyOf": [{"const": v, "title": v.upper()} for v in values]}
        )
        prop = {"type": "array", "items": items}
        low = draw(st.none() | st.integers(0, len(values)))
        high = draw(st.none() | st.integers(max(low or 0, 1), len(values)))
        if low is not None:
            prop["minItems"] = low
        if high is not None:
            prop["maxItems"] = high
    return prop


def choices(prop: dict[str, Any]) -> list[str]:
    spec = prop["items"] if prop["type"] == "array" else prop
    if "enum" in spec:
        return list(spec["enum"])
    return [o["const"] for o in spec.get("oneOf") or spec.get("anyOf") or []]


def valid_values(prop: dict[str, Any]) -> st.SearchStrategy[Any]:
    kind = prop["type"]
    if kind == "array":
        options = choices(prop)
        low = prop.get("minItems", 0)
        high = min(prop.get("maxItems", len(options)), len(options))
        return st.lists(st.sampled_from(options), min_size=low, max_size=high, unique=True)
    if kind == "string" and ("enum" in prop or "oneOf" in prop):
        return st.sampled_from(choices(prop))
    if kind == "string":
        fmt = prop.get("format")
        if fmt == "email":
            return st.from_regex(r"[a-z]{1,8}@[a-z]{1,8}\.(com|org)", fullmatch=True)
        if fmt == "uri":
            return st.from_regex(r"https://[a-z]{1,8}\.example/[a-z0-9]{0,6}", fullmatch=True)
        if fmt == "date":
            return st.dates().map(dt.date.isoformat)
        if fmt == "date-time":
            return st.datetimes(timezones=st.just(dt.UTC)).map(lambda d: d.isoformat())
        return st.text(min_size=prop.get("minLength", 0), max_size=prop.get("maxLength", 20))
    if kind == "integer":
        return st.integers(prop.get("minimum"), prop.get("maximum"))
    if kind == "number":
        return st.floats(prop.get("minimum"), prop.get("maximum"), allow_nan=False, allow_infinity=False)
    return st.booleans()


def invalid_values(prop: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values the property refuses: a wrong type, or out of its bounds, choices or format."""
    kind = prop["type"]
    wrong_type: st.SearchStrategy[Any] = st.just(["a", 1]) if kind != "array" else st.just("not a list")
    options: list[st.SearchStrategy[Any]] = [wrong_type]
    if kind == "string":
        options.append(st.integers())
        if "enum" in prop or "oneOf" in prop:
            options.append(st.text(min_size=1, max_size=5).filter(lambda v: v not in choices(prop)))
        if "minLength" in prop and prop["minLength"] > 0:
            options.append(st.text(max_size=prop["minLength"] - 1))
        if "maxLength" in prop:
            options.append(st.text(min_size=prop["maxLength"] + 1, max_size=prop["maxLength"] + 5))
        fmt = prop.get("format")
        if fmt is not None:
            options.append(st.sampled_from(["not valid", "2024-13-45", "x@", "no spaces allowed"]))
    elif kind in ("integer", "number"):
        options += [st.text(max_size=3), st.booleans()]
        if kind == "integer":
            options.append(st.sampled_from([0.5, 1.25, -7.75]))
        if "minimum" in prop:
            options.append(st.integers(max_value=prop["minimum"] - 1))
        if "maximum" in prop:
            options.append(st.integers(min_value=prop["maximum"] + 1))
    elif kind == "boolean":
        options += [st.sampled_from(["true", "yes"]), st.integers(0, 1)]
    else:
        picked = choices(prop)
        options.append(st.just([*picked[:1], "definitely-not-a-choice"]))
        options.append(st.just([picked[0], picked[0]]))  # a choice twice
        if prop.get("minItems", 0) > 0:
            options.append(st.just([]))
        if "maxItems" in prop and prop["maxItems"] < len(picked):
            options.append(st.just(picked[: prop["maxItems"] + 1]))
    return st.one_of(options)


@st.composite
def forms(draw: st.DrawFn) -> Form:
    """A form schema, a fitting content and a broken one (one of: bad value, missing required, unknown field)."""
    properties = draw(st.dictionaries(NAMES, field_schemas(), min_size=1, max_size=6))
    names = sorted(properties)
    required = sorted(draw(st.sets(st.sampled_from(names))))
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    good: dict[str, Any] = {}
    for name in names:
        if name in required or draw(st.booleans()):
            good[name] = draw(valid_values(properties[name]))
    breaks = ["value"]
    if required:
        breaks.append("missing")
    breaks.append("unknown")
    how = draw(st.sampled_from(breaks))
    bad = dict(good)
    if how == "value":
        field = draw(st.sampled_from(names))
        bad[field] = draw(invalid_values(properties[field]))
    elif how == "missing":
        field = draw(st.sampled_from(required))
        del bad[field]
    else:
        field = draw(NAMES.filter(lambda n: n not in properties))
        bad[field] = "surprise"
    return Form(schema=schema, good=good, bad=bad, bad_field=field)
