"""``MODULE:ATTR`` references on the command line (`agentrt serve`, `agentrt mcp serve`), imported."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from agentrt.errors import UserError

__all__ = ["import_target"]


def import_target(spec: str, *, example: str) -> Any:
    """The object ``MODULE:ATTR`` names (ATTR may be dotted); the current directory is importable, as for uvicorn.

    A module that is missing is a `UserError`; an ImportError raised *inside* the module (one of its
    own imports failed) propagates unchanged, so its traceback points at the real cause.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UserError(f"expected MODULE:ATTR (e.g. {example!r}), not {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if exc.name == module_name or (exc.name and module_name.startswith(exc.name + ".")):
            raise UserError(f"cannot import module {module_name!r}: {exc}") from None
        raise
    value: Any = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise UserError(f"module {module_name!r} has no attribute {attr!r}") from None
    return value
