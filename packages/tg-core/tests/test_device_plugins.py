"""The plugin registry: `register_plugin` calls each plugin's pluggy hook `tinygrad_backends()` through the
PluginManager and records what it returned, or why the plugin cannot be used.

Every test uses a registry of its own with entry-point discovery off, so the installed backends stay out of it
(integration-tests/test_plugins.py covers discovery from installed packages)."""

from __future__ import annotations

import types

import pytest
from tinygrad.device import BackendInfo, _DeviceRegistry, hookimpl


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> _DeviceRegistry:
    monkeypatch.setenv("TINYGRAD_NO_PLUGIN_AUTOLOAD", "1")
    return _DeviceRegistry()


def _never_open(index: int) -> object:
    raise AssertionError("registering a plugin must not open its devices")


def _plugin(name: str, *devices: str) -> types.ModuleType:
    module = types.ModuleType(name)

    @hookimpl
    def tinygrad_backends() -> list[BackendInfo]:
        module.calls += 1  # type: ignore[attr-defined]
        return [BackendInfo(name=d, contract_version="2.0", open=_never_open) for d in devices]

    module.calls = 0  # type: ignore[attr-defined]
    module.tinygrad_backends = tinygrad_backends  # type: ignore[attr-defined]
    return module


def test_each_plugin_is_asked_once_and_its_backends_carry_its_package(registry: _DeviceRegistry) -> None:
    a, b = _plugin("plugin_a", "AAA", "AAB"), _plugin("plugin_b", "BBB")
    registry.register_plugin(a, package="tg-backend-a", version="1.2")
    registry.register_plugin(b, package="tg-backend-b", version="0.1")
    assert (a.calls, b.calls) == (1, 1)  # registering b did not call a's hook again
    found = {k: (v.package, v.version) for k, v in registry.backends.items()}
    assert found == {"AAA": ("tg-backend-a", "1.2"), "AAB": ("tg-backend-a", "1.2"), "BBB": ("tg-backend-b", "0.1")}
    # the hook is a real pluggy hook: the manager knows both implementations by their plugin names
    impls = registry._plugin_manager().hook.tinygrad_backends.get_hookimpls()
    assert sorted(i.plugin_name for i in impls) == ["plugin_a", "plugin_b"]


def test_registering_a_plugin_again_replaces_it(registry: _DeviceRegistry) -> None:
    registry.register_plugin(_plugin("plugin_a", "AAA"))
    again = _plugin("plugin_a", "AAA")
    registry.register_plugin(again, version="2.0")
    assert again.calls == 1 and registry.backends["AAA"].version == "2.0"
    assert len(registry._plugin_manager().hook.tinygrad_backends.get_hookimpls()) == 1


def test_a_plugin_without_the_hook_is_refused_by_name(registry: _DeviceRegistry) -> None:
    with pytest.raises(TypeError, match=r"plugin empty_plugin has no tinygrad_backends\(\) hook$"):
        registry.register_plugin(types.ModuleType("empty_plugin"))
    unmarked = types.ModuleType("unmarked_plugin")
    unmarked.tinygrad_backends = lambda: []  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match=r"unmarked_plugin has no .* needs the @tinygrad.device.hookimpl decorator"):
        registry.register_plugin(unmarked)
    assert registry._plugin_manager().get_plugins() == set() and registry.backends == {}


def test_a_hook_that_raises_or_returns_none_names_the_problem(registry: _DeviceRegistry) -> None:
    failing = types.ModuleType("failing_plugin")

    @hookimpl
    def tinygrad_backends() -> list[BackendInfo]:
        raise RuntimeError("the vendor driver reports version 0, need 3")

    failing.tinygrad_backends = tinygrad_backends  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError, match="the vendor driver reports version 0, need 3"):
        registry.register_plugin(failing)
    silent = types.ModuleType("silent_plugin")
    silent.tinygrad_backends = hookimpl(lambda: None)  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match=r"silent_plugin's tinygrad_backends\(\) returned None"):
        registry.register_plugin(silent)
    registry.register_plugin(_plugin("good_plugin", "GOOD"))  # the broken ones do not stop a good one
    assert list(registry.backends) == ["GOOD"]


def test_a_backend_for_another_contract_is_recorded_as_broken(registry: _DeviceRegistry) -> None:
    future = types.ModuleType("future_plugin")
    future.tinygrad_backends = hookimpl(  # type: ignore[attr-defined]
        lambda: [BackendInfo(name="FUTURE", contract_version="3.0", open=_never_open)])
    registry.register_plugin(future, package="tg-backend-future")
    assert registry.backends == {}
    (broken,) = registry.broken
    assert broken.entry_point == "future_plugin" and "implements device contract 3.0" in broken.reason
