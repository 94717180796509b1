"""Tests for `agentrt.model.registry`: model ids, providers and aliases."""

from typing import Any

import pytest

from agentrt.errors import UserError
from agentrt.message import Msg
from agentrt.model import ChatModel, ScriptedModel, model_from_id, register_provider
from agentrt.model import registry as registry_module
from agentrt.model.registry import registered_providers


@pytest.fixture(autouse=True)
def _isolated_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Providers registered by a test do not leak into other tests."""
    registered_providers()  # load the built-in providers into the real tables before copying them
    monkeypatch.setattr(registry_module, "_factories", dict(registry_module._factories))
    monkeypatch.setattr(registry_module, "_aliases", dict(registry_module._aliases))


class RecordingFactory:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, name: str, **kwargs: Any) -> ChatModel:
        self.calls.append((name, kwargs))
        return ScriptedModel([f"from {name}"], name=name)


async def test_scripted_id() -> None:
    model = model_from_id("scripted:x")
    assert isinstance(model, ScriptedModel)
    assert model.model_name == "x"
    assert model.id == "scripted:x"
    assert model.requests == []


def test_scripted_id_passes_options() -> None:
    model = model_from_id("scripted:y", latency=0.25, repeat=True)
    assert isinstance(model, ScriptedModel)
    assert model.latency == 0.25
    assert model.repeat is True


def test_model_name_may_contain_colons() -> None:
    model = model_from_id("scripted:llama3:8b")
    assert model.model_name == "llama3:8b"


def test_scripted_is_registered() -> None:
    assert "scripted" in registered_providers()


@pytest.mark.parametrize("bad", ["gpt-4o", "", "scripted"])
def test_id_without_colon(bad: str) -> None:
    with pytest.raises(UserError, match="provider:model") as info:
        model_from_id(bad)
    assert repr(bad) in str(info.value)
    assert "scripted" in str(info.value)  # lists the known providers


@pytest.mark.parametrize("bad", [None, 42])
def test_non_string_id(bad: Any) -> None:
    with pytest.raises(UserError, match="provider:model"):
        model_from_id(bad)


def test_unknown_provider() -> None:
    with pytest.raises(UserError, match="unknown model provider 'nosuch'") as info:
        model_from_id("nosuch:model-1")
    message = str(info.value)
    assert "'nosuch:model-1'" in message
    assert "scripted" in message


def test_empty_provider() -> None:
    with pytest.raises(UserError, match="unknown model provider ''"):
        model_from_id(":model")


def test_empty_model_name() -> None:
    with pytest.raises(UserError, match="names no model") as info:
        model_from_id("scripted:")
    assert "'scripted:'" in str(info.value)


async def test_register_provider_custom_prefix() -> None:
    factory = RecordingFactory()
    register_provider("acme", factory)
    model = model_from_id("acme:rocket-1", base_url="http://localhost:9", api_key="k", temperature=0.5)
    assert isinstance(model, ScriptedModel)
    assert model.model_name == "rocket-1"
    assert factory.calls == [("rocket-1", {"base_url": "http://localhost:9", "api_key": "k", "temperature": 0.5})]
    assert "acme" in registered_providers()
    assert (await model.generate([Msg.user("hi")])).text == "from rocket-1"


def test_register_provider_defaults_base_url_and_key_to_none() -> None:
    factory = RecordingFactory()
    register_provider("acme", factory)
    model_from_id("acme:m")
    assert factory.calls == [("m", {"base_url": None, "api_key": None})]


def test_aliases() -> None:
    factory = RecordingFactory()
    register_provider("acme", factory, aliases=("ac", "acme-cloud"))
    assert model_from_id("ac:one").model_name == "one"
    assert model_from_id("acme-cloud:two").model_name == "two"
    assert model_from_id("acme:three").model_name == "three"
    assert [name for name, _ in factory.calls] == ["one", "two", "three"]
    providers = registered_providers()
    assert {"acme", "ac", "acme-cloud"} <= set(providers)
    assert providers == sorted(providers)


def test_re_registering_replaces_the_factory() -> None:
    first, second = RecordingFactory(), RecordingFactory()
    register_provider("acme", first)
    register_provider("acme", second)
    model_from_id("acme:m")
    assert first.calls == []
    assert [name for name, _ in second.calls] == ["m"]


def test_register_can_override_scripted() -> None:
    factory = RecordingFactory()
    register_provider("scripted", factory)
    model_from_id("scripted:z")
    assert [name for name, _ in factory.calls] == ["z"]


@pytest.mark.parametrize("bad", ["", "a:b", ":"])
def test_register_bad_prefix(bad: str) -> None:
    with pytest.raises(UserError, match="provider prefix"):
        register_provider(bad, RecordingFactory())
