"""`model_from_id("provider:model")`: the one place that maps a provider name to an adapter.

Adapters are imported lazily, so `import agentrt` never loads a provider SDK.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentrt.errors import UserError
from agentrt.model.base import ChatModel

__all__ = ["ModelFactory", "model_from_id", "register_provider", "registered_providers"]

ModelFactory = Callable[..., ChatModel]
"""``factory(model_name, *, base_url=None, api_key=None, **options) -> ChatModel``."""

_factories: dict[str, ModelFactory] = {}
_aliases: dict[str, str] = {}


def register_provider(prefix: str, factory: ModelFactory, *, aliases: tuple[str, ...] = ()) -> None:
    """Make ``model_from_id(f"{prefix}:name")`` call `factory` (user-registered prefixes included)."""
    if not prefix or ":" in prefix:
        raise UserError(f"provider prefix must be a non-empty name without ':', not {prefix!r}")
    _factories[prefix] = factory
    for alias in aliases:
        _aliases[alias] = prefix


def registered_providers() -> list[str]:
    """The provider prefixes `model_from_id` accepts."""
    _load_builtin()
    return sorted({*_factories, *_aliases})


def model_from_id(
    model_id: str, *, base_url: str | None = None, api_key: str | None = None, **options: Any
) -> ChatModel:
    """Build a chat model from ``"provider:model"``, e.g. ``"openai:gpt-4o-mini"``."""
    if not isinstance(model_id, str) or ":" not in model_id:
        raise UserError(
            f"model id must look like 'provider:model' (e.g. 'openai:gpt-4o-mini'), not {model_id!r}; "
            f"known providers: {', '.join(registered_providers())}"
        )
    prefix, _, name = model_id.partition(":")
    _load_builtin()
    prefix = _aliases.get(prefix, prefix)
    factory = _factories.get(prefix)
    if factory is None:
        raise UserError(
            f"unknown model provider {prefix!r} in {model_id!r}; known: {', '.join(registered_providers())}"
        )
    if not name:
        raise UserError(f"model id {model_id!r} names no model after the provider")
    return factory(name, base_url=base_url, api_key=api_key, **options)


def _scripted(name: str, *, base_url: str | None = None, api_key: str | None = None, **options: Any) -> ChatModel:
    from agentrt.model.scripted import ScriptedModel

    return ScriptedModel(name=name, **options)


_builtin_loaded = False


def _load_builtin() -> None:
    global _builtin_loaded
    if _builtin_loaded:
        return
    _builtin_loaded = True
    _factories.setdefault("scripted", _scripted)
