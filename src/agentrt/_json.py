"""Fast JSON helpers: orjson when installed, the standard library otherwise."""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping
from typing import Any

_orjson: Any
try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - orjson is a core dependency, kept optional for odd platforms
    _orjson = None

__all__ = ["dumps", "dumps_bytes", "dumps_jsonable_bytes", "jsonable", "loads"]


def jsonable(value: Any) -> Any:
    """Turn dataclasses, pydantic models, enums, tuples and sets into JSON-native values."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return jsonable(to_dict())
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump):
        return model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


if _orjson is not None:
    _OPTS = _orjson.OPT_NON_STR_KEYS

    def dumps_bytes(value: Any) -> bytes:
        """Serialise to compact UTF-8 JSON bytes."""
        try:
            out: bytes = _orjson.dumps(value, option=_OPTS)
            return out
        except TypeError:
            pass
        try:
            out = _orjson.dumps(jsonable(value), option=_OPTS)
            return out
        except TypeError:  # e.g. integers wider than 64 bits
            return json.dumps(jsonable(value), ensure_ascii=False, separators=(",", ":")).encode()

    def dumps(value: Any) -> str:
        """Serialise to a compact JSON string."""
        return dumps_bytes(value).decode()

    # Dataclasses and dates go to `jsonable` (to_dict(), str()) instead of orjson's own encoding, so
    # the output is that of ``dumps_bytes(jsonable(value))`` while orjson walks plain containers in C.
    # Without OPT_NON_STR_KEYS: orjson writes a key True as "true" where `jsonable` writes str(True),
    # so a dict with a key that is not a string takes the `jsonable` route instead (the same output).
    _WALK_OPTS = _orjson.OPT_PASSTHROUGH_DATACLASS | _orjson.OPT_PASSTHROUGH_DATETIME

    def dumps_jsonable_bytes(value: Any) -> bytes:
        """``dumps_bytes(jsonable(value))`` without walking `value` in Python first."""
        try:
            out: bytes = _orjson.dumps(value, default=jsonable, option=_WALK_OPTS)
            return out
        except TypeError:
            return dumps_bytes(jsonable(value))

    # Digits map to "0", everything else to " ": a run of 19 zeros means a 19+ digit number. This
    # scan costs about as much as orjson's parse itself (a regex costs ten times more).
    _DIGIT_MASK = bytes(48 if 48 <= i <= 57 else 32 for i in range(256))
    _NINETEEN = b"0" * 19

    def loads(data: str | bytes | bytearray | memoryview) -> Any:
        """Parse JSON text (integers beyond 64 bits, which orjson reads as floats, stay exact)."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        if len(raw) >= 19 and _NINETEEN in raw.translate(_DIGIT_MASK):
            return json.loads(raw)
        return _orjson.loads(raw)

else:  # pragma: no cover

    def dumps_jsonable_bytes(value: Any) -> bytes:
        """``dumps_bytes(jsonable(value))``."""
        return dumps_bytes(jsonable(value))

    def dumps(value: Any) -> str:
        """Serialise to a compact JSON string."""
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=jsonable)

    def dumps_bytes(value: Any) -> bytes:
        """Serialise to compact UTF-8 JSON bytes."""
        return dumps(value).encode()

    def loads(data: str | bytes | bytearray | memoryview) -> Any:
        """Parse JSON text."""
        if isinstance(data, memoryview):
            data = bytes(data)
        return json.loads(data)
