"""Extract the Chat Completions request schema (and everything it references) from OpenAI's OpenAPI spec.

The full spec is ~3 MB of YAML; the tests need only `CreateChatCompletionRequest` and its `$ref`
closure (~60 schemas). The subset is written verbatim (no keyword translation: the test loader does
that), as JSON with sorted keys, so a re-extraction from a newer spec gives a readable diff.

    python tests/unit/model/providers/data/extract_openai_schema.py ../shared/specs/openai-openapi.yaml

Needs PyYAML (a dev dependency).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT_SCHEMA = "CreateChatCompletionRequest"
OUT = Path(__file__).with_name("openai-chat-completions-request.schema.json")
SOURCE = {
    "repository": "openai/openai-openapi",
    "file": "openapi.yaml",
    "commit": "f85dbe223d40e1a31cba812ab2d755c7e98a92a3",
    "info.version": "2.3.0",
    "license": "MIT (openai-openapi.LICENSE beside this file)",
}


def _refs(node: Any, found: set[str]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str) and value.startswith("#/components/schemas/"):
                found.add(value.rsplit("/", 1)[1])
            else:
                _refs(value, found)
    elif isinstance(node, list):
        for value in node:
            _refs(value, found)


def main(spec_path: str) -> None:
    raw = Path(spec_path).read_bytes()
    spec = yaml.load(raw, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    schemas = spec["components"]["schemas"]
    keep: set[str] = set()
    todo = [ROOT_SCHEMA]
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep.add(name)
        found: set[str] = set()
        _refs(schemas[name], found)
        todo.extend(found - keep)
    doc = {
        "x-source": {
            **SOURCE,
            "openapi": spec["openapi"],
            "spec_sha256": hashlib.sha256(raw).hexdigest(),
            "extracted": f"#/components/schemas/{ROOT_SCHEMA} and its $ref closure ({len(keep)} schemas), verbatim",
        },
        "components": {"schemas": {name: schemas[name] for name in sorted(keep)}},
    }
    OUT.write_text(json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False, default=str) + "\n")
    print(f"wrote {OUT} ({len(keep)} schemas, {OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "../shared/specs/openai-openapi.yaml")
