"""`model_from_id("provider:model")`: the one place that maps a provider name to an adapter.

Adapters are imported lazily, so `import agentrt` never loads a provider SDK (nor aiohttp).

Built-in prefixes: ``openai``, ``deepseek``, ``dashscope``, ``openrouter``, ``ollama``, ``vllm``,
``lmstudio`` (all OpenAI-compatible, `agentrt.model.providers.openai`), ``anthropic``, ``gemini``
(alias ``google``) and ``scripted``. Network models come wrapped in a `RetryModel` (see
`agentrt.model.resilience`); ``max_retries=``, ``timeout=`` and ``idle_timeout=`` tune it, and
``max_retries=0, timeout=None, idle_timeout=None`` returns the bare adapter.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
from collections.abc import Callable
from typing import Any

from agentrt.errors import UserError
from agentrt.model.base import ChatModel

__all__ = [
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_TIMEOUT",
    "ModelFactory",
    "model_from_id",
    "register_provider",
    "registered_providers",
]

ModelFactory = Callable[..., ChatModel]
"""``factory(model_name, *, base_url=None, api_key=None, **options) -> ChatModel``."""

DEFAULT_MAX_RETRIES = 2
DEFAULT_TIMEOUT = 60.0
"""Seconds to the first chunk (connect, send, time to first token)."""
DEFAULT_IDLE_TIMEOUT = 30.0
"""Seconds allowed between two stream chunks."""

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
    """Build a chat model from ``"provider:model"``, e.g. ``"openai:gpt-4o-mini"``.

    `api_key` defaults to the provider's environment variable and `base_url` to the provider's
    endpoint (or its ``*_BASE_URL`` variable). Other keywords go to the adapter (generation
    options such as ``temperature=`` included), except ``max_retries``, ``timeout``,
    ``idle_timeout`` and ``whole_timeout``, which configure the `RetryModel` around network models,
    and ``price`` (a `agentrt.model.pricing.ModelPrice`), the model's own price for cost accounting.
    """
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
    price = options.pop("price", None)
    model = factory(name, base_url=base_url, api_key=api_key, **options)
    if price is not None:
        from agentrt.model.pricing import ModelPrice

        if not isinstance(price, ModelPrice):
            raise UserError(f"price must be an agentrt.model.pricing.ModelPrice, not {type(price).__name__!r}")
        model.price = price
    return model


# --------------------------------------------------------------------------------------------------
# built-in providers
# --------------------------------------------------------------------------------------------------
def _scripted(name: str, *, base_url: str | None = None, api_key: str | None = None, **options: Any) -> ChatModel:
    from agentrt.model.scripted import ScriptedModel

    return ScriptedModel(name=name, **options)


def _import_class(module: str, cls_name: str, *, extra: str, packages: tuple[str, ...]) -> Callable[..., ChatModel]:
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        missing = exc.name or ""
        if missing == module or missing.split(".")[0] in packages:
            raise UserError(
                f"the {extra} provider needs the optional dependencies of agentrt[{extra}] "
                f"({missing or module} is not importable): pip install 'agentrt[{extra}]'"
            ) from exc
        raise
    cls = getattr(mod, cls_name, None)
    if not (isinstance(cls, type) and issubclass(cls, ChatModel)):
        raise UserError(f"{module} does not define the chat model class {cls_name}")
    return cls


def _resilient(model: ChatModel, settings: dict[str, Any]) -> ChatModel:
    max_retries = settings.get("max_retries", DEFAULT_MAX_RETRIES)
    timeout = settings.get("timeout", DEFAULT_TIMEOUT)
    idle_timeout = settings.get("idle_timeout", DEFAULT_IDLE_TIMEOUT)
    whole = {"whole_timeout": settings["whole_timeout"]} if "whole_timeout" in settings else {}
    if not max_retries and timeout is None and idle_timeout is None and whole.get("whole_timeout") is None:
        return model
    from agentrt.model.resilience import RetryModel

    return RetryModel(model, max_retries=max_retries or 0, timeout=timeout, idle_timeout=idle_timeout, **whole)


def _pop_resilience(options: dict[str, Any]) -> dict[str, Any]:
    keys = ("max_retries", "timeout", "idle_timeout", "whole_timeout")
    return {key: options.pop(key) for key in keys if key in options}


def _openai_compatible(cls_name: str) -> ModelFactory:
    def factory(name: str, *, base_url: str | None = None, api_key: str | None = None, **options: Any) -> ChatModel:
        settings = _pop_resilience(options)
        cls = _import_class("agentrt.model.providers.openai", cls_name, extra="openai", packages=("aiohttp", "yarl"))
        return _resilient(cls(name, api_key=api_key, base_url=base_url, **options), settings)

    factory.__name__ = factory.__qualname__ = f"openai_compatible_{cls_name}"
    return factory


def _fold_generate_options(cls: Callable[..., ChatModel], options: dict[str, Any]) -> dict[str, Any]:
    """Move `GenerateOptions` fields the class does not take by name into its ``options=`` argument.

    So ``model_from_id("anthropic:claude-x", temperature=0.2)`` means the same as for OpenAI models,
    while keywords the adapter declares itself (e.g. its own ``max_tokens``) reach it unchanged.
    """
    from agentrt.model.base import GenerateOptions

    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        return options
    if "options" not in params:
        return options
    named = {n for n, p in params.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    option_fields = {f.name for f in dataclasses.fields(GenerateOptions)}
    moved = {k: options.pop(k) for k in list(options) if k in option_fields and k not in named}
    if moved:
        base = options.get("options") or GenerateOptions()
        options["options"] = base.merge(GenerateOptions(**moved))
    return options


def _env_key(provider: str, variables: tuple[str, ...]) -> str:
    for variable in variables:
        value = os.environ.get(variable)
        if value:
            return value
    raise UserError(
        f"no API key for {provider!r} models: set {' or '.join(variables)} or pass api_key=...; "
        "for offline tests use agentrt.model.ScriptedModel"
    )


def _sdk_provider(
    provider: str, module: str, cls_name: str, key_vars: tuple[str, ...], url_var: str, packages: tuple[str, ...]
) -> ModelFactory:
    def factory(name: str, *, base_url: str | None = None, api_key: str | None = None, **options: Any) -> ChatModel:
        settings = _pop_resilience(options)
        cls = _import_class(module, cls_name, extra=provider, packages=packages)
        key = api_key or _env_key(provider, key_vars)
        url = base_url or os.environ.get(url_var) or None
        options = _fold_generate_options(cls, options)
        return _resilient(cls(name, api_key=key, base_url=url, **options), settings)

    factory.__name__ = factory.__qualname__ = f"{provider}_factory"
    return factory


_OPENAI_COMPATIBLE = {
    "openai": "OpenAIChatModel",
    "deepseek": "DeepSeekChatModel",
    "dashscope": "DashScopeChatModel",
    "openrouter": "OpenRouterChatModel",
    "ollama": "OllamaChatModel",
    "vllm": "VLLMChatModel",
    "lmstudio": "LMStudioChatModel",
}

_builtin_loaded = False


def _load_builtin() -> None:
    global _builtin_loaded
    if _builtin_loaded:
        return
    _builtin_loaded = True
    _factories.setdefault("scripted", _scripted)
    for prefix, cls_name in _OPENAI_COMPATIBLE.items():
        _factories.setdefault(prefix, _openai_compatible(cls_name))
    _factories.setdefault(
        "anthropic",
        _sdk_provider(
            "anthropic",
            "agentrt.model.providers.anthropic",
            "AnthropicChatModel",
            ("ANTHROPIC_API_KEY",),
            "ANTHROPIC_BASE_URL",
            ("anthropic", "aiohttp", "httpx"),
        ),
    )
    _factories.setdefault(
        "gemini",
        _sdk_provider(
            "gemini",
            "agentrt.model.providers.gemini",
            "GeminiChatModel",
            ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
            "GEMINI_BASE_URL",
            ("google", "aiohttp", "httpx"),
        ),
    )
    _aliases.setdefault("google", "gemini")
