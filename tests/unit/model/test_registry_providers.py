"""`model_from_id` for the built-in providers: prefixes, keys and base URLs from the environment,
resilience defaults, lazy imports and install hints."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types
from pathlib import Path
from typing import Any, ClassVar

import pytest

from agentrt.errors import UserError
from agentrt.model import ChatModel, GenerateOptions, RetryModel, ScriptedModel, model_from_id, register_provider
from agentrt.model import registry as registry_module
from agentrt.model.registry import registered_providers

SRC = str(Path(__file__).parents[3] / "src")


@pytest.fixture(autouse=True)
def _isolated_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    registered_providers()
    monkeypatch.setattr(registry_module, "_factories", dict(registry_module._factories))
    monkeypatch.setattr(registry_module, "_aliases", dict(registry_module._aliases))
    for name in ("OPENAI_BASE_URL", "OLLAMA_BASE_URL", "VLLM_BASE_URL", "LMSTUDIO_BASE_URL", "DEEPSEEK_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def bare(model: ChatModel) -> Any:
    """The adapter inside the default RetryModel."""
    assert isinstance(model, RetryModel)
    return model.model


def test_builtin_prefixes_are_registered() -> None:
    assert {
        "openai",
        "deepseek",
        "dashscope",
        "openrouter",
        "ollama",
        "vllm",
        "lmstudio",
        "anthropic",
        "gemini",
        "google",
        "scripted",
    } <= set(registered_providers())


@pytest.mark.parametrize(
    ("model_id", "env", "cls", "base_url"),
    [
        ("openai:gpt-4o-mini", "OPENAI_API_KEY", "OpenAIChatModel", "https://api.openai.com/v1"),
        ("deepseek:deepseek-chat", "DEEPSEEK_API_KEY", "DeepSeekChatModel", "https://api.deepseek.com/v1"),
        (
            "dashscope:qwen-plus",
            "DASHSCOPE_API_KEY",
            "DashScopeChatModel",
            "https://dashscope.aliyuncs.com/compatible-mode/v1",
        ),
        ("openrouter:openai/gpt-4o", "OPENROUTER_API_KEY", "OpenRouterChatModel", "https://openrouter.ai/api/v1"),
    ],
)
def test_cloud_providers_read_their_key(
    monkeypatch: pytest.MonkeyPatch, model_id: str, env: str, cls: str, base_url: str
) -> None:
    monkeypatch.setenv(env, "sk-from-env")
    model = bare(model_from_id(model_id))
    assert type(model).__name__ == cls
    assert model.api_key == "sk-from-env"
    assert model.base_url == base_url
    assert model.model_name == model_id.partition(":")[2]
    assert model.provider == model_id.partition(":")[0]


@pytest.mark.parametrize(
    ("model_id", "env"),
    [
        ("openai:gpt-4o", "OPENAI_API_KEY"),
        ("deepseek:deepseek-chat", "DEEPSEEK_API_KEY"),
        ("dashscope:qwen-max", "DASHSCOPE_API_KEY"),
        ("openrouter:x/y", "OPENROUTER_API_KEY"),
    ],
)
def test_missing_key_names_the_variable_and_scripted_model(model_id: str, env: str) -> None:
    with pytest.raises(UserError) as info:
        model_from_id(model_id)
    assert env in str(info.value)
    assert "ScriptedModel" in str(info.value)


def test_explicit_key_and_base_url_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env-host/v1")
    model = bare(model_from_id("openai:gpt-4o", base_url="http://127.0.0.1:9/v1", api_key="arg-key"))
    assert (model.base_url, model.api_key) == ("http://127.0.0.1:9/v1", "arg-key")
    model = bare(model_from_id("openai:gpt-4o"))
    assert (model.base_url, model.api_key) == ("http://env-host/v1", "env-key")


def test_a_custom_base_url_needs_no_key() -> None:
    # A self-hosted OpenAI-compatible server: no key, no Authorization header.
    model = bare(model_from_id("openai:local-model", base_url="http://127.0.0.1:9/v1"))
    assert model.api_key is None
    assert "Authorization" not in model._headers


def test_ollama_defaults_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    model = bare(model_from_id("ollama:llama3.1:8b"))
    assert type(model).__name__ == "OllamaChatModel"
    assert model.model_name == "llama3.1:8b"
    assert model.base_url == "http://localhost:11434/v1"
    assert model.api_key is None
    monkeypatch.setenv("OLLAMA_BASE_URL", "http://gpu-box:11434")  # the server root, as Ollama writes it
    assert bare(model_from_id("ollama:qwen3")).base_url == "http://gpu-box:11434/v1"
    monkeypatch.setenv("OLLAMA_BASE_URL", "http://gpu-box:11434/v1")
    assert bare(model_from_id("ollama:qwen3")).base_url == "http://gpu-box:11434/v1"


def test_vllm_and_lmstudio(monkeypatch: pytest.MonkeyPatch) -> None:
    assert bare(model_from_id("vllm:meta-llama/Llama-3.1-8B-Instruct")).base_url == "http://localhost:8000/v1"
    monkeypatch.setenv("VLLM_BASE_URL", "http://vllm:8000/v1")
    monkeypatch.setenv("VLLM_API_KEY", "token")
    model = bare(model_from_id("vllm:m"))
    assert (model.base_url, model.api_key) == ("http://vllm:8000/v1", "token")
    assert bare(model_from_id("lmstudio:qwen")).base_url == "http://localhost:1234/v1"


def test_resilience_defaults_and_overrides() -> None:
    model = model_from_id("openai:gpt-4o", api_key="k")
    assert isinstance(model, RetryModel)
    assert (model.max_retries, model.timeout, model.idle_timeout) == (2, 60.0, 30.0)
    model = model_from_id("openai:gpt-4o", api_key="k", max_retries=5, timeout=10, idle_timeout=3)
    assert isinstance(model, RetryModel)
    assert (model.max_retries, model.timeout, model.idle_timeout) == (5, 10, 3)
    plain = model_from_id("openai:gpt-4o", api_key="k", max_retries=0, timeout=None, idle_timeout=None)
    assert type(plain).__name__ == "OpenAIChatModel"
    assert plain.id == model.id == "openai:gpt-4o"


def test_options_reach_the_adapter() -> None:
    model = bare(model_from_id("openai:gpt-4o", api_key="k", temperature=0.1, stream=False, send_names=False))
    assert model.options.temperature == 0.1
    assert model.stream_by_default is False
    assert model.format.send_names is False
    with pytest.raises(UserError, match="unknown option"):
        model_from_id("openai:gpt-4o", api_key="k", temprature=0.1)


def test_invalid_base_url() -> None:
    with pytest.raises(UserError, match="http"):
        model_from_id("openai:gpt-4o", base_url="ftp://example.com", api_key="k")


def test_user_registered_prefixes_still_work() -> None:
    register_provider("acme", lambda name, **kw: ScriptedModel(["hi"], name=name))
    assert model_from_id("acme:rocket").model_name == "rocket"
    # and can replace a built-in one
    register_provider("openai", lambda name, **kw: ScriptedModel(["hi"], name=name))
    assert isinstance(model_from_id("openai:gpt-4o"), ScriptedModel)


# --------------------------------------------------------------------------------------------------
# anthropic and gemini: lazy modules written elsewhere
# --------------------------------------------------------------------------------------------------
class _Recorder(ChatModel):
    provider: ClassVar[str] = "recorded"
    calls: ClassVar[list[tuple[str, dict[str, Any]]]] = []

    def __init__(self, model_name: str, **kwargs: Any) -> None:
        self.model_name = model_name
        _Recorder.calls.append((model_name, kwargs))

    async def stream(self, messages: Any, tools: Any = (), options: Any = None) -> Any:  # pragma: no cover
        raise NotImplementedError
        yield


def _fake_module(monkeypatch: pytest.MonkeyPatch, module: str, cls_name: str) -> None:
    fake = types.ModuleType(module)
    setattr(fake, cls_name, _Recorder)
    monkeypatch.setitem(sys.modules, module, fake)
    _Recorder.calls.clear()


def test_anthropic_factory(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_module(monkeypatch, "agentrt.model.providers.anthropic", "AnthropicChatModel")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "ak")
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    model = model_from_id("anthropic:claude-sonnet-4-5", temperature=0.2)
    assert isinstance(model, RetryModel)
    assert _Recorder.calls == [("claude-sonnet-4-5", {"api_key": "ak", "base_url": None, "temperature": 0.2})]
    model_from_id("anthropic:claude-haiku", api_key="explicit", base_url="http://127.0.0.1:9", max_retries=0)
    assert _Recorder.calls[-1] == ("claude-haiku", {"api_key": "explicit", "base_url": "http://127.0.0.1:9"})


def test_generation_options_fold_into_options_for_sdk_adapters(monkeypatch: pytest.MonkeyPatch) -> None:
    class WithOptions(_Recorder):
        def __init__(
            self, model_name: str, *, max_tokens: int = 4096, options: GenerateOptions | None = None, **kw: Any
        ) -> None:
            super().__init__(model_name, max_tokens=max_tokens, options=options, **kw)

    fake = types.ModuleType("agentrt.model.providers.anthropic")
    fake.AnthropicChatModel = WithOptions  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "agentrt.model.providers.anthropic", fake)
    _Recorder.calls.clear()
    model_from_id("anthropic:claude", api_key="k", temperature=0.2, max_tokens=100, timeout=5, extra_header="x")
    ((_name, kwargs),) = _Recorder.calls
    assert kwargs["options"] == GenerateOptions(temperature=0.2)
    assert kwargs["max_tokens"] == 100  # the adapter's own keyword
    assert kwargs["extra_header"] == "x"
    assert "timeout" not in kwargs  # a RetryModel setting


def test_anthropic_missing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_module(monkeypatch, "agentrt.model.providers.anthropic", "AnthropicChatModel")
    with pytest.raises(UserError, match=r"ANTHROPIC_API_KEY.*ScriptedModel"):
        model_from_id("anthropic:claude")


def test_gemini_and_google_alias(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_module(monkeypatch, "agentrt.model.providers.gemini", "GeminiChatModel")
    monkeypatch.setenv("GOOGLE_API_KEY", "gk")
    model_from_id("google:gemini-2.5-flash")
    assert _Recorder.calls[-1][1]["api_key"] == "gk"
    monkeypatch.setenv("GEMINI_API_KEY", "gem")  # preferred over GOOGLE_API_KEY
    model_from_id("gemini:gemini-2.5-pro")
    assert _Recorder.calls[-1] == ("gemini-2.5-pro", {"api_key": "gem", "base_url": None})
    monkeypatch.delenv("GEMINI_API_KEY")
    monkeypatch.delenv("GOOGLE_API_KEY")
    with pytest.raises(UserError, match="GEMINI_API_KEY or GOOGLE_API_KEY"):
        model_from_id("gemini:x")


@pytest.mark.parametrize(
    ("model_id", "module", "extra"),
    [
        ("anthropic:claude", "agentrt.model.providers.anthropic", "anthropic"),
        ("gemini:flash", "agentrt.model.providers.gemini", "gemini"),
    ],
)
def test_missing_provider_module_gives_an_install_hint(
    monkeypatch: pytest.MonkeyPatch, model_id: str, module: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    with pytest.raises(UserError, match=rf"pip install 'agentrt\[{extra}\]'"):
        model_from_id(model_id, api_key="k")


def test_missing_sdk_inside_the_provider_module(monkeypatch: pytest.MonkeyPatch) -> None:
    # The provider module exists but its SDK does not: same hint.
    monkeypatch.setitem(sys.modules, "anthropic", None)
    monkeypatch.delitem(sys.modules, "agentrt.model.providers.anthropic", raising=False)
    monkeypatch.setattr(
        importlib,  # the module whose import_module agentrt.model.registry calls
        "import_module",
        lambda name: __import__("anthropic") if name.endswith(".anthropic") else None,
    )
    with pytest.raises(UserError, match=r"pip install 'agentrt\[anthropic\]'"):
        model_from_id("anthropic:claude", api_key="k")


def test_import_errors_of_other_modules_are_not_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(name: str) -> Any:
        raise ModuleNotFoundError("No module named 'some_bug'", name="some_bug")

    monkeypatch.setattr(importlib, "import_module", broken)  # as agentrt.model.registry calls it
    with pytest.raises(ModuleNotFoundError, match="some_bug"):
        model_from_id("anthropic:claude", api_key="k")


def test_model_from_id_does_not_import_aiohttp_until_used() -> None:
    code = (
        "import sys, agentrt, agentrt.model; from agentrt.model import model_from_id, FallbackModel, RetryModel; "
        "before = 'aiohttp' in sys.modules; "
        "m = model_from_id('openai:gpt-4o', api_key='k'); "
        "print(before, 'aiohttp' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONPATH": SRC}
    )
    assert out.stdout.split() == ["False", "True"]
