"""Validate Chat Completions request bodies against OpenAI's published request schema.

Loads the vendored `CreateChatCompletionRequest` closure (see README.md here) and translates the
OpenAPI 3.0 leftovers for `jsonschema`: ``nullable: true`` becomes a ``"null"`` type (or an
``anyOf`` with ``{"type": "null"}`` where the schema has no ``type``), and boolean
``exclusiveMinimum``/``exclusiveMaximum`` become the numeric 2020-12 form.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

SCHEMA_FILE = Path(__file__).with_name("openai-chat-completions-request.schema.json")
ROOT = "#/components/schemas/CreateChatCompletionRequest"


def translate(node: Any) -> Any:
    """OpenAPI 3.0 keywords in `node` (recursively) rewritten as JSON Schema 2020-12."""
    if isinstance(node, list):
        return [translate(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: translate(v) for k, v in node.items()}
    for bound, limit in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        flag = out.get(bound)
        if isinstance(flag, bool):
            del out[bound]
            if flag and limit in out:
                out[bound] = out.pop(limit)
    if out.pop("nullable", False) is True:
        kind = out.get("type")
        if isinstance(kind, str):
            out["type"] = [kind, "null"]
        elif isinstance(kind, list):
            if "null" not in kind:
                out["type"] = [*kind, "null"]
        else:
            return {"anyOf": [out, {"type": "null"}]}
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
    return out


@functools.cache
def validator() -> Draft202012Validator:
    """A validator for `CreateChatCompletionRequest` (built once)."""
    doc = json.loads(SCHEMA_FILE.read_text())
    schema = {"$ref": ROOT, "components": translate(copy.deepcopy(doc["components"]))}
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def errors(body: Any) -> list[str]:
    """Readable schema violations of `body` (empty when it is valid)."""
    out = []
    for err in sorted(validator().iter_errors(body), key=lambda e: list(e.absolute_path)):
        where = "/".join(str(p) for p in err.absolute_path) or "(root)"
        detail = err.message
        if err.context:
            detail += " | " + "; ".join(sorted({c.message for c in err.context})[:6])
        out.append(f"{where}: {detail[:600]}")
    return out


def assert_valid(body: Any) -> None:
    """Fail with every violation listed when `body` is not a valid Chat Completions request."""
    problems = errors(body)
    if problems:
        raise AssertionError("request body violates CreateChatCompletionRequest:\n  " + "\n  ".join(problems))
